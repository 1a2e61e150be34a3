"""Calibrated explanation strength (rdx.evaluation.significance)."""
import json

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from conftest import planted_pairs, reference_statistic
from rdx.errors import RDXInputError
from rdx.evaluation.significance import (assess, calibrate_noise, explanation_statistics,
                                         field_noise, fit_statistics, local_scales,
                                         neighbor_overlap, perturb, predictive_p,
                                         twin_null_pairs)
from rdx.method.estimator import RDX
from rdx.results.types import MethodResult


def random_feature_twins(seed, n_per=15, d=10, width=512, n_models=2):
    """Exchangeable synthetic pairs: ReLU random-feature maps of the same inputs (6 clusters)
    with independently drawn weights — two 'runs' of the same recipe."""
    r = np.random.default_rng(seed)
    centers = r.standard_normal((6, d)) * 3.0 / np.sqrt(d)
    lab = np.repeat(np.arange(6), n_per)
    X = centers[lab] + r.standard_normal((len(lab), d)) / np.sqrt(d)
    return [np.maximum(X @ r.standard_normal((d, width)), 0).astype(np.float32)
            for _ in range(n_models)]


def test_statistic_matches_independent_computation():
    r = np.random.default_rng(3)
    X = r.standard_normal((12, 3)).astype(np.float32)
    Y = (X + 0.8 * r.standard_normal((12, 3))).astype(np.float32)
    groups = {"a_over_b": [[0, 3, 5, 7]], "b_over_a": [[1, 2, 9], [4]]}
    got = explanation_statistics(X, Y, groups, gamma=0.3, beta=2.0)
    assert got["a_over_b"][0] == pytest.approx(
        reference_statistic(X, Y, [0, 3, 5, 7], "a_over_b", 0.3, 2.0), rel=1e-9)
    assert got["b_over_a"][0] == pytest.approx(
        reference_statistic(X, Y, [1, 2, 9], "b_over_a", 0.3, 2.0), rel=1e-9)
    assert got["b_over_a"][1] == 0.0           # a single image has no pairs
    # swapping the representations swaps the directions
    swapped = explanation_statistics(Y, X, {"b_over_a": [[0, 3, 5, 7]]}, gamma=0.3, beta=2.0)
    assert swapped["b_over_a"][0] == pytest.approx(got["a_over_b"][0], rel=1e-12)


def test_statistic_equals_rdx_cluster_excess():
    A, B, _ = planted_pairs(n_per=20)
    model = RDX(3).fit(A, B)
    res = model.result()
    groups = {d: [e.members for e in res.directions[d].explanations] for d in res.directions}
    got = explanation_statistics(A, B, groups, gamma=model.gamma_, beta=5.0)
    for d in res.directions:
        for e, t in zip(res.directions[d].explanations, got[d]):
            # Σ_{i≠j}(a_ij − 1)/|M| = |M|·(mean affinity with the diagonal − 1)
            assert t == pytest.approx(len(e.members) * (e.mean_affinity - 1), rel=1e-4)


@pytest.mark.parametrize("params", [{"gamma": 0.3, "beta": 3.0}, {"gamma": None, "beta": 5.0}])
def test_the_statistic_is_the_fits_own(params):
    """The statistic measures the fit it judges: with the fit's γ and β it equals the rank
    statistic computed independently; with symmetrised ranks (v2) it follows the fit."""
    A, B, _ = planted_pairs(n_per=20)
    model = RDX(3, **params).fit(A, B)
    res = model.result()
    got = fit_statistics(res)
    for d in res.directions:
        for e, t in zip(res.directions[d].explanations, got[d]):
            assert t == pytest.approx(reference_statistic(A, B, e.members, d, model.gamma_,
                                                           params["beta"]), rel=1e-4)
    v2 = RDX(3, variant="v2", filter_threshold=None).fit(A, B).result()
    for d in v2.directions:
        for e, t in zip(v2.directions[d].explanations, fit_statistics(v2)[d]):
            assert t == pytest.approx(len(e.members) * (e.mean_affinity - 1))


