"""The similarity measure family (rdx.similarity): formulas, references, invariances,
chunked = dense, calibration and input errors.

Reference values are computed by hand (exact fractions / closed forms in the comments) or
by independent dense implementations written here (textbook Gram matrices, scipy, and
rsatoolbox for RSA).
"""
from __future__ import annotations

import importlib
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist, pdist
from scipy.stats import pearsonr, spearmanr

from rdx.errors import RDXInputError
from rdx.similarity import (
    MEASURES,
    inputs,
    biased_linear_cka,
    calibrate,
    canonical_correlations,
    cknna,
    compute_rdm,
    debiased_linear_cka,
    hsic,
    jaccard_knn,
    kernel_cka,
    mutual_knn,
    mutual_knn_per_image,
    procrustes_distance,
    rbf_bandwidths,
    rbf_cka,
    rsa,
    similarity,
    svcca,
)
from rdx.similarity import cka_kernel
from rdx.similarity import neighbors as nb
from rdx.similarity.calibration import (_PREPARE, CI_METHODS, bootstrap_draws,
                                        half_sample_draws)

rsa_mod = importlib.import_module("rdx.similarity.rdm")


def _pair(seed=0, n=40, p=6, q=5, noise=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    Y = np.tanh(X @ rng.normal(size=(p, q))) + noise * rng.normal(size=(n, q))
    return X, Y


# ============================================================ textbook references
def textbook_hsic_biased(K, L):
    n = len(K)
    H = np.eye(n) - np.ones((n, n)) / n
    return np.trace(K @ H @ L @ H) / (n - 1) ** 2


def textbook_hsic_unbiased(K, L):
    """Song et al. (2012) eq. 5 on zero-diagonal Grams."""
    n = len(K)
    K, L = K.copy(), L.copy()
    np.fill_diagonal(K, 0.0)
    np.fill_diagonal(L, 0.0)
    one = np.ones(n)
    return (np.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2))
            - 2.0 / (n - 2) * (one @ K @ L @ one)) / (n * (n - 3))


def textbook_cka(K, L, debiased):
    h = textbook_hsic_unbiased if debiased else textbook_hsic_biased
    return h(K, L) / np.sqrt(h(K, K) * h(L, L))


def textbook_rbf_gram(X, sigma):
    return np.exp(-cdist(X, X, "sqeuclidean") / (2.0 * sigma ** 2))


def dense_knn(Z, k):
    """Dense float64 cosine k-NN, self excluded, ties by smaller index (stable sort)."""
    Zn = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    S = Zn @ Zn.T
    np.fill_diagonal(S, -np.inf)
    order = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(S, order, 1), S


def dense_neighbourhood_measures(X, Y, k):
    """mutual k-NN, Jaccard and CKNNA from dense n×n masks (the formulas of the paper)."""
    n = len(X)
    ox, _, Sx = dense_knn(X, k)
    oy, _, Sy = dense_knn(Y, k)
    Ax = np.zeros((n, n), bool)
    Ay = np.zeros((n, n), bool)
    np.put_along_axis(Ax, ox, True, 1)
    np.put_along_axis(Ay, oy, True, 1)
    m = (Ax & Ay).sum(1)
    Kx, Ly = Sx.copy(), Sy.copy()
    np.fill_diagonal(Kx, 0.0)
    np.fill_diagonal(Ly, 0.0)
    Kc = Kx - (Kx.sum(1) / (n - 1))[:, None]   # row mean over the other n−1 images
    Lc = Ly - (Ly.sum(1) / (n - 1))[:, None]
    ck = (Kc * Lc * (Ax & Ay)).sum() / np.sqrt((Kc ** 2 * Ax).sum() * (Lc ** 2 * Ay).sum())
    return (m / k).mean(), (m / (2 * k - m)).mean(), ck


# ============================================================ hand-computed formulas
def test_biased_linear_cka_hand_value():
    # 1-D inputs: biased linear CKA = Pearson r². Centred x = (−1.5, −.5, .5, 1.5),
    # y = (−1.75, −.75, .25, 2.25): Σxy = 6.5, Σx² = 5, Σy² = 8.75 → 42.25/43.75 = 169/175.
    X = np.array([[1.0], [2.0], [3.0], [4.0]])
    Y = np.array([[1.0], [2.0], [3.0], [5.0]])
    assert biased_linear_cka(X, Y) == pytest.approx(169 / 175, abs=1e-15)
    assert similarity("cka_linear_biased", X, Y) == pytest.approx(169 / 175, abs=1e-15)


def _fraction_debiased_cka_squared(X, Y):
    """Exact rational CKA_u² (sign kept) from Song's formula on integer data."""
    n = len(X)

    def gram(Z):
        return [[sum(Fraction(a) * b for a, b in zip(Z[i], Z[j])) for j in range(n)]
                for i in range(n)]

    def h(K, L):
        Kt = [[0 if i == j else K[i][j] for j in range(n)] for i in range(n)]
        Lt = [[0 if i == j else L[i][j] for j in range(n)] for i in range(n)]
        tr = sum(Kt[i][j] * Lt[j][i] for i in range(n) for j in range(n))
        sk = sum(map(sum, Kt))
        sl = sum(map(sum, Lt))
        kl1 = sum(sum(Kt[i][j] for j in range(n)) * sum(Lt[i][j] for j in range(n))
                  for i in range(n))
        return tr + sk * sl / ((n - 1) * (n - 2)) - Fraction(2, n - 2) * kl1

    K, L = gram(X), gram(Y)
    hkl = h(K, L)
    return (1 if hkl >= 0 else -1) * hkl ** 2 / (h(K, K) * h(L, L))


