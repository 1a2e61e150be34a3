"""Sparse-autoencoder baselines: ReLU + L1 SAE and TopK-SAE.

Both are fit on one representation at a time (:class:`~.base.ConceptExtractor`); each
latent is a concept and its grid is the ``grid_size`` images with the largest activation.

This module also holds the training plumbing that :mod:`.usae` shares (seeded batch order,
learning-rate schedules, the epoch loop with its progress bar, chunked encoding, R²,
Top-k activation, parameter checks), so that every SAE-style trainer in the package runs the
same loop.

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

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .. import validation as V
from ..backend import check_device, resolve_device
from ..budget import check_duration
from ..errors import NotFittedError, RDXInputError
from .base import ConceptExtractor, check_n_concepts

# --------------------------------------------------------------------------------------
# Shared training plumbing (also used by .usae)
# --------------------------------------------------------------------------------------

#: At most this many points of the per-epoch loss curve go into ``info_``.
LOSS_CURVE_POINTS = 50


def check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise RDXInputError(f"{name} must be True or False, got {value!r}.")
    return bool(value)


def check_training_params(est: Any, n: int | None, *, min_batch: int = 1) -> None:
    """Checks shared by the torch-trained baselines: epochs, lr, batch size, device, verbose."""
    V.check_int(est.n_epochs, "n_epochs", minimum=1)
    V.check_positive(est.lr, "lr")
    V.check_int(est.batch_size, "batch_size", minimum=min_batch)
    if not isinstance(est.verbose, (bool, np.bool_)):
        V.check_int(est.verbose, "verbose", minimum=0)
    # with data, fail before training when the device is unusable
    check_device(est.device, usable=n is not None)


def make_generator(seed: int) -> torch.Generator:
    """CPU generator for initialisation and batch order: the same on CPU and GPU runs."""
    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed))
    return g


def uniform_init(shape: tuple[int, ...], bound: float, generator: torch.Generator) -> torch.Tensor:
    """U(−bound, bound) from ``generator`` (CPU, float32)."""
    return (torch.rand(shape, generator=generator) * 2.0 - 1.0) * bound


def kaiming_bound(fan_in: int) -> float:
    """Bound of Kaiming-uniform for a ReLU layer: √2 · √(3 / fan_in)."""
    return math.sqrt(2.0) * math.sqrt(3.0 / fan_in)


def batch_indices(n: int, batch_size: int, generator: torch.Generator,
                  shuffle: bool = True) -> list[torch.Tensor]:
    """Row indices of one epoch's batches (every image once).

    A last batch of a single row is merged into the previous one: BatchNorm cannot
    normalise one sample, and a one-row step is mostly noise anyway.
    """
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    bs = min(int(batch_size), n)
    batches = list(torch.split(order, bs))
    if len(batches) > 1 and len(batches[-1]) < 2:
        batches[-2] = torch.cat([batches[-2], batches.pop()])
    return batches


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Number of batches :func:`batch_indices` yields per epoch."""
    bs = min(int(batch_size), n)
    steps = -(-n // bs)
    return steps - 1 if steps > 1 and n - (steps - 1) * bs < 2 else steps


def lr_schedule(lr: float, *, warmup_steps: int = 0, warmup_start: float = 0.0,
                total_steps: int | None = None, final_lr: float | None = None
                ) -> Callable[[int], float]:
    """Learning rate of step ``t`` (1-based).

    Linear warm-up from ``warmup_start`` (used on step 1) to ``lr`` over ``warmup_steps``
    steps, then constant, or — with ``total_steps`` and ``final_lr`` — a cosine decay that
    reaches ``final_lr`` on the last step.
    """
    def at(t: int) -> float:
        if t <= warmup_steps:
            return warmup_start + (lr - warmup_start) * (t - 1) / warmup_steps
        if total_steps is None or final_lr is None:
            return lr
        span = max(total_steps - warmup_steps - 1, 1)
        progress = min((t - warmup_steps - 1) / span, 1.0)
        return final_lr + (lr - final_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return at


#: Optimisation steps timed before a training run is checked against the time budget.
_TIMED_STEPS = 5


def train_epochs(step: Callable[[torch.Tensor], torch.Tensor], *, n: int, n_epochs: int,
                 batch_size: int, generator: torch.Generator, optimizer: torch.optim.Optimizer,
                 schedule: Callable[[int], float], verbose: Any, desc: str) -> list[float]:
    """The epoch loop: seeded shuffled batches, LR per step, mean loss per epoch.

    ``step(idx)`` does one optimisation step on the rows ``idx`` (a CPU index tensor) and
    returns the detached loss. Losses are summed on the device and read once per epoch,
    so a GPU run synchronises only at epoch ends.

    The first steps are timed: when ``n_epochs`` at that pace would exceed the time budget
    (:func:`rdx.budget.check_duration`), training stops at once with an
    :class:`~rdx.errors.RDXInputError` naming ``n_epochs`` and a value that fits; a long
    run is announced on stderr (with ``verbose``).
    """
    losses: list[float] = []
    t = 0
    per_epoch = steps_per_epoch(n, batch_size)
    started, timed = time.perf_counter(), False
    bar = tqdm(range(int(n_epochs)), desc=desc, unit="epoch", disable=not verbose, leave=False)
    for _epoch in bar:
        total = None
        for idx in batch_indices(n, batch_size, generator):
            t += 1
            rate = schedule(t)
            for group in optimizer.param_groups:
                group["lr"] = rate
            loss = step(idx) * len(idx)
            total = loss if total is None else total + loss
            if not timed and (t >= _TIMED_STEPS or time.perf_counter() - started > 0.5):
                timed = True
                if loss.device.type == "cuda":   # the steps queued so far, really done
                    torch.cuda.synchronize(loss.device)
                each = (time.perf_counter() - started) / t * per_epoch
                check_duration("n_epochs", int(n_epochs), seconds=each * int(n_epochs),
                               seconds_each=each, what=f"{desc} on n = {n} images",
                               announce=bool(verbose))
        losses.append(float(total) / n)
        if verbose:
            bar.set_postfix(loss=f"{losses[-1]:.4g}")
    bar.close()
    return losses


def map_rows(fn: Callable[[torch.Tensor], torch.Tensor], X: torch.Tensor,
             chunk: int) -> torch.Tensor:
    """``fn`` applied to every row of ``X`` in chunks (no row left out), without gradients."""
    with torch.no_grad():
        return torch.cat([fn(X[i:i + chunk]) for i in range(0, X.shape[0], max(int(chunk), 1))])


def r2_score(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Fraction of the total variance explained: 1 − Σ‖x − x̂‖² / Σ‖x − x̄‖²."""
    x = x.double()
    sse = (x - x_hat.double()).square().sum()
    sst = (x - x.mean(0)).square().sum()
    return float(1.0 - sse / sst) if float(sst) > 0 else float("nan")


def downsample(values: list[float], max_points: int = LOSS_CURVE_POINTS) -> list[float]:
    """At most ``max_points`` evenly spaced values, always including the first and last."""
    if len(values) <= max_points:
        return [float(v) for v in values]
    idx = np.unique(np.linspace(0, len(values) - 1, max_points).round().astype(int))
    return [float(values[i]) for i in idx]


def topk_relu(pre: torch.Tensor, k: int) -> torch.Tensor:
    """ReLU, then keep the ``k`` largest entries of every row (others set to 0)."""
    act = torch.relu(pre)
    if k >= act.shape[1]:
        return act
    top = torch.topk(act, k, dim=1)
    return torch.zeros_like(act).scatter(1, top.indices, top.values)


def unit_rows(W: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit L2 norm (a zero row stays zero)."""
    return W / W.norm(dim=1, keepdim=True).clamp_min(1e-12)


def global_scale(X: np.ndarray) -> float:
    """Root mean square of all entries: one number that brings features to unit scale."""
    return float(np.sqrt(np.mean(np.square(X, dtype=np.float64))))


def dead_fraction(codes: np.ndarray) -> float:
    """Fraction of latents that are zero on every image."""
    return float(np.mean(~(codes > 0).any(axis=0)))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32, copy=False)


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
