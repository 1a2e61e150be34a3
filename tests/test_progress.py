"""Nothing silent for long: status lines, live lines and bars on stderr (rdx.progress).

The first tests drive the helpers directly with fake streams (fast). The others run the long
commands in a pseudo-terminal, as a user at a terminal sees them, record when each chunk of
output arrives and check that the process never goes without output for long.

The promise is ~5 s: a live line is redrawn every second on a terminal, so a gap is a step
without one. The tests allow :data:`MAX_GAP_S` = 8 s between two outputs, counted in the
command's own work (its CPU seconds over the CPUs it may use: at most the wall time on an
idle machine, and not stretched when other jobs compete for the cores): the start of the
interpreter and the imports before a command's first line take 1–3 s on an idle 2-core
machine; a step with no live line at all overshoots any such slack (the digits example's
training was 9 s silent, the k-NN graph's clustering 23 s, the significance calibration
6 s, before this module).
"""
from __future__ import annotations

import fcntl
import io
import os
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from rdx import progress

#: Largest silence allowed in the pseudo-terminal runs (seconds; see the module docstring).
MAX_GAP_S = 8.0
REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ the helpers
class FakeStream(io.StringIO):
    """A stderr stand-in that says whether it is a terminal; writes are thread-safe enough
    for these tests (StringIO appends under the GIL)."""

    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.fixture
def fast(monkeypatch):
    """Heartbeats every 20 ms instead of 1 s / 5 s."""
    monkeypatch.setattr(progress, "TERMINAL_INTERVAL_S", 0.02)
    monkeypatch.setattr(progress, "LOG_FIRST_INTERVAL_S", 0.02)
    monkeypatch.setattr(progress, "LOG_MAX_INTERVAL_S", 0.02)
    monkeypatch.setattr(progress, "KEEP_AFTER_S", 0.0)


def _stderr(monkeypatch, terminal: bool) -> FakeStream:
    stream = FakeStream(terminal)
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


def test_log_interval_grows_from_5_s_to_a_minute():
    assert progress.log_interval(0) == 5.0
    assert progress.log_interval(19) == 5.0
    assert progress.log_interval(40) == 10.0
    assert progress.log_interval(3600) == 60.0
    assert [progress.format_seconds(s) for s in (0.2, 7.2, 95, 1800, 7200)] == \
        ["< 1 s", "7 s", "95 s", "30 min", "2.0 h"]


def test_status_and_working_in_a_log_are_plain_lines(monkeypatch, fast):
    err = _stderr(monkeypatch, terminal=False)
    progress.status("significance: calibrating the null")
    with progress.working("fitting"):
        time.sleep(0.15)
    text = err.getvalue()
    lines = text.splitlines()
    assert lines[0] == "significance: calibrating the null"
    assert lines[1] == "fitting ..."
    assert any(line.startswith("fitting ... (still working, ") for line in lines[2:])
    assert lines[-1].startswith("fitting: ") and lines[-1].endswith(" s")
    assert "\r" not in text and "\x1b" not in text      # no terminal control in a log


def test_working_on_a_terminal_redraws_one_line(monkeypatch, fast):
    err = _stderr(monkeypatch, terminal=True)
    with progress.working("fitting"):
        time.sleep(0.15)
    text = err.getvalue()
    assert text.startswith("\r\x1b[Kfitting ...")
    assert text.count("\r\x1b[Kfitting ... ") >= 3          # the clock, redrawn in place
    assert text.endswith("\n") and text.count("\n") == 1    # one line stays: the time taken
    assert text.rsplit("\r\x1b[K", 1)[1].startswith("fitting: ")


def test_quick_or_unkept_steps_leave_no_line_on_a_terminal(monkeypatch, fast):
    err = _stderr(monkeypatch, terminal=True)
    monkeypatch.setattr(progress, "KEEP_AFTER_S", 60.0)
    with progress.working("quick"):
        time.sleep(0.05)
    monkeypatch.setattr(progress, "KEEP_AFTER_S", 0.0)
    with progress.working("reported by the caller", keep=False):
        time.sleep(0.05)
    assert "\n" not in err.getvalue() and err.getvalue().endswith("\r\x1b[K")


def test_quiet_says_nothing(monkeypatch, fast):
    err = _stderr(monkeypatch, terminal=True)
    progress.status("hello", show=False)
    with progress.working("fitting", show=False):
        time.sleep(0.05)
    assert err.getvalue() == ""


def test_nested_blocks_only_the_innermost_draws(monkeypatch, fast):
    err = _stderr(monkeypatch, terminal=True)
    with progress.working("outer"):
        time.sleep(0.06)
        with progress.working("inner"):
            mark = len(err.getvalue())
            time.sleep(0.1)
            during = err.getvalue()[mark:]
        time.sleep(0.06)
    assert "inner ..." in during and "outer ..." not in during
    assert err.getvalue().count("\n") == 2          # inner's and outer's final lines


def test_working_keeps_an_open_tqdm_bar_ticking(monkeypatch, fast):
    from tqdm import tqdm

    err = _stderr(monkeypatch, terminal=True)
    with progress.working("significance"):
        bar = tqdm(total=6, desc="null draws", file=err, mininterval=0)
        drawn = err.getvalue().count("null draws")
        time.sleep(0.2)                             # one long draw: tqdm alone stays still
        redrawn = err.getvalue().count("null draws")
        bar.close()
    assert redrawn >= drawn + 3


