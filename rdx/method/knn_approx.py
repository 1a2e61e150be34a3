"""The reduced-cost pass of the large-n mode (``knn_search="approx"``): the union K-NN graph
and the far-pair sketch's columns without the O(n²·d) work of the exact pass.

The exact pass (:func:`rdx.method.knn_graph.build_union_graph`) computes every distance of
both models and sorts every row: O(n²·d) arithmetic and O(n² log n) sorting, ~7 h at
n = 10⁶ on a 2-core CPU. Here the search costs O(n^1.5·d) and every other step O(n·d·c)
with c ≪ n:

* **K-NN lists** — an inverted file per model: k-means cells of about √n images
  (:data:`IVF_CELLS_PER_SQRT_N`; a cell above :data:`MAX_CELL_FACTOR` × the mean size is
  cut in two until none is), and for the images of a cell the images of its nearest cells
  by centroid until they hold :data:`NPROBE` mean cells' worth of images (≈ 64·√n) and K
  others: one GEMM per group of nearby small cells (:func:`query_groups`) and the K smallest
  of each row, O(n^1.5·d) instead of O(n²·d). Approximate:
  a true neighbour in an unsearched cell is missed. Each listed pair's distance in the other
  model is a product of the two gathered rows (K per image, not the cell's GEMM over all its
  candidates: half the search's arithmetic). (faiss's ``IndexIVFFlat`` probes each query's own
  cells, but with per-vector kernels — 1–2 GFLOP/s here at K = 200, ~1.8× slower at a
  similar recall — and without the other model's distances.)
* **Ranks off the lists** — the rank of B's neighbour j in A's sorted row i (exact pass: a
  binary search in the whole row) is estimated from a *reference sample* of s images (the
  far-pair sketch's landmarks, or :data:`N_REFERENCES` seeded images without a sketch): with
  ``s_far`` the references that are neither i nor in i's list and ``c`` those of them nearer
  than j (by more than a few float32 ulps: the pair's own distance comes from another
  GEMM),
  ``R̂ = K + 1 + ⌊(n − 1 − K)·c/s_far⌋`` — the share of far images nearer than j, scaled to
  the n − 1 − K far images of the row (so R̂ > K: a pair off the list is ranked after the
  list; with every image a reference and exact lists R̂ is the exact rank). Its
  standard error is about ``n·√(p(1−p)/s)`` for a pair at quantile p of the row; the locally
  biased difference ``tanh(γ(R_A − R_B)/(min + 1))`` is sensitive to it only where the larger
  rank is a sizeable share of n, where the relative error is smallest.
* **Landmark columns** (``far_out``: pair (i, L_c)): both ranks estimated the same way (the
  references are the landmarks, so the distances are already there). **Landmark rows**
  (``far_in``: pair (L_c, i)): exact, from the m whole rows of each model (an m × n GEMM and
  m row sorts). A pair counts as in the graph — NaN in the sketch's arrays — when it is in
  either model's list, so graph and sketch never both hold a pair.
* **Recall** of the lists, measured in every fit on the reference rows (whose exact top K
  the whole rows give for free): ``info["knn_graph"]["search"]["recall"]``.

The result is the same :class:`~rdx.method.knn_graph.UnionGraph`; everything after it
(difference, sketch, Lanczos, grids) is the knn mode's own. Validation against the exact
pass and the dense method: ``benchmarks/bench_large_n.py`` and the large-n guide.
"""
from __future__ import annotations

import time
from typing import Any, Iterator

import numpy as np
import torch

from .knn_graph import UnionGraph, locally_biased_difference
from .knn_search import DistanceBlock