def test_predictive_p_is_the_student_t_tail_and_uniform_under_its_model():
    from scipy import stats as sps_

    r = np.random.default_rng(0)
    null = np.exp(r.normal(1.0, 0.4, size=8))
    t = float(np.exp(2.1))
    L = np.log(null)
    expect = sps_.t.sf((2.1 - L.mean()) / (L.std(ddof=1) * np.sqrt(1 + 1 / 8)), df=7)
    assert predictive_p(null, t) == pytest.approx(expect, rel=1e-10)
    # exchangeable draws: P(p ≤ a) = a for every a, with only m = 5 null draws
    ps = np.array([predictive_p(np.exp(r.normal(size=5)), float(np.exp(r.normal())))
                   for _ in range(4000)])
    for a in (0.01, 0.05, 0.2, 0.5):
        assert abs((ps <= a).mean() - a) < 4 * np.sqrt(a * (1 - a) / 4000) + 1e-3, a
    assert predictive_p(null, -3.0) > 0.99              # a non-positive statistic: no evidence


def test_field_noise_has_the_squared_exponential_covariance():
    """E[g(x)·g(x')]/d = exp(−|x − x'|²/(2ℓ²)) and unit variance, by Monte Carlo."""
    X = np.array([[0.0, 0.0], [0.5, 0.0], [1.0, 0.0], [3.0, 0.0]])
    r = np.random.default_rng(1)
    draws = np.stack([field_noise(X, 1.0, r) for _ in range(3000)])   # (3000, 4, 2)
    cov = np.einsum("sid,sjd->ij", draws, draws) / (3000 * 2)
    dist2 = ((X[:, None] - X[None]) ** 2).sum(-1)
    np.testing.assert_allclose(cov, np.exp(-dist2 / 2), atol=0.06)


def test_pooled_spread_uses_every_rank_and_never_undercuts_the_maxima():
    from rdx.evaluation.excess_affinity import pooled_log_spread

    e = np.exp
    # maxima log 1 and 2 (sd 0.707); second ranks log 0 and 1 (same spread): 0.707
    assert pooled_log_spread([[e(1), e(0)], [e(1), e(2)]]) == pytest.approx(np.sqrt(0.5))
    # identical maxima (own spread 0), second ranks log 1 and 2.9: ss 1.805 over 2 df
    assert pooled_log_spread([[e(3), e(1)], [e(3), e(2.9)]]) == pytest.approx(0.95)
    # maxima spread more than the other ranks: the maxima's own spread is kept
    own = np.std([0.0, 3.0], ddof=1)
    assert pooled_log_spread([[e(0), e(-5)], [e(3), e(-5)]]) == pytest.approx(own)
    assert pooled_log_spread([[1.0, 2.0]]) == 0.0                  # one draw: no spread
    # four draws whose maxima agree by chance no longer make a 20 % stronger explanation
    # look like a one-in-a-thousand event
    draws = [[240.5, 180.0, 150.0], [248.0, 230.0, 120.0], [242.6, 160.0, 140.0],
             [242.6, 200.0, 100.0]]
    M = np.array([max(d) for d in draws])
    assert predictive_p(M, 295.0) < 0.001
    assert predictive_p(M, 295.0, pooled_log_spread(draws)) > 0.05


def test_local_scales_and_overlap():
    r = np.random.default_rng(0)
    X = r.standard_normal((60, 4)).astype(np.float32)
    dist, idx = NearestNeighbors(n_neighbors=6).fit(X).kneighbors(X)
    np.testing.assert_allclose(local_scales(X, 5), dist[:, 5], rtol=1e-4)
    assert neighbor_overlap(X, X, k=5) == 1.0
    assert neighbor_overlap(X, 3.0 * X + 1.0, k=5) == 1.0        # distances scaled only
    Y = r.standard_normal((60, 4)).astype(np.float32)
    _, idy = NearestNeighbors(n_neighbors=6).fit(Y).kneighbors(Y)
    expect = np.mean([len(set(a[1:]) & set(b[1:])) / 5 for a, b in zip(idx, idy)])
    assert neighbor_overlap(X, Y, k=5) == pytest.approx(expect)


