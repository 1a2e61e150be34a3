"""The report of an experiment (``<experiment>/index.html``): one row per comparison with
links to its report and explorer and headline numbers, every method's strongest
explanation per direction as a thumbnail, BSR by method and known-difference recovery;
:func:`write_experiment_report` writes it and every comparison's report."""
from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

from PIL import Image

from ..errors import RDXInputError
from ..results.store import (EXPLORE_HTML, REPORT_HTML, ComparisonRun, ExperimentRun,
                             grid_directions)
from ..results.types import DIRECTIONS, SCORE_LABELS, MethodResult
from .comparison import footer, load_comparison, write_comparison_report, write_text
from .html import attr, esc, fmt, page, significance_badge, table
from .scores import (DIRECTION_LABEL, chance_side, explained_methods, known_difference_row,
                     known_difference_text, method_anchor, rows_by_method)
from .wording import composition, short_representation


def _experiment(exp_dir: ExperimentRun | str | Path) -> tuple[ExperimentRun,
                                                               list[ComparisonRun]]:
    exp = exp_dir if isinstance(exp_dir, ExperimentRun) else ExperimentRun(exp_dir)
    if not exp.path.is_dir():
        raise RDXInputError(f"{exp.path} is not a folder: pass outputs/<experiment> (the folder "
                            "`rdx run` writes), e.g. `rdx report outputs/mnist_835`.")
    return exp, exp.require_comparisons()


def _headline_similarity(results: dict[str, MethodResult]) -> tuple[Any, Any, Any]:
    """Debiased CKA and the two probe accuracies (first of each kind), for the index."""
    cka = next((r.info["similarity"].get("cka_debiased") for r in results.values()
                if isinstance(r.info.get("similarity"), dict)), None)
    probe = next((r.info["probe"] for r in results.values()
                  if isinstance(r.info.get("probe"), dict)), {})
    return (cka, (probe.get("a") or {}).get("accuracy"), (probe.get("b") or {}).get("accuracy"))


def _report_link(data: dict) -> str:
    """Link from the index to a comparison's report (folder names may need %-quoting)."""
    name = data["dir"].name
    href = urllib.parse.quote(name) + "/" + REPORT_HTML
    return f'<a href="{attr(href)}">{esc(data["run"].get("comparison", name))}</a>'


def _pages(data: dict) -> str:
    """Links from the index to a comparison's report and, when written, its explorer."""
    base = urllib.parse.quote(data["dir"].name) + "/"
    links = [f'<a href="{attr(base + REPORT_HTML)}">report</a>']
    if data["store"].file(EXPLORE_HTML).is_file():
        links.append(f'<a href="{attr(base + EXPLORE_HTML)}">explorer</a>')
    return " · ".join(links)


#: Width in pixels of a grid thumbnail on the index.
THUMB_WIDTH = 150


def strongest_explanation(result: MethodResult, direction: str) -> int | None:
    """The 1-based index of a direction's strongest explanation: the smallest family-wise
    p where the run assessed significance, else the largest mean affinity (RDX), else the
    method's own first; None without explanations."""
    exps = result.directions[direction].explanations if direction in result.directions else []
    if not exps:
        return None

    def key(k: int) -> tuple:
        e = exps[k].to_json()
        p = (e.get("significance") or {}).get("p_value_fwer")
        aff = e.get("mean_affinity")
        return (p if isinstance(p, (int, float)) else 2.0,
                -aff if isinstance(aff, (int, float)) else 0.0, k)
    return min(range(len(exps)), key=key) + 1


