"""The affinity of large-n RDX as a sparse operator, and its spectral clustering.

A direction's affinity is ``S = 11ᵀ + C_s [+ G Λ⁻¹ Gᵀ]``: all-ones, the symmetrised
correction ``C_s`` on the union K-NN graph (:func:`correction_matrix`, :func:`symmetrize`)
and optionally the far-pair sketch (:class:`rdx.method.knn_sketch.FarSketch`). It is never
formed: a product costs one sparse product, a sum and two thin products, ``S v = (Σ v) 1 +
C_s v + G Λ⁻¹ (Gᵀ v)``. The top eigenvectors of ``D^{-1/2} S D^{-1/2}`` come from Lanczos
(ARPACK ``eigsh``, same start vector, tolerance, √degree scaling, sign rule and k-means as
:mod:`rdx.method.spectral`), cluster sums from ``|c||c'| + Yᵀ C_s Y + (YᵀG) Λ⁻¹ (YᵀG)ᵀ``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from .graphs import DIRECTION_SIGN
from .knn_graph import UnionGraph
from .knn_sketch import FarSketch
from .spectral import ARPACK_TOL, kmeans, sign_flip


def correction_matrix(graph: UnionGraph, diff: np.ndarray, beta: float, direction: str
                      ) -> scipy.sparse.csr_matrix:
    """``C = A − 11ᵀ`` of a direction's (unsymmetrised) affinity, on the union pairs."""
    data = np.expm1(diff * (DIRECTION_SIGN[direction] * beta))
    C = scipy.sparse.csr_matrix((data, graph.cols, graph.indptr), shape=(graph.n, graph.n))
    C.has_sorted_indices = True
    return C


def symmetrize(C: scipy.sparse.csr_matrix) -> scipy.sparse.csr_matrix:
    """``(C + Cᵀ)/2`` as CSR (sorted indices)."""
    Cs = (C + C.T.tocsr()) * 0.5
    Cs.sort_indices()
    return Cs


def affinity_operator(Cs: scipy.sparse.csr_matrix, scale: np.ndarray | None = None,
                      sketch: FarSketch | None = None) -> scipy.sparse.linalg.LinearOperator:
    """``diag(scale) (11ᵀ + Cs [+ sketch]) diag(scale)`` as a float64 operator (never
    formed)."""
    n = Cs.shape[0]
    sc = None if scale is None else np.asarray(scale, dtype=np.float64)[:, None]

    def matmat(V: np.ndarray) -> np.ndarray:
        V = np.asarray(V, dtype=np.float64).reshape(n, -1)
        if sc is not None:
            V = V * sc
        out = Cs @ V
        out += V.sum(axis=0, keepdims=True)
        if sketch is not None:
            out += sketch.matmat(V)
        if sc is not None:
            out *= sc
        return out

    return scipy.sparse.linalg.LinearOperator((n, n), matvec=matmat, matmat=matmat,
                                              dtype=np.float64)


def degrees(Cs: scipy.sparse.csr_matrix, sketch: FarSketch | None = None) -> np.ndarray:
    """Row sums of ``S = 11ᵀ + Cs [+ sketch]`` (without the sketch always positive: every
    entry of S is; with it, see :func:`rdx.method.knn_fit.cluster_direction_sparse`)."""
    out = Cs.shape[0] + np.asarray(Cs.sum(axis=1), dtype=np.float64).ravel()
    if sketch is not None:
        out += sketch.matmat(np.ones((Cs.shape[0], 1))).ravel()
    return out


def spectral_clustering_sparse(Cs: scipy.sparse.csr_matrix, n_clusters: int, *,
                               random_state: int = 0, n_init: int = 10,
                               sketch: FarSketch | None = None) -> np.ndarray:
    """Labels of the spectral clustering of ``S = 11ᵀ + Cs [+ sketch]``, as
    :func:`rdx.method.spectral.spectral_clustering` computes them for a dense ``S``: one
    ``RandomState`` feeds the Lanczos start vector, then k-means."""
    rs = np.random.RandomState(random_state)
    n = Cs.shape[0]
    v0 = rs.uniform(-1, 1, n)
    isd = 1.0 / np.sqrt(degrees(Cs, sketch))
    _, vecs = scipy.sparse.linalg.eigsh(affinity_operator(Cs, isd, sketch), k=n_clusters,
                                        which="LA", v0=v0, tol=ARPACK_TOL)
    emb = sign_flip(vecs[:, ::-1] * isd[:, None])
    return kmeans(emb, n_clusters, n_init=n_init, random_state=rs)


def block_sums_sparse(Cs: scipy.sparse.csr_matrix, labels: np.ndarray, n_labels: int,
                      sketch: FarSketch | None = None) -> np.ndarray:
    """``B[c, c'] = Σ_{i∈c, j∈c'} S[i, j]`` for ``S = 11ᵀ + Cs [+ sketch]`` (see
    :func:`rdx.method.clustering.block_sums`)."""
    n = Cs.shape[0]
    Y = scipy.sparse.csr_matrix((np.ones(n), (np.arange(n), labels)), shape=(n, n_labels))
    sizes = np.bincount(labels, minlength=n_labels).astype(np.float64)
    out = np.outer(sizes, sizes) + np.asarray((Y.T @ (Cs @ Y)).todense(), dtype=np.float64)
    if sketch is not None:
        YG = np.asarray(Y.T @ sketch.G)
        out += (YG * sketch.inv) @ YG.T
    return out
