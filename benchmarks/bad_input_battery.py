#!/usr/bin/env python
"""An outside battery of bad input and faults against every ``rdx`` command.

Unlike the test suite's fuzz cases (``tests/test_bad_inputs.py``,
``tests/test_entry_points.py``), which call :func:`rdx.cli.main` in the test's process,
every case here runs the real command line as a user's shell does — ``python -m rdx ...``
in a subprocess with a timeout — and is judged only by what a user can see. The cases are
generated (Hypothesis draws the option values, the array values and the signal times from
``--seed``) over every command (explain, run, train, similarity, matrix, probe, layers,
dynamics, consistency, features, report, explore, benchmark) in nine classes:

=========== =================================================================================
overlap     an output that is (or holds, at a path the command writes) one of its inputs:
            directly, through a symbolic or hard link, a linked folder or a relative path
outpath     an empty, blank, control-character, over-long or special (/dev, /proc) output
special     a named pipe, /dev/zero, /dev/null, a folder, a socket, a dangling or looping
            link given where a file is read
budget      absurd values of every option (or config key) that multiplies time or memory
nan         values whose effect is an empty or NaN result (NaN/inf/zero/negative floats,
            degenerate data)
numeric     odd numeric data: subnormal and huge finite values, int64/uint64 extremes,
            bool/complex/object/structured/string/datetime dtypes, 0-d, 1-d and 3-d arrays,
            Fortran order, memory-mapped and big-endian files, float16
parsed      values the argument parser accepts, drawn from the whole type of each option
signal      SIGINT, SIGTERM and SIGHUP at a random point, then the same command again
unwritable  a read-only output folder, RLIMIT_FSIZE (a full disk as the writer sees it),
            names reserved by the output's own files, undecodable (lone-surrogate) names,
            datasets that are not installed
=========== =================================================================================

The invariants checked on every case:

* **exit status** — 0 only with a result that is there and finite (every JSON file under
  the output parses without NaN or Infinity, every explanation has images, every score is
  a number, nothing printed reads "nan"); otherwise 2 (or 128 + the signal's number after
  SIGINT, SIGTERM or SIGHUP), with a message on stderr that starts ``rdx COMMAND: ...``
  (argparse: ``usage:``), is one paragraph and holds no ``Traceback``;
* **no write outside the output** — nothing appears, changes or goes away in the case's
  folder outside the output location;
* **inputs untouched** — every input file has the same SHA-256 afterwards;
* **no hang** — the command ends within ``--timeout`` seconds;
* after a signal, the same command run again exits 0 and leaves no temporary file.

Run it (about 10 minutes on 2 CPU cores; ``--list`` shows the cases without running them)::

    .venv/bin/python benchmarks/bad_input_battery.py --jobs 2 --json outputs/battery.json

Options select classes (``--classes overlap,signal``), commands (``--commands explain``),
every N-th case (``--every 5``) and the Hypothesis seed (``--seed``). The exit status is 0
when every case keeps the invariants, 1 otherwise; failures are printed with the command
line, exit status and the end of stderr. As root, the read-only cases run as ``nobody``
(root writes into read-only folders).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import math
import os
import re
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ("overlap", "outpath", "special", "budget", "nan", "numeric", "parsed", "signal",
           "unwritable")
COMMANDS = ("explain", "run", "train", "similarity", "matrix", "probe", "layers",
            "dynamics", "consistency", "features", "report", "explore", "benchmark")
N = 40                  # images of the small inputs
NOBODY = 65534
Arg = str | bytes


# ============================================================================ the cases

@dataclass
class Ctx:
    """Where one case runs: the shared inputs ``w`` (read-only for the case), the case's own
    folder ``d`` (its inputs under ``d/in``), the working directory and the output."""
    w: Path
    d: Path

    @property
    def cwd(self) -> Path:
        return self.d / "cwd"

    @property
    def out(self) -> Path:
        return self.d / "out"

    @property
    def inp(self) -> Path:
        return self.d / "in"


@dataclass
class Case:
    cls: str
    command: str
    name: str
    argv: Callable[[Ctx], list[Arg]]
    prepare: Callable[[Ctx], None] | None = None
    #: exit 0 breaks an invariant by itself (e.g. an output that overlaps an input)
    must_refuse: bool = False
    #: the output location (relative to the case folder); None: "out"
    out_root: Callable[[Ctx], Path] | None = None
    #: (signal, seconds after the start) to send, then run again
    signal: tuple[int, float] | None = None
    #: RLIMIT_FSIZE in bytes
    fsize: int | None = None
    #: run as nobody: root writes into read-only folders and into /dev (as root, a command
    #: that replaced /dev/null would break the machine), so these cases need a user
    nobody: bool = False
    #: folders made read-only for the case: as root a read-only tmpfs is mounted over
    #: each (root ignores modes), otherwise the case runs with them at mode 0555
    readonly: Callable[[Ctx], list[Path]] | None = None
    #: a folder that becomes a small file system (tmpfs, as root) holding what the case
    #: prepared in it and this many bytes more: a full disk as the writer sees it (ENOSPC)
    full: tuple[Callable[[Ctx], Path], int] | None = None
    #: words the message must not use (a truthful message, e.g. "constant" for 1e-310)
    forbid: tuple[str, ...] = ()
    timeout: float | None = None
    #: input files besides those on the command line and under ``in/`` (named in a config)
    inputs: Callable[[Ctx], list[Path]] | None = None

    @property
    def id(self) -> str:
        return f"{self.cls}/{self.command}/{self.name}"


# ----------------------------------------------------------------------- the inputs

def _save(path: Path, arr) -> None:
    np.save(path, arr)


def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from rdx.data import get_dataset, select_per_class

    ds = get_dataset("digits")
    idx = select_per_class(ds.ids, ds.labels, [3, 5, 8], 24, seed=0)
    A = ds.images[idx].reshape(len(idx), -1).astype(np.float32)
    B = A.copy()
    B[:, :32] = 0.0
    B += np.random.default_rng(0).normal(0, 0.5, B.shape).astype(np.float32)
    return A, B, ds.labels[idx]


def _yaml(path: Path, doc) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return path


def run_config(w: Path, **over) -> dict:
    doc = {"experiment": "toy", "seed": 0,
           "base": {"image_selection": {"dataset": "digits", "target_classes": [3, 5, 8],
                                        "num_images": 24, "seed": 0},
                    "representations": {"a": {"features": str(w / "dA.npy")},
                                        "b": {"features": str(w / "dB.npy")}},
                    "methods": [{"method": "rdx", "name": "rdx_k2", "n_explanations": 2},
                                {"method": "kmeans", "name": "km", "n_explanations": 2}]},
           "comparisons": [{"name": "c1"}]}
    from rdx.experiments.config import deep_merge
    return deep_merge(doc, over)


MODELS = {"models": [{"id": f"rand_{i}", "objective": "untrained",
                      "spec": {"model": "convnet", "pretrained": False, "seed": i}}
                     for i in range(2)]}
DATASETS = {"max_images": 20, "datasets": [{"id": "digits", "dataset": "digits"}]}


def dynamics_config(w: Path, out: Path, **over) -> dict:
    return {"name": "bat", "output": str(out), "device": "cpu",
            "checkpoints": {"dir": str(w / "ck" / "digits")},
            "model": {"model": "convnet"},
            "probe": {"dataset": "digits", "target_classes": [0, 1, 2], "num_images": 12,
                      "seed": 0},
            "rdx": {"n_clusters": 3}, **over}


TINY_VIT = {"img_size": 8, "patch_size": 4, "embed_dim": 16, "depth": 2, "num_heads": 2,
            "mlp_ratio": 2.0}


def layers_config(w: Path, out: Path, **over) -> dict:
    doc = {"name": "bat", "output": str(out),
           "model": {"model": "rdx_vit", "checkpoint": str(out / "vit.pt")},
           "train": {"dataset": "digits", "per_class": 5, "test_split": None, "epochs": 1,
                     "arch": TINY_VIT},
           "data": {"dataset": "digits", "n_images": 60, "n_probe": 40},
           "rdx": {"n_explanations": 2, "grid_size": 4},
           "probes": {"knn_k": 5}, "stats": {"n_permutations": 19},
           "patching": {"k": 3}, "chance_draws": 0, "device": "cpu",
           "cache_dir": str(out / "cache")}
    from rdx.experiments.config import deep_merge
    return deep_merge(doc, over)


def build_world(w: Path, log) -> None:
    """The valid inputs every case starts from, and the finished outputs some read."""
    r = np.random.default_rng(0)
    A = r.standard_normal((N, 6)).astype(np.float32)
    B = (A[:, :5] + 0.3 * r.standard_normal((N, 5))).astype(np.float32)
    _save(w / "A.npy", A)
    _save(w / "B.npy", B)
    _save(w / "A64.npy", A.astype(np.float64))
    _save(w / "y.npy", np.arange(N) % 3)
    _save(w / "img.npy", r.random((N, 8, 8, 3)).astype(np.float32))
    np.savez(w / "AB.npz", a=A, b=np.pad(B, ((0, 0), (0, 1))))
    dA, dB, dy = _digits()
    _save(w / "dA.npy", dA)
    _save(w / "dB.npy", dB)
    _yaml(w / "toy.yaml", run_config(w))
    _yaml(w / "models.yaml", MODELS)
    _yaml(w / "datasets.yaml", DATASETS)
    (w / "empty").mkdir()
    # a consistency root: 2 datasets × 4 models, one measure
    from rdx.similarity.matrix import SimilarityMatrix

    ids = ["m0", "m1", "m2", "m3"]
    for k, ds in enumerate(("d1", "d2")):
        S = np.eye(4) + 0.1 * (k + 1) * np.add.outer(np.arange(4), np.arange(4)) / 6
        (w / "sim" / "matrices" / ds).mkdir(parents=True)
        SimilarityMatrix(values=S, model_ids=ids, measure="cka_linear", n_images=50,
                         meta={"categories": {"objective": dict(zip(ids, "aabb"))}}).save(
            w / "sim" / "matrices" / ds / "cka_linear")
    # outputs other commands read: a checkpoint, a finished run, an explained comparison
    steps = [
        ["train", "--preset", "digits", "--per-class", "8", "--epochs", "1", "--out",
         str(w / "ck"), "--quiet"],
        ["run", "--config", str(w / "toy.yaml"), "--output-root", str(w / "finished"),
         "--quiet"],
        ["explain", str(w / "A.npy"), str(w / "B.npy"), "--labels", str(w / "y.npy"),
         "--images", str(w / "img.npy"), "--report", "--n-explanations", "2", "--out",
         str(w / "explained"), "--quiet"],
    ]
    for argv in steps:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "rdx", *argv], cwd=w, text=True,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=900)
        if done.returncode != 0:
            raise SystemExit(f"setting up the inputs: rdx {' '.join(argv)} failed:\n"
                             f"{done.stderr}")
        log(f"  rdx {argv[0]}: {time.perf_counter() - t0:.1f} s")
    ckpts = sorted((w / "ck" / "digits").glob("*.pt"))
    shutil.copy(ckpts[-1], w / "model.pt")
    if (p := Path(str(ckpts[-1]) + ".json")).exists():
        shutil.copy(p, w / "model.pt.json")
    # a CSV of image paths for rdx features (four PNGs)
    from PIL import Image

    (w / "pngs").mkdir()
    for i in range(4):
        Image.fromarray((r.random((16, 16, 3)) * 255).astype(np.uint8)).save(
            w / "pngs" / f"{i}.png")
    (w / "images.csv").write_text("path,label\n" + "".join(
        f"{w / 'pngs' / f'{i}.png'},{i % 2}\n" for i in range(4)))


# ----------------------------------------------------------------- base command lines

def base(command: str, c: Ctx, out: Arg | None = None) -> list[Arg]:
    """A valid command line of ``command`` writing to ``out`` (default: the case's output)."""
    w = c.w
    o = c.out if out is None else out
    if command == "explain":
        return [w / "A.npy", w / "B.npy", "--out", o, "--quiet", "--n-explanations", "2"]
    if command == "similarity":
        return [w / "A.npy", w / "B.npy", "--measure", "cka_linear", "--quiet", "--out",
                o if out is not None else c.out / "s.json"]
    if command == "run":
        return ["--config", w / "toy.yaml", "--output-root", o, "--quiet", "--no-report"]
    if command == "train":
        return ["--preset", "digits", "--per-class", "5", "--epochs", "1", "--out", o,
                "--quiet"]
    if command == "dynamics":
        return ["--config", c.inp / "dyn.yaml", "--out", o, "--quiet", "--no-train"]
    if command == "layers":
        # --check: the study trains a model (minutes); its checks are what is tried here
        return ["--config", c.inp / "layers.yaml", "--out", o, "--check"]
    if command in ("matrix", "probe"):
        extra = ["--epochs", "1", "--seeds", "0", "--lrs", "0.1"] if command == "probe" else []
        return ["--models", w / "models.yaml", "--datasets", w / "datasets.yaml", "--out", o,
                "--cache-dir", c.out / "cache", "--quiet", *extra]
    if command == "consistency":
        return ["--root", w / "sim", "--out", o, "--quiet", "--no-plots", "--probes", "none"]
    if command == "features":
        return [w / "model.pt", w / "images.csv", "--out",
                o if out is not None else c.out / "f.npz", "--quiet", "--device", "cpu"]
    if command == "report":
        return [c.out / "toy", "--quiet"]
    if command == "explore":
        return [c.out / "comp", "--out", o if out is not None else c.out / "e.html",
                "--embedding", "pca", "--quiet"]
    if command == "benchmark":
        return ["--quick", "--out", o, "--checkpoints", c.out / "ck", "--quiet",
                "--data-root", w / "empty"]
    raise KeyError(command)


def prepare_base(command: str) -> Callable[[Ctx], None] | None:
    """What a command's valid line needs in the case's folder."""
    def dyn(c: Ctx) -> None:
        c.inp.mkdir(exist_ok=True)
        _yaml(c.inp / "dyn.yaml", dynamics_config(c.w, c.out))

    def lay(c: Ctx) -> None:
        c.inp.mkdir(exist_ok=True)
        _yaml(c.inp / "layers.yaml", layers_config(c.w, c.out))

    def report(c: Ctx) -> None:
        shutil.copytree(c.w / "finished" / "toy", c.out / "toy")

    def explore(c: Ctx) -> None:
        shutil.copytree(c.w / "explained", c.out / "comp")

    return {"dynamics": dyn, "layers": lay, "report": report, "explore": explore}.get(command)


def chain(*steps: Callable[[Ctx], None] | None) -> Callable[[Ctx], None]:
    def run(c: Ctx) -> None:
        for s in steps:
            if s is not None:
                s(c)
    return run


def replace(argv: list[Arg], flag: str, value: Arg) -> list[Arg]:
    """``argv`` with the value after ``flag`` replaced (or ``flag value`` added)."""
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


def drop(argv: list[Arg], flag: str, n: int = 1) -> list[Arg]:
    argv = list(argv)
    if flag in argv:
        i = argv.index(flag)
        del argv[i:i + 1 + n]
    return argv


# ------------------------------------------------------------------ Hypothesis draws

def draw(strategy, n: int, seed: int) -> list:
    """``n`` distinct values of a Hypothesis strategy, the same for the same seed."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    found: list = []

    @hseed(seed)
    @settings(max_examples=max(4 * n, 20), database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x) -> None:
        if len(found) < n and not any(_same(x, y) for y in found):
            found.append(x)

    collect()
    return found


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def text_values(n: int, seed: int) -> list[str]:
    from hypothesis import strategies as st

    alphabet = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")
    return draw(st.text(alphabet, max_size=12), n, seed)


def int_values(n: int, seed: int) -> list[int]:
    from hypothesis import strategies as st

    return draw(st.one_of(st.integers(-2**70, 2**70), st.sampled_from(
        [0, -1, 1, 2**31, 2**63 - 1, -2**63, 2**64])), n, seed)


def float_values(n: int, seed: int) -> list[float]:
    from hypothesis import strategies as st

    return draw(st.one_of(st.floats(), st.sampled_from(
        [float("nan"), float("inf"), -0.0, 5e-324, 1.7976931348623157e308])), n, seed)


def fmt(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


# ============================================================================ classes

#: (command, output option) pairs: every option that names where a command writes
OUT_OPTIONS = [("explain", "--out"), ("similarity", "--out"), ("run", "--output-root"),
               ("train", "--out"), ("dynamics", "--out"), ("layers", "--out"),
               ("matrix", "--out"), ("matrix", "--cache-dir"), ("probe", "--out"),
               ("probe", "--cache-dir"), ("consistency", "--out"), ("features", "--out"),
               ("explore", "--out"), ("benchmark", "--out"), ("benchmark", "--checkpoints")]
FILE_OUTS = {("similarity", "--out"), ("features", "--out"), ("explore", "--out")}


def overlap_cases() -> list[Case]:
    cases: list[Case] = []

    def npz_in(c: Ctx, name: str = "representations.npz") -> Path:
        c.inp.mkdir(parents=True, exist_ok=True)
        shutil.copy(c.w / "AB.npz", c.inp / name)
        return c.inp / name

    def add(command, name, argv, prepare=None, must=True, inputs=None, out=None):
        cases.append(Case("overlap", command, name, argv,
                          chain(prepare_base(command), prepare), must_refuse=must,
                          inputs=inputs, out_root=out))

    # explain: reads RUN/representations.npz:a/:b and writes RUN/representations.npz
    def expl(out_of, a="representations.npz:a", b="representations.npz:b", report=True):
        def argv(c: Ctx) -> list[Arg]:
            return [c.inp / a, c.inp / b, "--out", out_of(c), "--quiet", "--n-explanations",
                    "2", *(["--report"] if report else [])]
        return argv

    add("explain", "own_folder", expl(lambda c: c.inp), npz_in, must=False,
        out=lambda c: c.inp)
    add("explain", "own_folder_symlink", expl(lambda c: c.d / "link"),
        lambda c: (npz_in(c), os.symlink(c.inp, c.d / "link")), must=False,
        out=lambda c: c.inp)
    add("explain", "own_folder_trailing_dots", expl(lambda c: c.inp / "sub" / ".."),
        lambda c: (npz_in(c), (c.inp / "sub").mkdir()), must=False,
        out=lambda c: c.inp)
    add("explain", "own_folder_relative", lambda c: [
        "../in/representations.npz:a", "../in/representations.npz:b", "--out", "../in",
        "--quiet", "--report"], npz_in, must=False,
        out=lambda c: c.inp)
    add("explain", "own_folder_dot", lambda c: [
        "representations.npz:a", "representations.npz:b", "--out", ".", "--quiet",
        "--report"], lambda c: (npz_in(c), c.cwd.rmdir(), os.symlink(c.inp, c.cwd)), must=False,
        out=lambda c: c.inp)
    add("explain", "labels_named_like_output", lambda c: [
        c.w / "A.npy", c.w / "B.npy", "--labels", c.inp / "explanations.json", "--out",
        c.inp, "--quiet"],
        lambda c: (c.inp.mkdir(exist_ok=True), shutil.copy(c.w / "y.npy", c.inp / "explanations.json")), must=False,
        out=lambda c: c.inp)
    add("explain", "images_named_like_report", lambda c: [
        c.w / "A.npy", c.w / "B.npy", "--images", c.inp / "images.npy", "--report", "--out",
        c.inp, "--quiet"],
        lambda c: (c.inp.mkdir(exist_ok=True), shutil.copy(c.w / "img.npy", c.inp / "images.npy")), must=False,
        out=lambda c: c.inp)
    add("explain", "out_is_input_file", lambda c: base("explain", c, c.w / "A.npy"))
    add("explain", "out_is_hardlink_of_input", lambda c: [
        c.inp / "A.npy", c.w / "B.npy", "--out", c.d / "hl", "--quiet"],
        lambda c: (c.inp.mkdir(exist_ok=True), shutil.copy(c.w / "A.npy", c.inp / "A.npy"),
                   os.link(c.inp / "A.npy", c.d / "hl")))
    # similarity writes one JSON file
    for name, target in (("direct", lambda c: c.inp / "A.npy"),
                         ("symlink", lambda c: c.d / "lnk.json"),
                         ("hardlink", lambda c: c.d / "hard.json"),
                         ("dotdot", lambda c: c.inp / "x" / ".." / "A.npy"),
                         ("linked_folder", lambda c: c.d / "lf" / "A.npy"),
                         ("relative", lambda c: "../in/A.npy")):
        def prep(c: Ctx) -> None:
            c.inp.mkdir(exist_ok=True)
            shutil.copy(c.w / "A.npy", c.inp / "A.npy")
            (c.inp / "x").mkdir()
            os.symlink(c.inp / "A.npy", c.d / "lnk.json")
            os.link(c.inp / "A.npy", c.d / "hard.json")
            os.symlink(c.inp, c.d / "lf")
        add("similarity", name, lambda c, t=target: [
            c.inp / "A.npy", c.w / "B.npy", "--measure", "cka_linear", "--quiet", "--out",
            t(c)], prep)
        add("similarity", name + "_is_B", lambda c, t=target: [
            c.w / "B.npy", c.inp / "A.npy", "--measure", "rsa", "--quiet", "--out", t(c)], prep)
    # features writes FILE and FILE.json: the model and the CSV are inputs
    def feat_in(c: Ctx) -> None:
        c.inp.mkdir(exist_ok=True)
        shutil.copy(c.w / "model.pt", c.inp / "model.pt")
        shutil.copy(c.w / "images.csv", c.inp / "images.csv")
        os.symlink(c.inp / "model.pt", c.d / "m.npz")
        os.link(c.inp / "images.csv", c.d / "h.npz")
        os.symlink(c.inp / "images.csv", c.d / "side.npz.json")

    for name, target in (("model_link", lambda c: c.d / "m.npz"),
                         ("csv_hardlink", lambda c: c.d / "h.npz"),
                         ("sidecar_link", lambda c: c.d / "side.npz"),
                         ("model_direct", lambda c: c.inp / "model.pt")):
        add("features", name, lambda c, t=target: [
            c.inp / "model.pt", c.inp / "images.csv", "--out", t(c), "--quiet", "--device",
            "cpu"], feat_in)
    # run: inputs where the run writes (its comparison folder, its run.json)
    for name, rel in (("features_in_comparison", "toy/c1/representations.npz"),
                      ("features_as_method_file", "toy/c1/km/explanations.json"),
                      ("features_as_run_json", "toy/run.json")):
        def prep(c: Ctx, rel=rel) -> None:
            target = c.out / rel
            target.parent.mkdir(parents=True)
            np.save(c.d / "tmp.npy", np.load(c.w / "dA.npy"))
            shutil.move(c.d / "tmp.npy", target)
            _yaml(c.inp / "toy.yaml", run_config(c.w, base={"representations": {
                "a": {"features": str(target)}}}))
        add("run", name, lambda c: ["--config", c.inp / "toy.yaml", "--output-root", c.out,
                                    "--quiet"], lambda c, p=prep: (c.inp.mkdir(exist_ok=True), p(c)),
            must=False, inputs=lambda c, rel=rel: [c.out / rel])
    for name, rel in (("config_as_run_json", "toy/run.json"),
                      ("config_as_index", "toy/index.html"),
                      ("config_in_analysis", "toy/analysis/summary.json")):
        def prep(c: Ctx, rel=rel) -> None:
            (c.out / rel).parent.mkdir(parents=True)
            _yaml(c.out / rel, run_config(c.w))
        add("run", name, lambda c, rel=rel: ["--config", c.out / rel, "--output-root", c.out,
                                             "--quiet"], prep, must=False)
    # matrix / probe: a config where the study writes its run.json or probes.csv
    for command, rel in (("matrix", "run.json"), ("matrix", "report.html"),
                         ("probe", "probes/probes.csv")):
        def prep(c: Ctx, rel=rel) -> None:
            (c.out / rel).parent.mkdir(parents=True)
            _yaml(c.out / rel, MODELS)

        add(command, "models_at_" + rel.replace("/", "_"), lambda c, rel=rel, command=command:
            replace(base(command, c), "--models", c.out / rel), prep, must=False)
        if rel != "report.html":   # once per command
            add(command, "out_is_models_file", lambda c, command=command: replace(
                base(command, c), "--out", c.w / "models.yaml"))
    # dynamics / layers: the config inside the output where the study writes
    add("dynamics", "config_as_dynamics_json", lambda c: [
        "--config", c.out / "dynamics.json", "--out", c.out, "--quiet", "--no-train"],
        lambda c: (c.out.mkdir(), _yaml(c.out / "dynamics.json", dynamics_config(c.w, c.out))),
        must=False)
    add("dynamics", "output_is_checkpoint_dir", lambda c: [
        "--config", c.inp / "dyn.yaml", "--out", c.inp / "ck", "--quiet", "--no-train"],
        lambda c: (shutil.copytree(c.w / "ck" / "digits", c.inp / "ck"), _yaml(
            c.inp / "dyn.yaml", {**dynamics_config(c.w, c.out),
                                 "checkpoints": {"dir": str(c.inp / "ck")}})), must=False,
        out=lambda c: c.inp / "ck")
    add("layers", "config_as_layers_json", lambda c: [
        "--config", c.out / "layers.json", "--out", c.out, "--quiet"],
        lambda c: (c.out.mkdir(), _yaml(c.out / "layers.json", layers_config(c.w, c.out))),
        must=False)
    add("layers", "out_is_config_file", lambda c: [
        "--config", c.inp / "layers.yaml", "--out", c.inp / "layers.yaml", "--quiet"])
    # consistency: an output file of the matrices, the root's matrices as output
    add("consistency", "out_is_matrix_file", lambda c: replace(
        base("consistency", c), "--out", c.inp / "sim" / "matrices" / "d1" / "cka_linear.json")
        + [], lambda c: shutil.copytree(c.w / "sim", c.inp / "sim"))
    # explore: the page onto a file of the comparison it shows
    for name in ("rdx/explanations.json", "report.html", "images.json",
                 "representations.npz"):
        add("explore", "page_is_" + name.replace("/", "_"), lambda c, name=name: replace(
            base("explore", c), "--out", c.out / "comp" / name))
    add("explore", "page_via_link", lambda c: replace(base("explore", c), "--out",
                                                      c.out / "lnk.html"),
        lambda c: os.symlink(c.out / "comp" / "report.html", c.out / "lnk.html"),
        inputs=lambda c: [c.out / "comp" / "report.html"])
    # train / benchmark: the output is an input file
    add("train", "out_is_file", lambda c: base("train", c, c.w / "A.npy"))
    add("benchmark", "out_is_file", lambda c: base("benchmark", c, c.w / "A.npy"))
    add("benchmark", "checkpoints_is_file", lambda c: replace(
        base("benchmark", c), "--checkpoints", c.w / "A.npy"))
    add("report", "experiment_is_file", lambda c: [c.w / "A.npy"])
    return cases


DEGENERATE = {
    "empty": "", "space": " ", "newline": "out\n", "blank_component": "a/ /b",
    "long_name": "n" * 300, "long_path": "/".join(["d" * 60] * 80),
    "proc": "/proc/self/rdx_out", "undecodable": b"out\xff\xfe",
}


def outpath_cases() -> list[Case]:
    cases = []
    for command, flag in OUT_OPTIONS:
        for name, value in DEGENERATE.items():
            def argv(c: Ctx, command=command, flag=flag, value=value) -> list[Arg]:
                return replace(base(command, c), flag, value)
            # ".", "/" and the device files are refused by the file outputs only when they
            # cannot take a file; every other value here names no usable location
            cases.append(Case("outpath", command, f"{flag}={name}", argv,
                              prepare_base(command), must_refuse=True,
                              out_root=lambda c: c.cwd))
        # special files in the case's own folder as the output (a device node made here,
        # harmless to replace, stands for /dev/null)
        for name in ("fifo", "char_device"):
            def prep(c: Ctx, command=command, name=name) -> None:
                p = prepare_base(command)
                if p:
                    p(c)
                target = c.d / "special"
                if name == "fifo":
                    os.mkfifo(target)
                elif name == "socket":
                    sock = socket.socket(socket.AF_UNIX)
                    sock.bind(str(target))
                    sock.close()
                else:
                    os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 3))

            def argv(c: Ctx, command=command, flag=flag) -> list[Arg]:
                return replace(base(command, c), flag, c.d / "special")
            if name == "char_device" and os.getuid() != 0:
                continue   # mknod of a device needs root
            # the output's folder is the case's own (a page's cache goes next to it)
            cases.append(Case("outpath", command, f"{flag}={name}", argv, prep,
                              must_refuse=True, timeout=90, out_root=lambda c: c.d))
    return cases


def _specials(c: Ctx) -> None:
    s = c.d / "sp"
    s.mkdir()
    os.mkfifo(s / "fifo")
    os.mkfifo(s / "fifo.npz")
    os.mkfifo(s / "fifo.yaml")
    os.mkfifo(s / "fifo.csv")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(s / "sock"))
    sock.close()
    os.symlink(s / "nothing", s / "dangling")
    os.symlink(s / "loop2", s / "loop1")
    os.symlink(s / "loop1", s / "loop2")
    os.symlink(s / "fifo", s / "to_fifo.npy")
    (s / "dir.npy").mkdir()


SPECIAL = {"fifo": lambda c: c.d / "sp" / "fifo", "fifo_npz": lambda c: c.d / "sp" / "fifo.npz",
           "fifo_key": lambda c: f"{c.d / 'sp' / 'fifo.npz'}:a",
           "link_to_fifo": lambda c: c.d / "sp" / "to_fifo.npy",
           "dev_zero": lambda c: "/dev/zero", "dev_null": lambda c: "/dev/null",
           "dev_urandom": lambda c: "/dev/urandom", "socket": lambda c: c.d / "sp" / "sock",
           "dangling": lambda c: c.d / "sp" / "dangling", "loop": lambda c: c.d / "sp" / "loop1",
           "folder": lambda c: c.d / "sp" / "dir.npy", "proc_file": lambda c: "/proc/self/stat",
           "fifo_yaml": lambda c: c.d / "sp" / "fifo.yaml", "fifo_csv": lambda c: c.d / "sp" / "fifo.csv"}

#: (command, how to put the special file into the line, the kinds to try)
SPECIAL_SLOTS = [
    ("explain", lambda a, s: [s, *a[1:]], None),
    ("explain", lambda a, s: [a[0], s, *a[2:]], ("fifo", "dev_zero", "fifo_key", "socket")),
    ("explain", lambda a, s: a + ["--labels", s], None),
    ("explain", lambda a, s: a + ["--images", s], ("fifo", "dev_zero", "link_to_fifo",
                                                    "folder", "dev_urandom")),
    ("explain", lambda a, s: a + ["--significance", "2", "--control-b", s],
     ("fifo", "dev_zero", "socket")),
    ("explain", lambda a, s: a + ["--test-group", f"g={s}"],
     ("fifo", "dev_zero", "socket", "folder", "fifo_key")),
    ("similarity", lambda a, s: [s, *a[1:]], None),
    ("similarity", lambda a, s: [a[0], s, *a[2:]], ("fifo", "dev_zero", "fifo_key")),
    ("run", lambda a, s: replace(a, "--config", s), ("fifo_yaml", "dev_zero", "dev_null",
                                                     "socket", "folder", "loop", "proc_file")),
    ("dynamics", lambda a, s: replace(a, "--config", s), ("fifo_yaml", "dev_zero", "folder")),
    ("layers", lambda a, s: replace(a, "--config", s), ("fifo_yaml", "dev_zero", "folder")),
    ("matrix", lambda a, s: replace(a, "--models", s), ("fifo_yaml", "dev_zero", "folder")),
    ("matrix", lambda a, s: replace(a, "--datasets", s), ("fifo_yaml", "dev_urandom")),
    ("probe", lambda a, s: replace(a, "--datasets", s), ("fifo_yaml", "dev_zero")),
    ("consistency", lambda a, s: replace(a, "--root", s), ("fifo", "dev_zero", "socket")),
    ("consistency", lambda a, s: a + ["--models", s, "--datasets", s], ("fifo_yaml",
                                                                        "dev_zero")),
    ("features", lambda a, s: [s, *a[1:]], ("fifo", "dev_zero", "socket", "folder",
                                             "dangling")),
    ("features", lambda a, s: [a[0], s, *a[2:]], ("fifo_csv", "dev_zero", "socket",
                                                   "dangling", "proc_file")),
    ("features", lambda a, s: a + ["--checkpoint", s], ("fifo", "dev_zero")),
    ("report", lambda a, s: [s, *a[1:]], ("fifo", "dev_zero", "socket")),
    ("explore", lambda a, s: [s, *a[1:]], ("fifo", "dev_zero", "socket")),
    # (a preset that reads the data root: digits comes with scikit-learn and ignores it)
    ("train", lambda a, s: replace(replace(a, "--data-root", s), "--preset", "mnist_835"),
     ("fifo", "dev_zero")),
]


def _fifo_sources(c: Ctx) -> None:
    """An image folder and a CSV whose images include a named pipe and /dev/zero."""
    (c.inp / "imgs").mkdir(parents=True)
    for i in range(3):
        shutil.copy(c.w / "pngs" / f"{i}.png", c.inp / "imgs" / f"{i}.png")
    os.mkfifo(c.inp / "imgs" / "3.png")
    (c.inp / "fifo.csv").write_text(f"path\n{c.w / 'pngs' / '0.png'}\n{c.inp / 'imgs' / '3.png'}\n")
    (c.inp / "zero.csv").write_text(f"path\n{c.w / 'pngs' / '0.png'}\n/dev/zero\n")


def special_cases() -> list[Case]:
    cases = []
    for name, src in (("folder_with_fifo", lambda c: c.inp / "imgs"),
                      ("csv_with_fifo", lambda c: c.inp / "fifo.csv"),
                      ("csv_with_dev_zero", lambda c: c.inp / "zero.csv")):
        # a folder's images are its regular files (a pipe among them is passed over, like
        # any other file that is not an image); a CSV names each image: it must be read
        cases.append(Case("special", "features", f"source={name}", lambda c, s=src: [
            c.w / "model.pt", s(c), *base("features", c)[2:]], _fifo_sources,
            must_refuse=name != "folder_with_fifo", timeout=90))
    for i, (command, put, kinds) in enumerate(SPECIAL_SLOTS):
        for kind in kinds or ("fifo", "fifo_npz", "link_to_fifo", "dev_zero", "dev_null",
                              "socket", "dangling", "loop", "folder", "proc_file"):
            def argv(c: Ctx, command=command, put=put, kind=kind) -> list[Arg]:
                return put(base(command, c), SPECIAL[kind](c))
            cases.append(Case("special", command, f"slot{i}={kind}", argv,
                              chain(prepare_base(command), _specials), must_refuse=True,
                              timeout=90))
    return cases


def budget_cases(seed: int) -> list[Case]:
    from hypothesis import strategies as st

    # one drawn value past every ceiling (the last of a few: the first is the smallest)
    huge = draw(st.integers(10**7, 2**63 - 1), 4, seed)[-1:]
    cases = []
    options = {
        "explain": ["--n-explanations", "--grid-size", "--significance", "--n-neighbors",
                    "--landmarks", "--param n_epochs", "--param n_init",
                    "--param max_iter", "--param n_features", "--param n_latents",
                    "--param n_components", "--param batch_size", "--param n_clusters"],
        "similarity": ["--permutations", "--bootstrap", "--knn"],
        "train": ["--epochs", "--per-class", "--save-every"],
        "probe": ["--epochs", "--probe-batch-size", "--max-train", "--max-test",
                  "--batch-size", "--num-workers"],
        "matrix": ["--max-images", "--batch-size", "--num-workers"],
        "explore": ["--k", "--neighborhood-size", "--max-mb", "--selection-mb",
                    "--thumb-size"],
        "features": ["--per-class", "--batch-size", "--chunk-size", "--workers"],
        "benchmark": ["--n-null"],
        "consistency": ["--min-pairs"],
        "dynamics": ["--grids-at"],
    }
    methods = {"n_epochs": "sae", "n_init": "kmeans", "max_iter": "cnmf",
               "n_features": "spec", "n_latents": "topk_sae", "n_components": "pca",
               "batch_size": "sae", "n_clusters": "kmeans"}
    for command, opts in options.items():
        for opt in opts:
            for v in huge:
                def argv(c: Ctx, command=command, opt=opt, v=v) -> list[Arg]:
                    a = base(command, c)
                    if opt.startswith("--param "):
                        key = opt.split()[1]
                        return a + ["--method", methods[key], "--param", f"{key}={v}"]
                    if opt == "--save-every":
                        return a + [opt, f"epoch,0,{v}"]
                    if command == "probe" and opt == "--epochs":
                        return replace(a, opt, str(v))
                    return a + [opt, str(v)]
                cases.append(Case("budget", command, f"{opt.replace(' ', ':')}={v}", argv,
                                  prepare_base(command), timeout=120))
    # keys of configs that multiply work
    cfg_keys = {
        "run": [("base.methods", lambda v: [{"method": "rdx", "n_explanations": v}]),
                ("base.methods", lambda v: [{"method": "rdx", "grid_size": v}]),
                ("base.methods", lambda v: [{"method": "kmeans", "n_init": v}]),
                ("base.image_selection.num_images", lambda v: v),
                ("base.chance_draws", lambda v: v)],
        "dynamics": [("rdx.n_clusters", lambda v: v), ("probe.num_images", lambda v: v),
                     ("train.epochs", lambda v: v)],
        "layers": [("train.epochs", lambda v: v), ("stats.n_permutations", lambda v: v),
                   ("patching.k", lambda v: v), ("data.n_images", lambda v: v),
                   ("train.per_class", lambda v: v)],
    }
    for command, keys in cfg_keys.items():
        for i, (key, make) in enumerate(keys):
            v = huge[0]

            def prep(c: Ctx, command=command, key=key, make=make, v=v) -> None:
                doc: dict = {}
                node = doc
                parts = key.split(".")
                for p in parts[:-1]:
                    node = node.setdefault(p, {})
                node[parts[-1]] = make(v)
                c.inp.mkdir(exist_ok=True)
                if command == "run":
                    _yaml(c.inp / "toy.yaml", run_config(c.w, **doc))
                elif command == "dynamics":
                    from rdx.experiments.config import deep_merge
                    _yaml(c.inp / "dyn.yaml", deep_merge(dynamics_config(c.w, c.out), doc))
                else:
                    _yaml(c.inp / "layers.yaml", layers_config(c.w, c.out, **doc))

            def argv(c: Ctx, command=command) -> list[Arg]:
                a = base(command, c)
                if command == "run":
                    return replace(a, "--config", c.inp / "toy.yaml")
                if command == "dynamics":
                    return drop(a, "--no-train", 0)
                return drop(a, "--check", 0)
            cases.append(Case("budget", command, f"{i}:{key}={v}", argv, prep, timeout=120))
    # labels whose values would size an allocation
    for v in (2**40, 2**62, -2**63):
        def prep(c: Ctx, v=v) -> None:
            c.inp.mkdir(exist_ok=True)
            np.save(c.inp / "y.npy", np.where(np.arange(N) % 2 == 0, v, 1).astype(np.int64))
        for extra in ([], ["--guidance", "ground_truth"], ["--report"]):
            cases.append(Case("budget", "explain", f"labels={v}{''.join(extra)}",
                              lambda c, e=extra: base("explain", c) + [
                                  "--labels", c.inp / "y.npy", *e], prep))
    return cases


def nan_cases(seed: int) -> list[Case]:
    specials = ["nan", "inf", "-inf", "0", "-1", "5e-324"]
    cases = []
    floats = {"explain": ["--gamma", "--beta", "--gamma-scale", "--guidance-scale",
                          "--filter-threshold"],
              "similarity": ["--sigma"], "probe": ["--holdout", "--lrs"],
              "explore": ["--max-mb", "--selection-mb"]}
    for command, opts in floats.items():
        for opt in opts:
            for v in specials:
                def argv(c: Ctx, command=command, opt=opt, v=v) -> list[Arg]:
                    a = base(command, c)
                    if opt == "--guidance-scale":
                        a += ["--labels", c.w / "y.npy", "--guidance", "ground_truth"]
                    if opt == "--sigma":
                        a = replace(a, "--measure", "cka_rbf")
                    return replace(a, opt, v)
                cases.append(Case("nan", command, f"{opt}={v}", argv, prepare_base(command)))
    # a method's floats through --param and config YAML
    for method, key in (("rdx", "gamma"), ("spec", "gamma"), ("nmf", "alpha"),
                        ("sae", "lr")):
        for v in (".nan", ".inf", "1e308"):
            cases.append(Case("nan", "explain", f"{method}:{key}={v}", lambda c, m=method,
                              k=key, v=v: base("explain", c) + ["--method", m, "--param",
                                                                f"{k}={v}"]))
            cases.append(Case("nan", "run", f"{method}:{key}={v}", lambda c: replace(
                base("run", c), "--config", c.inp / "toy.yaml"),
                lambda c, m=method, k=key, v=v: (c.inp.mkdir(exist_ok=True), (c.inp / "toy.yaml").write_text(
                    (c.w / "toy.yaml").read_text().replace(
                        "- method: kmeans", f"- method: {m}\n    {k}: {v}")))))
    # degenerate data: each gives a result only if it is a real one
    data = {
        "identical": lambda A: A, "two_points": lambda A: np.repeat(A[:2], N // 2, axis=0),
        "rank_one": lambda A: np.outer(np.arange(N), A[0]).astype(np.float32),
        "one_column": lambda A: A[:, :1], "duplicated_rows": lambda A: np.repeat(
            A[: N // 4], 4, axis=0),
        "one_outlier": lambda A: np.vstack([np.zeros((N - 1, A.shape[1]), np.float32),
                                            A[:1] * 1e6]),
        "tiny_spread": lambda A: (1 + 1e-6 * A).astype(np.float32),
    }
    for name, make in data.items():
        def prep(c: Ctx, make=make) -> None:
            c.inp.mkdir(exist_ok=True)
            np.save(c.inp / "X.npy", make(np.load(c.w / "A.npy")))
        for command, extra in (("explain", ["--allow-identical"]),
                               ("similarity", ["--allow-identical"]),
                               ("explain", ["--method", "pca", "--allow-identical"])):
            def argv(c: Ctx, command=command, extra=extra) -> list[Arg]:
                a = base(command, c)
                a[1] = c.inp / "X.npy"
                if command == "similarity":
                    a = replace(a, "--measure", "rsa") + ["--measure", "cka_linear",
                                                          "--measure", "mutual_knn"]
                return a + extra
            cases.append(Case("nan", command, f"data={name}{''.join(extra[:2])}", argv, prep))
    return cases


def odd_arrays(A: np.ndarray) -> dict[str, Callable[[Path], None]]:
    """name → writer of an odd .npy holding A's values (or shape) another way."""
    def save(arr, **kw):
        return lambda p: np.save(p, arr, **kw)

    def memmap(p: Path) -> None:
        m = np.lib.format.open_memmap(p, mode="w+", dtype=np.float32, shape=A.shape)
        m[:] = A
        m.flush()
        del m

    S = np.zeros(len(A), dtype=[("x", "f4"), ("y", "f4")])
    return {
        "subnormal": save(A.astype(np.float64) * 1e-310),
        "huge_finite": save(A.astype(np.float64) * 1e300),
        "float32_max": save(np.where(A > 0, 3.4e38, -3.4e38).astype(np.float32)),
        "float16": save(A.astype(np.float16)), "longdouble": save(A.astype(np.longdouble)),
        "int64_extremes": save(np.where(A > 0, np.iinfo(np.int64).max,
                                        np.iinfo(np.int64).min)),
        "uint64_max": save(np.where(A > 0, np.uint64(np.iinfo(np.uint64).max),
                                         np.uint64(0))),
        "int8": save((A * 10).astype(np.int8)), "bool": save(A > 0),
        "complex": save(A.astype(np.complex64) * 1j + A),
        "complex_real": save(A.astype(np.complex128)),
        "structured": save(S), "object": save(np.array([A[0], "x"], dtype=object),
                                              allow_pickle=True),
        "string": save(A.astype(str)), "bytes": save(A.astype("S8")),
        "datetime": save(np.zeros(A.shape, dtype="datetime64[s]")),
        "timedelta": save(np.ones(A.shape, dtype="timedelta64[s]")),
        "zero_d": save(np.float32(1.5)), "one_d": save(A[:, 0]),
        "three_d": save(A.reshape(len(A), 2, -1)), "four_d": save(A.reshape(len(A), 1, 2, -1)),
        "zero_cols": save(np.zeros((len(A), 0), np.float32)),
        "fortran": save(np.asfortranarray(A)), "memmap": memmap,
        "big_endian": save(A.astype(">f8")), "nan_one": save(np.where(
            np.arange(len(A))[:, None] == 3, np.nan, A)),
    }


def numeric_cases() -> list[Case]:
    cases = []
    A = np.random.default_rng(1).standard_normal((N, 6)).astype(np.float32)
    arrays = odd_arrays(A)
    y = np.arange(N) % 3
    labels = {"float_nan": np.where(y == 1, np.nan, y.astype(float)), "bool": y == 1,
              "complex": y.astype(complex), "int64_extremes": np.array(
                  [np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max])[y],
              "uint64_max": np.array([0, 1, np.iinfo(np.uint64).max], np.uint64)[y],
              "float16": y.astype(np.float16), "structured": np.zeros(N, [("a", "i4")]),
              "zero_d": np.int64(1), "strings": np.array(["a", "b", ""])[y],
              "datetime": np.zeros(N, "datetime64[D]"), "fortran_2col": np.asfortranarray(
                  np.stack([y, y], 1)), "negative": y - 5, "huge_float": y * 1e300}
    feature_slots = [("explain", 0), ("similarity", 1), ("explain-control", None)]
    for name, write in arrays.items():
        for command, slot in feature_slots:
            def prep(c: Ctx, write=write) -> None:
                c.inp.mkdir(exist_ok=True)
                write(c.inp / "X.npy")

            def argv(c: Ctx, command=command, slot=slot) -> list[Arg]:
                if command == "explain-control":
                    return base("explain", c) + ["--significance", "2", "--control-b",
                                                 c.inp / "X.npy"]
                a = base(command, c)
                a[slot] = c.inp / "X.npy"
                if command == "similarity":
                    a += ["--measure", "cka_rbf", "--measure", "rsa"]
                return a
            forbid = ("constant",) if name == "subnormal" else \
                ("NaN/inf", "nan or inf") if name in ("huge_finite", "int64_extremes",
                                                      "uint64_max") else ()
            cases.append(Case("numeric", command.split("-")[0], f"{name}@{command}:{slot}",
                              argv, prep, forbid=forbid))
    for name, arr in labels.items():
        for extra in (["--guidance", "ground_truth"], ["--report"]):
            def prep(c: Ctx, arr=arr) -> None:
                c.inp.mkdir(exist_ok=True)
                np.save(c.inp / "y.npy", arr)
            cases.append(Case("numeric", "explain", f"labels={name}{''.join(extra)}",
                              lambda c, e=extra: base("explain", c) + [
                                  "--labels", c.inp / "y.npy", *e], prep))
        # the same odd arrays as a named group of images (indices or a mask)
        cases.append(Case("numeric", "explain", f"test_group={name}",
                          lambda c: base("explain", c) + ["--test-group",
                                                          f"g={c.inp / 'y.npy'}"], prep))
    images = {"uint16": lambda: (np.random.default_rng(0).random((N, 8, 8)) * 65535).astype(
        np.uint16), "bool": lambda: np.random.default_rng(0).random((N, 8, 8)) > 0.5,
        "nan": lambda: np.full((N, 8, 8), np.nan, np.float32),
        "huge": lambda: np.full((N, 8, 8, 3), 1e300), "negative": lambda: -np.ones(
            (N, 4, 4, 3), np.float32), "complex": lambda: np.ones((N, 4, 4), complex),
        "one_pixel": lambda: np.ones((N, 1, 1), np.float32), "five_d": lambda: np.ones(
            (N, 2, 2, 2, 3), np.float32), "wrong_n": lambda: np.ones((N - 1, 4, 4), np.float32),
        "object": lambda: np.array([None] * N, dtype=object)}
    for name, make in images.items():
        def prep(c: Ctx, make=make) -> None:
            c.inp.mkdir(exist_ok=True)
            np.save(c.inp / "img.npy", make(), allow_pickle=True)
        cases.append(Case("numeric", "explain", f"images={name}", lambda c: base(
            "explain", c) + ["--images", c.inp / "img.npy", "--report"], prep))
    return cases


def parsed_cases(seed: int) -> list[Case]:
    """Values the parser accepts, drawn over each option's whole type."""
    ints = {"explain": ["--n-explanations", "--grid-size", "--seed", "--n-neighbors",
                        "--landmarks", "--significance"],
            "similarity": ["--seed", "--knn", "--permutations", "--bootstrap"],
            "train": ["--seed", "--per-class", "--epochs"],
            "explore": ["--k", "--neighborhood-size", "--seed"],
            "features": ["--chunk-size", "--workers", "--seed", "--per-class"],
            "probe": ["--seeds", "--probe-batch-size", "--epochs"],
            "matrix": ["--max-images", "--batch-size"],
            "consistency": ["--min-pairs"], "benchmark": ["--n-null"]}
    floats = {"explain": ["--gamma", "--beta", "--gamma-scale"],
              "similarity": ["--sigma"], "probe": ["--holdout"], "explore": ["--max-mb"]}
    texts = {"explain": ["--param", "--scheduler", "--guidance", "--test-classes",
                         "--test-group"],
             "train": ["--device", "--save-every", "--preset"],
             "run": ["--only"], "dynamics": ["--device", "--grids-at"],
             "layers": ["--device"], "explore": ["--thumb-size", "--graph-method"],
             "features": ["--layer", "--batch-size", "MODEL", "SOURCE"],
             "matrix": ["--measure", "--matrix-device", "--only-models", "--device"],
             "probe": ["--train-device", "--only-datasets"],
             "consistency": ["--category", "--anchors", "--probes", "--only-datasets",
                             "--measure"],
             "benchmark": ["--cases", "--methods"]}
    cases: list[Case] = []
    k = 0

    def add(command: str, opt: str, value: str) -> None:
        def argv(c: Ctx, command=command, opt=opt, value=value) -> list[Arg]:
            a = base(command, c)
            if opt == "MODEL":
                return [value, *a[1:]]
            if opt == "SOURCE":
                return [a[0], value, *a[2:]]
            if opt == "--param":
                return a + ["--method", "kmeans", "--param", f"n_init={value}"]
            if opt in ("--scheduler",):
                return a + ["--graph", "knn", "--executor", "dask", opt, value]
            if opt == "--guidance":
                return a + ["--labels", c.w / "y.npy", opt, value]
            if opt == "--preset":
                return replace(a, opt, value)
            return replace(a, opt, value)
        shown = value if len(value) < 30 else value[:27] + "..."
        cases.append(Case("parsed", command, f"{opt}={shown!r}", argv, prepare_base(command),
                          timeout=150))

    for command, opts in ints.items():
        for opt in opts:
            k += 1
            for v in int_values(2, seed + k):
                if command == "benchmark" and 0 < v < 10**6:
                    continue   # a valid count starts the whole quick suite: minutes
                add(command, opt, str(v))
    for command, opts in floats.items():
        for opt in opts:
            k += 1
            for v in float_values(2, seed + k):
                add(command, opt, fmt(v))
    for command, opts in texts.items():
        for opt in opts:
            k += 1
            for v in text_values(2, seed + k):
                if opt.startswith("-") and v.startswith("-"):
                    v = "x" + v    # argparse would take it for an option
                add(command, opt, v)
    return cases


SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}


