"""Layer taps: feature functions that read one module's output with a forward hook and
reduce it to an ``n × d`` feature (spatial mean, CLS token), and the layer names of
:func:`rdx.models.zoo.load_model`.

The hook is on the one module requested (the original code kept all 12 ViT blocks); it then
stops the forward pass, as the rest is not needed.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import RDXInputError
from .loaded_model import FeatureFn

#: Alternative layer names (the original code's) → canonical names.
LAYER_ALIASES: dict[str, str] = {"v1": "cls_post_norm", "v0": "gap"}


class _Captured(Exception):
    """Raised by a capture hook to stop the forward pass once the layer is computed."""


def _first(out: Any) -> torch.Tensor:
    # some modules return tuples (e.g. attention blocks with extra outputs)
    return out[0] if isinstance(out, (tuple, list)) else out


def cls_token(out: Any) -> torch.Tensor:
    """Token 0 (the CLS token of ViTs) of a batch-first ``n×L×D`` sequence."""
    out = _first(out)
    if out.ndim == 3:
        return out[:, 0]
    if out.ndim == 2:   # already pooled (e.g. OpenCLIP's ln_post after pooling)
        return out
    raise RDXInputError(f"expected token sequences n×L×D, got shape {tuple(out.shape)}.")


def spatial_mean(out: Any) -> torch.Tensor:
    """Global average pool of an ``n×C×H×W`` feature map → ``n×C``."""
    out = _first(out)
    if out.ndim != 4:
        raise RDXInputError(f"expected a conv feature map n×C×H×W, got shape "
                            f"{tuple(out.shape)}.")
    return out.mean(dim=(2, 3))


def reduce_auto(out: Any) -> torch.Tensor:
    """Conv maps → spatial mean, token sequences → token 0, vectors as they are."""
    out = _first(out)
    if out.ndim == 4:
        return spatial_mean(out)
    if out.ndim == 3:
        return cls_token(out)
    return out.flatten(1)


def tap(run: Callable[[torch.Tensor], Any], module: nn.Module, reduce: Callable,
        name: str) -> FeatureFn:
    """A feature function that returns ``reduce(output of module)`` for a batch.

    The hook is registered for the duration of one call only (the caller's model is left
    without hooks), keeps only this module's output, and raises :class:`_Captured` so that
    the layers after it are not computed.
    """
    def feature_fn(x: torch.Tensor) -> torch.Tensor:
        store: list = []

        def hook(_module, _inputs, output):
            store.append(output)
            raise _Captured

        handle = module.register_forward_hook(hook)
        try:
            run(x)
        except _Captured:
            pass
        finally:
            handle.remove()
        if not store:
            raise RDXInputError(f"layer {name!r} is not computed by this model's forward pass "
                                "(choose a module on the path from the input to the output).")
        return reduce(store[0])

    return feature_fn


def submodule(model: nn.Module, name: str) -> nn.Module | None:
    """The submodule ``name`` of ``model``, or None when it has none of that name."""
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


def resolve_layer(layer: str | None, named: dict[str, Callable[[], FeatureFn]],
                  default: str, model: nn.Module, run: Callable, model_id: str
                  ) -> tuple[str, FeatureFn]:
    """Canonical layer name and its feature function (named layer or any submodule)."""
    layer = default if layer is None else str(layer)
    canonical = LAYER_ALIASES.get(layer, layer)
    if canonical in named:
        return canonical, named[canonical]()
    module = submodule(model, layer) if layer else None
    if module is not None and module is not model:
        return layer, tap(run, module, reduce_auto, layer)
    aliases = [a for a, c in LAYER_ALIASES.items() if c in named]
    children = [n for n, _ in model.named_children()][:12]
    raise RDXInputError(
        f"unknown layer {layer!r} for {model_id}; use one of {sorted(named) + aliases}, or the "
        f"name of a submodule (top-level ones: {children}; see model.named_modules()).")


def vit_layers(run: Callable, blocks: nn.Module, norm: nn.Module, has_cls: bool,
               model_id: str) -> dict[str, Callable[[], FeatureFn]]:
    """``cls_tok_ll`` / ``cls_post_norm`` taps for a transformer with a CLS token."""
    def need_cls() -> None:
        if not has_cls:
            raise RDXInputError(f"{model_id} has no CLS token, so cls_tok_ll/cls_post_norm "
                                "are undefined; use 'pre_logits' or a submodule name.")

    def last_block() -> FeatureFn:
        need_cls()
        return tap(run, blocks, cls_token, "cls_tok_ll")

    def post_norm() -> FeatureFn:
        need_cls()
        if isinstance(norm, nn.Identity):
            raise RDXInputError(f"{model_id} has no final norm before pooling (it normalises "
                                "after pooling, fc_norm); use 'pre_logits'.")
        return tap(run, norm, cls_token, "cls_post_norm")

    return {"cls_tok_ll": last_block, "cls_post_norm": post_norm}
