"""End-to-end tests of the command line (``rdx explain``).

The runs are made once by the module-scoped fixture ``runs`` — in this process through
``rdx.cli.main`` (no 3–5 s of imports per run), except the main run, which is a real
subprocess (``python -m rdx explain``) as a user starts it; the tests only read the outputs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import rdx
from conftest import planted_pairs

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, MPLBACKEND="Agg")
SEED = 7
K = 3
GRID = 9
DIRECTIONS = ("a_over_b", "b_over_a")
DISSIMILARITIES = ("rank", "max_normalized_euclidean", "local_scaling")
# record_sha256 seals the record, timings included (rdx.io): it changes with them
VOLATILE_KEYS = ("timings_s", "versions", "record_sha256")


def _no_nan(name):
    raise ValueError(f"non-strict JSON constant {name!r}")


def read_strict_json(path: Path) -> dict:
    """Parse a JSON file, refusing NaN/Infinity (which ``json.loads`` accepts by default)."""
    return json.loads(Path(path).read_text(), parse_constant=_no_nan)


def rdx_explain(*args: str) -> subprocess.CompletedProcess:
    """``python -m rdx explain ARGS`` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "rdx", "explain", *map(str, args)],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)


def rdx_explain_here(*args: str) -> subprocess.CompletedProcess:
    """The same command in this process (``rdx.cli.main``), with its output captured."""
    import contextlib
    import io

    from rdx.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["explain", *map(str, args)])
    return subprocess.CompletedProcess(["rdx", "explain", *map(str, args)], code,
                                       out.getvalue(), err.getvalue())


def check_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_data")
    A, B, y = planted_pairs()
    np.save(d / "A.npy", A)
    np.save(d / "B.npy", B)
    np.save(d / "y.npy", y)
    np.savez(d / "A.npz", features=A, other=np.zeros(3))  # several arrays: picked by key
    np.savez(d / "B.npz", B)
    np.save(d / "images.npy", np.random.default_rng(1).random((len(A), 8, 8)))
    return {"dir": d, "A": A, "B": B, "y": y, "n": len(A)}


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    """All CLI runs of this module, two at a time: name -> (CompletedProcess, out dir)."""
    d = data["dir"]
    out = tmp_path_factory.mktemp("cli_out")
    main = ["--seed", SEED, "--save-graphs", "--images", d / "images.npy",
            "--labels", d / "y.npy"]
    commands = {
        "main": [d / "A.npy", d / "B.npy", *main, "--out", out / "main"],
        "repeat": [d / "A.npy", d / "B.npy", *main, "--out", out / "repeat"],  # same command
        "npz": [f"{d / 'A.npz'}:features", d / "B.npz", "--seed", SEED, "--quiet", "--out", out / "npz"],
        "guidance": [d / "A.npy", d / "B.npy", "--guidance", "ground_truth",
                     "--labels", d / "y.npy", "--quiet", "--out", out / "guidance"],
        "digits": ["--example", "digits", "--quiet", "--out", out / "digits"],
    }
    order = ["digits", "main", "repeat", "npz", "guidance"]  # longest first
    # the subprocess runs while this process does the others
    with ThreadPoolExecutor(max_workers=1) as pool:
        main_proc = pool.submit(rdx_explain, *commands["main"])
        results = {name: (rdx_explain_here(*commands[name]), out / name)
                   for name in order if name != "main"}
        results["main"] = (main_proc.result(), out / "main")
    return results


@pytest.fixture(scope="module")
def main_run(runs):
    proc, out = runs["main"]
    check_ok(proc)
    return out


@pytest.fixture(scope="module")
def doc(main_run):
    return read_strict_json(main_run / "explanations.json")


# ---------------------------------------------------------------------------- schema
def test_main_run_exit_status_and_summary(runs, data):
    proc, out = runs["main"]
    check_ok(proc)
    assert (out / "explanations.json").is_file()
    assert f"n={data['n']}" in proc.stdout
    assert "a_over_b" in proc.stdout and "b_over_a" in proc.stdout


