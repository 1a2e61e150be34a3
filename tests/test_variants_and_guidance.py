"""RDX v2 (symmetrised ranks, filtered clusters), every guidance mode, the grid strategy that
may show non-members, captioned grids, and the paper variant left exactly as it was.

``tests/data/paper_variant_reference.json`` holds outputs of the paper algorithm recorded with
the code before variants existed (commit 91ab3fb); regenerate it only for an intended change
of the paper algorithm's results: ``python tests/test_variants_and_guidance.py --write``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import digit_features, planted_pairs, toy_config
from rdx import RDX, RDXInputError
from rdx.method.clustering import cluster_rank_labels
from rdx.method.graphs import difference_matrix_, guidance_null_value, symmetrize_
from rdx.method.guidance import group_labels
from rdx.results.types import MethodResult

REFERENCE = Path(__file__).parent / "data" / "paper_variant_reference.json"
#: 1-D points of the worked example: model 0 = A, model 1 = B.
X0 = np.array([[0.0], [1.0], [3.0], [10.0]], dtype=np.float32)
X1 = np.array([[0.0], [4.0], [5.0], [6.0]], dtype=np.float32)


@pytest.fixture(scope="module")
def planted():
    return planted_pairs(n_per=15, d=8, seed=3)


# ---------------------------------------------------------------------------- worked examples
def _example(variant: str) -> dict:
    return RDX(1, variant=variant, gamma=1.0, beta=5.0, keep_graphs=True,
               device="cpu").fit(X0, X1).graph_arrays()


def test_paper_and_v2_affinities_of_the_four_point_example():
    """Pairs (1,2) and (0,1) of X0 = [0,1,3,10], X1 = [0,4,5,6] at γ = 1, β = 5, in the
    direction "close in model 1 (B), far in model 0 (A)"."""
    paper, v2 = _example("paper"), _example("v2")
    np.testing.assert_array_equal(paper["rank_a"], [[0, 1, 2, 3], [1, 0, 2, 3], [2, 1, 0, 3],
                                                    [3, 2, 1, 0]])
    np.testing.assert_array_equal(paper["rank_b"], [[0, 1, 2, 3], [3, 0, 1, 2], [3, 1, 0, 2],
                                                    [3, 2, 1, 0]])
    # v2 stores the symmetrised ranks S = (R + Rᵀ)/2 it compares
    np.testing.assert_array_equal(v2["rank_a"], [[0, 1, 2, 3], [1, 0, 1.5, 2.5],
                                                 [2, 1.5, 0, 2], [3, 2.5, 2, 0]])
    np.testing.assert_array_equal(v2["rank_b"], [[0, 2, 2.5, 3], [2, 0, 1, 2],
                                                 [2.5, 1, 0, 1.5], [3, 2, 1.5, 0]])
    A_paper = paper["affinity_b_over_a"].astype(np.float64)
    clustered = (A_paper + A_paper.T) / 2            # what the paper's clustering sees
    A_v2 = v2["affinity_b_over_a"].astype(np.float64)  # already symmetric: used as is
    # pair (1,2): paper [1,2] = e^{5·tanh(1/2)} = 10.07 and [2,1] = 1 → 5.54; v2 e^{5·tanh(1/4)}
    assert A_paper[1, 2] == pytest.approx(np.exp(5 * np.tanh(0.5)), rel=1e-5)
    assert A_paper[2, 1] == pytest.approx(1.0)
    assert clustered[1, 2] == pytest.approx(5.54, abs=0.005)
    assert A_v2[1, 2] == A_v2[2, 1] == pytest.approx(np.exp(5 * np.tanh(0.25)), rel=1e-5)
    assert A_v2[1, 2] == pytest.approx(3.40, abs=0.005)
    # pair (0,1): paper (1 + e^{−5·tanh(1)})/2 = 0.511; v2 e^{−5·tanh(1/2)} = 0.099
    assert clustered[0, 1] == pytest.approx((1 + np.exp(-5 * np.tanh(1.0))) / 2, rel=1e-5)
    assert clustered[0, 1] == pytest.approx(0.511, abs=0.0005)
    assert A_v2[0, 1] == pytest.approx(np.exp(-5 * np.tanh(0.5)), rel=1e-5)
    assert A_v2[0, 1] == pytest.approx(0.099, abs=0.0005)


def test_filter_labels_of_the_worked_example():
    means = [0.8, 1.05, 1.3, 2.7, 4.0]
    np.testing.assert_array_equal(cluster_rank_labels(means), [0, 1, 2, 3, 4])        # paper
    np.testing.assert_array_equal(cluster_rank_labels(means, 1.1), [0, 0, 3, 4, 5])  # v2
    perm = [3, 0, 4, 2, 1]                     # any cluster order: labels follow the means
    np.testing.assert_array_equal(cluster_rank_labels(np.take(means, perm), 1.1), [4, 0, 5, 3, 0])
    np.testing.assert_array_equal(cluster_rank_labels(means, 5.0), [0] * 5)
    np.testing.assert_array_equal(cluster_rank_labels([2.0, 2.0, 1.0], None), [1, 2, 0])  # ties


def test_tpfp_groups_of_the_worked_example():
    # classes {0, 6}: l(0) = 0, l(6) = 1; TP of class c → 1 + 2l, FP of class c → 2 + 2l
    y = np.array([6, 0, 0, 6])
    p = np.array([6, 6, 0, 0])
    np.testing.assert_array_equal(group_labels("tpfp", y, p), [3, 4, 1, 2])


def test_other_groups():
    y = np.array([1, 0, 0, 1, 1, 0])
    p = np.array([1, 0, 1, 0, 1, 0])
    np.testing.assert_array_equal(group_labels("ground_truth", y, p), y)
    np.testing.assert_array_equal(group_labels("classifier", y, p), p)
    # positive = the largest label (1): TP 1, TN 2, FP 3, FN 4
    np.testing.assert_array_equal(group_labels("tpnfpn", y, p), [1, 2, 3, 4, 1, 2])
    np.testing.assert_array_equal(group_labels("tpnfpn", y, p, positive=0), [2, 1, 4, 3, 2, 1])
    np.testing.assert_array_equal(group_labels("true_pos", y, p),
                                  [True, False, False, False, True, False])
    assert group_labels(None, y, p) is None
    with pytest.raises(RDXInputError, match="binary labels"):
        group_labels("tpnfpn", np.array([0, 1, 2]), np.array([0, 1, 2]))
    with pytest.raises(RDXInputError, match="guidance_positive=7 is not one of the labels"):
        group_labels("true_pos", y, p, positive=7)


def test_guidance_null_value_worked_example():
    """n = 500, γ = 0.05: ν = 10·(n − 1) = 4990. A pair close in model 0 (S0 = 10) that model
    1 puts in another group gets am10 = e^{−β·tanh(γ(ν−S0)/(S0+1))} ≈ 0.0067; at S0 = 400
    the push is weaker (diff 0.517, am10 0.075): the effect does not saturate for far
    pairs."""
    R = torch.arange(500, dtype=torch.float32).repeat(500, 1)     # rows hold ranks 0..499
    assert guidance_null_value(10.0, R, R) == 4990.0
    for s0, diff10, expected in ((10.0, 1.0, 0.0067), (400.0, 0.517, 0.075)):
        diff_ab = difference_matrix_(torch.tensor([[s0]]), torch.tensor([[4990.0]]),
                                     gamma=0.05)                  # A = model 0, B = model 1
        assert -float(diff_ab) == pytest.approx(diff10, abs=5e-4)  # diff10 = −diff_ab
        am10 = float(torch.exp(5.0 * diff_ab))                  # b_over_a: exp(+β·diff_ab)
        assert am10 == pytest.approx(expected, abs=5e-4)


@pytest.mark.parametrize("variant,similarity", [("paper", "neighborhood"), ("v2", "neighborhood"),
                                                ("paper", "zp_local_scaling")])
def test_pairs_split_in_both_models_are_exactly_neutral(planted, variant, similarity):
    """One ν for both models: a pair in different groups in both gets ν in both (also after
    symmetrising, and for similarities whose maxima differ between the models), so its
    difference is 0 and its affinity exactly 1."""
    A, B, lab = planted
    pa, pb = lab % 3, lab % 2                       # different groupings per model
    m = RDX(3, variant=variant, similarity=similarity, guidance="classifier", keep_graphs=True,
            gamma=0.1, device="cpu").fit(A, B, predictions={"a": pa, "b": pb})
    g = m.graph_arrays()
    both = (pa[:, None] != pa[None, :]) & (pb[:, None] != pb[None, :])
    only_b = (pa[:, None] == pa[None, :]) & (pb[:, None] != pb[None, :])
    assert both.any() and only_b.any()
    assert np.all(g["diff_a_over_b"][both] == 0.0)
    assert np.all(g["affinity_b_over_a"][both] == 1.0)
    nu = m.guidance_["null_value"]["both"]
    assert np.all(g["rank_a"][both] == nu) and np.all(g["rank_b"][both] == nu)
    # split by B only: "close in B" affinities across B's groups are pushed below 1
    assert g["affinity_b_over_a"][only_b].max() < 1.0
    if similarity == "neighborhood":
        assert nu == (10.0 if variant == "v2" else 5.0) * (len(A) - 1)


# ---------------------------------------------------------------------------- properties
@pytest.mark.parametrize("seed", range(4))
def test_v2_difference_and_affinities_are_symmetric(seed):
    r = np.random.default_rng(seed)
    n = int(r.integers(30, 60))
    A = r.standard_normal((n, 5)).astype(np.float32)
    B = (A @ r.standard_normal((5, 7)) + r.standard_normal((n, 7))).astype(np.float32)
    m = RDX(2, variant="v2", keep_graphs=True, device="cpu", random_state=seed).fit(A, B)
    g = m.graph_arrays()
    for key in ("rank_a", "rank_b", "diff_a_over_b", "affinity_a_over_b", "affinity_b_over_a"):
        np.testing.assert_array_equal(g[key], g[key].T, err_msg=key)
    # ... and equal to the difference of the symmetrised ranks, formula by formula
    Ra = np.asarray(m.similarity_of(A), dtype=np.float64)
    Rb = np.asarray(m.similarity_of(B), dtype=np.float64)
    Sa, Sb = (Ra + Ra.T) / 2, (Rb + Rb.T) / 2
    expected = np.tanh(m.gamma_ * (Sa - Sb) / (np.minimum(Sa, Sb) + 1))
    np.testing.assert_allclose(g["diff_a_over_b"], expected, atol=1e-6)


@pytest.mark.parametrize("mode", ["mean", "min", "max"])
def test_symmetrize_matches_numpy_across_tiles(mode, rng):
    M = rng.uniform(0, 9, (37, 37)).astype(np.float32)
    out = symmetrize_(torch.tensor(M), mode, tile=8).numpy()
    ref = {"mean": (M + M.T) / 2, "min": np.minimum(M, M.T), "max": np.maximum(M, M.T)}[mode]
    np.testing.assert_array_equal(out, ref)


def test_symmetrize_difference_only_changes_asymmetric_ranks(planted):
    A, B, _ = planted
    m = RDX(3, symmetrize_difference=True, keep_graphs=True, gamma=0.1, device="cpu").fit(A, B)
    d = m.graph_arrays()["diff_a_over_b"]
    np.testing.assert_array_equal(d, d.T)
    plain = RDX(3, keep_graphs=True, gamma=0.1, device="cpu").fit(A, B).graph_arrays()
    np.testing.assert_allclose(d, (plain["diff_a_over_b"] + plain["diff_a_over_b"].T) / 2,
                               atol=1e-7)


def _paper_outputs(A, B, lab) -> dict:
    """The paper algorithm's outputs for the recorded cases (see the module docstring)."""
    out = {}
    for name, kw in PAPER_CASES.items():
        m = RDX(3, gamma=0.1, random_state=1, device="cpu", **kw).fit(A, B, labels=lab)
        out[name] = {d: {"labels": r.labels.tolist(), "grids": [e.images for e in r.explanations],
                         "mean_affinity": [e.mean_affinity for e in r.explanations],
                         "low_affinity": [e.low_affinity for e in r.explanations],
                         "null_mean_affinity": r.null_mean_affinity}
                     for d, r in m.directions_.items()}
    return out


