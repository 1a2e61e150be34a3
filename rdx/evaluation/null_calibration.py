"""Which null an assessment used, and what that null is calibrated on.

Every surface names a null the same way (:mod:`rdx.results.nulls`): the *twin null*, the
*field null* and the *local null*.

A twin null is calibrated for any pair: its draws are real seed twins. The field null is a
model of seed noise, and how strong seed noise is depends on the kind of model: measured on
the seed-twin suite (:mod:`rdx.studies.benchmark.calibration`) the same field flags no seed
twin of MLPs or ConvNets but about half of the small ViTs'. So the field null is read
*through a calibration of its family* (:data:`FAMILIES`): its null maxima are rescaled by
the factor that brings the family's seed twins to the null's median on the design suite
(``log_shift``), and the family's false-positive rate is then checked on the held-out suite,
which played no part in the choice. A family whose held-out rate misses the target, or a
pair whose family is not known, gets no verdict: the p-value is kept as a reading, marked
as not calibrated, with what to do (pass a seed twin, or name the family).

The figures come from ``benchmarks/bench_significance.py --family-table``, which writes
``field_null_calibration.json`` next to this module from the suite's records; the table
says which command and suite produced it.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from ..errors import RDXInputError
from ..results.nulls import NULL_MEANINGS, NULL_NAMES, null_id, null_name, standing_text

#: The kinds of model the field null is calibrated for, as ``--model-family`` names them.
FAMILIES = ("mlp", "convnet", "vit")

#: The seed-twin suite's family names, as the calibration table records them.
SUITE_FAMILIES = {"digits-mlp": "mlp", "fashion-cnn": "convnet", "fashion-vit": "vit"}

#: Substrings of model names (hub ids, checkpoint kinds) that say a model's family.
_FAMILY_WORDS = (
    ("vit", ("vit", "deit", "beit", "dinov2", "siglip", "eva02", "eva_", "swin",
             "transformer")),
    ("convnet", ("resnet", "resnext", "efficientnet", "convnext", "mobilenet", "regnet",
                 "densenet", "vgg", "inception", "alexnet", "convnet", "cnn", "rn50",
                 "rn101", "lite0", "lite1", "lite2")),
    ("mlp", ("mlp",)),
)

TABLE_FILE = Path(__file__).with_name("field_null_calibration.json")


def family_of(name: str | None) -> str | None:
    """A model's family from its name (a hub id, a preset, a checkpoint kind), or None
    where the name does not say: ``vit_base_patch16_224`` → ``"vit"``,
    ``efficientnet_lite0`` → ``"convnet"``."""
    if not name:
        return None
    text = str(name).lower()
    for family, words in _FAMILY_WORDS:
        if any(w in text for w in words):
            return family
    return None


def check_family(value: Any, name: str = "--model-family") -> tuple[str | None, str | None]:
    """``(family of A, family of B)`` from ``"vit"`` (both) or ``"vit,convnet"``; None for
    unknown. Refuses a word that is not a family (:class:`RDXInputError`)."""
    if value is None:
        return None, None
    if isinstance(value, (tuple, list)):
        parts = [None if v is None else str(v) for v in value]
    else:
        parts = [p.strip() for p in str(value).split(",")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2:
        raise RDXInputError(f"{name} takes one family for both models or two separated by a "
                            f"comma (A,B), got {value!r}.")
    for p in parts:
        if p is not None and p not in FAMILIES:
            raise RDXInputError(f"{name}: {p!r} is not a model family; choose from "
                                f"{', '.join(FAMILIES)} (e.g. {name} vit, or vit,convnet).")
    return parts[0], parts[1]


@functools.lru_cache(maxsize=1)
def calibration_table() -> dict[str, Any]:
    """The field null's per-family calibration (``field_null_calibration.json``)."""
    try:
        return json.loads(TABLE_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):   # an installation without the table: no family calibrated
        return {"families": {}, "source": None}


def standing(null: str, families: tuple[str | None, str | None] = (None, None)
             ) -> dict[str, Any]:
    """What an assessment against ``null`` may claim for a pair of these families.

    Returns ``{"null", "name", "families", "calibrated", "log_shift", "basis", "advice"}``:
    ``calibrated`` True where the verdict stands (the twin null; the field null on a family
    whose held-out false-positive rate meets the target), ``log_shift`` the family's
    rescaling of the field null's maxima (0 where none applies).
    """
    null = null_id(null)
    out: dict[str, Any] = {"null": null, "name": NULL_NAMES.get(null, null),
                           "families": list(families), "calibrated": False,
                           "log_shift": 0.0}
    if null == "twin":
        return {**out, "calibrated": True,
                "basis": "seed twins are exact null draws: calibrated for any pair (on the "
                         "seed-twin suite the twin null's p-values are uniform)",
                "advice": ""}
    twin_advice = ("pass a seed twin of A or B (rdx explain --control-b TWIN.npy; "
                   "assess(control_b=)) for a calibrated verdict")
    if null != "field":
        return {**out, "basis": "the local null is too weak for seed noise",
                "advice": twin_advice}
    fa, fb = families
    table = calibration_table().get("families", {})
    if fa is None or fb is None:
        known = [f for f in FAMILIES if (table.get(f) or {}).get("calibrated")]
        return {**out,
                "basis": "the model family is not known; the field null is calibrated "
                         + (f"for {', '.join(known)} pairs only" if known else
                            "for no family"),
                "advice": twin_advice + (f", or name the family (--model-family "
                                         f"{'|'.join(FAMILIES)})" if known else "")}
    if fa != fb:
        return {**out, "basis": f"a {fa} against a {fb}: the field null is calibrated on "
                                "seed twins, which are of one family",
                "advice": twin_advice}
    row = table.get(fa) or {}
    if not row.get("calibrated"):
        return {**out, "basis": row.get("basis") or f"no calibration for {fa} pairs",
                "advice": twin_advice}
    return {**out, "calibrated": True, "log_shift": float(row.get("log_shift", 0.0)),
            "basis": row["basis"], "advice": ""}


def group_standing(null: str) -> dict[str, Any]:
    """What a named-group test against ``null`` may claim: only the twin null is calibrated
    for named groups (on the held-out seed twins the field null flagged 10 of 96
    comparisons, 10 %, in 90 tests each; ``benchmarks/bench_group_test.py``)."""
    null = null_id(null)
    if null == "twin":
        return standing("twin")
    return {"null": null, "name": NULL_NAMES.get(null, null), "families": [None, None],
            "calibrated": False, "log_shift": 0.0,
            "basis": "named groups are calibrated against seed twins only: on held-out seed "
                     "twins the field null flagged 10 % of comparisons",
            "advice": "pass two seed twins of each model (or three of one) for a calibrated "
                      "verdict"}


__all__ = ["FAMILIES", "NULL_MEANINGS", "NULL_NAMES", "SUITE_FAMILIES", "calibration_table",
           "check_family", "family_of", "group_standing", "null_id", "null_name", "standing",
           "standing_text"]
