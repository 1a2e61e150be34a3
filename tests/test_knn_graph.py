"""Large-n mode (graph="knn"): exact ranks on the union K-NN graph, the implicit affinity
operator against the dense matrices, partitions against the dense method, bad input."""
import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from conftest import dense_graph, planted_pairs
from rdx.errors import RDXInputError
from rdx.method.estimator import RDX
from rdx.method.geometry import squared_distances, to_device_centered
from rdx.method.graphs import difference_matrix_, resolve_gamma
from rdx.method.knn_fit import estimate_knn_memory
from rdx.method.knn_graph import (build_union_graph, locally_biased_difference,
                                  neglected_difference_bound)
from rdx.method.knn_options import null_threshold_neighbors, resolve_n_neighbors
from rdx.method.knn_search import Features, exact_knn, faiss_knn, knn_recall
from rdx.method.knn_spectral import (affinity_operator, block_sums_sparse, correction_matrix,
                                     degrees, symmetrize)
from rdx.method.ranks import rank_matrix

CPU = torch.device("cpu")
BETA = 5.0


def _sparse(A, B, K, gamma, direction):
    XA, XB = to_device_centered(A, CPU), to_device_centered(B, CPU)
    g = build_union_graph(XA, XB, K)
    diff = locally_biased_difference(g.rank_a, g.rank_b, gamma)
    C = correction_matrix(g, diff, BETA, direction)
    return g, C, symmetrize(C)


def _rows_of(g):
    return g.rows(), g.cols.astype(np.int64)


@pytest.mark.parametrize("K, torch_sort", [(None, False), (7, False), (7, True)])
def test_union_ranks_are_the_dense_ranks(K, torch_sort):
    """Every pair of the union graph carries exactly the dense rank matrices' entries —
    including pairs far down the other model's list, duplicates and tied distances (also
    with torch's sorts, the code path used on a GPU)."""
    r = np.random.default_rng(3)
    # small integers with column means exactly 0: every distance is computed exactly (no
    # rounding to break ties differently in different GEMMs), and many are tied
    A0 = r.integers(-1, 2, size=(35, 4))
    A0[10] = A0[11] = A0[12]                                # duplicate images
    A = np.concatenate([A0, -A0]).astype(np.float32)
    B = r.standard_normal((70, 5)).astype(np.float32)
    B[40] = B[41]
    K = 69 if K is None else K
    RA, RB, _ = dense_graph(A, B, 0.05, "a_over_b")
    g = build_union_graph(to_device_centered(A, CPU), to_device_centered(B, CPU), K,
                          torch_sort=torch_sort)
    rows, cols = _rows_of(g)
    np.testing.assert_array_equal(g.rank_a, RA[rows, cols])
    np.testing.assert_array_equal(g.rank_b, RB[rows, cols])
    # the union is exactly {(i, j): R_A ≤ K or R_B ≤ K, i ≠ j}
    want = ((RA <= K) | (RB <= K)) & ~np.eye(70, dtype=bool)
    got = np.zeros((70, 70), dtype=bool)
    got[rows, cols] = True
    np.testing.assert_array_equal(got, want)
    # neighbour lists: ranks 1..K in order
    for M, R in ((g.neighbors_a, RA), (g.neighbors_b, RB)):
        np.testing.assert_array_equal(R[np.arange(70)[:, None], M],
                                      np.broadcast_to(np.arange(1, K + 1), (70, K)))


def test_graph_digest_names_every_array_and_block_seconds_are_kept():
    A, B, _ = planted_pairs(n_per=20, seed=3)               # 120 images
    XA, XB = to_device_centered(A, CPU), to_device_centered(B, CPU)
    g = build_union_graph(XA, XB, 6, landmarks=np.arange(0, 120, 12), gamma=0.5)
    h = build_union_graph(XA, XB, 6, landmarks=np.arange(0, 120, 12), gamma=0.5)
    assert g.digest() == h.digest() and len(g.digest()) == 32
    assert len(g.block_seconds) >= 1 and (g.block_seconds >= 0).all()
    for name in ("cols", "rank_a", "rank_b", "neighbors_b", "far_out", "far_in"):
        changed = getattr(h, name).copy()
        changed.flat[0] = 7.0 if name.startswith("far") else changed.flat[0] + 1
        setattr(h, name, changed)
        assert h.digest() != g.digest(), name
        setattr(h, name, getattr(g, name))
    assert h.digest() == g.digest()
    # the sketch is part of the fingerprint
    plain = build_union_graph(XA, XB, 6)
    assert plain.digest() != g.digest() and plain.landmarks is None


