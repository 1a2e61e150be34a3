"""Pairwise baselines NLMCD (with the fixes of the original code) and SPEC."""
import json

import numpy as np
import pytest
from conftest import planted_pairs

from rdx.baselines.nlmcd import (
    NLMCD,
    concept_discrepancy,
    membership_grid,
    select_discrepant_concepts,
    subsample_indices,
)
from rdx.baselines.spec import SPEC, canonical_sign, median_distance
from rdx.errors import RDXInputError


# ---------------------------------------------------------------------------- NLMCD pieces
def brute_discrepancy(Ma, Mb):
    """The discrepancy formula, literally: 2/(n(n−1)) Σ_{i<j} | |A_ia−A_ja| − |B_ib−B_jb| | / 2."""
    n = Ma.shape[0]
    out = np.zeros((Ma.shape[1], Mb.shape[1]))
    for a in range(Ma.shape[1]):
        for b in range(Mb.shape[1]):
            s = 0.0
            for i in range(n):
                for j in range(i + 1, n):
                    s += abs(abs(Ma[i, a] - Ma[j, a]) - abs(Mb[i, b] - Mb[j, b])) / 2
            out[a, b] = 2.0 / (n * (n - 1)) * s
    return out


def test_discrepancy_hand_value():
    # pairs (0,1): |1−0| vs |1−1| → 1; (0,2): 1 vs 1 → 0; (1,2): 0 vs 1 → 1 → Σ=2, Δ = 2/(3·2)
    Ma = np.array([[1.0], [0.0], [0.0]])
    Mb = np.array([[1.0], [1.0], [0.0]])
    assert concept_discrepancy(Ma, Mb)[0, 0] == pytest.approx(1 / 3)
    # a concept compared with itself (or an affine copy with unit slope) has no discrepancy
    assert concept_discrepancy(Ma, 1 - Ma)[0, 0] == pytest.approx(0.0)


@pytest.mark.parametrize("budget", [7, 10_000_000])  # tiny budget: 1-row, 1-concept chunks
def test_discrepancy_matches_double_loop(budget):
    r = np.random.default_rng(3)
    Ma, Mb = r.random((13, 3)), r.random((13, 4))
    got = concept_discrepancy(Ma, Mb, budget=budget)
    np.testing.assert_allclose(got, brute_discrepancy(Ma, Mb), rtol=1e-12, atol=1e-14)
    assert got.shape == (3, 4)


def test_selection_takes_most_discrepant():
    delta = np.array([[0.1, 0.5, 0.9],
                      [0.7, 0.6, 0.8]])
    sel = select_discrepant_concepts(delta, 1)
    # A-concept 1's best match is 0.6 away, concept 0 has a 0.1 match: 1 is model-specific
    # (the original code sorted ascending and would have shown concept 0)
    assert sel["a"].tolist() == [1]
    np.testing.assert_allclose(sel["score_a"], [0.1, 0.6])
    sel2 = select_discrepant_concepts(delta, 2)
    np.testing.assert_allclose(sel2["score_b"], [0.1, 0.5, 0.8])
    assert sel2["b"].tolist() == [2, 1]
    with pytest.raises(RDXInputError, match="cannot choose 3"):
        select_discrepant_concepts(delta, 3)


def test_selection_matches_brute_force():
    r = np.random.default_rng(1)
    delta = r.random((6, 5))
    sel = select_discrepant_concepts(delta, 3)
    score_a = [min(delta[a, b] for b in range(5)) for a in range(6)]
    score_b = [min(delta[a, b] for a in range(6)) for b in range(5)]
    assert sel["a"].tolist() == sorted(range(6), key=lambda a: -score_a[a])[:3]
    assert sel["b"].tolist() == sorted(range(5), key=lambda b: -score_b[b])[:3]


def test_subsample_and_grid_rule():
    np.testing.assert_array_equal(subsample_indices(1000, 0.2), np.arange(0, 1000, 5))
    assert subsample_indices(10, 1.0).tolist() == list(range(10))
    M = np.array([[0.9, 0.1], [0.2, 0.8], [0.95, 0.0], [0.97, 0.0], [0.5, 0.5]])
    labels = np.array([0, 1, 0, -1, 0])
    # members of 0 (0, 2, 4) by membership; then the best non-member (3, a noise point)
    assert membership_grid(M, labels, 0, 2) == [2, 0]
    assert membership_grid(M, labels, 0, 4) == [2, 0, 4, 3]


