"""Null pairs for :mod:`rdx.evaluation.significance`: noisy copies of one representation
that disagree as much as the observed pair does, without a systematic difference.

Each copy is ``X + (τ/√2)·σ_i·g(x_i)/√d`` with ``σ_i`` the image's local scale (distance to
its ``k``-th neighbour) and ``g`` the noise: a smooth random function of the representation
(``"field"``, a Gaussian process drawn with random Fourier features: neighbouring images move
together, as they do between two training seeds) or independent per-image Gaussian noise
(``"local"``). ``τ`` is found by :func:`calibrate_noise` so that the pair's neighbour overlap
equals a target.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import RDXInputError
from ..method.blockwise import balanced_step, in_thread_pool
from ..method.geometry import DistanceRows, centered, centered_with_span
from ..method.geometry import neighbor_sets as _neighbor_sets

#: The noises of the field null and the local null.
NOISES = ("field", "local")
#: Length scale of the field noise in units of the median local scale.
DEFAULT_LENGTHSCALE = 3.0
#: Random Fourier features of one noise field.
FIELD_FEATURES = 256
#: Neighbour that sets each image's noise scale and the size of the neighbour sets whose
#: overlap calibrates the noise.
DEFAULT_K_NEIGHBORS = 10
#: Anchor images on which the neighbour overlap is measured during calibration (the
#: overlap's standard error is about 0.01 at 400 anchors × 10 neighbours).
CALIBRATION_ANCHORS = 400
#: Float64 elements of one row block of :func:`perturb` and of the field's cosines (2 MiB:
#: stays in the CPU cache).
_PERTURB_BLOCK = 2**18


def local_scales(X: np.ndarray, k: int = DEFAULT_K_NEIGHBORS, *,
                 nearest: np.ndarray | None = None,
                 base: np.ndarray | None = None) -> np.ndarray:
    """Distance from every image to its ``k``-th nearest other image (float64, length n).

    The ``k``-th neighbour is found on the float32 distances of the centred features — or
    read from ``nearest`` (n × ≥k: each image's nearest other images in rank order, as a
    dense RDX fit keeps them in ``nearest_``; no second pass over all n² distances) — and
    its distance is then computed exactly, in float64, from ``X``. ``base``: ``centered(X)``
    where the caller has it already.
    """
    X = np.asarray(X)
    n = X.shape[0]
    if not 0 < k < n:
        raise RDXInputError(f"k_neighbors={k} must be between 1 and n_images-1={n - 1}.")
    rows_of = DistanceRows(centered(X) if base is None else base)

    def kth_of(rows: np.ndarray) -> np.ndarray:
        d2 = rows_of(rows)
        d2[np.arange(len(rows)), rows] = -1.0   # the image itself first, even among duplicates
        return np.argpartition(d2, k, axis=1)[:, k]

    kth = None
    if nearest is not None and nearest.ndim == 2 and nearest.shape[0] == n \
            and nearest.shape[1] >= k:
        kth = np.asarray(nearest[:, k - 1], dtype=np.int64)
        # the lists must belong to this X: a sample of rows searched afresh must agree
        rows = np.sort(np.random.default_rng(0).choice(n, size=min(n, 32), replace=False))
        if not np.allclose(_distances(X, rows, kth[rows]), _distances(X, rows, kth_of(rows)),
                           rtol=1e-3, atol=0.0):
            kth = None
    if kth is None:
        kth = np.empty(n, dtype=np.int64)
        step = max(1, 2**22 // n)
        for s in range(0, n, step):
            rows = np.arange(s, min(n, s + step))
            kth[rows] = kth_of(rows)
    return _distances(X, np.arange(n), kth)


def _distances(X: np.ndarray, rows: np.ndarray, partners: np.ndarray) -> np.ndarray:
    """Euclidean distances ``|X[rows[i]] − X[partners[i]]|`` in float64, in blocks."""
    out = np.empty(len(rows), dtype=np.float64)
    step = max(1, 2**22 // max(1, X.shape[1]))
    for s in range(0, len(rows), step):
        diff = np.asarray(X[rows[s:s + step]], dtype=np.float64) - X[partners[s:s + step]]
        out[s:s + step] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return out


def _centering_scale(span: float, Xc: np.ndarray) -> float:
    """The factor ``centered`` divided X by (a power of two; 1 for constant data), from the
    largest absolute centred value before (``span``, :func:`centered_with_span`) and after."""
    peak = float(np.abs(Xc).max()) if Xc.size else 0.0
    return span / peak if peak > 0 else 1.0


def neighbor_overlap(X: np.ndarray, Y: np.ndarray, *, k: int = DEFAULT_K_NEIGHBORS,
                     anchors: np.ndarray | None = None) -> float:
    """Mean fraction of shared ``k``-nearest neighbours of the same image in X and Y.

    1 for representations with identical neighbourhoods, about ``k/n`` for unrelated ones.
    ``anchors`` (default: all images) are the images averaged over.
    """
    n = X.shape[0]
    anchors = np.arange(n) if anchors is None else np.asarray(anchors, dtype=np.int64)
    a = _neighbor_sets(X, anchors, k)
    b = _neighbor_sets(Y, anchors, k)
    shared = (a[:, :, None] == b[:, None, :]).any(axis=2).sum(axis=1)
    return float(shared.mean() / k)


def field_noise(X: np.ndarray, lengthscale: float, rng: np.random.Generator,
                n_features: int = FIELD_FEATURES) -> np.ndarray:
    """One draw of a smooth random function ``g: R^d → R^d`` at the rows of ``X``.

    Every output coordinate is an independent Gaussian process with kernel
    ``exp(−|x − x'|² / (2·lengthscale²))`` and unit variance, approximated with
    ``n_features`` random Fourier features: ``g(x) = √(2/M)·cos(x·W + b)·C`` with
    ``W ~ N(0, 1/lengthscale²)``, ``b ~ U(0, 2π)``, ``C ~ N(0, 1)``. Images closer than the
    length scale get nearly the same displacement.
    """
    n, d = X.shape
    W = rng.standard_normal((d, n_features)) / lengthscale
    b = rng.uniform(0.0, 2.0 * math.pi, n_features)
    C = rng.standard_normal((n_features, d))
    phase = np.asarray(X, dtype=np.float64) @ W
    phase += b
    # numpy's float64 cos is single-threaded: row blocks in the thread pool, in place
    step = balanced_step(n, max(1, _PERTURB_BLOCK // n_features))
    in_thread_pool(lambda s: np.cos(phase[s:s + step], out=phase[s:s + step]),
                   range(0, n, step))
    out = phase @ C
    out *= math.sqrt(2.0 / n_features)
    return out


class NullNoise:
    """Draws the noise of null pairs built from one base representation ``X``.

    Parameters
    ----------
    X : (n, d) array
    kind : {"field", "local"}
    k_neighbors : int
        Neighbour of the local scales σ.
    lengthscale : float
        Of the field, in units of the median σ.
    nearest : (n, K) int array, optional
        Each image's nearest other images in rank order (a dense RDX fit's ``nearest_``),
        which spares :func:`local_scales` its pass over all distances.
    """

    def __init__(self, X: np.ndarray, kind: str = "field", *,
                 k_neighbors: int = DEFAULT_K_NEIGHBORS,
                 lengthscale: float = DEFAULT_LENGTHSCALE,
                 nearest: np.ndarray | None = None):
        if kind not in NOISES:
            raise RDXInputError(f"noise must be one of {NOISES}, got {kind!r}.")
        self.X = X
        self.kind = kind
        self._centered: tuple[np.ndarray, float, np.ndarray | None] | None = None
        self._X64: np.ndarray | None = None
        self.scales = local_scales(X, k_neighbors, nearest=nearest,
                                   base=self.centered_base()[0])
        med = float(np.median(self.scales))
        self.lengthscale = float(lengthscale) * (med if med > 0 else 1.0)

    def float64(self) -> np.ndarray:
        """X in float64 (the field's products and the clipping floor use it); kept for the
        field noise, whose every draw multiplies it (8·n·d bytes)."""
        if self._X64 is not None:
            return self._X64
        X64 = np.asarray(self.X, dtype=np.float64)
        if self.kind == "field":
            self._X64 = X64
        return X64

    def centered_base(self) -> tuple[np.ndarray, float, np.ndarray | None]:
        """X centred and scaled (:func:`~rdx.method.geometry.centered`), the factor it was
        divided by, and zero of X's coordinates in the centred ones per column (None when X
        has negative values: nothing is clipped). Computed once."""
        if self._centered is None:
            base, span = centered_with_span(self.X)
            unit = _centering_scale(span, base)
            floor = None if self.X.min() < 0 else \
                (-self.float64().mean(axis=0) / unit).astype(np.float32)
            self._centered = (base, unit, floor)
        return self._centered

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "local":
            return rng.standard_normal(self.X.shape)
        return field_noise(self.float64(), self.lengthscale, rng)

    def pair(self, tau: float, z1: np.ndarray, z2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return null_pair(self.X, self.scales, tau, z1, z2)


def perturb(X: np.ndarray, scales: np.ndarray, tau: float, noise: np.ndarray) -> np.ndarray:
    """``X + τ·σ_i·noise_i / √d``: each image moved in proportion to its local scale.

    Computed in float64 and rounded to float32, a row block at a time (no n × d float64
    temporaries; the same values as over whole arrays).
    """
    n, d = X.shape
    factor = (tau / math.sqrt(d)) * scales
    out = np.empty((n, d), dtype=np.float32)
    step = max(1, _PERTURB_BLOCK // max(d, 1))

    def block(s: int) -> None:
        moved = factor[s:s + step, None] * noise[s:s + step]
        moved += X[s:s + step]
        out[s:s + step] = moved
    in_thread_pool(block, range(0, n, step))      # element-wise: blocks in any order
    return out


def null_pair(X: np.ndarray, scales: np.ndarray, tau: float, z1: np.ndarray,
              z2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One null pair from base ``X`` at noise level τ: two noisy copies with τ/√2 each, so
    that they differ by τ (both copies are noisy, as two training runs both are)."""
    t = tau / math.sqrt(2.0)
    X1, X2 = perturb(X, scales, t, z1), perturb(X, scales, t, z2)
    if X.min() >= 0:   # non-negative (post-ReLU) features stay non-negative
        np.maximum(X1, 0, out=X1)
        np.maximum(X2, 0, out=X2)
    return X1, X2


