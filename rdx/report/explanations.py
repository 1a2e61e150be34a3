"""The explanations of a comparison's report: one section per method (parameters, seed,
and per direction its scores, its summary strip and every grid with its classes and
badges) and the PCA overlays of every method's grid images."""
from __future__ import annotations

import tempfile
from pathlib import Path

from PIL import Image

from ..results.store import ComparisonRun, grid_directions
from ..results.types import DIRECTIONS, SCORE_LABELS, direction_meaning
from ..viz.grids import explanation_title
from .html import attr, data_uri, esc, facts, fmt, note, significance_badge, table, zoomable
from .scores import (BSR, DIRECTION_LABEL, DISSIMILARITIES, chance_side, explained_methods,
                     known_difference_row, known_difference_text, method_anchor)
from .wording import grid_caption_lines, grid_represents_cluster, value_html


def _img(path: Path, alt: str, *, cls: str = "") -> str:
    """An embedded image, or a note saying why it is not there."""
    if not path.is_file():
        return note(f"Figure missing: {path.name} was not found in {path.parent}.")
    try:
        uri = data_uri(path)
        if not uri.startswith("data:image/svg"):
            # a truncated or corrupt file would show as a broken image: check it decodes
            with Image.open(path) as im:
                im.verify()
    except (OSError, ValueError, SyntaxError) as exc:
        return note(f"Figure {path.name} could not be embedded: {exc}.")
    cls_attr = f' class="{attr(cls)}"' if cls else ""
    return f'<img{cls_attr} src="{attr(uri)}" alt="{attr(alt)}">'


def explanation_badges(exp: dict, summary: dict | None = None) -> str:
    """The badges of one explanation: weak (low affinity), significance (with the method's
    ``info["significance"]`` as ``summary``), passed the filter."""
    out = ""
    if exp.get("low_affinity"):
        weak = SCORE_LABELS["low_affinity"]
        out += (f'<span class="badge weak" title="{attr(weak.meaning)}">'
                f"{esc(weak.short)}</span>")
    sig = significance_badge(exp.get("significance"), summary)
    if sig is not None:
        cls = {"sig": "above", "nonsig": "weak"}.get(sig["cls"], sig["cls"])
        out += (f'<span class="badge {cls}" '
                f'title="{attr(sig["title"])}">'
                f'{esc(sig["text"])}, p<sub>FWER</sub> {esc(sig["p"])}</span>')
    if exp.get("passed_filter"):
        out += '<span class="badge">passed the filter</span>'
    return out


