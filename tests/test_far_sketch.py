"""The far-pair sketch of graph="knn": landmark differences from exact ranks, the far part
against the dense matrices, the Nyström model (exact with every landmark, closer than the
graph alone with a few), and its parameter checks."""
import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from conftest import dense_graph, planted_pairs
from rdx.errors import RDXInputError
from rdx.method import knn_fit
from rdx.method.estimator import RDX
from rdx.method.geometry import to_device_centered
from rdx.method.graphs import resolve_gamma
from rdx.method.knn_graph import build_union_graph, locally_biased_difference
from rdx.method.knn_sketch import choose_landmarks, far_columns, far_sketch, sketch_rank
from rdx.method.knn_spectral import (affinity_operator, block_sums_sparse, correction_matrix,
                                     degrees, symmetrize)

CPU = torch.device("cpu")
BETA = 5.0


def _sketched(A, B, K, landmarks, gamma, direction, rank):
    XA, XB = to_device_centered(A, CPU), to_device_centered(B, CPU)
    g = build_union_graph(XA, XB, K, landmarks=landmarks, gamma=gamma)
    diff = locally_biased_difference(g.rank_a, g.rank_b, gamma)
    Cs = symmetrize(correction_matrix(g, diff, BETA, direction))
    F = far_columns(g, BETA, direction)
    return g, Cs, F, far_sketch(F, landmarks, rank)


@pytest.mark.parametrize("torch_sort", [False, True])
def test_landmark_differences_are_the_dense_ones(torch_sort):
    """far_out[i, c] / far_in[c, i] carry the dense difference of (i, L_c) / (L_c, i) where
    that ordered pair is off the graph and NaN where it is on it — with duplicates and tied
    distances (also with torch's sorts, the GPU code path)."""
    r = np.random.default_rng(3)
    A0 = r.integers(-1, 2, size=(35, 4))
    A0[10] = A0[11] = A0[12]                         # duplicate images, exact ties
    A = np.concatenate([A0, -A0]).astype(np.float32)
    B = r.standard_normal((70, 5)).astype(np.float32)
    B[40] = B[41]
    K, gamma = 7, 0.05
    L = np.array([0, 10, 11, 12, 40, 41, 69])
    RA, RB, _ = dense_graph(A, B, gamma, "a_over_b")
    g = build_union_graph(to_device_centered(A, CPU), to_device_centered(B, CPU), K,
                          landmarks=L, gamma=gamma, torch_sort=torch_sort)
    want = np.tanh(gamma * (RA - RB) / (np.minimum(RA, RB) + 1.0))
    in_graph = (RA <= K) | (RB <= K)                 # diagonal: rank 0
    out_want = np.where(in_graph[:, L], np.nan, want[:, L])
    in_want = np.where(in_graph[L, :], np.nan, want[L, :])
    np.testing.assert_allclose(g.far_out, out_want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g.far_in, in_want, rtol=1e-6, atol=1e-7)
    assert np.isnan(g.far_out).sum() == in_graph[:, L].sum()    # NaN exactly on the graph
    assert (~np.isnan(g.far_out)).sum() > 100                     # and real far pairs
    # the graph itself is unchanged by the landmarks
    g0 = build_union_graph(to_device_centered(A, CPU), to_device_centered(B, CPU), K)
    np.testing.assert_array_equal(g.cols, g0.cols)
    np.testing.assert_array_equal(g.rank_b, g0.rank_b)


@pytest.mark.parametrize("direction", ["a_over_b", "b_over_a"])
def test_far_columns_are_the_dense_far_part(direction):
    """F[:, L] = (S − 11ᵀ − C_s)[:, L]: exactly what the graph leaves out, in those columns."""
    A, B, _ = planted_pairs(n_per=20, d=8, seed=2)
    n, K = len(A), 12
    gamma = resolve_gamma(None, 80.0, n)
    L = choose_landmarks(n, 30, seed=0)
    _, _, S = dense_graph(A, B, gamma, direction)
    _, Cs, F, _ = _sketched(A, B, K, L, gamma, direction, None)
    want = (S - 1.0 - Cs.toarray())[:, L]
    np.testing.assert_allclose(F, want, atol=2e-5 * np.abs(S).max())
    assert np.abs(F).max() > 0.1                    # the far part is not negligible here


