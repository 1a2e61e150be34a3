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
    assert "file-size limit (64 bytes, `ulimit -f`)" in done.stderr
    assert "ulimit -f unlimited" in done.stderr
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


def test_benchmark_checks_its_folders_and_names_before_training(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    for argv, needle in (
            (["--out", tmp_path / "file"], "--out"),
            (["--checkpoints", tmp_path / "file" / "ck"], "--checkpoints"),
            (["--out", " "], "--out"),
            (["--out", tmp_path / "o", "--cases", ""], "--cases '' names nothing"),
            (["--out", tmp_path / "o", "--methods", " , "], "--methods")):
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


def test_results_never_replace_a_device_pipe_or_folder(tmp_path):
    """Every result goes through atomic_write, whose rename would replace whatever the name
    points to (as root, ``--out /dev/null`` would replace the machine's /dev/null)."""
    import stat

    from rdx.errors import RDXInputError
    from rdx.io import atomic_write

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    os.symlink(tmp_path / "fifo", tmp_path / "to_fifo")
    refused = ["fifo", "dir", "to_fifo"]
    if os.getuid() == 0:   # a device node of our own (like /dev/null), harmless to test on
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        refused.append("null")
    for name in refused:
        with pytest.raises(RDXInputError, match="refusing to write .* it is a"):
            atomic_write(tmp_path / name, lambda fh: fh.write(b"x"))
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)
    (tmp_path / "file").write_text("old")
    os.symlink(tmp_path / "file", tmp_path / "to_file")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    for name in ("file", "to_file", "dangling", "new"):
        atomic_write(tmp_path / name, lambda fh: fh.write(b"x"))
    assert (tmp_path / "file").read_text() == "x"


def test_image_sources_naming_a_pipe_are_refused_without_opening_it(tmp_path):
    from rdx.data.sources import check_readable, open_source
    from rdx.errors import RDXInputError

    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "ok.png")
    os.mkfifo(tmp_path / "pipe.png")
    (tmp_path / "list.csv").write_text(f"path\n{tmp_path / 'ok.png'}\n{tmp_path / 'pipe.png'}\n")
    ds = open_source(str(tmp_path / "list.csv"))
    with pytest.raises(RDXInputError, match="pipe.png.*named pipe, not a regular file"):
        check_readable(ds, np.arange(2))
    with pytest.raises(RDXInputError, match="named pipe"):
        ds.load_image(1)
    with pytest.raises(RDXInputError, match="image source .* named pipe"):
        open_source(str(tmp_path / "pipe.png"))


def test_the_explorer_page_never_replaces_a_file_of_its_comparison(tmp_path, capsys):
    """The page may replace an earlier explore.html, nothing else of the comparison (its
    report, grids, results) — also through a link."""
    r = np.random.default_rng(0)
    np.save(tmp_path / "A.npy", r.standard_normal((40, 5)).astype(np.float32))
    np.save(tmp_path / "B.npy", r.standard_normal((40, 4)).astype(np.float32))
    comp = tmp_path / "comp"
    assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--report",
                 "--quiet", "--n-explanations", "2", "--out", str(comp)]) == 0
    before = {p: p.read_bytes() for p in comp.rglob("*") if p.is_file()}
    os.symlink(comp / "report.html", tmp_path / "page.html")
    for out in (comp / "report.html", comp / "rdx" / "explanations.json",
                tmp_path / "page.html"):
        capsys.readouterr()
        assert main(["explore", str(comp), "--out", str(out), "--embedding", "pca",
                     "--quiet"]) == 2, out
        assert "destroy that input" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in comp.rglob("*") if p.is_file()} == before
    for flag, bad in (("--max-mb", "inf"), ("--max-mb", "nan"), ("--max-mb", "0"),
                      ("--selection-mb", "inf")):
        # budgets that become byte counts: nan and inf are refused by the flag's type
        # (argparse exits 2), the rest by the command
        try:
            code = main(["explore", str(comp), "--out", str(tmp_path / "e.html"), flag, bad,
                         "--quiet"])
        except SystemExit as exc:
            code = exc.code
        assert code == 2
        err = capsys.readouterr().err
        assert f"{flag} must be a " in err or \
            f"argument {flag}: expected a finite number, got {bad!r}" in err, err
    assert not (tmp_path / "e.html").exists()


