"""The image subsets of the similarity study: per dataset, at most ``max_images`` images by
per-class seeded sampling, saved to ``subsets/<dataset>.npz|.json`` and shared by every model
and measure."""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ...errors import RDXInputError
from ...io import jsonable, save_npz_atomic, write_json_atomic
from .config import DatasetEntry


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
    from ...data import select_per_class

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
