"""A package's version read from its source, without importing it (stdlib only).

Importing torch to ask its version costs ~0.8 s, importlib.metadata ~30 ms, and the
metadata of a torch build drops its local part ("+cu130"); the package's own
``version.py`` has the full string and costs a file read.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

_PATTERN = re.compile(r"^(?:__version__|version)\s*(?::\s*str)?\s*=\s*['\"]([^'\"]+)['\"]",
                      re.M)


def source_version(package: str) -> str | None:
    """The version string assigned in ``<package>/version.py`` (``__version__ = "..."`` or
    ``version = "..."``), or None when the package or the assignment is not found."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = (Path(folder) / "version.py").read_text()
        except OSError:
            continue
        found = _PATTERN.search(text)
        if found:
            return found.group(1)
    return None


__all__ = ["source_version"]
