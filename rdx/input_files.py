"""Input files: the one check every command makes of a file it reads, and the protection of
those files from the command's own writes.

* :func:`check_input_file` — an input is an existing *regular* file. A named pipe, a device
  or a socket would block the reader forever (or yield data only once), so they are refused
  by what they are, before anything opens them.

A command line invocation (:func:`rdx.cli.main`) runs between :func:`begin_command` and
:func:`end_command`: every input file checked there (features, labels, images, configs) is
remembered, and :func:`rdx.io.atomic_write` — through which every result file is written —
refuses to replace one of them (:func:`check_not_input`). That is the second line of
defence; the up-front checks of output locations (:mod:`rdx.paths`) are the first, as they
answer before the work, not after it.

Errors are :class:`~rdx.errors.RDXInputError` (exit status 2 on the command line) naming
the path, what is wrong with it and what to do instead.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import RDXInputError

PathLike = str | os.PathLike

_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))

class _CommandInputs(dict):
    """The input files checked in one command: resolved path → (device, inode).

    ``read`` holds, for the files read whole (:func:`rdx.io.load_array`), resolved path →
    (what the file is, its ``os.stat`` signature, the SHA-256 of its bytes when it was
    read): :func:`rdx.io.check_inputs_unchanged` compares them before each result is
    written, so an input edited while the command runs is noticed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.read: dict[str, tuple[str, tuple[int, ...], str]] = {}


#: The input files checked in the current command (``command_scope``). None outside a
#: command, so library use is not affected.
_INPUTS: contextvars.ContextVar[_CommandInputs | None] = \
    contextvars.ContextVar("rdx_inputs", default=None)


def check_input_file(path: PathLike, what: str = "input file", *, expect: str = "a file",
                     missing: str = "", register: bool = True) -> Path:
    """``path`` if it is an existing regular file (symbolic links followed), checked without
    opening it.

    Parameters
    ----------
    path : str or os.PathLike
        The file (without a ``:KEY`` suffix).
    what : str
        What it is, for the message (``"A file"``, ``"config"``).
    expect : str
        What to give instead, for the message (``"an .npy or .npz file"``).
    missing : str
        How to get the file, added to the message when it does not exist (a clause, e.g.
        ``"train it with rdx train"``).
    register : bool
        Protect the file from the current command's writes (:func:`check_not_input`). False
        for files a pipeline may legitimately write again, such as checkpoints it retrains.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    RDXInputError
        Missing, a folder, a pipe, device or socket, unreadable metadata, or a path the
        operating system cannot encode.
    """
    text = os.fsdecode(path) if isinstance(path, bytes) else os.fspath(path)
    p = Path(text)
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        raise RDXInputError(f"{what} {text!r} does not exist" + (f"; {missing}." if missing
                                                                   else ".")) from None
    except OSError as exc:   # permissions on a folder above it, a symlink loop, ...
        raise RDXInputError(f"{what} {text!r} cannot be read ({exc.strerror or exc}).") \
            from None
    except ValueError:       # NUL, or characters the file system cannot encode
        raise RDXInputError(f"{what} {text!r} is not a valid path (it contains NUL or "
                            "characters the file system cannot encode).") from None
    if stat.S_ISDIR(st.st_mode):
        raise RDXInputError(f"{what} {text!r} is a folder; give {expect}.")
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        # reading a pipe blocks until a writer appears, and yields its data only once
        raise RDXInputError(f"{what} {text!r} is {kind}, not a regular file; save the data "
                            f"to a file and give {expect}.")
    seen = _INPUTS.get()
    if register and seen is not None:
        seen[os.path.realpath(p)] = (st.st_dev, st.st_ino)
    return p


def begin_command() -> contextvars.Token:
    """Start one command line invocation: from now on the input files checked are protected
    from being replaced by :func:`rdx.io.atomic_write` (see :func:`check_not_input`).
    Returns the token :func:`end_command` takes."""
    return _INPUTS.set(_CommandInputs())


def end_command(token: contextvars.Token) -> None:
    """End the invocation :func:`begin_command` started (its inputs are forgotten)."""
    _INPUTS.reset(token)


@contextlib.contextmanager
def command_scope() -> Iterator[None]:
    """:func:`begin_command` … :func:`end_command` as a ``with`` block."""
    token = begin_command()
    try:
        yield
    finally:
        end_command(token)


def check_not_input(path: PathLike) -> None:
    """Refuse to write ``path`` when it is an input file of the current command.

    The backstop behind :func:`rdx.paths.check_output_location`: called by every atomic
    write, so an overlap that an up-front check did not foresee costs the run, never the
    input.
    """
    seen = _INPUTS.get()
    if not seen:
        return
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return   # a new file: it cannot be an input
    if real in seen or (st.st_dev, st.st_ino) in seen.values():
        raise RDXInputError(
            f"refusing to write {os.fspath(path)!r}: it is an input file of this command "
            "and would be overwritten; choose an output location that does not hold the "
            "inputs.")


def stat_signature(path: PathLike) -> tuple[int, ...]:
    """(device, inode, size, modification and change times in ns) of a file: any write to
    it, or its replacement by another file, changes it (the change time cannot be set back
    by ``touch``)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def remember_read(path: PathLike, what: str, signature: tuple[int, ...], digest: str) -> None:
    """Record that the current command read ``path`` whole, with the SHA-256 ``digest``
    (see :class:`_CommandInputs`); outside a command nothing is recorded."""
    seen = _INPUTS.get()
    if seen is not None:
        seen.read.setdefault(os.path.realpath(path), (what, signature, digest))


def inputs_read() -> dict[str, tuple[str, tuple[int, ...], str]]:
    """The files the current command read whole, as :func:`remember_read` recorded them
    (empty outside a command)."""
    seen = _INPUTS.get()
    return {} if seen is None else dict(seen.read)
