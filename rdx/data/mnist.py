"""MNIST, Fashion-MNIST (real files, no download here), the paper's MNIST modifications.

Files are the standard IDX files ``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]``,
looked up in ``data/`` first (the original layout ``data/mnist_data/MNIST/raw`` among
others), then — for Fashion-MNIST — Debian's ``dataset-fashion-mnist`` package
(``/usr/share/datasets/fashion-mnist``).

Modifications (as in the paper), applied to the training data the models learn from:

* ``m35`` / ``m49``: labels 5 → 3 / 9 → 4 (the model cannot tell them apart);
* ``hflip`` / ``vflip``: the originals plus left-right / up-down flipped copies, same labels;
* ``hflip_nl`` / ``vflip_nl``: the flipped copies get new labels 10–19.

``hflip`` mirrors left-right (the image's column order reversed) and ``vflip`` up-down; the
original code swapped its variable names and torchvision calls, which cancelled out.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import RDXInputError
from .base import ImageDataset
from .idx import read_idx

FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                   "Sneaker", "Bag", "Ankle boot"]
DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")
MODIFICATIONS = ("m35", "m49", "hflip", "hflip_nl", "vflip", "vflip_nl")
_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def _candidates(kind: str, data_root: Path) -> list[Path]:
    if kind == "mnist":
        return [data_root / "mnist_data" / "MNIST" / "raw", data_root / "MNIST" / "raw",
                data_root / "mnist"]
    return [data_root / "fashion-mnist", data_root / "FashionMNIST" / "raw",
            data_root / "fashion_mnist", DEBIAN_FASHION]


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def load_mnist_arrays(kind: str = "mnist", split: str = "train", root: str | Path | None = None,
                      data_root: str | Path = "data") -> tuple[np.ndarray, np.ndarray, Path]:
    """Images (n×28×28 uint8), labels (int64) and the folder they were read from."""
    if split not in _FILES:
        raise RDXInputError(f"split must be 'train' or 'test', got {split!r}.")
    folders = [Path(root)] if root is not None else _candidates(kind, Path(data_root))
    for folder in folders:
        img, lab = (_find(folder, s) for s in _FILES[split])
        if img and lab:
            images, labels = read_idx(img), read_idx(lab).astype(np.int64)
            if images.ndim != 3 or len(images) != len(labels):
                raise RDXInputError(f"{folder}: images {images.shape} and labels "
                                    f"{labels.shape} do not match.")
            return images, labels, folder
    fix = ("run `bash download_mnist.sh` (or link an existing copy, see data/README.md)"
           if kind == "mnist" else
           "install Debian's package (`apt-get install -y dataset-fashion-mnist`) or put the "
           "IDX files in data/fashion-mnist/")
    raise RDXInputError(f"{kind} {split} files not found in "
                        f"{', '.join(str(f) for f in folders)}; {fix}.")


def apply_modification(images: np.ndarray, labels: np.ndarray, modification: str | None
                       ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Modified images, labels and class names."""
    names = [str(c) for c in range(10)]
    if modification is None:
        return images, labels, names
    if modification in ("m35", "m49"):
        src, dst = (5, 3) if modification == "m35" else (9, 4)
        merged = labels.copy()
        merged[labels == src] = dst
        return images, merged, names
    if modification in ("hflip", "hflip_nl", "vflip", "vflip_nl"):
        flipped = images[:, :, ::-1] if modification.startswith("h") else images[:, ::-1, :]
        new = modification.endswith("_nl")
        what = "mirrored" if modification.startswith("h") else "upside down"
        out_labels = np.concatenate([labels, labels + 10 if new else labels])
        if new:
            names = names + [f"{c} ({what})" for c in range(10)]
        return np.concatenate([images, np.ascontiguousarray(flipped)]), out_labels, names
    raise RDXInputError(f"unknown MNIST modification {modification!r}; use one of {MODIFICATIONS}")


def mnist_dataset(name: str = "mnist", split: str = "train", root: str | Path | None = None,
                  data_root: str | Path = "data") -> ImageDataset:
    """``mnist``, ``mnist_<modification>`` or ``fashion_mnist`` as an :class:`ImageDataset`."""
    kind = "fashion_mnist" if name == "fashion_mnist" else "mnist"
    mod = None
    if kind == "mnist" and name != "mnist":
        mod = name.removeprefix("mnist_")
    images, labels, folder = load_mnist_arrays(kind, split, root, data_root)
    images, labels, names = apply_modification(images, labels, mod)
    if kind == "fashion_mnist":
        names = FASHION_CLASSES
    ids = [f"{lab}/{i}" for i, lab in enumerate(labels)]
    return ImageDataset(name=name, labels=labels, class_names=names, ids=ids, images=images,
                        info={"source": str(folder), "split": split, "modification": mod})
