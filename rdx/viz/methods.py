"""Which methods of a comparison a figure shows, and in which order."""
from __future__ import annotations

from collections.abc import Sequence

from ..errors import RDXInputError
from ..results.comparison_view import ComparisonView
from ..results.types import DIRECTIONS
from .style import method_order


def grid_methods(view: ComparisonView, direction: str | None = None,
                 methods: Sequence[str] | None = None) -> list[str]:
    """Methods that have grids (in ``direction`` if given).

    Parameters
    ----------
    view : ComparisonView
        The comparison (:func:`rdx.results.comparison_view.read_comparison_view`).
    direction : str, optional
        ``a_over_b`` or ``b_over_a``; any direction when None.
    methods : sequence of str, optional
        The methods to consider, in this order; by default every method of the run, in the
        figures' order (RDX first, then the baselines' families).

    Raises
    ------
    RDXInputError
        When ``methods`` names a method the run does not have.
    """
    docs = view.methods
    if methods is not None:
        missing = [m for m in methods if m not in docs]
        if missing:
            raise RDXInputError(f"method(s) {missing} not in this run; it has {sorted(docs)}.")
        names = list(methods)
    else:
        order = [m.get("name", m.get("method")) for m in
                 (view.run.get("config") or {}).get("methods") or []]
        names = [m for m in order if m in docs] + sorted(set(docs) - set(order))
        names = method_order(names, {m: docs[m].get("method") for m in names})
    out = []
    for name in names:
        dirs = docs[name].get("directions") or {}
        wanted = [direction] if direction else list(DIRECTIONS)
        if any((dirs.get(d) or {}).get("explanations") for d in wanted):
            out.append(name)
    return out


__all__ = ["grid_methods"]
