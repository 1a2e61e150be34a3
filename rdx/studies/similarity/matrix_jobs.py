"""The jobs of the similarity matrices: one feature shard per (model, dataset) through the
feature cache, then one job per dataset computing every measure's model × model matrix. A job
whose record matches its signature is finished and not run again."""
from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ...errors import RDXInputError
from ...io import environment_error, json_digest, versions, write_json_atomic
from .config import DatasetEntry
from .subsets import ids_sha256, load_subset


SHARD_SCHEMA = 1


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


def file_stamp(path: str | None) -> dict | None:
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
           "checkpoint": file_stamp(spec.get("checkpoint")),
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
    from ...models.extract import cache_key, cache_payload, extract_features
    from ...models.zoo import load_model

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
        if environment_error(exc):
            raise   # a full or read-only disk: every other shard would fail the same way
        msg = f"{type(exc).__name__}: {exc}"
        write_json_atomic(failed, {**base, "status": "failed", "error": msg,
                                   "traceback": traceback.format_exc()})
        return {**base, "status": "failed", "error": msg,
                "seconds": time.perf_counter() - t0}


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
    from ...similarity.matrix import measure_slug, similarity_matrix

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
        if environment_error(exc):
            raise   # a full or read-only disk: the other datasets would fail the same way
        results.append({"dataset": ds_id, "measure": "*", "status": "failed",
                        "error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc()})
    return results
