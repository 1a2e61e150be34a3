"""SAE, TopK-SAE and USAE baselines (with the fixes of the reference code)."""
import json

import numpy as np
import pytest
import torch
from conftest import planted_pairs
from scipy.stats import entropy as scipy_entropy

from rdx import threads
from rdx.baselines import baseline_class
from rdx.baselines.dictionary_training import lr_schedule
from rdx.baselines.sae import SAEConcepts, TopKSAEConcepts
from rdx.baselines.usae import USAE, select_model_specific_concepts
from rdx.errors import RDXInputError

#: A training thread count other than rdx's (checks that the count matters).
OTHER_COUNT = 4 if threads.TRAINING_THREADS != 4 else 1
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def planted_sparse(n=400, d=32, n_atoms=10, active=2, seed=0, noise=0.05):
    """Rows = non-negative combinations of ``active`` of ``n_atoms`` unit atoms, plus noise."""
    r = np.random.default_rng(seed)
    D = r.standard_normal((n_atoms, d))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    S = np.zeros((n, n_atoms))
    for i in range(n):
        S[i, r.choice(n_atoms, active, replace=False)] = r.uniform(1, 3, active)
    return (S @ D + noise * r.standard_normal((n, d))).astype(np.float32), D


def r2(X, X_hat):
    X, X_hat = np.asarray(X, np.float64), np.asarray(X_hat, np.float64)
    return 1 - ((X - X_hat) ** 2).sum() / ((X - X.mean(0)) ** 2).sum()


# ---------------------------------------------------------------- shared plumbing


def test_lr_schedule_warmup_starts_at_zero_and_cosine_ends_at_final():
    s = lr_schedule(1e-3, warmup_steps=10)
    assert s(1) == 0.0                       # the reference's first step used Adam's 1e-3
    assert s(6) == pytest.approx(5e-4)
    assert s(11) == s(500) == 1e-3
    c = lr_schedule(5e-4, warmup_steps=4, warmup_start=1e-6, total_steps=20, final_lr=1e-6)
    assert c(1) == pytest.approx(1e-6) and c(5) == pytest.approx(5e-4)
    assert c(20) == pytest.approx(1e-6)
    assert all(c(t) >= c(t + 1) for t in range(5, 20))


# ---------------------------------------------------------------- TopK-SAE


@pytest.mark.parametrize("device", DEVICES)
def test_topk_sae_reconstructs_planted_sparse_data(device):
    X, D = planted_sparse()
    m = TopKSAEConcepts(3, n_latents=20, top_k=2, n_epochs=40, batch_size=50, lr=5e-3,
                        device=device).fit(X)
    assert m.codes_.shape == (400, 20) and m.dictionary_.shape == (20, 32)
    assert ((m.codes_ > 0).sum(axis=1) <= 2).all()                       # top-k codes
    np.testing.assert_allclose(np.linalg.norm(m.dictionary_, axis=1), 1, atol=1e-5)
    # codes are in the units of X: X ≈ codes @ dictionary, R² as reported
    R2 = r2(X, m.codes_ @ m.dictionary_)
    assert R2 > 0.95
    assert m.info_["r2"] == pytest.approx(R2, abs=1e-4)
    # every planted atom is recovered by some dictionary row
    assert np.abs(D @ m.dictionary_.T).max(axis=1).min() > 0.95
    # shown concepts: the k latents with the largest mean activation, descending
    means = m.codes_.mean(0)
    assert m.concepts_ == np.argsort(-means, kind="stable")[:3].tolist()
    assert m.grids_[0] == np.argsort(-m.codes_[:, m.concepts_[0]], kind="stable")[:9].tolist()
    np.testing.assert_allclose(m.transform(X), m.codes_, rtol=1e-4, atol=1e-4)
    assert len(m.explanations()) == 3
    json.dumps(m.info_)


