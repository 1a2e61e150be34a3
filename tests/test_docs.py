"""Every command shown in the README and the docs works, and the docs site builds.

The fenced code blocks of ``README.md`` and ``docs/**/*.md`` are read:

* shell blocks (bash, sh, shell, console) are split into commands; an ``rdx ...`` command
  is parsed by the real parser of that command (``rdx.cli.COMMANDS``), so a stale flag
  fails here; ``--help``, ``--version`` and ``rdx train --list`` run for real, and so does
  the embedded example (``rdx explain --example digits ...``, into a temporary folder);
  a Python script must exist and its own parser must accept the arguments; a ``bash X.sh``
  must exist (experiment scripts: ``rdx run`` accepts the arguments; download scripts:
  the arguments are in their ``--help``);
* python blocks compile and their ``from rdx... import`` names resolve.

Inline code naming ``rdx/...`` paths or ``rdx.x.y`` objects must name something that
exists; ``rdx CMD --flag`` in inline code must use a flag of that command. A command that
is only an illustration can be marked with a trailing ``# docs: illustrative``.
Finally ``mkdocs build --strict`` must pass (skipped without mkdocs).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MARKER = "# docs: illustrative"
SHELL = {"bash", "sh", "shell", "console"}
SETUP_COMMANDS = ("bash setup.sh && bash quickstart.sh",
                  "bash setup.sh && .venv/bin/python -m pytest -q")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    text: str

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        blocks.append(Block(path, start, lang.lower(), "\n".join(body)))
        i += 1
    return blocks


def all_blocks() -> list[Block]:
    return [b for p in doc_files() for b in fenced_blocks(p)]


@dataclass(frozen=True)
class Command:
    where: str
    text: str
    argv: tuple[str, ...]


def shell_commands() -> list[Command]:
    """Every command of the shell blocks (continuations joined, comments dropped, ``&&``
    chains split), without the illustrative ones."""
    out = []
    for block in all_blocks():
        if block.lang not in SHELL:
            continue
        text = re.sub(r"\\\n\s*", " ", block.text)
        for n, line in enumerate(text.splitlines()):
            line = line.strip()
            if line.startswith("$ "):
                line = line[2:]
            if not line or line.startswith("#") or line.endswith(MARKER):
                continue
            tokens = shlex.split(line, comments=True)
            part: list[str] = []
            for tok in [*tokens, "&&"]:
                if tok in ("&&", "||", ";"):
                    if part:
                        out.append(Command(f"{block.where()}+{n}", line, tuple(part)))
                    part = []
                else:
                    part.append(tok)
    return out


COMMANDS = shell_commands()


# ------------------------------------------------------------------ classify commands

def _strip_env(argv: tuple[str, ...]) -> tuple[str, ...]:
    i = 0
    while i < len(argv) and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[i]):
        i += 1
    return argv[i:]


def kind_of(argv: tuple[str, ...]) -> tuple[str, list[str]]:
    """(kind, rest): rdx, script (python FILE.py), pytest, sh, mkdocs, pip."""
    argv = _strip_env(argv)
    head, rest = argv[0], list(argv[1:])
    if head in ("rdx", ".venv/bin/rdx"):
        return "rdx", rest
    if head in ("python", "python3", ".venv/bin/python"):
        if rest[:2] == ["-m", "rdx"]:
            return "rdx", rest[2:]
        if rest[:2] == ["-m", "pytest"]:
            return "pytest", rest[2:]
        if rest and rest[0].endswith(".py"):
            return "script", rest
    if head == "bash" and rest and rest[0].endswith(".sh"):
        return "sh", rest
    if head in ("mkdocs", ".venv/bin/mkdocs"):
        return "mkdocs", rest
    if head in (".venv/bin/pip", "pip"):
        return "pip", rest
    return "unknown", list(argv)


def test_every_shell_command_is_of_a_known_kind():
    unknown = [f"{c.where}: {c.text}" for c in COMMANDS if kind_of(c.argv)[0] == "unknown"]
    assert not unknown, ("commands the docs test cannot check; check them here or mark "
                         f"them '{MARKER}':\n" + "\n".join(unknown))
    assert len(COMMANDS) >= 40   # the docs show that many; fewer means the reader broke


# ------------------------------------------------------------------ rdx commands

class _Parsed(BaseException):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


@contextlib.contextmanager
def _stop_after_parse(before: bool = False):
    """``ArgumentParser.parse_args`` raises :class:`_Parsed` once it has parsed (or, with
    ``before``, without parsing: to get at a delegate command's parser)."""
    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        if not before:
            original(self, args, namespace)
        raise _Parsed(self)

    argparse.ArgumentParser.parse_args = parse_args
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original


def rdx_parser(name: str) -> argparse.ArgumentParser:
    from rdx.cli import COMMANDS as CLI

    cmd = CLI[name]
    module = importlib.import_module(cmd.module)
    if not cmd.delegate:
        parser = argparse.ArgumentParser(prog=f"rdx {name}")
        module.add_arguments(parser)
        return parser
    with _stop_after_parse(before=True):
        try:
            module.main([])
        except _Parsed as got:
            return got.parser
    raise AssertionError(f"rdx {name}: main() did not parse its arguments with argparse")


def _split_rdx(rest: list[str]) -> tuple[list[str], str | None, list[str]]:
    """(global options, command, its arguments)."""
    pre = []
    while rest and rest[0].startswith("--threads"):
        n = 1 if "=" in rest[0] else 2
        pre, rest = pre + rest[:n], rest[n:]
    if not rest or rest[0].startswith("-"):
        return pre, None, rest
    return pre, rest[0], rest[1:]


def _runs_for_real(cmd: str | None, args: list[str]) -> bool:
    return (cmd is None or "--help" in args or "-h" in args
            or (cmd == "train" and args == ["--list"]))


def _example_run(cmd: str | None, args: list[str]) -> bool:
    """The digits example with RDX (seconds); other methods and --significance take longer
    and are only parsed."""
    return (cmd == "explain" and args[:2] == ["--example", "digits"]
            and "--significance" not in args and "--method" not in args)


RDX_COMMANDS = [c for c in COMMANDS if kind_of(c.argv)[0] == "rdx"]


@pytest.mark.parametrize("command", RDX_COMMANDS, ids=lambda c: f"{c.where} {c.text}"[:120])
def test_rdx_command_parses(command):
    from rdx.cli import COMMANDS as CLI

    pre, name, args = _split_rdx(kind_of(command.argv)[1])
    if pre:
        value = pre[0].split("=", 1)[1] if "=" in pre[0] else pre[1]
        assert value.isdigit() and int(value) > 0, f"{command.where}: --threads {value}"
    if _runs_for_real(name, args):
        return   # test_cheap_rdx_commands_run runs it
    assert name in CLI, f"{command.where}: 'rdx {name}' is not a command (rdx/cli.py)"
    parser = rdx_parser(name)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(args)
        except SystemExit as exc:
            pytest.fail(f"{command.where}: {command.text}\nexit {exc.code}: "
                        f"{err.getvalue().strip()}")


def _run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_cheap_rdx_commands_run(tmp_path):
    """--help, --version, train --list, and the first digits example shown (the README's),
    into a temporary folder; the other example commands are parsed only (seconds each)."""
    jobs: dict[tuple[str, ...], str] = {}
    example = False
    for command in RDX_COMMANDS:
        pre, name, args = _split_rdx(kind_of(command.argv)[1])
        argv = [*pre, *([name] if name else []), *args]
        if _example_run(name, args):
            if example:
                continue
            example = True
            argv[argv.index("--out") + 1] = str(tmp_path / "example")
            argv.append("--quiet")
        elif not _runs_for_real(name, args):
            continue
        jobs.setdefault(tuple(argv), f"{command.where}: {command.text}")
    with ThreadPoolExecutor(max_workers=3) as pool:
        procs = pool.map(lambda argv: _run([sys.executable, "-m", "rdx", *argv]), jobs)
        bad = [f"{what}\nexit {p.returncode}: {p.stdout[-1500:]}{p.stderr[-1500:]}"
               for what, p in zip(jobs.values(), procs) if p.returncode != 0]
    assert not bad, "\n\n".join(bad)
    assert example and len(jobs) >= 5


# ------------------------------------------------------------------ inline rdx flags

INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def inline_spans() -> list[tuple[str, str]]:
    out = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"(?ms)^\s*(`{3,}|~{3,}).*?^\s*\1", "", text)   # not the fenced blocks
        for m in INLINE.finditer(text):
            out.append((str(path.relative_to(ROOT)), m.group(1).strip()))
    return out


