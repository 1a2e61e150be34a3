"""torchvision classification models in the zoo: ``"torchvision:<name>"`` or
``"torchvision:<name>.<WEIGHTS>"`` (see :func:`rdx.models.zoo.load_model`)."""
from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Callable

from ..errors import RDXInputError
from .loaded_model import FeatureFn, LoadedModel, with_mode
from .taps import resolve_layer, spatial_mean, submodule, tap, vit_layers
from .weights import (check_checkpoint, checkpoint_id, kwargs_suffix, load_state_dict_file,
                      offline_error, random_weights_id, seeded, torch_cache_dir)


def load_torchvision(name: str, spec: dict) -> LoadedModel:
    """The zoo loader of ``torchvision:<name>[.<WEIGHTS>]`` (``spec`` as
    :func:`rdx.models.zoo.load_model` normalises it)."""
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
    path = check_checkpoint(spec["checkpoint"])
    pretrained = bool(spec["pretrained"]) and path is None
    kwargs = dict(spec["model_kwargs"])
    try:
        with contextlib.nullcontext() if pretrained else seeded(spec["seed"]):
            model = tvm.get_model(arch, weights=chosen if pretrained else None, **kwargs)
    except OSError as exc:
        file = os.path.basename(chosen.url)
        raise offline_error("the pretrained weights", f"torchvision {chosen}", exc,
                            f"{torch_cache_dir()}/{file} (set TORCH_HOME for another "
                            f"location; download {chosen.url} on a machine with internet)"
                            ) from exc
    if path is not None:
        load_state_dict_file(model, path)
        weights_id = checkpoint_id(path)
    elif pretrained:
        weights_id = f"torchvision:{chosen}"
    else:
        weights_id = random_weights_id(model, spec["seed"])
    model.eval()
    # the preset transform is code, not a download: random-init models use it too
    transform = with_mode(chosen.transforms(), "RGB")
    model_id = "torchvision:" + arch + kwargs_suffix(kwargs)

    named: dict[str, Callable[[], FeatureFn]] = {"logits": lambda: model}
    fmap = submodule(model, "layer4") or submodule(model, "features")
    if fmap is not None:
        named["gap"] = lambda: tap(model, fmap, spatial_mean, "gap")
    encoder = getattr(model, "encoder", None)
    if encoder is not None and hasattr(encoder, "ln") and hasattr(encoder, "layers"):
        named.update(vit_layers(model, encoder.layers[-1], encoder.ln,
                                hasattr(model, "class_token"), model_id))
    default = "cls_tok_ll" if "cls_tok_ll" in named else "gap" if "gap" in named else "logits"
    layer, fn = resolve_layer(spec["layer"], named, default, model, model, model_id)
    return LoadedModel(model, transform, model_id, weights_id, layer, fn,
                       {"family": "torchvision", "weights": str(chosen)})