def test_topk_sae_is_equivariant_to_feature_units():
    X, _ = planted_sparse(n=120, d=8, n_atoms=4)
    kw = {"n_latents": 8, "top_k": 2, "n_epochs": 5, "batch_size": 32}
    m1 = TopKSAEConcepts(2, **kw).fit(X)
    m4 = TopKSAEConcepts(2, **kw).fit(4 * X)       # a power of 2: exact in floating point
    np.testing.assert_array_equal(m4.codes_, 4 * m1.codes_)
    np.testing.assert_array_equal(m4.dictionary_, m1.dictionary_)
    assert m4.concepts_ == m1.concepts_


def test_topk_sae_top_k_defaults_to_n_explanations_and_is_deterministic():
    X, _ = planted_sparse(n=150, d=8, n_atoms=5)
    kw = {"n_latents": 10, "n_epochs": 4, "batch_size": 64}
    a = TopKSAEConcepts(3, random_state=1, **kw).fit(X)
    b = TopKSAEConcepts(3, random_state=1, **kw).fit(X)
    c = TopKSAEConcepts(3, random_state=2, **kw).fit(X)
    assert a.info_["top_k"] == 3 and ((a.codes_ > 0).sum(1) <= 3).all()
    np.testing.assert_array_equal(a.codes_, b.codes_)
    assert a.grids_ == b.grids_
    assert not np.array_equal(a.codes_, c.codes_)


# ---------------------------------------------------------------- SAE


def offset_data(seed=0):
    """Non-negative sparse data with large, unequal per-dimension offsets and scales."""
    X, _ = planted_sparse(n=300, d=16, n_atoms=3, active=1, seed=seed)
    return (X * np.linspace(1, 50, 16) + np.linspace(100, 400, 16)).astype(np.float32)


def test_sae_codes_are_computed_in_the_standardised_training_space():
    X = offset_data()
    m = SAEConcepts(3, n_epochs=30, batch_size=100, lr=1e-2).fit(X)
    mu, sd = X.astype(np.float64).mean(0), X.astype(np.float64).std(0)
    np.testing.assert_allclose(m.mean_, mu, rtol=1e-6)
    np.testing.assert_allclose(m.scale_, sd, rtol=1e-6)
    Z = (X - mu) / sd
    expected = np.maximum((Z - m.b_dec_) @ m.W_enc_ + m.b_enc_, 0)
    np.testing.assert_allclose(m.codes_, expected, rtol=1e-4, atol=1e-4)
    # the reference encoded the raw features instead: a completely different answer
    raw = np.maximum((X - m.b_dec_) @ m.W_enc_ + m.b_enc_, 0)
    assert np.abs(raw - expected).max() > 10
    np.testing.assert_allclose(m.transform(X), m.codes_, rtol=1e-4, atol=1e-4)
    assert m.concepts_ == [0, 1, 2] and m.dictionary_.shape == (3, 16)


def test_sae_initialisation_and_warmup_from_zero():
    X = offset_data()
    # one full-batch step: the warm-up gives it learning rate 0, so nothing moves
    m = SAEConcepts(3, n_epochs=1, batch_size=1000).fit(X)
    # b_dec starts at the column mean of the *standardised* data (≈ 0); the reference's
    # precedence bug, mean(X − μ/σ), would give values around 100–400 here
    np.testing.assert_allclose(m.b_dec_, 0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(m.dictionary_, axis=1), 1, atol=1e-5)
    # without warm-up the same step moves b_dec
    m0 = SAEConcepts(3, n_epochs=1, batch_size=1000, n_lr_warmup=0).fit(X)
    assert np.abs(m0.b_dec_).max() > 1e-4
    np.testing.assert_array_equal(m.W_enc_, SAEConcepts(3, n_epochs=1, batch_size=1000,
                                                        n_lr_warmup=3).fit(X).W_enc_)


