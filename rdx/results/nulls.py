"""One name for each null of the significance tests, on every surface.

The console, ``explanations.json``, the report, the explorer and the docs name a null the
same way, from :data:`NULL_NAMES`: the *twin null* (seed twins the user passed, exact null
draws), the *field null* (the default without a twin: noisy copies moved by a smooth random
field) and the *local null* (per-image noise, not the default). Results written before this
naming recorded the field and local nulls as ``"perturbation"``; :func:`null_id` reads both.
What each null is calibrated on is decided in :mod:`rdx.evaluation.null_calibration`; this
module only words it.
"""
from __future__ import annotations

from typing import Any

#: One name per null, on every surface.
NULL_NAMES = {"twin": "twin null", "field": "field null", "local": "local null"}

#: What each null is, in a phrase (console, report and explorer titles).
NULL_MEANINGS = {
    "twin": "your seed twins as exact null draws (the gold standard)",
    "field": "noisy copies of A and of B moved by a smooth random field, a model of seed "
             "noise",
    "local": "noisy copies of A and of B with independent per-image noise (too weak for "
             "seed noise: not the default)",
}


def null_id(null: str | None, noise: str | None = None) -> str:
    """The null's id (a key of :data:`NULL_NAMES`) from a record: ``"perturbation"`` (the
    name used before) is the field or local null, as its ``noise`` says."""
    if null == "perturbation" or null is None:
        return noise if noise in NULL_NAMES else "field"
    return null


def null_name(null: str | None, noise: str | None = None) -> str:
    """The null's name as every surface prints it (``"field null"``)."""
    return NULL_NAMES.get(null_id(null, noise), str(null))


def standing_text(null: str | None, noise: str | None = None,
                  stand: dict[str, Any] | None = None) -> str:
    """One line on the null of an assessment, as the console prints it: its name, what it
    is, and what it is calibrated on — or why there is no verdict and what to do."""
    nid = null_id(null, noise)
    text = f"null = {NULL_NAMES.get(nid, nid)} ({NULL_MEANINGS.get(nid, '')})"
    if not isinstance(stand, dict):      # a result written before the calibration by family
        return text
    if stand.get("calibrated"):
        return text + (f"; calibrated: {stand['basis']}" if stand.get("basis") else "")
    return (text + "; NO VERDICT — not calibrated for this pair"
            + (f": {stand['basis']}" if stand.get("basis") else "")
            + (f"; {stand['advice']}" if stand.get("advice") else ""))


__all__ = ["NULL_MEANINGS", "NULL_NAMES", "null_id", "null_name", "standing_text"]
