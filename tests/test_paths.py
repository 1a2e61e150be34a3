"""Paths of inputs and outputs (:mod:`rdx.paths`, :mod:`rdx.input_files`), as properties over
every command.

For any relation between a command's inputs and its output location that would destroy an
input, any degenerate output value, any name that cannot be a folder, any input that is not
a regular file and any write fault, the command must exit with status 2 and a message that
names the offending path or option, never print a traceback, leave its inputs byte for byte
as they were and write nothing outside its output location. The relations are drawn by
Hypothesis (profiles in ``hypothesis_profiles``: ``HYPOTHESIS_PROFILE=long`` for a long
search); every command runs in this process through :func:`rdx.cli.main`.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import shutil
import socket
import stat
import threading
from pathlib import Path
from types import SimpleNamespace

import hypothesis_profiles  # noqa: F401  (registers and loads the profile)
import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from rdx.cli import main
from rdx.errors import RDXInputError
from rdx.input_files import check_input_file, command_scope
from rdx.paths import check_name, check_output_location, describe_os_error
from rdx.results.store import (COMPARISON_FILES, EXPERIMENT_FILES, ROOT_FOLDERS,
                               comparison_writes)

N = 40   # images of the small inputs
SEL = {"dataset": "digits", "target_classes": [3, 5, 8], "num_images": 8, "seed": 0}


# =========================================================================== the harness

def invoke(argv: list) -> tuple[int, str, str]:
    """``rdx ARGV`` in this process: (exit status, stdout, stderr). Any exception but
    SystemExit escapes and fails the test — it is a traceback a user would see."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:   # argparse: usage errors exit 2
            code = exc.code if isinstance(exc.code, int) else 2
    return int(code or 0), out.getvalue(), err.getvalue()


def tree(root: Path) -> dict[str, str]:
    """Every entry under ``root``: relative path → content digest (files), link target
    (symbolic links) or "dir"; what a command wrote shows up as a difference."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            mode = p.lstat().st_mode
            if stat.S_ISLNK(mode):
                found[rel] = "-> " + os.readlink(p)
            elif stat.S_ISDIR(mode):
                found[rel] = "dir"
            elif stat.S_ISREG(mode):
                found[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                found[rel] = "special"
    return found


def assert_refused(code: int, out: str, err: str, *names: str) -> None:
    """Exit 2, an error message on stderr naming each of ``names``, no traceback."""
    assert code == 2, f"exit {code}\nstdout: {out[-1500:]}\nstderr: {err[-1500:]}"
    assert "Traceback" not in out + err
    assert "error" in err
    for name in names:
        assert name in err, f"{name!r} not named in:\n{err}"


@contextlib.contextmanager
def workplace(factory) -> Path:
    """A fresh folder for one example, also the working directory (relative defaults such
    as ``checkpoints/`` land there)."""
    d = factory.mktemp("ex")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(d)
        yield d


# =========================================================================== the inputs

@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """Inputs shared by the examples (never written by them): features, labels, images,
    one comparison folder (``rdx explain --report``) inside an experiment folder, and the
    digits features of a run config."""
    w = tmp_path_factory.mktemp("paths_world")
    r = np.random.default_rng(0)
    A = r.standard_normal((N, 6)).astype(np.float32)
    B = (A[:, :5] + 0.3 * r.standard_normal((N, 5))).astype(np.float32)
    np.save(w / "A.npy", A)
    np.save(w / "B.npy", B)
    np.savez(w / "pair.npz", a=A, b=B)
    np.save(w / "y.npy", np.arange(N) % 3)
    np.save(w / "imgs.npy", r.integers(0, 255, (N, 8, 8)).astype(np.uint8))
    from rdx.data import get_dataset, select_per_class

    ds = get_dataset("digits")
    idx = select_per_class(ds.ids, ds.labels, SEL["target_classes"], SEL["num_images"],
                           seed=SEL["seed"])
    dA = ds.images[idx].reshape(len(idx), -1).astype(np.float32)
    dB = dA + r.normal(0, 0.5, dA.shape).astype(np.float32)
    np.savez(w / "digits.npz", a=dA, b=dB)
    code, out, err = invoke(["explain", w / "A.npy", w / "B.npy", "--labels", w / "y.npy",
                             "--out", w / "exp" / "comp", "--report", "--n-explanations", "2",
                             "--quiet"])
    assert code == 0, err
    return w


def run_config(features_a: str, features_b: str, **over) -> dict:
    """An experiment config over the selected digits (names overridable)."""
    method = {"method": "kmeans", "name": over.pop("method_name", "km"), "n_explanations": 2}
    return {"experiment": over.pop("experiment", "toy"), "seed": 0,
            "base": {"image_selection": dict(SEL),
                     "representations": {"a": {"features": features_a},
                                         "b": {"features": features_b}},
                     "methods": [method]},
            "comparisons": [{"name": over.pop("comparison", "c1")}]}


def copy_inputs(world: Path, d: Path) -> Path:
    """The example's own copy of the plain inputs (they may be linked or moved around)."""
    inp = d / "in"
    inp.mkdir()
    for name in ("A.npy", "B.npy", "pair.npz", "y.npy", "imgs.npy", "digits.npz"):
        shutil.copy(world / name, inp / name)
    shutil.copytree(world / "exp", inp / "exp", symlinks=True)
    return inp


