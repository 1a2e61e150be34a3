"""The models and datasets configs of the similarity study (``configs/similarity/*.yaml``):
validated entries, and the datasets loaded in this process (a small cache: the local executor
runs many jobs on one dataset)."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from ...configs import StrictModel, load_config
from ...io import jsonable


OBJECTIVES_PAPER = ("supervised", "self-supervised", "image-text")


_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass
class ModelEntry:
    """One model of a models config."""

    id: str
    objective: str
    categories: dict = field(default_factory=dict)   # includes "objective"
    spec: dict | None = None                          # rdx.models.zoo.load_model spec
    train: dict | None = None                         # recipe for models trained here
    note: str | None = None


@dataclass
class DatasetEntry:
    """One dataset of a datasets config."""

    id: str
    dataset: str
    split: str = "train"
    root: str | None = None
    data_root: str = "data"
    target_classes: list | None = None
    max_images: int | None = None
    per_class: int | None = None
    seed: int = 0
    domain: str | None = None
    name: str | None = None
    test: dict | None = None       # overrides for the probe's test set; None → hold-out
    optional: bool = False

    def load(self, **overrides: Any):
        """The images (``rdx.data.get_dataset``) of this entry, or of its test variant."""
        args = {"split": self.split, "root": self.root, "data_root": self.data_root,
                "target_classes": self.target_classes, **overrides}
        return load_dataset(self.dataset, **args)


#: Datasets loaded in this process (the local executor runs many shards of one dataset).
_DATASETS: dict[str, Any] = {}


_DATASETS_MAX = 4


def load_dataset(name: str, **kwargs: Any):
    """``rdx.data.get_dataset`` with a small in-process cache (the last 4 datasets).

    Callers must not modify the returned dataset in place (``extract_features`` works on a
    shallow copy).
    """
    from ...data import get_dataset

    key = json.dumps([name, jsonable(kwargs)], sort_keys=True, default=str)
    if key not in _DATASETS:
        ds = get_dataset(name, **kwargs)
        while len(_DATASETS) >= _DATASETS_MAX:
            _DATASETS.pop(next(iter(_DATASETS)))
        _DATASETS[key] = ds
    return _DATASETS[key]


def _check_id(value: Any) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise ValueError(f"id {value!r} must be a non-empty name of letters, digits and "
                         ". _ + - (it is used in file names)")
    return value


class TrainRecipe(StrictModel):
    """How a model listed in a models config is trained here (ConvNet presets)."""

    objective: Literal["supervised", "rotation"] = "supervised"
    dataset: str
    epochs: int = Field(ge=1)
    split: str | None = None
    classes: list[int] | None = None
    per_class: int | None = Field(default=None, ge=1)
    width: int | None = Field(default=None, ge=1)
    seed: int | None = None
    lr: float | None = None
    batch_size: int | None = Field(default=None, ge=1)
    selection_seed: int | None = None
    data_root: str | None = None


class ModelItem(StrictModel):
    id: str
    objective: str = Field(min_length=1)
    categories: dict[str, Any] = {}
    spec: dict[str, Any] | None = None
    train: TrainRecipe | None = None
    note: str | None = None
    source: str | None = None

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        return _check_id(value)

    @model_validator(mode="after")
    def _one_weights_source(self) -> "ModelItem":
        if self.train is not None and (self.spec or {}).get("checkpoint"):
            raise ValueError("give either train (the checkpoint is written under "
                             "checkpoint_root) or spec.checkpoint")
        return self


class DatasetItem(StrictModel):
    id: str
    dataset: str
    split: str = "train"
    root: str | None = None
    data_root: str = "data"
    target_classes: list[Any] | None = None
    max_images: int | None = Field(default=None, ge=1)
    per_class: int | None = Field(default=None, ge=1)
    seed: int | None = None
    domain: str | None = None
    name: str | None = None
    test: dict[str, Any] | None = None     # overrides for the probe's test set; None: hold-out
    optional: bool = False
    note: str | None = None
    source: str | None = None

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        return _check_id(value)


class ModelsFile(StrictModel):
    """A models YAML file: ``models:`` plus top-level settings (e.g. ``checkpoint_root``)."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    models: list[ModelItem] = Field(min_length=1)

    @field_validator("models")
    @classmethod
    def _unique(cls, items: list[ModelItem]) -> list[ModelItem]:
        return _unique_ids(items, "model")


class DatasetsFile(StrictModel):
    """A datasets YAML file: ``datasets:`` plus top-level settings (``max_images``, ``seed``)."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    datasets: list[DatasetItem] = Field(min_length=1)

    @field_validator("datasets")
    @classmethod
    def _unique(cls, items: list[DatasetItem]) -> list[DatasetItem]:
        return _unique_ids(items, "dataset")


def _unique_ids(items: list, what: str) -> list:
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise ValueError(f"{what} id {item.id!r} appears twice")
        seen.add(item.id)
    return items


def load_models_config(path: str | os.PathLike) -> tuple[list[ModelEntry], dict]:
    """Models and top-level settings (e.g. ``checkpoint_root``) of a models YAML file."""
    cfg = load_config(path, ModelsFile, "models config file")
    out = []
    for item in cfg.models:
        cats = {str(c): str(v) for c, v in item.categories.items()}
        cats["objective"] = item.objective
        spec, train = item.spec, None
        if item.train is not None:
            train = item.train.model_dump(exclude_none=True)
            spec = {"model": "convnet", "layer": "gap", **(spec or {})}
        out.append(ModelEntry(item.id, item.objective, cats, spec, train, item.note))
    return out, dict(cfg.model_extra or {})


def load_datasets_config(path: str | os.PathLike) -> tuple[list[DatasetEntry], dict]:
    """Datasets and top-level settings (``max_images``, ``seed``) of a datasets YAML file."""
    cfg = load_config(path, DatasetsFile, "datasets config file")
    settings = dict(cfg.model_extra or {})
    out = []
    for item in cfg.datasets:
        kw = item.model_dump(exclude={"note", "source"}, exclude_unset=True)
        kw.setdefault("seed", settings.get("seed", 0))
        out.append(DatasetEntry(**kw))
    return out, settings


def categories_of(models: Sequence[ModelEntry]) -> dict[str, dict[str, str]]:
    """category → {model id: value} over the models that define it."""
    cats: dict[str, dict[str, str]] = {}
    for m in models:
        for c, v in m.categories.items():
            cats.setdefault(c, {})[m.id] = v
    return cats
