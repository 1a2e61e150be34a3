"""ImageNet (ILSVRC2012) from ``data/imagenet/{train,val}/<wnid>/*.JPEG``.

Labels are the standard indices 0–999: the position of the wnid in sorted-wnid order. The
wnid list and class names come from, in this order: ``data/imagenet/LOC_synset_mapping.txt``
(``"<wnid> <name>, <synonym>, ..."`` lines; the first name is used), torchvision's
``meta.bin``, the devkit's ``ILSVRC2012_devkit_t12/data/meta.mat`` (needs scipy); else the
sorted class folders of the split, with wnids as names.

Only the class folders asked for are listed: with ``classes=[i, j, ...]`` (class indices)
the loader reads the ``<wnid>`` folders of those classes only, never all 1.28 M files.
``bash download_imagenet.sh`` organises user-downloaded tarballs into this layout (ImageNet
needs a login, so nothing is downloaded). The known-corrupt training file
``n04266014_10835.JPEG`` is skipped.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import RDXInputError
from .base import ImageDataset

SPLITS = ("train", "val")
FIX = ("run `bash download_imagenet.sh` (it organises the ILSVRC2012 tarballs you downloaded, "
       "or links an existing copy with --link; see data/README.md)")
EXTENSIONS = (".jpeg", ".jpg", ".png")
SKIP = frozenset({"n04266014_10835.JPEG"})


def _from_mapping(path: Path) -> tuple[list[str], list[str]]:
    pairs = []
    for line in path.read_text().splitlines():
        if line.strip():
            wnid, _, words = line.strip().partition(" ")
            pairs.append((wnid, words.split(",")[0].strip() or wnid))
    pairs.sort()
    return [w for w, _ in pairs], [n for _, n in pairs]


def _from_meta_bin(path: Path) -> tuple[list[str], list[str]]:
    import torch

    wnid_to_classes = torch.load(path, weights_only=True)[0]
    wnids = sorted(wnid_to_classes)
    return wnids, [str(wnid_to_classes[w][0]) for w in wnids]


def _from_meta_mat(path: Path) -> tuple[list[str], list[str]]:
    from scipy.io import loadmat

    synsets = loadmat(str(path), squeeze_me=True)["synsets"]
    leaves = [(str(s["WNID"]), str(s["words"]).split(",")[0].strip())
              for s in synsets if int(s["num_children"]) == 0]
    leaves.sort()
    return [w for w, _ in leaves], [n for _, n in leaves]


def class_list(root: Path, split_dir: Path) -> tuple[list[str], list[str], str]:
    """(wnids in label order, class names, where they came from)."""
    for path, reader in ((root / "LOC_synset_mapping.txt", _from_mapping),
                         (root / "meta.bin", _from_meta_bin),
                         (root / "ILSVRC2012_devkit_t12" / "data" / "meta.mat", _from_meta_mat)):
        if path.is_file():
            wnids, names = reader(path)
            return wnids, names, str(path)
    wnids = sorted(e.name for e in os.scandir(split_dir) if e.is_dir())   # 1000 entries at most
    return wnids, list(wnids), f"class folders of {split_dir}"


def list_class_folder(folder: Path) -> list[str]:
    """File names of the images in one class folder, sorted."""
    return sorted(e.name for e in os.scandir(folder)
                  if e.name.lower().endswith(EXTENSIONS) and e.name not in SKIP)


def imagenet_dataset(split: str = "train", data_root: str | Path = "data",
                     classes: Sequence[int] | None = None,
                     root: str | Path | None = None) -> ImageDataset:
    """``imagenet`` split ``train``/``val``; ``classes`` (label indices) limits the listing.

    ``root`` is the folder holding ``train/`` and ``val/`` (default ``<data_root>/imagenet``).
    The dataset holds only the images of ``classes`` when given (labels stay the standard
    indices), every class otherwise.
    """
    if split not in SPLITS:
        raise RDXInputError(f"imagenet split must be one of {SPLITS}, got {split!r}.")
    root = Path(root) if root is not None else Path(data_root) / "imagenet"
    split_dir = root / split
    if not split_dir.is_dir():
        raise RDXInputError(f"imagenet: {split_dir} not found; {FIX}.")
    wnids, names, source = class_list(root, split_dir)
    wanted = range(len(wnids)) if classes is None else [int(c) for c in classes]
    bad = [c for c in wanted if not 0 <= c < len(wnids)]
    if bad:
        raise RDXInputError(f"imagenet: class indices {bad} outside 0..{len(wnids) - 1}.")
    ids, labels = [], []
    for c in dict.fromkeys(wanted):   # unique, in the given order
        folder = split_dir / wnids[c]
        if not folder.is_dir():
            raise RDXInputError(f"imagenet: class folder {folder} (class {c}) not found; {FIX}.")
        files = list_class_folder(folder)
        ids += [f"{wnids[c]}/{f}" for f in files]
        labels += [c] * len(files)
    if not ids:
        raise RDXInputError(f"imagenet: no images found under {split_dir}; {FIX}.")
    return ImageDataset(name="imagenet", labels=np.asarray(labels, dtype=np.int64),
                        class_names=names, ids=ids, root=split_dir,
                        info={"source": str(split_dir), "split": split, "classes_from": source,
                              "wnids": wnids,
                              "listed_classes": None if classes is None else list(wanted)})
