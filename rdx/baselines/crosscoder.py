"""Crosscoder baseline: one sparse dictionary over both models, model-exclusive latents.

A *crosscoder* (Anthropic's "Sparse Crosscoders for Cross-Layer Features and Model
Diffing", Lindsey et al. 2024) is a sparse autoencoder that reads the activations of two
models on the same input and reconstructs each of them from one shared code. Every latent
has one decoder vector per model; a latent whose decoder is (almost) zero for model B
describes structure that only model A has. Comparing the two decoder norms of every
latent is the crosscoder way of "model diffing".

This module trains the BatchTopK variant (sparsity by "BatchTopK Sparse Autoencoders",
Bussmann et al. 2024, used for crosscoders by Minder et al. 2025) and, as an option, the
*dedicated feature crosscoder* (Jiralerspong & Bricken 2025), in which a fraction of the
latents is reserved for one model: their encoder and decoder weights of the other model are
fixed at zero, so they are exclusive by construction.

Explanations follow RDX's directions: ``a_over_b`` shows model A's exclusive latents —
images that a feature of A alone ties together ("A groups these, B does not") — and
``b_over_a`` model B's. See :class:`Crosscoder` for the classification and selection
rules.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import validation as V
from ..backend import resolve_device
from ..errors import NotFittedError, RDXInputError
from .base import PairExplainer, check_n_concepts, top_images
from .crosscoder_latents import (MODELS, batch_topk, classify_latents, global_batch_topk,
                                 relative_norms, select_exclusive_latents)
from .dictionary_training import (
    check_training_params,
    downsample,
    lr_schedule,
    make_generator,
    r2_score,
    reproducible_fit,
    steps_per_epoch,
    to_numpy,
    train_epochs,
    unit_rows,
)

#: latent classes of :attr:`Crosscoder.latent_classes_`
CLASSES = ("a", "b", "shared", "dead")
#: bins of the relative-norm histogram in ``info_`` (the crosscoder papers' main figure)
HISTOGRAM_BINS = 10


class Crosscoder(PairExplainer):
    """BatchTopK crosscoder on both representations; shows each model's exclusive latents.

    **Model.** Each representation is centred and divided by the root-mean-square norm of
    its centred rows, so that both have total variance 1 (see Notes). With the scaled
    inputs ``x_A``, ``x_B`` and ``m`` latents, the encoder reads both models (the sum of
    per-model encoders, i.e. one linear map of the concatenation ``[x_A, x_B]``)::

        a = ReLU(x_A W_A + x_B W_B + b_enc),   f = BatchTopK(a),
        x̂_A = f D_A + b_A,   x̂_B = f D_B + b_B,

    where BatchTopK keeps the ``top_k · batch`` largest entries of ``a_i · (|D_A,i| +
    |D_B,i|)`` over the batch (:func:`batch_topk`). Loss: ``Σ_model mean_batch ‖x − x̂‖²``
    plus the Top-K auxiliary loss (Gao et al. 2024) weighted by ``aux_penalty``: latents that
    did not fire for an epoch reconstruct the detached residual with their ``2 · top_k``
    largest activations, which brings dead latents back. Decoder norms are free (their
    ratio is what is measured); the decoders are initialised to unit-norm random rows for
    both models (r = 0.5) and the encoder to their transpose. Adam, a linear warm-up over the
    first epoch and a cosine decay to ``lr / 10``; seeded batch order and initialisation
    (a CPU generator: the same on CPU and GPU).

    After training the whole data set is encoded with one BatchTopK over all images (exactly
    ``top_k · n`` active codes, bar ties); the smallest kept score is ``threshold_``, which
    :meth:`encode` applies to new images (the usual BatchTopK inference rule).

    **Dedicated latents.** With ``dedicated_fraction = q > 0``, ``floor(q · m / 2)`` latents
    are reserved for each model (ids ``0…`` for A, then B's): their encoder rows and decoder
    of the other model are fixed at exactly zero, so they read and write only their model,
    as in the dedicated feature crosscoder. The remaining latents are free.

    **Classification.** Per latent, the relative decoder norm
    ``r = |D_B,i| / (|D_A,i| + |D_B,i|)`` (0: writes only to A, 1: only to B) classifies it:
    *A-exclusive* when ``r < exclusive_threshold``, *B-exclusive* when
    ``r > 1 − exclusive_threshold``, *shared* otherwise (defaults 0.1 / 0.9, the thresholds
    of the crosscoder model-diffing papers); *dead* when it never fires on the data.

    **Concept selection.** Direction ``a_over_b`` shows A-exclusive latents, ``b_over_a``
    B-exclusive ones, ``n_explanations`` each, by decreasing *activation mass* towards the
    model: ``Σ_images f_i · |D_model,i|``, the total norm the latent writes into that model
    (scale-free, unlike the code alone). When a model has fewer exclusive latents than
    ``n_explanations``, the live shared latents leaning towards it fill the remaining places,
    most exclusive first (smallest r for A, largest for B; never the same latent for both
    models); each explanation records ``relative_norm`` and ``exclusive`` so that such
    fill-ins are visible, and ``info_["n_exclusive"]`` counts the real ones. Grids are the
    ``grid_size`` images with the largest code of the latent.

    Parameters
    ----------
    n_explanations : int, default=3
        Latents shown per direction.
    n_latents : int or None, default=None
        Size of the dictionary ``m``; None → ``2 · (d_A + d_B)``.
    top_k : int, default=8
        Mean active latents per image (BatchTopK's k).
    dedicated_fraction : float, default=0.0
        Fraction of the latents reserved for one model, half for each (0: a plain
        crosscoder); must leave at least one dedicated latent per model when > 0.
    exclusive_threshold : float, default=0.1
        Relative-norm threshold of the classification, in (0, 0.5).
    n_epochs : int, default=300
    lr : float, default=2e-3
    batch_size : int, default=128
        Capped at the number of images.
    aux_penalty : float, default=1/32
        Weight of the auxiliary loss on dead latents (0: none).
    grid_size, random_state, device, verbose
        As in every baseline.

    Attributes
    ----------
    directions_ : dict
        ``a_over_b``: model A's exclusive latents; ``b_over_a``: model B's.
    arrays_ : dict
        ``a_codes`` / ``b_codes`` (n × k codes of the shown latents, explanation order),
        ``a_concepts`` / ``b_concepts`` (their ids), ``a_dictionary`` / ``b_dictionary``
        (their decoder rows for their model, scaled units) and ``relative_norm`` (m,).
    codes_ : ndarray (n, m)
        BatchTopK codes of every image.
    encoder_ : ndarray (d_A + d_B, m), b_enc_ : ndarray (m,)
    decoders_ : dict
        ``"a"``: ``D_A`` (m × d_A), ``"b"``: ``D_B`` (m × d_B); ``b_dec_`` their biases.
    decoder_norms_ : ndarray (m, 2)
        ``|D_A,i|`` and ``|D_B,i|``.
    relative_norms_ : ndarray (m,)
        ``r`` per latent (NaN: both norms 0).
    latent_classes_ : ndarray of str (m,)
        ``"a"``, ``"b"``, ``"shared"`` or ``"dead"``.
    dedicated_ : ndarray of str (m,)
        ``"a"`` / ``"b"`` for dedicated latents, ``""`` for free ones.
    threshold_ : float
        Inference threshold on ``a_i · (|D_A,i| + |D_B,i|)``.
    means_, scales_ : dict
        Per-model centring (d,) and scale (a number).
    info_ : dict
        ``r2`` per model (scaled units), ``n_classes`` (latents per class), ``n_exclusive``,
        ``relative_norm_histogram`` (10 bins on [0, 1], live latents), ``concepts``,
        ``relative_norm`` / ``mass`` / ``exclusive`` of the shown latents, ``n_dedicated``
        per model, ``dead_fraction``, ``loss``, ``loss_per_epoch``, ``threshold``,
        ``n_latents``, ``top_k``, ``n_epochs``, ``batch_size``, ``input_scales``, ``device``.

    Notes
    -----
    The relative norm compares decoder norms across the two models, which is meaningful
    only when both are in comparable units: a model with 10× larger features would get
    decoders 10× longer and every latent would look exclusive to it. Centring and scaling
    each model to total variance 1 puts the two on an equal footing (and weighs them equally
    in the loss) whatever their widths and feature units; the decoder biases start at 0,
    the data's mean.
    """

    def __init__(self, n_explanations: int = 3, *, n_latents: int | None = None,
                 top_k: int = 8, dedicated_fraction: float = 0.0,
                 exclusive_threshold: float = 0.1, n_epochs: int = 300, lr: float = 2e-3,
                 batch_size: int = 128, aux_penalty: float = 1 / 32, grid_size: int = 9,
                 random_state: int = 42, device: str = "auto", verbose: int = 0) -> None:
        self.n_explanations = n_explanations
        self.n_latents = n_latents
        self.top_k = top_k
        self.dedicated_fraction = dedicated_fraction
        self.exclusive_threshold = exclusive_threshold
        self.n_epochs = n_epochs
        self.lr = lr
        self.batch_size = batch_size
        self.aux_penalty = aux_penalty
        self.grid_size = grid_size
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    # ------------------------------------------------------------------ validation

    def _check_params(self, n: int | None) -> None:
        super()._check_params(n)
        check_training_params(self, n)
        V.check_int(self.top_k, "top_k", minimum=1)
        q = V.check_number(self.dedicated_fraction, "dedicated_fraction")
        if not 0.0 <= q < 1.0:
            raise RDXInputError(f"dedicated_fraction must be in [0, 1), got "
                                f"{self.dedicated_fraction!r}.")
        t = V.check_number(self.exclusive_threshold, "exclusive_threshold")
        if not 0.0 < t < 0.5:
            raise RDXInputError(f"exclusive_threshold must be in (0, 0.5) (A-exclusive below "
                                f"it, B-exclusive above 1 − it), got "
                                f"{self.exclusive_threshold!r}.")
        if V.check_number(self.aux_penalty, "aux_penalty") < 0:
            raise RDXInputError(f"aux_penalty must be >= 0, got {self.aux_penalty!r}.")
        if self.n_latents is not None:
            self._check_latents(V.check_int(self.n_latents, "n_latents", minimum=2))

    def _check_latents(self, m: int) -> None:
        """Constraints that involve the dictionary size (known only with data when None)."""
        t = int(self.top_k)
        if t > m:
            raise RDXInputError(f"top_k={t} is larger than n_latents={m}; an image cannot "
                                "activate more latents than there are.")
        check_n_concepts(self.n_explanations, None, limit=m // 2,
                         why=f" (half of n_latents={m}: each model needs its own "
                             "latents); use fewer explanations or more latents")
        q = float(self.dedicated_fraction)
        if q > 0 and self._n_dedicated(m) < 1:
            raise RDXInputError(
                f"dedicated_fraction={q:g} of n_latents={m} leaves no dedicated latent per "
                f"model (floor(q·m/2) = 0); use at least {2 / m:.3g} or 0 for none.")

    def _n_dedicated(self, m: int) -> int:
        return int(np.floor(float(self.dedicated_fraction) * m / 2 + 1e-9))

    # ------------------------------------------------------------------ training

    @reproducible_fit
    def _fit(self, A: np.ndarray, B: np.ndarray) -> None:
        device = resolve_device(self.device)
        g = make_generator(int(self.random_state))
        n, (d_a, d_b) = A.shape[0], (A.shape[1], B.shape[1])
        m = int(self.n_latents) if self.n_latents is not None else 2 * (d_a + d_b)
        self._check_latents(m)
        k, top_k, bs = int(self.n_explanations), int(self.top_k), int(self.batch_size)
        aux_k = min(2 * top_k, m)

        self.means_, self.scales_ = {}, {}
        scaled = []
        for key, X in zip(MODELS, (A, B)):
            mu = X.mean(axis=0, dtype=np.float64)
            centred = X.astype(np.float64) - mu
            self.means_[key] = mu
            self.scales_[key] = float(np.sqrt(np.mean(np.sum(centred ** 2, axis=1))))
            scaled.append((centred / self.scales_[key]).astype(np.float32))
        X = torch.as_tensor(np.concatenate(scaled, axis=1), device=device)

        nd = self._n_dedicated(m)
        dedicated = np.full(m, "", dtype="<U1")
        dedicated[:nd], dedicated[nd:2 * nd] = "a", "b"
        # masks: a dedicated latent neither reads from nor writes to the other model
        keep_a = torch.as_tensor(dedicated != "b", dtype=torch.float32)   # (m,) writes to A
        keep_b = torch.as_tensor(dedicated != "a", dtype=torch.float32)
        enc_mask = torch.cat([keep_a.expand(d_a, m), keep_b.expand(d_b, m)])

        # unit-norm random decoder rows per model (r = 0.5), zero where masked; tied encoder
        D_a = unit_rows(torch.randn((m, d_a), generator=g)) * keep_a[:, None]
        D_b = unit_rows(torch.randn((m, d_b), generator=g)) * keep_b[:, None]
        p = {"W_enc": torch.cat([D_a, D_b], dim=1).T.contiguous(), "b_enc": torch.zeros(m),
             "D_a": D_a, "D_b": D_b, "b_a": torch.zeros(d_a), "b_b": torch.zeros(d_b)}
        p = {name: t.to(device).requires_grad_(True) for name, t in p.items()}
        keep_a, keep_b, enc_mask = keep_a.to(device), keep_b.to(device), enc_mask.to(device)

        def decoders() -> tuple[torch.Tensor, torch.Tensor]:
            # the mask makes the masked entries' gradients exactly 0, so Adam leaves them at
            # their initial 0: the stored parameters stay exactly zero, not just the product
            return p["D_a"] * keep_a[:, None], p["D_b"] * keep_b[:, None]

        def activations(x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x @ (p["W_enc"] * enc_mask) + p["b_enc"])

        per_epoch = steps_per_epoch(n, bs)
        total = per_epoch * int(self.n_epochs)
        schedule = lr_schedule(float(self.lr), warmup_steps=min(per_epoch, total - 1),
                               warmup_start=float(self.lr) / 10, total_steps=total,
                               final_lr=float(self.lr) / 10)
        opt = torch.optim.Adam(p.values(), lr=float(self.lr))
        aux_penalty = float(self.aux_penalty)
        # step at which each latent last fired; "dead" after an epoch without firing
        last_fired = torch.zeros(m, dtype=torch.long, device=device)
        t_step = [0]

        def step(idx: torch.Tensor) -> torch.Tensor:
            t_step[0] += 1
            x = X[idx.to(device)]
            Da, Db = decoders()
            act = activations(x)
            norms = (Da.norm(dim=1) + Db.norm(dim=1)).detach()
            f = batch_topk(act, norms, top_k)
            res_a = x[:, :d_a] - (f @ Da + p["b_a"])
            res_b = x[:, d_a:] - (f @ Db + p["b_b"])
            loss = res_a.square().sum(1).mean() + res_b.square().sum(1).mean()
            with torch.no_grad():
                last_fired[(f > 0).any(dim=0)] = t_step[0]
            if aux_penalty > 0:
                dead = (t_step[0] - last_fired > per_epoch).float()
                # only dead latents' activations compete; with fewer dead than aux_k the
                # rest of the picks are zeros and add nothing (no host sync to count them)
                act_dead = act * dead
                top = torch.topk(act_dead, aux_k, dim=1)
                z = torch.zeros_like(act_dead).scatter(1, top.indices, top.values)
                residual = torch.cat([res_a, res_b], dim=1).detach()
                aux = (residual - z @ torch.cat([Da, Db], dim=1)).square().sum(1).mean()
                loss = loss + aux_penalty * aux
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.detach()

        desc = "DFC crosscoder" if nd else "crosscoder"
        losses = train_epochs(step, n=n, n_epochs=int(self.n_epochs), batch_size=bs,
                              generator=g, optimizer=opt, schedule=schedule,
                              verbose=self.verbose, desc=desc)

        # ------------------------------------------------------------ the fitted model
        with torch.no_grad():
            Da, Db = decoders()
            norms = torch.stack([Da.norm(dim=1), Db.norm(dim=1)], dim=1)
            weights = norms.sum(1)
            act = torch.cat([activations(X[i:i + bs]) for i in range(0, n, max(bs, 1))])
            codes, threshold = global_batch_topk(act, weights, top_k)
            r2 = {"a": r2_score(X[:, :d_a], codes @ Da + p["b_a"]),
                  "b": r2_score(X[:, d_a:], codes @ Db + p["b_b"])}
        self.encoder_ = to_numpy(p["W_enc"] * enc_mask)
        self.b_enc_ = to_numpy(p["b_enc"])
        self.decoders_ = {"a": to_numpy(Da), "b": to_numpy(Db)}
        self.b_dec_ = {"a": to_numpy(p["b_a"]), "b": to_numpy(p["b_b"])}
        self.threshold_ = float(threshold)
        self.dedicated_ = dedicated
        self.codes_ = to_numpy(codes)
        self.decoder_norms_ = to_numpy(norms).astype(np.float64)
        self.relative_norms_ = relative_norms(self.decoder_norms_[:, 0],
                                              self.decoder_norms_[:, 1])
        fires = (self.codes_ > 0).any(axis=0)
        self.latent_classes_ = classify_latents(self.relative_norms_,
                                                float(self.exclusive_threshold), fires)
        code_sum = self.codes_.sum(axis=0, dtype=np.float64)
        mass = {key: code_sum * self.decoder_norms_[:, i] for i, key in enumerate(MODELS)}
        chosen = select_exclusive_latents(self.latent_classes_, self.relative_norms_, mass, k)
        self._set_outputs(chosen)
        self._set_info(chosen, mass, losses, r2, nd, m, device)

    def _set_outputs(self, chosen: dict[str, list[int]]) -> None:
        self.directions_ = {}
        self.arrays_ = {}
        for i, (key, direction) in enumerate((("a", "a_over_b"), ("b", "b_over_a"))):
            ids = chosen[key]
            grids = top_images(self.codes_, ids, int(self.grid_size))
            exps = []
            for c, grid in zip(ids, grids):
                e = self._explanation(c, grid, self.codes_)
                e["relative_norm"] = float(self.relative_norms_[c])
                e["exclusive"] = bool(self.latent_classes_[c] == key)
                exps.append(e)
            self.directions_[direction] = exps
            self.arrays_[f"{key}_codes"] = np.ascontiguousarray(self.codes_[:, ids])
            self.arrays_[f"{key}_concepts"] = np.asarray(ids, dtype=np.int64)
            self.arrays_[f"{key}_dictionary"] = np.ascontiguousarray(self.decoders_[key][ids])
        self.arrays_["relative_norm"] = self.relative_norms_.astype(np.float32)

    def _set_info(self, chosen: dict[str, list[int]], mass: dict[str, np.ndarray],
                  losses: list[float], r2: dict[str, float], nd: int, m: int,
                  device: torch.device) -> None:
        live = np.isfinite(self.relative_norms_) & (self.latent_classes_ != "dead")
        hist, _ = np.histogram(self.relative_norms_[live], bins=HISTOGRAM_BINS, range=(0, 1))
        directions = {"a": "a_over_b", "b": "b_over_a"}
        self.info_ = {
            "r2": r2,
            "n_classes": {c: int(np.sum(self.latent_classes_ == c)) for c in CLASSES},
            "n_exclusive": {key: int(np.sum(self.latent_classes_ == key)) for key in MODELS},
            "relative_norm_histogram": hist.tolist(),
            "concepts": {directions[key]: list(ids) for key, ids in chosen.items()},
            "relative_norm": {directions[key]: [float(self.relative_norms_[c]) for c in ids]
                              for key, ids in chosen.items()},
            "mass": {directions[key]: [float(mass[key][c]) for c in ids]
                     for key, ids in chosen.items()},
            "exclusive": {directions[key]: [bool(self.latent_classes_[c] == key) for c in ids]
                          for key, ids in chosen.items()},
            "n_dedicated": {"a": nd, "b": nd},
            "dead_fraction": float(np.mean(self.latent_classes_ == "dead")),
            "loss": losses[-1], "loss_per_epoch": downsample(losses),
            "threshold": self.threshold_, "n_latents": m, "top_k": int(self.top_k),
            "exclusive_threshold": float(self.exclusive_threshold),
            "n_epochs": int(self.n_epochs), "batch_size": min(int(self.batch_size),
                                                              self.codes_.shape[0]),
            "input_scales": dict(self.scales_), "device": str(device),
        }

    # ------------------------------------------------------------------ inference

    def encode(self, A: Any, B: Any) -> np.ndarray:
        """Codes (n × n_latents) of (new) image pairs: the fitted scaling, then the learned
        threshold on ``a_i · (|D_A,i| + |D_B,i|)`` (BatchTopK's inference rule).

        On the training images this reproduces ``codes_`` except for codes within
        rounding of the threshold (training encodes in float32 on its device, this in
        float64 with numpy).
        """
        if not hasattr(self, "encoder_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit(A, B) first.")
        reps = []
        for key, X, name in (("a", A, "A"), ("b", B, "B")):
            X = V.as_representation(X, name)
            d = self.means_[key].shape[0]
            if X.shape[1] != d:
                raise RDXInputError(f"{name} has {X.shape[1]} features; the crosscoder was "
                                    f"fit on {d}.")
            reps.append(((X.astype(np.float64) - self.means_[key]) / self.scales_[key]))
        V.check_pair(*reps)
        act = np.maximum(np.concatenate(reps, axis=1) @ self.encoder_ + self.b_enc_, 0.0)
        weights = self.decoder_norms_.sum(axis=1)
        score = act * weights
        keep = (score >= self.threshold_) & (score > 0)
        return (act * keep).astype(np.float32)


class DedicatedFeatureCrosscoder(Crosscoder):
    """:class:`Crosscoder` with dedicated latents by default (``dedicated_fraction=0.2``:
    10 % of the latents reserved for each model), registered as ``dfc_crosscoder``.

    The dedicated feature crosscoder (Jiralerspong & Bricken 2025) reserves latents for
    one model — their weights for the other model are fixed at zero — so that structure
    only one model has is not absorbed into shared latents. Everything else, including the
    classification and concept selection, is :class:`Crosscoder`'s.
    """

    def __init__(self, n_explanations: int = 3, *, n_latents: int | None = None,
                 top_k: int = 8, dedicated_fraction: float = 0.2,
                 exclusive_threshold: float = 0.1, n_epochs: int = 300, lr: float = 2e-3,
                 batch_size: int = 128, aux_penalty: float = 1 / 32, grid_size: int = 9,
                 random_state: int = 42, device: str = "auto", verbose: int = 0) -> None:
        super().__init__(n_explanations, n_latents=n_latents, top_k=top_k,
                         dedicated_fraction=dedicated_fraction,
                         exclusive_threshold=exclusive_threshold, n_epochs=n_epochs, lr=lr,
                         batch_size=batch_size, aux_penalty=aux_penalty, grid_size=grid_size,
                         random_state=random_state, device=device, verbose=verbose)
