"""The RDX estimator end to end: planted differences, determinism, symmetries, variants."""
import json

import numpy as np
import pytest
import torch

from conftest import planted_pairs
from rdx import RDX, RDXInputError
from rdx.errors import NotFittedError
from rdx.evaluation.bsr import bsr_scores
from rdx.io import jsonable

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
PAIRS = [(0, 1), (2, 3), (4, 5)]   # A-clusters that coincide in B


def _doc(model):
    d = model.to_dict()
    d.pop("timings_s")
    d.pop("versions")
    d["params"].pop("device_used")
    d["params"].pop("device")
    return json.dumps(jsonable(d), sort_keys=True)


@pytest.fixture(scope="module")
def planted():
    return planted_pairs()


@pytest.mark.parametrize("device", DEVICES)
def test_planted_merged_pairs_are_found_in_the_right_direction(planted, device):
    A, B, lab = planted
    m = RDX(n_explanations=3, random_state=0, device=device).fit(A, B)
    b_over_a = m.directions_["b_over_a"].explanations
    assert len(b_over_a) == 3
    found = set()
    for e in b_over_a:
        clusters = set(lab[e.members].tolist())
        pair = next(p for p in PAIRS if clusters <= set(p))   # within one merged pair ...
        assert clusters == set(pair)                           # ... covering both halves
        found.add(pair)
    assert found == set(PAIRS)
    for e in m.directions_["a_over_b"].explanations:
        clusters = set(lab[e.members].tolist())
        assert not any(set(p) <= clusters for p in PAIRS)
    # the grids are closer in the model they explain than in the other one
    scores = bsr_scores(A, B, m.result().grids)
    assert scores["a_over_b"]["bsr"] > 0.8 and scores["b_over_a"]["bsr"] > 0.8


def test_result_structure(planted):
    A, B, _ = planted
    n = len(A)
    m = RDX(n_explanations=3).fit(A, B)
    for r in m.directions_.values():
        members = np.concatenate([r.null_members] + [e.members for e in r.explanations])
        np.testing.assert_array_equal(np.sort(members), np.arange(n))   # a partition
        means = [e.mean_affinity for e in r.explanations]
        assert means == sorted(means)                                   # strongest last
        for j, e in enumerate(r.explanations, start=1):
            assert len(e.images) == min(9, len(e.members))
            assert set(e.images) <= set(e.members)
            np.testing.assert_array_equal(np.flatnonzero(r.labels == j), e.members)
        np.testing.assert_array_equal(np.flatnonzero(r.labels == 0), r.null_members)


def test_same_seed_gives_identical_results(planted):
    A, B, _ = planted
    assert _doc(RDX(random_state=7).fit(A, B)) == _doc(RDX(random_state=7).fit(A, B))


def test_swapping_a_and_b_swaps_the_directions(planted):
    A, B, _ = planted
    ab = RDX(random_state=1).fit(A, B)
    ba = RDX(random_state=1).fit(B, A)
    for d, other in (("a_over_b", "b_over_a"), ("b_over_a", "a_over_b")):
        x, y = ab.directions_[d], ba.directions_[other]
        assert [e.members for e in x.explanations] == [e.members for e in y.explanations]
        assert [e.images for e in x.explanations] == [e.images for e in y.explanations]
        assert x.null_members == y.null_members


def test_invariant_to_rotating_translating_scaling_a_representation(planted, rng):
    A, B, _ = planted
    Q, _ = np.linalg.qr(rng.standard_normal((A.shape[1], A.shape[1])))
    m1 = RDX(random_state=0).fit(A, B)
    m2 = RDX(random_state=0).fit(2.5 * A @ Q + 100.0, B)
    for d in m1.directions_:
        assert ([e.members for e in m1.directions_[d].explanations]
                == [e.members for e in m2.directions_[d].explanations])


