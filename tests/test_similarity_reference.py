"""Golden values of the similarity measures against the reference libraries, and the
conventions where the field has two.

* RSA against rsatoolbox: the values stored in ``tests/data/similarity_reference/`` by the
  script next to them (with rsatoolbox's version), and live when rsatoolbox is importable.
* Procrustes and SVCCA against netrep's definitions (``LinearMetric``), written out here
  with numpy (netrep is not on PyPI): the aligned, whitened representations and the angle
  between them. The values computed by netrep itself (and by the platonic metrics' code)
  are in ``tests/test_similarity_reference_libraries.py``.
* Kendall's τ_a against its definition, counted pair by pair.
"""
from __future__ import annotations

import importlib.util
import json
import math
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.linalg import orthogonal_procrustes
from scipy.spatial.distance import pdist
from scipy.stats import ortho_group, pearsonr, spearmanr

from rdx.errors import RDXInputError
from rdx.similarity import calibrate, compute_rdm, procrustes_distance, rsa, similarity, svcca
from rdx.similarity import procrustes as proc_mod
from rdx.similarity.matrix_fast import rsa_matrix
from rdx.similarity.rdm import kendall_tau_a, prepare_rsa, rsa_bootstrap

REF_DIR = Path(__file__).parent / "data" / "similarity_reference"
REFERENCE = json.loads((REF_DIR / "rsatoolbox_reference.json").read_text())
CASES = [(case, method, cmp) for case, c in REFERENCE["cases"].items()
         for method, r in c["rdms"].items() for cmp in r["compare"]]


def _case(case):
    c = REFERENCE["cases"][case]
    return np.array(c["X"]), np.array(c["Y"]), c


# ============================================================ RSA vs rsatoolbox
def test_reference_file_names_its_library_version():
    assert REFERENCE["library"] == "rsatoolbox" and REFERENCE["version"]
    assert (REF_DIR / REFERENCE["script"]).is_file()


