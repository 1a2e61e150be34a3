"""The RDX authors' iNaturalist subset (``inatdl``).

Files (``bash download_inaturalist.sh`` fetches them)::

    data/inat_subset/data.json   {"file_paths": [...], "class_labels": [...],
                                  "class_names": [...], "train_indices": [...],
                                  "test_indices": [...]}
    data/inat_subset/<file_paths[i]>

``file_paths`` are relative to ``data/inat_subset/`` and are the image ids; the split picks
``train_indices`` or ``test_indices`` (in that order). Files are not all checked at load
time (only the first and last of the split); a missing one fails when it is read.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import RDXInputError
from .base import ImageDataset

SPLITS = ("train", "test")
FIX = "run `bash download_inaturalist.sh` (see data/README.md)"
KEYS = ("file_paths", "class_labels", "class_names", "train_indices", "test_indices")


def inat_dataset(split: str = "train", data_root: str | Path = "data",
                 root: str | Path | None = None) -> ImageDataset:
    """``inatdl``: split ``train``/``test``; ``root`` defaults to ``<data_root>/inat_subset``."""
    if split not in SPLITS:
        raise RDXInputError(f"inatdl split must be one of {SPLITS}, got {split!r}.")
    root = Path(root) if root is not None else Path(data_root) / "inat_subset"
    path = root / "data.json"
    if not path.is_file():
        raise RDXInputError(f"inatdl: {path} not found; {FIX}.")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RDXInputError(f"{path}: not valid JSON ({exc}); {FIX}.") from None
    missing = [k for k in KEYS if k not in meta]
    if missing:
        raise RDXInputError(f"{path}: missing keys {missing}.")
    files, labels_all = meta["file_paths"], np.asarray(meta["class_labels"], dtype=np.int64)
    names = [str(n) for n in meta["class_names"]]
    if len(files) != len(labels_all):
        raise RDXInputError(f"{path}: {len(files)} file_paths but {len(labels_all)} labels.")
    idx = np.asarray(meta[f"{split}_indices"], dtype=np.int64)
    if len(idx) and (idx.min() < 0 or idx.max() >= len(files)):
        raise RDXInputError(f"{path}: {split}_indices outside 0..{len(files) - 1}.")
    labels = labels_all[idx]
    if len(labels) and (labels.min() < 0 or labels.max() >= len(names)):
        raise RDXInputError(f"{path}: class_labels outside 0..{len(names) - 1}.")
    ids = [str(files[i]) for i in idx]
    for i in {0, len(ids) - 1} if ids else ():
        if not (root / ids[i]).is_file():
            raise RDXInputError(f"inatdl: image {root / ids[i]} (listed in {path}) not "
                                f"found; {FIX}.")
    return ImageDataset(name="inatdl", labels=labels, class_names=names, ids=ids, root=root,
                        info={"source": str(root), "split": split})