#: Inverted-file cells per √n: about √n images per cell.
IVF_CELLS_PER_SQRT_N = 1
#: Cells searched for the images of a cell: the recall/time trade-off, measured in the
#: large-n guide (at 2·10⁴ on real features: 16 cells, recall 0.966, ARI against the dense
#: method 0.41/0.79; 64 cells, recall 0.9997, ARI 1.00/1.00; 64 of √n cells is 6.4 % of
#: the images at 10⁶).
NPROBE = 64
#: A cell may hold at most this many times the mean cell size; larger ones are split.
MAX_CELL_FACTOR = 2.0
#: Recall of the lists below which a fit says that neighbours were missed (at 2·10⁴ real
#: features, recall 0.97 moved the clusters; 0.9997 gave the dense partition).
RELIABLE_RECALL = 0.99
#: Query rows a group of nearby cells reaches before it is searched with one GEMM, and the
#: most cells in a group (:func:`query_groups`).
MIN_GROUP_ROWS = 256
MAX_GROUP_CELLS = 8
#: Training points per cell of the k-means.
TRAIN_PER_CELL = 40
#: Lloyd iterations of the k-means.
KMEANS_ITERATIONS = 10
#: Reference images of the rank estimate when the fit has no landmarks.
N_REFERENCES = 1000
#: Rows per block of the graph and rank estimates.
_QUERY_ROWS = 8192
#: Bytes of a gathered block (rows × listed columns × d, or rows × centroids; float32).
_GATHER_BYTES = 64 * 2**20
#: Bytes of one distance block of a cell (query rows × candidates, float32): at 10⁶ images
#: (~10⁵ candidates) 580 rows, where the GEMM runs at 150 GFLOP/s on 2 cores against 110
#: at the 145 rows of 64 MiB (measured with torch 2.14, AVX-512).
_CELL_BLOCK_BYTES = 256 * 2**20
#: Bytes of the float32 whole-row block of the reference rows (plus its int64 keys).
_ROW_BLOCK_BYTES = 64 * 2**20


