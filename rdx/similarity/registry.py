"""The similarity-measure registry, one entry point, and calibration (null and intervals).

``MEASURES`` maps a stable name to a :class:`Measure` (function + metadata):

==================== =================================================== ==========
name                 what                                                  higher is
                                                                           similar
==================== =================================================== ==========
cka_linear           debiased linear CKA (U-statistic HSIC)                yes
cka_linear_biased    biased linear CKA (Kornblith et al. 2019)             yes
cka_rbf              RBF CKA (sigma, sigma_mode, debiased)                 yes
rsa                  RSA (rdm: correlation|cosine|euclidean,              yes
                     compare: spearman|pearson)
mutual_knn           mutual k-NN overlap (k)                               yes
cknna                CKNNA, Huh et al. 2024 (k)                            yes
jaccard_knn          Jaccard k-NN (k)                                      yes
procrustes           orthogonal Procrustes distance (kind)                 **no**
svcca                SVCCA, mean canonical correlation (keep)              yes
==================== =================================================== ==========

Invariance tags (transformations of one input that leave the score unchanged, with the
default parameters): ``orthogonal`` (X → XQ, QᵀQ = I), ``isotropic_scaling`` (X → cX),
``translation`` (X → X + 1bᵀ), ``per_image_scaling`` (each row scaled by its own c_i > 0),
``per_image_shift`` (a constant added to all features of a row), ``feature_permutation``.

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
  - ``half_sampling`` (cka_linear, cka_linear_biased, cka_rbf, procrustes, svcca): these
    see copies as perfectly aligned extra images — for two *unrelated* 64-d
    representations of 400 images, debiased linear CKA is −0.0005 but a with-replacement
    bootstrap gives [0.10, 0.14], entirely above it. Instead each draw is a random half of
    the images (m = ⌊n/2⌋, without replacement), the delete-d jackknife of Shao & Wu
    (1989): with d = n − m the spread of half-sample values, scaled by √(m/d) (1 for even
    n), estimates the sampling spread of the full-sample value. The interval is the
    2.5–97.5 % percentiles of the half-sample values minus their mean, scaled, added to
    the full-sample value (so an n-dependent bias of the half samples — biased CKA, SVCCA
    — does not shift it).

Permutations and bootstrap draws come from independent streams of
``numpy.random.SeedSequence(seed)``, so changing one count does not change the other's draws.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..backend import available_memory_bytes, format_bytes, memory_limit_from_env
from ..errors import RDXInputError
from . import cca as _cca
from . import cka as _cka
from . import cka_rbf as _cka_rbf
from . import neighbors as _nb
from . import procrustes as _proc
from .inputs import BLOCK_BYTES, as_tensor_pair
from .names import MEASURE_NAMES
from .rdm import RSA_BYTES, prepare_rsa, rsa_bootstrap
from .rdm import rsa as _rsa_fn


@dataclass(frozen=True)
class Measure:
    """A registered similarity measure.

    Attributes
    ----------
    name : str
        Stable identifier (used by the CLI and in result files).
    fn : callable
        ``fn(X, Y, **params) -> float`` (torch scalars for torch inputs in the CKA case).
    higher_is_more_similar : bool
        False for distances (procrustes).
    symmetric : bool
        ``fn(X, Y) == fn(Y, X)``.
    invariances : tuple of str
        Invariance tags (module docstring) under the default parameters.
    params : dict
        Parameter names and their defaults.
    description : str
        One-line definition.
    """

    name: str
    fn: Callable[..., Any]
    higher_is_more_similar: bool
    symmetric: bool
    invariances: tuple[str, ...]
    params: dict[str, Any]
    description: str


_GLOBAL = ("orthogonal", "isotropic_scaling", "translation")
_COSINE = ("orthogonal", "isotropic_scaling", "per_image_scaling")

MEASURES: dict[str, Measure] = {m.name: m for m in (
    Measure("cka_linear", _cka.debiased_linear_cka, True, True, _GLOBAL, {},
            "Debiased linear CKA: U-statistic HSIC of the linear Grams XXᵀ, YYᵀ "
            "(feature-space form, O(n·d²))."),
    Measure("cka_linear_biased", _cka.biased_linear_cka, True, True, _GLOBAL, {},
            "Biased linear CKA ‖XcᵀYc‖²_F / (‖XcᵀXc‖_F‖YcᵀYc‖_F) (Kornblith et al. 2019)."),
    Measure("cka_rbf", _cka_rbf.rbf_cka, True, True, _GLOBAL,
            {"sigma": 1.0, "sigma_mode": "median_fraction", "debiased": True},
            "RBF-kernel CKA, σ = sigma·√(median squared distance) per representation "
            "(sigma_mode='median_fraction') or σ = sigma (sigma_mode='absolute'; not scale "
            "invariant); debiased HSIC by default."),
    Measure("rsa", _rsa_fn, True, True,
            ("isotropic_scaling", "per_image_scaling", "per_image_shift",
             "feature_permutation"),
            {"rdm": "correlation", "compare": "spearman"},
            "RSA: Spearman (or Pearson) correlation of the upper triangles of the two RDMs "
            "(1 − Pearson r of image pairs by default; cosine or Euclidean). Invariances "
            "listed are for rdm='correlation'; 'euclidean' is orthogonal/translation/"
            "isotropic-scaling invariant, 'cosine' orthogonal/scaling invariant."),
    Measure("mutual_knn", _nb.mutual_knn, True, True, _COSINE, {"k": 10},
            "Mutual k-NN: mean over images of |N_k^X(i) ∩ N_k^Y(i)|/k, cosine neighbours, "
            "self excluded (Huh et al. 2024)."),
    Measure("cknna", _nb.cknna, True, True, _COSINE, {"k": 10},
            "CKNNA (Huh et al. 2024): CKA of the row-centred cosine kernels restricted to "
            "pairs that are k-NN in both representations."),
    Measure("jaccard_knn", _nb.jaccard_knn, True, True, _COSINE, {"k": 10},
            "Jaccard k-NN: mean over images of |N^X ∩ N^Y| / |N^X ∪ N^Y|, cosine "
            "neighbours, self excluded."),
    Measure("procrustes", _proc.procrustes_distance, False, True, _GLOBAL,
            {"kind": "squared"},
            "Orthogonal Procrustes distance 2 − 2‖X̄ᵀȲ‖_* of centred, unit-Frobenius-norm "
            "inputs (kind 'euclidean': its root; 'angular': arccos ‖X̄ᵀȲ‖_*). A distance."),
    Measure("svcca", _cca.svcca, True, True, _GLOBAL, {"keep": 0.99},
            "SVCCA: keep the SVD directions explaining 99% of the variance of each input, "
            "then the mean canonical correlation."),
)}
# the command-line parsers read the names from .names (no torch import): keep them in step
if tuple(MEASURES) != MEASURE_NAMES:
    raise ImportError("rdx.similarity.names.MEASURE_NAMES must list the registry's measures "
                      f"in order: {tuple(MEASURES)}")

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
}

#: Measures whose bootstrap is not "recompute on the resampled rows" (module docstring).
_BOOTSTRAP: dict[str, Callable[..., float]] = {
    "rsa": rsa_bootstrap,
}


def _resolve(name: Any, params: dict[str, Any]) -> tuple[Measure, dict[str, Any]]:
    if not isinstance(name, str) or name not in MEASURES:
        raise RDXInputError(f"unknown similarity measure {name!r}; use one of "
                            f"{', '.join(MEASURES)}.")
    m = MEASURES[name]
    unknown = sorted(set(params) - set(m.params))
    if unknown:
        takes = (f"its parameters are {', '.join(m.params)}" if m.params
                 else "it takes no parameters")
        raise RDXInputError(f"similarity measure {name!r} has no parameter(s) "
                            f"{', '.join(unknown)}; {takes}.")
    merged = {**m.params, **params}
    # plain Python types, so that the params can go straight into JSON
    return m, {k: (v.item() if isinstance(v, np.generic) else v) for k, v in merged.items()}


def _validated(name: str, X: Any, Y: Any) -> tuple[torch.Tensor, torch.Tensor]:
    X, Y, _ = as_tensor_pair(X, Y, what=f"similarity measure {name!r}", min_n=4)
    return X.detach(), Y.detach()


def _as_float(v: Any) -> float:
    return float(v.detach()) if isinstance(v, torch.Tensor) else float(v)


# ----------------------------------------------------------------------------- resources
# Every measure's peak memory and running time as functions of n and the two widths, so
# that a computation that cannot fit is refused before it starts (with the figure and a
# subsample size that fits) and a long one says how long it will take.

_KNN = ("mutual_knn", "cknna", "jaccard_knn")
_N2 = ("cka_rbf", "rsa")
#: ``faiss`` holds float32 copies of the searched rows (k-NN engine ``auto`` at large n).
_FAISS_BYTES = 8


def estimate_memory(name: str, n: int, p: int, q: int, *, permutations: int = 0,
                    bootstrap: int = 0, **params: Any) -> tuple[int, str]:
    """Peak bytes :func:`calibrate` needs beyond its inputs, and what they hold.

    Parameters
    ----------
    name, **params
        The measure and its parameters (as for :func:`similarity`).
    n, p, q : int
        Images and the widths of X and Y.
    permutations, bootstrap : int
        Draws of the null and of the interval (some measures keep more for them).

    Returns
    -------
    bytes : int
    what : str
        The dominant allocations, for messages.
    """
    _m, merged = _resolve(name, params)
    n, p, q = int(n), int(p), int(q)
    copies = 8 * n * (p + q)          # float64 copies of both inputs (validation)
    resampled = copies if bootstrap else 0   # a bootstrap draw's rows
    if name in ("cka_linear", "cka_linear_biased"):
        extra = copies + (8 * n * q if permutations or bootstrap else 0) \
            + 8 * (p * q + p * p + q * q)
        if permutations and n * _cka.KERNEL_PERMUTATION_COST < p * q \
                and n <= _cka.KERNEL_PERMUTATION_MAX_N:
            extra += 2 * 8 * n * n     # the permutations' centred Gram matrices
        what = ("float64 copies and centred copies of both inputs, feature-space Grams "
                "(and, for permutations with fewer images than feature pairs, two n×n ones)")
    elif name == "cka_rbf":
        extra = _cka_rbf._TWO_KERNELS * n * n
        what = _cka_rbf._TWO_KERNELS_WHAT
    elif name == "rsa":
        # the null keeps both standardised RDMs as n×n matrices; the bootstrap keeps both
        # RDMs with their sort orders and the pairs' image ids (about 40 bytes per n²)
        extra = ((20.0 if permutations else 0.0) + (40.0 if bootstrap else 0.0)
                 or RSA_BYTES) * n * n
        what = ", ".join(w for w, on in (
            ("two n×n float64 matrices of the standardised RDMs", permutations),
            ("both RDMs with their sort orders for the bootstrap", bootstrap),
            ("two n(n−1)/2 float64 dissimilarity vectors and the sort of one",
             not (permutations or bootstrap))) if on)
    elif name in _KNN:
        k = int(merged["k"])
        # row blocks of the screening GEMM: at most BLOCK_BYTES each (fewer rows at small n)
        extra = (8 + 4 + _FAISS_BYTES) * n * max(p, q) + 2 * n * k * 24 \
            + 2 * min(BLOCK_BYTES, 8 * n * n)
        what = "unit-norm float64 and float32 copies of an input, two k-NN tables"
    elif name == "procrustes":
        extra = copies + 8 * (p * q + min(p, q) * (p + q))
        what = "float64 normalised copies of both inputs, the p×q cross-covariance and its SVD"
    else:   # svcca
        extra = 2 * copies + 8 * (p * p + q * q)
        what = "float64 copies of both inputs and their SVD bases"
    return int(copies + resampled + extra), what


def check_memory(name: str, n: int, p: int, q: int, *, device: Any = "cpu",
                 permutations: int = 0, bootstrap: int = 0, **params: Any) -> int:
    """Refuse (:class:`RDXInputError`) a computation of :func:`estimate_memory` bytes that
    exceeds 90 % of the memory available on ``device`` (``RDX_MEMORY_LIMIT_GB`` caps it),
    naming the figure and the largest subsample that fits; returns the estimate."""
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    need, what = estimate_memory(name, n, p, q, permutations=permutations,
                                 bootstrap=bootstrap, **params)
    avail = available_memory_bytes(dev)
    if need <= 0.9 * avail:
        return need
    lo, hi = 0, int(n)   # the largest n whose estimate fits (estimates grow with n)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_memory(name, mid, p, q, permutations=permutations, bootstrap=bootstrap,
                           **params)[0] <= 0.9 * avail:
            lo = mid
        else:
            hi = mid - 1
    env = memory_limit_from_env() if dev.type == "cpu" else None
    capped = " (capped by RDX_MEMORY_LIMIT_GB)" if env is not None and env <= avail else ""
    scale = (" Memory grows with n²; cka_linear (O(d²)) and mutual_knn / cknna / jaccard_knn "
             "(O(n·k)) scale to this n." if name in _N2 else "")
    fit = (f"Compute it on a random subsample of at most {lo} images (the same rows of both "
           "representations)" if lo >= 4 else "Reduce the number of features (e.g. PCA)")
    raise RDXInputError(
        f"{name} at n={n} images ({p} and {q} features) needs about {format_bytes(need)} of "
        f"{dev.type.upper()} memory ({what}), but only {format_bytes(avail)} is "
        f"available{capped}. {fit}, or run it on a machine with more memory.{scale}")


_RATES: dict[str, float] = {}


def _machine_rates() -> dict[str, float]:
    """Measured once per process (~0.1 s): float64 and float32 GEMM multiply-adds per
    second, elementwise float64 operations per second and sort throughput (elements·log₂
    per second) of torch on the CPU, with its thread setting."""
    import time

    if _RATES:
        return _RATES
    g = torch.Generator().manual_seed(0)

    def timed(fn, reps: int = 3) -> float:
        fn()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        return max((time.perf_counter() - t) / reps, 1e-9)

    with torch.no_grad():
        a64 = torch.randn(1024, 256, generator=g, dtype=torch.float64)
        a32 = a64.float()
        v = torch.randn(1 << 20, generator=g, dtype=torch.float64)
        _RATES["gemm64"] = 1024 * 1024 * 256 / timed(lambda: a64 @ a64.T)
        _RATES["gemm32"] = 1024 * 1024 * 256 / timed(lambda: a32 @ a32.T)
        _RATES["elem"] = 4 * v.numel() / timed(lambda: torch.exp(v * 0.5 + 1.0).sum())
        _RATES["sort"] = v.numel() * 20 / timed(lambda: torch.sort(v), reps=1)
    return _RATES


def estimate_seconds(name: str, n: int, p: int, q: int, *, permutations: int = 0,
                     bootstrap: int = 0, **params: Any) -> float:
    """Rough CPU time of :func:`calibrate` (within a factor of about 3): an operation count
    of the measure, its null draws and interval draws, divided by this machine's measured
    GEMM, elementwise and sort rates."""
    _m, merged = _resolve(name, params)
    r = _machine_rates()
    n, p, q = float(n), float(p), float(q)

    def sort_cost(m: float) -> float:
        return m * np.log2(max(m, 2.0)) / r["sort"]

    if name in ("cka_linear", "cka_linear_biased"):
        value = n * (p * q + p * p + q * q) / r["gemm64"] + 20 * n * (p + q) / r["elem"]
        perm = n * p * q / r["gemm64"] + 4 * n * q / r["elem"]
        boot = value / 2
    elif name == "cka_rbf":
        value = n * n * (p + q) / r["gemm64"] + 30 * n * n / r["elem"] \
            + 2 * sort_cost(n * n / 2)
        perm = 10 * n * n / r["elem"]     # gathers of the permuted kernel
        boot = value / 4
    elif name == "rsa":
        value = n * n * (p + q) / 2 / r["gemm64"] + 20 * n * n / r["elem"] \
            + 2 * sort_cost(n * n / 2)
        perm = 10 * n * n / r["elem"]
        boot = value
    elif name in _KNN:
        k = float(merged["k"])
        value = 2 * n * n * max(p, q) / r["gemm32"] + 16 * n * n / r["elem"] \
            + 2 * n * (k + 16) * max(p, q) / r["gemm64"]
        perm = boot = 40 * n * k / r["elem"]
    else:   # procrustes, svcca: feature-space products and SVDs
        value = 2 * n * (p * p + q * q + p * q) / r["gemm64"] + 20 * n * (p + q) / r["elem"]
        perm = n * p * q / r["gemm64"]
        boot = value / 2
    # each draw also costs a fixed dispatch (Python, tensor set-up): measured ~0.3 ms for a
    # permutation and ~0.5 ms for a half sample of cka_linear at n = 60 on a CPU core
    perm, boot = perm + _DRAW_OVERHEAD_S, boot + 2 * _DRAW_OVERHEAD_S
    return float(value + permutations * perm + bootstrap * boot)


#: Fixed seconds per null or interval draw beyond its arithmetic (estimate_seconds).
_DRAW_OVERHEAD_S = 2.5e-4


def check_draws(name: str, n: int, p: int, q: int, *, permutations: int = 0,
                bootstrap: int = 0, options: tuple[str, str] = ("permutations", "bootstrap"),
                **params: Any) -> float:
    """Refuse draw counts above their ceilings (:data:`rdx.budget.CEILINGS`) or whose
    estimated run (:func:`estimate_seconds`) exceeds :func:`rdx.budget.max_seconds`,
    naming the option (``options``: how the caller spells ``permutations`` and
    ``bootstrap``, e.g. the command's flags), the estimate and the largest count that
    fits. Returns the estimated seconds.
    """
    from .. import budget

    counts = {"permutations": _check_count(permutations, options[0]),
              "bootstrap": _check_count(bootstrap, options[1])}
    total = estimate_seconds(name, n, p, q, **counts, **params)
    base = estimate_seconds(name, n, p, q, **params)
    # the count that costs most is named first when the total is too long
    each = {key: (estimate_seconds(name, n, p, q, **{key: count}, **params) - base) / count
            for key, count in counts.items() if count}
    for key in sorted(each, key=lambda k: -each[k] * counts[k]):
        option = options[0] if key == "permutations" else options[1]
        budget.check_duration(option, int(counts[key]), seconds=total,
                              seconds_each=each[key], what=f"{name} at n = {n}",
                              announce=False)
    return total


def _shape2(Z: Any) -> tuple[int, int] | None:
    shape = getattr(Z, "shape", None)
    if shape is None or len(shape) != 2:
        return None
    return int(shape[0]), int(shape[1])


def _device_of(*Z: Any) -> torch.device:
    for z in Z:
        if isinstance(z, torch.Tensor) and z.device.type == "cuda":
            return z.device
    return torch.device("cpu")


def _check_inputs_memory(name: str, X: Any, Y: Any, *, permutations: int = 0,
                         bootstrap: int = 0, **params: Any) -> None:
    """:func:`check_memory` on the inputs' shapes, before any copy is made (skipped when
    the shapes are not known yet: validation then says what is wrong)."""
    sx, sy = _shape2(X), _shape2(Y)
    if sx is None or sy is None or sx[0] != sy[0]:
        return
    check_memory(name, sx[0], sx[1], sy[1], device=_device_of(X, Y),
                 permutations=permutations, bootstrap=bootstrap, **params)


def similarity(name: str, X: Any, Y: Any, **params: Any) -> float:
    """Compute the measure ``name`` of X and Y.

    Parameters
    ----------
    name : str
        A key of :data:`MEASURES`.
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
    """
    m, merged = _resolve(name, params)
    _check_inputs_memory(name, X, Y, **params)
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


def _check_count(value: Any, name: str) -> int:
    """A non-negative integer (the draw counts' bounds: :func:`check_draws`)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or int(value) < 0:
        raise RDXInputError(f"{name} must be a non-negative integer, got {value!r}.")
    return int(value)


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
                                    "procrustes", "svcca")},
}


