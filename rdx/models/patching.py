"""Per-head mean-ablation patching of timm Vision Transformer blocks.

Hook points on attention
------------------------
:class:`AttentionHooks` adds named hook points to one timm ``Attention`` module without
changing its class or weights. While no hook is registered nothing is attached to the
module, so it runs timm's own (fused) code and gives exactly the unpatched output. Once a
hook is registered, a forward hook on the module recomputes the attention *unfused* from the
module's input and returns that instead:

1. ``qkv`` projection, reshaped to (3, B, H, N, Dh); ``q_norm``/``k_norm``
   → hook points ``q``, ``k``, ``v`` (each B×H×N×Dh);
2. ``softmax(q·scale · kᵀ + mask)`` → hook point ``attn_weights`` (B×H×N×N), then the
   attention dropout;
3. ``attention · v`` merged back to B×N×(H·Dh), head ``h`` in columns ``h·Dh:(h+1)·Dh``
   → hook point ``attn_output``;
4. timm's ``norm``, the optional output gate, ``proj`` and ``proj_drop``.

Each hook is a function tensor → tensor (return the tensor unchanged to only read it).
Without hooks that change values, the recomputed output equals timm's fused output up to
float rounding (tested).

Mean ablation
-------------
:func:`head_output_means` streams images through a model and averages every chosen
attention module's ``attn_output`` over the images, per token position: an (N, H, Dh)
array per module. :func:`mean_ablation` (a context manager) replaces head ``h``'s slice of
``attn_output`` by that mean for every image, so the block computes what it would if head
``h`` carried no image-specific information.

Metrics
-------
Pure functions of a patched representation P and the unpatched target T (same images):
:func:`topk_neighbourhood_change` (1 − mean overlap of the k nearest neighbours),
:func:`cluster_neighbourhood_delta` (how much the patch moves the members of each RDX
cluster apart in neighbour-rank terms, both sides symmetrised the same way and always
against the unpatched target layer).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import RDXInputError

#: Hook points of :class:`AttentionHooks`, in the order they are applied.
HOOK_POINTS = ("q", "k", "v", "attn_weights", "attn_output")

HookFn = Callable[[torch.Tensor], torch.Tensor]


def is_timm_attention(module: nn.Module) -> bool:
    """Whether ``module`` is timm's standard ``Attention`` (the class the unfused
    recomputation reproduces; subclasses with another forward are refused)."""
    try:
        from timm.layers import Attention
    except ImportError:  # pragma: no cover - timm is a dependency
        return False
    return type(module) is Attention


def check_attention(module: nn.Module, name: str = "module") -> None:
    if not is_timm_attention(module):
        raise RDXInputError(
            f"{name} is a {type(module).__module__}.{type(module).__name__}; head patching "
            "supports timm's standard Attention (timm VisionTransformer blocks, also the "
            "trunk of OpenCLIP models such as BiomedCLIP).")


class AttentionHooks:
    """Named hook points on one timm ``Attention`` module (see the module docstring).

    Parameters
    ----------
    module : timm.layers.Attention
    """

    def __init__(self, module: nn.Module) -> None:
        check_attention(module, "the module")
        self.module = module
        self._hooks: dict[str, list[HookFn]] = {p: [] for p in HOOK_POINTS}
        self._handle: Any = None

    # ------------------------------------------------------------------ registration
    @property
    def active(self) -> bool:
        """Whether any hook is registered (the module then runs the unfused path)."""
        return any(self._hooks.values())

    def register(self, point: str, fn: HookFn) -> Callable[[], None]:
        """Add ``fn`` at ``point``; returns a function that removes it again."""
        if point not in HOOK_POINTS:
            raise RDXInputError(f"unknown attention hook point {point!r}; use one of "
                                f"{HOOK_POINTS}.")
        self._hooks[point].append(fn)
        if self._handle is None:
            self._handle = self.module.register_forward_hook(self._forward_hook,
                                                             with_kwargs=True)

        def remove() -> None:
            if fn in self._hooks[point]:
                self._hooks[point].remove(fn)
            self._detach_if_idle()

        return remove

    def clear(self, point: str | None = None) -> None:
        """Remove the hooks of ``point`` (all points if None)."""
        for p in HOOK_POINTS if point is None else [point]:
            self._hooks[p].clear()
        self._detach_if_idle()

    def _detach_if_idle(self) -> None:
        if not self.active and self._handle is not None:
            self._handle.remove()
            self._handle = None

    # ------------------------------------------------------------------ forward
    def _apply(self, point: str, t: torch.Tensor) -> torch.Tensor:
        for fn in self._hooks[point]:
            out = fn(t)
            if not isinstance(out, torch.Tensor) or out.shape != t.shape:
                raise RDXInputError(f"attention hook at {point!r} must return a tensor of "
                                    f"shape {tuple(t.shape)}.")
            t = out
        return t

    def _forward_hook(self, module: nn.Module, args: tuple, kwargs: dict, output: Any):
        if not self.active:
            return None
        x = args[0] if args else kwargs["x"]
        return self.unfused(x, attn_mask=kwargs.get("attn_mask", args[1] if len(args) > 1
                                                    else None),
                            is_causal=bool(kwargs.get("is_causal", False)))

    def unfused(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        """timm's attention computed step by step, with the hooks applied."""
        m = self.module
        B, N, _ = x.shape
        H, Dh = m.num_heads, m.head_dim
        gate = m.gate(x).sigmoid() if getattr(m, "gate", None) is not None else None
        qkv = m.qkv(x).reshape(B, N, 3, H, Dh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = m.q_norm(q), m.k_norm(k)
        q, k, v = self._apply("q", q), self._apply("k", k), self._apply("v", v)
        attn = (q * m.scale) @ k.transpose(-2, -1)
        if attn_mask is not None or is_causal:
            from timm.layers.attention import maybe_add_mask, resolve_self_attn_mask
            attn = maybe_add_mask(attn, resolve_self_attn_mask(N, attn, attn_mask, is_causal))
        attn = self._apply("attn_weights", attn.softmax(dim=-1))
        attn = m.attn_drop(attn)
        out = (attn @ v).transpose(1, 2).reshape(B, N, H * Dh)
        out = self._apply("attn_output", out)
        out = m.norm(out)
        if gate is not None:
            out = out * gate
        return m.proj_drop(m.proj(out))


def attention_of(block: nn.Module, name: str = "block") -> nn.Module:
    """The ``attn`` module of a transformer block, checked."""
    attn = getattr(block, "attn", None)
    if attn is None:
        raise RDXInputError(f"{name} ({type(block).__name__}) has no 'attn' module; head "
                            "patching needs timm VisionTransformer blocks.")
    check_attention(attn, f"{name}.attn")
    return attn


# --------------------------------------------------------------------------- mean ablation

class HeadMeanAccumulator:
    """An ``attn_output`` hook that sums the merged head outputs per token position (float64)
    and returns them unchanged; :attr:`mean` is the (N, H, Dh) dataset mean."""

    def __init__(self, num_heads: int, head_dim: int) -> None:
        self.num_heads, self.head_dim = num_heads, head_dim
        self.total: torch.Tensor | None = None
        self.count = 0

    def __call__(self, out: torch.Tensor) -> torch.Tensor:
        s = out.detach().double().sum(dim=0).cpu()
        self.total = s if self.total is None else self.total + s
        self.count += out.shape[0]
        return out

    @property
    def mean(self) -> np.ndarray:
        if self.total is None or self.count == 0:
            raise RDXInputError("no images went through the attention module; nothing to "
                                "average.")
        n_tok = self.total.shape[0]
        return (self.total / self.count).reshape(n_tok, self.num_heads, self.head_dim).numpy()


@torch.no_grad()
def head_output_means(batches: Iterable[torch.Tensor], run: Callable[[torch.Tensor], Any],
                      modules: dict[str, nn.Module], *, device: torch.device | str = "cpu",
                      progress: Any = None) -> dict[str, np.ndarray]:
    """Dataset mean of every module's per-head attention output, per token position.

    Parameters
    ----------
    batches : iterable of tensors
        Input batches (e.g. the images of a DataLoader).
    run : callable
        The forward pass of the model holding ``modules``.
    modules : dict
        name → timm ``Attention`` module.
    progress : tqdm bar, optional
        Advanced by the batch size.

    Returns
    -------
    dict
        name → float64 array (tokens, heads, head_dim).
    """
    hooks, accs, removers = {}, {}, []
    for name, mod in modules.items():
        hooks[name] = AttentionHooks(mod)
        accs[name] = HeadMeanAccumulator(mod.num_heads, mod.head_dim)
        removers.append(hooks[name].register("attn_output", accs[name]))
    try:
        for x in batches:
            run(x.to(device))
            if progress is not None:
                progress.update(len(x))
    finally:
        for remove in removers:
            remove()
    return {name: acc.mean for name, acc in accs.items()}


def ablate_head(out: torch.Tensor, mean: torch.Tensor, head: int, head_dim: int
                ) -> torch.Tensor:
    """``out`` (B×N×H·Dh) with head ``head``'s columns replaced by ``mean`` (N×H×Dh)."""
    sl = slice(head * head_dim, (head + 1) * head_dim)
    patched = out.clone()
    patched[:, :, sl] = mean[:, head, :].to(out.dtype)
    return patched


@contextlib.contextmanager
def mean_ablation(attn: nn.Module, means: np.ndarray | torch.Tensor, head: int
                  ) -> Iterator[AttentionHooks]:
    """Within the block, head ``head`` of ``attn`` outputs its dataset mean (per token)."""
    hooks = AttentionHooks(attn)
    if not 0 <= int(head) < attn.num_heads:
        raise RDXInputError(f"head {head} does not exist; the module has {attn.num_heads} "
                            "heads.")
    mean = torch.as_tensor(np.asarray(means), dtype=torch.float32)
    if mean.ndim != 3 or mean.shape[1:] != (attn.num_heads, attn.head_dim):
        raise RDXInputError(f"head means must be (tokens, {attn.num_heads}, {attn.head_dim}), "
                            f"got {tuple(mean.shape)}.")
    dev_mean: dict[torch.device, torch.Tensor] = {}

    def patch(out: torch.Tensor) -> torch.Tensor:
        if out.shape[1] != mean.shape[0]:
            raise RDXInputError(f"the head means have {mean.shape[0]} token positions but the "
                                f"block sees {out.shape[1]}; compute them on images of the "
                                "same size.")
        m = dev_mean.setdefault(out.device, mean.to(out.device))
        return ablate_head(out, m, int(head), attn.head_dim)

    remove = hooks.register("attn_output", patch)
    try:
        yield hooks
    finally:
        remove()


# --------------------------------------------------------------------------- metrics

def knn_mask(R: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean n×n mask of each row's k nearest neighbours from a neighbour-rank matrix
    (rank 0 = the image itself, excluded)."""
    return (R >= 1) & (R <= k)


def topk_neighbourhood_change(R_patched: torch.Tensor, R_target: torch.Tensor, k: int
                              ) -> float:
    """``1 − mean_i |kNN_k(P)_i ∩ kNN_k(T)_i| / k`` from the two neighbour-rank matrices."""
    n = R_patched.shape[0]
    if not 1 <= k < n:
        raise RDXInputError(f"k must lie in 1..{n - 1} for {n} images, got {k}.")
    overlap = (knn_mask(R_patched, k) & knn_mask(R_target, k)).sum(dim=1).double()
    return float(1.0 - (overlap / k).mean())


def symmetrised(R: torch.Tensor) -> torch.Tensor:
    """``(R + Rᵀ) / 2`` in float64."""
    R = R.double()
    return (R + R.T) / 2


def cluster_neighbourhood_delta(Q: torch.Tensor, G: torch.Tensor, labels: np.ndarray,
                                direction: str, *, eps: float = 1e-8) -> dict[str, list]:
    """How far mean-ablating a head moves the members of each RDX cluster apart.

    ``Q`` and ``G`` are the neighbour-rank matrices of the patched and of the unpatched
    *target* layer (the layer after the block), both symmetrised here the same way (the
    original compared unsymmetrised patched ranks with a symmetrised target, and the other
    direction with the layer before the block). For cluster ``c`` (label ≥ 1)::

        δ_c = mean_{i≠j ∈ c} (Qs − Gs)[i, j] / (n − 1)           (a fraction of all ranks)
        δ_c ← −δ_c for a_over_b
        selectivity_c = δ_c·(n − 1) / (mean_{i≠j ∉ c} |Qs − Gs|[i, j] + eps)

    ``b_over_a`` clusters are images the block brought together; ``δ > 0`` means the patch
    spreads them apart again, i.e. the head helps bring them together. ``a_over_b``
    clusters were spread apart by the block; the sign is flipped so that ``δ > 0`` again
    means the head is responsible. Selectivity compares the change within the cluster with
    the typical change among the other images.

    Returns
    -------
    dict
        ``labels`` (the cluster labels present, ascending), ``delta``, ``selectivity``.
    """
    if direction not in ("a_over_b", "b_over_a"):
        raise RDXInputError(f"direction must be 'a_over_b' or 'b_over_a', got {direction!r}.")
    n = Q.shape[0]
    lab = np.asarray(labels, dtype=np.int64)
    if lab.shape != (n,):
        raise RDXInputError(f"labels must have one entry per image ({n}), got {lab.shape}.")
    D = symmetrised(Q) - symmetrised(G)
    absD = D.abs()
    total_abs = float(absD.sum())
    present = [int(c) for c in np.unique(lab) if c >= 1]
    sign = -1.0 if direction == "a_over_b" else 1.0
    deltas, sels = [], []
    for c in present:
        idx = torch.as_tensor(np.flatnonzero(lab == c))
        m = len(idx)
        if m < 2:
            deltas.append(None)
            sels.append(None)
            continue
        within = float(D.index_select(0, idx).index_select(1, idx).sum())   # diagonal is 0
        delta = sign * within / (m * (m - 1))
        # Σ over non-members × non-members of |D| = total − 2·(rows of c) + (c × c); D is
        # symmetric and its diagonal zero
        rows = float(absD.index_select(0, idx).sum())
        cc = float(absD.index_select(0, idx).index_select(1, idx).sum())
        k = n - m
        outside = (total_abs - 2 * rows + cc) / (k * (k - 1)) if k > 1 else 0.0
        deltas.append(delta / (n - 1))
        sels.append(delta / (outside + eps))
    return {"labels": present, "delta": deltas, "selectivity": sels}


__all__ = ["HOOK_POINTS", "AttentionHooks", "HeadMeanAccumulator", "ablate_head",
           "attention_of", "check_attention", "cluster_neighbourhood_delta",
           "head_output_means", "is_timm_attention", "knn_mask", "mean_ablation",
           "symmetrised", "topk_neighbourhood_change"]