@pytest.mark.parametrize("device", DEVICES)
def test_sae_learns_planted_sources(device):
    X = offset_data()
    m = SAEConcepts(3, n_epochs=60, batch_size=100, lr=1e-2, device=device).fit(X)
    Z = (X - m.mean_) / m.scale_
    R2 = r2(Z, m.codes_ @ m.dictionary_ + m.b_dec_)
    assert m.info_["r2"] == pytest.approx(R2, abs=1e-4)
    assert R2 > 0.9
    assert m.info_["loss"] < 0.5 * m.info_["loss_per_epoch"][0]
    assert m.info_["dead_fraction"] == 0.0
    assert len(m.info_["loss_per_epoch"]) == 50                    # downsampled from 60
    json.dumps(m.info_)


def test_sae_is_deterministic():
    X = offset_data()
    a = SAEConcepts(3, n_epochs=5, batch_size=64, random_state=3).fit(X)
    b = SAEConcepts(3, n_epochs=5, batch_size=64, random_state=3).fit(X)
    c = SAEConcepts(3, n_epochs=5, batch_size=64, random_state=4).fit(X)
    np.testing.assert_array_equal(a.codes_, b.codes_)
    assert a.info_ == b.info_
    assert not np.array_equal(a.codes_, c.codes_)


def _sae_on_threads(X, threads_now):
    """The SAE fitted from a process whose torch uses ``threads_now`` threads."""
    was = torch.get_num_threads()
    torch.set_num_threads(threads_now)
    try:
        m = SAEConcepts(8, n_epochs=2, batch_size=256, random_state=0).fit(X)
        assert torch.get_num_threads() == threads_now, "the caller's thread count is restored"
    finally:
        torch.set_num_threads(was)
    return m


def test_sae_is_bit_identical_on_any_thread_count(monkeypatch):
    # large enough that torch splits the sums of the reported R² and MSE over threads
    X = planted_sparse(n=2000, d=128, n_atoms=16, active=3)[0]
    fits = {n: _sae_on_threads(X, n) for n in (1, 2, 4)}
    for n in (2, 4):
        for attr in ("codes_", "dictionary_", "W_enc_", "b_enc_", "b_dec_"):
            np.testing.assert_array_equal(getattr(fits[1], attr), getattr(fits[n], attr))
        assert fits[1].info_ == fits[n].info_, n
    assert not torch.are_deterministic_algorithms_enabled(), "restored after the fit"
    # not vacuous: on another fixed count the same fit reports other numbers (in the last
    # bits of its R² or MSE; the weights of this small SAE happen to agree)
    monkeypatch.setattr(threads, "TRAINING_THREADS", OTHER_COUNT)
    other = _sae_on_threads(X, 1)
    assert (other.info_["r2"], other.info_["mse"]) != (fits[1].info_["r2"],
                                                     fits[1].info_["mse"])


# ---------------------------------------------------------------- USAE selection rule


def hand_codes(counts, n=20, value=1.0):
    """Code matrices whose latent c fires on counts[c] = (s_a, s_b) images per model."""
    m = len(counts)
    ca, cb = np.zeros((n, m)), np.zeros((n, m))
    for c, (sa, sb) in enumerate(counts):
        ca[:sa, c] = value
        cb[n - sb:, c] = value
    return ca, cb


def test_usae_selection_uses_latent_ids_not_sorted_positions():
    counts = [(10, 10),   # 0: H = 1, equal shares → neither model
              (0, 8),     # 1: H = 0, B-only
              (5, 1),     # 2: H ≈ 0.65, A
              (0, 0),     # 3: never fires
              (9, 0),     # 4: H = 0, A-only
              (2, 6),     # 5: H ≈ 0.81, B
              (3, 2)]     # 6: H ≈ 0.97, A
    ca, cb = hand_codes(counts)
    sel = select_model_specific_concepts(ca, cb, k=2, threshold=0.1)
    assert sel.concepts_a == [4, 2] and sel.concepts_b == [1, 5]
    # the reference used positions in the sorted order as ids: positions 0 and 2 of the
    # order (4, 1, 2, 5, 6, 0) → latents 0 and 2 for model A, which we must not return
    assert sel.concepts_a != [0, 2]
    np.testing.assert_array_equal(sel.counts, np.array(counts))
    for c, (sa, sb) in enumerate(counts):
        if sa + sb:
            assert sel.entropy[c] == pytest.approx(scipy_entropy([sa, sb], base=2))
            assert sel.p_a[c] == pytest.approx(sa / (sa + sb))
        else:
            assert np.isnan(sel.entropy[c]) and np.isnan(sel.p_a[c])
    with pytest.raises(RDXInputError, match="only 2 latent"):
        select_model_specific_concepts(ca, cb, k=3)          # A has 4, 2, 6; B only 1, 5


