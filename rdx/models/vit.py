"""A small Vision Transformer trained from scratch on the CPU (the layer-wise study's default).

:func:`build_vit` makes a timm :class:`~timm.models.vision_transformer.VisionTransformer`
for small grey images (default: 28×28 pixels, patches of 4 → 49 patch tokens + a CLS token,
width 64, 4 blocks of 4 heads). :func:`train_vit` trains it with AdamW + OneCycleLR and
cross-entropy, deterministically for a seed (initialisation and shuffling are seeded; the
caller's random generators are left alone; torch runs deterministic kernels on a fixed
thread count, :func:`rdx.backend.reproducible_training`), and saves a checkpoint through
:func:`rdx.models.checkpoint.save_checkpoint`: ``{"state_dict", "meta"}`` plus the JSON sidecar
``<file>.json``. :func:`load_vit` rebuilds the model from such a file.

The meta records the architecture (``vit``), the training parameters, the training images
(dataset, split, per-class count, selection seed), the preprocessing (the project's grey
transform: ``ToTensor`` then ``Normalize(0.5, 0.5)``), train and test accuracy, wall time
and library versions. Training on 20 000 Fashion-MNIST images for 4 epochs takes a couple of
minutes on two CPU cores and reaches about 85 % test accuracy.
"""
from __future__ import annotations

import io
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import threads
from ..backend import reproducible_training, resolve_device, seeded
from ..data.base import ImageDataset
from ..errors import RDXInputError
from ..input_files import check_input_file
from ..io import versions
from .checkpoint import grey_transform, save_checkpoint, transform_from_description, verify_file
from .training import accuracy, materialize

CHECKPOINT_FORMAT = "rdx-vit-checkpoint"
CHECKPOINT_FORMAT_VERSION = 1
#: Architecture of the default model (keyword arguments of timm's VisionTransformer).
DEFAULT_ARCH: dict[str, Any] = {"img_size": 28, "patch_size": 4, "in_chans": 1,
                                "num_classes": 10, "embed_dim": 64, "depth": 4,
                                "num_heads": 4, "mlp_ratio": 2.0}
#: Keys :func:`build_vit` accepts.
ARCH_KEYS = tuple(DEFAULT_ARCH) + ("qkv_bias", "class_token", "global_pool")


def build_vit(arch: dict | None = None) -> nn.Module:
    """A timm VisionTransformer with the default architecture updated by ``arch``.

    The model has a CLS token and classifies from it (``global_pool="token"``); its blocks
    are ``model.blocks[i]`` with timm ``Attention`` modules (``model.blocks[i].attn``), the
    final LayerNorm is ``model.norm`` and the classifier ``model.head``.
    """
    from timm.models.vision_transformer import VisionTransformer

    cfg = {**DEFAULT_ARCH, **(arch or {})}
    unknown = sorted(set(cfg) - set(ARCH_KEYS))
    if unknown:
        raise RDXInputError(f"unknown ViT architecture keys {unknown}; use {list(ARCH_KEYS)}.")
    for key in ("img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth",
                "num_heads"):
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise RDXInputError(f"ViT {key} must be a positive integer, got {v!r}.")
    if cfg["embed_dim"] % cfg["num_heads"]:
        raise RDXInputError(f"ViT embed_dim {cfg['embed_dim']} must be divisible by num_heads "
                            f"{cfg['num_heads']}.")
    if cfg["img_size"] % cfg["patch_size"]:
        raise RDXInputError(f"ViT img_size {cfg['img_size']} must be a multiple of patch_size "
                            f"{cfg['patch_size']}.")
    kwargs = {k: cfg[k] for k in ARCH_KEYS if k in cfg}
    kwargs.setdefault("global_pool", "token")
    return VisionTransformer(**kwargs)


def _arch_of(meta: dict) -> dict:
    arch = meta.get("vit")
    if not isinstance(arch, dict):
        raise RDXInputError("the checkpoint has no 'vit' architecture record; it was not "
                            "written by rdx.models.vit.train_vit.")
    return arch


def load_vit(path: str | os.PathLike, device: str | torch.device = "cpu"
             ) -> tuple[nn.Module, dict]:
    """``(model in eval mode, meta)`` of a checkpoint written by :func:`train_vit`."""
    p = check_input_file(path, "ViT checkpoint", expect="a checkpoint file (.pt)",
                         missing="train it with rdx.models.vit.train_vit (the layer-wise study "
                                 "does so when its config has a 'train' section)",
                         register=False)
    try:
        data = p.read_bytes()   # read once: the bytes loaded are the bytes verified
        obj = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch.load raises many types on foreign files
        raise RDXInputError(f"{str(p)!r} is not a readable checkpoint ({exc}).") from None
    if not (isinstance(obj, dict) and isinstance(obj.get("meta"), dict) and "state_dict" in obj):
        raise RDXInputError(f"{str(p)!r} is not a checkpoint of rdx.models.vit (no "
                            "state_dict/meta).")
    meta = obj["meta"]
    model = build_vit(_arch_of(meta))
    try:
        model.load_state_dict(obj["state_dict"])
    except RuntimeError as exc:
        raise RDXInputError(f"{str(p)!r}: the weights do not fit the recorded architecture: "
                            f"{str(exc).splitlines()[0]}") from None
    verify_file(p, data)   # against the SHA-256 its sidecar records (rdx.io, stored data)
    return model.to(device).eval(), meta