class PairOverlap:
    """Neighbour overlap of the null pairs built from one pair of noise draws, at any noise
    level τ: ``PairOverlap(noise, z1, z2, anchors, k)(τ)`` is
    ``neighbor_overlap(*noise.pair(τ, z1, z2), k=k, anchors=anchors)`` up to float32
    rounding in near-ties.

    The calibration asks for the overlap at many τ with the same draws (common random
    numbers), so the work that does not depend on τ is done once: the base is centred and
    scaled once (:func:`~rdx.method.geometry.centered`; distances do not change), and each
    copy's displacement per unit τ is kept in float32. A copy then costs one fused
    multiply-add over the n × d features, its squared norms and one (anchors × n) product:
    the neighbours of an anchor a minimise ``|x_j|² − 2·x_a·x_j`` (``|x_a|²`` is the same
    for the whole row). Non-negative (post-ReLU) features are clipped at zero in the base's
    own coordinates, as :func:`null_pair` clips them.
    """

    def __init__(self, noise: NullNoise, z1: np.ndarray, z2: np.ndarray,
                 anchors: np.ndarray, k: int):
        X = noise.X
        n, d = X.shape
        self.anchors = np.asarray(anchors, dtype=np.int64)
        self.k = int(k)
        self.base, unit, self.floor = noise.centered_base()
        # displacement of each copy per unit τ in the centred coordinates: each copy gets
        # τ/√2 of noise (null_pair), scaled by the image's local scale (perturb)
        c = 1.0 / (math.sqrt(2.0) * math.sqrt(d) * unit)
        self.steps = [(noise.scales[:, None] * c * z).astype(np.float32) for z in (z1, z2)]
        self._rows = np.arange(len(self.anchors))

    def _neighbors(self, step: np.ndarray, tau: float) -> np.ndarray:
        Y = self.base + np.float32(tau) * step
        if self.floor is not None:
            np.maximum(Y, self.floor, out=Y)
        sq = np.einsum("ij,ij->i", Y, Y)
        key = Y[self.anchors] @ Y.T
        key *= -2.0
        key += sq[None, :]
        key[self._rows, self.anchors] = np.inf      # an image is not its own neighbour
        # each row is partitioned on its own: row blocks in the thread pool
        out = np.empty((len(key), self.k), dtype=np.intp)
        step = balanced_step(len(key), 64)

        def block(s: int) -> None:
            out[s:s + step] = np.argpartition(key[s:s + step], self.k - 1, axis=1)[:, :self.k]
        in_thread_pool(block, range(0, len(key), step))
        return out

    def __call__(self, tau: float) -> float:
        a, b = (self._neighbors(step, tau) for step in self.steps)
        shared = (a[:, :, None] == b[:, None, :]).any(axis=2).sum(axis=1)
        return float(shared.mean() / self.k)


