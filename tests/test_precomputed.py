"""RDX on precomputed distance matrices (``metric="precomputed"``, ``rdx explain
--distances``): the checks of the matrices, the refusals of what needs features, and the
explanations and scores equal to those of the features the distances came from."""
from __future__ import annotations

import json

from conftest import rdx_in_process
import numpy as np
import pytest
from scipy.spatial.distance import cdist

from rdx import RDX
from rdx.errors import RDXInputError
from rdx.evaluation.scoring import Scorer
from rdx.method.geometry import euclidean_distances
from rdx.validation import DISTANCE_RTOL, check_distance_matrix, check_distance_pair


@pytest.fixture(scope="module")
def pair():
    """Two continuous views of 400 digits (a random projection and PCA of the pixels with a
    little noise: no exact distance ties), their labels, and their distances (scipy)."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    from sklearn.random_projection import GaussianRandomProjection

    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.choice(len(X), 400, replace=False)
    Xs = X[idx] + rng.normal(0, 0.01, (400, 64))
    A = GaussianRandomProjection(32, random_state=0).fit_transform(Xs).astype(np.float32)
    B = PCA(10, random_state=0).fit_transform(Xs).astype(np.float32)
    # the distances of the float32 features the fit reads, in float64
    DA = cdist(A.astype(np.float64), A.astype(np.float64))
    DB = cdist(B.astype(np.float64), B.astype(np.float64))
    return A, B, y[idx], DA, DB


def _explanations(fit: RDX) -> dict:
    return {d: (r.labels.tolist(), [(e.members, e.images) for e in r.explanations])
            for d, r in fit.directions_.items()}


@pytest.mark.parametrize("params", [
    {}, {"similarity": "zp_local_scaling"},
    {"similarity": "max_normalized_distance", "difference": "standard"},
    {"variant": "v2"}, {"guidance": "ground_truth"},
    {"grid_strategy": "maximize_total_euc_neighborhood_affinity"},
    {"grid_strategy": "max_affinity", "clustering": "pagerank"}])
def test_distances_give_the_explanations_of_their_features(pair, params):
    A, B, y, DA, DB = pair
    labels = y if params.get("guidance") else None
    feats = RDX(device="cpu", **params).fit(A, B, labels)
    dists = RDX(device="cpu", metric="precomputed", **params).fit(DA, DB, labels)
    assert _explanations(dists) == _explanations(feats)
    assert any(r.explanations for r in feats.directions_.values())
    pf, pd = feats.result().params, dists.result().params
    assert {k for k in pf if pf[k] != pd[k]} == {"metric"}
    assert pd["metric"] == "precomputed" and pd["graph_resolved"] == "dense"


def test_rdx_own_distances_give_the_same_ranks_bit_for_bit():
    """On integer pixels (many exact distance ties) scipy's float64 distances break ties by
    index, the float32 fit by rounding; euclidean_distances gives the fit's own."""
    from sklearn.datasets import load_digits

    X = load_digits().data[:300].astype(np.float32)
    D = euclidean_distances(X)
    np.testing.assert_allclose(D, cdist(X.astype(float), X.astype(float)), atol=1e-3 * D.max())
    R_feat = RDX(device="cpu").similarity_of(X)
    assert np.array_equal(RDX(device="cpu", metric="precomputed").similarity_of(D), R_feat)
    # a monotone change of the distances keeps the neighbour ranks
    assert np.array_equal(RDX(device="cpu", metric="precomputed").similarity_of(D ** 2 * 7),
                          R_feat)


def test_scores_of_distances_equal_those_of_features(pair):
    A, B, _, DA, DB = pair
    res = RDX(device="cpu").fit(A, B).result()
    from_feats = Scorer(A, B, chance_draws=50).score(res).scores
    from_dists = Scorer(DA, DB, chance_draws=50, metric="precomputed").score(res).scores
    assert from_dists["rank"] == from_feats["rank"]     # ranks: exactly
    for kind in ("max_normalized_euclidean", "local_scaling"):   # values: to rounding
        for d in ("a_over_b", "b_over_a"):
            got, want = from_dists[kind][d], from_feats[kind][d]
            assert (got["bsr"], got["n_pairs"]) == (want["bsr"], want["n_pairs"])
            assert got["tsd"] == pytest.approx(want["tsd"], rel=1e-5)
    assert from_dists["params"] == from_feats["params"]