def test_inline_rdx_flags_exist():
    from rdx.cli import COMMANDS as CLI

    parsers: dict[str, argparse.ArgumentParser] = {}
    bad = []
    for where, span in inline_spans():
        words = span.split()
        if len(words) < 2 or words[0] not in ("rdx", ".venv/bin/rdx") or words[1] not in CLI:
            continue
        name = words[1]
        parser = parsers.setdefault(name, rdx_parser(name))
        for word in words[2:]:
            flag = word.split("=", 1)[0].rstrip(",;:.)")
            if flag.startswith("--") and flag not in parser._option_string_actions:
                bad.append(f"{where}: `{span}`: rdx {name} has no {flag}")
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------ scripts

_BOOT = r"""
import argparse, runpy, sys
class _Parsed(BaseException):
    pass
_original = argparse.ArgumentParser.parse_args
def _parse_args(self, args=None, namespace=None):
    _original(self, args, namespace)
    raise _Parsed()
argparse.ArgumentParser.parse_args = _parse_args
script, args = sys.argv[1], sys.argv[2:]
sys.argv = [script, *args]
sys.path.insert(0, __import__("os").path.dirname(script))
try:
    runpy.run_path(script, run_name="__main__")
except _Parsed:
    sys.exit(0)
print("the script did not parse its arguments with argparse.ArgumentParser.parse_args",
      file=sys.stderr)
sys.exit(3)
"""

