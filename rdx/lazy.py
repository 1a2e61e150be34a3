"""Names a package exports but loads on first use (PEP 562).

Commands that only build their options (``rdx explain --help``, usage errors) must not pay
for torch or scikit-learn (about a second each): packages whose modules need them export
their public names through :func:`lazy_exports` instead of importing them in ``__init__``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``table[name]`` (a submodule,
    relative like ``".build"``) when ``name`` is first looked up and returns its attribute.

    A name must not equal one of the package's submodules: importing that submodule would
    bind the module, not the function, to the package attribute."""
    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(import_module(table[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__
