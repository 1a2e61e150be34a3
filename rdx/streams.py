"""The standard streams of a command line run: closed, a broken pipe, or a narrow encoding.

``rdx`` writes its results' summary (and ``--help``, ``--version``, ``--list-layers``) on
stdout and its progress and messages on stderr. How those streams are connected is the
user's shell's choice, and none of these choices may end in a traceback or a wrong exit
status. :func:`prepare` (at the start of every command, from :func:`rdx.cli.run`) and
:func:`finish` (at its end) make that so, once for every command:

* **a closed stream** (``rdx ... >&-``, ``2>&-``, a daemon started without them): Python
  then has ``sys.stdout`` or ``sys.stderr`` as None, and the next file the command opens
  gets the free descriptor 1 or 2 — so a C library's or a child process's writes to
  "stdout" would land in that file. The closed descriptors 0, 1 and 2 are reopened on
  the null device and ``sys.stdout``/``sys.stderr`` write there: what was asked not to be
  seen is not shown, and the command's exit status is what it would have been (0, or 2
  for bad input);
* **a broken pipe** (``rdx ... | head -1``: the reader left): the first write after that
  raises :class:`BrokenPipeError`. The command stops there, as a program the shell ends
  by SIGPIPE does, after its own cleanup (the file being written is removed; finished
  work is kept and a re-run resumes it), says nothing and exits with
  :data:`BROKEN_PIPE_STATUS` (141 = 128 + SIGPIPE, the status a shell reports for
  ``yes | head -1``'s ``yes``; ``set -o pipefail`` sees that the output was cut short).
  The broken stream is pointed at the null device first, as Python's documentation of
  SIGPIPE recommends, so the flush at exit cannot fail again. An exit status that was
  already an error (2 for bad input, 130 after Ctrl-C) is kept: it says more. A broken
  pipe elsewhere (a connection of the command's own) is not ours to hide and keeps its
  traceback;
* **an encoding that cannot hold a character** (``PYTHONIOENCODING=ascii``, a Latin-1
  terminal, printing "γ"): stdout and stderr write such characters as backslash escapes
  (``\\u03b3``) instead of raising :class:`UnicodeEncodeError`.

:func:`say` writes a message on stderr that a broken or closed stderr cannot turn into
another error: the error paths of :mod:`rdx.cli` use it, so bad input exits 2 whatever
stderr is.
"""
from __future__ import annotations

import errno
import io
import os
import signal
import stat
import sys

#: Exit status after a broken stdout or stderr pipe: 128 + SIGPIPE, as a shell reports a
#: program that SIGPIPE ended.
BROKEN_PIPE_STATUS = 128 + int(getattr(signal, "SIGPIPE", 13))

#: Error handlers that raise on a character the encoding cannot hold (``surrogateescape``
#: only writes back the bytes of undecodable file names, and raises on the rest).
_RAISING_HANDLERS = frozenset({"strict", "surrogateescape"})


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _reopen_on_null(fd: int) -> None:
    """Put the null device on descriptor ``fd`` (closed or broken)."""
    null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def _null_stream() -> io.TextIOWrapper:
    # a stream of its own on the null device, not one on descriptor 1 or 2: whatever holds
    # those descriptors by now is not ours to write to
    return open(os.devnull, "w", encoding="utf-8", errors="backslashreplace")


def prepare() -> None:
    """Make the standard streams safe for a command (module docstring): closed descriptors
    0-2 reopened on the null device, ``sys.stdout``/``sys.stderr`` never None, and neither
    raising on a character its encoding cannot hold."""
    for fd in (0, 1, 2):   # in this order: os.open takes the lowest free descriptor
        if not _is_open(fd):
            _reopen_on_null(fd)
    if sys.stdout is None:
        sys.stdout = _null_stream()
    if sys.stderr is None:
        sys.stderr = _null_stream()
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) in _RAISING_HANDLERS and \
                hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _pipe_reader_gone(fd: int) -> bool:
    """Whether ``fd`` is a pipe or socket whose reading end is closed.

    ``poll`` reports POLLERR on the writing end of a pipe with no reader left (POLLHUP
    for a socket the peer shut); where ``poll`` cannot tell, a pipe or socket that raised
    EPIPE is taken to be broken.
    """
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False
    try:
        import select

        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        events = poller.poll(0)
    except (ImportError, AttributeError, OSError, ValueError):
        return True
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in events)


def is_broken_pipe(exc: BaseException) -> bool:
    """Whether ``exc`` is a write to this process's stdout or stderr after its reader left.

    When it is, the broken descriptors are pointed at the null device (so nothing written
    later, nor the flush at exit, fails again) and True is returned; any other error —
    including EPIPE of a pipe or connection the command opened itself — gives False.
    """
    if not (isinstance(exc, OSError) and exc.errno == errno.EPIPE):
        return False
    broken = [fd for fd in (1, 2) if _pipe_reader_gone(fd)]
    for fd in broken:
        _reopen_on_null(fd)
    return bool(broken)


def say(message: str) -> None:
    """Write one line on stderr; a closed or broken stderr is passed over (the exit status
    still tells what happened)."""
    try:
        print(message, file=sys.stderr, flush=True)
    except (OSError, ValueError) as exc:   # ValueError: a stream closed by library code
        if isinstance(exc, OSError):
            is_broken_pipe(exc)


def exit_status(exc: SystemExit) -> int:
    """The exit status of a :class:`SystemExit` (argparse's ``--help`` and usage errors,
    a command's ``SystemExit("message")``), as Python's own exit would give it: None → 0,
    an integer → itself, anything else → written on stderr, 1."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    say(str(code))
    return 1


def finish(code: int) -> int:
    """Flush stdout and stderr at the end of a command; the exit status to use.

    Output still in the buffers is written now. A reader that left before reading it
    makes the status :data:`BROKEN_PIPE_STATUS` when the command had succeeded (its output
    did not all arrive) and keeps an error status otherwise.
    """
    for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        try:
            stream.flush()
        except OSError as exc:
            if is_broken_pipe(exc):
                if code == 0:
                    code = BROKEN_PIPE_STATUS
                try:   # what was still buffered now goes to the null device
                    stream.flush()
                except (OSError, ValueError):
                    pass
            elif code == 0 and name == "stdout":
                # stdout redirected to a full disk, say: the summary there is cut short,
                # so the command did not fully succeed
                from .paths import describe_os_error

                say(f"rdx: error: the output on stdout could not be written: "
                    f"{describe_os_error(exc) or exc}")
                code = 2
        except (AttributeError, ValueError):   # replaced by a non-stream, or closed
            pass
    return code


__all__ = ["BROKEN_PIPE_STATUS", "exit_status", "finish", "is_broken_pipe", "prepare",
           "say"]
