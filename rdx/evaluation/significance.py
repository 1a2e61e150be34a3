"""Is the difference real? A calibrated strength for every explanation.

RDX always returns ``k`` explanations per direction with high BSR — also when A and B are
two runs of the same training recipe that differ only by their seed. This module answers
"would another run of the same recipe show a difference this strong?" without a second
training run: it compares each explanation's *statistic* with the strongest explanations
the same method finds in *null pairs* — pairs of representations that differ only by seed-like
noise of the size the observed pair shows.

Statistic (``excess_affinity``)
    For an RDX explanation with members ``M`` the statistic is the fit's own
    ``T = |M|·(mean_affinity − 1) = (1/|M|) Σ_{i,j∈M} (S_ij − 1)`` with ``S`` the affinity
    matrix the fit clustered — so it has the fit's γ, β, rank symmetrisation, guidance and
    graph (dense or knn) by construction: the statistic measures the fit it judges. It grows
    with both how much tighter the group is in one model and how many images share that.
    A baseline has no affinity matrix: its explanations are scored on the grid it shows with
    RDX's locally biased difference of neighbour ranks,

        T = (1/|M|) Σ_{i≠j∈M} (exp(β·tanh(γ·(R_B[i,j] − R_A[i,j]) / (min(R_A, R_B)[i,j] + 1))) − 1)

    (``γ = 80/n``, ``β = 5`` unless given; ``b_over_a`` swaps A and B). A baseline's members
    are one model's whole concept (about n/k images, chosen without looking at the other
    model); summed over so many images, large-scale seed noise makes them look significant,
    so baselines are scored on their grids (``over="grid"``).

Null (recorded as ``null: "field"`` or ``"local"``, the noise's name; ``"perturbation"``
before, read as such by :func:`rdx.results.nulls.null_id`)
    Each null pair is two independent noisy copies of A (or of B; draws alternate):
    ``X̃ = X + (τ/√2)·σ_i·g(x_i)/√d`` with ``σ_i`` the image's local scale (distance to its
    ``k_neighbors``-th neighbour) and ``g`` the noise. ``τ`` is calibrated so that a null
    pair's neighbour overlap (mean fraction of shared ``k``-nearest neighbours) equals the
    observed pair's — the null disagrees exactly as much as A and B do, but without a
    systematic difference. Two noises (``noise=``):

    * ``"field"`` (default): ``g`` is a random *smooth function* of the representation — a
      Gaussian-process sample with a squared-exponential kernel of length scale
      ``lengthscale × median σ``, drawn with 256 random Fourier features. Neighbouring images
      move together, so whole regions are stretched or compressed as two training seeds do:
      seed differences are coherent, not per-image.
    * ``"local"``: ``g`` is independent Gaussian noise per image (the previous default). It
      reshuffles every neighbourhood independently; on trained seed twins its strongest null
      explanations are about half as strong as the twins' own, so it is anti-conservative
      (measured by ``benchmarks/bench_significance.py``; the README has the table).

    The method is re-run on every null pair (the same parameters and seed) and its
    explanations are scored with the same statistic. p-values come from the ``m`` null draws
    with a parametric tail, so that a handful of re-fits gives a usable p (a Monte Carlo
    p-value needs at least 19 draws before it can go below 0.05):

    * ``p_value_fwer``: the probability that the *strongest* explanation of a new null pair
      (max over the ``k`` explanations × 2 directions) is at least as strong — the
      family-wise correction for showing the strongest of many candidates (max statistic).
      ``log`` of the null maxima is taken as normal with unknown mean and variance; the
      p-value is the Student-t predictive tail with ``m − 1`` degrees of freedom,
      ``P(t_{m−1} ≥ (log T − mean) / (sd·√(1 + 1/m)))``, which is exactly uniform under
      that model for any ``m`` (parameter uncertainty included). ``sd`` is the spread
      between draws pooled over every rank of their statistics and never below the
      maxima's own (``pooled_log_spread``): with a handful of draws the maxima alone can
      agree closely by chance, which made seed twins look significant;
    * ``p_value``: the same tail against every null explanation (marginal; for reading only —
      its own fit of the log null values, so it is not always below ``p_value_fwer``);
    * ``p_value_fwer_empirical``: ``(1 + #{null maxima ≥ T}) / (1 + m)``, the
      distribution-free check (resolution ``1/(m + 1)``);
    * ``z``: ``(log T − mean) / sd`` of the log null maxima (the same ``sd``);
    * ``below_alpha``: ``p_value_fwer ≤ alpha``; ``significant``: the same where the null
      is calibrated for the pair (below), else None — no verdict.

Calibration by family (``family=``)
    How strong seed noise is depends on the kind of model, so the field null is read through
    its family's calibration (:mod:`rdx.evaluation.null_calibration`): the null maxima are
    rescaled by the family's factor ``exp(log_shift)`` fitted on the seed-twin suite and
    checked on held-out recipes. Where the family is unknown, or its calibration misses the
    target, ``significant`` is None (no verdict) and ``calibrated`` False: the p-value stays
    as a reading. The twin null is calibrated for any pair.

Seed twins (recorded as ``null: "twin"``)
    With a second run of either recipe (``control_a``: a twin of A, ``control_b``: of B; the
    same images, rows aligned), the twin comparison *is* a draw from the null: the method is
    run on it and its strongest explanation enters the null maxima. The twin also says how
    strong seed noise is for this recipe, which the observed pair cannot: the noise of the
    remaining field-null draws is set so that the *median* strongest explanation of a
    null pair equals the twins' strongest (a search on τ with a few draws per step), instead
    of matching the observed pair's overlap (which also holds the real difference). Several
    twins may be given (a list); each is one exact null draw, and so is every two twins of one
    recipe (a seed pair of that recipe too) while ``n_null`` leaves room
    (:func:`twin_null_pairs`): two twins of B give three exact draws. When you have seed twins this
    is the gold standard; without them the field null is a model of seed noise, checked on
    the seed-twin suite (:mod:`rdx.studies.benchmark.calibration`).

Draws: ``n_null`` (6 by default). Optionally sequential (``max_null > n_null``): while
some explanation's ``p_value_fwer`` lies within a factor 4 of ``alpha`` the decision is not
clear and pairs are added, up to ``max_null`` — clear cases stop at ``n_null``, borderline
ones get the draws. ``n_draws`` records how many were used.

Cost: ``n_draws`` re-runs of the method (the statistic of an RDX draw is free: it is the
fit's), plus a calibration of τ per base representation (about 10 neighbour-overlap
evaluations on ``CALIBRATION_ANCHORS`` anchor images) and one noise field per draw
(``n × d × 256`` multiply-adds). The re-runs allocate the same temporaries again, so
:func:`assess` keeps freed memory in malloc's heap while it runs
(:func:`rdx.allocator.reuse_freed_memory`). Timings: ``benchmarks/bench_significance.py
--cost`` and ``benchmarks/bench_cli.py --significance``.
"""
from __future__ import annotations