def signal_cases(seed: int) -> list[Case]:
    rng = np.random.default_rng(seed)
    cases = []
    longer = {"similarity": ["--permutations", "300", "--bootstrap", "300"],
              "explain": ["--significance", "3"]}
    for command in ("explain", "similarity", "run", "train", "features", "explore",
                    "matrix", "probe", "consistency", "dynamics", "report"):
        for name, sig in SIGNALS.items():
            delay = float(rng.uniform(0.5, 4.0))
            cases.append(Case("signal", command, f"{name}@{delay:.2f}s", lambda c, m=command:
                              drop(base(m, c), "--no-plots", 0) + longer.get(m, []),
                              prepare_base(command), signal=(sig, delay), timeout=300))
    return cases


def unwritable_cases() -> list[Case]:
    cases = []
    # a read-only output folder (root ignores modes: these run as nobody)
    for command, flag in OUT_OPTIONS + [("report", None)]:
        def prep(c: Ctx, command=command) -> None:
            p = prepare_base(command)
            if p:
                p(c)
            (c.out / "ro").mkdir(parents=True)

        def argv(c: Ctx, command=command, flag=flag) -> list[Arg]:
            a = base(command, c)
            if flag is None:
                return [c.out / "toy", *a[1:]]
            ro = c.out / "ro"
            return replace(a, flag, ro / "f.json" if (command, flag) in FILE_OUTS and
                           command != "features" else ro / "f.npz" if command == "features"
                           else ro / "o")
        ro = (lambda c: [c.out / "toy"]) if command == "report" else (lambda c: [c.out / "ro"])
        cases.append(Case("unwritable", command, f"read_only:{flag}", argv, prep,
                          must_refuse=True, readonly=ro))
    # a full disk, as the writer sees it: RLIMIT_FSIZE
    for command in COMMANDS:
        if command == "benchmark":
            continue   # refused before it writes (no data): nothing to fill
        for limit in (0, 3000, 60000):
            cases.append(Case("unwritable", command, f"fsize={limit}", lambda c, m=command:
                              base(m, c) if m != "layers" else drop(base(m, c), "--check", 0),
                              prepare_base(command), fsize=limit, timeout=300))
        if os.getuid() == 0:   # mounting a small file system needs root
            for free in (4096, 65536):
                cases.append(Case("unwritable", command, f"full_disk={free}", lambda c, m=command:
                                  base(m, c) if m != "layers" else drop(base(m, c), "--check",
                                                                        0),
                                  chain(prepare_base(command), lambda c: c.out.mkdir(
                                      exist_ok=True)), full=(lambda c: c.out, free),
                                  timeout=300))
    # names the output's own files take
    reserved = ["run.json", "RUN.JSON", "index.html", "images.json", "representations.npz",
                "analysis", "cache", "report.html", "explore.html", "explanations.json"]
    for name in reserved:
        for where in ("method", "comparison", "experiment"):
            def prep(c: Ctx, name=name, where=where) -> None:
                c.inp.mkdir(exist_ok=True)
                over = {"method": {"base": {"methods": [{"method": "kmeans", "name": name,
                                                         "n_explanations": 2}]}},
                        "comparison": {"comparisons": [{"name": name}]},
                        "experiment": {"experiment": name}}[where]
                _yaml(c.inp / "toy.yaml", run_config(c.w, **over))
            cases.append(Case("unwritable", "run", f"{where}={name}", lambda c: replace(
                base("run", c), "--config", c.inp / "toy.yaml"), prep))
    for command, key, names in (("matrix", "models", ["run.json", "report.html", "subsets"]),
                                ("matrix", "datasets", ["run.json", "matrices", "report.html"]),
                                ("probe", "datasets", ["probes.csv", "probes"])):
        for name in names:
            def prep(c: Ctx, key=key, name=name) -> None:
                c.inp.mkdir(exist_ok=True)
                doc = {"models": MODELS, "datasets": DATASETS}[key]
                doc = json.loads(json.dumps(doc))
                doc[key][0]["id"] = name
                _yaml(c.inp / f"{key}.yaml", doc)
            cases.append(Case("unwritable", command, f"{key}_id={name}", lambda c, key=key,
                              m=command: replace(base(m, c), f"--{key}",
                                                 c.inp / f"{key}.yaml"), prep))
    for name in ("dynamics.json", "report.html", "checkpoints"):
        cases.append(Case("unwritable", "dynamics", f"name={name}", lambda c: base(
            "dynamics", c), lambda c, n=name: (c.inp.mkdir(exist_ok=True), _yaml(
                c.inp / "dyn.yaml", dynamics_config(c.w, c.out, name=n)))))
    # undecodable names (bytes that are not UTF-8 become lone surrogates in Python)
    bad = b"\xff\xfeoops"
    surrogate_lines = {
        "explain": lambda c: replace(base("explain", c), "--out", bytes(c.out) + b"/" + bad),
        "explain_input": lambda c: [bytes(c.inp) + b"/" + bad + b".npy",
                                    *base("explain", c)[1:]],
        "similarity": lambda c: replace(base("similarity", c), "--out",
                                        bytes(c.out) + b"/" + bad + b".json"),
        "run_only": lambda c: base("run", c) + ["--only", bad],
        "run_output_root": lambda c: replace(base("run", c), "--output-root", bad),
        "train_preset": lambda c: replace(base("train", c), "--preset", bad),
        "features_layer": lambda c: base("features", c) + ["--layer", bad],
        "features_out": lambda c: replace(base("features", c), "--out", bad + b".npz"),
        "explore_out": lambda c: replace(base("explore", c), "--out", bad + b".html"),
        "matrix_only": lambda c: base("matrix", c) + ["--only-models", bad],
        "consistency_anchor": lambda c: base("consistency", c) + ["--anchors", bad],
        "benchmark_cases": lambda c: base("benchmark", c) + ["--cases", bad],
        "dynamics_out": lambda c: replace(base("dynamics", c), "--out", bad),
        "layers_out": lambda c: replace(base("layers", c), "--out", bad),
        "probe_out": lambda c: replace(base("probe", c), "--out", bad),
        "report_dir": lambda c: [bad],
    }
    for name, argv in surrogate_lines.items():
        command = name.split("_")[0]

        def prep(c: Ctx, command=command, name=name) -> None:
            p = prepare_base(command)
            if p:
                p(c)
            if name == "explain_input":
                c.inp.mkdir(exist_ok=True)
                shutil.copy(c.w / "A.npy", bytes(c.inp) + b"/" + bad + b".npy")
        cases.append(Case("unwritable", command, f"undecodable:{name}", argv, prep,
                          out_root=lambda c: c.d))
    for where, text in (("comparison", '"c\\udcff"'), ("method", '"m\\udcff"'),
                        ("experiment", '"e\\udcff"')):
        def prep(c: Ctx, where=where, text=text) -> None:
            c.inp.mkdir(exist_ok=True)
            doc = (c.w / "toy.yaml").read_text()
            doc = {"comparison": doc.replace("name: c1", f"name: {text}"),
                   "method": doc.replace("name: km", f"name: {text}"),
                   "experiment": doc.replace("experiment: toy", f"experiment: {text}")}[where]
            (c.inp / "toy.yaml").write_text(doc)
        cases.append(Case("unwritable", "run", f"surrogate_{where}", lambda c: replace(
            base("run", c), "--config", c.inp / "toy.yaml"), prep))
    # datasets that are not installed
    missing = {
        "train_mnist": lambda c: replace(replace(base("train", c), "--preset", "mnist_835"),
                                         "--data-root", c.w / "empty"),
        "train_butterflies": lambda c: replace(replace(base("train", c), "--preset",
                                                       "butterflies_dynamics"),
                                               "--data-root", c.w / "empty"),
        "features_cub": lambda c: [c.w / "model.pt", "cub", *base("features", c)[2:]],
        "features_mnist": lambda c: [c.w / "model.pt", "mnist", *base("features", c)[2:]],
        "features_imagenet": lambda c: [c.w / "model.pt", "imagenet",
                                        *base("features", c)[2:]],
    }   # (rdx benchmark --quick needs only digits, which scikit-learn ships)
    for name, argv in missing.items():
        cases.append(Case("unwritable", name.split("_")[0], f"not_installed:{name}", argv,
                          must_refuse=True, timeout=150))
    for ds in ("cub", "imagenet", "inaturalist", "mnist"):
        def prep(c: Ctx, ds=ds) -> None:
            c.inp.mkdir(exist_ok=True)
            _yaml(c.inp / "toy.yaml", run_config(c.w, base={"image_selection": {
                "dataset": ds, "data_root": str(c.w / "empty")}}))
            _yaml(c.inp / "datasets.yaml", {"datasets": [{"id": "x", "dataset": ds,
                                                          "root": str(c.w / "empty")}]})
            _yaml(c.inp / "dyn.yaml", dynamics_config(c.w, c.out, probe={
                "dataset": ds, "num_images": 10}))
        cases.append(Case("unwritable", "run", f"not_installed:{ds}", lambda c: replace(
            base("run", c), "--config", c.inp / "toy.yaml"), prep, must_refuse=True))
        cases.append(Case("unwritable", "matrix", f"not_installed:{ds}", lambda c: replace(
            base("matrix", c), "--datasets", c.inp / "datasets.yaml"), prep,
            must_refuse=True))
        cases.append(Case("unwritable", "dynamics", f"not_installed:{ds}", lambda c: base(
            "dynamics", c), prep, must_refuse=True))
    return cases