def thumbnail_uri(path: Path, width: int = THUMB_WIDTH) -> str | None:
    """A small PNG ``data:`` URI of an image file (None when it cannot be read)."""
    import base64
    import io

    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            if im.width > width:
                im = im.resize((width, max(1, round(im.height * width / im.width))),
                               Image.LANCZOS)
            buf = io.BytesIO()
            im.save(buf, format="PNG", optimize=True)
    except (OSError, ValueError):
        return None
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _strongest_cell(data: dict, name: str) -> str:
    """A method's strongest explanation per direction on the index: its grid as a thumbnail
    linking to the method in the report, with its number, strength and classes."""
    res, store = data["results"][name], data["store"]
    href = urllib.parse.quote(data["dir"].name) + "/" + REPORT_HTML + "#" + method_anchor(name)
    figs = []
    for d in DIRECTIONS:
        k = strongest_explanation(res, d)
        if k is None:
            continue
        exp = res.directions[d].explanations[k - 1].to_json()
        uri = thumbnail_uri(store.grid_path(name, d, k))
        bits = [f"{DIRECTION_LABEL[d]} #{k}"]
        sig = significance_badge(exp.get("significance"), res.info.get("significance"))
        if sig is not None:
            bits.append(f"{sig['text']}, p_FWER {sig['p']}")
        elif exp.get("mean_affinity") is not None:
            bits.append(f"{SCORE_LABELS['mean_affinity'].short} {fmt(exp['mean_affinity'], 2)}")
        comp = composition(exp.get("images") or [], data["images"])
        img = (f'<img src="{attr(uri)}" alt="{attr(name + ", " + bits[0])}">' if uri
               else '<span class="small">no grid picture</span>')
        figs.append(f'<figure class="thumb"><a href="{attr(href)}" title="open {attr(name)} '
                    f'in the report">{img}</a><figcaption>{esc(" · ".join(bits))}'
                    + (f"<br>{esc(comp)}" if comp else "")
                    + (f'<br><span class="description">{esc(exp["description"])}</span>'
                       if exp.get("description") else "") + "</figcaption></figure>")
    if not figs:
        return '<td class="small">—</td>'
    return "<td>" + "".join(figs) + "</td>"


def _strongest_section(comps: list[dict], methods: list[str]) -> str:
    if not methods:
        return ""
    body = []
    for data in comps:
        cells = [f'{_report_link(data)}<br><span class="small">{_pages(data)}</span>']
        for m in methods:
            cells.append(_strongest_cell(data, m) if m in data["results"]
                         and grid_directions(data["results"][m]) else '<td class="small">—</td>')
        body.append(cells)
    return ('<h2 id="strongest">Strongest explanations</h2>'
            '<p class="small">Per comparison and method, the strongest explanation of each '
            "direction (smallest family-wise p where significance was assessed, else the "
            "largest mean affinity, else the method's first); a click opens the method in "
            "the comparison's report.</p>"
            + table(["Comparison"] + methods, body, cls="strongest"))


def _headline_bsr(rows: dict, name: str, direction: str) -> str:
    row = rows.get((name, direction), {}).get("rank")
    if not row or row.get("bsr") is None:
        return "—"
    cls = chance_side(row)
    return f'<span class="{cls}">{esc(fmt(row["bsr"], 2))}</span>' if cls \
        else esc(fmt(row["bsr"], 2))


