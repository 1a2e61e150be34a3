"""One command line: ``rdx <command> ...`` (also ``python -m rdx``).

Each command lives in its own module, imported only when it runs, so ``rdx --help`` and
``rdx --version`` answer at once. Bad input exits with status 2 and a one-paragraph message
on stderr, never a traceback; a typo in a command's flags prints that command's usage.
SIGINT (Ctrl-C), SIGTERM and SIGHUP stop a command with one line on stderr and exit status
130, 143 and 129 (128 + the signal's number), after the cleanup of what it was writing.
A closed stdout or stderr, a reader of stdout that leaves early (``| head -1``: exit 141,
quietly) and an encoding without a character are handled once for every command
(:mod:`rdx.streams`).

``rdx --threads N COMMAND ...`` (before the command) sets ``RDX_NUM_THREADS`` for this run
and the processes it starts; without it rdx picks the count itself (:mod:`rdx.threads`).
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from typing import NamedTuple


class Command(NamedTuple):
    help: str
    module: str          # defines add_arguments(parser) and run_command(args) -> int
    # no command parses its own arguments any more (every module follows the protocol
    # above); the field stays False until the tests that read it drop it
    delegate: bool = False
    # "module:function" checking the parsed arguments' paths before the command runs, for a
    # command whose module does not check them itself
    check_paths: str | None = None


COMMANDS: dict[str, Command] = {
    "run": Command("run an experiment config (all comparisons, resumable), then its report",
                   "rdx.commands.run"),
    "explain": Command("difference explanations (or another method) of two representations",
                       "rdx.commands.explain"),
    "report": Command("summary table and static HTML report of a finished run",
                      "rdx.commands.report"),
    "explore": Command("the interactive explorer (one self-contained page) of a comparison",
                       "rdx.explorer.command",
                       check_paths="rdx.commands.common:explore_paths"),
    "features": Command("features of images from a model id (timm, open_clip, hf, "
                        "torchvision, efficientnet-lite, checkpoints), cached and resumable",
                        "rdx.commands.features"),
    "similarity": Command("how similar two representations are (CKA, RSA, k-NN, ...)",
                          "rdx.commands.similarity"),
    "train": Command("train the project's ConvNet presets (checkpoints for the experiments)",
                     "rdx.commands.train"),
    "dynamics": Command("training dynamics: every checkpoint against the final model",
                        "rdx.commands.dynamics"),
    "matrix": Command("model × model similarity matrices per dataset (local or SLURM jobs)",
                      "rdx.commands.matrix"),
    "consistency": Command("consistency of similarity matrices across datasets",
                           "rdx.commands.consistency"),
    "probe": Command("linear probes of many models on many datasets",
                     "rdx.commands.probe"),
    "layers": Command("layer-wise study: RDX across the blocks of one model, probes, patching",
                      "rdx.commands.layers"),
    "benchmark": Command("the known-difference benchmark with seed-twin controls",
                         "rdx.commands.benchmark"),
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that output on stdout (``--help``, ``--version``) that
    cannot be written raises, as every other write of a command does.

    argparse passes over any error while it prints, so ``rdx --help | head -1`` would exit
    0 when the reader left, where a command exits 141 (:mod:`rdx.streams`). Its messages
    on stderr (a usage error) are still passed over: the exit status, 2, tells the rest.
    """

    def _print_message(self, message: str, file=None) -> None:
        if message and file is not None and file is sys.stdout:
            file.write(message)
            file.flush()
            return
        super()._print_message(message, file)


def _version() -> str:
    from . import __version__
    return f"rdx {__version__}"


def _overview() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rdx", description="Representational Difference Explanations: how do two models' "
                                "representations differ?",
        epilog="`rdx COMMAND --help` shows a command's options.")
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--threads", metavar="N",
                        help="threads for CPU work, before the command (default: the CPUs "
                             "this process may use: affinity, cgroup quota, SLURM; also "
                             "RDX_NUM_THREADS)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in COMMANDS.items():
        sub.add_parser(name, help=cmd.help)
    return parser


def _import(cmd: Command, name: str):
    try:
        return importlib.import_module(cmd.module)
    except ModuleNotFoundError as exc:
        extra = {"umap": "nlmcd", "hdbscan": "nlmcd", "submitit": "cluster", "timm": "zoo",
                 "open_clip": "zoo", "selenium": "test", "plotly": "explore"}
        missing = (exc.name or "").split(".")[0]
        if missing in extra:
            raise SystemExit(f"rdx {name}: needs the optional package {missing!r}: "
                             f"pip install 'rdx-toolkit[{extra[missing]}]'") from None
        raise


def _take_threads(argv: list[str]) -> list[str]:
    """Consume a leading ``--threads N`` (or ``--threads=N``): it becomes
    ``RDX_NUM_THREADS``, read when torch loads and by rdx's thread pools (and inherited by
    the worker processes a command starts). Exits with status 2 on a bad value."""
    if not argv or not (argv[0] == "--threads" or argv[0].startswith("--threads=")):
        return argv
    if argv[0] == "--threads":
        value, rest = (argv[1] if len(argv) > 1 else ""), argv[2:]
    else:
        value, rest = argv[0].split("=", 1)[1], argv[1:]
    if not (value.isdigit() and int(value) > 0):
        from .streams import say

        say(f"rdx: error: --threads needs a positive integer, got {value!r}.")
        raise SystemExit(2)
    os.environ["RDX_NUM_THREADS"] = str(int(value))
    return rest


