"""Computing a similarity measure: the value (:func:`similarity`) and its calibration, a
permutation null and an interval over images (:func:`calibrate`).

The measures and their names: :mod:`rdx.similarity.registry`.

:func:`similarity` validates the input and the parameter names, fills in the defaults and
returns a float. :func:`calibrate` adds, optionally and seeded:

* a **permutation null**: the rows of Y are shuffled (breaking the image correspondence) and
  the measure recomputed ``permutations`` times. ``p_value`` is the add-one estimate
  ``(1 + #{null at least as similar as the observed value}) / (permutations + 1)`` — "at
  least as similar" is ``≥`` for similarities and ``≤`` for distances (procrustes), with a
  1e-12 relative tolerance so that rounding never makes a tie count against the null. It is
  a valid p-value (never anti-conservative) for any number of permutations; the smallest
  possible value is ``1/(permutations + 1)``. ``null_mean``/``null_std`` (ddof = 1) summarise
  the null, and ``value_minus_null = value − null_mean`` is the chance-corrected score
  (Gröger et al. 2026 show that raw scores are inflated by width and depth).
  Each measure reuses its per-representation work across permutations (kernels, ranks,
  neighbour lists, SVD bases), so a null draw costs O(n²) for cka_rbf/rsa, O(n·p·q) for the
  linear measures and O(n·k) for the neighbourhood measures.
* a **95 % interval over images** (``bootstrap`` draws; ``ci_method`` says which kind).
  Resampling rows with replacement puts copies of an image into the sample, and how a
  measure treats a pair of copies decides whether the interval means anything:

  - ``copy_pairs_excluded`` (rsa): rows resampled jointly with replacement, the pairs
    formed by two copies of the same image left out (as rsatoolbox does); percentile
    interval of the recomputed measure.
  - ``fixed_graph`` (mutual_knn, jaccard_knn, cknna): the k-NN graphs of all n images stay
    fixed and each image's score is weighted by its draw count (copies would otherwise be
    each other's nearest neighbours; see :mod:`rdx.similarity.neighbors`); percentile
    interval.
  - ``half_sampling`` (cka_linear, cka_linear_biased, cka_rbf, procrustes, svcca, pwcca):
    these see copies as perfectly aligned extra images — for two *unrelated* 64-d
    representations of 400 images, debiased linear CKA is −0.0005 but a with-replacement
    bootstrap gives [0.10, 0.14], entirely above it. Instead each draw is a random half of
    the images (m = ⌊n/2⌋, without replacement), the delete-d jackknife of Shao & Wu
    (1989): with d = n − m the spread of half-sample values, scaled by √(m/d) (1 for even
    n), estimates the sampling spread of the full-sample value. The interval is the
    2.5–97.5 % percentiles of the half-sample values minus their mean, scaled, added to
    the full-sample value (so an n-dependent bias of the half samples — biased CKA, SVCCA
    — does not shift it).

* a **calibrated score** with the null (calibrated-similarity's definition): the critical
  threshold τ is the ⌈(1 − α)(K + 1)⌉-th smallest of the K null values and the observed
  one (α = ``alpha``, default 0.05), and ``calibrated = clip((value − τ) / (1 − τ), 0, 1)``:
  0 unless the value beats the null at level α, 1 for a perfect score. For a distance
  (procrustes) the same on the mirrored scale: τ the ⌈(1 − α)(K + 1)⌉-th largest,
  ``clip((τ − value) / τ, 0, 1)`` (0 is the perfect distance).
* a **layer-wise null** (:func:`calibrate_layers`): the measure between every layer of one
  model and every layer of the other, aggregated (the best pair or the mean), against a
  null in which each permutation of the images is shared by all layers of Y — so the
  search over layer pairs is part of the null (calibrated-similarity's
  ``calibrate_layers``).

Permutations and bootstrap draws come from independent streams of
``numpy.random.SeedSequence(seed)``, so changing one count does not change the other's draws.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError
from . import cca as _cca
from . import cka as _cka
from . import cka_rbf as _cka_rbf
from . import neighbors as _nb
from . import procrustes as _proc
from .inputs import as_tensor_pair
from .rdm import prepare_rsa, rsa_bootstrap
from .registry import resolve_measure
from .resources import check_count, check_draws, check_inputs_memory

#: name → ``prepare(X, Y, **params)`` returning an object with ``.value`` and
#: ``.permuted(perm)`` (and optionally ``.bootstrap(idx)``); shares per-representation work.
_PREPARE: dict[str, Callable[..., Any]] = {
    "cka_linear": lambda X, Y: _cka._LinearCKAPrepared(X, Y, True),
    "cka_linear_biased": lambda X, Y: _cka._LinearCKAPrepared(X, Y, False),
    "cka_rbf": _cka_rbf._prepare_rbf_cka,
    "rsa": prepare_rsa,
    "mutual_knn": _nb._prepare_mutual_knn,
    "cknna": _nb._prepare_cknna,
    "jaccard_knn": _nb._prepare_jaccard_knn,
    "procrustes": _proc._prepare_procrustes,
    "svcca": _cca._prepare_svcca,
    "pwcca": _cca._prepare_pwcca,
}

#: Measures whose bootstrap is not "recompute on the resampled rows" (module docstring).
_BOOTSTRAP: dict[str, Callable[..., float]] = {
    "rsa": rsa_bootstrap,
}


def _validated(name: str, X: Any, Y: Any) -> tuple[torch.Tensor, torch.Tensor]:
    X, Y, _ = as_tensor_pair(X, Y, what=f"similarity measure {name!r}", min_n=4)
    return X.detach(), Y.detach()


def _as_float(v: Any) -> float:
    return float(v.detach()) if isinstance(v, torch.Tensor) else float(v)


def similarity(name: str, X: Any, Y: Any, **params: Any) -> float:
    """Compute the measure ``name`` of X and Y.

    Parameters
    ----------
    name : str
        A key of :data:`rdx.similarity.registry.MEASURES`.
    X, Y : array-like or torch.Tensor of shape (n, p), (n, q)
        Representations of the same n ≥ 4 images (rows). CUDA tensors are computed on the
        GPU.
    **params
        Parameters of the measure (see ``MEASURES[name].params``); missing ones take their
        defaults.

    Returns
    -------
    float (see ``MEASURES[name].higher_is_more_similar`` for its direction).

    Raises
    ------
    RDXInputError
        Unknown measure or parameter, bad parameter values, or bad input (n < 4, different
        numbers of rows, NaN/inf, a constant representation, k ≥ n, ...).

    Examples
    --------
    >>> import numpy as np
    >>> from rdx.similarity.calibration import similarity
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 5))
    >>> Y = X @ rng.normal(size=(5, 4)) + 0.5 * rng.normal(size=(100, 4))
    >>> round(similarity("cka_linear", X, Y), 3)
    0.609
    >>> similarity("cka_linear", X, X)
    1.0
    >>> round(similarity("rsa", X, Y, rdm="euclidean", compare="pearson"), 3)
    0.632
    """
    m, merged = resolve_measure(name, params)
    check_inputs_memory(name, X, Y, **params)
    X, Y = _validated(name, X, Y)
    return _finite(name, m.fn(X, Y, **merged))


def _finite(name: str, value: Any) -> float:
    """The measure's value as a float; a NaN or infinite value is never returned as a
    score (the input checks exclude the known causes: this names any other)."""
    v = _as_float(value)
    if not np.isfinite(v):
        raise RDXInputError(
            f"similarity measure {name!r} came out {v} for these inputs: it is undefined for "
            "them (e.g. nearly constant or nearly collinear features). Check the features, "
            "or use another measure.")
    return v


def _rel_tol(value: float) -> float:
    return 1e-12 * max(1.0, abs(value))


def permutation_p_value(value: float, null: np.ndarray, *, higher_is_more_similar: bool
                        ) -> float:
    """Add-one permutation p-value ``(1 + #{null at least as extreme}) / (len(null) + 1)``."""
    null = np.asarray(null, dtype=np.float64)
    tol = _rel_tol(value)
    hits = (null >= value - tol) if higher_is_more_similar else (null <= value + tol)
    return float((1 + int(hits.sum())) / (len(null) + 1))


def permutation_draws(n: int, count: int, seed: int) -> Iterator[np.ndarray]:
    """The row permutations of Y that :func:`calibrate` uses for ``seed`` (first stream of
    ``SeedSequence(seed)``), one at a time."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[0])
    for _ in range(count):
        yield rng.permutation(n)


def bootstrap_draws(n: int, count: int, seed: int) -> Iterator[np.ndarray]:
    """The bootstrap row indices (n draws with replacement each) that :func:`calibrate`
    uses for ``seed`` (second stream of ``SeedSequence(seed)``), one at a time."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])
    for _ in range(count):
        yield rng.integers(0, n, size=n)


#: ``ci_method`` per measure (module docstring).
CI_METHODS: dict[str, str] = {
    "rsa": "copy_pairs_excluded",
    **{m: "fixed_graph" for m in ("mutual_knn", "jaccard_knn", "cknna")},
    **{m: "half_sampling" for m in ("cka_linear", "cka_linear_biased", "cka_rbf",
                                    "procrustes", "svcca", "pwcca")},
}


def half_sample_draws(n: int, count: int, seed: int) -> Iterator[np.ndarray]:
    """The half samples (⌊n/2⌋ distinct rows each, sorted) that :func:`calibrate` uses for
    ``seed`` and the ``half_sampling`` interval (the bootstrap stream of
    ``SeedSequence(seed)``), one at a time."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])
    for _ in range(count):
        yield np.sort(rng.choice(n, size=n // 2, replace=False))


#: Default significance level of the calibrated score's threshold τ.
CALIBRATION_ALPHA = 0.05
#: Smallest denominator of the calibrated score (calibrated-similarity's ε).
_CAL_EPS = 1e-12


def check_alpha(alpha: Any) -> float:
    """A significance level in (0, 1)."""
    if isinstance(alpha, (bool, np.bool_, str, bytes)):
        raise RDXInputError(f"alpha must be a number in (0, 1), got {alpha!r}.")
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise RDXInputError(f"alpha must be a number in (0, 1), got {alpha!r}.") from None
    if not 0.0 < a < 1.0:
        raise RDXInputError(f"alpha must be a number in (0, 1), got {alpha!r}.")
    return a


def calibrated_score(value: float, null: np.ndarray, *, higher_is_more_similar: bool,
                     alpha: float = CALIBRATION_ALPHA) -> tuple[float, float]:
    """``(τ, calibrated score)`` of an observed value against its permutation null (module
    docstring): τ the ⌈(1 − α)(K + 1)⌉-th order statistic of the K null values and the
    value, from the side of the better scores; the score the part of the way from τ to
    the perfect value (1 for similarities, 0 for distances) that the value covers, in
    [0, 1]."""
    null = np.asarray(null, dtype=np.float64)
    K = len(null)
    combined = np.sort(np.concatenate([[float(value)], null]))
    idx = min(max(int(math.ceil((1.0 - alpha) * (K + 1))) - 1, 0), K)
    if higher_is_more_similar:
        tau = float(combined[idx])
        score = (value - tau) / max(1.0 - tau, _CAL_EPS)
    else:
        tau = float(combined[K - idx])
        score = (tau - value) / max(tau, _CAL_EPS)
    return tau, float(min(1.0, max(0.0, score)))


def half_sampling_interval(value: float, half_values: np.ndarray, n: int) -> list[float]:
    """95 % interval from half-sample values (delete-d jackknife, module docstring)."""
    m = n // 2
    scale = np.sqrt(m / (n - m))
    lo, hi = np.percentile(half_values, [2.5, 97.5]) - half_values.mean()
    return [float(value + scale * lo), float(value + scale * hi)]


def calibrate(name: str, X: Any, Y: Any, *, permutations: int = 0, bootstrap: int = 0,
              seed: int = 0, progress: bool = False, alpha: float = CALIBRATION_ALPHA,
              **params: Any) -> dict[str, Any]:
    """The measure with an optional permutation null and bootstrap interval (seeded).

    Parameters
    ----------
    name, X, Y, **params
        As for :func:`similarity`.
    permutations : int, default=0
        Number of row shuffles of Y for the null distribution (0: no null).
    bootstrap : int, default=0
        Number of draws for the 95 % interval (0: no interval): joint row resamples of X
        and Y, or random halves of the images for the measures that copies would inflate
        (``ci_method``, module docstring).
    seed : int, default=0
        Seed of both (independent) random streams.
    progress : bool, default=False
        tqdm bars (with the time left) over the permutation and bootstrap draws.
    alpha : float in (0, 1), default=0.05
        Significance level of the calibrated score's threshold τ (module docstring).

    Returns
    -------
    dict
        ``value``; ``p_value`` (None without permutations); ``null_mean``, ``null_std``
        (ddof = 1; None without permutations, std None with a single one);
        ``value_minus_null``; ``tau`` and ``calibrated`` (the threshold and the calibrated
        score, None without permutations) and ``alpha``; ``ci95`` (``[lo, hi]`` or None)
        and ``ci_method`` (None without an interval); ``higher_is_more_similar``;
        ``params`` (all parameters used); ``n_permutations``; ``n_bootstrap``; ``seed``.
        All values are plain Python types (JSON-ready).

    Raises
    ------
    RDXInputError
        As :func:`similarity`; bad counts or seed; more memory than is available
        (:func:`rdx.similarity.resources.check_memory`, before anything is computed); a
        bootstrap draw on which the measure is undefined (the message names the draw; use
        more images).

    Examples
    --------
    >>> import numpy as np
    >>> from rdx.similarity.calibration import calibrate
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 5))
    >>> Y = X @ rng.normal(size=(5, 4)) + 0.5 * rng.normal(size=(100, 4))
    >>> r = calibrate("cka_linear", X, Y, permutations=200, seed=0)
    >>> round(r["value"], 3), round(r["p_value"], 4), round(r["calibrated"], 3)
    (0.609, 0.005, 0.599)

    The p-value is (1 + draws at least as similar) / (1 + draws): here no shuffle of Y came
    close, so it is the smallest 200 draws can give, 1/201.
    """
    from tqdm.auto import tqdm

    m, merged = resolve_measure(name, params)
    n_perm = check_count(permutations, "permutations")
    n_boot = check_count(bootstrap, "bootstrap")
    seed = check_count(seed, "seed")
    alpha = check_alpha(alpha)
    check_inputs_memory(name, X, Y, permutations=n_perm, bootstrap=n_boot, **params)
    X, Y = _validated(name, X, Y)
    n = X.shape[0]
    if n_perm or n_boot:   # before the first draw: a count that cannot finish is refused
        check_draws(name, n, X.shape[1], Y.shape[1], permutations=n_perm, bootstrap=n_boot,
                    **params)
    prepared = _PREPARE[name](X, Y, **merged)
    value = _finite(name, prepared.value)

    p_value = null_mean = null_std = minus = tau = calibrated = None
    if n_perm:
        null = np.array([prepared.permuted(perm) for perm in tqdm(
            permutation_draws(n, n_perm, seed), total=n_perm, desc=f"{name} permutations",
            unit="draw", disable=not progress, leave=False, delay=1.0)])
        if not np.isfinite(null).all():   # a NaN null would give a meaningless p-value
            raise RDXInputError(
                f"{name}: {int((~np.isfinite(null)).sum())} of {n_perm} permutation draws "
                f"(seed {seed}) came out NaN/inf: the measure is undefined on shuffled "
                "pairs of these inputs. Use no permutations, or check the features.")
        p_value = permutation_p_value(value, null,
                                      higher_is_more_similar=m.higher_is_more_similar)
        null_mean = float(null.mean())
        null_std = float(null.std(ddof=1)) if n_perm > 1 else None
        minus = value - null_mean
        tau, calibrated = calibrated_score(value, null, alpha=alpha,
                                           higher_is_more_similar=m.higher_is_more_similar)

    ci95 = ci_method = None
    if n_boot:
        ci_method = CI_METHODS[name]
        half = ci_method == "half_sampling"
        draws = half_sample_draws(n, n_boot, seed) if half else bootstrap_draws(n, n_boot, seed)
        vals = np.empty(n_boot)
        for b, idx in enumerate(tqdm(draws, total=n_boot, desc=f"{name} {ci_method}",
                                     unit="draw", disable=not progress, leave=False,
                                     delay=1.0)):
            try:
                if hasattr(prepared, "bootstrap"):
                    vals[b] = prepared.bootstrap(idx)
                elif name in _BOOTSTRAP:
                    vals[b] = _BOOTSTRAP[name](X, Y, idx, **merged)
                else:
                    t = torch.as_tensor(idx, device=X.device)
                    vals[b] = _as_float(m.fn(X[t], Y[t], **merged))
            except RDXInputError as exc:
                what = "half sample" if half else "bootstrap draw"
                raise RDXInputError(
                    f"{name}: {what} {b} (seed {seed}) is a sample on which the "
                    f"measure is undefined: {exc} Use more images or no bootstrap.") from None
        if not np.isfinite(vals).all():
            raise RDXInputError(
                f"{name}: {int((~np.isfinite(vals)).sum())} of {n_boot} {ci_method} draws "
                f"(seed {seed}) came out NaN/inf, so the interval is undefined. Use more "
                "images or no bootstrap.")
        if half:
            ci95 = half_sampling_interval(value, vals, n)
        else:
            ci95 = [float(v) for v in np.percentile(vals, [2.5, 97.5])]

    return {"value": value, "p_value": p_value, "null_mean": null_mean,
            "null_std": null_std, "value_minus_null": minus, "tau": tau,
            "calibrated": calibrated, "alpha": alpha, "ci95": ci95,
            "ci_method": ci_method,
            "higher_is_more_similar": m.higher_is_more_similar, "params": merged,
            "n_permutations": n_perm, "n_bootstrap": n_boot, "seed": seed}


#: How :func:`calibrate_layers` aggregates the layer × layer matrix.
LAYER_AGGREGATES = ("best", "mean")


def calibrate_layers(name: str, X_layers: Sequence[Any], Y_layers: Sequence[Any], *,
                     permutations: int = 0, aggregate: str = "best",
                     alpha: float = CALIBRATION_ALPHA, seed: int = 0,
                     **params: Any) -> dict[str, Any]:
    """The measure between every layer of X and every layer of Y, aggregated, against a
    layer-wise permutation null: each permutation of the images is applied to every layer
    of Y at once (calibrated-similarity's ``calibrate_layers``), so picking the best layer
    pair is part of the null and its p-value is not inflated by the number of pairs.

    Parameters
    ----------
    name, **params
        The measure and its parameters (as for :func:`similarity`).
    X_layers, Y_layers : sequences of arrays of shape (n, d_l)
        The layers of the two models on the same n images (widths may differ).
    permutations : int, default=0
        Shared row permutations of Y's layers (the stream of :func:`permutation_draws`).
    aggregate : {"best", "mean"}, default="best"
        The best pair (the largest similarity, the smallest distance; calibrated-
        similarity's ``agg="max"`` for similarities) or the mean over all pairs.
    alpha : float in (0, 1), default=0.05
        Significance level of the threshold τ of the calibrated aggregate.
    seed : int, default=0

    Returns
    -------
    dict
        ``matrix`` (the len(X_layers) × len(Y_layers) values), ``value`` (the aggregate),
        ``p_value``, ``null_mean``, ``tau``, ``calibrated`` (None without permutations),
        ``best_pair`` (the indices of the best pair), ``aggregate``, ``alpha``,
        ``higher_is_more_similar``, ``params``, ``n_permutations``, ``seed``.

    Raises
    ------
    RDXInputError
        No layers, layers with different numbers of images, bad counts, parameters or
        inputs (as :func:`calibrate`).
    """
    from .inputs import check_choice

    m, merged = resolve_measure(name, params)
    n_perm = check_count(permutations, "permutations")
    seed = check_count(seed, "seed")
    alpha = check_alpha(alpha)
    aggregate = check_choice(aggregate, "aggregate", LAYER_AGGREGATES, what="calibrate_layers")
    for side, layers in (("X_layers", X_layers), ("Y_layers", Y_layers)):
        if isinstance(layers, (np.ndarray, torch.Tensor)) or not len(layers):
            raise RDXInputError(f"calibrate_layers: {side} must be a non-empty list of "
                                "n × d arrays (one per layer).")
    Xs = [_validated(name, Z, Z)[0] for Z in X_layers]
    Ys = [_validated(name, Z, Z)[0] for Z in Y_layers]
    n = Xs[0].shape[0]
    bad = [f"{side}[{i}]" for side, layers in (("X_layers", Xs), ("Y_layers", Ys))
           for i, Z in enumerate(layers) if Z.shape[0] != n]
    if bad:
        raise RDXInputError(f"calibrate_layers: every layer must hold the same {n} images; "
                            f"{', '.join(bad)} differ(s).")
    for X in Xs:
        for Y in Ys:
            check_inputs_memory(name, X, Y, permutations=n_perm, **params)
    prepared = [[_PREPARE[name](X, Y, **merged) for Y in Ys] for X in Xs]
    higher = m.higher_is_more_similar

    def reduce(S: np.ndarray) -> float:
        if aggregate == "mean":
            return float(S.mean())
        return float(S.max() if higher else S.min())

    S = np.array([[_finite(name, p.value) for p in row] for row in prepared])
    value = reduce(S)
    flat = int(np.argmax(S) if higher else np.argmin(S))
    out: dict[str, Any] = {
        "matrix": S.tolist(), "value": value, "aggregate": aggregate,
        "best_pair": [flat // S.shape[1], flat % S.shape[1]], "p_value": None,
        "null_mean": None, "tau": None, "calibrated": None, "alpha": alpha,
        "higher_is_more_similar": higher, "params": merged, "n_permutations": n_perm,
        "seed": seed}
    if n_perm:
        null = np.array([reduce(np.array([[p.permuted(perm) for p in row]
                                          for row in prepared]))
                         for perm in permutation_draws(n, n_perm, seed)])
        if not np.isfinite(null).all():
            raise RDXInputError(f"{name}: a layer-wise permutation draw (seed {seed}) came "
                                "out NaN/inf: the measure is undefined on shuffled pairs of "
                                "these inputs.")
        out["p_value"] = permutation_p_value(value, null, higher_is_more_similar=higher)
        out["null_mean"] = float(null.mean())
        out["tau"], out["calibrated"] = calibrated_score(value, null, alpha=alpha,
                                                         higher_is_more_similar=higher)
    return out