def spell(path: Path, d: Path, how: str) -> str:
    """``path`` written the way a user might: relative to the working folder ``d``,
    absolute, with ``./`` or with a detour through a folder and ``..``."""
    rel = path.relative_to(d).as_posix()
    if how == "absolute":
        return str(path)
    if how == "dotted":
        return "./" + rel
    if how == "detour":
        (d / "detour").mkdir(exist_ok=True)
        return "detour/../" + rel
    return rel


SPELLINGS = st.sampled_from(["relative", "absolute", "dotted", "detour"])


# =========================================================================== 1. no overlap

@given(command=st.sampled_from(["similarity", "explore"]),
       link=st.sampled_from(["same", "symlink", "hardlink", "folder_alias"]),
       how=SPELLINGS, which=st.integers(0, 4), npz=st.booleans())
def test_an_output_file_is_never_an_input(world, tmp_path_factory, command, link, how, which,
                                          npz):
    """``--out`` naming an input file — itself, through a symbolic or hard link or through
    a linked folder, however spelled — is refused before any work; the input is intact."""
    with workplace(tmp_path_factory) as d:
        inp = copy_inputs(world, d)
        comp = inp / "exp" / "comp"
        if command == "similarity":
            specs = ([f"{inp / 'pair.npz'}:a", f"{inp / 'pair.npz'}:b"] if npz
                     else [inp / "A.npy", inp / "B.npy"])
            target = inp / ("pair.npz" if npz else ["A.npy", "B.npy"][which % 2])
            argv = ["similarity", *specs, "--measure", "cka_linear"]
        else:
            data = ["run.json", "images.json", "representations.npz", "rdx/explanations.json"]
            target = comp / data[which % len(data)]
            argv = ["explore", comp, "--embedding", "pca", "--quiet"]
        if link == "symlink":
            (d / "link.out").symlink_to(target)
            out = d / "link.out"
        elif link == "hardlink":
            os.link(target, d / "hard.out")
            out = d / "hard.out"
        elif link == "folder_alias":
            (d / "alias").symlink_to(target.parent, target_is_directory=True)
            out = d / "alias" / target.name
        else:
            out = target
        given = spell(out, d, how)
        before = tree(d)
        code, o, e = invoke([*argv, "--out", given])
        assert_refused(code, o, e, "--out", "input")
        assert tree(d) == before


EXPLAIN_WRITES = {False: ["concepts.npz", "graphs.npz", "grids/old.npz"],
                  True: ["representations.npz", "alignment.npz", "rdx/concepts.npz",
                         "rdx/graphs.npz", "rdx/grids/x.npz"]}


@given(report=st.booleans(), which=st.integers(0, 4), slot=st.sampled_from(["A", "B", "both"]),
       alias=st.booleans(), how=SPELLINGS)
def test_explain_never_writes_over_an_input_in_its_folder(world, tmp_path_factory, report,
                                                          which, slot, alias, how):
    """An input inside ``--out`` at a path ``rdx explain`` writes (a method file, or with
    ``--report`` the comparison's files) is refused, also when ``--out`` is reached through a
    linked folder; the folder keeps exactly what it held."""
    with workplace(tmp_path_factory) as d:
        inp = copy_inputs(world, d)
        out = d / "out"
        names = EXPLAIN_WRITES[report]
        rel = names[which % len(names)]
        held = out / rel
        held.parent.mkdir(parents=True)
        shutil.copy(inp / "pair.npz", held)
        A = f"{held}:a" if slot in ("A", "both") else inp / "A.npy"
        B = f"{held}:b" if slot in ("B", "both") else inp / "B.npy"
        if alias:
            (d / "alias").symlink_to(out, target_is_directory=True)
            out = d / "alias"
        given = spell(out, d, how)
        before = tree(d)
        code, o, e = invoke(["explain", A, B, "--out", given, "--quiet",
                             *(["--report"] if report else [])])
        assert_refused(code, o, e, "--out", rel)
        assert tree(d) == before


@given(where=st.sampled_from(["toy/c1/representations.npz", "toy/c1/km/concepts.npz",
                              "toy/c1/km/grids/f.npz", "cache/features/f.npz",
                              "toy/analysis/f.npz", "submitit/f.npz"]),
       config_inside=st.booleans(), alias=st.booleans(), how=SPELLINGS)
