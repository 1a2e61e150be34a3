"""Debiased linear CKA and the CKA-aligned linear maps (aligned mode)."""
import numpy as np
import pytest
import torch

from rdx.errors import RDXInputError
from rdx.method.alignment import align_pair, learn_alignment
from rdx.similarity import biased_linear_cka, debiased_linear_cka


def textbook_debiased_cka(X, Y):
    """Direct n×n U-statistic HSIC (Song et al. 2012) on uncentred linear Grams, float64."""
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    n = X.shape[0]
    one = np.ones(n)

    def hsic(K, L):
        K, L = K.copy(), L.copy()
        np.fill_diagonal(K, 0.0)
        np.fill_diagonal(L, 0.0)
        return (np.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2))
                - 2.0 / (n - 2) * (one @ K @ L @ one)) / (n * (n - 3))

    K, L = X @ X.T, Y @ Y.T
    return hsic(K, L) / np.sqrt(hsic(K, K) * hsic(L, L))


def _pair(seed=0, n=80, p=6, q=9, offset=2.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p)) + offset
    Y = np.tanh(X @ rng.normal(size=(p, q))) + 0.3 * rng.normal(size=(n, q)) - offset
    return X, Y


# ------------------------------------------------------------------ CKA
@pytest.mark.parametrize("seed,n,p,q", [(0, 80, 6, 9), (1, 5, 3, 2), (2, 40, 50, 1)])
def test_debiased_cka_matches_textbook(seed, n, p, q):
    X, Y = _pair(seed, n, p, q)
    got = debiased_linear_cka(X, Y)
    assert isinstance(got, float)
    assert got == pytest.approx(textbook_debiased_cka(X, Y), abs=1e-10)


def test_torch_input_gives_differentiable_float64_scalar():
    X, Y = _pair()
    Xt = torch.tensor(X, dtype=torch.float32, requires_grad=True)
    c = debiased_linear_cka(Xt, torch.tensor(Y))
    assert c.dtype == torch.float64 and c.ndim == 0 and c.requires_grad
    c.backward()
    assert Xt.grad is not None and torch.isfinite(Xt.grad).all()
    assert float(c.detach()) == pytest.approx(textbook_debiased_cka(np.float32(X), Y), abs=1e-6)


def test_cka_self_is_one_and_invariances():
    X, Y = _pair(3, n=60, p=7, q=7)
    assert debiased_linear_cka(X, X) == pytest.approx(1.0, abs=1e-12)
    assert biased_linear_cka(X, X) == pytest.approx(1.0, abs=1e-12)
    Q, _ = np.linalg.qr(np.random.default_rng(4).normal(size=(7, 7)))
    ref_d, ref_b = debiased_linear_cka(X, Y), biased_linear_cka(X, Y)
    for Z in (X @ Q, 3.7 * X, X @ Q * 1e-3 + 5.0):
        assert debiased_linear_cka(Z, Y) == pytest.approx(ref_d, abs=1e-10)
        assert biased_linear_cka(Z, Y) == pytest.approx(ref_b, abs=1e-10)
    assert debiased_linear_cka(Y, X) == pytest.approx(ref_d, abs=1e-12)


def test_debiased_near_zero_on_independent_features_biased_is_not():
    rng = np.random.default_rng(5)
    X, Y = rng.normal(size=(500, 20)), rng.normal(size=(500, 20))
    assert abs(debiased_linear_cka(X, Y)) < 0.02
    assert biased_linear_cka(X, Y) > 0.025  # ≈ d/n bias
    # the bias grows with width/n; the debiased estimate does not
    X, Y = rng.normal(size=(500, 200)), rng.normal(size=(500, 200))
    assert abs(debiased_linear_cka(X, Y)) < 0.02
    assert biased_linear_cka(X, Y) > 0.2


