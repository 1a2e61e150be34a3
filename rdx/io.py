"""Thin I/O: reading representation files, atomic writes, version records, and the
digests by which stored data is verified before it is reused (the stored-data section)."""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import zipfile
import zlib
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .errors import RDXInputError
from .input_files import check_input_file, check_not_input
from .paths import split_array_key


def _npz_listing(p: Path, files: list[str]) -> str:
    """``a: 500×64 float32, b: 500×32 float32`` from the array headers (no data is read)."""
    out = []
    try:
        with zipfile.ZipFile(p) as z:
            for key in files:
                desc = key
                try:
                    with z.open(key + ".npy") as fh:
                        version = np.lib.format.read_magic(fh)
                        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                else np.lib.format.read_array_header_2_0)
                        shape, _, dtype = read(fh)
                    desc = f"{key}: {'×'.join(map(str, shape)) or 'scalar'} {dtype}"
                except Exception:  # an odd member: its name is still worth listing
                    pass
                out.append(desc)
    except (OSError, zipfile.BadZipFile):
        out = list(files)
    return ", ".join(out)


def load_array(path: str | os.PathLike, name: str = "array", *, mmap: bool = False
               ) -> np.ndarray:
    """Load an ``.npy`` file, or one array of an ``.npz`` file.

    ``mmap``: map an ``.npy`` file instead of reading it (copy-on-write: the array is
    writable, the file never changes); its pages are read when used and belong to the page
    cache, and centring gives them back (:func:`rdx.backend.release_mapped_pages`), so large
    feature files are not held in memory twice (``.npz`` members are always read).

    ``path`` may name the array of an ``.npz`` file as ``file.npz:key`` (e.g.
    ``representations.npz:a``). A plain ``file.npz`` is accepted only when it holds exactly one
    array: with several, which one to use must be said — silently taking the first made
    ``rdx similarity representations.npz representations.npz`` compare ``a`` with itself.
    Every error lists the arrays the file holds.

    The file is hashed (SHA-256) as it is read: inside a command the digest is remembered,
    and :func:`atomic_write` refuses to write a result once the file's bytes have changed
    (:func:`check_inputs_unchanged`); a file with an ``rdx features`` sidecar
    (``FILE.json``) whose recorded digest differs is refused
    (:func:`sidecar_content_problem`).
    """
    p, key = split_array_key(path)
    check_input_file(p, f"{name} file", expect="an .npy or .npz file")
    # its digest now, so that a change while the command runs is noticed before results
    # are written (check_inputs_unchanged); a file `rdx features` wrote is checked against
    # the digest its provenance record holds
    try:
        digest = remember_input(p, name)
    except OSError:
        digest = None   # unreadable: the load below says why
    stale = None if digest is None else sidecar_content_problem(p, digest)
    if stale is not None:
        raise RDXInputError(f"{name} file: {stale}")
    bad = (f"{name} file {str(p)!r} is not a numeric .npy/.npz array file (save features "
           "with numpy.save(path, array) or numpy.savez)")
    try:
        data = np.load(p, allow_pickle=False, mmap_mode="c" if mmap else None)
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                files = list(data.files)
                if not files:
                    raise RDXInputError(f"{name} file {str(p)!r} holds no arrays.")
                if key is None:
                    if len(files) == 1:
                        return data[files[0]]
                    raise RDXInputError(
                        f"{name} file {str(p)!r} holds {len(files)} arrays "
                        f"({_npz_listing(p, files)}); say which one to use as {p}:KEY, e.g. "
                        f"{p}:{files[0]}.")
                if key not in files:
                    raise RDXInputError(
                        f"{name} file {str(p)!r} has no array {key!r}; it holds "
                        f"{_npz_listing(p, files)}. Use {p}:KEY with one of these keys.")
                return data[key]
        if key is not None:
            raise RDXInputError(
                f"{name} file {str(p)!r} is a single array (.npy), which has no keys: drop "
                f"':{key}' (keys name the arrays of an .npz file, as file.npz:key).")
        return data
    except RDXInputError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, MemoryError) as exc:
        try:
            with open(p, "rb") as fh:
                magic = fh.read(6)
        except OSError as exc2:   # unreadable (permissions, ...)
            raise RDXInputError(f"{name} file {str(p)!r} cannot be read "
                                f"({exc2.strerror or exc2}).") from None
        text = str(exc)
        if not magic:
            reason = "the file is empty"
        elif magic != b"\x93NUMPY" and not magic.startswith(b"PK"):
            reason = "it is not in .npy/.npz format"
        elif "pickle" in text or "object" in text:
            reason = "it holds Python objects, not numbers"
        elif isinstance(exc, (zipfile.BadZipFile, zlib.error, EOFError, MemoryError)) or \
                "CRC" in text or "fully written" in text or "truncat" in text.lower():
            raise RDXInputError(
                f"{name} file {str(p)!r} is damaged or incomplete ({text or type(exc).__name__})"
                "; write it again — an interrupted save or copy leaves such files.") from None
        else:
            reason = text or type(exc).__name__
        raise RDXInputError(f"{bad}: {reason}.") from None