# ---------------------------------------------------------------------------- NLMCD fits
def blobs(seed=0):
    """4 Gaussian blobs of 80 points in 10-D; in B blobs 0 and 1 coincide."""
    r = np.random.default_rng(seed)
    centers = r.standard_normal((4, 10)) * 10
    lab = np.repeat(np.arange(4), 80)
    A = centers[lab] + r.standard_normal((320, 10))
    cb = centers.copy()
    cb[1] = cb[0]
    B = cb[lab] + r.standard_normal((320, 10))
    return A.astype(np.float32), B.astype(np.float32), lab


@pytest.fixture(scope="module")
def nlmcd_fit():
    A, B, lab = blobs()
    return NLMCD(2).fit(A, B), A, B, lab  # paper settings (min_cluster_size 50, ...)


def test_nlmcd_finds_blobs_and_model_specific_concepts(nlmcd_fit):
    est, _A, _B, lab = nlmcd_fit
    assert est.info_["n_concepts"] == {"a": 4, "b": 3}
    # every HDBSCAN concept is exactly one blob (A) / blob or merged pair (B)
    for side, expect in (("a", [{0}, {1}, {2}, {3}]), ("b", [{0, 1}, {2}, {3}])):
        found = [set(lab[est.labels_[side] == c].tolist()) for c in range(len(expect))]
        assert sorted(map(sorted, found)) == sorted(map(sorted, expect))
    # A's model-specific concepts are the two blobs that B merges ...
    shown_a = [set(lab[e["members"]].tolist()) for e in est.directions_["a_over_b"]]
    assert sorted(map(sorted, shown_a)) == [[0], [1]]
    # ... and B's most specific concept is the merged blob
    top_b = est.directions_["b_over_a"][0]
    assert set(lab[top_b["members"]].tolist()) == {0, 1}
    assert est.info_["scores"]["b"][0] > 5 * est.info_["scores"]["b"][1]
    for direction, side in (("a_over_b", "a"), ("b_over_a", "b")):
        for e in est.directions_[direction]:
            c, M = e["concept"], est.codes_[side]
            assert len(e["images"]) == 9 and set(e["images"]) <= set(e["members"])
            # grid = the members with the highest soft membership
            rest = np.setdiff1d(e["members"], e["images"])
            assert M[e["images"], c].min() >= M[rest, c].max()
            np.testing.assert_allclose(e["values"], M[e["images"], c], rtol=1e-6)
    assert est.arrays_["a_codes"].shape == (320, 2)
    assert est.discrepancy_.shape == (4, 3)
    json.dumps(est.info_)


def test_nlmcd_deterministic(nlmcd_fit):
    est, A, B, _ = nlmcd_fit
    again = NLMCD(2).fit(A, B)
    assert again.directions_ == est.directions_
    np.testing.assert_array_equal(again.codes_["a"], est.codes_["a"])
    np.testing.assert_array_equal(again.discrepancy_, est.discrepancy_)


def test_nlmcd_too_few_images():
    A, B, _ = blobs()
    with pytest.raises(RDXInputError, match=r"min_cluster_size = 3 × 50 = 150.*only 100"):
        NLMCD(3).fit(A[:100], B[:100])


def test_nlmcd_fewer_concepts_than_asked():
    A, B, lab = blobs()
    keep = lab < 2  # two blobs in A, one merged blob in B: HDBSCAN finds no split of it
    with pytest.raises(RDXInputError, match=r"found 0 concepts in model B.*min_cluster_size"):
        NLMCD(2).fit(A[keep], B[keep])


@pytest.mark.parametrize("kw", [{"subsample_ratio": 0.0}, {"subsample_ratio": 1.5},
                                {"cluster_selection_method": "dbscan"},
                                {"min_cluster_size": 1}, {"min_dist": -0.1},
                                {"n_neighbors": 1.5}])