@pytest.mark.parametrize("argv, needle", [
    (["features", "model.pt", "digits", "--out", "f.npz", "--workers", "10000000"],
     "--workers=10000000 is far beyond any useful value: at most 256"),
    (["matrix", "--models", "m.yaml", "--datasets", "d.yaml", "--num-workers", str(2**40)],
     "--num-workers="),
    (["probe", "--models", "m.yaml", "--datasets", "d.yaml", "--probe-batch-size",
      str(10**12)], "--probe-batch-size="),
    (["probe", "--models", "m.yaml", "--datasets", "d.yaml", "--lrs", "0.1", "-1"],
     "--lrs must be a positive finite number"),     # nan and inf: the flag's type refuses
    (["probe", "--models", "m.yaml", "--datasets", "d.yaml", "--batch-size", "0"],
     "--batch-size must be a positive integer"),
])
def test_counts_and_rates_are_refused_before_any_work(tmp_path, monkeypatch, capsys, argv,
                                                      needle):
    """The options that start processes or size batches meet their ceilings (rdx.budget)
    before the command starts (the files named here do not even exist); the options every
    feature or probe job reads are checked once before the work, not by each job."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())


def test_a_wrong_device_is_a_usage_error_before_any_work(tmp_path, monkeypatch, capsys):
    """--device is read by its flag's type (rdx.flags.device_name), as --seed is: argparse's
    usage error, exit 2, before the (missing) config files are opened."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["matrix", "--models", "m.yaml", "--datasets", "d.yaml", "--device", "tpu0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("argument --device: 'tpu0' is not a device; use auto, cpu, "
                                "cuda or cuda:N"), err
    assert "Traceback" not in err and "m.yaml" not in err


SHORT_WRITE = """
import errno, os, resource, signal, sys
import numpy as np
from rdx.io import atomic_write, environment_error
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
try:
    atomic_write(sys.argv[1], lambda fh: np.save(fh, np.zeros(10000)))
except OSError as exc:
    print(exc.errno == errno.EFBIG, exc.filename == sys.argv[1], environment_error(exc))

def torch_like(fh):   # torch.save reports the short write as RuntimeError("unexpected pos")
    fh.write(b"x" * 4096)
    fh.flush()
    raise RuntimeError("unexpected pos 8000 vs 7896")

try:
    atomic_write(sys.argv[1], torch_like)
except OSError as exc:
    print(exc.errno == errno.EFBIG)
"""


def test_a_short_array_write_is_named_as_the_full_disk_it_is(tmp_path):
    """numpy reports a short write of an array without an errno ("80000 requested and 4096
    written"), torch as a RuntimeError; atomic_write names the cause — here the file size
    limit — so that the command can say it in one line, and loops over jobs stop at it
    (environment_error)."""
    done = subprocess.run([sys.executable, "-c", SHORT_WRITE, str(tmp_path / "x.npy")],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "True", "True", "True"], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_layers_check_also_checks_the_output(tmp_path, capsys):
    """``rdx layers --check`` says a config is ready to run; an output that cannot be made
    (a path under a file) is part of that, not found later by the study."""
    import yaml

    (tmp_path / "afile").write_text("x")
    doc = _battery().layers_config(tmp_path, tmp_path / "out")
    (tmp_path / "layers.yaml").write_text(yaml.safe_dump(doc))
    argv = ["layers", "--config", str(tmp_path / "layers.yaml"), "--check", "--out"]
    assert main(argv + [str(tmp_path / "afile" / "o")]) == 2
    assert "lies under the file" in capsys.readouterr().err
    assert main(argv + [str(tmp_path / "o")]) == 0
    assert "valid" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["matrix", "probe"])
def test_a_study_with_no_available_dataset_is_refused(tmp_path, capsys, command):
    """``rdx matrix`` and ``rdx probe`` go on past a dataset that is not available (exit 1,
    the rest is written); when none is, nothing would be computed: exit 2, one message."""
    import yaml

    bat = _battery()
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(bat.MODELS))
    (tmp_path / "datasets.yaml").write_text(yaml.safe_dump(
        {"datasets": [{"id": "x", "dataset": "cub"}]}))
    assert main([command, "--models", str(tmp_path / "models.yaml"), "--datasets",
                 str(tmp_path / "datasets.yaml"), "--out", str(tmp_path / "out"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rdx {command}: error: no dataset of --datasets is available")
    assert "unknown dataset 'cub'" in err and len(err.strip().splitlines()) == 1
