"""The layer-wise study's configuration (``configs/layers_*.yaml``): model, data, probes,
statistics and patching sections, and the RDX parameters the study passes to :class:`rdx.RDX`."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from ...configs import StrictModel, check_safe_name, load_config
from ...errors import RDXInputError
from ...models.study_model import EMBEDDED_VIT


FORMAT = "rdx-layers"


FORMAT_VERSION = 1


DIRECTIONS = ("a_over_b", "b_over_a")


#: RDX parameters used unless the config sets them: 10 spectral clusters (9 differences +
#: the no-change group), clusters below a mean affinity of 1.1 merged into the no-change
#: group, γ = 0.05, β = 5, grids of 16 images.
DEFAULT_RDX: dict[str, Any] = {"n_explanations": 9, "gamma": 0.05, "beta": 5.0,
                               "null_threshold": 1.1, "merge_low_affinity": True,
                               "grid_size": 16, "random_state": 42}


METHOD_NAME = "rdx"


#: Scalar per-head metrics (the patching heatmaps).
HEAD_METRICS = ("topk_change", "one_minus_cka", "cluster_delta_mean", "cluster_delta_sum_abs",
                "knn_acc_change", "linear_acc_change", "knn_flip_rate")


class ModelSection(StrictModel):
    """The model: ``rdx_vit`` (the embedded ViT, from ``checkpoint``) or any zoo name
    (:func:`rdx.models.zoo.load_model`: timm, ``open_clip:...``, ``torchvision:...``,
    ``convnet``)."""

    model: str
    checkpoint: str | None = None
    pretrained: bool = True
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0


class TrainSection(StrictModel):
    """Training of the embedded ViT when its checkpoint is missing."""

    dataset: str = "fashion_mnist"
    split: str = "train"
    root: str | None = None
    data_root: str = "data"
    per_class: int | None = Field(default=2000, gt=0)
    selection_seed: int = 0
    test_split: str | None = "test"
    arch: dict[str, Any] = Field(default_factory=dict)
    epochs: int = Field(default=4, gt=0)
    batch_size: int = Field(default=128, gt=0)
    lr: float = Field(default=0.002, gt=0)
    weight_decay: float = Field(default=0.05, ge=0)
    seed: int = 0


class DataSection(StrictModel):
    """The images: ``n_images`` analysis images (RDX, statistics, patching) and
    ``n_probe`` probe-training images, drawn without replacement by
    ``numpy.random.default_rng(seed).choice`` (analysis first)."""

    dataset: str
    split: str = "train"
    root: str | None = None
    data_root: str = "data"
    n_images: int = Field(default=2000, gt=3)
    n_probe: int = Field(default=2000, gt=1)
    seed: int = 0


class ProbeSection(StrictModel):
    knn_k: int = Field(default=16, gt=0)
    linear_max_iter: int = Field(default=1000, gt=0)
    change_probe: Literal["knn", "linear"] = "knn"
    seed: int = 0


class StatsSection(StrictModel):
    n_permutations: int = Field(default=1000, gt=0)
    seed: int = 42
    alpha: float = Field(default=0.05, gt=0, lt=1)


class PatchingSection(StrictModel):
    enabled: bool = True
    blocks: Literal["auto"] | list[int] = "auto"
    heads: Literal["auto"] | list[int] = "auto"
    k: int = Field(default=16, gt=0)
    blocks_module: str | None = None

    @field_validator("blocks", "heads")
    @classmethod
    def _non_negative(cls, v: Any) -> Any:
        if isinstance(v, list):
            if not v:
                raise ValueError("give at least one index, or 'auto'")
            if any(i < 0 for i in v) or len(set(v)) != len(v):
                raise ValueError(f"expected distinct indices ≥ 0, got {v}")
        return v


class LayersConfig(StrictModel):
    """A layer-wise study (``configs/layers_*.yaml``); see the module docstring."""

    name: str
    description: str = ""
    output: str | None = None
    model: ModelSection
    train: TrainSection | None = None
    data: DataSection
    layers: Literal["auto"] | list[str] = "auto"
    rdx: dict[str, Any] = Field(default_factory=dict)
    probes: ProbeSection = Field(default_factory=ProbeSection)
    stats: StatsSection = Field(default_factory=StatsSection)
    patching: PatchingSection = Field(default_factory=PatchingSection)
    score: bool = True
    chance_draws: int = Field(default=200, ge=0)
    device: str = "auto"
    batch_size: int = Field(default=256, gt=0)
    num_workers: int = Field(default=0, ge=0)
    amp: bool = False
    cache_dir: str | None = "outputs/cache/features"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_safe_name(v, "name")

    @field_validator("layers")
    @classmethod
    def _layers(cls, v: Any) -> Any:
        if isinstance(v, list):
            from ...models.layers import as_layer_specs
            if len(v) < 2:
                raise ValueError("list at least two layers (RDX compares consecutive ones)")
            try:
                as_layer_specs(v)
            except RDXInputError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("rdx")
    @classmethod
    def _rdx(cls, v: dict) -> dict:
        check_rdx_params({**DEFAULT_RDX, **v})
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        from ...backend import check_device
        try:
            check_device(v)
        except RDXInputError as exc:
            raise ValueError(str(exc)) from None
        return v

    @model_validator(mode="after")
    def _embedded(self) -> LayersConfig:
        if self.model.model == EMBEDDED_VIT and not self.model.checkpoint:
            raise ValueError("model.checkpoint: the embedded ViT needs a checkpoint path "
                             "(trained there when missing and a 'train' section is given)")
        if self.train is not None and self.model.model != EMBEDDED_VIT:
            raise ValueError(f"train: only the embedded model ({EMBEDDED_VIT!r}) is trained "
                             "by the study; remove 'train' or use model: rdx_vit")
        return self

    @property
    def output_dir(self) -> Path:
        return Path(self.output or f"outputs/layers/{self.name}")

    @property
    def rdx_params(self) -> dict[str, Any]:
        """The effective RDX parameters (defaults updated by the config)."""
        return {**DEFAULT_RDX, **self.rdx}


def check_rdx_params(params: dict) -> None:
    """Build the estimator and fit it once on a small seeded blob, so that a bad parameter
    fails now (as a ``ValueError`` naming the parameter) and not after the features."""
    from ...method.estimator import RDX

    try:
        est = RDX(**params)
    except TypeError as exc:
        raise ValueError(f"{exc} (these parameters go to rdx.RDX)") from None
    def count(key: str, default: int) -> int:
        v = params.get(key, default)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default

    # enough images for any valid setting of the size-dependent parameters
    n = max(64, (count("n_explanations", 3) + 1) * count("grid_size", 9) + 1,
            count("n_neighbors", 0) + 2, count("sigma_neighbor", 7) + 2)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    Y = rng.normal(size=(n, 4)).astype(np.float32)
    try:
        est.set_params(device="cpu", verbose=0)
        est.fit(X, Y, labels=rng.integers(0, 2, n))
    except RDXInputError as exc:
        raise ValueError(str(exc)) from None


def load_layers_config(path: str | Path) -> LayersConfig:
    """Read and validate a ``configs/layers_*.yaml`` file (errors name the key path)."""
    return load_config(path, LayersConfig, "layer-wise config")