def test_debiased_linear_cka_exact_fraction():
    X = [[1, 0], [2, 1], [0, 3], [4, 1], [3, 3], [1, 5]]
    Y = [[2], [1], [4], [0], [3], [5]]
    exact = _fraction_debiased_cka_squared(X, Y)
    got = debiased_linear_cka(np.array(X, float), np.array(Y, float))
    assert math.copysign(got ** 2, got) == pytest.approx(float(exact), abs=1e-13)


def test_rsa_hand_value_spearman_euclidean():
    # 1-D points 0,1,3,6 and 0,2,3,4. Pair distances (01,02,03,12,13,23):
    # X: 1,3,6,2,5,3 → ranks 1,3.5,6,2,5,3.5;  Y: 2,3,4,1,2,1 → ranks 3.5,5,6,1.5,3.5,1.5.
    # Centred ranks dx = (−2.5,0,2.5,−1.5,1.5,0), dy = (0,1.5,2.5,−2,0,−2):
    # Σdxdy = 9.25, Σdx² = 17, Σdy² = 16.5 → r = 9.25/√280.5.
    X = np.array([[0.0], [1.0], [3.0], [6.0]])
    Y = np.array([[0.0], [2.0], [3.0], [4.0]])
    expected = 9.25 / math.sqrt(280.5)
    assert rsa(X, Y, rdm="euclidean", compare="spearman") == pytest.approx(expected, abs=1e-14)
    # Pearson on the raw distances: Σ(x−x̄)(y−ȳ)/√(ΣΣ) with x̄ = 10/3, ȳ = 13/6
    x = np.array([1, 3, 6, 2, 5, 3], float)
    y = np.array([2, 3, 4, 1, 2, 1], float)
    xc, yc = x - 10 / 3, y - 13 / 6
    assert rsa(X, Y, rdm="euclidean", compare="pearson") == pytest.approx(
        (xc @ yc) / math.sqrt((xc @ xc) * (yc @ yc)), abs=1e-14)
    np.testing.assert_allclose(compute_rdm(X, rdm="euclidean"), x, atol=1e-15)


def _on_circle(degrees):
    a = np.deg2rad(np.asarray(degrees, float))
    return np.stack([np.cos(a), np.sin(a)], axis=1)


# angles chosen without ties in angular distance (all gaps < 180°, so cosine order =
# angular order). Nearest neighbours worked out by hand:
#   X at 0,10,30,100,130°:  k=1 → [1,0,1,4,3];  k=2 → {1,2},{0,2},{0,1},{2,4},{2,3}
#   Y at 0,50,40,105,175°:  k=1 → [2,2,1,1,3];  k=2 → {1,2},{0,2},{0,1},{1,2},{1,3}
_CX, _CY = _on_circle([0, 10, 30, 100, 130]), _on_circle([0, 50, 40, 105, 175])


def test_neighbourhood_measures_hand_values():
    # k=1: agree on images 2 and 4 → mutual = Jaccard = 2/5
    assert mutual_knn(_CX, _CY, k=1) == pytest.approx(0.4, abs=1e-15)
    assert jaccard_knn(_CX, _CY, k=1) == pytest.approx(0.4, abs=1e-15)
    # k=2: overlaps 2,2,2,1,1 → mutual 8/10; Jaccard (1+1+1+1/3+1/3)/5 = 11/15
    assert mutual_knn(_CX, _CY, k=2) == pytest.approx(0.8, abs=1e-15)
    assert jaccard_knn(_CX, _CY, k=2) == pytest.approx(11 / 15, abs=1e-15)
    np.testing.assert_allclose(mutual_knn_per_image(_CX, _CY, k=2), [1, 1, 1, .5, .5])


def test_cknna_hand_value():
    # k=1: shared neighbour pairs (2→1) and (4→3). Kernel = cos of the angle difference;
    # μ_i = mean cos to the other 4 images.
    ax, ay = np.deg2rad([0, 10, 30, 100, 130]), np.deg2rad([0, 50, 40, 105, 175])

    def mu(a, i):
        return sum(math.cos(a[i] - a[j]) for j in range(5) if j != i) / 4

    def c(a, i, j):
        return math.cos(a[i] - a[j]) - mu(a, i)

    nnx, nny = [1, 0, 1, 4, 3], [2, 2, 1, 1, 3]
    num = c(ax, 2, 1) * c(ay, 2, 1) + c(ax, 4, 3) * c(ay, 4, 3)
    den = math.sqrt(sum(c(ax, i, nnx[i]) ** 2 for i in range(5))
                    * sum(c(ay, i, nny[i]) ** 2 for i in range(5)))
    assert cknna(_CX, _CY, k=1) == pytest.approx(num / den, abs=1e-13)
    assert cknna(_CX, _CX, k=2) == pytest.approx(1.0, abs=1e-14)
    # no shared neighbour pair at all → α ≡ 0 → CKNNA = 0
    X = _on_circle([0, 10, 25, 45, 70])     # NN: 1,0,1,2,3
    Y = _on_circle([0, 60, 12, 5, 100])     # NN: 3,4,3,0,1
    assert mutual_knn(X, Y, k=1) == 0.0 and cknna(X, Y, k=1) == 0.0