def test_nlmcd_bad_params(kw):
    with pytest.raises(RDXInputError):
        NLMCD(**kw)._check_params(None)


# ---------------------------------------------------------------------------- SPEC
def tight_in_one(n=200, d=8, seed=0):
    """Same images in both models except: 0..29 tight in A only, 30..59 tight in B only."""
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d))
    A, B = X.copy(), X.copy()
    A[:30] = r.standard_normal(d) + 0.1 * r.standard_normal((30, d))
    B[30:60] = r.standard_normal(d) + 0.1 * r.standard_normal((30, d))
    return A.astype(np.float32), B.astype(np.float32)


@pytest.mark.parametrize("solver", ["kernel", "covariance"])
def test_spec_marks_cluster_present_only_in_one_model(solver):
    A, B = tight_in_one()
    est = SPEC(2, solver=solver, n_features=256).fit(A, B)
    for direction, group in (("a_over_b", range(30)), ("b_over_a", range(30, 60))):
        v = est.codes_[direction][:, 0]
        assert set(est.directions_[direction][0]["images"]) <= set(group)
        assert (v[list(group)] > 0).all()
        assert (v[list(group)] ** 2).sum() > 0.5  # most of the unit vector's energy
        assert est.eigenvalues_[direction][0] > 0
    assert est.info_["solver"] == solver


def test_spec_planted_pairs_separated_vs_merged():
    """A separates clusters 2p and 2p+1, B merges them: K_B − K_A's top eigenvectors are the
    merged pairs (same sign on both), K_A − K_B's contrast the two halves (opposite signs)."""
    A, B, lab = planted_pairs()
    est = SPEC(3).fit(A, B)
    assert est.info_["solver"] == "kernel"
    for direction in ("a_over_b", "b_over_a"):
        pairs = []
        for j in range(3):
            v = est.codes_[direction][:, j]
            energy = np.array([(v[lab == c] ** 2).sum() for c in range(6)])
            p = int(np.argmax(energy[0::2] + energy[1::2]))
            pairs.append(p)
            assert energy[2 * p] + energy[2 * p + 1] > 0.8
            pos = [np.mean(v[lab == c] > 0) for c in (2 * p, 2 * p + 1)]
            if direction == "b_over_a":
                assert min(pos) > 0.9
            else:
                assert min(pos) < 0.1 and sorted(pos)[1] > 0.9
            grid = est.directions_[direction][j]["images"]
            assert set(lab[grid].tolist()) <= {2 * p, 2 * p + 1}
            if direction == "a_over_b":  # the dominant side is one of the two clusters
                assert len(set(lab[grid].tolist())) == 1
        assert sorted(pairs) == [0, 1, 2]


def test_spec_kernel_solver_matches_numpy():
    A, B, _ = planted_pairs(n_per=20, d=6)
    sa, sb = 5.0, 7.0
    est = SPEC(3, sigma=(sa, sb), eta=0.7, solver="kernel").fit(A, B)

    def rbf(X, s):
        D2 = ((X[:, None, :].astype(np.float64) - X[None]) ** 2).sum(-1)
        return np.exp(-D2 / (2 * s * s))
    n = len(A)
    KA, KB = rbf(A, sa) / n, rbf(B, sb) / n
    np.testing.assert_allclose(est.eigenvalues_["a_over_b"],
                               np.linalg.eigvalsh(KA - 0.7 * KB)[::-1][:3], atol=1e-5)
    np.testing.assert_allclose(est.eigenvalues_["b_over_a"],
                               np.linalg.eigvalsh(KB - 0.7 * KA)[::-1][:3], atol=1e-5)
    D = np.sqrt(((A[:, None, :].astype(np.float64) - A[None]) ** 2).sum(-1))
    assert median_distance(A) == pytest.approx(np.median(D[np.triu_indices(n, 1)]), rel=1e-6)


