"""Hugging Face ``transformers`` vision models in the zoo: ``hf:<repo id or local folder>``.

``hf:facebook/dinov2-small`` loads ``transformers.AutoModel`` and the repository's own
``AutoImageProcessor`` (its resize, crop and normalisation), from the Hugging Face cache
(``HF_HOME``) or a download; ``hf:/path/to/folder`` loads a folder written by
``model.save_pretrained`` + ``processor.save_pretrained`` (nothing is downloaded).
A model without an image processor is refused: a guessed preprocessing gives features that
look fine and are wrong.

Layers
------
``cls``
    Token 0 of ``last_hidden_state`` (ViT-like models, after their final norm): the default
    when the model has a ``patch_size``.
``pooler``
    ``pooler_output`` (conv nets such as ConvNeXt or ResNet: the pooled last map; the
    default otherwise).
``embedding``
    CLIP-like models (``get_image_features``): the projected image embedding, their default.
any submodule name
    Its output, reduced as in :mod:`rdx.models.taps` (maps: spatial mean, tokens: token 0).

``transformers`` is optional (extra ``zoo``); without it an ``hf:`` id is an input error
that names the extra.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import RDXInputError
from .loaded_model import FeatureFn, LoadedModel
from .taps import cls_token, resolve_layer
from .weights import hf_where, kwargs_suffix, offline_error, random_weights_id, seeded


class ProcessorTransform:
    """PIL image → ``pixel_values`` (C×H×W) through a ``transformers`` image processor.

    A class with a stable ``repr`` (the processor's settings as sorted JSON): the repr is
    part of the feature cache key, and DataLoader workers must be able to pickle it.
    """

    def __init__(self, processor: Any) -> None:
        self.processor = processor

    def __call__(self, img) -> torch.Tensor:
        if getattr(img, "mode", "RGB") != "RGB":
            img = img.convert("RGB")   # grey datasets (MNIST) into RGB models
        return self.processor(images=img, return_tensors="pt")["pixel_values"][0]

    def __repr__(self) -> str:
        try:
            settings = json.dumps(self.processor.to_dict(), sort_keys=True, default=str)
        except Exception:  # noqa: BLE001 - an odd processor still gets a name
            settings = repr(self.processor)
        return f"ProcessorTransform({type(self.processor).__name__}, {settings})"


def _transformers():
    try:
        import transformers
    except ImportError:
        raise RDXInputError("hf: model ids need the package 'transformers': pip install "
                            "'rdx-toolkit[zoo]' (bash setup.sh installs it).") from None
    return transformers


def _load(transformers: Any, name: str, spec: dict) -> torch.nn.Module:
    kwargs = dict(spec["model_kwargs"])
    if spec["pretrained"]:
        return transformers.AutoModel.from_pretrained(name, **kwargs)
    config = transformers.AutoConfig.from_pretrained(name, **kwargs)
    with seeded(spec["seed"]):
        return transformers.AutoModel.from_config(config)


def load_hf(name: str, spec: dict) -> LoadedModel:
    """The zoo loader of ``hf:<id>`` (spec as :func:`rdx.models.zoo.load_model` normalises
    it; ``pretrained=False`` builds the configuration's architecture with random weights).

    Raises
    ------
    RDXInputError
        transformers missing, an unknown repository or architecture, weights neither cached
        nor downloadable (the message says where they are expected), no image processor.
    """
    transformers = _transformers()
    if spec["checkpoint"] is not None:
        raise RDXInputError("hf: models load their weights from the repository or folder; "
                            "for other weights save them there with model.save_pretrained.")
    local = Path(name).is_dir()
    try:
        model = _load(transformers, name, spec)
        processor = transformers.AutoImageProcessor.from_pretrained(name)
    except OSError as exc:
        if local:
            raise RDXInputError(f"hf:{name}: {str(exc).splitlines()[0][:300]} (a folder "
                                "written by model.save_pretrained and "
                                "processor.save_pretrained).") from None
        raise offline_error("the model or its image processor", f"hf:{name}", exc,
                            hf_where(name)) from exc
    except ValueError as exc:   # an architecture AutoModel or AutoImageProcessor lacks
        raise RDXInputError(f"transformers cannot load hf:{name} as an image model: "
                            f"{str(exc).splitlines()[0][:300]}") from None
    model.eval()
    if spec["pretrained"]:
        revision = getattr(model.config, "_commit_hash", None)
        weights_id = (f"hf-local:{Path(name).resolve()}:sha256="
                      f"{_state_sha(model)[:16]}" if local
                      else f"hf:{name}@{revision or 'unknown revision'}")
    else:
        weights_id = random_weights_id(model, spec["seed"])
    model_id = "hf:" + (str(Path(name).resolve()) if local else name) \
        + kwargs_suffix(spec["model_kwargs"])

    named: dict[str, Callable[[], FeatureFn]] = {}
    if hasattr(model, "get_image_features"):   # CLIP-like: forward needs text too
        def embed(x: torch.Tensor) -> torch.Tensor:
            out = model.get_image_features(pixel_values=x)
            # newer transformers return a model output object, older ones the tensor
            return out if isinstance(out, torch.Tensor) else out.pooler_output
        run: Callable = embed
        named["embedding"] = lambda: embed
        default = "embedding"
    else:
        def run(x: torch.Tensor) -> Any:
            return model(pixel_values=x)

        def pooled(x: torch.Tensor) -> torch.Tensor:
            out = run(x).pooler_output
            if out is None:
                raise RDXInputError(f"{model_id} has no pooler output; use layer 'cls'.")
            return out.flatten(1)

        named["cls"] = lambda: (lambda x: cls_token(run(x).last_hidden_state))
        named["pooler"] = lambda: pooled
        default = "cls" if hasattr(model.config, "patch_size") else "pooler"
    layer, fn = resolve_layer(spec["layer"], named, default, model, run, model_id)
    return LoadedModel(model, ProcessorTransform(processor), model_id, weights_id, layer, fn,
                       {"family": "hf", "architecture": type(model).__name__,
                        "processor": type(processor).__name__, "local": local})


def _state_sha(model: torch.nn.Module) -> str:
    from .checkpoint import state_dict_sha256

    return state_dict_sha256(model)


__all__ = ["ProcessorTransform", "load_hf"]