def ivf_cells(n: int) -> int:
    """Cells of the inverted file for n images: ``√n`` (so a cell holds about √n images), at
    most n / :data:`TRAIN_PER_CELL` (every cell gets enough training points), at least 1."""
    return int(max(1, min(n // TRAIN_PER_CELL, round(IVF_CELLS_PER_SQRT_N * np.sqrt(n)))))


def _blocks(n: int, step: int) -> Iterator[tuple[int, int]]:
    for s in range(0, n, step):
        yield s, min(n, s + step)


def _squared_norms(X: np.ndarray) -> np.ndarray:
    """Row norms² in float32, summed in float64 as :class:`~rdx.method.knn_search.Features`
    does, in row blocks so that no float64 copy of X is made."""
    Xt = torch.from_numpy(X)
    out = torch.empty(len(X), dtype=torch.float32)
    for s, e in _blocks(len(X), 65536):
        out[s:e] = (Xt[s:e].double() ** 2).sum(1).float()
    return out.numpy()


def _distances_to(X: np.ndarray, sq: np.ndarray, rows: np.ndarray, cols: np.ndarray
                  ) -> np.ndarray:
    """Squared distances (float32, ``|x|² + |y|² − 2x·y`` clamped at 0) of ``rows`` to
    ``cols``; −1 where a row meets itself (rank 0, as in the exact pass)."""
    D = X[rows] @ X[cols].T
    D *= -2.0
    D += sq[rows][:, None]
    D += sq[cols][None, :]
    np.maximum(D, 0.0, out=D)
    D[rows[:, None] == cols[None, :]] = -1.0
    return D


def _nearest_centroid(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Index of each row's nearest centroid (``|c|² − 2x·c``, one GEMM per row block)."""
    cc = (C.astype(np.float64) ** 2).sum(1).astype(np.float32)
    out = np.empty(len(X), dtype=np.int64)
    step = max(1, _GATHER_BYTES // (4 * max(len(C), 1)))
    for s, e in _blocks(len(X), step):
        G = X[s:e] @ C.T
        G *= -2.0
        G += cc[None, :]
        out[s:e] = G.argmin(axis=1)
    return out


def _kmeans(X: np.ndarray, n_cells: int, seed: int) -> np.ndarray:
    """Centroids (n_cells × d float32) of Lloyd's k-means on a seeded sample of
    :data:`TRAIN_PER_CELL` points per cell, :data:`KMEANS_ITERATIONS` iterations; a cell
    left empty is re-seeded with a sample point."""
    import scipy.sparse

    rng = np.random.default_rng(seed)
    n = len(X)
    sample = X[np.sort(rng.choice(n, size=min(n, TRAIN_PER_CELL * n_cells), replace=False))]
    C = sample[rng.choice(len(sample), size=n_cells, replace=False)].copy()
    for _ in range(KMEANS_ITERATIONS):
        cell = _nearest_centroid(sample, C)
        counts = np.bincount(cell, minlength=n_cells)
        member = scipy.sparse.csr_matrix(
            (np.ones(len(sample), dtype=np.float32), (cell, np.arange(len(sample)))),
            shape=(n_cells, len(sample)))
        sums = np.asarray(member @ sample, dtype=np.float64)
        empty = counts == 0
        C = (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)
        if empty.any():
            C[empty] = sample[rng.choice(len(sample), size=int(empty.sum()), replace=False)]
    return C


def _split_large_cells(X: np.ndarray, C: np.ndarray, cell: np.ndarray, seed: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Split every cell holding more than :data:`MAX_CELL_FACTOR` × n/len(C) images in two
    (2-means on its members), until none does; the centroids and cells after splitting.

    Why: on tight clusters in many dimensions (an isotropic blob has no direction for
    k-means to cut along) Lloyd's k-means leaves one huge cell per cluster and the other
    cells nearly empty — at 10⁵ clustered images, cells of median 8 and largest 5009
    images, so that 64 searched cells held 70 % of all images and the search was nearly
    exhaustive. Cut in two, such a cell's halves are each other's nearest cells, so the
    neighbours across the cut are still searched.
    """
    cap = max(2, int(MAX_CELL_FACTOR * len(X) / max(len(C), 1)))
    rng = np.random.default_rng([seed, 1])
    centroids = list(C)
    cell = cell.copy()
    todo = [c for c in np.flatnonzero(np.bincount(cell, minlength=len(C)) > cap)]
    members = {c: np.flatnonzero(cell == c) for c in todo}
    while todo:
        c = todo.pop()
        idx = members.pop(c)
        sample = idx if len(idx) <= 2 * TRAIN_PER_CELL else \
            np.sort(rng.choice(idx, size=2 * TRAIN_PER_CELL, replace=False))
        two = _kmeans(X[sample], 2, int(rng.integers(2**31)))
        side = _nearest_centroid(X[idx], two)
        if side.min() == side.max():      # identical points: nothing to cut
            continue
        centroids[c] = two[0]
        centroids.append(two[1])
        new = len(centroids) - 1
        cell[idx[side == 1]] = new
        for k, part in ((c, idx[side == 0]), (new, idx[side == 1])):
            if len(part) > cap:
                members[k] = part
                todo.append(k)
    return np.asarray(centroids, dtype=np.float32), cell


def query_groups(CC: np.ndarray, sizes: np.ndarray, min_rows: int = MIN_GROUP_ROWS,
                 max_cells: int = MAX_GROUP_CELLS) -> list[list[int]]:
    """Cells searched together: each cell with fewer than ``min_rows`` images joins its
    nearest cells (by centroid, ``CC``) not yet taken, up to ``max_cells`` cells, largest
    cells first.

    Why: a GEMM of a few query rows against tens of thousands of candidates runs far below
    the machine's rate (at 10⁵ clustered images, cells of median 46 images: 48 GFLOP/s of the
    150 that 580-row blocks reach), and nearby cells probe mostly the same cells, so one
    GEMM over the union of their probed cells costs little more than each alone. Every
    row still searches all the cells its own cell probes (a superset: recall can only
    rise).
    """
    n_cells = len(sizes)
    taken = np.zeros(n_cells, dtype=bool)
    groups: list[list[int]] = []
    for c in np.argsort(-sizes, kind="stable").tolist():
        if taken[c] or sizes[c] == 0:
            continue
        group, rows = [c], int(sizes[c])
        taken[c] = True
        if rows < min_rows:
            for j in np.argsort(CC[c], kind="stable").tolist():
                if len(group) >= max_cells or rows >= min_rows:
                    break
                if not taken[j] and sizes[j]:
                    group.append(j)
                    taken[j] = True
                    rows += int(sizes[j])
        groups.append(group)
    return groups


def approximate_neighbors(X: np.ndarray, K: int, *, seed: int, other: np.ndarray,
                          sq: np.ndarray | None = None, sq_other: np.ndarray | None = None,
                          progress: str | None = None
                          ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Each image's K nearest others by squared Euclidean distance, searched in an inverted
    file: k-means cells (oversized ones cut, :func:`_split_large_cells`), and for the
    images of a cell the images of its nearest cells by centroid until they hold
    :data:`NPROBE` mean cells' worth of images and K others — one GEMM per group of nearby
    cells (:func:`query_groups`), then the K smallest of each row. Exact where a true
    neighbour lies in a searched cell.

    ``other`` is the other model's features: :func:`pair_distances` gives the listed pairs'
    distances there (what their rank in the other model is estimated from).

    ``progress``: a tqdm bar with this label over the searched images (None: no bar).

    Returns ids (n × K int32, nearest first, ties by index), the listed pairs' squared
    distances in ``other`` (n × K float32) and the index settings.
    """
    from tqdm.auto import tqdm

    n, d = X.shape
    sq = _squared_norms(X) if sq is None else sq
    sq_other = _squared_norms(other) if sq_other is None else sq_other
    C = _kmeans(X, ivf_cells(n), seed)
    cell = _nearest_centroid(X, C)
    C, cell = _split_large_cells(X, C, cell, seed)
    n_cells = len(C)
    reach_target = NPROBE * n / ivf_cells(n)
    order = np.argsort(cell, kind="stable")
    bounds = np.searchsorted(cell[order], np.arange(n_cells + 1))
    members = [order[bounds[c]:bounds[c + 1]] for c in range(n_cells)]
    sizes = np.diff(bounds)
    CC = _distances_to(C, (C.astype(np.float64) ** 2).sum(1).astype(np.float32),
                       np.arange(n_cells), np.arange(n_cells))
    np.fill_diagonal(CC, -1.0)                      # a cell's own images first
    ids = np.empty((n, K), dtype=np.int32)
    cross = np.empty((n, K), dtype=np.float32)
    sq_t = torch.from_numpy(sq)
    scanned = 0
    groups = query_groups(CC, sizes)
    bar = tqdm(total=n, desc=progress, unit="img", disable=progress is None, leave=False)
    for group in groups:
        q = np.concatenate([members[c] for c in group])
        probed: set[int] = set()
        for c in group:
            near = np.argsort(CC[c], kind="stable")
            reach = np.cumsum(sizes[near])
            # the nearest cells holding NPROBE mean k-means cells' worth of images
            # (≈ 64·√n), and at least K others: a count of images, not of cells, so that
            # many small cells (after cuts, or around a tight cluster) do not shrink it
            n_probe = min(n_cells, int(np.searchsorted(reach, max(reach_target, K + 1))) + 1)
            probed.update(near[:n_probe].tolist())
        # the group's own images first (the image itself sits at its own row's position),
        # then every cell one of them probes: each row searches at least its own cells
        cand = np.concatenate([q] + [members[j] for j in sorted(probed.difference(group))])
        scanned += len(q) * len(cand)
        cand_t = torch.from_numpy(cand)
        Xc = torch.from_numpy(X[cand])
        step = max(1, _CELL_BLOCK_BYTES // (4 * len(cand)))
        for s, e in _blocks(len(q), step):
            rows = torch.from_numpy(q[s:e])
            D = Xc[s:e] @ Xc.T                          # cand starts with q
            D.mul_(-2.0).add_(sq_t[rows][:, None]).add_(sq_t[cand_t][None, :]).clamp_(min=0.0)
            local = torch.arange(e - s)
            D[local, local + s] = float("inf")                     # the image itself
            vals, pos = torch.topk(D, K, dim=1, largest=False, sorted=True)
            found = cand[pos.numpy()]
            o = np.lexsort((found, vals.numpy()), axis=1)        # ties by index
            ids[q[s:e]] = np.take_along_axis(found, o, 1)
            del D
        cross[q] = pair_distances(other, sq_other, q, ids[q])
        bar.update(len(q))
    bar.close()
    return ids, cross, {"index": "IVF (k-means cells, a GEMM per group of nearby cells)",
                        "n_cells": n_cells, "n_groups": len(groups),
                        "nprobe": int(min(NPROBE, n_cells)),
                        "probe_images": int(min(n, round(reach_target))),
                        "scanned_fraction": scanned / float(n) / float(n)}


def pair_distances(X: np.ndarray, sq: np.ndarray, rows: np.ndarray, cols: np.ndarray
                   ) -> np.ndarray:
    """Squared distances in ``X`` of each of ``rows`` to its listed columns (``cols``:
    len(rows) × K), by the GEMM's formula ``|x|² + |y|² − 2x·y`` (clamped at 0), less a few
    float32 ulps of the norms.

    Why a gather and not the cell's GEMM in this model: K listed columns per row cost
    K·d, the GEMM over the cell's candidates (6–90 % of all images) costs that times
    candidates/K — at 10⁶ images the search's second largest cost. Why the slack: the
    references a pair is compared with come from another product, which may round the
    pair's own distance (when j is a reference) the other way; only references nearer by
    more than that count.
    """
    n_rows, K = cols.shape
    out = np.empty((n_rows, K), dtype=np.float32)
    Xt = torch.from_numpy(X)
    step = max(1, _GATHER_BYTES // (4 * K * max(X.shape[1], 1)))
    for s, e in _blocks(n_rows, step):
        r, c = torch.from_numpy(rows[s:e]), torch.from_numpy(cols[s:e])
        dot = torch.bmm(Xt[c], Xt[r][:, :, None])[:, :, 0]
        D = (sq[rows[s:e]][:, None] + sq[cols[s:e]]) - 2.0 * dot.numpy()
        np.maximum(D, 0.0, out=D)
        out[s:e] = D - (4 * np.finfo(np.float32).eps) * (sq[rows[s:e]][:, None]
                                                          + sq[cols[s:e]])
    return out


def _estimated_ranks(ref_sorted: torch.Tensor, near: np.ndarray, delta: np.ndarray, n: int,
                     K: int) -> np.ndarray:
    """``R̂ = K + 1 + ⌊(n − 1 − K)·c/s_far⌋`` per pair (b × q int64) from each row's sorted
    reference distances (b × s, the ``near`` listed ones and the image itself set to −1),
    and the pairs' distances ``delta``: ``c`` far references nearer than the pair, of
    ``s_far = s − near``."""
    near_t = torch.from_numpy(np.asarray(near, dtype=np.int64))[:, None]
    below = torch.searchsorted(ref_sorted, torch.from_numpy(np.ascontiguousarray(delta)))
    s_far = (ref_sorted.shape[1] - near_t).clamp_(min=1)
    c = (below - near_t).clamp_(min=0)
    # integer arithmetic: (c/s_far)·s_far in floating point can fall below c
    est = (K + 1) + c * max(n - 1 - K, 0) // s_far
    return est.clamp_(max=n - 1).numpy()


def _membership(lists: np.ndarray, other: np.ndarray, n: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """For each entry j of ``lists`` (b × K) in its row: whether j is in the same row of
    ``other`` (b × K) and its 1-based position there (0 if not)."""
    b, K = other.shape
    row = np.arange(b, dtype=np.int64)[:, None]
    keys_other = (row * n + other).ravel()
    order = np.argsort(keys_other, kind="stable")
    sorted_keys = keys_other[order]
    q = (row * n + lists).ravel()
    at = np.minimum(np.searchsorted(sorted_keys, q), len(sorted_keys) - 1)
    hit = sorted_keys[at] == q
    pos = np.where(hit, order[at] % K + 1, 0)
    return hit.reshape(lists.shape), pos.reshape(lists.shape)


def _far_nan(rows: np.ndarray, lists: tuple[np.ndarray, np.ndarray], cols: np.ndarray,
             n: int) -> np.ndarray:
    """b × m mask: the pair (rows[i], cols[c]) is in either list of row i, or is the image
    itself — in the union graph, so NaN in the sketch's arrays."""
    m = len(cols)
    slot = np.full(n, -1, dtype=np.int64)
    slot[cols] = np.arange(m)
    mask = rows[:, None] == cols[None, :]
    for nb in lists:
        c = slot[nb]
        r, k = np.nonzero(c >= 0)
        mask[r, c[r, k]] = True
    return mask


def build_union_graph_approx(XA: torch.Tensor, XB: torch.Tensor, n_neighbors: int, *,
                             landmarks: np.ndarray | None = None, gamma: float | None = None,
                             seed: int = 0, progress: bool = False
                             ) -> tuple[UnionGraph, dict[str, Any]]:
    """The :class:`~rdx.method.knn_graph.UnionGraph` of ``XA``/``XB`` (centred float32) from
    approximate K-NN lists and estimated ranks (see the module docstring).

    Returns the graph and what the search did (``info["knn_graph"]["search"]``): the index
    settings, the references, the recall of each model's lists on the reference rows and the
    seconds of each step.
    """
    from tqdm.auto import tqdm

    if landmarks is not None and gamma is None:
        raise ValueError("landmarks need gamma")
    K = int(n_neighbors)
    X = {"a": XA.detach().cpu().contiguous(), "b": XB.detach().cpu().contiguous()}
    Xn = {m: x.numpy() for m, x in X.items()}
    n = Xn["a"].shape[0]
    t = time.perf_counter()
    timings: dict[str, float] = {}
    sq = {m: _squared_norms(x) for m, x in Xn.items()}
    lists, cross, index_info = {}, {}, {}
    for m, o in (("a", "b"), ("b", "a")):
        lists[m], cross[m], index_info[m] = approximate_neighbors(
            Xn[m], K, seed=seed, other=Xn[o], sq=sq[m], sq_other=sq[o],
            progress=f"K-NN search {m.upper()} (approx)" if progress else None)
        timings[f"index and search {m}"] = time.perf_counter() - t
        t = time.perf_counter()
    refs = (np.asarray(landmarks, dtype=np.int64) if landmarks is not None and len(landmarks)
            else np.sort(np.random.default_rng(seed + 1).choice(n, size=min(n, N_REFERENCES),
                                                                replace=False)))
    # the union graph and far_out, row block by row block
    counts = np.zeros(n, dtype=np.int64)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    far_out = (np.empty((n, len(landmarks)), dtype=np.float32) if landmarks is not None
               else None)
    spans = list(_blocks(n, _QUERY_ROWS))
    for s, e in tqdm(spans, desc="K-NN graph (approx)", disable=not progress, leave=False):
        rows = np.arange(s, e, dtype=np.int64)
        la, lb = lists["a"][s:e], lists["b"][s:e]
        to_refs = {m: _distances_to(Xn[m], sq[m], rows, refs) for m in ("a", "b")}
        ref_sorted, near = {}, {}
        for m, own_list in (("a", la), ("b", lb)):
            # references in the row's own list (or the image itself) are not far: marked
            # −1 they sort first and are not counted (membership, not a distance threshold,
            # so rounding of the K-th distance cannot move the boundary)
            listed = _far_nan(rows, (own_list,), refs, n)
            near[m] = listed.sum(axis=1)
            ref_sorted[m] = torch.from_numpy(np.sort(np.where(listed, -1.0, to_refs[m])
                                                     .astype(np.float32), axis=1))
        a_in_b, pos_b = _membership(la, lb, n)
        b_in_a, _ = _membership(lb, la, n)
        # B's ranks of A's list: its position in B's list, else estimated; and vice versa
        rb_of_a = np.where(a_in_b, pos_b,
                           _estimated_ranks(ref_sorted["b"], near["b"], cross["a"][s:e], n, K))
        ra_of_b = _estimated_ranks(ref_sorted["a"], near["a"], cross["b"][s:e], n, K)
        own = np.broadcast_to(np.arange(1, K + 1, dtype=np.int64), la.shape)
        keep_b = ~b_in_a
        r = np.concatenate([np.repeat(rows, K),
                            np.broadcast_to(rows[:, None], lb.shape)[keep_b]])
        c = np.concatenate([la.ravel().astype(np.int64), lb[keep_b].astype(np.int64)])
        ra = np.concatenate([own.ravel(), ra_of_b[keep_b]])
        rb = np.concatenate([rb_of_a.ravel(), own[keep_b]])
        order = np.argsort(r * n + c, kind="stable")
        counts[s:e] = np.bincount(r - s, minlength=e - s)
        parts.append((c[order].astype(np.int32), ra[order].astype(np.int32),
                      rb[order].astype(np.int32)))
        if far_out is not None:
            ranks = {m: _estimated_ranks(ref_sorted[m], near[m], to_refs[m], n, K)
                     for m in ("a", "b")}
            d = locally_biased_difference(ranks["a"], ranks["b"], gamma)
            d[_far_nan(rows, (la, lb), refs, n)] = np.nan
            far_out[s:e] = d
    timings["graph and rank estimates"] = time.perf_counter() - t
    t = time.perf_counter()
    # the reference rows, whole: exact ranks for far_in, exact top K for the recall
    far_in = (np.empty((len(landmarks), n), dtype=np.float32) if landmarks is not None
              else None)
    hits = {"a": 0, "b": 0}
    step = max(1, _ROW_BLOCK_BYTES // (4 * n))
    every = np.arange(n, dtype=np.int64)
    for lo, hi in _blocks(len(refs), step):
        rows = refs[lo:hi]
        ranks = {}
        for m in ("a", "b"):
            block = DistanceBlock(torch.from_numpy(_distances_to(Xn[m], sq[m], rows, every)),
                                  0, torch_sort=False)
            true_top = (block.keys[:, 1:K + 1] & 0xFFFFFFFF).numpy()
            hits[m] += int(_membership(true_top, lists[m][rows], n)[0].sum())
            if far_in is not None:
                ranks[m] = block.row_ranks(np.arange(hi - lo))
            del block
        if far_in is not None:
            d = locally_biased_difference(ranks["a"], ranks["b"], gamma)
            d[_far_nan(rows, (lists["a"][rows], lists["b"][rows]), every, n)] = np.nan
            far_in[lo:hi] = d
    timings["reference rows"] = time.perf_counter() - t
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    cols, rank_a, rank_b = (np.concatenate([p[i] for p in parts]) for i in range(3))
    sketch = () if landmarks is None else (np.asarray(landmarks, dtype=np.int64), far_out,
                                           far_in)
    graph = UnionGraph(n, K, indptr, cols, rank_a, rank_b, lists["a"], lists["b"], *sketch)
    info = {"kind": "approx", **index_info["a"],
            "scanned_fraction": {m: index_info[m]["scanned_fraction"] for m in ("a", "b")},
            "n_references": int(len(refs)),
            "references": "landmarks" if landmarks is not None and len(landmarks) else "drawn",
            "recall": {m: hits[m] / (len(refs) * K) for m in ("a", "b")},
            "timings_s": timings}
    return graph, info
