"""CUB-200-2011 in the split of the concept-bottleneck-model papers (``cub_pcbm``).

Files (``bash download_cub.sh`` fetches them)::

    data/CUB_200_2011/images/<class folder>/<file>.jpg
    data/CUB_200_2011/classes.txt                      "<id> <name>" lines, ids 1-based
    data/CUB_200_2011/class_attr_data_10/{train,val,test}.pkl

Each ``.pkl`` is a pickled list of dicts with keys ``img_path`` (an absolute path on the CBM
authors' machine ending in ``.../CUB_200_2011/images/<class folder>/<file>.jpg``),
``class_label`` (0..199), ``attribute_label``, ... The image id is the path relative to the
``CUB_200_2011`` folder (``images/<class folder>/<file>.jpg``): the authors' paths are cut
at their last ``images/`` component; the label is ``class_label``.

Security: unpickling can run arbitrary code, so these files are read with
:class:`PlainUnpickler`, which only rebuilds plain builtin containers and scalars (lists,
dicts, tuples, sets, str, bytes, numbers, bool, None) and refuses any other object.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

from ..errors import RDXInputError
from .base import ImageDataset

SPLITS = ("train", "val", "test")
FIX = "run `bash download_cub.sh` (or link an existing copy, see data/README.md)"
_SAFE_BUILTINS = frozenset({"list", "dict", "tuple", "set", "frozenset", "str", "bytes",
                            "bytearray", "int", "float", "complex", "bool", "slice", "range"})


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that allows only builtin containers/scalars (no classes, no callables)."""

    def find_class(self, module: str, name: str):
        if module == "builtins" and name in _SAFE_BUILTINS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only plain builtin "
                                     "lists/dicts/scalars are allowed in these files")


def load_plain_pickle(path: str | Path):
    """Unpickle ``path`` with :class:`PlainUnpickler` (RDXInputError if it is not plain)."""
    data = Path(path).read_bytes()
    try:
        return PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise RDXInputError(f"{path}: cannot read it as a plain pickle ({exc}).") from None


def relative_image_path(img_path: str) -> str:
    """``'/x/y/CUB_200_2011/images/001.A/b.jpg'`` → ``'images/001.A/b.jpg'``."""
    p = str(img_path).replace("\\", "/")
    if p.startswith("images/"):
        return p
    k = p.rfind("/images/")
    if k < 0:
        raise RDXInputError(f"image path {img_path!r} has no 'images/' component; expected "
                            "'.../CUB_200_2011/images/<class folder>/<file>.jpg'.")
    return p[k + 1:]


def read_class_names(path: Path) -> list[str]:
    """Names from ``classes.txt`` ("<id> <name>", ids 1-based), in id order."""
    names: dict[int, str] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            k, _, name = line.strip().partition(" ")
            names[int(k)] = name.strip()
    if sorted(names) != list(range(1, len(names) + 1)):
        raise RDXInputError(f"{path}: class ids are not 1..{len(names)}.")
    return [names[k] for k in range(1, len(names) + 1)]


def cub_dataset(split: str = "train", data_root: str | Path = "data",
                root: str | Path | None = None) -> ImageDataset:
    """``cub_pcbm``: the CBM split ``train``/``val``/``test`` of CUB-200-2011.

    ``root`` is the ``CUB_200_2011`` folder (default ``<data_root>/CUB_200_2011``).
    """
    if split not in SPLITS:
        raise RDXInputError(f"cub_pcbm split must be one of {SPLITS}, got {split!r}.")
    root = Path(root) if root is not None else Path(data_root) / "CUB_200_2011"
    pkl = root / "class_attr_data_10" / f"{split}.pkl"
    classes = root / "classes.txt"
    for need in (pkl, classes):
        if not need.is_file():
            raise RDXInputError(f"cub_pcbm: {need} not found; {FIX}.")
    records = load_plain_pickle(pkl)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise RDXInputError(f"{pkl}: expected a list of dicts.")
    try:
        ids = [relative_image_path(r["img_path"]) for r in records]
        labels = np.array([int(r["class_label"]) for r in records], dtype=np.int64)
    except KeyError as exc:
        raise RDXInputError(f"{pkl}: a record lacks the key {exc}.") from None
    names = read_class_names(classes)
    if len(labels) and (labels.min() < 0 or labels.max() >= len(names)):
        raise RDXInputError(f"{pkl}: class_label outside 0..{len(names) - 1}.")
    for i in {0, len(ids) - 1} if ids else ():   # cheap check that the images are there
        if not (root / ids[i]).is_file():
            raise RDXInputError(f"cub_pcbm: image {root / ids[i]} not found; {FIX}.")
    return ImageDataset(name="cub_pcbm", labels=labels, class_names=names, ids=ids, root=root,
                        info={"source": str(root), "split": split})
