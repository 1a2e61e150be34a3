"""Where the commands write: the one check of output locations and of names that become
files or folders.

Every command goes through these functions before any (possibly long) work:

* :func:`check_output_location` — an output path is not empty or degenerate, lies where a
  file or folder can be made, can be written (a probe file is created and removed) and does
  not overlap the command's inputs: an output *file* must not be an input file, and an
  output *folder* must not hold an input at a path the command writes. Paths are compared
  after resolving symbolic links (and, for files that exist, by device and inode, which also
  catches hard links); ``FILE.npz:KEY`` specifications are reduced to their file first.
* :func:`check_name` — a name that becomes one folder or file name inside an output folder
  (a method, comparison or experiment name) is one safe component, is valid text, and is not
  one of the names the output folder's own files take.

Input files are checked, and protected from the command's own writes, by
:mod:`rdx.input_files`.

Errors are :class:`~rdx.errors.RDXInputError` (exit status 2 on the command line) naming
the path, what is wrong with it and what to do instead; :func:`describe_os_error` does the
same for write failures (full disk, read-only file system, no permission) that only show up
while writing.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from .errors import RDXInputError
from .input_files import PathLike

#: Longest name :func:`check_name` allows (file systems allow 255 bytes; a name also gets
#: prefixes and suffixes, e.g. the temporary files of atomic writes).
MAX_NAME = 128

# ----------------------------------------------------------------------------- text


def _has_surrogates(text: str) -> bool:
    """Whether ``text`` holds lone surrogates: ``os.fsdecode`` makes them from bytes that are
    not valid UTF-8. They cannot be written as UTF-8 (JSON, HTML), so such a name fails once
    it reaches a report, however far into the work that is."""
    return any("\ud800" <= c <= "\udfff" for c in text)


def _control(text: str) -> bool:
    return any(unicodedata.category(c) == "Cc" for c in text)


def check_output_text(value: PathLike, flag: str = "--out") -> str:
    """The text of an output path, refused when it cannot name a location on purpose.

    Parameters
    ----------
    value : str or os.PathLike
        The path as the user gave it (before ``Path()``: ``Path("")`` is ``"."``, so an
        empty value can only be told apart here).
    flag : str
        The option or config key in the message.

    Returns
    -------
    str
        ``value`` as text.

    Raises
    ------
    RDXInputError
        Empty or whitespace-only (as a whole or in one component: a shell variable that was
        not set, a quoting slip), with control characters or NUL, or with bytes that are not
        valid text.
    """
    text = os.fsdecode(value) if isinstance(value, bytes) else os.fspath(value)
    if not text.strip():
        raise RDXInputError(
            f"{flag} {text!r} is {'only whitespace' if text else 'empty'}; give an output "
            "path (an empty value is often a shell variable that was not set).")
    if "\0" in text or _control(text):
        raise RDXInputError(f"{flag} {text!r} contains control characters; give a path of "
                            "printable characters.")
    if _has_surrogates(text):
        raise RDXInputError(
            f"{flag} {text!r} contains bytes that are not valid UTF-8 text, which the results "
            "(JSON, HTML) cannot record; choose a path of valid characters.")
    blank = [part for part in Path(text).parts if not part.strip()]
    if blank:
        raise RDXInputError(f"{flag} {text!r} has a component made only of spaces "
                            f"({blank[0]!r}); remove it or give a real folder name.")
    return text


def output_arg(value: str) -> str:
    """An ``argparse`` type for output options: :func:`check_output_text` at parse time, so
    that ``--out ""`` is a usage error (exit 2) instead of the current folder."""
    import argparse

    try:
        return check_output_text(value, "the value")
    except RDXInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ----------------------------------------------------------------------------- names


def check_name(name: object, what: str = "name", *, reserved: Iterable[str] = (),
               within: str = "the output folder") -> str:
    """``name`` if it can be one folder or file name inside an output folder.

    Parameters
    ----------
    name : object
        The candidate (from a config or an option).
    what : str
        What it names, for the message (``"method name"``).
    reserved : iterable of str
        Names the enclosing folder's own files take (compared case-insensitively, as some
        file systems do): a method called ``run.json`` would make a folder where the
        comparison's ``run.json`` must be written.
    within : str
        The folder the name is made in, for the message (``"a comparison folder"``).

    Returns
    -------
    str

    Raises
    ------
    RDXInputError
        Not a string, empty, '.' or '..' or starting with '.', containing '/' or '\\',
        control characters or bytes that are not valid text, longer than :data:`MAX_NAME`,
        or reserved.
    """
    bad = (not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME
           or name.startswith(".") or any(c in name for c in "/\\") or _control(name))
    if bad:
        raise RDXInputError(
            f"{what} {name!r} becomes a folder name inside {within}: use one name "
            f"without '/' or '\\', not starting with '.', at most {MAX_NAME} characters.")
    if _has_surrogates(name):
        raise RDXInputError(
            f"{what} {name!r} contains bytes that are not valid UTF-8 text; the file system "
            "and the reports cannot both store it — use a name of valid characters.")
    taken = {r.casefold(): r for r in reserved}
    if name.casefold() in taken:
        raise RDXInputError(
            f"{what} {name!r} is taken by a file or folder of {within} "
            f"({', '.join(sorted(taken.values()))}); choose another name.")
    return name


# ----------------------------------------------------------------------------- outputs


def _nearest_existing(p: Path) -> Path:
    top = p
    while not top.exists() and top != top.parent:
        top = top.parent
    return top


def split_array_key(spec: str | os.PathLike) -> tuple[Path, str | None]:
    """``"x.npz:key"`` → ``(Path("x.npz"), "key")``; anything else → ``(Path(spec), None)``.

    An existing file whose name contains ``:`` is taken as it is; otherwise the text after the
    last ``:`` is a key when the part before it names an ``.npz`` file (or any existing file),
    so Windows drive letters (``C:\\x.npy``) are not mistaken for keys.
    """
    text = os.fspath(spec)
    p = Path(text)
    if ":" not in text or p.exists():
        return p, None
    left, key = text.rsplit(":", 1)
    if left.lower().endswith(".npz") or Path(left).is_file():
        return Path(left), key
    return p, None


def _input_files(inputs: Iterable[PathLike | None]) -> list[tuple[str, str]]:
    """(as given, resolved path) of the inputs that exist, ``FILE.npz:KEY`` reduced to
    ``FILE.npz``; missing ones are the readers' to report."""
    out = []
    for given in inputs:
        if given is None:
            continue
        p, _ = split_array_key(given)
        if p.exists():
            out.append((os.fspath(given), os.path.realpath(p)))
    return out


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _written(rel: str, writes: Iterable[str]) -> bool:
    """Whether the relative POSIX path ``rel`` is one of ``writes`` (an entry ending in
    ``/**`` stands for every file under that folder)."""
    for w in writes:
        if w.endswith("/**"):
            base = w[:-3]
            if rel == base or rel.startswith(base + "/"):
                return True
        elif rel == w:
            return True
    return False