SCRIPT_COMMANDS = [c for c in COMMANDS if kind_of(c.argv)[0] == "script"]


def test_python_script_commands_parse():
    """Each script exists; its parser accepts the arguments shown (nothing else runs);
    its --help runs."""
    jobs: dict[str, list[str]] = {}   # what to report → the process to run
    bad = []
    for command in SCRIPT_COMMANDS:
        script, *args = kind_of(command.argv)[1]
        path = ROOT / script
        if not path.is_file():
            bad.append(f"{command.where}: {script} does not exist")
            continue
        jobs[f"{command.where}: {command.text}"] = (
            [sys.executable, str(path), *args] if "--help" in args
            else [sys.executable, "-c", _BOOT, str(path), *args])
        jobs.setdefault(f"{script} --help", [sys.executable, str(path), "--help"])
    with ThreadPoolExecutor(max_workers=3) as pool:   # processes mostly wait on imports
        procs = dict(zip(jobs, pool.map(lambda argv: _run(argv, timeout=120), jobs.values())))
    bad += [f"{what}\nexit {p.returncode}: {p.stderr[-1500:]}"
            for what, p in procs.items() if p.returncode != 0]
    assert not bad, "\n\n".join(bad)
    assert SCRIPT_COMMANDS


# ------------------------------------------------------------------ shell scripts

def _run_experiment_config(path: Path) -> str | None:
    m = re.search(r"scripts/run_experiment\.sh\"?\s+(\S+\.yaml)", path.read_text())
    return m.group(1) if m else None


def test_shell_script_commands():
    bad = []
    run_parser = rdx_parser("run")
    for command in (c for c in COMMANDS if kind_of(c.argv)[0] == "sh"):
        script, *args = kind_of(command.argv)[1]
        path = ROOT / script
        if not path.is_file():
            bad.append(f"{command.where}: {script} does not exist")
            continue
        config = _run_experiment_config(path)
        if script == "scripts/run_experiment.sh":
            config, args = (args[0] if args else None), args[1:]
        if config is not None:
            if not (ROOT / config).is_file():
                bad.append(f"{command.where}: {config} does not exist")
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                try:
                    run_parser.parse_args(["--config", config, *args])
                except SystemExit:
                    bad.append(f"{command.where}: rdx run refuses {args}: {err.getvalue()}")
        elif path.name.startswith("download_"):
            proc = _run(["bash", str(path), "--help"], timeout=60)
            if proc.returncode != 0:
                bad.append(f"{script} --help: exit {proc.returncode}")
            for arg in args:
                if arg not in ("--help", "-h") and arg not in proc.stdout + proc.stderr:
                    bad.append(f"{command.where}: {script} --help does not mention {arg!r}")
        elif args:
            bad.append(f"{command.where}: {script} takes no arguments in the docs' sense")
    assert not bad, "\n".join(bad)


def test_other_commands():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = set(pyproject["project"]["optional-dependencies"])
    for command in COMMANDS:
        kind, rest = kind_of(command.argv)
        if kind == "pytest":
            for arg in rest:
                if not arg.startswith("-"):
                    assert (ROOT / arg.split("::")[0]).exists(), f"{command.where}: {arg}"
        elif kind == "mkdocs":
            assert rest and rest[0] in ("build", "serve"), f"{command.where}: {command.text}"
        elif kind == "pip":
            for arg in rest:
                m = re.match(r"^\.\[([\w,]+)\]$", arg)
                if m:
                    missing = set(m.group(1).split(",")) - extras
                    assert not missing, f"{command.where}: no extra {missing} in pyproject"