PAPER_CASES = {
    "default": {},
    "ground_truth": {"guidance": "ground_truth"},
    "classifier": {"guidance": "classifier"},
    "aligned_ground_truth": {"guidance": "ground_truth", "align_representations": True,
                             "align_params": {"num_steps": 5}},
    "pagerank": {"clustering": "pagerank", "grid_size": 6},
    "max_affinity_merge": {"grid_strategy": "max_affinity", "merge_low_affinity": True,
                           "null_threshold": 3.0},
    "mnd_gt": {"similarity": "max_normalized_distance", "guidance": "ground_truth"},
    "zpls": {"similarity": "zp_local_scaling"},
    "standard": {"difference": "standard"},
}


def test_paper_variant_reproduces_the_recorded_outputs(planted):
    """The default (paper) variant gives exactly the clusters, grids and mean affinities the
    code gave before variants existed: unguided, guided, aligned, greedy, every similarity."""
    A, B, lab = planted
    expected = json.loads(REFERENCE.read_text())
    got = _paper_outputs(A, B, lab)
    assert set(got) == set(expected)
    for case in expected:
        for d, exp in expected[case].items():
            res = got[case][d]
            assert res["labels"] == exp["labels"], (case, d)
            assert res["grids"] == exp["grids"], (case, d)
            assert res["low_affinity"] == exp["low_affinity"], (case, d)
            # means are summed in float64 now; the recorded ones were float32 GEMM sums
            # (≤ 1e-7 relative apart on these cases)
            np.testing.assert_allclose(res["mean_affinity"], exp["mean_affinity"], rtol=2e-7)
            assert res["null_mean_affinity"] == pytest.approx(exp["null_mean_affinity"],
                                                              rel=2e-7)


