"""Scoring once: BSR/TSD/EQ under every dissimilarity, chance levels and known-difference
recovery of a method's grids, stored with the result.

The runner and ``rdx explain`` call :meth:`Scorer.score` once per method; the summary, the
report, the figures and the explorer read ``result.scores`` and never recompute them (they
score only results that lack scores, e.g. files written by another tool).

Every method is scored the same way, on the *original* representations, with the scorer's
own ``sigma_neighbor`` (the local-scaling neighbour), so RDX and the baselines are compared
on equal terms whatever parameters they were fitted with.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..results.types import DIRECTIONS, MethodResult
from .bsr import DISSIMILARITIES, bsr_scores, prepare_representation
from .chance import chance_levels
from .known_difference import score_known_difference

#: Default number of random grid sets behind a chance level.
CHANCE_DRAWS = 1000


class Scorer:
    """Scores grids on one pair of representations; prepared once per comparison.

    Parameters
    ----------
    A, B : (n, d_A), (n, d_B) arrays
        The original (unaligned) representations of the same images.
    labels : (n,) array, optional
        Class labels, for known-difference recovery.
    known_difference : mapping or list, optional
        A *validated* declaration (see :func:`rdx.evaluation.known_difference.validate_known_difference`).
    sigma_neighbor : int, default=7
        Neighbour that defines the local scale of the local-scaling dissimilarity.
    chance_draws : int, default=1000
        Random grid sets per chance level; 0 skips the chance levels.
    chance_seed : int, default=0
        Seed of the random grids: every method whose grids have the same sizes is compared
        with the same random grids.
    metric : {"euclidean", "precomputed"}, default="euclidean"
        ``"precomputed"``: ``A`` and ``B`` are the n×n distance matrices an
        ``RDX(metric="precomputed")`` fit was given; the scores read them.
    """

    def __init__(self, A: np.ndarray, B: np.ndarray, *, labels: np.ndarray | None = None,
                 known_difference: Any = None, sigma_neighbor: int = 7,
                 chance_draws: int = CHANCE_DRAWS, chance_seed: int = 0,
                 metric: str = "euclidean"):
        self.A, self.B = np.asarray(A), np.asarray(B)
        # norms, duplicate groups and the largest distance once per representation: every
        # grid of every method and every chance draw reuses them
        self._prepared = (prepare_representation(self.A, sigma_neighbor=int(sigma_neighbor),
                                                 name="A", metric=metric),
                          prepare_representation(self.B, sigma_neighbor=int(sigma_neighbor),
                                                 name="B", metric=metric))
        self.labels = None if labels is None else np.asarray(labels)
        self.known_difference = known_difference
        self.sigma_neighbor = int(sigma_neighbor)
        self.chance_draws = int(chance_draws)
        self.chance_seed = int(chance_seed)
        self._chance: dict[tuple[int, ...], dict] = {}
        self.n_scored = 0   # how many results this scorer scored (tests count it)

    @property
    def params(self) -> dict[str, Any]:
        return {"sigma_neighbor": self.sigma_neighbor, "chance_draws": self.chance_draws,
                "chance_seed": self.chance_seed}

    def grid_scores(self, grids: Mapping[str, Sequence[Sequence[int]]]) -> dict[str, Any]:
        """``{dissimilarity: bsr_scores(...)}``; a dissimilarity undefined for the data (e.g.
        local scaling with many exact duplicates) is ``{"undefined": reason}``."""
        out: dict[str, Any] = {}
        for name in DISSIMILARITIES:
            try:
                out[name] = bsr_scores(*self._prepared, grids, dissimilarity=name,
                                       sigma_neighbor=self.sigma_neighbor)
            except RDXInputError as exc:
                out[name] = {"undefined": str(exc)}
        return out

    def chance(self, grid_sizes: Sequence[int]) -> dict[str, Any] | None:
        """Chance levels of random grids of these sizes (cached by the sorted sizes)."""
        sizes = tuple(sorted((int(s) for s in grid_sizes), reverse=True))
        if not sizes or self.chance_draws <= 0:
            return None
        if sizes not in self._chance:
            self._chance[sizes] = chance_levels(*self._prepared, list(sizes),
                                                n_draws=self.chance_draws,
                                                seed=self.chance_seed,
                                                sigma_neighbor=self.sigma_neighbor)
        return self._chance[sizes]

    def score(self, result: MethodResult) -> MethodResult:
        """Fill ``result.scores`` (in place) and return the result.

        ``scores`` holds, for each dissimilarity, ``{direction: {"bsr", "tsd", "eq",
        "n_pairs"}, "mean": {...}}``; ``chance`` maps each direction to its chance levels
        ``{dissimilarity: {"bsr_mean", "bsr_lo", "bsr_hi", ...}}``; ``known_difference``
        maps directions to hits (when the comparison declares an implanted difference);
        ``params`` records how it was scored. A result without grids (CKA, probes) is
        returned unchanged.
        """
        grids = {d: g for d, g in result.grids.items() if d in DIRECTIONS}
        if not any(grids.values()):
            return result
        check_no_empty_grids(result.method, grids)
        n = self.A.shape[0]
        if result.n_images and result.n_images != n:
            raise RDXInputError(f"{result.method}: the result is for {result.n_images} images "
                                f"but the representations have {n}.")
        scores: dict[str, Any] = {"params": self.params, **self.grid_scores(grids)}
        # above EXACT_MAX_DISTANCE_N images the MNED scale is a bounded search: say so
        bounded = {p.name: p.max_distance_info for p in self._prepared
                   if p.max_distance_info and p.max_distance_info["search"] != "all pairs"}
        if bounded:
            scores["params"]["max_distance"] = bounded
        chance: dict[str, Any] = {}
        for d, dgrids in grids.items():
            levels = self.chance([len(g) for g in dgrids])
            if levels is not None:
                chance[d] = {dis: (lv.get(d) if "undefined" not in lv else lv)
                             for dis, lv in levels.items()}
        if chance:
            scores["chance"] = chance
        if self.known_difference is not None:
            try:
                scores["known_difference"] = score_known_difference(
                    self.known_difference, grids, self.labels, A=self.A, B=self.B,
                    validated=True)
            except RDXInputError as exc:   # e.g. no labels for a merged-classes check
                scores["known_difference"] = {"undefined": str(exc)}
        check_finite_scores(result.method, scores)
        result.scores = scores
        self.n_scored += 1
        return result


# A result is refused rather than scored when it shows nothing: an explanation without
# images (or a NaN score) is never reported as a success. Callers score before they write
# (rdx explain, rdx run), so such a result is not written either and the command exits
# with status 2 and the reason. A partial result would not help: every explanation of a
# degenerate fit is empty at once (e.g. affinities that overflowed), and the no-change
# group then holds every image.

def check_no_empty_grids(method: str, grids: Mapping[str, Sequence[Sequence[int]]]) -> None:
    """Refuse a result with an explanation that shows no images.

    Raises
    ------
    RDXInputError
        Naming the empty explanations per direction and the usual causes.
    """
    empty = {d: [i for i, g in enumerate(dgrids, start=1) if len(g) == 0]
             for d, dgrids in grids.items()}
    if not any(empty.values()):
        return
    where = "; ".join(f"{d}: {'all ' if len(e) == len(grids[d]) else ''}"
                      f"{len(e)} of {len(grids[d])} (#{', #'.join(map(str, e))})"
                      for d, e in empty.items() if e)
    raise RDXInputError(
        f"{method}: explanations without images ({where}), so the result shows nothing and "
        "cannot be scored; it is refused rather than reported. The fit degenerated: "
        "usually a parameter far outside its useful range (e.g. gamma, beta or "
        "guidance_scale for rdx) or representations with almost no variation. Use the "
        "parameters' defaults, or check A and B.")


def check_finite_scores(method: str, scores: Mapping[str, Any]) -> None:
    """Refuse scores with a NaN/inf BSR, TSD or EQ computed from image pairs.

    Two cases are not failures and pass: a dissimilarity undefined for the data (recorded
    as ``{"undefined": reason}``), and a direction without any pair to score (no
    explanation, e.g. all filtered as weak, or only one-image grids): its scores are NaN
    by definition and are stored as "none".

    Raises
    ------
    RDXInputError
        Naming the first non-finite score.
    """
    for dis in DISSIMILARITIES:
        for key, values in (scores.get(dis) or {}).items():
            if key not in DIRECTIONS or not isinstance(values, Mapping) \
                    or "undefined" in values or not values.get("n_pairs"):
                continue
            for stat in ("bsr", "tsd", "eq"):
                v = values.get(stat)
                if v is not None and not np.isfinite(float(v)):
                    raise RDXInputError(
                        f"{method}: the {stat.upper()} of {key} under {dis} is {float(v)}, "
                        "so the result cannot be reported; it is refused. The grids hold "
                        "images the score cannot compare (e.g. a degenerate fit); use the "
                        "parameters' defaults, or check A and B.")


def score(result: MethodResult, A: np.ndarray, B: np.ndarray, **kw: Any) -> MethodResult:
    """Score one result on the original representations (see :class:`Scorer`)."""
    return Scorer(A, B, **kw).score(result)
