"""The ``explanations.json`` document every method writes (schema version 1).

One builder for all methods, so that BSR, reports and plots treat RDX and the baselines
alike: ``directions`` maps ``a_over_b`` (explanations of model A: groups close in A) and
``b_over_a`` (of model B) to lists of explanation dicts, each with at least ``images``
(the grid, 0-based rows of A/B).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..evaluation.bsr import DISSIMILARITIES, bsr_scores
from ..io import versions

SCHEMA_VERSION = 1


def grid_scores(A: np.ndarray, B: np.ndarray, grids: Mapping[str, Sequence[Sequence[int]]], *,
                sigma_neighbor: int = 7) -> tuple[dict[str, float], dict[str, Any]]:
    """BSR summary (rank dissimilarity) and the full scores under every dissimilarity.

    A dissimilarity that is undefined for the data (e.g. local scaling with many exact
    duplicates) is reported as ``{"undefined": reason}`` instead of failing the run.
    """
    scores: dict[str, Any] = {}
    for name in DISSIMILARITIES:
        try:
            scores[name] = bsr_scores(A, B, grids, dissimilarity=name,
                                      sigma_neighbor=sigma_neighbor)
        except RDXInputError as exc:
            scores[name] = {"undefined": str(exc)}
    rank = scores["rank"]
    summary = {d: rank[d]["bsr"] for d in grids}
    summary["mean"] = rank["mean"]["bsr"]
    return summary, scores


def explanations_document(method: str, params: Mapping[str, Any], n_images: int,
                          directions: Mapping[str, Any], *, A: np.ndarray | None = None,
                          B: np.ndarray | None = None, sigma_neighbor: int = 7,
                          extra: Mapping[str, Any] | None = None,
                          timings: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Assemble the document; with ``A`` and ``B`` (the *original* representations) the
    grids are scored.

    ``directions[d]`` is either a list of explanation dicts or a dict with an
    ``"explanations"`` list (RDX adds its no-change group next to it).
    """
    dirs = {d: (v if isinstance(v, Mapping) else {"explanations": list(v)})
            for d, v in directions.items()}
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "method": method,
                           "params": dict(params), "n_images": int(n_images),
                           "directions": dirs}
    if extra:
        doc.update(extra)
    if A is not None and B is not None and dirs:
        grids = {d: [e["images"] for e in v["explanations"]] for d, v in dirs.items()}
        doc["bsr"], doc["scores"] = grid_scores(A, B, grids, sigma_neighbor=sigma_neighbor)
    doc["timings_s"] = dict(timings or {})
    doc["versions"] = versions()
    return doc