def test_local_scales_reuse_the_fits_nearest_neighbours_only_when_they_are_this_xs():
    A, B, _ = planted_pairs(n_per=15)
    est = RDX(3, n_init=2).fit(A, B)
    for m, X in (("a", A), ("b", B)):
        near = est.nearest_[m]
        assert near.shape == (len(X), 10)
        dist, idx = NearestNeighbors(n_neighbors=11).fit(X).kneighbors(X)
        np.testing.assert_array_equal(near, idx[:, 1:])          # rank order, no ties here
        np.testing.assert_array_equal(local_scales(X, 10, nearest=near), local_scales(X, 10))
        exact = np.linalg.norm(X.astype(np.float64) - X[idx[:, 4]], axis=1)   # float64
        np.testing.assert_allclose(local_scales(X, 4, nearest=near), exact, rtol=1e-12)
        np.testing.assert_allclose(exact, dist[:, 4], rtol=1e-5)
    # lists of another representation are detected and not used
    np.testing.assert_array_equal(local_scales(A, 10, nearest=est.nearest_["b"]),
                                  local_scales(A, 10))
    # and assess gives the same answer with or without them
    res = est.result()
    assert set(res.nearest) == {"a", "b"}
    bare = MethodResult.from_json(res.to_json())
    assert bare.nearest == {} and "nearest" not in json.dumps(res.to_json())
    p_with = assess(res, A, B, random_state=0)["min_p_value_fwer"]
    assert assess(bare, A, B, random_state=0)["min_p_value_fwer"] == pytest.approx(p_with,
                                                                                   rel=1e-9)


def test_pair_overlap_equals_the_overlap_of_the_null_pair():
    """The calibration's shortcut (centred base, displacement per unit τ, |x_j|² − 2x_a·x_j
    keys) measures the overlap of the very pair null_pair builds — signed features and
    non-negative (clipped) ones, at weak and strong noise."""
    from rdx.evaluation.null_noise import NullNoise, PairOverlap

    r = np.random.default_rng(3)
    for relu in (False, True):
        X = 3.0 * r.standard_normal((300, 12)).astype(np.float32) + 5.0
        if relu:
            X = np.maximum(X - 5.0, 0.0)
        noise = NullNoise(X, "field")
        z1, z2 = noise.draw(r), noise.draw(r)
        anchors = np.sort(r.choice(300, 80, replace=False))
        overlap = PairOverlap(noise, z1, z2, anchors, 10)
        seen = [overlap(tau) for tau in (0.05, 0.5, 2.0, 8.0)]
        expect = [neighbor_overlap(*noise.pair(tau, z1, z2), k=10, anchors=anchors)
                  for tau in (0.05, 0.5, 2.0, 8.0)]
        np.testing.assert_allclose(seen, expect, atol=1.5 / (10 * 80))   # a near-tie at most
        assert seen[0] > 0.8 > 0.3 > seen[-1]


def test_a_capped_field_is_retried_shorter_from_the_strongest_noise():
    """Unrelated representations: no field of the default length scale reaches their overlap,
    so the length scale is halved; each halving costs one evaluation at τ = 64 (where the
    previous one failed) instead of a new bracket from τ0."""
    from rdx.evaluation.null_noise import NullNoise

    r = np.random.default_rng(1)
    X = r.standard_normal((400, 8)).astype(np.float32)
    Y = r.standard_normal((400, 8)).astype(np.float32)
    noise = NullNoise(X, "field")
    start = noise.lengthscale
    cal = calibrate_noise(X, neighbor_overlap(X, Y, k=10), k=10, noise=noise,
                          rng=np.random.default_rng(0))
    halvings = round(np.log2(start / cal["lengthscale"]))
    assert halvings >= 2
    # 4 evaluations bracket τ0 = 1 … 64 at the first length scale, then one per halving, and
    # the root search at the last one
    assert cal["evaluations"] <= 4 + halvings + 4
    assert cal["capped"] or abs(cal["overlap"] - cal["target"]) <= 0.01


def test_perturb_moves_images_by_their_local_scale():
    r = np.random.default_rng(1)
    X = r.standard_normal((400, 50)).astype(np.float32)
    scales = np.linspace(0.5, 2.0, 400)
    Z = r.standard_normal(X.shape)
    moved = np.linalg.norm(perturb(X, scales, 0.3, Z) - X, axis=1)
    np.testing.assert_allclose(moved, 0.3 * scales * np.linalg.norm(Z, axis=1) / np.sqrt(50),
                               rtol=1e-5)


def test_perturb_and_field_noise_equal_their_whole_array_formulas_bit_for_bit():
    """Row blocks, in-place operations and the thread pool do not change a single bit: the
    documented field-null results were computed with the whole-array formulas."""
    import math

    r = np.random.default_rng(3)
    for n, d in ((3000, 200), (7, 3), (1100, 257)):       # several blocks, one, a remainder
        X = (r.standard_normal((n, d)) * 3 + 1).astype(np.float32)
        scales = r.uniform(0.1, 2.0, n)
        Z = r.standard_normal((n, d))
        np.testing.assert_array_equal(
            perturb(X, scales, 0.7, Z),
            (X + (0.7 / math.sqrt(d)) * scales[:, None] * Z).astype(np.float32))
        g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
        W = g2.standard_normal((d, 256)) / 1.5
        b = g2.uniform(0.0, 2.0 * math.pi, 256)
        C = g2.standard_normal((256, d))
        np.testing.assert_array_equal(
            field_noise(X, 1.5, g1),
            math.sqrt(2.0 / 256) * (np.cos(X.astype(np.float64) @ W + b) @ C))


