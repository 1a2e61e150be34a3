"""The report of one comparison (``<comparison>/report.html``).

It answers, on one self-contained page: which two representations were compared on which
images (the question), how similar they are overall (CKA, linear probes), how well every
method's explanations separate the two (BSR under the three dissimilarities, against the
chance level of random grids), whether a difference that was implanted on purpose was
found, and the explanations themselves (the grid images, the PCA overlays), followed by
everything needed to reproduce it (parameters, seeds, versions).

Scores come from :func:`rdx.evaluation.summary.summarize_comparison`, figures beyond the
saved grids from :mod:`rdx.viz`; the sections are laid out by :mod:`.scores`,
:mod:`.explanations` and :mod:`.wording`. A figure that cannot be made becomes a visible
note instead of failing the whole report.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import __version__
from ..io import atomic_write
from ..paths import without_machine_paths
from ..results.comparison_view import comparison_store
from ..results.store import EXPLORE_HTML, INDEX_HTML, REPORT_HTML, ComparisonRun
from ..results.types import DIRECTIONS
from .explanations import method_section, pca_section
from .html import attr, esc, facts, fmt, note, page, table
from .scores import (DIRECTION_LABEL, explained_methods, glossary_html, known_difference_row,
                     known_difference_text, rows_by_method, scores_table)
from .wording import (describe_images, describe_representation, short_representation,
                      shown_selection, similarity_items, value_html)


def load_comparison(comp: ComparisonRun) -> dict[str, Any]:
    """The report's view of one comparison, from its store (each file is read once; a
    corrupt one becomes a note on the page)."""
    run = comp.run
    results = comp.results()
    # the config's order first (the order the user listed the methods in), then the rest
    order = [m.get("name", m.get("method")) for m in run.get("config", {}).get("methods", [])
             if isinstance(m, dict)]
    order = list(dict.fromkeys(order)) + sorted(set(results) - set(order))
    return {"store": comp, "dir": comp.path, "run": run, "images": comp.images or {},
            "results": results, "order": order, "problems": comp.problems}


def _known_difference_section(data: dict, rows: dict) -> str:
    spec = data["run"].get("config", {}).get("known_difference")
    if not spec:
        return ""
    out = ['<h2 id="known-difference">Known difference</h2>',
           f"<p>Implanted on purpose: {value_html(spec)}</p>"]
    body = []
    for name in explained_methods(data):
        per = {d: known_difference_row(rows.get((name, d), {})) for d in DIRECTIONS}
        if not any(per.values()):
            continue
        expected = [d for d, r in per.items() if r and r.get("known_difference_expected")]
        exp_d = expected[0] if expected else None
        opp_d = next((d for d in DIRECTIONS if d != exp_d), None) if exp_d else None
        body.append([esc(name), esc(DIRECTION_LABEL.get(exp_d, "—")),
                     known_difference_text(per.get(exp_d), badge=False) if exp_d else "—",
                     known_difference_text(per.get(opp_d), badge=False) if opp_d else "—"])
    if body:
        out.append(table(["Method", "Expected direction", "In the expected direction",
                          "In the opposite direction (should stay low)"], body))
        out.append('<p class="small">Merged classes: a grid is a hit when nearly all its images '
                   "come from the merged classes and each of them appears at least twice; "
                   "flips: when it holds an original and a flipped copy of the same class; "
                   "masked concept: how much more the concept varies inside the masked model's "
                   "grids than inside the other direction's.</p>")
    else:
        out.append(note("A known difference is declared, but no method's explanations were "
                        "scored against it."))
    return "".join(out)


def _run_section(data: dict) -> str:
    run = data["run"]
    items = [("experiment", esc(run.get("experiment"))), ("comparison", esc(run.get("comparison"))),
             ("seed", esc(run.get("seed"))),
             ("image selection", value_html(shown_selection(
                 run.get("config", {}).get("image_selection", {}), data["dir"]))),
             ("started", esc(run.get("started", "—"))),
             ("finished", esc(run.get("finished", "—"))),
             ("device", esc(run.get("device", "—"))),
             ("method status", value_html(run.get("methods", {})))]
    versions = run.get("versions") or {}
    timings = run.get("timings_s") or {}
    out = ['<h2 id="run">Run details</h2>', facts(items)]
    if versions:
        out.append("<h3>Versions</h3>" + table(["package", "version"],
                                               [[esc(k), esc(v)] for k, v in versions.items()]))
    if timings:
        out.append("<h3>Timings</h3>" + table(
            ["step", "seconds"], [[esc(k), f'<td class="num">{esc(fmt(v, 2))}</td>']
                                  for k, v in timings.items()]))
    return "".join(out)


def _header(data: dict, index_link: bool, parent: tuple[str, str] | None = None) -> str:
    run, images = data["run"], data["images"]
    cfg = run.get("config", {})
    reps = cfg.get("representations", {})
    crumb = (f'<a href="../{INDEX_HTML}">{esc(run.get("experiment", "experiment"))}</a>'
             if index_link else esc(run.get("experiment", "experiment")))
    if parent is not None:     # a page above this one (a study's report) names the way back
        crumb = f'<a href="{attr(parent[0])}">{esc(parent[1])}</a>'
    question = ("What does model A represent that model B does not — and what does B "
                "represent that A does not?")
    items = [("Model A", esc(describe_representation(reps.get("a"), data["dir"]))),
             ("Model B", esc(describe_representation(reps.get("b"), data["dir"]))),
             ("Images", esc(without_machine_paths(describe_images(run, images),
                                                  data["dir"])))]
    if cfg.get("description"):   # free text, which may name a file of the machine
        items.insert(0, ("Description", esc(without_machine_paths(str(cfg["description"]),
                                                                  data["dir"]))))
    sims = similarity_items(data["results"])
    sim_html = (table(["Similarity score", "value"],
                      [[esc(k), f'<td class="num">{esc(v)}</td>'] for k, v in sims])
                if sims else '<p class="muted">No overall similarity score (cka, '
                             "classification) was run for this comparison.</p>")
    explore = ""
    if data["store"].file(EXPLORE_HTML).is_file():
        explore = (f'<p><a href="{EXPLORE_HTML}">Open the interactive explorer</a> (both '
                   "models' 2-D maps, neighbours of any image, every method's explanations).</p>")
    return (f'<header class="page"><div class="crumb">{crumb} / '
            f'{esc(run.get("comparison", data["dir"].name))}</div>'
            f'<h1>{esc(short_representation(reps.get("a")))} <span class="muted">vs</span> '
            f'{esc(short_representation(reps.get("b")))}</h1>'
            f'<p class="question">{esc(question)}</p>{facts(items)}{explore}</header>'
            f'<h2 id="similarity">Overall similarity</h2>{sim_html}')


def footer() -> str:
    """The page footer: the rdx version and when the page was written."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return f"<footer>Generated by rdx {esc(__version__)} at {esc(now)}.</footer>"