import inspect
import itertools
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..allocator import reuse_freed_memory
from ..errors import RDXInputError
from ..results.types import MethodResult
from ..validation import as_representation, check_int, check_number, check_pair
from .excess_affinity import (STATISTIC, LOG_FLOOR, explanation_groups, p_upper,
                              uses_fit_statistic, explanation_statistics, fit_statistics,
                              log_z, pooled_log_spread, predictive_p,
                              resolve_statistic_gamma, statistics_of)
from .null_calibration import check_family, standing
from .null_noise import (CALIBRATION_ANCHORS, DEFAULT_K_NEIGHBORS, DEFAULT_LENGTHSCALE,
                         FIELD_FEATURES, NOISES, NullNoise, calibrate_noise, field_noise,
                         local_scales, neighbor_overlap, null_pair, perturb)

#: What an explanation's statistic is computed over.
OVER = ("auto", "members", "grid")
NULLS = ("field", "local", "twin")
#: Null pairs per assessment by default (the parametric p needs a few; see the docstring).
DEFAULT_N_NULL = 6
#: How p_value_fwer is computed (recorded with every assessment).
P_METHOD = "student_t_predictive_log_pooled_spread"
#: Fewest null draws: the Student-t predictive p needs an estimate of the spread.
MIN_N_NULL = 3
#: Most null draws accepted (each is a whole re-fit: more is hours at n = 10 000).
MAX_N_NULL = 1000
#: Draws continue past ``n_null`` (up to ``max_null``) while some explanation's p lies
#: within this factor of alpha: the decision is not clear yet.
SEQUENTIAL_BAND = 4.0
#: Null draws per τ, and bisection steps on log τ, when matching the twins' strength.
MATCH_DRAWS = 3
MATCH_STEPS = 6