def test_calibration_reaches_the_target_overlap():
    A, B, _ = planted_pairs(n_per=25)
    target = 0.5
    cal = calibrate_noise(A, target, k=10, rng=np.random.default_rng(0))
    assert not cal["capped"]
    assert abs(cal["overlap"] - target) < 0.03


def test_planted_difference_is_significant():
    # B merges cluster pairs (0,1), (2,3), (4,5): tight in B, split in A → b_over_a. (Each
    # of A's clusters is also tighter in A, where the merged partner does not intervene, so
    # a_over_b may be significant too.)
    A, B, lab = planted_pairs(n_per=15)
    res = RDX(3, n_init=3).fit(A, B).result()
    out = assess(res, A, B, random_state=0)
    assert out["n_null"] == 6 and out["noise"] == "field" and out["statistic_source"] == "fit"
    rec = out["explanations"]
    best = min(rec["b_over_a"], key=lambda x: x["p_value_fwer"])
    assert best["p_value_fwer"] < 0.05 and best["below_alpha"]
    # synthetic data has no model family: the field null gives no verdict
    assert best["significant"] is None and best["calibrated"] is False
    # beats every null draw; a p near alpha got more draws than the first 6
    assert best["p_value_fwer_empirical"] == pytest.approx(1 / 7)
    assert out["n_draws"] == 6                                     # a fixed number by default
    j = rec["b_over_a"].index(best)
    members = res.directions["b_over_a"].explanations[j].members
    merged = {frozenset({0, 1}), frozenset({2, 3}), frozenset({4, 5})}
    assert frozenset(np.unique(lab[members]).tolist()) in merged
    assert best["p_value"] < 0.05     # the marginal p (against every null explanation) too


@pytest.mark.slow
def test_field_null_on_random_feature_twins():
    """Two runs of one recipe (ReLU random-feature maps with independent weights), 24 seeds
    each, α = 0.05 family-wise. Wide maps (512 features): at most a binomially plausible
    share is flagged (P(≥ 5 of 24 | 0.05) = 0.03). Narrow maps (32 features), where seed
    differences are coherent over large regions: the per-image (local) null flags nearly
    all of them; the field null far fewer (measured 5 vs 22 of 24; not calibrated there —
    the README says so)."""
    flagged = {}
    for width in (512, 32):
        flagged[width] = {"field": 0, "local": 0}
        for s in range(24):
            A, B = random_feature_twins(s, n_per=12, width=width)
            res = RDX(2, n_init=2).fit(A, B).result()
            for noise in ("field", "local"):
                flagged[width][noise] += assess(res, A, B, random_state=s,
                                                noise=noise)["any_below_alpha"]
    assert flagged[512]["field"] <= 4, flagged
    assert flagged[32]["field"] <= 8 and flagged[32]["local"] >= 2 * flagged[32]["field"], \
        flagged


def test_twin_path_has_the_built_in_interface():
    A, B, B2 = random_feature_twins(5, n_per=12, n_models=3)
    res = RDX(2, n_init=2).fit(A, B).result()
    builtin = assess(res, A, B, n_null=9, random_state=0)
    keys_builtin = set(builtin)
    rec_builtin = res.directions["a_over_b"].explanations[0].extra["significance"]
    res2 = RDX(2, n_init=2).fit(A, B).result()
    twin = assess(res2, A, B, n_null=9, random_state=0, control_b=B2)
    assert set(twin) == keys_builtin
    rec_twin = res2.directions["a_over_b"].explanations[0].extra["significance"]
    assert set(rec_twin) == set(rec_builtin)
    assert builtin["null"] == "field" and twin["null"] == "twin"
    assert rec_builtin["null"] == "field" and rec_twin["null"] == "twin"
    # the twin null is calibrated for any pair; the field null without a family is not
    assert twin["calibrated"] and rec_twin["significant"] is not None
    assert not builtin["calibrated"] and rec_builtin["significant"] is None
    assert twin["n_twin_draws"] == 1 and builtin["n_twin_draws"] == 0
    # the twin comparison is one of the null draws: its strongest explanation, exactly
    direct = RDX(2, n_init=2).fit(B2, B).result()
    expected = max(t for v in fit_statistics(direct).values() for t in v)
    assert twin["twin_draws"][0]["max_statistic"] == pytest.approx(expected, rel=1e-9)
    # the noise of the other draws is matched to the twin's strength
    assert twin["calibration"]["noise_a"]["target_strength"] == pytest.approx(expected)