def all_cases(seed: int) -> list[Case]:
    return (overlap_cases() + outpath_cases() + special_cases() + budget_cases(seed)
            + nan_cases(seed) + numeric_cases() + parsed_cases(seed) + signal_cases(seed)
            + unwritable_cases())


# ========================================================================== the runner

def _tree(folder: Path, skip: list[Path]) -> dict[str, str]:
    """relative path → SHA-256 (files), 'dir', 'link:TARGET' or the file type, for every
    entry under ``folder`` not under one of ``skip``."""
    found: dict[str, str] = {}
    skip_real = [os.path.realpath(s) for s in skip]
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(dirpath)
        keep = []
        for d in dirnames:
            p = here / d
            if any(os.path.realpath(p) == s or str(p) == str(s) for s in skip_real) \
                    and not p.is_symlink():
                continue
            keep.append(d)
            found[str(p.relative_to(folder))] = "link" if p.is_symlink() else "dir"
        dirnames[:] = keep
        for f in filenames:
            p = here / f
            rel = str(p.relative_to(folder))
            if any(str(p).startswith(s + os.sep) for s in skip_real):
                continue
            if p.is_symlink():
                found[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                h = hashlib.sha256()
                with open(p, "rb") as fh:
                    while block := fh.read(1 << 20):
                        h.update(block)
                found[rel] = h.hexdigest()
            else:
                found[rel] = "special"
    return found


def _digest(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def _input_files(c: Ctx, argv: list[Arg], case: Case) -> list[Path]:
    """The regular files a case reads: on its command line (``FILE.npz:KEY`` as FILE), under
    its ``in/`` folder and those its config names (``case.inputs``)."""
    found = []
    for a in argv:
        if isinstance(a, bytes):
            continue
        for text in (os.fspath(a), os.fspath(a).rsplit(":", 1)[0]):
            p = Path(text) if os.path.isabs(text) else c.cwd / text
            with contextlib.suppress(OSError, ValueError):
                if p.is_file() and not p.is_relative_to("/dev") and \
                        not p.is_relative_to("/proc") and not p.is_relative_to("/sys"):
                    found.append(p)
                    break
    if c.inp.is_dir():
        found += [p for p in c.inp.rglob("*") if p.is_file() and not p.is_symlink()]
    if case.inputs:
        found += [p for p in case.inputs(c) if p.is_file()]
    return sorted(set(found))


def _strict_json(path: Path):
    def bad(token: str):
        raise ValueError(f"{token} in {path}")
    return json.loads(path.read_text(), parse_constant=bad)


def _result_problems(out: Path, stdout: str, inputs: list[Path]) -> list[str]:
    """What makes an exit 0 a false success: no result, a non-finite or empty one."""
    problems = []
    files = [p for p in out.rglob("*") if p.is_file()] if out.is_dir() else \
        [out] if out.is_file() else []
    files = [p for p in files if p not in inputs]
    if not files and not stdout.strip():
        problems.append("exit 0 but no result (no file, nothing printed)")
    if re.search(r"(?<![\w.])(nan|NaN)(?![\w])", stdout):
        problems.append("exit 0 but stdout shows nan")
    for p in files:
        if p.suffix == ".json":
            try:
                doc = _strict_json(p)
            except (ValueError, UnicodeDecodeError) as exc:
                problems.append(f"{p.name}: not strict JSON ({exc})")
                continue
            if p.name == "explanations.json":
                for d, r in (doc.get("directions") or {}).items():
                    if any(not e.get("images") for e in r.get("explanations", [])):
                        problems.append(f"{p}: an explanation of {d} has no images")
                mean = (doc.get("bsr") or {}).get("mean")
                if "bsr" in doc and doc["bsr"] and mean is None:
                    problems.append(f"{p}: BSR mean is null (NaN)")
            if p.name.endswith(".json") and "scores" in doc and isinstance(doc["scores"], dict):
                for k, v in doc["scores"].items():
                    if isinstance(v, dict) and v.get("value", 0) is None:
                        problems.append(f"{p}: score {k} is null (NaN)")
        if p.suffix == ".tmp":
            problems.append(f"temporary file left: {p}")
    return problems


_MESSAGE = re.compile(r"^(rdx( [\w-]+)?: |usage: )", re.M)


def _message_problems(err: str, code: int, cmd: str) -> list[str]:
    problems = []
    if "Traceback" in err or "Exception ignored" in err:
        problems.append("traceback on stderr")
    start = [m.start() for m in _MESSAGE.finditer(err)]
    if not start:
        problems.append("no 'rdx COMMAND:' message on stderr")
    else:
        # the message: from the first line of argparse's usage or the last 'rdx ...:' line
        at = start[0] if err[start[0]:].startswith("usage:") else start[-1]
        message = err[at:].strip()
        if "\n\n" in message:
            problems.append("the message is more than one paragraph")
    return problems


@dataclass
class Outcome:
    case: Case
    code: int | None
    seconds: float
    problems: list[str] = field(default_factory=list)
    stderr: str = ""
    argv: list[str] = field(default_factory=list)


def _preexec(case: Case) -> Callable[[], None]:
    def setup() -> None:
        # as a user's terminal delivers them (a background job inherits SIGINT ignored)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGXFSZ):
            signal.signal(s, signal.SIG_DFL)
        os.setsid()
        if case.fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (case.fsize, case.fsize))
        if case.nobody and os.getuid() == 0:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
    return setup


def _spawn(case: Case, argv: list[Arg], c: Ctx, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rdx", case.command, *[
        os.fspath(a) if not isinstance(a, bytes) else a for a in argv]], cwd=c.cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_preexec(case))


