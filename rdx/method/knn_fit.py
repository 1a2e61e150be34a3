"""Large-n RDX (``graph="knn"``), the fit: the difference affinity as all-ones, a sparse
correction on K-NN graphs and a low-rank sketch of the far pairs.

The exact method (``graph="dense"``) holds two n×n matrices: about 13 GB at n = 40 000 and
80 GB at 100 000. ``graph="knn"`` never forms an n×n matrix.

**Near pairs, exactly** (:mod:`rdx.method.knn_graph`). For images i ≠ j, let ``E`` be the
pairs where at least one model ranks j among i's K nearest neighbours (``R_A[i,j] ≤ K`` or
``R_B[i,j] ≤ K``): the union of the two directed K-NN graphs, at most 2K pairs per row. A
row block of squared distances of both models is computed once
(:class:`rdx.method.knn_search.Features`); its top-K gives each model's neighbours with their
ranks, and the rank of the other model's neighbours (which may be far, e.g. rank 40 000) is
counted exactly by binary search in the sorted row (ties by index, the dense rule). Cost: two
GEMMs and two row sorts of n×n entries in blocks, O(n² d) time and O(n K) memory — no
estimate, so no estimation error. With ``C[i,j] = exp(∓β·diff[i,j]) − 1`` on ``E`` (0
elsewhere and on the diagonal) and ``C_s = (C + Cᵀ)/2``.

**Far pairs.** For a pair outside ``E`` both ranks exceed K, so ``min(R_A, R_B) + 1 ≥ K + 2``
and ``|R_A − R_B| ≤ n − K − 2``: its locally biased difference is at most ``t_K = tanh(γ (n −
K − 2)/(K + 2))`` in absolute value, below ``tanh(80/K)`` with the default γ = 80/n. Each is
weak, but there are ~n² of them, and their sum can form a diffuse cluster (mean affinity just
above 1, flagged ``low_affinity``) that the dense method reports and the graph alone cannot
see (on the validation data a cluster of 835 of 10 000 images, missed by the graph alone).
The far part ``F = S − 11ᵀ − C_s`` of the symmetrised affinity is therefore modelled from
``m`` landmark images L (``n_landmarks``, drawn with the fit's seed): the same blocked pass
gives the exact ranks, in both models, of every pair (i, L_c) (binary search of the landmark
columns in the sorted rows) and (L_c, i) (a stable sort of each landmark's whole row), so
``F[:, L]`` is exact; the Nyström formula ``F ≈ F[:, L] W⁺ F[L, :]``, ``W = F[L, L]``,
truncated to the ``r = min(100, m // 10)`` largest-|λ| eigenpairs of ``W`` (the full
pseudo-inverse amplifies W's many near-zero eigenvalues), gives ``G Λ⁻¹ Gᵀ`` with ``G =
F[:, L] V_r`` (:mod:`rdx.method.knn_sketch`). With every image a landmark and no truncation
it is exact (tested: the fit equals the dense one at K = 12); with ``m = 0`` far pairs are
neutral (affinity 1, the value of a pair both models agree on). With ``K = n − 1`` there are
no far pairs and the result equals the dense method.

**Affinity operator** (:mod:`rdx.method.knn_spectral`). ``S = 11ᵀ + C_s + G Λ⁻¹ Gᵀ``: a
product costs one sparse product, a sum and two thin products, ``S v = (Σ v) 1 + C_s v + G
Λ⁻¹ (Gᵀ v)``; degrees are ``S 1`` (a sketch that makes one ≤ 0 is dropped and recorded). The
top eigenvectors of ``D^{-1/2} S D^{-1/2}`` come from Lanczos (ARPACK ``eigsh``, same start
vector, tolerance, √degree scaling, sign rule and k-means as :mod:`rdx.method.spectral`),
cluster mean affinities from ``|c||c'| + Yᵀ C_s Y + (YᵀG) Λ⁻¹ (YᵀG)ᵀ``.

**Grids** (:mod:`rdx.method.knn_grids`) use the same rules as the dense path
(:mod:`rdx.method.grids`): a member's neighbourhood of the ``grid_size`` nearest members is
read from its K-NN list in the tight model when that list holds enough members (otherwise the
distances to the cluster's members are computed), and affinities of grid pairs are ``1 + C``
plus the sketch's entries.

**Choosing K and m.** Larger K and m are closer to the exact method; memory ≈ 128·n·K bytes
for the graph plus 12·n·m for the sketch; the search and rank counting cost O(n² d) whatever
K. Default (``n_neighbors="auto"``): K = min(200, n − 1) (:data:`DEFAULT_N_NEIGHBORS`) with
m = 1000 (:data:`DEFAULT_N_LANDMARKS`): n = 100 000 fits in about 6 GB. ``"null"``: the
smallest K at which no far pair can reach the null threshold on its own, ``e^{β t_K} ≤
null_threshold`` (:func:`null_threshold_neighbors`: 821 at n = 5 000, 973 at 100 000), for
when every strong pair must be exact. The K used is recorded as
``info["knn_graph"]["n_neighbors"]``, the sketch as ``info["knn_graph"]["far_sketch"]``.
Validated against the dense method on Fashion-MNIST ConvNet features at n = 5k–20k by
``benchmarks/bench_large_n.py`` (adjusted Rand index of the partitions against several
dense seeds, grid overlap, BSR and known-difference hits; numbers in the README).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse
import torch

from ..backend import available_memory_bytes, format_bytes, seed_everything
from ..errors import RDXInputError
from ..progress import status, working
from ..results.types import DIRECTIONS, DirectionResult
from .clustering import explanations_of, union_mean
from .geometry import to_device_centered
from .graphs import resolve_gamma
from .knn_approx import RELIABLE_RECALL, build_union_graph_approx
from .knn_graph import build_union_graph, locally_biased_difference, neglected_difference_bound
from .knn_grids import select_grid_sparse
from .knn_options import (AUTO_N_NEIGHBORS, DEFAULT_N_NEIGHBORS, NULL_N_NEIGHBORS,
                          null_threshold_neighbors, resolve_knn_search, resolve_n_neighbors)
from .knn_memory import knn_memory_plan
from .knn_search import device_block_rows
from .knn_sketch import (FarSketch, choose_landmarks, far_columns, far_sketch,
                         sketch_rank)
from .knn_spectral import (block_sums_sparse, correction_matrix, degrees,
                           spectral_clustering_sparse, symmetrize)

#: exp() of float32 overflows above ~88 (the dense path refuses at the same bound).
_MAX_EXPONENT = 80.0
#: Bytes per union pair for the memory estimate: cols, two ranks, diff (16), the direction's
#: correction matrix (12), the symmetrised one (≤ 2 entries per pair, 24) and its transposed
#: temporary (12).
_BYTES_PER_PAIR = 64
#: Fixed workspace: k-means, Lanczos vectors, grid chunks.
_FIXED_BYTES = 64 * 2**20


# ----------------------------------------------------------------------------- checks
def estimate_knn_memory(n: int, d: int, n_neighbors: int, n_landmarks: int = 0, *,
                        search: str = "exact", executor: bool = False) -> int:
    """Peak bytes of the driver of a K-NN fit (:func:`rdx.method.knn_memory.knn_memory_plan`:
    centred features of both models, the union graph and its sparse affinities, the sketch of
    ``n_landmarks`` = m landmarks, the distance blocks or the approximate search's index)."""
    return knn_memory_plan(n, d, n_neighbors, n_landmarks, search=search,
                           executor=executor).driver_total


def check_knn_memory(n: int, d: int, n_neighbors: int, device: torch.device,
                     n_landmarks: int = 0, *, search: str = "exact",
                     executor: bool = False) -> None:
    """Refuse before the pass when the graph (host memory) or, on a GPU, the features and
    distance blocks (device memory) would not fit."""
    need = estimate_knn_memory(n, d, n_neighbors, n_landmarks, search=search,
                               executor=executor)
    avail = available_memory_bytes(torch.device("cpu"))
    if need > 0.9 * avail:
        sketch = (f", n_landmarks={n_landmarks} (the far-pair sketch: ≈ 12·n·m bytes)"
                  if n_landmarks else "")
        raise RDXInputError(
            f"graph='knn' with n={n} images and n_neighbors={n_neighbors}{sketch} needs about "
            f"{format_bytes(need)} of memory (≈ {_BYTES_PER_PAIR} bytes per pair of the "
            f"2·n·K-pair graph, plus features), but only {format_bytes(avail)} is available. "
            f"Use fewer neighbours ({_fitting_k_hint(n, d, avail, n_landmarks)}memory grows "
            "with n·n_neighbors), fewer landmarks, or subsample the images.")
    if device.type == "cuda":
        # per model: block, keys and torch.sort's output (4 + 8 + 8 bytes per entry)
        need_gpu = 4 * n * d + 2 * 20 * n * device_block_rows(n, device) + _FIXED_BYTES
        avail_gpu = available_memory_bytes(device)
        if need_gpu > 0.9 * avail_gpu:
            raise RDXInputError(
                f"graph='knn' on the GPU needs about {format_bytes(need_gpu)} of GPU memory "
                f"for n={n} images (features and distance blocks), but only "
                f"{format_bytes(avail_gpu)} is free; use device='cpu' or subsample.")


def _fitting_k_hint(n: int, d: int, avail: int, n_landmarks: int = 0) -> str:
    """``"n_neighbors=K fits; "`` for the largest K whose estimate is within 90 % of
    ``avail`` (the estimate is affine in K), or ``""`` when not even K = 2 fits."""
    base = estimate_knn_memory(n, d, 0, n_landmarks)
    per_k = estimate_knn_memory(n, d, 1, n_landmarks) - base
    k = int((0.9 * avail - base) // per_k)
    return f"n_neighbors={min(k, n - 1)} fits; " if k >= 2 else ""


# ----------------------------------------------------------------------------- the fit
def cluster_direction_sparse(C: scipy.sparse.csr_matrix, tight: torch.Tensor,
                             neighbors: np.ndarray, *, k: int, params: dict[str, Any],
                             sketch: FarSketch | None = None,
                             notes: dict[str, Any] | None = None) -> DirectionResult:
    """Spectral clustering, ordering, no-change group and grids of one direction — the
    steps of the dense estimator's ``_cluster_direction`` on the sparse affinity (plus the
    far-pair ``sketch``). ``notes`` receives ``sketch_rank`` (0: no sketch used)."""
    seed = int(params["random_state"])
    seed_everything(seed)   # each direction starts from the same RNG state
    Cs = symmetrize(C)
    if sketch is not None and degrees(Cs, sketch).min() <= 0:
        # every true degree is positive; a sketch that makes one ≤ 0 is unusable, and the
        # graph alone is the method's documented approximation
        sketch = None
        if notes is not None:
            notes["sketch_dropped"] = "non-positive degree with the sketch"
    if notes is not None:
        notes["sketch_rank"] = 0 if sketch is None else sketch.rank
    raw = spectral_clustering_sparse(Cs, k + 1, random_state=seed,
                                     n_init=int(params["n_init"]), sketch=sketch)
    sums = block_sums_sparse(Cs, raw, k + 1, sketch)
    del Cs
    sizes = np.bincount(raw, minlength=k + 1)
    means = np.diag(sums) / np.maximum(sizes, 1) ** 2
    # label 0 (no-change group) = lowest mean affinity; the rest ascending
    order = np.lexsort((np.arange(k + 1), means))
    low = means < float(params["null_threshold"])
    merge = bool(params["merge_low_affinity"])
    explained = [c for c in order[1:] if not (merge and low[c])]
    null_group = [c for c in order if c not in explained]
    rng = np.random.default_rng(seed)
    labels, explanations = explanations_of(
        raw, explained, means, low,
        lambda members: select_grid_sparse(members, tight, neighbors, C,
                                           size=int(params["grid_size"]),
                                           strategy=params["grid_strategy"], rng=rng,
                                           sketch=sketch))
    return DirectionResult(explanations=explanations,
                           null_members=np.flatnonzero(labels == 0).tolist(),
                           null_mean_affinity=union_mean(sums, sizes, null_group),
                           labels=labels)


def fit_knn(params: dict[str, Any], feats: dict[str, np.ndarray], *, device: torch.device,
            gamma: float | None = None) -> dict[str, Any]:
    """The K-NN-graph fit of :class:`rdx.method.estimator.RDX` (``graph="knn"``).

    Parameters
    ----------
    params : the estimator's ``get_params()``.
    feats : ``{"a": A, "b": B}`` validated float32 arrays, plus ``"a_mapped"``/``"b_mapped"``
        in aligned mode.
    device : compute device of the distance blocks.

    Returns
    -------
    dict of fitted attributes: ``directions_``, ``gamma_``, ``normalize_diff_``,
    ``n_images_``, ``timings_``, ``graph_info_``.
    """
    n = feats["a"].shape[0]
    k = int(params["n_explanations"])
    beta = float(params["beta"])
    gamma = resolve_gamma(params["gamma"], params["gamma_scale"], n) if gamma is None else gamma
    K = resolve_n_neighbors(params, n, gamma)
    search, search_why = resolve_knn_search(params, n, str(device))
    normalize = bool(params["normalize_diff"]) if params["normalize_diff"] is not None \
        else False
    progress = bool(params.get("verbose"))
    aligned = "a_mapped" in feats
    timings: dict[str, float] = {}
    t = time.perf_counter()
    X = {m: to_device_centered(v, device) for m, v in feats.items()}
    pairs = ({"a_over_b": ("a", "b_mapped"), "b_over_a": ("a_mapped", "b")} if aligned
             else {"a_over_b": ("a", "b"), "b_over_a": ("a", "b")})
    directions: dict[str, DirectionResult] = {}
    info: dict[str, Any] = {
        "n_neighbors": K,
        "n_neighbors_rule": {AUTO_N_NEIGHBORS: f"auto: min({DEFAULT_N_NEIGHBORS}, n − 1)",
                             NULL_N_NEIGHBORS: "null rule"}.get(str(params["n_neighbors"]),
                                                                "given"),
        "neglected_abs_diff_bound": neglected_difference_bound(n, K, gamma),
        "n_neighbors_null_rule": null_threshold_neighbors(n, gamma, beta,
                                                          float(params["null_threshold"])),
        "search": {"kind": search, "why": search_why}}
    n_landmarks = int(min(params.get("n_landmarks", 0), n))
    # before any work: what this fit will hold (driver and, with an executor, each worker)
    status(knn_memory_plan(n, sum(v.shape[1] for v in feats.values()), K, n_landmarks,
                           search=search,
                           executor=params.get("executor") is not None).describe(),
           show=progress)
    landmarks = None
    if n_landmarks:
        landmarks = choose_landmarks(n, n_landmarks, int(params["random_state"]))
        info["far_sketch"] = {"n_landmarks": n_landmarks, "max_rank": sketch_rank(n_landmarks)}
    graph = diff = None
    scale = 1.0
    for direction in DIRECTIONS:
        first, second = pairs[direction]
        if graph is None or aligned:
            graph = diff = None
            if search == "approx":
                graph, found = build_union_graph_approx(
                    X[first], X[second], K, landmarks=landmarks, gamma=gamma,
                    seed=int(params["random_state"]), progress=progress)
                if aligned:
                    info["search"].setdefault("per_direction", {})[direction] = found
                else:
                    info["search"].update(found)
                low = {m: r for m, r in found["recall"].items() if r < RELIABLE_RECALL}
                if low:
                    # said and recorded, not only in the numbers: missed neighbours move
                    # the clusters (the large-n guide's validation)
                    found["warning"] = (
                        "approximate search: recall of the K-NN lists "
                        + ", ".join(f"{m.upper()} {r:.3f}" for m, r in low.items())
                        + f" (below {RELIABLE_RECALL}, measured on {found['n_references']} "
                        "reference rows): true neighbours were missed, so the explanations "
                        "can differ from the exact pass's; use --knn-search exact where it "
                        "is affordable")
                    info["search"].setdefault("warnings", []).append(found["warning"])
                    status(found["warning"], show=progress)
            else:
                graph = build_union_graph(X[first], X[second], K, landmarks=landmarks,
                                          gamma=gamma, progress=progress,
                                          executor=params.get("executor"))
            t = _tick(timings, f"knn graph {direction}" if aligned else "knn graph", t)
            diff = locally_biased_difference(graph.rank_a, graph.rank_b, gamma)
            if normalize:   # the largest |diff| seen: graph pairs and landmark pairs
                seen = [np.abs(diff).max()] if len(diff) else []
                if landmarks is not None:
                    seen += [np.nanmax(np.abs(f), initial=0.0)
                             for f in (graph.far_out, graph.far_in)]
                scale = float(max(seen, default=0.0)) or 1.0
                diff /= scale
            peak = beta * (float(np.abs(diff).max()) if len(diff) else 0.0)
            if peak > _MAX_EXPONENT:
                raise RDXInputError(
                    f"the affinities exp(±β·diff) would reach e^{peak:.0f} and overflow: use a "
                    "smaller beta.")
            key = direction if aligned else "both"
            info.setdefault("union_pairs", {})[key] = graph.n_pairs
            # the graph's fingerprint (two passes compared by their records: one process
            # or Dask workers, CPU or GPU) and, for the exact pass, its blocks' seconds —
            # what a projection to N workers is built from
            info.setdefault("graph_digest", {})[key] = graph.digest()
            if graph.block_seconds is not None and len(graph.block_seconds):
                bs = graph.block_seconds
                info["search"].setdefault("blocks", {})[key] = {
                    "count": int(len(bs)), "seconds_total": float(bs.sum()),
                    "seconds_median": float(np.median(bs)), "seconds_max": float(bs.max()),
                    "where": "dask workers" if params.get("executor") is not None
                    else "this process"}
            t = _tick(timings, f"difference {direction}" if aligned else "difference", t)
        # grids: the model where the concept is tight, original features (first of the
        # pair for a_over_b, second for b_over_a — never a mapped one)
        if direction == "a_over_b":
            tight, nbrs = X["a"], graph.neighbors_a
        else:
            tight, nbrs = X["b"], graph.neighbors_b
        notes: dict[str, Any] = {}
        # the far-pair sketch and the sparse eigensolver are opaque calls of seconds to
        # minutes: a live status line
        steps = (f"far-pair sketch ({n_landmarks} landmarks), " if landmarks is not None
                 else "") + "spectral clustering"
        with working(f"RDX knn {direction}: {steps} (n={n}, K={K})", show=progress):
            C = correction_matrix(graph, diff, beta, direction)
            sketch = None
            if landmarks is not None:
                sketch = far_sketch(far_columns(graph, beta, direction, scale), landmarks,
                                    sketch_rank(n_landmarks))
            directions[direction] = cluster_direction_sparse(C, tight, nbrs, k=k,
                                                             params=params, sketch=sketch,
                                                             notes=notes)
        if landmarks is not None:
            info["far_sketch"].setdefault("rank", {})[direction] = notes["sketch_rank"]
            if "sketch_dropped" in notes:
                info["far_sketch"].setdefault("dropped", {})[direction] = notes["sketch_dropped"]
        del C, sketch
        t = _tick(timings, direction, t)
    info["mean_pairs_per_image"] = graph.n_pairs / n
    return {"directions_": directions, "gamma_": gamma, "normalize_diff_": normalize,
            "n_images_": n, "timings_": timings, "graph_info_": info}


def _tick(timings: dict[str, float], name: str, t0: float) -> float:
    now = time.perf_counter()
    timings[name] = now - t0
    return now