def render_experiment(exp_dir: ExperimentRun | str | Path, summaries: dict[str, dict], *,
                      comparisons: list[ComparisonRun] | None = None) -> str:
    """The experiment index as an HTML string (see :func:`write_experiment_report`)."""
    exp, stores = _experiment(exp_dir)
    exp_dir = exp.path
    comps = [load_comparison(c) for c in (comparisons if comparisons is not None else stores)]
    experiment = comps[0]["run"].get("experiment", exp_dir.name)
    main_rows, methods = [], []
    for data in comps:
        reps = data["run"].get("config", {}).get("representations", {})
        cka, probe_a, probe_b = _headline_similarity(data["results"])
        main_rows.append([
            _report_link(data), _pages(data),
            esc(short_representation(reps.get("a"))), esc(short_representation(reps.get("b"))),
            esc(data["images"].get("dataset", "?")),
            f'<td class="num">{esc(data["images"].get("n_images", "?"))}</td>',
            f'<td class="num">{esc(fmt(cka))}</td>',
            f'<td class="num">{esc(fmt(probe_a))} / {esc(fmt(probe_b))}</td>',
            f'<td class="num">{len(explained_methods(data))}</td>'])
        methods += [m for m in explained_methods(data) if m not in methods]
    out = [(f'<header class="page"><div class="crumb">experiment</div><h1>{esc(experiment)}</h1>'
            f'<p class="question">{len(comps)} comparison(s); each row links to its report '
            "and its interactive explorer.</p></header>"),
           "<h2>Comparisons</h2>",
           table(["Comparison", "Pages", "Model A", "Model B", "Dataset", "n",
                  "CKA (debiased)", "Probe accuracy A / B", "Methods with explanations"],
                 main_rows)]
    if methods:
        body = []
        for data in comps:
            rows = rows_by_method(summaries.get(data["dir"].name))
            cells = [_report_link(data)]
            for m in methods:
                if m in data["results"] and grid_directions(data["results"][m]):
                    cells.append(f'<td class="num">{_headline_bsr(rows, m, "a_over_b")} / '
                                 f'{_headline_bsr(rows, m, "b_over_a")}</td>')
                else:
                    cells.append('<td class="num">—</td>')
            body.append(cells)
        out.append(_strongest_section(comps, methods))
        out += ["<h2>BSR (rank) by method</h2>",
                ('<p class="small">A over B / B over A; <span class="above">green</span>: above '
                 'the chance interval, <span class="below">red</span>: below it.</p>'),
                table(["Comparison"] + methods, body)]
        kd_body = []
        for data in comps:
            rows = rows_by_method(summaries.get(data["dir"].name))
            cells, any_kd = [_report_link(data)], False
            for m in methods:
                per = {d: known_difference_row(rows.get((m, d), {})) for d in DIRECTIONS}
                exp_d = next((d for d, r in per.items() if r and
                              r.get("known_difference_expected")), None)
                if exp_d is None:
                    cells.append("—")
                    continue
                any_kd = True
                opp = per.get("b_over_a" if exp_d == "a_over_b" else "a_over_b")
                cells.append(f"expected: {known_difference_text(per[exp_d], badge=False)}<br>"
                             '<span class="small">opposite: '
                             f'{known_difference_text(opp, badge=False)}</span>')
            if any_kd:
                kd_body.append(cells)
        if kd_body:
            out += ["<h2>Known-difference recovery</h2>", table(["Comparison"] + methods,
                                                                 kd_body)]
    links = [f'<a href="{attr("analysis/" + f)}">analysis/{esc(f)}</a>'
             for f in ("summary.csv", "summary.json") if (exp.analysis_dir / f).is_file()]
    if links:
        out.append("<h2>Tables</h2><p>Every score as a table: " + " · ".join(links) + "</p>")
    out.append(footer())
    return page(f"RDX experiment {experiment}", "\n".join(out))


def write_experiment_report(exp_dir: str | Path) -> Path:
    """Write a report for every comparison of an experiment and ``exp_dir/index.html``.

    Scores are computed once with :func:`rdx.evaluation.summary.summarize_experiment`
    (which also writes ``exp_dir/analysis/summary.csv`` and ``.json``); every
    ``<comparison>/report.html`` is (re)written, then the index, one row per comparison
    with links and headline numbers.

    Parameters
    ----------
    exp_dir : path
        ``outputs/<experiment>``.

    Returns
    -------
    Path of ``index.html``.

    Raises
    ------
    RDXInputError
        When ``exp_dir`` is not a folder or holds no comparison with a ``run.json``.
    """
    from ..evaluation.summary import summarize_experiment

    exp, comps = _experiment(exp_dir)
    # one store per comparison, shared by the summary and the reports: each file read once
    summaries = summarize_experiment(exp, comparisons=comps)
    by_name = {c.name: s for c, s in zip(comps, summaries)}
    for comp in comps:
        write_comparison_report(comp, summary=by_name[comp.name], index_link=True)
    return write_text(exp.index_html, render_experiment(exp, by_name, comparisons=comps))


__all__ = ["THUMB_WIDTH", "render_experiment", "strongest_explanation", "thumbnail_uri",
           "write_experiment_report"]
