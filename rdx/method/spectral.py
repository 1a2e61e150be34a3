"""Spectral clustering of a dense symmetric affinity, equivalent to the original's configuration.

The original runs scikit-learn's ``SpectralClustering(affinity='precomputed')``: normalised
Laplacian, ARPACK in shift-invert mode (which LU-factorises the dense n×n matrix, O(n³)),
eigenvectors divided by √degree, a deterministic sign flip, then k-means with ``n_init=10``.
The partition only depends on the top-K eigenvectors of ``M = D^{-1/2} S D^{-1/2}``, so we
compute exactly those, with a solver chosen by size and device:

* ``dense`` — LAPACK ``syevr`` for just the top K (CPU; torch ``eigh`` on CUDA), for small n;
* ``arpack`` — implicitly restarted Lanczos (``eigsh(which='LA')``) without shift-invert:
  O(n²) per product (BLAS on the CPU, torch on CUDA), and the top eigenvalues of a normalised
  affinity with cluster structure are well separated, so few products are needed.

The rest (√degree scaling, sign flip, k-means sharing one RandomState with the start
vector) follows scikit-learn, so partitions agree with ``SpectralClustering`` (tested on
fixtures by adjusted Rand index); the k-means is scikit-learn's algorithm in numpy
(:mod:`rdx.method.kmeans`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import RDXInputError
from . import arrays as A
from .arrays import Array
from .geometry import row_sums_float64
from .kmeans import kmeans

if TYPE_CHECKING:  # imported when used: scipy.sparse.linalg is slow to load
    import scipy.sparse.linalg


EIGEN_SOLVERS = ("auto", "dense", "arpack")
#: Up to this n ``auto`` uses the dense solver; above, Lanczos. (Measured on 2 CPU cores:
#: at n = 3000 dense takes 1.4 s, Lanczos 0.12 s, with identical partitions.)
DENSE_MAX_N = 500
#: Lanczos tolerance. scikit-learn asks for machine precision; 1e-4 needs 15–30 % fewer
#: products and gave partitions identical to a machine-precision solve (ARI = 1) on the
#: benchmark data (n = 10k, both directions) and the tests' fixtures.
ARPACK_TOL = 1e-4


def degree_scaling(S: Array) -> Array:
    """``D^{-1/2}`` (float64) of symmetric affinity ``S``, whose degrees must be positive."""
    deg = row_sums_float64(S)
    if bool((deg <= 0).any()):
        raise RDXInputError("the affinity graph has an isolated image (zero degree); "
                            "spectral clustering is undefined.")
    return 1.0 / (deg ** 0.5)


def top_eigenvectors(S: Array, k: int, solver: str, v0: np.ndarray,
                     scale: Array | None = None) -> np.ndarray:
    """Top-``k`` eigenvectors (columns, float64, eigenvalues descending) of
    ``M = diag(scale) · S · diag(scale)`` for symmetric ``S`` (``scale`` None: ``M = S``).

    The iterative solver never forms ``M``: each product scales the vectors instead, which
    saves two passes over the n×n matrix. ``v0`` is the Lanczos start vector.
    """
    n = S.shape[0]
    if solver == "auto":
        solver = "dense" if n <= DENSE_MAX_N else "arpack"
    if solver == "dense":
        if scale is None:
            M = S
        else:
            sc = A.astype(scale, "float32")
            M = S * sc[:, None]
            M *= sc[None, :]
        if A.on_gpu(M):
            import torch

            _, vecs = torch.linalg.eigh(M)
            return vecs[:, -k:].flip(1).double().cpu().numpy()
        import scipy.linalg

        _, vecs = scipy.linalg.eigh(A.host(M), subset_by_index=[n - k, n - 1], driver="evr",
                                    check_finite=False)
        return vecs[:, ::-1].astype(np.float64)
    if solver == "arpack":
        import scipy.sparse.linalg

        _, vecs = scipy.sparse.linalg.eigsh(_operator(S, scale), k=k, which="LA", v0=v0,
                                            tol=ARPACK_TOL)
        return vecs[:, ::-1].astype(np.float64)
    raise RDXInputError(f"unknown eigen_solver {solver!r}; use one of {EIGEN_SOLVERS}")


def symmetric_product(M: np.ndarray):
    """``v ↦ M v`` for an exactly symmetric numpy matrix, reading only one triangle.

    BLAS ``?symv`` on the upper triangle of ``Mᵀ`` (Fortran order, no copy for a C-ordered
    ``M``) streams half of the n×n matrix per product — about 1.7× faster than ``?gemv``
    on the whole matrix at n = 10k (Lanczos is bound by these products) and the same linear
    map for an exactly symmetric ``M`` (summed in another order: results agree to float
    rounding). Falls back to ``M @ v`` for other dtypes or layouts.
    """
    if M.dtype in (np.float32, np.float64) and M.flags.c_contiguous:
        from scipy.linalg.blas import dsymv, ssymv

        symv = ssymv if M.dtype == np.float32 else dsymv
        Mt = M.T   # Fortran-ordered view: f2py passes it to BLAS without a copy

        def product(v: np.ndarray) -> np.ndarray:
            return symv(1.0, Mt, np.ascontiguousarray(v, dtype=M.dtype), lower=0)
        return product
    return lambda v: M @ np.asarray(v, dtype=M.dtype)


def _operator(S: Array, scale: Array | None = None
              ) -> "scipy.sparse.linalg.LinearOperator":
    """``diag(scale) S diag(scale)`` as a float64 operator; products in S's precision.

    On the CPU each product is one BLAS ``symv`` over one triangle of the symmetric ``S``
    (:func:`symmetric_product`; 20 vs 35 ms for ``sgemv`` at n = 10k on 2 cores): Lanczos
    is bound by those single-vector products. On CUDA the product runs in torch.
    """
    import scipy.sparse.linalg

    n = S.shape[0]
    sc = None if scale is None else A.astype(scale, "float64")[:, None]   # S's kind, device
    if not A.on_gpu(S):
        product = symmetric_product(A.host(S))
        scn = None if sc is None else A.host(sc)

        def matmat(V: np.ndarray) -> np.ndarray:
            V = np.asarray(V, dtype=np.float64).reshape(n, -1)
            if scn is not None:
                V = V * scn
            out = np.empty_like(V)
            for j in range(V.shape[1]):
                out[:, j] = product(V[:, j])
            if scn is not None:
                out *= scn
            return out
    else:
        import torch

        def matmat(V: np.ndarray) -> np.ndarray:
            V = torch.from_numpy(np.asarray(V, dtype=np.float64).reshape(n, -1)).to(S.device)
            if sc is not None:
                V = V * sc
            out = (S @ V.to(S.dtype)).double()
            if sc is not None:
                out = out * sc
            return out.cpu().numpy()

    return scipy.sparse.linalg.LinearOperator((n, n), matvec=matmat, matmat=matmat,
                                              dtype=np.float64)


def sign_flip(vectors: np.ndarray) -> np.ndarray:
    """scikit-learn's deterministic sign: the largest-|.| entry of each column is positive."""
    idx = np.abs(vectors).argmax(axis=0)
    signs = np.sign(vectors[idx, np.arange(vectors.shape[1])])
    signs[signs == 0] = 1.0
    return vectors * signs


