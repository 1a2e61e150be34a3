"""Spectral clustering vs scikit-learn, ordering/no-change group, centrality vs networkx."""
import networkx as nx
import numpy as np
import pytest
import torch
from sklearn.cluster import SpectralClustering
from sklearn.metrics import adjusted_rand_score

from conftest import planted_pairs
from rdx.method.clustering import (block_sums, eigenvector_centrality,
                                   greedy_centrality_clusters, pagerank, union_mean)
from rdx.method.geometry import to_device_centered
from rdx.method.graphs import (difference_matrix_, similarity_matrix, symmetrized_affinity)
from rdx.method.spectral import spectral_clustering


def rdx_graph(A, B, gamma):
    cpu = torch.device("cpu")
    Ra = similarity_matrix(to_device_centered(A, cpu))
    Rb = similarity_matrix(to_device_centered(B, cpu))
    return difference_matrix_(Ra, Rb, gamma=gamma)


@pytest.mark.parametrize("solver", ["dense", "arpack"])
@pytest.mark.parametrize("direction,k", [("b_over_a", 4), ("a_over_b", 4), ("b_over_a", 6)])
def test_partitions_match_sklearn_spectral_clustering(solver, direction, k):
    A, B, _ = planted_pairs(n_per=50, seed=3)
    diff = rdx_graph(A, B, gamma=80 / len(A))
    S = symmetrized_affinity(diff, 5.0, direction)
    ref = SpectralClustering(n_clusters=k, affinity="precomputed", n_init=10,
                             random_state=0).fit_predict(S.numpy().astype(np.float64))
    ours = spectral_clustering(S, k, random_state=0, eigen_solver=solver)
    assert adjusted_rand_score(ref, ours) == 1.0


def test_block_sums_give_unsymmetrised_means_including_diagonal(rng):
    n, beta = 12, 2.0
    diff = torch.tensor(rng.uniform(-1, 1, (n, n)), dtype=torch.float32)
    diff.fill_diagonal_(0.0)
    labels = np.array([0, 1, 2] * 4)
    sizes = np.bincount(labels)
    for direction, sign in (("a_over_b", -1.0), ("b_over_a", 1.0)):
        A = np.exp(sign * beta * diff.numpy().astype(np.float64))   # unsymmetrised
        sums = block_sums(symmetrized_affinity(diff, beta, direction), labels, 3)
        for c in range(3):
            m = labels == c
            assert sums[c, c] / sizes[c] ** 2 == pytest.approx(A[np.ix_(m, m)].mean(), rel=1e-6)
        u = np.isin(labels, [0, 2])
        assert union_mean(sums, sizes, [0, 2]) == pytest.approx(A[np.ix_(u, u)].mean(), rel=1e-6)


def test_block_sums_equal_the_blockwise_float64_products_bit_for_bit(monkeypatch, rng):
    """Casting every row block into one reused buffer gives the very products of casting
    each block afresh (the mean affinities of every documented result)."""
    import rdx.method.clustering as clustering

    n, k = 301, 5
    S = rng.uniform(0.0, 150.0, (n, n)).astype(np.float32)
    labels = rng.integers(0, k, n)
    Y = np.zeros((n, k))
    Y[np.arange(n), labels] = 1.0
    for gather in (clustering._GATHER_BYTES, 4 * n * 2 * 7):    # one block; blocks of 7 rows
        monkeypatch.setattr(clustering, "_GATHER_BYTES", gather)
        step = max(1, clustering.rows_per_chunk(n) // 2)
        ref = np.zeros((k, k))
        for s in range(0, n, step):
            ref += Y[s:s + step].T @ (S[s:s + step].astype(np.float64) @ Y)
        np.testing.assert_array_equal(block_sums(S, labels, k), ref)
    torch_sums = block_sums(torch.from_numpy(S), labels, k)
    np.testing.assert_allclose(torch_sums, ref, rtol=1e-12)


def _random_weights(n=30, seed=0):
    r = np.random.default_rng(seed)
    W = r.uniform(0.1, 5.0, (n, n))
    return (W + W.T) / 2


def test_pagerank_matches_networkx():
    W = _random_weights()
    ref = nx.pagerank(nx.from_numpy_array(W), alpha=0.85, tol=1e-10, max_iter=1000)
    ours = pagerank(torch.tensor(W, dtype=torch.float32), tol=1e-10, max_iter=1000)
    np.testing.assert_allclose(ours, [ref[i] for i in range(len(W))], rtol=1e-5)
    assert ours.sum() == pytest.approx(1.0)


def test_eigenvector_centrality_matches_networkx():
    W = _random_weights(seed=1)
    ref = nx.eigenvector_centrality_numpy(nx.from_numpy_array(W), weight="weight")
    ours = eigenvector_centrality(torch.tensor(W, dtype=torch.float32))
    np.testing.assert_allclose(ours, [ref[i] for i in range(len(W))], rtol=1e-5)


def test_greedy_selection_hand_example():
    # 7 images; centrality picks 3 first, then 0. Affinity rows decide the members.
    n = 7
    diff = torch.zeros(n, n)
    # a_over_b affinity exp(−β·diff): a negative diff is a large affinity
    diff[3, 5], diff[3, 1], diff[3, 0] = -0.9, -0.8, -0.7   # 3's best partners: 5, 1 (then 0)
    diff[0, 3], diff[0, 6], diff[0, 2] = -0.9, -0.5, -0.4   # 3 is taken → 6, 2
    cent = np.array([0.5, 0.1, 0.1, 0.9, 0.1, 0.2, 0.1])
    labels = greedy_centrality_clusters(torch.ones(n, n), diff, centrality=cent, n_clusters=2,
                                        cluster_size=3, beta=5.0, direction="a_over_b")
    np.testing.assert_array_equal(labels, [2, 1, 2, 1, 0, 1, 2])


def test_greedy_anchor_never_counted_twice():
    n = 10
    diff = torch.full((n, n), 0.5)
    diff.fill_diagonal_(-1.0)          # self-affinity is the largest entry of every row
    labels = greedy_centrality_clusters(torch.ones(n, n), diff, centrality=np.arange(n, dtype=float),
                                        n_clusters=2, cluster_size=4, beta=5.0,
                                        direction="a_over_b")
    assert (labels == 1).sum() == 4 and (labels == 2).sum() == 4 and (labels == 0).sum() == 2