def test_usae_selection_ties_threshold_and_column_permutation():
    # equal entropy 0: the latent firing on more images comes first
    ca, cb = hand_codes([(3, 0), (12, 0), (0, 4), (0, 15)])
    sel = select_model_specific_concepts(ca, cb, k=1)
    assert sel.concepts_a == [1] and sel.concepts_b == [3]
    # firing means strictly above the threshold
    ca, cb = hand_codes([(6, 1), (1, 6)], value=0.1)
    with pytest.raises(RDXInputError, match="only 0 latent"):
        select_model_specific_concepts(ca, cb, k=1, threshold=0.1)
    assert select_model_specific_concepts(ca, cb, k=1, threshold=0.05).concepts_a == [0]
    # permuting the latents permutes the answer
    counts = [(10, 1), (0, 5), (7, 7), (4, 0), (1, 9)]
    ca, cb = hand_codes(counts)
    perm = np.array([3, 0, 4, 1, 2])              # new column j holds old latent perm[j]
    base = select_model_specific_concepts(ca, cb, k=2)
    moved = select_model_specific_concepts(ca[:, perm], cb[:, perm], k=2)
    assert [perm[c] for c in moved.concepts_a] == base.concepts_a == [3, 0]
    assert [perm[c] for c in moved.concepts_b] == base.concepts_b == [1, 4]


# ---------------------------------------------------------------- USAE end to end


def test_usae_on_planted_pairs():
    A, B, _ = planted_pairs()          # n = 240: 240 mod 32 = 16 images the reference lost
    m = USAE(3, n_epochs=40, batch_size=64, lr=5e-3, device="cpu").fit(A, B)
    codes_a, codes_b = m.encode(A, "a"), m.encode(B, "b")
    assert codes_a.shape == (240, 128)                          # 8 · d_A latents
    assert ((codes_a > 0).sum(1) <= 32).all()
    # every image is encoded, including the last n mod 32
    assert (codes_a[-16:] > 0.1).any(axis=1).all() and (codes_b[-16:] > 0.1).any(axis=1).all()
    sel = select_model_specific_concepts(codes_a, codes_b, 3, threshold=0.1)
    assert m.info_["concepts"] == {"a_over_b": sel.concepts_a, "b_over_a": sel.concepts_b}
    np.testing.assert_array_equal(m.arrays_["a_codes"], codes_a[:, sel.concepts_a])
    np.testing.assert_array_equal(m.arrays_["b_codes"], codes_b[:, sel.concepts_b])
    for direction, codes, own in (("a_over_b", codes_a, 0), ("b_over_a", codes_b, 1)):
        exps = m.directions_[direction]
        assert [e["concept"] for e in exps] == m.info_["concepts"][direction]
        for e, fc in zip(exps, m.info_["firing_counts"][direction]):
            assert fc[own] > fc[1 - own]                        # fires more on its model
            assert e["images"] == np.argsort(-codes[:, e["concept"]], kind="stable")[:9].tolist()
            assert e["values"] == pytest.approx(codes[e["images"], e["concept"]].tolist())
    # planted structure: B is a function of A's clusters, A is not one of B's (B merges
    # cluster pairs), so A's code reconstructs B but B's code cannot split a pair of A:
    # at best it recovers the pair means, about half of A's variance here
    r = m.info_["r2"]
    assert r["a"] > 0.9 and r["b"] > 0.75
    assert r["b_from_a"] > 0.85 and r["a_from_b"] < 0.5
    json.dumps(m.info_)