def test_gradcheck():
    rng = np.random.default_rng(6)
    X = torch.tensor(rng.normal(size=(7, 3)), dtype=torch.float64, requires_grad=True)
    Y = torch.tensor(rng.normal(size=(7, 4)), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(debiased_linear_cka, (X, Y), eps=1e-6, atol=1e-7)
    assert torch.autograd.gradcheck(biased_linear_cka, (X, Y), eps=1e-6, atol=1e-7)


def test_cka_input_errors():
    X, Y = _pair()
    with pytest.raises(RDXInputError, match="at least 4"):
        debiased_linear_cka(X[:3], Y[:3])
    with pytest.raises(RDXInputError, match="constant"):
        debiased_linear_cka(np.ones_like(X), Y)
    with pytest.raises(RDXInputError, match="constant"):
        biased_linear_cka(X, np.full_like(Y, 2.5))
    with pytest.raises(RDXInputError, match="different numbers"):
        debiased_linear_cka(X, Y[:-1])
    with pytest.raises(RDXInputError, match="2-D"):
        debiased_linear_cka(X[:, 0], Y)


# ------------------------------------------------------------------ alignment
def _linear_case(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(150, 8))
    Y = np.tanh(X @ rng.normal(size=(8, 5))) + 0.5 * rng.normal(size=(150, 5))
    return X, Y


def test_learn_alignment_improves_and_reports_best_step():
    X, Y = _linear_case()
    res = learn_alignment(X, Y, num_steps=30, lr=1e-2, seed=1, device="cpu")
    assert len(res.test_cka) == len(res.train_cka) == 31
    assert res.best_step == int(np.argmax(res.test_cka))
    assert res.best_test_cka >= res.test_cka[0]
    assert res.train_cka[-1] > res.train_cka[0]
    assert res.mapped.shape == X.shape and res.weight.shape == (8, 8) and res.bias.shape == (8,)
    np.testing.assert_allclose(res.mapped, X @ res.weight.T.astype(np.float64) + res.bias,
                               rtol=1e-4, atol=1e-4)
    assert len(res.train_index) == 105 and len(res.test_index) == 45
    assert not set(res.train_index) & set(res.test_index)
    # the reported test CKA is that of the kept map
    assert debiased_linear_cka(res.mapped[res.test_index], Y[res.test_index]) == \
        pytest.approx(res.best_test_cka, abs=1e-4)


def test_learn_alignment_is_deterministic():
    X, Y = _linear_case(2)
    r1 = learn_alignment(X, Y, num_steps=10, lr=1e-2, seed=7, device="cpu")
    state = torch.random.get_rng_state()
    r2 = learn_alignment(X, Y, num_steps=10, lr=1e-2, seed=7, device="cpu")
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched
    np.testing.assert_array_equal(r1.mapped, r2.mapped)
    assert r1.test_cka == r2.test_cka and r1.train_cka == r2.train_cka
    r3 = learn_alignment(X, Y, num_steps=10, lr=1e-2, seed=8, device="cpu")
    assert not np.array_equal(r1.test_index, r3.test_index)


def test_keeps_best_test_weights_not_final():
    # small n, wide input, weak signal and a high lr: the map overfits and test CKA peaks early
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 30))
    Y = X[:, :3] + rng.normal(size=(60, 3))
    res = learn_alignment(X, Y, num_steps=40, lr=0.05, seed=0, device="cpu")
    assert 0 < res.best_step < 40
    assert res.test_cka[-1] < res.best_test_cka - 0.01
    assert res.best_step == int(np.argmax(res.test_cka))
    # the kept map reproduces the best test CKA, not the final one
    kept = debiased_linear_cka(res.mapped[res.test_index], Y[res.test_index])
    assert kept == pytest.approx(res.best_test_cka, abs=1e-4)
    # and equals the weights after exactly best_step steps (replaying the same trajectory)
    short = learn_alignment(X, Y, num_steps=res.best_step, lr=0.05, seed=0, device="cpu")
    assert short.best_step == res.best_step
    assert short.test_cka == res.test_cka[:res.best_step + 1]
    np.testing.assert_array_equal(short.weight, res.weight)
    np.testing.assert_array_equal(short.mapped, res.mapped)


def test_align_pair_shapes_and_info():
    X, Y = _linear_case(3)
    Am, Bm, info = align_pair(X, Y, num_steps=5, seed=2, device="cpu")
    assert Am.shape == X.shape and Bm.shape == Y.shape
    for key in ("a_to_b", "b_to_a"):
        d = info[key]
        assert len(d["test_cka"]) == 6 and d["best_test_cka"] == max(d["test_cka"])
    assert info["params"]["num_steps"] == 5 and info["params"]["seed"] == 2


def test_alignment_input_errors():
    X, Y = _linear_case()
    with pytest.raises(RDXInputError, match="at least 4"):
        learn_alignment(X[:9], Y[:9])
    with pytest.raises(RDXInputError, match="train_fraction"):
        learn_alignment(X, Y, train_fraction=1.5)
    with pytest.raises(RDXInputError):
        learn_alignment(X, Y[:-1])
