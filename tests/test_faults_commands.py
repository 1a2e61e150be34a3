"""Faults while the other long commands work (``rdx run``'s are in test_faults.py): each is
killed (SIGKILL) at one seeded random point between 20 % and 90 % of its uninterrupted
duration, then run again; each is interrupted (SIGINT) once; two ``rdx explain`` write one
output at once.

Invariants, per command:

* after the kill, every JSON, NPZ (and checkpoint) file on disk is whole: it parses, and
  a result file that is there equals the uninterrupted run's (nothing partial is accepted);
* the re-run exits 0 and its results equal the uninterrupted run's;
* resumable commands (train, dynamics, layers, benchmark) redo nothing that was finished
  before the kill: its files are not written again;
* commands that are not resumable (similarity, explore) leave no output after the kill, or
  only a whole one;
* no temporary file is left once the re-run finishes;
* SIGINT exits 130 with one line on stderr (with --quiet) and no traceback.

Each command runs as a user's shell runs it: ``python -m rdx ...`` in a subprocess (the
benchmark through ``rdx.cli.run`` with a tiny case put in place of the quick suite's).
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import digit_features

pytestmark = pytest.mark.slow

TIMEOUT = 600


# ----------------------------------------------------------------------------- helpers

def _default_sigint() -> None:
    # a shell starts background jobs (pytest &) with SIGINT ignored, and children inherit
    # that: the commands get SIGINT as a user's terminal delivers it
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _popen(argv: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            preexec_fn=_default_sigint)


def _complete(argv: list[str], cwd: Path) -> tuple[str, float]:
    """Run to the end; returns stdout + stderr and the seconds it took."""
    t0 = time.perf_counter()
    proc = _popen(argv, cwd)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    return out + err, time.perf_counter() - t0


def _killed(argv: list[str], cwd: Path, seconds: float, seed: int) -> None:
    """Start the command and SIGKILL it at a seeded point of its reference duration."""
    delay = float(np.random.default_rng(seed).uniform(0.2, 0.9)) * seconds
    proc = _popen(argv, cwd)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)


def _temporaries(folder: Path) -> list[Path]:
    """atomic_write's temporary files (``.<name>.<pid>.<random>.tmp``)."""
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def _whole(folder: Path) -> dict[str, int]:
    """Every result file under ``folder`` (temporaries aside) is read whole: JSON parses,
    NPZ archives give all their arrays, checkpoints load. Returns their mtimes."""
    found = {}
    if not folder.exists():
        return found
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name.endswith(".tmp"):
            continue
        if p.suffix == ".json":
            json.loads(p.read_text())
        elif p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                for k in z.files:
                    z[k]
        elif p.suffix in (".pt", ".resume"):
            import torch
            torch.load(p, weights_only=True, map_location="cpu")
        found[str(p.relative_to(folder))] = p.stat().st_mtime_ns
    return found


def _sigint_one_line(argv: list[str], cwd: Path, seconds: float) -> None:
    proc = _popen(argv, cwd)
    time.sleep(0.5 * seconds)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the command finished before the signal arrived")
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    # the status lines a command printed before the signal stay; the interrupt adds one
    # line, the last
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and "interrupted" in lines[-1], err
    assert sum("interrupted" in line for line in lines) == 1, err


def _not_redone(before: dict[str, int], folder: Path, marks) -> list[str]:
    """The result files (``marks(name)`` true) that were whole after the kill and that the
    re-run wrote again."""
    return [k for k, t in before.items()
            if marks(k) and (folder / k).stat().st_mtime_ns != t]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("faults_commands")


# ------------------------------------------------------------------------------- train

def _train(out: Path) -> list[str]:
    return ["-m", "rdx", "train", "--preset", "digits", "--per-class", "10", "--epochs", "4",
            "--out", str(out), "--quiet"]