def load_image_ids(path: str | os.PathLike) -> np.ndarray | None:
    """The image id of each row of a features file, where the file carries them: the
    ``ids`` array of an ``.npz`` (``rdx features`` writes one next to ``features``) when
    ``path`` names another of its arrays, else the ``ids`` of its ``FILE.<ext>.json``
    provenance record when that record describes this very file (its recorded size; the
    SHA-256 is compared by :func:`load_array`). None when there are none: a bare array
    cannot say which images its rows are.
    """
    p, key = split_array_key(path)
    if p.suffix.lower() == ".npz" and key != "ids":
        try:
            with np.load(p, allow_pickle=False) as data:
                if "ids" in data.files:
                    ids = data["ids"]
                    if ids.ndim == 1 and ids.dtype.kind in "USiu":
                        return ids.astype(str)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error):
            pass   # load_array says what is wrong with the file
    side = p.with_name(p.name + ".json")
    try:
        doc = json.loads(side.read_text()) if side.is_file() else None
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("ids"), list):
        return None
    content = doc.get("content")
    try:   # a record of another file (the features replaced, the record kept) says nothing
        if not isinstance(content, dict) or content.get("bytes") != p.stat().st_size:
            return None
    except OSError:
        return None
    return np.asarray([str(x) for x in doc["ids"]])


def jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays and non-finite floats (→ None) for strict JSON."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    return obj


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process
        return True
    return True


#: Longest file name (in bytes) the common file systems allow (NAME_MAX of ext4, XFS,
#: btrfs, tmpfs, APFS). A temporary name must fit it whatever the final name's length.
NAME_MAX = 255

#: ``.<stem>.<pid>.<8 random characters>.tmp``: the temporaries of :func:`atomic_write`
#: (``tempfile.mkstemp`` draws the 8 characters from ``[a-z0-9_]``).
_TEMPORARY = re.compile(r"\.(?P<stem>.+)\.(?P<pid>[0-9]+)\.[a-z0-9_]{8}\.tmp")

#: Bytes of a temporary's name besides its stem: the dots, a pid of up to 10 digits, the
#: 8 random characters and ``.tmp``.
_TEMPORARY_OVERHEAD = 1 + 1 + 10 + 1 + 8 + 4


def temporary_stem(name: str) -> str:
    """The part of a temporary file's name that names the file it becomes.

    The file's own name where ``.<name>.<pid>.<random>.tmp`` fits :data:`NAME_MAX`;
    otherwise the name's first bytes (cut at a character boundary) and ``~`` with 12 hex
    digits of its SHA-256 — so a result whose name is up to 255 bytes long can be written
    atomically (a 245-byte ``--out`` name was refused before: its temporary was too long).
    """
    raw = os.fsencode(name)
    room = NAME_MAX - _TEMPORARY_OVERHEAD
    if len(raw) <= room:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:12]
    head = raw[:room - 1 - len(digest)]
    while head and (head[-1] & 0xC0) == 0x80:   # never half a UTF-8 character
        head = head[:-1]
    if head and head[-1] >= 0xC0:
        head = head[:-1]
    return os.fsdecode(head) + "~" + digest


def _lock(fd: int, *, wait: bool) -> bool | None:
    """An exclusive ``flock`` on ``fd``: True when taken, False when another process holds
    one (``wait`` False), None where there are no locks (Windows without ``fcntl``, a file
    system that refuses ``flock``)."""
    try:
        import fcntl
    except ImportError:   # pragma: no cover - not POSIX
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError:   # ENOLCK, EOPNOTSUPP: some network and FUSE file systems
        return None
    return True


