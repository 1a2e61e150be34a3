"""timm models in the zoo: ``"<timm name>"``, ``"timm:<name>"`` or ``"hf_hub:<org>/<repo>"``
(see :func:`rdx.models.zoo.load_model`)."""
from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable

import torch
from torch import nn

from ..errors import RDXInputError
from .loaded_model import FeatureFn, LoadedModel, with_mode
from .taps import resolve_layer, spatial_mean, submodule, tap, vit_layers
from .weights import (check_checkpoint, checkpoint_id, hf_where, kwargs_suffix,
                      load_state_dict_file, offline_error, random_weights_id, seeded)


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


def load_timm(name: str, spec: dict) -> LoadedModel:
    """The zoo loader of timm models (``spec`` as :func:`rdx.models.zoo.load_model`
    normalises it)."""
    import timm
    from timm.data import create_transform, resolve_model_data_config

    timm_name, repo = _timm_name(name)
    path = check_checkpoint(spec["checkpoint"])
    pretrained = bool(spec["pretrained"]) and path is None
    kwargs = dict(spec["model_kwargs"])
    try:
        with contextlib.nullcontext() if pretrained else seeded(spec["seed"]):
            model = timm.create_model(timm_name, pretrained=pretrained, **kwargs)
    except RuntimeError as exc:
        if "Unknown model" in str(exc) or "Invalid pretrained tag" in str(exc):
            raise _timm_unknown(timm_name) from None
        raise
    except ValueError as exc:   # timm's name parser (unknown prefix, path-like name)
        raise RDXInputError(f"timm cannot load {name!r}: {exc}") from None
    except OSError as exc:   # hub download (weights, or the config of hf-hub: models)
        what = "the pretrained weights" if pretrained else "the model configuration"
        raise offline_error(what, repo or timm_name, exc, hf_where(repo)) from exc
    if path is not None:
        load_state_dict_file(model, path)
        weights_id = checkpoint_id(path)
    elif pretrained:
        cfg = model.pretrained_cfg
        weights_id = "timm-pretrained:" + (repo or f"{cfg.get('architecture')}.{cfg.get('tag')}")
    else:
        weights_id = random_weights_id(model, spec["seed"])
    model.eval()

    cfg = resolve_model_data_config(model)
    if "img_size" in kwargs:
        # pretrained_cfg keeps the default size; the transform must match the override
        size = kwargs["img_size"]
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        cfg["input_size"] = (cfg["input_size"][0], h, w)
    transform = with_mode(create_transform(**cfg, is_training=False),
                          "L" if cfg["input_size"][0] == 1 else "RGB")

    model_id = "timm:" + timm_name + kwargs_suffix(kwargs)
    run = model.forward_features if hasattr(model, "forward_features") else model

    def pre_logits() -> FeatureFn:
        return lambda x: model.forward_head(model.forward_features(x), pre_logits=True)

    named: dict[str, Callable[[], FeatureFn]] = {"logits": lambda: model,
                                                 "pre_logits": pre_logits}
    blocks, norm = getattr(model, "blocks", None), getattr(model, "norm", None)
    is_vit = isinstance(blocks, (nn.Sequential, nn.ModuleList)) and len(blocks) > 0 \
        and isinstance(norm, nn.Module) and hasattr(model, "cls_token")
    if is_vit:
        named.update(vit_layers(run, blocks[-1], norm, model.cls_token is not None,
                                model_id))
        default = "cls_tok_ll"
    else:
        named["gap"] = lambda: _timm_gap(model)
        default = "gap"
    layer, fn = resolve_layer(spec["layer"], named, default, model, model, model_id)
    return LoadedModel(model, transform, model_id, weights_id, layer, fn,
                       {"family": "timm", "timm_name": timm_name, "hf_repo": repo,
                        "data_config": {k: list(v) if isinstance(v, tuple) else v
                                        for k, v in cfg.items()}})


def _timm_gap(model: nn.Module) -> FeatureFn:
    layer4 = submodule(model, "layer4")
    if layer4 is not None:   # ResNet family: spatial mean of layer4
        return tap(model.forward_features, layer4, spatial_mean, "gap")
    channels = getattr(model, "num_features", None)

    def gap(x: torch.Tensor) -> torch.Tensor:
        out = model.forward_features(x)
        if out.ndim == 4 and out.shape[-1] == channels and out.shape[1] != channels:
            return out.mean(dim=(1, 2))   # NHWC maps (e.g. Swin)
        return spatial_mean(out)

    return gap
