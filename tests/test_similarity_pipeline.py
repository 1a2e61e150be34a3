"""Similarity matrices, cross-dataset consistency, linear probes and the pipeline scripts.

Values are checked against hand-computed numbers or independent computations (scipy, a
textbook Gram-matrix CKA written here); the embedded example runs end to end on models
trained in a session fixture (1–2 epochs, small subsets).
"""
from __future__ import annotations

import importlib.util
import json
import os
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import yaml

from rdx.errors import RDXInputError
from rdx.similarity import consistency as C
from rdx.experiments import executors as E
from rdx.studies import similarity as P
from rdx.similarity.matrix import (SimilarityMatrix, measure_slug, normalize_features,
                                   parse_measure, similarity_matrix)
from rdx.similarity.probe import lambda_grid, linear_probe, tune_weight_decay

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs" / "similarity"


def _script(name: str):
    """Import scripts/<name>.py as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(f"_script_{name}", REPO / "scripts" /
                                                  f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _matrix_from_upper(values, m: int) -> np.ndarray:
    """Symmetric m×m matrix with unit diagonal whose upper triangle (row-major) is values."""
    S = np.eye(m)
    iu = np.triu_indices(m, 1)
    S[iu] = values
    S[(iu[1], iu[0])] = values
    return S


# --------------------------------------------------------------------------- correlation

def test_correlation_hand_computed_and_scipy(rng):
    from scipy import stats

    # (-1,0,1)·(-1,1,0) = 1, both norms² = 2 → r = 0.5; ranks equal the values
    assert C.correlation([1, 2, 3], [1, 3, 2], "pearson") == pytest.approx(0.5)
    assert C.correlation([1, 2, 3], [1, 3, 2], "spearman") == pytest.approx(0.5)
    x = rng.integers(0, 5, 40).astype(float)        # many ties
    y = x + rng.standard_normal(40)
    assert C.correlation(x, y, "pearson") == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert C.correlation(x, y, "spearman") == pytest.approx(stats.spearmanr(x, y)[0],
                                                            abs=1e-12)
    assert np.isnan(C.correlation([1, 1, 1], [1, 2, 3]))     # constant → undefined
    assert np.isnan(C.correlation([1], [2]))
    with pytest.raises(RDXInputError, match="method"):
        C.correlation([1, 2], [1, 2], "kendall")


# --------------------------------------------------------------------------- consistency

def test_consistency_on_hand_built_matrices():
    # 3 models → pairs (0,1), (0,2), (1,2) with values v and w; r = 0.5 as above
    Sa = _matrix_from_upper([0.1, 0.2, 0.3], 3)
    Sb = _matrix_from_upper([0.1, 0.3, 0.2], 3)
    assert C.consistency(Sa, Sb)[0] == pytest.approx(0.5)
    assert C.consistency(Sa, Sb, method="spearman") == (pytest.approx(0.5), 3)
    # an affine map of the off-diagonal entries is perfectly consistent, a flip anti-
    # consistent; the diagonal plays no role (it is never used)
    v = np.array([0.9, 0.5, 0.4, 0.7, 0.2, 0.6])
    S1 = _matrix_from_upper(v, 4)
    S2 = _matrix_from_upper(0.5 * v + 0.1, 4)
    S2[np.diag_indices(4)] = 7.0
    assert C.consistency(S1, S2)[0] == pytest.approx(1.0)
    assert C.consistency(S1, _matrix_from_upper(1 - v, 4))[0] == pytest.approx(-1.0)
    # asymmetric input is symmetrised: ½(S_ab + S_ba)
    S3 = S1.copy()
    S3[1, 0] += 0.2
    assert C.pair_values(S3, [(0, 1)])[0] == pytest.approx(v[0] + 0.1)
    # a non-finite similarity drops that pair only (pairwise complete)
    S4 = S1.copy()
    S4[0, 3] = S4[3, 0] = np.nan
    r, used = C.consistency(S4, S2)
    assert used == 5 and r == pytest.approx(1.0)


def test_consistency_table_covers_every_dataset_pair(rng):
    base = rng.uniform(size=10)                 # 5 models → 10 pairs
    mats = {f"d{k}": _matrix_from_upper(base + 0.3 * rng.standard_normal(10), 5)
            for k in range(4)}
    rows = C.consistency_table(mats)
    assert [(r["dataset_a"], r["dataset_b"]) for r in rows] == list(combinations(mats, 2))
    iu = np.triu_indices(5, 1)
    for r in rows:
        expect = np.corrcoef(mats[r["dataset_a"]][iu], mats[r["dataset_b"]][iu])[0, 1]
        assert r["pearson"] == pytest.approx(expect, abs=1e-12)
        assert r["n_pairs"] == 10
    M, names = C.dataset_consistency_matrix(mats)
    assert names == list(mats)
    np.testing.assert_allclose(M, M.T)
    np.testing.assert_allclose(np.diag(M), 1.0)
    assert M[0, 2] == pytest.approx(rows[1]["pearson"])   # (d0, d2) is the second row
    with pytest.raises(RDXInputError, match="at least 2"):
        C.consistency_table({"d0": mats["d0"]})


def test_subset_restriction_by_objective_and_anchor():
    ids = ["s1", "s2", "s3", "ssl1", "ssl2", "it1"]
    obj = {"s1": "sup", "s2": "sup", "s3": "sup", "ssl1": "ssl", "ssl2": "ssl", "it1": "it"}
    assert C.model_pairs(ids, groups=obj, between=("sup", "sup")) == [(0, 1), (0, 2), (1, 2)]
    assert C.model_pairs(ids, groups=obj, between=("ssl", "sup")) == [
        (0, 3), (0, 4), (1, 3), (1, 4), (2, 3), (2, 4)]
    # the paper's "Img-Txt vs Img-Txt ∪ Sup": it1 with every supervised model
    assert C.model_pairs(ids, groups=obj, between=("it", ("it", "sup"))) == [
        (0, 5), (1, 5), (2, 5)]
    assert C.model_pairs(ids, anchor="ssl1") == [(0, 3), (1, 3), (2, 3), (3, 4), (3, 5)]
    assert C.model_pairs(ids, groups=obj, anchor="ssl1", anchor_group="sup") == [
        (0, 3), (1, 3), (2, 3)]
    assert C.model_pairs(ids, exclude=["s3", "it1"]) == [(0, 1), (0, 3), (0, 4), (1, 3),
                                                         (1, 4), (3, 4)]
    with pytest.raises(RDXInputError, match="not in the matrix"):
        C.model_pairs(ids, anchor="nope")
    with pytest.raises(RDXInputError, match="no models"):
        C.model_pairs(ids, groups=obj, between=("sup", "clip"))

    # the supervised block is perfectly consistent between two datasets, the rest is not:
    # restricting P changes r from the all-pairs value to exactly 1
    Sa, Sb = np.eye(6), np.eye(6)
    within = C.model_pairs(ids, groups=obj, between=("sup", "sup"))
    for k, (i, j) in enumerate(within):
        Sa[i, j] = Sa[j, i] = 0.2 + 0.2 * k
        Sb[i, j] = Sb[j, i] = 0.1 + 0.1 * k
    others = [p for p in C.model_pairs(ids) if p not in within]
    for k, (i, j) in enumerate(others):
        Sa[i, j] = Sa[j, i] = 0.5 + 0.03 * k
        Sb[i, j] = Sb[j, i] = 0.9 - 0.05 * k
    assert C.consistency(Sa, Sb, within) == (pytest.approx(1.0), 3)
    r_all, n_all = C.consistency(Sa, Sb)
    assert n_all == 15 and r_all < 0.5
    # pair sets: within-sup (3 pairs) kept, within-ssl (1 pair) left out by min_pairs=3
    sets = {s.name: s for s in C.standard_pair_sets(ids, {"objective": obj},
                                                    anchors=["s1"], min_pairs=3)}
    assert sets["objective: sup × sup"].pairs == within
    assert "objective: ssl × ssl" not in sets
    assert sets["objective: ssl × sup"].kind == "across"
    assert len(sets["anchor s1 × all"].pairs) == 5
    assert sets["all"].pairs == C.model_pairs(ids)


def test_align_matrices_keeps_shared_models_in_one_order():
    a = _matrix_from_upper([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 4)   # models w, x, y, z
    b = _matrix_from_upper([0.6, 0.5, 0.4], 3)                  # models z, y, x
    out, ids = C.align_matrices({"A": (a, ["w", "x", "y", "z"]), "B": (b, ["z", "y", "x"])})
    assert ids == ["x", "y", "z"]
    np.testing.assert_allclose(out["A"], a[np.ix_([1, 2, 3], [1, 2, 3])])
    # in B, x–y is b[2, 1] = 0.4, x–z is b[2, 0] = 0.5, y–z is b[1, 0] = 0.6
    np.testing.assert_allclose(C.pair_values(out["B"]), [0.4, 0.5, 0.6])


def test_summarize_and_performance_link():
    s = C.summarize([0.1, 0.2, 0.3, 0.4, float("nan")])
    assert s["n"] == 4 and s["n_undefined"] == 1
    assert s["median"] == pytest.approx(0.25) and s["q1"] == pytest.approx(0.175)
    assert s["fisher_z_mean"] == pytest.approx(np.tanh(np.mean(np.arctanh([.1, .2, .3, .4]))))
    # more similar pairs have smaller accuracy gaps → Spearman −1
    ids = ["a", "b", "c"]
    acc = {"a": 0.9, "b": 0.8, "c": 0.5}       # gaps: ab .1, ac .4, bc .3
    S = _matrix_from_upper([0.9, 0.1, 0.5], 3)
    r, n = C.similarity_performance_correlation(S, ids, acc)
    assert n == 3 and r == pytest.approx(-1.0)


# --------------------------------------------------------------------------- matrices

def _textbook_debiased_cka(X, Y):
    """Debiased linear CKA from n×n Grams with U-centring."""
    def ucenter(K):
        n = len(K)
        K = K.copy()
        np.fill_diagonal(K, 0)
        r = K.sum(1)
        Kt = K - r[:, None] / (n - 2) - r[None, :] / (n - 2) + K.sum() / ((n - 1) * (n - 2))
        np.fill_diagonal(Kt, 0)
        return Kt
    K, L = ucenter(X @ X.T), ucenter(Y @ Y.T)
    return (K * L).sum() / np.sqrt((K * K).sum() * (L * L).sum())


def test_cka_matrix_symmetric_unit_diagonal_and_textbook_values(rng):
    base = rng.standard_normal((60, 6))
    feats = {"a": base,
             "b": base @ rng.standard_normal((6, 9)) + 0.5 * rng.standard_normal((60, 9)),
             "c": rng.standard_normal((60, 4)), "d": np.tanh(base[:, :3])}
    for fast in (True, False):
        res = similarity_matrix(feats, "cka_linear", fast=fast)
        S = res.values
        assert res.model_ids == ["a", "b", "c", "d"] and res.n_images == 60
        np.testing.assert_array_equal(S, S.T)
        np.testing.assert_allclose(np.diag(S), 1.0, atol=1e-12)
        for i, j in combinations(range(4), 2):
            X, Y = feats[res.model_ids[i]], feats[res.model_ids[j]]
            assert S[i, j] == pytest.approx(_textbook_debiased_cka(X, Y), abs=1e-10)
    biased = similarity_matrix(feats, "cka_linear_biased").values
    Xc, Yc = (feats["a"] - feats["a"].mean(0)), (feats["c"] - feats["c"].mean(0))
    expect = np.linalg.norm(Xc.T @ Yc) ** 2 / (np.linalg.norm(Xc.T @ Xc) *
                                                np.linalg.norm(Yc.T @ Yc))
    assert biased[0, 2] == pytest.approx(expect, rel=1e-12)
    np.testing.assert_allclose(np.diag(biased), 1.0)
    # a constant model gets NaN (not a fake 1) and its reason is recorded
    bad = similarity_matrix({**feats, "dead": np.ones((60, 3))}, "cka_linear")
    assert np.isnan(bad.values[4]).all() and "dead|*" in bad.errors
    assert np.isfinite(bad.values[:4, :4]).all()


def test_generic_measure_matrix_matches_pairwise_calls(rng):
    from rdx.similarity import similarity

    feats = [rng.standard_normal((40, d)) for d in (3, 5, 4)]
    res = similarity_matrix(feats, "rsa", params={"compare": "pearson"}, normalize="l2")
    assert res.model_ids == ["model_0", "model_1", "model_2"]
    assert res.meta["resolved_params"] == {"rdm": "correlation", "compare": "pearson"}
    normed = [normalize_features(F, "l2") for F in feats]
    assert res.meta["fast_path"]             # one rank vector per model, float32 storage
    for i, j in combinations(range(3), 2):
        assert res.values[i, j] == res.values[j, i] == pytest.approx(
            similarity("rsa", normed[i], normed[j], compare="pearson"), abs=1e-7)
    np.testing.assert_allclose(np.diag(res.values), 1.0, atol=1e-7)
    # Spearman RSA with ties (integer features) and a constant model: the per-model path
    # agrees with pair-by-pair calls, NaN pattern included
    tied = feats + [rng.integers(0, 3, (40, 4)).astype(float) + 1, np.ones((40, 3))]
    fast = similarity_matrix(tied, "rsa", params={"rdm": "euclidean"})
    slow = similarity_matrix(tied, "rsa", params={"rdm": "euclidean"}, fast=False)
    assert fast.meta["fast_path"] and not slow.meta["fast_path"]
    np.testing.assert_array_equal(np.isnan(fast.values), np.isnan(slow.values))
    assert np.isnan(fast.values[4]).all() and "model_4|*" in fast.errors
    np.testing.assert_allclose(fast.values, slow.values, atol=1e-7)
    dist = similarity_matrix(feats, "procrustes")     # a distance: zero diagonal
    assert not dist.higher_is_more_similar
    np.testing.assert_allclose(np.diag(dist.values), 0.0, atol=1e-9)
    with pytest.raises(RDXInputError, match="no parameter"):
        similarity_matrix(feats, "cka_linear", params={"sigma": 1.0})
    with pytest.raises(RDXInputError, match="unknown similarity measure"):
        similarity_matrix(feats, "cosine")
    with pytest.raises(RDXInputError, match="same images"):
        similarity_matrix([feats[0], feats[1][:30]], "cka_linear")


@pytest.mark.parametrize("measure,params", [
    ("cka_rbf", {}), ("cka_rbf", {"debiased": False}),
    ("cka_rbf", {"sigma": 0.4, "sigma_mode": "absolute"}),
    ("mutual_knn", {"k": 5}), ("jaccard_knn", {"k": 5}), ("cknna", {"k": 7})])
def test_per_model_matrix_equals_pairwise_calls(rng, monkeypatch, measure, params):
    """Kernels / k-NN tables built once per model give exactly the pair-by-pair values,
    whether every state stays resident or (tiny memory limit) one block is streamed."""
    from rdx.similarity import similarity

    base = rng.standard_normal((60, 6))
    feats = [base @ rng.standard_normal((6, d)) + 0.5 * rng.standard_normal((60, d))
             for d in (6, 8, 5, 7)]
    fast = similarity_matrix(feats, measure, params=params, normalize="l2")
    slow = similarity_matrix(feats, measure, params=params, normalize="l2", fast=False)
    assert fast.meta["fast_path"] and fast.meta["states_built"] == 4
    assert not slow.meta["fast_path"] and "states_built" not in slow.meta
    np.testing.assert_allclose(fast.values, slow.values, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(fast.values, fast.values.T)
    normed = [normalize_features(F, "l2") for F in feats]
    assert fast.values[1, 3] == pytest.approx(similarity(measure, normed[1], normed[3],
                                                         **params), rel=1e-12)
    assert np.diag(fast.values) == pytest.approx(1.0)
    # 60×60 float64 kernels need 28.8 kB each: a 40 kB limit keeps one resident at a time
    # (kNN tables are ~100× smaller, so use a limit that fits one of those)
    one_state = 8 * 60 * 60 if measure == "cka_rbf" else 60 * (params["k"] * 16 + 8)
    monkeypatch.setenv("RDX_MEMORY_LIMIT_GB", str(2.9 * one_state / 2**30))
    streamed = similarity_matrix(feats, measure, params=params, normalize="l2")
    assert streamed.meta["states_built"] == 4 + 3 + 2 + 1     # Σ (M − block start)
    np.testing.assert_array_equal(streamed.values, fast.values)


def test_per_model_matrix_bad_models_and_parameters(rng):
    feats = [rng.standard_normal((30, 4)) for _ in range(3)]
    # a constant model has no RBF kernel structure: its row and column are NaN, with why
    res = similarity_matrix(feats + [np.ones((30, 4))], "cka_rbf")
    assert np.isnan(res.values[3]).all() and np.isnan(res.values[:, 3]).all()
    assert "model_3|*" in res.errors and "constant" in res.errors["model_3|*"]
    assert np.isfinite(res.values[:3, :3]).all()
    # a zero row makes cosine neighbours undefined for that model only
    zero_row = rng.standard_normal((30, 4))
    zero_row[7] = 0.0
    res = similarity_matrix(feats + [zero_row], "mutual_knn", params={"k": 3})
    assert "model_3|*" in res.errors and "zero vector" in res.errors["model_3|*"]
    assert np.isfinite(res.values[:3, :3]).all()
    # a parameter that is bad for every model is an error, not a NaN matrix
    with pytest.raises(RDXInputError, match="k"):
        similarity_matrix(feats, "mutual_knn", params={"k": 30})
    with pytest.raises(RDXInputError, match="sigma"):
        similarity_matrix(feats, "cka_rbf", params={"sigma": -1.0})


def test_matrix_files_round_trip(tmp_path, rng):
    feats = {"m1": rng.standard_normal((20, 3)), "m2": rng.standard_normal((20, 5)),
             "m3": rng.standard_normal((20, 2))}
    res = similarity_matrix(feats, "cka_linear", normalize="l2")
    res.meta["dataset"] = "toy"
    js = res.save(tmp_path / "toy" / "cka_linear")
    meta = json.loads(js.read_text())
    assert meta["model_ids"] == ["m1", "m2", "m3"] and meta["normalize"] == "l2"
    assert meta["measure"] == "cka_linear" and meta["dataset"] == "toy"
    assert not list((tmp_path / "toy").glob("*.tmp"))        # atomic: no leftovers
    back = SimilarityMatrix.load(tmp_path / "toy" / "cka_linear.npz")
    np.testing.assert_array_equal(back.values, res.values)
    assert back.model_ids == res.model_ids and back.meta["dataset"] == "toy"
    (tmp_path / "toy" / "cka_linear.npz").unlink()
    with pytest.raises(RDXInputError, match="incomplete"):
        SimilarityMatrix.load(js)


def test_measure_specs_and_normalisation():
    assert parse_measure("cka_rbf:sigma=0.4,sigma_mode=absolute") == (
        "cka_rbf", {"sigma": 0.4, "sigma_mode": "absolute"})
    assert measure_slug("cka_rbf", {"sigma_mode": "absolute", "sigma": 0.4}) == \
        "cka_rbf__sigma=0.4__sigma_mode=absolute"
    with pytest.raises(RDXInputError, match="key=value"):
        parse_measure("rsa:spearman")
    with pytest.raises(RDXInputError, match="no parameter"):
        parse_measure("mutual_knn:kk=3")
    X = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(normalize_features(X, "l2"), [[0.6, 0.8], [0, 0], [1, 0]])
    Z = normalize_features(X, "zscore")
    np.testing.assert_allclose(Z.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(Z.std(0), 1)
    with pytest.raises(RDXInputError, match="normalize"):
        normalize_features(X, "unit")


# --------------------------------------------------------------------------- subsets

def test_select_subset_follows_the_paper_rule():
    labels = np.repeat([0, 1, 2], [50, 30, 5])
    ids = [f"{c}/{i}" for i, c in enumerate(labels)]
    # ≤ max_images: the whole dataset
    idx, pc = P.select_subset(ids, labels, max_images=100)
    assert pc is None and len(idx) == 85
    # > max_images: ⌈40/3⌉ = 14 per class, min(14, class size) kept → 14 + 14 + 5
    idx, pc = P.select_subset(ids, labels, max_images=40, seed=3)
    assert pc == 14 and np.bincount(labels[idx]).tolist() == [14, 14, 5]
    assert len(set(idx.tolist())) == len(idx)
    again, _ = P.select_subset(ids, labels, max_images=40, seed=3)
    np.testing.assert_array_equal(idx, again)                      # seeded
    other, _ = P.select_subset(ids, labels, max_images=40, seed=4)
    assert set(other.tolist()) != set(idx.tolist())
    # per-class seeding: class 0's images do not depend on the other classes
    only0, _ = P.select_subset(ids, labels, max_images=40, per_class=14, seed=3,
                               target_classes=[0])
    np.testing.assert_array_equal(only0, idx[:14])
    exact, pc = P.select_subset(ids, labels, max_images=None, per_class=10)   # ImageNet rule
    assert pc == 10 and np.bincount(labels[exact]).tolist() == [10, 10, 5]


def test_subset_files_are_written_once_and_reloaded(tmp_path):
    entry = P.DatasetEntry(id="digits.v1", dataset="digits", seed=1)   # a dotted id
    meta = P.prepare_subset(entry, tmp_path, max_images=100)
    assert meta["n_images"] == 100 and meta["per_class"] == 10 and meta["n_total"] == 1797
    js = tmp_path / "subsets" / "digits.v1.json"
    stamp = js.stat().st_mtime_ns
    idx, labels, back = P.load_subset(tmp_path, "digits.v1")
    assert back["ids_sha256"] == meta["ids_sha256"] and len(idx) == 100
    assert np.bincount(labels).tolist() == [10] * 10
    assert P.prepare_subset(entry, tmp_path, max_images=100) == back
    assert js.stat().st_mtime_ns == stamp            # unchanged selection: not rewritten
    assert P.prepare_subset(entry, tmp_path, max_images=50)["ids_sha256"] != meta["ids_sha256"]
    with pytest.raises(RDXInputError, match="re-run"):
        P.load_subset(tmp_path, "nope")


# --------------------------------------------------------------------------- probes

def test_lambda_search_visits_the_paper_grid(monkeypatch):
    from rdx.similarity import probe

    grid = lambda_grid()
    assert len(grid) == 64 and grid[0] == pytest.approx(1e-6) and grid[-1] == pytest.approx(10)
    assert grid[9] == pytest.approx(1e-5) and grid[27] == pytest.approx(1e-3)
    peak = 30
    monkeypatch.setattr(probe, "_val_accuracies",
                        lambda *a, candidates, **k: [1.0 - abs(np.log10(wd) - np.log10(grid[peak]))
                                                     for _, wd in candidates])
    wd, acc, trace = tune_weight_decay(None, None, None, None, lr=0.1, num_classes=2)
    visited = [t["index"] for t in trace]
    # decades, then around the best decade (27): ±4 → 31 wins, ±2 → 29/33, ±1 → 30 wins
    assert visited == [0, 9, 18, 27, 36, 45, 54, 63, 23, 31, 29, 33, 30, 32]
    assert wd == pytest.approx(grid[peak]) and acc == pytest.approx(1.0)


def test_batched_probes_equal_probes_fitted_one_by_one(rng):
    """train_probes fits P probes at once; each equals torch.optim.AdamW on its own probe
    (the paper's fit, written out here independently) up to float rounding."""
    import math

    import torch
    from torch import nn

    from rdx.similarity.probe import train_probes

    def alone(X, y, lr, wd, epochs=3, bs=64, seed=5):
        n, steps = len(X), math.ceil(len(X) / bs)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = nn.Linear(X.shape[1], 3)
            opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
            t = 0
            for _ in range(epochs):
                order = torch.randperm(n)
                for s in range(steps):
                    for g in opt.param_groups:
                        g["lr"] = 0.5 * (1 + math.cos(math.pi * t / (epochs * steps))) * lr
                    idx = order[s * bs:(s + 1) * bs]
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()
                    opt.step()
                    t += 1
        return model
    X = torch.from_numpy(rng.standard_normal((200, 6)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 3, 200))
    lrs, wds = [0.1, 0.01, 0.1, 1e-3], [1e-6, 1e-2, 1.0, 10.0]
    W, b = train_probes(X, y, num_classes=3, lrs=lrs, weight_decays=wds, epochs=3,
                        batch_size=64, seed=5)
    for p, (lr, wd) in enumerate(zip(lrs, wds)):
        m = alone(X, y, lr, wd)
        np.testing.assert_allclose(W[p].numpy(), m.weight.detach().numpy(), atol=1e-5)
        np.testing.assert_allclose(b[p].numpy(), m.bias.detach().numpy(), atol=1e-5)
    # at one lr, the strong decay (λ = 1) shrinks its probe: the candidates really differ
    assert W[2].norm() < 0.8 * W[0].norm()


def test_linear_probe_on_separable_features(rng):
    centers = np.array([[6.0, 0, 0, 0], [0, 6.0, 0, 0], [0, 0, 6.0, 0]])
    def blobs(n):
        y = np.repeat(np.arange(3), n)
        return centers[y] + rng.standard_normal((len(y), 4)), y
    Xtr, ytr = blobs(60)
    Xte, yte = blobs(30)
    res = linear_probe(Xtr, ytr, Xte, yte, lrs=(0.1,), epochs=20, seed=0)
    assert res["top1"] >= 0.95 and res["balanced_accuracy"] >= 0.95
    assert res["top5"] is None and res["num_classes"] == 3 and res["stratified"]
    assert res["n_train"] == 180 and res["n_val"] == 36 and res["n_test"] == 90
    assert res["weight_decay"] in lambda_grid() and res["lr"] == 0.1
    again = linear_probe(Xtr, ytr, Xte, yte, lrs=(0.1,), epochs=20, seed=0)
    assert again["top1"] == res["top1"] and again["weight_decay"] == res["weight_decay"]
    # control: labels unrelated to the features → about chance on the test set
    shuffled = linear_probe(Xtr, rng.permutation(ytr), Xte, yte, lrs=(0.1,), epochs=20)
    assert shuffled["top1"] < 0.6
    # a class absent from training still gets an output (head = max label of both + 1;
    # the paper's "max training label + 1" would give 2 outputs and fail on label 2)
    keep = ytr != 2
    res2 = linear_probe(Xtr[keep], ytr[keep], Xte, yte, lrs=(0.1,), epochs=5)
    assert res2["num_classes"] == 3 and res2["n_test"] == 90
    with pytest.raises(RDXInputError, match="dimensions"):
        linear_probe(Xtr, ytr, Xte[:, :3], yte)


# --------------------------------------------------------------------------- configs

def test_paper_configs_list_the_papers_models_and_datasets():
    from collections import Counter

    models, _ = P.load_models_config(CONFIGS / "models_paper.yaml")
    assert len(models) == 64
    cats = P.categories_of(models)
    assert Counter(cats["objective"].values()) == {"supervised": 30, "self-supervised": 20,
                                                    "image-text": 14}
    assert Counter(cats["architecture_class"].values()) == {"Transformer": 40,
                                                            "Convolutional": 24}
    assert Counter(cats["dataset_class"].values()) == {"ImageNet1k": 37, "Large": 11,
                                                       "ImageNet21k": 9, "XLarge": 7}
    assert {m.id for m in models} >= set(C.PAPER_ANCHORS)
    datasets, settings = P.load_datasets_config(CONFIGS / "datasets_paper.yaml")
    assert len(datasets) == 23 and settings["max_images"] == 10000
    inet = next(d for d in datasets if d.id == "imagenet-subset-10k")
    assert inet.per_class == 10 and inet.dataset == "imagenet"


def test_config_errors_are_clear(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text(yaml.safe_dump({"models": [{"id": "a b", "objective": "x", "spec": None}]}))
    with pytest.raises(RDXInputError, match="id 'a b'"):
        P.load_models_config(bad)
    bad.write_text(yaml.safe_dump({"models": [{"id": "a", "objective": "x", "colour": 1}]}))
    with pytest.raises(RDXInputError, match=r"models\[0\]\.colour: unknown key"):
        P.load_models_config(bad)
    bad.write_text(yaml.safe_dump({"models": [{"id": "a", "objective": "x"}] * 2}))
    with pytest.raises(RDXInputError, match="twice"):
        P.load_models_config(bad)
    with pytest.raises(RDXInputError, match="does not exist"):
        P.load_datasets_config(tmp_path / "missing.yaml")


def test_submitit_executor_runs_jobs(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    assert E.run_tasks(abs, [-1, -2, 3], executor="debug", folder=tmp_path) == [1, 2, 3]
    assert E.run_tasks(abs, [-4], executor="local") == [4]
    with pytest.raises(RDXInputError, match="executor"):
        E.run_tasks(abs, [1], executor="kubernetes")
    # the SLURM parameters are ones submitit accepts (a fake srun makes it think it is on a
    # cluster; nothing is submitted)
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("srun", "sbatch"):
        (fake / tool).write_text("#!/bin/sh\nexit 1\n")
        (fake / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    ex = E.make_executor("slurm", tmp_path / "logs", {
        "partition": "gpu", "timeout_min": 30, "gpus_per_node": 1, "cpus_per_task": 4,
        "mem_gb": 64, "array_parallelism": 8, "account": None}, name="t")
    params = ex._executor.parameters
    assert params["partition"] == "gpu" and params["time"] == 30
    assert params["array_parallelism"] == 8 and params["cpus_per_task"] == 4


# --------------------------------------------------------------------------- end to end

@pytest.fixture(scope="session")
def embedded(tmp_path_factory):
    """The embedded example's models (recipes shrunk to ≤ 2 epochs on ≤ 30 images per
    class), trained once, and the similarity pipeline run on its datasets."""
    root = tmp_path_factory.mktemp("similarity")
    doc = yaml.safe_load((CONFIGS / "models_embedded.yaml").read_text())
    for m in doc["models"]:
        if "train" in m:
            m["train"]["per_class"] = min(m["train"].get("per_class", 30), 30 if
                                          m["train"]["objective"] == "supervised" else 15)
            m["train"]["epochs"] = min(m["train"]["epochs"], 2)
    models = root / "models.yaml"
    models.write_text(yaml.safe_dump(doc))
    args = ["--models", str(models), "--datasets", str(CONFIGS / "datasets_embedded.yaml"),
            "--output-root", str(root / "out"), "--cache-dir", str(root / "cache"),
            "--checkpoint-root", str(root / "ckpt"), "--max-images", "200", "--quiet",
            "--train-device", "cpu", "--device", "cpu"]
    mod = _script("similarity_matrix")
    rc = mod.main(args + ["--measures", "cka_linear", "rsa:compare=pearson"])
    return {"root": root, "out": root / "out", "args": args, "rc": rc, "mod": mod,
            "models": [m["id"] for m in doc["models"]]}


def test_embedded_example_end_to_end(embedded, capsys):
    out = embedded["out"]
    assert embedded["rc"] == 0          # mnist_test is optional; absent here is fine
    run = json.loads((out / "run.json").read_text())
    datasets = ["fashion_train", "fashion_test", "digits"]
    assert not run["problems"]
    for ds in datasets:
        sub = json.loads((out / "subsets" / f"{ds}.json").read_text())
        assert sub["n_images"] == 200 and sub["per_class"] == 20
        for slug in ("cka_linear", "rsa__compare=pearson"):
            m = SimilarityMatrix.load(out / "matrices" / ds / slug)
            assert m.model_ids == embedded["models"] and m.normalize == "l2"
            np.testing.assert_allclose(m.values, m.values.T, atol=1e-12)
            np.testing.assert_allclose(np.diag(m.values), 1.0, atol=1e-9)
            assert m.meta["categories"]["objective"]["rot_fashion_w8_s0"] == "self-supervised"
            assert m.meta["subset"]["n_images"] == 200
    # the same matrix, recomputed from the cached features, independently of the pipeline
    recs = {mid: json.loads((out / "shards" / "digits" / f"{mid}.json").read_text())
            for mid in embedded["models"][:3]}
    feats = {mid: normalize_features(np.load(r["cache_npy"]), "l2") for mid, r in recs.items()}
    S = SimilarityMatrix.load(out / "matrices" / "digits" / "cka_linear").values
    assert S[0, 2] == pytest.approx(_textbook_debiased_cka(*[feats[m] for m in
                                                             list(recs)[::2]]), abs=1e-9)

    cons = _script("consistency")
    assert cons.main(["--root", str(out), "--anchors", "sup_fashion_w16_s0", "--quiet"]) == 0
    res = out / "consistency" / "cka_linear"
    doc = json.loads((res / "consistency.json").read_text())
    assert doc["datasets"] == datasets and doc["model_ids"] == embedded["models"]
    names = {s["pair_set"] for s in doc["summary"]}
    assert {"all", "objective: supervised × supervised",
            "objective: self-supervised × supervised",
            "anchor sup_fashion_w16_s0 × all"} <= names
    assert "objective: untrained × untrained" not in names     # 1 pair < min_pairs
    rows = [r for r in doc["consistency"] if r["pair_set"] == "all"]
    assert len(rows) == 3 and all(r["n_pairs"] == 36 for r in rows)
    S_tr = SimilarityMatrix.load(out / "matrices" / "fashion_train" / "cka_linear").values
    S_te = SimilarityMatrix.load(out / "matrices" / "fashion_test" / "cka_linear").values
    r0 = rows[0]
    assert (r0["dataset_a"], r0["dataset_b"]) == ("fashion_train", "fashion_test")
    iu = np.triu_indices(9, 1)
    assert r0["pearson"] == pytest.approx(np.corrcoef(S_tr[iu], S_te[iu])[0, 1], abs=1e-12)
    # two samples of one distribution: the model-pair similarities agree closely
    assert r0["pearson"] > 0.8
    for png in ("consistency_boxplot.png", "matrices.png", "dataset_consistency.png"):
        assert (res / png).stat().st_size > 5000
    with open(res / "consistency.csv") as fh:
        assert fh.readline().startswith("pair_set,kind,category,group_a,group_b,anchor,")

    # linear probes for three models on digits (hold-out test set), then the
    # similarity-vs-performance link appears in the consistency output
    probe = _script("linear_probe")
    root = embedded["root"]
    pargs = ["--models", str(root / "models.yaml"),
             "--datasets", str(CONFIGS / "datasets_embedded.yaml"),
             "--output-root", str(out), "--cache-dir", str(root / "cache"),
             "--checkpoint-root", str(root / "ckpt"), "--only-datasets", "digits",
             "--only-models", *embedded["models"][3:6], "--seeds", "0", "--lrs", "0.1",
             "--max-train", "300", "--quiet", "--device", "cpu"]
    assert probe.main(pargs) == 0
    rec = json.loads((out / "probes" / "digits" / "sup_digits_w16_s0.json").read_text())
    assert rec["status"] == "done" and 0.1 < rec["top1"] <= 1 and rec["n_train"] == 300
    assert rec["test_set"].startswith("hold-out 20%")
    assert (out / "probes" / "probes.csv").read_text().count("\n") == 4
    assert cons.main(["--root", str(out), "--quiet", "--measures", "cka_linear"]) == 0
    perf = (res / "similarity_vs_performance.csv").read_text().splitlines()
    assert perf[0] == "dataset,domain,spearman,pearson,n_pairs" and perf[1].startswith("digits")


def test_finished_shards_are_not_recomputed(embedded, monkeypatch):
    from rdx.models import zoo

    out, mod = embedded["out"], embedded["mod"]
    assert embedded["rc"] == 0
    record = out / "shards" / "digits" / "untrained_w16_s0.json"
    before = {p: p.stat().st_mtime_ns for p in (out / "shards").glob("*/*.json")}
    matrix_js = out / "matrices" / "digits" / "cka_linear.json"
    m_before = matrix_js.stat().st_mtime_ns

    def no_models(*a, **k):
        raise AssertionError("a finished shard was recomputed")

    monkeypatch.setattr(zoo, "load_model", no_models)
    assert mod.main(embedded["args"] + ["--measures", "cka_linear"]) == 0
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert matrix_js.stat().st_mtime_ns == m_before                  # up to date: skipped
    run = json.loads((out / "run.json").read_text())
    assert run["shards"]["run"] == [] and {r["status"] for r in run["matrices"]} == {"skipped"}

    # losing one shard's record reruns exactly that shard, and the matrices of its dataset
    monkeypatch.undo()
    record.unlink()
    assert mod.main(embedded["args"] + ["--measures", "cka_linear"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert [(r["model"], r["dataset"], r["status"]) for r in run["shards"]["run"]] == [
        ("untrained_w16_s0", "digits", "done")]
    # the rerun shard has the same signature, so the matrices stay valid
    assert {r["status"] for r in run["matrices"]} == {"skipped"}


def test_scripts_reject_bad_input(embedded, capsys):
    mod = embedded["mod"]
    assert mod.main(embedded["args"] + ["--measures", "cosine_sim"]) == 2
    assert "unknown similarity measure" in capsys.readouterr().err
    assert mod.main(embedded["args"] + ["--only-models", "nope"]) == 2
    cons = _script("consistency")
    assert cons.main(["--root", str(embedded["root"] / "empty")]) == 2
    assert "no matrices" in capsys.readouterr().err
