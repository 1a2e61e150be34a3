"""What rdx says while it works: status lines and live progress on stderr.

A command should never sit silent for more than a few seconds: on a shared machine a user
cannot tell a slow step from a hung one. Steps that iterate (epochs, draws, probes) show a
tqdm bar; for the rest this module has

* :func:`status` — one line saying what starts now (``significance: calibrating the null
  ...``);
* :func:`working` — that line for a step that can take long, kept alive while it runs. On
  a terminal the line ends in the elapsed seconds, redrawn in place every second, and
  stays with the time taken; otherwise (a log file, a pipe) the line is written once and
  repeated at growing intervals (every 5 s at first, at most a minute apart), so a log
  says the process is alive without filling up. While tqdm bars are open inside the
  block (a library's bar over null draws, say), those bars are redrawn instead, so their
  elapsed time moves even when one of their steps is long (tqdm draws only when a bar
  advances);
* :func:`keep_alive` — the same redrawing for one bar, for library code with its own bar.

Every function takes ``show``: the commands pass ``not args.quiet`` (``--quiet`` silences
all of it). Nothing here writes to stdout, which stays for results.
"""
from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

#: Seconds between redraws on a terminal (a live clock: someone is watching).
TERMINAL_INTERVAL_S = 1.0
#: First and longest interval between repeated lines when stderr is not a terminal.
LOG_FIRST_INTERVAL_S = 5.0
LOG_MAX_INTERVAL_S = 60.0
#: On a terminal, a step that took at least this long leaves its line (with the time); a
#: quicker one is erased, so that many short steps do not bury the results.
KEEP_AFTER_S = 1.0
#: Erase the terminal line the cursor is on (carriage return, then ANSI "erase in line").
_CLEAR = "\r\x1b[K"