def _weights(folder: Path) -> dict[str, dict]:
    import torch
    found = {}
    for p in sorted(folder.glob("*.pt")):
        ck = torch.load(p, weights_only=True, map_location="cpu")
        found[p.name] = ({k: v.numpy().tolist() for k, v in ck["state_dict"].items()},
                         ck["meta"].get("train_accuracy"))
    return found


@pytest.fixture(scope="module")
def train_ref(root):
    out = root / "train_ref"
    _, seconds = _complete(_train(out), root)
    return _weights(out / "digits"), seconds


def test_train_killed_then_resumed(root, train_ref):
    reference, seconds = train_ref
    out = root / "train_killed"
    _killed(_train(out), root, seconds, seed=0)
    folder = out / "digits"
    after = _whole(out)
    done = _weights(folder) if folder.exists() else {}
    for name, w in done.items():                     # a checkpoint on disk is final
        assert w == reference[name], name
    _complete(_train(out), root)
    assert _weights(folder) == reference
    assert not _temporaries(out)
    # checkpoints written before the kill are kept (the newest may be written again when
    # the process died before it recorded the step in its resume state)
    ckpts = sorted((k for k in after if k.endswith(".pt")), key=after.get)[:-1]
    assert not _not_redone({k: after[k] for k in ckpts}, out, lambda k: True)


def test_train_sigint(root, train_ref):
    _sigint_one_line(_train(root / "train_int"), root, train_ref[1])


# ---------------------------------------------------------------------------- dynamics

def _dynamics_config(root: Path, name: str) -> Path:
    doc = {"name": "faults", "output": str(root / name / "out"), "device": "cpu",
           "train": {"preset": "digits", "per_class": 10, "epochs": 3, "test": False,
                     "save_every": ["epoch", 0, 1, 2]},
           "checkpoints": {"dir": str(root / name / "ck" / "digits")},
           "model": {"model": "convnet"},
           "probe": {"dataset": "digits", "target_classes": [0, 1, 2, 3, 4],
                     "num_images": 20, "seed": 0},
           "rdx": {"n_clusters": 4}}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _dynamics(cfg: Path) -> list[str]:
    return ["-m", "rdx", "dynamics", "--config", str(cfg), "--quiet"]


def _dynamics_results(out: Path) -> dict:
    doc = json.loads((out / "dynamics.json").read_text())
    labels = {p.name: np.load(p)["labels"].tolist() for p in (out / "checkpoints").glob("*.npz")}
    recs = [{k: v for k, v in r.items() if k not in ("path", "fingerprint", "rdx_seconds")}
            for r in doc["checkpoints"]]
    return {"checkpoints": recs, "labels": labels}


@pytest.fixture(scope="module")
def dynamics_ref(root):
    cfg = _dynamics_config(root, "dyn_ref")
    _, seconds = _complete(_dynamics(cfg), root)
    return _dynamics_results(root / "dyn_ref" / "out"), seconds


def test_dynamics_killed_then_resumed(root, dynamics_ref):
    reference, seconds = dynamics_ref
    cfg = _dynamics_config(root, "dyn_killed")
    _killed(_dynamics(cfg), root, seconds, seed=1)
    folder = root / "dyn_killed"
    after = _whole(folder)
    printed, _ = _complete(_dynamics(cfg), root)
    assert _dynamics_results(folder / "out") == reference
    assert not _temporaries(folder)
    # a checkpoint analysed before the kill is reused, not analysed again
    assert not _not_redone(after, folder, lambda k: k.startswith("out/checkpoints/")), printed


def test_dynamics_sigint(root, dynamics_ref):
    _sigint_one_line(_dynamics(_dynamics_config(root, "dyn_int")), root, dynamics_ref[1])


# ------------------------------------------------------------------------------ layers

TINY_VIT = {"img_size": 8, "patch_size": 4, "embed_dim": 16, "depth": 2, "num_heads": 2,
            "mlp_ratio": 2.0}