def test_run_never_writes_over_an_input_in_its_output_root(world, tmp_path_factory, where,
                                                           config_inside, alias, how):
    """Features (or the config itself) kept in ``--output-root`` at a path the run writes
    — a comparison's files, a method's, the cache, the analysis — are refused before any
    work."""
    with workplace(tmp_path_factory) as d:
        inp = copy_inputs(world, d)
        root = d / "root"
        held = root / where
        held.parent.mkdir(parents=True)
        shutil.copy(inp / "digits.npz", held)
        cfg = (root / "toy" / "analysis" / "cfg.yaml") if config_inside else (d / "cfg.yaml")
        cfg.parent.mkdir(parents=True, exist_ok=True)
        features = (f"{inp / 'digits.npz'}:a", f"{inp / 'digits.npz'}:b") if config_inside \
            else (f"{held}:a", f"{held}:b")
        cfg.write_text(yaml.safe_dump(run_config(*features)))
        if alias:
            (d / "alias").symlink_to(root, target_is_directory=True)
            root = d / "alias"
        given = spell(root, d, how)
        before = tree(d)
        code, o, e = invoke(["run", "--config", cfg, "--output-root", given, "--quiet"])
        assert_refused(code, o, e, "--output-root",
                       "toy/analysis/cfg.yaml" if config_inside else where)
        assert tree(d) == before


def test_an_input_beside_the_outputs_is_fine(world, tmp_path_factory):
    """The rule is precise, not a ban: features kept in the output folder at a path the
    command does not write are read, the results are written next to them, and the
    features are unchanged (also ``rdx explain`` on a comparison's own representations,
    written into that comparison as a plain result)."""
    with workplace(tmp_path_factory) as d:
        inp = copy_inputs(world, d)
        out = d / "out"
        (out / "features").mkdir(parents=True)
        shutil.copy(inp / "pair.npz", out / "features" / "pair.npz")
        spec = out / "features" / "pair.npz"
        code, o, e = invoke(["explain", f"{spec}:a", f"{spec}:b", "--out", out, "--report",
                             "--n-explanations", "2", "--quiet"])
        assert code == 0, e
        assert (out / "run.json").is_file()
        assert (out / "features" / "pair.npz").read_bytes() == (inp / "pair.npz").read_bytes()
        comp = inp / "exp" / "comp"
        kept = (comp / "representations.npz").read_bytes()
        code, o, e = invoke(["explain", f"{comp / 'representations.npz'}:a",
                             f"{comp / 'representations.npz'}:b", "--out", comp,
                             "--n-explanations", "2", "--quiet"])
        assert code == 0, e
        assert (comp / "representations.npz").read_bytes() == kept
        assert (comp / "explanations.json").is_file()


def test_atomic_writes_never_replace_an_input_of_the_command(tmp_path):
    """The backstop: inside a command, a checked input cannot be replaced by any atomic
    write (whatever the up-front checks missed); outside one, library use is unaffected."""
    from rdx.io import write_json_atomic

    f = tmp_path / "A.npy"
    np.save(f, np.ones((3, 2)))
    raw = f.read_bytes()
    (tmp_path / "alias.npy").symlink_to(f)
    with command_scope():
        check_input_file(f)
        for target in (f, tmp_path / "alias.npy"):
            with pytest.raises(RDXInputError, match="is an input file of this command"):
                write_json_atomic(target, {"x": 1})
        write_json_atomic(tmp_path / "other.json", {"x": 1})   # anything else is fine
    assert f.read_bytes() == raw
    write_json_atomic(tmp_path / "alias.npy", {"x": 1})   # no command: the caller's choice
    assert f.read_bytes() == raw                        # (the link is replaced, not A.npy)


# =========================================================================== 2. degenerate

#: Every command that takes an output location, as (argv before the value, the option).
OUTPUT_OPTIONS = {
    "similarity": (lambda w: ["similarity", w / "A.npy", w / "B.npy", "--out"], "--out"),
    "explain": (lambda w: ["explain", w / "A.npy", w / "B.npy", "--out"], "--out"),
    "explain_report": (lambda w: ["explain", w / "A.npy", w / "B.npy", "--report", "--out"],
                       "--out"),
    "explore": (lambda w: ["explore", w / "exp" / "comp", "--out"], "--out"),
    "run": (lambda w: ["run", "--config", w / "none.yaml", "--output-root"], "--output-root"),
    "train": (lambda w: ["train", "--preset", "digits", "--out"], "--out"),
    "dynamics": (lambda w: ["dynamics", "--config", w / "none.yaml", "--out"], "--out"),
    "matrix": (lambda w: ["matrix", "--models", w / "m.yaml", "--datasets", w / "d.yaml",
                          "--out"], "--out"),
    "matrix_cache": (lambda w: ["matrix", "--models", w / "m.yaml", "--datasets",
                                w / "d.yaml", "--cache-dir"], "--cache-dir"),
    "probe": (lambda w: ["probe", "--models", w / "m.yaml", "--datasets", w / "d.yaml",
                         "--out"], "--out"),
    "consistency": (lambda w: ["consistency", "--root", w, "--out"], "--out"),
    "layers": (lambda w: ["layers", "--config", w / "none.yaml", "--output"], "--output"),
}