def _quiet_unraisable(unraisable) -> None:
    """Drop an exception raised in ``__del__`` after an interrupt (see :func:`main`)."""


class Stop(KeyboardInterrupt):
    """SIGTERM or SIGHUP while a command runs, raised where the command is, like Ctrl-C.

    A subclass of :class:`KeyboardInterrupt`, so that every cleanup that runs for Ctrl-C
    (atomic writes remove their temporary file, locks are released) runs for these too.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


#: The signals that stop a command the way Ctrl-C does: the signal → how the last line
#: names it. A service manager or a batch scheduler sends SIGTERM (``kill``, ``scancel``,
#: ``systemctl stop``); a closed terminal or SSH session sends SIGHUP.
STOP_SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)",
                signal.SIGHUP: "stopped: the terminal hung up (SIGHUP)"}


class _Interrupts:
    """SIGINT, SIGTERM and SIGHUP while a command runs: recorded, then raised as
    KeyboardInterrupt (:class:`Stop` for the last two) where the command is.

    Ctrl-C that lands while a C extension loads does not always arrive as KeyboardInterrupt:
    numpy turns it into an ImportError ("PyCapsule_Import could not import module"), which a
    library's ``try: import x / except ImportError`` may even swallow, so the command ran on
    to the end (exit 0) or died with that traceback (exit 1). With the record, whatever
    follows an interrupt ends as one: one line, exit 128 + the signal's number (130 for
    SIGINT, 143 for SIGTERM, 129 for SIGHUP, as a shell reports a process the signal
    ended).

    SIGTERM and SIGHUP are taken over only where their action is the default one (which
    ends the process on the spot: no cleanup, temporaries left, no message); a parent that
    ignores them (``nohup``) keeps that. SIGXFSZ — sent when a write passes the process's
    file size limit (``ulimit -f``), which ends the process the same way — is ignored, so
    the write fails with EFBIG and the command says so (:func:`rdx.paths.describe_os_error`).
    """

    def __init__(self) -> None:
        self.seen = False
        self.signum = signal.SIGINT
        self.previous: dict[int, object] = {}

    def __enter__(self) -> "_Interrupts":
        if threading.current_thread() is not threading.main_thread():
            return self   # signal handlers can only be set from the main thread
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self.previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_signal)
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:
                self.previous[signum] = signal.signal(signum, self._on_signal)
        if signal.getsignal(signal.SIGXFSZ) == signal.SIG_DFL:
            self.previous[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        return self

    def _on_signal(self, signum, frame) -> None:
        if self.seen and signum != signal.SIGINT:
            return   # already stopping: a repeated SIGTERM must not cut the cleanup short
        self.seen = True
        self.signum = signum
        # raised inside a callback from C (llvmlite's object-cache notifier, for one) the
        # interrupt cannot propagate: Python prints it as "Exception ignored ... Traceback"
        # and goes on. The record above still ends the command as interrupted; from here
        # on nothing but that one line speaks.
        sys.unraisablehook = _quiet_unraisable
        raise KeyboardInterrupt if signum == signal.SIGINT else Stop(signum)

    def __exit__(self, *exc) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)


def _check_counts(args: argparse.Namespace) -> None:
    """The integer options that start processes or size a batch (``--workers``,
    ``--num-workers``, ``--batch-size``, ...: :data:`rdx.budget.PARSE_TIME`), against their
    ceilings, whichever command took them.

    Commands read these deep in their data loading, after models and data are loaded; an
    absurd value (a typo of a few zeros: a million worker processes) is refused here before
    anything starts; the worker processes a command starts on this machine
    (:data:`rdx.budget.LOCAL_WORKERS`) also against its CPUs. The counts that multiply
    time are checked by their commands, which
    also estimate the time and name a value that fits.
    """
    from .budget import LOCAL_WORKERS, PARSE_TIME, check_ceiling, check_local_workers

    local = LOCAL_WORKERS.get(getattr(args, "command", ""), ())
    for dest, value in vars(args).items():
        if dest not in PARSE_TIME:
            continue
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, int) and not isinstance(v, bool):
                check_ceiling(v, "--" + dest.replace("_", "-"))
                if dest in local:   # processes on this machine: at most its CPUs
                    check_local_workers(v, "--" + dest.replace("_", "-"))


def _no_temporary_folder(exc: BaseException) -> bool:
    """Whether ``exc`` is Python's ``tempfile`` finding no folder it can write a file in.

    ``tempfile`` probes each candidate by writing a few bytes and, when every write fails
    (full disk, quota, ``ulimit -f``, read-only), raises FileNotFoundError instead of the
    write's own error — so :func:`rdx.paths.describe_os_error` cannot recognise it by
    its errno, and any library that needs a temporary file raises it.
    """
    return isinstance(exc, FileNotFoundError) and \
        "No usable temporary directory" in str(exc)


def _interrupted(name: str, signum: int = signal.SIGINT) -> int:
    """Say in one line that the command was stopped by ``signum``; its exit status
    (128 + the signal's number)."""
    # Ctrl-C can land inside a C-extension constructor (numba/llvmlite while loading, for
    # one): the half-built object's __del__ then fails when the interrupted frames are
    # freed, and Python prints that as "Exception ignored ... Traceback". The user asked to
    # stop; say so in one line and let nothing after it speak.
    sys.unraisablehook = _quiet_unraisable
    from .streams import say

    say(f"rdx {name}: {STOP_SIGNALS.get(signum, 'stopped')}; finished work is kept (run "
        "the same command again to resume).")
    return 128 + int(signum)


def main(argv: list[str] | None = None) -> int:
    argv = _take_threads(list(sys.argv[1:] if argv is None else argv))
    if not argv or argv[0] not in COMMANDS:
        # top-level help, --version, or an unknown command: argparse answers (exit 0 or 2)
        _overview().parse_args(argv)
        return 2
    name, rest = argv[0], argv[1:]
    cmd = COMMANDS[name]
    from .input_files import begin_command

    # the input files the command checks are protected from its own writes (rdx.input_files)
    inputs = begin_command()
    with _Interrupts() as sigint:
        code = _main(name, cmd, rest, inputs, sigint)
    stopped = 128 + int(sigint.signum)
    return _interrupted(name, sigint.signum) if sigint.seen and code != stopped else code


def _main(name: str, cmd: Command, rest: list[str], inputs, sigint: _Interrupts) -> int:
    from .errors import RDXInputError
    from .input_files import end_command
    from .io import take_write_failure
    from .paths import describe_os_error
    from .streams import BROKEN_PIPE_STATUS, is_broken_pipe, say
    from .threads import limit_native_pools

    take_write_failure()   # a failure of an earlier command in this process is not this one's
    try:
        module = _import(cmd, name)
        limit_native_pools()   # the BLAS pools the command's imports loaded (usually: none to size)
        parser = _Parser(prog=f"rdx {name}", description=cmd.help)
        module.add_arguments(parser)
        args = parser.parse_args(rest)
        args.command = name
        _check_counts(args)
        if cmd.check_paths:
            where, func = cmd.check_paths.split(":")
            getattr(importlib.import_module(where), func)(args)
        code = int(module.run_command(args) or 0)
        failed = take_write_failure()
        if code == 0 and failed is not None:
            # a result that could not be written (full disk, ...) was passed over on its
            # way up (a best-effort page or figure): the command did not succeed
            say(f"rdx {name}: error: {describe_os_error(failed)}")
            return 2
        return code
    except Exception as exc:
        if sigint.seen:   # the interrupt, turned into another error on its way up
            return _interrupted(name, sigint.signum)
        if is_broken_pipe(exc):   # the reader of stdout or stderr left: stop, quietly
            return BROKEN_PIPE_STATUS
        if isinstance(exc, RDXInputError):
            say(f"rdx {name}: error: {exc}")
            return 2
        # a full disk, a read-only file system, no permission: where the user writes, not a
        # fault of the program (those keep their traceback)
        message = describe_os_error(exc) if isinstance(exc, OSError) else None
        if message is None and _no_temporary_folder(exc):
            message = ("no folder for temporary files can be written (tried TMPDIR, /tmp, "
                       "/var/tmp, /usr/tmp and the current folder): the disk is full, a "
                       "quota or a file size limit (ulimit -f) is reached, or they are "
                       "read-only — free some space or set TMPDIR to a folder you can "
                       "write to, then run the command again.")
        if message is None:
            raise
        say(f"rdx {name}: error: {message}")
        return 2
    except KeyboardInterrupt as exc:
        return _interrupted(name, getattr(exc, "signum", signal.SIGINT))
    finally:
        end_command(inputs)


def run() -> None:
    """Console entry point (``rdx``, ``python -m rdx``): :func:`main`, then a fast exit.

    Everything a command writes is flushed and renamed into place before it returns, so the
    interpreter's own shutdown (about a second once torch is loaded: its atexit handlers and
    module teardown) is skipped. Ctrl-C before the command's own handling starts (while
    its arguments are read) is one line too. The standard streams are made safe first and
    flushed last (:mod:`rdx.streams`): a closed one is the null device, a broken pipe ends
    the command quietly with status 141, an unencodable character is an escape.
    """
    from .streams import BROKEN_PIPE_STATUS, exit_status, finish, is_broken_pipe, prepare

    prepare()
    try:
        code = main()
    except KeyboardInterrupt as exc:
        code = _interrupted(" ".join(sys.argv[1:2]) or "", getattr(exc, "signum",
                                                                    signal.SIGINT))
    except SystemExit as exc:   # --help, --version, a usage error: argparse's status
        code = exit_status(exc)
    except OSError as exc:
        if not is_broken_pipe(exc):
            raise
        code = BROKEN_PIPE_STATUS
    os._exit(finish(code))


if __name__ == "__main__":
    run()