def render_comparison(comp: ComparisonRun | str | Path, summary: dict | None, *,
                      index_link: bool = False, parent: tuple[str, str] | None = None) -> str:
    """The comparison report as an HTML string (see :func:`write_comparison_report`)."""
    data = load_comparison(comparison_store(comp))
    rows = rows_by_method(summary)
    parts = [_header(data, index_link, parent)]
    parts += [note(p) for p in data["problems"]]
    parts.append('<h2 id="scores">Scores</h2>' + scores_table(data, rows) + glossary_html())
    parts.append(_known_difference_section(data, rows))
    methods = explained_methods(data)
    if methods:
        parts.append('<h2 id="explanations">Explanations</h2>'
                     + "".join(method_section(data, n, rows) for n in methods))
    missing = [n for n in data["order"] if n not in data["results"]]
    if missing:
        parts.append(note("Configured but without results (not run yet or failed): "
                          + ", ".join(missing) + "."))
    parts.append(pca_section(data))
    parts.append(_run_section(data))
    parts.append(footer())
    title = f"RDX report: {data['run'].get('experiment', '')} / " \
            f"{data['run'].get('comparison', data['dir'].name)}"
    return page(title, "\n".join(p for p in parts if p))


def write_text(path: Path, text: str) -> Path:
    """Write a page atomically (UTF-8)."""
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))
    return path


def write_comparison_report(comp_dir: ComparisonRun | str | Path, *,
                            summary: dict | None = None,
                            index_link: bool | None = None,
                            parent: tuple[str, str] | None = None) -> Path:
    """Write ``comp_dir/report.html``, a self-contained report of one comparison.

    Parameters
    ----------
    comp_dir : path
        ``outputs/<experiment>/<comparison>``, as written by ``rdx run``.
    summary : dict, optional
        The result of :func:`rdx.evaluation.summary.summarize_comparison` for ``comp_dir``;
        computed here when not given (pass it when you already have it: the chance levels
        take a moment).
    index_link : bool, optional
        Link back to the experiment's ``index.html``; by default only when it exists.
    parent : (href, text), optional
        Link back to another page instead (e.g. a layer-wise study's or the benchmark's
        report, for the comparisons they hold).

    Returns
    -------
    Path of the written report. Images are embedded (``data:`` URIs) and the CSS is inline,
    so the file can be moved, mailed or opened from a ``file://`` URL on its own.

    Raises
    ------
    RDXInputError
        When ``comp_dir`` holds no run (no ``run.json``).
    """
    from ..evaluation.summary import summarize_comparison

    comp = comparison_store(comp_dir)
    comp.run   # an error saying what to do when this is not a comparison folder
    if summary is None:
        summary = summarize_comparison(comp)
    if index_link is None:
        index_link = (comp.path.parent / INDEX_HTML).is_file()
    return write_text(comp.file(REPORT_HTML),
                      render_comparison(comp, summary, index_link=index_link, parent=parent))


__all__ = ["footer", "load_comparison", "render_comparison", "write_comparison_report",
           "write_text"]