def test_json_top_level_schema(doc, data):
    assert doc["schema_version"] == 2
    assert doc["method"] == "rdx"
    assert doc["n_images"] == data["n"]
    for key in ("params", "n_images", "directions", "bsr", "scores", "timings_s", "versions"):
        assert key in doc
    p = doc["params"]
    assert p["n_explanations"] == K
    assert p["beta"] == 5.0
    assert p["gamma"] is None
    assert p["gamma_resolved"] == pytest.approx(80.0 / data["n"])
    assert p["random_state"] == SEED
    assert p["keep_graphs"] is True


def test_json_versions(doc):
    v = doc["versions"]
    assert v["rdx"] == rdx.__version__
    assert v["numpy"] == np.__version__
    import torch
    assert v["torch"] == torch.__version__


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_json_direction_explanations(doc, data, direction):
    n = data["n"]
    assert set(doc["directions"]) == set(DIRECTIONS)
    r = doc["directions"][direction]
    exps = r["explanations"]
    assert len(exps) == K
    seen: list[int] = []
    for e in exps:
        assert set(e) >= {"images", "members", "mean_affinity", "low_affinity"}
        imgs = e["images"]
        assert 1 <= len(imgs) <= GRID
        assert all(isinstance(i, int) and not isinstance(i, bool) for i in imgs)
        assert len(set(imgs)) == len(imgs), "grid shows an image twice"
        assert set(imgs) <= set(e["members"]), "grid images must be members of the explanation"
        assert isinstance(e["mean_affinity"], float)
        assert isinstance(e["low_affinity"], bool)
        seen += e["members"]
    assert "null_members" in r
    seen += r["null_members"]
    # members + null_members partition range(n)
    assert sorted(seen) == list(range(n))
    aff = [e["mean_affinity"] for e in exps]
    assert aff == sorted(aff), "explanations must be sorted by ascending mean_affinity"


def test_json_bsr_and_scores(doc):
    bsr = doc["bsr"]
    assert set(bsr) == {"a_over_b", "b_over_a", "mean"}
    for d in DIRECTIONS:
        assert 0.0 <= bsr[d] <= 1.0
    assert bsr["mean"] == pytest.approx((bsr["a_over_b"] + bsr["b_over_a"]) / 2)
    scores = doc["scores"]
    assert set(scores) == set(DISSIMILARITIES) | {"chance", "params"}
    for name in DISSIMILARITIES:
        s = scores[name]
        assert set(s) >= {"a_over_b", "b_over_a", "mean"}
        for d in DIRECTIONS:
            assert 0.0 <= s[d]["bsr"] <= 1.0
            assert s[d]["n_pairs"] > 0
    assert scores["rank"]["a_over_b"]["bsr"] == bsr["a_over_b"]
    assert scores["rank"]["mean"]["bsr"] == bsr["mean"]