def _wait(proc: subprocess.Popen, timeout: float) -> tuple[int | None, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return code, out.decode(errors="replace"), err.decode(errors="replace")


def run_case(case: Case, w: Path, d: Path, timeout: float, env: dict) -> Outcome:
    c = Ctx(w, d)
    d.mkdir(parents=True)
    c.cwd.mkdir()
    if case.prepare:
        case.prepare(c)
    if not c.cwd.exists():
        c.cwd.mkdir()
    argv = case.argv(c)
    shown = [a.decode(errors="backslashreplace") if isinstance(a, bytes) else str(a)
             for a in argv]
    mounts: list[Path] = []
    if case.readonly and os.getuid() == 0:
        for folder in case.readonly(c):
            _mount(folder, mounts, readonly=True)
    elif case.readonly:
        for folder in case.readonly(c):
            for q in [folder, *folder.rglob("*")]:
                if q.is_dir() and not q.is_symlink():
                    q.chmod(0o555)
    if case.full:
        folder, free = case.full
        _mount(folder(c), mounts, free=free)
    try:
        return _run_prepared(case, c, argv, shown, timeout, env)
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", str(m)], capture_output=True)
        if case.readonly and os.getuid() != 0:
            for q in [d, *d.rglob("*")]:
                if q.is_dir() and not q.is_symlink():
                    q.chmod(0o755)


def _mount(folder: Path, mounts: list[Path], *, readonly: bool = False,
           free: int | None = None) -> None:
    """Put a tmpfs over ``folder`` holding what it held: read-only, or with ``free``
    bytes left."""
    keep = folder.with_name(folder.name + ".before")
    folder.mkdir(parents=True, exist_ok=True)
    folder.rename(keep)
    folder.mkdir()
    used = sum(p.stat().st_size + 4096 for p in keep.rglob("*") if p.is_file())
    size = used + (free or 0) + 8 * 4096
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                    str(folder)], check=True, capture_output=True)
    mounts.append(folder)
    shutil.copytree(keep, folder, symlinks=True, dirs_exist_ok=True)
    shutil.rmtree(keep)
    if readonly:
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True,
                       capture_output=True)


