"""mkdocs hook: API reference pages generated from the package tree (one page per package,
every public module in it), so a new or moved module is documented without editing a page."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("method", "baselines", "evaluation", "similarity", "results", "data", "models",
            "studies")


def _modules(package: str) -> list[str]:
    """Every public module of ``rdx.<package>``, subpackages included (a subpackage by its
    ``__init__``, then its modules)."""
    folder = ROOT / "rdx" / package
    out = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if path.parent == folder and path.stem == "__init__":
            continue   # the package itself heads the page
        if path.stem == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts) or "__pycache__" in path.parts:
            continue
        out.append(".".join(parts))
    return out


def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def api_pages() -> dict[str, str]:
    pages = {}
    index = ["# API reference", "",
             "Generated from the docstrings of the stable packages (every public module).", ""]
    for pkg in PACKAGES:
        init = ROOT / "rdx" / pkg / "__init__.py"
        lines = [f"# `rdx.{pkg}`", "", "::: rdx." + pkg, "    options:",
                 "      members: false", "      show_root_heading: false", ""]
        for mod in _modules(pkg):
            lines += [f"::: {mod}", ""]
        pages[f"api/{pkg}.md"] = "\n".join(lines)
        index.append(f"* [`rdx.{pkg}`]({pkg}.md) — {_summary(init)}")
    pages["api/index.md"] = "\n".join(index) + "\n"
    return pages


def on_files(files, config):
    for uri, text in api_pages().items():
        files.append(File.generated(config, uri, content=text))
    return files


_ROLE = re.compile(r":(?:py:)?(?:func|mod|class|data|attr|meth|obj|exc|const):(?=<code>)")


def on_page_content(html, page, config, files):
    """Docstrings use Sphinx roles (``:func:`name```); mkdocstrings shows the role as text
    before the code, so it is dropped here (API pages only)."""
    if page.file.src_uri.startswith("api/"):
        return _ROLE.sub("", html)
    return html