def calibrate_noise(X: np.ndarray, target_overlap: float, *, k: int = DEFAULT_K_NEIGHBORS,
                    rng: np.random.Generator, noise: NullNoise | None = None,
                    n_anchors: int = CALIBRATION_ANCHORS, tau0: float = 1.0,
                    tol: float = 0.01) -> dict[str, float]:
    """Noise level τ at which two noisy copies of X share ``target_overlap`` of their
    neighbours (each copy gets noise τ/√2, so the pair differs by τ).

    Common random numbers (one pair of noise draws for every τ tried) make the overlap a
    smooth decreasing function of log τ: it is bracketed by factors of 4 from ``tau0`` and
    the root found by false position (Illinois) to within ``tol`` of the target — about six
    overlap evaluations (:class:`PairOverlap`). A smooth field cannot separate images closer
    than its length scale, however strong: when even τ = 64 keeps more overlap than the
    target, the field's length scale is halved (down to 1/16 of its start; ``noise`` is
    changed in place) — the smoothest field that disagrees as much as the observed pair.
    After a halving the search starts at τ = 64, where the previous length scale failed:
    one evaluation tells whether the shorter one still does.

    Returns
    -------
    dict
        ``tau``, the ``overlap`` reached, the ``target``, the field's ``lengthscale`` (in
        X's units; None for local noise), ``evaluations`` and ``capped`` (True when no noise
        tried reaches the target: unrelated representations).
    """
    n = X.shape[0]
    noise = NullNoise(X, "field", k_neighbors=k) if noise is None else noise
    anchors = np.sort(rng.choice(n, size=min(n, n_anchors), replace=False))
    smoothest = noise.lengthscale
    evaluations = 0
    start = math.log(min(max(tau0, 2.0**-6), 64.0))
    while True:
        overlap = PairOverlap(noise, noise.draw(rng), noise.draw(rng), anchors, k)

        def gap(log_tau: float) -> float:   # overlap − target: decreasing in log τ
            nonlocal evaluations
            evaluations += 1
            return overlap(math.exp(log_tau)) - target_overlap

        lo = hi = start
        f_lo = f_hi = gap(lo)
        while f_hi > 0 and hi < math.log(64.0):           # too little noise: more
            lo, f_lo = hi, f_hi
            hi = min(hi + math.log(4.0), math.log(64.0))
            f_hi = gap(hi)
        while f_lo <= 0 and lo > math.log(2.0**-6):       # too much noise: less
            hi, f_hi = lo, f_lo
            lo -= math.log(4.0)
            f_lo = gap(lo)
        capped = f_hi > 0
        if not capped or noise.kind != "field" or noise.lengthscale <= smoothest / 16:
            break
        noise.lengthscale /= 2.0
        start = math.log(64.0)
    best, f_best = (hi, f_hi) if abs(f_hi) <= abs(f_lo) else (lo, f_lo)
    side = 0
    while not capped and f_lo > 0 >= f_hi and abs(f_best) > tol and evaluations < 16:
        mid = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        f_mid = gap(mid)
        if abs(f_mid) < abs(f_best):
            best, f_best = mid, f_mid
        if f_mid > 0:
            lo, f_lo = mid, f_mid
            if side == -1:
                f_hi /= 2.0          # Illinois: keep the stale end from stalling the search
            side = -1
        else:
            hi, f_hi = mid, f_mid
            if side == 1:
                f_lo /= 2.0
            side = 1
    return {"tau": float(math.exp(best)), "overlap": float(f_best + target_overlap),
            "target": float(target_overlap),
            "lengthscale": noise.lengthscale if noise.kind == "field" else None,
            "evaluations": evaluations, "capped": bool(capped)}


__all__ = ["CALIBRATION_ANCHORS", "DEFAULT_K_NEIGHBORS", "DEFAULT_LENGTHSCALE", "FIELD_FEATURES",
           "NOISES", "NullNoise", "PairOverlap", "calibrate_noise", "field_noise",
           "local_scales", "neighbor_overlap", "null_pair", "perturb"]