def _direction_block(data: dict, name: str, direction: str, rows: dict) -> str:
    store: ComparisonRun = data["store"]
    result = data["results"][name]
    res = result.directions[direction]
    exps = [e.to_json() for e in res.explanations]
    by_dis = rows.get((name, direction), {})
    meaning = direction_meaning(result.method, direction)
    out = [(f'<div class="direction"><h4>{esc(DIRECTION_LABEL[direction])} '
            f'<span class="small">— {esc(meaning)}</span></h4>')]
    scores = []
    for key, label in DISSIMILARITIES:
        row = by_dis.get(key)
        if row and row.get("bsr") is not None:
            cls = chance_side(row)
            val = f'<span class="{cls}">{esc(fmt(row["bsr"]))}</span>' if cls else \
                esc(fmt(row["bsr"]))
            ch = ""
            if row.get("chance_bsr_mean") is not None:
                ch = (f" ({esc(SCORE_LABELS['chance'].short)} "
                      f"{esc(fmt(row['chance_bsr_mean'], 2))} "
                      f"[{esc(fmt(row.get('chance_bsr_lo'), 2))}, "
                      f"{esc(fmt(row.get('chance_bsr_hi'), 2))}])")
            scores.append(f"{esc(BSR)} {esc(label)} {val}{ch}")
    if scores:
        out.append(f'<p>{" · ".join(scores)}</p>')
    kd = known_difference_row(by_dis)
    if kd is not None:
        out.append(f"<p>Known difference: {known_difference_text(kd)}</p>")
    null = res.null_members
    if null is not None:
        out.append(f'<p class="small">{len(null)} images fell into the no-change group '
                   f"(not shown; excluded from {esc(BSR)}).</p>")
    filt = res.extra.get("filter") or {}
    if filt.get("n_filtered"):
        dropped = ", ".join(f"mean affinity {fmt(f.get('mean_affinity'), 2)} "
                            f"({f.get('size', '?')} images)" for f in filt.get("filtered", []))
        out.append(f'<p class="small">{filt["n_filtered"]} of {filt.get("n_candidates", "?")} '
                   f"clusters did not pass the filter (mean affinity below "
                   f"{esc(fmt(filt.get('threshold'), 2))}) and joined the no-change group: "
                   f"{esc(dropped)}.</p>")
    if not exps:
        out.append(note("This direction has no explanations."))
        return "".join(out) + "</div>"
    n_weak = sum(bool(e.get("low_affinity")) for e in exps)
    if n_weak:
        out.append(f'<p class="small"><span class="badge weak">'
                   f'{esc(SCORE_LABELS["low_affinity"].short)}</span> {n_weak} of {len(exps)} '
                   "explanations are weak (mean affinity below null_threshold): barely "
                   "tighter in one model than in the other; marked in orange on the strip.</p>")
    # `rdx explain` without --images draws no grids (run.json says so): captions only
    pictures = not data["run"].get("no_images") or bool(store.grid_paths(name, direction))
    if pictures:
        out.append(_img(store.summary_grid_path(name, direction),
                        f"{name}, {DIRECTION_LABEL[direction]}: all explanations", cls="strip"))
    figs = []
    for i, exp in enumerate(exps, start=1):
        caption = esc(explanation_title(i, exp)) + explanation_badges(
            exp, result.info.get("significance"))
        if grid_represents_cluster(exp, data["images"]) is False:
            caption += ('<span class="badge unlike" title="the cluster\'s leading class is '
                        "rare in its grid: the grid's images do not stand for the cluster; "
                        'read the whole cluster\'s make-up">grid unlike its cluster</span>')
        lines = "".join(f"<br>{esc(line)}" for line in grid_caption_lines(exp, data["images"]))
        if exp.get("description"):
            # the enrichment's one line, made only of what was tested (rdx.evaluation)
            lines += f'<br><span class="description">{esc(exp["description"])}</span>'
        grid = (_img(store.grid_path(name, direction, i),
                     f"{name}, {DIRECTION_LABEL[direction]}, explanation {i}")
                if pictures else "")
        weak_cls = ' class="weak"' if exp.get("low_affinity") else ""
        figs.append(f"<figure{weak_cls}>{grid}<figcaption>{caption}{lines}"
                    f"{_item_lines(store, name, direction, i, exp)}</figcaption></figure>")
    if not pictures:
        out.append(note("No images were given (rdx explain --images), so there are no grid "
                        "pictures" + (": the captions list each explanation's classes."
                                      if data["images"].get("labels") else ".")))
    # open, not collapsed: each grid's significance and make-up (beside its whole
    # cluster's) must be seen without a click, a grid unlike its cluster most of all
    out.append(f'<div class="grids">{"".join(figs)}</div>')
    return "".join(out) + "</div>"


def _item_lines(store: ComparisonRun, name: str, direction: str, i: int, exp: dict) -> str:
    """Under a grid of items that are not images (rdx explain --texts/--audio): the text
    snippets it shows, or a link to its page of audio players (:mod:`rdx.viz.items`)."""
    if exp.get("grid_texts"):
        items = "".join(f"<li>{esc(t)}</li>" for t in exp["grid_texts"])
        return f'<ol class="small snippets">{items}</ol>'
    page = store.grid_path(name, direction, i).with_suffix(".html")
    if exp.get("grid_audio") and page.is_file():
        href = page.relative_to(store.path).as_posix()
        return (f'<br><a href="{attr(href)}">listen: {len(exp["grid_audio"])} clips '
                "with players</a>")
    return ""


def method_section(data: dict, name: str, rows: dict) -> str:
    """A method's section: parameters and seed, then each direction's scores and grids."""
    res = data["results"][name]
    status = data["run"].get("methods", {}).get(name)
    head = (f'<section class="method" id="{attr(method_anchor(name))}"><h3>{esc(name)}'
            f'<span class="badge">{esc(res.method)}</span>'
            + (f'<span class="badge">{esc(status)}</span>' if status else "") + "</h3>")
    params = res.params
    run = res.run or {}
    ptable = table(["parameter", "value"], [[esc(k), value_html(v)] for k, v in params.items()])
    meta = facts([("seed", esc(run.get("seed", data["run"].get("seed")))),
                  ("fingerprint",
                   f'<span class="mono">{esc(run.get("fingerprint", "—"))}</span>'),
                  ("time", esc(fmt(res.timings.get("total")
                                   or data["run"].get("timings_s", {}).get(name), 1)) + " s")])
    body = "".join(_direction_block(data, name, d, rows) for d in DIRECTIONS
                   if d in res.directions)
    guided = ""
    if (params or {}).get("guidance"):
        # how to read BSR under guidance; the words of the console (rdx explain)
        from ..results.console import guided_bsr_reading

        below = any(chance_side((rows.get((name, d)) or {}).get("rank") or {}) == "below"
                    for d in DIRECTIONS)
        guided = (f'<p class="note guided" id="{attr("guided-" + method_anchor(name))}">'
                  f"{esc(guided_bsr_reading(params['guidance'], below))}</p>")
    return (head + f"<details><summary>parameters and seed</summary>{meta}{ptable}</details>"
            + guided + _significance_note(res.info.get("significance"))
            + _named_groups(res.info.get("group_tests")) + body + "</section>")