def test_kept_graphs_follow_the_formulas(planted):
    A, B, _ = planted
    m = RDX(gamma=0.1, keep_graphs=True).fit(A, B)
    Ra, Rb = m.graphs_["rank_a"].astype(np.float64), m.graphs_["rank_b"].astype(np.float64)
    expected = np.tanh(0.1 * (Ra - Rb) / (np.minimum(Ra, Rb) + 1))
    np.testing.assert_allclose(m.graphs_["diff_a_over_b"], expected, atol=1e-6)
    assert m.gamma_ == 0.1


def test_gamma_defaults_to_scale_over_n(planted):
    A, B, _ = planted
    assert RDX(gamma_scale=60.0).fit(A, B).gamma_ == pytest.approx(60.0 / len(A))


def test_ground_truth_guidance_neutralises_cross_class_pairs(planted):
    A, B, lab = planted
    m = RDX(guidance="ground_truth", keep_graphs=True).fit(A, B, labels=lab)
    cross = lab[:, None] != lab[None, :]
    assert np.all(m.graphs_["diff_a_over_b"][cross] == 0.0)
    assert m.graphs_["rank_a"][cross].min() == 5 * (len(A) - 1)
    # the merged-pair difference is a cross-class one, so it disappears
    assert max(e.mean_affinity for e in m.directions_["b_over_a"].explanations) < \
        max(e.mean_affinity for e in RDX().fit(A, B).directions_["b_over_a"].explanations)


def test_classifier_guidance_uses_each_models_probe_predictions(planted):
    from rdx.method.guidance import out_of_fold_predictions
    A, B, lab = planted
    m = RDX(guidance="classifier", keep_graphs=True).fit(A, B, labels=lab)
    big = 5 * (len(A) - 1)
    for key, X in (("rank_a", A), ("rank_b", B)):
        pred = out_of_fold_predictions(X, lab)
        cross = pred[:, None] != pred[None, :]
        assert np.all(m.graphs_[key][cross] == big)          # split by this model's probe
        assert np.all(m.graphs_[key][~cross] < len(A))       # real ranks elsewhere
    # B cannot separate merged pairs, so its probe confuses them; A's probe does not
    assert (out_of_fold_predictions(B, lab) != lab).sum() > (out_of_fold_predictions(A, lab) != lab).sum()


@pytest.mark.parametrize("clustering", ["pagerank", "eigenvector_centrality"])
def test_greedy_selectors(planted, clustering):
    A, B, lab = planted
    m = RDX(n_explanations=3, clustering=clustering).fit(A, B)
    for r in m.directions_.values():
        assert len(r.explanations) == 3
        assert all(len(e.members) == 9 for e in r.explanations)
        assert len(r.null_members) == len(A) - 27
    # on the planted data the strongest b_over_a grid mixes the two halves of a merged pair
    top = m.directions_["b_over_a"].explanations[-1]
    assert any(set(lab[top.members].tolist()) == set(p) for p in PAIRS)


@pytest.mark.parametrize("similarity", ["max_normalized_distance", "zp_local_scaling"])
@pytest.mark.parametrize("difference", ["locally_biased", "standard"])
def test_other_similarity_and_difference_functions(planted, similarity, difference):
    A, B, lab = planted
    m = RDX(similarity=similarity, difference=difference, gamma=0.1).fit(A, B)
    assert all(len(r.explanations) == 3 for r in m.directions_.values())
    # every variant finds merged pairs in b_over_a: each explanation is one whole pair
    for e in m.directions_["b_over_a"].explanations:
        assert tuple(sorted(set(lab[e.members].tolist()))) in PAIRS
    assert bsr_scores(A, B, m.result().grids)["b_over_a"]["bsr"] > 0.75


def test_standard_rank_difference_without_normalisation_is_refused(planted):
    A, B, _ = planted
    with pytest.raises(RDXInputError, match="normalize_diff"):
        RDX(difference="standard", normalize_diff=False).fit(A, B)


