"""Write ``rsatoolbox_reference.json``: rsatoolbox's RDMs, RDM comparisons and bootstrap
comparisons of small fixed inputs, the golden values of ``tests/test_similarity_reference.py``.

Run from the repository root (needs rsatoolbox, the ``test`` extra)::

    .venv/bin/python tests/data/similarity_reference/make_rsatoolbox_reference.py

The inputs are stored in the file with the values, so the test needs neither rsatoolbox
nor this script's random stream; it recomputes the values live when rsatoolbox is
importable.
"""
from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
import scipy
from rsatoolbox.data import Dataset
from rsatoolbox.rdm import calc_rdm, compare

OUT = Path(__file__).with_name("rsatoolbox_reference.json")
#: rsatoolbox's RDM method → the rdx ``rdm=`` that equals it.
RDMS = {"correlation": "correlation", "euclidean": "mean_squared_euclidean"}
#: rsatoolbox's comparison → the rdx ``compare=`` that equals it.
COMPARES = {"spearman": "spearman", "corr": "pearson", "cosine": "cosine",
            "tau-a": "kendall_tau_a"}


def inputs() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Continuous features, and small integers (many exactly tied dissimilarities)."""
    rng = np.random.default_rng(20260)
    X = rng.normal(size=(30, 7))
    Y = np.tanh(X @ rng.normal(size=(7, 5))) + 0.7 * rng.normal(size=(30, 5))
    Xi = rng.integers(-2, 3, size=(24, 4)).astype(float)
    Yi = np.clip(Xi[:, :3] + rng.integers(-1, 2, size=(24, 3)), -2, 2).astype(float)
    return {"continuous": (X, Y), "integer": (Xi, Yi)}


def rdm_methods(case: str) -> dict[str, str]:
    """The RDMs compared for a case. On integers only rsatoolbox's Euclidean RDM: its d²/p
    of integers is exact, so its ties are the true ones, whereas its correlation distances
    of mathematically tied pairs differ in their last bits and rank in an arbitrary order
    (rdx ties them: ``TIE_RTOL``)."""
    return {"euclidean": RDMS["euclidean"]} if case == "integer" else RDMS


def reference(X: np.ndarray, Y: np.ndarray, draws: list[list[int]],
              methods: dict[str, str] = RDMS) -> dict:
    """rsatoolbox's values on one input pair: per RDM method its two RDM vectors, per
    comparison the value and its value on each bootstrap draw of the images (rsatoolbox's
    ``subsample_pattern``: copies' pairs are NaN and left out)."""
    out: dict = {"X": X.tolist(), "Y": Y.tolist(), "draws": draws, "rdms": {}}
    for method, ours in methods.items():
        index = {"index": np.arange(len(X))}   # what subsample_pattern draws by
        rx, ry = (calc_rdm(Dataset(Z, obs_descriptors=index), method=method) for Z in (X, Y))
        entry = {"rdx_rdm": ours, "rdm_X": rx.get_vectors()[0].tolist(),
                 "rdm_Y": ry.get_vectors()[0].tolist(), "compare": {}}
        for cmp, ours_cmp in COMPARES.items():
            boot = [float(compare(rx.subsample_pattern("index", d),
                                  ry.subsample_pattern("index", d), method=cmp)[0, 0])
                    for d in draws]
            entry["compare"][cmp] = {"rdx_compare": ours_cmp,
                                     "value": float(compare(rx, ry, method=cmp)[0, 0]),
                                     "bootstrap": boot}
        out["rdms"][method] = entry
    return out


def main() -> None:
    rng = np.random.default_rng(7)
    doc = {"library": "rsatoolbox", "version": version("rsatoolbox"),
           "numpy": np.__version__, "scipy": scipy.__version__,
           "script": Path(__file__).name, "cases": {}}
    for name, (X, Y) in inputs().items():
        draws = [sorted(rng.integers(0, len(X), len(X)).tolist()) for _ in range(3)]
        doc["cases"][name] = reference(X, Y, draws, rdm_methods(name))
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"written: {OUT}")


if __name__ == "__main__":
    main()