@pytest.mark.parametrize("direction", ["a_over_b", "b_over_a"])
def test_operator_equals_dense_at_full_k(direction):
    """K = n − 1: every pair is in the graph and all products equal the dense matrix's."""
    A, B, _ = planted_pairs(n_per=15, d=8, seed=1)
    n = len(A)
    gamma = resolve_gamma(None, 80.0, n)
    _, _, S = dense_graph(A, B, gamma, direction)
    _, C, Cs = _sparse(A, B, n - 1, gamma, direction)
    V = np.random.default_rng(0).standard_normal((n, 3))

    def close(got, M):   # the dense S is float32: compare within its rounding
        assert np.all(np.abs(got - M @ V) <= 1e-5 * (np.abs(M) @ np.abs(V)))

    close(affinity_operator(Cs) @ V, S)
    np.testing.assert_allclose(degrees(Cs), S.sum(1), rtol=1e-6)
    isd = 1 / np.sqrt(S.sum(1))
    close(affinity_operator(Cs, isd) @ V, isd[:, None] * S * isd[None, :])
    labels = np.arange(n) % 4
    Y = np.eye(4)[labels]
    np.testing.assert_allclose(block_sums_sparse(Cs, labels, 4), Y.T @ S @ Y, rtol=1e-6)
    # the unsymmetrised affinity too: A = 1 + C
    sign = -1.0 if direction == "a_over_b" else 1.0
    XA, XB = to_device_centered(A, CPU), to_device_centered(B, CPU)
    diff = difference_matrix_(rank_matrix(XA), rank_matrix(XB), gamma=gamma).double().numpy()
    np.testing.assert_allclose(1.0 + C.toarray(), np.exp(sign * BETA * diff), rtol=1e-5)


def test_operator_error_within_the_stated_bound():
    """Smaller K: entries on pairs in the graph both ways are exact; every other entry is
    off by at most e^{β t_K} − 1, t_K = tanh(γ(n − K − 2)/(K + 2)) (and products by that
    times ‖v‖₁); the bound is attained order-of-magnitude-wise, not vacuous."""
    A, B, _ = planted_pairs(n_per=20, d=8, seed=2)
    n, K = len(A), 12
    gamma = resolve_gamma(None, 80.0, n)
    _, _, S = dense_graph(A, B, gamma, "a_over_b")
    g, _, Cs = _sparse(A, B, K, gamma, "a_over_b")
    Ssp = 1.0 + Cs.toarray()
    t = neglected_difference_bound(n, K, gamma)
    bound = np.expm1(BETA * t)
    err = np.abs(Ssp - S)
    assert err.max() <= bound + 1e-5
    assert err.max() > 0.05 * bound            # the approximation is real at this K
    inE = np.zeros((n, n), dtype=bool)
    rows, cols = _rows_of(g)
    inE[rows, cols] = True
    both = inE & inE.T
    assert err[both].max() < 1e-4 * S[both].max()
    v = np.random.default_rng(1).standard_normal(n)
    assert np.abs(Ssp @ v - S @ v).max() <= bound * np.abs(v).sum() + 1e-4


def test_null_threshold_rule_for_k():
    for n, lo, hi in ((300, 200, 299), (5_000, 800, 850), (100_000, 960, 990)):
        g = 80.0 / n
        K = null_threshold_neighbors(n, g, 5.0, 1.5)
        # K is the smallest K whose neglected affinity stays within the threshold
        assert np.exp(5.0 * neglected_difference_bound(n, K, g)) <= 1.5 + 1e-12
        assert np.exp(5.0 * neglected_difference_bound(n, K - 1, g)) > 1.5
        assert lo <= K <= hi
    assert null_threshold_neighbors(300, 0.1, 5.0, 1.0) == 299    # no threshold: all pairs


