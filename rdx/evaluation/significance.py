"""Is the difference real? A calibrated strength for every explanation.

RDX always returns ``k`` explanations per direction with high BSR — also when A and B are
two runs of the same training recipe that differ only by their seed. This module answers
"would another run of the same recipe show a difference this strong?" without a second
training run: it compares each explanation's *statistic* with the strongest explanations
the same method finds in *null pairs* — pairs of representations that differ only by noise
of the size the observed pair shows.

Statistic (``excess_affinity``)
    For an explanation with images ``M`` (for RDX its cluster's members, for the baselines
    its grid; ``over=``) in direction ``a_over_b`` (tight in A, far in B),

        T = (1/|M|) Σ_{i≠j∈M} (exp(β·tanh(γ·(R_B[i,j] − R_A[i,j]) / (min(R_A, R_B)[i,j] + 1))) − 1)

    with ``R`` the neighbour ranks (0-based, self 0) and RDX's locally biased difference
    (``β = 5``, ``γ = 80/n`` by default): the average *excess difference affinity* a member
    has with the rest of the explanation; ``b_over_a`` swaps A and B. For RDX it equals
    ``|M|·(mean_affinity − 1)``. It grows with both how much tighter the group is in one
    model and how many images share that — one systematic difference (a merged class, an
    invariance) moves hundreds of pairs coherently, seed noise a few small groups.
    A baseline's members are one model's whole concept (about n/k images, chosen without
    looking at the other model); summed over so many images, the large-scale part of seed
    noise that the null below does not model makes them look significant (k-means on the
    benchmark: seed controls clean in 2 of 5 cases on members, 5 of 5 on grids), so
    baselines are scored on the grid they show.

Null (recorded as ``null: "perturbation"``, the default)
    Each null pair is two independent noisy copies of A (or of B; draws alternate), every
    image moved by isotropic Gaussian noise proportional to its own local scale (distance to
    its ``k_neighbors``-th neighbour): ``X̃ = X + (τ/√2)·σ_i·z_i/√d``. ``τ`` is calibrated so
    that a null pair's neighbour overlap (mean fraction of shared ``k``-nearest neighbours)
    equals the observed pair's — the null disagrees exactly as much as A and B do, but
    without structure. The method is re-run on every null pair (the same parameters and
    seed), its explanations are scored with the same statistic, and

    * ``p_value``: the fraction of all null explanations at least as strong (marginal);
    * ``p_value_fwer``: the fraction of null pairs whose *strongest* explanation (max over
      the ``k`` explanations × 2 directions) is at least as strong — the family-wise
      correction for showing the strongest of many candidates (max-statistic method);
    * ``z``: ``(T − mean) / sd`` of those null maxima (a standardised strength);
    * ``significant``: ``p_value_fwer ≤ alpha``.

    p-values are ``(1 + #{null ≥ T}) / (1 + #null)``, so the smallest attainable
    ``p_value_fwer`` is ``1 / (n_null + 1)``.

Seed twins (recorded as ``null: "twin"``)
    With a second run of either recipe (``control_a``: a twin of A, ``control_b``: of B; the
    same images, rows aligned), the twin comparison *is* a draw from the null: the method is
    run on it and its strongest explanation enters the null maxima. The twin also says how
    strong seed noise is for this recipe, which the observed pair cannot: the noise of the
    remaining perturbation draws is set so that the *median* strongest explanation of a
    null pair equals the twins' strongest (a search on τ with a few draws per step), instead
    of matching the observed pair's overlap (which also holds the real difference). Several
    twins may be given (a list); each is one exact null draw and the median of their
    strongest explanations is the target.

What the null assumes, and the evidence: seed-to-seed differences are local — each image's
neighbourhood is reshuffled independently at its own scale. Measured (``min p_value_fwer``
of a comparison should be uniform when A and B are two runs of one recipe): on pairs of
wide random-feature maps of the same data (512 ReLU features; ``tests/test_significance.py``)
it is uniform; on pairs with independent Gaussian noise it is conservative (mean 0.73–0.9:
the base copy's own noise makes the null stronger); on the benchmark's trained ConvNet seed
twins it is close to calibrated (see :mod:`rdx.experiments.benchmark`). Where seed noise is
coherent over large regions — narrow random-feature maps (32 features: 90 % of twin pairs
got the smallest p) — it is anti-conservative: give a seed twin there. Candidates that lost:
per-image exchange of A and B (after a Procrustes alignment, so that ranks are defined) has
no power — mixed representations split into "came from A" and "came from B" populations and
its nulls were stronger than every implanted difference (no significant expected-direction
explanation in any of the five benchmark cases, smallest FWER p 0.12); bootstrap stability
of clusters (Jaccard over 80 % subsamples) does not
separate seed noise from real differences (seed-twin clusters reached 0.80, implanted ones
0.52–0.98); calibrating the noise on the mean locally biased difference instead of the
neighbour overlap was uniform on Gaussian noise but missed two of five benchmark cases.
RDX's own ``mean_affinity`` is not a usable statistic: seed noise produces small clusters
with the highest mean affinities.

Cost: ``n_null`` re-runs of the method, each followed by the statistic (neighbour ranks of
the explanations' images in both copies), plus a calibration of τ (about 15 neighbour-overlap
evaluations on up to 1000 anchor images per representation; the twin null adds
``MATCH_DRAWS × (MATCH_STEPS + 2)`` runs per representation). Measured for RDX (k = 5,
d = 64) on 2 CPU cores shared with other jobs: 1.3 s per draw at n = 1.5k and 3.8 s at
n = 5k (the fit alone: 0.7 s and 3.0 s), so the default 100 draws take about 2 and 6
minutes; the calibration 1–4 s.
"""
from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..validation import as_representation, check_int, check_pair
from ..errors import RDXInputError
from ..method.geometry import DistanceRows, ranks_of_rows
from ..results.types import DIRECTIONS, MethodResult

