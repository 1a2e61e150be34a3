"""Test configuration.

OMP_WAIT_POLICY must be set before torch starts its OpenMP pool: with two threads on a
shared machine, busy-waiting makes torch 7–15× slower.
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def planted_pairs(n_per: int = 40, d: int = 16, seed: int = 0, spread: float = 12.0):
    """6 Gaussian clusters in A; in B clusters (0,1), (2,3), (4,5) coincide.

    Returns A, B, cluster id per image.
    """
    r = np.random.default_rng(seed)
    centers = r.standard_normal((6, d)) * spread
    lab = np.repeat(np.arange(6), n_per)
    A = centers[lab] + r.standard_normal((len(lab), d))
    cb = centers.copy()
    cb[1::2] = cb[0::2]
    B = cb[lab] + r.standard_normal((len(lab), d))
    return A.astype(np.float32), B.astype(np.float32), lab