@pytest.mark.parametrize("kernel,eta", [("linear", 1.0), ("cosine", 1.0), ("linear", 0.6)])
def test_spec_covariance_equals_kernel_exactly_for_explicit_features(kernel, eta):
    A, B, _ = planted_pairs()
    ek = SPEC(3, kernel=kernel, eta=eta, solver="kernel").fit(A, B)
    ec = SPEC(3, kernel=kernel, eta=eta, solver="covariance").fit(A, B)
    assert ec.info_["feature_dims"] == [16, 16]
    # "auto" picks the smaller eigenproblem: 32 feature dimensions < 240 images
    assert SPEC(3, kernel=kernel, eta=eta).fit(A, B).info_["solver"] == "covariance"
    for d in ("a_over_b", "b_over_a"):
        np.testing.assert_allclose(ec.eigenvalues_[d], ek.eigenvalues_[d], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(ec.codes_[d], ek.codes_[d], atol=2e-3)
        assert ec.directions_[d][0]["images"] == ek.directions_[d][0]["images"]


def test_spec_covariance_rff_approximates_rbf_kernel():
    A, B, _ = planted_pairs()
    ek = SPEC(3, solver="kernel").fit(A, B)
    ec = SPEC(3, solver="covariance", n_features=256).fit(A, B)
    assert ec.info_["sigma"] == ek.info_["sigma"]
    for d in ("a_over_b", "b_over_a"):
        np.testing.assert_allclose(ec.eigenvalues_[d], ek.eigenvalues_[d], atol=0.012)
        assert abs(float(ec.codes_[d][:, 0] @ ek.codes_[d][:, 0])) > 0.95


def test_spec_deterministic_and_schema():
    A, B, _ = planted_pairs(n_per=20)
    e1 = SPEC(2, solver="covariance", n_features=64, random_state=3).fit(A, B)
    e2 = SPEC(2, solver="covariance", n_features=64, random_state=3).fit(A, B)
    e3 = SPEC(2, solver="covariance", n_features=64, random_state=4).fit(A, B)
    assert e1.directions_ == e2.directions_
    np.testing.assert_array_equal(e1.codes_["a_over_b"], e2.codes_["a_over_b"])
    assert not np.array_equal(e1.codes_["a_over_b"], e3.codes_["a_over_b"])  # RFF drawn
    json.dumps(e1.info_)
    assert e1.arrays_["a_codes"].shape == (120, 2) and e1.arrays_["a_codes"].dtype == np.float32
    for exps in e1.directions_.values():
        assert [e["concept"] for e in exps] == [0, 1]
        assert all(len(e["images"]) == 9 for e in exps)


def test_canonical_sign():
    V = np.array([[0.9, -0.5], [-0.3, -0.5], [-0.3, 0.5], [0.0, 0.5]])
    out = canonical_sign(V)
    np.testing.assert_array_equal(out[:, 0], V[:, 0])  # + side holds 0.81 > 0.18
    # exact tie: the largest |v| (first index on ties, -0.5) is made positive
    np.testing.assert_array_equal(out[:, 1], -V[:, 1])


@pytest.mark.parametrize("kw,match", [
    ({"kernel": "poly"}, "kernel"), ({"sigma": -1.0}, "sigma"),
    ({"sigma": "mean"}, "median"), ({"sigma": (1.0,)}, "pair"),
    ({"eta": 0.0}, "eta"), ({"solver": "lanczos"}, "solver"),
    ({"n_features": 0}, "n_features"), ({"device": "tpu"}, "device")])
def test_spec_bad_params(kw, match):
    with pytest.raises(RDXInputError, match=match):
        SPEC(**kw)._check_params(None)


def test_spec_too_many_explanations_for_feature_rank():
    r = np.random.default_rng(0)
    A, B = r.standard_normal((50, 1)), r.standard_normal((50, 1))
    with pytest.raises(RDXInputError, match="at most 2"):
        SPEC(3, kernel="linear", solver="covariance").fit(A, B)
    with pytest.raises(RDXInputError, match="larger than the number of images"):
        SPEC(60).fit(A, B)


def test_spec_identical_models_have_flat_difference_spectrum():
    # nothing differs between the models: every eigenvalue of K_A/n − K_B/n is ~0
    A, _, _ = planted_pairs(n_per=15)
    est = SPEC(2).fit(A, A.copy())
    for d in ("a_over_b", "b_over_a"):
        assert np.abs(est.eigenvalues_[d]).max() < 1e-5
    assert est.info_["n_positive"]["a_over_b"] <= 2