STATISTIC = "excess_affinity"
#: What an explanation's statistic is computed over.
OVER = ("auto", "members", "grid")
NULLS = ("perturbation", "twin")
#: Null pairs per assessment by default: the smallest FWER p-value is 1/101 < 0.01.
DEFAULT_N_NULL = 100
#: Neighbour that sets each image's noise scale and the size of the neighbour sets whose
#: overlap calibrates the noise.
DEFAULT_K_NEIGHBORS = 10
#: Anchor images on which the neighbour overlap is measured during calibration.
CALIBRATION_ANCHORS = 1000
#: Bisection steps of the noise calibration (τ to ~0.1 % of its bracket).
_CALIBRATION_STEPS = 12
#: Null draws per τ, and bisection steps on log τ, when matching the twins' strength.
MATCH_DRAWS = 3
MATCH_STEPS = 6
#: Rows of neighbour ranks held at once while scoring explanations (bounds the memory to
#: about 3 × rows × n × 8 bytes).
_RANK_ROWS = 256

RefitFn = Callable[[np.ndarray, np.ndarray], MethodResult]


# --------------------------------------------------------------------------- statistic

def _centered_tensor(X: np.ndarray) -> torch.Tensor:
    """Float32 CPU tensor of ``X`` minus its column mean (distances unchanged; the GEMM form
    of squared distances is more accurate for centred data)."""
    Xc = np.asarray(X, dtype=np.float64)
    return torch.from_numpy((Xc - Xc.mean(axis=0, keepdims=True)).astype(np.float32))


def resolve_statistic_gamma(gamma: float | None, n: int, gamma_scale: float = 80.0) -> float:
    """γ of the statistic: the given value, else ``gamma_scale / n`` (RDX's default rule)."""
    return float(gamma) if gamma is not None else float(gamma_scale) / n


