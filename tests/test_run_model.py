"""The run model: typed results, scoring once, the run store, one command line."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from conftest import MERGED, TOY_METHODS, ToyRun, planted_pairs
from rdx import RDX
from rdx.cli import COMMANDS, main
from rdx.errors import NotFittedError, RDXInputError
from rdx.results.store import ComparisonRun, ExperimentRun, check_path_component
from rdx.results.types import SCHEMA_VERSION, DirectionResult, Explanation, MethodResult


def test_method_result_round_trips_and_reads_version_1():
    res = MethodResult(method="kmeans", params={"k": 2}, n_images=5, directions={
        "a_over_b": DirectionResult([Explanation(images=[0, 1], concept=3, values=[1.0, 0.5],
                                                 extra={"note": "x"})]),
        "b_over_a": DirectionResult([Explanation(images=[2, 3], members=[2, 3, 4])],
                                    null_members=[0, 1], null_mean_affinity=1.2)},
        info={"estimator": {"a": 1}}, timings={"fit": 0.1})
    doc = json.loads(json.dumps(res.to_json()))
    assert doc["schema_version"] == SCHEMA_VERSION == 2
    assert doc["directions"]["a_over_b"]["explanations"][0] == {
        "concept": 3, "images": [0, 1], "values": [1.0, 0.5], "note": "x"}
    back = MethodResult.from_json(doc)
    assert back.to_json() == res.to_json()
    # a first-release (v1) document: method records at the top level, scores alike
    v1 = {"schema_version": 1, "method": "cka", "params": {}, "n_images": 5, "directions": {},
          "similarity": {"cka_debiased": 0.5}, "info": {"a": {}}, "timings_s": {}}
    old = MethodResult.from_json(v1)
    assert old.info == {"similarity": {"cka_debiased": 0.5}, "estimator": {"a": {}}}
    with pytest.raises(RDXInputError, match="schema_version 7"):
        MethodResult.from_json({**v1, "schema_version": 7})


def test_serialising_an_rdx_fit_does_not_score_and_fit_leaves_global_rngs_alone(monkeypatch):
    import rdx.evaluation.bsr as bsr

    A, B, _ = planted_pairs(n_per=15, d=8)
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    before = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    model = RDX(n_explanations=2, random_state=0).fit(A, B)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == before
    calls = []
    monkeypatch.setattr(bsr, "bsr_scores", lambda *a, **k: calls.append(1))
    doc = model.to_dict()
    assert calls == [] and "scores" not in doc and "bsr" not in doc
    with pytest.raises(NotFittedError):
        RDX().to_dict()


def test_runner_stores_scores_with_chance_levels(toy_run):
    comp = ExperimentRun(toy_run.exp).comparison(MERGED)
    res = comp.result("rdx")
    assert set(res.scores) >= {"rank", "max_normalized_euclidean", "local_scaling", "chance",
                               "params"}
    for d in ("a_over_b", "b_over_a"):
        ch = res.scores["chance"][d]["rank"]
        assert ch["bsr_lo"] <= ch["bsr_mean"] <= ch["bsr_hi"]
    assert res.bsr["mean"] == res.scores["rank"]["mean"]["bsr"]
    assert comp.result("cka").scores is None and comp.result("cka").info["similarity"]


def test_one_report_reads_each_result_once_and_never_scores(toy_run_copy, monkeypatch):
    """Counted with spies: one report of an experiment reads each explanations.json once
    and calls BSR scoring zero times."""
    import rdx.evaluation.bsr as bsr
    import rdx.evaluation.chance as chance
    import rdx.evaluation.scoring as scoring
    import rdx.results.store as store
    from rdx.report import write_experiment_report

    reads: dict[str, int] = {}
    real_read = store.read_json

    def counting_read(path):
        reads[str(path)] = reads.get(str(path), 0) + 1
        return real_read(path)

    scored = []
    monkeypatch.setattr(store, "read_json", counting_read)
    for mod in (bsr, scoring):
        monkeypatch.setattr(mod, "bsr_scores", lambda *a, **k: scored.append(1))
    monkeypatch.setattr(chance, "chance_levels", lambda *a, **k: scored.append(1))
    monkeypatch.setattr(scoring, "chance_levels", lambda *a, **k: scored.append(1))
    write_experiment_report(toy_run_copy.exp)
    explanation_reads = {p: n for p, n in reads.items() if p.endswith("explanations.json")}
    assert len(explanation_reads) == sum(len(ToyRun.methods(c)) for c in TOY_METHODS)
    assert set(explanation_reads.values()) == {1}
    assert scored == []


def test_a_corrupt_result_is_a_note_not_a_crash(toy_run_copy):
    (toy_run_copy.comp(MERGED) / "kmeans" / "explanations.json").write_text("{not json")
    assert main(["report", str(toy_run_copy.exp), "--quiet"]) == 0
    html = (toy_run_copy.comp(MERGED) / "report.html").read_text()
    assert "kmeans/explanations.json could not be read" in html


def test_resume_redoes_a_method_whose_outputs_were_damaged(toy_run_copy):
    comp = ComparisonRun(toy_run_copy.comp(MERGED))
    fp = comp.result("kmeans").run["fingerprint"]
    assert comp.is_finished("kmeans", fp)
    assert not comp.is_finished("kmeans", "another fingerprint")
    png = comp.grid_path("kmeans", "a_over_b", 1)
    png.write_bytes(b"")                                   # a 0-byte grid
    assert not ComparisonRun(toy_run_copy.comp(MERGED)).is_finished("kmeans", fp)
    npz = comp.concepts_path("kmeans")
    assert npz.is_file()


@pytest.mark.parametrize("name", ["..", "../x", "/abs/x", ".hidden", "a/b", "", "x" * 200])
def test_names_that_become_folders_must_be_one_safe_component(name):
    with pytest.raises(RDXInputError, match="folder name"):
        check_path_component(name, "method name")


def test_cli_help_version_and_unknown_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and "rdx 0." in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and all(c in out for c in COMMANDS)
    with pytest.raises(SystemExit) as e:
        main(["explian"])
    assert e.value.code == 2
    # a typo in a command's flag prints that command's usage, not the top level's
    with pytest.raises(SystemExit) as e:
        main(["report", "x", "--quite"])
    assert e.value.code == 2 and "usage: rdx report" in capsys.readouterr().err


@pytest.fixture
def planted_files(tmp_path):
    """``tmp_path/A.npy`` and ``B.npy``: small planted representations for ``rdx explain``."""
    A, B, _ = planted_pairs(n_per=12, d=6)
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)


def test_cli_explain_in_process_scores_once_and_prints_chance(tmp_path, planted_files, capsys):
    out = tmp_path / "out"
    assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--k", "2",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "chance" in text and "mean BSR" in text
    res = MethodResult.from_json(json.loads((out / "explanations.json").read_text()))
    assert res.scores["chance"]["a_over_b"]["rank"]["n_draws"] == 1000
    # an output location that cannot be written is refused before the fit
    (tmp_path / "file").write_text("x")
    assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"),
                 "--out", str(tmp_path / "file")]) == 2
    assert "is a file" in capsys.readouterr().err
    # the same array twice is refused (it would explain nothing)
    assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "A.npy"),
                 "--out", str(out)]) == 2
    assert "--allow-identical" in capsys.readouterr().err


def test_atomic_writes_use_the_umask_mode_and_clean_up_after_killed_writers(tmp_path):
    import os
    import subprocess
    import sys

    from rdx.io import atomic_write

    target = tmp_path / "result.json"
    # a writer killed inside the write leaves its temporary file behind ...
    code = ("import os, signal, sys; from pathlib import Path; from rdx.io import atomic_write;"
            "atomic_write(Path(sys.argv[1]), lambda fh: os.kill(os.getpid(), signal.SIGKILL))")
    proc = subprocess.run([sys.executable, "-c", code, str(target)])
    assert proc.returncode != 0
    assert len(list(tmp_path.glob(".result.json.*.tmp"))) == 1 and not target.exists()
    # ... which the next write of the same file removes; the result is world-readable as
    # a plain open() would make it (umask), not mkstemp's 0600
    old = os.umask(0o022)
    try:
        atomic_write(target, lambda fh: fh.write(b"{}"))
    finally:
        os.umask(old)
    assert list(tmp_path.glob(".result.json.*.tmp")) == []
    assert target.read_bytes() == b"{}" and (target.stat().st_mode & 0o777) == 0o644


def test_explain_significance_is_stored_printed_and_badged(tmp_path, planted_files, capsys):
    out = tmp_path / "o"
    assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--k", "2",
                 "--significance", "5", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "p_FWER" in printed and "no verdict (not calibrated)" in printed
    assert "NO VERDICT — not calibrated for this pair: the model family is not known" in printed
    res = MethodResult.from_json(json.loads((out / "explanations.json").read_text()))
    sigs = [e.extra["significance"] for d in res.directions.values() for e in d.explanations]
    assert len(sigs) == 4
    for s in sigs:
        # 5 null pairs: the counting p is (1 + count) / 6; the decision uses the t predictive
        m = res.info["significance"]["n_draws"] + 1
        e = s["p_value_fwer_empirical"]
        assert m * e == pytest.approx(round(m * e)) and 1 / m <= e <= 1
        assert 0 < s["p_value_fwer"] <= 1 and s["below_alpha"] == (s["p_value_fwer"] <= 0.05)
        # files of no named family: the field null gives p-values but no verdict
        assert s["significant"] is None and s["calibrated"] is False
    assert res.info["significance"]["n_null"] == 5
    from rdx.report.explanations import explanation_badges
    exp = res.directions["a_over_b"].explanations[0].to_json()
    assert "p<sub>FWER</sub>" in explanation_badges(exp)
    # the flag alone takes the default number of draws; values that cannot run exit 2 first
    assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--k", "2",
                 "--significance", "--out", str(tmp_path / "d"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "d" / "explanations.json").read_text())
    assert doc["info"]["significance"]["n_null"] == 6
    for bad in ("2", "1000000000"):
        assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"),
                     "--significance", bad, "--out", str(tmp_path / "e")]) == 2
        assert "--significance" in capsys.readouterr().err


def test_explain_significance_with_a_seed_twin_is_the_twin_null(tmp_path, planted_files,
                                                                 capsys):
    """--control-b: the seed twin is one exact null draw and the output says it is the
    gold standard; twins without --significance, or more twins than draws, exit 2."""
    B = np.load(tmp_path / "B.npy")
    twin = B + 0.05 * np.random.default_rng(0).standard_normal(B.shape).astype(np.float32)
    np.save(tmp_path / "B2.npy", twin)
    args = ["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--k", "2"]
    assert main(args + ["--significance", "3", "--control-b", str(tmp_path / "B2.npy"),
                        "--out", str(tmp_path / "t")]) == 0
    assert "gold standard" in capsys.readouterr().out
    info = json.loads((tmp_path / "t" / "explanations.json").read_text())["info"]["significance"]
    assert info["null"] == "twin" and info["n_twin_draws"] == 1
    assert main(args + ["--control-b", str(tmp_path / "B2.npy"), "--out",
                        str(tmp_path / "u")]) == 2
    assert "--significance" in capsys.readouterr().err
    assert main(args + ["--significance", "3"] + ["--control-b", str(tmp_path / "B2.npy")] * 4
                + ["--out", str(tmp_path / "v")]) == 2
    assert "seed twins" in capsys.readouterr().err


def test_run_through_a_submitit_executor_gives_the_same_outputs(toy_run, tmp_path):
    """rdx run --executor: one submitit job per comparison (submitit's in-process debug
    executor here), the same results as the local run of the same config."""
    from rdx.experiments import run_experiment

    jobs = run_experiment(toy_run.config, output_root=tmp_path / "jobs", progress=False,
                          executor="debug")
    assert jobs == [tmp_path / "jobs" / "toy" / c for c in TOY_METHODS]
    for name in TOY_METHODS:
        local = ComparisonRun(toy_run.comp(name))
        job = ComparisonRun(tmp_path / "jobs" / "toy" / name)
        assert job.method_names() == ToyRun.methods(name)
        for m in ToyRun.methods(name):
            ra, rb = local.result(m), job.result(m)
            assert ra.to_json()["directions"] == rb.to_json()["directions"]
            assert ra.scores == rb.scores and ra.info.get("similarity") == rb.info.get("similarity")
    with pytest.raises(RDXInputError, match="executor 'kubernetes'"):
        run_experiment(toy_run.config, output_root=tmp_path / "x", executor="kubernetes")


def test_summary_shows_the_calibrated_strength_per_direction(toy_run_copy):
    from rdx.evaluation.summary import summarize_comparison

    path = toy_run_copy.comp(MERGED) / "rdx" / "explanations.json"
    doc = json.loads(path.read_text())
    for p, e in zip((0.01, 0.3), doc["directions"]["b_over_a"]["explanations"]):
        e["significance"] = {"p_value": p, "p_value_fwer": p, "statistic": 1.0, "z": 2.0,
                             "null": "perturbation", "significant": p <= 0.05, "over": "members"}
    from rdx.io import write_record
    write_record(path, doc)          # sealed, as the run store writes results
    rows = summarize_comparison(toy_run_copy.comp(MERGED))["rows"]
    ba = [r for r in rows if r["method"] == "rdx" and r["direction"] == "b_over_a"]
    ab = [r for r in rows if r["method"] == "rdx" and r["direction"] == "a_over_b"]
    assert {(r["significance_n_assessed"], r["significance_n_significant"],
             r["significance_min_p_fwer"], r["significance_null"]) for r in ba} == \
        {(2, 1, 0.01, "field")}          # a record of the old name reads as the field null
    assert all(r["significance_n_assessed"] is None for r in ab)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_follows_one_protocol(name):
    """Every command module defines ``add_arguments(parser)`` and ``run_command(args)``: the
    dispatcher builds every parser (``prog``, usage errors, ``--help``) and turns every
    ``RDXInputError`` into exit status 2 alike."""
    import argparse
    import importlib

    module = importlib.import_module(COMMANDS[name].module)
    assert callable(module.add_arguments) and callable(module.run_command), name
    assert not hasattr(module, "main"), f"{name}: parses its own arguments"
    parser = argparse.ArgumentParser(prog=f"rdx {name}")
    module.add_arguments(parser)
    assert f"rdx {name}" in parser.format_usage()


@pytest.mark.parametrize("command", [[], *([name] for name in COMMANDS)])
def test_help_imports_no_heavy_library(command):
    """``rdx [command] --help`` answers without importing torch or scikit-learn (each costs
    about a second): the packages export their heavy names lazily (``rdx.lazy``)."""
    import subprocess
    import sys

    code = ("import sys\nfrom rdx.cli import main\ntry:\n"
            f"    main({[*command, '--help']!r})\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'sklearn', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    assert out == "[]"
