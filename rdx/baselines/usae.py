"""Universal sparse autoencoder (USAE) baseline over both models.

One Top-k SAE per model with a *shared* latent space (Thasarathan et al., ICML 2025): every
training step encodes a batch of one randomly chosen model and reconstructs every model
from that code. A latent that fires mostly on one model's encodings is specific to that
model; the ``n_explanations`` latents per model with the lowest *firing entropy* are shown
(:func:`select_model_specific_concepts`).

Fixes of the reference code: the selection returns real latent ids (the
reference used positions in an energy-sorted order as ids, so it showed other latents);
every image is encoded (the reference left the last ``n mod 32`` images as zero codes);
fewer than ``k`` model-specific latents raise :class:`~rdx.errors.RDXInputError` instead of
a later ``IndexError``; nothing is checkpointed, so the ``checkpoint_freq`` key mismatch
does not arise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import validation as V
from ..backend import resolve_device
from ..errors import NotFittedError, RDXInputError
from .base import PairExplainer, check_n_concepts, top_images
from .dictionary_training import (
    check_training_params,
    dead_fraction,
    downsample,
    global_scale,
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

#: model keys, in the order of :meth:`USAE.fit`'s arguments
MODELS = ("a", "b")


@dataclass
class ConceptSelection:
    """Result of :func:`select_model_specific_concepts` (all arrays indexed by latent id)."""

    concepts_a: list[int]
    concepts_b: list[int]
    counts: np.ndarray     # (m, 2): images on which the latent fires, per model
    p_a: np.ndarray        # (m,): share of the firings that are on model A (NaN: never fires)
    entropy: np.ndarray    # (m,): firing entropy in bits (NaN: never fires)


def firing_statistics(codes_a: np.ndarray, codes_b: np.ndarray, threshold: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per latent: firing counts (m×2), share of model A, and firing entropy (bits).

    A latent fires on an image when its code is strictly above ``threshold``.
    ``H(c) = −Σ_m p_m(c) log2 p_m(c)`` with ``p_m(c) = s_m(c) / (s_a(c) + s_b(c))``;
    0·log 0 = 0. Latents that never fire get NaN share and entropy.
    """
    counts = np.stack([(np.asarray(codes_a) > threshold).sum(axis=0),
                       (np.asarray(codes_b) > threshold).sum(axis=0)], axis=1).astype(np.int64)
    total = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = counts / total[:, None]
        plogp = np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    entropy = -plogp.sum(axis=1) / np.log2(2.0)  # normalised by log2(#models), as in the paper
    entropy[total == 0] = np.nan
    return counts, p[:, 0], entropy