def test_keep_alive_redraws_its_bar_and_stops(monkeypatch, fast):
    from tqdm import tqdm

    err = _stderr(monkeypatch, terminal=True)
    bar = tqdm(total=5, desc="RDX", file=err, mininterval=0)
    with progress.keep_alive(bar):
        time.sleep(0.15)
    bar.close()
    count = err.getvalue().count("RDX")
    assert count >= 4
    time.sleep(0.1)
    assert err.getvalue().count("RDX") == count     # the heartbeat ended with the block
    assert not [t for t in threading.enumerate() if t.name == "rdx-progress"]


# ------------------------------------------------------------------ the commands
@dataclass
class PtyRun:
    returncode: int
    text: str
    max_gap: float
    gap_before: str        # the output that ended the longest silence ("<exit>": the end)
    seconds: float


def run_in_pty(args: list[str], *, cwd: Path, env: dict[str, str],
               timeout: float = 120.0) -> PtyRun:
    """Run ``python -m rdx ARGS`` with stdin, stdout and stderr on a pseudo-terminal
    (120×40: tqdm sizes its bars from it) and time each chunk of output."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "rdx", *args], stdin=slave, stdout=slave,
                            stderr=slave, cwd=cwd, env=env, start_new_session=True)
    os.close(slave)
    chunks: list[tuple[float, str]] = []
    last = 0.0
    try:
        while time.monotonic() - t0 < timeout:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:        # EIO: the child closed the terminal (it exited)
                break
            if not data:
                break
            last = _work_seconds(proc.pid, last)
            chunks.append((last, data.decode(errors="replace")))
        else:
            proc.kill()
        end_work = _work_seconds(proc.pid, last)      # a zombie still has its counts
        returncode = proc.wait(timeout=30)
    finally:
        os.close(master)
    end = time.monotonic() - t0
    # the silences are measured in the command's own work, not in wall time: a loaded
    # machine stretches the wall time between two lines, not the work done between them
    times = [0.0, *(t for t, _ in chunks), end_work]
    labels = [*(c for _, c in chunks), "<exit>"]
    gaps = np.diff(times)
    worst = int(np.argmax(gaps))
    return PtyRun(returncode, "".join(c for _, c in chunks), float(gaps[worst]),
                  labels[worst][:120], end)


def _work_seconds(pid: int, previous: float) -> float:
    """The CPU seconds process ``pid`` and its waited-for children have used, over the CPUs
    it may run on: the wall time the same work takes on an idle machine at most (the
    previous value where /proc no longer has it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return previous
    ticks = sum(int(x) for x in fields[11:15])        # utime, stime, cutime, cstime
    cpus = max(1, len(os.sched_getaffinity(pid)) if hasattr(os, "sched_getaffinity") else 1)
    return max(previous, ticks / os.sysconf("SC_CLK_TCK") / cpus)


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["RDX_CACHE"] = str(tmp_path / "empty-cache")    # the example trains: a first run
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _check(run: PtyRun, *expected: str) -> None:
    assert run.returncode == 0, run.text[-2000:]
    assert run.max_gap <= MAX_GAP_S, (
        f"{run.max_gap:.1f} s of work without output (then: {run.gap_before!r}) in a "
        f"{run.seconds:.0f} s run:\n{run.text[-3000:]}")
    for text in expected:
        assert text in run.text


@pytest.fixture(scope="module")
def small_pair(tmp_path_factory) -> tuple[Path, Path]:
    """Two small clustered representations (n = 600), as .npy files."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from bench_core import make_representations
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    A, B, _ = make_representations(600, 64, seed=3)
    folder = tmp_path_factory.mktemp("pair")
    np.save(folder / "A.npy", A)
    np.save(folder / "B.npy", B)
    return folder / "A.npy", folder / "B.npy"


@pytest.mark.slow
def test_explain_example_first_run_is_never_silent(tmp_path):
    run = run_in_pty(["explain", "--example", "digits", "--out", str(tmp_path / "out")],
                     cwd=tmp_path, env=_env(tmp_path))
    _check(run, "training the digits example MLP", "digits example MLP", "results:")


def test_explain_significance_is_never_silent(tmp_path, small_pair):
    A, B = small_pair
    run = run_in_pty(["explain", str(A), str(B), "--significance", "6",
                      "--out", str(tmp_path / "out")], cwd=tmp_path, env=_env(tmp_path))
    _check(run, "significance: calibrating the null, then 6 null draws", "significance rdx")


def test_similarity_draws_are_estimated_first_and_never_silent(tmp_path, small_pair):
    A, B = small_pair
    run = run_in_pty(["similarity", str(A), str(B), "--permutations", "50",
                      "--bootstrap", "50"], cwd=tmp_path, env=_env(tmp_path))
    _check(run, "50 permutations, 50 bootstrap", "(estimate)", "cka_linear")
    assert run.text.startswith("similarity: 10 measure(s) on n = 600 images")  # before work


def test_train_digits_is_never_silent(tmp_path):
    run = run_in_pty(["train", "--preset", "digits", "--epochs", "1", "--per-class", "20",
                      "--out", str(tmp_path / "ckpt")], cwd=tmp_path, env=_env(tmp_path))
    _check(run, "train digits: loading torch", "checkpoints in")
