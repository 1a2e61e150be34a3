"""``rdx explain --method NAME`` end to end, for every method the registry knows."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import planted_pairs
from rdx import bsr_scores
from rdx.cli import main
from test_cli import check_ok, rdx_explain

#: small settings so that each method runs in seconds (the defaults are the paper's)
QUICK = {
    "kmeans": [], "pca": [], "nmf": [], "cnmf": ["max_iter=30"],
    "sae": ["n_epochs=30", "batch_size=64"], "topk_sae": ["n_epochs=30", "batch_size=64"],
    "usae": ["n_epochs=8", "n_latents=64", "top_k=8", "batch_size=64"],
    "nlmcd": ["min_cluster_size=15", "min_samples=5"], "spec": [],
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("methods")
    A, B, y = planted_pairs(n_per=40, d=12)
    A, B = np.abs(A), np.abs(B)             # NMF needs non-negative features
    for name, arr in (("A", A), ("B", B), ("y", y)):
        np.save(d / f"{name}.npy", arr)
    np.save(d / "images.npy", np.random.default_rng(0).random((len(A), 6, 6)))
    return d, len(A)


@pytest.mark.parametrize("name", sorted(QUICK))
def test_baseline_end_to_end(files, tmp_path, name, capsys):
    d, n = files
    args = [str(d / "A.npy"), str(d / "B.npy"), "--method", name, "--k", "2", "--seed", "3",
            "--labels", str(d / "y.npy"), "--images", str(d / "images.npy"),
            "--out", str(tmp_path)]
    for p in QUICK[name]:
        args += ["--param", p]
    assert main(["explain", *args]) == 0
    doc = json.loads((tmp_path / "explanations.json").read_text())
    assert doc["method"] == name and doc["n_images"] == n
    for direction in ("a_over_b", "b_over_a"):
        exps = doc["directions"][direction]["explanations"]
        assert len(exps) == 2
        assert all(len(e["images"]) == 9 and 0 <= min(e["images"]) and max(e["images"]) < n
                   for e in exps)
        assert (tmp_path / "grids" / f"{direction}_summary.png").is_file()
    # the grids are scored on the original representations, like every other method's
    grids = {d: [e["images"] for e in r["explanations"]] for d, r in doc["directions"].items()}
    expected = bsr_scores(np.load(d / "A.npy"), np.load(d / "B.npy"), grids)
    assert doc["bsr"] == {"a_over_b": expected["a_over_b"]["bsr"],
                          "b_over_a": expected["b_over_a"]["bsr"],
                          "mean": expected["mean"]["bsr"]}
    assert "BSR" in capsys.readouterr().out


def test_cka_and_classification(files, tmp_path, capsys):
    d, _ = files
    base = [str(d / "A.npy"), str(d / "B.npy"), "--labels", str(d / "y.npy")]
    assert main(["explain", *base, "--method", "cka", "--out", str(tmp_path / "cka")]) == 0
    assert main(["explain", *base, "--method", "classification",
                 "--out", str(tmp_path / "clf")]) == 0
    clf = json.loads((tmp_path / "clf" / "explanations.json").read_text())
    probe = clf["info"]["probe"]
    assert probe["a"]["accuracy"] > probe["b"]["accuracy"]  # B merges clusters
    with np.load(tmp_path / "clf" / "concepts.npz") as z:
        assert set(z.files) == {"a_predictions", "b_predictions"}


def test_subprocess_and_bad_params(files, tmp_path):
    d, _ = files
    proc = rdx_explain(d / "A.npy", d / "B.npy", "--method", "pca", "--quiet",
                       "--align", "0to1", "--param", "grid_size=4", "--out", tmp_path / "p")
    check_ok(proc)
    doc = json.loads((tmp_path / "p" / "explanations.json").read_text())
    assert doc["params"]["align_representations"] == "0to1"
    assert all(len(e["images"]) == 4 for e in doc["directions"]["a_over_b"]["explanations"])
    bad = rdx_explain(d / "A.npy", d / "B.npy", "--method", "kmeans", "--param", "n_clusters=3",
                      "--out", tmp_path / "bad")
    assert bad.returncode == 2 and "unknown kmeans parameter" in bad.stderr
    assert "Traceback" not in bad.stderr
    neg = np.load(d / "A.npy") - 1.0
    np.save(tmp_path / "neg.npy", neg)
    bad = rdx_explain(tmp_path / "neg.npy", d / "B.npy", "--method", "nmf",
                      "--out", tmp_path / "bad2")
    assert bad.returncode == 2 and "negative" in bad.stderr and "Traceback" not in bad.stderr
