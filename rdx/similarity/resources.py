"""What a similarity measure costs: every measure's peak memory and running time as
functions of n and the two widths, so that a computation that cannot fit is refused before
it starts (with the figure and a subsample size that fits) and a long one says how long it
will take (:func:`rdx.similarity.calibration.calibrate` checks both before its draws).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..backend import available_memory_bytes, format_bytes, memory_limit_from_env
from ..errors import RDXInputError
from . import cka as _cka
from . import cka_rbf as _cka_rbf
from .inputs import BLOCK_BYTES
from .rdm import RSA_BYTES
from .registry import resolve_measure

_KNN = ("mutual_knn", "cknna", "jaccard_knn")
_N2 = ("cka_rbf", "rsa")
#: ``faiss`` holds float32 copies of the searched rows (k-NN engine ``auto`` at large n).
_FAISS_BYTES = 8


def estimate_memory(name: str, n: int, p: int, q: int, *, permutations: int = 0,
                    bootstrap: int = 0, **params: Any) -> tuple[int, str]:
    """Peak bytes :func:`~rdx.similarity.calibration.calibrate` needs beyond its inputs, and
    what they hold.

    Parameters
    ----------
    name, **params
        The measure and its parameters (as for
        :func:`rdx.similarity.calibration.similarity`).
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
    _m, merged = resolve_measure(name, params)
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
    else:   # svcca, pwcca
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
    per second) of torch on the CPU, with its thread setting, and numpy's random gathers
    (float64 elements per second)."""
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
        # numpy's random gathers (RSA's permutation and bootstrap draws are bound by them)
        vn = v.numpy()
        order = np.random.default_rng(0).permutation(vn.size)
        _RATES["gather"] = vn.size / timed(lambda: vn.take(order), reps=2)
    return _RATES


def estimate_seconds(name: str, n: int, p: int, q: int, *, permutations: int = 0,
                     bootstrap: int = 0, **params: Any) -> float:
    """Rough CPU time of :func:`~rdx.similarity.calibration.calibrate` (within a factor of
    about 3): an operation count of the measure, its null draws and interval draws, divided
    by this machine's measured GEMM, elementwise and sort rates."""
    _m, merged = resolve_measure(name, params)
    r = _machine_rates()
    n, p, q = float(n), float(p), float(q)

    def sort_cost(m: float) -> float:
        return m * np.log2(max(m, 2.0)) / r["sort"]

    if name in ("cka_linear", "cka_linear_biased"):
        # "elem" is an exp-based rate: the centring and row norms cost ~4 of its operations
        # per entry (20 overestimated the guide's example, n = 1797, 8-fold)
        value = n * (p * q + p * p + q * q) / r["gemm64"] + 4 * n * (p + q) / r["elem"]
        perm = n * p * q / r["gemm64"] + n * q / r["elem"]
        boot = value / 2
    elif name == "cka_rbf":
        value = n * n * (p + q) / r["gemm64"] + 30 * n * n / r["elem"] \
            + 2 * sort_cost(n * n / 2)
        perm = 10 * n * n / r["elem"]     # gathers of the permuted kernel
        boot = value / 4
    elif name == "rsa":
        pairs = n * (n - 1) / 2
        tau = merged["compare"] == "kendall_tau_a"
        # scipy's τ counts discordant pairs by two stable sorts and a merge count
        tau_cost = 3.5 * sort_cost(pairs) + 10 * pairs / r["elem"]
        value = n * n * (p + q) / 2 / r["gemm64"] + 20 * n * n / r["elem"] \
            + 2 * sort_cost(pairs) + (tau_cost if tau else 0.0)
        # a permutation gathers Y's n×n matrix (two takes and a product, or τ anew); a
        # bootstrap draw is weighted sums over the pairs (spearman: cumulative sums in
        # both sort orders and one gather; τ: a count over the repeated entries), after a
        # one-off rebuild and sort of both RDMs
        # (in gathers: measured 0.42 n² and 5.0 N per draw at n = 1797 on 2 cores)
        perm = tau_cost if tau else 0.5 * n * n / r["gather"]
        boot = tau_cost if tau else (5.0 if merged["compare"] == "spearman"
                                     else 2.0) * pairs / r["gather"]
        if bootstrap:
            value += value + 2 * sort_cost(pairs)
    elif name in _KNN:
        k = float(merged["k"])
        value = 2 * n * n * max(p, q) / r["gemm32"] + 16 * n * n / r["elem"] \
            + 2 * n * (k + 16) * max(p, q) / r["gemm64"]
        perm = boot = 40 * n * k / r["elem"]
    else:   # procrustes, svcca, pwcca: feature-space products and SVDs
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

    counts = {"permutations": check_count(permutations, options[0]),
              "bootstrap": check_count(bootstrap, options[1])}
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


def check_count(value: Any, name: str) -> int:
    """A non-negative integer (the draw counts' bounds: :func:`check_draws`)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or int(value) < 0:
        raise RDXInputError(f"{name} must be a non-negative integer, got {value!r}.")
    return int(value)


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


def check_inputs_memory(name: str, X: Any, Y: Any, *, permutations: int = 0,
                        bootstrap: int = 0, **params: Any) -> None:
    """:func:`check_memory` on the inputs' shapes, before any copy is made (skipped when
    the shapes are not known yet: validation then says what is wrong)."""
    sx, sy = _shape2(X), _shape2(Y)
    if sx is None or sy is None or sx[0] != sy[0]:
        return
    check_memory(name, sx[0], sx[1], sy[1], device=_device_of(X, Y),
                 permutations=permutations, bootstrap=bootstrap, **params)
