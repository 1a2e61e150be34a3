"""knn_search="approx", the reduced-cost large-n pass (faiss IVF lists, ranks estimated from
reference images): equal to the exact pass where its search is exhaustive and every image is
a reference, close to it where not; the auto rule; the estimator and CLI options."""
import json

import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from conftest import planted_pairs
from rdx.errors import RDXInputError
from rdx.method.estimator import RDX
from rdx.method.geometry import to_device_centered
from rdx.method.graphs import resolve_gamma
from rdx.method import knn_approx
from rdx.method.knn_approx import NPROBE, build_union_graph_approx, ivf_cells
from rdx.method.knn_graph import build_union_graph
from rdx.method.knn_options import APPROX_MIN_N, resolve_knn_search

pytest.importorskip("faiss")
CPU = torch.device("cpu")


def _centred(A, B):
    return to_device_centered(A, CPU), to_device_centered(B, CPU)


def test_exhaustive_search_with_every_reference_is_the_exact_graph():
    """n = 360: the index has ivf_cells(n) ≤ NPROBE cells, so every cell is searched (exact
    lists, recall 1), and with every image a landmark (= reference) the estimated ranks are
    the exact ones: the same graph, the same landmark columns and rows."""
    A, B, _ = planted_pairs(n_per=60, d=12)
    n, K = len(A), 15
    assert ivf_cells(n) <= NPROBE
    gamma = resolve_gamma(None, 80.0, n)
    L = np.arange(n)
    XA, XB = _centred(A, B)
    exact = build_union_graph(XA, XB, K, landmarks=L, gamma=gamma)
    approx, info = build_union_graph_approx(XA, XB, K, landmarks=L, gamma=gamma, seed=0)
    assert info["recall"] == {"a": 1.0, "b": 1.0}
    assert info["references"] == "landmarks" and info["n_references"] == n
    for name in ("neighbors_a", "neighbors_b", "indptr", "cols"):
        np.testing.assert_array_equal(getattr(approx, name), getattr(exact, name), name)
    # the other model's rank of a listed pair: exact up to the rounding of that pair's own
    # distance (a product of two rows here, a GEMM entry in the exact pass)
    for name in ("rank_a", "rank_b"):
        gap = np.abs(getattr(approx, name).astype(np.int64) - getattr(exact, name))
        assert gap.max() <= 1 and (gap == 0).mean() > 0.99, name
    # landmark columns (estimated ranks) and rows (exact ranks): NaN on the same pairs, the
    # same differences but where two distances tie at rounding level (another GEMM shape)
    for name in ("far_out", "far_in"):
        got, want = getattr(approx, name), getattr(exact, name)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), name)
        off = ~np.isclose(got, want, rtol=1e-6, atol=1e-7, equal_nan=True)
        assert off.mean() < 1e-3, (name, off.sum())


def test_pair_distances_are_the_listed_pairs_squared_distances():
    """The other model's distance of each listed pair, from the two gathered rows: the
    float64 squared distance, less the documented slack of 4 float32 ulps of the norms,
    in blocks smaller than the rows (the gather's block size is forced down)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 20)).astype(np.float32)
    rows = rng.choice(300, size=40, replace=False)
    cols = rng.integers(0, 300, size=(40, 7))
    sq = (X.astype(np.float64) ** 2).sum(1).astype(np.float32)
    old = knn_approx._GATHER_BYTES
    try:
        knn_approx._GATHER_BYTES = 4 * 7 * 20 * 3          # three rows per block
        got = knn_approx.pair_distances(X, sq, rows, cols)
    finally:
        knn_approx._GATHER_BYTES = old
    X64 = X.astype(np.float64)
    want = ((X64[rows][:, None, :] - X64[cols]) ** 2).sum(-1)
    slack = 4 * np.finfo(np.float32).eps * (sq[rows][:, None] + sq[cols])
    assert got.shape == (40, 7) and got.dtype == np.float32
    np.testing.assert_allclose(got, want - slack, rtol=1e-5, atol=1e-4)
    assert (got < want).all()                       # the slack is always subtracted


def test_cells_of_tight_blobs_are_cut_to_at_most_twice_the_mean_size():
    """Isotropic blobs in many dimensions leave k-means one huge cell per blob; the cells
    are cut in two until none holds more than MAX_CELL_FACTOR × the mean, every image
    keeps a cell, and the cuts are seeded (the same cells twice)."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((4, 64)).astype(np.float32) * 20
    X = (centres[rng.integers(0, 4, 4000)]
         + rng.standard_normal((4000, 64)).astype(np.float32))
    C = knn_approx._kmeans(X, ivf_cells(len(X)), 0)
    cell = knn_approx._nearest_centroid(X, C)
    cap = knn_approx.MAX_CELL_FACTOR * len(X) / len(C)
    assert np.bincount(cell).max() > cap                 # the failure mode is there
    C2, cell2 = knn_approx._split_large_cells(X, C, cell, 0)
    sizes = np.bincount(cell2, minlength=len(C2))
    assert sizes.max() <= cap and sizes.sum() == len(X) and len(C2) > len(C)
    np.testing.assert_array_equal(cell2, knn_approx._split_large_cells(X, C, cell, 0)[1])
    # a cut keeps both halves near: each image's cell centroid is among its 3 nearest
    D = ((X[:200, None, :] - C2[None]) ** 2).sum(-1)
    rank = (D < D[np.arange(200), cell2[:200]][:, None]).sum(1)
    assert np.median(rank) <= 2


