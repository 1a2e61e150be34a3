"""KMeans, PCA, NMF and Convex NMF baselines against planted structure and independent maths."""
import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score
from threadpoolctl import threadpool_info, threadpool_limits

from conftest import planted_pairs
from rdx.baselines import baseline_class
from rdx.baselines.factorization import (ConvexNMFConcepts, NMFConcepts, PCAConcepts,
                                         _gram_times, cnmf_c_parts, cnmf_g_parts)
from rdx.baselines.kmeans import KMeansConcepts
from rdx.errors import RDXInputError


def planted_nonnegative(k=3, n_per=30, d=30, seed=0, noise=0.0):
    """Images of group g are mostly concept g: X = U V with disjoint-support concepts V."""
    r = np.random.default_rng(seed)
    V = np.zeros((k, d))
    width = d // k
    for j in range(k):
        V[j, j * width:(j + 1) * width] = r.uniform(0.5, 1.5, width)
    group = np.repeat(np.arange(k), n_per)
    U = r.uniform(0.0, 0.2, (k * n_per, k))
    U[np.arange(len(group)), group] += r.uniform(0.8, 1.2, len(group))
    X = U @ V + noise * r.uniform(0.0, 1.0, (len(group), d))
    return X.astype(np.float32), group


def assert_one_group_per_concept(grids, group, k):
    """Every grid comes from a single planted group, and the k grids cover k groups."""
    owners = []
    for grid in grids:
        g = np.unique(group[grid])
        assert len(g) == 1, f"grid mixes planted groups {g.tolist()}"
        owners.append(int(g[0]))
    assert sorted(owners) == list(range(k))


def cnmf_objective(X, C, G):
    X = X.astype(np.float64)
    return float(np.linalg.norm(X - C.astype(np.float64) @ (G.astype(np.float64).T @ X)) ** 2)


# ----------------------------------------------------------------------------- KMeans

def test_kmeans_recovers_blobs_and_grid_is_nearest_to_cluster_mean():
    A, _, lab = planted_pairs(n_per=30, seed=1)
    m = KMeansConcepts(6, random_state=0).fit(A)
    assert adjusted_rand_score(lab, m.labels_) == 1.0
    assert m.concepts_ == list(range(6))
    assert m.info_["cluster_sizes"] == [30] * 6
    # Brute force: mean of each cluster's members, distance of *all* images to it.
    means = np.stack([A[m.labels_ == c].astype(np.float64).mean(0) for c in range(6)])
    dist = cdist(A.astype(np.float64), means)
    np.testing.assert_allclose(m.codes_, -dist, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.dictionary_, means, atol=1e-5)
    for c, grid in enumerate(m.grids_):
        assert grid == np.argsort(dist[:, c], kind="stable")[:9].tolist()
    ex = m.explanations()
    assert [e["members"] for e in ex] == [np.flatnonzero(m.labels_ == c).tolist()
                                         for c in range(6)]
    assert ex[2]["values"] == pytest.approx((-dist[m.grids_[2], 2]).tolist(), abs=1e-5)


def test_kmeans_grid_may_contain_non_members_nearest_to_centroid():
    # Cluster 1 has only 4 members; the 9 images nearest its mean must include others.
    r = np.random.default_rng(0)
    X = np.concatenate([r.normal(0, 1, (40, 2)), r.normal(0, 0.1, (4, 2)) + [6.0, 0.0]])
    m = KMeansConcepts(2, random_state=0).fit(X)
    small = int(np.argmin(m.info_["cluster_sizes"]))
    grid = m.grids_[small]
    assert len(grid) == 9
    assert set(np.flatnonzero(m.labels_ == small)) < set(grid)
    mu = X[m.labels_ == small].mean(0)
    assert grid == np.argsort(np.linalg.norm(X - mu, axis=1), kind="stable")[:9].tolist()


def test_kmeans_random_grid_draws_seeded_members():
    r = np.random.default_rng(0)
    X = np.concatenate([r.normal(0, 1, (40, 3)), r.normal(0, 0.1, (5, 3)) + 20.0])
    m = KMeansConcepts(2, grid_strategy="random", random_state=3).fit(X)
    for c, grid in enumerate(m.grids_):
        members = np.flatnonzero(m.labels_ == c)
        assert set(grid) <= set(members)
        assert len(set(grid)) == min(9, len(members))  # the 5-image cluster shows all 5
    again = KMeansConcepts(2, grid_strategy="random", random_state=3).fit(X)
    assert again.grids_ == m.grids_
    centroid = KMeansConcepts(2, random_state=3).fit(X)
    big = int(np.argmax(m.info_["cluster_sizes"]))
    assert m.grids_[big] != centroid.grids_[big]


