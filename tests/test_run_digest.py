"""The redesign of the run model changed no result: a small deterministic run (digits, every
grid-producing method) must reproduce the explanations, concepts and grid pixels recorded
before the change (``tests/data/run_digest.json``).

Regenerate the digest only for an intended change of results:
``python tests/test_run_digest.py --write`` (and say why in the commit message).
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import yaml

DIGEST_FILE = Path(__file__).parent / "data" / "run_digest.json"
SEL = {"dataset": "digits", "target_classes": [3, 5, 8], "num_images": 40, "seed": 0}
METHODS = [
    {"method": "rdx", "name": "rdx", "n_explanations": 3, "gamma": 0.1},
    {"method": "kmeans", "n_explanations": 3},
    {"method": "pca", "n_explanations": 3},
    {"method": "nmf", "n_explanations": 3},
    {"method": "spec", "n_explanations": 3},
]


def _features(root: Path) -> tuple[Path, Path]:
    """Two fixed, different representations of the selected digits (no training)."""
    from rdx.data.selection import select_images

    ds, idx = select_images(SEL)
    X = np.stack([np.asarray(ds.load_image(int(i)), np.float32).ravel() for i in idx]) / 255.0
    W = np.random.default_rng(7).standard_normal((X.shape[1], 24)).astype(np.float32)
    A = X                                    # pixels
    B = np.maximum(X @ W, 0.0) + 0.01        # a non-negative random ReLU feature map
    np.save(root / "A.npy", A)
    np.save(root / "B.npy", B.astype(np.float32))
    return root / "A.npy", root / "B.npy"


def _canonical_explanation(e: dict) -> dict:
    keep = ("images", "members", "concept", "values", "mean_affinity", "low_affinity")
    return {k: e[k] for k in keep if k in e}


def run_digest(root: Path) -> dict[str, str]:
    """Run the comparison and hash each method's explanations, concepts and grid pixels."""
    from PIL import Image

    from rdx.experiments import run_experiment

    a, b = _features(root)
    cfg = {"experiment": "digest", "seed": 42,
           "base": {"image_selection": SEL,
                    "representations": {"a": {"features": str(a)}, "b": {"features": str(b)}},
                    "methods": METHODS},
           "comparisons": [{"name": "a_vs_b"}]}
    path = root / "digest.yaml"
    path.write_text(yaml.safe_dump(cfg))
    (out,) = run_experiment(path, output_root=root / "outputs", progress=False)
    digests = {}
    for m in METHODS:
        name = m.get("name", m["method"])
        d = out / name
        doc = json.loads((d / "explanations.json").read_text())
        h = hashlib.sha256()
        for direction in ("a_over_b", "b_over_a"):
            res = doc["directions"][direction]
            h.update(json.dumps([_canonical_explanation(e) for e in res["explanations"]],
                                sort_keys=True).encode())
            h.update(json.dumps(res.get("null_members"), sort_keys=True).encode())
        if (d / "concepts.npz").exists():
            with np.load(d / "concepts.npz") as z:
                for key in sorted(z.files):
                    h.update(key.encode())
                    h.update(np.ascontiguousarray(z[key]).tobytes())
        for png in sorted((d / "grids").glob("*_[0-9].png")):
            h.update(png.name.encode())
            h.update(np.asarray(Image.open(png).convert("RGB")).tobytes())
        digests[name] = h.hexdigest()
    return digests


def test_results_match_the_recorded_digest(tmp_path):
    expected = json.loads(DIGEST_FILE.read_text())
    got = run_digest(tmp_path)
    assert got == expected


if __name__ == "__main__" and "--write" in sys.argv:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        DIGEST_FILE.parent.mkdir(exist_ok=True)
        DIGEST_FILE.write_text(json.dumps(run_digest(Path(tmp)), indent=2) + "\n")
    print(DIGEST_FILE.read_text())