def test_null_k_is_the_null_rule_by_hand():
    """n_neighbors="null": K = ⌈(γ(n−2) − 2x)/(x + γ)⌉, x = atanh(ln(1.5)/5) = 0.0812715
    (defaults β = 5, threshold 1.5, γ = 80/n): n = 5000: (0.016·4998 − 0.162543)/0.097271
    = 820.44 → 821; n = 240: (79.3333 − 0.162543)/0.414605 = 190.95 → 191. "auto" is
    min(200, n − 1)."""
    params = {"n_neighbors": "null", "gamma": None, "gamma_scale": 80.0, "beta": 5.0,
              "null_threshold": 1.5}
    assert resolve_n_neighbors(params, 5000) == 821
    assert resolve_n_neighbors(params, 240) == 191
    assert resolve_n_neighbors({**params, "n_neighbors": 37}, 240) == 37
    assert resolve_n_neighbors({**params, "n_neighbors": "auto"}, 5000) == 200
    assert resolve_n_neighbors({**params, "n_neighbors": "auto"}, 150) == 149
    # an explicit γ moves the rule: γ = 0.5 at n = 240 → (119 − 0.1625)/0.5813 → 205
    assert resolve_n_neighbors({**params, "gamma": 0.5}, 240) == 205


@pytest.mark.parametrize("rule, K, name", [("null", 191, "null rule"),
                                           ("auto", 200, "auto: min(200, n − 1)")])
def test_k_rule_fit_records_the_rule(rule, K, name):
    """A rule's fit is the fit at the rule's K, and says so in the result's info."""
    A, B, _ = planted_pairs()
    ruled = RDX(n_explanations=3, random_state=0, graph="knn", n_neighbors=rule).fit(A, B)
    fixed = RDX(n_explanations=3, random_state=0, graph="knn", n_neighbors=K).fit(A, B)
    info = ruled.result().info["knn_graph"]
    assert info["n_neighbors"] == K and info["n_neighbors_null_rule"] == 191
    assert info["n_neighbors_rule"] == name
    assert fixed.result().info["knn_graph"]["n_neighbors_rule"] == "given"
    assert ruled.result().params["n_neighbors"] == rule
    for d in ("a_over_b", "b_over_a"):
        np.testing.assert_array_equal(ruled.directions_[d].labels, fixed.directions_[d].labels)


def test_neglected_bound_formula():
    # tanh(γ (n − K − 2)/(K + 2)); γ = 80/n gives < tanh(80/K)
    n, K = 100_000, 200
    g = 80.0 / n
    assert neglected_difference_bound(n, K, g) == pytest.approx(np.tanh(g * (n - K - 2) / (K + 2)))
    assert neglected_difference_bound(n, K, g) < np.tanh(80 / K)
    assert neglected_difference_bound(10, 9, 0.5) == 0.0


def _fit_pair(A, B, K, **kw):
    dense = RDX(n_explanations=3, random_state=0, **kw).fit(A, B)
    knn = RDX(n_explanations=3, random_state=0, graph="knn", n_neighbors=K, **kw).fit(A, B)
    return dense, knn


@pytest.mark.parametrize("strategy", ["maximize_total_neighborhood_affinity", "max_affinity",
                                      "centroid", "random"])
def test_full_k_fit_equals_dense(strategy):
    A, B, _ = planted_pairs()
    dense, knn = _fit_pair(A, B, len(A) - 1, grid_strategy=strategy)
    for d in ("a_over_b", "b_over_a"):
        np.testing.assert_array_equal(knn.directions_[d].labels, dense.directions_[d].labels)
        for e_k, e_d in zip(knn.directions_[d].explanations, dense.directions_[d].explanations):
            assert e_k.images == e_d.images
            assert e_k.members == e_d.members
            assert e_k.mean_affinity == pytest.approx(e_d.mean_affinity, rel=1e-4)
        assert knn.directions_[d].null_mean_affinity == pytest.approx(
            dense.directions_[d].null_mean_affinity, rel=1e-4)


def test_partitions_agree_with_dense_on_planted_data():
    A, B, _ = planted_pairs()
    dense, knn = _fit_pair(A, B, 100)
    for d in ("a_over_b", "b_over_a"):
        assert adjusted_rand_score(dense.directions_[d].labels, knn.directions_[d].labels) >= 0.9
    res = knn.result()
    assert res.params["graph"] == "knn" and res.params["n_neighbors"] == 100
    info = res.info["knn_graph"]
    assert info["n_neighbors"] == 100
    assert 100 <= info["mean_pairs_per_image"] <= 200
    assert knn.graphs_ is None and knn.alignment_ is None
    doc = res.to_json()
    assert doc["directions"]["a_over_b"]["explanations"][0]["images"]


