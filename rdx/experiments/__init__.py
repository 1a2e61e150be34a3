"""The experiment runner: YAML configs → selected images → features → methods → results.

The names below load on first use (PEP 562): the runner pulls in torch and the data
loaders, which a command that only lists the methods (``rdx explain --help``) must not pay
for.
"""
from __future__ import annotations

from ..lazy import lazy_exports

__getattr__ = lazy_exports(__name__, {"Comparison": ".config", "load_experiment": ".config",
                                      "run_comparison": ".run", "run_experiment": ".run"})


__all__ = ["Comparison", "load_experiment", "run_comparison", "run_experiment"]
