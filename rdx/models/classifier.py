"""A classifier checkpoint as features and logits: the network and its transform loaded from a
checkpoint file (the project's ConvNets, or any zoo architecture), and one forward pass per
batch that returns the classification head's input (the features) and output (the logits)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError
from .checkpoint import read_sidecar


def load_network(path: Path, model_spec: dict | None = None) -> tuple[torch.nn.Module, Any, dict]:
    """``(model in eval mode, its transform, meta)`` of a checkpoint file.

    ConvNet checkpoints of :mod:`rdx.models.training` (the default) carry their transform;
    other architectures go through :func:`rdx.models.zoo.load_model` with ``model_spec``
    (e.g. ``{"model": "torchvision:resnet18", "model_kwargs": {"num_classes": 5},
    "pretrained": False}``) and the model's own preprocessing.
    """
    spec = dict(model_spec or {"model": "convnet"})
    if spec.get("model", "convnet") in ("convnet", "convnet_tiny"):
        from .checkpoint import grey_transform, load_checkpoint, transform_from_description

        model, meta = load_checkpoint(path)
        transform = transform_from_description(meta["transform"]) if "transform" in meta \
            else grey_transform(28)
        return model.eval(), transform, meta
    from .zoo import load_model

    loaded = load_model({**spec, "checkpoint": str(path)})
    return loaded.model.eval(), loaded.transform, read_sidecar(Path(path))


def head_module(model: torch.nn.Module) -> torch.nn.Linear:
    """The classification head: the last ``nn.Linear`` of the model (``fc`` of the ConvNet
    and of torchvision ResNets)."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise RDXInputError(f"{type(model).__name__} has no nn.Linear classification head; the "
                            "analysis needs its input (features) and output (logits).")
    return linears[-1]


@torch.no_grad()
def forward_features(model: torch.nn.Module, x: torch.Tensor, *, batch_size: int = 500,
                     device: str | torch.device = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Features (input of the classification head) and logits of every image, in one
    forward pass per batch. For the ConvNet the features are exactly its ``gap`` layer."""
    dev = torch.device(device)
    model = model.to(dev).eval()
    head = head_module(model)
    grabbed: list[torch.Tensor] = []
    handle = head.register_forward_hook(
        lambda _m, inputs, _out: grabbed.append(torch.flatten(inputs[0], 1).float().cpu()))
    feats, logits = [], []
    try:
        for i in range(0, len(x), batch_size):
            out = model(x[i:i + batch_size].to(dev))
            logits.append(out.float().cpu())
            feats.append(grabbed.pop())
    finally:
        handle.remove()
    return torch.cat(feats).numpy(), torch.cat(logits).numpy()