@pytest.mark.parametrize("direction", ["a_over_b", "b_over_a"])
def test_sketch_with_every_landmark_is_exact(direction):
    """L = all images and no truncation: F W⁺ Fᵀ = F, so the sketched operator, degrees and
    cluster sums are the dense matrix's even though the graph keeps only K = 12."""
    A, B, _ = planted_pairs(n_per=20, d=8, seed=2)
    n, K = len(A), 12
    gamma = resolve_gamma(None, 80.0, n)
    _, _, S = dense_graph(A, B, gamma, direction)
    _, Cs, _, sk = _sketched(A, B, K, np.arange(n), gamma, direction, None)
    V = np.random.default_rng(0).standard_normal((n, 3))
    scale = np.abs(S).max() * np.abs(V).sum(0)
    np.testing.assert_allclose(affinity_operator(Cs, sketch=sk) @ V, S @ V, atol=1e-4 * scale.max())
    np.testing.assert_allclose(degrees(Cs, sk), S.sum(1), rtol=1e-4)
    labels = np.arange(n) % 4
    Y = np.eye(4)[labels]
    np.testing.assert_allclose(block_sums_sparse(Cs, labels, 4, sk), Y.T @ S @ Y, rtol=1e-4)
    # pair look-ups of the model: the far entries themselves
    a, b = np.array([0, 5, 100]), np.array([119, 60, 3])
    model = (sk.G[a] * sk.inv * sk.G[b]).sum(axis=1)
    np.testing.assert_allclose(model + Cs.toarray()[a, b] + 1.0, S[a, b],
                               atol=1e-4 * np.abs(S).max())


def test_sketch_rank_rule_and_zero_far_part():
    assert [sketch_rank(m) for m in (1, 9, 300, 1000, 5000)] == [1, 1, 30, 100, 100]
    F = np.zeros((50, 5), dtype=np.float32)           # K = n − 1: nothing off the graph
    assert far_sketch(F, np.arange(5), 2) is None
    L = choose_landmarks(50, 80, seed=1)              # more than n: every image, once
    np.testing.assert_array_equal(L, np.arange(50))
    np.testing.assert_array_equal(choose_landmarks(1000, 10, 4), choose_landmarks(1000, 10, 4))


def test_few_landmarks_shrink_the_operator_error():
    """With m = 100 of 240 images and the default rank rule (10), the sketched affinity is
    closer to the dense one than the graph alone (Frobenius norm over all pairs; on these
    planted clusters the far part is large and of high rank: 1592 → 342 and 1579 → 1033)."""
    A, B, _ = planted_pairs(n_per=40, d=8, seed=5)
    n, K = len(A), 40
    gamma = resolve_gamma(None, 80.0, n)
    L = choose_landmarks(n, 100, seed=0)
    for direction in ("a_over_b", "b_over_a"):
        _, _, S = dense_graph(A, B, gamma, direction)
        _, Cs, _, sk = _sketched(A, B, K, L, gamma, direction, sketch_rank(100))
        graph_only = 1.0 + Cs.toarray()
        sketched = graph_only + (sk.G * sk.inv) @ sk.G.T
        e_graph = np.linalg.norm(graph_only - S)
        e_sketch = np.linalg.norm(sketched - S)
        assert e_graph > 100.0                       # the graph alone leaves a real error
        assert e_sketch < 0.7 * e_graph, (direction, e_sketch, e_graph)


@pytest.mark.parametrize("extra", [{}, {"normalize_diff": True},
                                   {"align_representations": True}])
def test_exact_sketch_fit_equals_dense(monkeypatch, extra):
    """The whole fit with every landmark and the untruncated formula reproduces the dense
    method at K = 12 (partitions, grids, mean affinities), where the graph alone does not —
    also with the normalised difference (same divisor: the largest |diff| of all pairs) and in
    aligned mode (a graph and a sketch per direction)."""
    A, B, _ = planted_pairs(n_per=20, d=8, seed=2)
    monkeypatch.setattr(knn_fit, "sketch_rank", lambda m: None)
    kw = dict(n_explanations=3, random_state=0, **extra)
    fit_kw = {}
    if extra.get("align_representations"):
        r = np.random.default_rng(0)
        Am = (A @ r.standard_normal((8, 8))).astype(np.float32)
        Bm = (B @ r.standard_normal((8, 8))).astype(np.float32)
        fit_kw = {"alignment": (Am, Bm, {"given": True})}
    dense = RDX(**kw).fit(A, B, **fit_kw)
    sk = RDX(**kw, graph="knn", n_neighbors=12, n_landmarks=len(A)).fit(A, B, **fit_kw)
    off = RDX(**kw, graph="knn", n_neighbors=12, n_landmarks=0).fit(A, B, **fit_kw)
    assert any(adjusted_rand_score(off.directions_[d].labels, dense.directions_[d].labels)
               < 1.0 for d in ("a_over_b", "b_over_a"))       # the graph alone differs
    for d in ("a_over_b", "b_over_a"):
        np.testing.assert_array_equal(sk.directions_[d].labels, dense.directions_[d].labels)
        for e_s, e_d in zip(sk.directions_[d].explanations, dense.directions_[d].explanations):
            assert e_s.images == e_d.images and e_s.members == e_d.members
            assert e_s.mean_affinity == pytest.approx(e_d.mean_affinity, rel=1e-3)
    info = sk.result().info["knn_graph"]["far_sketch"]
    assert info["n_landmarks"] == len(A) and info["rank"]["a_over_b"] > 0


