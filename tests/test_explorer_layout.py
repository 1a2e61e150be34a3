"""The explorer's default 2-D maps (rdx.explorer.embedding's knn_layout): its neighbour
graph against brute force and umap-learn's, alignment, determinism, the page's record of
the layout used, and the build's progress lines."""
import json

import numpy as np
import pytest

from conftest import MERGED
from rdx.explorer import build_explorer
from rdx.explorer.embedding import (cached_embed_pair, embed_pair, exact_knn, fuzzy_graph,
                                    knn_layout, umap_ab)


def blobs(seed=0, n_per=40, n_blobs=5, d=8):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_blobs, d)) * 6
    labels = np.repeat(np.arange(n_blobs), n_per)
    return (centres[labels] + rng.normal(size=(len(labels), d))).astype(np.float32), labels


def knn_agreement(Y, labels, k=10):
    idx, _ = exact_knn(Y, k + 1)
    return float((labels[idx[:, 1:]] == labels[:, None]).mean())


def test_exact_knn_is_brute_force_with_itself_first():
    X, _ = blobs()
    X[5] = X[6]                                  # a duplicate: each still lists itself first
    idx, dist = exact_knn(X, 7, block=64)        # several row blocks
    D = np.sqrt(((X[:, None, :].astype(np.float64) - X[None]) ** 2).sum(-1))
    assert (idx[:, 0] == np.arange(len(X))).all() and np.allclose(dist[:, 0], 0)
    assert idx[5, 1] == 6 and idx[6, 1] == 5
    for i in (0, 17, 199):
        order = np.lexsort((np.arange(len(X)), D[i]))
        order = np.concatenate([[i], order[order != i]])[:7]
        np.testing.assert_array_equal(idx[i], order)
        np.testing.assert_allclose(dist[i], D[i, order], atol=1e-4)


def test_fuzzy_graph_rows_sum_to_log2_k_before_the_union():
    X, _ = blobs()
    idx, dist = exact_knn(X, 15)
    P = fuzzy_graph(idx, dist).tocsr()
    assert abs(P - P.T).max() < 1e-12 and P.max() <= 1.0 + 1e-12 and P.min() >= 0
    # the union W + Wᵀ − W∘Wᵀ is at least each directed weight; with the directed rows summing
    # to log2(15), every row of the union sums to at least that
    assert (np.asarray(P.sum(axis=1)).ravel() >= np.log2(15) - 1e-6).all()


@pytest.mark.slow
def test_fuzzy_graph_and_curve_are_umap_learns():
    """The same graph and a, b as umap-learn (given the same neighbours); numba compiles."""
    umap_ = pytest.importorskip("umap.umap_")
    X, _ = blobs()
    idx, dist = exact_knn(X, 15)
    theirs = umap_.fuzzy_simplicial_set(X, 15, np.random.RandomState(0), "euclidean",
                                        knn_indices=idx, knn_dists=dist.astype(np.float32))[0]
    ours = fuzzy_graph(idx, dist)
    assert abs(ours.tocsr() - theirs.tocsr()).max() < 1e-4
    np.testing.assert_allclose(umap_ab(0.1), umap_.find_ab_params(1.0, 0.1), rtol=1e-4)


def test_layout_separates_clusters_and_is_deterministic():
    X, labels = blobs()
    Y1 = knn_layout([X], n_epochs=100, seed=3)[0]
    assert knn_agreement(Y1, labels) > 0.95
    np.testing.assert_array_equal(Y1, knn_layout([X], n_epochs=100, seed=3)[0])
    assert not np.array_equal(Y1, knn_layout([X], n_epochs=100, seed=4)[0])


def test_same_representation_gives_the_same_map_and_a_close_one_an_aligned_map():
    X, labels = blobs()
    e = embed_pair(X, X.copy(), seed=1)
    assert e.method == "knn_layout" and e.note is None and "rdx" in e.label
    np.testing.assert_array_equal(e.a, e.b)      # same graph, same draws: one map
    rng = np.random.default_rng(1)
    e = embed_pair(X, X + 0.2 * rng.normal(size=X.shape).astype(np.float32), seed=1)
    gap = np.linalg.norm(e.a - e.b, axis=1)      # maps at unit RMS radius
    shuffled = np.linalg.norm(e.a - e.b[rng.permutation(len(X))], axis=1)
    assert np.median(gap) < 0.1 < np.median(shuffled)
    assert knn_agreement(e.a, labels) > 0.95 and knn_agreement(e.b, labels) > 0.95


def test_cache_key_names_the_layout(tmp_path):
    X, _ = blobs()
    e1, hit1 = cached_embed_pair(X, X, tmp_path, method="auto", seed=0)
    e2, hit2 = cached_embed_pair(X, X, tmp_path, method="knn_layout", seed=0)
    assert (hit1, hit2) == (False, True)         # auto is knn_layout: one cache entry
    assert (e2.method, e2.label) == ("knn_layout", e1.label)
    assert not cached_embed_pair(X, X, tmp_path, method="pca", seed=0)[1]


def test_build_reports_progress_in_order_and_names_the_layout(toy_run_module_copy, tmp_path,
                                                               capsys):
    out = build_explorer(toy_run_module_copy.comp(MERGED), tmp_path / "explore.html",
                         progress=True)
    err = capsys.readouterr().err
    events = ["2-D maps of", "layout (epochs)", "neighbours", "thumbnails"]
    at = [err.find(e) for e in events]
    assert all(a >= 0 for a in at) and at == sorted(at), (at, err[-2000:])
    text = out.read_text()
    data = json.loads(text.split('id="rdx-data">', 1)[1].split("</script>", 1)[0])
    emb = data["pairs"][0]["embedding"]
    assert emb["method"] == "knn_layout" and emb["note"] is None
    assert emb["label"].startswith("aligned UMAP-style layout computed by rdx")
    parts = data["build"]["parts"]
    assert {"inputs", "maps", "pairs_other"} <= set(parts)
    assert data["build"]["effective"][0]["maps_cached"] is False