def test_explicit_paper_settings_equal_the_default(planted):
    A, B, lab = planted
    base = RDX(3, gamma=0.1, device="cpu").fit(A, B).result().to_json()
    explicit = RDX(3, gamma=0.1, device="cpu", variant="paper", symmetrize_ranks=None,
                   filter_threshold=None, symmetrize_difference=False,
                   guidance_scale=5).fit(A, B).result().to_json()
    assert explicit["directions"] == base["directions"]
    for doc in (base, explicit):
        assert doc["params"]["symmetrize_ranks_resolved"] is None
        assert doc["params"]["filter_threshold_resolved"] is None


# ---------------------------------------------------------------------------- filter
def test_filter_keeps_clusters_at_or_above_the_threshold(planted):
    A, B, _ = planted
    k = 3
    free = RDX(k, variant="v2", filter_threshold=-1.0, gamma=0.1, device="cpu").fit(A, B)
    for d, r in free.directions_.items():
        means = [e.mean_affinity for e in r.explanations]
        assert len(r.explanations) == k + 1 and r.null_members == [] \
            and r.null_mean_affinity is None                     # nothing filtered
        assert means == sorted(means)
        tau = float(np.mean(means[1:3]))                         # between 2nd and 3rd
        m = RDX(k, variant="v2", filter_threshold=tau, gamma=0.1, device="cpu").fit(A, B)
        res = m.directions_[d]
        assert [e.mean_affinity for e in res.explanations] == pytest.approx(means[2:])
        assert [e.extra["cluster_rank"] for e in res.explanations] == [3, 4]
        assert all(e.extra["passed_filter"] for e in res.explanations)
        rec = res.extra["filter"]
        assert (rec["threshold"], rec["n_candidates"], rec["n_kept"], rec["n_filtered"]) == \
            (tau, k + 1, 2, 2)
        assert [f["cluster_rank"] for f in rec["filtered"]] == [1, 2]
        assert [f["mean_affinity"] for f in rec["filtered"]] == pytest.approx(means[:2])
        assert all(not f["passed_filter"] and f"< filter_threshold {tau:g}" in f["reason"]
                   for f in rec["filtered"])
        assert sorted(res.null_members) == sorted(sum((f["members"] for f in rec["filtered"]), []))
        assert [f["size"] for f in rec["filtered"]] == [len(f["members"]) for f in rec["filtered"]]
        everything = np.concatenate([res.null_members] + [e.members for e in res.explanations])
        np.testing.assert_array_equal(np.sort(everything), np.arange(len(A)))   # a partition
        np.testing.assert_array_equal(res.labels[res.explanations[0].members], 1)
        # the record survives the JSON round trip
        back = MethodResult.from_json(json.loads(json.dumps(m.result().to_json())))
        assert back.directions[d].extra["filter"]["n_filtered"] == 2
        assert back.directions[d].explanations[0].extra == {"cluster_rank": 3,
                                                            "passed_filter": True}
    none = RDX(k, variant="v2", filter_threshold=1e9, gamma=0.1, device="cpu").fit(A, B)
    for r in none.directions_.values():
        assert r.explanations == [] and len(r.null_members) == len(A)
        assert r.extra["filter"]["n_filtered"] == k + 1


