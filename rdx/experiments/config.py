"""Experiment configs: one YAML file per experiment, a base plus comparisons overriding it.

```yaml
experiment: mnist_835            # output folder name: outputs/<experiment>/<comparison>/
seed: 42                         # seeds every method (the caller's generators are restored)
base:                            # everything a comparison needs; comparisons override parts
  image_selection: {dataset: mnist, split: train, target_classes: [8, 3, 5],
                    num_images: 500, seed: 0}
  representations:
    a: {model: convnet, checkpoint: checkpoints/mnist_835/epoch=1-step=184.pt, layer: gap}
    b: {features: path/to/B.npy}            # or precomputed features (rows = selected images)
  methods:
    - {method: rdx, name: rdx_nb_lb_spectral, n_explanations: 3, gamma: 0.05}
comparisons:
  - name: strong_vs_expert                  # deep-merged over base
    representations: {a: {checkpoint: checkpoints/mnist_835/epoch=0-step=136.pt}}
```

Relative paths are relative to the repository root (the current directory). Everything is
validated before any work starts by the pydantic models below (the project's one config
layer, :mod:`rdx.configs`): unknown keys are refused, names that become folders must be one
safe path component, and errors name the key path (``comparisons[1].methods[0].gamma: ...``).
Method parameters are checked by the methods' own estimators; the ``known_difference``
declaration is validated here, once.

``significance`` (optional) assesses the comparison's RDX methods (or the ``methods`` named)
as ``rdx explain --significance`` does: ``n_null`` draws, the models' ``family`` for the
field null's calibration, and seed twins of A and of B as representations of the same
images (``rdx train --preset P --twins 1`` trains one), which make the null the twin null::

    significance:
      family: convnet
      twins:
        a: [{model: convnet, checkpoint: checkpoints/fashion_pcs_seed1/epoch=1-step=142.pt, layer: gap}]
        b: [{model: convnet, checkpoint: checkpoints/fashion_pcs_seed1/last.pt, layer: gap}]
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from ..configs import StrictModel, validate
from ..errors import RDXInputError
from ..evaluation.known_difference import validate_known_difference
from ..io import read_yaml
from ..results.store import check_comparison_name, check_experiment_name, check_method_name
from .methods import method

#: ``per_class``: seeded sampling per target class (the original's ``ground_truth``);
#: ``full_dataset``: every image of the split in dataset order (rows of precomputed features).
SELECTION_STRATEGIES = ("per_class", "full_dataset")


class ImageSelection(StrictModel):
    """Which images a comparison uses (see :func:`rdx.data.selection.select_images`)."""

    dataset: str
    split: str = "train"
    root: str | None = None
    data_root: str = "data"
    target_classes: list[int] | None = None
    num_images: int | None = Field(default=None, gt=0)
    seed: int = 0
    strategy: Literal["per_class", "full_dataset"] = "per_class"

    @model_validator(mode="after")
    def _options_apply(self) -> "ImageSelection":
        # an option the dataset ignores (split for digits) is refused, not dropped
        from ..data import check_dataset_options

        check_dataset_options(self.dataset, dict.fromkeys(self.model_fields_set), None)
        return self


class FeaturesRepresentation(StrictModel):
    """Precomputed features: rows are the selected images, in selection order."""

    features: str
    exclude_dims: list[int] = []


class ModelRepresentation(StrictModel):
    """A model (zoo name or the project's ConvNet), its weights and the layer read."""

    model: str
    checkpoint: str | None = None
    layer: str | None = None
    pretrained: str | bool | None = None
    model_kwargs: dict[str, Any] | None = None
    #: images per forward pass; None: automatic (rdx.models.extract.auto_batch_size)
    batch_size: int | None = Field(default=None, gt=0)


def _representation(value: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError("expected a mapping with either 'model' (+ checkpoint/layer) or "
                         "'features' (a .npy file)")
    if "features" in value:
        return FeaturesRepresentation.model_validate(value)
    if "model" in value:
        return ModelRepresentation.model_validate(value)
    raise ValueError("needs 'model' (+ checkpoint/layer) or 'features' (a .npy file)")


class Representations(StrictModel):
    a: Any
    b: Any

    @field_validator("a", "b", mode="before")
    @classmethod
    def _one_of(cls, value: Any) -> Any:
        return _representation(value)


class MethodEntry(StrictModel):
    """``{method: NAME, name: FOLDER, <the method's parameters>}``; the parameters are
    checked by the method itself (:mod:`rdx.experiments.methods`)."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    method: str
    name: str | None = None

    @field_validator("method")
    @classmethod
    def _known(cls, value: str) -> str:
        from .methods import method_names

        known = method_names()
        if value not in known:
            raise ValueError(f"unknown method {value!r}; known: " + ", ".join(known))
        return value

    @field_validator("name")
    @classmethod
    def _folder(cls, value: str | None) -> str | None:
        return None if value is None else check_method_name(value)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def folder(self) -> str:
        return self.name or self.method


class Twins(StrictModel):
    """Seed twins of A and of B (representation specs, like ``representations.a``)."""

    a: list[Any] = []
    b: list[Any] = []

    @field_validator("a", "b", mode="before")
    @classmethod
    def _specs(cls, value: Any) -> Any:
        if not isinstance(value, list):
            raise ValueError("expected a list of representations (one per seed twin)")
        return [_representation(v) for v in value]


class SignificanceConfig(StrictModel):
    """``significance:`` of a comparison (module docstring)."""

    n_null: int = Field(default=6, ge=3)      # the ceiling: rdx.budget
    family: str | None = None
    twins: Twins = Twins()
    methods: list[str] | None = None

    @field_validator("family")
    @classmethod
    def _family(cls, value: str | None) -> str | None:
        from ..evaluation.null_calibration import check_family

        try:
            check_family(value, "family")
        except RDXInputError as exc:
            raise ValueError(str(exc)) from None
        return value


class ComparisonConfig(StrictModel):
    """A comparison after merging it over ``base``."""

    name: str
    description: str | None = None
    image_selection: ImageSelection
    representations: Representations
    methods: list[MethodEntry] = Field(min_length=1)
    known_difference: Any = None
    significance: SignificanceConfig | None = None

    @field_validator("name")
    @classmethod
    def _folder(cls, value: str) -> str:
        return check_comparison_name(value)

    @field_validator("known_difference")
    @classmethod
    def _declared(cls, value: Any) -> Any:
        # validated once, here; the runner passes the normalised declaration on
        return validate_known_difference(value, "declaration")


class ExperimentHead(StrictModel):
    """The top level of an experiment file (comparisons are merged and checked one by one)."""

    experiment: str
    seed: int = Field(default=42, ge=0)
    description: str | None = None
    base: dict[str, Any]
    comparisons: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("experiment")
    @classmethod
    def _folder(cls, value: str) -> str:
        return check_experiment_name(value)


@dataclass
class Comparison:
    """One fully merged, validated comparison of an experiment."""

    experiment: str
    name: str
    seed: int
    image_selection: dict
    representations: dict      # {"a": {...}, "b": {...}}
    methods: list[dict]
    known_difference: dict | list | None   # normalised declaration
    raw: dict                  # the merged dict, recorded next to the results
    significance: dict | None = None    # {n_null, family, twins: {a: [...], b: [...]}, methods}

    def twin_specs(self) -> list[tuple[str, str, dict]]:
        """``(side, where, spec)`` of every seed twin of ``significance.twins``."""
        twins = (self.significance or {}).get("twins") or {}
        return [(side, f"significance.twins.{side}[{i}]", spec)
                for side in ("a", "b") for i, spec in enumerate(twins.get(side) or [])]


def deep_merge(base: dict, override: dict) -> dict:
    """``override`` merged into a copy of ``base`` (dicts merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_experiment(path: str | Path) -> list[Comparison]:
    """Read, merge and validate an experiment config; returns its comparisons in order."""
    p = Path(path)
    if p.is_dir():
        raise RDXInputError(f"--config {str(p)!r} is a folder; give the YAML file, e.g. "
                            "configs/quickstart_fashion.yaml.")
    head = validate(ExperimentHead, read_yaml(p), str(p))
    out, seen = [], set()
    for i, c in enumerate(head.comparisons):
        where = f"comparisons[{i}]"
        if not isinstance(c, dict):
            raise RDXInputError(f"{where}: expected a mapping with at least 'name'")
        name = c.get("name")
        if name in seen:
            raise RDXInputError(f"{where}.name: expected a unique folder name, got {name!r}")
        seen.add(name)
        merged = deep_merge(head.base, c)
        comp = validate(ComparisonConfig, merged, where, key_path=True)
        folders: set[str] = set()
        for j, m in enumerate(comp.methods):
            if m.folder in folders:
                raise RDXInputError(f"{where}.methods[{j}].name: duplicate method name "
                                    f"{m.folder!r} (outputs would collide)")
            folders.add(m.folder)
            method(m.method).validate(m.params, f"{where}.methods[{j}]")
        sig = comp.significance
        if sig is not None and sig.methods is not None:
            unknown = sorted(set(sig.methods) - folders)
            if unknown:
                raise RDXInputError(f"{where}.significance.methods: {unknown} are not methods "
                                    f"of this comparison; choose from {sorted(folders)}.")
        out.append(Comparison(
            experiment=head.experiment, name=comp.name, seed=head.seed,
            image_selection=comp.image_selection.model_dump(exclude_unset=True),
            representations={k: merged["representations"][k] for k in ("a", "b")},
            methods=[dict(m) for m in merged["methods"]],
            known_difference=comp.known_difference, raw=merged,
            significance=None if sig is None else {
                "n_null": sig.n_null, "family": sig.family, "methods": sig.methods,
                "twins": {k: list((merged["significance"].get("twins") or {}).get(k) or [])
                          for k in ("a", "b")}}))
    return out


def validate_selection(selection: Any, where: str) -> dict:
    """An ``image_selection`` block checked on its own (training dynamics' probe set)."""
    return validate(ImageSelection, selection, where, key_path=True).model_dump(
        exclude_unset=True)