RefitFn = Callable[[np.ndarray, np.ndarray], MethodResult]


# --------------------------------------------------------------------------- refits

def rdx_refit(result: MethodResult, labels: np.ndarray | None = None) -> RefitFn:
    """Re-run RDX with a result's parameters (and seed) on another pair."""
    from ..method.estimator import RDX

    allowed = set(inspect.signature(RDX.__init__).parameters) - {"self"}
    params = {k: v for k, v in result.params.items() if k in allowed}
    # grids are drawn after clustering from their own generator and the statistic reads
    # the members: a null draw skips the costly grid search (same clusters, same statistic)
    params.update(verbose=0, keep_graphs=False, grid_strategy="random", label_grids=False)
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

#: A null draw: the two representations and where they come from.
NullPair = tuple[np.ndarray, np.ndarray, str]


def twin_null_pairs(A: np.ndarray, B: np.ndarray, twins_a: list[np.ndarray],
                    twins_b: list[np.ndarray]) -> tuple[list[NullPair], list[NullPair]]:
    """The exact null draws that seed twins give: ``(required, extra)``.

    ``required``: each twin against its model, ``(A, twin)`` for twins of A and ``(twin, B)``
    for twins of B. ``extra``: every two twins of one recipe, ``(twin_i, twin_j)`` — a seed
    pair of that recipe as well, so under the null it is drawn like the others, and it costs
    a refit but no training. A pair of twins given on both sides (A and B from one recipe,
    the same arrays as ``control_a`` and ``control_b``) is counted once.
    """
    required = [(A, t, "control_a") for t in twins_a] + [(t, B, "control_b") for t in twins_b]
    extra: list[NullPair] = []

    def same(X: np.ndarray, Y: np.ndarray) -> bool:
        return X is Y or (X.shape == Y.shape and bool(np.array_equal(X, Y)))

    for twins, source in ((twins_a, "control_a pair"), (twins_b, "control_b pair")):
        for i, j in itertools.combinations(range(len(twins)), 2):
            X, Y = twins[i], twins[j]
            if not any((same(X, U) and same(Y, V)) or (same(X, V) and same(Y, U))
                       for U, V, _ in extra):
                extra.append((X, Y, source))
    return required, extra


def check_null_params(n: int, *, random_state: int, k_neighbors: int, alpha: float,
                      beta: float, lengthscale: float, gamma: float | None) -> None:
    """Refuse a null's parameters outside their range (:class:`RDXInputError`): the seed, the
    neighbour of the noise scale (1 to n − 2), α in (0, 1), β in (0, 80), the field's length
    scale and γ (None: 80/n) positive."""
    check_int(random_state, "random_state", minimum=0, maximum=2**32 - 1)
    check_int(k_neighbors, "k_neighbors", minimum=1, maximum=n - 2)
    for name, value, hi in (("alpha", alpha, 1.0), ("beta", beta, 80.0),
                            ("lengthscale", lengthscale, 1e6), ("gamma", gamma, 1e6)):
        if value is None and name == "gamma":
            continue
        if not 0 < check_number(value, name) < hi:
            raise RDXInputError(f"{name} must be a number between 0 and {hi:g}, got {value!r}.")


def as_twins(control: Any, n: int, name: str) -> list[np.ndarray]:
    """Seed twins given as one array or a list of them, each checked: ``n`` images."""
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


