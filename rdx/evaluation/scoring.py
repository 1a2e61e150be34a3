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
    """

    def __init__(self, A: np.ndarray, B: np.ndarray, *, labels: np.ndarray | None = None,
                 known_difference: Any = None, sigma_neighbor: int = 7,
                 chance_draws: int = CHANCE_DRAWS, chance_seed: int = 0):
        self.A, self.B = np.asarray(A), np.asarray(B)
        # norms, duplicate groups and the largest distance once per representation: every
        # grid of every method and every chance draw reuses them
        self._prepared = (prepare_representation(self.A, sigma_neighbor=int(sigma_neighbor),
                                                 name="A"),
                          prepare_representation(self.B, sigma_neighbor=int(sigma_neighbor),
                                                 name="B"))
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
        n = self.A.shape[0]
        if result.n_images and result.n_images != n:
            raise RDXInputError(f"{result.method}: the result is for {result.n_images} images "
                                f"but the representations have {n}.")
        scores: dict[str, Any] = {"params": self.params, **self.grid_scores(grids)}
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
        result.scores = scores
        self.n_scored += 1
        return result


def score(result: MethodResult, A: np.ndarray, B: np.ndarray, **kw: Any) -> MethodResult:
    """Score one result on the original representations (see :class:`Scorer`)."""
    return Scorer(A, B, **kw).score(result)
