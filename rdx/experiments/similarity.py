"""Many models × many datasets: configs, feature shards, matrix jobs, probe jobs, executors.

The consistency paper's pipeline as resumable jobs:

1. **train** (embedded example only): models with a ``train`` block are trained here
   (:func:`ensure_trained`), skipped when a checkpoint of the same recipe exists.
2. **subsets**: per dataset, ≤ ``max_images`` images by per-class seeded sampling
   (:func:`select_subset`), saved to ``subsets/<dataset>.npz|.json`` and shared by every
   model and measure.
3. **shards**: one job per (model, dataset) extracts features through the feature cache
   (:func:`rdx.models.extract.extract_features`) and writes a small record
   ``shards/<dataset>/<model>.json`` pointing at the cache entry. A shard whose record
   matches its signature (model spec, checkpoint file, dataset, subset ids, AMP) and whose
   cache file is present is *finished* and not run again.
4. **matrices**: one job per dataset computes every requested measure's model × model
   matrix (:func:`rdx.similarity.matrix.similarity_matrix`) into
   ``matrices/<dataset>/<measure slug>.npz|.json``; skipped when the file's signature
   (measure, parameters, normalisation, the shards' signatures) matches.

Linear probes (:func:`run_probe`) are jobs per (model, dataset) too.

Executors (:func:`run_tasks`): ``local`` runs the jobs one after another in this process;
``slurm`` submits them as a SLURM job array through ``submitit`` and waits;
``submitit-local`` uses submitit's local executor (one subprocess per job, the SLURM code
path on one machine); ``debug`` uses submitit's in-process debug executor.

Fixed relative to the paper's code: subsampling uses a fresh
``numpy.random.default_rng(seed)`` per class (via :func:`rdx.data.select_per_class`), so the
indices do not depend on which other datasets were processed before; nothing reads
``SLURM_ARRAY_TASK_ID`` — the same code runs with or without a cluster.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pydantic import ConfigDict, Field, field_validator, model_validator

from ..configs import StrictModel, load_config
from ..errors import RDXInputError
from .executors import EXECUTORS, make_executor, run_tasks  # noqa: F401  (public here too)
from ..io import json_digest, jsonable, save_npz_atomic, versions, write_json_atomic
from ..progress import working

SHARD_SCHEMA = 1
OBJECTIVES_PAPER = ("supervised", "self-supervised", "image-text")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# --------------------------------------------------------------------------- configs

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
    from ..data import get_dataset

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


def checkpoint_path(entry: ModelEntry, checkpoint_root: str | os.PathLike) -> Path:
    """Where a model with a ``train`` block keeps its final checkpoint."""
    return Path(checkpoint_root) / entry.id / "last.pt"


def resolved_spec(entry: ModelEntry, checkpoint_root: str | os.PathLike) -> dict | None:
    """The model spec with the trained checkpoint filled in."""
    if entry.spec is None:
        return None
    spec = dict(entry.spec)
    if entry.train is not None:
        spec["checkpoint"] = str(checkpoint_path(entry, checkpoint_root))
    return spec


# --------------------------------------------------------------------------- training

def rotation_dataset(ds):
    """RotNet-style self-supervision: every image at 0°, 90°, 180°, 270°, labelled 0–3."""
    from ..data.base import ImageDataset

    if ds.images is None:
        raise RDXInputError(f"rotation training needs an array dataset; {ds.name!r} is a file "
                            "dataset.")
    imgs = np.concatenate([np.rot90(ds.images, k, axes=(1, 2)) for k in range(4)])
    labels = np.repeat(np.arange(4, dtype=np.int64), len(ds))
    ids = [f"rot{90 * k}/{i}" for k in range(4) for i in ds.ids]
    return ImageDataset(name=f"{ds.name}_rotation", labels=labels,
                        class_names=["0", "90", "180", "270"], ids=ids,
                        images=np.ascontiguousarray(imgs),
                        info={**ds.info, "objective": "rotation"})


def train_model(entry: ModelEntry, checkpoint_root: str | os.PathLike, *, device: str = "auto",
                progress: bool = False, data_root: str | os.PathLike = "data") -> Path:
    """Train one model of the embedded example (recipe in ``entry.train``); returns last.pt.

    ``supervised``: cross-entropy on the dataset's classes (or ``classes``, relabelled);
    ``rotation``: predict which of 4 rotations was applied (self-supervised, no labels used).
    Images: ``per_class`` per class, seeded (``selection_seed``).
    """
    from ..data import select_per_class
    from ..models.training import train_classifier

    t = entry.train or {}
    objective = t.get("objective", "supervised")
    ds = load_dataset(t["dataset"], split=t.get("split", "train"),
                      data_root=t.get("data_root", data_root))
    classes = t.get("classes")
    idx = select_per_class(ds.ids, ds.labels, classes, t.get("per_class"),
                           seed=int(t.get("selection_seed", 0)))
    sub = ds.subset(idx)
    class_subset = classes
    if objective == "rotation":
        sub, class_subset = rotation_dataset(sub), None
    out = checkpoint_path(entry, checkpoint_root)
    paths = train_classifier(
        sub, epochs=int(t["epochs"]), batch_size=int(t.get("batch_size", 64)),
        lr=float(t.get("lr", 1e-2)), seed=int(t.get("seed", 0)), width=int(t.get("width", 32)),
        save_dir=out.parent, save_every=None, class_subset=class_subset, device=device,
        progress=progress, extra_meta={"similarity_model_id": entry.id,
                                       "similarity_train": jsonable(t)})
    return paths[-1]


def ensure_trained(entries: Sequence[ModelEntry], checkpoint_root: str | os.PathLike, *,
                   device: str = "auto", progress: bool = False,
                   log: Callable[[str], None] = print) -> dict[str, str]:
    """Train every model with a ``train`` block whose checkpoint is missing or was made by
    another recipe; returns id → "trained" | "exists"."""
    from ..models.checkpoint import sidecar_path

    status = {}
    for e in entries:
        if e.train is None:
            continue
        path = checkpoint_path(e, checkpoint_root)
        side = sidecar_path(path)
        if path.exists() and side.exists():
            try:
                meta = json.loads(side.read_text())
            except (OSError, ValueError):
                meta = {}
            if meta.get("similarity_train") == jsonable(e.train):
                status[e.id] = "exists"
                continue
        t0 = time.perf_counter()
        # loading the training images takes seconds before the training bar appears
        with working(f"training {e.id} ({e.train.get('objective', 'supervised')})",
                     show=progress, keep=False):   # the log line below says it is done
            train_model(e, checkpoint_root, device=device, progress=progress)
        log(f"trained {e.id} ({e.train.get('objective', 'supervised')}, "
            f"{time.perf_counter() - t0:.1f}s) → {path}")
        status[e.id] = "trained"
    return status


# --------------------------------------------------------------------------- subsets

def select_subset(ids: Sequence[str], labels: np.ndarray, *, max_images: int | None,
                  per_class: int | None = None, seed: int = 0,
                  target_classes: Sequence[int] | None = None) -> tuple[np.ndarray, int | None]:
    """Images used for the similarities of one dataset and the per-class count.

    * ``per_class`` given: that many per class (ImageNet in the paper: 10 → 10,000 images);
    * else a dataset with at most ``max_images`` images is used whole (as the paper);
    * else ``c = ⌈max_images / #classes⌉`` per class, ``min(c, class size)`` kept — about
      ``max_images`` images (up to ``#classes − 1`` more through the rounding up, fewer with
      small classes), exactly the paper's rule.

    Per class: images sorted by id, shuffled by a fresh ``default_rng(seed)``, first ``c``
    kept (:func:`rdx.data.select_per_class`).
    """
    from ..data import select_per_class

    labels = np.asarray(labels)
    if target_classes is not None:
        pool = np.flatnonzero(np.isin(labels, list(target_classes)))
    else:
        pool = np.arange(len(labels))
    n_classes = len(np.unique(labels[pool])) if target_classes is None else len(target_classes)
    if per_class is None:
        if max_images is None or len(pool) <= max_images:
            if target_classes is None:
                return np.arange(len(labels), dtype=np.int64), None
            return select_per_class(ids, labels, target_classes, None, seed), None
        per_class = math.ceil(max_images / n_classes)
    return select_per_class(ids, labels, target_classes, per_class, seed), per_class


def ids_sha256(ids: Sequence[str]) -> str:
    """Hash of an ordered list of image ids (identifies a subset)."""
    return hashlib.sha256("\n".join(map(str, ids)).encode()).hexdigest()


def prepare_subset(entry: DatasetEntry, root: str | os.PathLike, max_images: int | None
                   ) -> dict:
    """Choose (or re-check) the subset of one dataset; returns its metadata.

    The files are rewritten only when the selection changed, so finished shards keep
    matching.
    """
    ds = entry.load()
    mx = entry.max_images if entry.max_images is not None else max_images
    idx, per_class = select_subset(ds.ids, ds.labels, max_images=mx, per_class=entry.per_class,
                                   seed=entry.seed, target_classes=entry.target_classes)
    ids = [ds.ids[i] for i in idx]
    labels = ds.labels[idx]
    meta = {"dataset": entry.id, "entry": jsonable(asdict(entry)), "n_images": len(idx),
            "n_total": len(ds), "per_class": per_class, "max_images": mx,
            "seed": entry.seed, "ids_sha256": ids_sha256(ids),
            "class_counts": {str(c): int(k) for c, k in zip(*np.unique(labels,
                                                                         return_counts=True))},
            "class_names": list(ds.class_names)}
    js, npz = _subset_paths(root, entry.id)
    old = json.loads(js.read_text()) if js.exists() else None
    if old != json.loads(json.dumps(jsonable(meta))) or not npz.exists():
        save_npz_atomic(npz, indices=idx.astype(np.int64), labels=labels.astype(np.int64))
        write_json_atomic(js, meta)
    return meta


def _subset_paths(root: str | os.PathLike, dataset_id: str) -> tuple[Path, Path]:
    # not with_suffix: ids may contain dots
    base = Path(root) / "subsets"
    return base / f"{dataset_id}.json", base / f"{dataset_id}.npz"


def load_subset(root: str | os.PathLike, dataset_id: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """(indices, labels, metadata) of a prepared subset."""
    js, npz = _subset_paths(root, dataset_id)
    try:
        meta = json.loads(js.read_text())
        with np.load(npz, allow_pickle=False) as z:
            return z["indices"], z["labels"], meta
    except (OSError, ValueError, KeyError) as exc:
        raise RDXInputError(f"subset of dataset {dataset_id!r} under {root} is missing or "
                            f"broken ({exc}); re-run scripts/similarity_matrix.py.") from None


# --------------------------------------------------------------------------- shards

@dataclass
class ShardTask:
    """Everything one (model, dataset) feature job needs (picklable for submitit)."""

    model: dict                 # asdict(ModelEntry) with the resolved spec
    dataset: dict               # asdict(DatasetEntry)
    root: str
    cache_dir: str
    signature: str
    device: str = "auto"
    batch_size: int = 256
    num_workers: int = 0
    amp: bool = False

    @property
    def record_path(self) -> Path:
        return shard_record_path(self.root, self.dataset["id"], self.model["id"])


def shard_record_path(root: str | os.PathLike, dataset_id: str, model_id: str) -> Path:
    return Path(root) / "shards" / dataset_id / f"{model_id}.json"


def _file_stamp(path: str | None) -> dict | None:
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return {"path": str(path), "missing": True}
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def shard_signature(spec: dict, dataset: DatasetEntry, subset_meta: dict, amp: bool) -> str:
    """What determines a shard's features: spec (+ checkpoint size/mtime), data, subset, AMP."""
    doc = {"schema": SHARD_SCHEMA, "spec": spec,
           "checkpoint": _file_stamp(spec.get("checkpoint")),
           "dataset": {k: v for k, v in asdict(dataset).items()
                       if k in ("dataset", "split", "root", "data_root", "target_classes")},
           "ids_sha256": subset_meta["ids_sha256"], "amp": bool(amp)}
    return json_digest(doc)