def test_kmeans_uses_pinned_n_init_and_seed():
    A, _, _ = planted_pairs(n_per=20, seed=4, spread=1.5)  # overlapping blobs: inits matter
    for n_init in (1, 10):
        ours = KMeansConcepts(5, n_init=n_init, random_state=7).fit(A)
        ref = KMeans(n_clusters=5, n_init=n_init, random_state=7).fit(A)
        np.testing.assert_array_equal(ours.labels_, ref.labels_)
        assert ours.info_["inertia"] == pytest.approx(ref.inertia_, rel=1e-6)
        assert ours.info_["n_iter"] == ref.n_iter_


def test_kmeans_is_the_one_thread_fit_whatever_the_threads_around_it():
    """scikit-learn adds its threads' partial sums in the order they finish: with 3 or more
    threads the inertia, and the restart it selects, can change from run to run (seen on a
    16-core machine). The baseline fits on one thread: the same bits wherever it runs. Here
    the 4-thread inertia differs from the 1-thread one in the last bits, so a fit that used
    the threads around it would not match."""
    X, _ = planted_nonnegative(noise=0.3, seed=3)
    with threadpool_limits(limits=1, user_api="openmp"):
        ref = KMeans(n_clusters=3, n_init=10, random_state=11).fit(X)
    with threadpool_limits(limits=4, user_api="openmp"):
        many = KMeans(n_clusters=3, n_init=10, random_state=11).fit(X)
        ours = KMeansConcepts(3, random_state=11).fit(X)
        after = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"]
    assert after and set(after) == {4}            # the caller's limit is back after the fit
    assert many.inertia_ != ref.inertia_          # the data shows the threads' effect
    assert ours.info_["inertia"] == ref.inertia_
    np.testing.assert_array_equal(ours.labels_, ref.labels_)


# ----------------------------------------------------------------------------- PCA

def test_pca_grids_are_top_positive_scores_of_numpy_svd():
    r = np.random.default_rng(0)
    X = (r.standard_normal((120, 10)) * np.linspace(5, 0.5, 10) + 3.0).astype(np.float32)
    m = PCAConcepts(3).fit(X)
    Xc = X.astype(np.float64) - X.astype(np.float64).mean(0)
    _, s, Vt = np.linalg.svd(Xc, full_matrices=False)
    V = Vt[:3]
    # Orientation convention: each component's largest-magnitude loading is positive.
    V = V * np.sign(V[np.arange(3), np.abs(V).argmax(1)])[:, None]
    scores = Xc @ V.T
    np.testing.assert_allclose(m.dictionary_, V, atol=1e-4)
    np.testing.assert_allclose(m.codes_, scores, atol=1e-3)
    for i, grid in enumerate(m.grids_):
        assert grid == np.argsort(-scores[:, i], kind="stable")[:9].tolist()
        assert all(scores[grid, i] > 0)
    assert m.info_["explained_variance_ratio"] == pytest.approx(
        (s[:3] ** 2 / (s ** 2).sum()).tolist(), rel=1e-4)


def test_pca_too_many_components():
    X = np.random.default_rng(0).standard_normal((50, 4))
    with pytest.raises(RDXInputError, match=r"min\(n, d\) = 4"):
        PCAConcepts(5).fit(X)


# ----------------------------------------------------------------------------- NMF

@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_nmf_reconstructs_exact_low_rank_nonnegative_data():
    r = np.random.default_rng(1)
    W, H = r.uniform(0, 1, (80, 4)), r.uniform(0, 1, (4, 20))
    X = (W @ H).astype(np.float32)
    m = NMFConcepts(4, max_iter=1000).fit(X)
    assert m.codes_.shape == (80, 4) and m.dictionary_.shape == (4, 20)
    assert (m.codes_ >= 0).all() and (m.dictionary_ >= 0).all()
    err = np.linalg.norm(X.astype(np.float64) - m.codes_.astype(np.float64) @ m.dictionary_)
    assert m.info_["reconstruction_error"] == pytest.approx(err, rel=1e-4)
    assert m.info_["relative_error"] == pytest.approx(err / np.linalg.norm(X), rel=1e-4)
    assert m.info_["relative_error"] < 1e-2
    # A rank-2 fit of rank-4 data cannot be that good: the error measures something real.
    assert NMFConcepts(2).fit(X).info_["relative_error"] > 10 * m.info_["relative_error"]


def test_nmf_concepts_are_the_planted_groups():
    X, group = planted_nonnegative(noise=0.05)
    m = NMFConcepts(3, random_state=0).fit(X)
    assert_one_group_per_concept(m.grids_, group, 3)
    assert m.info_["n_iter"] >= 1 and isinstance(m.info_["converged"], bool)


