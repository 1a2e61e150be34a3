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


def _record_path(path: Path) -> Path:
    """The JSON record next to a cache file: its name and SHA-256 (:mod:`rdx.io`)."""
    return path.with_name(path.name + ".json")


def read_cached(path: Path, what: str, redo: str) -> dict[str, Any] | None:
    """The cached example's arrays and ``info``, or None when there is none or it cannot be
    reused (then the caller builds it again: a damaged file says so on stderr, naming ``what``
    the example is and ``redo``, what happens instead).

    Reused only when its bytes have the SHA-256 its record (``<file>.json``, sealed with
    its own digest) holds, and the record names this file — the name carries the digest of
    the recipe, so another recipe's file copied here with its record is not served. A
    cache written before records existed is unverified, and built again.
    """
    import io

    from .io import bytes_sha256, read_record, stored_problem

    if not path.is_file():
        return None
    try:
        data = path.read_bytes()
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            out: dict[str, Any] = {k: z[k] for k in _ARRAYS}
            out["info"] = json.loads(str(z["info"]))
    except Exception as exc:  # noqa: BLE001 - any unreadable cache is rebuilt
        print(f"rdx: the cached {what} {path} cannot be read ({exc}); {redo}.",
              file=sys.stderr)
        return None
    record, problem = read_record(_record_path(path), f"the record of the cached {what}")
    if record is not None and record.get("name") != path.name:
        problem = (f"its record {_record_path(path).name} describes {record.get('name')!r}, "
                   "another recipe's cache")
    elif problem is None:
        problem = stored_problem(path, (record or {}).get("sha256"), f"the cached {what}",
                                 found=bytes_sha256(data))
    if problem is not None:
        print(f"rdx: the cached {what} {path} is not reused ({problem}); {redo}.",
              file=sys.stderr)
        return None
    return out


def write_cached(path: Path, arrays: dict[str, Any], what: str, otherwise: str) -> None:
    """Write atomically (temporary file + rename: a concurrent run never reads half a
    file), then its record (name, SHA-256 and size of the file's bytes); a cache that cannot
    be written costs the next run the work again (``otherwise`` says which), nothing more.

    The file is serialised in memory and the record made from those bytes: two runs
    writing the same cache at once may leave one's file with the other's record, which
    the next read takes for damage and rebuilds — never for a valid cache.
    """
    import io

    from .io import atomic_write, bytes_sha256, optional_writes, write_record

    buf = io.BytesIO()
    np.savez(buf, **{k: arrays[k] for k in _ARRAYS}, info=np.array(json.dumps(arrays["info"])))
    data = buf.getvalue()
    try:
        _record_path(path).unlink(missing_ok=True)   # no record vouches for the old file
        with optional_writes():   # a cache: the command goes on without it
            atomic_write(path, lambda fh: fh.write(data))
            write_record(_record_path(path), {"name": path.name,
                                              "sha256": bytes_sha256(data), "bytes": len(data)})
    except OSError as exc:
        print(f"rdx: could not cache the {what} in {path} ({exc}); the next run "
              f"{otherwise} (set RDX_CACHE to a writable folder).", file=sys.stderr)


__all__ = ["Example", "cache_dir", "installed_version", "read_cached", "write_cached"]
