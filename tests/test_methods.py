"""The runner's method interface: baselines, cka and classification behind one contract."""
import json

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from conftest import MERGED, TOY_METHODS, planted_pairs, toy_config
from rdx import RDXInputError, bsr_scores
from rdx.evaluation.scoring import Scorer
from rdx.experiments import load_experiment
from rdx.experiments.methods import MethodContext, method, method_names


def _ctx(labels, alignment=None):
    return MethodContext(labels=labels, seed=0, device="cpu", alignment=alignment)


def test_every_method_is_registered():
    assert set(method_names()) == {"rdx", "cka", "similarity", "classification", "kmeans", "pca", "nmf",
                                   "cnmf", "sae", "topk_sae", "usae", "nlmcd", "spec",
                                   "crosscoder", "dfc_crosscoder"}


def _hand_debiased_cka(X, Y):
    """Textbook debiased CKA: debiased centring of the n×n Gram matrices, then HSIC ratios."""
    def center(K):
        n = len(K)
        K = K.copy()
        np.fill_diagonal(K, 0)
        m = K.sum(0) / (n - 2)
        m = m - m.sum() / (2 * (n - 1))
        K = K - m[:, None] - m[None, :]
        np.fill_diagonal(K, 0)
        return K
    K, L = center(X @ X.T), center(Y @ Y.T)
    return (K * L).sum() / np.sqrt((K * K).sum() * (L * L).sum())


def test_cka_method_matches_the_gram_matrix_formula():
    A, B, lab = planted_pairs(n_per=10, d=6)
    res = method("cka").run(A, B, {}, _ctx(lab))
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    assert res.info["similarity"]["cka_debiased"] == pytest.approx(
        _hand_debiased_cka(A64, B64), rel=1e-4)
    assert res.directions == {} and res.scores is None


def test_classification_fold_accuracies_and_agreement():
    A, B, lab = planted_pairs(n_per=15, d=6)
    res = method("classification").run(A, B, {"folds": 3}, _ctx(lab))
    doc, preds = res.info, res.arrays
    for key, X in (("a", A), ("b", B)):
        expect = []
        for tr, te in KFold(3, shuffle=True, random_state=0).split(X):
            clf = make_pipeline(StandardScaler(), LogisticRegression(
                random_state=0, max_iter=1000)).fit(X[tr], lab[tr])
            p = clf.predict(X[te])
            expect.append(np.mean(p == lab[te]))
            assert (preds[f"{key}_predictions"][te] == p).all()
        assert doc["probe"][key]["fold_accuracies"] == pytest.approx(expect)
    # B merges pairs of clusters: its probe cannot tell them apart, A's can
    assert doc["probe"]["a"]["accuracy"] > 0.95 > doc["probe"]["b"]["accuracy"]
    assert doc["agreement"]["a_b"] == pytest.approx(
        np.mean(preds["a_predictions"] == preds["b_predictions"]))


def test_classification_needs_two_classes():
    A, B, _ = planted_pairs(n_per=5, d=4)
    with pytest.raises(RDXInputError, match="at least 2 classes"):
        method("classification").run(A, B, {}, _ctx(np.zeros(len(A), int)))


def test_per_model_baseline_fits_each_side_and_scores_the_originals():
    A, B, lab = planted_pairs(n_per=20, d=8)
    res = Scorer(A, B).score(method("kmeans").run(A, B, {"n_explanations": 3}, _ctx(lab)))
    doc = {**res.to_json(), "_arrays": res.arrays}
    for X, d, side in ((A, "a_over_b", "a"), (B, "b_over_a", "b")):
        km = KMeans(3, n_init=10, random_state=0).fit(X)
        assert len(doc["directions"][d]["explanations"]) == 3
        assert (doc["_arrays"][f"{side}_labels"] >= 0).all()
        # the same partition as scikit-learn's with the same seed (up to label names)
        from sklearn.metrics import adjusted_rand_score
        assert adjusted_rand_score(km.labels_, doc["_arrays"][f"{side}_labels"]) == 1.0
    grids = {d: [e["images"] for e in r["explanations"]] for d, r in doc["directions"].items()}
    assert doc["bsr"]["a_over_b"] == bsr_scores(A, B, grids)["a_over_b"]["bsr"]
    assert doc["_arrays"]["a_codes"].shape == (len(A), 3)


