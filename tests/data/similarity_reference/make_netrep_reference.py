"""Write ``netrep_reference.json``: netrep's Procrustes and CCA distances
(``LinearMetric(alpha=1)`` and ``LinearMetric(alpha=0)``, ``center_columns=True``) and its
``LinearCKA`` on small fixed inputs, the golden values of
``tests/test_similarity_reference_libraries.py``.

netrep is not on PyPI. The values were computed with the code of the public repository
``github.com/ahwillia/netrep``, commit ``0186b8a77ec1ebaf541cc8f7173cb2556df8a8f0``
(2024-07-30), checked out outside this repository and imported through ``PYTHONPATH``
(it needs only numpy, scipy, scikit-learn and tqdm, all in rdx's environment)::

    git clone https://github.com/ahwillia/netrep /tmp/netrep
    git -C /tmp/netrep checkout 0186b8a77ec1ebaf541cc8f7173cb2556df8a8f0
    PYTHONPATH=/tmp/netrep .venv/bin/python \\
        tests/data/similarity_reference/make_netrep_reference.py

(run from the repository root). The inputs are stored in the file with the values, so the
test needs neither netrep nor this script's random stream; it recomputes the values live
when netrep is importable.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import netrep
from netrep.metrics import LinearCKA, LinearMetric

OUT = Path(__file__).with_name("netrep_reference.json")
COMMIT = "0186b8a77ec1ebaf541cc8f7173cb2556df8a8f0"


def inputs() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A non-linearly related pair of different widths, one of equal widths (netrep's CCA
    zero-pads the narrower input, which needs alpha > 0: the CCA case has equal widths),
    and a noisy rotation (distances near 0)."""
    rng = np.random.default_rng(48)
    X = rng.normal(size=(60, 7))
    Y = np.tanh(X @ rng.normal(size=(7, 5))) + 0.3 * rng.normal(size=(60, 5))
    A = rng.normal(size=(50, 6)) * np.array([3.0, 2.0, 1.5, 1.0, 0.5, 0.2])
    B = np.sin(A @ rng.normal(size=(6, 6))) + 0.5 * rng.normal(size=(50, 6)) + 2.0
    Q, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    R = rng.normal(size=(70, 8))
    S = 2.5 * R @ Q + 1e-3 * rng.normal(size=(70, 8)) - 4.0
    return {"different_widths": (X, Y), "equal_widths": (A, B), "near_rotation": (R, S)}


def reference(X: np.ndarray, Y: np.ndarray) -> dict:
    """netrep's scores of one pair. ``procrustes_euclidean_unit`` is netrep's Euclidean
    score of the inputs centred and scaled to unit Frobenius norm first (rdx's
    normalisation); CCA only where the widths are equal."""
    def unit(Z: np.ndarray) -> np.ndarray:
        Z = Z - Z.mean(0)
        return Z / np.linalg.norm(Z)

    out = {
        "procrustes_angular": float(LinearMetric(alpha=1.0, center_columns=True,
                                                 score_method="angular").fit_score(X, Y)),
        "procrustes_euclidean_unit": float(LinearMetric(
            alpha=1.0, center_columns=True, score_method="euclidean").fit_score(unit(X),
                                                                                unit(Y))),
        "linear_cka_angular": float(LinearCKA(center_columns=True).score(X, Y)),
    }
    if X.shape[1] == Y.shape[1]:
        out["cca_angular"] = float(LinearMetric(alpha=0.0, center_columns=True,
                                                score_method="angular").fit_score(X, Y))
    return out


def main() -> None:
    head = subprocess.run(["git", "-C", str(Path(netrep.__path__[0]).parent), "rev-parse",
                           "HEAD"], capture_output=True, text=True).stdout.strip()
    if head != COMMIT:
        raise SystemExit(f"netrep is at commit {head or '?'}, expected {COMMIT}")
    doc = {"library": "netrep", "version": f"git {COMMIT}",
           "repository": "https://github.com/ahwillia/netrep", "script": Path(__file__).name,
           "calls": {"procrustes_angular": "LinearMetric(alpha=1.0, center_columns=True, "
                                           "score_method='angular').fit_score(X, Y)",
                     "procrustes_euclidean_unit": "LinearMetric(alpha=1.0, center_columns="
                                                  "True, score_method='euclidean')"
                                                  ".fit_score(Xu, Yu), Zu = (Z - mean) / "
                                                  "||Z - mean||_F",
                     "cca_angular": "LinearMetric(alpha=0.0, center_columns=True, "
                                    "score_method='angular').fit_score(X, Y)",
                     "linear_cka_angular": "LinearCKA(center_columns=True).score(X, Y)"},
           "cases": {}}
    for case, (X, Y) in inputs().items():
        doc["cases"][case] = {"X": X.tolist(), "Y": Y.tolist(), **reference(X, Y)}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"written: {OUT}")


if __name__ == "__main__":
    main()