def test_merge_low_affinity_moves_weak_clusters_to_the_null_group(planted):
    A, B, _ = planted
    base = RDX(n_explanations=3, null_threshold=30.0).fit(A, B)
    merged = RDX(n_explanations=3, null_threshold=30.0, merge_low_affinity=True).fit(A, B)
    for d in base.directions_:
        weak = [e for e in base.directions_[d].explanations if e.low_affinity]
        strong = [e for e in base.directions_[d].explanations if not e.low_affinity]
        assert [e.members for e in merged.directions_[d].explanations] == [e.members for e in strong]
        assert len(merged.directions_[d].null_members) == \
            len(base.directions_[d].null_members) + sum(len(e.members) for e in weak)


@pytest.mark.parametrize("strategy", ["centroid", "max_affinity", "random"])
def test_grid_strategies(planted, strategy):
    A, B, _ = planted
    m = RDX(grid_strategy=strategy).fit(A, B)
    for r in m.directions_.values():
        for e in r.explanations:
            assert len(e.images) == 9 and set(e.images) <= set(e.members)


def test_cuda_request_without_gpu_is_a_clear_error(planted):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    A, B, _ = planted
    with pytest.raises(RDXInputError, match="no CUDA GPU"):
        RDX(device="cuda").fit(A, B)


def test_results_before_fit_are_a_clear_error():
    for use in (lambda m: m.result(), lambda m: m.to_dict(), lambda m: m.save("unused")):
        with pytest.raises(NotFittedError, match="not fitted"):
            use(RDX())
    assert issubclass(NotFittedError, (RDXInputError, AttributeError))


def test_aligned_mode(planted):
    """Aligned mode: each direction replaces the far-apart model by its CKA-aligned transform."""
    A, B, lab = planted
    m = RDX(align_representations=True, align_params={"num_steps": 30}, keep_graphs=True,
            random_state=0).fit(A, B)
    doc = m.to_dict()
    assert set(doc["info"]["alignment"]) >= {"a_to_b", "b_to_a", "params"}
    assert "alignment" in m.timings_
    for key in ("rank_a_mapped", "rank_b_mapped", "diff_b_over_a_graph"):
        assert m.graphs_[key].shape == (len(A), len(A))
    # the b_over_a graph compares the mapped A with B (rank_a_mapped vs rank_b)
    Ra, Rb = m.graphs_["rank_a_mapped"].astype(float), m.graphs_["rank_b"].astype(float)
    expected = np.tanh(m.gamma_ * (Ra - Rb) / (np.minimum(Ra, Rb) + 1))
    np.testing.assert_allclose(m.graphs_["diff_b_over_a_graph"], expected, atol=1e-6)
    # a linear map of A cannot merge two well-separated clusters, so the merged pairs
    # survive the alignment: each b_over_a explanation is exactly one merged pair
    found = sorted(tuple(sorted(set(lab[e.members].tolist())))
                   for e in m.directions_["b_over_a"].explanations)
    assert found == PAIRS
    # grids are drawn in the original representations: a member grid, scored on A and B
    assert bsr_scores(A, B, m.result().grids)["b_over_a"]["n_pairs"] > 0


def test_precomputed_alignment_is_used_not_relearned(planted, monkeypatch):
    """A shared alignment (the runner's) is used as given: no map is learned again, and the
    result equals the fit that learned the same maps itself."""
    from rdx.method import alignment as alignment_mod
    A, B, _ = planted
    maps = alignment_mod.align_pair(A, B, num_steps=20, seed=0)
    own = RDX(align_representations=True, align_params={"num_steps": 20},
              random_state=0).fit(A, B)

    def refuse(*a, **k):
        raise AssertionError("align_pair called although an alignment was given")
    monkeypatch.setattr(alignment_mod, "align_pair", refuse)
    given = RDX(align_representations=True, random_state=0).fit(A, B, alignment=maps)
    assert given.alignment_ == maps[2]
    for d in ("a_over_b", "b_over_a"):
        assert given.directions_[d].grids == own.directions_[d].grids