DEGENERATE = st.one_of(
    st.text(alphabet=" \t", max_size=3),                                  # empty, blanks
    st.sampled_from(["a/ /b", " /x", "out/\t"]),                          # a blank component
    st.builds(lambda s: "out" + s, st.text(st.characters(min_codepoint=0xDC80,
                                                         max_codepoint=0xDCFF),
                                           min_size=1, max_size=2)),      # undecodable bytes
    st.builds(lambda c: f"out{c}x", st.sampled_from(["\n", "\r", "\x1b", "\x7f"])),
)


@given(command=st.sampled_from(sorted(OUTPUT_OPTIONS)), value=DEGENERATE)
def test_a_degenerate_output_location_is_refused(world, tmp_path_factory, command, value):
    """An empty, blank, undecodable or control-character output value is refused by every
    command (no run writes into the current folder instead); nothing is written."""
    argv, option = OUTPUT_OPTIONS[command]
    with workplace(tmp_path_factory) as d:
        before = tree(d)
        code, o, e = invoke([*argv(world), value])
        # (explore parses --out as a Path, which makes "" the folder "."; refused as one)
        assert_refused(code, o, e, option)
        assert tree(d) == before


# =========================================================================== names

def _cased(name: str, flips: list[bool]) -> str:
    return "".join(c.upper() if f else c for c, f in zip(name, flips + [False] * len(name)))


@given(level=st.sampled_from(["method", "comparison", "experiment"]), which=st.integers(0, 6),
       flips=st.lists(st.booleans(), max_size=8), surrogate=st.booleans())
def test_names_that_cannot_be_folders_are_refused(world, tmp_path_factory, level, which,
                                                  flips, surrogate):
    """A method, comparison or experiment named like one of the output's own files (in any
    letter case), or with undecodable bytes, is refused before any work, naming the key."""
    reserved = {"method": COMPARISON_FILES, "comparison": EXPERIMENT_FILES,
                "experiment": ROOT_FOLDERS}[level]
    name = _cased(reserved[which % len(reserved)], flips)
    if surrogate:
        name = "x\udcff" + name
    with workplace(tmp_path_factory) as d:
        npz = world / "digits.npz"
        cfg = d / "cfg.yaml"
        cfg.write_text(yaml.safe_dump(run_config(f"{npz}:a", f"{npz}:b",
                                                 **{f"{level}_name" if level == "method"
                                                    else level: name})))
        code, o, e = invoke(["run", "--config", cfg, "--output-root", d / "root", "--quiet"])
        assert_refused(code, o, e, f"{level} name")
        assert list(tree(d)) == ["cfg.yaml"]


@given(st.text(max_size=12))
def test_check_name_accepts_only_safe_single_names(name):
    """Any text: either refused with RDXInputError, or one safe, valid-text folder name
    that is not reserved."""
    try:
        got = check_name(name, "method name", reserved=COMPARISON_FILES)
    except RDXInputError:
        return
    assert got == name and Path(name).name == name and name not in (".", "..")
    name.encode("utf-8")
    assert name.casefold() not in {r.casefold() for r in COMPARISON_FILES}


# =========================================================================== 3. regular files