def _layers_config(root: Path, name: str) -> Path:
    """test_layers' tiny ViT on digits (trained by the run itself, one epoch)."""
    base = root / name
    doc = {"name": "faults", "output": str(base / "out"),
           "model": {"model": "rdx_vit", "checkpoint": str(base / "vit.pt")},
           "train": {"dataset": "digits", "per_class": 15, "test_split": None, "epochs": 1,
                     "arch": TINY_VIT},
           "data": {"dataset": "digits", "n_images": 120, "n_probe": 100},
           "rdx": {"n_explanations": 2, "grid_size": 4},
           "probes": {"knn_k": 5}, "stats": {"n_permutations": 99},
           "patching": {"k": 5}, "chance_draws": 0, "device": "cpu",
           "cache_dir": str(base / "cache")}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _layers(cfg: Path) -> list[str]:
    return ["-m", "rdx", "layers", "--config", str(cfg), "--quiet"]


def _layers_results(out: Path) -> dict:
    doc = json.loads((out / "layers.json").read_text())
    pairs = [{k: v for k, v in p.items() if k not in ("state", "seconds")}
             for p in doc["pairs"]]
    expl = {str(p.relative_to(out)): [[e.get("images") for e in d["explanations"]]
                                      for d in json.loads(p.read_text())["directions"].values()]
            for p in sorted(out.glob("pairs/*/rdx/explanations.json"))}
    return {"layers": doc["layers"], "pairs": pairs, "explanations": expl,
            "patching": doc["patching"]["metrics"]}


@pytest.fixture(scope="module")
def layers_ref(root):
    cfg = _layers_config(root, "layers_ref")
    _, seconds = _complete(_layers(cfg), root)
    return _layers_results(root / "layers_ref" / "out"), seconds


def test_layers_killed_then_resumed(root, layers_ref):
    reference, seconds = layers_ref
    cfg = _layers_config(root, "layers_killed")
    _killed(_layers(cfg), root, seconds, seed=2)
    folder = root / "layers_killed"
    after = _whole(folder)
    printed, _ = _complete(_layers(cfg), root)
    assert _layers_results(folder / "out") == reference
    assert not _temporaries(folder)
    # finished layer pairs and heads are reused, not computed again
    finished = lambda k: k.endswith(("rdx/explanations.json", "rdx/cluster_stats.json")) \
        or (k.startswith("out/patching/b") and k.endswith(".json"))
    assert not _not_redone(after, folder, finished), printed


def test_layers_sigint(root, layers_ref):
    _sigint_one_line(_layers(_layers_config(root, "layers_int")), root, layers_ref[1])


# -------------------------------------------------------------------------- similarity

def _similarity(folder: Path, out: Path) -> list[str]:
    return ["-m", "rdx", "similarity", str(folder / "A.npy"), str(folder / "B.npy"),
            "--permutations", "300", "--bootstrap", "300", "--seed", "1",
            "--out", str(out), "--quiet"]


def _scores(path: Path) -> dict:
    return json.loads(path.read_text())["scores"]


@pytest.fixture(scope="module")
def similarity_ref(root):
    folder = root / "sim"
    folder.mkdir()
    digit_features(folder)
    _, seconds = _complete(_similarity(folder, folder / "ref.json"), root)
    return _scores(folder / "ref.json"), seconds


def test_similarity_killed_then_rerun(root, similarity_ref):
    """Not resumable (one JSON at the end): the kill leaves no file or a whole one."""
    reference, seconds = similarity_ref
    folder, out = root / "sim", root / "sim" / "killed" / "s.json"
    _killed(_similarity(folder, out), root, seconds, seed=3)
    _whole(out.parent)
    if out.exists():
        assert _scores(out) == reference
    _complete(_similarity(folder, out), root)
    assert _scores(out) == reference
    assert not _temporaries(folder)


def test_similarity_sigint(root, similarity_ref):
    _sigint_one_line(_similarity(root / "sim", root / "sim" / "int" / "s.json"), root,
                     similarity_ref[1])


