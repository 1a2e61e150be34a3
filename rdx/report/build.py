"""The static HTML report of a run: one ``report.html`` per comparison, one ``index.html``
per experiment.

A comparison report answers, on one self-contained page: which two representations were
compared on which images (the question), how similar they are overall (CKA, linear probes),
how well every method's explanations separate the two (BSR under the three
dissimilarities, against the chance level of random grids), whether a difference that was
implanted on purpose was found, and the explanations themselves (the grid images, the PCA
overlays), followed by everything needed to reproduce it (parameters, seeds, versions).

Scores come from :func:`rdx.evaluation.summary.summarize_comparison`, figures beyond the
saved grids from :mod:`rdx.viz.analysis`; this module only lays them out. A figure that
cannot be made becomes a visible note instead of failing the whole report.
"""
from __future__ import annotations

import json
import tempfile
import urllib.parse
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from PIL import Image

from .. import __version__
from ..errors import RDXInputError
from ..io import atomic_write
from ..results.store import (EXPLORE_HTML, INDEX_HTML, REPORT_HTML, ComparisonRun, ExperimentRun,
                             grid_directions)
from ..results.types import (DIRECTIONS, DISSIMILARITY_LABELS, SCORE_LABELS, MethodResult,
                             direction_meaning)
from ..viz.grids import explanation_title
from .html import (attr, data_uri, esc, facts, fmt, note, page, significance_badge, table,
                   zoomable)

#: (key in the scores, label in the tables): one name per thing, from the results' table
DISSIMILARITIES = tuple((key, lab.short) for key, lab in DISSIMILARITY_LABELS.items())
DIRECTION_LABEL = {"a_over_b": "A over B", "b_over_a": "B over A"}
#: RDX's directions (other methods: :func:`rdx.results.types.direction_meaning`).
DIRECTION_MEANING = {d: direction_meaning("rdx", d) for d in DIRECTIONS}
BSR = SCORE_LABELS["bsr"].short
SIMILARITY_LABEL = {"cka_debiased": "CKA (linear, debiased)", "cka_biased": "CKA (linear, biased)"}
REPORT_NAME = REPORT_HTML
INDEX_NAME = INDEX_HTML


# ----------------------------------------------------------------------------- loading

def _store(comp: ComparisonRun | str | Path) -> ComparisonRun:
    return comp if isinstance(comp, ComparisonRun) else ComparisonRun(comp)


def _load(comp: ComparisonRun) -> dict[str, Any]:
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


# ----------------------------------------------------------------------------- wording

def describe_representation(spec: dict | None) -> str:
    """One line saying what a representation is (model, checkpoint, layer, or features file)."""
    if not spec:
        return "unknown representation"
    if "features" in spec:
        text = f"precomputed features {spec['features']}"
        if spec.get("exclude_dims"):
            text += f" without dimensions {list(spec['exclude_dims'])}"
        return text
    parts = [str(spec.get("model", "model"))]
    if spec.get("checkpoint"):
        parts.append(f"checkpoint {spec['checkpoint']}")
    elif spec.get("pretrained") not in (None, False):
        parts.append(f"pretrained {spec['pretrained']}")
    if spec.get("layer"):
        parts.append(f"layer {spec['layer']}")
    return ", ".join(parts)


def short_representation(spec: dict | None) -> str:
    """A few words for the index table (model name + checkpoint file, or features file)."""
    if not spec:
        return "?"
    if "features" in spec:
        return Path(str(spec["features"])).name
    bits = [str(spec.get("model", "model"))]
    if spec.get("checkpoint"):
        bits.append(Path(str(spec["checkpoint"])).name)
    if spec.get("layer"):
        bits.append(str(spec["layer"]))
    return " · ".join(bits)


def _class_name(label: int, names: list) -> str:
    # flip-pair experiments label flipped copies c + n_classes, beyond the dataset's names
    return str(names[label]) if 0 <= label < len(names) else str(label)