def test_two_twins_of_a_recipe_are_one_more_exact_draw():
    """Every two twins of one recipe are a null draw too (each twin against its model
    first); a twin pair given on both sides is drawn once; n_null caps the extra pairs
    and the draw is the method on the two twins, exactly."""
    A, B, T1, T2, T3 = random_feature_twins(6, n_per=12, n_models=5)
    required, extra = twin_null_pairs(A, B, [T1, T2], [T3])
    assert [(X is A, Y is B, s) for X, Y, s in required] == [
        (True, False, "control_a"), (True, False, "control_a"), (False, True, "control_b")]
    assert len(extra) == 1 and extra[0][0] is T1 and extra[0][1] is T2 \
        and extra[0][2] == "control_a pair"
    # A and B of one recipe, its other two seeds given as twins of both (copies): the
    # pair (T1, T2) is one draw, not two
    required, extra = twin_null_pairs(A, B, [T1, T2], [T1.copy(), T2.copy()])
    assert len(required) == 4 and len(extra) == 1
    assert len(twin_null_pairs(A, B, [T1, T2, T3], [])[1]) == 3

    res = RDX(2, n_init=2).fit(A, B).result()
    out = assess(res, A, B, n_null=3, random_state=0, control_b=[T2, T3])
    assert out["n_twin_draws"] == 3 and out["n_draws"] == 3
    assert [d["source"] for d in out["twin_draws"]] == ["control_b", "control_b",
                                                        "control_b pair"]
    direct = RDX(2, n_init=2).fit(T2, T3).result()
    assert out["twin_draws"][2]["max_statistic"] == pytest.approx(
        max(t for v in fit_statistics(direct).values() for t in v), rel=1e-9)
    res = RDX(2, n_init=2).fit(A, B).result()
    capped = assess(res, A, B, n_null=3, random_state=0, control_a=[T1], control_b=[T2, T3])
    assert capped["n_twin_draws"] == 3          # the pair (T2, T3) has no room left


def test_draws_continue_only_while_the_decision_is_unclear():
    """Sequential draws: past n_null only while some p lies in (alpha/4, 4·alpha), and never
    past max_null; max_null = n_null fixes the number."""
    A, B, _ = planted_pairs(n_per=15)
    res = RDX(3, n_init=3).fit(A, B).result()
    fixed = assess(res, A, B, n_null=6, max_null=6, random_state=0)
    assert fixed["n_draws"] == 6 and len(fixed["null_max"]["values"]) == 6

    def in_band(out):
        return any(0.05 / 4 < r["p_value_fwer"] < 0.05 * 4
                   for v in out["explanations"].values() for r in v)

    seq = assess(RDX(3, n_init=3).fit(A, B).result(), A, B, n_null=6, max_null=12,
                 random_state=0)
    # an unclear decision after the first six draws gets more; a clear one stops there
    assert (seq["n_draws"] > 6) == in_band(fixed)
    assert seq["n_draws"] <= 12
    assert seq["n_draws"] == 12 or not in_band(seq)
    # the first six draws are the fixed run's
    assert seq["null_max"]["values"][:6] == fixed["null_max"]["values"]
    with pytest.raises(RDXInputError, match="max_null"):
        assess(res, A, B, n_null=6, max_null=5)