@pytest.mark.parametrize("case,method,cmp", CASES)
def test_rsa_equals_rsatoolbox_golden_values(case, method, cmp):
    """Every rsatoolbox comparison (spearman, corr, cosine, tau-a) of both of its RDMs
    (correlation; euclidean = our mean_squared_euclidean), on continuous and on tied
    integer features, and on bootstrap draws with copies of images."""
    X, Y, c = _case(case)
    entry = c["rdms"][method]
    ref = entry["compare"][cmp]
    rdm, compare = entry["rdx_rdm"], ref["rdx_compare"]
    np.testing.assert_allclose(compute_rdm(X, rdm=rdm), entry["rdm_X"], rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_allclose(compute_rdm(Y, rdm=rdm), entry["rdm_Y"], rtol=1e-12,
                               atol=1e-14)
    assert rsa(X, Y, rdm=rdm, compare=compare) == pytest.approx(ref["value"], abs=1e-12)
    prep = prepare_rsa(X, Y, rdm=rdm, compare=compare)
    assert prep.value == pytest.approx(ref["value"], abs=1e-12)
    for draw, value in zip(c["draws"], ref["bootstrap"]):
        assert prep.bootstrap(np.array(draw)) == pytest.approx(value, abs=1e-12)
        assert rsa_bootstrap(X, Y, np.array(draw), rdm=rdm, compare=compare) == \
            pytest.approx(value, abs=1e-12)


def test_rsatoolbox_live_equals_the_stored_values():
    """Where rsatoolbox is importable, the script's values now equal the stored ones."""
    pytest.importorskip("rsatoolbox", reason="rsatoolbox (test extra) is not installed; "
                                             "the stored values are checked above")
    spec = importlib.util.spec_from_file_location("make_ref", REF_DIR / REFERENCE["script"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for case in REFERENCE["cases"]:
        X, Y, c = _case(case)
        live = mod.reference(X, Y, c["draws"], mod.rdm_methods(case))
        for method, entry in c["rdms"].items():
            for cmp, ref in entry["compare"].items():
                got = live["rdms"][method]["compare"][cmp]
                assert got["value"] == pytest.approx(ref["value"], abs=1e-12)
                np.testing.assert_allclose(got["bootstrap"], ref["bootstrap"], atol=1e-12)


def test_euclidean_conventions_d_and_d_squared_over_p():
    """rdm='euclidean' is scipy's distance d, 'mean_squared_euclidean' d²/p: the same
    ranks (Spearman, τ_a equal), different Pearson and cosine values."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 6))
    Y = np.tanh(X @ rng.normal(size=(6, 8))) + 0.5 * rng.normal(size=(40, 8))
    np.testing.assert_allclose(compute_rdm(X, rdm="euclidean"), pdist(X), rtol=1e-12)
    np.testing.assert_allclose(compute_rdm(X, rdm="mean_squared_euclidean"),
                               pdist(X, "sqeuclidean") / 6, rtol=1e-12)
    d_x, d_y = pdist(X), pdist(Y)
    q_x, q_y = d_x ** 2 / 6, d_y ** 2 / 8
    for rdm, (a, b) in (("euclidean", (d_x, d_y)), ("mean_squared_euclidean", (q_x, q_y))):
        assert rsa(X, Y, rdm=rdm, compare="pearson") == pytest.approx(pearsonr(a, b)[0],
                                                                      abs=1e-12)
        assert rsa(X, Y, rdm=rdm, compare="cosine") == pytest.approx(
            a @ b / np.linalg.norm(a) / np.linalg.norm(b), abs=1e-12)
    for cmp in ("spearman", "kendall_tau_a"):
        assert rsa(X, Y, rdm="euclidean", compare=cmp) == pytest.approx(
            rsa(X, Y, rdm="mean_squared_euclidean", compare=cmp), abs=1e-14)
    assert spearmanr(d_x, d_y)[0] == pytest.approx(rsa(X, Y, rdm="euclidean"), abs=1e-12)
    gap = abs(rsa(X, Y, rdm="euclidean", compare="pearson")
              - rsa(X, Y, rdm="mean_squared_euclidean", compare="pearson"))
    assert gap > 1e-3


def _tau_a_by_pairs(x, y):
    s = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
            for i, j in combinations(range(len(x)), 2))
    return s / (len(x) * (len(x) - 1) / 2)


def test_kendall_tau_a_equals_its_definition_with_and_without_ties():
    rng = np.random.default_rng(5)
    for x, y in ((rng.normal(size=60), rng.normal(size=60)),
                 (rng.integers(0, 4, 60).astype(float), rng.integers(0, 3, 60).astype(float)),
                 (np.arange(10.0), np.arange(10.0)), (np.arange(10.0), -np.arange(10.0))):
        assert kendall_tau_a(x, y) == pytest.approx(_tau_a_by_pairs(x, y), abs=1e-14)
    assert kendall_tau_a(np.ones(5), np.arange(5.0)) == 0.0


@pytest.mark.parametrize("rdm,compare", [("correlation", "cosine"),
                                         ("euclidean", "kendall_tau_a"),
                                         ("mean_squared_euclidean", "pearson")])
def test_new_rsa_conventions_permutations_equal_recomputation(rdm, compare):
    rng = np.random.default_rng(9)
    X = rng.normal(size=(28, 5))
    Y = X @ rng.normal(size=(5, 4)) + rng.normal(size=(28, 4))
    prep = prepare_rsa(X, Y, rdm=rdm, compare=compare)
    for _ in range(3):
        perm = rng.permutation(28)
        assert prep.permuted(perm) == pytest.approx(
            rsa(X, Y[perm], rdm=rdm, compare=compare), abs=1e-12)
    res = calibrate("rsa", X, Y, permutations=20, bootstrap=5, seed=1, rdm=rdm,
                    compare=compare)
    assert res["value"] == pytest.approx(rsa(X, Y, rdm=rdm, compare=compare), abs=1e-14)
    assert res["params"] == {"rdm": rdm, "compare": compare}


def test_rsa_matrix_gram_path_takes_cosine_and_leaves_tau_to_pairs():
    rng = np.random.default_rng(2)
    arrays = [rng.normal(size=(20, 4)) for _ in range(3)]
    S, errors = rsa_matrix(arrays, ["a", "b", "c"], "correlation", "cosine",
                           torch.device("cpu"))
    assert not errors
    assert S[0, 1] == pytest.approx(rsa(arrays[0], arrays[1], compare="cosine"), abs=1e-6)
    assert rsa_matrix(arrays, ["a", "b", "c"], "correlation", "kendall_tau_a",
                      torch.device("cpu")) is None


# ============================================================ Procrustes vs netrep
def _netrep_angular(X, Y):
    """netrep's LinearMetric(alpha=1, score_method='angular'): centre, rotate X onto Y
    (SVD of XᵀY), arccos of the normalised inner product of the aligned matrices."""
    X, Y = X - X.mean(0), Y - Y.mean(0)
    w = max(X.shape[1], Y.shape[1])
    X = np.pad(X, ((0, 0), (0, w - X.shape[1])))
    Y = np.pad(Y, ((0, 0), (0, w - Y.shape[1])))
    U, _, Vt = np.linalg.svd(X.T @ Y)
    tX, tY = X @ U, Y @ Vt.T
    c = np.sum(tX * tY) / (np.linalg.norm(tX) * np.linalg.norm(tY))
    return float(np.arccos(np.clip(c, -1.0, 1.0)))


def test_procrustes_equals_netrep_and_the_residual_on_generic_data():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(50, 7))
    Y = np.tanh(X @ rng.normal(size=(7, 5))) + 0.3 * rng.normal(size=(50, 5))
    assert procrustes_distance(X, Y, kind="angular") == pytest.approx(
        _netrep_angular(X, Y), abs=1e-12)
    # squared: ‖X̄ − ȲQ‖² with scipy's optimal rotation of the zero-padded inputs
    Xb, Yb = X - X.mean(0), Y - Y.mean(0)
    Xb, Yb = Xb / np.linalg.norm(Xb), np.pad(Yb / np.linalg.norm(Yb), ((0, 0), (0, 2)))
    R, _ = orthogonal_procrustes(Yb, Xb)
    assert procrustes_distance(X, Y) == pytest.approx(np.sum((Xb - Yb @ R) ** 2), abs=1e-12)


@pytest.mark.parametrize("kind", ["squared", "euclidean", "angular"])
def test_procrustes_is_exact_to_rounding_at_an_exact_rotation(kind):
    """2 − 2‖X̄ᵀȲ‖_* would give ≈ 1e-8 for the root forms; the residual gives rounding."""
    rng = np.random.default_rng(6)
    X = rng.normal(size=(200, 30))
    Q = ortho_group.rvs(30, random_state=7)
    floor = 1e-28 if kind == "squared" else 1e-13
    assert procrustes_distance(X, 3.0 * X @ Q + 5.0, kind=kind) < floor
    assert procrustes_distance(X, np.hstack([X @ Q, np.zeros((200, 3))]), kind=kind) < floor
    wide = rng.normal(size=(20, 50))                  # wider than n: reduced by a QR first
    assert procrustes_distance(wide, wide @ ortho_group.rvs(50, random_state=8),
                               kind=kind) < floor


def test_procrustes_residual_and_nuclear_forms_agree_near_the_switch():
    """Just above and below RESIDUAL_BELOW both forms give the same distance."""
    rng = np.random.default_rng(10)
    X = rng.normal(size=(80, 6))
    for eps in (3e-3, 1e-2, 3e-2):
        Y = X + eps * rng.normal(size=X.shape)
        Xn = proc_mod._normalized(torch.from_numpy(X))
        Yn = proc_mod._normalized(torch.from_numpy(Y))
        nuclear = 2 - 2 * float(torch.linalg.svdvals(Xn.T @ Yn).sum())
        assert proc_mod._residual_sq(Xn, Yn) == pytest.approx(nuclear, rel=1e-9)
        assert procrustes_distance(X, Y) == pytest.approx(nuclear, rel=1e-9)
        assert procrustes_distance(X, Y, kind="angular") == pytest.approx(
            _netrep_angular(X, Y), rel=1e-7)


# ============================================================ SVCCA conventions
def _netrep_cca_cosine(X, Y):
    """cos of netrep's LinearMetric(alpha=0) angular distance: zero-pad to a common width,
    whiten each centred input (inverse square root of ZᵀZ, eigenvalues clipped at 1e-7 as
    netrep does, so padded columns stay 0), align by the SVD, normalised inner product."""
    w = max(X.shape[1], Y.shape[1])

    def whiten(Z):
        Z = np.pad(Z - Z.mean(0), ((0, 0), (0, w - Z.shape[1])))
        e, V = np.linalg.eigh(Z.T @ Z)
        return Z @ (V * np.maximum(e, 1e-7) ** -0.5) @ V.T
    Xw, Yw = whiten(X), whiten(Y)
    U, _, Vt = np.linalg.svd(Xw.T @ Yw)
    tX, tY = Xw @ U, Yw @ Vt.T
    return float(np.sum(tX * tY) / (np.linalg.norm(tX) * np.linalg.norm(tY)))


def test_svcca_geometric_average_is_netreps_cca_score():
    rng = np.random.default_rng(12)
    X = rng.normal(size=(300, 6))
    Y = np.hstack([X[:, :3] @ rng.normal(size=(3, 3)), rng.normal(size=(300, 5))])
    Y += 0.5 * rng.normal(size=Y.shape)
    assert svcca(X, Y, keep=1.0, average="geometric") == pytest.approx(
        _netrep_cca_cosine(X, Y), abs=1e-10)
    rho_sum = svcca(X, Y, keep=1.0) * 6               # min(6, 8) correlations
    assert svcca(X, Y, keep=1.0, average="geometric") == pytest.approx(
        rho_sum / math.sqrt(6 * 8), abs=1e-12)


def test_svcca_of_a_representation_and_its_own_pca():
    """Pixels against their own 10 leading principal components: all 10 canonical
    correlations are 1, so the min average scores 1 and the geometric one √(10 / r_X)."""
    rng = np.random.default_rng(13)
    X = rng.normal(size=(200, 40)) @ rng.normal(size=(40, 40))
    Xc = X - X.mean(0)
    pcs = Xc @ np.linalg.svd(Xc, full_matrices=False)[2][:10].T
    assert svcca(X, pcs, keep=1.0) == pytest.approx(1.0, abs=1e-10)
    assert svcca(X, pcs, keep=1.0, average="geometric") == pytest.approx(
        math.sqrt(10 / 40), abs=1e-10)
    assert similarity("svcca", X, pcs, keep=1.0, average="geometric") == pytest.approx(
        math.sqrt(10 / 40), abs=1e-10)
    with pytest.raises(RDXInputError, match="average"):
        svcca(X, pcs, average="arithmetic")


# ============================================================ small problems
def test_small_rsa_runs_its_blas_on_one_thread_and_restores_the_pool():
    from threadpoolctl import threadpool_info

    from rdx.similarity.inputs import SERIAL_BLAS_WORK, serial_blas

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    with serial_blas(SERIAL_BLAS_WORK / 2):
        assert set(blas_threads()) == {1}
    assert blas_threads() == before
    with serial_blas(SERIAL_BLAS_WORK):
        assert blas_threads() == before
    X, Y, c = _case("continuous")
    assert rsa(X, Y) == pytest.approx(
        c["rdms"]["correlation"]["compare"]["spearman"]["value"], abs=1e-12)
    assert blas_threads() == before


# ============================================================ calibrated-similarity
CALIBRATED = json.loads((REF_DIR / "calibrated_reference.json").read_text())


def test_calibrated_score_equals_calibrated_similarity():
    """rdx's calibrate (the same permutation stream) gives calibrated-similarity's
    calibrated score, p-value and τ (float32 there); the stored permutations are rdx's."""
    from rdx.similarity.calibration import permutation_draws

    c = CALIBRATED
    xs = [np.array(z) for z in c["X_layers"]]
    ys = [np.array(z) for z in c["Y_layers"]]
    assert [p.tolist() for p in permutation_draws(len(xs[0]), c["K"], c["seed"])] == \
        c["permutations"]
    ref = c["pair"]
    res = calibrate(c["measure"], xs[ref["x"]], ys[ref["y"]], permutations=c["K"],
                    seed=c["seed"], alpha=c["alpha"])
    for key in ("calibrated", "p_value", "tau"):
        assert res[key] == pytest.approx(ref[key], abs=2e-6), key


@pytest.mark.parametrize("aggregate,theirs", [("best", "max"), ("mean", "mean")])
def test_layer_wise_null_equals_calibrated_similarity(aggregate, theirs):
    from rdx.similarity import calibrate_layers

    c = CALIBRATED
    xs = [np.array(z) for z in c["X_layers"]]
    ys = [np.array(z) for z in c["Y_layers"]]
    res = calibrate_layers(c["measure"], xs, ys, permutations=c["K"], seed=c["seed"],
                           alpha=c["alpha"], aggregate=aggregate)
    for key in ("calibrated", "p_value", "tau"):
        assert res[key] == pytest.approx(c["layers"][theirs][key], abs=2e-6), key
    S = np.array(res["matrix"])
    assert S.shape == (3, 2)
    assert S[1, 0] == pytest.approx(similarity(c["measure"], xs[1], ys[0]), abs=1e-14)
    assert res["best_pair"] == list(np.unravel_index(np.argmax(S), S.shape))


def test_calibrated_score_by_hand_and_for_distances():
    from rdx.similarity import calibrated_score

    null = np.arange(1, 20) / 100.0                   # 0.01 … 0.19, K = 19
    # ⌈0.95 · 20⌉ = 19th smallest of the 20 values {0.01 … 0.19, 0.6}: 0.19
    tau, score = calibrated_score(0.6, null, higher_is_more_similar=True)
    assert tau == pytest.approx(0.19) and score == pytest.approx((0.6 - 0.19) / 0.81)
    tau, score = calibrated_score(0.1, null, higher_is_more_similar=True)
    assert score == 0.0                               # below τ: not above chance
    # a distance, mirrored: the 19th largest of {0.005, 0.01 … 0.19} is 0.01
    tau, score = calibrated_score(0.005, null, higher_is_more_similar=False)
    assert tau == pytest.approx(0.01) and score == pytest.approx((0.01 - 0.005) / 0.01)
    X = np.random.default_rng(1).normal(size=(30, 4))
    res = calibrate("procrustes", X, X @ ortho_group.rvs(4, random_state=2),
                    permutations=19)
    assert res["calibrated"] == pytest.approx(1.0) and res["tau"] > 0.1
    with pytest.raises(RDXInputError, match="alpha"):
        calibrate("cka_linear", X, X + 1, permutations=5, alpha=1.5)


def test_layer_wise_null_input_errors():
    from rdx.similarity import calibrate_layers

    X = np.random.default_rng(2).normal(size=(20, 3))
    with pytest.raises(RDXInputError, match="non-empty list"):
        calibrate_layers("cka_linear", [], [X])
    with pytest.raises(RDXInputError, match="same 20 images"):
        calibrate_layers("cka_linear", [X], [X[:10]])
    with pytest.raises(RDXInputError, match="aggregate"):
        calibrate_layers("cka_linear", [X], [X], aggregate="max")


# ============================================================ PWCCA
def _google_pwcca(X, Y):
    """Google's ``pwcca.compute_pwcca`` on centred activations, written out: CCA by
    whitening the covariances, canonical variates of the input with fewer neurons, their
    QR basis, weights Σ_j |⟨p_i, neuron_j⟩| normalised, weighted mean of the ρ_i."""
    a1, a2 = (X - X.mean(0)).T, (Y - Y.mean(0)).T          # neurons × images
    n = X.shape[0]
    sxx, syy, sxy = a1 @ a1.T / (n - 1), a2 @ a2.T / (n - 1), a1 @ a2.T / (n - 1)

    def isqrt(S):
        e, V = np.linalg.eigh(S)
        return V @ np.diag(e ** -0.5) @ V.T
    u, s, vh = np.linalg.svd(isqrt(sxx) @ sxy @ isqrt(syy))
    m = min(a1.shape[0], a2.shape[0])
    if a1.shape[0] <= a2.shape[0]:
        dirns, acts = (u.T @ isqrt(sxx) @ a1)[:m], a1
    else:
        dirns, acts = (vh @ isqrt(syy) @ a2)[:m], a2
    P, _ = np.linalg.qr(dirns.T)
    w = np.abs(P.T @ acts.T).sum(axis=1)
    return float((w / w.sum()) @ s[:m])


def test_pwcca_equals_googles_definition_and_its_side_rule():
    from rdx.similarity import pwcca

    rng = np.random.default_rng(14)
    X = rng.normal(size=(400, 6)) @ rng.normal(size=(6, 6))
    Y = np.hstack([np.tanh(X[:, :3]), rng.normal(size=(400, 5))]) + 0.4 * rng.normal(
        size=(400, 8))
    assert pwcca(X, Y) == pytest.approx(_google_pwcca(X, Y), abs=1e-10)
    assert pwcca(Y, X) == pytest.approx(_google_pwcca(Y, X), abs=1e-10)
    assert pwcca(Y, X) == pytest.approx(pwcca(X, Y), abs=1e-12)   # X has fewer neurons
    Y6 = Y[:, :6]                                    # as many neurons: X's variates weigh
    assert pwcca(X, Y6) == pytest.approx(_google_pwcca(X, Y6), abs=1e-10)
    assert pwcca(Y6, X) == pytest.approx(_google_pwcca(Y6, X), abs=1e-10)
    assert abs(pwcca(X, Y6) - pwcca(Y6, X)) > 1e-4
    # between the smallest and the largest canonical correlation, 1 on itself
    rho = np.linalg.svd(np.linalg.qr(X - X.mean(0))[0].T @ np.linalg.qr(Y - Y.mean(0))[0],
                        compute_uv=False)
    assert rho.min() <= pwcca(X, Y) <= rho.max()
    assert pwcca(X, 3 * X + 1) == pytest.approx(1.0, abs=1e-12)


# ============================================================ netrep's CKA, platonic's k-NN
def test_netrep_linear_cka_is_the_angle_of_biased_cka():
    """netrep's LinearCKA: angular distance between the centred Gram matrices."""
    from rdx.similarity import biased_linear_cka

    rng = np.random.default_rng(15)
    X, Y = rng.normal(size=(60, 7)), rng.normal(size=(60, 4))
    Y[:, :2] += X[:, :2]
    K = (X - X.mean(0)) @ (X - X.mean(0)).T
    L = (Y - Y.mean(0)) @ (Y - Y.mean(0)).T
    netrep = np.arccos(np.sum(K * L) / (np.linalg.norm(K) * np.linalg.norm(L)))
    assert np.arccos(biased_linear_cka(X, Y)) == pytest.approx(netrep, abs=1e-10)


def test_mutual_knn_equals_the_platonic_code_on_normalised_features():
    """The platonic metrics' mutual_knn, written out: L2-normalised features, inner-product
    neighbours with the diagonal pushed to −1e8, dense masks, mean overlap / k."""
    from rdx.similarity import mutual_knn

    rng = np.random.default_rng(16)
    X = rng.normal(size=(80, 9))
    Y = np.tanh(X @ rng.normal(size=(9, 12))) + 0.5 * rng.normal(size=(80, 12))

    def knn(F, k):
        F = F / np.linalg.norm(F, axis=1, keepdims=True)
        S = F @ F.T
        np.fill_diagonal(S, -1e8)
        return np.argsort(-S, axis=1)[:, :k]

    for k in (1, 5, 10):
        A, B = np.zeros((80, 80)), np.zeros((80, 80))
        rows = np.arange(80)[:, None]
        A[rows, knn(X, k)] = 1.0
        B[rows, knn(Y, k)] = 1.0
        assert mutual_knn(X, Y, k=k) == pytest.approx(((A * B).sum(1) / k).mean(), abs=1e-12)