# --------------------------------------------------------------------------- benchmark

#: ``rdx benchmark --quick`` with test_benchmark's tiny case as the quick suite (two small
#: ConvNets and B's seed twin trained on digits, RDX with 3 null draws, PCA)
BENCHMARK = """
import sys
from rdx import cli
from rdx.studies import benchmark as bm
bm.CASES["tiny"] = bm.Case(
    "tiny", "digits: A merges 3 and 5",
    bm.Recipe("tiny_merge35", "digits", per_class=40, epochs=1, width=4, merge=((5, 3),)),
    bm.Recipe("tiny_fine", "digits", per_class=40, epochs=1, width=4),
    bm.ImageSet("digits", 12), {"type": "merged_classes", "classes": [3, 5], "model": "a"})
bm.SUITES["quick"] = bm.Suite(
    ("tiny",), (bm.MethodSpec("rdx", {"n_explanations": 2}, n_null=3, twin=True),
                bm.MethodSpec("pca", {"n_explanations": 2})))
sys.argv = ["rdx", "benchmark", "--quick", "--quiet", *sys.argv[1:]]
cli.run()
"""


def _benchmark(base: Path) -> list[str]:
    return ["-c", BENCHMARK, "--out", str(base / "out"), "--checkpoints", str(base / "ckpt")]


def _benchmark_results(out: Path) -> dict:
    doc = json.loads((out / "benchmark.json").read_text())
    expl = {str(p.relative_to(out)): [[e.get("images") for e in d["explanations"]]
                                      for d in json.loads(p.read_text())["directions"].values()]
            for p in sorted(out.glob("*/*/*/explanations.json"))}
    rows = [{k: v for k, v in r.items() if "second" not in k} for r in doc["rows"]]
    return {"rows": rows, "explanations": expl}


@pytest.fixture(scope="module")
def benchmark_ref(root):
    _, seconds = _complete(_benchmark(root / "bench_ref"), root)
    return _benchmark_results(root / "bench_ref" / "out"), seconds


def test_benchmark_killed_then_resumed(root, benchmark_ref):
    reference, seconds = benchmark_ref
    base = root / "bench_killed"
    _killed(_benchmark(base), root, seconds, seed=4)
    after = _whole(base)
    printed, _ = _complete(_benchmark(base), root)
    assert _benchmark_results(base / "out") == reference
    assert not _temporaries(base)
    # trained models and finished comparisons' methods are kept, not redone
    finished = lambda k: k.endswith(("explanations.json", "last.pt"))
    assert not _not_redone(after, base, finished), printed


def test_benchmark_sigint(root, benchmark_ref):
    _sigint_one_line(_benchmark(root / "bench_int"), root, benchmark_ref[1])


# ----------------------------------------------------------------------------- explore

def _explore(comp: Path, out: Path) -> list[str]:
    return ["-m", "rdx", "explore", str(comp), "--out", str(out), "--embedding", "pca",
            "--quiet"]


def _page(path: Path) -> bytes:
    """The page without what differs between two writes: its time of writing, the build's
    seconds and the seconds of its parts, and the git commit (others may commit meanwhile)."""
    return re.sub(rb'written [0-9T:+-]+|"(generated|seconds|git_commit)": ?("[^"]*"|[0-9.e-]+)'
                  rb'|"parts": ?\{[^{}]*\}', b"", path.read_bytes())


@pytest.fixture(scope="module")
def explore_ref(root, explain_ref):
    comp, _ = explain_ref                  # rdx explain --report's comparison folder
    # as deep as the pages compared with it: a page names files relative to its folder
    out = root / "explore" / "ref" / "explore.html"
    _, seconds = _complete(_explore(comp, out), root)
    return comp, _page(out), seconds


