"""The models of the similarity study: where the models trained here keep their checkpoints,
the zoo spec of each entry, and their training (skipped when a checkpoint of the same recipe
exists)."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ...errors import RDXInputError
from ...io import jsonable
from ...progress import working
from .config import ModelEntry, load_dataset


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


def rotation_dataset(ds):
    """RotNet-style self-supervision: every image at 0°, 90°, 180°, 270°, labelled 0–3."""
    from ...data.base import ImageDataset

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
    from ...data import select_per_class
    from ...models.training import train_classifier

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
    from ...models.checkpoint import sidecar_path

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


def model_task_dict(entry: ModelEntry, checkpoint_root: str | os.PathLike) -> dict:
    return {**asdict(entry), "spec": resolved_spec(entry, checkpoint_root)}
