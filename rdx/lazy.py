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


class AfterImport:
    """Import hook (an entry of ``sys.meta_path``) that calls ``callback(module)`` right
    after the module ``name`` is first imported: work that must follow the import (seeding
    torch, giving it a thread count) without importing it before it is needed.

    The module is found by the finders after this hook in ``sys.meta_path``, and only its
    loader is wrapped: hooks for the same module compose (each runs its callback after the
    ones installed later), and an installation's own finders (editable installs) keep
    working.
    """

    def __init__(self, name: str, callback: Callable[[Any], None]):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        import importlib.machinery
        import sys

        try:
            rest = sys.meta_path[sys.meta_path.index(self) + 1:]
        except ValueError:   # called directly, not through the import system
            rest = [importlib.machinery.PathFinder]
        spec = None
        for finder in rest:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None or spec.loader is None:
            return None
        spec.loader = _LoaderThen(spec.loader, self.callback)
        return spec


class _LoaderThen:
    """The module's own loader (everything delegated to it), then the callback."""

    def __init__(self, loader: Any, callback: Callable[[Any], None]):
        self._loader = loader
        self._callback = callback

    def __getattr__(self, name: str) -> Any:
        if name in ("_loader", "_callback"):   # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self._loader, name)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        self._callback(module)