def test_explore_killed_then_rerun(root, explore_ref):
    """Not resumable (one page at the end): the kill leaves no page or a whole one."""
    comp, reference, seconds = explore_ref
    out = root / "explore" / "killed" / "explore.html"
    before = _whole(comp)
    _killed(_explore(comp, out), root, seconds, seed=5)
    assert _whole(comp).keys() == before.keys()       # the run itself gains no file
    _whole(out.parent)
    if out.exists():
        assert _page(out) == reference
    _complete(_explore(comp, out), root)
    assert _page(out) == reference
    assert not _temporaries(out.parent) and not _temporaries(comp)


def test_explore_sigint(root, explore_ref):
    comp, _, seconds = explore_ref
    _sigint_one_line(_explore(comp, root / "explore" / "int" / "explore.html"), root, seconds)


# ------------------------------------------------------------- two explains, one output

def _explain(folder: Path, out: Path) -> list[str]:
    return ["-m", "rdx", "explain", str(folder / "A.npy"), str(folder / "B.npy"),
            "--n-explanations", "3", "--report", "--out", str(out), "--quiet"]


def _explained(out: Path) -> dict:
    found = {}
    for p in sorted(out.rglob("explanations.json")):
        doc = json.loads(p.read_text())
        found[str(p.relative_to(out))] = {d: [e.get("images") for e in r["explanations"]]
                                          for d, r in doc["directions"].items()}
    return found


@pytest.fixture(scope="module")
def explain_ref(root, similarity_ref):
    folder = root / "sim"                 # digit_features' A.npy and B.npy
    _complete(_explain(folder, root / "explain_ref"), root)
    return root / "explain_ref", _explained(root / "explain_ref")


def test_two_explains_on_one_output_at_once(root, explain_ref):
    folder = root / "sim"
    _, reference = explain_ref
    assert reference
    out = root / "explain_twice"
    runs = [_popen(_explain(folder, out), root) for _ in range(2)]
    errs = [r.communicate(timeout=TIMEOUT)[1] for r in runs]
    for r, err in zip(runs, errs):
        assert r.returncode in (0, 2), err
        assert "Traceback" not in err, err
    assert any(r.returncode == 0 for r in runs), errs
    if any(r.returncode == 2 for r in runs):       # a refusal says why
        assert any("rdx explain" in e for e in errs), errs
    _whole(out)
    assert _explained(out) == reference
    assert not _temporaries(out)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        p.name for p in (root / "explain_ref").iterdir())


# ------------------------------------------------------- SIGINT while an extension loads

@pytest.mark.parametrize("swallowed", [False, True])
def test_sigint_turned_into_another_error_still_exits_130(tmp_path, swallowed):
    """Ctrl-C that lands while numpy's C core loads comes out as an ImportError
    ("PyCapsule_Import could not import module ..."); raised, it gave its traceback and
    exit 1, and swallowed by a library's ``try: import x / except ImportError`` the command
    ran on to exit 0. Either way the user asked to stop: exit 130, one line. A process of its
    own, with a command that imports such an extension."""
    (tmp_path / "ext_cmd.py").write_text(
        "import os, signal\n"
        "def load_extension():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        for _ in range(1000):\n"
        "            pass\n"
        "    except KeyboardInterrupt:\n"
        "        raise ImportError('PyCapsule_Import could not import module \"datetime\"')\n"
        + ("try:\n    load_extension()\nexcept ImportError:\n    pass\n" if swallowed
           else "load_extension()\n") +
        "def add_arguments(parser):\n"
        "    pass\n"
        "def run_command(args):\n"
        "    print('finished')\n"
        "    return 0\n")
    script = ("import sys; from rdx import cli; "
              "cli.COMMANDS['ext'] = cli.Command('test', 'ext_cmd'); "
              "sys.argv = ['rdx', 'ext']; cli.run()")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120, preexec_fn=_default_sigint)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == [
        "rdx ext: interrupted; finished work is kept (run the same command again to "
        "resume)."]