def half_sample_draws(n: int, count: int, seed: int) -> Iterator[np.ndarray]:
    """The half samples (⌊n/2⌋ distinct rows each, sorted) that :func:`calibrate` uses for
    ``seed`` and the ``half_sampling`` interval (the bootstrap stream of
    ``SeedSequence(seed)``), one at a time."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])
    for _ in range(count):
        yield np.sort(rng.choice(n, size=n // 2, replace=False))


def half_sampling_interval(value: float, half_values: np.ndarray, n: int) -> list[float]:
    """95 % interval from half-sample values (delete-d jackknife, module docstring)."""
    m = n // 2
    scale = np.sqrt(m / (n - m))
    lo, hi = np.percentile(half_values, [2.5, 97.5]) - half_values.mean()
    return [float(value + scale * lo), float(value + scale * hi)]


def calibrate(name: str, X: Any, Y: Any, *, permutations: int = 0, bootstrap: int = 0,
              seed: int = 0, progress: bool = False, **params: Any) -> dict[str, Any]:
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

    Returns
    -------
    dict
        ``value``; ``p_value`` (None without permutations); ``null_mean``, ``null_std``
        (ddof = 1; None without permutations, std None with a single one);
        ``value_minus_null``; ``ci95`` (``[lo, hi]`` or None) and ``ci_method`` (None
        without an interval); ``higher_is_more_similar``;
        ``params`` (all parameters used); ``n_permutations``; ``n_bootstrap``; ``seed``.
        All values are plain Python types (JSON-ready).

    Raises
    ------
    RDXInputError
        As :func:`similarity`; bad counts or seed; more memory than is available
        (:func:`check_memory`, before anything is computed); a bootstrap draw on which the
        measure is undefined (the message names the draw; use more images).
    """
    from tqdm.auto import tqdm

    m, merged = _resolve(name, params)
    n_perm = _check_count(permutations, "permutations")
    n_boot = _check_count(bootstrap, "bootstrap")
    seed = _check_count(seed, "seed")
    _check_inputs_memory(name, X, Y, permutations=n_perm, bootstrap=n_boot, **params)
    X, Y = _validated(name, X, Y)
    n = X.shape[0]
    if n_perm or n_boot:   # before the first draw: a count that cannot finish is refused
        check_draws(name, n, X.shape[1], Y.shape[1], permutations=n_perm, bootstrap=n_boot,
                    **params)
    prepared = _PREPARE[name](X, Y, **merged)
    value = _finite(name, prepared.value)

    p_value = null_mean = null_std = minus = None
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
            "null_std": null_std, "value_minus_null": minus, "ci95": ci95,
            "ci_method": ci_method,
            "higher_is_more_similar": m.higher_is_more_similar, "params": merged,
            "n_permutations": n_perm, "n_bootstrap": n_boot, "seed": seed}