def test_aligned_mode_full_k_equals_dense():
    A, B, _ = planted_pairs(n_per=25, seed=4)
    r = np.random.default_rng(0)
    Am = (A @ r.standard_normal((A.shape[1], A.shape[1]))).astype(np.float32)
    Bm = (B @ r.standard_normal((B.shape[1], B.shape[1]))).astype(np.float32)
    kw = dict(n_explanations=3, random_state=0, align_representations=True)
    dense = RDX(**kw).fit(A, B, alignment=(Am, Bm, {"given": True}))
    knn = RDX(**kw, graph="knn", n_neighbors=len(A) - 1).fit(A, B, alignment=(Am, Bm, {}))
    for d in ("a_over_b", "b_over_a"):
        np.testing.assert_array_equal(knn.directions_[d].labels, dense.directions_[d].labels)
        assert [e.images for e in knn.directions_[d].explanations] == \
            [e.images for e in dense.directions_[d].explanations]


def test_exact_knn_matches_sorted_dense_rows():
    r = np.random.default_rng(5)
    X0 = r.integers(-2, 3, size=(45, 3))
    X = np.concatenate([X0, -X0]).astype(np.float32)       # exact distances, ties everywhere
    Xc = to_device_centered(X, CPU)
    idx, d2 = exact_knn(Features(Xc), 10)
    D2 = squared_distances(Xc).numpy()
    for i in range(90):
        row = D2[i].astype(np.float64)
        row[i] = -1
        want = np.lexsort((np.arange(90), row))[1:11]
        np.testing.assert_array_equal(idx[i], want)
        np.testing.assert_allclose(d2[i], D2[i, want], atol=1e-6)


def test_faiss_engines():
    pytest.importorskip("faiss")
    r = np.random.default_rng(6)
    X = r.standard_normal((600, 16)).astype(np.float32)
    truth, _ = exact_knn(Features(to_device_centered(X, CPU)), 10)
    flat, _ = faiss_knn(X, 10, index="flat")
    assert knn_recall(flat, truth) > 0.999          # exact (float rounding may swap ties)
    hnsw, _ = faiss_knn(X, 10, index="hnsw")
    assert knn_recall(hnsw, truth) > 0.9
    ivf, _ = faiss_knn(X, 10, index="ivf", nlist=8, nprobe=8)   # every cell: exact
    assert knn_recall(ivf, truth) > 0.999
    assert knn_recall(truth[:, ::-1], truth) == 1.0
    assert knn_recall(np.roll(truth, 1, axis=0), truth) < 0.2


@pytest.mark.parametrize("K, fragment", [(240, "must be below the number of images n=240"),
                                         (500, "n_neighbors=239"), (1, "too small"),
                                         (0, "too small"),
                                         (2.5, "must be an integer, 'auto' or 'null'"),
                                         ("many", "use n_neighbors='auto'"),
                                         (None, "must be an integer, 'auto' or 'null'")])
def test_bad_n_neighbors(K, fragment):
    A, B, _ = planted_pairs()
    with pytest.raises(RDXInputError, match=fragment):
        RDX(graph="knn", n_neighbors=K).fit(A, B)


@pytest.mark.parametrize("k, fragment", [("240", "must be below the number of images n=240"),
                                         ("1", "too small"),
                                         ("many", "an integer, 'auto' or 'null'")])
def test_cli_refuses_bad_n_neighbors(tmp_path, capsys, k, fragment):
    """`rdx explain --graph knn --n-neighbors K` exits 2 with what to change, before fitting."""
    from rdx.cli import main
    A, B, _ = planted_pairs()
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    argv = ["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--graph", "knn",
            "--n-neighbors", k, "--out", str(tmp_path / "out"), "--quiet"]
    try:
        code = main(argv)
    except SystemExit as exc:       # argparse's own refusal (not a number) exits directly
        code = exc.code
    assert code == 2
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "out" / "explanations.json").exists()


