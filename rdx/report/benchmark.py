"""The benchmark's page of the HTML report: ``<out>/report.html`` for ``rdx benchmark``.

:func:`render_benchmark_report` lays out the benchmark's document (``benchmark.json``: one
row per case × method, the per-method summary, the cases) on one self-contained page like
the other reports (inline CSS, no JavaScript, no external resource): what the benchmark
asks, the per-method summary, the table of every case and method, each case with its
implanted difference, and links to each case's comparisons (their reports and, where
written, explorers) and to the tables. :func:`write_benchmark_report` writes it, and the
comparison reports it links to.
"""
from __future__ import annotations

import json
import urllib.parse
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from .. import __version__
from ..io import atomic_write, environment_error
from ..results.store import EXPLORE_HTML, REPORT_HTML
from .html import attr, esc, facts, fmt, note, page, table

REPORT_NAME = REPORT_HTML
#: the comparisons of a case: A vs B (the implanted difference) and B's seed twin vs B
PAIRS = (("test", "A vs B"), ("control", "B's seed twin vs B"))
TABLES = (("benchmark.json", "everything"), ("benchmark.csv", "the table"),
          ("benchmark.md", "the table as Markdown"))


def _frac(h: Any, t: Any) -> str:
    return "—" if h is None or t is None else f"{h}/{t}"


def _p(v: Any) -> str:
    return "—" if v is None else ("< 0.001" if v < 0.001 else f"{v:.3f}")


def _num(text: str) -> str:
    return f'<td class="num">{esc(text)}</td>'


def _pair_links(out: Path | None, case: str) -> str:
    """Links to a case's comparison reports and explorers, where written."""
    if out is None:
        return "—"
    links = []
    for pair, label in PAIRS:
        folder = out / case / pair
        base = urllib.parse.quote(case) + "/" + pair + "/"
        if (folder / REPORT_NAME).is_file():
            links.append(f'<a href="{attr(base + REPORT_NAME)}">{esc(pair)} report</a>')
        if (folder / EXPLORE_HTML).is_file():
            links.append(f'<a href="{attr(base + EXPLORE_HTML)}">{esc(pair)} explorer</a>')
    return " · ".join(links) or "—"


def _null_words(doc: Mapping[str, Any]) -> str:
    """Which null the benchmark's verdicts are against, in the words every page uses."""
    from ..results.nulls import null_name

    if doc.get("twins_trained"):
        return (f"{null_name('twin')}: seed twins the benchmark trains "
                f"({doc['twins_trained']} of each compared model), exact null draws")
    return f"{null_name(doc.get('null') or 'field')} (calibrated for the benchmark's ConvNets)"


def _summary_table(doc: Mapping[str, Any]) -> str:
    rows = []
    for m, s in (doc.get("summary") or {}).items():
        twin = (_frac(s["detected_twin_null"], s["cases"]) if "detected_twin_null" in s
                else "—")
        rows.append([f"<b>{esc(m)}</b>", _num(_frac(s["detected"], s["cases"])),
                     _num(_frac(s["significant_hits"], s["cases"])),
                     _num(_frac(s["controls_clean"], s["cases"])), _num(twin)])
    if not rows:
        return note("No method's significance was assessed, so there is no summary: each "
                    "row below gives the hits of its grids.")
    return table(["method", "cases detected (a significant expected-direction "
                            "explanation)", "… that is a hit", "seed controls clean (no "
                                                               "significant explanation)",
                  "detected with B's seed twin as the null"], rows)


def _rows_table(doc: Mapping[str, Any], out: Path | None) -> str:
    rows = []
    for r in doc.get("rows") or []:
        if r.get("error"):
            rows.append([esc(r["case"]), esc(r["method"]),
                         f'<td colspan="10">{note("failed: " + str(r["error"]))}</td>',
                         _pair_links(out, r["case"])])
            continue
        sig = "—" if r.get("significant_expected") is None else \
            f"{r['significant_expected']} ({r['significant_hits']})"
        rows.append([
            esc(r["case"]), f"<b>{esc(r['method'])}</b>",
            _num(_frac(r.get("hits_expected"), r.get("grids_expected"))),
            _num(_frac(r.get("hits_opposite"), r.get("grids_opposite"))),
            _num(_frac(r.get("hits_control"), r.get("grids_control"))),
            _num("—" if r.get("chance_hit_rate") is None else f"{r['chance_hit_rate']:.2g}"),
            _num(sig), _num(_p(r.get("min_p_fwer_expected"))),
            _num(_p(r.get("min_p_fwer_expected_twin"))), _num(_p(r.get("min_p_fwer_control"))),
            _num(fmt(r.get("bsr_test"), 2)), _num(fmt(r.get("bsr_control"), 2)),
            _pair_links(out, r["case"])])
    return table(["case", "method", "hits expected", "hits opposite", "hits control",
                  "chance / grid", "significant expected (hits)", "min p expected",
                  "min p expected, twin null", "min p control", "BSR test", "BSR control",
                  "comparisons"], rows, cls="scores")