def test_json_is_strict(main_run):
    text = (main_run / "explanations.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    read_strict_json(main_run / "explanations.json")
    with pytest.raises(ValueError):  # the strict parser does reject NaN
        json.loads('{"x": NaN}', parse_constant=_no_nan)


# ---------------------------------------------------------------------------- graphs
@pytest.fixture(scope="module")
def graphs(main_run):
    with np.load(main_run / "graphs.npz", allow_pickle=False) as g:
        return {k: g[k] for k in g.files}


def test_graphs_npz_arrays(graphs, data):
    n = data["n"]
    for key in ("rank_a", "rank_b", "diff_a_over_b", "affinity_a_over_b", "affinity_b_over_a"):
        assert graphs[key].shape == (n, n), key
        assert graphs[key].dtype == np.float32, key
        assert np.isfinite(graphs[key]).all(), key
    for key in ("labels_a_over_b", "labels_b_over_a"):
        assert graphs[key].shape == (n,), key
    # rank rows are permutations of 0..n-1 with the image itself at rank 0
    for key in ("rank_a", "rank_b"):
        R = graphs[key]
        assert np.array_equal(np.sort(R, axis=1), np.broadcast_to(np.arange(n), (n, n)))
        assert np.all(np.diag(R) == 0)


def test_graphs_affinities_match_difference(graphs, doc):
    beta = doc["params"]["beta"]
    diff = graphs["diff_a_over_b"].astype(np.float64)
    np.testing.assert_allclose(graphs["affinity_a_over_b"], np.exp(-beta * diff), rtol=1e-5)
    np.testing.assert_allclose(graphs["affinity_b_over_a"], np.exp(beta * diff), rtol=1e-5)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_graphs_labels_match_json(graphs, doc, direction):
    labels = graphs[f"labels_{direction}"]
    r = doc["directions"][direction]
    assert np.flatnonzero(labels == 0).tolist() == sorted(r["null_members"])
    for j, e in enumerate(r["explanations"], start=1):
        assert np.flatnonzero(labels == j).tolist() == sorted(e["members"])
    assert labels.max() == len(r["explanations"])


# ---------------------------------------------------------------------------- images
def test_image_grids_written(main_run):
    grids = main_run / "grids"
    names = [f"{d}_{i}.png" for d in DIRECTIONS for i in range(1, K + 1)]
    names += [f"{d}_summary.png" for d in DIRECTIONS]
    for name in names:
        path = grids / name
        assert path.is_file(), name
        with Image.open(path) as im:
            assert im.format == "PNG"
            assert im.width > 0 and im.height > 0
            im.load()
    # the summary strip holds all k grids side by side
    with Image.open(grids / "a_over_b_summary.png") as s, Image.open(grids / "a_over_b_1.png") as g:
        assert s.width > K * g.width


# ---------------------------------------------------------------------------- inputs / determinism
def _stable(doc: dict) -> dict:
    doc = dict(doc)
    for key in VOLATILE_KEYS:
        doc.pop(key, None)
    return doc


def main_run_dir(runs) -> Path:
    return runs["main"][1]


def test_same_seed_gives_identical_json(runs, doc):
    proc, out = runs["repeat"]
    check_ok(proc)
    again = read_strict_json(out / "explanations.json")
    assert _stable(doc) == _stable(again)
    assert set(doc) - set(_stable(doc)) == set(VOLATILE_KEYS)
    with np.load(main_run_dir(runs) / "graphs.npz") as g1, np.load(out / "graphs.npz") as g2:
        for key in g1.files:
            np.testing.assert_array_equal(g1[key], g2[key], err_msg=key)


def test_npz_input_by_key(runs, doc):
    proc, out = runs["npz"]
    check_ok(proc)
    npz = read_strict_json(out / "explanations.json")
    assert npz["n_images"] == doc["n_images"]
    # the same explanations; the main run has images, so their attributes' enrichment too
    plain = {d: {**r, "explanations": [{k: v for k, v in e.items()
                                        if k not in ("enrichment", "description")}
                                       for e in r["explanations"]]}
             for d, r in doc["directions"].items()}
    assert npz["directions"] == plain
    assert npz["bsr"] == doc["bsr"]
    assert npz["scores"] == doc["scores"]
    assert not (out / "graphs.npz").exists()
    assert not (out / "grids").exists()


def test_guidance_ground_truth(runs, data):
    proc, out = runs["guidance"]
    check_ok(proc)
    g = read_strict_json(out / "explanations.json")
    assert g["params"]["guidance"] == "ground_truth"
    assert g["n_images"] == data["n"]
    for d in DIRECTIONS:
        r = g["directions"][d]
        members = sorted(r["null_members"] + [i for e in r["explanations"] for i in e["members"]])
        assert members == list(range(data["n"]))


def test_example_digits(runs):
    proc, out = runs["digits"]
    check_ok(proc)
    ex = read_strict_json(out / "example.json")
    assert ex  # a non-empty description of the example
    d = read_strict_json(out / "explanations.json")
    assert d["schema_version"] == 2
    assert d["n_images"] == 1797  # all sklearn digits
    for direction in DIRECTIONS:
        assert len(d["directions"][direction]["explanations"]) == K
        assert (out / "grids" / f"{direction}_summary.png").is_file()