def check_no_overlap(out: PathLike, inputs: Iterable[PathLike | None], *,
                     flag: str = "--out", kind: Literal["dir", "file"] = "dir",
                     writes: Iterable[str] | None = None) -> None:
    """Refuse an output location that would overwrite one of ``inputs``.

    Parameters
    ----------
    out : str or os.PathLike
        The output file or folder.
    inputs : iterable of path-like or None
        The command's input files (``FILE.npz:KEY`` allowed; None and missing ones skipped).
    flag : str
        The option in the message.
    kind : {"dir", "file"}
        Whether ``out`` is a folder the command writes into or the one file it writes.
    writes : iterable of str, optional
        For a folder: the relative paths the command writes in it (``"grids/**"`` for a
        whole subfolder). An input inside the folder elsewhere is fine (features kept next
        to their results). None: every path inside the folder counts as written.

    Raises
    ------
    RDXInputError
        The output file is an input (also through a symbolic or hard link), or an input lies
        in the output folder at a path the command writes.
    """
    real_out = os.path.realpath(out)
    writes = None if writes is None else list(writes)
    for given, real_in in _input_files(inputs):
        if kind == "file":
            if real_in == real_out or _same_file(real_in, real_out):
                raise RDXInputError(
                    f"{flag} {os.fspath(out)!r} is the input file {given!r}; writing it would "
                    "destroy that input — give another file name.")
            continue
        if real_in == real_out:
            continue   # a folder given as an input: not a file the command writes over
        try:
            rel = Path(real_in).relative_to(real_out).as_posix()
        except ValueError:
            continue   # not inside the output folder
        if writes is None or _written(rel, writes):
            raise RDXInputError(
                f"{flag} {os.fspath(out)!r} holds the input {given!r} at {rel!r}, which this "
                "command writes; choose another output folder (or move the input out of it).")