@reuse_freed_memory()   # the re-fits allocate the same temporaries: keep their pages
def assess(result: MethodResult, A: Any, B: Any, *, n_null: int = DEFAULT_N_NULL,
           alpha: float = 0.05, random_state: int = 0, control_a: Any = None,
           control_b: Any = None, refit: RefitFn | None = None,
           labels: Any = None, k_neighbors: int = DEFAULT_K_NEIGHBORS,
           gamma: float | None = None, beta: float = 5.0, over: str = "auto",
           noise: str = "field", lengthscale: float = DEFAULT_LENGTHSCALE,
           max_null: int | None = None, family: Any = None,
           progress: bool = False) -> dict[str, Any]:
    """Calibrated strength of every explanation of ``result`` (see the module docstring).

    Writes ``explanation.extra["significance"] = {"p_value", "p_value_fwer",
    "p_value_fwer_empirical", "statistic", "z", "null", "significant", "below_alpha",
    "calibrated", "over"}`` into each explanation (``significant``: the verdict,
    ``p_value_fwer ≤ alpha`` where the null is calibrated for the pair, else None;
    ``below_alpha``: the comparison itself) and the summary into ``result.info["significance"]``, and returns the
    summary with the per-explanation records under ``"explanations"``.

    Parameters
    ----------
    result : MethodResult
        A method's result on (A, B) with explanations (RDX or a baseline).
    A, B : (n, d_A), (n, d_B) arrays
        The representations the result was computed on.
    n_null : int, default=8
        Null pairs (seed twins count as draws), at least 3.
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
        Parameters of the grid statistic of baselines (``γ = 80/n`` if None, ``β = 5``);
        an RDX result's statistic is its fit's own.
    over : {"auto", "members", "grid"}
        Images the statistic is computed over: an explanation's members when it has them
        (else its grid), or always the grid — the images a user sees. ``auto``: members for
        RDX, the grid for every other method (see the module docstring).
    noise : {"field", "local"}, default="field"
        The noise: "field" (the field null) or "local" (the local null); module docstring.
    lengthscale : float, default=3
        Length scale of the field noise in units of the median local scale.
    max_null : int, optional
        Sequential draws: up to this many while some p lies near ``alpha``.
    family : str or (str, str), optional
        The models' family (``"mlp"``, ``"convnet"``, ``"vit"``; one for both or one each),
        which selects the field null's calibration. None: unknown, so a field-null result
        gets no verdict (``significant`` None). Not needed with seed twins.
    progress : bool
        Show a progress bar over the null draws.

    Returns
    -------
    dict
        ``{"null", "noise", "statistic", "p_method", "n_null", "n_draws", "max_null",
        "sequential_band", "n_twin_draws", "alpha",
        "random_state", "params", "calibration", "standing", "null_max", "n_significant",
        "min_p_value_fwer", "any_significant", "p_resolution_empirical", "timings_s",
        "explanations": {direction: [record, ...]}}``.
    """
    from tqdm.auto import tqdm

    if not isinstance(result, MethodResult):
        raise RDXInputError(f"assess() takes a MethodResult, got {type(result).__name__}.")
    if result.params.get("metric") == "precomputed":
        raise RDXInputError("assess() draws its null pairs from features (seed twins, or "
                            "copies moved by a smooth random field), and this result was "
                            "fitted on precomputed distance matrices (metric='precomputed'); "
                            "assess a fit of the features instead.")
    A = as_representation(A, "A")
    B = as_representation(B, "B")
    check_pair(A, B)
    n = A.shape[0]
    if result.n_images and result.n_images != n:
        raise RDXInputError(f"{result.method}: the result is for {result.n_images} images but "
                            f"A and B have {n}.")
    if over not in OVER:
        raise RDXInputError(f"over must be one of {OVER}, got {over!r}.")
    if noise not in NOISES:
        raise RDXInputError(f"noise must be one of {NOISES}, got {noise!r}.")
    if over == "auto":
        over = "members" if result.method == "rdx" else "grid"
    groups, used = explanation_groups(result, over)
    if not any(groups.values()):
        raise RDXInputError(f"{result.method}: the result has no explanations to assess "
                            "(CKA, similarity and probe results have no grids).")
    check_int(n_null, "n_null", minimum=MIN_N_NULL, maximum=MAX_N_NULL)
    max_null = n_null if max_null is None else max_null
    check_int(max_null, "max_null", minimum=n_null, maximum=MAX_N_NULL)
    check_null_params(n, random_state=random_state, k_neighbors=k_neighbors, alpha=alpha,
                      beta=beta, lengthscale=lengthscale, gamma=gamma)
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        if labels.size != n:
            raise RDXInputError(f"labels has {labels.size} entries but there are {n} images.")
    families = check_family(family, "family")
    twins_a = as_twins(control_a, n, "control_a")
    twins_b = as_twins(control_b, n, "control_b")
    twin_pairs, twin_twin_pairs = twin_null_pairs(A, B, twins_a, twins_b)
    if len(twin_pairs) > n_null:
        raise RDXInputError(f"{len(twin_pairs)} seed twins but n_null={n_null}: every twin is "
                            "one null draw; raise n_null.")
    # two twins of one recipe are one more exact null draw each, with no extra training:
    # they take the places of field-null draws while n_null leaves room
    twin_pairs += twin_twin_pairs[:n_null - len(twin_pairs)]
    refit = _default_refit(result, labels) if refit is None else refit
    null_name = "twin" if twin_pairs else noise
    stand = standing(null_name, families)
    g = resolve_statistic_gamma(gamma, n)
    timings: dict[str, float] = {}

    def draw_statistics(X: np.ndarray, Y: np.ndarray) -> list[float]:
        stats = statistics_of(refit(X, Y), X, Y, over, gamma=g, beta=beta)
        return [t for v in stats.values() for t in v]

    t0 = time.perf_counter()
    observed = statistics_of(result, A, B, over, gamma=g, beta=beta)
    timings["statistic"] = time.perf_counter() - t0

    bar = tqdm(total=n_null, desc=f"significance {result.method}", disable=not progress,
               leave=False)
    # the twin comparisons are exact null draws
    t0 = time.perf_counter()
    rng = np.random.default_rng(random_state)
    anchors = np.sort(rng.choice(n, size=min(n, CALIBRATION_ANCHORS), replace=False))
    null_max: list[float] = []
    null_all: list[float] = []
    null_draws: list[list[float]] = []     # every draw's statistics (the pooled spread)
    draws: list[dict[str, Any]] = []
    for X, Y, source in twin_pairs:
        stats = draw_statistics(X, Y)
        null_max.append(max(stats) if stats else 0.0)
        null_all += stats
        null_draws.append(stats)
        draws.append({"source": source,
                      "overlap": neighbor_overlap(X, Y, k=k_neighbors, anchors=anchors),
                      "max_statistic": null_max[-1]})
        bar.update(1)
    timings["twin_draws"] = time.perf_counter() - t0

    # --- calibration: how far apart a null pair's neighbourhoods must be
    t0 = time.perf_counter()
    observed_overlap = neighbor_overlap(A, B, k=k_neighbors, anchors=anchors)
    n_perturbed = n_null - len(twin_pairs)
    bases = {"a": A, "b": B}
    noises: dict[str, NullNoise] = {}
    calibration: dict[str, dict[str, Any]] = {}
    target_max = float(np.median(null_max)) if twin_pairs else None
    target = float(np.mean([d["overlap"] for d in draws])) if twin_pairs else observed_overlap
    for base in ("a", "b")[:min(2, n_perturbed)]:
        noises[base] = NullNoise(bases[base], noise, k_neighbors=k_neighbors,
                                 lengthscale=lengthscale, nearest=result.nearest.get(base))
        # B's search starts at A's τ: the two bases usually need similar noise
        calibration[base] = calibrate_noise(
            bases[base], target, k=k_neighbors, rng=rng, noise=noises[base],
            tau0=calibration["a"]["tau"] if calibration else 1.0)
        if target_max is not None:
            calibration[base].update(_match_strength(
                draw_statistics, noises[base], calibration[base]["tau"], target_max, rng=rng))
    timings["calibration"] = time.perf_counter() - t0

    # --- field-null draws: the method on noisy copies of A and of B, alternately; past
    # n_null only while the decision is unclear (a sequential Monte Carlo test)
    t0 = time.perf_counter()
    observed_all = [t for v in observed.values() for t in v]

    def unclear() -> bool:
        M = np.asarray(null_max, dtype=np.float64) * math.exp(stand["log_shift"])
        sd = pooled_log_spread(null_draws)
        return any(alpha / SEQUENTIAL_BAND < predictive_p(M, t, sd) < alpha * SEQUENTIAL_BAND
                   for t in observed_all)

    j = 0
    while j < n_perturbed or (noises and len(null_max) < max_null and unclear()):
        if j >= n_perturbed:
            bar.total += 1
        base = "a" if j % 2 == 0 else "b"
        nz = noises[base]
        stats = draw_statistics(*nz.pair(calibration[base]["tau"], nz.draw(rng), nz.draw(rng)))
        null_max.append(max(stats) if stats else 0.0)
        null_all += stats
        null_draws.append(stats)
        bar.update(1)
        j += 1
    bar.close()
    timings["null_draws"] = time.perf_counter() - t0 + timings.pop("twin_draws")
    # the family's calibration rescales the field null's draws (a factor on every
    # statistic: the spread of their logs is unchanged); no rescaling for the twin null
    scale = math.exp(stand["log_shift"])
    M = np.asarray(null_max, dtype=np.float64) * scale
    P = np.asarray(null_all, dtype=np.float64) * scale
    spread = pooled_log_spread(null_draws)
    calibrated = bool(stand["calibrated"])

    records: dict[str, list[dict[str, Any]]] = {}
    n_sig = {}
    for d, stats in observed.items():
        records[d] = []
        for j, t in enumerate(stats):
            p_fwer = predictive_p(M, t, spread)
            rec = {"p_value": predictive_p(P, t) if P.size > 1 else 1.0,
                   "p_value_fwer": p_fwer, "p_value_fwer_empirical": p_upper(M, t),
                   "statistic": float(t), "z": log_z(M, t, spread), "null": null_name,
                   # no verdict where the null is not calibrated for this pair
                   "significant": bool(p_fwer <= alpha) if calibrated else None,
                   "below_alpha": bool(p_fwer <= alpha), "calibrated": calibrated,
                   "over": used[d][j]}
            records[d].append(rec)
            result.directions[d].explanations[j].extra["significance"] = dict(rec)
        n_sig[d] = sum(bool(r["significant"]) for r in records[d])
    all_p = [r["p_value_fwer"] for rs in records.values() for r in rs]
    logs = np.log(np.maximum(M, LOG_FLOOR))
    summary: dict[str, Any] = {
        "null": null_name, "noise": noise, "statistic": STATISTIC,
        "statistic_source": "fit" if uses_fit_statistic(result, over) else "ranks",
        "p_method": P_METHOD, "n_null": int(n_null),
        "n_draws": len(null_max), "max_null": int(max_null),
        "sequential_band": SEQUENTIAL_BAND,
        "n_twin_draws": len(twin_pairs), "alpha": float(alpha),
        "random_state": int(random_state),
        "p_resolution_empirical": 1.0 / (len(null_max) + 1),
        "params": {"gamma": g, "beta": float(beta), "k_neighbors": int(k_neighbors),
                   "over": over, "lengthscale": float(lengthscale),
                   "field_features": FIELD_FEATURES,
                   "calibration_anchors": int(len(anchors))},
        "calibration": {"observed_overlap": observed_overlap,
                        **{f"noise_{b}": c for b, c in calibration.items()}},
        "standing": stand, "calibrated": calibrated,
        "null_max": {"mean": float(M.mean()), "log_mean": float(logs.mean()),
                     "log_sd": float(logs.std(ddof=1)) if M.size > 1 else None,
                     "log_sd_used": spread,
                     **{f"q{int(q * 100)}": float(np.quantile(M, q)) for q in (0.5, 0.95)},
                     "max": float(M.max()), "values": [float(x) for x in M]},
        "twin_draws": draws,
        "n_significant": n_sig, "min_p_value_fwer": float(min(all_p)),
        "any_significant": any(n_sig.values()) if calibrated else None,
        "any_below_alpha": bool(min(all_p) <= alpha),
        "timings_s": timings,
    }
    result.info["significance"] = summary
    return {**summary, "explanations": records}