@pytest.mark.parametrize("kw, fragment", [
    ({"graph": "sparse"}, "graph"),
    ({"graph": "knn", "similarity": "max_normalized_distance"}, "similarity='neighborhood'"),
    ({"graph": "knn", "difference": "standard"}, "locally_biased"),
    ({"graph": "knn", "clustering": "pagerank"}, "spectral"),
    ({"graph": "knn", "keep_graphs": True}, "keep_graphs"),
    ({"graph": "knn", "eigen_solver": "dense"}, "eigen_solver"),
])
def test_unsupported_options_are_refused(kw, fragment):
    A, B, _ = planted_pairs()
    with pytest.raises(RDXInputError, match=fragment):
        RDX(n_neighbors=50, **kw).fit(A, B)


def test_similarity_a_refused_with_knn():
    A, B, _ = planted_pairs()
    with pytest.raises(RDXInputError, match="similarity_a"):
        RDX(graph="knn", n_neighbors=50).fit(A, B, similarity_a=np.zeros((240, 240)))


def test_dense_refusal_names_the_knn_mode_which_fits(monkeypatch):
    # RDX_MEMORY_LIMIT_GB caps host memory: the fits run on the CPU (a GPU is sized by its own
    # free memory)
    r = np.random.default_rng(0)
    A = r.standard_normal((6000, 8)).astype(np.float32)
    B = r.standard_normal((6000, 8)).astype(np.float32)
    dense = RDX(n_explanations=2, graph="dense", device="cpu")
    need_dense = dense.estimate_memory(6000, 16)
    need_knn = estimate_knn_memory(6000, 16, 20)
    assert need_knn < 0.8 * need_dense
    limit_gb = (need_knn + need_dense) / 2 / 0.9 / 2**30
    monkeypatch.setenv("RDX_MEMORY_LIMIT_GB", f"{limit_gb:.6f}")
    with pytest.raises(RDXInputError) as exc:
        dense.fit(A, B)
    assert "graph='knn'" in str(exc.value) and "--graph knn" in str(exc.value)
    knn = RDX(n_explanations=2, graph="knn", n_neighbors=20, n_landmarks=0,
              device="cpu").fit(A, B)
    assert len(knn.directions_["a_over_b"].labels) == 6000
    # the default graph="auto" takes the large-n mode here by itself, and says why
    auto = RDX(n_explanations=2, n_neighbors=20, n_landmarks=0, device="cpu").fit(A, B)
    assert auto.graph_ == "knn" and "would not fit" in auto.graph_why_
    assert auto.result().info["graph"]["used"] == "knn"
    assert auto.result().params["graph_resolved"] == "knn"
    for d in ("a_over_b", "b_over_a"):
        assert np.array_equal(auto.directions_[d].labels, knn.directions_[d].labels)
    # the null rule's K (≈ 840 here) does not fit under this limit: the refusal names the
    # largest K that does (with the landmarks asked for), and that K is accepted
    limit = 0.9 * 2**30 * limit_gb
    with pytest.raises(RDXInputError) as exc:
        RDX(n_explanations=2, graph="knn", n_neighbors="null", n_landmarks=100,
            device="cpu").fit(A, B)
    assert "n_landmarks=100" in str(exc.value)
    fit_k = int(str(exc.value).split("n_neighbors=")[2].split()[0])
    assert estimate_knn_memory(6000, 16, fit_k, 100) <= limit < estimate_knn_memory(
        6000, 16, fit_k + 1, 100)
    monkeypatch.setenv("RDX_MEMORY_LIMIT_GB", "0.01")
    with pytest.raises(RDXInputError, match="n_neighbors") as exc:
        RDX(n_explanations=2, graph="knn", n_neighbors=20, device="cpu").fit(A, B)
    assert "fits;" not in str(exc.value)        # not even K = 2 fits: no K is named


def test_cosine_neighbors_identical_with_either_engine():
    """The similarity measures' k-NN screening (shared engine): faiss or torch, the
    certified float64 result is the same, duplicates included."""
    pytest.importorskip("faiss")
    from rdx.similarity.neighbors import knn_cosine
    r = np.random.default_rng(7)
    Z = r.standard_normal((300, 12))
    Z[5] = Z[6] = Z[7]
    Zt = torch.from_numpy(Z)
    a = knn_cosine(Zt, 10, engine="torch")
    b = knn_cosine(Zt, 10, engine="faiss")
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    with pytest.raises(RDXInputError, match="engine"):
        knn_cosine(Zt, 10, engine="annoy")


