"""The training-dynamics config (``configs/training_dynamics_<dataset>.yaml``): checkpoints,
model, probe images, RDX settings, figures."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from ...configs import StrictModel, check_safe_name, validate
from ...experiments.config import ImageSelection
from .analysis import DEFAULT_N_CLUSTERS, DEFAULT_THRESHOLD


class CheckpointsConfig(StrictModel):
    dir: str
    pattern: str = "epoch=*-step=*.pt"
    final: str = "last.pt"
    every: int = Field(default=1, ge=1)
    include_final_step: bool = True


class RDXSettings(StrictModel):
    """RDX parameters a config may set (``n_clusters`` replaces ``n_explanations``); the rest
    is fixed by the method: spectral clustering, merge_low_affinity, direction a_over_b."""

    n_clusters: int = Field(default=DEFAULT_N_CLUSTERS, ge=2)
    null_threshold: float = DEFAULT_THRESHOLD
    similarity: str | None = None
    difference: str | None = None
    gamma: float | None = None
    gamma_scale: float | None = None
    beta: float | None = None
    normalize_diff: bool | None = None
    sigma_neighbor: int | None = None
    n_init: int | None = None
    eigen_solver: str | None = None
    grid_size: int | None = None
    grid_strategy: str | None = None
    random_state: int | None = None


class FiguresConfig(StrictModel):
    """Which figures to draw: ``checkpoints`` (PCA + one cluster's grid per chosen
    checkpoint), ``grids_at`` (the grids of every cluster at one checkpoint: an index, a
    checkpoint name, or auto = where cluster 0 becomes the no-change group), ``max_tracks``
    (clusters followed across checkpoints in the class make-up figure)."""

    checkpoints: Literal["auto"] | list[int | str] = "auto"
    cluster: Literal["largest", "strongest", "lowest_accuracy"] = "largest"
    grids_at: Literal["auto"] | int | str = "auto"
    max_tracks: int = Field(default=12, ge=1)
    formats: list[str] = ["png"]


class ModelSpec(StrictModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    model: str

    @model_validator(mode="after")
    def _checkpoints_elsewhere(self) -> "ModelSpec":
        if "checkpoint" in (self.model_extra or {}):
            raise ValueError("model.checkpoint: the checkpoints come from checkpoints.dir")
        return self


class TrainConfig(StrictModel):
    """``preset`` of ``rdx train`` and any of its fields to override."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    preset: str


class DynamicsConfig(StrictModel):
    """A ``configs/training_dynamics_<dataset>.yaml`` file::

        name: fashion5                          # a label (and the default output folder name)
        output: outputs/training_dynamics/fashion5
        train: {preset: fashion5_dynamics}      # optional: trained first if missing
        checkpoints: {dir: checkpoints/fashion5_dynamics, final: last.pt, every: 1}
        model: {model: convnet}                 # other architectures: a zoo spec
        probe: {dataset: fashion_mnist, split: train, target_classes: [1, 2, 4, 6, 8],
                num_images: 400, seed: 0}       # runner image_selection keys (per class)
        rdx: {n_clusters: 10, null_threshold: 1.5}
        figures: {checkpoints: auto, cluster: largest, formats: [png]}
        device: auto
    """

    name: str
    description: str = ""
    output: str | None = None
    train: TrainConfig | None = None
    checkpoints: CheckpointsConfig
    model: ModelSpec = ModelSpec(model="convnet")
    probe: ImageSelection
    rdx: RDXSettings = RDXSettings()
    figures: FiguresConfig = FiguresConfig()
    device: str = "auto"
    batch_size: int = Field(default=500, ge=1)

    @field_validator("name")
    @classmethod
    def _folder(cls, value: str) -> str:
        return check_safe_name(value, "name")


def validate_config(doc: dict, where: str = "config") -> dict:
    """Check a training-dynamics config (:class:`DynamicsConfig`) and fill in defaults;
    returns a new plain dict (unset RDX parameters are left out)."""
    cfg = validate(DynamicsConfig, doc, where)
    out = cfg.model_dump(exclude={"rdx", "probe", "model", "train"})
    out["output"] = cfg.output or f"outputs/training_dynamics/{cfg.name}"
    out["rdx"] = cfg.rdx.model_dump(exclude_none=True)
    out["probe"] = cfg.probe.model_dump(exclude_unset=True)
    out["model"] = {"model": cfg.model.model, **(cfg.model.model_extra or {})}
    out["train"] = (None if cfg.train is None else
                    {"preset": cfg.train.preset, **(cfg.train.model_extra or {})})
    return out


def load_config(path: str | Path) -> dict:
    """Read and validate a ``configs/training_dynamics_<dataset>.yaml`` file."""
    from ...io import read_yaml

    p = Path(path)
    cfg = validate_config(read_yaml(p), str(p))
    cfg["config_path"] = str(p)
    return cfg