def _match_strength(draw_statistics: Callable[[np.ndarray, np.ndarray], list[float]],
                    noise: NullNoise, tau0: float, target: float, *,
                    rng: np.random.Generator, draws: int = MATCH_DRAWS,
                    steps: int = MATCH_STEPS) -> dict[str, Any]:
    """τ at which the median strongest explanation of null pairs built from ``noise``'s
    base equals ``target`` (the twins' strongest), searched on log τ around ``tau0``.

    The same noise draws are used for every τ tried (common random numbers), so the median
    strength is a smooth function of τ. Stronger noise gives stronger null explanations over
    the range searched; the bracket [τ0/16, 16·τ0] is kept when the target lies outside.
    """
    z = [(noise.draw(rng), noise.draw(rng)) for _ in range(draws)]

    def strength(tau: float) -> float:
        return float(np.median([max(draw_statistics(*noise.pair(tau, z1, z2)) or [0.0])
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


__all__ = ["DEFAULT_N_NULL", "NOISES", "NULLS", "OVER", "P_METHOD", "STATISTIC", "NullNoise",
           "as_twins", "assess", "calibrate_noise", "check_null_params", "explanation_statistics", "field_noise",
           "fit_statistics", "local_scales", "neighbor_overlap", "null_pair", "perturb", "predictive_p",
           "rdx_refit", "resolve_statistic_gamma", "statistics_of"]