def _cases(doc: Mapping[str, Any], out: Path | None) -> str:
    parts = []
    for name, rec in (doc.get("cases") or {}).items():
        kd = rec.get("known_difference")
        acc = rec.get("train_accuracy") or {}
        parts.append(
            f'<h3 id="{attr("case-" + name)}">{esc(name)}</h3>'
            f"<p>{esc(rec.get('description', ''))}</p>"
            + facts([("implanted difference",
                      f"<code>{esc(json.dumps(kd, sort_keys=True, default=str))}</code>"),
                     ("images", esc(rec.get("n_images"))),
                     ("chance hit rate per grid", esc(fmt(rec.get("chance_hit_rate"), 3))),
                     ("training accuracy", esc(", ".join(f"{k} {fmt(v, 3)}"
                                                         for k, v in acc.items()) or "—")),
                     ("comparisons", _pair_links(out, name))]))
    return "".join(parts)


def render_benchmark_report(doc: Mapping[str, Any], out_dir: str | Path | None = None) -> str:
    """The page for a benchmark document (``benchmark.json``); ``out_dir`` (the benchmark's
    folder) adds the links to the case comparisons and tables that exist there."""
    out = Path(out_dir) if out_dir is not None else None
    methods = [m.get("method") for m in doc.get("methods") or [] if isinstance(m, Mapping)]
    cases = list((doc.get("cases") or {}).keys())
    timings = doc.get("timings_s") or {}
    machine = doc.get("machine") or {}
    head = ('<header class="page"><div class="crumb">RDX report · benchmark</div>'
            f"<h1>Benchmark: {esc(doc.get('suite', '?'))} suite</h1>"
            '<p class="question">Does each method find a difference implanted on purpose '
            "(in the expected direction, with a significant explanation) — and stay quiet "
            "when B is compared with its own seed twin?</p>"
            + facts([("cases", esc(", ".join(cases)) or "—"),
                     ("methods", esc(", ".join(str(m) for m in methods)) or "—"),
                     ("significance", f"family-wise α = {esc(doc.get('alpha'))}, "
                                      + esc(_null_words(doc))),
                     ("run time", f"{esc(fmt(timings.get('total'), 0))} s on "
                                  f"{esc(machine.get('cpu_count', '?'))} CPU cores")])
            + "</header>")
    parts = [head, "<h2>Summary</h2>", _summary_table(doc),
             "<h2>Every case and method</h2>", _rows_table(doc, out),
             '<p class="small">Hits: grids that show the implanted difference (expected '
             "direction, the opposite one, and the seed-twin control); chance / grid: the "
             "hit rate of a random grid; significant expected: explanations with p_FWER ≤ α "
             "in the expected direction (of which hits); min p: the strongest explanation's "
             "family-wise p. Each row links to the case's comparison reports, where the "
             "grids are.</p>",
             "<h2>Cases</h2>", _cases(doc, out)]
    if out is not None:
        files = [f'<a href="{attr(f)}">{esc(f)}</a> ({esc(what)})' for f, what in TABLES
                 if (out / f).is_file()]
        if files:
            parts.append("<h2>Tables</h2><p>" + " · ".join(files) + "</p>")
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    parts.append(f"<footer>Generated by rdx {esc(__version__)} at {esc(stamp)}.</footer>")
    return page(f"RDX benchmark: {doc.get('suite', '')}", "\n".join(parts))


def write_benchmark_report(out_dir: str | Path, doc: Mapping[str, Any] | None = None, *,
                           comparison_reports: bool = True) -> Path:
    """Write ``<out_dir>/report.html`` for a benchmark (``doc``: its ``benchmark.json``,
    read from ``out_dir`` when not given); returns its path.

    ``comparison_reports``: first write each case comparison's own report (grids, scores),
    linking back here; one that fails is skipped with a warning (its link is then
    missing)."""
    from ..io import read_json

    out = Path(out_dir)
    if doc is None:
        doc = read_json(out / "benchmark.json")
    if comparison_reports:
        from .comparison import write_comparison_report

        for case in (doc.get("cases") or {}):
            for pair, _ in PAIRS:
                folder = out / case / pair
                if not (folder / "run.json").is_file():
                    continue
                try:
                    write_comparison_report(folder, index_link=False,
                                            parent=("../../" + REPORT_NAME, "benchmark"))
                except Exception as exc:  # noqa: BLE001 - the benchmark's page still follows
                    if environment_error(exc):
                        raise   # a full disk, quota, read-only folder: exit 2, never a warning
                    warnings.warn(f"{folder}: its report could not be written ({exc})",
                                  stacklevel=2)
    path = out / REPORT_NAME
    text = render_benchmark_report(doc, out)
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))
    return path


__all__ = ["render_benchmark_report", "write_benchmark_report"]
