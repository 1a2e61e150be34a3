"""The experiment runner: config validation, an end-to-end run, resume, interruption."""
import json
import subprocess
import sys

import numpy as np
import pytest
import yaml
from PIL import Image

from conftest import MERGED, ODD_NAME, TOY_METHODS, digit_features, toy_config
from rdx import RDXInputError
from rdx.experiments import load_experiment, run_experiment
from rdx.experiments import methods as methods_mod
from rdx.experiments.config import deep_merge


def test_deep_merge():
    assert deep_merge({"a": {"x": 1, "y": 2}, "m": [1]}, {"a": {"y": 3}, "m": [2]}) == \
        {"a": {"x": 1, "y": 3}, "m": [2]}


@pytest.mark.parametrize("over,match", [
    ({"typo": 1}, r"toy\.yaml: typo: unknown key"),
    ({"seed": -1}, r"toy\.yaml: seed: Input should be greater than or equal to 0"),
    ({"comparisons": []}, r"toy\.yaml: comparisons: List should have at least 1 item"),
    ({"comparisons": [{"name": "x"}, {"name": "x"}]}, r"comparisons\[1\]\.name: expected a unique"),
    ({"comparisons": [{"name": "x", "methods": [{"method": "kmeans2"}]}]},
     r"comparisons\[0\]\.methods\[0\]\.method: unknown method 'kmeans2'"),
    ({"comparisons": [{"name": "x", "methods": [{"method": "rdx", "gama": 0.1}]}]},
     r"comparisons\[0\]\.methods\[0\]: unknown RDX parameter\(s\) \['gama'\]"),
    ({"comparisons": [{"name": "x", "methods": [{"method": "rdx", "beta": -2}]}]},
     r"comparisons\[0\]\.methods\[0\]: beta must be a positive"),
    ({"comparisons": [{"name": "x", "methods": [{"method": "rdx"}, {"method": "rdx"}]}]},
     r"methods\[1\]\.name: duplicate method name 'rdx'"),
    ({"comparisons": [{"name": "x", "image_selection": {"num_images": 0}}]},
     r"comparisons\[0\]\.image_selection\.num_images: Input should be greater than 0"),
    ({"comparisons": [{"name": "x", "representations": {"a": {"layer": "gap"}}}]},
     r"comparisons\[0\]\.representations\.a\.layer: unknown key"),
    ({"comparisons": [{"name": "x", "representations": {"a": "A.npy"}}]},
     r"comparisons\[0\]\.representations\.a: expected a mapping with either 'model'"),
    # names that become folders are one safe path component: nothing is written outside
    ({"experiment": ".."}, r"experiment: experiment name '\.\.' becomes a folder name"),
    ({"comparisons": [{"name": "../../x"}]}, r"comparisons\[0\]\.name: comparison name"),
    ({"comparisons": [{"name": "x", "methods": [{"method": "rdx", "name": "/elsewhere/x"}]}]},
     r"comparisons\[0\]\.methods\[0\]\.name: method name '/elsewhere/x' becomes a folder"),
    ({"comparisons": [{"name": "x", "methods": [{"method": "rdx", "name": "../../../x"}]}]},
     r"method name '\.\./\.\./\.\./x' becomes a folder"),
])
def test_config_errors_name_the_key_path(tmp_path, over, match):
    with pytest.raises(RDXInputError, match=match):
        load_experiment(toy_config(tmp_path, **over))


