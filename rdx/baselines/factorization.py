"""Matrix-factorisation baselines: PCA, NMF and Convex NMF.

Each factorises one representation ``X`` (n×d) as ``X ≈ U V`` with coefficients ``U``
(n×k, stored as ``codes_``) and a basis ``V`` (k×d, ``dictionary_``). Concept ``i`` is shown
as the ``grid_size`` images with the largest ``U[:, i]`` (descending; an image may appear in
several grids); ``k`` is ``n_explanations``, so every component is shown.

Fixed relative to the original code: the Convex NMF iteration count that is
configured is the one that runs (the original passed ``niter=100`` to a constructor that
ignored it and ran PyMF's default of 10 iterations).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.decomposition import NMF, PCA
from tqdm.auto import tqdm

from .. import validation as V
from ..backend import (
    available_memory_bytes,
    check_device,
    format_bytes,
    resolve_device,
)
from ..errors import RDXInputError
from .base import ConceptExtractor, check_n_concepts
from .kmeans import check_k_for_clustering, seeded_kmeans

NMF_INITS = ("nndsvda", "nndsvd", "nndsvdar", "random")
_HISTORY_LEN = 101  # objective values kept in info_ (initial + up to 100 iterations)


def _check_rank(k: Any, n: int, d: int, method: str) -> int:
    """A rank-k factorisation initialised from an SVD needs ``k <= min(n, d)``."""
    return check_n_concepts(
        k, n, limit=min(n, d),
        why=f" for {method}: X has {n} images × {d} features, so it has at most "
            f"min(n, d) = {min(n, d)} components")


def _gram_times(K: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """``K @ M`` for a symmetric n×n ``K`` and a thin ``M`` (n×k), computed as ``(Mᵀ K)ᵀ``,
    which streams ``K`` row-major: about 3× faster on CPU than ``K @ M`` for small k."""
    return (M.T.contiguous() @ K).T


def cnmf_c_parts(KpG: torch.Tensor, KmG: torch.Tensor, C: torch.Tensor,
                 G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Numerator and denominator of the update of ``C = Hᵀ`` (given ``K⁺G``, ``K⁻G``).

    ``den − num = ½ ∂f/∂C`` for ``f = ‖D − D G Cᵀ‖²_F``; both are non-negative, so
    ``C ← C ⊙ √(num/den)`` keeps ``C ≥ 0`` and moves against the gradient.
    """
    return KpG + C @ (G.T @ KmG), KmG + C @ (G.T @ KpG)


