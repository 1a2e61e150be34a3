"""What the embedded examples share: the :class:`Example` they return, where and how they
are cached (:func:`cache_dir`, :func:`read_cached`, :func:`write_cached`), and the installed
versions that key their caches. Its own module
so that each example (``rdx.examples``: digits; ``rdx.examples_efficientnet``) builds on it
without importing the other."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The arrays an example's cache file holds (besides its ``info``, stored as JSON).
_ARRAYS = ("A", "B", "labels", "images")


@dataclass
class Example:
    """An embedded example: both representations, labels, images, a one-line
    ``description`` and ``info`` (checkpoints, accuracies, seeds)."""

    A: np.ndarray
    B: np.ndarray
    labels: np.ndarray
    images: np.ndarray
    description: str
    info: dict


def cache_dir() -> Path:
    """Where rdx caches what it can recompute: ``RDX_CACHE``, else ``$XDG_CACHE_HOME/rdx``,
    else ``~/.cache/rdx``."""
    own = os.environ.get("RDX_CACHE")
    if own:
        return Path(own).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rdx"


def installed_version(dist: str) -> str | None:
    """The installed version of a distribution (None when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def read_cached(path: Path, what: str, redo: str) -> dict[str, Any] | None:
    """The cached example's arrays and ``info``, or None when there is none or it cannot be
    read (then the caller builds it again: a damaged file says so on stderr, naming ``what``
    the example is and ``redo``, what happens instead)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            out: dict[str, Any] = {k: z[k] for k in _ARRAYS}
            out["info"] = json.loads(str(z["info"]))
        return out
    except Exception as exc:  # noqa: BLE001 - any unreadable cache is rebuilt
        print(f"rdx: the cached {what} {path} cannot be read ({exc}); {redo}.",
              file=sys.stderr)
        return None


def write_cached(path: Path, arrays: dict[str, Any], what: str, otherwise: str) -> None:
    """Write atomically (temporary file + rename: a concurrent run never reads half a
    file); a cache that cannot be written costs the next run the work again (``otherwise``
    says which), nothing more."""
    from .io import save_npz_atomic

    try:
        save_npz_atomic(path, **{k: arrays[k] for k in _ARRAYS},
                        info=np.array(json.dumps(arrays["info"])))
    except OSError as exc:
        print(f"rdx: could not cache the {what} in {path} ({exc}); the next run "
              f"{otherwise} (set RDX_CACHE to a writable folder).", file=sys.stderr)


__all__ = ["Example", "cache_dir", "installed_version", "read_cached", "write_cached"]
