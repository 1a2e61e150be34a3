"""The outside battery (``benchmarks/bad_input_battery.py``) and the fixes it led to.

The battery itself runs every case as a subprocess and takes minutes, so here only its case
generation is checked (every command in the classes, drawn the same way for the same
seed); the classes it found failing have cheap tests of their own below, each at the one
place the class is handled:

* a write past the process's file size limit (``ulimit -f``) and a temporary folder that
  cannot be written end with exit status 2 and one line (:mod:`rdx.cli`);
* ``rdx benchmark`` checks both folders it writes before its first model trains;
* a grey ConvNet given colour images (``rdx features`` on an RGB folder) converts them to
  one channel instead of failing inside the network.
"""
from __future__ import annotations

import collections
import importlib.util
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rdx.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _battery():
    spec = importlib.util.spec_from_file_location(
        "bad_input_battery", ROOT / "benchmarks" / "bad_input_battery.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bad_input_battery", module)
    spec.loader.exec_module(module)
    return module


def test_the_battery_covers_every_command_in_every_class():
    bat = _battery()
    cases = bat.all_cases(0)
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)) and len(ids) >= 600
    by_class = collections.defaultdict(set)
    for c in cases:
        by_class[c.cls].add(c.command)
    assert set(by_class) == set(bat.CLASSES)
    assert set().union(*by_class.values()) == set(bat.COMMANDS)
    for cls in ("outpath", "special", "unwritable", "parsed"):
        assert len(by_class[cls]) >= 11, (cls, sorted(by_class[cls]))
    for command in bat.COMMANDS:       # each command in most classes
        assert sum(command in v for v in by_class.values()) >= 4, command
    # Hypothesis draws the same values for the same seed (a failure can be replayed)
    assert bat.int_values(4, 11) == bat.int_values(4, 11)


def _default_signals() -> None:
    # the command gets SIGXFSZ's default action (the process would end on the spot) and
    # the limit a user's `ulimit -f` sets
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))


def test_a_file_size_limit_is_a_one_line_error(tmp_path):
    """Past ``ulimit -f`` the kernel sends SIGXFSZ, which ends a process on the spot (no
    message, a temporary file left); rdx ignores it, so the write fails with EFBIG and the
    command says what happened."""
    r = np.random.default_rng(0)
    np.save(tmp_path / "A.npy", r.standard_normal((30, 4)).astype(np.float32))
    np.save(tmp_path / "B.npy", r.standard_normal((30, 3)).astype(np.float32))
    done = subprocess.run(
        [sys.executable, "-m", "rdx", "similarity", "A.npy", "B.npy", "--measure",
         "cka_linear", "--out", "out/s.json", "--quiet"], cwd=tmp_path, capture_output=True,
        text=True, timeout=300, preexec_fn=_default_signals,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("rdx similarity: error: ")
    assert "larger than the file system allows" in done.stderr
    assert not (tmp_path / "out" / "s.json").exists()
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]


def test_no_writable_temporary_folder_is_a_one_line_error(monkeypatch, capsys):
    """Python's tempfile reports a full or read-only /tmp as FileNotFoundError("No usable
    temporary directory ..."), whatever library asked for the temporary file."""
    import rdx.commands.report as report

    def run_command(args):
        raise FileNotFoundError(2, "No usable temporary directory found in ['/tmp']")

    monkeypatch.setattr(report, "run_command", run_command)
    assert main(["report", "anything"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rdx report: error: no folder for temporary files can be written")
    assert "TMPDIR" in err and len(err.strip().splitlines()) == 1


def test_benchmark_checks_its_folders_before_training(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    for argv, needle in (
            (["--out", tmp_path / "file"], "--out"),
            (["--checkpoints", tmp_path / "file" / "ck"], "--checkpoints"),
            (["--out", " "], "--out")):
        code = None
        try:
            code = main(["benchmark", "--quick", "--quiet", *map(str, argv)])
        except SystemExit as exc:       # argparse's usage error for a blank value
            code = exc.code
        err = capsys.readouterr().err
        assert code == 2, err
        assert needle in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_grey_convnet_takes_colour_images_as_grey():
    from PIL import Image

    from rdx.models.checkpoint import grey_transform

    rgb = (np.random.default_rng(0).random((20, 20, 3)) * 255).astype(np.uint8)
    t = grey_transform(28)
    x = t(Image.fromarray(rgb))
    assert x.shape == (1, 28, 28)
    # the same as converting to grey first; grey and float images are not touched
    assert np.array_equal(x.numpy(), t(Image.fromarray(rgb).convert("L")).numpy())
    grey = Image.fromarray(rgb[..., 0])
    assert t.transforms[0](grey) is grey
    f = Image.fromarray(rgb[..., 0].astype(np.float32) / 255)
    assert f.mode == "F" and t.transforms[0](f) is f
