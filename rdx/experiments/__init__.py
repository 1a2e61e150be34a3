"""The experiment runner: YAML configs → selected images → features → methods → results.

The names below load on first use (PEP 562): the runner pulls in torch and the data
loaders, which a command that only lists the methods (``rdx explain --help``) must not pay
for.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {"Comparison": ".config", "load_experiment": ".config",
         "run_comparison": ".run", "run_experiment": ".run"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Comparison", "load_experiment", "run_comparison", "run_experiment"]