def _significance_note(summary: dict | None) -> str:
    """Which null the badges are against, what it is calibrated on, and what to do where
    it is not — in the console's words, visible (nothing when the method was not
    assessed)."""
    from ..results.nulls import standing_text

    if not isinstance(summary, dict):
        return ""
    cls = "note significance" + ("" if (summary.get("standing") or {}).get(
        "calibrated", True) else " uncalibrated")
    return (f'<p class="{cls}">Significance ({esc(summary.get("n_null"))} null draws): '
            f'{esc(standing_text(summary.get("null"), summary.get("noise"), summary.get("standing")))}</p>')


def _named_groups(tests: dict | None) -> str:
    """The tests of the groups named with ``--test-classes`` (nothing when there are none)."""
    if not isinstance(tests, dict) or not tests.get("groups"):
        return ""
    from ..results.nulls import null_name

    null = null_name(tests["null"], tests.get("noise"))
    stand = tests.get("standing") or {}

    def verdict(g: dict) -> str:
        if g.get("significant") is None:
            return ('<span class="badge uncal" title="'
                    f'{attr(str(stand.get("basis", "")) + "; " + str(stand.get("advice", "")))}">'
                    "no verdict (not calibrated)</span>")
        return ('<span class="badge above">significant</span>' if g["significant"]
                else '<span class="badge weak">not significant</span>')

    rows = [[esc(g["name"]), esc(direction_meaning("rdx", g["direction"], short=True)),
             esc(g["size"]), esc(fmt(g["statistic"], 1)), esc(fmt(g["p_value"], 4)),
             esc(fmt(g["p_value_holm"], 4)), verdict(g)] for g in tests["groups"]]
    return ('<div class="named-groups"><h4>Named groups</h4><p class="small">Groups named '
            "before looking (<code>--test-classes</code>, <code>--test-group</code>), each "
            "against the same group in "
            f"{esc(tests['n_draws'])} null pairs (null: {esc(null)}); Holm's correction over "
            f"the {esc(tests['n_tests'])} tests at α = {esc(fmt(tests['alpha'], 2))}.</p>"
            + table(["group", "direction", "images", "statistic", "p", "p (Holm)", ""], rows)
            + "</div>")


def pca_section(data: dict) -> str:
    """The PCA overlays of every direction with grids (a note where one cannot be made)."""
    directions = [d for d in DIRECTIONS if any(
        d in grid_directions(data["results"][n]) for n in explained_methods(data))]
    if not directions:
        return ""
    out = [('<h2 id="pca">PCA overlays</h2><p class="small">2-D PCA of each model (fit '
            "separately), every image coloured by class; the images shown in each method's "
            "grids are overlaid as black markers (one shape per explanation), each method's "
            "panels framed in its colour.</p>")]
    with tempfile.TemporaryDirectory(prefix="rdx-report-") as tmp:
        for d in directions:
            out.append(f"<h3>{esc(DIRECTION_LABEL[d])}</h3>")
            try:
                from ..results.comparison_view import read_comparison_view
                from ..viz.pca_overlay import pca_overlay

                # the store caches what it read: one view per direction costs no reading
                path = Path(pca_overlay(read_comparison_view(data["store"]), d,
                                        Path(tmp) / "analysis" / f"pca_{d}.png"))
            except Exception as exc:  # noqa: BLE001  (a missing figure must not cost the report)
                from ..io import environment_error

                if environment_error(exc):
                    raise   # a full disk, quota, read-only folder: exit 2, never a warning
                out.append(note(f"The PCA overlay ({DIRECTION_LABEL[d]}) could not be made: "
                                f"{type(exc).__name__}: {exc}"))
                continue
            a = "A" if d == "a_over_b" else "B"
            out.append(zoomable(_img(path, f"PCA overlay, {DIRECTION_LABEL[d]}"), f"pca-{d}",
                                f"The grid images every method shows for model {a} (for RDX: "
                                f"{direction_meaning('rdx', d)})."))
    return "".join(out)


__all__ = ["explanation_badges", "method_section", "pca_section"]
