"""Capture many named layers of one model in a single forward pass, with a feature cache.

A layer is a :class:`LayerSpec`: a submodule (its dotted name in ``model.named_modules()``),
whether its *output* (forward hook) or its *input* (forward pre-hook: the input of a
transformer block) is taken, and how the tensor becomes one vector per image:

``auto``
    conv maps ``n×C×H×W`` → spatial mean; token sequences ``n×L×D`` → token 0 (the CLS
    token); vectors as they are.
``cls``
    token 0 of a token sequence (vectors as they are).
``mean``
    mean over the tokens after the prefix tokens (CLS and register tokens; timm's
    ``num_prefix_tokens``), or the spatial mean of a conv map.
``flatten``
    every value of the tensor, flattened.

The text form used in configs is ``[input:]<module>[/<pool>]``: ``blocks.0`` (output of
block 0, CLS token), ``input:blocks.0`` (input of block 0), ``blocks.3/mean``,
``visual.trunk.norm``, and ``output`` for what the model's forward (``encode_image`` for
OpenCLIP models) returns.

:func:`auto_layers` proposes the layer-wise study's list for transformers — the input of
the first block, the output of every block, the final norm and the projection/head —
for timm ViTs, OpenCLIP image towers (timm trunks such as BiomedCLIP's, or OpenCLIP's own
transformer), torchvision ViTs, and ``layer1``/``layer2``/``fc`` for the project's ConvNet.

:func:`capture_batch` runs one batch with one hook per requested layer (registered for
that call only) and stops the forward pass once the last requested layer has been
computed. :func:`extract_layers` streams a dataset through it and caches every layer like
:func:`rdx.models.extract.extract_features` does (same key: model, weights, layer — here
the layer's text form with its pooling —, transform, dataset, image ids, AMP; same atomic
entry layout), so a repeated run loads the features instead of running the model.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..backend import resolve_device
from ..data.base import ImageDataset
from ..errors import RDXInputError
from .extract import (FeatureCacheWarning, cache_key, cache_payload, check_extract_args,
                      load_cached, write_cache)
from .loaded_model import LoadedModel

POOLS = ("auto", "cls", "mean", "flatten")
POINTS = ("output", "input")
#: The module name that means "what the model's forward returns".
OUTPUT = "output"
#: Container names under which transformers keep their blocks.
_BLOCK_CONTAINERS = re.compile(r"(^|\.)(blocks|resblocks|layers)$")


@dataclass(frozen=True)
class LayerSpec:
    """One layer to capture: ``module`` (dotted name, or ``"output"``), ``point``
    (``"output"``/``"input"``) and ``pool`` (see the module docstring)."""

    module: str
    point: str = "output"
    pool: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.module, str) or not self.module.strip():
            raise RDXInputError("a layer needs a module name (see model.named_modules()), "
                                "or 'output'.")
        if self.point not in POINTS:
            raise RDXInputError(f"layer {self.module!r}: point must be one of {POINTS}, got "
                                f"{self.point!r}.")
        if self.pool not in POOLS:
            raise RDXInputError(f"layer {self.module!r}: pool must be one of {POOLS}, got "
                                f"{self.pool!r}.")
        if self.module == OUTPUT and self.point == "input":
            raise RDXInputError("'input:output' is not a layer; name the module whose input "
                                "you want.")

    @classmethod
    def parse(cls, text: str) -> LayerSpec:
        """``[input:]<module>[/<pool>]`` → spec."""
        if not isinstance(text, str):
            raise RDXInputError(f"a layer is written '[input:]<module>[/<pool>]', got {text!r}.")
        point, body = ("input", text[len("input:"):]) if text.startswith("input:") \
            else ("output", text)
        module, _, pool = body.partition("/")
        return cls(module.strip(), point, pool.strip() or "auto")

    @property
    def key(self) -> str:
        """The canonical text form (also the cache's layer name)."""
        return (("input:" if self.point == "input" else "") + self.module
                + ("" if self.pool == "auto" else f"/{self.pool}"))

    @property
    def label(self) -> str:
        """A short, folder-safe name: ``b3`` (output of block 3), ``b0.in`` (its input),
        the last part of other module names (``norm``, ``head``), ``-mean`` for pooling."""
        m = re.search(r"(?:^|\.)(?:blocks|resblocks|layers)\.(\d+)$", self.module)
        if m:
            base = f"b{m.group(1)}"
        elif self.module == OUTPUT:
            base = "output"
        else:
            base = re.sub(r"[^A-Za-z0-9_.+=-]", "_", self.module.split(".")[-1]) or "layer"
        if self.point == "input":
            base += ".in"
        return base + ("" if self.pool == "auto" else f"-{self.pool}")


def as_layer_specs(layers: Sequence[str | LayerSpec | dict]) -> list[LayerSpec]:
    """Specs from text forms, specs or ``{module, point, pool}`` mappings; duplicates refused."""
    specs = []
    for item in layers:
        if isinstance(item, LayerSpec):
            specs.append(item)
        elif isinstance(item, dict):
            specs.append(LayerSpec(**item))
        else:
            specs.append(LayerSpec.parse(item))
    keys = [s.key for s in specs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise RDXInputError(f"layers {dup} are listed more than once.")
    if not specs:
        raise RDXInputError("no layers given.")
    return specs


# --------------------------------------------------------------------------- pooling

def prefix_tokens(model: nn.Module) -> int:
    """Tokens before the patch tokens (CLS, registers): timm's ``num_prefix_tokens`` found
    anywhere in the model, else 1 if a class token exists, else 0."""
    for m in model.modules():
        n = getattr(m, "num_prefix_tokens", None)
        if isinstance(n, int):
            return n
    for m in model.modules():
        if getattr(m, "cls_token", None) is not None or \
                getattr(m, "class_embedding", None) is not None or \
                getattr(m, "class_token", None) is not None:
            return 1
    return 0


def reduce_tensor(out: Any, pool: str, n_prefix: int, where: str = "layer") -> torch.Tensor:
    """One vector per image from a layer's tensor (see the module docstring)."""
    if isinstance(out, (tuple, list)):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise RDXInputError(f"{where} gave a {type(out).__name__}, not a tensor.")
    if pool == "flatten" or out.ndim <= 2:
        if out.ndim < 2:
            raise RDXInputError(f"{where} gave shape {tuple(out.shape)}; expected a batch.")
        return out.flatten(1)
    if out.ndim == 4:
        if pool == "cls":
            raise RDXInputError(f"{where} is a conv map {tuple(out.shape)}; it has no CLS "
                                "token (use pool 'auto' or 'mean').")
        return out.mean(dim=(2, 3))
    if out.ndim == 3:
        if pool in ("auto", "cls"):
            return out[:, 0]
        tokens = out[:, n_prefix:]
        if tokens.shape[1] == 0:
            raise RDXInputError(f"{where} has no tokens after its {n_prefix} prefix tokens.")
        return tokens.mean(dim=1)
    raise RDXInputError(f"{where} gave shape {tuple(out.shape)}; use pool 'flatten'.")


# --------------------------------------------------------------------------- modules

def get_module(model: nn.Module, name: str) -> nn.Module:
    """The submodule ``name``; an unknown name gets an error listing close matches."""
    try:
        return model.get_submodule(name)
    except AttributeError:
        names = [n for n, _ in model.named_modules() if n]
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
        top = [n for n, _ in model.named_children()][:12]
        raise RDXInputError(
            f"the model has no module {name!r}" + (f"; did you mean {close}?" if close else "")
            + f" (top-level modules: {top}; model.named_modules() lists all).") from None


def check_layers(model: nn.Module, layers: Sequence[LayerSpec]) -> None:
    """Every named module exists."""
    for spec in layers:
        if spec.module != OUTPUT:
            get_module(model, spec.module)


def find_blocks(model: nn.Module) -> str | None:
    """Dotted name of the transformer's block container (the longest ``blocks``/
    ``resblocks``/``encoder.layers`` list of modules), or None."""
    best, best_n = None, 0
    for name, m in model.named_modules():
        if name and _BLOCK_CONTAINERS.search(name) and isinstance(m, (nn.Sequential,
                                                                        nn.ModuleList)):
            if len(m) > best_n:
                best, best_n = name, len(m)
    return best


def _existing(model: nn.Module, names: Sequence[str]) -> str | None:
    for n in names:
        try:
            m = model.get_submodule(n)
        except AttributeError:
            continue
        if not isinstance(m, nn.Identity):
            return n
    return None


def auto_layers(model: nn.Module) -> list[LayerSpec]:
    """The layer-wise study's default layers.

    Transformers: the input of block 0 (mean of the patch tokens: its CLS token is the same
    for every image), the output of every block (CLS token), the final norm (timm
    ``norm``, OpenCLIP ``ln_post``, torchvision ``encoder.ln``) and the projection or head
    (timm ``head``, OpenCLIP-timm ``head``, otherwise the model's output for OpenCLIP
    towers). The project's ConvNet: ``layer1``, ``layer2`` (pooled maps) and ``fc``.
    """
    blocks = find_blocks(model)
    if blocks is None:
        if all(_existing(model, [n]) for n in ("layer1", "layer2", "fc")):
            return [LayerSpec("layer1"), LayerSpec("layer2"), LayerSpec("fc")]
        raise RDXInputError("could not find transformer blocks in this model (a 'blocks', "
                            "'resblocks' or 'encoder.layers' list); list the layers "
                            "explicitly (names from model.named_modules()).")
    n = len(model.get_submodule(blocks))
    parent = blocks.rpartition(".")[0]
    grand = parent.rpartition(".")[0]

    def under(base: str, leaf: str) -> str:
        return f"{base}.{leaf}" if base else leaf

    # the CLS token entering block 0 is the same learned vector for every image (class
    # embedding + its position embedding), so the first layer is the mean of the patch tokens
    specs = [LayerSpec(f"{blocks}.0", "input", "mean")] + [LayerSpec(f"{blocks}.{i}")
                                                           for i in range(n)]
    norm = _existing(model, [under(parent, "norm"), under(parent, "ln"), under(grand, "ln_post"),
                             under(parent, "ln_post")])
    if norm is not None:
        specs.append(LayerSpec(norm))
    # the outermost head: a CLIP tower's projection comes after its trunk's (unused) head
    head = _existing(model, [under(grand, "head"), under(parent, "head"), under(grand, "heads"),
                             under(parent, "heads")])
    if head is not None:
        specs.append(LayerSpec(head))
    elif hasattr(model, "encode_image"):
        specs.append(LayerSpec(OUTPUT))
    return specs


def forward_fn(model: nn.Module) -> Callable[[torch.Tensor], Any]:
    """What a forward pass of an image model means: ``encode_image`` for CLIP models (their
    ``forward`` needs text too), the module itself otherwise."""
    return model.encode_image if hasattr(model, "encode_image") else model


# --------------------------------------------------------------------------- capture

class _Done(Exception):
    """Raised by a hook to stop the forward pass once every layer is captured."""


def capture_batch(model: nn.Module, x: torch.Tensor, layers: Sequence[LayerSpec], *,
                  run: Callable[[torch.Tensor], Any] | None = None, n_prefix: int | None = None,
                  reduce: bool = True, stop_early: bool = True) -> dict[str, torch.Tensor]:
    """The requested layers of one batch, in one forward pass.

    Parameters
    ----------
    model : nn.Module
        Holds the modules named by ``layers``.
    x : tensor
        The batch, on the model's device.
    layers : list of LayerSpec
    run : callable, optional
        The forward pass (default :func:`forward_fn`).
    n_prefix : int, optional
        Prefix tokens for ``mean`` pooling (default :func:`prefix_tokens`).
    reduce : bool
        Pool to one vector per image (True) or return the raw tensors (e.g. the full token
        sequence entering a block, for patching).
    stop_early : bool
        Stop the forward pass once the last layer is captured (unless ``output`` is asked).

    Returns
    -------
    dict
        layer key → tensor (``n×d`` when reduced), detached, on the model's device.
    """
    run = forward_fn(model) if run is None else run
    n_prefix = prefix_tokens(model) if n_prefix is None else n_prefix
    store: dict[str, torch.Tensor] = {}
    wanted = {s.key for s in layers if s.module != OUTPUT}
    want_output = any(s.module == OUTPUT for s in layers)
    handles = []

    def keep(spec: LayerSpec, value: Any) -> None:
        if spec.key in store:
            return   # a module called twice (weight sharing): its first call counts
        value = value[0] if isinstance(value, (tuple, list)) else value
        store[spec.key] = (reduce_tensor(value, spec.pool, n_prefix, f"layer {spec.key!r}")
                           if reduce else value).detach()
        if stop_early and not want_output and wanted <= set(store):
            raise _Done

    for spec in layers:
        if spec.module == OUTPUT:
            continue
        mod = get_module(model, spec.module)
        if spec.point == "input":
            handles.append(mod.register_forward_pre_hook(
                lambda _m, args, kwargs, s=spec: keep(s, args[0] if args else
                                                      next(iter(kwargs.values()))),
                with_kwargs=True))
        else:
            handles.append(mod.register_forward_hook(lambda _m, _i, out, s=spec: keep(s, out)))
    try:
        out = run(x)
        for spec in layers:
            if spec.module == OUTPUT:
                store[spec.key] = (reduce_tensor(out, spec.pool, n_prefix, "the model output")
                                   if reduce else out).detach()
    except _Done:
        pass
    finally:
        for h in handles:
            h.remove()
    missing = [s.key for s in layers if s.key not in store]
    if missing:
        raise RDXInputError(f"layers {missing} are not computed by this model's forward pass "
                            "(choose modules on the path from the input to the output).")
    return store


def image_loader(dataset: ImageDataset, indices: Sequence[int], transform: Callable, *,
                 batch_size: int, num_workers: int = 0, pin_memory: bool = False
                 ) -> torch.utils.data.DataLoader:
    """Batches ``(images, labels)`` of ``dataset[indices]`` through ``transform``, in order
    (the caller's dataset is not changed)."""
    ds = copy.copy(dataset)   # shallow: images are shared, only the transform differs
    ds.transform = transform
    return torch.utils.data.DataLoader(
        torch.utils.data.Subset(ds, [int(i) for i in indices]), batch_size=batch_size,
        shuffle=False, num_workers=num_workers, pin_memory=pin_memory)


def _capture_all(loaded: LoadedModel, dataset: ImageDataset, idx: np.ndarray,
                 layers: list[LayerSpec], *, run: Callable, n_prefix: int, batch_size: int,
                 device: torch.device, num_workers: int, amp: bool, progress: bool
                 ) -> dict[str, np.ndarray]:
    from tqdm.auto import tqdm

    loader = image_loader(dataset, idx, loaded.transform, batch_size=batch_size,
                          num_workers=num_workers, pin_memory=device.type == "cuda")
    out: dict[str, np.ndarray] = {}
    start = 0
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    with torch.no_grad(), tqdm(total=len(idx), desc=f"layers {loaded.model_id}", unit="img",
                               disable=not progress, dynamic_ncols=True) as bar:
        for images, _ in loader:
            images = images.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
                feats = capture_batch(loaded.model, images, layers, run=run, n_prefix=n_prefix)
            for key, f in feats.items():
                if key not in out:
                    out[key] = np.empty((len(idx), f.shape[1]), dtype=np.float32)
                out[key][start:start + len(images)] = f.float().cpu().numpy()
            start += len(images)
            bar.update(len(images))
    return out


def extract_layers(loaded: LoadedModel, dataset: ImageDataset, layers: Sequence[LayerSpec],
                   indices: Sequence[int] | np.ndarray | None = None, *,
                   batch_size: int = 256, device: str | torch.device = "auto",
                   num_workers: int = 0, amp: bool = False,
                   cache_dir: str | os.PathLike | None = "outputs/cache/features",
                   progress: bool = True, run: Callable | None = None
                   ) -> dict[str, np.ndarray]:
    """Features of several layers for every (or every selected) image, one forward pass.

    Parameters
    ----------
    loaded : LoadedModel
        From :func:`rdx.models.zoo.load_model` (or built around any model); moved to
        ``device``.
    dataset : ImageDataset
        Its transform is replaced by ``loaded.transform`` on a shallow copy.
    layers : list of LayerSpec
    indices : sequence of int, optional
        Images in row order; all if None.
    batch_size, device, num_workers, amp, cache_dir, progress
        As :func:`rdx.models.extract.extract_features`; each layer is one cache entry.
    run : callable, optional
        The forward pass (default :func:`forward_fn` of the model).

    Returns
    -------
    dict
        layer key → ``n × d`` float32 array (rows = ``indices``).
    """
    idx = check_extract_args(dataset, indices, batch_size, num_workers)
    layers = as_layer_specs(layers)
    check_layers(loaded.model, layers)
    n_prefix = prefix_tokens(loaded.model)
    ids = [dataset.ids[i] for i in idx]
    entries = {}
    result: dict[str, np.ndarray] = {}
    for spec in layers:
        # the pooling's prefix count is part of the layer's identity
        tagged = dataclasses.replace(loaded, layer=f"{spec.key}|prefix={n_prefix}")
        payload = cache_payload(tagged, dataset, ids, amp)
        key = cache_key(payload)
        entries[spec.key] = (key, payload)
        if cache_dir is not None:
            npy, meta = Path(cache_dir) / f"{key}.npy", Path(cache_dir) / f"{key}.json"
            cached, problem = load_cached(npy, meta, key, payload)
            if problem:
                warnings.warn(f"feature cache {npy} is unusable ({problem}); recomputing.",
                              FeatureCacheWarning, stacklevel=2)
            if cached is not None:
                result[spec.key] = cached
    missing = [s for s in layers if s.key not in result]
    if not missing:
        return result
    dev = resolve_device(device)
    loaded.model.to(dev).eval()
    t0 = time.perf_counter()
    feats = _capture_all(loaded, dataset, idx, missing, run=run or forward_fn(loaded.model),
                         n_prefix=n_prefix, batch_size=batch_size, device=dev,
                         num_workers=num_workers, amp=amp, progress=progress)
    seconds = time.perf_counter() - t0
    for spec in missing:
        f = feats[spec.key]
        if not np.isfinite(f).all():
            bad = int((~np.isfinite(f).all(axis=1)).sum())
            raise RDXInputError(f"{bad} of {len(f)} images got NaN/inf features at layer "
                                f"{spec.key!r} of {loaded.model_id}; nothing cached.")
        if cache_dir is not None:
            key, payload = entries[spec.key]
            write_cache(Path(cache_dir) / f"{key}.npy", Path(cache_dir) / f"{key}.json", key,
                        payload, f, {"seconds": seconds, "device": str(dev), "world_size": 1,
                                     "batch_size": batch_size, "layers_in_pass": len(missing)})
        result[spec.key] = f
    return {s.key: result[s.key] for s in layers}


__all__ = ["OUTPUT", "POINTS", "POOLS", "LayerSpec", "as_layer_specs", "auto_layers",
           "capture_batch", "check_layers", "extract_layers", "find_blocks", "forward_fn",
           "get_module", "image_loader", "prefix_tokens", "reduce_tensor"]
