"""The standard streams of every command (:mod:`rdx.streams`), as properties.

For every command line of a list (results, help, version, bad input of several kinds) and
every fault of the standard streams — stdout or stderr closed (``>&-``, ``2>&-``), stdout
or stderr a pipe whose reader has left (``| head -1``), an encoding that cannot hold the
output's characters (``PYTHONIOENCODING=ascii``) — the command prints no traceback and
exits with the status it has without the fault: 0, or 2 for bad input; 141 (128 + SIGPIPE)
when the pipe it writes to is broken, quietly. Hypothesis draws the command line, the
output folder's name (letters of any script) and the encoding; each example runs as a
user's shell runs it, ``python -m rdx ...`` in a subprocess.

A broken pipe is made deterministic by closing the pipe's reading end before the command
starts: its first write fails, as it does once ``head -1`` has read its line and left.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import hypothesis_profiles  # noqa: F401  (registers and loads the profile)
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdx.streams import BROKEN_PIPE_STATUS

TIMEOUT = 300
#: What a traceback or Python's own complaint at exit looks like on a stream.
NOISE = ("Traceback", "Exception ignored", "BrokenPipeError", "UnicodeEncodeError",
         "AttributeError")


@dataclass(frozen=True)
class Case:
    """A command line; its exit status without a fault and the streams it writes."""
    name: str
    argv: tuple[str, ...]   # "{out}" is the output folder of the example
    status: int
    stdout: bool            # writes on stdout (the summary, help, version)
    stderr: bool            # writes on stderr (progress, the message of bad input)


CASES = [
    Case("explain", ("explain", "A.npy", "B.npy", "--out", "{out}", "--n-explanations", "2"),
         0, stdout=True, stderr=True),
    Case("explain --quiet", ("explain", "A.npy", "B.npy", "--out", "{out}",
                             "--n-explanations", "2", "--quiet"), 0, stdout=False, stderr=False),
    Case("explain, missing B", ("explain", "A.npy", "missing.npy", "--out", "{out}"),
         2, stdout=False, stderr=True),
    Case("explain, usage error", ("explain", "A.npy", "B.npy", "--out", "{out}",
                                  "--n-explanations", "two"), 2, stdout=False, stderr=True),
    Case("--version", ("--version",), 0, stdout=True, stderr=False),
    Case("--help", ("--help",), 0, stdout=True, stderr=False),
    Case("run --help", ("run", "--help"), 0, stdout=True, stderr=False),
    Case("run, missing config", ("run", "--config", "missing.yaml", "--output-root", "{out}"),
         2, stdout=False, stderr=True),
    Case("--threads 0", ("--threads", "0", "explain"), 2, stdout=False, stderr=True),
    Case("unknown command", ("nosuchcommand",), 2, stdout=False, stderr=True),
    Case("features --workers", ("features", "convnet", "digits", "--out", "{out}/f.npz",
                                "--workers", "100000"), 2, stdout=False, stderr=True),
]

FAULTS = ("none", "stdout closed", "stderr closed", "both closed", "stdout broken pipe",
          "stderr broken pipe", "encoding")

#: Output folder names: letters of several scripts (Greek, Cyrillic, CJK, accents), so the
#: summary's "results: <folder>" line holds characters a narrow encoding lacks.
NAMES = st.text(st.characters(categories=["Ll", "Lu", "Lo"], max_codepoint=0x9FFF),
                min_size=1, max_size=6)
#: PYTHONIOENCODING values; "γ" (in every RDX summary) is in cp1253 only.
ENCODINGS = st.sampled_from(["ascii", "latin-1", "cp1253", "koi8-r", "ascii:strict",
                             "ascii:surrogateescape"])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    w = tmp_path_factory.mktemp("streams")
    r = np.random.default_rng(0)
    A = r.standard_normal((40, 6)).astype(np.float32)
    np.save(w / "A.npy", A)
    np.save(w / "B.npy", (A[:, :5] + 0.3 * r.standard_normal((40, 5))).astype(np.float32))
    return w


def expected_status(case: Case, fault: str) -> int:
    if case.status != 0:
        return case.status          # bad input exits 2 whatever the streams are
    if fault == "stdout broken pipe" and case.stdout:
        return BROKEN_PIPE_STATUS
    if fault == "stderr broken pipe" and case.stderr:
        return BROKEN_PIPE_STATUS
    return 0


def run_with_fault(argv: list[str], fault: str, cwd: Path, encoding: str = "utf-8"
                   ) -> tuple[int, str, str]:
    """``python -m rdx ARGV`` under ``fault``: (exit status, stdout, stderr) of the streams
    that are still there (``""`` for a closed or broken one)."""
    env = {**os.environ, "PYTHONIOENCODING": encoding if fault == "encoding" else "utf-8"}
    cmd = [sys.executable, "-m", "rdx", *argv]
    closed = {"stdout closed": ">&-", "stderr closed": "2>&-", "both closed": ">&- 2>&-"}
    if fault in closed:   # as a shell closes them: exec with the descriptor closed
        cmd = ["bash", "-c", f'exec "$@" {closed[fault]}', "bash", *cmd]
    broken = None
    kw: dict = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    if fault.endswith("broken pipe"):
        reader, broken = os.pipe()
        os.close(reader)          # the reader has left: the first write fails (EPIPE)
        kw["stdout" if fault.startswith("stdout") else "stderr"] = broken
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              timeout=TIMEOUT, **kw)
    finally:
        if broken is not None:
            os.close(broken)
    enc = encoding.split(":")[0] if fault == "encoding" else "utf-8"
    # strict: a character the encoding lacks must have been escaped by the command
    out = (proc.stdout or b"").decode(enc)
    err = (proc.stderr or b"").decode(enc)
    return proc.returncode, out, err


@settings(max_examples=8)
@given(case=st.sampled_from(CASES), name=NAMES, encoding=ENCODINGS)
@pytest.mark.parametrize("fault", FAULTS)
def test_no_stream_fault_gives_a_traceback_or_a_wrong_status(inputs, fault, case, name,
                                                             encoding):
    work = Path(tempfile.mkdtemp(dir=inputs))
    try:
        for f in ("A.npy", "B.npy"):
            os.symlink(inputs / f, work / f)
        argv = [a.replace("{out}", name) for a in case.argv]
        code, out, err = run_with_fault(argv, fault, work, encoding)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert code == expected_status(case, fault), (case.name, fault, code, out, err)
    for text in (out, err):
        assert not any(n in text for n in NOISE), (case.name, fault, text)
    if case.status == 2 and fault in ("none", "stdout closed", "stdout broken pipe",
                                      "encoding"):
        # the one-paragraph message still reaches stderr
        assert err.startswith(("rdx", "usage:")) and "error" in err, (case.name, err)
    if case.status == 2:
        assert "error" not in out   # the message goes to stderr, never to stdout
    if case.stdout and code == 0 and fault in ("none", "stderr closed", "stderr broken pipe",
                                               "encoding"):
        assert out.strip(), (case.name, fault)   # the output arrived whole
    if fault == "stdout broken pipe" and code == BROKEN_PIPE_STATUS:
        assert "error" not in err   # quietly: no message about the pipe
    if fault == "encoding" and case.name == "explain":
        gamma = "γ" if encoding.startswith("cp1253") else "\\u03b3"
        assert f"({gamma}=" in out, out


@pytest.mark.slow
def test_a_run_cut_by_a_broken_pipe_resumes(tmp_path):
    """``rdx run ... | head -1``: the run stops at its first line on stdout (141, no
    traceback, nothing on stderr about the pipe) and the same command then finishes."""
    from conftest import digit_features

    digit_features(tmp_path)
    import yaml

    sel = {"dataset": "digits", "target_classes": [3, 5, 8], "num_images": 40, "seed": 0}
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump({
        "experiment": "toy", "seed": 0,
        "base": {"image_selection": sel,
                 "representations": {"a": {"features": str(tmp_path / "A.npy")},
                                     "b": {"features": str(tmp_path / "B.npy")}},
                 "methods": [{"method": "kmeans", "name": "km", "n_explanations": 2}]},
        "comparisons": [{"name": "c1"}]}))
    argv = ["run", "--config", "toy.yaml", "--output-root", "out", "--no-report"]
    code, _, err = run_with_fault(argv, "stdout broken pipe", tmp_path)
    assert code == BROKEN_PIPE_STATUS and not any(n in err for n in NOISE), err
    code, out, err = run_with_fault(argv, "stdout closed", tmp_path)
    assert code == 0 and not any(n in err for n in NOISE), err
    code, out, err = run_with_fault(argv, "none", tmp_path)
    assert code == 0 and "results: out/toy/c1" in out, (out, err)
    assert (tmp_path / "out/toy/c1/km/explanations.json").is_file()


@pytest.mark.slow
def test_list_layers_on_a_narrow_encoding_and_a_broken_pipe(tmp_path):
    """``rdx features MODEL --list-layers``: its shapes ("32×14×14") are escaped on an
    ASCII stdout, and a reader that leaves ends it with 141 and no traceback."""
    argv = ["features", "convnet", "--random-init", "--list-layers", "--quiet"]
    code, out, err = run_with_fault(argv, "encoding", tmp_path, "ascii")
    assert code == 0 and "\\xd7" in out and "layer1" in out, (out, err)
    code, out, err = run_with_fault(argv, "stdout broken pipe", tmp_path)
    assert code == BROKEN_PIPE_STATUS and not any(n in err for n in NOISE), err