def _run_prepared(case: Case, c: Ctx, argv: list[Arg], shown: list[str], timeout: float,
                  env: dict) -> Outcome:
    d = c.d
    out_root = case.out_root(c) if case.out_root else c.out
    skip = [out_root, c.out, d / "home"]   # c.out: where the other outputs go (caches)
    inputs = _input_files(c, argv, case)
    before_inputs = {p: _digest(p) for p in inputs}
    before_case = _tree(d, skip)
    w = c.w
    before_world = _tree(w, [])
    t0 = time.perf_counter()
    proc = _spawn(case, argv, c, env)
    problems: list[str] = []
    if case.signal:
        sig, delay = case.signal
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
    code, stdout, stderr = _wait(proc, case.timeout or timeout)
    seconds = time.perf_counter() - t0
    name = case.command
    if code is None:
        problems.append(f"no exit within {case.timeout or timeout:.0f} s (hang)")
    elif code == 0:
        if case.must_refuse:
            problems.append("exit 0 for an input that must be refused")
        problems += _result_problems(out_root, stdout, inputs)
    else:
        allowed = {2}
        if case.signal:
            allowed.add(128 + case.signal[0])
        if code not in allowed:
            problems.append(f"exit status {code} (expected 0 or {sorted(allowed)})")
        problems += _message_problems(stderr, code, name)
    for label in case.forbid:
        if code and label.lower() in stderr.lower():
            problems.append(f"the message says {label!r}, which the data is not")
    after_inputs = {p: _digest(p) for p in inputs}
    if after_inputs != before_inputs:
        problems.append("an input file changed: " + ", ".join(
            str(p) for p in inputs if before_inputs[p] != after_inputs[p]))
    after_case = _tree(d, skip)
    after_world = _tree(w, [])
    if after_world != before_world:
        changed = sorted(set(after_world.items()) ^ set(before_world.items()))
        problems.append(f"the shared inputs changed: {changed[:3]}")
    if after_case != before_case:
        changed = sorted({k for k in set(before_case) | set(after_case)
                          if before_case.get(k) != after_case.get(k)})
        problems.append(f"written outside the output or an input changed: {changed[:4]}")
    if case.signal and code is not None:
        whole = []
        for p in (out_root.rglob("*.json") if out_root.is_dir() else []):
            try:
                json.loads(p.read_text())
            except (ValueError, OSError):
                whole.append(p.name)
        if whole:
            problems.append(f"partial files after the signal: {whole[:3]}")
        if code != 0 and stderr.strip():
            last = stderr.strip().splitlines()[-1]
            if not re.match(rf"^rdx {name}: ", last):
                problems.append(f"the last line after the signal is {last!r}")
        again = _spawn(Case(case.cls, name, case.name, case.argv), argv, c, env)
        code2, _, err2 = _wait(again, case.timeout or timeout)
        if code2 != 0:
            problems.append(f"the run after the signal exits {code2}: {err2[-300:]}")
        tmps = [str(p) for p in d.rglob("*") if p.name.endswith(".tmp")]
        if tmps:
            problems.append(f"temporary files left after the re-run: {tmps[:3]}")
    return Outcome(case, code, seconds, problems, stderr, shown)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", help=f"comma-separated classes ({', '.join(CLASSES)})")
    p.add_argument("--commands", help="comma-separated commands (default: all)")
    p.add_argument("--match", help="only the cases whose id contains this text")
    p.add_argument("--every", type=int, default=1, help="every N-th case (default 1: all)")
    p.add_argument("--start", type=int, default=0,
                   help="with --every: the first case taken (default 0; 1 and 2 give the "
                        "other thirds of --every 3)")
    p.add_argument("--same-as", metavar="JSON",
                   help="only the cases of an earlier run's --json (to compare two versions)")
    p.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    p.add_argument("--jobs", type=int, default=2, help="cases at once (default 2)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds a case may take (default 120; signal cases 300)")
    p.add_argument("--workdir", help="keep the cases' folders here (default: a temporary "
                                     "folder, removed at the end)")
    p.add_argument("--world", help="the inputs of an earlier run (its WORKDIR/world) to reuse "
                                   "instead of making them (about 2 minutes)")
    p.add_argument("--json", help="write every outcome to this JSON file")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    args = p.parse_args(argv)
    cases = all_cases(args.seed)
    if args.classes:
        wanted = set(args.classes.split(","))
        if wanted - set(CLASSES):
            p.error(f"unknown classes {sorted(wanted - set(CLASSES))}")
        cases = [c for c in cases if c.cls in wanted]
    if args.commands:
        cases = [c for c in cases if c.command in set(args.commands.split(","))]
    if args.match:
        cases = [c for c in cases if args.match in c.id]
    cases = cases[max(0, args.start)::max(1, args.every)]
    if args.same_as:
        wanted = {c["id"] for c in json.loads(Path(args.same_as).read_text())["cases"]}
        cases = [c for c in cases if c.id in wanted]
    if args.list:
        for case in cases:
            print(case.id)
        print(f"{len(cases)} cases")
        return 0
    if args.jobs < 1 or args.timeout <= 0:
        p.error("--jobs and --timeout must be positive")
    base_dir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(
        prefix="rdx_battery_"))
    base_dir.mkdir(parents=True, exist_ok=True)
    base_dir.chmod(0o755)
    w = Path(args.world).resolve() if args.world else base_dir / "world"
    say = lambda *a: print(*a, flush=True)   # noqa: E731
    say(f"{len(cases)} cases; inputs in {w}")
    if not (w / "model.pt").exists():
        if args.world:
            p.error(f"--world {args.world}: not the inputs of an earlier run")
        shutil.rmtree(w, ignore_errors=True)
        w.mkdir()
        build_world(w, say)
    for q in [w, *w.rglob("*")]:   # readable by the cases that run as nobody
        if not q.is_symlink():
            q.chmod(0o755 if q.is_dir() else 0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDX_")}
    say(f"rdx from {os.environ.get('RDX_BATTERY_ROOT', str(ROOT))}")
    # the rdx of this checkout (or RDX_BATTERY_ROOT's, e.g. an earlier commit's to compare)
    env.update(MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.environ.get("RDX_BATTERY_ROOT", str(ROOT)))
    runs = base_dir / "cases"
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir()
    runs.chmod(0o755)
    t0 = time.perf_counter()
    outcomes: list[Outcome] = []

    def one(item: tuple[int, Case]) -> Outcome:
        i, case = item
        try:
            return run_case(case, w, runs / f"{i:04d}", args.timeout, env)
        except Exception as exc:   # a case that could not be set up is a fault of the battery
            return Outcome(case, None, 0.0, [f"battery error: {type(exc).__name__}: {exc}"])

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for k, res in enumerate(pool.map(one, enumerate(cases)), 1):
            outcomes.append(res)
            mark = "ok  " if not res.problems else "FAIL"
            say(f"[{k:4d}/{len(cases)}] {mark} {res.case.id} (exit {res.code}, "
                f"{res.seconds:.1f} s)")
            for prob in res.problems:
                say(f"        {prob}")
            if res.problems:
                say(f"        $ rdx {res.case.command} {' '.join(res.argv)[:300]}")
                tail = res.stderr.strip()[-400:].replace("\n", "\n          ")
                if tail:
                    say(f"          {tail}")
    by_class: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for res in outcomes:
        by_class[res.case.cls]["cases"] += 1
        by_class[res.case.cls]["failed"] += bool(res.problems)
    say(f"\n{'class':12s} {'cases':>6s} {'failed':>7s}")
    for cls in CLASSES:
        if cls in by_class:
            say(f"{cls:12s} {by_class[cls]['cases']:6d} {by_class[cls]['failed']:7d}")
    total = sum(v["cases"] for v in by_class.values())
    failed = sum(v["failed"] for v in by_class.values())
    say(f"{'all':12s} {total:6d} {failed:7d}   ({time.perf_counter() - t0:.0f} s)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "seed": args.seed, "counts": {k: dict(v) for k, v in by_class.items()},
            "cases": [{"id": r.case.id, "exit": r.code, "seconds": round(r.seconds, 2),
                       "problems": r.problems, "argv": r.argv} for r in outcomes]},
            indent=1))
    if not args.workdir:
        shutil.rmtree(base_dir, ignore_errors=True)
    else:
        shutil.rmtree(runs, ignore_errors=True)   # the cases' folders (the inputs stay)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