def test_invalid_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiment: [unclosed")
    with pytest.raises(RDXInputError, match="not valid YAML"):
        load_experiment(bad)
    with pytest.raises(RDXInputError, match="does not exist"):
        load_experiment(tmp_path / "nope.yaml")


def test_end_to_end_outputs(toy_run):
    out = toy_run.comp(MERGED)
    assert sorted(toy_run.exp.iterdir()) == sorted([out, toy_run.comp(ODD_NAME)])
    images = json.loads((out / "images.json").read_text())
    assert images["indices"] == toy_run.idx.tolist() and images["n_images"] == 120
    run = json.loads((out / "run.json").read_text())
    assert run["seed"] == 3 and run["methods"] == {m: "done" for m in toy_run.methods(MERGED)}
    assert "finished" in run and run["versions"]["numpy"]
    for spec in TOY_METHODS[MERGED]:
        name, k = spec.get("name", spec["method"]), spec.get("n_explanations")
        doc = json.loads((out / name / "explanations.json").read_text())
        assert doc["run"]["name"] == name and doc["run"]["method"] == spec["method"]
        if k is None:                                  # cka, classification: no grids
            assert doc["directions"] == {} and not (out / name / "grids").exists()
            continue
        assert doc["params"]["random_state"] == 3
        for d in ("a_over_b", "b_over_a"):
            assert len(doc["directions"][d]["explanations"]) == k
            for j in range(1, k + 1):
                with Image.open(out / name / "grids" / f"{d}_{j}.png") as im:
                    assert im.size[0] > 100
            assert (out / name / "grids" / f"{d}_summary.png").is_file()
    # B merges 5s into 3s: the strongest b_over_a explanation of RDX mixes 3s and 5s
    doc = json.loads((out / "rdx" / "explanations.json").read_text())
    labels = np.array(images["labels"])
    top = doc["directions"]["b_over_a"]["explanations"][-1]
    assert set(labels[top["members"]].tolist()) == {3, 5}


def test_resume_skips_finished_methods_and_reruns_changed_ones(toy_run, toy_run_copy, tmp_path,
                                                               capsys):
    out = toy_run_copy.comp(MERGED)
    kept = [out / m / "explanations.json" for m in ("rdx", "kmeans")]
    before = [p.stat().st_mtime_ns for p in kept]
    run_experiment(toy_run.config, output_root=toy_run_copy.root, progress=True)
    n_methods = sum(len(toy_run.methods(c)) for c in TOY_METHODS)
    assert capsys.readouterr().out.count("done already (skipped)") == n_methods
    assert [p.stat().st_mtime_ns for p in kept] == before
    # change one method's parameters → only that one runs again
    doc = yaml.safe_load(toy_run.config.read_text())
    (nmf,) = [m for m in doc["base"]["methods"] if m["method"] == "nmf"]
    nmf["n_explanations"] = 2
    changed = tmp_path / "toy.yaml"
    changed.write_text(yaml.safe_dump(doc))
    run_experiment(changed, output_root=toy_run_copy.root, progress=True)
    printed = capsys.readouterr().out
    assert printed.count("done already (skipped)") == n_methods - 1
    assert "rdx: done already" in printed and "nmf: done already" not in printed
    assert [p.stat().st_mtime_ns for p in kept] == before
    redone = json.loads((out / "nmf" / "explanations.json").read_text())
    assert len(redone["directions"]["b_over_a"]["explanations"]) == 2


def test_interrupted_run_keeps_finished_work(tmp_path, monkeypatch):
    # a fresh run of its own (not a copy of toy_run): the interruption has to happen while
    # the runner writes it
    digit_features(tmp_path)
    cfg = toy_config(tmp_path)
    real = methods_mod.METHODS["rdx"]

    class Interrupting:
        calls = 0

        def validate(self, params, path):
            real.validate(params, path)

        def run(self, A, B, params, ctx):
            Interrupting.calls += 1
            if Interrupting.calls == 2:
                raise KeyboardInterrupt
            return real.run(A, B, params, ctx)

    monkeypatch.setitem(methods_mod.METHODS, "rdx", Interrupting())
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, output_root=tmp_path / "out", progress=False)
    out = tmp_path / "out" / "toy" / "pixels_vs_merged"
    assert (out / "rdx_nb_lb_spectral" / "explanations.json").is_file()
    assert not (out / "rdx_nb_lb_pagerank" / "explanations.json").exists()
    assert not list(out.rglob("*.tmp"))            # no half-written files
    monkeypatch.setitem(methods_mod.METHODS, "rdx", real)
    run_experiment(cfg, output_root=tmp_path / "out", progress=False)
    assert (out / "rdx_nb_lb_pagerank" / "explanations.json").is_file()