def _distances(n=6, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, 3))
    return cdist(X, X)


@pytest.mark.parametrize("edit, needle", [
    (lambda D: D[:, :-1], "square"),
    (lambda D: D[0], "square"),
    (lambda D: np.where(np.eye(len(D), dtype=bool), 1.0, D), "not zero on the diagonal"),
    (lambda D: D + np.triu(np.full_like(D, 0.5), 1), "not symmetric"),
    (lambda D: np.where(D > 0, D, np.nan), "NaN"),
    (lambda D: np.where(np.eye(len(D), dtype=bool), 0, -D), "negative"),
    (lambda D: np.zeros_like(D), "all zero"),
    (lambda D: D.astype(str), "dtype"),
])
def test_matrices_that_are_not_distances_are_refused(edit, needle):
    with pytest.raises(RDXInputError, match=needle):
        check_distance_matrix(edit(_distances()), "D")
    with pytest.raises(RDXInputError, match=needle):
        RDX(metric="precomputed", n_explanations=1).fit(edit(_distances()), _distances(seed=1))


def test_rounding_is_tolerated_and_sizes_must_match():
    D = _distances(8)
    noisy = D.copy()
    noisy[0, 1] += 0.1 * DISTANCE_RTOL * D.max()     # asymmetry within the tolerance
    np.fill_diagonal(noisy, 0.5 * DISTANCE_RTOL * D.max())
    assert check_distance_matrix(noisy, "D") is noisy or \
        np.shares_memory(check_distance_matrix(noisy, "D"), noisy)   # not copied
    with pytest.raises(RDXInputError, match="8 images but B one of 6"):
        check_distance_pair(D, _distances(6))


@pytest.mark.parametrize("params, needle", [
    ({"graph": "knn"}, "graph='knn'"),
    ({"align_representations": True}, "align_representations"),
    ({"grid_strategy": "centroid"}, "centroid"),
    ({"guidance": "classifier"}, "trains probes"),
    ({"label_grids": True}, "trains probes"),
])
def test_what_needs_features_is_refused(pair, params, needle):
    _, _, y, DA, DB = pair
    with pytest.raises(RDXInputError, match=needle):
        RDX(metric="precomputed", **params).fit(DA, DB, y)


def test_probe_guidance_with_given_predictions_works(pair):
    A, B, y, DA, DB = pair
    preds = {"a": y, "b": np.where(y == 3, 8, y)}
    f = RDX(device="cpu", guidance="classifier").fit(A, B, y, predictions=preds)
    p = RDX(device="cpu", guidance="classifier", metric="precomputed").fit(
        DA, DB, y, predictions=preds)
    assert _explanations(p) == _explanations(f)


def test_significance_refuses_a_precomputed_fit(pair):
    from rdx.evaluation.significance import assess

    _, _, _, DA, DB = pair
    res = RDX(device="cpu", metric="precomputed").fit(DA, DB).result()
    with pytest.raises(RDXInputError, match="precomputed"):
        assess(res, DA, DB, n_null=20)


def test_unknown_metric_is_refused(pair):
    A, B, *_ = pair
    with pytest.raises(RDXInputError, match="metric"):
        RDX(metric="cosine").fit(A, B)


# ------------------------------------------------------------------ rdx explain --distances

_rdx = rdx_in_process


def test_cli_distances_give_the_explanations_of_the_features(pair, tmp_path):
    A, B, y, DA, DB = pair
    for name, arr in {"A": A, "B": B, "DA": DA, "DB": DB, "y": y}.items():
        np.save(tmp_path / f"{name}.npy", arr)
    rc, _, err = _rdx(["explain", tmp_path / "A.npy", tmp_path / "B.npy", "--out",
                       tmp_path / "feats", "--quiet", "--labels", tmp_path / "y.npy"])
    assert rc == 0, err
    rc, _, err = _rdx(["explain", tmp_path / "DA.npy", tmp_path / "DB.npy", "--distances",
                       "--out", tmp_path / "dists", "--quiet", "--labels", tmp_path / "y.npy"])
    assert rc == 0, err
    docs = [json.loads((tmp_path / d / "explanations.json").read_text()) for d in
            ("feats", "dists")]
    got = [{k: [(e["members"], e["images"]) for e in v["explanations"]]
            for k, v in doc["directions"].items()} for doc in docs]
    assert got[0] == got[1] and any(got[0].values())
    assert docs[0]["scores"]["rank"] == docs[1]["scores"]["rank"]
    assert docs[1]["params"]["metric"] == "precomputed"


