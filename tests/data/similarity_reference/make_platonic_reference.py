"""Write ``platonic_reference.json``: the platonic-representation metrics' values
(``AlignmentMetrics`` of Huh et al. 2024: mutual_knn, cka, unbiased_cka, cknna, svcca) on
small fixed inputs, the golden values of ``tests/test_similarity_reference_libraries.py``.

The platonic-rep code is not on PyPI. The values were computed with ``metrics.py`` of the
public repository ``github.com/minyoungg/platonic-rep``, commit
``dcd76ba3c950c1b197a2ae8b1c6713535c94ecf9`` (2025-04-12), checked out outside this
repository and imported through ``PYTHONPATH`` (it needs torch, numpy and scikit-learn,
all in rdx's environment)::

    git clone https://github.com/minyoungg/platonic-rep /tmp/platonic-rep
    git -C /tmp/platonic-rep checkout dcd76ba3c950c1b197a2ae8b1c6713535c94ecf9
    PYTHONPATH=/tmp/platonic-rep .venv/bin/python \\
        tests/data/similarity_reference/make_platonic_reference.py

(run from the repository root). ``metrics.py`` imports ``torchaudio`` at the top for its
``edit_distance_knn`` only, which is not used here; where torchaudio is not installed an
empty stand-in module is registered before the import. Every call is on float64 tensors;
the exact calls are stored in the file (``calls``). The inputs are stored too, so the test
needs neither the library nor this script's random stream; it recomputes the values live
when ``metrics`` (the library) is importable.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

if importlib.util.find_spec("torchaudio") is None:      # only edit_distance_knn uses it
    sys.modules["torchaudio"] = types.ModuleType("torchaudio")
    sys.modules["torchaudio.functional"] = types.ModuleType("torchaudio.functional")
    sys.modules["torchaudio"].functional = sys.modules["torchaudio.functional"]
import metrics  # noqa: E402  (the platonic-rep metrics.py, through PYTHONPATH)
from metrics import AlignmentMetrics, hsic_biased, hsic_unbiased  # noqa: E402

OUT = Path(__file__).with_name("platonic_reference.json")
COMMIT = "dcd76ba3c950c1b197a2ae8b1c6713535c94ecf9"
KS = (5, 10)
#: svcca's fixed number of SVD directions (the library's default).
CCA_DIM = 10
CALLS = {
    "mutual_knn": "AlignmentMetrics.mutual_knn(F.normalize(A, dim=-1), "
                  "F.normalize(B, dim=-1), topk=k)",
    "cknna": "AlignmentMetrics.cknna(F.normalize(A, dim=-1), F.normalize(B, dim=-1), "
             "topk=k)",
    "cka": "AlignmentMetrics.cka(A, B)  (kernel_metric='ip', unbiased=False)",
    "unbiased_cka": "AlignmentMetrics.unbiased_cka(A, B)",
    "hsic_*": "hsic_biased / hsic_unbiased of K = A Aᵀ, L = B Bᵀ: the terms of cka's "
              "denominator sqrt(hsic_kk · hsic_ll) + 1e-6",
    "svcca": "torch.manual_seed(0); np.random.seed(0); "
             "AlignmentMetrics.svcca(A, B, cca_dim=10)  (only where both have 10 columns)",
}


def inputs() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A pair of different widths, and one of exactly ``CCA_DIM`` columns each (where
    svcca's 10 directions are the whole column space)."""
    rng = np.random.default_rng(2024)
    X = rng.normal(size=(80, 12)) + 0.5
    Y = np.tanh(X[:, :6] @ rng.normal(size=(6, 8))) + 0.4 * rng.normal(size=(80, 8))
    A = rng.normal(size=(60, CCA_DIM)) * np.linspace(2.0, 0.3, CCA_DIM)
    B = A @ rng.normal(size=(CCA_DIM, CCA_DIM)) + 1.5 * rng.normal(size=(60, CCA_DIM)) - 1.0
    return {"different_widths": (X, Y), "ten_features": (A, B)}


def reference(X: np.ndarray, Y: np.ndarray) -> dict:
    """The library's values of one pair (see :data:`CALLS`)."""
    A, B = torch.from_numpy(X), torch.from_numpy(Y)
    An, Bn = F.normalize(A, dim=-1), F.normalize(B, dim=-1)
    K, L = A @ A.T, B @ B.T
    out: dict = {
        "mutual_knn": {str(k): AlignmentMetrics.mutual_knn(An, Bn, topk=k) for k in KS},
        "cknna": {str(k): AlignmentMetrics.cknna(An, Bn, topk=k) for k in KS},
        "cka": AlignmentMetrics.cka(A, B),
        "unbiased_cka": AlignmentMetrics.unbiased_cka(A, B),
        "hsic_biased_kk": float(hsic_biased(K, K)), "hsic_biased_ll": float(hsic_biased(L, L)),
        "hsic_unbiased_kk": float(hsic_unbiased(K, K)),
        "hsic_unbiased_ll": float(hsic_unbiased(L, L)),
    }
    if X.shape[1] == Y.shape[1] == CCA_DIM:
        torch.manual_seed(0)        # svd_lowrank draws a random test matrix
        np.random.seed(0)           # svcca adds 1e-10 noise to the canonical variates
        out["svcca"] = float(AlignmentMetrics.svcca(A, B, cca_dim=CCA_DIM))
    return out


def main() -> None:
    head = subprocess.run(["git", "-C", str(Path(metrics.__file__).parent), "rev-parse",
                           "HEAD"], capture_output=True, text=True).stdout.strip()
    if head != COMMIT:
        raise SystemExit(f"platonic-rep is at commit {head or '?'}, expected {COMMIT}")
    doc = {"library": "platonic-rep metrics.py", "version": f"git {COMMIT}",
           "repository": "https://github.com/minyoungg/platonic-rep",
           "script": Path(__file__).name, "dtype": "float64", "calls": CALLS, "cases": {}}
    for case, (X, Y) in inputs().items():
        doc["cases"][case] = {"X": X.tolist(), "Y": Y.tolist(), **reference(X, Y)}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"written: {OUT}")


if __name__ == "__main__":
    main()
