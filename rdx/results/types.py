"""Typed results: one shape for RDX and every baseline, per-model and pairwise alike.

A :class:`MethodResult` is what a method returns and what ``explanations.json`` holds: the
method's name and resolved parameters, the number of images, one :class:`DirectionResult`
per direction (``a_over_b``: explanations of model A — for RDX groups close in A and far
in B, for a per-model baseline simply A's concepts; ``b_over_a`` likewise for B) and, once
:func:`rdx.evaluation.scoring.score` has run, the scores of its grids. Estimators never
score while serialising: ``to_json`` writes what is stored, nothing is recomputed.

Schema version 2 (this module writes it; version 1 files load too, see :meth:`MethodResult.from_json`)::

    {"schema_version": 2, "method": "rdx", "params": {...}, "n_images": n,
     "directions": {"a_over_b": {"explanations": [{"images": [...], "members": [...],
                                                   "mean_affinity": 4.6, ...}, ...],
                                 "null_members": [...], "null_mean_affinity": 1.1},
                    "b_over_a": {...}},
     "scores": {...},            # rdx.evaluation.scoring (absent before scoring)
     "bsr": {"a_over_b", "b_over_a", "mean"},   # rank BSR, a copy of scores for quick reading
     "info": {...},              # method-specific records: alignment, similarity, calibration,
                                 # probe, agreement, estimator (a baseline's diagnostics)
     "timings_s": {...}, "versions": {...}, "run": {...}}   # "run": the runner's record
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import RDXInputError

SCHEMA_VERSION = 2
#: ``a_over_b``: close in A, far in B (model A's concepts); ``b_over_a`` the reverse.
DIRECTIONS = ("a_over_b", "b_over_a")
#: The three dissimilarities under which grids are scored: one name per thing, everywhere
#: (JSON keys, summary columns, report and figure labels come from this table).
DISSIMILARITY_LABELS = {
    "rank": ("rank", "neighbour rank (1-based position in the other image's sorted list)"),
    "max_normalized_euclidean": ("MNED", "Euclidean distance divided by the largest distance"),
    "local_scaling": ("LS", "squared distance over the product of both images' local scales "
                            "(distance to their 7th neighbour)"),
}
#: Top-level keys of the v1 document that v2 keeps under ``info``.
_INFO_KEYS_V1 = ("alignment", "similarity", "calibration", "probe", "agreement", "info")

# Fields of an explanation the project knows; anything else a method adds is kept in `extra`.
_EXPLANATION_FIELDS = ("images", "members", "mean_affinity", "low_affinity", "concept", "values")


def _ints(xs: Any) -> list[int]:
    return [int(i) for i in xs]


@dataclass
class Explanation:
    """One explanation: the grid shown for it and, where the method has them, its members.

    Attributes
    ----------
    images : the grid (0-based rows of A/B), anchor first for RDX.
    members : the whole cluster/concept (hard-clustering methods and RDX), else None.
    mean_affinity : RDX: mean within-cluster affinity (the strength of the difference).
    low_affinity : RDX: below ``null_threshold`` (a weak explanation).
    concept : baselines: the column of the method's codes this explanation shows.
    values : baselines: the grid images' activations of that concept.
    extra : anything else a method records (e.g. a significance test, a filter flag).
    """

    images: list[int]
    members: list[int] | None = None
    mean_affinity: float | None = None
    low_affinity: bool | None = None
    concept: int | None = None
    values: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.concept is not None:
            out["concept"] = int(self.concept)
        out["images"] = _ints(self.images)
        if self.values is not None:
            out["values"] = [float(v) for v in self.values]
        if self.members is not None:
            out["members"] = _ints(self.members)
        if self.mean_affinity is not None:
            out["mean_affinity"] = float(self.mean_affinity)
        if self.low_affinity is not None:
            out["low_affinity"] = bool(self.low_affinity)
        out.update(self.extra)
        return out

    # the v1 name, kept for code written against the first release
    to_dict = to_json

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Explanation":
        if not isinstance(d, Mapping) or "images" not in d:
            raise RDXInputError("an explanation needs at least 'images' (its grid).")
        return cls(images=_ints(d["images"]),
                   members=None if d.get("members") is None else _ints(d["members"]),
                   mean_affinity=d.get("mean_affinity"), low_affinity=d.get("low_affinity"),
                   concept=d.get("concept"), values=d.get("values"),
                   extra={k: v for k, v in d.items() if k not in _EXPLANATION_FIELDS})


@dataclass
class DirectionResult:
    """The explanations of one direction, strongest difference last for RDX.

    ``labels[i]`` (RDX, not serialised: it is in ``graphs.npz``) is 0 for the no-change
    group and ``j`` for ``explanations[j - 1]``.
    """

    explanations: list[Explanation]
    null_members: list[int] | None = None
    null_mean_affinity: float | None = None
    labels: np.ndarray | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def grids(self) -> list[list[int]]:
        return [e.images for e in self.explanations]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"explanations": [e.to_json() for e in self.explanations]}
        if self.null_members is not None:
            out["null_members"] = _ints(self.null_members)
        if self.null_mean_affinity is not None:
            out["null_mean_affinity"] = float(self.null_mean_affinity)
        out.update(self.extra)
        return out

    to_dict = to_json

    @classmethod
    def from_json(cls, d: Any) -> "DirectionResult":
        if isinstance(d, list):          # a bare list of explanations
            d = {"explanations": d}
        if not isinstance(d, Mapping):
            raise RDXInputError(f"a direction must be a mapping with 'explanations', got "
                                f"{type(d).__name__}.")
        return cls(explanations=[e if isinstance(e, Explanation) else Explanation.from_json(e)
                                 for e in d.get("explanations", [])],
                   null_members=d.get("null_members"),
                   null_mean_affinity=d.get("null_mean_affinity"),
                   extra={k: v for k, v in d.items()
                          if k not in ("explanations", "null_members", "null_mean_affinity")})


@dataclass
class MethodResult:
    """Everything one method produced for one pair of representations.

    ``arrays`` (``concepts.npz``: codes of the shown concepts, probe predictions, ...) and
    ``graphs`` (``graphs.npz``: RDX's n×n matrices) travel with the result but are written
    next to ``explanations.json``, never into it.
    """

    method: str
    params: dict[str, Any]
    n_images: int
    directions: dict[str, DirectionResult] = field(default_factory=dict)
    scores: dict[str, Any] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] | None = None
    arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    graphs: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    schema_version: int = SCHEMA_VERSION

    @property
    def grids(self) -> dict[str, list[list[int]]]:
        """``{direction: [grid, ...]}`` of the directions that have explanations."""
        return {d: r.grids for d, r in self.directions.items()}

    @property
    def has_grids(self) -> bool:
        return any(r.explanations for r in self.directions.values())

    @property
    def bsr(self) -> dict[str, float | None] | None:
        """Rank BSR per direction and their mean, from the stored scores (None if unscored)."""
        rank = (self.scores or {}).get("rank")
        if not isinstance(rank, Mapping) or "undefined" in rank:
            return None
        out = {d: rank[d]["bsr"] for d in self.directions if d in rank}
        out["mean"] = (rank.get("mean") or {}).get("bsr")
        return out

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "method": self.method,
                               "params": dict(self.params), "n_images": int(self.n_images),
                               "directions": {d: r.to_json() for d, r in self.directions.items()}}
        if self.scores is not None:
            doc["scores"] = self.scores
            if self.bsr is not None:
                doc["bsr"] = self.bsr
        if self.info:
            doc["info"] = self.info
        doc["timings_s"] = dict(self.timings)
        doc["versions"] = dict(self.versions)
        if self.run is not None:
            doc["run"] = self.run
        return doc

    to_dict = to_json

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "MethodResult":
        """Read a version 2 document, or a version 1 one (first release): v1 kept the
        method-specific records (``similarity``, ``probe``, ``alignment``, ...) at the top
        level, where v2 keeps them under ``info``; its ``scores`` have the same shape."""
        if not isinstance(doc, Mapping):
            raise RDXInputError(f"an explanations document must be a JSON object, got "
                                f"{type(doc).__name__}.")
        version = doc.get("schema_version", 1)
        if version not in (1, SCHEMA_VERSION):
            raise RDXInputError(f"explanations document of schema_version {version!r}: this "
                                f"version of rdx reads versions 1 and {SCHEMA_VERSION}; "
                                "upgrade rdx to read it.")
        missing = [k for k in ("method", "directions") if k not in doc]
        if missing:
            raise RDXInputError(f"explanations document lacks {missing}.")
        if version == 1:
            # v1's "info" (a baseline estimator's diagnostics) is v2's info["estimator"]
            info = {("estimator" if k == "info" else k): doc[k] for k in _INFO_KEYS_V1 if k in doc}
        else:
            info = dict(doc.get("info") or {})
        directions = doc.get("directions") or {}
        if not isinstance(directions, Mapping):
            raise RDXInputError("'directions' must map a_over_b/b_over_a to explanations.")
        return cls(method=str(doc["method"]), params=dict(doc.get("params") or {}),
                   n_images=int(doc.get("n_images") or 0),
                   directions={d: DirectionResult.from_json(v) for d, v in directions.items()},
                   scores=doc.get("scores"), info=info,
                   timings=dict(doc.get("timings_s") or {}),
                   versions=dict(doc.get("versions") or {}), run=doc.get("run"),
                   schema_version=SCHEMA_VERSION)