@contextlib.contextmanager
def unblocked(fifo: Path):
    """If a reader does block on ``fifo`` (the bug), open it for writing after a few
    seconds so the test fails with a wrong message instead of hanging."""
    stop = threading.Event()

    def release() -> None:
        if stop.wait(10):
            return
        while not stop.is_set():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
            stop.wait(0.2)

    t = threading.Thread(target=release, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


SLOTS = {
    "similarity_A": lambda w, x: ["similarity", x, w / "B.npy"],
    "similarity_B": lambda w, x: ["similarity", w / "A.npy", x],
    "explain_A": lambda w, x: ["explain", x, w / "B.npy", "--out", "out"],
    "explain_labels": lambda w, x: ["explain", w / "A.npy", w / "B.npy", "--labels", x,
                                    "--out", "out"],
    "explain_images": lambda w, x: ["explain", w / "A.npy", w / "B.npy", "--images", x,
                                    "--out", "out"],
    "run_config": lambda w, x: ["run", "--config", x, "--output-root", "out"],
    "dynamics_config": lambda w, x: ["dynamics", "--config", x, "--out", "out"],
    "layers_config": lambda w, x: ["layers", "--config", x, "--output", "out"],
}


@given(slot=st.sampled_from(sorted(SLOTS)),
       kind=st.sampled_from(["fifo", "socket", "device", "folder", "link_to_fifo"]))
def test_only_regular_files_are_read(world, tmp_path_factory, slot, kind):
    """A named pipe, socket, device or folder given as features, labels, images or config
    is refused by what it is, at once (a pipe would block the reader forever)."""
    with workplace(tmp_path_factory) as d:
        x = d / "input.npy"
        expect = {"fifo": "named pipe", "link_to_fifo": "named pipe", "socket": "socket",
                  "device": "character device", "folder": "is a folder"}[kind]
        sock = None
        if kind in ("fifo", "link_to_fifo"):
            os.mkfifo(d / "pipe")
            if kind == "fifo":
                x = d / "pipe"
            else:
                x.symlink_to(d / "pipe")
        elif kind == "socket":
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(str(x))
        elif kind == "device":
            x = Path(os.devnull)
        else:
            x.mkdir()
        try:
            with unblocked(d / "pipe"):
                code, o, e = invoke(SLOTS[slot](world, x))
        finally:
            if sock is not None:
                sock.close()
        assert_refused(code, o, e, str(x), expect)
        assert not (d / "out").exists()


# =========================================================================== 4. write faults

@pytest.fixture(scope="module")
def experiment(world, tmp_path_factory) -> Path:
    """An experiment folder (``rdx report`` writes into it) holding one comparison."""
    e = tmp_path_factory.mktemp("paths_exp") / "exp"
    shutil.copytree(world / "exp", e)
    return e


WRITERS = {
    "similarity": lambda w, d: ["similarity", w / "A.npy", w / "B.npy", "--measure",
                                "cka_linear", "--out", d / "out" / "s.json"],
    "explain": lambda w, d: ["explain", w / "A.npy", w / "B.npy", "--out", d / "out",
                             "--n-explanations", "2", "--quiet"],
    "explain_report": lambda w, d: ["explain", w / "A.npy", w / "B.npy", "--out", d / "out",
                                    "--report", "--n-explanations", "2", "--quiet"],
    "train": lambda w, d: ["train", "--preset", "digits", "--out", d / "out", "--epochs", "1",
                           "--per-class", "5", "--device", "cpu", "--quiet"],
}

FAULTS = st.sampled_from([(errno.ENOSPC, "disk is full"), (errno.EROFS, "read-only"),
                          (errno.EACCES, "permission denied"), (errno.EDQUOT, "quota")])


def _fail_writes(mp: pytest.MonkeyPatch, code: int) -> None:
    """Every file write fails with ``code`` when it is flushed to disk — as a full disk
    does — through the one write path (``atomic_write``'s fsync)."""
    def fsync(fd: int) -> None:
        raise OSError(code, os.strerror(code))
    mp.setattr(os, "fsync", fsync)


@given(command=st.sampled_from(sorted(WRITERS)), fault=FAULTS)
def test_a_write_fault_is_an_error_message(world, tmp_path_factory, command, fault):
    """A full disk, quota, read-only file system or missing permission while writing exits 2
    with the file and what to do, not a traceback; the inputs are unchanged."""
    code_, words = fault
    inputs = {p: p.read_bytes() for p in (world / "A.npy", world / "B.npy")}
    with workplace(tmp_path_factory) as d, pytest.MonkeyPatch.context() as mp:
        _fail_writes(mp, code_)
        code, o, e = invoke(WRITERS[command](world, d))
    assert_refused(code, o, e, str(d / "out"), words)
    assert all(p.read_bytes() == raw for p, raw in inputs.items())


@pytest.mark.parametrize("command", ["explore", "report"])
def test_a_write_fault_in_a_run_folder_is_an_error_message(experiment, command):
    """The pages written into a finished run (``rdx explore``, ``rdx report``) fail as
    cleanly, and the run's files are unchanged."""
    before = tree(experiment)
    argv = (["explore", experiment / "comp", "--embedding", "pca", "--quiet"]
            if command == "explore" else ["report", experiment, "--quiet"])
    with pytest.MonkeyPatch.context() as mp:
        _fail_writes(mp, errno.ENOSPC)
        code, o, e = invoke(argv)
    assert_refused(code, o, e, str(experiment), "disk is full")
    # every write is atomic: no file changed or half-written (an empty output folder may
    # have been made)
    files = lambda t: {p: v for p, v in t.items() if v != "dir"}   # noqa: E731
    assert files(tree(experiment)) == files(before)


@given(command=st.sampled_from(sorted(WRITERS) + ["explore", "report", "run"]),
       fault=st.sampled_from([errno.EROFS, errno.EACCES]))
def test_an_unwritable_output_location_is_refused_before_any_work(
        world, experiment, tmp_path_factory, command, fault):
    """A read-only (or forbidden) output location is found by the up-front probe: exit 2
    naming it, before anything is computed or created."""
    import tempfile

    real = tempfile.TemporaryFile

    def probe(*args, **kwargs):
        raise OSError(fault, os.strerror(fault))

    with workplace(tmp_path_factory) as d, pytest.MonkeyPatch.context() as mp:
        argv = {"explore": ["explore", experiment / "comp", "--quiet"],
                "report": ["report", experiment, "--quiet"],
                "run": ["run", "--config", d / "cfg.yaml", "--output-root", d / "out"]}.get(
                    command) or WRITERS[command](world, d)
        if command == "run":
            npz = world / "digits.npz"
            (d / "cfg.yaml").write_text(yaml.safe_dump(run_config(f"{npz}:a", f"{npz}:b")))
        before = tree(d)
        mp.setattr(tempfile, "TemporaryFile", probe)
        try:
            code, o, e = invoke(argv)
        finally:
            mp.setattr(tempfile, "TemporaryFile", real)
        assert_refused(code, o, e, "cannot be created or written", os.strerror(fault))
        assert tree(d) == before


def test_too_little_free_space_is_refused_up_front(experiment, monkeypatch):
    """Where the output's size is known (the explorer's page budget), it is compared with
    the free space before any work."""
    import rdx.paths

    monkeypatch.setattr(rdx.paths.shutil, "disk_usage",
                        lambda p: SimpleNamespace(total=10**9, used=10**9 - 10**5, free=10**5))
    code, o, e = invoke(["explore", experiment / "comp", "--max-mb", "5", "--quiet"])
    assert_refused(code, o, e, "MB are free")


def test_describe_os_error_names_the_file_and_the_remedy():
    msg = describe_os_error(OSError(errno.ENOSPC, "No space left on device", "/x/run.json"))
    assert "'/x/run.json'" in msg and "disk is full" in msg
    assert describe_os_error(OSError(errno.EIO, "I/O error")) is None   # a fault: traceback


def test_a_file_too_large_names_the_limit_that_was_passed(monkeypatch):
    """EFBIG comes from the process's `ulimit -f` far more often than from the file system:
    with a finite limit the message names it and how to raise it."""
    import rdx.paths as paths

    big = OSError(errno.EFBIG, "File too large", "/x/graphs.npz")
    monkeypatch.setattr(paths, "file_size_limit", lambda: 1 << 20)
    msg = describe_os_error(big)
    assert "'/x/graphs.npz'" in msg and "file-size limit (1048576 bytes" in msg
    assert "ulimit -f unlimited" in msg
    monkeypatch.setattr(paths, "file_size_limit", lambda: None)
    assert "larger than the file system allows" in describe_os_error(big)


@pytest.mark.parametrize("dataset", ["mnist", "fashion"])
def test_train_on_a_dataset_that_is_not_installed_says_how_to_install_it(
        tmp_path, monkeypatch, dataset):
    """No silent success: a missing dataset exits 2 with the command that installs it."""
    import rdx.data.mnist

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(rdx.data.mnist, "DEBIAN_FASHION", tmp_path / "no-debian-package")
    preset, hint = {"mnist": ("mnist_835", "download_mnist.sh"),
                    "fashion": ("fashion_pcs", "apt-get install -y dataset-fashion-mnist")
                    }[dataset]
    code, o, e = invoke(["train", "--preset", preset, "--data-root", tmp_path / "data",
                         "--out", tmp_path / "ck", "--quiet"])
    assert_refused(code, o, e, hint)
    assert not (tmp_path / "ck").exists()


# =========================================================================== the functions

def test_check_output_location_rules(tmp_path):
    """The rules in one place, directly: a folder output holding an input at a written path
    (``/**``: a whole subfolder) or anywhere (``writes=None``), an output file that is an
    input, and an input folder equal to the output folder (allowed)."""
    (tmp_path / "out" / "grids").mkdir(parents=True)
    f = tmp_path / "out" / "grids" / "x.npy"
    np.save(f, np.zeros(2))
    writes = comparison_writes(["m"])
    check_output_location(tmp_path / "out", inputs=[f], writes=writes)   # not a written path
    with pytest.raises(RDXInputError, match="grids/x.npy"):
        check_output_location(tmp_path / "out", inputs=[f], writes=["grids/**"])
    with pytest.raises(RDXInputError, match="grids/x.npy"):
        check_output_location(tmp_path / "out", inputs=[f])
    with pytest.raises(RDXInputError, match="is the input file"):
        check_output_location(f, kind="file", inputs=[f"{f}"])
    check_output_location(tmp_path / "out", inputs=[tmp_path / "out"])


# ============================================= left from the previous audit (issue 45, 7)

#: Characters of 1, 2, 3 and 4 bytes in UTF-8: names of every byte length up to NAME_MAX.
_WIDE = st.sampled_from(["a", "Z", "_", "é", "γ", "字", "😀"])


@st.composite
def _names(draw) -> str:
    """A file name of 1..255 bytes (UTF-8), not starting with a dot."""
    limit = draw(st.integers(1, 255))
    name = ""
    while True:
        c = draw(_WIDE)
        if len((name + c).encode()) > limit:
            break
        name += c
    return name or "a"


@given(name=_names())
def test_a_result_of_any_name_up_to_255_bytes_is_written_atomically(tmp_path_factory, name):
    """Whatever the final name's length (1..255 bytes), the temporary file of an atomic
    write fits NAME_MAX, the result is written whole and no temporary is left."""
    from rdx.io import temporary_stem, write_json_atomic

    stem = temporary_stem(name)
    assert len(f".{stem}.{4194304}.abcdefgh.tmp".encode()) <= 255
    assert stem == name or len(name.encode()) > 255 - 25
    d = tmp_path_factory.mktemp("names")
    write_json_atomic(d / name, {"n": len(name)})
    assert os.listdir(d) == [name]
    assert json_loads((d / name).read_text()) == {"n": len(name)}


def json_loads(text: str):
    import json

    return json.loads(text)


@pytest.mark.parametrize("length", [245, 255])
def test_long_output_names_are_accepted(world, tmp_path, length):
    """A 245-byte ``--out`` file (and a 255-byte output folder) is what the file system
    allows, so it is accepted: the temporary suffix made a 245-byte name too long before."""
    out = tmp_path / ("s" * (length - 5) + ".json")
    code, o, e = invoke(["similarity", world / "A.npy", world / "B.npy", "--measure",
                         "cka_linear", "--out", out])
    assert code == 0, e
    assert json_loads(out.read_text())
    folder = tmp_path / ("e" * length)
    code, o, e = invoke(["explain", world / "A.npy", world / "B.npy", "--out", folder,
                         "--n-explanations", "2", "--quiet"])
    assert code == 0, e
    assert (folder / "explanations.json").is_file()
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_decoy_temporaries_and_user_files(tmp_path):
    """Temporaries of the project's form that no writer holds are removed by the next write
    into their folder — also when the pid in their name is alive (1, this process's own:
    pids are reused); a live writer's temporary stays; files that only look like
    temporaries (another pattern, a link) are the user's and stay as they are."""
    from rdx.io import write_json_atomic

    abandoned = [".explanations.json.1.abcdefgh.tmp",
                 f".run.json.{os.getpid()}.x_y_z_12.tmp", ".other.99999999.q1w2e3r4.tmp"]
    users = ["notes.tmp", ".explanations.json.tmp", ".run.json.1.ABCDEFGH.tmp",
             "explanations.json.1.abcdefgh.tmp", ".x.json.12.short.tmp"]
    for n in abandoned + users:
        (tmp_path / n).write_text("decoy")
    os.symlink("notes.tmp", tmp_path / ".link.json.7.abcdefgh.tmp")
    seen = {}

    def write(fh):
        # a second write into the folder while this one is under way sweeps it: the live
        # temporary (this writer's) must survive it
        write_json_atomic(tmp_path / "inner.json", {"inner": True})
        seen["mine"] = [p for p in os.listdir(tmp_path) if p.startswith(".x.json.")
                        and p != ".x.json.12.short.tmp"]
        fh.write(b"{}")

    from rdx.io import atomic_write

    atomic_write(tmp_path / "x.json", write)
    assert len(seen["mine"]) == 1 and (tmp_path / "x.json").read_text() == "{}"
    left = set(os.listdir(tmp_path))
    assert left == set(users) | {".link.json.7.abcdefgh.tmp", "inner.json", "x.json"}
    assert all((tmp_path / n).read_text() == "decoy" for n in users)


def test_an_output_folder_replaced_by_a_file_mid_run_is_an_error_message(world, tmp_path,
                                                                        monkeypatch):
    """The output folder replaced by a file while the command writes into it: exit 2 with
    a message naming the folder, not a FileExistsError/NotADirectoryError traceback."""
    from rdx.results.writer import ComparisonWriter

    out = tmp_path / "out"
    real = ComparisonWriter.write_inputs

    def replaced(self, *args, **kwargs):
        real(self, *args, **kwargs)
        shutil.rmtree(out)
        out.write_text("someone else's file")

    monkeypatch.setattr(ComparisonWriter, "write_inputs", replaced)
    code, o, e = invoke(["explain", world / "A.npy", world / "B.npy", "--out", out,
                         "--report", "--n-explanations", "2", "--quiet"])
    assert_refused(code, o, e, str(out), "a folder on this path is a file")
    assert out.read_text() == "someone else's file"


@pytest.mark.parametrize("where", ["report page", "report figure"])
def test_a_full_disk_while_the_report_is_written_exits_2(world, tmp_path, monkeypatch, where):
    """A full disk while ``rdx explain --report`` writes its page (or a figure of it) is
    the user's to fix: exit 2 with the disk's message, not a warning and exit 0 with the
    page missing (or a page with a figure missing)."""
    import rdx.report
    import rdx.viz.pca_overlay

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "out" / "x"))

    if where == "report page":
        monkeypatch.setattr(rdx.report, "write_comparison_report", full)
    else:
        monkeypatch.setattr(rdx.viz.pca_overlay, "pca_overlay", full)
    code, o, e = invoke(["explain", world / "A.npy", world / "B.npy", "--labels",
                         world / "y.npy", "--images", world / "imgs.npy", "--out",
                         tmp_path / "out", "--report", "--n-explanations", "2", "--quiet"])
    assert_refused(code, o, e, "disk is full")
    assert "warning" not in e