def describe_images(run: dict, images: dict) -> str:
    sel = run.get("config", {}).get("image_selection", {})
    dataset = images.get("dataset", sel.get("dataset", "?"))
    n = images.get("n_images", "?")
    split = images.get("split", sel.get("split", "train"))
    bits = [f"{split} split"] if split else []
    classes = sel.get("target_classes")
    if classes:
        names = images.get("class_names") or []
        shown = [_class_name(int(c), names) if isinstance(c, int) else str(c) for c in classes]
        bits.append("classes " + ", ".join(shown))
    return f"{n} images of {dataset}" + (f" ({', '.join(bits)})" if bits else "")


def _value(v: Any) -> str:
    """A config/parameter value as HTML (structures as compact JSON)."""
    if isinstance(v, (dict, list, tuple)):
        return f"<code>{esc(json.dumps(v, sort_keys=True, default=str))}</code>"
    if isinstance(v, float):
        return esc(fmt(v, 4))
    return esc(v)


def similarity_items(results: dict[str, MethodResult]) -> list[tuple[str, str]]:
    """(label, value) for every overall similarity score present (CKA, linear probes)."""
    items: list[tuple[str, str]] = []
    counts: dict[str, int] = {}
    for res in results.values():
        counts[res.method] = counts.get(res.method, 0) + 1
    for name, res in results.items():
        info = res.info
        # several runs of the same kind (e.g. two CKA settings) are told apart by name
        suffix = f" [{name}]" if counts.get(res.method, 0) > 1 else ""
        cal = info.get("calibration") or {}
        for key, val in (info.get("similarity") or {}).items():
            text = fmt(val)
            c = cal.get(key) or {}
            if c.get("ci95"):
                text += f" [{fmt(c['ci95'][0])}, {fmt(c['ci95'][1])}]"
            if c.get("p_value") is not None:
                text += f", p = {fmt(c['p_value'])}"
            items.append((SIMILARITY_LABEL.get(key, key) + suffix, text))
        probe = info.get("probe") or {}
        for side in ("a", "b"):
            if isinstance(probe.get(side), dict):
                folds = probe[side].get("fold_accuracies") or []
                extra = f" ({len(folds)}-fold CV)" if folds else ""
                items.append((f"Linear probe accuracy, model {side.upper()}{extra}{suffix}",
                              fmt(probe[side].get("accuracy"))))
        for key, val in (info.get("agreement") or {}).items():
            label = ("Probe prediction agreement A–B" if key == "a_b"
                     else f"Probe prediction agreement {key}")
            items.append((label + suffix, fmt(val)))
    return items


# ----------------------------------------------------------------------------- scores

def _index_rows(summary: dict | None) -> dict[tuple[str, str], dict[str, dict]]:
    """summary rows as {(method, direction): {dissimilarity: row}}."""
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for row in (summary or {}).get("rows", []):
        out.setdefault((row.get("method"), row.get("direction")), {})[
            row.get("dissimilarity")] = row
    return out


def _above(row: dict) -> str:
    bsr, lo, hi = row.get("bsr"), row.get("chance_bsr_lo"), row.get("chance_bsr_hi")
    if bsr is None or lo is None or hi is None:
        return ""
    return "above" if bsr > hi else "below" if bsr < lo else ""


def _bsr_cell(row: dict | None) -> str:
    if not row or row.get("bsr") is None:
        return '<td class="num">—</td>'
    cls = _above(row)
    tip = (f"{SCORE_LABELS['tsd'].short} {fmt(row.get('tsd'))}, "
           f"{SCORE_LABELS['eq'].short} {fmt(row.get('eq'))}, "
           f"{row.get('n_pairs', '?')} image pairs")
    chance = ""
    if row.get("chance_bsr_mean") is not None:
        chance = (f'<span class="chance">{SCORE_LABELS["chance"].short} '
                  f'{fmt(row.get("chance_bsr_mean"), 2)} '
                  f'[{fmt(row.get("chance_bsr_lo"), 2)}, {fmt(row.get("chance_bsr_hi"), 2)}]'
                  "</span>")
    span = f'<span class="{cls}">' if cls else "<span>"
    return f'<td class="num" title="{attr(tip)}">{span}{esc(fmt(row["bsr"]))}</span>{chance}</td>'


def _kd_row(rows: dict[str, dict]) -> dict | None:
    for row in rows.values():
        if row.get("known_difference_total") is not None or \
                row.get("known_difference_score") is not None:
            return row
    return None


