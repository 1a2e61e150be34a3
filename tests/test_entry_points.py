"""Every entry point against families of bad input and faults.

For each case the command must exit with status 2 and say on stderr what was wrong (no
traceback), leave its inputs untouched and write nothing outside its output folder; killed
runs must resume without redoing finished work. The families:

=============== ===========================================================================
arrays          NaN/inf, wrong number of dimensions, object dtype, no rows, one row, all
                rows equal, mismatched numbers of images, huge n (memory refused up front)
files           missing, a folder, empty, truncated or CRC-damaged .npz, not an array file,
                an .npz with several arrays and no key, a missing key, a key on an .npy
configs         missing, a folder, not YAML, empty, unknown keys, wrong types, names that
                would become paths outside the output folder, missing inputs
paths           the output as a file, under a file, in /proc, a folder for a JSON file
labels          continuous floats, wrong length, one class, 2-D, missing values
sizes           too many explanations for n, zero / negative counts, k ≥ n
results         damaged files of a finished run (report, analysis)
interruptions   a killed run (rdx run, rdx train) resumes without redoing finished work;
                two runs of one comparison do not both compute it
=============== ===========================================================================

Entry points: ``rdx explain / run / report / similarity / train / dynamics / matrix /
consistency / probe`` and ``analyze_explanations.py``, called in this process through
``rdx.cli.main`` (and ``analyze_explanations.main``); a few cases also run as real
subprocesses (what a user's shell sees). ``test_case_count`` prints the number of cases.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, MPLBACKEND="Agg")
N = 40          # images of the small valid inputs
HUGE_N = 200_000  # rows of the "huge" input (2 features: 1.6 MB, but n² measures cannot fit)
SEL = {"dataset": "digits", "target_classes": [3, 5, 8], "num_images": 8, "seed": 0}


# =========================================================================== the inputs

def _digits_features() -> tuple[np.ndarray, np.ndarray]:
    from rdx.data import get_dataset, select_per_class

    ds = get_dataset("digits")
    idx = select_per_class(ds.ids, ds.labels, SEL["target_classes"], SEL["num_images"],
                           seed=SEL["seed"])
    A = ds.images[idx].reshape(len(idx), -1).astype(np.float32)
    B = A.copy()
    B[:, :32] = 0.0
    B += np.random.default_rng(0).normal(0, 0.5, B.shape).astype(np.float32)
    return A, B


def _config_doc(w: Path, **over) -> dict:
    from rdx.experiments.config import deep_merge

    doc = {"experiment": "toy", "seed": 0,
           "base": {"image_selection": dict(SEL),
                    "representations": {"a": {"features": str(w / "digits_A.npy")},
                                        "b": {"features": str(w / "digits_B.npy")}},
                    "methods": [{"method": "rdx", "name": "rdx_k2", "n_explanations": 2},
                                {"method": "kmeans", "name": "km", "n_explanations": 2}]},
           "comparisons": [{"name": "c1"}]}
    return deep_merge(doc, over)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """Every input file of the cases (never changed by them) and one finished run."""
    w = tmp_path_factory.mktemp("fuzz_inputs")
    r = np.random.default_rng(0)
    A = r.standard_normal((N, 6)).astype(np.float32)
    B = (A[:, :5] + 0.3 * r.standard_normal((N, 5))).astype(np.float32)
    save = lambda name, arr: np.save(w / name, arr)   # noqa: E731
    save("A.npy", A)
    save("B.npy", B)
    save("nan.npy", np.where(np.arange(N)[:, None] == 3, np.nan, A))
    save("inf.npy", np.where(np.arange(N)[:, None] == 5, np.inf, A))
    save("vec.npy", A[:, 0])
    save("cube.npy", A.reshape(N, 2, 3))
    np.savez(w / "obj.npz", x=np.array([{"a": 1}, None], dtype=object))
    save("norows.npy", np.zeros((0, 6), np.float32))
    save("norows_B.npy", np.zeros((0, 5), np.float32))
    save("onerow.npy", A[:1])
    save("onerow_B.npy", B[:1])
    save("const.npy", np.ones((N, 6), np.float32))
    save("B30.npy", B[:30])
    save("huge_A.npy", r.standard_normal((HUGE_N, 2)).astype(np.float32))
    save("huge_B.npy", r.standard_normal((HUGE_N, 2)).astype(np.float32))
    (w / "folder.npy").mkdir()
    (w / "empty.npy").write_bytes(b"")
    np.savez(w / "multi.npz", a=A, b=B)
    raw = (w / "multi.npz").read_bytes()
    (w / "trunc.npz").write_bytes(raw[: len(raw) // 2])
    crc = bytearray(raw)
    crc[len(raw) // 3] ^= 0xFF     # inside the first array's data: a CRC-32 mismatch
    (w / "crc.npz").write_bytes(bytes(crc))
    (w / "notes.txt").write_text("these are not features\n1 2 3\n")
    # labels
    save("y.npy", np.arange(N) % 3)
    save("y_whole.npy", (np.arange(N) % 3).astype(np.float64))
    save("y_cont.npy", r.random(N))
    save("y_short.npy", np.arange(N - 5) % 3)
    save("y_one.npy", np.zeros(N, np.int64))
    save("y_2d.npy", (np.arange(N) % 3).reshape(N, 1))
    save("y_nan.npy", np.where(np.arange(N) == 7, np.nan, np.arange(N) % 3))
    # an ordinary file, as an output location that cannot be a folder
    (w / "afile").write_text("x")
    # configs
    dA, dB = _digits_features()
    save("digits_A.npy", dA)
    save("digits_B.npy", dB)
    # the array family at the run's n (rows = the selected images)
    rows = np.arange(len(dA))[:, None]
    save("d_nan.npy", np.where(rows == 2, np.nan, dA))
    save("d_inf.npy", np.where(rows == 4, -np.inf, dA))
    save("d_vec.npy", dA[:, 0])
    save("d_cube.npy", dA.reshape(len(dA), 8, 8))
    save("d_const.npy", np.ones_like(dA))
    (w / "toy.yaml").write_text(yaml.safe_dump(_config_doc(w)))
    (w / "conf_dir").mkdir()
    (w / "bad.yaml").write_text("experiment: [unclosed\n")
    _checkpoints(w)
    (w / "blank.yaml").write_text("")
    return w


def _checkpoints(w: Path) -> None:
    """``ok.pt`` (a small random ConvNet), ``damaged.pt`` (one weight byte flipped, which
    ``torch.load`` does not notice) with its sidecar, and ``old.pt`` (no checksum)."""
    import zipfile

    import torch

    from rdx.models.convnet import ConvNet
    from rdx.models.checkpoint import (CHECKPOINT_FORMAT, grey_transform, save_checkpoint,
                                        sidecar_path)

    torch.manual_seed(0)
    net = ConvNet(1, 3, 8)
    meta = {"format": CHECKPOINT_FORMAT, **net.config(),
            "transform": grey_transform(28).description}
    ok = save_checkpoint(w / "ok.pt", net, meta)
    raw = bytearray(ok.read_bytes())
    with zipfile.ZipFile(ok) as z:   # the largest tensor's bytes (stored uncompressed)
        info = max((i for i in z.infolist() if "/data/" in i.filename),
                   key=lambda i: i.file_size)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    raw[start + info.file_size // 2] ^= 0x55
    (w / "damaged.pt").write_bytes(bytes(raw))
    shutil.copy(sidecar_path(ok), sidecar_path(w / "damaged.pt"))
    old_meta = {k: v for k, v in json.loads(sidecar_path(ok).read_text()).items()
                if k != "weights_sha256"}
    torch.save({"state_dict": net.state_dict(), "meta": old_meta}, w / "old.pt")


@pytest.fixture(scope="module")
def finished(world, tmp_path_factory) -> Path:
    """The output root of one finished run of ``toy.yaml`` (kept apart from ``world``)."""
    from rdx.experiments import run_experiment

    root = tmp_path_factory.mktemp("fuzz_finished")
    run_experiment(world / "toy.yaml", output_root=root, progress=False)
    return root


# =========================================================================== the harness

@dataclass
class Ctx:
    w: Path                    # inputs (never written)
    t: Path                    # this case's folder; t/"out" is the output location
    finished: Path | None = None

    @property
    def out(self) -> Path:
        return self.t / "out"


@dataclass
class Case:
    entry: str                                    # rdx command, or "analyze"
    family: str
    what: str
    argv: Callable[[Ctx], list]
    match: str                                    # regex the message must contain
    env: dict = field(default_factory=dict)
    prepare: Callable[[Ctx], None] | None = None  # writes the case's own files (config, ...)
    needs_run: bool = False                       # ctx.finished: a finished run's root
    codes: tuple[int, ...] = (2,)
    xfail: str | None = None                      # a known gap, fixed outside this module
    in_report: bool = False                       # the message may be in the HTML report

    @property
    def id(self) -> str:
        return f"{self.entry}-{self.family}-{self.what}"


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: relative path → (size, modification time in ns)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, name)
            try:
                st = os.stat(p)
            except OSError:
                continue
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def _invoke(entry: str, argv: list[str], capsys) -> tuple[int, str, str]:
    """Run one entry point in this process; any exception but SystemExit escapes (the
    test then fails with it: that is a traceback a user would see)."""
    capsys.readouterr()
    try:
        if entry == "analyze":
            code = _analyze_module().main(argv)
        else:
            from rdx.cli import main
            code = main([entry, *argv])
    except SystemExit as exc:   # argparse: usage errors exit 2
        code = exc.code if isinstance(exc.code, int) else 2
    cap = capsys.readouterr()
    return int(code or 0), cap.out, cap.err


_ANALYZE = None


def _analyze_module():
    global _ANALYZE
    if _ANALYZE is None:
        spec = importlib.util.spec_from_file_location("analyze_explanations",
                                                      REPO / "analyze_explanations.py")
        _ANALYZE = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_ANALYZE)
    return _ANALYZE


def _write(path: Path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))


# =========================================================================== the cases

def _files(flagged: Callable[[Ctx, str], list], entry: str, owner: str = "A") -> list[Case]:
    """The file family for an entry point whose argv is ``flagged(ctx, bad_path)``."""
    w = lambda c, name: str(c.w / name)   # noqa: E731
    return [
        Case(entry, "files", "missing", lambda c: flagged(c, w(c, "nope.npy")),
             r"does not exist"),
        Case(entry, "files", "folder", lambda c: flagged(c, w(c, "folder.npy")),
             r"is a folder"),
        Case(entry, "files", "empty", lambda c: flagged(c, w(c, "empty.npy")),
             r"the file is empty"),
        Case(entry, "files", "truncated_npz", lambda c: flagged(c, w(c, "trunc.npz") + ":a"),
             r"damaged or incomplete"),
        Case(entry, "files", "crc_npz", lambda c: flagged(c, w(c, "crc.npz") + ":a"),
             r"damaged or incomplete.*CRC"),
        Case(entry, "files", "not_npy", lambda c: flagged(c, w(c, "notes.txt")),
             r"not in \.npy/\.npz format"),
        Case(entry, "files", "npz_several_no_key", lambda c: flagged(c, w(c, "multi.npz")),
             r"holds 2 arrays.*say which one"),
        Case(entry, "files", "npz_missing_key", lambda c: flagged(c, w(c, "multi.npz") + ":zz"),
             r"has no array 'zz'"),
        Case(entry, "files", "npy_with_key", lambda c: flagged(c, w(c, "A.npy") + ":a"),
             r"has no keys"),
        Case(entry, "files", "object_npz", lambda c: flagged(c, w(c, "obj.npz")),
             r"Python objects"),
    ]


def _arrays(pair: Callable[[Ctx, str, str], list], entry: str) -> list[Case]:
    """The array family for an entry point whose argv is ``pair(ctx, A path, B path)``."""
    def ab(a: str, b: str = "B.npy"):
        return lambda c: pair(c, str(c.w / a), str(c.w / b))

    return [
        Case(entry, "arrays", "nan", ab("nan.npy"), r"NaN/inf"),
        Case(entry, "arrays", "inf", ab("A.npy", "inf.npy"), r"NaN/inf"),
        Case(entry, "arrays", "1d", ab("vec.npy"), r"shape \(40,\).*2-D"),
        Case(entry, "arrays", "3d", ab("cube.npy"), r"shape \(40, 2, 3\).*2-D"),
        Case(entry, "arrays", "no_rows", ab("norows.npy", "norows_B.npy"),
             r"empty|0 images|at least"),
        Case(entry, "arrays", "one_row", ab("onerow.npy", "onerow_B.npy"),
             r"1 image|at least|needs"),
        Case(entry, "arrays", "constant", ab("const.npy"), r"constant"),
        Case(entry, "arrays", "mismatched_n", ab("A.npy", "B30.npy"),
             r"40 images but B has 30|different numbers of images \(40 vs 30\)"),
        Case(entry, "arrays", "identical", ab("A.npy", "A.npy"), r"same array"),
    ]


def _paths(flagged: Callable[[Ctx, str], list], entry: str, *, json_out: bool = False
           ) -> list[Case]:
    """The output location as a file, under a file, in /proc (and a folder for a file)."""
    cases = [] if json_out else [
        Case(entry, "paths", "out_is_file", lambda c: flagged(c, str(c.w / "afile")),
             r"is a file; give a folder"),
    ]
    cases += [
        Case(entry, "paths", "out_under_file",
             lambda c: flagged(c, str(c.w / "afile" / ("x.json" if json_out else "x"))),
             r"lies under the file"),
        Case(entry, "paths", "out_in_proc",
             lambda c: flagged(c, "/proc/rdx_fuzz" + ("/x.json" if json_out else "")),
             r"cannot be created or written in ./proc"),
    ]
    if json_out:
        cases.append(Case(entry, "paths", "json_out_is_folder",
                          lambda c: flagged(c, str(c.w / "conf_dir")), r"is a folder"))
    return cases


def _explain_cases() -> list[Case]:
    e = "explain"

    def ab(c: Ctx, A: str, B: str | None = None, *more) -> list:
        return [A, B or str(c.w / "B.npy"), "--out", str(c.out), *more]

    def labels(name: str, *more):
        return lambda c: ab(c, str(c.w / "A.npy"), None, "--labels", str(c.w / name),
                            "--guidance", "ground_truth", *more)

    cases = _files(lambda c, p: ab(c, p), e) + _arrays(ab, e)
    cases += _paths(lambda c, p: [str(c.w / "A.npy"), str(c.w / "B.npy"), "--out", p], e)
    cases += [
        # the dense method's n×n matrices (graph="auto" would take the k-NN graph here)
        Case(e, "arrays", "huge_n", lambda c: ab(c, str(c.w / "huge_A.npy"),
                                                 str(c.w / "huge_B.npy"), "--graph", "dense"),
             r"memory|GiB"),
        # the limit caps host memory, so the fit is on the CPU (a GPU is sized by its own)
        Case(e, "arrays", "memory_limit", lambda c: ab(c, str(c.w / "A.npy"), None,
                                                       "--device", "cpu"),
             r"memory|RDX_MEMORY_LIMIT_GB", env={"RDX_MEMORY_LIMIT_GB": "0.0000001"}),
        Case(e, "labels", "continuous_float", labels("y_cont.npy"),
             r"not whole numbers.*class ids"),
        Case(e, "labels", "wrong_length", labels("y_short.npy"), r"35 entries but there are 40"),
        Case(e, "labels", "one_class", labels("y_one.npy"), r"class|2 classes"),
        Case(e, "labels", "2d", labels("y_2d.npy"), r"one label per image \(1-D\)"),
        Case(e, "labels", "missing_values", labels("y_nan.npy"), r"missing \(NaN/inf\)"),
        Case(e, "labels", "missing_file", labels("nope.npy"), r"does not exist"),
        Case(e, "labels", "guidance_without_labels",
             lambda c: ab(c, str(c.w / "A.npy"), None, "--guidance", "ground_truth"),
             r"needs --labels"),
        Case(e, "sizes", "k_zero",
             lambda c: ab(c, str(c.w / "A.npy"), None, "--n-explanations", "0"),
             r"positive integer, got 0"),
        Case(e, "sizes", "k_too_large",
             lambda c: ab(c, str(c.w / "A.npy"), None, "--n-explanations", "39"),
             r"needs at least 41 images.*k \+ 2.*only 40"),
        Case(e, "sizes", "grid_size_zero",
             lambda c: ab(c, str(c.w / "A.npy"), None, "--grid-size", "0"), r"--grid-size must be >= 2"),
        Case(e, "params", "beta_negative",
             lambda c: ab(c, str(c.w / "A.npy"), None, "--beta", "-1"), r"beta"),
        Case(e, "params", "beta_overflow",
             lambda c: ab(c, str(c.w / "A.npy"), None, "--difference", "standard",
                          "--beta", "500"),
             r"normalised.*beta=500 is too large.*--beta"),
        Case(e, "params", "unbounded_difference",
             lambda c: ab(c, str(c.w / "A.npy"), None, "--difference", "standard",
                          "--normalize-diff", "false", "--beta", "5e4"),
             r"normalize_diff=False.*--normalize-diff true"),
        Case(e, "params", "flag_typo", lambda c: ab(c, str(c.w / "A.npy"), None, "--bta", "1"),
             r"rdx explain.*unrecognized arguments: --bta"),
        Case(e, "params", "bad_param", lambda c: ab(c, str(c.w / "A.npy"), None, "--method",
                                                    "kmeans", "--param", "nope"),
             r"expected KEY=VALUE"),
    ]
    return cases


def _similarity_cases() -> list[Case]:
    e = "similarity"

    def ab(c: Ctx, A: str, B: str | None = None, *more) -> list:
        return [A, B or str(c.w / "B.npy"), *more]

    cases = _files(lambda c, p: ab(c, p), e) + _arrays(ab, e)
    cases += _paths(lambda c, p: [str(c.w / "A.npy"), str(c.w / "B.npy"), "--out", p], e,
                    json_out=True)
    cases += [
        Case(e, "arrays", "huge_n", lambda c: ab(c, str(c.w / "huge_A.npy"),
                                                 str(c.w / "huge_B.npy")),
             r"cka_rbf at n=200000 images.*needs about .*GiB.*subsample of at most"),
        Case(e, "arrays", "huge_n_rsa", lambda c: ab(c, str(c.w / "huge_A.npy"),
                                                     str(c.w / "huge_B.npy"), "--measure",
                                                     "rsa", "--permutations", "10"),
             r"rsa at n=200000 images.*GiB"),
        Case(e, "arrays", "memory_limit", lambda c: ab(c, str(c.w / "A.npy"), None,
                                                       "--measure", "cka_linear"),
             r"RDX_MEMORY_LIMIT_GB", env={"RDX_MEMORY_LIMIT_GB": "0.0000001"}),
        Case(e, "sizes", "knn_zero", lambda c: ab(c, str(c.w / "A.npy"), None, "--measure",
                                                  "mutual_knn", "--knn", "0"), "--n-neighbors"),
        Case(e, "sizes", "knn_ge_n", lambda c: ab(c, str(c.w / "A.npy"), None, "--measure",
                                                  "cknna", "--knn", "40"), "--n-neighbors"),
        Case(e, "sizes", "permutations_negative",
             lambda c: ab(c, str(c.w / "A.npy"), None, "--permutations", "-1"),
             r"--permutations must be 0 or a positive"),
        Case(e, "sizes", "bootstrap_negative",
             lambda c: ab(c, str(c.w / "A.npy"), None, "--bootstrap", "-3"),
             r"--bootstrap must be 0 or a positive"),
        Case(e, "params", "sigma_zero", lambda c: ab(c, str(c.w / "A.npy"), None, "--measure",
                                                     "cka_rbf", "--sigma", "0"), r"sigma"),
        Case(e, "params", "unknown_measure",
             lambda c: ab(c, str(c.w / "A.npy"), None, "--measure", "ckaa"),
             r"invalid choice: 'ckaa'"),
    ]
    return cases


def _with_models(doc: dict, representations: dict) -> dict:
    doc["base"]["representations"] = representations
    return doc


def _run_cases() -> list[Case]:
    e = "run"

    def cfg(**over):
        def prepare(c: Ctx):
            _write(c.t / "cfg.yaml", _config_doc(c.w, **over))
        return prepare

    def run_argv(c: Ctx, *more) -> list:
        return ["--config", str(c.t / "cfg.yaml"), "--output-root", str(c.out), "--no-report",
                "--quiet", *more]

    def with_cfg(what, over, match, family="configs"):
        return Case(e, family, what, run_argv, match, prepare=cfg(**over))

    cases = [
        Case(e, "configs", "missing", lambda c: ["--config", str(c.w / "nope.yaml"),
                                                 "--output-root", str(c.out)], r"does not exist"),
        Case(e, "configs", "folder", lambda c: ["--config", str(c.w / "conf_dir"),
                                                "--output-root", str(c.out)], r"is a folder"),
        Case(e, "configs", "not_yaml", lambda c: ["--config", str(c.w / "bad.yaml"),
                                                  "--output-root", str(c.out)],
             r"not valid YAML"),
        Case(e, "configs", "empty", lambda c: ["--config", str(c.w / "blank.yaml"),
                                               "--output-root", str(c.out)],
             r"empty|mapping|experiment"),
        with_cfg("unknown_key", {"typo": 1}, r"typo: unknown key"),
        with_cfg("wrong_type_seed", {"seed": "zero"}, r"seed"),
        with_cfg("wrong_type_methods", {"base": {"methods": "rdx"}}, r"methods"),
        with_cfg("unknown_method", {"comparisons": [{"name": "c1", "methods": [
            {"method": "kmeans2"}]}]}, r"unknown method 'kmeans2'"),
        with_cfg("unknown_param", {"comparisons": [{"name": "c1", "methods": [
            {"method": "rdx", "gama": 1}]}]}, r"unknown RDX parameter"),
        with_cfg("unsafe_experiment", {"experiment": ".."}, r"experiment name '\.\.'"),
        with_cfg("unsafe_comparison", {"comparisons": [{"name": "../../x"}]},
                 r"comparison name '\.\./\.\./x'"),
        with_cfg("unsafe_method_abs", {"comparisons": [{"name": "c1", "methods": [
            {"method": "rdx", "name": "/elsewhere/x"}]}]}, r"method name '/elsewhere/x'"),
        with_cfg("unsafe_method_rel", {"comparisons": [{"name": "c1", "methods": [
            {"method": "rdx", "name": "../../../x"}]}]}, r"method name '\.\./\.\./\.\./x'"),
        with_cfg("k_too_large", {"comparisons": [{"name": "c1", "methods": [
            {"method": "rdx", "n_explanations": 30}]}]}, r"needs at least 32 images"),
        Case(e, "files", "damaged_checkpoint", run_argv,
             r"checkpoint .*damaged\.pt.* is damaged: its weights do not match the SHA-256",
             prepare=lambda c: _write(c.t / "cfg.yaml", _with_models(_config_doc(c.w), {
                 "a": {"model": "convnet", "layer": "gap", "checkpoint": str(c.w / "damaged.pt")},
                 "b": {"model": "convnet", "layer": "gap", "checkpoint": str(c.w / "ok.pt")}}))),
        Case(e, "configs", "only_unknown", lambda c: run_argv(c, "--only", "nope"),
             r"--only 'nope': no such comparison", prepare=cfg()),
        Case(e, "params", "flag_typo", lambda c: run_argv(c, "--froce"),
             r"rdx run.*unrecognized arguments: --froce", prepare=cfg()),
    ]
    cases += _paths(lambda c, p: ["--config", str(c.t / "cfg.yaml"), "--output-root", p,
                                  "--no-report"], e)
    for case in cases[-3:]:
        case.prepare = cfg()

    # the features files a config names: the file and array families
    def features(a: str, b: str = "digits_B.npy") -> Callable[[Ctx], None]:
        def prepare(c: Ctx):
            path = lambda x: x if x.startswith("/") else str(c.w / x)   # noqa: E731
            _write(c.t / "cfg.yaml", _with_models(_config_doc(c.w), {
                "a": {"features": path(a)}, "b": {"features": path(b)}}))
        return prepare

    files = _files(lambda c, p: run_argv(c), e)
    for case, spec in zip(files, ("/nonexistent/A.npy", "folder.npy", "empty.npy",
                                  "trunc.npz:a", "crc.npz:a", "notes.txt", "multi.npz",
                                  "multi.npz:zz", "digits_A.npy:a", "obj.npz")):
        case.prepare = features(spec)
    files[0].match = r"missing inputs — nothing was run.*A\.npy"
    files[1].match = r"is a folder"
    arrays = [
        Case(e, "arrays", "nan", run_argv, r"NaN/inf", prepare=features("d_nan.npy")),
        Case(e, "arrays", "inf", run_argv, r"NaN/inf",
             prepare=features("digits_A.npy", "d_inf.npy")),
        Case(e, "arrays", "1d", run_argv, r"has shape \(24,\)", prepare=features("d_vec.npy")),
        Case(e, "arrays", "3d", run_argv, r"has shape \(24, 8, 8\)",
             prepare=features("d_cube.npy")),
        Case(e, "arrays", "constant", run_argv, r"constant", prepare=features("d_const.npy")),
        Case(e, "arrays", "mismatched_n", run_argv,
             r"has shape \(40, 6\), but the image selection has 24 images",
             prepare=features("A.npy")),
        Case(e, "arrays", "identical", run_argv, r"same array",
             prepare=features("digits_A.npy", "digits_A.npy")),
    ]
    return cases + files + arrays


def _damaged(rel: str, how: str):
    """A prepare step: a copy of the finished toy run with ``c1/rel`` truncated, garbled or
    emptied."""
    def prepare(c: Ctx):
        shutil.copytree(c.finished / "toy", c.out / "toy")
        p = c.out / "toy" / "c1" / rel
        data = p.read_bytes()
        p.write_bytes({"truncate": data[: len(data) // 2], "garble": b"{not json",
                       "empty": b""}[how])
    return prepare


def _report_cases() -> list[Case]:
    e = "report"

    return [
        Case(e, "files", "missing", lambda c: [str(c.w / "nope")], r"is not a folder"),
        Case(e, "files", "a_file", lambda c: [str(c.w / "afile")], r"folder|no run|not a"),
        Case(e, "files", "no_runs", lambda c: [str(c.w / "conf_dir")],
             r"no comparison|no run|holds no"),
        Case(e, "results", "truncated_representations", lambda c: [str(c.out / "toy")],
             r"representations\.npz", prepare=_damaged("representations.npz", "truncate"),
             needs_run=True, codes=(0, 2)),
        Case(e, "results", "corrupt_explanations", lambda c: [str(c.out / "toy")],
             r"explanations\.json", prepare=_damaged("rdx_k2/explanations.json", "garble"),
             needs_run=True, codes=(0, 2)),
        Case(e, "results", "empty_grid_png", lambda c: [str(c.out / "toy")],
             r"a_over_b_1\.png could not be embedded",
             prepare=_damaged("rdx_k2/grids/a_over_b_1.png", "empty"), needs_run=True,
             codes=(0, 2), in_report=True),
    ]


def _train_cases() -> list[Case]:
    e = "train"

    def tr(c: Ctx, *more) -> list:
        return ["--preset", "digits", "--out", str(c.out), "--quiet", *more]

    cases = [
        Case(e, "configs", "unknown_preset", lambda c: ["--preset", "mnist_836", "--out",
                                                        str(c.out)], r"unknown preset 'mnist_836'"),
        Case(e, "sizes", "epochs_zero", lambda c: tr(c, "--epochs", "0"),
             r"--epochs must be a positive integer"),
        Case(e, "sizes", "per_class_zero", lambda c: tr(c, "--per-class", "0"),
             r"--per-class must be a positive integer"),
        Case(e, "params", "save_every_bad", lambda c: tr(c, "--save-every", "epoch,soon"),
             r"--save-every: 'soon'"),
        Case(e, "params", "device_bad", lambda c: tr(c, "--device", "tpu", "--epochs", "1"),
             r"'tpu' is not a device"),
        Case(e, "files", "missing_dataset",
             lambda c: ["--preset", "mnist_835", "--out", str(c.out), "--data-root",
                        str(c.w / "nodata")], r"download_mnist\.sh|does not exist|not found"),
    ]
    cases += _paths(lambda c, p: ["--preset", "digits", "--out", p, "--quiet"], e)
    return cases


def _dynamics_cases() -> list[Case]:
    e = "dynamics"
    good = {"name": "fz", "checkpoints": {"dir": "CK"},
            "probe": {"dataset": "digits", "target_classes": [0, 1], "num_images": 5}}

    def cfg(**over):
        def prepare(c: Ctx):
            doc = {**good, "output": str(c.out), **over}
            doc["checkpoints"] = {"dir": str(c.t / "nockpt")}
            _write(c.t / "dyn.yaml", doc)
        return prepare

    def dyn(c: Ctx, *more) -> list:
        return ["--config", str(c.t / "dyn.yaml"), "--quiet", "--no-train", *more]

    cases = [
        Case(e, "configs", "missing", lambda c: ["--config", str(c.w / "nope.yaml")],
             r"does not exist"),
        Case(e, "configs", "folder", lambda c: ["--config", str(c.w / "conf_dir")],
             r"is a folder|does not exist|not a file"),
        Case(e, "configs", "not_yaml", lambda c: ["--config", str(c.w / "bad.yaml")],
             r"not valid YAML"),
        Case(e, "configs", "unknown_key", dyn, r"typo: unknown key", prepare=cfg(typo=1)),
        Case(e, "configs", "wrong_type", dyn, r"batch_size", prepare=cfg(batch_size="big")),
        Case(e, "configs", "unsafe_name", dyn, r"name", prepare=cfg(name="../up")),
        Case(e, "files", "missing_checkpoints", dyn, r"does not exist", prepare=cfg()),
    ]
    cases += _paths(lambda c, p: dyn(c, "--out", p), e)
    for case in cases[-3:]:
        case.prepare = cfg()
    return cases


_MODELS = {"models": [{"id": "rand_a", "objective": "untrained",
                       "spec": {"model": "convnet", "pretrained": False, "seed": 0}},
                      {"id": "rand_b", "objective": "untrained",
                       "spec": {"model": "convnet", "pretrained": False, "seed": 1}}]}
_DATASETS = {"max_images": 20, "datasets": [{"id": "digits", "dataset": "digits"}]}


def _similarity_pipeline_cases(e: str) -> list[Case]:
    def files(models=_MODELS, datasets=_DATASETS):
        def prepare(c: Ctx):
            _write(c.t / "models.yaml", models)
            _write(c.t / "datasets.yaml", datasets)
        return prepare

    def md(c: Ctx, *more) -> list:
        return ["--models", str(c.t / "models.yaml"), "--datasets", str(c.t / "datasets.yaml"),
                "--output-root", str(c.out), "--cache-dir", str(c.out / "cache"), "--quiet",
                *more]

    bad_model = {"models": [{"id": "rand_a", "objective": "untrained", "typo": 1}]}
    unsafe = {"models": [{"id": "../x", "objective": "untrained"}]}
    cases = [
        Case(e, "configs", "models_missing",
             lambda c: ["--models", str(c.w / "nope.yaml"), "--datasets", str(c.w / "nope2.yaml"),
                        "--output-root", str(c.out)], r"does not exist"),
        Case(e, "configs", "models_folder",
             lambda c: ["--models", str(c.w / "conf_dir"), "--datasets", str(c.w / "bad.yaml"),
                        "--output-root", str(c.out)], r"is a folder|does not exist"),
        Case(e, "configs", "models_not_yaml",
             lambda c: ["--models", str(c.w / "bad.yaml"), "--datasets", str(c.w / "bad.yaml"),
                        "--output-root", str(c.out)], r"not valid YAML"),
        Case(e, "configs", "unknown_key", md, r"typo", prepare=files(models=bad_model)),
        Case(e, "configs", "unsafe_id", md, r"id", prepare=files(models=unsafe)),
        Case(e, "configs", "datasets_wrong_type", md, r"max_images|datasets",
             prepare=files(datasets={"datasets": [{"id": "d", "dataset": "digits",
                                                   "max_images": "many"}]})),
        Case(e, "configs", "only_unknown", lambda c: md(c, "--only-models", "zz"),
             r"--only-models: unknown ids \['zz'\]", prepare=files()),
    ]
    cases += _paths(lambda c, p: ["--models", str(c.t / "models.yaml"), "--datasets",
                                  str(c.t / "datasets.yaml"), "--output-root", p, "--quiet"], e)
    cases.append(Case(e, "paths", "cache_is_file",
                      lambda c: md(c)[:-3] + ["--cache-dir", str(c.w / "afile"), "--quiet"],
                      r"--cache-dir .* is a file"))
    for case in cases[-4:]:
        case.prepare = files()
    if e == "probe":
        cases.append(Case(e, "sizes", "holdout_out_of_range",
                          lambda c: md(c, "--holdout", "1.5"), r"--holdout must be in",
                          prepare=files()))
    else:
        cases.append(Case(e, "params", "max_images_zero", lambda c: md(c, "--max-images", "0"),
                          r"--max-images must be a positive", prepare=files()))
    return cases


def _consistency_cases() -> list[Case]:
    e = "consistency"
    return [
        Case(e, "configs", "no_root", lambda c: ["--quiet"], r"give --root"),
        Case(e, "files", "root_missing", lambda c: ["--root", str(c.w / "nope"), "--out",
                                                    str(c.out)], r"no matrices"),
        Case(e, "files", "root_without_matrices",
             lambda c: ["--root", str(c.w / "conf_dir"), "--out", str(c.out)], r"no matrices"),
        Case(e, "sizes", "min_pairs", lambda c: ["--root", str(c.w), "--min-pairs", "1"],
             r"--min-pairs must be at least 2"),
    ] + _paths(lambda c, p: ["--root", str(c.w), "--out", p], e)


def _analyze_cases() -> list[Case]:
    e = "analyze"

    return [
        Case(e, "files", "no_experiment",
             lambda c: ["--experiment", "nope", "--output-root", str(c.w)], r"no run found"),
        Case(e, "files", "no_comparisons",
             lambda c: ["--experiment", "conf_dir", "--output-root", str(c.w)],
             r"holds no comparison"),
        Case(e, "configs", "unknown_analysis",
             lambda c: ["--experiment", "toy", "--output-root", str(c.finished), "--analysis",
                        "bsr,pcaa"], r"pcaa", needs_run=True),
        Case(e, "configs", "unknown_comparison",
             lambda c: ["--experiment", "toy", "--output-root", str(c.finished), "--analysis",
                        "load", "--comparisons", "zz"], r"\['zz'\] not in", needs_run=True),
        Case(e, "results", "truncated_representations",
             lambda c: ["--experiment", "toy", "--output-root", str(c.out), "--analysis",
                        "load,pca"], r"representations\.npz", needs_run=True, codes=(0, 2),
             prepare=_damaged("representations.npz", "truncate")),
        Case(e, "results", "corrupt_explanations",
             lambda c: ["--experiment", "toy", "--output-root", str(c.out), "--analysis",
                        "scores"], r"explanations\.json", needs_run=True, codes=(0, 2),
             prepare=_damaged("rdx_k2/explanations.json", "garble")),
        Case(e, "paths", "analysis_is_file",
             lambda c: ["--experiment", "toy", "--output-root", str(c.out), "--analysis",
                        "scores"], r"analysis folder .* is a file", needs_run=True,
             prepare=lambda c: (shutil.copytree(c.finished / "toy", c.out / "toy"),
                                (c.out / "toy" / "analysis").write_text("x"))),
    ]


def _param(case: Case):
    marks = [pytest.mark.xfail(reason=case.xfail, strict=True)] if case.xfail else []
    return pytest.param(case, id=case.id, marks=marks)


CASES: list[Case] = (_explain_cases() + _similarity_cases() + _run_cases() + _report_cases()
                     + _train_cases() + _dynamics_cases() + _similarity_pipeline_cases("matrix")
                     + _similarity_pipeline_cases("probe") + _consistency_cases()
                     + _analyze_cases())


# =========================================================================== the test

@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_input_exits_2_with_a_message(case, world, request, tmp_path, monkeypatch,
                                          capsys):
    ctx = Ctx(world, tmp_path, request.getfixturevalue("finished") if case.needs_run
              else None)
    cwd = tmp_path / "cwd"      # relative default outputs (checkpoints/, outputs/) land here
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    if case.prepare is not None:
        case.prepare(ctx)
    world_before, case_before = _tree(world), _tree(tmp_path)
    finished_before = _tree(ctx.finished) if ctx.finished else None

    code, out, err = _invoke(case.entry, [str(a) for a in case.argv(ctx)], capsys)

    assert code in case.codes, f"exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert "Traceback" not in out + err
    said = err + ("".join(p.read_text(errors="replace") for p in ctx.out.rglob("*.html"))
                  if case.in_report else "")
    assert re.search(case.match, said, flags=re.S), \
        f"message does not match {case.match!r}:\n{err}"
    if code == 2:
        assert "error" in err
    # nothing changed outside this case's output folder
    assert _tree(world) == world_before, "the inputs were changed"
    if finished_before is not None:
        assert _tree(ctx.finished) == finished_before, "the finished run was changed"
    after = _tree(tmp_path)
    changed = {p for p, v in after.items() if case_before.get(p) != v}
    outside = sorted(p for p in changed if not p.startswith("out" + os.sep))
    assert not outside, f"written outside the output folder: {outside}"


# =========================================================================== subprocesses
# What a user's shell sees: exit status 2, one message, no traceback. Started together, in
# the background, when the module's first test asks for them.

SMOKE: dict[str, tuple[Callable[[Path], list], str]] = {
    "explain_folder_as_A": (lambda w: ["-m", "rdx", "explain", w / "folder.npy", w / "B.npy",
                                       "--out", "NEVER"], r"rdx explain: error: A .* is a folder"),
    "similarity_crc_npz": (lambda w: ["-m", "rdx", "similarity", f"{w / 'crc.npz'}:a",
                                      w / "B.npy"], r"damaged or incomplete"),
    "run_config_folder": (lambda w: ["-m", "rdx", "run", "--config", w / "conf_dir",
                                     "--output-root", "NEVER"], r"is a folder"),
    "train_out_under_file": (lambda w: ["-m", "rdx", "train", "--preset", "digits", "--out",
                                        w / "afile" / "ck"], r"lies under the file"),
    "analyze_no_experiment": (lambda w: [REPO / "analyze_explanations.py", "--experiment",
                                         "nope", "--output-root", w], r"no run found"),
}


@pytest.fixture(scope="module")
def smoke(world, tmp_path_factory):
    """The subprocesses, started at once; their outputs and working folders are under
    ``smoke/<name>`` (never inside ``world``, which the in-process cases watch)."""
    root = tmp_path_factory.mktemp("fuzz_smoke")
    procs = {}
    for name, (argv, _) in SMOKE.items():
        (root / name).mkdir()
        args = [str(a).replace("NEVER", str(root / name / "out")) for a in argv(world)]
        procs[name] = subprocess.Popen([sys.executable, *args], cwd=root / name, env=ENV,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
    procs["root"] = root
    yield procs
    for p in procs.values():
        if isinstance(p, subprocess.Popen) and p.poll() is None:
            p.kill()
            p.communicate()


@pytest.fixture(scope="module", autouse=True)
def _background(request, world):
    """Start the subprocesses (smoke tests, the killed training) before the in-process
    cases, so that they run alongside."""
    request.getfixturevalue("smoke")
    request.getfixturevalue("killed_training")


@pytest.mark.parametrize("name", list(SMOKE))
def test_subprocess_exits_2_without_traceback(smoke, world, name):
    out, err = smoke[name].communicate(timeout=300)
    assert smoke[name].returncode == 2, err
    assert "Traceback" not in out + err
    assert re.search(SMOKE[name][1], err), err
    folder = smoke["root"] / name
    assert not [p for p in folder.rglob("*") if p.is_file()], "a refused run wrote files"
    assert not (world / "afile").is_dir()


# =========================================================================== interruptions

TRAIN = ["-m", "rdx", "train", "--preset", "digits", "--per-class", "20", "--epochs", "8"]


@pytest.fixture(scope="module")
def killed_training(tmp_path_factory):
    """``rdx train`` run twice in subprocesses: once uninterrupted, once killed (SIGKILL)
    after its first epoch checkpoint, then started again. A background thread does it while
    the other tests run; the fixture returns the thread and its record."""
    root = tmp_path_factory.mktemp("fuzz_train")
    record: dict = {}

    def scenario():
        ref = subprocess.Popen([sys.executable, *TRAIN, "--out", str(root / "ref"), "--quiet"],
                               env=ENV, cwd=root, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        run = subprocess.Popen([sys.executable, *TRAIN, "--out", str(root / "run"), "--quiet"],
                               env=ENV, cwd=root, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        first = root / "run" / "digits" / "epoch=0-step=4.pt"
        deadline = time.monotonic() + 240
        while not first.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        run.send_signal(signal.SIGKILL)
        run.communicate()
        record["killed_rc"] = run.returncode
        folder = root / "run" / "digits"
        record["after_kill"] = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.pt")}
        resumed = subprocess.run([sys.executable, *TRAIN, "--out", str(root / "run")], env=ENV,
                                 cwd=root, capture_output=True, text=True, timeout=300)
        record["resumed"] = resumed
        record["ref"] = ref.communicate(timeout=300) + (ref.returncode,)
        record["root"] = root

    thread = threading.Thread(target=scenario, daemon=True)
    thread.start()
    return thread, record


def test_killed_training_resumes_bit_identical(killed_training, capsys):
    import torch

    thread, rec = killed_training
    thread.join(timeout=400)
    assert not thread.is_alive()
    assert rec["ref"][2] == 0, rec["ref"][1]
    assert rec["killed_rc"] == -signal.SIGKILL
    assert "last.pt" not in rec["after_kill"], "the run finished before it could be killed"
    resumed = rec["resumed"]
    assert resumed.returncode == 0, resumed.stderr
    assert re.search(r"resuming after step (\d+) of 32", resumed.stderr), resumed.stderr
    folder = rec["root"] / "run" / "digits"
    # finished work is not redone: the checkpoints written before the kill are untouched
    # (the one being written when the process died may be rewritten)
    kept = sorted(rec["after_kill"], key=lambda n: rec["after_kill"][n])[:-1]
    assert kept, rec["after_kill"]
    for name in kept:
        assert (folder / name).stat().st_mtime_ns == rec["after_kill"][name], name
    # bit-identical to the uninterrupted run: every checkpoint's weights and accuracies
    ref_folder = rec["root"] / "ref" / "digits"
    names = sorted(p.name for p in ref_folder.glob("*.pt"))
    assert names == sorted(p.name for p in folder.glob("*.pt")) and "last.pt" in names
    for name in names:
        a = torch.load(ref_folder / name, weights_only=True)
        b = torch.load(folder / name, weights_only=True)
        assert a["state_dict"].keys() == b["state_dict"].keys()
        for k in a["state_dict"]:
            assert torch.equal(a["state_dict"][k], b["state_dict"][k]), (name, k)
        assert a["meta"]["train_accuracy"] == b["meta"]["train_accuracy"], name
    assert a["meta"]["history"] == b["meta"]["history"]
    # a finished run is not trained again
    before = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.pt")}
    from rdx.cli import main
    argv = [str(a) for a in TRAIN[2:]] + ["--out", str(rec["root"] / "run")]
    assert main(argv) == 0
    assert "already trained" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.pt")} == before


def test_interrupted_run_resumes_without_redoing_finished_methods(world, tmp_path, monkeypatch,
                                                                 capsys):
    """Ctrl-C in the second method: the first is kept; the next run skips it and computes
    the second; a damaged output of a finished method gets that method redone."""
    import rdx.experiments.run as run_mod
    from rdx.cli import main

    real = run_mod.method

    def interrupted(name):
        if name == "kmeans":
            raise KeyboardInterrupt
        return real(name)

    argv = ["run", "--config", str(world / "toy.yaml"), "--output-root", str(tmp_path),
            "--no-report"]
    comp = tmp_path / "toy" / "c1"
    monkeypatch.setattr(run_mod, "method", interrupted)
    assert main(argv) == 130
    assert "interrupted; finished work is kept" in capsys.readouterr().err
    first = (comp / "rdx_k2" / "explanations.json").stat().st_mtime_ns
    assert not (comp / "km").exists()

    monkeypatch.setattr(run_mod, "method", real)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "rdx_k2: done already (skipped)" in out
    assert (comp / "rdx_k2" / "explanations.json").stat().st_mtime_ns == first
    run = json.loads((comp / "run.json").read_text())
    assert run["methods"] == {"rdx_k2": "skipped (done)", "km": "done"}
    assert "rdx_k2" in run["timings_s"]          # kept from the first run

    concepts = comp / "km" / "concepts.npz"
    concepts.write_bytes(concepts.read_bytes()[:100])
    km_before = (comp / "km" / "explanations.json").stat().st_mtime_ns
    assert main(argv) == 0
    capsys.readouterr()
    run = json.loads((comp / "run.json").read_text())
    assert run["methods"] == {"rdx_k2": "skipped (done)", "km": "done"}
    assert (comp / "km" / "explanations.json").stat().st_mtime_ns != km_before
    assert (comp / "rdx_k2" / "explanations.json").stat().st_mtime_ns == first
    assert not list(comp.rglob(".*.tmp"))


def test_concurrent_runs_of_one_comparison_compute_it_once(world, tmp_path, capsys):
    """A second run of a comparison that is being computed waits for the first (the lock
    file), then finds every method done."""
    from rdx.experiments import run_experiment
    from rdx.experiments.run import comparison_lock

    comp = tmp_path / "toy" / "c1"
    results: list = []

    def second():
        results.append(run_experiment(world / "toy.yaml", output_root=tmp_path,
                                      progress=False))

    with comparison_lock(comp):                  # the "first" run holds the comparison
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.5)
        assert thread.is_alive() and not (comp / "rdx_k2").exists()
    thread.join(timeout=120)
    assert results and "another rdx run is working on this comparison" in \
        capsys.readouterr().err
    # and now a run of the finished comparison, waiting on nothing, computes nothing
    run_experiment(world / "toy.yaml", output_root=tmp_path, progress=False)
    run = json.loads((comp / "run.json").read_text())
    assert set(run["methods"].values()) == {"skipped (done)"}


def test_checkpoint_checksums(world, tmp_path):
    """The SHA-256 of the weights is in the checkpoint and its sidecar; damaged weights and
    a sidecar of other weights are refused; checkpoints from before the checksum load with
    a warning."""
    from rdx import RDXInputError
    from rdx.models.checkpoint import load_checkpoint, sidecar_path, state_dict_sha256

    model, meta = load_checkpoint(world / "ok.pt")
    assert meta["weights_sha256"] == state_dict_sha256(model)
    assert json.loads(sidecar_path(world / "ok.pt").read_text())["weights_sha256"] == \
        meta["weights_sha256"]
    with pytest.raises(RDXInputError, match=r"is damaged: .* recorded in the checkpoint"):
        load_checkpoint(world / "damaged.pt")
    shutil.copy(world / "old.pt", tmp_path / "swapped.pt")       # weights differ from ok.pt's
    other = json.loads(sidecar_path(world / "ok.pt").read_text())
    other["weights_sha256"] = "0" * 64
    sidecar_path(tmp_path / "swapped.pt").write_text(json.dumps(other))
    with pytest.raises(RDXInputError, match=r"recorded in its sidecar swapped\.pt\.json"):
        load_checkpoint(tmp_path / "swapped.pt")
    with pytest.warns(UserWarning, match=r"before checkpoints carried a checksum"):
        model, _ = load_checkpoint(world / "old.pt")
    assert state_dict_sha256(model) == meta["weights_sha256"]


def test_similarity_memory_refusal_names_a_subsample_that_fits(monkeypatch):
    """Every measure's estimate grows with n (n² for RSA and RBF CKA); a refusal names the
    largest n whose estimate fits in 90 % of the memory, and that n does fit."""
    import torch

    from rdx import RDXInputError
    from rdx.similarity import MEASURES
    from rdx.similarity.resources import check_memory, estimate_memory

    for name in MEASURES:
        small, _ = estimate_memory(name, 1000, 64, 32)
        big, _ = estimate_memory(name, 4000, 64, 32)
        assert big > small > 0
        if name in ("rsa", "cka_rbf"):
            assert big / small > 12        # ~16 for n²
    assert estimate_memory("rsa", 1000, 8, 8, permutations=10)[0] > \
        estimate_memory("rsa", 1000, 8, 8)[0]      # the null keeps n×n matrices
    monkeypatch.setenv("RDX_MEMORY_LIMIT_GB", "0.5")
    avail = 0.9 * 0.5 * 2**30
    for name in ("rsa", "cka_linear", "mutual_knn"):
        with pytest.raises(RDXInputError, match=r"subsample of at most (\d+) images") as info:
            check_memory(name, 10**6, 64, 64, device=torch.device("cpu"), permutations=5)
        fit = int(re.search(r"at most (\d+) images", str(info.value)).group(1))
        assert estimate_memory(name, fit, 64, 64, permutations=5)[0] <= avail
        assert estimate_memory(name, fit + 1, 64, 64, permutations=5)[0] > avail
        assert check_memory(name, fit, 64, 64, permutations=5) <= avail


def test_similarity_prints_a_time_estimate_for_long_work(tmp_path, monkeypatch, capsys):
    import rdx.similarity.resources as res
    from rdx.cli import main

    r = np.random.default_rng(1)
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "big_A.npy", r.standard_normal((2500, 4)).astype(np.float32))
    np.save(tmp_path / "big_B.npy", r.standard_normal((2500, 3)).astype(np.float32))
    monkeypatch.setattr(res, "estimate_seconds", lambda *a, **k: 600.0)
    assert main(["similarity", "big_A.npy", "big_B.npy", "--measure", "cka_linear",
                 "--permutations", "3"]) == 0
    err = capsys.readouterr().err
    # first the whole command's estimate, then each measure's own
    assert re.search(r"similarity: 1 measure\(s\) on n = 2500 images, 3 permutations — "
                     r"about 10 min \(estimate\)", err)
    assert re.search(r"cka_linear: about 10 min \(estimate\)", err)


def test_case_count():
    """How many bad inputs and faults are tried, by family and entry point (quoted in the
    README)."""
    by_family: dict[str, int] = {}
    by_entry: dict[str, int] = {}
    for c in CASES:
        by_family[c.family] = by_family.get(c.family, 0) + 1
        by_entry[c.entry] = by_entry.get(c.entry, 0) + 1
    extra = {"interruptions": 3, "checkpoints": 1}
    total = len(CASES) + len(SMOKE) + sum(extra.values())
    print(f"\n{total} cases: {len(CASES)} in process, {len(SMOKE)} as subprocesses, "
          f"{extra}\nby family: {by_family}\nby entry point: {by_entry}")
    assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"
    assert set(by_entry) == {"explain", "run", "report", "similarity", "train", "dynamics",
                             "matrix", "consistency", "probe", "analyze"}