def test_sigint_while_the_command_line_is_read_exits_130(tmp_path):
    """Ctrl-C before a command's own handling starts (here: while rdx.cli prepares it)."""
    script = ("import sys, rdx.input_files\n"
              "def begin_command():\n"
              "    raise KeyboardInterrupt\n"
              "rdx.input_files.begin_command = begin_command\n"
              "from rdx import cli\n"
              "sys.argv = ['rdx', 'similarity', 'A.npy', 'B.npy']\n"
              "cli.run()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == [
        "rdx similarity: interrupted; finished work is kept (run the same command again to "
        "resume)."]


# ------------------------------------------------------------- SIGTERM and SIGHUP

def _default_signals() -> None:
    # as a terminal or a scheduler delivers them: a background job (or nohup) may inherit
    # SIGINT or SIGHUP ignored, and the command keeps an ignored signal ignored
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


#: a command that finishes one file, then receives the signal while it writes the second
STOP_COMMAND = """
import os, signal
from pathlib import Path
from rdx.io import atomic_write

def add_arguments(parser):
    parser.add_argument("out")
    parser.add_argument("signal")

def run_command(args):
    atomic_write(Path(args.out) / "first.json", lambda fh: fh.write(b"{}"))
    def write(fh):
        fh.write(b'{"partial": ')
        os.kill(os.getpid(), getattr(signal, args.signal))
        for _ in range(10**6):      # the handler runs between bytecodes
            pass
        fh.write(b"1}")
    atomic_write(Path(args.out) / "second.json", write)
    return 0
"""

STOPPED = {"SIGINT": "interrupted", "SIGTERM": "terminated (SIGTERM)",
           "SIGHUP": "stopped: the terminal hung up (SIGHUP)"}


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_with_one_line_and_no_partial_file(tmp_path, name):
    """SIGTERM (kill, a scheduler's cancel) and SIGHUP (a closed terminal) stop a command
    like Ctrl-C: the file being written is not left behind, half or as a temporary; what
    was finished stays; one line, exit 128 + the signal's number."""
    (tmp_path / "stop_cmd.py").write_text(STOP_COMMAND)
    script = ("import sys; from rdx import cli; "
              "cli.COMMANDS['stop'] = cli.Command('test', 'stop_cmd'); "
              "sys.argv = ['rdx', 'stop', *sys.argv[1:]]; cli.run()")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out"), name],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
                          preexec_fn=_default_signals)
    assert done.returncode == 128 + getattr(signal, name), done.stderr
    assert done.stderr.strip().splitlines() == [
        f"rdx stop: {STOPPED[name]}; finished work is kept (run the same command again to "
        "resume)."]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["first.json"]


# ------------------------------------- matrix, probe, consistency, features, report

STUDY_MODELS = {"models": [{"id": f"rand_{i}", "objective": "untrained",
                            "spec": {"model": "convnet", "pretrained": False, "seed": i}}
                           for i in range(2)]}
STUDY_DATASETS = {"max_images": 40, "datasets": [{"id": "digits", "dataset": "digits"}]}


def _study(base: Path, command: str) -> list[str]:
    base.mkdir(parents=True, exist_ok=True)
    (base / "models.yaml").write_text(yaml.safe_dump(STUDY_MODELS))
    (base / "datasets.yaml").write_text(yaml.safe_dump(STUDY_DATASETS))
    extra = (["--epochs", "2", "--seeds", "0", "1", "--lrs", "0.1", "--max-train", "100",
              "--train-device", "cpu", "--device", "cpu"] if command == "probe"
             else ["--no-report", "--device", "cpu"])
    return ["-m", "rdx", command, "--models", str(base / "models.yaml"), "--datasets",
            str(base / "datasets.yaml"), "--out", str(base / "out"), "--cache-dir",
            str(base / "cache"), *extra]