def _alias_doc(width: int, levels: int) -> str:
    """``levels`` anchors, each a list of ``width`` aliases of the one before ("billion
    laughs" at 9 × 9)."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


@given(width=st.integers(1, 12), levels=st.integers(1, 9))
def test_yaml_aliases_are_bounded_before_the_document_is_built(width, levels):
    """A YAML document whose aliases expand to more than MAX_YAML_ALIAS_NODES extra nodes is
    refused (RDXInputError naming where it came from) without building it; a smaller one
    is read exactly as yaml.safe_load reads it."""
    from rdx.io import MAX_YAML_ALIAS_NODES, parse_yaml

    text = _alias_doc(width, levels)
    # nodes of the expanded document beyond its distinct ones (each level's list is
    # expanded as often as it is used, every use holding the expanded level below)
    size = [1 + width]            # l0: the list and its scalars
    for _ in range(1, levels):
        size.append(1 + width * size[-1])
    distinct = 1 + levels * (1 + width) + 2 * levels   # + the keys and their values
    expanded = 1 + sum(1 + s for s in size)
    if expanded - distinct > MAX_YAML_ALIAS_NODES:
        with pytest.raises(RDXInputError, match="cfg.yaml: the YAML document grows"):
            parse_yaml(text, "cfg.yaml")
    else:
        assert parse_yaml(text, "cfg.yaml") == yaml.safe_load(text)


def test_recursive_and_merged_aliases(tmp_path):
    """An anchor used inside itself is refused; anchors, aliases and merge keys of an
    ordinary size are read as YAML defines them."""
    from rdx.io import parse_yaml

    with pytest.raises(RDXInputError, match="refers to itself"):
        parse_yaml("a: &a [1, *a]\n", "x.yaml")
    doc = parse_yaml("base: &b {k: 1, n: 2}\none: *b\ntwo: {<<: *b, n: 3}\n", "x.yaml")
    assert doc == {"base": {"k": 1, "n": 2}, "one": {"k": 1, "n": 2}, "two": {"k": 1, "n": 3}}


@pytest.mark.parametrize("command", ["run", "dynamics", "explain-param"])
def test_commands_refuse_a_yaml_alias_bomb(world, tmp_path, command):
    """Every command reading YAML (configs, ``--param`` values) refuses a billion-laughs
    document with exit 2 (it kept them busy for minutes before)."""
    bomb = _alias_doc(9, 9)
    (tmp_path / "bomb.yaml").write_text(bomb)
    argv = {"run": ["run", "--config", tmp_path / "bomb.yaml", "--output-root",
                    tmp_path / "o"],
            "dynamics": ["dynamics", "--config", tmp_path / "bomb.yaml"],
            # the same document in flow style: one --param value
            "explain-param": ["explain", world / "A.npy", world / "B.npy", "--out",
                              tmp_path / "o", "--method", "kmeans", "--param",
                              "n_explanations={" + ", ".join(bomb.strip().splitlines()) + "}",
                              "--quiet"]}[command]
    code, o, e = invoke(argv)
    assert_refused(code, o, e, "aliases")


@pytest.mark.parametrize("page", ["explore.html", "report.html", "a_over_b_1.png"])
def test_a_result_that_could_not_be_written_is_never_a_success(world, tmp_path, monkeypatch,
                                                               page):
    """Whoever catches it on its way up (a best-effort page, figure or grid), a result file
    that a full disk kept from being written makes the command exit 2: ``atomic_write``
    remembers the failure and ``rdx.cli`` turns a 0 into 2."""
    import rdx.io

    real = rdx.io._atomic_write

    def full(path, write):
        if Path(path).name == page:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, write)

    monkeypatch.setattr(rdx.io, "_atomic_write", full)
    code, o, e = invoke(["explain", world / "A.npy", world / "B.npy", "--labels",
                         world / "y.npy", "--images", world / "imgs.npy", "--out",
                         tmp_path / "out", "--report", "--n-explanations", "2", "--quiet"])
    assert_refused(code, o, e, "disk is full", page)
    # and the next command in this process starts with a clean slate
    code, o, e = invoke(["similarity", world / "A.npy", world / "B.npy", "--measure",
                         "cka_linear", "--out", tmp_path / "s.json"])
    assert code == 0, e
