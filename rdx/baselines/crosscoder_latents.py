"""The crosscoder's latent arithmetic, pure functions on arrays: BatchTopK sparsity (per
batch and over a whole data set), the relative decoder norms of each latent, the
classification into A-exclusive, B-exclusive, shared and dead latents, and the rule that
picks the latents shown per direction. :mod:`.crosscoder` trains the dictionary and calls
these."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError

#: model keys, in the order of :meth:`~.crosscoder.Crosscoder.fit`'s arguments
MODELS = ("a", "b")


def batch_topk(act: torch.Tensor, weights: torch.Tensor, k: int) -> torch.Tensor:
    """BatchTopK: keep the ``k · batch`` largest weighted activations of the whole batch.

    ``act`` (batch × m) are non-negative activations, ``weights`` (m,) scale each latent's
    activation for the ranking only (the sum of its decoder norms, so that the choice does
    not depend on how a latent splits its scale between encoder and decoder). Unlike a
    per-row top-k, an image may keep more or fewer than ``k`` latents; the batch keeps
    exactly ``min(k · batch, batch · m)`` entries (zeros among them stay zero).
    """
    scores = (act * weights).detach().flatten()
    keep = min(int(k) * act.shape[0], scores.numel())
    if keep >= scores.numel():
        return act
    idx = torch.topk(scores, keep, sorted=False).indices
    mask = torch.zeros_like(scores).scatter_(0, idx, 1.0).view_as(act)
    return act * mask


def relative_norms(norm_a: Any, norm_b: Any) -> np.ndarray:
    """``r = |d_B| / (|d_A| + |d_B|)`` per latent; NaN where both decoder norms are 0."""
    na, nb = np.asarray(norm_a, dtype=np.float64), np.asarray(norm_b, dtype=np.float64)
    total = na + nb
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, nb / np.where(total > 0, total, 1.0), np.nan)


def classify_latents(r: Any, threshold: float = 0.1, fires: Any = None) -> np.ndarray:
    """Latent classes from relative norms: ``"a"`` (r < threshold: decoder for B near 0,
    A-exclusive), ``"b"`` (r > 1 − threshold, B-exclusive), ``"shared"`` otherwise, and
    ``"dead"`` for latents with no decoder (r NaN) or, given ``fires`` (bool per latent),
    that never fire."""
    r = np.asarray(r, dtype=np.float64)
    out = np.full(r.shape, "shared", dtype="<U6")
    out[r < threshold] = "a"
    out[r > 1.0 - threshold] = "b"
    dead = ~np.isfinite(r)
    if fires is not None:
        dead |= ~np.asarray(fires, dtype=bool)
    out[dead] = "dead"
    return out


def select_exclusive_latents(classes: np.ndarray, r: np.ndarray, mass: dict[str, np.ndarray],
                             k: int) -> dict[str, list[int]]:
    """The ``k`` latents shown per model (see :class:`Crosscoder`, "Concept selection").

    ``mass[side]`` is each latent's activation mass towards that model. Exclusive latents of
    the model come first, by decreasing mass; when there are fewer than ``k``, the live
    shared latents leaning towards the model (r < 0.5 for A, r > 0.5 for B) follow, most
    exclusive first (r ascending for A, descending for B). Should that still leave a model
    short (a dictionary with nearly all latents on one side), the remaining live shared
    latents not shown for the other model complete it in the same order, model A first.
    Ties go to the lower latent id; no latent is shown for both models.

    Raises
    ------
    RDXInputError
        When fewer than ``2 k`` live latents can be shown (none exclusive to the other
        model counts).
    """
    ids = np.arange(len(r))
    lean = {"a": r, "b": 1.0 - r}
    shared = ids[classes == "shared"]
    chosen: dict[str, list[int]] = {}
    for side in MODELS:
        exclusive = ids[classes == side]
        exclusive = exclusive[np.lexsort((exclusive, -mass[side][exclusive]))]
        rest = shared[lean[side][shared] < 0.5]
        rest = rest[np.lexsort((rest, lean[side][rest]))]
        chosen[side] = [int(c) for c in np.concatenate([exclusive, rest])[:k]]
    for side in MODELS:
        if len(chosen[side]) < k:
            taken = set(chosen["a"]) | set(chosen["b"])
            rest = np.array([c for c in shared if c not in taken], dtype=np.int64)
            rest = rest[np.lexsort((rest, lean[side][rest]))]
            chosen[side] += [int(c) for c in rest[:k - len(chosen[side])]]
        if len(chosen[side]) < k:
            raise RDXInputError(
                f"the crosscoder has only {len(chosen[side])} live latent(s) to show for "
                f"model {side.upper()}, but n_explanations={k} are needed. Use fewer "
                "explanations, more latents (n_latents) or longer training (n_epochs).")
    return chosen


def global_batch_topk(act: torch.Tensor, weights: torch.Tensor, k: int
                       ) -> tuple[torch.Tensor, float]:
    """BatchTopK over a whole data set (``k · n`` kept) and the smallest kept score.

    The threshold is found from the scores' ``k · n`` largest values, gathered chunk by
    chunk so that no second n × m array is needed; entries tied with it are all kept.
    """
    n = act.shape[0]
    keep = min(int(k) * n, act.numel())
    scores = act * weights
    chunk = max(1, (1 << 22) // max(act.shape[1], 1))
    best = scores.new_empty(0)
    for i in range(0, n, chunk):
        pool = torch.cat([best, scores[i:i + chunk].flatten()])
        best = torch.topk(pool, min(keep, pool.numel()), sorted=False).values
    threshold = float(best.min()) if best.numel() else 0.0
    mask = (scores >= threshold) & (scores > 0)
    return act * mask, threshold