def _consistency_root(base: Path) -> Path:
    from rdx.similarity.matrix import SimilarityMatrix

    ids = [f"m{i}" for i in range(5)]
    rng = np.random.default_rng(0)
    for ds in ("d1", "d2", "d3"):
        S = rng.random((5, 5))
        S = (S + S.T) / 2
        np.fill_diagonal(S, 1.0)
        folder = base / "matrices" / ds
        folder.mkdir(parents=True)
        SimilarityMatrix(values=S, model_ids=ids, measure="cka_linear", n_images=50,
                         meta={"categories": {"objective": dict(zip(ids, "aabbb"))}}
                         ).save(folder / "cka_linear")
    return base


def _stopped(job: dict, seed: int) -> None:
    """Run ``job["argv"]``; once ``job["marker"]`` is printed (without one: at once) wait a
    seeded random time in ``job["span"]``, send ``job["signal"]``; record the exit status
    and the output in the job, then every file under its folder (which must be whole)."""
    proc = subprocess.Popen([sys.executable, *job["argv"]], cwd=job["base"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, preexec_fn=_default_signals)
    seen = []
    if job["marker"] is not None:
        for line in proc.stdout:
            seen.append(line)
            if job["marker"] in line:
                break
    time.sleep(float(np.random.default_rng(seed).uniform(*job["span"])))
    proc.send_signal(job["signal"])
    rest, _ = proc.communicate(timeout=120)
    job["code"], job["printed"] = proc.returncode, "".join(seen) + (rest or "")
    job["after"] = _whole(job["base"])
    proc = _popen(job["argv"], job["base"])
    out, err = proc.communicate(timeout=TIMEOUT)
    job["again"], job["again_code"] = out + err, proc.returncode


def test_matrix_probe_consistency_features_report_stopped_then_resumed(root, toy_run):
    """Each command stopped at a seeded random point of its work — SIGKILL (no cleanup at
    all), SIGTERM or SIGHUP (the command's own cleanup and one line) — then run again. The
    five run at once, to keep the test short. Per command: every file on disk after the
    stop is whole; the re-run exits 0, keeps what was finished (matrix shards, probe
    records, feature chunks are not written again) and leaves no temporary file."""
    import threading

    import torch

    from conftest import copy_toy_run
    from rdx.models.convnet import ConvNet

    base = root / "stopped"
    feats = base / "features"
    feats.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(ConvNet().state_dict(), feats / "random.pt")
    report = copy_toy_run(toy_run, base / "report")
    cons = _consistency_root(base / "consistency")
    jobs = {
        "matrix": {"argv": _study(base / "matrix", "matrix"), "marker": "shards:",
                   "span": (0.0, 1.5), "signal": signal.SIGKILL,
                   "finished": "out/shards/"},
        "probe": {"argv": _study(base / "probe", "probe"), "marker": "probes:",
                  "span": (0.0, 1.5), "signal": signal.SIGTERM,
                  "finished": "out/probes/digits/"},
        "features": {"argv": ["-m", "rdx", "features", str(feats / "random.pt"), "digits",
                              "--per-class", "30", "--chunk-size", "40", "--batch-size",
                              "20", "--device", "cpu", "--out", str(feats / "f.npz")],
                     "marker": "loading", "span": (0.5, 2.5), "signal": signal.SIGKILL,
                     "finished": "f.npz.parts/"},
        "consistency": {"argv": ["-m", "rdx", "consistency", "--root", str(cons),
                                 "--probes", "none"], "marker": None, "span": (1.0, 4.0),
                        "signal": signal.SIGHUP, "finished": None},
        "report": {"argv": ["-m", "rdx", "report", str(report.exp)], "marker": None,
                   "span": (1.0, 4.0), "signal": signal.SIGKILL, "finished": None},
    }
    for name, base_of in (("matrix", base / "matrix"), ("probe", base / "probe"),
                          ("features", feats), ("consistency", cons),
                          ("report", report.root)):
        jobs[name]["base"] = base_of
    results = {k: v for k, v in _whole(report.root).items() if k.endswith(
        ("explanations.json", "representations.npz"))}
    threads = [threading.Thread(target=_stopped, args=(job, 11 + i))
               for i, job in enumerate(jobs.values())]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, job in jobs.items():
        where = f"{name}: {job['printed'][-500:]}\n--- re-run:\n{job['again'][-500:]}"
        assert job["again_code"] == 0, where
        if job["signal"] != signal.SIGKILL and job["code"] != 0:   # stopped, not finished
            assert job["code"] == 128 + job["signal"], where
            last = [line for line in job["printed"].splitlines() if line.strip()][-1]
            assert last.startswith(f"rdx {name}: ") and "resume" in last, where
            assert "Traceback" not in job["printed"], where
        if job["finished"]:
            kept = {k: t for k, t in job["after"].items() if k.startswith(job["finished"])}
            assert not _not_redone(kept, job["base"], lambda k: True), where
        assert not _temporaries(job["base"]), where
        _whole(job["base"])
    with np.load(feats / "f.npz") as z:
        assert z["features"].shape[0] == 300 and np.isfinite(z["features"]).all()
    assert (cons / "consistency" / "cka_linear" / "consistency.json").is_file()
    assert (report.exp / "index.html").is_file()
    assert {k: v for k, v in _whole(report.root).items() if k in results} == results


# ------------------------------------------------------------- a real full disk (as root)

@pytest.fixture
def small_disk(tmp_path):
    """A function mounting a tmpfs of the given size under ``tmp_path`` (root only: the
    test is skipped where mounting is not allowed), unmounted afterwards."""
    import os

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = []

    def mount(size: str) -> Path:
        d = tmp_path / f"disk_{size}"
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(d)
        return d

    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], check=False)


