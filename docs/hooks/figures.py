"""mkdocs hook: every number the docs take from a script's record matches that record.

A number in ``README.md`` or a page under ``docs/`` that a script measured is marked with
an HTML comment right before it, naming where the script recorded it (the comment does not
show, on the site or on GitHub)::

    flags <!-- fig calibration:families.mlp.heldout.calibrated.flagged -->0 of 48 twins
    e^<!-- fig calibration:families.mlp.log_shift -->−0.45
    up to <!-- fig calibration:families.convnet.heldout.fpr_ci.1 -->27 %

``calibration`` is a *source*, a JSON file a script writes, listed in
``docs/hooks/figures.yaml`` with the command that writes it; the rest is a path into that
file (keys and list indices separated by dots). ``KEY / KEY`` divides two recorded values
(a rate from its counts). In a table, ``<!-- fig-scope calibration:families.mlp -->`` once
lets the markers after it in the file name paths relative to it
(``<!--fig .log_shift-->``). The number after the comment is compared at the precision it
is written with: ``0.083`` must be the record rounded to three decimals, ``27 %`` the
record × 100 rounded to a whole number, ``0 of 48`` must be 0; ``<!-- fig KEY % -->``
marks a percentage whose sign comes later (``1.0–27 %``). Markers in code (fenced blocks,
inline code) are examples and are not read. A number that no longer matches its
record, a path that is not in the record and a source that is missing all fail the build
(and ``tests/test_docs.py``, which runs the same check without building), so a figure that
drifts from its script's last recorded output cannot stay in the docs.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = Path(__file__).with_name("figures.yaml")

#: ``<!-- fig SOURCE:PATH -->`` then the number (ASCII or Unicode minus, optional sign,
#: optional decimals, an optional ``%`` after it)
MARKER = re.compile(r"<!--\s*fig\s+(?P<key>[^>]*?)\s*-->\s*"
                    r"(?P<num>[+\-−]?\d+(?:\.\d+)?)(?P<pct>\s?%)?")
#: ``<!-- fig-scope SOURCE:PATH -->``: what the relative markers after it are relative to
SCOPE = re.compile(r"<!--\s*fig-scope\s+(?P<scope>[^>]*?)\s*-->")
#: a marker whose number is missing or unreadable (caught rather than skipped)
ANY_MARKER = re.compile(r"<!--\s*fig\s")


class Figure(NamedTuple):
    """One marked number: where it is, the record it names and the text written."""
    where: str
    key: str
    text: str
    percent: bool


def load_sources(registry: Path = REGISTRY) -> dict[str, dict[str, Any]]:
    """``{name: {"file", "written_by", "data"}}`` from the registry (files read lazily)."""
    import yaml

    doc = yaml.safe_load(registry.read_text(encoding="utf-8")) or {}
    return {name: dict(spec) for name, spec in (doc.get("sources") or {}).items()}


def _data(sources: dict[str, dict[str, Any]], name: str) -> Any:
    spec = sources[name]
    if "data" not in spec:
        spec["data"] = json.loads((ROOT / spec["file"]).read_text(encoding="utf-8"))
    return spec["data"]


def lookup(sources: dict[str, dict[str, Any]], key: str) -> float:
    """The recorded value ``SOURCE:PATH`` names (``PATH / PATH`` for a ratio)."""
    name, sep, path = key.partition(":")
    if not sep or name not in sources:
        raise KeyError(f"'{key}': no source '{name}' in {REGISTRY.relative_to(ROOT)} "
                       f"(sources: {', '.join(sorted(sources))})")
    file = ROOT / sources[name]["file"]
    if not file.is_file():
        raise KeyError(f"'{key}': the record {sources[name]['file']} does not exist; "
                       f"write it with: {sources[name].get('written_by', '?')}")
    values = []
    for part in path.split(" / "):
        # a later part repeats the source when it came from a scope ("S:x / S:y")
        part = part.strip().removeprefix(f"{name}:")
        value = _data(sources, name)
        for step in part.split("."):
            try:
                value = value[int(step)] if isinstance(value, list) else value[step]
            except (KeyError, IndexError, ValueError, TypeError):
                raise KeyError(f"'{key}': {sources[name]['file']} has no '{part.strip()}' "
                               f"(stops at '{step}')") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise KeyError(f"'{key}': {part.strip()} is {value!r}, not a number")
        values.append(float(value))
    return values[0] if len(values) == 1 else values[0] / values[1]


#: fenced code blocks and inline code: shown as written (a marker there is an example)
CODE = re.compile(r"(?ms)^\s*(`{3,}|~{3,}).*?^\s*\1|`[^`\n]+`")


def _without_code(text: str) -> str:
    """``text`` with its code blanked out, line numbers kept."""
    return CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def figures_in(text: str, where: str) -> tuple[list[Figure], list[str]]:
    """The marked numbers of a markdown text (outside code), and markers with no number
    after them."""
    text = _without_code(text)
    found, bad = [], []
    line_of = [0]
    for m in re.finditer("\n", text):
        line_of.append(m.end())

    def at(pos: int) -> str:
        import bisect
        return f"{where}:{bisect.bisect_right(line_of, pos)}"

    matched, scopes = set(), [(m.start(), m.group("scope")) for m in SCOPE.finditer(text)]
    for m in MARKER.finditer(text):
        matched.add(m.start())
        key = m.group("key")
        if key.startswith("."):
            scope = [name for pos, name in scopes if pos < m.start()]
            if not scope:
                bad.append(f"{at(m.start())}: '{key}' is relative, and no "
                           "'<!-- fig-scope SOURCE:PATH -->' comes before it")
                continue
            key = " / ".join(scope[-1] + part.strip() if part.strip().startswith(".")
                             else part.strip() for part in key.split(" / "))
        # "KEY %": a percentage whose sign is written later ("1.0–27 %")
        percent = bool(m.group("pct")) or key.endswith("%")
        found.append(Figure(at(m.start()), key.removesuffix("%").strip(), m.group("num"),
                            percent))
    for m in ANY_MARKER.finditer(text):
        if m.start() not in matched:
            bad.append(f"{at(m.start())}: a '<!-- fig ... -->' marker with no number right "
                       "after it")
    return found, bad


def matches(written: str, recorded: float, percent: bool = False) -> bool:
    """Whether ``written`` is ``recorded`` (× 100 for a percentage) at the precision it is
    written with (half a unit of its last digit)."""
    text = written.replace("−", "-")
    decimals = len(text.split(".", 1)[1]) if "." in text else 0
    value = recorded * 100 if percent else recorded
    return math.isclose(float(text), value, abs_tol=0.5 * 10 ** -decimals + 1e-9)


def check_text(text: str, where: str, sources: dict[str, dict[str, Any]]
               ) -> tuple[int, list[str]]:
    """(how many marked numbers, what is wrong with them) for one markdown text."""
    figures, errors = figures_in(text, where)
    for fig in figures:
        try:
            recorded = lookup(sources, fig.key)
        except KeyError as exc:
            errors.append(f"{fig.where}: {exc.args[0]}")
            continue
        if not matches(fig.text, recorded, fig.percent):
            shown = recorded * 100 if fig.percent else recorded
            source = sources[fig.key.partition(':')[0]]
            errors.append(f"{fig.where}: the docs say {fig.text}{' %' if fig.percent else ''}"
                          f", the record {source['file']} says {shown:.6g} ({fig.key}); "
                          f"rerun `{source.get('written_by', '?')}` or correct the text")
    return len(figures), errors


def check_files(paths: list[Path], sources: dict[str, dict[str, Any]] | None = None
                ) -> tuple[int, list[str]]:
    sources = load_sources() if sources is None else sources
    total, errors = 0, []
    for path in paths:
        n, bad = check_text(path.read_text(encoding="utf-8"),
                            str(path.relative_to(ROOT)), sources)
        total, errors = total + n, errors + bad
    return total, errors


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


# ------------------------------------------------------------------ the hook

def on_pre_build(config, **kwargs):
    """Check every page and the README before anything is built: one message listing every
    number that differs from its record."""
    from mkdocs.exceptions import PluginError

    n, errors = check_files(doc_files())
    if errors:
        raise PluginError(f"{len(errors)} of the docs' {n} recorded figures do not match "
                          "their records:\n" + "\n".join(errors))