def test_feature_rows_must_match_the_selection_and_exclude_dims(tmp_path):
    digit_features(tmp_path)
    np.save(tmp_path / "short.npy", np.zeros((10, 4), np.float32))
    cfg = toy_config(tmp_path, base={"representations": {"b": {"features":
                                                                  str(tmp_path / "short.npy")}}})
    with pytest.raises(RDXInputError, match=r"representations\.b\.features: .* has shape \(10, 4\)"):
        run_experiment(cfg, output_root=tmp_path / "out", progress=False)
    cfg = toy_config(tmp_path, base={
        "representations": {"a": {"features": str(tmp_path / "A.npy"), "exclude_dims": [5, 70]}},
        "methods": [{"method": "rdx"}]})
    with pytest.raises(RDXInputError, match=r"exclude_dims: \[70\] out of range"):
        run_experiment(cfg, output_root=tmp_path / "out", progress=False)


def test_cli_run_only_and_errors(toy_run, tmp_path, capsys):
    from rdx.cli import main

    # the shared run's config, run afresh into an empty output root: only ODD_NAME is made
    assert main(["run", "--config", str(toy_run.config), "--only", ODD_NAME, "--no-report",
                 "--output-root", str(tmp_path / "out"), "--quiet"]) == 0
    made = tmp_path / "out" / "toy"
    assert json.loads((made / ODD_NAME / "run.json").read_text())["methods"] == {"kmeans": "done"}
    assert not (made / MERGED).exists()
    assert not (made / "index.html").exists() and not (made / ODD_NAME / "report.html").exists()
    capsys.readouterr()
    assert main(["run", "--config", str(toy_run.config), "--only", "three",
                 "--output-root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "no such comparison" in err and "Traceback" not in err


def test_every_shipped_config_is_valid():
    """Every experiment config (training-dynamics configs are checked in test_dynamics)."""
    from pathlib import Path
    configs = sorted(p for p in (Path(__file__).resolve().parents[1] / "configs").glob("*.yaml")
                     if not p.name.startswith(("training_dynamics_", "layers_", "benchmark")))
    assert len(configs) >= 9
    for cfg in configs:
        assert load_experiment(cfg), cfg


def test_missing_inputs_are_listed_with_their_fix_before_anything_runs(tmp_path):
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "-m", "rdx", "run", "--config",
                          str(repo / "configs" / "mnist_835.yaml"), "--check",
                          "--output-root", str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=tmp_path)   # no data/ here
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "nothing was run" in res.stderr and "bash download_mnist.sh" in res.stderr
    assert "rdx train --preset mnist_835" in res.stderr
    assert not (tmp_path / "out").exists()


def test_alignment_is_learned_once_per_comparison_and_shared(tmp_path, monkeypatch):
    import rdx.method.alignment as alignment_mod
    from rdx import RDX

    # a run of its own: the alignment calls are counted while the runner makes it
    _, A, B = digit_features(tmp_path)
    calls = []
    real = alignment_mod.align_pair

    def counting(*a, **k):
        calls.append(k)
        return real(*a, **k)

    monkeypatch.setattr(alignment_mod, "align_pair", counting)
    aligned = {"align_representations": True, "align_params": {"num_steps": 20}}
    cfg = toy_config(tmp_path, base={"methods": [
        {"method": "rdx", "name": "plain", "n_explanations": 2},
        {"method": "rdx", "name": "aligned_nb", "n_explanations": 2, **aligned},
        {"method": "rdx", "name": "aligned_mnd", "n_explanations": 2,
         "similarity": "max_normalized_distance", **aligned}]})
    out = run_experiment(cfg, output_root=tmp_path / "out", progress=False)[0]
    assert len(calls) == 1 and calls[0]["seed"] == 3 and calls[0]["num_steps"] == 20
    info = json.loads((out / "alignment.json").read_text())
    doc = json.loads((out / "aligned_nb" / "explanations.json").read_text())
    assert doc["info"]["alignment"] == info and "alignment" not in json.loads(
        (out / "plain" / "explanations.json").read_text()).get("info", {})
    # the shared maps equal the ones RDX learns by itself with the same seed
    alone = RDX(n_explanations=2, random_state=3, **aligned).fit(A, B)
    assert alone.alignment_ == info
    assert [e.members for e in alone.directions_["b_over_a"].explanations] == \
        [e["members"] for e in doc["directions"]["b_over_a"]["explanations"]]


def test_significance_block_assesses_rdx_against_the_twin_null(tmp_path, capsys):
    """``significance:`` with seed twins of A and B: each RDX method of the comparison is
    assessed against the twin null (its two exact draws among the n_null), not the
    baselines; the twins enter the data's fingerprint, so a changed twin re-runs the
    method; a missing twin is listed before anything runs; a bad family is refused with
    its key path."""
    idx, A, B = digit_features(tmp_path)
    r = np.random.default_rng(5)
    np.save(tmp_path / "A_twin.npy", (A + r.normal(0, 0.5, A.shape)).astype(np.float32))
    np.save(tmp_path / "B_twin.npy", (B + r.normal(0, 0.5, B.shape)).astype(np.float32))
    sig = {"n_null": 3, "family": "mlp",
           "twins": {"a": [{"features": str(tmp_path / "A_twin.npy")}],
                     "b": [{"features": str(tmp_path / "B_twin.npy")}]}}
    cfg = toy_config(tmp_path, base={"significance": sig, "methods": [
        {"method": "rdx", "name": "rdx", "n_explanations": 2, "gamma": 0.1},
        {"method": "kmeans", "n_explanations": 2}]})
    run_experiment(cfg, output_root=tmp_path / "out", progress=True)
    printed = capsys.readouterr().out
    assert "(twin null)" in printed
    out = tmp_path / "out" / "toy" / "pixels_vs_merged"
    doc = json.loads((out / "rdx" / "explanations.json").read_text())
    info = doc["info"]["significance"]
    assert info["null"] == "twin" and info["n_twin_draws"] == 2 and info["n_draws"] == 3
    assert info["calibrated"]
    for d in doc["directions"].values():
        for e in d["explanations"]:
            assert isinstance(e["significance"]["significant"], bool)
    km = json.loads((out / "kmeans" / "explanations.json").read_text())
    assert "significance" not in km["info"]                 # only RDX methods by default
    # another twin: another data fingerprint, so the assessed method runs again
    stamp = (out / "rdx" / "explanations.json").stat().st_mtime_ns
    np.save(tmp_path / "B_twin.npy", (B + r.normal(0, 0.6, B.shape)).astype(np.float32))
    run_experiment(cfg, output_root=tmp_path / "out", progress=False)
    assert (out / "rdx" / "explanations.json").stat().st_mtime_ns != stamp
    # a missing twin is listed with how to train it, before any work
    from rdx.experiments.run import check_inputs
    missing = toy_config(tmp_path, base={"significance": {"twins": {"b": [
        {"model": "convnet", "checkpoint": str(tmp_path / "ck" / "p_seed1" / "last.pt")}]}}})
    problems = check_inputs(load_experiment(missing))
    assert any("significance.twins.b[0]" in p and "rdx train --preset p --twins 1" in p
               for p in problems), problems
    bad = toy_config(tmp_path, base={"significance": {"family": "transformer-ish"}})
    with pytest.raises(RDXInputError, match=r"significance\.family"):
        load_experiment(bad)
