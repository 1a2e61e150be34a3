"""Property-based tests (Hypothesis) of the math: what must hold for every input, not one.

Hypothesis draws the shapes, a data seed and the transformations; the arrays are then made
by numpy from that seed, so that the drawn inputs are general position data (no ties by
construction, which the rank properties assume; ties are broken by index and are tested
by hand elsewhere). What is checked:

- neighbour ranks: a joint relabelling of the images permutes the rank matrix; ranks are
  unchanged by rotations, reflections, translations and positive scaling of the features;
- the difference and affinity: a model against itself has no difference; swapping A and B
  negates the difference of the standard function and swaps the two directions' affinities;
- every registered similarity measure: a joint relabelling of the images leaves it
  unchanged, symmetric measures are symmetric, the transformations its metadata declares
  leave it unchanged, and a representation is maximally similar to itself;
- Kendall's τ-a equals scipy's τ-b when there are no ties;
- RDX itself: relabelling the images relabels its explanations, on data with a planted
  difference.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import kendalltau, ortho_group

import hypothesis_profiles  # noqa: F401  (the project's Hypothesis profile)
from rdx.method.graphs import difference_matrix_, symmetrized_affinity
from rdx.method.ranks import rank_matrix
from rdx.similarity.calibration import similarity
from rdx.similarity.rdm import kendall_tau_a
from rdx.similarity.registry import MEASURES

seeds = st.integers(0, 2**32 - 1)


def _data(seed: int, n: int, d: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


@given(seed=seeds, n=st.integers(4, 40), d=st.integers(1, 8))
def test_ranks_follow_a_relabelling_of_the_images(seed, n, d):
    X = _data(seed, n, d).astype(np.float32)
    p = np.random.default_rng(seed + 1).permutation(n)
    R = rank_matrix(X)
    np.testing.assert_array_equal(rank_matrix(X[p]), R[np.ix_(p, p)])


@given(seed=seeds, n=st.integers(4, 30), d=st.integers(2, 6),
       scale=st.floats(0.25, 4.0), shift=st.floats(-3.0, 3.0))
def test_ranks_ignore_rotation_translation_and_scale(seed, n, d, scale, shift):
    X = _data(seed, n, d)
    Q = ortho_group.rvs(d, random_state=seed % 2**31)
    Y = scale * X @ Q + shift
    # float64 in, so that the rank order of general-position distances survives the transform
    np.testing.assert_array_equal(rank_matrix(Y), rank_matrix(X))


@given(seed=seeds, n=st.integers(3, 25), gamma=st.floats(0.01, 1.0))
def test_a_model_against_itself_has_no_difference(seed, n, gamma):
    R = rank_matrix(_data(seed, n, 3).astype(np.float32))
    for function in ("locally_biased", "standard"):
        diff = difference_matrix_(R.copy(), R, function, gamma=gamma)
        assert not np.any(diff)


@given(seed=seeds, n=st.integers(3, 25), beta=st.floats(0.5, 8.0))
def test_swapping_the_models_swaps_the_directions(seed, n, beta):
    Ra = rank_matrix(_data(seed, n, 3).astype(np.float32))
    Rb = rank_matrix(_data(seed + 7, n, 3).astype(np.float32))
    ab = difference_matrix_(Ra.copy(), Rb, "standard")
    ba = difference_matrix_(Rb.copy(), Ra, "standard")
    np.testing.assert_array_equal(ab, -ba)
    lb_ab = difference_matrix_(Ra.copy(), Rb, "locally_biased", gamma=0.1)
    lb_ba = difference_matrix_(Rb.copy(), Ra, "locally_biased", gamma=0.1)
    np.testing.assert_allclose(lb_ab, -lb_ba, atol=1e-6)   # tanh is odd, min() symmetric
    np.testing.assert_allclose(symmetrized_affinity(lb_ab, beta, "a_over_b"),
                               symmetrized_affinity(lb_ba, beta, "b_over_a"), rtol=1e-5)


def _transform(kind: str, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    n, d = X.shape
    if kind == "orthogonal":
        return X @ ortho_group.rvs(d, random_state=int(rng.integers(2**31)))
    if kind == "isotropic_scaling":
        return X * float(rng.uniform(0.3, 3.0))
    if kind == "translation":
        return X + rng.normal(size=(1, d)) * 3.0
    if kind == "per_image_scaling":
        return X * rng.uniform(0.3, 3.0, size=(n, 1))
    if kind == "per_image_shift":
        return X + rng.normal(size=(n, 1))
    if kind == "feature_permutation":
        return X[:, rng.permutation(d)]
    raise AssertionError(kind)


def _pair(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two related representations: Y is a noisy linear map of X (not identical, not unrelated)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    Y = X @ rng.normal(size=(6, 5)) + 0.5 * rng.normal(size=(n, 5))
    return X, Y


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


@pytest.mark.parametrize("name", sorted(MEASURES))
@given(seed=seeds, n=st.integers(24, 48))
def test_measures_ignore_a_relabelling_of_the_images(name, seed, n):
    X, Y = _pair(seed, n)
    p = np.random.default_rng(seed + 3).permutation(n)
    assert _close(similarity(name, X[p], Y[p]), similarity(name, X, Y))


@pytest.mark.parametrize("name", sorted(n for n, m in MEASURES.items() if m.symmetric))
@given(seed=seeds, n=st.integers(24, 48))
def test_symmetric_measures_are_symmetric(name, seed, n):
    X, Y = _pair(seed, n)
    assert _close(similarity(name, X, Y), similarity(name, Y, X))


@pytest.mark.parametrize("name,kind", sorted(
    (n, kind) for n, m in MEASURES.items() for kind in m.invariances))
@given(seed=seeds, n=st.integers(24, 48))
def test_declared_invariances_hold(name, kind, seed, n):
    X, Y = _pair(seed, n)
    Xt = _transform(kind, X, np.random.default_rng(seed + 5))
    assert _close(similarity(name, Xt, Y), similarity(name, X, Y))


@pytest.mark.parametrize("name", sorted(MEASURES))
@given(seed=seeds, n=st.integers(24, 48))
def test_a_representation_is_most_similar_to_itself(name, seed, n):
    X, Y = _pair(seed, n)
    m = MEASURES[name]
    self_value, other = similarity(name, X, X), similarity(name, X, Y)
    if m.higher_is_more_similar:
        assert other <= self_value + 1e-9 and _close(self_value, 1.0)
    else:
        assert other >= self_value - 1e-9 and abs(self_value) <= 1e-9


@given(seed=seeds, n=st.integers(3, 60))
def test_kendall_tau_a_is_tau_b_without_ties(seed, n):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=n), rng.normal(size=n)
    assert kendall_tau_a(x, y) == pytest.approx(kendalltau(x, y).statistic, abs=1e-12)


def _planted(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """60 images in three tight groups for B; A keeps two and spreads the third."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0, 0], [8, 0, 0], [0, 8, 0]])
    B = np.repeat(centres, 20, axis=0) + 0.3 * rng.normal(size=(60, 3))
    A = B.copy()
    A[40:] = centres[2] + 4.0 * rng.normal(size=(20, 3))
    return A.astype(np.float32), B.astype(np.float32)


@given(seed=st.integers(0, 1000), perm_seed=seeds)
def test_rdx_explanations_follow_a_relabelling_of_the_images(seed, perm_seed):
    """The planted group (tight in B, spread in A) is found whatever the images' order.

    Only the planted difference is compared: a weak explanation of noise may move by an
    image or two at its border, because k-means' seeded starting centres are drawn by row
    position, so a relabelling is not a no-op for ties between equally good partitions."""
    from rdx import RDX

    A, B = _planted(seed)
    p = np.random.default_rng(perm_seed).permutation(len(A))

    def strongest(X: np.ndarray, Y: np.ndarray, rows: np.ndarray) -> tuple[frozenset, float]:
        fitted = RDX(n_explanations=2, grid_size=4, random_state=0).fit(X, Y)
        best = max(fitted.directions_["b_over_a"].explanations, key=lambda e: e.mean_affinity)
        return frozenset(int(rows[i]) for i in best.members), best.mean_affinity

    members, strength = strongest(A, B, np.arange(len(A)))
    assert len(members & set(range(40, 60))) > len(members) / 2   # mostly the planted group
    moved_members, moved_strength = strongest(A[p], B[p], p)
    assert moved_members == members
    assert moved_strength == pytest.approx(strength, rel=1e-4)