def _remove_if_abandoned(path: str, pid: int) -> None:
    """Remove the temporary ``path`` if no writer holds it.

    A writer holds an exclusive ``flock`` on its temporary from its creation until the
    rename (:func:`atomic_write`), and the lock goes with the process. So a temporary whose
    lock can be taken is abandoned — whatever process now has the pid in its name (pids are
    reused; a name can carry any pid, also a live one such as 1 or this process's own), and
    one a live writer holds is never touched. Only regular files are removed: a link or a
    folder of that name is not this module's.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(
            os, "O_NONBLOCK", 0))
    except OSError:
        return   # gone, a link, or unreadable: not ours to remove
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        held = _lock(fd, wait=False)
        if held is False or held is None and _process_alive(pid):
            return   # a live writer's (without locks, the pid is all there is)
        os.unlink(path)
    except OSError:
        pass   # removed meanwhile, or a folder we may not change: the next write tries again
    finally:
        os.close(fd)


def remove_stale_temporaries(path: Path) -> None:
    """Remove the abandoned temporaries in ``path``'s folder: those of earlier writes whose
    process died (e.g. killed inside :func:`atomic_write`), of any file of the folder.

    A file is one of these temporaries only by its whole name
    (``.<stem>.<pid>.<8 characters>.tmp``, :func:`temporary_stem`) and only when no writer
    holds its lock (:func:`_remove_if_abandoned`): a live writer's temporary stays, and any
    other file — ``notes.tmp``, ``.explanations.json.tmp``, a link named like a temporary —
    is the user's and is left as it is.
    """
    folder = Path(path).parent
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if e.name.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        m = _TEMPORARY.fullmatch(name)
        if m is not None:
            _remove_if_abandoned(os.path.join(folder, name), int(m["pid"]))


def _locked_temporary(path: Path) -> tuple[int, str]:
    """A new temporary file next to ``path`` (its descriptor and name), locked
    (:func:`_remove_if_abandoned`) before anything is written to it."""
    prefix = f".{temporary_stem(path.name)}.{os.getpid()}."
    for _ in range(100):
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
        _lock(fd, wait=True)   # a fresh file: nobody else holds it
        try:
            # another process's sweep may have taken it between mkstemp and the lock
            if os.path.samestat(os.fstat(fd), os.stat(tmp)):
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)
    raise OSError(errno.EAGAIN, "could not keep a temporary file", str(path))


#: Locks this process's threads hold (:func:`folder_lock`), by thread and the lock file's
#: real path, with how many callers hold each: a second ``flock`` of one file from the same
#: thread, on a new descriptor, would wait for the thread itself (another thread waits).
_HELD_LOCKS: dict[str, int] = {}


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, name: str = ".rdx-run.lock", *,
                on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder/name`` (made when missing) for the block.

    Another process waits (``on_wait`` is called once when it has to); a killed holder
    frees the lock. Re-entrant within a process: a run that holds its comparison's lock can
    update the comparison's records under it. Without ``fcntl`` (Windows) there is no lock.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = f"{threading.get_ident()}:{os.path.realpath(folder / name)}"
    if key in _HELD_LOCKS:
        _HELD_LOCKS[key] += 1
        try:
            yield
        finally:
            _HELD_LOCKS[key] -= 1
        return
    with open(folder / name, "a") as fh:
        if _lock(fh.fileno(), wait=False) is False:   # None: no locks here, go on
            if on_wait is not None:
                on_wait()
            _lock(fh.fileno(), wait=True)
        _HELD_LOCKS[key] = 1
        try:
            yield
        finally:
            del _HELD_LOCKS[key]
            # closing the file frees the lock (also for a process killed in the block)


def _file_mode() -> int:
    """The mode ``open()`` would give a new file: 0666 minus the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _check_replaceable(path: Path) -> None:
    """Refuse to replace anything but a regular file (or nothing) at ``path``.

    The rename at the end of :func:`atomic_write` replaces whatever the name points to: a
    device (``--out /dev/null`` run as root would replace the machine's /dev/null with a
    file), a named pipe another program reads, a socket. Every result file is written
    here, so this one check covers every command's outputs.
    """
    import stat

    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError:
        return   # unreadable: the write itself will say what is wrong
    if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) and (
            os.path.isfile(path) or not os.path.exists(path)):
        return   # a file, or a link to one (or to nothing): the rename replaces the link
    kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a device" if stat.S_ISCHR(
        st.st_mode) or stat.S_ISBLK(st.st_mode) else "a named pipe" if stat.S_ISFIFO(
        st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else
        "a link to something that is not a regular file" if stat.S_ISLNK(st.st_mode)
        else "not a regular file")
    raise RDXInputError(f"refusing to write {os.fspath(path)!r}: it is {kind}, which the "
                        "result would replace; give the path of a regular file (or of "
                        "none yet).")