def _kd_text(row: dict | None, *, badge: bool = True) -> str:
    if row is None:
        return "—"
    parts = []
    if row.get("known_difference_total") is not None:
        parts.append(f"{row.get('known_difference_hits')}/{row['known_difference_total']} hits"
                     f" ({fmt(row.get('known_difference_rate'), 2)})")
    if row.get("known_difference_score") is not None:
        parts.append(f"score {fmt(row['known_difference_score'], 2)}")
    text = esc("; ".join(parts))
    if badge and row.get("known_difference_expected"):
        text += '<span class="badge expected">expected direction</span>'
    return text


def _explained_methods(data: dict) -> list[str]:
    """Methods that produced explanations (cka/classification have no directions)."""
    return [n for n in data["order"] if n in data["results"]
            and grid_directions(data["results"][n])]


def _scores_table(data: dict, rows: dict) -> str:
    methods = _explained_methods(data)
    if not methods:
        return note("No method with explanations has finished in this comparison yet.")
    kd = any(_kd_row(r) for r in rows.values())
    header = ["Method", "Direction", "Explanations"] + \
        [f"{BSR} ({label})" for _, label in DISSIMILARITIES] + (["Known difference"] if kd else [])
    body = []
    for name in methods:
        res = data["results"][name]
        for d in DIRECTIONS:
            if d not in res.directions:
                continue
            by_dis = rows.get((name, d), {})
            n_exp = len(res.directions[d].explanations)
            guided = (res.params or {}).get("guidance")
            cells = [f'<a href="#{attr(_anchor(name))}">{esc(name)}</a>'
                     + (f'<a class="badge" href="#{attr("guided-" + _anchor(name))}" '
                        f'title="how to read BSR under guidance">guided: {esc(guided)}</a>'
                        if guided else ""),
                     esc(DIRECTION_LABEL[d]), f'<td class="num">{n_exp}</td>']
            cells += [_bsr_cell(by_dis.get(key)) for key, _ in DISSIMILARITIES]
            if kd:
                cells.append(_kd_text(_kd_row(by_dis)))
            body.append(cells)
    n_draws = next((r.get("chance_n_draws") for rr in rows.values() for r in rr.values()
                    if r.get("chance_n_draws")), None)
    draws = f" over {n_draws} draws" if n_draws else ""
    legend = (f'<p class="small">Below each value: the {esc(SCORE_LABELS["chance"].name)}'
              f"{esc(draws)}. "
              '<span class="above">Green</span>: above that interval; '
              '<span class="below">red</span>: below it. Hover a value for '
              f'{esc(SCORE_LABELS["tsd"].short)}/{esc(SCORE_LABELS["eq"].short)}; '
              'every abbreviation is spelled out in the <a href="#glossary">glossary</a>.</p>')
    if not rows:
        legend += note("Scores could not be computed for this comparison (no summary rows).")
    return table(header, body, cls="scores") + legend


#: The glossary's entries, in reading order: the scores, then the dissimilarities.
GLOSSARY_KEYS = ("bsr", "chance", "tsd", "eq", "mean_affinity", "low_affinity", "n_members")


def glossary_items() -> list[tuple[str, str, str]]:
    """(short label, spelled-out name, meaning) of every abbreviation the report uses, from
    the one naming table (:data:`rdx.results.types.SCORE_LABELS` and
    :data:`~rdx.results.types.DISSIMILARITY_LABELS`)."""
    items = [SCORE_LABELS[k] for k in GLOSSARY_KEYS]
    items += [DISSIMILARITY_LABELS[k] for k in DISSIMILARITY_LABELS]
    return [(lab.short, lab.name, lab.meaning) for lab in items]


def _glossary() -> str:
    dis = ", ".join(f"{esc(DISSIMILARITY_LABELS[k].short)}" for k in DISSIMILARITY_LABELS)
    rows = [[f"<strong>{esc(short)}</strong>", esc(name), esc(meaning)]
            for short, name, meaning in glossary_items()]
    return ('<h3 id="glossary">Glossary</h3>'
            f'<p class="small">{esc(BSR)} is computed under three dissimilarities ({dis}): '
            "the same grids, three ways of saying how far apart two images are in a model. "
            "The no-change group (RDX) holds the images whose neighbourhoods barely differ "
            "between the models; it is not an explanation and not scored.</p>"
            + table(["", "name", "meaning"], rows, cls="glossary"))


