"""The experiment runner: config validation, an end-to-end run, resume, interruption."""
import json
import subprocess
import sys

import numpy as np
import pytest
import yaml
from PIL import Image

from rdx import RDXInputError
from rdx.data import get_dataset, select_per_class
from rdx.experiments import load_experiment, run_experiment
from rdx.experiments import methods as methods_mod
from rdx.experiments.config import deep_merge

SEL = {"dataset": "digits", "target_classes": [3, 5, 8], "num_images": 40, "seed": 0}


def _features(tmp_path):
    """A = raw pixels of the selected digits; B = the same with 3s and 5s made identical."""
    ds = get_dataset("digits")
    idx = select_per_class(ds.ids, ds.labels, [3, 5, 8], 40, seed=0)
    A = ds.images[idx].reshape(len(idx), -1).astype(np.float32)
    B = A.copy()
    B[ds.labels[idx] == 5] = B[ds.labels[idx] == 3][: (ds.labels[idx] == 5).sum()] + \
        np.random.default_rng(0).normal(0, 1, ((ds.labels[idx] == 5).sum(), 64))
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    return idx, A, B


def _config(tmp_path, **over):
    doc = {"experiment": "toy", "seed": 3,
           "base": {"image_selection": dict(SEL),
                    "representations": {"a": {"features": str(tmp_path / "A.npy")},
                                        "b": {"features": str(tmp_path / "B.npy")}},
                    "methods": [{"method": "rdx", "name": "rdx_nb_lb_spectral",
                                 "n_explanations": 3, "gamma": 0.1},
                                {"method": "rdx", "name": "rdx_nb_lb_pagerank",
                                 "clustering": "pagerank", "n_explanations": 2}]},
           "comparisons": [{"name": "pixels_vs_merged"}]}
    doc = deep_merge(doc, over)
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


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
        load_experiment(_config(tmp_path, **over))


def test_invalid_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiment: [unclosed")
    with pytest.raises(RDXInputError, match="not valid YAML"):
        load_experiment(bad)
    with pytest.raises(RDXInputError, match="does not exist"):
        load_experiment(tmp_path / "nope.yaml")


@pytest.fixture
def finished_run(tmp_path):
    idx, A, B = _features(tmp_path)
    cfg = _config(tmp_path)
    outs = run_experiment(cfg, output_root=tmp_path / "out", progress=False)
    return tmp_path, cfg, outs[0], idx


def test_end_to_end_outputs(finished_run):
    tmp_path, cfg, out, idx = finished_run
    assert out == tmp_path / "out" / "toy" / "pixels_vs_merged"
    images = json.loads((out / "images.json").read_text())
    assert images["indices"] == idx.tolist() and images["n_images"] == 120
    run = json.loads((out / "run.json").read_text())
    assert run["seed"] == 3 and run["methods"] == {"rdx_nb_lb_spectral": "done",
                                                   "rdx_nb_lb_pagerank": "done"}
    assert "finished" in run and run["versions"]["numpy"]
    for name, k in (("rdx_nb_lb_spectral", 3), ("rdx_nb_lb_pagerank", 2)):
        doc = json.loads((out / name / "explanations.json").read_text())
        assert doc["run"]["name"] == name and doc["params"]["random_state"] == 3
        for d in ("a_over_b", "b_over_a"):
            assert len(doc["directions"][d]["explanations"]) == k
            for j in range(1, k + 1):
                with Image.open(out / name / "grids" / f"{d}_{j}.png") as im:
                    assert im.size[0] > 100
            assert (out / name / "grids" / f"{d}_summary.png").is_file()
    # B merges 5s into 3s: the strongest b_over_a explanation mixes 3s and 5s
    doc = json.loads((out / "rdx_nb_lb_spectral" / "explanations.json").read_text())
    labels = np.array(images["labels"])
    top = doc["directions"]["b_over_a"]["explanations"][-1]
    assert set(labels[top["members"]].tolist()) == {3, 5}


def test_resume_skips_finished_methods_and_reruns_changed_ones(finished_run, capsys):
    tmp_path, cfg, out, _ = finished_run
    spectral = out / "rdx_nb_lb_spectral" / "explanations.json"
    before = spectral.stat().st_mtime_ns
    run_experiment(cfg, output_root=tmp_path / "out", progress=True)
    assert capsys.readouterr().out.count("done already (skipped)") == 2
    assert spectral.stat().st_mtime_ns == before
    # change one method's parameters → only that one runs again
    doc = yaml.safe_load(cfg.read_text())
    doc["base"]["methods"][1]["n_explanations"] = 3
    cfg.write_text(yaml.safe_dump(doc))
    run_experiment(cfg, output_root=tmp_path / "out", progress=True)
    printed = capsys.readouterr().out
    assert "rdx_nb_lb_spectral: done already" in printed and "rdx_nb_lb_pagerank: done already" not in printed
    assert spectral.stat().st_mtime_ns == before


def test_interrupted_run_keeps_finished_work(tmp_path, monkeypatch):
    _features(tmp_path)
    cfg = _config(tmp_path)
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
    _features(tmp_path)
    np.save(tmp_path / "short.npy", np.zeros((10, 4), np.float32))
    cfg = _config(tmp_path, base={"representations": {"b": {"features": str(tmp_path / "short.npy")}}})
    with pytest.raises(RDXInputError, match=r"representations\.b\.features: .* has shape \(10, 4\)"):
        run_experiment(cfg, output_root=tmp_path / "out", progress=False)
    cfg = _config(tmp_path, base={
        "representations": {"a": {"features": str(tmp_path / "A.npy"), "exclude_dims": [5, 70]}},
        "methods": [{"method": "rdx"}]})
    with pytest.raises(RDXInputError, match=r"exclude_dims: \[70\] out of range"):
        run_experiment(cfg, output_root=tmp_path / "out", progress=False)


def test_cli_run_only_and_errors(tmp_path, capsys):
    from rdx.cli import main

    _features(tmp_path)
    cfg = _config(tmp_path, comparisons=[{"name": "one"}, {"name": "two"}])
    assert main(["run", "--config", str(cfg), "--only", "two", "--no-report",
                 "--output-root", str(tmp_path / "out"), "--quiet"]) == 0
    assert (tmp_path / "out" / "toy" / "two" / "run.json").is_file()
    assert not (tmp_path / "out" / "toy" / "one").exists()
    capsys.readouterr()
    assert main(["run", "--config", str(cfg), "--only", "three",
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

    _, A, B = _features(tmp_path)
    calls = []
    real = alignment_mod.align_pair

    def counting(*a, **k):
        calls.append(k)
        return real(*a, **k)

    monkeypatch.setattr(alignment_mod, "align_pair", counting)
    aligned = {"align_representations": True, "align_params": {"num_steps": 20}}
    cfg = _config(tmp_path, base={"methods": [
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