def environment_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of where the command writes (full disk, quota, file
    size limit, read-only file system, no permission, too long a name: those
    :func:`rdx.paths.describe_os_error` names).

    Loops that record a failing job and go on to the next re-raise these: every later job
    would meet the same disk, and the command should end with that one message (exit 2),
    not with a failure per job (exit 1).
    """
    from .paths import describe_os_error

    return isinstance(exc, OSError) and describe_os_error(exc) is not None


def _short_write_cause(tmp: str) -> int | None:
    """The errno of a write that failed without one, from the state it left: EFBIG when
    the temporary file reached the process's file size limit (``ulimit -f``), ENOSPC when
    its file system has (almost) no space left; None when neither explains it.

    numpy writes arrays with C stdio and reports a short write as a bare ``OSError("6
    requested and 0 written")``, torch's checkpoint writer as ``RuntimeError("unexpected
    pos ...")``: without the errno, :func:`rdx.paths.describe_os_error` could not tell a
    full disk from a fault of the program.
    """
    import resource
    import shutil

    try:
        size = os.path.getsize(tmp)
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY and size >= soft:
            return errno.EFBIG
        if shutil.disk_usage(os.path.dirname(tmp) or ".").free < (1 << 20):
            return errno.ENOSPC
    except OSError:
        pass
    return None


#: The first write of this command that failed for a reason of where it writes (full disk,
#: quota, read-only, ...; :func:`environment_error`), outside :func:`optional_writes`: a
#: command that ends with status 0 after one exits 2 instead (:func:`take_write_failure`,
#: read by :mod:`rdx.cli`), whoever caught the error on its way up — a best-effort page,
#: figure or thumbnail must not turn a full disk into a success.
_WRITE_FAILURE: list[OSError] = []


def take_write_failure() -> OSError | None:
    """The first environment failure of a (non-optional) :func:`atomic_write` since the
    last call, and forget it."""
    failure = _WRITE_FAILURE[0] if _WRITE_FAILURE else None
    _WRITE_FAILURE.clear()
    return failure


_OPTIONAL = threading.local()


@contextlib.contextmanager
def optional_writes() -> Iterator[None]:
    """The writes in this block are of a cache the command does without (the example
    cache, the explorer's map cache): a failure is still raised, but not remembered
    against the command (:func:`take_write_failure`)."""
    before = getattr(_OPTIONAL, "depth", 0)
    _OPTIONAL.depth = before + 1
    try:
        yield
    finally:
        _OPTIONAL.depth = before


def atomic_write(path: Path, write) -> None:
    """Call ``write(file)`` on a temporary file next to ``path``, then rename it into place,
    so readers (and an interrupted run) never see a half-written result.

    The temporary file's name holds the writer's process id, so that temporaries left by a
    killed process are removed by the next write of the same file; the result gets the
    mode a plain ``open()`` would give it (the umask's), not ``mkstemp``'s private 0600.
    Only a regular file (or nothing) at ``path`` is replaced: a device, named pipe, socket
    or folder there is refused (:class:`~rdx.errors.RDXInputError`).

    A failure of where it writes (a full disk, ...) is raised and, outside
    :func:`optional_writes`, also remembered (:func:`take_write_failure`): the command
    cannot then end with status 0, even if a caller passes over the error.
    """
    try:
        _atomic_write(Path(path), write)
    except OSError as exc:
        if not getattr(_OPTIONAL, "depth", 0) and not _WRITE_FAILURE and \
                environment_error(exc):
            _WRITE_FAILURE.append(exc)
        raise


def _atomic_write(path: Path, write) -> None:
    path = Path(path)
    # never replace a file this command read (see rdx.input_files): the last line of defence
    check_not_input(path)
    # nor write a result computed from an input that changed since it was read
    check_inputs_unchanged()
    _check_replaceable(path)
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            # a folder on the way is a file (the output folder replaced by a file while the
            # command ran): ENOTDIR, which rdx.paths.describe_os_error names
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path.parent)) \
                from exc
        remove_stale_temporaries(path)
        fd, tmp = _locked_temporary(path)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path.parent)) \
                from None
        exc.filename = str(path)   # the file the user will look for, not its temporary
        raise
    try:
        # the lock on the temporary is held until it has its final name (the descriptor
        # closes after the rename): a concurrent sweep never takes a live writer's file
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
            os.chmod(fh.fileno(), _file_mode())
            os.replace(tmp, path)
    except BaseException as exc:
        # a writer that lost the errno (numpy's OSError without one, torch's RuntimeError
        # "unexpected pos"): the disk's state says what happened
        lost = isinstance(exc, Exception) and not (isinstance(exc, OSError) and
                                                   exc.errno is not None)
        cause = _short_write_cause(tmp) if lost else None
        if os.path.exists(tmp):
            os.unlink(tmp)
        if cause is not None:
            raise OSError(cause, os.strerror(cause), str(path)) from exc
        if isinstance(exc, OSError) and exc.errno is not None and \
                exc.filename in (None, tmp):
            # the file the user will look for, not its temporary (a new exception: setting
            # filename2 to None on the old one would print "-> None")
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def read_json(path: str | os.PathLike) -> dict:
    """A result file written by a run; a corrupt one says how to regenerate it."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RDXInputError(f"{path} is not valid JSON ({exc}); re-run the comparison with "
                            "`rdx run --config CONFIG --force`.") from None


#: Deepest nesting of a YAML document (config or ``--param`` value) rdx accepts. Configs
#: nest a handful of levels; far deeper documents would exhaust Python's recursion in the
#: YAML reader or in the code that walks them (merging, validation, JSON records).
MAX_YAML_DEPTH = 64


#: Most nodes that aliases (``*name``) may add to a YAML document when expanded. An anchor
#: repeated through aliases is one object to the YAML reader, but every walk of the
#: document (validation, merging, JSON records) visits each repetition: nine levels of nine
#: aliases ("billion laughs") are 9⁹ visits in a 700-byte file. Configs repeat a block a
#: few times at most.
MAX_YAML_ALIAS_NODES = 100_000


def yaml_expanded_size(node: Any) -> float:
    """The number of nodes of a composed YAML node graph once every alias is expanded
    (``inf`` for a recursive one, ``&a [*a]``), counting each shared node once per use,
    in time linear in the graph's distinct nodes (no expansion, no recursion)."""
    import yaml

    size: dict[int, float] = {}
    done = set()
    stack: list[tuple[Any, bool]] = [(node, False)]
    on_path: set[int] = set()
    while stack:
        n, expanded = stack.pop()
        key = id(n)
        children = [] if isinstance(n, yaml.ScalarNode) else [
            c for pair in n.value for c in pair] if isinstance(n, yaml.MappingNode) \
            else list(n.value)
        if expanded:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            done.add(key)
            continue
        if key in done:
            continue
        if key in on_path:
            return math.inf   # a node inside itself
        on_path.add(key)
        stack.append((n, True))
        for c in children:
            if id(c) in on_path:
                return math.inf
            if id(c) not in done:
                stack.append((c, False))
    return size[id(node)]


def _yaml_distinct_nodes(node: Any) -> int:
    import yaml

    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            stack.extend(c for pair in n.value for c in pair)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
    return len(seen)


def yaml_depth(doc: Any) -> int:
    """Nesting depth of a loaded YAML document (a scalar: 0), without recursion."""
    deepest, stack = 0, [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_YAML_DEPTH:   # enough to refuse: stop walking
            break
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


def parse_yaml(text: str | bytes, where: str) -> Any:
    """YAML text a user wrote (a config file, a ``--param`` value) as Python objects.

    Every way the text can be unusable becomes an :class:`RDXInputError` naming ``where``:
    bytes that are not UTF-8 (or UTF-16/32 with a byte-order mark), malformed YAML, and
    nesting deeper than :data:`MAX_YAML_DEPTH` — the YAML reader recurses per level and
    would otherwise end in a ``RecursionError`` traceback.
    """
    import yaml

    if isinstance(text, bytes):
        codec = next((c for bom, c in ((b"\xef\xbb\xbf", "utf-8-sig"),
                                       (b"\xff\xfe\x00\x00", "utf-32"),
                                       (b"\x00\x00\xfe\xff", "utf-32"),
                                       (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))
                      if text.startswith(bom)), "utf-8")
        try:
            text = text.decode(codec)
        except UnicodeDecodeError as exc:
            line = text[:exc.start].count(b"\n") + 1
            raise RDXInputError(
                f"{where}: not {codec.upper().removesuffix('-SIG')} text — byte "
                f"0x{text[exc.start]:02x} at offset {exc.start} (line {line}) is not valid "
                f"{codec.upper().removesuffix('-SIG')}. Save the file as UTF-8 (e.g. "
                "`iconv -f LATIN1 -t UTF-8`), or remove that byte.") from None
    try:
        # composed first, constructed only once its aliases are known to expand to a
        # bounded document: yaml.safe_load would build it, and every later walk expand it
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                extra = yaml_expanded_size(node) - _yaml_distinct_nodes(node)
                if extra > MAX_YAML_ALIAS_NODES:
                    grows = ("refers to itself through an alias (an anchor used inside "
                             "itself)" if extra == math.inf else
                             f"grows by {extra:.3g} nodes when its aliases (*name) are "
                             "expanded")
                    raise RDXInputError(
                        f"{where}: the YAML document {grows}; rdx accepts at most "
                        f"{MAX_YAML_ALIAS_NODES} nodes from aliases (an alias \"bomb\" "
                        "would keep every command busy for hours). Write the repeated "
                        "parts out, or repeat a block fewer times.")
            doc = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise RDXInputError(f"{where}: not valid YAML: {exc}") from None
    except RecursionError:
        raise RDXInputError(
            f"{where}: nested too deeply for the YAML reader (more than {MAX_YAML_DEPTH} "
            "levels of lists or mappings); rdx configs and parameters nest a few levels — "
            "check for runaway brackets or indentation.") from None
    depth = yaml_depth(doc)
    if depth > MAX_YAML_DEPTH:
        raise RDXInputError(
            f"{where}: nested more than {MAX_YAML_DEPTH} levels deep (lists or mappings "
            "inside each other); rdx configs and parameters nest a few levels — check for "
            "runaway brackets or indentation.")
    return doc


def read_yaml(path: str | os.PathLike, what: str = "config") -> Any:
    """A YAML file a user wrote; a missing, unreadable or malformed one gives a clear error
    (:func:`parse_yaml`)."""
    p = check_input_file(path, what, expect="the YAML file (configs live in configs/)",
                         missing="configs live in configs/")
    return parse_yaml(p.read_bytes(), str(p))


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write JSON so that readers never see a half-written file (tmp + rename)."""
    p = Path(path)
    text = json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n"
    atomic_write(p, lambda fh: fh.write(text.encode()))
    return p


def save_npz_atomic(path: str | os.PathLike, **arrays: np.ndarray) -> Path:
    p = Path(path)
    atomic_write(p, lambda fh: np.savez(fh, **arrays))
    return p


def git_commit() -> str | None:
    """Commit of the rdx checkout, if the package runs from a git work tree."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def versions() -> dict[str, str | None]:
    """Versions of the interpreter and the numerical stack (recorded next to results), with
    the SIMD level numpy computes with and who chose it (:mod:`rdx.simd`).

    Read from the installed packages' metadata, so recording them imports neither
    scikit-learn nor torch (~1.4 s together); ``cuda`` is torch's CUDA version when torch
    was loaded by the run and sees a GPU, else None (the run computed on the CPU);
    ``torch_simd`` the SIMD level of torch's CPU kernels when torch was loaded, else None.
    """
    from importlib.metadata import PackageNotFoundError, version

    from . import __version__
    from .package_version import source_version
    from .simd import describe as describe_simd
    from .simd import numpy_level

    def installed(dist: str) -> str | None:
        try:
            return version(dist)
        except PackageNotFoundError:
            return None

    def torch_version() -> str | None:
        # the build (e.g. "2.14.1+cu130") is in torch/version.py; the package metadata
        # drops the "+cu130" part, and importing torch to ask costs ~0.8 s
        return source_version("torch") or installed("torch")

    torch = sys.modules.get("torch")
    return {
        "rdx": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": np.__version__,
        "numpy_simd": numpy_level(),
        "numpy_simd_from": describe_simd()["numpy_simd_from"],
        "scipy": installed("scipy"),
        "scikit-learn": installed("scikit-learn"),
        "torch": torch.__version__ if torch is not None else torch_version(),
        "cuda": torch.version.cuda if torch is not None and torch.cuda.is_available()
        else None,
        # the SIMD level of torch's CPU kernels (e.g. "AVX512", "AVX2"): trained weights are
        # bit-identical across machines only at the same level (rdx.threads, Training)
        "torch_simd": torch.backends.cpu.get_cpu_capability() if torch is not None
        and hasattr(torch.backends, "cpu") else None,
        "git_commit": git_commit(),
    }


# ----------------------------------------------------------------------------- digests
# One implementation of each fingerprint the project records (resume checks, caches), and
# the one way a stored file is trusted again (the stored-data section below).

def file_sha256(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """SHA-256 of a file's bytes (streamed).

    SHA-256 rather than BLAKE2: CPUs with the SHA extensions (x86 since ~2017, ARMv8)
    hash it about 2.5 times as fast as hashlib's BLAKE2b (30.7 MB, 10⁴ × 768 float32: 18 ms
    against 48 ms on the development machine), and every record the project wrote before
    uses it.
    """
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def bytes_sha256(data: bytes | memoryview) -> str:
    """SHA-256 of bytes in memory (the same digest :func:`file_sha256` gives their file)."""
    import hashlib

    return hashlib.sha256(data).hexdigest()


def json_digest(obj: Any) -> str:
    """SHA-256 of an object's canonical JSON (sorted keys; numpy values converted)."""
    import hashlib

    text = json.dumps(jsonable(obj), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def array_digest(*arrays: np.ndarray) -> str:
    """SHA-256 over arrays' shapes, dtypes and bytes."""
    import hashlib

    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- stored data
# Every file the project writes and later reuses instead of recomputing it (feature chunks
# and files, the feature and example caches, a run folder's finished methods, checkpoints
# and the training state) is trusted again only through these functions: the SHA-256 of
# its bytes is recorded when it is written, in the JSON record that marks it complete (a
# manifest, a sidecar, the method's explanations.json), and compared when it is reused. A
# JSON record carries the digest of its own canonical content (RECORD_DIGEST), so damage
# to the record itself is told too. These are checks against accidents (bit rot, cut or
# interrupted copies, a tool or a person replacing a file), not against someone who
# rewrites a file and its record together. A file without a recorded digest (written by an
# earlier version) is unverified: the caller rebuilds it, as for a mismatch.

#: The field of a JSON record that holds the SHA-256 of the record's other fields.
RECORD_DIGEST = "record_sha256"


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and \
        all(c in "0123456789abcdef" for c in value)


def _short(digest: str) -> str:
    return digest[:16] + "…"


class StoredDataMismatch(RDXInputError):
    """A stored file (or record) that is missing, or whose content differs from the digest
    recorded when it was written, or has no digest on record.

    Attributes
    ----------
    path : pathlib.Path
        The file.
    expected : str or None
        The SHA-256 on record (None: none was recorded).
    found : str or None
        The SHA-256 of its bytes now (None: missing or unreadable).
    """

    def __init__(self, message: str, path: Path, expected: str | None,
                 found: str | None) -> None:
        super().__init__(message)
        self.path, self.expected, self.found = path, expected, found


def stored_problem(path: str | os.PathLike, expected: Any, what: str = "stored file",
                   *, found: str | None = None) -> StoredDataMismatch | None:
    """Why ``path`` may not be reused, or None when its bytes have the SHA-256 ``expected``.

    ``found``: the file's digest when the caller already hashed the bytes it read (then
    the file is not read again). The problem names the file and, for a mismatch, the
    digest expected and the one found.
    """
    p = Path(path)
    if not _is_sha256(expected):
        return StoredDataMismatch(
            f"{what} {p} has no content digest on record (written by an earlier version of "
            "rdx, or its record is damaged), so it cannot be verified", p, None, None)
    if found is None:
        try:
            found = file_sha256(p)
        except FileNotFoundError:
            return StoredDataMismatch(f"{what} {p} is missing", p, expected, None)
        except OSError as exc:
            return StoredDataMismatch(f"{what} {p} cannot be read ({exc.strerror or exc})",
                                      p, expected, None)
    if found != expected:
        return StoredDataMismatch(
            f"{what} {p} is not the file that was written there: its SHA-256 is "
            f"{_short(found)}, the record expects {_short(expected)} (damaged, truncated or "
            "replaced)", p, expected, found)
    return None


def read_stored(path: str | os.PathLike, expected: Any, what: str = "stored file") -> bytes:
    """The bytes of ``path`` when their SHA-256 is ``expected``; else raises
    :class:`StoredDataMismatch` (missing, damaged, replaced, or no digest on record).

    The file is read once and the bytes checked are the bytes returned, so a file changed
    between a check and a read cannot slip through.
    """
    p = Path(path)
    if not _is_sha256(expected):
        raise stored_problem(p, expected, what)
    try:
        data = p.read_bytes()
    except OSError:
        raise stored_problem(p, expected, what) or StoredDataMismatch(
            f"{what} {p} cannot be read", p, expected, None) from None
    problem = stored_problem(p, expected, what, found=bytes_sha256(data))
    if problem is not None:
        raise problem
    return data


def load_npy_stored(path: str | os.PathLike, expected: Any, what: str = "stored array"
                    ) -> np.ndarray:
    """An ``.npy`` file written by the project, after :func:`read_stored` verified it."""
    import io as _io

    return np.load(_io.BytesIO(read_stored(path, expected, what)), allow_pickle=False)


def seal_record(doc: dict) -> dict:
    """``doc`` with :data:`RECORD_DIGEST`: the SHA-256 of its canonical JSON (the form
    :func:`write_json_atomic` writes, read back), so :func:`record_problem` can tell an
    altered record."""
    plain = json.loads(json.dumps(jsonable({k: v for k, v in doc.items()
                                            if k != RECORD_DIGEST}), allow_nan=False))
    return {**plain, RECORD_DIGEST: json_digest(plain)}


def record_problem(doc: Any, path: str | os.PathLike, what: str = "record"
                   ) -> StoredDataMismatch | None:
    """None when ``doc`` (read from ``path``) carries the digest of its own content
    (:func:`seal_record`); else what is wrong (not a JSON object, unsealed, altered)."""
    p = Path(path)
    if not isinstance(doc, dict):
        return StoredDataMismatch(f"{what} {p} is not a JSON object", p, None, None)
    expected = doc.get(RECORD_DIGEST)
    if not _is_sha256(expected):
        return StoredDataMismatch(
            f"{what} {p} has no content digest ({RECORD_DIGEST}; written by an earlier "
            "version of rdx), so it cannot be verified", p, None, None)
    found = json_digest({k: v for k, v in doc.items() if k != RECORD_DIGEST})
    if found != expected:
        return StoredDataMismatch(
            f"{what} {p} was altered after it was written: its content digest is "
            f"{_short(found)}, it records {_short(expected)}", p, expected, found)
    return None


def write_record(path: str | os.PathLike, doc: dict) -> Path:
    """Write a JSON record sealed with its own digest (:func:`seal_record`), atomically."""
    return write_json_atomic(path, seal_record(doc))


def read_record(path: str | os.PathLike, what: str = "record"
                ) -> tuple[dict | None, StoredDataMismatch | None]:
    """(record, None) for a sealed record whose digest matches; (None, None) when there is
    no file; (None, problem) when it cannot be read, is not sealed, or was altered."""
    p = Path(path)
    if not p.is_file():
        return None, None
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        return None, StoredDataMismatch(f"{what} {p} cannot be read ({exc})", p, None, None)
    problem = record_problem(doc, p, what)
    return (None, problem) if problem is not None else (doc, None)


def remember_input(path: str | os.PathLike, what: str) -> str:
    """Hash an input file the current command reads whole and remember its SHA-256 (and
    its ``os.stat`` signature), for :func:`check_inputs_unchanged`; returns the digest.

    The signature is taken before the bytes are hashed: a write landing during the hash
    changes the signature later seen, so it is re-hashed then, never missed.
    """
    from .input_files import remember_read, stat_signature

    signature = stat_signature(path)
    digest = file_sha256(path)
    remember_read(path, what, signature, digest)
    return digest


def check_inputs_unchanged() -> None:
    """Refuse (:class:`RDXInputError`) when an input file the current command read whole
    (:func:`remember_input`) has other bytes now than when it was read.

    Called before each result is written (:func:`atomic_write`): a result computed from a
    file that was edited, replaced or truncated while the command ran would match neither
    version. Cheap when nothing changed — a ``stat`` per input; a file is hashed again only
    when its signature (size, times, inode) moved, so touching it without changing its
    bytes passes.
    """
    from .input_files import inputs_read, stat_signature

    for real, (what, signature, digest) in inputs_read().items():
        try:
            now = stat_signature(real)
        except OSError:
            now = None
        if now == signature:
            continue
        found = None
        if now is not None:
            try:
                found = file_sha256(real)
            except OSError:
                found = None
        if found == digest:
            continue
        state = ("is gone" if now is None else "cannot be read" if found is None else
                 f"has other bytes (SHA-256 {_short(found)}, {_short(digest)} when it was read)")
        raise RDXInputError(
            f"{what} file {real!r} changed while this command ran: it {state}. Results "
            "computed from it are not written; run the command again once the file is final "
            "(or give a copy that nothing else writes).")


def sidecar_content_problem(path: str | os.PathLike, found: str) -> str | None:
    """When ``path`` has an rdx features sidecar (``FILE.json`` written by ``rdx
    features``, which records the file's SHA-256), whether ``found`` — the file's digest —
    matches it: None when it does or there is no such record, else what is wrong."""
    p = Path(path)
    side = p.with_name(p.name + ".json")
    if not side.is_file():
        return None
    try:
        doc = json.loads(side.read_text())
    except (OSError, ValueError):
        return None   # not a record rdx can read: not one it vouches for
    content = doc.get("content") if isinstance(doc, dict) else None
    if not isinstance(content, dict) or not _is_sha256(content.get("sha256")):
        return None   # a foreign JSON file, or a sidecar of an earlier version
    if content["sha256"] == found:
        return None
    return (f"{p} is not the file its provenance record {side.name} describes: its SHA-256 "
            f"is {_short(found)}, the record expects {_short(content['sha256'])} (damaged, "
            f"truncated or replaced after `rdx features` wrote it). Write it again with the "
            f"`rdx features` command recorded in {side.name}, or, if the new file is meant, "
            f"remove {side.name}.")
