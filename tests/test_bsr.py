"""BSR / TSD / EQ on hand-built grids with known answers (spec §4.2)."""
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
