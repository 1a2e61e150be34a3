"""Datasets behind one interface (:class:`ImageDataset`) and seeded per-class sampling.

``get_dataset(name, ...)`` knows: ``digits`` (scikit-learn's bundled 8×8 digits, always
available), ``mnist`` and the paper's modifications ``mnist_{m35,m49,hflip,hflip_nl,vflip,
vflip_nl}``, ``fashion_mnist`` (Debian's package works offline), ``imagefolder`` (any
``root/<class>/<image>`` tree), ``cub_pcbm`` (CUB-200-2011 with the CBM splits), ``inatdl``
(the authors' iNaturalist subset), ``imagenet`` (train/val folder layout) and
``rsna_pneumonia`` (the Kaggle RSNA Pneumonia layout; needs pydicom).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from .base import ImageDataset
from .mnist import MODIFICATIONS, mnist_dataset
from .sampling import select_per_class

DATASETS = ("digits", "mnist", *[f"mnist_{m}" for m in MODIFICATIONS], "fashion_mnist",
            "imagefolder", "cub_pcbm", "inatdl", "imagenet", "rsna_pneumonia")


def digits_dataset() -> ImageDataset:
    """scikit-learn's digits: 1797 real 8×8 images (values 0–16 scaled to 0–255)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)
    labels = d.target.astype(np.int64)
    return ImageDataset(name="digits", labels=labels, class_names=[str(c) for c in range(10)],
                        ids=[f"{lab}/{i}" for i, lab in enumerate(labels)], images=images,
                        info={"source": "sklearn.datasets.load_digits"})


def imagefolder_dataset(root: str | Path) -> ImageDataset:
    """Any ``root/<class>/<image>`` tree (torchvision's ImageFolder conventions, read by
    :func:`rdx.data.sources.class_tree`: a link loop ends, image files beside the class
    folders, a class folder without images and a tree without any are refused)."""
    from .sources import class_tree

    root = Path(root)
    ids, labels, classes = class_tree(root)
    return ImageDataset(name="imagefolder", labels=labels, class_names=classes,
                        ids=ids, root=root, info={"source": str(root)})


#: The ``image_selection`` options each dataset reads (besides ``dataset`` and the
#: selection's own ``target_classes``, ``num_images``, ``seed`` and ``strategy``). An option
#: given for a dataset that ignores it is refused (:func:`check_dataset_options`): a
#: ``split: test`` on ``digits`` would otherwise run on the one digits set and say nothing.
DATASET_OPTIONS: dict[str, frozenset[str]] = {
    "digits": frozenset(),
    "imagefolder": frozenset({"root"}),
    **{name: frozenset({"split", "root", "data_root"})
       for name in DATASETS if name not in ("digits", "imagefolder")},
}

#: Why a dataset has none of an option, for the message.
_NO_OPTION_WHY = {
    "digits": "it is scikit-learn's bundled set of 1797 images, read whole: it has no "
              "splits and no files",
    "imagefolder": "it reads the one folder tree given as root, which has no splits",
}


def check_dataset_options(name: str, given: Any, where: str | None = "image_selection"
                          ) -> None:
    """Refuse options of ``given`` (the keys a user wrote) that dataset ``name`` ignores.

    Raises
    ------
    RDXInputError
        Naming the options, why the dataset has none of them, and the ones it reads.
    """
    if name not in DATASET_OPTIONS or not hasattr(given, "keys"):
        return   # an unknown dataset: get_dataset lists the known ones
    ignored = sorted(k for k in ("split", "root", "data_root")
                     if k in given.keys() and k not in DATASET_OPTIONS[name])
    if ignored:
        reads = sorted(DATASET_OPTIONS[name])
        why = _NO_OPTION_WHY.get(name, "")
        raise RDXInputError(
            (f"{where}: " if where else "") + f"dataset {name!r} does not use "
            f"{', '.join(ignored)}"
            + (f" ({why})" if why else "") + "; remove "
            + ("it" if len(ignored) == 1 else "them") + " — "
            + (f"{name} reads {', '.join(reads)}." if reads else
               f"{name} takes no options besides the selection (target_classes, "
               "num_images, seed, strategy)."))


def get_dataset(name: str, *, split: str = "train", root: str | Path | None = None,
                data_root: str | Path = "data",
                target_classes: list[int] | None = None) -> ImageDataset:
    """Load a dataset by name (see module docstring); errors say how to get missing data.

    ``target_classes`` lets ImageNet list only those class folders (the other datasets are
    small enough to load whole; the runner selects classes afterwards).
    """
    if name == "cub_pcbm":
        from .cub import cub_dataset
        return cub_dataset(split, data_root, root)
    if name == "rsna_pneumonia":
        from .rsna import rsna_dataset
        return rsna_dataset(split, data_root, root)
    if name == "inatdl":
        from .inat import inat_dataset
        return inat_dataset(split, data_root, root)
    if name == "imagenet":
        from .imagenet import imagenet_dataset
        return imagenet_dataset(split, data_root, classes=target_classes, root=root)
    if name == "digits":
        return digits_dataset()
    if name == "imagefolder":
        if root is None:
            raise RDXInputError("dataset 'imagefolder' needs root=<folder>.")
        return imagefolder_dataset(root)
    if name == "fashion_mnist" or name == "mnist" or name.removeprefix("mnist_") in MODIFICATIONS:
        return mnist_dataset(name, split, root, data_root)
    raise RDXInputError(f"unknown dataset {name!r}; use one of {DATASETS}")


__all__ = ["DATASETS", "DATASET_OPTIONS", "ImageDataset", "check_dataset_options",
           "get_dataset", "select_per_class", "digits_dataset", "imagefolder_dataset",
           "mnist_dataset"]
