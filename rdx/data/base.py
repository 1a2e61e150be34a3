"""One interface for every dataset: images (arrays or files), labels, class names, ids."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from ..errors import RDXInputError

if TYPE_CHECKING:  # imported when an image is loaded: runs on features never need PIL
    from PIL import Image


@dataclass
class ImageDataset:
    """Images with integer labels, usable as a torch map-style dataset (``len`` and
    ``[i]`` → ``(image, label)`` with ``transform`` applied; torch's ``DataLoader`` takes
    it as is — not a subclass of torch's ``Dataset``, so that loading a dataset does not
    import torch).

    Attributes
    ----------
    name : dataset name (e.g. ``"mnist_hflip_nl"``)
    labels : (n,) int64 class ids
    class_names : name of each class id
    ids : stable identifier per image — the file path relative to ``root`` for file
        datasets, ``"<label>/<index>"`` for array datasets (the form the original code used,
        so that seeded per-class sampling picks the same images)
    info : where the data came from (paths, split, modification)
    """

    name: str
    labels: np.ndarray
    class_names: list[str]
    ids: list[str]
    info: dict = field(default_factory=dict)
    transform: Callable | None = None
    images: np.ndarray | None = field(default=None, repr=False)   # array datasets
    root: Path | None = None                                       # file datasets

    def __len__(self) -> int:
        return len(self.labels)

    def load_image(self, i: int) -> "Image.Image":
        """The i-th image as a PIL image (grey ``L`` or ``RGB``)."""
        from PIL import Image

        if self.images is not None:
            return Image.fromarray(self.images[i])
        path = self.root / self.ids[i]
        try:
            with Image.open(path) as img:
                return img.convert("RGB")
        except FileNotFoundError:
            raise RDXInputError(f"image {str(path)!r} of dataset {self.name!r} is missing; "
                                "re-run its download script (see data/README.md).") from None

    def __getitem__(self, i: int):
        img = self.load_image(int(i))
        return (self.transform(img) if self.transform else img), int(self.labels[i])

    def subset(self, indices: Sequence[int], labels: np.ndarray | None = None) -> "ImageDataset":
        """A new dataset holding ``indices`` in that order (optionally relabelled)."""
        idx = np.asarray(indices, dtype=np.int64)
        return ImageDataset(
            name=self.name, labels=self.labels[idx] if labels is None else np.asarray(labels),
            class_names=self.class_names, ids=[self.ids[i] for i in idx],
            info={**self.info, "subset_of": len(self)}, transform=self.transform,
            images=None if self.images is None else self.images[idx], root=self.root)

    def image_array(self, indices: Sequence[int]) -> np.ndarray:
        """Raw images (uint8) for drawing grids: ``k×H×W`` or ``k×H×W×3``."""
        if self.images is not None:
            return self.images[np.asarray(indices, dtype=np.int64)]
        return np.stack([np.asarray(self.load_image(int(i)).resize((224, 224)))
                         for i in indices])
