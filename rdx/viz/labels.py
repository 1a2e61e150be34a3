"""The words of the figures: dissimilarity and direction labels (from the results' one
naming table, as in the report and the JSON) and readable names of a comparison's models."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..results.types import DISSIMILARITY_LABELS as RESULT_DISSIMILARITY_LABELS

#: Plot labels of the dissimilarities (short, e.g. in axis labels and file names) and their
#: spelled-out names (titles).
DISSIMILARITY_LABELS = {key: lab.short for key, lab in RESULT_DISSIMILARITY_LABELS.items()}
DISSIMILARITY_NAMES = {key: lab.name for key, lab in RESULT_DISSIMILARITY_LABELS.items()}
DIRECTION_SHORT = {"a_over_b": "A>B", "b_over_a": "B>A"}
DIRECTION_LABELS = {"a_over_b": "A over B (tight in A, split in B)",
                    "b_over_a": "B over A (tight in B, split in A)"}


def model_names(run: Mapping[str, Any]) -> dict[str, str]:
    """Readable names of models A and B (``{"a": ..., "b": ...}``): the model, checkpoint
    or features file named in a run's config (``run.json``); "model A" / "model B" when it
    names none."""
    reps = (run.get("config") or {}).get("representations") or {}
    out = {}
    for side in ("a", "b"):
        spec = reps.get(side) or {}
        label = None
        if spec.get("checkpoint"):
            p = Path(str(spec["checkpoint"]))
            label = p.parent.name if p.stem in ("last", "best") else f"{p.parent.name}/{p.stem}"
        elif spec.get("model"):
            label = str(spec["model"])
        elif spec.get("features"):
            label = Path(str(spec["features"])).stem
        if spec.get("exclude_dims"):
            label = f"{label or side.upper()} − dims {list(spec['exclude_dims'])}"
        same = label is None or label.upper() == side.upper()
        out[side] = f"model {side.upper()}" if same else f"{side.upper()} = {label}"
    return out


__all__ = ["DIRECTION_LABELS", "DIRECTION_SHORT", "DISSIMILARITY_LABELS",
           "DISSIMILARITY_NAMES", "model_names"]