def cnmf_g_parts(KpC: torch.Tensor, KmC: torch.Tensor, KpG: torch.Tensor, KmG: torch.Tensor,
                 C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Numerator and denominator of the update of ``G``: ``den − num = ½ ∂f/∂G``."""
    CtC = C.T @ C
    return KpC + KmG @ CtC, KmC + KpG @ CtC


def cnmf_step(Kp: torch.Tensor, Km: torch.Tensor, C: torch.Tensor, G: torch.Tensor,
              eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One Convex NMF iteration: update ``C``, then ``G`` with the new ``C``."""
    KpG, KmG = _gram_times(Kp, G), _gram_times(Km, G)
    num, den = cnmf_c_parts(KpG, KmG, C, G)
    C = C * torch.sqrt((num + eps) / (den + eps))
    # K±G are still those of the current G: only C has changed since they were computed.
    num, den = cnmf_g_parts(_gram_times(Kp, C), _gram_times(Km, C), KpG, KmG, C)
    G = G * torch.sqrt((num + eps) / (den + eps))
    return C, G


def _downsample(history: list[float], size: int = _HISTORY_LEN) -> tuple[list[float], list[int]]:
    """At most ``size`` evenly spaced entries (first and last kept) and their indices."""
    idx = np.unique(np.linspace(0, len(history) - 1, min(size, len(history))).round()
                    .astype(int)).tolist()
    return [float(history[i]) for i in idx], idx


class PCAConcepts(ConceptExtractor):
    """Principal components as concepts.

    scikit-learn ``PCA(n_components=k, random_state=seed)``; the grid of component ``i`` is
    the ``grid_size`` images with the largest **positive** score (not the largest
    magnitude), as in the paper.

    The sign of a principal component is arbitrary and scikit-learn has changed its
    convention across versions; since the grid depends on it, each component is oriented
    here so that its largest-magnitude loading is positive, which makes grids independent
    of the scikit-learn version.

    Parameters
    ----------
    n_explanations : int, default 3
        Number of components ``k`` (at most ``min(n, d)``).
    grid_size : int, default 9
        Images per explanation grid.
    random_state : int, default 42
        Seed of the randomized SVD scikit-learn uses for large inputs.

    Attributes
    ----------
    codes_ : ndarray (n, k) float32
        Component scores (signed) of every image.
    concepts_ : list[int]
        ``[0, ..., k-1]`` in order of explained variance.
    dictionary_ : ndarray (k, d) float32
        Components (unit-norm loadings).
    info_ : dict
        ``explained_variance_ratio`` (per component) and its ``_total``.
    """

    def __init__(self, n_explanations: int = 3, *, grid_size: int = 9,
                 random_state: int = 42) -> None:
        self.n_explanations = n_explanations
        self.grid_size = grid_size
        self.random_state = random_state

    def _fit(self, X: np.ndarray) -> None:
        n, d = X.shape
        k = _check_rank(self.n_explanations, n, d, "PCA")
        pca = PCA(n_components=k, random_state=int(self.random_state)).fit(X)
        comps = pca.components_.astype(np.float32)
        sign = np.sign(comps[np.arange(k), np.abs(comps).argmax(axis=1)])
        sign[sign == 0] = 1.0
        comps = comps * sign[:, None]
        # Scores from the oriented components (transform() would use the unflipped ones).
        self.codes_ = ((X - pca.mean_.astype(np.float32)) @ comps.T).astype(np.float32)
        self.concepts_ = list(range(k))
        self.dictionary_ = comps
        ratio = pca.explained_variance_ratio_
        self.info_ = {"explained_variance_ratio": [float(r) for r in ratio],
                      "explained_variance_ratio_total": float(ratio.sum())}


class NMFConcepts(ConceptExtractor):
    """Non-negative matrix factorisation ``X ≈ U V`` (``nmf``).

    scikit-learn ``NMF(n_components=k, init=init, max_iter=max_iter, random_state=seed)``
    (coordinate-descent solver); ``U = transform(X)``, ``V = components_``. Requires
    non-negative features (e.g. post-ReLU activations); for signed features use
    :class:`ConvexNMFConcepts`.

    Parameters
    ----------
    n_explanations : int, default 3
        Number of components ``k`` (at most ``min(n, d)`` with the SVD-based inits).
    max_iter : int, default 200
        Maximum solver iterations (scikit-learn's default).
    init : {"nndsvda", "nndsvd", "nndsvdar", "random"}, default "nndsvda"
        Initialisation (scikit-learn's default in recent versions).
    grid_size : int, default 9
        Images per explanation grid.
    random_state : int, default 42
        Seed of the initialisation.

    Attributes
    ----------
    codes_ : ndarray (n, k) float32
        ``transform(X)``: non-negative coefficients of every image.
    concepts_ : list[int]
        ``[0, ..., k-1]``.
    dictionary_ : ndarray (k, d) float32
        ``components_``.
    info_ : dict
        ``reconstruction_error`` (Frobenius norm of ``X − U V`` with the shown codes),
        ``relative_error`` (divided by ``‖X‖_F``), ``n_iter``, ``converged`` (stopped before
        ``max_iter``).
    """

    def __init__(self, n_explanations: int = 3, *, max_iter: int = 200, init: str = "nndsvda",
                 grid_size: int = 9, random_state: int = 42) -> None:
        self.n_explanations = n_explanations
        self.max_iter = max_iter
        self.init = init
        self.grid_size = grid_size
        self.random_state = random_state

    def _check_params(self, n: int | None) -> None:
        super()._check_params(n)
        V.check_int(self.max_iter, "max_iter", minimum=1)
        V.check_choice(self.init, "init", NMF_INITS)

    def _fit(self, X: np.ndarray) -> None:
        n, d = X.shape
        neg = int((X < 0).sum())
        if neg:
            raise RDXInputError(
                f"NMF needs non-negative features, but X has {neg} negative values "
                f"({100 * neg / X.size:.1f}% of its {X.size} entries; minimum "
                f"{float(X.min()):.4g}). Use 'cnmf' (Convex NMF accepts signed features) or "
                "extract features from a post-ReLU layer.")
        if self.init == "random":  # no SVD: any k up to n is a valid (if redundant) rank
            k = check_n_concepts(self.n_explanations, n)
        else:
            k = _check_rank(self.n_explanations, n, d, f"NMF with init={self.init!r}")
        model = NMF(n_components=k, init=self.init, max_iter=int(self.max_iter),
                    random_state=int(self.random_state)).fit(X)
        codes = model.transform(X).astype(np.float32)
        comps = model.components_.astype(np.float32)
        resid = X.astype(np.float64) - codes.astype(np.float64) @ comps.astype(np.float64)
        err = float(np.linalg.norm(resid))
        self.codes_ = codes
        self.concepts_ = list(range(k))
        self.dictionary_ = comps
        self.info_ = {
            "reconstruction_error": err,
            "relative_error": err / float(np.linalg.norm(X.astype(np.float64))),
            "n_iter": int(model.n_iter_),
            "converged": bool(model.n_iter_ < int(self.max_iter)),
        }


class ConvexNMFConcepts(ConceptExtractor):
    r"""Convex NMF (Ding, Li & Jordan, TPAMI 2010) in torch; signed features allowed.

    With the images as columns, ``D = Xᵀ`` (d×n), Convex NMF finds ``G ≥ 0`` (n×k) and
    ``H ≥ 0`` (k×n) with ``D ≈ D G H``: the basis ``W = D G`` (d×k) is a non-negative
    combination of images, so concepts stay in the span of the data even when the
    features are signed. Shown codes are ``U = Hᵀ`` (n×k), the dictionary ``V = Wᵀ``.

    **Objective** ``f = ‖D − D G H‖²_F``, evaluated directly as ‖X − Hᵀ(GᵀX)‖²_F (O(ndk),
    no cancellation, unlike the expanded Gram form).

    **Updates.** With the Gram matrix ``K = DᵀD = XXᵀ`` (n×n) split into
    ``K⁺ = (|K| + K)/2`` and ``K⁻ = (|K| − K)/2``, write ``C = Hᵀ``. The gradient of ``f`` is
    ``∂f/∂C = 2(−KG + C GᵀKG)`` and ``∂f/∂G = 2(−KC + K G CᵀC)``; splitting each into its
    positive and negative parts gives the paper's multiplicative rules (its ``W`` is our
    ``G``, its ``G`` our ``C``), applied alternately (each step does not increase ``f``)::

        C ← C ⊙ sqrt( (K⁺G + C·(GᵀK⁻G)) / (K⁻G + C·(GᵀK⁺G)) )
        G ← G ⊙ sqrt( (K⁺C + K⁻G·(CᵀC)) / (K⁻C + K⁺G·(CᵀC)) )

    A tiny ε (1e-10 × mean squared image norm) is added to numerator and denominator so
    that entries whose both parts vanish stay unchanged instead of becoming 0/0.

    **Initialisation** (as in PyMF / the paper): k-means (scikit-learn, seeded, one
    k-means++ run) gives one-hot assignments ``E`` (n×k) with cluster sizes ``n_j``;
    ``H = Eᵀ + 0.2`` and ``G = (E + 0.01) / n_j`` column-wise, so ``W`` starts near the
    cluster means.

    **Iterations.** Exactly ``max_iter`` iterations run unless the relative change of the
    objective between two iterations, ``|f_{t−1} − f_t| / f_{t−1}``, falls below ``tol``
    (``tol=0`` always runs ``max_iter``). The original code silently ran 10.

    **Memory.** ``K⁺`` and ``K⁻`` are dense float32 n×n: ``8·n²`` bytes (0.2 GB at n=5000,
    3.2 GB at n=20 000) on the compute device, plus O(n·d) for the data; each iteration costs
    four n×n × n×k products. Fitting refuses, with an :class:`~rdx.errors.RDXInputError`,
    when this does not fit in the device's available memory (``RDX_MEMORY_LIMIT_GB`` caps
    the CPU budget).

    Parameters
    ----------
    n_explanations : int, default 3
        Number of concepts ``k`` (at most the number of distinct images).
    max_iter : int, default 100
        Maximum multiplicative-update iterations (the paper's configured ``niter=100``).
    tol : float, default 1e-6
        Stop when the relative objective change is below ``tol``; 0 disables early stopping.
    grid_size : int, default 9
        Images per explanation grid.
    random_state : int, default 42
        Seed of the k-means initialisation.
    device : str, default "auto"
        ``"auto"`` (CUDA if available), ``"cpu"`` or ``"cuda[:N]"``.
    verbose : int, default 0
        Show a progress bar over iterations when > 0.

    Attributes
    ----------
    codes_ : ndarray (n, k) float32
        ``Hᵀ``: non-negative membership of every image in every concept.
    concepts_ : list[int]
        ``[0, ..., k-1]``.
    dictionary_ : ndarray (k, d) float32
        ``Wᵀ = Gᵀ X``.
    G_ : ndarray (n, k) float32
        Convex weights of the images forming each basis vector.
    n_iter_ : int
        Iterations run.
    info_ : dict
        ``n_iter``, ``converged``, ``objective`` (final ``f``), ``reconstruction_error``
        (``√f``), ``relative_error`` (``√f / ‖X‖_F``), ``objective_history`` (``f`` after
        initialisation and after each iteration, at most 101 evenly spaced values, at
        iterations ``objective_history_iter``), ``init_cluster_sizes``.
    """

    def __init__(self, n_explanations: int = 3, *, max_iter: int = 100, tol: float = 1e-6,
                 grid_size: int = 9, random_state: int = 42, device: str = "auto",
                 verbose: int = 0) -> None:
        self.n_explanations = n_explanations
        self.max_iter = max_iter
        self.tol = tol
        self.grid_size = grid_size
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    def _check_params(self, n: int | None) -> None:
        super()._check_params(n)
        V.check_int(self.max_iter, "max_iter", minimum=1)
        tol = V.check_number(self.tol, "tol", what="a non-negative finite number")
        if tol < 0:
            raise RDXInputError(f"tol must be a non-negative finite number, got {self.tol!r}.")
        V.check_int(self.verbose, "verbose", minimum=0)
        check_device(self.device, usable=n is not None)

    @staticmethod
    def memory_bytes(n: int, d: int, k: int) -> int:
        """Peak device memory of a fit (bytes, +10%): K⁺ and K⁻ (n×n float32), X, the n×d
        residual of the objective and its float64 reduction, and the n×k factors."""
        return int(4 * (2 * n * n + 4 * n * d + 12 * n * k) * 1.1)

    def _fit(self, X: np.ndarray) -> None:
        n, d = X.shape
        k = check_k_for_clustering(self.n_explanations, X, "Convex NMF")
        device = resolve_device(self.device)
        need, avail = self.memory_bytes(n, d, k), available_memory_bytes(device)
        if need > avail:
            n_max = int(np.sqrt(max(avail / 1.1 / 4 - 4 * n * d, 0) / 2))
            raise RDXInputError(
                f"Convex NMF needs dense n×n Gram matrices: with n={n} images that is about "
                f"{format_bytes(need)} on {device}, but only {format_bytes(avail)} is available. "
                f"Use fewer images (roughly n <= {n_max}), a device with more memory, or "
                "'nmf'/'kmeans', which scale linearly in n.")

        # Initialisation from a seeded k-means (PyMF used Python's `random`).
        labels = seeded_kmeans(X, k, 1, self.random_state).labels_
        E = np.zeros((n, k), dtype=np.float32)
        E[np.arange(n), labels] = 1.0
        sizes = E.sum(axis=0)
        C0 = E + 0.2                                  # Hᵀ
        G0 = (E + 0.01) / np.maximum(sizes, 1.0)      # column j scaled by 1/n_j

        Xt = torch.from_numpy(X).to(device)
        C = torch.from_numpy(C0).to(device)
        G = torch.from_numpy(G0).to(device)
        Kp = Xt @ Xt.T
        sq_norm_mean = float(Kp.diagonal().mean())
        Km = (-Kp).clamp_(min=0.0)
        Kp.clamp_(min=0.0)
        eps = 1e-10 * max(sq_norm_mean, float(torch.finfo(torch.float32).tiny))

        def objective() -> float:
            resid = Xt - C @ (G.T @ Xt)
            return float(torch.linalg.vector_norm(resid, dtype=torch.float64) ** 2)

        history = [objective()]
        tol = float(self.tol)
        converged = False
        it = 0
        bar = tqdm(range(int(self.max_iter)), desc="cnmf", disable=not self.verbose)
        for it in bar:
            C, G = cnmf_step(Kp, Km, C, G, eps)
            history.append(objective())
            prev, cur = history[-2], history[-1]
            if self.verbose:
                bar.set_postfix(objective=f"{cur:.4g}", refresh=False)
            if abs(prev - cur) < tol * max(prev, np.finfo(np.float64).tiny):
                converged = True
                break
        bar.close()
        n_iter = it + 1
        del Kp, Km

        self.G_ = G.cpu().numpy().astype(np.float32)
        self.codes_ = C.cpu().numpy().astype(np.float32)
        self.dictionary_ = (G.T @ Xt).cpu().numpy().astype(np.float32)
        self.concepts_ = list(range(k))
        self.n_iter_ = n_iter
        f = history[-1]
        norm_x = float(np.linalg.norm(X.astype(np.float64)))
        hist, hist_iter = _downsample(history)
        self.info_ = {
            "n_iter": n_iter,
            "converged": converged,
            "objective": f,
            "reconstruction_error": float(np.sqrt(f)),
            "relative_error": float(np.sqrt(f)) / norm_x,
            "objective_history": hist,
            "objective_history_iter": hist_iter,
            "init_cluster_sizes": sizes.astype(int).tolist(),
        }
