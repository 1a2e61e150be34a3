"""Sparse-autoencoder baselines: ReLU + L1 SAE and TopK-SAE.

Both are fit on one representation at a time (:class:`~.base.ConceptExtractor`); each
latent is a concept and its grid is the ``grid_size`` images with the largest activation.

The training plumbing (seeded batch order, schedules, the epoch loop, ...) is
:mod:`.dictionary_training`, shared with :mod:`.usae` and :mod:`.crosscoder`.

Fixes of the reference code:

* SAE: ``b_dec`` is initialised to the column mean of the *standardised* data (the
  reference's operator precedence computed ``X − mean/std``); the learning-rate warm-up
  starts at 0 on the first step (the reference's first step used Adam's default rate);
  codes are computed in the standardised space the model was trained in (the reference
  encoded the raw features); results are numpy arrays (no CUDA tensors).
* TopK-SAE: written here in torch (no unpinned external package), learning rate and batch
  size are parameters, batches are shuffled with a seeded generator, and inputs are divided
  by one global scale (see :class:`TopKSAEConcepts`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import validation as V
from ..backend import resolve_device
from ..errors import NotFittedError, RDXInputError
from .base import ConceptExtractor, check_n_concepts
from .dictionary_training import (
    check_bool,
    check_training_params,
    dead_fraction,
    downsample,
    global_scale,
    kaiming_bound,
    lr_schedule,
    make_generator,
    map_rows,
    r2_score,
    reproducible_fit,
    steps_per_epoch,
    to_numpy,
    topk_relu,
    train_epochs,
    uniform_init,
    unit_rows,
)

# --------------------------------------------------------------------------------------
# SAE
# --------------------------------------------------------------------------------------


class SAEConcepts(ConceptExtractor):
    """ReLU sparse autoencoder with an L1 penalty, one latent per shown concept.

    Model on the standardised data ``z = (x − μ)/σ`` (per dimension):
    ``f = ReLU((z − b_dec) W_enc + b_enc)``, ``ẑ = f W_dec + b_dec``; loss
    ``mean((ẑ − z)²) + sparsity_coeff · mean_batch Σ_j f_j``. As in the paper the number of
    latents equals ``n_explanations`` (``d_sae = k``), so every latent is shown.

    Parameters
    ----------
    n_explanations : int, default=3
        Latents (= concepts shown).
    n_epochs : int, default=500
    lr : float, default=1e-3
        Adam learning rate after warm-up.
    n_lr_warmup : int, default=10
        Steps of linear warm-up from 0 (the first step uses rate 0: it only primes Adam's
        moment estimates) to ``lr``.
    sparsity_coeff : float, default=4e-4
        Weight of the L1 penalty (constant; the reference's unused sparsity warm-up is
        not reproduced).
    batch_size : int, default=2000
        Capped at the number of images.
    normalize_w_dec : bool, default=True
        Rescale the rows of ``W_dec`` to unit norm before every step (and once after
        training, so that ``dictionary_`` has unit rows).
    remove_parallel_grads : bool, default=True
        Remove the gradient component parallel to each ``W_dec`` row (it would only change
        the row's norm).
    grid_size : int, default=9
    random_state : int, default=42
        Seeds initialisation and the batch order.
    device : {"auto", "cpu", "cuda"}
    verbose : int, default=0
        Progress bar over epochs when > 0.

    Attributes
    ----------
    codes_ : ndarray (n, k)
        Latent activations of every image, computed in the standardised training space.
    concepts_ : list of int
        ``[0, …, k−1]``.
    dictionary_ : ndarray (k, d)
        ``W_dec`` (in standardised units).
    mean_, scale_ : ndarray (d,)
        Standardisation (``scale_`` is the population std, 1 where a dimension is constant).
    W_enc_ (d, k), b_enc_ (k,), b_dec_ (d,) : ndarray
        The other learned parameters; :meth:`transform` encodes new images with them.
    info_ : dict
        ``loss`` (last epoch), ``loss_per_epoch`` (≤ 50 points), ``r2`` (reconstruction of
        the standardised data), ``mse``, ``dead_fraction`` (latents zero on every image),
        ``n_epochs``, ``n_steps``, ``batch_size``, ``space`` ("standardized"), ``device``.

    Notes
    -----
    Kaiming-uniform initialisation uses each map's true fan-in (``d`` for ``W_enc``); the
    reference applied torch's initialiser to a d×k tensor, which takes ``k`` as fan-in and
    makes the initial pre-activations ≈√(d/k) times larger. ``W_dec`` rows are unit
    normalised before the first step, so its bound does not matter.
    """

    def __init__(self, n_explanations: int = 3, *, n_epochs: int = 500, lr: float = 1e-3,
                 n_lr_warmup: int = 10, sparsity_coeff: float = 4e-4, batch_size: int = 2000,
                 normalize_w_dec: bool = True, remove_parallel_grads: bool = True,
                 grid_size: int = 9, random_state: int = 42, device: str = "auto",
                 verbose: int = 0) -> None:
        self.n_explanations = n_explanations
        self.n_epochs = n_epochs
        self.lr = lr
        self.n_lr_warmup = n_lr_warmup
        self.sparsity_coeff = sparsity_coeff
        self.batch_size = batch_size
        self.normalize_w_dec = normalize_w_dec
        self.remove_parallel_grads = remove_parallel_grads
        self.grid_size = grid_size
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    def _check_params(self, n: int | None) -> None:
        super()._check_params(n)
        check_training_params(self, n)
        V.check_int(self.n_lr_warmup, "n_lr_warmup", minimum=0)
        if V.check_number(self.sparsity_coeff, "sparsity_coeff") < 0:
            raise RDXInputError(f"sparsity_coeff must be >= 0, got {self.sparsity_coeff!r}.")
        check_bool(self.normalize_w_dec, "normalize_w_dec")
        check_bool(self.remove_parallel_grads, "remove_parallel_grads")

    def _standardize(self, X: np.ndarray) -> np.ndarray:
        return ((X.astype(np.float64) - self.mean_) / self.scale_).astype(np.float32)

    @reproducible_fit
    def _fit(self, X: np.ndarray) -> None:
        device = resolve_device(self.device)
        g = make_generator(int(self.random_state))
        n, d = X.shape
        k = int(self.n_explanations)
        self.mean_ = X.mean(axis=0, dtype=np.float64)
        std = X.std(axis=0, dtype=np.float64)
        # a constant dimension has nothing to standardise; dividing by 1 keeps it at 0
        self.scale_ = np.where(std > 0, std, 1.0)
        Z = torch.as_tensor(self._standardize(X), device=device)

        W_enc = uniform_init((d, k), kaiming_bound(d), g)
        W_dec = uniform_init((k, d), kaiming_bound(k), g)
        params = {
            "W_enc": W_enc, "b_enc": torch.zeros(k), "W_dec": W_dec,
            # the intended initialisation: column mean of the standardised data (≈ 0)
            "b_dec": Z.mean(0).cpu(),
        }
        p = {name: t.to(device).requires_grad_(True) for name, t in params.items()}
        normalize = bool(self.normalize_w_dec)
        remove_parallel = bool(self.remove_parallel_grads)
        coeff = float(self.sparsity_coeff)
        opt = torch.optim.Adam(p.values(), lr=float(self.lr))

        def step(idx: torch.Tensor) -> torch.Tensor:
            z = Z[idx.to(device)]
            if normalize:
                with torch.no_grad():
                    p["W_dec"].copy_(unit_rows(p["W_dec"]))
            f = torch.relu((z - p["b_dec"]) @ p["W_enc"] + p["b_enc"])
            z_hat = f @ p["W_dec"] + p["b_dec"]
            loss = (z_hat - z).square().mean() + coeff * f.sum(dim=1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if remove_parallel:
                with torch.no_grad():
                    u = unit_rows(p["W_dec"])
                    grad = p["W_dec"].grad
                    grad -= (grad * u).sum(dim=1, keepdim=True) * u
            opt.step()
            return loss.detach()

        losses = train_epochs(step, n=n, n_epochs=int(self.n_epochs),
                              batch_size=int(self.batch_size), generator=g, optimizer=opt,
                              schedule=lr_schedule(float(self.lr),
                                                   warmup_steps=int(self.n_lr_warmup)),
                              verbose=self.verbose, desc="SAE")
        with torch.no_grad():
            if normalize:
                p["W_dec"].copy_(unit_rows(p["W_dec"]))
        self.W_enc_, self.b_enc_ = to_numpy(p["W_enc"]), to_numpy(p["b_enc"])
        self.dictionary_, self.b_dec_ = to_numpy(p["W_dec"]), to_numpy(p["b_dec"])

        # codes in the space the model was trained in (the reference used raw features)
        codes = map_rows(lambda z: torch.relu((z - p["b_dec"]) @ p["W_enc"] + p["b_enc"]), Z,
                         int(self.batch_size))
        with torch.no_grad():
            z_hat = codes @ p["W_dec"] + p["b_dec"]
        self.codes_ = to_numpy(codes)
        self.concepts_ = list(range(k))
        n_steps = steps_per_epoch(n, int(self.batch_size))
        self.info_ = {
            "loss": losses[-1], "loss_per_epoch": downsample(losses),
            "r2": r2_score(Z, z_hat), "mse": float((z_hat - Z).square().mean()),
            "dead_fraction": dead_fraction(self.codes_), "n_epochs": int(self.n_epochs),
            "n_steps": n_steps * int(self.n_epochs), "batch_size": min(int(self.batch_size), n),
            "space": "standardized", "device": str(device),
        }

    def transform(self, X: Any) -> np.ndarray:
        """Latent activations of (new) images ``X``, standardised with the training statistics."""
        if not hasattr(self, "codes_"):
            raise NotFittedError("SAEConcepts is not fitted; call fit(X) first.")
        X = V.as_representation(X, "X")
        if X.shape[1] != self.W_enc_.shape[0]:
            raise RDXInputError(f"X has {X.shape[1]} features; the SAE was fit on "
                                f"{self.W_enc_.shape[0]}.")
        Z = self._standardize(X)
        return np.maximum((Z - self.b_dec_) @ self.W_enc_ + self.b_enc_, 0).astype(np.float32)


# --------------------------------------------------------------------------------------
# TopK-SAE
# --------------------------------------------------------------------------------------


class TopKSAEConcepts(ConceptExtractor):
    """Top-k sparse autoencoder with ``n_latents`` latents; the ``k`` most active are shown.

    Model (the paper's ``TopKSAE(nb_concepts=50, top_k=k)``): on ``u = x / s``,
    ``c = TopK(ReLU(u W_enc + b_enc))`` (the ``top_k`` largest entries of every row kept),
    ``û = c D`` with the rows of ``D`` L2-normalised; loss = mean squared error; Adam,
    constant learning rate, shuffled batches. Concept selection: encode every image and
    show the ``n_explanations`` latents with the largest mean activation (descending).

    Parameters
    ----------
    n_explanations : int, default=3
        Concepts shown (k).
    n_latents : int, default=50
    top_k : int or None, default=None
        Active latents per image; None → ``n_explanations`` (as in the paper).
    n_epochs : int, default=200
    lr : float, default=5e-4
    batch_size : int, default=1024
        Capped at the number of images.
    grid_size, random_state, device, verbose
        As in every baseline.

    Attributes
    ----------
    codes_ : ndarray (n, n_latents)
        Top-k codes of every image in the units of ``X``: ``X ≈ codes_ @ dictionary_``.
    concepts_ : list of int
        The shown latents, by decreasing mean activation.
    dictionary_ : ndarray (n_latents, d)
        Unit-norm dictionary rows.
    scale_ : float
        The global input scale ``s`` (root mean square of all entries of ``X``).
    W_enc_ (d, n_latents), b_enc_ (n_latents,) : ndarray
        Encoder of ``x / s``.
    info_ : dict
        ``loss``, ``loss_per_epoch`` (≤ 50 points), ``r2`` of the reconstruction, ``mse``
        (in units of ``s``), ``dead_fraction``, ``mean_activation`` of the shown latents,
        ``top_k``, ``n_latents``, ``n_epochs``, ``n_steps``, ``batch_size``, ``device``.

    Notes
    -----
    Inputs are *not* standardised per dimension: the paper trains on the raw features, and
    without a decoder bias non-negative codes on unit atoms describe raw (often
    non-negative, post-ReLU) features directly; standardising would change which
    directions the dictionary finds. They are divided by one global scale ``s`` instead,
    which leaves the geometry unchanged but makes the fixed learning rate and the encoder
    bias independent of the feature units (results are equivariant to rescaling ``X``);
    ``codes_`` are reported back in the units of ``X``. The encoder is initialised as the
    transposed dictionary (tied initialisation, Gao et al. 2024), which shortens training.
    """

    def __init__(self, n_explanations: int = 3, *, n_latents: int = 50, top_k: int | None = None,
                 n_epochs: int = 200, lr: float = 5e-4, batch_size: int = 1024,
                 grid_size: int = 9, random_state: int = 42, device: str = "auto",
                 verbose: int = 0) -> None:
        self.n_explanations = n_explanations
        self.n_latents = n_latents
        self.top_k = top_k
        self.n_epochs = n_epochs
        self.lr = lr
        self.batch_size = batch_size
        self.grid_size = grid_size
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    def _top_k(self) -> int:
        return int(self.n_explanations if self.top_k is None else self.top_k)

    def _check_params(self, n: int | None) -> None:
        super()._check_params(n)
        check_training_params(self, n)
        m = V.check_int(self.n_latents, "n_latents", minimum=1)
        check_n_concepts(self.n_explanations, None, limit=m,
                         why=f" (the number of latents, n_latents={m}); use fewer "
                             "explanations or more latents")
        if self.top_k is not None:
            t = V.check_int(self.top_k, "top_k", minimum=1)
            if t > m:
                raise RDXInputError(f"top_k={t} is larger than n_latents={m}; an image "
                                    "cannot activate more latents than there are.")

    @reproducible_fit
    def _fit(self, X: np.ndarray) -> None:
        device = resolve_device(self.device)
        g = make_generator(int(self.random_state))
        n, d = X.shape
        m, k, top_k = int(self.n_latents), int(self.n_explanations), self._top_k()
        self.scale_ = global_scale(X)
        U = torch.as_tensor(X / np.float32(self.scale_), device=device)

        D = unit_rows(uniform_init((m, d), kaiming_bound(d), g))
        p = {"D": D, "W_enc": D.T.clone(), "b_enc": torch.zeros(m)}
        p = {name: t.to(device).requires_grad_(True) for name, t in p.items()}
        opt = torch.optim.Adam(p.values(), lr=float(self.lr))

        def encode(u: torch.Tensor) -> torch.Tensor:
            return topk_relu(u @ p["W_enc"] + p["b_enc"], top_k)

        def step(idx: torch.Tensor) -> torch.Tensor:
            u = U[idx.to(device)]
            loss = (encode(u) @ unit_rows(p["D"]) - u).square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.detach()

        losses = train_epochs(step, n=n, n_epochs=int(self.n_epochs),
                              batch_size=int(self.batch_size), generator=g, optimizer=opt,
                              schedule=lr_schedule(float(self.lr)), verbose=self.verbose,
                              desc="TopK-SAE")
        codes = map_rows(encode, U, int(self.batch_size))
        with torch.no_grad():
            dictionary = unit_rows(p["D"])
            u_hat = codes @ dictionary
        self.W_enc_, self.b_enc_ = to_numpy(p["W_enc"]), to_numpy(p["b_enc"])
        self.dictionary_ = to_numpy(dictionary)
        self.codes_ = to_numpy(codes) * np.float32(self.scale_)
        means = self.codes_.mean(axis=0, dtype=np.float64)
        self.concepts_ = np.argsort(-means, kind="stable")[:k].tolist()
        n_steps = steps_per_epoch(n, int(self.batch_size))
        self.info_ = {
            "loss": losses[-1], "loss_per_epoch": downsample(losses),
            "r2": r2_score(U, u_hat), "mse": float((u_hat - U).square().mean()),
            "dead_fraction": dead_fraction(self.codes_),
            # a shown latent with mean 0 never fires (fewer live latents than k): its grid
            # is arbitrary
            "mean_activation": [float(means[c]) for c in self.concepts_],
            "top_k": top_k, "n_latents": m, "n_epochs": int(self.n_epochs),
            "n_steps": n_steps * int(self.n_epochs), "batch_size": min(int(self.batch_size), n),
            "input_scale": float(self.scale_), "device": str(device),
        }

    def transform(self, X: Any) -> np.ndarray:
        """Top-k codes of (new) images ``X``, in the units of ``X``."""
        if not hasattr(self, "codes_"):
            raise NotFittedError("TopKSAEConcepts is not fitted; call fit(X) first.")
        X = V.as_representation(X, "X")
        if X.shape[1] != self.W_enc_.shape[0]:
            raise RDXInputError(f"X has {X.shape[1]} features; the TopK-SAE was fit on "
                                f"{self.W_enc_.shape[0]}.")
        pre = torch.as_tensor(X / np.float32(self.scale_)) @ torch.as_tensor(self.W_enc_) \
            + torch.as_tensor(self.b_enc_)
        return to_numpy(topk_relu(pre, self._top_k())) * np.float32(self.scale_)
