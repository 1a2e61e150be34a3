"""The paper's small MNIST ConvNet and its tiny variant.

Architecture (the authors' ``ConvNet``; parameter names match their checkpoints)::

    layer1 = Conv2d(in, w, 5, padding=2) – BatchNorm2d – ReLU – MaxPool2d(2)
    layer2 = Conv2d(w, f, 5, padding=2)  – BatchNorm2d – ReLU – MaxPool2d(2)
    global_pool = AdaptiveAvgPool2d(1)  →  fc = Linear(f, num_classes)

with ``f = 2·w`` by default: ``ConvNet()`` (w = 32) has the 64-D feature the MNIST
experiments compare. Layer ``"gap"`` (the paper's ``v0``) is the global-average-pooled
``layer2`` output, i.e. exactly the vector the classifier head sees; ``"logits"`` is the
head's output.
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import RDXInputError

#: Named layers that :meth:`ConvNet.layer_output` can return, with what each one is.
FEATURE_LAYERS: dict[str, str] = {
    "gap": "layer2 output, global-average-pooled (n × feature_dim); the paper's 'v0'",
    "logits": "classifier output before softmax (n × num_classes)",
}
#: Other names accepted for the layers above (the original code's names).
LAYER_ALIASES: dict[str, str] = {"v0": "gap"}


def _conv_block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, kernel_size=5, stride=1, padding=2),
                         nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(kernel_size=2, stride=2))


class ConvNet(nn.Module):
    """Two conv blocks, global average pooling and a linear classifier.

    Parameters
    ----------
    in_channels : int
        Image channels (1 for grey images).
    num_classes : int
        Outputs of the classifier head.
    width : int
        Channels of ``layer1``.
    feature_dim : int, optional
        Channels of ``layer2`` = dimension of the ``"gap"`` feature; ``2 * width`` if None.

    Notes
    -----
    Works for any input size ≥ 4×4 pixels (the pooling is global), but the two max-pools
    make 28×28 the natural size.
    """

    arch = "convnet"

    def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 32,
                 feature_dim: int | None = None) -> None:
        super().__init__()
        feature_dim = 2 * width if feature_dim is None else feature_dim
        for name, value in (("in_channels", in_channels), ("num_classes", num_classes),
                            ("width", width), ("feature_dim", feature_dim)):
            if not isinstance(value, int) or value < 1:
                raise RDXInputError(f"ConvNet: {name} must be a positive integer, got {value!r}.")
        self.in_channels, self.num_classes = in_channels, num_classes
        self.width, self.feature_dim = width, feature_dim
        self.layer1 = _conv_block(in_channels, width)
        self.layer2 = _conv_block(width, feature_dim)
        self.global_pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(feature_dim, num_classes)

    def config(self) -> dict[str, int | str]:
        """Constructor arguments (stored in checkpoints to rebuild the model)."""
        return {"model": self.arch, "in_channels": self.in_channels,
                "num_classes": self.num_classes, "width": self.width,
                "feature_dim": self.feature_dim}

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The ``"gap"`` feature: ``layer2`` output averaged over space, ``n × feature_dim``."""
        return torch.flatten(self.global_pool(self.layer2(self.layer1(x))), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits, ``n × num_classes``."""
        return self.fc(self.features(x))

    def layer_output(self, x: torch.Tensor, layer: str) -> torch.Tensor:
        """The output of a named layer (see :data:`FEATURE_LAYERS`), ``n × dim``."""
        name = LAYER_ALIASES.get(layer, layer)
        if name == "gap":
            return self.features(x)
        if name == "logits":
            return self(x)
        raise RDXInputError(f"unknown ConvNet layer {layer!r}; use one of "
                            f"{sorted(FEATURE_LAYERS) + sorted(LAYER_ALIASES)}.")


class ConvNetTiny(ConvNet):
    """The authors' tiny variant: 8 channels in both blocks, so an 8-D ``"gap"`` feature.

    Parameters
    ----------
    in_channels, num_classes : int
        As for :class:`ConvNet`.
    """

    arch = "convnet_tiny"

    def __init__(self, in_channels: int = 1, num_classes: int = 10) -> None:
        super().__init__(in_channels=in_channels, num_classes=num_classes, width=8,
                         feature_dim=8)


def build_model(config: dict) -> ConvNet:
    """Rebuild a model from :meth:`ConvNet.config` (e.g. a checkpoint's ``meta``)."""
    arch = config.get("model", "convnet")
    try:
        if arch == "convnet_tiny":
            return ConvNetTiny(int(config.get("in_channels", 1)), int(config["num_classes"]))
        if arch == "convnet":
            width = int(config.get("width", 32))
            return ConvNet(int(config.get("in_channels", 1)), int(config["num_classes"]), width,
                           int(config.get("feature_dim") or 2 * width))
    except (KeyError, TypeError, ValueError) as exc:
        raise RDXInputError(f"model description {config!r} is incomplete: {exc}.") from None
    raise RDXInputError(f"unknown model {arch!r}; use 'convnet' or 'convnet_tiny'.")
