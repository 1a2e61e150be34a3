"""Options of the large-n mode (``graph="knn"``) that the estimator checks before any work:
the graph kinds, the rules for K, the landmark default and the parameter checks.

Kept apart from :mod:`rdx.method.knn_fit` (which loads torch and SciPy's sparse
solvers) so that validating or fitting with ``graph="dense"`` loads neither.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import RDXInputError
from .graphs import resolve_gamma

#: ``auto`` picks ``dense`` where its n×n matrices fit in memory, ``knn`` elsewhere.
GRAPHS = ("auto", "dense", "knn")
#: ``n_neighbors="auto"`` (the default): K = min(DEFAULT_N_NEIGHBORS, n − 1), with the
#: far-pair sketch of ``n_landmarks`` images (:func:`resolve_n_neighbors`).
AUTO_N_NEIGHBORS = "auto"
DEFAULT_N_NEIGHBORS = 200
#: ``n_neighbors="null"``: the smallest K at which no neglected pair reaches the null
#: threshold on its own (:func:`null_threshold_neighbors`; 821–973 for n = 5 000–100 000).
NULL_N_NEIGHBORS = "null"
N_NEIGHBORS_RULES = (AUTO_N_NEIGHBORS, NULL_N_NEIGHBORS)
#: Landmark images of the far-pair sketch (``n_landmarks``; 0: no sketch).
DEFAULT_N_LANDMARKS = 1000
#: How the large-n pass finds neighbours and ranks (``knn_search``): ``exact`` (every
#: distance, O(n²·d)), ``approx`` (faiss IVF lists and sampled ranks,
#: :mod:`rdx.method.knn_approx`) or ``auto`` (:func:`resolve_knn_search`).
KNN_SEARCHES = ("auto", "exact", "approx")
#: ``knn_search="auto"`` takes ``approx`` above this many images (on the CPU, in this
#: process): only where the exact pass would take hours (it grows as n²: 227 s at 10⁵ on a
#: 2-core CPU, ≈ 1.6 h at 5·10⁵), because the approximate one was validated against the
#: dense method at 2·10⁴ only (the large-n guide), not against the exact pass at 10⁵+.
APPROX_MIN_N = 500_000


def check_knn_params(params: dict[str, Any], n: int) -> None:
    """Refuse options the K-NN graph does not support, K outside 2..n−1 (the rules of
    :func:`resolve_n_neighbors` always lie in that range), a bad ``n_landmarks`` or
    ``knn_search``."""
    from ..validation import shown_name, shown_setting

    check_knn_search(params)
    K = params.get("n_neighbors")
    # named as the user set it: n_neighbors in Python, --n-neighbors in rdx explain
    name, auto = shown_name("n_neighbors"), shown_setting("n_neighbors", AUTO_N_NEIGHBORS)
    if isinstance(K, str):
        if K not in N_NEIGHBORS_RULES:
            raise RDXInputError(f"{name} must be an integer, {AUTO_N_NEIGHBORS!r} or "
                                f"{NULL_N_NEIGHBORS!r}, got {K!r}; use {auto} (the documented "
                                "rule) or an integer from 2 to n_images − 1.")
    elif isinstance(K, bool) or not isinstance(K, (int, np.integer)):
        raise RDXInputError(f"{name} must be an integer, {AUTO_N_NEIGHBORS!r} or "
                            f"{NULL_N_NEIGHBORS!r}, got {K!r}; the rule is {auto} (an "
                            "integer: at most n_images − 1).")
    elif K < 2:
        raise RDXInputError(f"{shown_setting('n_neighbors', K)} is too small: graph='knn' "
                            f"needs at least 2 neighbours per image; use {auto} (the "
                            "documented rule) or any value from 2 to n_images − 1.")
    elif K >= n:
        raise RDXInputError(
            f"{shown_setting('n_neighbors', K)} must be below the number of images n={n} "
            f"(each image has n − 1 others); use {shown_setting('n_neighbors', n - 1)} "
            "(identical to the exact method) or less — at this size graph='dense' is exact "
            "and fits in memory.")
    m = params.get("n_landmarks", 0)
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 0:
        raise RDXInputError(f"n_landmarks must be an integer ≥ 0, got {m!r}; use "
                            f"n_landmarks={DEFAULT_N_LANDMARKS} (the default far-pair sketch) "
                            "or 0 (no sketch: pairs off the graph count as neutral).")
    unsupported = {
        "similarity": ("neighborhood", "the K-NN graph is built from neighbour ranks"),
        "difference": ("locally_biased", "only the locally biased difference of pairs outside "
                       "the K-NN graphs is small"),
        "clustering": ("spectral", "the centrality selectors are implemented for the dense "
                       "graph only"),
    }
    for name, (allowed, why) in unsupported.items():
        if params.get(name) != allowed:
            raise RDXInputError(f"graph='knn' supports {name}={allowed!r} only ({why}), got "
                                f"{params.get(name)!r}; use graph='dense' for it.")
    # RDX v2's options (where the estimator has them): only the paper's algorithm here
    v2 = [f"{name}={params[name]!r}" for name, ok in (
        ("variant", ("paper",)), ("symmetrize_ranks", ("auto", None)),
        ("symmetrize_difference", (False,)), ("filter_threshold", ("auto", None)),
        ("label_grids", (False,))) if name in params and params[name] not in ok]
    if v2:
        raise RDXInputError(f"graph='knn' implements the paper's algorithm only; {', '.join(v2)} "
                            "needs graph='dense' (with fewer images).")
    if params.get("guidance") is not None:
        raise RDXInputError("graph='knn' does not support guidance; use graph='dense' (with "
                            "fewer images) for guided RDX.")
    if params.get("keep_graphs"):
        raise RDXInputError("keep_graphs/--save-graphs saves dense n×n matrices, which "
                            "graph='knn' never forms; drop keep_graphs or use graph='dense'.")
    if params.get("eigen_solver") == "dense":
        raise RDXInputError("eigen_solver='dense' needs the n×n matrix; with graph='knn' use "
                            "eigen_solver='auto' or 'arpack' (Lanczos on the sparse operator).")


def resolve_knn_search(params: dict[str, Any], n: int, device: str = "cpu"
                       ) -> tuple[str, str]:
    """The search a large-n fit uses and why: ``knn_search`` as given; ``"auto"``: ``approx``
    for more than :data:`APPROX_MIN_N` images on the CPU without an executor (the GPU and
    Dask run the exact pass faster, and the Dask pass is the exact one), else ``exact``."""
    search = params.get("knn_search", "auto")
    if search != "auto":
        return str(search), "given"
    if n <= APPROX_MIN_N:
        return "exact", f"auto: n ≤ {APPROX_MIN_N}"
    if params.get("executor") is not None:
        return "exact", "auto: the executor runs the exact pass"
    if not str(device).startswith("cpu"):
        return "exact", f"auto: the exact pass on {device}"
    return "approx", f"auto: n > {APPROX_MIN_N} on the CPU"


def check_knn_search(params: dict[str, Any]) -> None:
    """Refuse an unknown ``knn_search`` and ``approx`` with an executor (the Dask pass is
    the exact one)."""
    search = params.get("knn_search", "auto")
    if search not in KNN_SEARCHES:
        raise RDXInputError(f"knn_search must be one of {', '.join(map(repr, KNN_SEARCHES))}, "
                            f"got {search!r}; use 'auto' (approximate above {APPROX_MIN_N} "
                            "images on the CPU), 'exact' or 'approx'.")
    if search == "approx" and params.get("executor") is not None:
        raise RDXInputError("knn_search='approx' runs in this process (faiss); executor "
                            "distributes the exact pass: drop one of them.")


def null_threshold_neighbors(n: int, gamma: float, beta: float, null_threshold: float) -> int:
    """Smallest K at which no neglected pair can reach the null threshold on its own:
    ``exp(β·t_K) ≤ null_threshold`` with ``t_K = tanh(γ(n−K−2)/(K+2))``, i.e.
    ``K ≥ (γ(n−2) − 2x)/(x + γ)`` with ``x = atanh(ln(null_threshold)/β)`` (for the defaults
    β = 5, γ = 80/n, threshold 1.5: 821 at n = 5 000, 973 at 100 000, below 80/x ≈ 984 for
    every n); ``n − 1`` when no threshold is set (≤ 1)."""
    if null_threshold <= 1.0:
        return n - 1
    y = math.log(null_threshold) / beta
    if y >= 1.0:
        return 2
    x = math.atanh(y)
    k = math.ceil((gamma * (n - 2) - 2 * x) / (x + gamma))
    return int(min(n - 1, max(2, k)))


def resolve_n_neighbors(params: dict[str, Any], n: int, gamma: float | None = None) -> int:
    """The K of a fit: ``params["n_neighbors"]`` as given; ``"auto"``: ``min(200, n − 1)``;
    ``"null"``: the null rule :func:`null_threshold_neighbors` with the fit's γ (``gamma``;
    None: from ``params``), β and ``null_threshold``."""
    K = params["n_neighbors"]
    if K == AUTO_N_NEIGHBORS:
        return int(min(DEFAULT_N_NEIGHBORS, n - 1))
    if K != NULL_N_NEIGHBORS:
        return int(K)
    if gamma is None:
        gamma = resolve_gamma(params["gamma"], params["gamma_scale"], n)
    return null_threshold_neighbors(n, gamma, float(params["beta"]),
                                    float(params["null_threshold"]))
