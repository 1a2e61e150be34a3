"""The linear-probe jobs: one per (model, dataset), its training and test splits, its
signature (a finished probe is not run again) and its record."""
from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import RDXInputError
from ...io import environment_error, json_digest, versions, write_json_atomic
from .config import DatasetEntry
from .matrix_jobs import file_stamp
from .subsets import select_subset


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
    keep["checkpoint"] = file_stamp((keep.get("model") or {}).get("spec", {}).get("checkpoint"))
    return json_digest(keep)


def check_holdout(entry: DatasetEntry, holdout: float, option: str = "--holdout") -> None:
    """Refuse a hold-out fraction that leaves a dataset without a test split fewer test (or
    training) images than classes — scikit-learn's stratified split needs one of each class
    on both sides — before any model is loaded, naming the range that works."""
    import math

    if entry.test is not None:
        return
    labels = np.asarray(entry.load().labels)
    if entry.target_classes is not None:
        labels = labels[np.isin(labels, list(entry.target_classes))]
    n = len(labels)
    counts = np.unique(labels, return_counts=True)[1]
    need = len(counts) if len(counts) and counts.min() >= 2 else 1
    n_test = math.ceil(holdout * n)
    if n_test < need or n - n_test < need:
        lo, hi = need / max(n, 1), 1 - need / max(n, 1)
        raise RDXInputError(
            f"{option} {holdout!r} holds out {n_test} of the {n} images of dataset "
            f"{entry.id} (it has no test split), leaving {n - n_test} for training; each side "
            f"needs at least {need} (one per class): use {option} between {lo:.3g} and "
            f"{hi:.3g}." if lo < hi else
            f"dataset {entry.id} has {n} images for {need} classes: too few for a "
            "hold-out test split; give it a test split or more images.")


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
    from ...models.extract import extract_features
    from ...models.zoo import load_model
    from ...similarity.matrix import normalize_features
    from ...similarity.probe import linear_probe

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
        from ...backend import resolve_device
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
        if environment_error(exc):
            raise   # a full or read-only disk: every other probe would fail the same way
        return {**base, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(), "seconds": time.perf_counter() - t0}