def shard_finished(record_path: Path, signature: str) -> dict | None:
    """The record of a finished shard with this signature, else None."""
    try:
        rec = json.loads(Path(record_path).read_text())
    except (OSError, ValueError):
        return None
    if rec.get("status") != "done" or rec.get("signature") != signature:
        return None
    try:
        arr = np.load(rec["cache_npy"], mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, KeyError):
        return None
    if list(arr.shape) != rec.get("shape"):
        return None
    return rec


def run_shard(task: ShardTask) -> dict:
    """Extract one model's features on one dataset's subset and write the shard record.

    Never raises: failures come back as ``{"status": "failed", "error": ...}`` (and a
    ``.failed.json`` next to the record) so that one broken model does not stop the others.
    """
    from ..models.extract import cache_key, cache_payload, extract_features
    from ..models.zoo import load_model

    t0 = time.perf_counter()
    base = {"model": task.model["id"], "dataset": task.dataset["id"]}
    failed = task.record_path.with_name(task.record_path.stem + ".failed.json")
    try:
        entry = DatasetEntry(**task.dataset)
        idx, _labels, meta = load_subset(task.root, entry.id)
        ds = entry.load()
        ids = [ds.ids[i] for i in idx]
        if ids_sha256(ids) != meta["ids_sha256"]:
            raise RDXInputError(f"dataset {entry.id!r} changed since its subset was chosen; "
                                "re-run scripts/similarity_matrix.py to re-select.")
        loaded = load_model(task.model["spec"])
        feats = extract_features(loaded, ds, idx, batch_size=task.batch_size,
                                 device=task.device, num_workers=task.num_workers,
                                 amp=task.amp, cache_dir=task.cache_dir, progress=False)
        key = cache_key(cache_payload(loaded, ds, ids, task.amp))
        npy = Path(task.cache_dir) / f"{key}.npy"
        if not npy.exists():
            raise RDXInputError(f"feature cache entry {npy} was not written.")
        rec = {**base, "status": "done", "signature": task.signature,
               "cache_npy": str(npy), "cache_key": key, "shape": list(feats.shape),
               "model_id": loaded.model_id, "weights_id": loaded.weights_id,
               "layer": loaded.layer, "spec": task.model["spec"],
               "ids_sha256": meta["ids_sha256"], "seconds": time.perf_counter() - t0,
               "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "versions": versions()}
        write_json_atomic(task.record_path, rec)
        if failed.exists():
            failed.unlink()
        return {**base, "status": "done", "seconds": rec["seconds"]}
    except Exception as exc:  # noqa: BLE001 - reported per shard, the others go on
        msg = f"{type(exc).__name__}: {exc}"
        write_json_atomic(failed, {**base, "status": "failed", "error": msg,
                                   "traceback": traceback.format_exc()})
        return {**base, "status": "failed", "error": msg,
                "seconds": time.perf_counter() - t0}


# --------------------------------------------------------------------------- matrices

@dataclass
class MatrixTask:
    """All measures of one dataset (picklable)."""

    dataset: dict
    root: str
    model_ids: list[str]
    categories: dict            # category → {model id: value}
    measures: list[tuple[str, dict]]
    normalize: str = "l2"
    device: str = "cpu"
    force: bool = False


def matrix_stem(root: str | os.PathLike, dataset_id: str, slug: str) -> Path:
    return Path(root) / "matrices" / dataset_id / slug


def matrix_signature(measure: str, params: dict, normalize: str,
                     shards: Sequence[tuple[str, str]]) -> str:
    doc = {"measure": measure, "params": params, "normalize": normalize,
           "shards": [list(s) for s in shards]}
    return json_digest(doc)


def run_matrix_job(task: MatrixTask) -> list[dict]:
    """Compute (or skip, when up to date) every measure's matrix for one dataset."""
    from ..similarity.matrix import measure_slug, similarity_matrix

    ds_id = task.dataset["id"]
    results = []
    try:
        _idx, _labels, subset = load_subset(task.root, ds_id)
        records = {}
        for mid in task.model_ids:
            rec = json.loads(shard_record_path(task.root, ds_id, mid).read_text())
            records[mid] = rec
        shards = [(mid, records[mid]["signature"]) for mid in task.model_ids]
        feats: dict[str, np.ndarray] | None = None
        for name, params in task.measures:
            slug = measure_slug(name, params)
            stem = matrix_stem(task.root, ds_id, slug)
            sig = matrix_signature(name, params, task.normalize, shards)
            js = stem.with_name(stem.name + ".json")
            if not task.force and js.exists() and stem.with_name(stem.name + ".npz").exists():
                try:
                    if json.loads(js.read_text()).get("signature") == sig:
                        results.append({"dataset": ds_id, "measure": slug, "status": "skipped"})
                        continue
                except ValueError:
                    pass
            if feats is None:
                feats = {}
                for mid in task.model_ids:
                    arr = np.load(records[mid]["cache_npy"], allow_pickle=False)
                    if arr.shape[0] != subset["n_images"]:
                        raise RDXInputError(f"features of {mid} on {ds_id} have {arr.shape[0]} "
                                            f"rows, the subset {subset['n_images']}.")
                    feats[mid] = arr
            t0 = time.perf_counter()
            res = similarity_matrix(feats, name, params=params, normalize=task.normalize,
                                    device=task.device)
            res.meta.update({
                "dataset": ds_id, "domain": task.dataset.get("domain"),
                "dataset_name": task.dataset.get("name"), "signature": sig,
                "subset": {k: subset[k] for k in ("n_images", "per_class", "max_images", "seed",
                                                  "ids_sha256")},
                "categories": task.categories,
                "shards": {mid: {k: records[mid].get(k) for k in
                                 ("signature", "model_id", "weights_id", "layer", "shape")}
                           for mid in task.model_ids}})
            res.save(stem)
            results.append({"dataset": ds_id, "measure": slug, "status": "done",
                            "seconds": time.perf_counter() - t0, "n_errors": len(res.errors)})
    except Exception as exc:  # noqa: BLE001 - reported, other datasets go on
        results.append({"dataset": ds_id, "measure": "*", "status": "failed",
                        "error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc()})
    return results


# --------------------------------------------------------------------------- probes

@dataclass
class ProbeTask:
    """One model's linear probe on one dataset (picklable)."""

    model: dict
    dataset: dict
    root: str
    cache_dir: str
    signature: str
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    epochs: int = 20
    batch_size: int = 1024
    lrs: list[float] = field(default_factory=lambda: [1e-1, 1e-2, 1e-3, 1e-4])
    max_train: int | None = None
    max_test: int | None = None
    holdout: float = 0.2
    normalize: str = "l2"
    device: str = "auto"
    extract_batch_size: int = 256
    num_workers: int = 0

    @property
    def record_path(self) -> Path:
        return probe_record_path(self.root, self.dataset["id"], self.model["id"])


def probe_record_path(root: str | os.PathLike, dataset_id: str, model_id: str) -> Path:
    return Path(root) / "probes" / dataset_id / f"{model_id}.json"


def probe_signature(task_fields: dict) -> str:
    keep = {k: v for k, v in task_fields.items()
            if k not in ("root", "cache_dir", "signature", "device", "extract_batch_size",
                         "num_workers")}
    keep["checkpoint"] = _file_stamp((keep.get("model") or {}).get("spec", {}).get("checkpoint"))
    return json_digest(keep)


def _probe_splits(entry: DatasetEntry, task: ProbeTask):
    """(train dataset, train indices, test dataset, test indices, how the test set was made)."""
    from sklearn.model_selection import train_test_split

    train_ds = entry.load()
    pool = np.arange(len(train_ds))
    if entry.target_classes is not None:
        pool = np.flatnonzero(np.isin(train_ds.labels, list(entry.target_classes)))
    if entry.test is None:
        # no test split: a seeded stratified hold-out of the same split
        labels = train_ds.labels[pool]
        counts = np.bincount(labels)
        strat = labels if counts[counts > 0].min() >= 2 else None
        tr, te = train_test_split(pool, test_size=task.holdout, random_state=entry.seed,
                                  stratify=strat)
        test_ds, te_idx = train_ds, np.sort(te)
        how = f"hold-out {task.holdout:.0%} of {entry.split} (seed {entry.seed})"
        pool = np.sort(tr)
    else:
        test_ds = entry.load(**entry.test)
        te_idx = np.arange(len(test_ds))
        how = ", ".join(f"{k}={v}" for k, v in entry.test.items()) or entry.split
        if entry.target_classes is not None:
            te_idx = np.flatnonzero(np.isin(test_ds.labels, list(entry.target_classes)))

    def cap(ds, idx, mx):
        if mx is None or len(idx) <= mx:
            return idx
        sub, _ = select_subset([ds.ids[i] for i in idx], ds.labels[idx], max_images=mx,
                               seed=entry.seed)
        return idx[np.sort(sub)]

    return (train_ds, cap(train_ds, pool, task.max_train), test_ds,
            cap(test_ds, te_idx, task.max_test), how)


def run_probe(task: ProbeTask) -> dict:
    """Features of the train and test images (cached), then the probe for every seed."""
    from ..models.extract import extract_features
    from ..models.zoo import load_model
    from ..similarity.matrix import normalize_features
    from ..similarity.probe import linear_probe

    base = {"model": task.model["id"], "dataset": task.dataset["id"]}
    t0 = time.perf_counter()
    try:
        entry = DatasetEntry(**task.dataset)
        train_ds, tr_idx, test_ds, te_idx, how = _probe_splits(entry, task)
        loaded = load_model(task.model["spec"])
        kw = {"batch_size": task.extract_batch_size, "device": task.device,
              "num_workers": task.num_workers, "cache_dir": task.cache_dir, "progress": False}
        Xtr = normalize_features(extract_features(loaded, train_ds, tr_idx, **kw), task.normalize)
        Xte = normalize_features(extract_features(loaded, test_ds, te_idx, **kw), task.normalize)
        ytr, yte = train_ds.labels[tr_idx], test_ds.labels[te_idx]
        num_classes = max(len(train_ds.class_names), int(max(ytr.max(), yte.max())) + 1)
        from ..backend import resolve_device
        dev = resolve_device(task.device)
        runs = []
        for seed in task.seeds:
            r = linear_probe(Xtr, ytr, Xte, yte, seed=seed, lrs=task.lrs, epochs=task.epochs,
                             batch_size=task.batch_size, num_classes=num_classes, device=dev)
            runs.append(r)
        summary = {m: float(np.mean([r[m] for r in runs]))
                   for m in ("top1", "balanced_accuracy")}
        summary["top5"] = None if runs[0]["top5"] is None else \
            float(np.mean([r["top5"] for r in runs]))
        rec = {**base, "status": "done", "signature": task.signature,
               "objective": task.model.get("objective"), **summary,
               "top1_per_seed": [r["top1"] for r in runs], "seeds": list(task.seeds),
               "runs": runs, "test_set": how, "n_train": len(tr_idx),
               "n_test": len(te_idx), "normalize": task.normalize,
               "model_id": loaded.model_id, "weights_id": loaded.weights_id,
               "layer": loaded.layer, "seconds": time.perf_counter() - t0,
               "protocol": {"epochs": task.epochs, "batch_size": task.batch_size,
                            "lrs": list(task.lrs), "val_proportion": 0.2,
                            "weight_decay_grid": "64 log-spaced in [1e-6, 1e1]"},
               "versions": versions()}
        write_json_atomic(task.record_path, rec)
        return {**base, "status": "done", "top1": summary["top1"], "seconds": rec["seconds"]}
    except Exception as exc:  # noqa: BLE001
        return {**base, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(), "seconds": time.perf_counter() - t0}


# --------------------------------------------------------------------------- executors

def categories_of(models: Sequence[ModelEntry]) -> dict[str, dict[str, str]]:
    """category → {model id: value} over the models that define it."""
    cats: dict[str, dict[str, str]] = {}
    for m in models:
        for c, v in m.categories.items():
            cats.setdefault(c, {})[m.id] = v
    return cats


# --------------------------------------------------------------------------- CLI helpers

def script_main(parser: Callable[[], Any], run: Callable[[Any], int],
                argv: list[str] | None = None) -> int:
    """Entry point of the similarity scripts: parse, run, and turn bad input into exit
    code 2 with a one-line message on stderr (no traceback)."""
    import sys

    args = parser().parse_args(argv)
    try:
        return run(args)
    except RDXInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def add_common_args(p) -> None:
    """Arguments shared by scripts/similarity_matrix.py and scripts/linear_probe.py."""
    p.add_argument("--models", required=True, help="models YAML (configs/similarity/...)")
    p.add_argument("--datasets", required=True, help="datasets YAML")
    from ..paths import output_arg

    p.add_argument("--output-root", type=output_arg,
                   help="results folder (default: outputs/similarity/"
                                         "<models stem>__<datasets stem>)")
    p.add_argument("--cache-dir", default="outputs/cache/features", type=output_arg,
                   help="feature cache (default: outputs/cache/features)")
    p.add_argument("--checkpoint-root", help="where models with a train block keep "
                                             "checkpoints (default: the models file's "
                                             "checkpoint_root, else checkpoints/similarity)")
    p.add_argument("--only-models", nargs="+", metavar="ID", help="restrict to these models")
    p.add_argument("--only-datasets", nargs="+", metavar="ID",
                   help="restrict to these datasets")
    p.add_argument("--device", default="auto", help="feature extraction / probe device")
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers")
    p.add_argument("--executor", default="local", choices=EXECUTORS,
                   help="local: jobs in this process; slurm: a SLURM job array via submitit; "
                        "submitit-local: submitit subprocesses; debug: submitit in-process")
    p.add_argument("--submitit-folder", help="submitit logs (default: <output-root>/submitit)")
    p.add_argument("--slurm-partition")
    p.add_argument("--slurm-account")
    p.add_argument("--slurm-qos")
    p.add_argument("--slurm-constraint")
    p.add_argument("--slurm-timeout-min", type=int, default=120)
    p.add_argument("--slurm-gpus", type=int, default=1, help="GPUs per job (default 1)")
    p.add_argument("--slurm-cpus", type=int, default=4)
    p.add_argument("--slurm-mem-gb", type=int, default=64)
    p.add_argument("--slurm-array-parallelism", type=int, default=32)
    p.add_argument("--allow-missing", action="store_true",
                   help="exit 0 even when some models/datasets could not be used")
    p.add_argument("--quiet", action="store_true", help="less output")


def slurm_params(args) -> dict:
    return {"partition": args.slurm_partition, "account": args.slurm_account,
            "qos": args.slurm_qos, "constraint": args.slurm_constraint,
            "timeout_min": args.slurm_timeout_min, "gpus_per_node": args.slurm_gpus,
            "cpus_per_task": args.slurm_cpus, "mem_gb": args.slurm_mem_gb,
            "array_parallelism": args.slurm_array_parallelism}


def default_root(models_path: str | os.PathLike, datasets_path: str | os.PathLike) -> Path:
    return Path("outputs/similarity") / f"{Path(models_path).stem}__{Path(datasets_path).stem}"


@dataclass
class Setup:
    models: list[ModelEntry]
    datasets: list[DatasetEntry]
    model_settings: dict
    dataset_settings: dict
    root: Path
    checkpoint_root: Path


def setup_from_args(args) -> Setup:
    """Configs read, filtered by --only-*, with the output and checkpoint roots resolved."""
    models, mset = load_models_config(args.models)
    datasets, dset = load_datasets_config(args.datasets)
    for flag, chosen, items in (("--only-models", args.only_models, models),
                                ("--only-datasets", args.only_datasets, datasets)):
        if chosen:
            known = [e.id for e in items]
            bad = sorted(set(chosen) - set(known))
            if bad:
                raise RDXInputError(f"{flag}: unknown ids {bad}; known: {known}.")
    if args.only_models:
        models = [m for m in models if m.id in args.only_models]
    if args.only_datasets:
        datasets = [d for d in datasets if d.id in args.only_datasets]
    root = (Path(args.output_root) if args.output_root is not None
            else default_root(args.models, args.datasets))
    ck = args.checkpoint_root or mset.get("checkpoint_root") or "checkpoints/similarity"
    return Setup(models, datasets, mset, dset, root, Path(ck))


def write_csv(path: str | os.PathLike, rows: Sequence[Mapping]) -> Path:
    """Rows (dicts) as a CSV file, columns in first-seen order, written atomically."""
    import csv
    import io

    from ..io import atomic_write

    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in keys})
    p = Path(path)
    atomic_write(p, lambda fh: fh.write(buf.getvalue().encode()))
    return p


def model_task_dict(entry: ModelEntry, checkpoint_root: str | os.PathLike) -> dict:
    return {**asdict(entry), "spec": resolved_spec(entry, checkpoint_root)}


__all__ = ["DatasetEntry", "EXECUTORS", "MatrixTask", "ModelEntry", "ProbeTask", "Setup",
           "script_main",
           "ShardTask", "add_common_args", "categories_of", "default_root", "model_task_dict",
           "setup_from_args", "slurm_params", "checkpoint_path", "ensure_trained", "ids_sha256",
           "load_datasets_config", "load_models_config", "load_subset", "make_executor",
           "matrix_signature",
           "matrix_stem", "prepare_subset", "probe_record_path", "probe_signature",
           "resolved_spec", "rotation_dataset", "run_matrix_job", "run_probe", "run_shard",
           "run_tasks", "select_subset", "shard_finished", "shard_record_path",
           "shard_signature", "train_model", "write_csv"]
