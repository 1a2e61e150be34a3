"""What every concept-extraction baseline shares.

A *per-model* baseline (:class:`ConceptExtractor`) is fit on one representation at a time
and learns ``codes_`` (n×m concept activations) and ``concepts_`` (the k column ids shown);
each shown concept becomes one explanation whose grid is, by default, the ``grid_size``
images with the largest activation. The runner fits it on A (→ ``a_over_b``, model A's
concepts) and on B (→ ``b_over_a``).

A *pairwise* baseline (:class:`PairExplainer`: USAE, NLMCD, SPEC) sees both representations
and fills ``directions_`` itself.

Explanation dicts follow the ``explanations.json`` schema: ``images`` (the grid),
``concept`` (column of ``codes_``), ``values`` (the grid images' activations) and, for
hard-clustering methods, ``members``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import validation as V
from ..backend import seeded
from ..errors import NotFittedError, RDXInputError
from ..params import Params


def top_images(codes: np.ndarray, concepts: Any, grid_size: int) -> list[list[int]]:
    """For each concept column, the ``grid_size`` rows with the largest value, descending.

    Ties are broken by the lower image index (a stable sort), so grids are reproducible.
    """
    codes = np.asarray(codes)
    out = []
    for c in concepts:
        order = np.argsort(-codes[:, int(c)], kind="stable")
        out.append(order[:grid_size].tolist())
    return out


def check_grid_size(grid_size: Any, n: int | None) -> int:
    # at least 2: BSR scores the pairs of a grid, and one image has none
    g = V.check_int(grid_size, "grid_size", minimum=2)
    if n is not None and g > n:
        raise RDXInputError(f"grid_size={g} is larger than the number of images ({n}).")
    return g


def check_n_concepts(k: Any, n: int | None, *, name: str = "n_explanations",
                     limit: int | None = None, why: str = "") -> int:
    """k concepts shown per model: a positive integer that the data can support."""
    k = V.check_int(k, name, minimum=1)
    if n is not None and k > n:
        raise RDXInputError(f"{name}={k} is larger than the number of images ({n}); use at "
                            f"most {n}.")
    if limit is not None and k > limit:
        raise RDXInputError(f"{name}={k} is too large: at most {limit}{why}.")
    return k


class _Seeded(Params):
    """Shared parameter checks and seeding (every fit starts from ``random_state``)."""

    def _check_params(self, n: int | None) -> None:  # n None: config validation, no data
        V.check_int(self.random_state, "random_state", minimum=0, maximum=2**32 - 1,
                    hint=" Baselines are always seeded so that runs are reproducible.")
        check_grid_size(self.grid_size, n)
        check_n_concepts(self.n_explanations, n)

    def _seeded(self):
        """Global generators seeded for the fit and given back to the caller afterwards
        (training code draws from torch's global generator)."""
        return seeded(int(self.random_state))

    def _explanation(self, concept: int, grid: list[int], codes: np.ndarray) -> dict[str, Any]:
        return {"concept": int(concept), "images": [int(i) for i in grid],
                "values": [float(v) for v in codes[grid, concept]]}


class ConceptExtractor(_Seeded):
    """Base of the per-representation baselines.

    Subclasses implement ``_fit(X)`` setting ``codes_`` and ``concepts_`` (and optionally
    ``labels_`` for hard clusters, ``grids_`` when their rule is not "largest activation",
    ``dictionary_`` (m×d) and ``info_`` (JSON-ready diagnostics)).
    """

    def fit(self, X: Any, y: Any = None) -> ConceptExtractor:
        X = V.as_representation(X, "X")
        V.check_not_constant(X, "X")
        self._check_params(X.shape[0])
        self.info_: dict[str, Any] = {}
        self.grids_: list[list[int]] | None = None
        with self._seeded():
            self._fit(X)
        if self.grids_ is None:
            self.grids_ = top_images(self.codes_, self.concepts_, int(self.grid_size))
        self.n_features_in_ = X.shape[1]
        return self

    def _fit(self, X: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def explanations(self) -> list[dict[str, Any]]:
        """One explanation dict per shown concept (schema of ``explanations.json``)."""
        if not hasattr(self, "codes_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit(X) first.")
        out = []
        labels = getattr(self, "labels_", None)
        for c, grid in zip(self.concepts_, self.grids_):
            e = self._explanation(int(c), grid, self.codes_)
            if labels is not None:
                e["members"] = np.flatnonzero(labels == c).tolist()
            out.append(e)
        return out


class PairExplainer(_Seeded):
    """Base of the baselines that see both representations (USAE, NLMCD, SPEC).

    Subclasses implement ``_fit(A, B)`` setting ``directions_`` =
    ``{"a_over_b": [explanation dicts], "b_over_a": [...]}`` and optionally ``info_``.
    """

    def fit(self, A: Any, B: Any) -> PairExplainer:
        A = V.as_representation(A, "A")
        B = V.as_representation(B, "B")
        V.check_pair(A, B)
        V.check_not_constant(A, "A")
        V.check_not_constant(B, "B")
        self._check_params(A.shape[0])
        self.info_: dict[str, Any] = {}
        with self._seeded():
            self._fit(A, B)
        return self

    def _fit(self, A: np.ndarray, B: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