# One lock for everything written here; tqdm's own lock is taken inside it (never the
# other way round), so the two cannot deadlock.
_lock = threading.RLock()
# Active working() blocks, innermost last: only the innermost one draws.
_stack: list["_Work"] = []
# Bars a keep_alive() block redraws already (working() leaves them to it).
_kept: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _stream() -> TextIO:
    # looked up on each call, not bound at import: tests and notebooks replace sys.stderr
    return sys.stderr


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: stderr) is a terminal."""
    stream = _stream() if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return False


def log_interval(elapsed: float) -> float:
    """Seconds until the next repeated line in a log, ``elapsed`` seconds into a step: every
    5 s during the first 20 s, then a quarter of the time elapsed (a 10-minute step writes
    about 15 lines, not 120), at most a minute."""
    return min(LOG_MAX_INTERVAL_S, max(LOG_FIRST_INTERVAL_S, elapsed / 4))


def format_seconds(seconds: float) -> str:
    """``< 1 s``, ``7 s``, ``95 s``, ``12 min``, ``1.5 h``: a duration as people read it."""
    if seconds < 0.5:
        return "< 1 s"
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _open_bars() -> list[Any]:
    """The tqdm bars open (created, enabled, not closed) in this process; none without
    importing tqdm when nothing has."""
    std = sys.modules.get("tqdm.std")
    if std is None:
        return []
    cls = std.tqdm
    with cls.get_lock():   # the set changes while bars open and close in other threads
        return [b for b in list(cls._instances) if not getattr(b, "disable", True)]


def _write_line(text: str, stream: TextIO) -> None:
    """One whole line on ``stream``, above any open bar and over a drawn status line."""
    with _lock:
        bars = _open_bars()
        if bars:
            bars[0].write(text, file=stream)   # tqdm clears its bars, prints, redraws them
            return
        if _stack and _stack[-1].drawn and _stack[-1].stream is stream:
            stream.write(_CLEAR)               # the live line is redrawn on the next beat
            _stack[-1].drawn = False
        stream.write(text + "\n")
        stream.flush()


def status(message: str, *, show: bool = True) -> None:
    """Say on stderr what starts now (one line, flushed at once)."""
    if show:
        _write_line(message, _stream())


class _Heartbeat:
    """A daemon thread calling ``beat(elapsed)`` until stopped: every
    :data:`TERMINAL_INTERVAL_S` on a terminal, else at :func:`log_interval`."""

    def __init__(self, beat: Callable[[float], None], terminal: bool) -> None:
        self._beat = beat
        self._terminal = terminal
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="rdx-progress", daemon=True)

    def start(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _run(self) -> None:
        while True:
            wait = TERMINAL_INTERVAL_S if self._terminal else log_interval(self.elapsed())
            if self._stop.wait(wait):
                return
            try:
                self._beat(self.elapsed())
            except Exception:  # noqa: BLE001 - a closed stream must not stop the work
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class _Work:
    """One :func:`working` block: its message, stream and whether its line is drawn."""

    def __init__(self, message: str, stream: TextIO) -> None:
        self.message = message
        self.stream = stream
        self.terminal = is_terminal(stream)
        self.drawn = False      # its live line is the terminal's current line
        self.beats = 0          # lines repeated in a log

    def draw(self, elapsed: float | None) -> None:
        """Terminal: (re)draw the live line. Called with ``_lock`` held."""
        clock = "" if elapsed is None else f" {format_seconds(elapsed)}"
        self.stream.write(f"{_CLEAR}{self.message} ...{clock}")
        self.stream.flush()
        self.drawn = True

    def beat(self, elapsed: float) -> None:
        with _lock:
            if not _stack or _stack[-1] is not self:
                return          # an inner block speaks for now
            bars = _open_bars()
            if bars:            # a bar holds the line: let its clock move instead
                for bar in bars:
                    if bar not in _kept:
                        bar.refresh()
                self.drawn = False
            elif self.terminal:
                self.draw(elapsed)
            else:
                self.beats += 1
                print(f"{self.message} ... (still working, {format_seconds(elapsed)})",
                      file=self.stream, flush=True)


@contextmanager
def working(message: str, *, show: bool = True, keep: bool = True) -> Iterator[None]:
    """Say ``message ...`` on stderr and keep saying it while the block runs (see the
    module docstring).

    On a terminal the line stays at the end, with the seconds taken, when the step took at
    least :data:`KEEP_AFTER_S` and ``keep`` is true (False: the caller reports the step
    itself; the line is erased)."""
    if not show:
        yield
        return
    work = _Work(message, _stream())
    with _lock:
        if work.terminal and not _open_bars():
            if _stack:   # an outer block's live line gives way; it is redrawn afterwards
                _stack[-1].drawn = False
            work.draw(None)
        else:
            _write_line(f"{message} ...", work.stream)
        _stack.append(work)
    heart = _Heartbeat(work.beat, work.terminal).start()
    try:
        yield
    finally:
        heart.stop()
        with _lock:
            _stack.remove(work)
            took = f"{message}: {heart.elapsed():.1f} s"
            if work.terminal and work.drawn and (not keep or heart.elapsed() < KEEP_AFTER_S):
                work.stream.write(_CLEAR)   # a quick step leaves no line behind
                work.stream.flush()
            elif work.terminal and work.drawn:
                work.stream.write(f"{_CLEAR}{took}\n")
                work.stream.flush()
            elif keep and (work.terminal or work.beats):   # a log: when a long step ended
                _write_line(took, work.stream)


@contextmanager
def keep_alive(bar: Any) -> Iterator[Any]:
    """Redraw a tqdm ``bar`` while the block runs, so that its elapsed time moves during a
    long step (tqdm draws only when a bar advances). A disabled bar is left alone; the bar
    is not closed here."""
    if getattr(bar, "disable", True):
        yield bar
        return
    terminal = is_terminal(getattr(bar, "fp", None) or _stream())

    def beat(_elapsed: float) -> None:
        with _lock:
            bar.refresh()

    heart = _Heartbeat(beat, terminal).start()
    _kept.add(bar)
    try:
        yield bar
    finally:
        _kept.discard(bar)
        heart.stop()
