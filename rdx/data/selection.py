"""The images a comparison uses: a dataset plus the seeded selection of its rows."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import DATASET_OPTIONS, check_dataset_options, get_dataset
from .base import ImageDataset
from .sampling import select_per_class


class LazyImages:
    """``images[i]`` = i-th selected image as an array, loaded only when drawn."""

    def __init__(self, dataset: ImageDataset, indices: np.ndarray):
        self.dataset, self.indices = dataset, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> np.ndarray:
        return np.asarray(self.dataset.load_image(int(self.indices[i])))


def loader_options(sel: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`rdx.data.get_dataset` reads of an ``image_selection``: ``dataset`` and,
    of ``split`` (default train), ``root``, ``data_root`` (default data) and
    ``target_classes``, those the dataset uses (:data:`rdx.data.DATASET_OPTIONS`) — the
    record from which :func:`open_dataset` opens the same dataset again."""
    name = sel["dataset"]
    reads = DATASET_OPTIONS.get(name, frozenset({"split", "root", "data_root"}))
    given = {"split": sel.get("split", "train"), "root": sel.get("root"),
             "data_root": sel.get("data_root", "data")}
    out: dict[str, Any] = {"dataset": name, **{k: v for k, v in given.items()
                                               if k in reads and v is not None}}
    if sel.get("target_classes") is not None:   # ImageNet lists only these class folders
        out["target_classes"] = list(sel["target_classes"])
    return out


def open_dataset(options: Mapping[str, Any]) -> ImageDataset:
    """The dataset of :func:`loader_options`' record."""
    return get_dataset(options["dataset"], split=options.get("split", "train"),
                       root=options.get("root"), data_root=options.get("data_root", "data"),
                       target_classes=options.get("target_classes"))


def select_images(sel: Mapping[str, Any]) -> tuple[ImageDataset, np.ndarray]:
    """The dataset and the indices of the images a comparison uses.

    ``sel`` is an ``image_selection`` block: ``dataset`` (required), ``split``, ``root``,
    ``data_root``, ``target_classes``, ``num_images``, ``seed`` and ``strategy``
    (``per_class``: seeded sampling per target class; ``full_dataset``: every image of the
    split in dataset order). Options the dataset does not read (``split`` for ``digits``)
    are refused, not ignored (:func:`rdx.data.check_dataset_options`).
    """
    check_dataset_options(sel["dataset"], sel)
    ds = open_dataset(loader_options(sel))
    if sel.get("strategy", "per_class") == "full_dataset":
        return ds, np.arange(len(ds))
    return ds, select_per_class(ds.ids, ds.labels, sel.get("target_classes"),
                                sel.get("num_images"), seed=sel.get("seed", 0))
