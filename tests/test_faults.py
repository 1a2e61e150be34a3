"""Faults while ``rdx run`` works: killed at seeded random points, interrupted, run twice at
once on the same output. Invariants: nothing finished is lost or redone by the next run,
nothing partial is accepted (every ``explanations.json`` on disk is whole), no temporary
file is left once a run finishes, SIGINT exits 130 with one line, and the final results
equal an uninterrupted run's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import digit_features, toy_config

pytestmark = pytest.mark.slow

METHODS = [{"method": "rdx", "name": "rdx_a", "n_explanations": 3, "gamma": 0.1},
           {"method": "rdx", "name": "rdx_b", "clustering": "pagerank", "n_explanations": 2},
           {"method": "kmeans", "n_explanations": 3},
           {"method": "pca", "n_explanations": 3},
           {"method": "nmf", "n_explanations": 3}]


def _default_sigint() -> None:
    """A shell starts background jobs (``pytest &``) with SIGINT ignored and children
    inherit that: the child gets SIGINT's default action, so the SIGINT test tests it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(cfg: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rdx", "run", "--config", str(cfg),
                             "--output-root", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            preexec_fn=_default_sigint)


def _results(out: Path) -> dict[str, dict]:
    """Each method's explanations (timings and versions left out), parsed: a file that is
    not whole JSON fails here."""
    found = {}
    for f in sorted(out.rglob("explanations.json")):
        doc = json.loads(f.read_text())
        found[f.parent.name] = {d: [{k: e.get(k) for k in ("images", "members", "concept")}
                                    for e in r["explanations"]]
                                for d, r in doc["directions"].items()}
    return found


def _temporaries(out: Path) -> list[Path]:
    return [p for p in out.rglob("*.tmp")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    digit_features(root)
    cfg = toy_config(root, base={"methods": METHODS})
    t0 = time.perf_counter()
    ref = _start(cfg, root / "reference")
    _, err = ref.communicate(timeout=600)
    assert ref.returncode == 0, err
    return cfg, root, _results(root / "reference"), time.perf_counter() - t0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_killed_at_a_random_point_then_resumed(setup, seed):
    cfg, root, reference, seconds = setup
    assert len(reference) == len(METHODS)
    out = root / f"killed_{seed}"
    delay = float(np.random.default_rng(seed).uniform(0.2, 0.9)) * seconds
    run = _start(cfg, out)
    time.sleep(delay)
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=60)
    partial = _results(out) if out.exists() else {}       # whole JSON or not there at all
    assert set(partial) <= set(reference)
    for name, res in partial.items():                      # what finished is already final
        assert res == reference[name], name
    again = _start(cfg, out)
    printed, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert _results(out) == reference
    assert not _temporaries(out)
    # finished before the kill: not redone (skipped with the same fingerprint)
    for name in partial:
        assert f"{name}: done already" in printed + err, name


def test_sigint_exits_130_with_one_line(setup):
    cfg, root, reference, seconds = setup
    out = root / "interrupted"
    run = _start(cfg, out)
    time.sleep(0.5 * seconds)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    if run.returncode == 0:
        pytest.skip("the run finished before the signal arrived")
    assert run.returncode == 130, err
    assert "Traceback" not in err
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert "interrupted" in last and "resume" in last
    again = _start(cfg, out)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert _results(out) == reference and not _temporaries(out)


def test_two_runs_on_one_output_at_once(setup):
    cfg, root, reference, _ = setup
    out = root / "twice"
    runs = [_start(cfg, out), _start(cfg, out)]
    errs = [r.communicate(timeout=600)[1] for r in runs]
    for r, err in zip(runs, errs):
        assert r.returncode in (0, 2), err
        assert "Traceback" not in err
    assert any(r.returncode == 0 for r in runs), errs
    if any(r.returncode == 2 for r in runs):       # a refusal says why
        assert any("rdx run" in e for e in errs)
        again = _start(cfg, out)
        assert again.wait(timeout=600) == 0
    assert _results(out) == reference
    assert not _temporaries(out)