def test_procrustes_hand_value():
    # X̄ = X/2, Ȳ = Y/√10, XᵀY = diag(2, 4) → ‖X̄ᵀȲ‖_* = 6/(2√10) = 3/√10.
    X = np.array([[1.0, 0], [-1, 0], [0, 1], [0, -1]])
    Y = np.array([[1.0, 0], [-1, 0], [0, 2], [0, -2]])
    nuc = 3 / math.sqrt(10)
    assert procrustes_distance(X, Y) == pytest.approx(2 - 2 * nuc, abs=1e-14)
    assert procrustes_distance(X, Y, kind="euclidean") == pytest.approx(
        math.sqrt(2 - 2 * nuc), abs=1e-14)
    assert procrustes_distance(X, Y, kind="angular") == pytest.approx(math.acos(nuc),
                                                                      abs=1e-14)
    # a rotated, scaled, shifted copy is at distance 0
    R = np.array([[0.6, -0.8], [0.8, 0.6]])
    assert procrustes_distance(X, 3 * X @ R + 7) == pytest.approx(0.0, abs=1e-14)


def test_svcca_hand_value():
    # span(X) = span{(1,−1,0,0), (0,0,1,−1)}; y ∝ (1,0,−1,0) has projection of norm 1/√2
    # on it → the single canonical correlation is 1/√2.
    X = np.array([[1.0, 0], [-1, 0], [0, 1], [0, -1]])
    Y = np.array([[1.0], [0], [-1], [0]])
    assert svcca(X, Y) == pytest.approx(1 / math.sqrt(2), abs=1e-14)
    assert svcca(X, X[:, :1]) == pytest.approx(1.0, abs=1e-14)   # Y's column lies in span(X)