def vit_transform(meta: dict):
    """The preprocessing recorded in a checkpoint's meta (the grey transform)."""
    return transform_from_description(meta["transform"])


def train_vit(train_ds: ImageDataset, save_path: str | os.PathLike, *,
              test_ds: ImageDataset | None = None, arch: dict | None = None, epochs: int = 4,
              batch_size: int = 128, lr: float = 2e-3, weight_decay: float = 0.05,
              seed: int = 0, device: str = "cpu", progress: bool = True,
              data_info: dict | None = None) -> Path:
    """Train :func:`build_vit` on grey images and save one checkpoint at ``save_path``.

    Parameters
    ----------
    train_ds, test_ds : ImageDataset
        Training images (labels ``0..num_classes-1``) and optional held-out images whose
        accuracy is recorded.
    save_path : path
        The ``.pt`` file to write (its sidecar ``<file>.json`` too), atomically.
    arch : dict, optional
        Overrides of :data:`DEFAULT_ARCH` (``img_size`` must match the images).
    epochs, batch_size, lr, weight_decay : training schedule (AdamW, OneCycleLR peak ``lr``).
    seed : int
        Seeds the initialisation and the batch order; the same seed, data and library
        versions give bit-identical weights on any CPU of the same SIMD level, whatever its
        core count.
    device : "cpu", "cuda", "auto"
    data_info : dict, optional
        Extra JSON entries for ``meta["data"]`` (e.g. how the images were selected).

    Returns
    -------
    Path of the checkpoint.
    """
    from tqdm.auto import tqdm

    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RDXInputError(f"{name} must be a positive integer, got {value!r}.")
    for name, value in (("lr", lr), ("weight_decay", weight_decay)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0 or (name == "lr" and value == 0):
            raise RDXInputError(f"{name} must be a positive number, got {value!r}.")
    if not isinstance(train_ds, ImageDataset):
        raise RDXInputError(f"train_ds must be an rdx ImageDataset, got "
                            f"{type(train_ds).__name__}.")
    dev = resolve_device(device)
    cfg = {**DEFAULT_ARCH, **(arch or {})}
    transform = grey_transform(int(cfg["img_size"]))
    x_train, y_train = materialize(train_ds, transform)
    if int(y_train.max()) >= int(cfg["num_classes"]) or int(y_train.min()) < 0:
        raise RDXInputError(f"training labels must lie in 0..{cfg['num_classes'] - 1}.")
    x_test = y_test = None
    if test_ds is not None:
        x_test, y_test = materialize(test_ds, transform)
    steps_per_epoch = math.ceil(len(x_train) / batch_size)
    total = epochs * steps_per_epoch
    t0 = time.perf_counter()
    # reproducible_training: the same weights on every machine (rdx.threads, Training); the
    # accuracies are measured inside too, so that they are the same numbers everywhere
    with seeded(seed), reproducible_training(dev):
        model = build_vit(cfg).to(dev)
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x_train, y_train), batch_size=batch_size,
            shuffle=True, num_workers=0, generator=torch.Generator().manual_seed(seed))
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total)
        model.train()
        with tqdm(total=total, desc=f"train ViT {Path(save_path).name}", unit="step",
                  disable=not progress, dynamic_ncols=True) as bar:
            for _ in range(epochs):
                for xb, yb in loader:
                    opt.zero_grad(set_to_none=True)
                    loss = nn.functional.cross_entropy(model(xb.to(dev)), yb.to(dev))
                    loss.backward()
                    opt.step()
                    sched.step()
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        seconds = time.perf_counter() - t0
        model.eval()
        train_accuracy = accuracy(model, x_train, y_train, dev)
        test_accuracy = None if x_test is None else accuracy(model, x_test, y_test, dev)
    meta = {"format": CHECKPOINT_FORMAT, "format_version": CHECKPOINT_FORMAT_VERSION,
            "model": "rdx_vit", "vit": {k: cfg[k] for k in ARCH_KEYS if k in cfg},
            "num_classes": int(cfg["num_classes"]), "seed": seed,
            "training": {"optimizer": "AdamW", "scheduler": "OneCycleLR", "max_lr": lr,
                         "weight_decay": weight_decay, "loss": "cross_entropy",
                         "batch_size": batch_size, "epochs": epochs,
                         "steps_per_epoch": steps_per_epoch, "total_steps": total,
                         "device": dev.type, "seconds": seconds,
                         "torch_threads": threads.TRAINING_THREADS},
            "data": {"dataset": train_ds.name, "split": train_ds.info.get("split"),
                     "n_images": len(x_train), "class_names": list(train_ds.class_names),
                     "class_counts": np.bincount(y_train.numpy(),
                                                 minlength=int(cfg["num_classes"])).tolist(),
                     "test": None if test_ds is None else
                     {"dataset": test_ds.name, "split": test_ds.info.get("split"),
                      "n_images": len(x_test)}, **(data_info or {})},
            "transform": transform.description,
            "train_accuracy": train_accuracy, "test_accuracy": test_accuracy,
            "epoch": epochs - 1, "step": total, "versions": versions()}
    return save_checkpoint(save_path, model, meta)


__all__ = ["ARCH_KEYS", "CHECKPOINT_FORMAT", "DEFAULT_ARCH", "build_vit", "load_vit",
           "train_vit", "vit_transform"]
