"""What the embedded examples share: the :class:`Example` they return and where they are
cached (:func:`cache_dir`), and the installed versions that key their caches. Its own module
so that each example (``rdx.examples``: digits; ``rdx.examples_efficientnet``) builds on it
without importing the other."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np


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


__all__ = ["Example", "cache_dir", "installed_version"]