def test_nmf_rejects_negative_features_with_advice():
    X, _ = planted_nonnegative()
    X[[0, 5, 9], 2] = -0.5
    with pytest.raises(RDXInputError, match=r"3 negative values.*'cnmf'.*post-ReLU"):
        NMFConcepts(3).fit(X)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_nmf_rank_limit_depends_on_init():
    X, _ = planted_nonnegative(d=6)
    with pytest.raises(RDXInputError, match=r"min\(n, d\) = 6"):
        NMFConcepts(7).fit(X)
    assert NMFConcepts(7, init="random", max_iter=50).fit(X).codes_.shape == (90, 7)


# ----------------------------------------------------------------------------- Convex NMF

def test_cnmf_update_parts_are_the_split_gradient():
    """den − num must equal ½∂f/∂C and ½∂f/∂G (autograd on f = ‖Xᵀ − Xᵀ G Cᵀ‖²)."""
    r = np.random.default_rng(0)
    X = torch.tensor(r.standard_normal((25, 6)))
    C = torch.tensor(r.uniform(0, 1, (25, 3)), requires_grad=True)
    G = torch.tensor(r.uniform(0, 1, (25, 3)), requires_grad=True)
    f = ((X - C @ (G.T @ X)) ** 2).sum()
    f.backward()
    K = X @ X.T
    Kp, Km = K.clamp(min=0), (-K).clamp(min=0)
    with torch.no_grad():
        KpG, KmG = _gram_times(Kp, G), _gram_times(Km, G)
        num, den = cnmf_c_parts(KpG, KmG, C, G)
        assert (num >= 0).all() and (den >= 0).all()
        torch.testing.assert_close(den - num, C.grad / 2)
        num, den = cnmf_g_parts(_gram_times(Kp, C), _gram_times(Km, C), KpG, KmG, C)
        assert (num >= 0).all() and (den >= 0).all()
        torch.testing.assert_close(den - num, G.grad / 2)


def test_cnmf_runs_max_iter_and_objective_never_increases():
    A, _, _ = planted_pairs(n_per=15, seed=2, spread=2.0)  # signed, overlapping blobs
    m = ConvexNMFConcepts(4, max_iter=37, tol=0.0, device="cpu").fit(A)
    assert m.n_iter_ == 37 and m.info_["n_iter"] == 37  # the original silently ran 10
    assert m.info_["converged"] is False
    hist = np.array(m.info_["objective_history"])
    assert m.info_["objective_history_iter"] == list(range(38))
    assert (np.diff(hist) <= 1e-6 * hist[:-1]).all()
    assert hist[-1] < 0.9 * hist[0]  # the updates improve on the k-means initialisation
    # Recorded values are the true objective of the returned factors.
    assert hist[-1] == pytest.approx(cnmf_objective(A, m.codes_, m.G_), rel=1e-4)
    assert m.info_["relative_error"] == pytest.approx(
        np.sqrt(hist[-1]) / np.linalg.norm(A.astype(np.float64)), rel=1e-6)
    np.testing.assert_allclose(m.dictionary_, m.G_.T @ A, rtol=1e-4, atol=1e-4)
    assert (m.codes_ >= 0).all() and (m.G_ >= 0).all()


def test_cnmf_initialisation_follows_the_paper():
    A, _, _ = planted_pairs(n_per=15, seed=2, spread=2.0)
    m = ConvexNMFConcepts(4, max_iter=1, tol=0.0, device="cpu", random_state=5).fit(A)
    labels = KMeans(n_clusters=4, n_init=1, random_state=5).fit(A).labels_
    E = np.eye(4)[labels]
    G0 = (E + 0.01) / E.sum(0)
    assert m.info_["init_cluster_sizes"] == E.sum(0).astype(int).tolist()
    assert m.info_["objective_history"][0] == pytest.approx(
        cnmf_objective(A, E + 0.2, G0), rel=1e-5)


def test_cnmf_stops_early_when_objective_settles():
    X, _ = planted_nonnegative()
    m = ConvexNMFConcepts(3, max_iter=500, tol=1e-2, device="cpu").fit(X)
    assert m.n_iter_ < 100 and m.info_["converged"] is True
    h = m.info_["objective_history"]  # complete: fewer than 101 values
    assert len(h) == m.n_iter_ + 1
    assert abs(h[-2] - h[-1]) < 1e-2 * h[-2] <= abs(h[-3] - h[-2])


def test_cnmf_concepts_are_the_planted_groups():
    X, group = planted_nonnegative(noise=0.05)
    m = ConvexNMFConcepts(3, device="cpu").fit(X)
    assert_one_group_per_concept(m.grids_, group, 3)


def test_cnmf_on_signed_features():
    A, _, lab = planted_pairs(n_per=20, seed=1)
    assert (A < 0).mean() > 0.3
    m = ConvexNMFConcepts(6, max_iter=50, device="cpu").fit(A)
    assert_one_group_per_concept(m.grids_, lab, 6)
    assert m.info_["relative_error"] < 0.2