def test_assess_writes_into_the_result_and_round_trips():
    A, B, _ = planted_pairs(n_per=15)
    res = RDX(2, n_init=2).fit(A, B).result()
    out = assess(res, A, B, n_null=5, random_state=1)
    doc = json.loads(json.dumps(res.to_json()))
    back = MethodResult.from_json(doc)
    for d in ("a_over_b", "b_over_a"):
        for e, r in zip(back.directions[d].explanations, out["explanations"][d]):
            sig = e.extra["significance"]
            assert set(sig) == {"p_value", "p_value_fwer", "p_value_fwer_empirical",
                                "statistic", "z", "null", "significant", "below_alpha",
                                "calibrated", "over"}
            assert sig["p_value_fwer"] == r["p_value_fwer"]
            assert sig["over"] == "members"                  # RDX: its clusters
            assert 0.0 < sig["p_value_fwer"] <= 1.0
            assert 1 / (out["n_draws"] + 1) <= sig["p_value_fwer_empirical"] <= 1.0
    info = back.info["significance"]
    assert info["n_null"] == 5 and info["statistic"] == "excess_affinity"
    assert info["min_p_value_fwer"] == min(r["p_value_fwer"] for v in out["explanations"].values()
                                           for r in v)
    # seeded: the same call gives the same numbers; the caller's RNG is untouched
    state = np.random.get_state()[1].copy()
    res2 = RDX(2, n_init=2).fit(A, B).result()
    again = assess(res2, A, B, n_null=5, random_state=1)
    assert again["explanations"] == out["explanations"]
    assert np.array_equal(np.random.get_state()[1], state)


def test_baseline_through_refit_uses_grids():
    from rdx.experiments.methods import MethodContext, method

    A, B, lab = planted_pairs(n_per=15)
    ctx = MethodContext(labels=lab, seed=0, device="cpu")
    params = {"n_explanations": 2}

    def refit(X, Y):
        return method("pca").run(X, Y, params, ctx)

    res = refit(A, B)
    out = assess(res, A, B, n_null=4, random_state=0, refit=refit)
    assert all(r["over"] == "grid" for v in out["explanations"].values() for r in v)
    with pytest.raises(RDXInputError, match="refit="):
        assess(refit(A, B), A, B, n_null=4)


def test_bad_input():
    A, B, _ = planted_pairs(n_per=10)
    res = RDX(2, n_init=2).fit(A, B).result()
    with pytest.raises(RDXInputError, match="images"):
        assess(res, A[:-1], B[:-1], n_null=3)
    with pytest.raises(RDXInputError, match="alpha"):
        assess(res, A, B, n_null=3, alpha=1.5)
    with pytest.raises(RDXInputError, match="n_null"):
        assess(res, A, B, n_null=2)                      # the t predictive needs a spread
    with pytest.raises(RDXInputError, match="n_null"):
        assess(res, A, B, n_null=10**9)                  # refused before any work
    with pytest.raises(RDXInputError, match="noise"):
        assess(res, A, B, noise="gaussian")
    with pytest.raises(RDXInputError, match="control_b"):
        assess(res, A, B, n_null=3, control_b=B[:-2])
    with pytest.raises(RDXInputError, match="MethodResult"):
        assess(res.to_json(), A, B)
    empty = MethodResult(method="cka", params={}, n_images=len(A))
    with pytest.raises(RDXInputError, match="no explanations"):
        assess(empty, A, B)