def test_aligned_variants_swap_one_input_but_score_the_originals():
    A, B, lab = planted_pairs(n_per=20, d=8)
    A_map, B_map = B + 0.5, A - 0.5           # stand-ins for f_AB(A), f_BA(B)
    ctx = _ctx(lab, alignment=(A_map, B_map, {}))
    plain = method("pca").run(A_map, B, {"n_explanations": 2}, _ctx(lab)).to_json()
    aligned = Scorer(A, B).score(method("pca").run(
        A, B, {"n_explanations": 2, "align_representations": "0to1"}, ctx)).to_json()
    assert aligned["directions"]["a_over_b"] == plain["directions"]["a_over_b"]
    grids = {d: [e["images"] for e in r["explanations"]] for d, r in aligned["directions"].items()}
    assert aligned["bsr"]["mean"] == bsr_scores(A, B, grids)["mean"]["bsr"]
    other = method("pca").run(A, B, {"n_explanations": 2, "align_representations": "1to0"}, ctx)
    assert other.to_json()["directions"]["b_over_a"] == method("pca").run(
        A, B_map, {"n_explanations": 2}, _ctx(lab)).to_json()["directions"]["b_over_a"]
    with pytest.raises(RDXInputError, match="needs the comparison's alignment"):
        method("pca").run(A, B, {"align_representations": "0to1"}, _ctx(lab))


@pytest.mark.parametrize("name,params,match", [
    ("kmeans", {"n_clusters": 3}, r"unknown kmeans parameter\(s\) \['n_clusters'\]"),
    ("pca", {"align_representations": "both"}, r"align_representations: 'both' is not"),
    ("pca", {"align_representations": "0to1", "align_params": {"steps": 3}},
     r"align_params: unknown key\(s\) \['steps'\]"),
    ("pca", {"n_explanations": 0}, r"n_explanations must be a positive integer"),
    ("cka", {"folds": 3}, r"unknown cka parameter"),
    ("classification", {"folds": 1}, r"folds must be >= 2"),
])
def test_method_validation_errors(name, params, match):
    with pytest.raises(RDXInputError, match=match):
        method(name).validate(params, "m")


def test_runner_runs_baselines_and_saves_their_arrays(toy_run):
    # that a second run skips them is checked by test_runner's resume test on this run
    comparisons = load_experiment(toy_run.config)
    assert [m["method"] for m in comparisons[0].methods] == \
        [m["method"] for m in TOY_METHODS[MERGED]]
    out = toy_run.comp(MERGED)
    km = json.loads((out / "kmeans" / "explanations.json").read_text())
    assert km["run"]["method"] == "kmeans" and set(km["directions"]) == {"a_over_b", "b_over_a"}
    with np.load(out / "kmeans" / "concepts.npz") as z:
        assert z["a_codes"].shape == (120, 3) and "_arrays" not in km
    assert (out / "kmeans" / "grids" / "a_over_b_summary.png").exists()
    assert (out / "alignment.json").exists()
    with np.load(out / "representations.npz") as z, np.load(out / "alignment.npz") as al:
        assert z["a"].shape[0] == z["b"].shape[0] == len(z["labels"]) == 120
        assert al["a_mapped"].shape == (120, z["b"].shape[1])
    with np.load(out / "rdx" / "graphs.npz") as g:
        assert g["rank_a"].shape == (120, 120) and len(g["labels_a_over_b"]) == 120
    assert json.loads((out / "pca_ar0to1" / "explanations.json").read_text())["params"][
        "align_representations"] == "0to1"
    assert 0 < json.loads((out / "cka" / "explanations.json").read_text())["info"]["similarity"][
        "cka_debiased"] <= 1


def test_known_difference_is_validated_with_the_config(tmp_path):
    cfg = toy_config(tmp_path, comparisons=[{"name": "c", "known_difference":
                                          {"type": "merged_classes", "classes": [3, 5]}}])
    with pytest.raises(RDXInputError, match=r"comparisons\[0\]\.known_difference"):
        load_experiment(cfg)


def test_cli_report_writes_index_and_fails_cleanly(toy_run_copy, capsys):
    from rdx.cli import main

    exp = toy_run_copy.exp
    assert not (exp / "index.html").exists()           # run_experiment writes no report
    assert main(["report", str(exp)]) == 0
    assert (exp / "index.html").is_file()
    assert (exp / "analysis" / "summary.json").is_file()
    assert main(["report", str(toy_run_copy.root / "nothing")]) == 2
    assert "rdx report: error:" in capsys.readouterr().err