def explanation_statistics(X: np.ndarray, Y: np.ndarray,
                           groups: Mapping[str, Sequence[Sequence[int]]], *,
                           gamma: float | None = None, beta: float = 5.0) -> dict[str, list[float]]:
    """The excess-affinity statistic of image groups in each direction (module docstring).

    Parameters
    ----------
    X, Y : (n, d_X), (n, d_Y) arrays
        The pair, in the order of the directions: ``a_over_b`` means tight in ``X``.
    groups : {"a_over_b": [[i, ...], ...], "b_over_a": [...]}
        Image indices of each explanation (members, or the grid).
    gamma : float, optional
        γ of the locally biased difference; ``80 / n`` if None.
    beta : float
        β of the affinity ``exp(β·diff)``.

    Returns
    -------
    dict
        ``{direction: [T, ...]}`` in the order of ``groups``; a group of fewer than two
        images has T = 0.
    """
    n = X.shape[0]
    g = resolve_statistic_gamma(gamma, n)
    sets = [(d, j, np.unique(np.asarray(m, dtype=np.int64)))
            for d, ms in groups.items() for j, m in enumerate(ms)]
    for d, _, m in sets:
        if d not in DIRECTIONS:
            raise RDXInputError(f"unknown direction {d!r}; use 'a_over_b' or 'b_over_a'")
        if m.size and (m[0] < 0 or m[-1] >= n):
            raise RDXInputError(f"an explanation indexes images outside 0..{n - 1}")
    sums = {(d, j): 0.0 for d, j, _ in sets}
    rows = np.unique(np.concatenate([m for _, _, m in sets if len(m) >= 2] or
                                    [np.zeros(0, dtype=np.int64)]))
    if rows.size:
        Xt, Yt = _centered_tensor(X), _centered_tensor(Y)
        for s in range(0, len(rows), _RANK_ROWS):
            chunk = rows[s:s + _RANK_ROWS]
            RX = ranks_of_rows(Xt, chunk)
            RY = ranks_of_rows(Yt, chunk)
            for d, j, m in sets:
                if len(m) < 2:
                    continue
                inside = np.flatnonzero(np.isin(chunk, m))
                if not inside.size:
                    continue
                rx = RX[inside][:, m].astype(np.float64)
                ry = RY[inside][:, m].astype(np.float64)
                far_minus_tight = (ry - rx) if d == "a_over_b" else (rx - ry)
                diff = np.tanh(g * far_minus_tight / (np.minimum(rx, ry) + 1.0))
                excess = np.expm1(beta * diff)
                # the pair (i, i) has equal ranks (0) in both: excess 0, nothing to remove
                sums[(d, j)] += float(excess.sum())
    out: dict[str, list[float]] = {d: [] for d in groups}
    for d, j, m in sets:
        out[d].append(sums[(d, j)] / len(m) if len(m) >= 2 else 0.0)
    return out


def _explanation_groups(result: MethodResult, over: str = "members"
                        ) -> tuple[dict[str, list[list[int]]], dict[str, list[str]]]:
    """Members of each explanation (its grid when the method has no members or ``over`` is
    ``"grid"``)."""
    groups: dict[str, list[list[int]]] = {}
    used: dict[str, list[str]] = {}
    for d in DIRECTIONS:
        if d not in result.directions:
            continue
        groups[d], used[d] = [], []
        for e in result.directions[d].explanations:
            use_members = bool(e.members) and over == "members"
            groups[d].append(list(e.members) if use_members else list(e.images))
            used[d].append("members" if use_members else "grid")
    return groups, used


# --------------------------------------------------------------------------- noise