def test_readme_keeps_the_two_setup_commands_and_is_short():
    readme = ROOT / "README.md"
    first_shell = next(b for b in fenced_blocks(readme) if b.lang in SHELL)
    assert tuple(first_shell.text.strip().splitlines()) == SETUP_COMMANDS
    assert len(readme.read_text(encoding="utf-8").splitlines()) <= 150


# ------------------------------------------------------------------ python blocks

def test_python_blocks_compile_and_import():
    bad = []
    for block in all_blocks():
        if block.lang != "python":
            continue
        try:
            tree = ast.parse(block.text)
        except SyntaxError as exc:
            bad.append(f"{block.where()}: {exc}")
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rdx":
                module = importlib.import_module(node.module)
                for alias in node.names:
                    if not hasattr(module, alias.name):
                        bad.append(f"{block.where()}: {node.module} has no {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "rdx":
                        importlib.import_module(alias.name)
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------ names and paths

def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


#: names of the repository's files (what a bare ``name.py`` / ``name.sh`` / ``name.yaml`` in
#: the docs can refer to)
def _basenames() -> set[str]:
    names = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".")
                   and d not in ("outputs", "data", "checkpoints", "__pycache__")]
        names.update(f for f in files if f.endswith((".py", ".sh", ".yaml")))
    return names


BASENAMES = _basenames()


def test_inline_paths_and_names_exist():
    bad = []
    for where, span in inline_spans():
        span = span.rstrip("/")
        if "..." in span:
            continue
        if re.fullmatch(r"(rdx|configs|benchmarks|scripts|tests|docs)(/[\w.=-]+)+", span):
            if not (ROOT / span).exists():
                bad.append(f"{where}: `{span}` does not exist")
        elif re.fullmatch(r"(bash )?[\w.=-]+\.(sh|py|yaml)", span):
            name = span.removeprefix("bash ")
            if re.fullmatch(r"[A-Z_]+", name.rsplit(".", 1)[0]):
                continue   # a placeholder (X.sh, FILE.py)
            if name not in BASENAMES:
                bad.append(f"{where}: `{span}`: no file named {name} in the repository")
        elif re.fullmatch(r"rdx(\.\w+)+(\(\))?", span):
            name = span.removesuffix("()")
            if not _resolves(name):
                bad.append(f"{where}: `{span}` does not resolve")
    assert not bad, "\n".join(bad)


def test_layout_page_names_every_package_and_module():
    layout = (DOCS / "develop" / "layout.md").read_text(encoding="utf-8")
    missing = [f"rdx/{p.name}/" for p in sorted((ROOT / "rdx").iterdir())
               if (p / "__init__.py").is_file() and f"`rdx/{p.name}/`" not in layout]
    missing += [p.name for p in sorted((ROOT / "rdx").glob("*.py"))
                if p.stem not in ("__init__", "__main__") and p.name not in layout]
    assert not missing, f"docs/develop/layout.md does not mention {missing}"


# ------------------------------------------------------------------ the site

def skip_without_npm() -> None:
    """The build installs the offline search's shim with npm (docs/hooks/offline.py) unless
    an earlier build cached it."""
    import shutil

    cached = list((ROOT / "outputs" / "cache" / "docs_npm").glob("iframe-worker-*/shim.js"))
    if not cached and shutil.which("npm") is None:
        pytest.skip("npm is not installed and no earlier build cached the iframe-worker "
                    "shim (apt-get install -y npm)")