@pytest.mark.parametrize("report", [False, True], ids=["plain", "report"])
def test_explain_on_a_full_disk_never_exits_0_without_its_results(tmp_path, small_disk,
                                                                  report):
    """``rdx explain`` (plain and ``--report``) on file systems too small for its output, at
    sizes where each of its files is the one that does not fit: exit 0 only with every
    file written (the page too, with ``--report``), else exit 2 with the disk's message —
    before, a page that did not fit was a warning and exit 0. No traceback, no temporary
    left."""
    r = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 30)
    A = (r.normal(size=(4, 16)) * 4)[y] + r.normal(size=(120, 16))
    B = A @ r.normal(size=(16, 12)) + r.normal(size=(120, 12))
    np.save(tmp_path / "A.npy", A.astype(np.float32))
    np.save(tmp_path / "B.npy", B.astype(np.float32))
    np.save(tmp_path / "imgs.npy", r.integers(0, 255, (120, 8, 8)).astype(np.uint8))
    seen = set()
    for size in ("24k", "48k", "64k", "96k", "128k", "192k", "320k", "1m", "2m", "4m", "8m"):
        out = small_disk(size) / "out"
        proc = _popen(["-m", "rdx", "explain", str(tmp_path / "A.npy"),
                       str(tmp_path / "B.npy"), "--images", str(tmp_path / "imgs.npy"),
                       "--out", str(out), "--n-explanations", "2", "--quiet",
                       *(["--report"] if report else [])], tmp_path)
        _, err = proc.communicate(timeout=TIMEOUT)
        assert "Traceback" not in err, (size, err)
        assert not _temporaries(out.parent), size
        if proc.returncode == 0:
            assert "warning" not in err, (size, err)   # no page passed over
            json.loads(next(out.rglob("explanations.json")).read_text())
            assert not report or {"report.html", "explore.html"} <= set(
                p.name for p in out.iterdir())
        else:
            assert proc.returncode == 2, (size, err)
            assert "disk is full" in err or "MB are free" in err, (size, err)
        seen.add(proc.returncode)
    assert seen == {0, 2}   # the sizes span too small and large enough
