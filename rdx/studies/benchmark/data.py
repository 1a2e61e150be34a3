"""The benchmark's images and models: training sets with the implanted modification, the
images of a comparison, the models trained (or loaded from the cache) per recipe and seed, and
their features."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ...errors import RDXInputError
from .cases import CUE_BOX, ImageSet, MARKER_BOX, MASK_BOX, Recipe


def _draw(images: np.ndarray, rows: np.ndarray, box: tuple[int, int, int, int],
          value: int) -> np.ndarray:
    out = images.copy()
    r0, r1, c0, c1 = box
    out[np.asarray(rows, dtype=np.int64), r0:r1, c0:c1] = value
    return out


def source_arrays(dataset: str, split: str, data_root: str | Path
                  ) -> tuple[np.ndarray, np.ndarray]:
    """28×28 uint8 images and labels: Fashion-MNIST's split, or the digits resized (PIL
    bilinear, as the ConvNet presets resize them; digits has one split)."""
    from ...data import get_dataset

    if dataset == "digits":
        from PIL import Image

        ds = get_dataset("digits")
        images = np.stack([np.asarray(Image.fromarray(im).resize((28, 28), Image.BILINEAR))
                           for im in ds.images]).astype(np.uint8)
        return images, ds.labels.copy()
    if dataset != "fashion_mnist":
        raise RDXInputError(f"benchmark dataset {dataset!r}: use 'fashion_mnist' or 'digits'.")
    ds = get_dataset("fashion_mnist", split=split, data_root=data_root)
    return ds.images, ds.labels.copy()


def _per_class(labels: np.ndarray, per_class: int, seed: int) -> np.ndarray:
    from ...data import select_per_class

    ids = [f"{lab}/{i}" for i, lab in enumerate(labels)]
    return select_per_class(ids, labels, None, per_class, seed=seed)


def training_set(recipe: Recipe, *, data_root: str | Path = "data"):
    """The recipe's training images (modified) as an :class:`~rdx.data.ImageDataset`,
    labels relabelled ``0..K-1`` in ascending order of the modified labels."""
    from ...data import ImageDataset
    from ...data.mnist import apply_modification

    images, labels = source_arrays(recipe.dataset, "train", data_root)
    idx = _per_class(labels, recipe.per_class, seed=0)
    images, labels = images[idx], labels[idx]
    if recipe.flips:
        images, labels, _ = apply_modification(images, labels, recipe.flips)
    if recipe.cue_class is not None:
        images = _draw(images, np.flatnonzero(labels == recipe.cue_class), CUE_BOX, 255)
    if recipe.marker:
        marked = np.random.default_rng(123).random(len(labels)) < 0.5
        images = _draw(images, np.flatnonzero(marked), MARKER_BOX, 255)
        labels = labels + 10 * marked
    if recipe.mask:
        images = _draw(images, np.arange(len(labels)), MASK_BOX, 0)
    for src, dst in recipe.merge:
        labels = np.where(labels == src, dst, labels)
    present = np.unique(labels)
    return ImageDataset(name=f"benchmark_{recipe.name}", labels=np.searchsorted(present, labels),
                        class_names=[str(c) for c in present],
                        ids=[str(i) for i in range(len(labels))],
                        images=np.ascontiguousarray(images),
                        info={"recipe": dataclasses.asdict(recipe), "split": "train"})


def comparison_images(spec: ImageSet, *, scale: float = 1.0, data_root: str | Path = "data"
                      ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The images, labels and class names a case is compared on (seeded; Fashion-MNIST's
    test split, the digits themselves)."""
    from ...data.mnist import FASHION_CLASSES, apply_modification

    split = "train" if spec.dataset == "digits" else "test"
    images, labels = source_arrays(spec.dataset, split, data_root)
    idx = _per_class(labels, max(2, int(round(spec.per_class * scale))), seed=1)
    images, labels = images[idx], labels[idx]
    names = list(FASHION_CLASSES) if spec.dataset == "fashion_mnist" else \
        [str(c) for c in range(10)]
    rng = np.random.default_rng(7)
    if spec.flips:
        images, labels, _ = apply_modification(images, labels, spec.flips)
        names = names + [f"{c} (flipped)" for c in names]
    if spec.cue_classes:
        cued = np.isin(labels, spec.cue_classes) & (rng.random(len(labels)) < 0.5)
        images = _draw(images, np.flatnonzero(cued), CUE_BOX, 255)
        labels = labels + 10 * cued
        names = names + [f"{c} (square)" for c in names]
    if spec.marker:
        marked = rng.random(len(labels)) < 0.5
        images = _draw(images, np.flatnonzero(marked), MARKER_BOX, 255)
        labels = labels + 10 * marked
        names = names + [f"{c} (marker)" for c in names]
    return np.ascontiguousarray(images), labels.astype(np.int64), names


def train_model(recipe: Recipe, seed: int, *, checkpoints: str | Path,
                data_root: str | Path = "data", progress: bool = True) -> Path:
    """``last.pt`` of the recipe trained with ``seed``, trained now if not cached."""
    from ...models.checkpoint import load_checkpoint
    from ...models.training import train_classifier

    folder = Path(checkpoints) / recipe.folder(seed)
    last = folder / "last.pt"
    if last.is_file():
        try:
            load_checkpoint(last)
            return last
        except RDXInputError:   # a truncated file from an interrupted run: train again
            pass
    train_classifier(training_set(recipe, data_root=data_root), epochs=recipe.epochs,
                     batch_size=recipe.batch_size, lr=recipe.lr, seed=seed,
                     width=recipe.width, save_dir=folder, save_every=None, device="cpu",
                     progress=progress,
                     extra_meta={"benchmark_recipe": dataclasses.asdict(recipe)})
    return last


def features(checkpoint: Path, images: np.ndarray, *, mask: bool = False) -> np.ndarray:
    """The model's ``gap`` features of the images (the masked region blacked out first when
    the model was trained that way)."""
    import torch

    from ...models.checkpoint import grey_transform, load_checkpoint

    model, _ = load_checkpoint(checkpoint)
    if mask:
        images = _draw(images, np.arange(len(images)), MASK_BOX, 0)
    x = grey_transform(28).batch(np.ascontiguousarray(images))
    with torch.no_grad():
        return np.concatenate([model.features(x[i:i + 1000]).numpy()
                               for i in range(0, len(x), 1000)]).astype(np.float32)