@pytest.mark.slow
def test_docs_build_strict(tmp_path):
    """``mkdocs build --strict`` (runs the gallery; its results are cached by code digest)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings")
    skip_without_npm()
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                          text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert not warnings, "\n".join(warnings)
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "api" / "method.html").is_file()
    assert list((tmp_path / "site" / "gallery").glob("*/*.png"))


def _nav_pages(entries) -> list[str]:
    out = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            out += _nav_pages(value)
        elif isinstance(value, str) and not value.startswith(("http:", "https:")):
            out.append(value)
    return out


def test_every_page_is_in_the_navigation():
    """Each ``docs/**/*.md`` is in mkdocs.yml's nav, or named in ``not_in_nav`` /
    ``exclude_docs`` (the build enforces the same with ``validation.nav.omitted_files``)."""
    import fnmatch

    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = set(_nav_pages(config["nav"]))
    assert {"index.md", "crosscoder.md", "performance.md"} <= nav
    skipped = [p.strip() for key in ("not_in_nav", "exclude_docs")
               for p in (config.get(key) or "").splitlines() if p.strip()]
    def skip(rel: str) -> bool:   # gitignore-style: "/hooks/" is a folder, else a glob
        return any(("/" + rel).startswith(pat) if pat.endswith("/")
                   else fnmatch.fnmatch("/" + rel, pat if pat.startswith("/") else "*/" + pat)
                   for pat in skipped)

    pages = [p.relative_to(DOCS).as_posix() for p in sorted(DOCS.rglob("*.md"))]
    missing = [rel for rel in pages if rel not in nav and not skip(rel)]
    assert not missing, f"pages under docs/ not in mkdocs.yml's nav: {missing}"
    assert config["validation"]["nav"]["omitted_files"] == "warn" and config["strict"]


# ------------------------------------------------------------------ recorded figures

def _figures_hook():
    """docs/hooks/figures.py as a module (mkdocs loads it from its path, not as a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hook_figures",
                                                  DOCS / "hooks" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recorded_figures_match_their_records():
    """Every number marked ``<!-- fig SOURCE:PATH -->`` in the README and the docs is its
    record's value at the precision written (what the docs build checks, without a build)."""
    hook = _figures_hook()
    n, errors = hook.check_files(hook.doc_files())
    assert not errors, "\n".join(errors)
    assert n >= 140   # the calibration table and its prose, the README; fewer: markers lost


def test_a_drifted_figure_fails_the_check(tmp_path):
    hook = _figures_hook()
    record = tmp_path / "rec.json"
    record.write_text('{"a": {"rate": 0.0833, "n": [2, 24], "name": "x"}}')
    sources = {"rec": {"file": str(record), "written_by": "make_rec.py"}}
    ok = ("<!--fig rec:a.rate-->0.083 and <!--fig rec:a.rate-->8.3 % and "
          "<!--fig rec:a.n.0-->2 of <!--fig rec:a.n.1-->24, "
          "<!--fig rec:a.n.0 / rec:a.n.1-->0.08, <!--fig rec:a.rate %-->8–9 %, "
          "| <!-- fig-scope rec:a -->x | <!--fig .n.1-->24 | <!--fig .n.0 / .n.1-->0.0833 |")
    n, errors = hook.check_text(ok, "ok.md", sources)
    assert (n, errors) == (8, [])
    for wrong, says in [("<!--fig rec:a.rate-->0.084", "0.0833"),   # past half a unit
                        ("<!--fig rec:a.rate-->9 %", "8.33"),       # 8.33 % rounds to 8 %
                        ("<!--fig rec:a.n.1-->−24", "24"),
                        ("<!--fig rec:a.n.0-->3 of 24", "2")]:
        n, errors = hook.check_text(wrong, "w.md", sources)
        assert n == 1 and len(errors) == 1 and says in errors[0], (wrong, errors)
        assert "w.md:1" in errors[0] and "make_rec.py" in errors[0]
    for bad, says in [("<!--fig rec:a.missing-->1", "has no 'a.missing'"),
                      ("<!--fig nope:a.rate-->1", "no source 'nope'"),
                      ("<!--fig rec:a.name-->1", "not a number"),
                      ("<!--fig rec:a.rate--> about 0.08", "no number right after it"),
                      ("<!--fig .rate-->0.08", "no '<!-- fig-scope")]:
        _, errors = hook.check_text(bad, "b.md", sources)
        assert len(errors) == 1 and says in errors[0], (bad, errors)
    # in code a marker is an example: not checked
    assert hook.check_text("`<!--fig rec:a.rate-->` and\n```text\n<!--fig rec:a.x-->5\n```\n",
                           "code.md", sources) == (0, [])
    # the build stops on a drifted figure, naming it
    mkdocs_exceptions = pytest.importorskip("mkdocs.exceptions")
    hook.doc_files = lambda: [tmp_path / "page.md"]
    hook.load_sources = lambda: sources
    hook.ROOT = tmp_path
    (tmp_path / "page.md").write_text("rate <!--fig rec:a.rate-->0.09\n")
    with pytest.raises(mkdocs_exceptions.PluginError, match=r"page.md:1: the docs say 0.09"):
        hook.on_pre_build(config=None)
    record.unlink()
    _, errors = hook.check_text("<!--fig rec:a.rate-->0.083", "gone.md",
                                {"rec": {"file": str(record), "written_by": "make_rec.py"}})
    assert "does not exist" in errors[0] and "make_rec.py" in errors[0]