def spectral_embedding(S: Array, n_components: int, *,
                       random_state: np.random.RandomState,
                       eigen_solver: str = "auto") -> np.ndarray:
    """n×K spectral embedding of symmetric affinity ``S`` (left unchanged).

    Draws the Lanczos start vector from ``random_state`` exactly as scikit-learn does
    (always, so that the k-means that follows sees the same random stream).
    """
    v0 = random_state.uniform(-1, 1, S.shape[0])
    inv_sqrt_deg = degree_scaling(S)
    vecs = top_eigenvectors(S, n_components, eigen_solver, v0, scale=inv_sqrt_deg)
    return sign_flip(vecs * A.host(inv_sqrt_deg)[:, None])


def spectral_clustering(S: Array, n_clusters: int, *, random_state: int = 0,
                        n_init: int = 10, eigen_solver: str = "auto") -> np.ndarray:
    """Cluster labels (0..n_clusters-1) of symmetric affinity ``S`` (left unchanged).

    One ``RandomState(random_state)`` feeds the start vector and then k-means, as in
    ``sklearn.cluster.SpectralClustering(random_state=random_state)``.
    """
    rs = np.random.RandomState(random_state)
    emb = spectral_embedding(S, n_clusters, random_state=rs, eigen_solver=eigen_solver)
    return kmeans(emb, n_clusters, n_init=n_init, random_state=rs)