def test_the_seed_twin_suite_lists_its_comparisons_and_their_held_out_twins():
    """The suite (benchmarks/bench_significance.py) as documented: 72 twin pairs over three
    families (no model in two twin comparisons), 17 implanted merges of classes, and for each
    comparison the seed twins it does not use (the twin null's draws)."""
    from collections import Counter

    from rdx.studies.benchmark.calibration import (IMPLANTED_TWIN_SEEDS, suite_pairs,
                                                   twin_controls)

    pairs = suite_pairs()
    kinds = Counter((p.kind, p.family) for p in pairs)
    assert kinds == {("twin", "digits-mlp"): 48, ("twin", "fashion-cnn"): 16,
                     ("twin", "fashion-vit"): 8, ("implanted", "digits-mlp"): 10,
                     ("implanted", "fashion-cnn"): 4, ("implanted", "fashion-vit"): 3}
    assert len({p.name for p in pairs}) == len(pairs)
    twin_models = [m.key() for p in pairs if p.kind == "twin" for m in (p.a, p.b)]
    assert len(set(twin_models)) == len(twin_models)   # independent comparisons
    for p in pairs:
        ca, cb = twin_controls(p)
        used = {p.a.seed, p.b.seed}
        if p.kind == "twin":
            assert p.a.key().split("_s")[0] == p.b.key().split("_s")[0]   # one recipe
            block = set(range(4 * (p.a.seed // 4), 4 * (p.a.seed // 4) + 4))
            assert used <= block and len(ca) == 2
            assert ca == cb and sorted(m.seed for m in ca) == sorted(block - used)
            assert all(m.key().split("_s")[0] == p.a.key().split("_s")[0] for m in ca)
        else:
            assert p.a.merge and not p.b.merge and len(p.classes) == 2
            assert [m.seed for m in ca] == [m.seed for m in cb] == list(IMPLANTED_TWIN_SEEDS)
            assert not used & set(IMPLANTED_TWIN_SEEDS)
            assert all(m.merge == p.a.merge and m.key().split("_s")[0] == p.a.key().split("_s")[0]
                       for m in ca)
            assert all(m.merge == () and m.key().split("_s")[0] == p.b.key().split("_s")[0]
                       for m in cb)


def test_the_held_out_suite_shares_no_recipe_or_seed_with_the_design_suite():
    """The held-out set (bench_significance --suite heldout) as documented: 32 twin pairs and
    12 implanted cases, from recipes and seeds the design suite does not use, each
    comparison with two held-out twins of both its models."""
    from collections import Counter

    from rdx.studies.benchmark.calibration import heldout_pairs, suite_pairs, twin_controls

    held, design = heldout_pairs(), suite_pairs()
    assert Counter(p.kind for p in held) == {"twin": 32, "implanted": 12}
    assert len({p.name for p in held}) == len(held)

    def recipe(m):
        return m.key().split("_s")[0]

    def models(pairs):
        return [m for p in pairs for ms in ((p.a, p.b), *twin_controls(p)) for m in ms]

    assert not {recipe(m) for m in models(held)} & {recipe(m) for m in models(design)}
    assert {m.seed for m in models(held)} == set(range(8, 16))
    assert not {m.seed for m in models(held)} & {m.seed for m in models(design)}
    twin_models = [m.key() for p in held if p.kind == "twin" for m in (p.a, p.b)]
    assert len(set(twin_models)) == len(twin_models)
    for p in held:
        ca, cb = twin_controls(p)
        assert len(ca) == len(cb) == 2 and not {p.a.seed, p.b.seed} & {m.seed for m in ca}
        if p.kind == "implanted":
            assert (p.a.seed, p.b.seed) == (8, 9) and [m.seed for m in ca] == [10, 11]
            assert all(m.merge == p.a.merge for m in ca) and all(not m.merge for m in cb)


def test_more_twins_per_model_come_from_the_same_eight_seeds_block_first():
    """twin_controls(pair, count): a twin pair's own block of four first, then the other
    seeds of its eight; an implanted case's twin_seeds first; never a seed the pair uses."""
    import pytest

    from rdx.errors import RDXInputError
    from rdx.studies.benchmark.calibration import heldout_pairs, suite_pairs, twin_controls

    pairs = {p.name: p for p in suite_pairs() + heldout_pairs()}
    twin = pairs["twin MLP w32×1 1 ep s6 vs s7"]
    assert [m.seed for m in twin_controls(twin, 6)[0]] == [4, 5, 0, 1, 2, 3]
    assert [m.seed for m in twin_controls(twin, 3)[1]] == [4, 5, 0]
    held = pairs["twin ConvNet w12 3 ep s10 vs s11"]
    assert [m.seed for m in twin_controls(held, 6)[0]] == [8, 9, 12, 13, 14, 15]
    merge = next(p for p in pairs.values() if p.kind == "implanted" and p.a.seed == 8)
    ca, cb = twin_controls(merge, 4)
    assert [m.seed for m in ca] == [m.seed for m in cb] == [10, 11, 12, 13]
    assert all(m.merge == merge.a.merge for m in ca) and all(not m.merge for m in cb)
    assert twin_controls(merge) == twin_controls(merge, 2)
    with pytest.raises(RDXInputError, match="1 to 6"):
        twin_controls(twin, 7)


def test_probe_confusion_is_the_share_of_two_classes_mistaken_for_each_other():
    """Separable classes are never confused; two classes with the same features are
    confused about half the time (a probe cannot tell them apart); C is symmetric."""
    from rdx.studies.benchmark.calibration import probe_confusion

    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 0.0]])
    y = np.repeat([0, 1, 2], 60)
    F = centres[y] + rng.normal(scale=0.5, size=(len(y), 2))
    C = probe_confusion(F, y)
    np.testing.assert_allclose(C, C.T)
    assert C[0, 1] == C[0, 2] == 0.0
    assert 0.3 < C[1, 2] < 0.7