def test_cnmf_refuses_gram_that_does_not_fit(monkeypatch):
    monkeypatch.setenv("RDX_MEMORY_LIMIT_GB", "0.0001")  # ~100 KiB; the Gram alone is 3.2 MB
    X = np.random.default_rng(0).standard_normal((400, 5))
    with pytest.raises(RDXInputError, match=r"n×n Gram.*n=400.*fewer images"):
        ConvexNMFConcepts(3, device="cpu").fit(X)


def test_cnmf_long_history_is_downsampled():
    X, _ = planted_nonnegative(n_per=5)
    m = ConvexNMFConcepts(3, max_iter=300, tol=0.0, device="cpu").fit(X)
    it = m.info_["objective_history_iter"]
    assert len(m.info_["objective_history"]) == len(it) <= 101
    assert it[0] == 0 and it[-1] == 300 and it == sorted(set(it))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cnmf_gpu_matches_cpu():
    A, _, _ = planted_pairs(n_per=20, seed=2, spread=2.0)
    cpu = ConvexNMFConcepts(4, max_iter=30, tol=0.0, device="cpu").fit(A)
    gpu = ConvexNMFConcepts(4, max_iter=30, tol=0.0, device="cuda").fit(A)
    np.testing.assert_allclose(gpu.codes_, cpu.codes_, rtol=1e-3, atol=1e-4)
    assert gpu.grids_ == cpu.grids_


# ----------------------------------------------------------------------------- shared

ALL = [(KMeansConcepts, {}), (KMeansConcepts, {"grid_strategy": "random"}), (PCAConcepts, {}),
       (NMFConcepts, {}), (ConvexNMFConcepts, {"max_iter": 20, "device": "cpu"})]


@pytest.mark.parametrize("cls,kw", ALL)
def test_same_seed_same_output(cls, kw):
    X, _ = planted_nonnegative(noise=0.3, seed=3)
    a = cls(3, random_state=11, **kw).fit(X)
    b = cls(3, random_state=11, **kw).fit(torch.tensor(X))  # tensors accepted too
    np.testing.assert_array_equal(a.codes_, b.codes_)
    assert a.grids_ == b.grids_ and a.info_ == b.info_
    assert a.codes_.dtype == np.float32 and a.codes_.shape == (90, 3)
    assert a.dictionary_.dtype == np.float32 and a.dictionary_.shape == (3, 30)
    assert all(len(g) == 9 for g in a.grids_)


def test_registry_names():
    assert baseline_class("kmeans") is KMeansConcepts
    assert baseline_class("pca") is PCAConcepts
    assert baseline_class("nmf") is NMFConcepts
    assert baseline_class("cnmf") is ConvexNMFConcepts


@pytest.mark.parametrize("cls", [KMeansConcepts, ConvexNMFConcepts])
def test_more_clusters_than_distinct_images(cls):
    X = np.repeat(np.eye(3), 10, axis=0)  # 30 images, 3 distinct
    with pytest.raises(RDXInputError, match=r"only 3 distinct images"):
        cls(4, device="cpu").fit(X) if cls is ConvexNMFConcepts else cls(4).fit(X)


@pytest.mark.parametrize("cls", [KMeansConcepts, PCAConcepts, NMFConcepts, ConvexNMFConcepts])
def test_more_concepts_than_images(cls):
    X, _ = planted_nonnegative(n_per=3)
    with pytest.raises(RDXInputError, match=r"larger than the number of images \(9\)"):
        cls(10, grid_size=3).fit(X)


@pytest.mark.parametrize("cls,kw,match", [
    (KMeansConcepts, {"grid_strategy": "nearest"}, "grid_strategy"),
    (KMeansConcepts, {"n_init": 0}, "n_init"),
    (NMFConcepts, {"init": "svd"}, "init"),
    (NMFConcepts, {"max_iter": 2.5}, "max_iter"),
    (ConvexNMFConcepts, {"tol": -1e-3}, "tol"),
    (ConvexNMFConcepts, {"max_iter": 0}, "max_iter"),
    (ConvexNMFConcepts, {"device": "tpu"}, "device"),
    (ConvexNMFConcepts, {"verbose": -1}, "verbose"),
    (PCAConcepts, {"grid_size": 0}, "grid_size"),
])
def test_bad_parameters(cls, kw, match):
    est = cls(3, **kw)
    with pytest.raises(RDXInputError, match=match):
        est._check_params(None)  # caught before any data is seen
    X, _ = planted_nonnegative()
    with pytest.raises(RDXInputError, match=match):
        cls(3, **kw).fit(X)