def _check_free_space(p: Path, need_bytes: int, flag: str) -> None:
    top = _nearest_existing(p)
    try:
        free = shutil.disk_usage(top).free
    except OSError:
        return   # not measurable (e.g. a special file system): writing will tell
    if free < need_bytes:
        raise RDXInputError(
            f"{flag} {str(p)!r}: the output may take {need_bytes / 1e6:.1f} MB but only "
            f"{free / 1e6:.1f} MB are free there; free some space, choose another location or "
            "make the output smaller.")


def check_output_location(out: PathLike, *, flag: str = "--out",
                          kind: Literal["dir", "file"] = "dir",
                          inputs: Iterable[PathLike | None] = (),
                          writes: Iterable[str] | None = None, create: bool = False,
                          need_bytes: int | None = None,
                          example: str = "scores.json") -> Path:
    """An output folder (``kind="dir"``) or file (``kind="file"``), checked before any work.

    Parameters
    ----------
    out : str or os.PathLike
        The location as the user gave it.
    flag : str
        The option (or config key) in the messages.
    kind : {"dir", "file"}
        A folder the command writes into, or the one file it writes.
    inputs, writes
        See :func:`check_no_overlap`.
    create : bool
        For a folder: make it now and write a probe file in it. False: only check — the
        nearest existing folder above it must be writable — so that a refused run leaves
        nothing behind.
    need_bytes : int, optional
        The output's estimated size, compared with the free space.
    example : str
        A file name for the hint when a folder is given for a file.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    RDXInputError
        Empty or degenerate text; a file where a folder is needed or the reverse; a path
        under a file; not writable (read-only, no permission, ``/proc``); overlapping an
        input; not enough free space.
    """
    p = Path(check_output_text(out, flag))
    if kind == "file":
        if p.is_dir():
            raise RDXInputError(f"{flag} {str(p)!r} is a folder; give a file name, e.g. "
                                f"{str(p / example)!r}.")
        if p.name in ("", ".", ".."):
            raise RDXInputError(f"{flag} {str(p)!r} names a folder; give a file name.")
        folder = p.parent if str(p.parent) else Path(".")
    else:
        if p.exists() and not p.is_dir():
            raise RDXInputError(f"{flag} {str(p)!r} is a file; give a folder (it is created "
                                "if missing).")
        folder = p
    top = _nearest_existing(folder)
    if top.exists() and not top.is_dir():
        raise RDXInputError(f"{flag} {str(p)!r} lies under the file {str(top)!r}; give a "
                            + ("path in a folder." if kind == "file" else "folder path."))
    # before anything is created: a refused overlap leaves nothing behind
    check_no_overlap(p, inputs, flag=flag, kind=kind, writes=writes)
    make = create and kind == "dir"
    try:
        if make:
            p.mkdir(parents=True, exist_ok=True)
        # a probe, not os.access: it also sees read-only mounts, quotas and ACLs
        with tempfile.TemporaryFile(dir=p if make else top):
            pass
    except OSError as exc:
        where = "" if top == folder else f" in {str(top)!r}"
        raise RDXInputError(f"{flag} {str(p)!r} cannot be created or written{where} "
                            f"({exc.strerror or exc}); choose a folder you can write to."
                            ) from None
    if need_bytes:
        _check_free_space(p, need_bytes, flag)
    return p


def check_output_dir(path: PathLike, flag: str = "--out", *, create: bool = True,
                     inputs: Iterable[PathLike | None] = (),
                     writes: Iterable[str] | None = None,
                     need_bytes: int | None = None) -> Path:
    """:func:`check_output_location` for a folder the command writes into."""
    return check_output_location(path, flag=flag, kind="dir", create=create, inputs=inputs,
                                 writes=writes, need_bytes=need_bytes)


def check_output_file(path: PathLike, flag: str = "--out", *,
                      inputs: Iterable[PathLike | None] = (), need_bytes: int | None = None,
                      example: str = "scores.json") -> Path:
    """:func:`check_output_location` for the one file a command writes (its folder is made
    when the file is written)."""
    return check_output_location(path, flag=flag, kind="file", inputs=inputs,
                                 need_bytes=need_bytes, example=example)


