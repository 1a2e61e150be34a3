"""Write ``calibrated_reference.json``: calibrated-similarity's calibrated score, p-value
and threshold τ (``calibrate``) and its layer-wise version (``calibrate_layers``, one
permutation shared by all layers of Y) on small fixed inputs, with biased linear CKA as the
similarity, the golden values of ``tests/test_similarity_reference.py``.

Run from the repository root (needs ``pip install calibrated-similarity``)::

    .venv/bin/python tests/data/similarity_reference/make_calibrated_reference.py

The permutations are rdx's (``rdx.similarity.calibration.permutation_draws``, stored too),
so that rdx's ``calibrate`` and ``calibrate_layers`` with the same seed see the same null.
calibrated-similarity computes in float32.
"""
from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch
from calibrated_similarity import calibrate, calibrate_layers

from rdx.similarity.calibration import permutation_draws

OUT = Path(__file__).with_name("calibrated_reference.json")
SEED, K, ALPHA = 3, 39, 0.05


def linear_cka(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Biased linear CKA ‖XcᵀYc‖²_F / (‖XcᵀXc‖_F ‖YcᵀYc‖_F), float64."""
    X, Y = X - X.mean(0), Y - Y.mean(0)
    return (X.T @ Y).square().sum() / ((X.T @ X).norm() * (Y.T @ Y).norm())


def inputs() -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Two 'models' of 3 and 2 layers on 36 images; Y's second layer follows X's first."""
    rng = np.random.default_rng(11)
    x0 = rng.normal(size=(36, 6))
    xs = [x0, np.tanh(x0 @ rng.normal(size=(6, 5))), rng.normal(size=(36, 4))]
    ys = [rng.normal(size=(36, 5)), x0[:, :4] @ rng.normal(size=(4, 4))
          + 0.8 * rng.normal(size=(36, 4))]
    return xs, ys


def main() -> None:
    xs, ys = inputs()
    n = len(xs[0])
    perms = [p.tolist() for p in permutation_draws(n, K, SEED)]
    T = [torch.from_numpy(z) for z in xs], [torch.from_numpy(z) for z in ys]

    def perm_fn(order: list[list[int]]):
        it = iter(order)
        return lambda n_, device_: torch.tensor(next(it), device=device_)

    score, p, tau = calibrate(T[0][0], T[1][1], linear_cka, K=K, alpha=ALPHA,
                              perm_fn=perm_fn(perms))
    doc = {"library": "calibrated-similarity", "version": version("calibrated-similarity"),
           "script": Path(__file__).name, "measure": "cka_linear_biased", "seed": SEED,
           "K": K, "alpha": ALPHA, "X_layers": [z.tolist() for z in xs],
           "Y_layers": [z.tolist() for z in ys], "permutations": perms,
           "pair": {"x": 0, "y": 1, "calibrated": float(score), "p_value": float(p),
                    "tau": float(tau)}, "layers": {}}
    for agg in ("max", "mean"):
        score, p, tau = calibrate_layers(T[0], T[1], linear_cka, agg=agg, K=K, alpha=ALPHA,
                                         perm_fn=perm_fn(perms))
        doc["layers"][agg] = {"calibrated": float(score), "p_value": float(p),
                              "tau": float(tau)}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"written: {OUT}")


if __name__ == "__main__":
    main()