def test_svcca_matches_covariance_whitening_cca():
    """Independent CCA (Google's cca_core recipe: Σxx^{-1/2} Σxy Σyy^{-1/2}) on the
    SVD-truncated activations, with the 99 % variance rule done by numpy."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 6)) * np.array([5, 4, 3, 2, 1, 0.05])
    Y = np.hstack([X[:, :3] @ rng.normal(size=(3, 3)), rng.normal(size=(200, 3))])

    def truncate(Z):
        Zc = Z - Z.mean(0)
        U, s, _ = np.linalg.svd(Zc, full_matrices=False)
        r = int(np.argmax(np.cumsum(s ** 2) / np.sum(s ** 2) >= 0.99)) + 1
        return U[:, :r] * s[:r]

    A, B = truncate(X), truncate(Y)
    assert A.shape[1] == 5            # the 0.05-scale direction is dropped

    def inv_sqrt(C):
        w, V = np.linalg.eigh(C)
        return V @ np.diag(w ** -0.5) @ V.T

    C = np.cov(A.T, B.T)
    p = A.shape[1]
    M = inv_sqrt(C[:p, :p]) @ C[:p, p:] @ inv_sqrt(C[p:, p:])
    rho = np.linalg.svd(M, compute_uv=False)
    np.testing.assert_allclose(canonical_correlations(X, Y), rho, atol=1e-10)
    assert svcca(X, Y) == pytest.approx(rho.mean(), abs=1e-10)


def test_rbf_cka_hand_values_on_separated_clusters():
    """Points 100 apart with σ = 1: exp(−5000) = 0, so the kernels are exact 0/1 block
    matrices. K = blocks {01, 23} = (11ᵀ + vvᵀ)/2 with v = (1,1,−1,−1), HKH = vvᵀ/2.
    * L = blocks {02, 13}: HLH = wwᵀ/2, w = (1,−1,1,−1), vᵀw = 0 → biased CKA 0.
      U-centring (n = 4): U(K) = 2/3 on pairs 01, 23 and −1/3 elsewhere, U(L) likewise on
      02, 13 → ⟨U(K), U(L)⟩ = 2(−4·2/9 + 2/9) = −4/3, ⟨U(K), U(K)⟩ = 2(8/9 + 4/9) = 8/3
      → debiased CKA −1/2.
    * L = blocks {012, 3}: ⟨HKH, HLH⟩ = vᵀLv/2 = 1, ‖HKH‖_F = 2, ‖HLH‖_F = 3/2 → 1/3.
    """
    X = np.array([[0.0], [0.0], [100.0], [100.0]])
    Y = np.array([[0.0], [100.0], [0.0], [100.0]])
    Z = np.array([[0.0], [0.0], [0.0], [100.0]])
    kw = {"sigma": 1.0, "sigma_mode": "absolute"}
    assert rbf_cka(X, Y, debiased=False, **kw) == pytest.approx(0.0, abs=1e-15)
    assert rbf_cka(X, Y, debiased=True, **kw) == pytest.approx(-0.5, abs=1e-15)
    assert rbf_cka(X, Z, debiased=False, **kw) == pytest.approx(1 / 3, abs=1e-15)
    with pytest.raises(RDXInputError, match="not positive"):   # U(L) ≡ 0 for {012, 3}
        rbf_cka(X, Z, debiased=True, **kw)


# ============================================================ CKA references
@pytest.mark.parametrize("debiased", [True, False])
@pytest.mark.parametrize("mode,sigma", [("absolute", 0.9), ("absolute", 3.0),
                                        ("median_fraction", 0.5),
                                        ("median_fraction", 1.0)])
def test_rbf_cka_equals_textbook_gram_computation(debiased, mode, sigma):
    X, Y = _pair(1, n=30, p=4, q=7)
    if mode == "absolute":
        sx = sy = sigma
    else:  # σ = f·√median over pairs i<j of the squared distances
        sx = sigma * math.sqrt(np.median(pdist(X, "sqeuclidean")))
        sy = sigma * math.sqrt(np.median(pdist(Y, "sqeuclidean")))
        assert rbf_bandwidths(X, Y, sigma=sigma, sigma_mode=mode) == pytest.approx((sx, sy))
    ref = textbook_cka(textbook_rbf_gram(X, sx), textbook_rbf_gram(Y, sy), debiased)
    got = rbf_cka(X, Y, sigma=sigma, sigma_mode=mode, debiased=debiased)
    assert got == pytest.approx(ref, abs=1e-12)
    assert similarity("cka_rbf", X, Y, sigma=sigma, sigma_mode=mode,
                      debiased=debiased) == pytest.approx(ref, abs=1e-12)


def test_hsic_estimators_equal_textbook_and_gram_cka_inputs_untouched():
    X, Y = _pair(2, n=12, p=3, q=3)
    K, L = textbook_rbf_gram(X, 1.3), X @ X.T + 0.5 * (Y @ Y.T)
    K0, L0 = K.copy(), L.copy()
    assert hsic(K, L) == pytest.approx(textbook_hsic_unbiased(K, L), abs=1e-14)
    assert hsic(K, L, debiased=False) == pytest.approx(textbook_hsic_biased(K, L), abs=1e-14)
    assert kernel_cka(K, L) == pytest.approx(textbook_cka(K, L, True), abs=1e-13)
    np.testing.assert_array_equal(K, K0)
    np.testing.assert_array_equal(L, L0)


@pytest.mark.parametrize("n,p,q", [(50, 5, 8), (9, 20, 30)])
def test_linear_feature_space_form_equals_gram_form(n, p, q):
    X, Y = _pair(4, n=n, p=p, q=q)
    X = X + 3.0        # uncentred input: the feature form centres, the Gram form must not care
    for debiased, fn in ((True, debiased_linear_cka), (False, biased_linear_cka)):
        gram = textbook_cka(X @ X.T, Y @ Y.T, debiased) if debiased else \
            textbook_cka((X - X.mean(0)) @ (X - X.mean(0)).T, Y @ Y.T, False)
        assert fn(X, Y) == pytest.approx(gram, abs=1e-11)
        assert kernel_cka(X @ X.T, Y @ Y.T, debiased=debiased) == pytest.approx(
            fn(X, Y), abs=1e-11)


def test_simcons_preset_is_absolute_sigma_on_unit_norm_features():
    X, Y = _pair(5, n=25, p=6, q=6)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Yn = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    from rdx.similarity import SIMCONS_RBF_PRESET
    ref = textbook_cka(textbook_rbf_gram(Xn, 0.4), textbook_rbf_gram(Yn, 0.4), True)
    assert rbf_cka(Xn, Yn, **SIMCONS_RBF_PRESET) == pytest.approx(ref, abs=1e-12)


def test_rbf_cka_torch_input_is_differentiable():
    X, Y = _pair(6, n=10, p=3, q=2)
    Xt = torch.tensor(X, requires_grad=True)
    c = rbf_cka(Xt, torch.tensor(Y))
    assert isinstance(c, torch.Tensor) and c.requires_grad
    c.backward()
    assert torch.isfinite(Xt.grad).all() and Xt.grad.abs().sum() > 0
    assert float(c.detach()) == pytest.approx(rbf_cka(X, Y), abs=1e-12)


def test_blocked_kernels_equal_one_block(monkeypatch):
    X, Y = _pair(7, n=600, p=5, q=5)
    Zt = torch.tensor(X)
    ref = Zt @ Zt.T
    monkeypatch.setattr(inputs, "block_rows", lambda *a, **k: 7)   # 256-row strips
    G = inputs.symmetric_gram(Zt)
    torch.testing.assert_close(G, ref, rtol=0, atol=1e-12)
    assert torch.equal(G, G.T)
    one_block = rbf_cka(X[:80], Y[:80])
    monkeypatch.setattr(cka_kernel, "block_rows", lambda *a, **k: 3)
    assert rbf_cka(X[:80], Y[:80]) == pytest.approx(one_block, abs=1e-13)


# ============================================================ RSA vs rsatoolbox
def _rsatoolbox():
    return pytest.importorskip(
        "rsatoolbox", reason="rsatoolbox is a test dependency (pip install rsatoolbox); "
                             "without it the RSA reference test cannot run")


@pytest.mark.parametrize("compare", ["spearman", "pearson"])
@pytest.mark.parametrize("rdm", ["correlation", "cosine", "euclidean"])
def test_rsa_equals_rsatoolbox(rdm, compare):
    _rsatoolbox()
    from rsatoolbox.data import Dataset
    from rsatoolbox.rdm import RDMs, calc_rdm
    from rsatoolbox.rdm import compare as rsa_compare
    X, Y = _pair(8, n=35, p=9, q=4)

    def toolbox_rdm(Z):
        if rdm == "correlation":
            return calc_rdm(Dataset(Z), method="correlation")
        if rdm == "euclidean":    # rsatoolbox: squared distance / d → Euclidean distance
            v = calc_rdm(Dataset(Z), method="euclidean").get_vectors()[0]
            return RDMs(np.sqrt(v * Z.shape[1])[None, :])
        return RDMs(pdist(Z, "cosine")[None, :])   # rsatoolbox has no cosine RDM

    ref = float(rsa_compare(toolbox_rdm(X), toolbox_rdm(Y),
                            method="spearman" if compare == "spearman" else "corr")[0, 0])
    assert rsa(X, Y, rdm=rdm, compare=compare) == pytest.approx(ref, abs=1e-6)
    np.testing.assert_allclose(compute_rdm(X, rdm=rdm), toolbox_rdm(X).get_vectors()[0],
                               atol=1e-12)


def test_rsa_ties_equal_rsatoolbox():
    """Small-integer features: many exactly equidistant pairs. rsatoolbox's squared
    Euclidean RDM of integers is exact, so its ranks are the exact tie ranks; ours come from
    centred (rounded) data and must still tie them (TIE_RTOL)."""
    _rsatoolbox()
    from rsatoolbox.data import Dataset
    from rsatoolbox.rdm import calc_rdm
    from rsatoolbox.rdm import compare as rsa_compare
    rng = np.random.default_rng(8)
    X = rng.integers(-2, 3, size=(35, 4)).astype(float)
    Y = rng.integers(-2, 3, size=(35, 3)).astype(float)
    rx, ry = (calc_rdm(Dataset(Z), method="euclidean") for Z in (X, Y))
    assert len(np.unique(rx.get_vectors())) < 60     # 595 pairs, few distinct values
    ref = float(rsa_compare(rx, ry, method="spearman")[0, 0])
    assert rsa(X, Y, rdm="euclidean") == pytest.approx(ref, abs=1e-12)
    # with exact-only ties the rounding noise of the centred data changes ρ
    v = rsa_mod.rdm_vector(torch.tensor(X), "euclidean")
    exact_only = rsa_mod.average_ranks(v, rtol=0.0)
    assert not torch.equal(exact_only, rsa_mod.average_ranks(v))


def test_average_ranks_equal_scipy_rankdata():
    from scipy.stats import rankdata
    rng = np.random.default_rng(21)
    for v in (rng.normal(size=500), rng.integers(0, 6, size=500).astype(float),
              np.array([2.0, 1, 2, 0, 1]), np.array([4.0, 4, 4])):
        t = torch.tensor(v)
        np.testing.assert_array_equal(rsa_mod.average_ranks(t, rtol=0.0).numpy(),
                                      rankdata(v))
        np.testing.assert_array_equal(t.numpy(), v)      # input untouched
    # near-ties below TIE_RTOL of the largest value are one group
    v = torch.tensor([1.0, 1.0 + 1e-15, 2.0, 1.0 - 1e-15])
    np.testing.assert_array_equal(rsa_mod.average_ranks(v).numpy(), [2, 2, 4, 2])


def test_rsa_blocked_equals_scipy(monkeypatch):
    X, Y = _pair(9, n=70, p=5, q=6)
    monkeypatch.setattr(rsa_mod, "block_rows", lambda *a, **k: 1)   # 64-row blocks
    for rdm, metric in (("correlation", "correlation"), ("euclidean", "euclidean")):
        assert rsa(X, Y, rdm=rdm) == pytest.approx(
            spearmanr(pdist(X, metric), pdist(Y, metric))[0], abs=1e-12)
        assert rsa(X, Y, rdm=rdm, compare="pearson") == pytest.approx(
            pearsonr(pdist(X, metric), pdist(Y, metric))[0], abs=1e-12)


# ============================================================ chunked = dense
@pytest.mark.parametrize("margin", [16, 0])
@pytest.mark.parametrize("k", [1, 4, 10, 59])
def test_chunked_knn_equals_dense(monkeypatch, k, margin):
    """Small blocks (and margin 0, which sends every row to the exact fallback) give the
    same neighbours, similarities and measures as dense n×n computations."""
    X, Y = _pair(10, n=60, p=7, q=5, noise=0.7)
    monkeypatch.setattr(nb, "block_rows", lambda *a, **kw: 7)
    monkeypatch.setattr(nb, "BLOCK_BYTES", 300)
    monkeypatch.setattr(nb, "CANDIDATE_MARGIN", margin)
    idx, sims, _ = nb.knn_cosine(torch.tensor(X), k)
    order, vals, _ = dense_knn(X, k)
    np.testing.assert_array_equal(idx.numpy(), order)
    np.testing.assert_allclose(sims.numpy(), vals, atol=1e-14)
    m_ref, j_ref, c_ref = dense_neighbourhood_measures(X, Y, k)
    assert mutual_knn(X, Y, k=k) == pytest.approx(m_ref, abs=1e-14)
    assert jaccard_knn(X, Y, k=k) == pytest.approx(j_ref, abs=1e-14)
    assert cknna(X, Y, k=k) == pytest.approx(c_ref, abs=1e-12)


def test_knn_ties_broken_by_index_whatever_the_blocks(monkeypatch):
    """Rows with four ±1 entries: cosines are exact multiples of 1/4 and heavily tied."""
    rng = np.random.default_rng(11)
    Z = np.zeros((120, 12))
    for r in range(len(Z)):
        Z[r, rng.choice(12, 4, replace=False)] = rng.choice([-1.0, 1.0], 4)
    order, _, _ = dense_knn(Z, 6)
    for rows, margin in ((1000, 16), (5, 16), (5, 1)):
        monkeypatch.setattr(nb, "block_rows", lambda *a, _r=rows, **kw: _r)
        monkeypatch.setattr(nb, "CANDIDATE_MARGIN", margin)
        idx, _, _ = nb.knn_cosine(torch.tensor(Z), 6)
        np.testing.assert_array_equal(idx.numpy(), order)


# ============================================================ invariances
_PARAM_SETS = {name: [{}] for name in MEASURES}
_PARAM_SETS["cka_rbf"] = [{}, {"debiased": False}]
_PARAM_SETS["rsa"] = [{}, {"compare": "pearson"}]
_PARAM_SETS["mutual_knn"] = [{"k": 5}]
_PARAM_SETS["cknna"] = [{"k": 5}]
_PARAM_SETS["jaccard_knn"] = [{"k": 5}]


def _transforms(X, rng):
    n, d = X.shape
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return {"orthogonal": X @ Q,
            "isotropic_scaling": 7.3 * X,
            "translation": X + rng.normal(size=d) * 5,
            "per_image_scaling": X * rng.uniform(0.2, 5.0, size=(n, 1)),
            "per_image_shift": X + rng.normal(size=(n, 1)),
            "feature_permutation": X[:, rng.permutation(d)]}


@pytest.mark.parametrize("name", list(MEASURES))
def test_invariances_declared_in_metadata_hold(name):
    m = MEASURES[name]
    rng = np.random.default_rng(12)
    X, Y = _pair(12, n=50, p=6, q=6)
    for params in _PARAM_SETS[name]:
        ref = similarity(name, X, Y, **params)
        for tag, Z in _transforms(X, rng).items():
            if tag in m.invariances:
                assert similarity(name, Z, Y, **params) == pytest.approx(ref, abs=1e-9), tag
        if m.symmetric:
            assert similarity(name, Y, X, **params) == pytest.approx(ref, abs=1e-10)
        best = 1.0 if m.higher_is_more_similar else 0.0
        assert similarity(name, X, X, **params) == pytest.approx(best, abs=1e-10)
        # ... and an undeclared invariance is really absent for the translation-sensitive
        if "translation" not in m.invariances:
            shifted = _transforms(X, rng)["translation"]
            assert abs(similarity(name, shifted, Y, **params) - ref) > 1e-6


def test_inputs_are_not_modified():
    X, Y = _pair(20, n=30, p=5, q=4)
    Xt, Yt = torch.tensor(X), torch.tensor(Y)
    for name in MEASURES:
        params = {"k": 5} if "k" in MEASURES[name].params else {}
        for A, B in ((X, Y), (Xt, Yt)):
            a0, b0 = A.copy() if isinstance(A, np.ndarray) else A.clone(), \
                B.copy() if isinstance(B, np.ndarray) else B.clone()
            similarity(name, A, B, **params)
            calibrate(name, A, B, permutations=2, bootstrap=2, **params)
            assert (A == a0).all() and (B == b0).all(), name


def test_cka_of_a_representation_with_itself_is_one_for_every_variant():
    X, _ = _pair(13, n=30, p=5, q=2)
    for fn in (debiased_linear_cka, biased_linear_cka):
        assert fn(X, X) == pytest.approx(1.0, abs=1e-12)
    for debiased in (True, False):
        for mode, s in (("median_fraction", 0.4), ("absolute", 2.0)):
            assert rbf_cka(X, X, sigma=s, sigma_mode=mode,
                           debiased=debiased) == pytest.approx(1.0, abs=1e-12)
    # absolute σ is not scale invariant, the median fraction is
    assert rbf_cka(3 * X, X, sigma=2.0, sigma_mode="absolute") < 0.999
    assert rbf_cka(3 * X, X, sigma=0.7) == pytest.approx(1.0, abs=1e-12)


# ============================================================ calibration
def test_prepared_permutations_equal_recomputation():
    X, Y = _pair(14, n=25, p=4, q=5)
    rng = np.random.default_rng(14)
    for name, m in MEASURES.items():
        prep = _PREPARE[name](X, Y, **m.params)
        assert prep.value == pytest.approx(similarity(name, X, Y), abs=1e-13)
        for _ in range(3):
            perm = rng.permutation(len(X))
            assert prep.permuted(perm) == pytest.approx(similarity(name, X, Y[perm]),
                                                        abs=1e-12), name


def test_pvalues_are_uniformish_under_the_null():
    """Independent random features, 40 seeds: p ≤ 0.1 about 10 % of the time, mean ≈ 0.5."""
    pvals = {name: [] for name in MEASURES}
    for seed in range(40):
        rng = np.random.default_rng(1000 + seed)
        X, Y = rng.normal(size=(30, 5)), rng.normal(size=(30, 4))
        for name in MEASURES:
            params = {"k": 5} if "k" in MEASURES[name].params else {}
            res = calibrate(name, X, Y, permutations=39, seed=seed, **params)
            pvals[name].append(res["p_value"])
    for name, ps in pvals.items():
        ps = np.array(ps)
        assert ((ps >= 1 / 40) & (ps <= 1)).all()
        assert (ps <= 0.1).sum() <= 9, (name, np.sort(ps))     # Binomial(40, 0.1): P(≥10) < 1 %
        assert 0.3 < ps.mean() < 0.7, (name, ps.mean())


def test_pvalue_is_minimal_on_identical_features():
    X, _ = _pair(15, n=40, p=6, q=1)
    for name in MEASURES:
        res = calibrate(name, X, X.copy(), permutations=49, seed=3)
        assert res["p_value"] == pytest.approx(1 / 50), name
        assert res["value_minus_null"] > 0 if MEASURES[name].higher_is_more_similar \
            else res["value_minus_null"] < 0


def test_calibrate_output_is_seeded_json_ready_and_streams_are_independent():
    X, Y = _pair(16, n=40, p=5, q=5)
    a = calibrate("cka_linear", X, Y, permutations=20, bootstrap=30, seed=7)
    b = calibrate("cka_linear", X, Y, permutations=20, bootstrap=30, seed=7)
    assert a == b
    json.dumps(a)
    assert set(a) >= {"value", "p_value", "null_mean", "null_std", "value_minus_null",
                      "ci95", "higher_is_more_similar", "params", "n_permutations",
                      "n_bootstrap"}
    assert a["value"] == pytest.approx(debiased_linear_cka(X, Y), abs=1e-14)
    assert a["value_minus_null"] == pytest.approx(a["value"] - a["null_mean"])
    lo, hi = a["ci95"]
    assert lo < a["value"] < hi
    c = calibrate("cka_linear", X, Y, permutations=5, bootstrap=30, seed=7)
    assert c["ci95"] == a["ci95"] and c["p_value"] != a["p_value"]
    d = calibrate("cka_linear", X, Y, permutations=20, bootstrap=30, seed=8)
    assert d["ci95"] != a["ci95"]
    e = calibrate("rsa", X, Y)
    assert e["p_value"] is None and e["ci95"] is None and e["null_mean"] is None
    assert e["params"] == {"rdm": "correlation", "compare": "spearman"}
    assert calibrate("procrustes", X, Y, permutations=1)["null_std"] is None


def test_bootstrap_draws_match_hand_resampling():
    """Generic measures recompute on X[idx], Y[idx]; kNN measures keep the graphs and weight
    image scores by draw counts; RSA drops pairs of copies of the same image."""
    X, Y = _pair(17, n=30, p=4, q=4)
    cal = {name: calibrate(name, X, Y, bootstrap=4, seed=2, **(
        {"k": 4} if "k" in MEASURES[name].params else {})) for name in
        ("svcca", "mutual_knn", "rsa")}
    draws = list(bootstrap_draws(30, 4, 2))
    assert len({tuple(d) for d in draws}) == 4
    # svcca: half sampling — 15 distinct images per draw, percentiles of the half-sample
    # values minus their mean, added to the full-sample value (scale √(15/15) = 1)
    halves = list(half_sample_draws(30, 4, 2))
    assert all(len(h) == len(np.unique(h)) == 15 for h in halves)
    vals = np.array([svcca(X[i], Y[i]) for i in halves])
    expect = svcca(X, Y) + np.percentile(vals, [2.5, 97.5]) - vals.mean()
    assert cal["svcca"]["ci95"] == pytest.approx(list(expect))
    assert set(CI_METHODS) == set(MEASURES)           # every measure has an interval kind
    assert cal["svcca"]["ci_method"] == "half_sampling"
    assert cal["rsa"]["ci_method"] == "copy_pairs_excluded"
    assert cal["mutual_knn"]["ci_method"] == "fixed_graph"
    # odd n: d = n − m images left out, the spread is scaled by √(m/d)
    odd = calibrate("cka_linear", X[:29], Y[:29], bootstrap=5, seed=1)
    vals = np.array([debiased_linear_cka(X[:29][i], Y[:29][i])
                     for i in half_sample_draws(29, 5, 1)])
    expect = (debiased_linear_cka(X[:29], Y[:29])
              + np.sqrt(14 / 15) * (np.percentile(vals, [2.5, 97.5]) - vals.mean()))
    assert odd["ci95"] == pytest.approx(list(expect))
    # mutual kNN: Σ c_i a_i / n with the full-sample per-image agreement
    a = mutual_knn_per_image(X, Y, k=4)
    vals = [np.bincount(i, minlength=30) @ a / 30 for i in draws]
    assert cal["mutual_knn"]["ci95"] == pytest.approx(list(np.percentile(vals, [2.5, 97.5])))
    assert min(vals) < max(vals)
    # RSA: Spearman over pairs (a, b) of draw positions whose source images differ
    vals = []
    for i in draws:
        aa, bb = np.triu_indices(30, 1)
        keep = i[aa] != i[bb]
        # rounded so that the copies' equal dissimilarities tie exactly, as in rsa()
        dx = np.round(1 - np.corrcoef(X[i])[aa, bb][keep], 12)
        dy = np.round(1 - np.corrcoef(Y[i])[aa, bb][keep], 12)
        vals.append(spearmanr(dx, dy)[0])
    assert cal["rsa"]["ci95"] == pytest.approx(list(np.percentile(vals, [2.5, 97.5])),
                                               abs=1e-10)


def test_half_sampling_interval_matches_the_sampling_spread():
    """The interval's width is that of the full-sample value's sampling distribution
    (Monte Carlo over independent datasets), and it covers the mean value."""
    n, p = 120, 5
    w1, w2 = np.random.default_rng(0).standard_normal((2, 3, p))

    def draw(seed):
        r = np.random.default_rng(seed)
        Z = r.standard_normal((n, 3))
        return Z @ w1 + r.standard_normal((n, p)), Z @ w2 + r.standard_normal((n, p))

    values = [debiased_linear_cka(*draw(1000 + i)) for i in range(300)]
    sd, mean = np.std(values), np.mean(values)
    ratios, covered = [], 0
    for i in range(30):
        lo, hi = calibrate("cka_linear", *draw(i), bootstrap=100, seed=i)["ci95"]
        ratios.append((hi - lo) / (2 * 1.96 * sd))
        covered += lo <= mean <= hi
    assert 0.75 < np.median(ratios) < 1.3
    assert covered >= 24


@pytest.mark.parametrize("name", ["cka_linear", "cka_linear_biased", "cka_rbf",
                                  "procrustes", "svcca"])
def test_interval_of_unrelated_representations_contains_the_value(name):
    """With-replacement resampling pairs copies of images and put these measures' interval
    entirely above (below, for procrustes) the value of unrelated representations."""
    r = np.random.default_rng(5)
    X, Y = r.standard_normal((200, 32)), r.standard_normal((200, 32))
    res = calibrate(name, X, Y, bootstrap=60, seed=0)
    lo, hi = res["ci95"]
    assert lo < res["value"] < hi and res["ci_method"] == "half_sampling"


# ============================================================ bad input
@pytest.mark.parametrize("name", list(MEASURES))
def test_bad_inputs_raise_clear_errors(name):
    X, Y = _pair(18, n=20, p=4, q=3)
    with pytest.raises(RDXInputError, match="at least 4"):
        similarity(name, X[:3], Y[:3])
    with pytest.raises(RDXInputError, match="constant"):
        similarity(name, np.ones_like(X), Y)
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(RDXInputError, match="NaN"):
        similarity(name, Xn, Y)
    with pytest.raises(RDXInputError, match="different numbers of images"):
        similarity(name, X, Y[:-1])
    with pytest.raises(RDXInputError, match="2-D"):
        similarity(name, X[:, 0], Y)
    with pytest.raises(RDXInputError, match="no parameter"):
        similarity(name, X, Y, bogus=1)
    if "k" in MEASURES[name].params:
        with pytest.raises(RDXInputError, match="k=20"):
            similarity(name, X, Y, k=20)
        with pytest.raises(RDXInputError, match="positive integer"):
            similarity(name, X, Y, k=0)
        Xz = X.copy()
        Xz[5] = 0.0
        with pytest.raises(RDXInputError, match="zero vector"):
            similarity(name, Xz, Y)
    with pytest.raises(RDXInputError, match="non-negative integer"):
        calibrate(name, X, Y, permutations=-1)


def test_bad_parameters_raise_clear_errors():
    X, Y = _pair(19, n=20, p=4, q=3)
    with pytest.raises(RDXInputError, match="unknown similarity measure"):
        similarity("cka", X, Y)
    with pytest.raises(RDXInputError, match="sigma_mode"):
        similarity("cka_rbf", X, Y, sigma_mode="median")
    with pytest.raises(RDXInputError, match="sigma must be a positive"):
        rbf_cka(X, Y, sigma=0.0)
    with pytest.raises(RDXInputError, match="not positive"):    # σ ≪ distances: K ≈ I
        rbf_cka(X, Y, sigma=1e-6, sigma_mode="absolute")
    with pytest.raises(RDXInputError, match="rdm="):
        rsa(X, Y, rdm="mahalanobis")
    with pytest.raises(RDXInputError, match="compare="):
        rsa(X, Y, compare="kendall")
    Xc = X.copy()
    Xc[2] = 3.0                   # one image with equal features: correlation undefined
    with pytest.raises(RDXInputError, match="zero variance"):
        rsa(Xc, Y)
    assert np.isfinite(rsa(Xc, Y, rdm="euclidean"))
    with pytest.raises(RDXInputError, match="keep"):
        svcca(X, Y, keep=1.5)
    with pytest.raises(RDXInputError, match="kind="):
        procrustes_distance(X, Y, kind="cosine")
    with pytest.raises(RDXInputError, match="seed"):
        calibrate("rsa", X, Y, seed=-3)


@pytest.mark.parametrize("debiased", [True, False])
def test_linear_cka_permutations_in_kernel_form_equal_the_cross_term(debiased):
    """With fewer images than feature pairs the permutation null of linear CKA runs on the
    n×n centred Gram matrices; every permuted value equals the feature-space cross term."""
    import torch

    from rdx.similarity import cka as C

    rng = np.random.default_rng(3)
    n, p, q = 40, 30, 20                       # n·8 < p·q: the kernel form is taken
    X = rng.standard_normal((n, p))
    Y = X[:, :q] + 0.5 * rng.standard_normal((n, q))
    prep = C._LinearCKAPrepared(X, Y, debiased)
    for _ in range(5):
        perm = rng.permutation(n)
        t = torch.as_tensor(perm)
        got = prep.permuted(perm)
        assert prep._kernels is not None
        assert got == pytest.approx(prep._cross(prep.Y[t], t), rel=1e-10, abs=1e-12)
    # and the identity permutation gives the measure itself
    assert prep.permuted(np.arange(n)) == pytest.approx(prep.value, rel=1e-10)


@pytest.mark.parametrize("rdm,compare", [("correlation", "spearman"), ("euclidean", "spearman"),
                                         ("correlation", "pearson"), ("euclidean", "cosine"),
                                         ("mean_squared_euclidean", "kendall_tau_a"),
                                         ("euclidean", "kendall_tau_a")])
def test_rsa_bootstrap_from_the_sorted_rdms_equals_rebuilding_them(rdm, compare):
    """The prepared RSA's bootstrap (weights c_a·c_b on the original pairs, ranks from one
    sort) equals rsa_bootstrap, which rebuilds and re-ranks the resampled RDMs — also with
    the many exact ties of integer-valued features."""
    from rdx.similarity.rdm import prepare_rsa, rsa_bootstrap

    rng = np.random.default_rng(11)
    X = np.round(rng.standard_normal((30, 12)) * 2)
    Y = np.round(X @ rng.standard_normal((12, 9)) + rng.standard_normal((30, 9)))
    prep = prepare_rsa(X, Y, rdm=rdm, compare=compare)
    for _ in range(6):
        idx = rng.integers(0, 30, 30)
        assert prep.bootstrap(idx) == pytest.approx(
            rsa_bootstrap(X, Y, idx, rdm=rdm, compare=compare), abs=1e-12)
    with pytest.raises(RDXInputError, match="2 image pairs"):
        prep.bootstrap(np.zeros(30, dtype=int))          # one image drawn 30 times
