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
from typing import Any, NamedTuple

import numpy as np

from ..errors import RDXInputError

SCHEMA_VERSION = 2
#: ``a_over_b``: close in A, far in B (model A's concepts); ``b_over_a`` the reverse.
DIRECTIONS = ("a_over_b", "b_over_a")
class Label(NamedTuple):
    """How the project names one thing everywhere: ``short`` in tables, figures and file
    names, ``name`` spelled out (figure titles, the report's glossary), ``meaning`` the one
    sentence that defines it (the glossary)."""

    short: str
    name: str
    meaning: str


#: The three dissimilarities under which grids are scored: one name per thing, everywhere
#: (JSON keys, summary columns, report and figure labels come from this table).
DISSIMILARITY_LABELS = {
    "rank": Label("rank", "neighbour rank",
                  "1-based position of one image in the other's list of neighbours, sorted "
                  "by distance (asymmetric)"),
    "max_normalized_euclidean": Label(
        "MNED", "max-normalised Euclidean distance",
        "Euclidean distance divided by the largest distance between any two images"),
    "local_scaling": Label(
        "LS", "locally scaled distance",
        "squared distance over the product of both images' local scales (their distance "
        "to their 7th neighbour), each model with its own distances"),
}
#: The scores and per-explanation numbers (keys as in ``explanations.json`` and the summary
#: tables): the report's glossary, table headers and figure labels are spelled from here.
SCORE_LABELS = {
    "bsr": Label("BSR", "binary success rate",
                 "share of the image pairs inside an explanation's grid that are closer "
                 "(lower dissimilarity) in the explained model than in the other; 1 = every "
                 "pair, pooled over a direction's grids"),
    "tsd": Label("TSD", "total signed difference",
                 "mean over the grid's image pairs of the other model's dissimilarity minus "
                 "the explained model's (> 0: the grid is tighter in the explained model)"),
    "eq": Label("EQ", "equal pairs",
                "share of the grid's image pairs with the same dissimilarity in both models "
                "(ties: neither a success nor a failure)"),
    "chance": Label("chance", "chance level",
                    "the BSR of random grids of the same sizes drawn from the same images: "
                    "mean [2.5 %, 97.5 %] over the draws"),
    "mean_affinity": Label("aff", "mean affinity",
                           "RDX: mean pairwise affinity inside a cluster, i.e. how much closer "
                           "its images are in one model than in the other (the strength of "
                           "the difference)"),
    "low_affinity": Label("weak", "low-affinity explanation",
                          "RDX: a cluster whose mean affinity is below null_threshold, so "
                          "barely tighter in one model than in the other; shown, but read "
                          "with care"),
    "n_members": Label("n", "cluster size",
                       "images in the whole cluster or concept; a grid shows at most "
                       "grid_size (9) of them"),
    "p_value_fwer": Label("p_FWER", "family-wise p-value",
                          "probability that a comparison of two seed twins (the twin null: "
                          "real seed twins; the field null: modelled seed noise) shows "
                          "an explanation this strong; family-wise over all explanations"),
}
#: What a direction's explanations are, per kind of method: ``(sentence, short phrase)``
#: with ``{a}`` the explained model and ``{b}`` the other. Only RDX and the pairwise
#: baselines explain *differences*; a per-model baseline (k-means, PCA, NMF, SAEs, ...)
#: is fit on one model alone, so its ``a_over_b`` is simply "concepts of model A".
DIRECTION_MEANINGS = {
    "rdx": ("groups of images that model {a} holds tightly together and model {b} spreads "
            "apart: what {a} represents that {b} does not", "close in {a}, far in {b}"),
    "spec": ("groups of images that model {a}'s kernel ties together more strongly than "
             "model {b}'s (eigenvectors of the difference of the two kernels)",
             "tied together by {a}'s kernel more than by {b}'s"),
    "nlmcd": ("model {a}'s concepts (clusters of {a}'s representation) that are least like "
              "any concept of model {b}", "{a}'s concepts least like {b}'s"),
    "usae": ("latents of one sparse autoencoder shared by both models that fire mostly on "
             "model {a}'s encoding: concepts specific to {a}", "latents specific to {a}"),
    "crosscoder": ("latents of one sparse dictionary over both models (a crosscoder) whose "
                   "decoder writes (almost) only into model {a}: structure {a} has and {b} "
                   "lacks (when fewer are exclusive, the shared latents leaning most towards "
                   "{a} fill in; each explanation says which)",
                   "crosscoder latents exclusive to {a}"),
    "dfc_crosscoder": ("latents of a dedicated-feature crosscoder (one sparse dictionary over "
                       "both models, some latents reserved for one model) whose decoder "
                       "writes (almost) only into model {a}: structure {a} has and {b} lacks "
                       "(when fewer are exclusive, the shared latents leaning most towards "
                       "{a} fill in; each explanation says which)",
                       "crosscoder latents exclusive to {a}"),
    "per_model": ("concepts of model {a} alone: the method is fit on {a} without looking at "
                  "{b}, so these are not differences (BSR tells whether they happen to be "
                  "tighter in {a} than in {b})", "concepts of model {a} (fit on {a} alone)"),
}


def direction_meaning(method_type: str | None, direction: str, *, short: bool = False) -> str:
    """What the explanations of ``direction`` (``a_over_b``/``b_over_a``) of a method of
    type ``method_type`` (``explanations.json["method"]``) are, from
    :data:`DIRECTION_MEANINGS`; methods not listed there are per-model baselines."""
    if direction not in DIRECTIONS:
        raise RDXInputError(f"direction must be one of {DIRECTIONS}, not {direction!r}.")
    a, b = ("A", "B") if direction == "a_over_b" else ("B", "A")
    text = DIRECTION_MEANINGS.get(method_type or "", DIRECTION_MEANINGS["per_model"])
    return text[1 if short else 0].format(a=a, b=b)


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
    next to ``explanations.json``, never into it. ``nearest`` (RDX's dense fit: each
    image's nearest neighbours in A and in B, from its rank pass) lives only in memory, for
    :func:`rdx.evaluation.significance.assess` in the same process; it is never written.
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
    nearest: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
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

    def _repr_html_(self) -> str:
        """Jupyter's view: per direction BSR and each explanation (:mod:`rdx.results.notebook`)."""
        from .notebook import method_result_html
        return method_result_html(self)

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
