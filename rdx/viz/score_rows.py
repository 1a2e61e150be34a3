"""Score rows for the score figures: the summaries of
:func:`rdx.evaluation.summary.summarize_comparison` flattened into one row per comparison ×
method × direction × dissimilarity, and the small number helpers the figures share."""
from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Mapping

import numpy as np

from ..errors import RDXInputError
from .style import method_order


def is_finite(v: Any) -> bool:
    """Whether ``v`` is a finite number (None and non-numbers are not)."""
    return v is not None and isinstance(v, (int, float, np.floating, np.integer)) \
        and math.isfinite(float(v))


def format_number(v: float, spec: str) -> str:
    """``v`` formatted with ``spec``, or '–' when it is not a finite number."""
    return format(v, spec) if is_finite(v) else "–"


def finite_mean(values: Iterable[Any]) -> float:
    """The mean of the finite values (NaN when there is none)."""
    v = [float(x) for x in values if is_finite(x)]
    return float(np.mean(v)) if v else float("nan")


def summary_rows(summaries: Any) -> list[dict]:
    """Flatten summaries into score rows (each with ``experiment`` and ``comparison``).

    Accepts one :func:`~rdx.evaluation.summary.summarize_comparison` dict, a list of them
    (:func:`~rdx.evaluation.summary.summarize_experiment`), or already flat rows.
    """
    if isinstance(summaries, Mapping):
        summaries = [summaries]
    rows: list[dict] = []
    for s in summaries or []:
        if isinstance(s, Mapping) and "rows" in s:
            for r in s["rows"]:
                rows.append({"experiment": s.get("experiment"),
                             "comparison": s.get("comparison"), **r})
        elif isinstance(s, Mapping) and "method" in s:
            rows.append(dict(s))
        else:
            raise RDXInputError("expected summaries from rdx.evaluation.summary."
                                "summarize_comparison/summarize_experiment (dicts with 'rows').")
    return rows


def known_difference_rows(summaries: Any) -> list[dict]:
    """One row per comparison × method × direction with a known-difference score (the
    score does not depend on the dissimilarity: the ``rank`` row is kept when present)."""
    out: OrderedDict[tuple, dict] = OrderedDict()
    for r in summary_rows(summaries):
        if r.get("known_difference_expected") is None and \
                r.get("known_difference_score") is None and \
                r.get("known_difference_rate") is None:
            continue
        key = (r.get("experiment"), r.get("comparison"), r["method"], r["direction"])
        if key not in out or r.get("dissimilarity") == "rank":
            out[key] = r
    return list(out.values())


def row_methods(rows: Iterable[dict]) -> OrderedDict[str, str | None]:
    """``{method: method type}`` of the rows, in the figures' method order."""
    seen: OrderedDict[str, str | None] = OrderedDict()
    for r in rows:
        seen.setdefault(r["method"], r.get("method_type"))
    return OrderedDict((m, seen[m]) for m in method_order(list(seen), seen))


__all__ = ["finite_mean", "format_number", "is_finite", "known_difference_rows",
           "row_methods", "summary_rows"]