def test_sketch_recorded_and_off_switch():
    """At K = 30 of 240 planted images the default sketch (rank 24) gives the dense
    partitions; switched off (n_landmarks=0) the graph alone does not (a_over_b: ARI 0.60)."""
    A, B, _ = planted_pairs()
    dense = RDX(n_explanations=3, random_state=0).fit(A, B)
    on = RDX(n_explanations=3, random_state=0, graph="knn", n_neighbors=30).fit(A, B)
    off = RDX(n_explanations=3, random_state=0, graph="knn", n_neighbors=30,
              n_landmarks=0).fit(A, B)
    info = on.result().info["knn_graph"]
    assert info["far_sketch"] == {"n_landmarks": 240,          # default 1000, at most n
                                  "max_rank": 24, "rank": {"a_over_b": 24, "b_over_a": 24}}
    assert "far_sketch" not in off.result().info["knn_graph"]
    assert on.result().params["n_landmarks"] == 1000
    for d in ("a_over_b", "b_over_a"):
        np.testing.assert_array_equal(on.directions_[d].labels, dense.directions_[d].labels)
    assert adjusted_rand_score(off.directions_["a_over_b"].labels,
                               dense.directions_["a_over_b"].labels) < 0.9


@pytest.mark.parametrize("m", [-1, 2.5, True, "many", None])
def test_bad_n_landmarks(m):
    A, B, _ = planted_pairs()
    with pytest.raises(RDXInputError, match="n_landmarks must be an integer ≥ 0"):
        RDX(graph="knn", n_landmarks=m).fit(A, B)


def test_cli_landmarks(tmp_path, capsys):
    """`--landmarks M` reaches the fit (recorded); a negative M exits 2 before fitting."""
    import json

    from rdx.cli import main
    A, B, _ = planted_pairs()
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    base = ["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--graph", "knn",
            "--n-neighbors", "30", "--quiet"]
    assert main(base + ["--landmarks", "-3", "--out", str(tmp_path / "bad")]) == 2
    assert "n_landmarks must be an integer ≥ 0" in capsys.readouterr().err
    assert not (tmp_path / "bad" / "explanations.json").exists()
    assert main(base + ["--landmarks", "50", "--out", str(tmp_path / "ok")]) == 0
    doc = json.loads((tmp_path / "ok" / "explanations.json").read_text())
    assert doc["params"]["n_landmarks"] == 50
    assert doc["info"]["knn_graph"]["far_sketch"]["n_landmarks"] == 50


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_pass_equals_cpu():
    """On a GPU the blocked pass (GEMM, torch sorts of the keys, landmark rows) gives the
    CPU's graph, ranks and landmark differences. Small integers with column means 0: every
    distance is exact in float32 on both devices, so rounding cannot reorder near-ties."""
    r = np.random.default_rng(4)
    A0, B0 = r.integers(-3, 4, size=(60, 6)), r.integers(-3, 4, size=(60, 5))
    A = np.concatenate([A0, -A0]).astype(np.float32)
    B = np.concatenate([B0, -B0]).astype(np.float32)
    L = choose_landmarks(len(A), 40, seed=0)
    graphs = [build_union_graph(to_device_centered(A, dev), to_device_centered(B, dev), 25,
                                landmarks=L, gamma=0.2)
              for dev in (CPU, torch.device("cuda"))]
    for name in ("indptr", "cols", "rank_a", "rank_b", "neighbors_a", "neighbors_b"):
        np.testing.assert_array_equal(getattr(graphs[0], name), getattr(graphs[1], name))
    for name in ("far_out", "far_in"):
        np.testing.assert_allclose(getattr(graphs[0], name), getattr(graphs[1], name),
                                   rtol=1e-5, equal_nan=True)
