"""The redesign of the run model changed no result: a small deterministic run (digits, every
grid-producing method) must reproduce the explanations, concepts and grid pixels recorded
before the change (``tests/data/run_digest.json``).

What is compared: everything discrete (grid images, members, the no-change group, flags, the
grid pixels) by hash, exactly; every float (mean affinities, concept values, the concept
arrays) by its sum and norm at a relative 1e-4 (a sum near 0, e.g. of centred PCA codes,
within 1e-6 of the norm: its value there is rounding noise). Float bits of the scikit-learn baselines
depend on the CPU's SIMD path and BLAS threading (AVX-512 or not); an explanation does not.

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


_DISCRETE = ("images", "members", "concept", "low_affinity")
_FLOATS = ("mean_affinity", "values")


def _floats(x) -> np.ndarray:
    return np.asarray([v for v in np.ravel(np.asarray(x, dtype=object))
                       if isinstance(v, (int, float)) and v is not None], dtype=np.float64)


def run_digest(root: Path) -> dict[str, dict]:
    """Run the comparison; per method the hash of its discrete content and the sums and
    norms of its floats."""
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
    # recorded on the CPU: a GPU's float32 sums order near-ties differently, which may move
    # an image between explanations of this tiny run
    (out,) = run_experiment(path, output_root=root / "outputs", progress=False, device="cpu")
    digests = {}
    for m in METHODS:
        name = m.get("name", m["method"])
        d = out / name
        doc = json.loads((d / "explanations.json").read_text())
        h = hashlib.sha256()
        floats: dict[str, list[float]] = {}

        def summary(key: str, x) -> None:
            v = _floats(x)
            floats[key] = [float(v.sum()), float(np.linalg.norm(v))]

        for direction in ("a_over_b", "b_over_a"):
            res = doc["directions"][direction]
            h.update(json.dumps([{k: e[k] for k in _DISCRETE if k in e}
                                 for e in res["explanations"]], sort_keys=True).encode())
            h.update(json.dumps(res.get("null_members"), sort_keys=True).encode())
            for k in _FLOATS:
                summary(f"{direction}.{k}", [np.ravel(e[k]).tolist() for e in
                                             res["explanations"] if e.get(k) is not None])
        if (d / "concepts.npz").exists():
            with np.load(d / "concepts.npz") as z:
                for key in sorted(z.files):
                    h.update(key.encode())
                    h.update(str(z[key].shape).encode())
                    summary(f"concepts.{key}", z[key].astype(np.float64))
        for png in sorted((d / "grids").glob("*_[0-9].png")):
            h.update(png.name.encode())
            h.update(np.asarray(Image.open(png).convert("RGB")).tobytes())
        digests[name] = {"discrete": h.hexdigest(), "floats": floats}
    return digests


def test_results_match_the_recorded_digest(tmp_path):
    expected = json.loads(DIGEST_FILE.read_text())
    got = run_digest(tmp_path)
    assert set(got) == set(expected)
    for name, want in expected.items():
        assert got[name]["discrete"] == want["discrete"], name
        assert set(got[name]["floats"]) == set(want["floats"]), name
        for key, (ref_sum, ref_norm) in want["floats"].items():
            got_sum, got_norm = got[name]["floats"][key]
            np.testing.assert_allclose(got_norm, ref_norm, rtol=1e-4, atol=1e-9,
                                       err_msg=f"{name} {key} (norm)")
            # a sum is compared at the scale of its terms: the codes of a centred basis
            # (PCA) sum to about 0, and that 0 is rounding noise of entries of size ~norm
            np.testing.assert_allclose(got_sum, ref_sum, rtol=1e-4,
                                       atol=max(1e-9, 1e-6 * ref_norm),
                                       err_msg=f"{name} {key} (sum)")


if __name__ == "__main__" and "--write" in sys.argv:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        DIGEST_FILE.parent.mkdir(exist_ok=True)
        DIGEST_FILE.write_text(json.dumps(run_digest(Path(tmp)), indent=2) + "\n")
    print(DIGEST_FILE.read_text())
