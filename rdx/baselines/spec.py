"""SPEC: Spectral Pairwise Embedding Comparison (Jalali, Dibaei Nia & Farnia, ICML 2025).

Both representations define a kernel on the same n images. With normalised kernel
matrices ``K_A/n`` and ``K_B/n``, the *difference kernel*

    M = K_A/n − η·K_B/n

has eigenvectors that are soft indicator vectors of image groups: a large positive
eigenvalue marks a group that A's kernel ties together much more than B's (A clusters it,
B does not: ``a_over_b``); the eigenvectors of ``K_B/n − η·K_A/n`` give ``b_over_a``
(with η = 1 that is the same matrix negated, so its most negative eigenvalues).

Two solvers give the same non-zero spectrum:

* ``"kernel"`` — the n×n matrix M, dense ``eigh``; exact, O(n²) memory, O(n³) time.
* ``"covariance"`` — linear in n. With explicit feature maps Φ_A (n×D_A), Φ_B (n×D_B)
  (random Fourier features for the RBF kernel, the features themselves for linear/cosine),
  ``M = U S Uᵀ`` with ``U = [Φ_A, Φ_B]/√n`` and ``S = diag(I, −η·I)``. The Gram matrix of
  U is the block matrix of feature covariances ``G = UᵀU = [[C_AA, C_AB], [C_BA, C_BB]]``
  (each ``Φᵀ Φ / n``), accumulated over row chunks. Writing ``G = V diag(s) Vᵀ`` gives the
  thin SVD ``U = Q diag(√s) Vᵀ`` with ``Q = U V diag(1/√s)``, hence
  ``M = Q T Qᵀ`` with the small symmetric matrix ``T = diag(√s) Vᵀ S V diag(√s)``:
  M's non-zero eigenvalues are T's, and the n-dim eigenvectors are ``Q w = U V diag(1/√s) w``.
  Exact for linear/cosine, a Monte-Carlo approximation of the RBF kernel otherwise.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import validation as V
from ..backend import available_memory_bytes, format_bytes, resolve_device
from ..errors import RDXInputError
from .base import PairExplainer, check_n_concepts, top_images

KERNELS = ("rbf", "linear", "cosine")
SOLVERS = ("auto", "kernel", "covariance")
#: images used to estimate the median pairwise distance (evenly spaced, deterministic)
MEDIAN_SAMPLE = 1000
#: bytes of feature rows materialised at once by the covariance solver
_CHUNK_BYTES = 128 * 2**20


def median_distance(X: np.ndarray | torch.Tensor, max_points: int = MEDIAN_SAMPLE) -> float:
    """Median Euclidean distance between distinct images (the RBF bandwidth heuristic).

    Uses at most ``max_points`` evenly spaced images so the cost stays bounded; falls back to
    the mean of the non-zero distances when more than half the pairs are duplicates.
    """
    X = torch.as_tensor(X, dtype=torch.float32)
    n = X.shape[0]
    idx = torch.from_numpy(np.unique(np.linspace(0, n - 1, min(n, max_points)).astype(np.int64)))
    Xs = X[idx].double()  # float64: cdist by the expansion loses small distances in float32
    D = torch.cdist(Xs, Xs)
    iu = torch.triu_indices(len(idx), len(idx), offset=1)
    d = D[iu[0], iu[1]]
    med = float(np.median(d.cpu().numpy())) if d.numel() else 0.0
    if med <= 0.0:
        pos = d[d > 0]
        med = float(pos.mean()) if pos.numel() else 1.0
    return med


def spec_directions(M_eigvals: torch.Tensor, M_eigvecs: torch.Tensor, k: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest eigenpairs (descending), from an ascending ``eigh`` output."""
    order = torch.argsort(M_eigvals, descending=True, stable=True)[:k]
    return M_eigvals[order], M_eigvecs[:, order]