@pytest.mark.parametrize("extra, needle", [
    ([], "has shape (400, 32); a distance matrix is square"),
    (["--method", "kmeans"], "--method kmeans fits features"),
    (["--significance"], "--significance"),
    (["--graph", "knn"], "--graph knn needs the features"),
    (["--grid-strategy", "centroid"], "--grid-strategy centroid"),
    (["--example", "digits"], "--example"),
])
def test_cli_refuses_what_distances_cannot_do(pair, tmp_path, extra, needle):
    A, B, *_ = pair
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    files = [tmp_path / "A.npy", tmp_path / "B.npy"] if not extra else \
        ([] if "--example" in extra else [tmp_path / "A.npy", tmp_path / "B.npy"])
    rc, _, err = _rdx(["explain", *files, "--distances", "--out", tmp_path / "o", "--quiet",
                       *extra])
    assert rc == 2
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "o" / "explanations.json").exists()


def test_the_torch_path_of_the_distances_matches_numpy():
    """The whole-matrix squares written into a torch tensor (the GPU path's buffer kind)
    equal the numpy ones, and rows of them equal ``between``."""
    torch = pytest.importorskip("torch")
    from rdx.method.geometry import PrecomputedDistances

    D = _distances(50, seed=3)
    P = PrecomputedDistances(D)
    host = P.squared()
    assert host.dtype == np.float32 and np.all(np.diag(host) == 0)
    out = P.squared(out=torch.empty((50, 50), dtype=torch.float32))
    assert np.array_equal(out.numpy(), host)
    assert np.array_equal(P.between(np.array([3, 7]), np.array([7, 1])), host[[3, 7]][:, [7, 1]])
    # scaled by a power of two: ratios (and so ranks) exactly those of D²
    np.testing.assert_allclose(host / host.max(), (D ** 2) / (D ** 2).max(), rtol=1e-6)


def test_gpu_fit_of_distances_matches_the_cpu(pair):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _, _, _, DA, DB = pair
    cpu = RDX(device="cpu", metric="precomputed").fit(DA, DB)
    gpu = RDX(device="cuda", metric="precomputed").fit(DA, DB)
    assert _explanations(gpu) == _explanations(cpu)


def test_mds_of_euclidean_distances_is_the_pca_of_the_features(pair):
    from rdx.viz.pca_overlay import mds_coordinates, pca_coordinates

    A, _, _, DA, _ = pair
    mds, mds_var = mds_coordinates(DA)
    pca, pca_var = pca_coordinates(A)
    for k in range(2):   # each axis up to its sign
        sign = np.sign(mds[:, k] @ pca[:, k])
        np.testing.assert_allclose(sign * mds[:, k], pca[:, k], atol=1e-4 * np.abs(pca).max())
    np.testing.assert_allclose(mds_var, pca_var, rtol=1e-4)


def test_cli_report_of_distances_and_the_explorer_refusal(pair, tmp_path):
    A, B, y, DA, DB = pair
    for name, arr in {"A": A, "B": B, "DA": DA, "DB": DB, "y": y}.items():
        np.save(tmp_path / f"{name}.npy", arr)
    docs = []
    for files, extra, out in (((tmp_path / "A.npy", tmp_path / "B.npy"), [], "feats"),
                              ((tmp_path / "DA.npy", tmp_path / "DB.npy"), ["--distances"],
                               "dists")):
        rc, _, err = _rdx(["explain", *files, *extra, "--report", "--out", tmp_path / out,
                           "--quiet", "--labels", tmp_path / "y.npy"])
        assert rc == 0, err
        docs.append(json.loads((tmp_path / out / "rdx" / "explanations.json").read_text()))
    got = [{k: [e["members"] for e in v["explanations"]] for k, v in d["directions"].items()}
           for d in docs]
    assert got[0] == got[1]
    page = (tmp_path / "dists" / "report.html").read_text(encoding="utf-8")
    assert "precomputed distance matrix" in page
    assert page.count('alt="PCA overlay, ') == 2      # the maps: the distances' MDS
    assert "could not be made" not in page
    rc, _, err = _rdx(["explore", tmp_path / "dists", "--quiet"])
    assert rc == 2 and "compares distance matrices (rdx explain --distances)" in err
