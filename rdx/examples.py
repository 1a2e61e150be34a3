"""Embedded example that runs anywhere: two checkpoints of a small network on sklearn digits.

``digits_example()`` trains one small MLP (64 → 64 → 10) on scikit-learn's bundled digits
(1797 real 8×8 images, no download) and returns the hidden-layer features of an early
checkpoint (A, a few hundred steps: the "strong" model) and of the final one (B, "expert"),
so ``RDX`` can show what the expert separates that the early model still mixes up, and the
reverse. Deterministic on the CPU for a seed; takes a few seconds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass
class Example:
    A: np.ndarray
    B: np.ndarray
    labels: np.ndarray
    images: np.ndarray
    description: str
    info: dict


def _features(model: nn.Sequential, X: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model[1](model[0](X)).numpy().astype(np.float32)


def _accuracy(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(X).argmax(1) == y).float().mean())


def digits_example(random_state: int = 0, early_steps: int = 40,
                   final_epochs: int = 20) -> Example:
    """Features of an early and a final checkpoint of an MLP trained on sklearn's digits."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    X = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    gen = torch.Generator().manual_seed(random_state)
    torch.manual_seed(random_state)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step, A, acc_a = 0, None, None
    for _epoch in range(final_epochs):
        for batch in torch.randperm(len(X), generator=gen).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(model(X[batch]), y[batch]).backward()
            opt.step()
            step += 1
            if step == early_steps:
                A, acc_a = _features(model, X), _accuracy(model, X, y)
    B, acc_b = _features(model, X), _accuracy(model, X, y)
    info = {"dataset": "sklearn digits (all 1797 images, 10 classes)",
            "model": "MLP 64-64-10, hidden ReLU features (64-d)",
            "A": {"checkpoint": f"step {early_steps}", "train_accuracy": acc_a},
            "B": {"checkpoint": f"step {step} (final)", "train_accuracy": acc_b},
            "seed": random_state}
    desc = (f"digits: early checkpoint A (step {early_steps}, acc {acc_a:.3f}) vs final "
            f"checkpoint B (step {step}, acc {acc_b:.3f}) of one MLP")
    return Example(A=A, B=B, labels=digits.target.copy(), images=digits.images.copy(),
                   description=desc, info=info)


EXAMPLES = {"digits": digits_example}