# ------------------------------------------------------------ similarity measures at scale
def test_streamed_linear_cka_equals_in_memory(monkeypatch):
    from rdx.similarity import cka
    from rdx.similarity import cka_streamed as streamed
    r = np.random.default_rng(8)
    X = r.standard_normal((57, 6)) * 3 + 10          # far from the origin: centring matters
    Y = (X[:, :4] @ r.standard_normal((4, 4)) + r.standard_normal((57, 4))).astype(np.float32)
    want_u, want_b = cka.debiased_linear_cka(X, Y), cka.biased_linear_cka(X, Y)
    assert streamed.linear_cka_streamed(X, Y, debiased=True, block_rows=7) == pytest.approx(
        want_u, rel=1e-12)
    assert streamed.linear_cka_streamed(X, Y, debiased=False, block_rows=5) == pytest.approx(
        want_b, rel=1e-12)
    monkeypatch.setattr(streamed, "STREAM_BYTES", 0)      # the public functions now stream
    monkeypatch.setattr(streamed, "_STREAM_BLOCK_BYTES", 8 * 10 * 10)
    assert cka.debiased_linear_cka(X, Y) == pytest.approx(want_u, rel=1e-12)
    assert cka.biased_linear_cka(X, Y) == pytest.approx(want_b, rel=1e-12)
    bad = X.copy()
    bad[30, 2] = np.nan
    with pytest.raises(RDXInputError, match=r"NaN/inf values \(first rows: \[30\]\)"):
        cka.debiased_linear_cka(bad, Y)
    with pytest.raises(RDXInputError, match="constant"):
        cka.debiased_linear_cka(np.ones_like(X), Y)
    with pytest.raises(RDXInputError, match="at least 4 images"):
        cka.debiased_linear_cka(X[:3], Y[:3])


def test_pairwise_measures_refuse_above_the_memory_limit(monkeypatch):
    from rdx.similarity import cka, cka_rbf, neighbors
    from rdx.similarity import rsa     # the package exports the function
    r = np.random.default_rng(9)
    X, Y = r.standard_normal((300, 5)), r.standard_normal((300, 4))
    monkeypatch.setenv("RDX_MEMORY_LIMIT_GB", str(1.0 / 2**10))    # 1 MiB
    for fn, what in ((lambda: rsa(X, Y), "RSA"), (lambda: cka_rbf.rbf_cka(X, Y), "RBF CKA"),
                     (lambda: cka_rbf.rbf_kernel(X), "RBF kernel")):
        with pytest.raises(RDXInputError) as exc:
            fn()
        msg = str(exc.value)
        assert what in msg and "n=300" in msg and "subsample of at most" in msg
        assert "cka_linear" in msg and "mutual_knn" in msg
        fit = int(msg.split("at most ")[1].split()[0])
        assert 0 < fit < 300
    # the measures that scale still run under the same limit
    assert -1 <= cka.debiased_linear_cka(X, Y) <= 1
    assert 0 <= neighbors.mutual_knn(X, Y, k=5) <= 1
    monkeypatch.setenv("RDX_MEMORY_LIMIT_GB", "4")
    assert -1 <= rsa(X, Y) <= 1


def test_auto_graph_is_dense_where_it_fits():
    """graph="auto" (the default) fits exactly like graph="dense" where the n×n matrices fit,
    and records the choice."""
    A, B, _ = planted_pairs()
    auto = RDX(n_explanations=2).fit(A, B)
    dense = RDX(n_explanations=2, graph="dense").fit(A, B)
    assert auto.graph_ == "dense" and "fit in" in auto.graph_why_
    for d in ("a_over_b", "b_over_a"):
        assert np.array_equal(auto.directions_[d].labels, dense.directions_[d].labels)
    assert "graph" not in dense.result().info        # given, not chosen: nothing to explain
    assert auto.result().info["graph"]["used"] == "dense"


def test_choose_graph_says_what_a_fit_would_use(monkeypatch):
    """The choice of graph="auto" is available before fitting (rdx explain names it in its
    live line when the large-n mode is taken). RDX_MEMORY_LIMIT_GB caps host memory, so the
    estimator is on the CPU."""
    est = RDX(device="cpu")
    assert est.choose_graph(240, 16)[0] == "dense"
    assert RDX(graph="knn").choose_graph(240, 16) == ("knn", "given")
    monkeypatch.setenv("RDX_MEMORY_LIMIT_GB", "0.01")
    graph, why = est.choose_graph(6000, 16)
    assert graph == "knn" and "would not fit" in why
