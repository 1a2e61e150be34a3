"""What loading a model gives: the network, its evaluation transform, identifiers for feature
caches and a feature function (:class:`LoadedModel`, built by
:func:`rdx.models.zoo.load_model`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

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


def with_mode(transform: Callable, mode: str) -> Callable:
    """``transform`` preceded by :class:`ConvertImage` to ``mode``."""
    from torchvision.transforms import Compose

    return Compose([ConvertImage(mode), transform])