def test_usae_is_deterministic():
    A, B, _ = planted_pairs(n_per=20, d=8)
    kw = {"n_latents": 32, "top_k": 8, "n_epochs": 4, "batch_size": 32, "device": "cpu"}
    a = USAE(2, random_state=5, **kw).fit(A, B)
    b = USAE(2, random_state=5, **kw).fit(A, B)
    c = USAE(2, random_state=6, **kw).fit(A, B)
    assert a.directions_ == b.directions_
    for key in a.arrays_:
        np.testing.assert_array_equal(a.arrays_[key], b.arrays_[key])
    assert not np.array_equal(a.encode(A, "a"), c.encode(A, "a"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_usae_runs_on_gpu():
    A, B, _ = planted_pairs()
    m = USAE(3, n_epochs=40, batch_size=64, lr=5e-3, device="cuda").fit(A, B)
    assert m.info_["device"].startswith("cuda")
    assert m.info_["r2"]["a"] > 0.8 and m.arrays_["a_codes"].shape == (240, 3)


# ---------------------------------------------------------------- registry and bad input


def test_registry_names():
    assert baseline_class("sae") is SAEConcepts
    assert baseline_class("topk_sae") is TopKSAEConcepts
    assert baseline_class("usae") is USAE


@pytest.mark.parametrize("est, match", [
    (TopKSAEConcepts(51), "at most 50"),
    (TopKSAEConcepts(3, n_latents=10, top_k=11), "top_k=11 is larger than n_latents=10"),
    (TopKSAEConcepts(3, top_k=0), "top_k"),
    (SAEConcepts(3, normalize_w_dec="yes"), "normalize_w_dec"),
    (SAEConcepts(3, lr=0), "lr"),
    (SAEConcepts(3, n_epochs=True), "n_epochs"),
    (SAEConcepts(3, sparsity_coeff=-1), "sparsity_coeff"),
    (SAEConcepts(3, n_lr_warmup=-1), "n_lr_warmup"),
    (SAEConcepts(3, device="tpu"), "device"),
    (SAEConcepts(0), "n_explanations"),
])
def test_per_model_bad_parameters(est, match):
    X, _ = planted_sparse(n=60, d=8, n_atoms=3)
    with pytest.raises(RDXInputError, match=match):
        est.fit(X)
    with pytest.raises(RDXInputError, match=match):
        est._check_params(None)                 # config-time validation, no data needed


@pytest.mark.parametrize("kw, match", [
    ({"n_latents": 16, "top_k": 17}, "top_k=17 is larger than n_latents=16"),
    ({"n_latents": 4, "top_k": 2}, r"at most 2 \(half of n_latents=4"),
    ({"batch_size": 1}, "batch_size"),
    ({"firing_threshold": -0.1}, "firing_threshold"),
    ({"clip_grad": 0}, "clip_grad"),
    ({"weight_decay": float("nan")}, "weight_decay"),
])
def test_usae_bad_parameters(kw, match):
    A, B, _ = planted_pairs(n_per=10, d=4)
    with pytest.raises(RDXInputError, match=match):
        USAE(3, n_epochs=1, **kw).fit(A, B)


def test_usae_bad_inputs():
    A, B, _ = planted_pairs(n_per=10, d=4)
    with pytest.raises(RDXInputError, match="top_k=64 is larger than n_latents=32"):
        USAE(3, top_k=64, n_epochs=1).fit(A, B)           # default n_latents = 8 · d_A = 32
    with pytest.raises(RDXInputError, match="same images"):
        USAE(3, n_epochs=1).fit(A, B[:-1])
    with pytest.raises(RDXInputError, match="grid_size"):
        USAE(1, n_epochs=1).fit(A[:5], B[:5])
    with pytest.raises(RDXInputError, match="not fitted"):
        USAE().encode(A)
    m = USAE(2, top_k=8, n_epochs=1, batch_size=20).fit(A, B)
    with pytest.raises(RDXInputError, match="features"):
        m.encode(B[:, :3], "b")
    with pytest.raises(RDXInputError, match="model"):
        m.encode(A, "c")