def test_v2_defaults_and_overrides_are_recorded(planted):
    A, B, _ = planted
    p = RDX(2, variant="v2", device="cpu").fit(A, B).result().params
    assert (p["symmetrize_ranks_resolved"], p["filter_threshold_resolved"],
            p["guidance_scale_resolved"]) == ("mean", 1.1, 10.0)
    p = RDX(2, variant="v2", symmetrize_ranks=None, filter_threshold=None,
            device="cpu").fit(A, B).result()
    assert p.params["symmetrize_ranks_resolved"] is None
    assert "filter" not in p.directions["a_over_b"].extra
    assert len(p.directions["a_over_b"].explanations) == 2       # the paper's k


# ---------------------------------------------------------------------------- guidance
def test_aligned_directions_use_the_predictions_of_what_they_compare(planted):
    A, B, lab = planted
    n = len(A)
    preds = {"a": lab % 2, "b": lab % 3, "a_mapped": (lab // 2) % 2, "b_mapped": lab % 5}
    m = RDX(2, guidance="classifier", align_representations=True, keep_graphs=True, gamma=0.1,
            align_params={"num_steps": 3}, device="cpu").fit(A, B, predictions=preds)
    g = m.graph_arrays()
    nu = 5.0 * (n - 1)
    for key, p in preds.items():
        cross = p[:, None] != p[None, :]
        assert np.all(g[f"rank_{key}"][cross] == nu), key
        assert np.all(g[f"rank_{key}"][~cross] < n), key
    assert m.guidance_["predictions"] == dict.fromkeys(preds, "given")


@pytest.fixture
def probe_calls(monkeypatch):
    """The shapes of every representation a linear probe is fitted on (the probe counted,
    not replaced)."""
    import rdx.method.guidance as guidance

    calls = []
    real = guidance.probe_predictions

    def counting(X, labels, **kw):
        calls.append(X.shape)
        return real(X, labels, **kw)

    monkeypatch.setattr(guidance, "probe_predictions", counting)
    return calls


def test_predictions_are_computed_only_when_missing(planted, probe_calls):
    A, B, lab = planted
    m = RDX(2, guidance="tpfp", gamma=0.1, device="cpu").fit(A, B, labels=lab,
                                                             predictions={"a": lab})
    assert len(probe_calls) == 1                               # only B's probe
    assert m.guidance_["predictions"] == {"a": "given", "b": "probe"}
    assert m.guidance_["prediction_accuracy"]["a"] == 1.0
    RDX(2, guidance="ground_truth", gamma=0.1, device="cpu").fit(A, B, labels=lab)
    assert len(probe_calls) == 1                               # ground truth needs none


@pytest.mark.parametrize("mode,labels", [("tpfp", None), ("tpnfpn", "binary"),
                                         ("true_pos", "binary")])
def test_every_guidance_mode_fits(planted, mode, labels):
    A, B, lab = planted
    y = lab % 2 if labels == "binary" else lab
    m = RDX(2, guidance=mode, variant="v2", gamma=0.1, device="cpu").fit(A, B, labels=y)
    assert m.guidance_["mode"] == mode and m.guidance_["scale"] == 10.0
    if mode != "tpfp":
        assert m.guidance_["positive"] == 1
    assert MethodResult.from_json(m.to_dict()).info["guidance"]["mode"] == mode


def test_label_grids_record_true_and_predicted_classes(planted):
    A, B, lab = planted
    preds = {"a": lab, "b": (lab // 2) * 2}
    m = RDX(2, label_grids=True, gamma=0.1, device="cpu").fit(A, B, labels=lab,
                                                              predictions=preds)
    for d, r in m.directions_.items():
        for e in r.explanations:
            gl = e.extra["grid_labels"]
            idx = np.asarray(e.images)
            assert gl["true"] == lab[idx].tolist()
            order = ["a", "b"] if d == "a_over_b" else ["b", "a"]   # explained model first
            assert list(gl["predicted"]) == order
            assert gl["predicted"]["b"] == preds["b"][idx].tolist()


@pytest.mark.parametrize("kw,fit_kw,match", [
    ({"variant": "v3"}, {}, r"variant='v3' is not one of"),
    ({"symmetrize_ranks": "median"}, {}, r"symmetrize_ranks='median' is not one of"),
    ({"filter_threshold": "high"}, {}, r"filter_threshold must be"),
    ({"guidance_scale": 0.5}, {}, r"guidance_scale must be >= 1"),
    ({"symmetrize_difference": "yes"}, {}, r"symmetrize_difference must be True or False"),
    ({"variant": "v2", "merge_low_affinity": True}, {}, r"merge_low_affinity=True and a "
                                                         "filter_threshold"),
    ({"guidance": "tpfp"}, {}, r"guidance='tpfp' needs labels"),
    ({"label_grids": True}, {}, r"label_grids=True needs labels"),
    ({"guidance": "tpnfpn"}, {"labels": "three"}, r"tpnfpn' needs binary labels"),
    ({"guidance": "true_pos", "guidance_positive": 9}, {"labels": "three"},
     r"guidance_positive=9 is not one of the labels"),
    ({"guidance": "classifier"}, {"predictions": {"a": [0, 1]}}, r"predictions\['a'\] has "
                                                                  r"shape \(2,\)"),
    ({"guidance": "classifier"}, {"predictions": {"c": [0]}}, r"unknown key\(s\) \['c'\]"),
])
def test_bad_v2_and_guidance_input(planted, kw, fit_kw, match):
    A, B, lab = planted
    fit_kw = dict(fit_kw)
    if fit_kw.get("labels") == "three":
        fit_kw["labels"] = lab % 3
    with pytest.raises(RDXInputError, match=match):
        RDX(2, device="cpu", **kw).fit(A, B, **fit_kw)


def test_classifier_guidance_with_given_predictions_needs_no_labels(planted):
    A, B, lab = planted
    m = RDX(2, guidance="classifier", gamma=0.1, device="cpu").fit(
        A, B, predictions={"a": lab, "b": lab // 2})
    assert "prediction_accuracy" not in m.guidance_


# ---------------------------------------------------------------------------- grids
def test_euclidean_neighbourhood_grid_matches_brute_force(rng):
    from rdx.method.geometry import to_device_centered
    from rdx.method.grids import select_grid

    n, size, beta = 50, 6, 5.0
    X = rng.standard_normal((n, 3)).astype(np.float32)
    diff = torch.tensor(rng.uniform(-1, 1, (n, n)), dtype=torch.float32)
    members = np.sort(rng.choice(n, 8, replace=False))
    Xt = to_device_centered(X, torch.device("cpu"))
    got = select_grid(members, Xt, diff, beta=beta, direction="a_over_b", size=size,
                      strategy="maximize_total_euc_neighborhood_affinity")
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    Aff = np.exp(-beta * diff.numpy().astype(np.float64))
    best, best_score = None, -np.inf
    for i in members:
        nb = np.lexsort((np.arange(n), D[i]))
        nb = [i] + [j for j in nb if j != i][:size - 1]
        score = Aff[np.ix_(nb, nb)].sum()
        if score > best_score * (1 + 1e-9):
            best, best_score = nb, score
    assert got == [int(j) for j in best]
    assert got[0] in members and len(got) == size
    # a single member still gets a full grid of its nearest images
    one = select_grid(members[:1], Xt, diff, beta=beta, direction="a_over_b", size=size,
                      strategy="maximize_total_euc_neighborhood_affinity")
    assert len(one) == size and one[0] == members[0]


def test_captions_leave_uncaptioned_grids_unchanged_and_add_a_text_band(tmp_path, rng):
    from PIL import Image

    from rdx.viz.grids import (CAPTION_LINE_HEIGHT, grid_label_captions, image_grid,
                               save_direction_grids)

    images = rng.uniform(0, 1, (12, 8, 8))
    plain = np.asarray(image_grid(images, [0, 1, 2, 3]))
    same = np.asarray(image_grid(images, [0, 1, 2, 3], captions=None))
    np.testing.assert_array_equal(plain, same)
    caps = [["A:3 B:5", "GT:3"]] * 4
    cap = np.asarray(image_grid(images, [0, 1, 2, 3], captions=caps))
    assert cap.shape[0] == plain.shape[0] + 2 * (2 * CAPTION_LINE_HEIGHT + 2)
    assert cap.shape[1] == plain.shape[1]
    np.testing.assert_array_equal(cap[4:100, 4:100], plain[4:100, 4:100])   # first image
    band = cap[100:100 + 2 * CAPTION_LINE_HEIGHT, 4:100]
    assert (band < 128).any()                                                 # text drawn
    gl = {"true": [3, 5], "predicted": {"b": [3, 3], "a_mapped": [5, 5]}}
    assert grid_label_captions(gl) == [["B:3 A':5", "GT:3"], ["B:3 A':5", "GT:5"]]
    assert grid_label_captions(gl, class_names=[str(i) for i in range(3)] + ["three", "x",
                                                                             "five"]) == \
        [["B:three A':five", "GT:three"], ["B:three A':five", "GT:five"]]
    exps = [{"images": [0, 1], "grid_labels": gl}, {"images": [2, 3]}]
    paths = [tmp_path / "g1.png", tmp_path / "g2.png"]
    save_direction_grids(images, exps, paths)
    h1, h2 = (Image.open(p).size[1] for p in paths)
    assert h1 == h2 + 2 * CAPTION_LINE_HEIGHT + 2
    with pytest.raises(RDXInputError, match="3 captions for 4 grid images"):
        image_grid(images, [0, 1, 2, 3], captions=caps[:3])


# ---------------------------------------------------------------------------- runner
def test_v2_and_guided_runs_through_the_runner(tmp_path, probe_calls):
    from PIL import Image

    from rdx.experiments import run_experiment

    digit_features(tmp_path)
    aligned = {"align_representations": True, "align_params": {"num_steps": 10}}
    path = toy_config(tmp_path, experiment="v2", base={"methods": [
        {"method": "rdx", "name": "rdx_v2", "variant": "v2", "n_explanations": 3, "gamma": 0.1},
        {"method": "rdx", "name": "rdx_guided", "variant": "v2", "symmetrize_ranks": None,
         "filter_threshold": None, "guidance": "tpfp", "label_grids": True,
         "n_explanations": 3, "gamma": 0.1, **aligned},
        {"method": "classification", **aligned}]})
    (out,) = run_experiment(path, output_root=tmp_path / "out", progress=False)
    assert len(probe_calls) == 4    # a, b, a_mapped, b_mapped: once, shared by both methods
    v2 = MethodResult.from_json(json.loads((out / "rdx_v2" / "explanations.json").read_text()))
    assert v2.params["variant"] == "v2" and v2.params["filter_threshold_resolved"] == 1.1
    for d, r in v2.directions.items():
        rec = r.extra["filter"]
        assert rec["n_kept"] == len(r.explanations) and rec["n_candidates"] == 4
        assert rec["n_kept"] + rec["n_filtered"] == 4
    assert v2.scores["chance"] and v2.bsr["mean"] is not None
    guided = MethodResult.from_json(
        json.loads((out / "rdx_guided" / "explanations.json").read_text()))
    assert guided.info["guidance"]["predictions"] == dict.fromkeys(
        ("a", "b", "a_mapped", "b_mapped"), "given")
    assert guided.info["guidance"]["null_value"]["a_over_b"] == 10.0 * 119
    assert guided.bsr["mean"] is not None and guided.scores["chance"]
    e = guided.directions["b_over_a"].explanations[0]
    assert list(e.extra["grid_labels"]["predicted"]) == ["b", "a_mapped"]
    clf = json.loads((out / "classification" / "explanations.json").read_text())
    assert set(clf["info"]["probe"]) == {"a", "b", "a_mapped", "b_mapped"}
    # the guided grids carry two caption lines under every row
    v2_png = Image.open(out / "rdx_v2" / "grids" / "a_over_b_1.png")
    g_png = Image.open(out / "rdx_guided" / "grids" / "b_over_a_1.png")
    assert g_png.size[1] > v2_png.size[1]


def test_bad_variant_in_a_config_names_the_key(tmp_path):
    from rdx.experiments.methods import method

    with pytest.raises(RDXInputError, match=r"^methods\[0\]: variant='v3' is not one of"):
        method("rdx").validate({"variant": "v3"}, "methods[0]")
    with pytest.raises(RDXInputError, match=r"filter_threshold"):
        method("rdx").validate({"filter_threshold": "x"}, "methods[0]")
    method("rdx").validate({"variant": "v2", "guidance": "tpfp", "label_grids": True},
                           "methods[0]")


def test_shipped_guided_and_v2_configs():
    from rdx.experiments.config import load_experiment

    repo = Path(__file__).resolve().parents[1]
    for name, variant in (("guided", "v2"), ("v2", "v2")):
        comps = load_experiment(repo / "configs" / f"clip_vs_clipinat_inat_ar_{name}.yaml")
        assert [c.name for c in comps] == ["gator", "corvid", "maple"]
        assert [c.image_selection["target_classes"] for c in comps] == \
            [[0, 6], [3, 5], [1, 2, 4, 7]]
        rdx = comps[0].methods[0]
        assert rdx["variant"] == variant and rdx["align_representations"] is True
        script = (repo / f"clip_vs_clipinat_inat_ar_{name}.sh").read_text()
        assert f"configs/clip_vs_clipinat_inat_ar_{name}.yaml" in script \
            and "scripts/run_experiment.sh" in script
    guided = load_experiment(repo / "configs" / "clip_vs_clipinat_inat_ar_guided.yaml")[0]
    assert guided.methods[0]["guidance"] == "tpfp" and guided.methods[0]["label_grids"]
    assert guided.methods[0]["n_explanations"] == 10


if __name__ == "__main__" and "--write" in sys.argv:
    A, B, lab = planted_pairs(n_per=15, d=8, seed=3)
    REFERENCE.write_text(json.dumps(_paper_outputs(A, B, lab)))
    print(f"wrote {REFERENCE}")
