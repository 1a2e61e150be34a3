"""mkdocs hook: the gallery, executed when the docs build.

Every ``docs/gallery/*.py`` is a small program on the embedded digits data. Its module
docstring is the page's text (first line: the title); the hook runs it in a fresh
interpreter with an empty working folder, and the page shows the code, what it printed and
every PNG it wrote there. A failing example fails the build.

Results are cached in ``outputs/cache/docs_gallery/`` under a digest of the script, every
``rdx/**/*.py`` file and the Python version: a rebuild with no change to either reuses them;
any change runs the example again. ``RDX_DOCS_GALLERY_RERUN=1`` ignores the cache.
"""
from __future__ import annotations

import ast
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
GALLERY = ROOT / "docs" / "gallery"
CACHE = ROOT / "outputs" / "cache" / "docs_gallery"
TIMEOUT_S = 600


def examples() -> list[Path]:
    """The gallery's scripts, in the order of their names."""
    return sorted(GALLERY.glob("*.py"))


def _digest(script: Path) -> str:
    h = hashlib.sha256()
    h.update(sys.version.encode())
    h.update(script.read_bytes())
    for path in sorted((ROOT / "rdx").rglob("*.py")):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _split(script: Path) -> tuple[str, str, str]:
    """Title, text (the docstring after its first line) and the code without the docstring."""
    source = script.read_text(encoding="utf-8")
    tree = ast.parse(source)
    doc = ast.get_docstring(tree)
    if not doc:
        raise PluginError(f"{script}: a gallery example starts with a docstring (its title "
                          "on the first line, then its text)")
    title, _, text = doc.partition("\n")
    body = tree.body[0]
    code = "\n".join(source.splitlines()[body.end_lineno:]).strip("\n")
    return title.strip(), text.strip(), code


def run_example(script: Path) -> tuple[Path, float | None]:
    """Run ``script`` (or reuse its cached run); the folder with ``stdout.txt`` and PNGs, and
    the seconds it took (None when cached)."""
    done = CACHE / script.stem / _digest(script)
    if done.is_dir() and not os.environ.get("RDX_DOCS_GALLERY_RERUN"):
        return done, None
    done.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".run-", dir=done.parent))
    env = {**os.environ, "MPLBACKEND": "Agg"}
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(script)], cwd=work, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        shutil.rmtree(work, ignore_errors=True)
        raise PluginError(f"gallery example {script.name} ran longer than {TIMEOUT_S} s")
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise PluginError(f"gallery example {script.name} failed (exit {proc.returncode}):\n"
                          + proc.stderr[-4000:])
    (work / "stdout.txt").write_text(proc.stdout, encoding="utf-8")
    shutil.rmtree(done.parent / done.name, ignore_errors=True)
    for old in done.parent.iterdir():   # earlier digests of this example
        if old.is_dir() and not old.name.startswith(".run-"):
            shutil.rmtree(old, ignore_errors=True)
    work.rename(done)
    return done, seconds


def gallery_pages() -> tuple[dict[str, str], dict[str, Path]]:
    """``{uri: markdown}`` of the pages and ``{uri: file}`` of the figures."""
    pages: dict[str, str] = {}
    figures: dict[str, Path] = {}
    index = ["# Gallery", "",
             "Small programs on the embedded digits example (no download). Each one was run "
             "when this site was built; its page shows the code, what it printed and the "
             "figures it wrote. Run one yourself; it writes its figures into the current "
             "folder, e.g. from the repository root: `mkdir -p outputs/gallery && cd "
             "outputs/gallery && ../../.venv/bin/python ../../docs/gallery/rdx_digits.py`.", ""]
    scripts = examples()
    parts = [_split(script) for script in scripts]   # a missing docstring fails before any run
    with ThreadPoolExecutor(max_workers=2) as pool:  # two examples at a time
        runs = list(pool.map(run_example, scripts))
    for script, (title, text, code), (folder, seconds) in zip(scripts, parts, runs):
        pngs = sorted(folder.glob("*.png"))
        name = script.stem
        lines = [f"# {title}", "", text, "", "```python", code, "```", "",
                 f"[Download `{script.name}`]({script.name})", "", "## Output", "",
                 "```text", (folder / "stdout.txt").read_text(encoding="utf-8").rstrip(),
                 "```", ""]
        for png in pngs:
            uri = f"gallery/{name}/{png.name}"
            figures[uri] = png
            lines += [f"**`{png.name}`**", "", f"![{title}: {png.stem}]({name}/{png.name})", ""]
        pages[f"gallery/{name}.md"] = "\n".join(lines)
        first = f" ![{title}]({name}/{pngs[0].name}){{ width=\"320\" }}" if pngs else ""
        summary = text.split("\n\n")[0].replace("\n", " ")
        index += [f"## [{title}]({name}.md)", "", summary, "", first.strip(), ""]
        if seconds is not None:
            print(f"INFO    -  gallery: ran {script.name} in {seconds:.1f} s", file=sys.stderr)
    pages["gallery/index.md"] = "\n".join(index)
    return pages, figures


def on_files(files, config):
    pages, figures = gallery_pages()
    for uri, text in pages.items():
        files.append(File.generated(config, uri, content=text))
    for uri, path in figures.items():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