def test_query_groups_cover_every_cell_once_and_gather_small_ones():
    rng = np.random.default_rng(2)
    C = rng.standard_normal((60, 5))
    CC = ((C[:, None] - C[None]) ** 2).sum(-1)
    np.fill_diagonal(CC, -1.0)
    sizes = rng.integers(0, 120, 60)
    sizes[:3] = 0                                           # empty cells take no group
    sizes[3:6] = 400                                        # large cells go alone
    groups = knn_approx.query_groups(CC, sizes, min_rows=256, max_cells=8)
    flat = [c for g in groups for c in g]
    assert sorted(flat) == sorted(np.flatnonzero(sizes).tolist())     # each cell once
    for g in groups:
        assert len(g) <= 8
        if len(g) > 1:
            # cells join only while the group is short of 256 rows, nearest first
            assert int(sizes[g[:-1]].sum()) < 256
            assert np.all(np.diff(CC[g[0], g[1:]]) >= 0)
    assert any(len(g) > 1 for g in groups) and any(len(g) == 1 for g in groups)
    assert groups == knn_approx.query_groups(CC, sizes, min_rows=256, max_cells=8)


def test_partial_search_stays_close_to_the_exact_fit(monkeypatch):
    """n = 2400, d = 24: 16 of 49 cells searched per cell. The lists lose a few neighbours
    (recall measured on the reference rows), and the fit finds the exact pass's partition
    where the exact method determines it (b_over_a: the merged pairs B has) and is as close
    to it as two exact fits with different seeds are to each other where not (a_over_b:
    no difference was planted)."""
    monkeypatch.setattr(knn_approx, "NPROBE", 16)   # a partial search at this small n
    A, B, lab = planted_pairs(n_per=400, d=24, spread=4.0)
    n = len(A)
    assert ivf_cells(n) > knn_approx.NPROBE
    kw = dict(graph="knn", n_neighbors=40, n_landmarks=300, n_init=2, device="cpu")
    # the planted pairs share only their clusters (each model's noise is its own), about
    # 1 % of each image's ten neighbours among 2400: the rows' check cannot tell that from
    # rows paired at random with its default anchors (rdx.method.row_check), so it is off
    exact = RDX(3, knn_search="exact", **kw).fit(A, B, check_rows=False)
    approx = RDX(3, knn_search="approx", **kw).fit(A, B, check_rows=False)
    search = approx.graph_info_["search"]
    assert search["kind"] == "approx" and search["why"] == "given"
    assert 0.9 < search["recall"]["a"] <= 1.0 and 0.9 < search["recall"]["b"] <= 1.0
    # 49 k-means cells, more where a cell above twice the mean size was cut in two
    assert search["n_cells"] >= 49 and 0 < search["scanned_fraction"]["a"] < 0.5
    # lists this good (the probes hold 16 mean cells' worth of images) give no warning
    assert min(search["recall"].values()) >= knn_approx.RELIABLE_RECALL
    assert "warnings" not in search
    assert exact.graph_info_["search"]["kind"] == "exact"
    assert "warnings" not in exact.graph_info_["search"]
    other_seed = RDX(3, knn_search="exact", random_state=1, **kw).fit(A, B, check_rows=False)
    ari = {d: adjusted_rand_score(exact.directions_[d].labels, approx.directions_[d].labels)
           for d in ("a_over_b", "b_over_a")}
    seeds = adjusted_rand_score(exact.directions_["a_over_b"].labels,
                                other_seed.directions_["a_over_b"].labels)
    assert ari["b_over_a"] > 0.95 and ari["a_over_b"] >= seeds - 0.05, (ari, seeds)
    # B merges the planted pairs (0,1), (2,3), (4,5): b_over_a's explanations are them
    top = approx.directions_["b_over_a"].explanations[0].members
    assert len(set(lab[top] // 2)) == 1


def test_a_low_recall_is_said_and_recorded(monkeypatch, capsys):
    """With probes of 4 mean cells' worth of images the lists miss neighbours (recall
    0.87/0.77 here): the fit says so on stderr and records one warning naming both models'
    recall and the reference rows."""
    monkeypatch.setattr(knn_approx, "NPROBE", 4)
    A, B, _ = planted_pairs(n_per=400, d=24, spread=4.0)
    m = RDX(3, knn_search="approx", graph="knn", n_neighbors=40, n_landmarks=300,
            n_init=2, device="cpu", verbose=1).fit(A, B, check_rows=False)  # as above
    search = m.graph_info_["search"]
    recall = search["recall"]
    assert max(recall.values()) < knn_approx.RELIABLE_RECALL
    (warning,) = search["warnings"]
    for key in ("a", "b"):
        assert f"{key.upper()} {recall[key]:.3f}" in warning
    assert f"measured on {search['n_references']} reference rows" in warning
    assert warning in capsys.readouterr().err


def test_estimated_ranks_follow_the_exact_ones():
    """Off the lists, with 200 references among 2400 images, the estimate is unbiased up to
    the sampling error (relative error of the median pair below 15 %)."""
    A, B, _ = planted_pairs(n_per=400, d=24, spread=4.0)
    n, K = len(A), 30
    XA, XB = _centred(A, B)
    gamma = resolve_gamma(None, 80.0, n)
    L = np.sort(np.random.default_rng(1).choice(n, 200, replace=False))
    exact = build_union_graph(XA, XB, K, landmarks=L, gamma=gamma)
    approx, _ = build_union_graph_approx(XA, XB, K, landmarks=L, gamma=gamma, seed=0)
    # B's rank of the pairs only A lists, where both graphs hold the pair
    ea = {(r, c): v for r, c, v in zip(exact.rows(), exact.cols, exact.rank_b)}
    pairs = [(r, c, v) for r, c, v in zip(approx.rows(), approx.cols, approx.rank_b)
             if v > K and ea.get((r, c), 0) > K]
    est = np.array([v for _, _, v in pairs], dtype=float)
    true = np.array([ea[(r, c)] for r, c, _ in pairs], dtype=float)
    assert len(est) > 1000
    assert np.median(np.abs(est - true) / true) < 0.15
    assert np.corrcoef(est, true)[0, 1] > 0.95


def test_auto_rule_and_refusals():
    params = {"knn_search": "auto", "executor": None}
    assert resolve_knn_search(params, APPROX_MIN_N)[0] == "exact"
    assert resolve_knn_search(params, APPROX_MIN_N + 1) == ("approx", f"auto: n > {APPROX_MIN_N} on the CPU")
    assert resolve_knn_search(params, 10**6, "cuda")[0] == "exact"
    assert resolve_knn_search({**params, "executor": "local:2"}, 10**6)[0] == "exact"
    assert resolve_knn_search({**params, "knn_search": "approx"}, 50) == ("approx", "given")
    A, B, _ = planted_pairs()
    with pytest.raises(RDXInputError, match="knn_search"):
        RDX(graph="knn", knn_search="fast").fit(A, B)
    with pytest.raises(RDXInputError, match="executor"):
        RDX(graph="knn", knn_search="approx", executor="local:2").fit(A, B)


def test_cli_knn_search(tmp_path, capsys):
    """`--knn-search approx` reaches the fit and is recorded; a bad value exits 2."""
    from rdx.cli import main

    A, B, _ = planted_pairs()
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    base = ["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--graph", "knn",
            "--n-neighbors", "20", "--quiet"]
    with pytest.raises(SystemExit) as stop:             # argparse's usage error
        main(base + ["--knn-search", "fast", "--out", str(tmp_path / "bad")])
    assert stop.value.code == 2
    assert "--knn-search" in capsys.readouterr().err
    assert main(base + ["--knn-search", "approx", "--out", str(tmp_path / "ok")]) == 0
    doc = json.loads((tmp_path / "ok" / "explanations.json").read_text())
    assert doc["params"]["knn_search"] == "approx"
    assert doc["info"]["knn_graph"]["search"]["kind"] == "approx"
