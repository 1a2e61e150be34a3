"""BSR / TSD / EQ on hand-built grids with known answers."""
import numpy as np
import pytest

from rdx.evaluation.bsr import bsr_scores

A4 = np.array([[0.0], [1.0], [3.0], [7.0]])
B4 = np.array([[0.0], [3.0], [1.0], [7.0]])


def test_rank_dissimilarity_hand_computed():
    # δ = 1-based rank. A: R(0,1)=1, R(1,0)=1 → δ_A = 2 both ways.
    # B (positions 0,3,1,7): row 0 sorted 0,2,1,3 → R(0,1)=2; row 1 sorted 1,2,0,3 → R(1,0)=2 → δ_B=3
    s = bsr_scores(A4, B4, {"a_over_b": [[0, 1]], "b_over_a": [[0, 1]]}, dissimilarity="rank")
    assert s["a_over_b"] == {"bsr": 1.0, "tsd": 1.0, "eq": 0.0, "n_pairs": 2}
    assert s["b_over_a"] == {"bsr": 0.0, "tsd": -1.0, "eq": 0.0, "n_pairs": 2}
    assert s["mean"] == {"bsr": 0.5, "tsd": 0.0}


def test_max_normalized_euclidean_hand_computed():
    # δ_A(0,1) = 1/7, δ_B(0,1) = 3/7 (both maxima are 7)
    s = bsr_scores(A4, B4, {"a_over_b": [[0, 1]]}, dissimilarity="max_normalized_euclidean")
    assert s["a_over_b"]["bsr"] == 1.0
    assert s["a_over_b"]["tsd"] == pytest.approx(2 / 7)


def test_local_scaling_hand_computed():
    # σ = distance to the 2nd neighbour. A: σ0 = 3, σ1 = 2 → δ_A(0,1) = 1/6.
    # B: row 0 distances 0,3,1,7 → σ0 = 3; row 1: 3,0,2,4 → σ1 = 3 → δ_B(0,1) = 9/9 = 1.
    s = bsr_scores(A4, B4, {"b_over_a": [[0, 1]]}, dissimilarity="local_scaling",
                   sigma_neighbor=2)
    assert s["b_over_a"]["bsr"] == 0.0
    assert s["b_over_a"]["tsd"] == pytest.approx(1 / 6 - 1)


@pytest.mark.parametrize("dissimilarity", ["rank", "max_normalized_euclidean", "local_scaling"])
def test_grid_tight_in_a_only_scores_one(rng, dissimilarity):
    # 9 grid images form a tight blob in A. In B they sit 100 apart, each inside its own
    # group of 9 other images, so every grid pair is farther apart in B by every measure
    # (rank in B ≥ 10 > rank in A ≤ 8).
    grid = list(range(9))
    A = rng.standard_normal((90, 5)) * 10
    A[grid] = rng.standard_normal((9, 5)) * 0.01
    centres = rng.standard_normal((9, 5)) * 100
    B = np.concatenate([centres, np.repeat(centres, 9, axis=0) + rng.standard_normal((81, 5))])
    s = bsr_scores(A, B, {"a_over_b": [grid], "b_over_a": [grid]}, dissimilarity=dissimilarity)
    assert s["a_over_b"]["bsr"] == 1.0 and s["a_over_b"]["n_pairs"] == 72
    assert s["b_over_a"]["bsr"] == 0.0
    assert s["a_over_b"]["tsd"] > 0 and s["b_over_a"]["tsd"] == pytest.approx(-s["a_over_b"]["tsd"])


def test_identical_representations_are_all_ties(rng):
    A = rng.standard_normal((30, 4))
    s = bsr_scores(A, A.copy(), {"a_over_b": [[0, 1, 2], [5, 6]]})
    assert s["a_over_b"] == {"bsr": 0.0, "tsd": 0.0, "eq": 1.0, "n_pairs": 8}


# ----------------------------------------------------------------- prepared representations
from rdx.errors import RDXInputError  # noqa: E402
from rdx.evaluation.bsr import DISSIMILARITIES, prepare_representation  # noqa: E402
from rdx.evaluation.chance import chance_levels  # noqa: E402


def _cases(rng):
    A = rng.standard_normal((120, 7)) * 30.0 + 5.0
    B = A[:, :4] + rng.standard_normal((120, 4))
    Ad, Bd = np.round(A / 20.0), B.copy()          # exact duplicates and tied distances
    Ad[11] = Ad[4]
    Bd[50] = Bd[9]
    grids = {"a_over_b": [[0, 1, 2, 3, 4, 11], [20, 30, 40]], "b_over_a": [[9, 50, 60, 61], [5]]}
    return [(A, B, grids), (Ad, Bd, grids)]