def test_interrupt_inside_a_constructor_prints_one_line(tmp_path):
    """Ctrl-C that lands inside an object's constructor (as inside llvmlite while numba loads)
    leaves a half-built object whose ``__del__`` fails once the interrupted frames are freed;
    the user still sees one line, no "Exception ignored ... Traceback". A process of its own:
    pytest catches such exceptions itself."""
    (tmp_path / "halfbuilt_cmd.py").write_text(
        "class HalfBuilt:\n"
        "    def __init__(self):\n"
        "        raise KeyboardInterrupt\n"
        "    def __del__(self):\n"
        "        del self._as_parameter_\n"
        "def add_arguments(parser):\n"
        "    pass\n"
        "def run_command(args):\n"
        "    HalfBuilt()\n")
    script = ("import sys; from rdx import cli; "
              "cli.COMMANDS['halfbuilt'] = cli.Command('test', 'halfbuilt_cmd'); "
              "sys.argv = ['rdx', 'halfbuilt']; cli.run()")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)},
                          timeout=120)
    assert done.returncode == 130
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        "rdx halfbuilt: interrupted; finished work is kept (run the same command again to "
        "resume)."]


def test_interrupt_inside_a_callback_from_c_prints_one_line(tmp_path):
    """Ctrl-C that lands in a Python callback called from C (llvmlite's object-cache
    notifier while numba compiles) cannot propagate: Python would print it as "Exception
    ignored on calling ctypes callback function ... Traceback" and go on. The command still
    ends as interrupted, with one line."""
    (tmp_path / "callback_cmd.py").write_text(
        "import ctypes, os, signal\n"
        "_CB = ctypes.CFUNCTYPE(None)\n"
        "def _notify():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    for _ in range(100000):\n"
        "        pass\n"
        "_callback = _CB(_notify)\n"
        "def add_arguments(parser):\n"
        "    pass\n"
        "def run_command(args):\n"
        "    _callback()\n"
        "    return 0\n")
    script = ("import sys; from rdx import cli; "
              "cli.COMMANDS['callback'] = cli.Command('test', 'callback_cmd'); "
              "sys.argv = ['rdx', 'callback']; cli.run()")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)},
                          timeout=120, preexec_fn=_default_sigint)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, \
        done.stderr
    assert done.stderr.strip().splitlines() == [
        "rdx callback: interrupted; finished work is kept (run the same command again to "
        "resume)."]


def test_two_configs_of_one_comparison_at_once_keep_both_methods(tmp_path):
    """Two configs that write the same comparison with different methods, run at once: the
    second waits for the first (the comparison's lock), and the run record lists the
    methods of both — before, the later record named only its own config's methods."""
    import yaml

    digit_features(tmp_path)
    doc = yaml.safe_load(toy_config(tmp_path).read_text())
    cfgs = []
    for name, method in (("km", "kmeans"), ("pc", "pca")):
        doc["base"]["methods"] = [{"method": method, "name": name, "n_explanations": 2}]
        cfgs.append(tmp_path / f"{name}.yaml")
        cfgs[-1].write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    runs = [_start(c, out) for c in cfgs]
    errs = [r.communicate(timeout=600)[1] for r in runs]
    assert [r.returncode for r in runs] == [0, 0], errs
    comp = next(out.glob("toy/*/run.json")).parent
    run = json.loads((comp / "run.json").read_text())
    assert set(run["methods"]) == {"km", "pc"}
    assert {m["name"] for m in run["config"]["methods"]} == {"km", "pc"}
    assert {"km", "pc"} <= set(run["timings_s"])
    assert set(_results(out)) == {"km", "pc"}
    from rdx.results.store import ComparisonRun

    assert sorted(ComparisonRun(comp).results()) == ["km", "pc"]
    assert not _temporaries(out)