def select_model_specific_concepts(codes_a: Any, codes_b: Any, k: int,
                                   threshold: float = 0.1) -> ConceptSelection:
    """The ``k`` most model-specific latents of each model (with real ids).

    Latents that fire on at least one image are visited by ascending firing entropy; a
    latent goes to model A if ``p_a > p_b``, to model B if ``p_b > p_a`` (equal shares go
    to neither), until each model has ``k``. Ties in entropy are broken by the larger
    firing count of the owning model (a latent seen on more images first), then by the
    lower id.

    Parameters
    ----------
    codes_a, codes_b : array (n, m)
        Codes of the same ``m`` shared latents, from model A's and model B's encoder.
    k : int
        Latents per model.
    threshold : float, default=0.1
        A latent fires on an image when its code is above it.

    Raises
    ------
    RDXInputError
        When a model has fewer than ``k`` latents that fire more on it than on the other.
    """
    k = V.check_int(k, "k", minimum=1)
    threshold = V.check_number(threshold, "threshold")
    codes_a, codes_b = np.asarray(codes_a), np.asarray(codes_b)
    if codes_a.ndim != 2 or codes_a.shape[1:] != codes_b.shape[1:] or codes_b.ndim != 2:
        raise RDXInputError(f"codes_a {codes_a.shape} and codes_b {codes_b.shape} must be "
                            "2-D with the same number of latents (columns).")
    counts, p_a, entropy = firing_statistics(codes_a, codes_b, threshold)
    # the model a latent fires on more often (p_a > p_b ⇔ s_a > s_b; exact on counts)
    side_a, side_b = counts[:, 0] > counts[:, 1], counts[:, 1] > counts[:, 0]
    fired = np.flatnonzero(counts.sum(axis=1) > 0)
    owner_count = counts[fired].max(axis=1)
    # lexsort: last key is primary → entropy ascending, owner count descending, id ascending
    order = fired[np.lexsort((fired, -owner_count, entropy[fired]))]
    chosen: dict[str, list[int]] = {"a": [], "b": []}
    for c in order:  # c is a latent id, not a position in a sorted list
        side = "a" if side_a[c] else "b" if side_b[c] else None
        if side is not None and len(chosen[side]) < k:
            chosen[side].append(int(c))
        if len(chosen["a"]) == k and len(chosen["b"]) == k:
            break
    for side, other in (("a", "b"), ("b", "a")):
        if len(chosen[side]) < k:
            n_spec = int(np.sum(side_a if side == "a" else side_b))
            raise RDXInputError(
                f"only {n_spec} latent(s) fire more often on model {side.upper()} than on model "
                f"{other.upper()} (threshold {threshold}), but n_explanations={k} are needed. "
                "Use fewer explanations, more latents (n_latents), longer training "
                "(n_epochs) or a lower firing_threshold.")
    return ConceptSelection(chosen["a"], chosen["b"], counts, p_a, entropy)


