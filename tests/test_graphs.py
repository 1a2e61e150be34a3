"""Similarity, difference and affinity formulas against hand-computed values."""
import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from rdx.method.geometry import to_device_centered
from rdx.method.graphs import (affinity, apply_guidance_, difference_matrix_, resolve_gamma,
                               similarity_matrix, symmetrized_affinity)


def _t(x):
    return torch.tensor(np.asarray(x, dtype=np.float32))


def test_locally_biased_difference_worked_example():
    # γ=0.05, β=5. R_A=5, R_B=2000 → diff ≈ −1 → a_over_b affinity ≈ e^5;
    # R_A=2000, R_B=2200 → diff = tanh(0.05·(−200)/2001) ≈ −0.005 → affinity ≈ 1.025.
    Ra, Rb = _t([[5.0, 2000.0]]), _t([[2000.0, 2200.0]])
    diff = difference_matrix_(Ra.clone(), Rb, "locally_biased", gamma=0.05)
    e1 = math.tanh(0.05 * (5 - 2000) / 6)
    e2 = math.tanh(0.05 * (2000 - 2200) / 2001)
    np.testing.assert_allclose(diff.numpy(), [[e1, e2]], rtol=1e-6)
    aff = affinity(diff, 5.0, "a_over_b").numpy()
    np.testing.assert_allclose(aff, [[math.exp(-5 * e1), math.exp(-5 * e2)]], rtol=1e-5)
    assert aff[0, 0] == pytest.approx(math.exp(5), rel=1e-3)
    assert aff[0, 1] == pytest.approx(1.025, abs=1e-3)
    # the other direction is the reciprocal: exp(+β·diff)
    np.testing.assert_allclose(affinity(diff, 5.0, "b_over_a").numpy() * aff, 1.0, rtol=1e-5)


def test_standard_difference_with_abs_max_normalisation():
    Ra, Rb = _t([[0, 3], [8, 0]]), _t([[0, 7], [2, 0]])
    raw = difference_matrix_(Ra.clone(), Rb, "standard")
    np.testing.assert_array_equal(raw.numpy(), [[0, -4], [6, 0]])
    norm = difference_matrix_(Ra.clone(), Rb, "standard", normalize=True)
    np.testing.assert_allclose(norm.numpy(), [[0, -4 / 6], [1, 0]])


@pytest.mark.parametrize("function", ["locally_biased", "standard"])
def test_difference_is_antisymmetric_and_affinity_bounded(rng, function):
    X, Y = rng.standard_normal((60, 5)), rng.standard_normal((60, 7))
    Ra = similarity_matrix(to_device_centered(X, torch.device("cpu")))
    Rb = similarity_matrix(to_device_centered(Y, torch.device("cpu")))
    d_ab = difference_matrix_(Ra.clone(), Rb, function, gamma=0.1, normalize=True)
    d_ba = difference_matrix_(Rb.clone(), Ra, function, gamma=0.1, normalize=True)
    np.testing.assert_allclose(d_ab.numpy(), -d_ba.numpy(), atol=1e-7)
    beta = 5.0
    for direction in ("a_over_b", "b_over_a"):
        aff = affinity(d_ab, beta, direction).numpy()
        assert aff.min() >= math.exp(-beta) * (1 - 1e-6) and aff.max() <= math.exp(beta) * (1 + 1e-6)
        np.testing.assert_array_equal(np.diag(aff), 1.0)   # both ranks 0 on the diagonal


def test_gamma_resolution():
    assert resolve_gamma(None, 80.0, 1600) == pytest.approx(0.05)
    assert resolve_gamma(0.1, 80.0, 1600) == 0.1


def test_max_normalized_distance_matches_scipy(rng):
    X = rng.standard_normal((40, 6))
    R = similarity_matrix(to_device_centered(X, torch.device("cpu")), "max_normalized_distance")
    D = cdist(X, X)
    np.testing.assert_allclose(R.numpy(), D / D.max(), atol=1e-5)


def test_zp_local_scaling_uses_each_models_own_distances(rng):
    # R(i,j) = D(i,j)² / (σ(i)σ(j)), σ = distance to the 7th neighbour, per model.
    # (The original computed model B's matrix with D_B·D_Aᵀ in the numerator.)
    for X in (rng.standard_normal((50, 4)), rng.standard_normal((50, 9)) * 7):
        R = similarity_matrix(to_device_centered(X, torch.device("cpu")), "zp_local_scaling")
        D = cdist(X, X)
        sigma = np.sort(D, axis=1)[:, 7]
        np.testing.assert_allclose(R.numpy(), D ** 2 / np.outer(sigma, sigma), rtol=1e-4, atol=1e-5)


def test_guidance_sets_cross_group_pairs_to_five_times_max():
    R = _t([[0, 1, 2, 3], [1, 0, 3, 2], [2, 3, 0, 1], [3, 2, 1, 0]])
    apply_guidance_(R, np.array(["x", "x", "y", "y"]))
    big = 5 * 3
    np.testing.assert_array_equal(R.numpy(), [[0, 1, big, big], [1, 0, big, big],
                                              [big, big, 0, 1], [big, big, 1, 0]])


def test_symmetrized_affinity_equals_dense_reference(rng):
    diff = torch.tensor(rng.uniform(-1, 1, (37, 37)), dtype=torch.float32)
    for direction in ("a_over_b", "b_over_a"):
        A = affinity(diff, 5.0, direction).numpy()
        S = symmetrized_affinity(diff, 5.0, direction, tile=8).numpy()   # several tiles
        np.testing.assert_allclose(S, (A + A.T) / 2, rtol=1e-6)
