"""OpenCLIP image towers in the zoo: ``"open_clip:<arch>/<pretrained tag>"`` or
``"open_clip:hf-hub:<org>/<repo>"`` (see :func:`rdx.models.zoo.load_model`)."""
from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Callable

from ..errors import RDXInputError
from .loaded_model import FeatureFn, LoadedModel
from .taps import resolve_layer, spatial_mean, submodule, tap, vit_layers
from .weights import (check_checkpoint, checkpoint_id, hf_where, kwargs_suffix, network_cause,
                      offline_error, random_weights_id, seeded)


def load_open_clip(name: str, spec: dict) -> LoadedModel:
    """The zoo loader of ``open_clip:<arch>/<tag>`` and ``open_clip:hf-hub:<org>/<repo>``
    (``spec`` as :func:`rdx.models.zoo.load_model` normalises it)."""
    import open_clip

    if name.startswith(("hf-hub:", "hf_hub:")):
        arch, tag = "hf-hub:" + name.split(":", 1)[1], None
    else:
        arch, _, tag = name.partition("/")
        tag = tag or None
    path = check_checkpoint(spec["checkpoint"])
    pretrained = bool(spec["pretrained"]) and path is None
    if pretrained and tag is None and not arch.startswith("hf-hub:"):
        raise RDXInputError(f"open_clip model {arch!r} needs a pretrained tag, e.g. "
                            f"'open_clip:{arch}/<tag>'; tags: "
                            f"{open_clip.list_pretrained_tags_by_model(arch)}.")
    weights_arg = str(path) if path is not None else tag if pretrained else None
    requested = arch if tag is None else f"{arch}/{tag}"
    try:
        with contextlib.nullcontext() if pretrained else seeded(spec["seed"]):
            model, _, transform = open_clip.create_model_and_transforms(
                arch, pretrained=weights_arg, **spec["model_kwargs"])
    except (RuntimeError, OSError) as exc:
        cause = network_cause(exc)
        if cause is not None and path is None:
            if arch.startswith("hf-hub:"):
                repo = arch.split(":", 1)[1]
            else:   # OpenCLIP keeps most weights on the HF hub too ("org/repo/")
                cfg = open_clip.get_pretrained_cfg(arch, tag) or {}
                repo = cfg.get("hf_hub", "").strip("/") or None
            where = (hf_where(repo) + "; OpenCLIP's URL downloads go to "
                     + os.path.join(os.path.expanduser("~"), ".cache", "clip"))
            what = "the pretrained weights" if pretrained else "the model configuration"
            raise offline_error(what, f"open_clip {requested}", cause, where) from exc
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
        weights_id = checkpoint_id(path)
    elif pretrained:
        weights_id = f"open_clip:{requested}"
    else:
        weights_id = random_weights_id(model, spec["seed"])
    model_id = "open_clip:" + arch + kwargs_suffix(spec["model_kwargs"])
    visual = model.visual
    run = model.encode_image

    named: dict[str, Callable[[], FeatureFn]] = {"embedding": lambda: run}
    if hasattr(visual, "transformer") and hasattr(visual, "ln_post"):
        # hook the whole transformer: its output is batch-first even when the blocks
        # run sequence-first (older OpenCLIP), so token 0 is always out[:, 0]
        named.update(vit_layers(run, visual.transformer, visual.ln_post,
                                getattr(visual, "class_embedding", None) is not None,
                                model_id))
    if submodule(visual, "layer4") is not None:
        named["gap"] = lambda: tap(run, visual.layer4, spatial_mean, "gap")
    default = "cls_tok_ll" if "cls_tok_ll" in named else "gap" if "gap" in named \
        else "embedding"
    layer, fn = resolve_layer(spec["layer"], named, default, model, run, model_id)
    return LoadedModel(model, transform, model_id, weights_id, layer, fn,
                       {"family": "open_clip", "arch": arch, "tag": tag})