def canonical_sign(V: np.ndarray) -> np.ndarray:
    """Flip each column so that its *dominant* side is positive.

    The dominant side is the sign carrying more of the eigenvector's energy (Σ v_i²); on an
    exact tie, the sign of the entry with the largest |v| (lowest index first). An
    eigenvector's sign is arbitrary, and a group is read off one side of it, so this makes
    the output independent of the solver and the LAPACK build.
    """
    V = np.array(V, dtype=np.float64, copy=True)
    for j in range(V.shape[1]):
        v = V[:, j]
        pos, neg = float((v[v > 0] ** 2).sum()), float((v[v < 0] ** 2).sum())
        flip = neg > pos if pos != neg else v[int(np.argmax(np.abs(v)))] < 0
        if flip:
            V[:, j] = -v
    return V


class SPEC(PairExplainer):
    """Spectral Pairwise Embedding Comparison: eigenvectors of the difference kernel.

    Parameters
    ----------
    n_explanations
        Eigenvectors shown per direction (k).
    kernel
        ``"rbf"`` (Gaussian, ``exp(−‖x−y‖²/(2σ²))``, the paper's choice), ``"cosine"``
        (``x·y/(‖x‖‖y‖)``) or ``"linear"`` (``x·y``, with each representation divided by
        its root-mean-square norm so that ``tr(K/n) = 1`` like the other two kernels — this
        keeps η meaningful and the method invariant to a model's overall scale).
    sigma
        RBF bandwidth: ``"median"`` (default: per model, the median pairwise Euclidean
        distance of that model's images, on ≤1000 evenly spaced images — a scale-free
        choice, as the two models' feature scales are unrelated), one positive number for
        both models, or a pair ``(σ_A, σ_B)``. Ignored by the other kernels.
    eta
        Weight η of the subtracted kernel (paper default 1).
    solver
        ``"kernel"`` (exact n×n eigendecomposition, O(n³) time, O(n²) memory),
        ``"covariance"`` (linear in n: O(n·D² + D³) time for D = D_A + D_B feature
        dimensions; exact for linear/cosine, random Fourier features for the RBF kernel) or
        ``"auto"``: the smaller of the two problems, i.e. ``"kernel"`` when n ≤ D (and the
        n×n matrices fit in memory), else ``"covariance"``. With the RBF defaults D = 4096,
        so up to 4096 images the exact kernel is used.
    n_features
        Random Fourier frequencies per model for the RBF covariance solver (the feature map
        has ``2·n_features`` dimensions: cosine and sine of each frequency; the kernel's
        entries are then accurate to about ``1/√(2·n_features)``).
    grid_size
        Images per explanation grid.
    random_state
        Seed (random Fourier frequencies).
    device
        ``"auto"`` (CUDA when visible), ``"cpu"`` or ``"cuda"``.

    Attributes
    ----------
    directions_ : dict
        ``{"a_over_b": [...], "b_over_a": [...]}``: explanation j is eigenvector j (concept
        id j of the direction's codes). Its grid is the ``grid_size`` images with the largest
        entries after sign canonicalisation (see :func:`canonical_sign`), i.e. the largest
        |v_i| on the eigenvector's dominant sign side.
    codes_ : dict
        ``{"a_over_b": n×k, "b_over_a": n×k}`` float32 unit-norm eigenvectors (sign
        canonicalised), column j = explanation j.
    eigenvalues_ : dict
        The k eigenvalues per direction (of ``K_A/n − ηK_B/n``, resp. ``K_B/n − ηK_A/n``),
        descending; positive = a group the first model clusters more.
    info_ : dict
        Solver, kernel, σ used per model, eigenvalues, feature dimensions.
    arrays_ : dict
        ``a_codes``, ``b_codes`` (n×k), ``a_eigenvalues``, ``b_eigenvalues`` (k).
    """

    def __init__(self, n_explanations: int = 3, *, kernel: str = "rbf",
                 sigma: float | str | tuple[float, float] = "median", eta: float = 1.0,
                 solver: str = "auto", n_features: int = 1024, grid_size: int = 9,
                 random_state: int = 42, device: str = "auto") -> None:
        self.n_explanations = n_explanations
        self.kernel = kernel
        self.sigma = sigma
        self.eta = eta
        self.solver = solver
        self.n_features = n_features
        self.grid_size = grid_size
        self.random_state = random_state
        self.device = device

    # ------------------------------------------------------------------ checks
    def _check_params(self, n: int | None) -> None:
        super()._check_params(n)
        V.check_choice(self.kernel, "kernel", KERNELS)
        V.check_choice(self.solver, "solver", SOLVERS)
        V.check_positive(self.eta, "eta")
        V.check_int(self.n_features, "n_features", minimum=1)
        self._sigmas(None)
        if self.device is not None and str(self.device) != "auto" and \
                str(self.device).split(":")[0] not in ("cpu", "cuda"):
            raise RDXInputError(f"device={self.device!r} is not supported; use 'auto', 'cpu' "
                                "or 'cuda'.")

    def _sigmas(self, AB: tuple[np.ndarray, np.ndarray] | None) -> tuple[float, float] | None:
        """(σ_A, σ_B) from the ``sigma`` parameter; with AB None only validates it."""
        s = self.sigma
        if isinstance(s, str):
            if s != "median":
                raise RDXInputError(f"sigma={s!r}: use 'median', a positive number, or a pair "
                                    "(sigma_A, sigma_B).")
            return None if AB is None else (median_distance(AB[0]), median_distance(AB[1]))
        if isinstance(s, (list, tuple)):
            if len(s) != 2:
                raise RDXInputError(f"sigma={s!r}: a pair (sigma_A, sigma_B) needs two values.")
            pair = (V.check_positive(s[0], "sigma[0]"), V.check_positive(s[1], "sigma[1]"))
        else:
            v = V.check_positive(s, "sigma")
            pair = (v, v)
        return pair

    # ------------------------------------------------------------------ features
    def _feature_maps(self, A: torch.Tensor, B: torch.Tensor, sigmas: tuple[float, float] | None
                      ) -> list:
        """Per model, a function mapping a row block to its explicit feature block."""
        maps = []
        if self.kernel == "rbf":
            # ω ~ N(0, σ⁻² I): E[cos(ω·(x−y))] = exp(−‖x−y‖²/(2σ²)). Frequencies are drawn on
            # the CPU from a seeded generator so that they do not depend on the device.
            g = torch.Generator().manual_seed(int(self.random_state))
            F = int(self.n_features)
            for X, sg in zip((A, B), sigmas):
                W = (torch.randn(X.shape[1], F, generator=g, dtype=torch.float32) / sg).to(X.device)
                scale = 1.0 / np.sqrt(F)

                def fmap(x: torch.Tensor, W=W, scale=scale) -> torch.Tensor:
                    z = x @ W
                    return torch.cat([torch.cos(z), torch.sin(z)], dim=1) * scale
                maps.append(fmap)
        else:
            for X in (A, B):
                if self.kernel == "linear":
                    rms = float(torch.sqrt((X.double() ** 2).sum(1).mean()))
                    maps.append(lambda x, r=rms: x / r)
                else:  # cosine; an all-zero image has no direction: its features stay zero
                    maps.append(lambda x: x / x.norm(dim=1, keepdim=True).clamp_min(1e-12))
        return maps

    def _kernel_matrix(self, X: torch.Tensor, sg: float | None, fmap) -> torch.Tensor:
        if self.kernel == "rbf":
            Xd = X.double()  # float64 distances: float32 expansion cancels for close points
            D2 = torch.cdist(Xd, Xd).pow_(2)
            return torch.exp(-D2 / (2.0 * sg * sg)).float()
        F = fmap(X)
        return F @ F.T

    # ------------------------------------------------------------------ solvers
    def _solve_kernel(self, A: torch.Tensor, B: torch.Tensor,
                      sigmas: tuple[float, float] | None, maps: list, k: int, eta: float,
                      dev: torch.device) -> tuple[dict, dict]:
        n = A.shape[0]
        need = 4 * n * n * 4
        have = available_memory_bytes(dev)
        if need > have:
            raise RDXInputError(
                f"solver='kernel' needs about {format_bytes(need)} for {n} images but only "
                f"{format_bytes(have)} is available; use solver='covariance' (linear in n).")
        KA = self._kernel_matrix(A, None if sigmas is None else sigmas[0], maps[0])
        KB = self._kernel_matrix(B, None if sigmas is None else sigmas[1], maps[1])
        out = {}
        if self.kernel != "rbf":
            # as in the covariance solver: the explicit features span at most d_A + d_B
            # directions, and eigenvectors beyond them are round-off, not differences (the
            # exact RBF kernel has full rank); same relative threshold on U's squared
            # singular values as that solver's on the eigenvalues of UᵀU
            sv = torch.linalg.svdvals(torch.cat([maps[0](A), maps[1](B)], dim=1).double())
            rank = int((sv.square() > sv.max().square() * 1e-6).sum())
            if k > rank:
                raise RDXInputError(
                    f"n_explanations={k} is larger than the number of directions the feature "
                    f"maps span ({rank}); use at most {rank} or a richer kernel ('rbf').")
        M = (KA - eta * KB) / n
        lam, vec = torch.linalg.eigh(M)
        out["a_over_b"] = spec_directions(lam, vec, k)
        if eta == 1.0:  # K_B/n − K_A/n = −M: reuse the decomposition
            out["b_over_a"] = spec_directions(-lam, vec, k)
        else:
            lam2, vec2 = torch.linalg.eigh((KB - eta * KA) / n)
            out["b_over_a"] = spec_directions(lam2, vec2, k)
        return out, {}

    def _solve_covariance(self, A: torch.Tensor, B: torch.Tensor, maps: list, k: int,
                          eta: float, dev: torch.device) -> tuple[dict, dict]:
        n = A.shape[0]
        DA = maps[0](A[:1]).shape[1]
        DB = maps[1](B[:1]).shape[1]
        Dt = DA + DB
        rows = max(1, min(n, _CHUNK_BYTES // (4 * Dt)))
        # G = UᵀU, U = [Φ_A, Φ_B]/√n: the block matrix of feature covariances. float32
        # products on the device, accumulated in float64.
        G = torch.zeros(Dt, Dt, dtype=torch.float64, device=dev)
        for s in range(0, n, rows):
            U = torch.cat([maps[0](A[s:s + rows]), maps[1](B[s:s + rows])], dim=1)
            G += (U.T @ U).double()
        G /= n
        sv, Vg = torch.linalg.eigh(G)
        # drop U's null space (e.g. linear features with d > rank); relative threshold well
        # above float32 round-off in G
        keep = sv > sv.max() * 1e-6
        sv, Vg = sv[keep], Vg[:, keep]
        R = Vg * sv.sqrt()  # U = Q Rᵀ with Q = U Vg diag(1/√s) orthonormal
        r = R.shape[1]
        if k > r:
            raise RDXInputError(
                f"n_explanations={k} is larger than the number of directions the feature maps "
                f"span ({r}); use at most {r}"
                + (" or a richer kernel ('rbf')." if self.kernel != "rbf" else "."))

        def eig(wa: float, wb: float) -> tuple[torch.Tensor, torch.Tensor]:
            S = torch.cat([torch.full((DA,), wa, dtype=torch.float64, device=dev),
                           torch.full((DB,), wb, dtype=torch.float64, device=dev)])
            T = (R * S[:, None]).T @ R  # diag(√s) Vgᵀ S Vg diag(√s)
            return torch.linalg.eigh((T + T.T) / 2)

        def top(lam: torch.Tensor, W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            lam, W = spec_directions(lam, W, k)
            return lam, Vg @ (W / sv.sqrt()[:, None])  # Dt×k: v = U · this

        lam, W = eig(1.0, -eta)  # K_A/n − η K_B/n
        lam_a, P_a = top(lam, W)
        if eta == 1.0:  # K_B/n − K_A/n is the negation: reuse the decomposition
            lam_b, P_b = top(-lam, W)
        else:
            lam_b, P_b = top(*eig(-eta, 1.0))
        P = torch.cat([P_a, P_b], dim=1).float()
        vecs = torch.empty(n, 2 * k, dtype=torch.float32, device=dev)
        for s in range(0, n, rows):  # second pass: n-dim eigenvectors, chunk by chunk
            U = torch.cat([maps[0](A[s:s + rows]), maps[1](B[s:s + rows])], dim=1)
            vecs[s:s + rows] = U @ P
        vecs /= np.sqrt(n)
        return ({"a_over_b": (lam_a, vecs[:, :k]), "b_over_a": (lam_b, vecs[:, k:])},
                {"rank": int(r), "feature_dims": [int(DA), int(DB)]})

    # ------------------------------------------------------------------ fit
    def _fit(self, A: np.ndarray, B: np.ndarray) -> None:
        n = A.shape[0]
        k = check_n_concepts(self.n_explanations, n)
        dev = resolve_device(self.device)
        eta = float(self.eta)
        solver = self.solver
        if solver == "auto":
            # the smaller eigenproblem: n×n, or (D_A+D_B)×(D_A+D_B) feature covariances
            dims = 4 * int(self.n_features) if self.kernel == "rbf" else A.shape[1] + B.shape[1]
            solver = "kernel" if n <= dims and 16 * n * n <= available_memory_bytes(dev) \
                else "covariance"
        sigmas = self._sigmas((A, B)) if self.kernel == "rbf" else None
        At = torch.from_numpy(A).to(dev)
        Bt = torch.from_numpy(B).to(dev)
        if self.kernel == "rbf":
            # the RBF kernel is shift invariant; centring keeps the float32 phases ω·x of the
            # random Fourier features small (accurate) for features with a large offset
            At = At - At.double().mean(0).float()
            Bt = Bt - Bt.double().mean(0).float()
        maps = self._feature_maps(At, Bt, sigmas)
        if solver == "kernel":
            res, extra = self._solve_kernel(At, Bt, sigmas, maps, k, eta, dev)
        else:
            res, extra = self._solve_covariance(At, Bt, maps, k, eta, dev)

        self.codes_: dict[str, np.ndarray] = {}
        self.eigenvalues_: dict[str, np.ndarray] = {}
        self.directions_: dict[str, list[dict[str, Any]]] = {}
        for direction, (lam, vec) in res.items():
            codes = canonical_sign(vec.double().cpu().numpy()).astype(np.float32)
            # a unit vector: normalise away the float32 round-off of the covariance path
            codes /= np.linalg.norm(codes, axis=0, keepdims=True).clip(1e-30)
            grids = top_images(codes, range(k), int(self.grid_size))
            self.codes_[direction] = codes
            self.eigenvalues_[direction] = lam.double().cpu().numpy()
            self.directions_[direction] = [self._explanation(j, grids[j], codes)
                                           for j in range(k)]
        self.arrays_ = {
            "a_codes": self.codes_["a_over_b"], "b_codes": self.codes_["b_over_a"],
            "a_eigenvalues": self.eigenvalues_["a_over_b"].astype(np.float32),
            "b_eigenvalues": self.eigenvalues_["b_over_a"].astype(np.float32)}
        self.info_ = {
            "solver": solver, "kernel": self.kernel, "eta": eta,
            "sigma": None if sigmas is None else [float(s) for s in sigmas],
            "eigenvalues": {d: [float(x) for x in v] for d, v in self.eigenvalues_.items()},
            "n_positive": {d: int((v > 0).sum()) for d, v in self.eigenvalues_.items()},
            "device": str(dev), **extra}