def _anchor(name: str) -> str:
    return "method-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


# ----------------------------------------------------------------------------- figures

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


def _composition(indices: Iterable[int], images: dict) -> str:
    """Class make-up of a set of images, e.g. '3 ×5, 5 ×4' (most frequent first)."""
    labels = images.get("labels")
    if not labels:
        return ""
    names = images.get("class_names") or []
    counts: dict[str, int] = {}
    for i in indices:
        if 0 <= int(i) < len(labels):
            key = _class_name(int(labels[int(i)]), names)
            counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} ×{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def grid_caption_lines(exp: dict, images: dict) -> list[str]:
    """The class make-up lines under a grid, each saying what it counts: the images shown
    in the grid and, for methods with members (RDX, k-means, ...), the whole cluster."""
    lines = []
    shown = exp.get("images") or []
    comp = _composition(shown, images)
    if comp:
        lines.append(f"shown ({len(shown)} images): {comp}")
    members = exp.get("members")
    if members is not None:
        whole = _composition(members, images)
        if whole:
            lines.append(f"whole cluster ({len(members)} images): {whole}")
    return lines


def _badges(exp: dict, summary: dict | None = None) -> str:
    out = ""
    if exp.get("low_affinity"):
        weak = SCORE_LABELS["low_affinity"]
        out += (f'<span class="badge weak" title="{attr(weak.meaning)}">'
                f"{esc(weak.short)}</span>")
    sig = significance_badge(exp.get("significance"), summary)
    if sig is not None:
        out += (f'<span class="badge {"above" if sig["significant"] else "weak"}" '
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
            cls = _above(row)
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
    kd = _kd_row(by_dis)
    if kd is not None:
        out.append(f"<p>Known difference: {_kd_text(kd)}</p>")
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
        caption = esc(explanation_title(i, exp)) + _badges(exp, result.info.get("significance"))
        lines = "".join(f"<br>{esc(line)}" for line in grid_caption_lines(exp, data["images"]))
        grid = (_img(store.grid_path(name, direction, i),
                     f"{name}, {DIRECTION_LABEL[direction]}, explanation {i}")
                if pictures else "")
        weak_cls = ' class="weak"' if exp.get("low_affinity") else ""
        figs.append(f"<figure{weak_cls}>{grid}<figcaption>{caption}{lines}</figcaption>"
                    "</figure>")
    if not pictures:
        out.append(note("No images were given (rdx explain --images), so there are no grid "
                        "pictures" + (": the captions list each explanation's classes."
                                      if data["images"].get("labels") else ".")))
        out.append(f'<div class="grids">{"".join(figs)}</div>')
    else:
        # collapsed: the strip above already shows every grid once
        out.append("<details><summary>individual grids, with their classes</summary>"
                   f'<div class="grids">{"".join(figs)}</div></details>')
    return "".join(out) + "</div>"


def _method_section(data: dict, name: str, rows: dict) -> str:
    res = data["results"][name]
    status = data["run"].get("methods", {}).get(name)
    head = (f'<section class="method" id="{attr(_anchor(name))}"><h3>{esc(name)}'
            f'<span class="badge">{esc(res.method)}</span>'
            + (f'<span class="badge">{esc(status)}</span>' if status else "") + "</h3>")
    params = res.params
    run = res.run or {}
    ptable = table(["parameter", "value"], [[esc(k), _value(v)] for k, v in params.items()])
    meta = facts([("seed", esc(run.get("seed", data["run"].get("seed")))),
                  ("fingerprint", f'<span class="mono">{esc(run.get("fingerprint", "—"))}</span>'),
                  ("time", esc(fmt(res.timings.get("total")
                                   or data["run"].get("timings_s", {}).get(name), 1)) + " s")])
    body = "".join(_direction_block(data, name, d, rows) for d in DIRECTIONS
                   if d in res.directions)
    guided = ""
    if (params or {}).get("guidance"):
        # how to read BSR under guidance; the words of the console (rdx explain)
        from ..results.console import guided_bsr_reading

        below = any(_above((rows.get((name, d)) or {}).get("rank") or {}) == "below"
                    for d in DIRECTIONS)
        guided = (f'<p class="note guided" id="{attr("guided-" + _anchor(name))}">'
                  f"{esc(guided_bsr_reading(params['guidance'], below))}</p>")
    return (head + f"<details><summary>parameters and seed</summary>{meta}{ptable}</details>"
            + guided + body + "</section>")


def _pca_section(data: dict) -> str:
    directions = [d for d in DIRECTIONS if any(
        d in grid_directions(data["results"][n]) for n in _explained_methods(data))]
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
                from ..viz.analysis import pca_overlay
                path = Path(pca_overlay(data["store"], d,
                                        Path(tmp) / "analysis" / f"pca_{d}.png"))
            except Exception as exc:  # noqa: BLE001  (a missing figure must not cost the report)
                out.append(note(f"The PCA overlay ({DIRECTION_LABEL[d]}) could not be made: "
                                f"{type(exc).__name__}: {exc}"))
                continue
            a = "A" if d == "a_over_b" else "B"
            out.append(zoomable(_img(path, f"PCA overlay, {DIRECTION_LABEL[d]}"), f"pca-{d}",
                                f"The grid images every method shows for model {a} (for RDX: "
                                f"{direction_meaning('rdx', d)})."))
    return "".join(out)


# ----------------------------------------------------------------------------- sections

def _known_difference_section(data: dict, rows: dict) -> str:
    spec = data["run"].get("config", {}).get("known_difference")
    if not spec:
        return ""
    out = ['<h2 id="known-difference">Known difference</h2>',
           f"<p>Implanted on purpose: {_value(spec)}</p>"]
    body = []
    for name in _explained_methods(data):
        per = {d: _kd_row(rows.get((name, d), {})) for d in DIRECTIONS}
        if not any(per.values()):
            continue
        expected = [d for d, r in per.items() if r and r.get("known_difference_expected")]
        exp_d = expected[0] if expected else None
        opp_d = next((d for d in DIRECTIONS if d != exp_d), None) if exp_d else None
        body.append([esc(name), esc(DIRECTION_LABEL.get(exp_d, "—")),
                     _kd_text(per.get(exp_d), badge=False) if exp_d else "—",
                     _kd_text(per.get(opp_d), badge=False) if opp_d else "—"])
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
             ("image selection", _value(run.get("config", {}).get("image_selection", {}))),
             ("started", esc(run.get("started", "—"))), ("finished", esc(run.get("finished", "—"))),
             ("device", esc(run.get("device", "—"))),
             ("method status", _value(run.get("methods", {})))]
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
    crumb = (f'<a href="../{INDEX_NAME}">{esc(run.get("experiment", "experiment"))}</a>'
             if index_link else esc(run.get("experiment", "experiment")))
    if parent is not None:     # a page above this one (a study's report) names the way back
        crumb = f'<a href="{attr(parent[0])}">{esc(parent[1])}</a>'
    question = ("What does model A represent that model B does not — and what does B "
                "represent that A does not?")
    items = [("Model A", esc(describe_representation(reps.get("a")))),
             ("Model B", esc(describe_representation(reps.get("b")))),
             ("Images", esc(describe_images(run, images)))]
    if cfg.get("description"):
        items.insert(0, ("Description", esc(cfg["description"])))
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


def _footer() -> str:
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return f"<footer>Generated by rdx {esc(__version__)} at {esc(now)}.</footer>"


def render_comparison(comp: ComparisonRun | str | Path, summary: dict | None, *,
                      index_link: bool = False, parent: tuple[str, str] | None = None) -> str:
    """The comparison report as an HTML string (see :func:`write_comparison_report`)."""
    data = _load(_store(comp))
    rows = _index_rows(summary)
    parts = [_header(data, index_link, parent)]
    parts += [note(p) for p in data["problems"]]
    parts.append('<h2 id="scores">Scores</h2>' + _scores_table(data, rows) + _glossary())
    parts.append(_known_difference_section(data, rows))
    methods = _explained_methods(data)
    if methods:
        parts.append('<h2 id="explanations">Explanations</h2>'
                     + "".join(_method_section(data, n, rows) for n in methods))
    missing = [n for n in data["order"] if n not in data["results"]]
    if missing:
        parts.append(note("Configured but without results (not run yet or failed): "
                          + ", ".join(missing) + "."))
    parts.append(_pca_section(data))
    parts.append(_run_section(data))
    parts.append(_footer())
    title = f"RDX report: {data['run'].get('experiment', '')} / " \
            f"{data['run'].get('comparison', data['dir'].name)}"
    return page(title, "\n".join(p for p in parts if p))


def _write_text(path: Path, text: str) -> Path:
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

    comp = _store(comp_dir)
    comp.run   # an error saying what to do when this is not a comparison folder
    if summary is None:
        summary = summarize_comparison(comp)
    if index_link is None:
        index_link = (comp.path.parent / INDEX_NAME).is_file()
    return _write_text(comp.file(REPORT_HTML),
                       render_comparison(comp, summary, index_link=index_link, parent=parent))


# ----------------------------------------------------------------------------- experiment

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
    href = urllib.parse.quote(name) + "/" + REPORT_NAME
    return f'<a href="{attr(href)}">{esc(data["run"].get("comparison", name))}</a>'


def _pages(data: dict) -> str:
    """Links from the index to a comparison's report and, when written, its explorer."""
    base = urllib.parse.quote(data["dir"].name) + "/"
    links = [f'<a href="{attr(base + REPORT_NAME)}">report</a>']
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
    href = urllib.parse.quote(data["dir"].name) + "/" + REPORT_NAME + "#" + _anchor(name)
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
        comp = _composition(exp.get("images") or [], data["images"])
        img = (f'<img src="{attr(uri)}" alt="{attr(name + ", " + bits[0])}">' if uri
               else '<span class="small">no grid picture</span>')
        figs.append(f'<figure class="thumb"><a href="{attr(href)}" title="open {attr(name)} '
                    f'in the report">{img}</a><figcaption>{esc(" · ".join(bits))}'
                    + (f"<br>{esc(comp)}" if comp else "") + "</figcaption></figure>")
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
    cls = _above(row)
    return f'<span class="{cls}">{esc(fmt(row["bsr"], 2))}</span>' if cls \
        else esc(fmt(row["bsr"], 2))


def render_experiment(exp_dir: ExperimentRun | str | Path, summaries: dict[str, dict], *,
                      comparisons: list[ComparisonRun] | None = None) -> str:
    """The experiment index as an HTML string (see :func:`write_experiment_report`)."""
    exp, stores = _experiment(exp_dir)
    exp_dir = exp.path
    comps = [_load(c) for c in (comparisons if comparisons is not None else stores)]
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
            f'<td class="num">{len(_explained_methods(data))}</td>'])
        methods += [m for m in _explained_methods(data) if m not in methods]
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
            rows = _index_rows(summaries.get(data["dir"].name))
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
            rows = _index_rows(summaries.get(data["dir"].name))
            cells, any_kd = [_report_link(data)], False
            for m in methods:
                per = {d: _kd_row(rows.get((m, d), {})) for d in DIRECTIONS}
                exp_d = next((d for d, r in per.items() if r and
                              r.get("known_difference_expected")), None)
                if exp_d is None:
                    cells.append("—")
                    continue
                any_kd = True
                opp = per.get("b_over_a" if exp_d == "a_over_b" else "a_over_b")
                cells.append(f"expected: {_kd_text(per[exp_d], badge=False)}<br>"
                             f'<span class="small">opposite: {_kd_text(opp, badge=False)}</span>')
            if any_kd:
                kd_body.append(cells)
        if kd_body:
            out += ["<h2>Known-difference recovery</h2>", table(["Comparison"] + methods,
                                                                 kd_body)]
    links = [f'<a href="{attr("analysis/" + f)}">analysis/{esc(f)}</a>'
             for f in ("summary.csv", "summary.json") if (exp.analysis_dir / f).is_file()]
    if links:
        out.append("<h2>Tables</h2><p>Every score as a table: " + " · ".join(links) + "</p>")
    out.append(_footer())
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
    return _write_text(exp.index_html, render_experiment(exp, by_name, comparisons=comps))