def local_scales(X: np.ndarray, k: int = DEFAULT_K_NEIGHBORS) -> np.ndarray:
    """Distance from every image to its ``k``-th nearest other image (float64, length n)."""
    Xt = _centered_tensor(X)
    n = Xt.shape[0]
    if not 0 < k < n:
        raise RDXInputError(f"k_neighbors={k} must be between 1 and n_images-1={n - 1}.")
    rows_of = DistanceRows(Xt)
    out = np.empty(n, dtype=np.float64)
    step = max(1, 2**22 // n)
    for s in range(0, n, step):
        d2 = rows_of(np.arange(s, min(n, s + step)))
        # position 0 is the image itself (distance 0), so position k is the k-th neighbour
        out[s:s + step] = np.sqrt(np.partition(d2, k, axis=1)[:, k].astype(np.float64))
    return out


def _neighbor_sets(X: np.ndarray, anchors: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` nearest other images of each anchor (unordered), ties by
    position in the partition."""
    d2 = DistanceRows(_centered_tensor(X))(anchors).astype(np.float64)
    d2[np.arange(len(anchors)), anchors] = np.inf
    return np.argpartition(d2, k - 1, axis=1)[:, :k]


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


def perturb(X: np.ndarray, scales: np.ndarray, tau: float, noise: np.ndarray) -> np.ndarray:
    """``X + τ·σ_i·noise_i / √d``: each image moved in proportion to its local scale."""
    d = X.shape[1]
    return (X + (tau / math.sqrt(d)) * scales[:, None] * noise).astype(np.float32)


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


def calibrate_noise(X: np.ndarray, target_overlap: float, *, k: int = DEFAULT_K_NEIGHBORS,
                    rng: np.random.Generator, scales: np.ndarray | None = None,
                    n_anchors: int = CALIBRATION_ANCHORS) -> dict[str, float]:
    """Noise level τ at which two noisy copies of X share ``target_overlap`` of their
    neighbours (each copy gets noise τ/√2, so the pair differs by τ).

    Common random numbers (one pair of noise draws for every τ tried) make the overlap a
    smooth decreasing function of τ, found by bracketing and bisection.

    Returns
    -------
    dict
        ``tau``, the ``overlap`` reached, the ``target`` and ``capped`` (True when even the
        largest τ tried, 64, keeps more overlap than the target: unrelated representations).
    """
    n, d = X.shape
    scales = local_scales(X, k) if scales is None else scales
    anchors = np.sort(rng.choice(n, size=min(n, n_anchors), replace=False))
    z1 = rng.standard_normal((n, d))
    z2 = rng.standard_normal((n, d))

    def overlap(tau: float) -> float:
        return neighbor_overlap(*null_pair(X, scales, tau, z1, z2), k=k, anchors=anchors)

    lo, hi = 0.0, 1.0
    o_hi = overlap(hi)
    while o_hi > target_overlap and hi < 64.0:
        lo, hi = hi, hi * 2.0
        o_hi = overlap(hi)
    capped = o_hi > target_overlap
    if not capped:
        for _ in range(_CALIBRATION_STEPS):
            mid = 0.5 * (lo + hi)
            if overlap(mid) > target_overlap:
                lo = mid
            else:
                hi = mid
    tau = hi
    return {"tau": float(tau), "overlap": float(overlap(tau)), "target": float(target_overlap),
            "capped": bool(capped)}


# --------------------------------------------------------------------------- refits

def rdx_refit(result: MethodResult, labels: np.ndarray | None = None) -> RefitFn:
    """Re-run RDX with a result's parameters (and seed) on another pair."""
    from ..method.estimator import RDX

    allowed = set(inspect.signature(RDX.__init__).parameters) - {"self"}
    params = {k: v for k, v in result.params.items() if k in allowed}
    params.update(verbose=0, keep_graphs=False)
    if params.get("guidance") and labels is None:
        raise RDXInputError("this RDX result used guidance: pass labels= to assess it.")

    def refit(X: np.ndarray, Y: np.ndarray) -> MethodResult:
        return RDX(**params).fit(X, Y, labels=labels if params.get("guidance") else None).result()

    return refit


def _default_refit(result: MethodResult, labels: np.ndarray | None) -> RefitFn:
    if result.method == "rdx":
        return rdx_refit(result, labels)
    raise RDXInputError(
        f"assessing method {result.method!r} needs refit=: a function (X, Y) → MethodResult "
        "that runs the method with the same parameters on another pair, e.g. "
        "lambda X, Y: rdx.experiments.methods.method(name).run(X, Y, params, ctx).")


# --------------------------------------------------------------------------- assessment

def _as_twins(control: Any, n: int, name: str) -> list[np.ndarray]:
    if control is None:
        return []
    items = list(control) if isinstance(control, (list, tuple)) else [control]
    if not items:
        raise RDXInputError(f"{name}: give a seed twin (an n×d array) or a list of them.")
    out = []
    for i, c in enumerate(items):
        label = name if len(items) == 1 else f"{name}[{i}]"
        arr = as_representation(c, label)
        if arr.shape[0] != n:
            raise RDXInputError(f"{label} has {arr.shape[0]} images but A and B have {n}; a "
                                "seed twin must describe the same images in the same order.")
        out.append(arr)
    return out


def _p_upper(null: np.ndarray, t: float) -> float:
    """``(1 + #{null ≥ t}) / (1 + #null)``."""
    return float((1 + np.count_nonzero(null >= t)) / (1 + null.size))


def assess(result: MethodResult, A: Any, B: Any, *, n_null: int = DEFAULT_N_NULL,
           alpha: float = 0.05, random_state: int = 0, control_a: Any = None,
           control_b: Any = None, refit: RefitFn | None = None,
           labels: Any = None, k_neighbors: int = DEFAULT_K_NEIGHBORS,
           gamma: float | None = None, beta: float = 5.0, over: str = "auto",
           progress: bool = False) -> dict[str, Any]:
    """Calibrated strength of every explanation of ``result`` (see the module docstring).

    Writes ``explanation.extra["significance"] = {"p_value", "p_value_fwer", "statistic",
    "z", "null", "significant", "over"}`` into each explanation and the summary into
    ``result.info["significance"]``, and returns the summary with the per-explanation
    records under ``"explanations"``.

    Parameters
    ----------
    result : MethodResult
        A method's result on (A, B) with explanations (RDX or a baseline).
    A, B : (n, d_A), (n, d_B) arrays
        The representations the result was computed on.
    n_null : int, default=100
        Null pairs (seed twins count as draws); the smallest FWER p-value is 1/(n_null+1).
    alpha : float, default=0.05
        Family-wise level of ``significant``.
    random_state : int, default=0
        Seeds the calibration anchors and the noise (a local generator).
    control_a, control_b : array or list of arrays, optional
        Seed twins of A / of B (same images, same order): the twin null.
    refit : callable (X, Y) → MethodResult, optional
        Runs the method with the result's parameters on a null pair. Built from the result
        for RDX; required for the baselines (the runner passes its method registry's run).
    labels : (n,) array, optional
        For RDX results fitted with guidance.
    k_neighbors : int, default=10
        Neighbour defining the noise scale and the overlap.
    gamma, beta : float
        Parameters of the statistic (``γ = 80/n`` if None, ``β = 5``).
    over : {"auto", "members", "grid"}
        Images the statistic is computed over: an explanation's members when it has them
        (else its grid), or always the grid — the images a user sees. ``auto``: members for
        RDX, the grid for every other method (see the module docstring).
    progress : bool
        Show a progress bar over the null draws.

    Returns
    -------
    dict
        ``{"null", "statistic", "n_null", "n_twin_draws", "alpha", "random_state",
        "params", "calibration", "null_max", "n_significant", "min_p_value_fwer",
        "any_significant", "timings_s", "explanations": {direction: [record, ...]}}``.
    """
    from tqdm.auto import tqdm

    if not isinstance(result, MethodResult):
        raise RDXInputError(f"assess() takes a MethodResult, got {type(result).__name__}.")
    A = as_representation(A, "A")
    B = as_representation(B, "B")
    check_pair(A, B)
    n = A.shape[0]
    if result.n_images and result.n_images != n:
        raise RDXInputError(f"{result.method}: the result is for {result.n_images} images but "
                            f"A and B have {n}.")
    if over not in OVER:
        raise RDXInputError(f"over must be one of {OVER}, got {over!r}.")
    if over == "auto":
        over = "members" if result.method == "rdx" else "grid"
    groups, used = _explanation_groups(result, over)
    if not any(groups.values()):
        raise RDXInputError(f"{result.method}: the result has no explanations to assess "
                            "(CKA, similarity and probe results have no grids).")
    check_int(n_null, "n_null", minimum=1)
    check_int(random_state, "random_state", minimum=0, maximum=2**32 - 1)
    check_int(k_neighbors, "k_neighbors", minimum=1, maximum=n - 2)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise RDXInputError(f"alpha must be a number between 0 and 1, got {alpha!r}.")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta > 0:
        raise RDXInputError(f"beta must be a positive number, got {beta!r}.")
    if gamma is not None and (isinstance(gamma, bool) or not isinstance(gamma, (int, float))
                              or not gamma > 0):
        raise RDXInputError(f"gamma must be None or a positive number, got {gamma!r}.")
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        if labels.size != n:
            raise RDXInputError(f"labels has {labels.size} entries but there are {n} images.")
    twins_a = _as_twins(control_a, n, "control_a")
    twins_b = _as_twins(control_b, n, "control_b")
    twin_pairs = [(A, t, "control_a") for t in twins_a] + [(t, B, "control_b") for t in twins_b]
    if len(twin_pairs) > n_null:
        raise RDXInputError(f"{len(twin_pairs)} seed twins but n_null={n_null}: every twin is "
                            "one null draw; raise n_null.")
    refit = _default_refit(result, labels) if refit is None else refit
    null_name = "twin" if twin_pairs else "perturbation"
    g = resolve_statistic_gamma(gamma, n)
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    observed = explanation_statistics(A, B, groups, gamma=g, beta=beta)
    timings["statistic"] = time.perf_counter() - t0

    # --- calibration: how far apart a null pair's neighbourhoods must be
    t0 = time.perf_counter()
    rng = np.random.default_rng(random_state)
    anchors = np.sort(rng.choice(n, size=min(n, CALIBRATION_ANCHORS), replace=False))

    def overlap(X: np.ndarray, Y: np.ndarray) -> float:
        return neighbor_overlap(X, Y, k=k_neighbors, anchors=anchors)

    observed_overlap = overlap(A, B)
    twin_overlap = [overlap(X, Y) for X, Y, _ in twin_pairs]
    bar = tqdm(total=n_null, desc=f"significance {result.method}", disable=not progress,
               leave=False)
    # the twin comparisons are exact null draws (timed with the other draws)
    t_twins = time.perf_counter()
    null_max: list[float] = []
    null_all: list[float] = []
    draws: list[dict[str, Any]] = []
    for (X, Y, source), ov in zip(twin_pairs, twin_overlap):
        stats = _null_draw(refit, X, Y, g, beta, over)
        null_max.append(max(stats) if stats else 0.0)
        null_all += stats
        draws.append({"source": source, "overlap": ov, "max_statistic": null_max[-1]})
        bar.update(1)
    t_twins = time.perf_counter() - t_twins
    n_perturbed = n_null - len(twin_pairs)
    bases = {"a": A, "b": B}
    scales, calibration = {}, {}
    target_max = float(np.median(null_max)) if twin_pairs else None
    for base in ("a", "b") if n_perturbed else ():
        scales[base] = local_scales(bases[base], k_neighbors)
        target = float(np.mean(twin_overlap)) if twin_pairs else observed_overlap
        calibration[base] = calibrate_noise(bases[base], target, k=k_neighbors, rng=rng,
                                            scales=scales[base])
        if target_max is not None:
            calibration[base].update(_match_strength(
                refit, bases[base], scales[base], calibration[base]["tau"], target_max,
                rng=rng, gamma=g, beta=beta, over=over))
    timings["calibration"] = time.perf_counter() - t0 - t_twins

    # --- perturbation draws: the method on noisy copies of A and of B, alternately
    t0 = time.perf_counter()
    for j in range(n_perturbed):
        base = "a" if j % 2 == 0 else "b"
        X0 = bases[base]
        Xn, Yn = null_pair(X0, scales[base], calibration[base]["tau"],
                           rng.standard_normal(X0.shape), rng.standard_normal(X0.shape))
        stats = _null_draw(refit, Xn, Yn, g, beta, over)
        null_max.append(max(stats) if stats else 0.0)
        null_all += stats
        bar.update(1)
    bar.close()
    timings["null_draws"] = time.perf_counter() - t0 + t_twins
    M = np.asarray(null_max, dtype=np.float64)
    P = np.asarray(null_all, dtype=np.float64)
    mean, sd = float(M.mean()), float(M.std(ddof=1)) if M.size > 1 else float("nan")

    records: dict[str, list[dict[str, Any]]] = {}
    n_sig = {}
    for d, stats in observed.items():
        records[d] = []
        for j, t in enumerate(stats):
            p_fwer = _p_upper(M, t)
            rec = {"p_value": _p_upper(P, t) if P.size else 1.0, "p_value_fwer": p_fwer,
                   "statistic": float(t),
                   "z": (float(t) - mean) / sd if sd and math.isfinite(sd) else None,
                   "null": null_name, "significant": bool(p_fwer <= alpha), "over": used[d][j]}
            records[d].append(rec)
            result.directions[d].explanations[j].extra["significance"] = dict(rec)
        n_sig[d] = sum(r["significant"] for r in records[d])
    all_p = [r["p_value_fwer"] for rs in records.values() for r in rs]
    summary: dict[str, Any] = {
        "null": null_name, "statistic": STATISTIC, "n_null": int(n_null),
        "n_twin_draws": len(twin_pairs), "alpha": float(alpha),
        "random_state": int(random_state),
        "params": {"gamma": g, "beta": float(beta), "k_neighbors": int(k_neighbors),
                   "over": over,
                   "calibration_anchors": int(len(anchors))},
        "calibration": {"observed_overlap": observed_overlap,
                        **{f"noise_{b}": c for b, c in calibration.items()}},
        "null_max": {"mean": mean, "sd": sd,
                     **{f"q{int(q * 100)}": float(np.quantile(M, q)) for q in (0.5, 0.95)},
                     "max": float(M.max())},
        "twin_draws": draws,
        "n_significant": n_sig, "min_p_value_fwer": float(min(all_p)),
        "any_significant": any(n_sig.values()),
        "timings_s": timings,
    }
    result.info["significance"] = summary
    return {**summary, "explanations": records}


def _match_strength(refit: RefitFn, X: np.ndarray, scales: np.ndarray, tau0: float,
                    target: float, *, rng: np.random.Generator, gamma: float, beta: float,
                    over: str,
                    draws: int = MATCH_DRAWS, steps: int = MATCH_STEPS) -> dict[str, Any]:
    """τ at which the median strongest explanation of null pairs built from ``X`` equals
    ``target`` (the twins' strongest), searched on log τ around ``tau0``.

    The same noise draws are used for every τ tried (common random numbers), so the median
    strength is a smooth function of τ. Stronger noise gives stronger null explanations over
    the range searched; the bracket [τ0/16, 16·τ0] is kept when the target lies outside.
    """
    z = [(rng.standard_normal(X.shape), rng.standard_normal(X.shape)) for _ in range(draws)]

    def strength(tau: float) -> float:
        return float(np.median([max(_null_draw(refit, *null_pair(X, scales, tau, z1, z2),
                                               gamma, beta, over) or [0.0])
                                for z1, z2 in z]))

    lo, hi = math.log(tau0 / 16.0), math.log(tau0 * 16.0)
    s_lo, s_hi = strength(math.exp(lo)), strength(math.exp(hi))
    tried = [(math.exp(lo), s_lo), (math.exp(hi), s_hi)]
    if target <= s_lo or target >= s_hi:
        tau = math.exp(lo) if target <= s_lo else math.exp(hi)
        return {"tau": tau, "tau_overlap": tau0, "target_strength": target,
                "strength": s_lo if target <= s_lo else s_hi, "matched": False}
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        s_mid = strength(math.exp(mid))
        tried.append((math.exp(mid), s_mid))
        if s_mid < target:
            lo = mid
        else:
            hi = mid
    tau = math.exp(0.5 * (lo + hi))
    return {"tau": tau, "tau_overlap": tau0, "target_strength": target,
            "strength": min(tried, key=lambda ts: abs(ts[1] - target))[1], "matched": True}


def _null_draw(refit: RefitFn, X: np.ndarray, Y: np.ndarray, gamma: float,
               beta: float, over: str = "members") -> list[float]:
    """Statistics of every explanation the method finds on one null pair."""
    res = refit(X, Y)
    groups, _ = _explanation_groups(res, over)
    stats = explanation_statistics(X, Y, groups, gamma=gamma, beta=beta)
    return [t for d in stats for t in stats[d]]