def test_prepared_and_unprepared_scores_are_identical(rng):
    for A, B, grids in _cases(rng):
        pa, pb = prepare_representation(A), prepare_representation(B)
        for kind in DISSIMILARITIES:
            for sigma in (3, 7):
                plain = bsr_scores(A, B, grids, dissimilarity=kind, sigma_neighbor=sigma)
                assert bsr_scores(pa, pb, grids, dissimilarity=kind,
                                  sigma_neighbor=sigma) == plain
                assert bsr_scores(pa, B, grids, dissimilarity=kind,
                                  sigma_neighbor=sigma) == plain      # mixed inputs
        # twice on the same prepared pair (cached grid rows): still the same
        assert bsr_scores(pa, pb, grids, dissimilarity="rank") == bsr_scores(A, B, grids)
        plain = chance_levels(A, B, [6, 3], n_draws=40, seed=2)
        assert chance_levels(pa, pb, [6, 3], n_draws=40, seed=2) == plain


def test_prepared_rank_dissimilarity_equals_brute_force_ranks(rng):
    # 1-based rank of b in a's list (self first, ties by index) on data with exact ties
    # (symmetric small integers: centring is exact, so float32 distances are exact too)
    base = rng.integers(-2, 3, size=(20, 2)).astype(np.float64)
    X = np.concatenate([base, -base])
    p = prepare_representation(X)
    grid = [0, 3, 5, 17, 39]
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    for i, a in enumerate(grid):
        key = D[a].copy()
        key[a] = -1.0
        order = np.lexsort((np.arange(40), key))
        rank = np.empty(40, dtype=np.int64)
        rank[order] = np.arange(40)
        np.testing.assert_array_equal(p.dissimilarity("rank", grid)[i], rank[grid] + 1.0)


def test_prepared_max_distance_and_local_scale_hand_computed():
    # A4 = 0, 1, 3, 7: largest distance 7; σ (2nd neighbour) of image 0 = 3, of image 1 = 2
    p = prepare_representation(A4, sigma_neighbor=2)
    # distances are those of the centred data scaled by a power of two (here 1/4)
    assert p.max_distance() == 7.0 / 4
    np.testing.assert_allclose(p.dissimilarity("max_normalized_euclidean", [0, 1]),
                               [[0, 1 / 7], [1 / 7, 0]])
    np.testing.assert_allclose(p.dissimilarity("local_scaling", [0, 1]),
                               [[0, 1 / 6], [1 / 6, 0]])
    # the prepared default σ neighbour is used when the call does not say
    s = bsr_scores(p, prepare_representation(B4, sigma_neighbor=2), {"b_over_a": [[0, 1]]},
                   dissimilarity="local_scaling")
    assert s["b_over_a"]["tsd"] == pytest.approx(1 / 6 - 1)


def test_prepared_inputs_are_checked(rng):
    A = rng.standard_normal((30, 3))
    with pytest.raises(RDXInputError, match="different sigma_neighbor"):
        bsr_scores(prepare_representation(A, sigma_neighbor=3),
                   prepare_representation(A, sigma_neighbor=5), {"a_over_b": [[0, 1]]})
    with pytest.raises(RDXInputError, match="same images"):
        bsr_scores(prepare_representation(A), prepare_representation(A[:20]),
                   {"a_over_b": [[0, 1]]})
    with pytest.raises(RDXInputError, match="sigma_neighbor must be a positive integer"):
        prepare_representation(A, sigma_neighbor=2.5)
    with pytest.raises(RDXInputError, match="shape"):
        prepare_representation(A[:, 0])
    p = prepare_representation(A)
    assert prepare_representation(p) is p


def test_prepared_representation_computes_the_max_once(rng, monkeypatch):
    import rdx.method.geometry as geometry
    calls = []
    real = geometry.max_squared_distance
    monkeypatch.setattr(geometry, "max_squared_distance",
                        lambda X, *a, **k: calls.append(1) or real(X, *a, **k))
    A, B = rng.standard_normal((50, 4)), rng.standard_normal((50, 5))
    pa, pb = prepare_representation(A), prepare_representation(B)
    grids = {"a_over_b": [[0, 1, 2]], "b_over_a": [[3, 4]]}
    for _ in range(3):
        bsr_scores(pa, pb, grids, dissimilarity="max_normalized_euclidean")
    chance_levels(pa, pb, [3], n_draws=10)
    assert len(calls) == 2                         # once per representation


def test_chance_levels_do_not_depend_on_the_thread_count(monkeypatch, tmp_path):
    """A BLAS sums a row's dot products in an order that depends on the product's number of
    rows, so distance rows computed in blocks sized by the thread count differed in the last
    bits between machines. Where B equals A except for a few images (the run tests' merge of
    the 5s into 3s), most pairs' local-scaling dissimilarities are equal in A and B up to
    that rounding, and its sign decided the chance BSR: 0.658 on 2 threads, 0.677 on 16."""
    import rdx.method.blockwise as blockwise
    from conftest import digit_features
    _, A, B = digit_features(tmp_path)
    results = []
    for threads in (1, 2, 3, 16):
        monkeypatch.setattr(blockwise, "n_cpu_threads", lambda t=threads: t)
        results.append(chance_levels(A, B, [9, 9, 9], n_draws=1000, seed=0))
    assert all(r == results[0] for r in results[1:])