class _Encoder(nn.Module):
    """Linear → BatchNorm1d → (ReLU → top-k, applied by the caller) — the paper's mlp_bn_1."""

    def __init__(self, d: int, m: int, g: torch.Generator) -> None:
        super().__init__()
        self.linear = nn.Linear(d, m)
        self.bn = nn.BatchNorm1d(m)
        bound = 1.0 / math.sqrt(d)  # torch's default Linear range, drawn from our generator
        with torch.no_grad():
            self.linear.weight.copy_(uniform_init((m, d), bound, g))
            self.linear.bias.copy_(uniform_init((m,), bound, g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # pre-codes
        return self.bn(self.linear(x))

    @torch.no_grad()
    def calibrate(self, X: torch.Tensor, chunk: int) -> None:
        """Set BatchNorm's running statistics to those of the whole data set ("precise BN").

        Training leaves exponential moving averages of batch statistics from weights that
        kept changing; exact statistics of the final encoder make inference codes match
        what the decoders were trained on, and do not depend on the number of epochs.
        """
        h = map_rows(self.linear, X, chunk).double()
        self.bn.running_mean.copy_(h.mean(0).float())
        self.bn.running_var.copy_(h.var(0, unbiased=True).float())


class USAE(PairExplainer):
    """Universal SAE on both representations; shows each model's most specific latents.

    Per model ``m``: encoder ``Linear(d_m, n_latents) → BatchNorm1d → ReLU → top-k`` and
    dictionary ``D_m`` (``n_latents × d_m``, L2-normalised rows, no bias). Each step picks a
    model ``i`` at random (seeded), encodes its batch ``z = E_i(x_i)`` and decodes it with
    every dictionary; loss ``Σ_j mean|x_j − z D_j| + aux_penalty · mean|r_j − a D_j|``, where
    ``r_j`` is the (detached) residual and ``a`` keeps the largest half of the non-selected
    positive pre-codes (the Top-K auxiliary loss of Gao et al. 2024, L1 version). The step
    updates encoder ``i`` and every decoder; gradients are clipped per model to norm
    ``clip_grad``; AdamW with a linear warm-up over the first epoch from 1e-6 and a cosine
    decay to 1e-6.

    After training every image is encoded by both encoders (BatchNorm in inference mode,
    with statistics of the whole data set) and :func:`select_model_specific_concepts`
    picks ``n_explanations`` latents per model; grids are the ``grid_size`` images with the
    largest code of the shown latent in that model's encoding.

    Parameters
    ----------
    n_explanations : int, default=3
    n_latents : int or None, default=None
        Size of the shared latent space; None → ``8 · d_A`` (as in the paper).
    top_k : int, default=32
    n_epochs : int, default=2000
    lr : float, default=5e-4
    weight_decay : float, default=1e-5
    batch_size : int, default=500
        Capped at the number of images.
    aux_penalty : float, default=0.1
    clip_grad : float, default=1.0
    firing_threshold : float, default=0.1
        A latent fires on an image when its code exceeds it (codes are in units of the
        globally rescaled inputs, see Notes).
    grid_size, random_state, device, verbose
        As in every baseline.

    Attributes
    ----------
    directions_ : dict
        ``a_over_b``: model A's most specific latents; ``b_over_a``: model B's.
    selection_ : ConceptSelection
        Firing counts, shares and entropies of every latent, and the chosen ids.
    arrays_ : dict
        ``a_codes`` / ``b_codes``: n×k codes of the shown latents in their model's
        encoding; ``a_concepts`` / ``b_concepts``: their ids (the keys of every concept
        baseline's ``concepts.npz``).
    scales_ : dict
        Global input scale of each model.
    info_ : dict
        ``r2`` (self and cross reconstruction: ``a``, ``b``, ``a_from_b``, ``b_from_a``),
        ``concepts``, ``firing_counts`` and ``entropy`` of the shown latents,
        ``n_model_specific`` per model, ``dead_fraction`` per model, ``loss``,
        ``loss_per_epoch``, ``steps_per_model``, ``n_latents``, ``top_k``, ``device``.

    Notes
    -----
    Each model's inputs are divided by one global scale (root mean square of its entries).
    The reference used raw features; with a shared code decoded by unit-norm atoms, the
    model with the larger feature scale would otherwise dominate the summed loss and the
    code magnitudes, and the firing threshold 0.1 would mean different things for
    different feature units. A global scale keeps each model's geometry unchanged.

    Optimisation differs from the reference in two bookkeeping details. (1) The reference
    zeroes only model ``i``'s gradients, so the other decoders' gradients of a step pile up
    and are applied, summed, when their model is next picked: every decoder does learn from
    every step's cross reconstruction, only late. Here each step updates encoder ``i`` and
    every decoder at once (the USAE objective without the delay); the other encoder gets
    no gradient and is left untouched (AdamW skips it, so one optimiser equals per-model
    optimisers). (2) The warm-up/cosine schedule follows the global step count instead of
    one scheduler per model stepped only when that model is picked (which makes each
    model's schedule depend on the random picks). The model picked at each step comes from
    the same seeded generator as the batch order (the reference used Python's ``random``
    seeded with 10).
    """

    def __init__(self, n_explanations: int = 3, *, n_latents: int | None = None,
                 top_k: int = 32, n_epochs: int = 2000, lr: float = 5e-4,
                 weight_decay: float = 1e-5, batch_size: int = 500, aux_penalty: float = 0.1,
                 clip_grad: float = 1.0, firing_threshold: float = 0.1, grid_size: int = 9,
                 random_state: int = 42, device: str = "auto", verbose: int = 0) -> None:
        self.n_explanations = n_explanations
        self.n_latents = n_latents
        self.top_k = top_k
        self.n_epochs = n_epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.aux_penalty = aux_penalty
        self.clip_grad = clip_grad
        self.firing_threshold = firing_threshold
        self.grid_size = grid_size
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    def _check_params(self, n: int | None) -> None:
        super()._check_params(n)
        # BatchNorm needs at least two images per batch
        check_training_params(self, n, min_batch=2)
        if n is not None and n < 2:
            raise RDXInputError(f"USAE needs at least 2 images (BatchNorm), got {n}.")
        if self.n_latents is not None:
            self._check_latents(V.check_int(self.n_latents, "n_latents", minimum=2))
        else:
            V.check_int(self.top_k, "top_k", minimum=1)
        for name in ("weight_decay", "aux_penalty", "firing_threshold"):
            if V.check_number(getattr(self, name), name) < 0:
                raise RDXInputError(f"{name} must be >= 0, got {getattr(self, name)!r}.")
        V.check_positive(self.clip_grad, "clip_grad")

    def _check_latents(self, m: int) -> None:
        """Constraints that involve the latent count (known only with data when None)."""
        t = V.check_int(self.top_k, "top_k", minimum=1)
        if t > m:
            raise RDXInputError(f"top_k={t} is larger than n_latents={m}; an image cannot "
                                "activate more latents than there are.")
        check_n_concepts(self.n_explanations, None, limit=m // 2,
                         why=f" (half of n_latents={m}: each model needs its own "
                             "latents); use fewer explanations or more latents")

    @reproducible_fit
    def _fit(self, A: np.ndarray, B: np.ndarray) -> None:
        device = resolve_device(self.device)
        g = make_generator(int(self.random_state))
        n = A.shape[0]
        m = int(self.n_latents) if self.n_latents is not None else 8 * A.shape[1]
        self._check_latents(m)
        k, top_k, bs = int(self.n_explanations), int(self.top_k), int(self.batch_size)
        aux_k = m // 2
        self.scales_ = {"a": global_scale(A), "b": global_scale(B)}
        X = [torch.as_tensor(Z / np.float32(self.scales_[key]), device=device)
             for Z, key in ((A, "a"), (B, "b"))]

        encoders = nn.ModuleList(_Encoder(x.shape[1], m, g) for x in X).to(device)
        dicts = nn.ParameterList(
            nn.Parameter(uniform_init((m, x.shape[1]), 1.0 / math.sqrt(x.shape[1]), g))
            for x in X).to(device)
        groups = [list(encoders[i].parameters()) + [dicts[i]] for i in range(2)]
        # One AdamW over everything: parameters left without a gradient in a step (the
        # other model's encoder) are skipped entirely, so this equals per-model optimisers.
        opt = torch.optim.AdamW([p for grp in groups for p in grp], lr=float(self.lr),
                                weight_decay=float(self.weight_decay))
        per_epoch = steps_per_epoch(n, bs)
        total = per_epoch * int(self.n_epochs)
        schedule = lr_schedule(float(self.lr), warmup_steps=min(per_epoch, total - 1),
                               warmup_start=1e-6, total_steps=total, final_lr=1e-6)
        aux_penalty, clip = float(self.aux_penalty), float(self.clip_grad)
        picks = [0, 0]

        def step(idx: torch.Tensor) -> torch.Tensor:
            i = int(torch.randint(2, (1,), generator=g))  # the model encoded this step
            picks[i] += 1
            idx = idx.to(device)
            encoders.train()
            pre = encoders[i](X[i][idx])
            z = topk_relu(pre, top_k)
            # auxiliary code: the largest half of the positive pre-codes not selected by top-k
            rest = torch.relu(pre) - z
            top = torch.topk(rest, aux_k, dim=1)
            aux = torch.zeros_like(rest).scatter(1, top.indices, top.values)
            loss = pre.new_zeros(())
            for j in range(2):
                D = unit_rows(dicts[j])
                residual = X[j][idx] - z @ D
                loss = loss + residual.abs().mean()
                if aux_penalty > 0:
                    loss = loss + aux_penalty * (residual.detach() - aux @ D).abs().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            for grp in groups:
                torch.nn.utils.clip_grad_norm_([p for p in grp if p.grad is not None], clip)
            opt.step()
            return loss.detach()

        losses = train_epochs(step, n=n, n_epochs=int(self.n_epochs), batch_size=bs,
                              generator=g, optimizer=opt, schedule=schedule,
                              verbose=self.verbose, desc="USAE")

        encoders.eval()
        D = [unit_rows(d.detach()) for d in dicts]
        codes = []
        for i in range(2):
            encoders[i].calibrate(X[i], bs)
            codes.append(map_rows(lambda x, e=encoders[i]: topk_relu(e(x), top_k), X[i], bs))
        r2 = {}
        for i, src in enumerate(MODELS):
            for j, dst in enumerate(MODELS):
                with torch.no_grad():
                    r2[dst if i == j else f"{dst}_from_{src}"] = r2_score(X[j], codes[i] @ D[j])
        self.encoders_ = encoders.cpu()
        self.dictionaries_ = [to_numpy(d) for d in D]
        codes_np = [to_numpy(c) for c in codes]

        sel = select_model_specific_concepts(codes_np[0], codes_np[1], k,
                                             float(self.firing_threshold))
        self.selection_ = sel
        chosen = {"a": sel.concepts_a, "b": sel.concepts_b}
        self.directions_ = {}
        for i, (key, direction) in enumerate((("a", "a_over_b"), ("b", "b_over_a"))):
            grids = top_images(codes_np[i], chosen[key], int(self.grid_size))
            self.directions_[direction] = [self._explanation(c, grid, codes_np[i])
                                           for c, grid in zip(chosen[key], grids)]
        self.arrays_ = {
            # the keys every concept baseline writes (concept heat maps, the explorer)
            "a_codes": np.ascontiguousarray(codes_np[0][:, sel.concepts_a]),
            "b_codes": np.ascontiguousarray(codes_np[1][:, sel.concepts_b]),
            "a_concepts": np.asarray(sel.concepts_a, dtype=np.int64),
            "b_concepts": np.asarray(sel.concepts_b, dtype=np.int64),
        }
        self.info_ = {
            "r2": r2,
            "concepts": {"a_over_b": sel.concepts_a, "b_over_a": sel.concepts_b},
            "firing_counts": {d: sel.counts[ids].tolist() for d, ids in
                              (("a_over_b", sel.concepts_a), ("b_over_a", sel.concepts_b))},
            "entropy": {d: [float(sel.entropy[c]) for c in ids] for d, ids in
                        (("a_over_b", sel.concepts_a), ("b_over_a", sel.concepts_b))},
            "n_model_specific": {"a": int(np.sum(sel.counts[:, 0] > sel.counts[:, 1])),
                                 "b": int(np.sum(sel.counts[:, 1] > sel.counts[:, 0]))},
            "dead_fraction": {key: dead_fraction(c) for key, c in zip(MODELS, codes_np)},
            "loss": losses[-1], "loss_per_epoch": downsample(losses),
            "steps_per_model": {key: int(c) for key, c in zip(MODELS, picks)},
            "n_latents": m, "top_k": top_k, "n_epochs": int(self.n_epochs),
            "batch_size": min(bs, n), "firing_threshold": float(self.firing_threshold),
            "input_scales": dict(self.scales_), "device": str(device),
        }

    def encode(self, X: Any, model: str = "a") -> np.ndarray:
        """Shared-space top-k codes (n × n_latents) of images ``X`` seen by ``model``."""
        if not hasattr(self, "encoders_"):
            raise NotFittedError("USAE is not fitted; call fit(A, B) first.")
        V.check_choice(model, "model", MODELS)
        i = MODELS.index(model)
        X = V.as_representation(X, "X")
        d = self.encoders_[i].linear.in_features
        if X.shape[1] != d:
            raise RDXInputError(f"X has {X.shape[1]} features; model {model!r} of the USAE "
                                f"was fit on {d}.")
        enc = self.encoders_[i].eval()
        x = torch.as_tensor(X / np.float32(self.scales_[model]))
        return map_rows(lambda b: topk_relu(enc(b), int(self.top_k)), x,
                        int(self.batch_size)).numpy()