# ----------------------------------------------------------------------------- write faults

#: What each write failure means for the user (the rest are faults, not input).
_WRITE_FAULTS = {
    errno.ENOSPC: "the disk is full: free some space or write to another folder",
    errno.EDQUOT: "the disk quota is used up: free some space or write to another folder",
    errno.EFBIG: "the file is larger than the file system allows: write to another folder",
    errno.EROFS: "the file system is read-only: choose an output folder you can write to",
    errno.EACCES: "permission denied: choose a location you can read and write (or fix its "
                  "permissions)",
    errno.EPERM: "operation not permitted: choose a location you can read and write",
    errno.ENAMETOOLONG: "a file name is too long: use shorter names or a shorter path",
    # a folder on the path is a file: the output folder was replaced by a file (or moved
    # and a file put in its place) while the command wrote into it
    errno.ENOTDIR: "a folder on this path is a file (was the output folder replaced while "
                   "the command ran?): move the file away or choose another output folder",
}


def file_size_limit() -> int | None:
    """This process's file-size limit in bytes (``ulimit -f``, RLIMIT_FSIZE's soft value);
    None when unlimited or unknown."""
    try:
        import resource
        soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    except (ImportError, OSError, ValueError, AttributeError):   # not POSIX
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def describe_os_error(exc: OSError) -> str | None:
    """A one-line message for a failure caused by where the user reads or writes (full
    disk, read-only file system, no permission, too long a name); None for other errors,
    which are faults of the program, not of the input."""
    advice = _WRITE_FAULTS.get(exc.errno)
    if advice is None:
        return None
    if exc.errno == errno.EFBIG:
        limit = file_size_limit()
        if limit is not None:   # more often this process's limit than the file system's
            advice = (f"the file would pass this process's file-size limit ({limit} bytes, "
                      "`ulimit -f`): raise it (`ulimit -f unlimited`) or write to a "
                      "smaller output")
    where = "" if exc.filename is None else f"{os.fsdecode(exc.filename)!r}: "
    return (f"{where}{exc.strerror or exc} — {advice}. Files written before this point are "
            "complete; run the command again once this is fixed.")


# --------------------------------------------------------------------------- paths on pages

def shown_path(path: PathLike, base: PathLike) -> str:
    """``path`` as a page written in folder ``base`` shows it: an absolute path relative to
    ``base`` (a shared page must not show a folder of the machine that wrote it), a relative
    one as given. A path on another drive (Windows) is shown by its name alone."""
    text = os.fspath(path)
    if not os.path.isabs(os.path.expanduser(text)) or text.startswith("~"):
        return text
    try:
        return Path(os.path.relpath(text, os.path.abspath(base))).as_posix()
    except ValueError:
        return Path(text).name


#: A path found in a text starts at a word's start and ends at a separator or the word's end.
_AT_START, _AT_END = r"(?<![\w.~/\\-])", r"(?![^/\\\s'\"),;:\]])"


_OTHER_ABSOLUTE = re.compile(_AT_START + r"((?:/[^/\s'\"),;:\]]+)+)/([^/\s'\"),;:\]]+)")


def without_machine_paths(text: str, base: PathLike) -> str:
    """``text`` (a message, e.g. of an exception, or a description, shown on a page written
    in ``base``) without a folder of the machine that wrote it: the absolute paths that lie
    under ``base`` or one of its parent folders written relative to ``base`` (``.``,
    ``../data``), the home folder written ``~``, and any other absolute path by its last
    name (``.../fashion-mnist``)."""
    folder = Path(os.path.abspath(base))
    chain = [folder, *folder.parents][:-1]      # every folder above, but not the root
    for up, ancestor in enumerate(chain):
        short = "/".join([".."] * up) or "."
        for form in dict.fromkeys((str(ancestor), os.path.realpath(ancestor))):
            text = re.sub(_AT_START + re.escape(form) + _AT_END, short, text)
    home = os.path.expanduser("~")
    if home and home != os.sep:
        text = re.sub(_AT_START + re.escape(home) + _AT_END, "~", text)
    # any other absolute path (a system folder, another disk) by its last name only
    return _OTHER_ABSOLUTE.sub(lambda m: ".../" + m.group(2), text)