def test_the_held_out_digits_merges_are_the_ones_the_rule_draws(tmp_path):
    """The held-out implanted merges were drawn by :func:`draw_merges` before the set was
    evaluated; re-drawing them reproduces the recorded ones (digits: every pair of classes
    is under the 10 % rule, so the draw does not hinge on the probe's last digit)."""
    from rdx.studies.benchmark.calibration import (HELDOUT_IMPLANTED, draw_merges,
                                                   probe_confusion, model_features,
                                                   comparison_labels)

    fine, merges = HELDOUT_IMPLANTED[0]
    assert fine.family == "digits-mlp"
    C = probe_confusion(model_features(fine, cache=tmp_path), comparison_labels(fine.family))
    assert C[np.triu_indices(10, 1)].max() < 0.1
    assert draw_merges(fine, cache=tmp_path) == merges
    assert draw_merges(fine, cache=tmp_path, seed=1) != merges


def test_class_separation_is_centroid_distance_over_within_class_spread():
    """What an implanted merge implants, measured without RDX (bench_significance --implants)."""
    from rdx.studies.benchmark.calibration import class_separation, implant_strength, suite_pairs

    F = np.array([[0, 0], [2, 0], [5, 1], [5, -1], [9, 9]], dtype=np.float32)
    y = np.array([3, 3, 7, 7, 1])
    # centroids (1, 0) and (5, 0): 4 apart; each image 1 from its centroid → 4 / 1
    assert class_separation(F, y, 3, 7) == pytest.approx(4.0)
    assert class_separation(10.0 * F + 3.0, y, 7, 3) == pytest.approx(4.0)    # scale-free
    with pytest.raises(RDXInputError, match="both need images"):
        class_separation(F, y, 3, 5)
    twin = next(p for p in suite_pairs() if p.kind == "twin")
    with pytest.raises(RDXInputError, match="not an implanted case"):
        implant_strength(twin)


def test_the_suite_tables_split_power_into_shown_and_confirmed():
    """bench_significance's summary: the twin null is named with its twins per model, and
    power splits into the cases RDX's fit shows and those of them the null confirms."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_significance.py"
    spec = importlib.util.spec_from_file_location("bench_significance", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def rec(pair, kind, sig, n_twins=None, shown=None, p=0.5):
        r = {"pair": pair, "kind": kind, "family": "digits-mlp", "noise": "twin", "seed": 0,
             "min_p_fwer": p, "any_significant": sig, "expected_significant": sig,
             "expected_hit": sig, "log_ratio": 0.0}
        if n_twins:
            r["n_twins"] = n_twins
        if shown is not None:
            r["shown"] = shown
        return r

    rows = [rec("t1", "twin", False, p=0.3), rec("t2", "twin", True, p=0.01),
            rec("m1", "implanted", True, shown=True), rec("m2", "implanted", False, shown=True),
            rec("m3", "implanted", True, shown=False), rec("m4", "implanted", False, shown=False)]
    out = bench.summarise(rows, markdown=True)
    assert "| twin ×2 | 0 | 1/2 | 0.500 |" in out
    # 4 implanted, 2 shown, 2 detected, 1 of the 2 shown detected
    assert "| twin ×2 | 4 | 2 | 2 | 1/2 | 0.50 |" in out
    six = [dict(r, n_twins=6) for r in rows]
    assert "| twin ×6 | 4 | 2 | 2 | 1/2 | 0.50 |" in bench.summarise(six, markdown=True)
    # whether a case is shown may come from another null's record of it
    bare = [{k: v for k, v in r.items() if k != "shown"} for r in rows]
    assert "| twin ×2 | 4 | 1 | 2 | 1/1 | 1.00 |" in bench.summarise(
        bare, True, {"m1": True, "m2": False, "m3": False, "m4": False})
    # the ceiling: detection where the merged classes as one group beat seed noise, and
    # where they do not (records without the merged classes' p are left out)
    beats = {"m1": (0.01, True, 2.0), "m2": (0.02, True, 1.0), "m3": (0.4, False, -0.5)}
    ceil = [dict(r, merge_p=beats[r["pair"]][0], merge_beats_noise=beats[r["pair"]][1],
                 merge_log_ratio=beats[r["pair"]][2]) if r["pair"] in beats else r
            for r in rows]
    assert "| twin ×2 | 3 | 2 | 1/2 | 1/1 | +1.00 |" in bench.summarise(ceil, markdown=True)
    assert "merged classes beat seed noise" not in out
