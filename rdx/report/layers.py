"""The layer-wise study's page of the HTML report.

``write_layers_report(out_dir)`` writes ``<out_dir>/report.html`` for a folder written by
:func:`rdx.studies.layers.run_layers` (``rdx layers --config ...``): the model and the
images, probe accuracy by layer, one row per consecutive layer pair (CKA, BSR, how many
RDX clusters are enriched for prediction changes or for one class), the heatmaps, the image
grids of the significant clusters, the per-head patching results and how to reproduce it.
Like the comparison reports it is self-contained (inline CSS, images as ``data:`` URIs, no
JavaScript). :func:`layers_section` returns the body alone, for embedding in another page.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import RDXInputError
from ..io import atomic_write, environment_error, read_json
from ..paths import without_machine_paths
from .html import attr, data_uri, esc, facts, fmt, note, page, table

REPORT_NAME = "report.html"
DIRECTIONS = ("a_over_b", "b_over_a")
DIRECTION_TEXT = {"a_over_b": "spread apart by the step (close in the earlier layer, far in "
                              "the later one)",
                  "b_over_a": "brought together by the step (far in the earlier layer, close "
                              "in the later one)"}
#: The directions in a few words, for table headers (the page shows no raw key).
DIRECTION_SHORT = {"a_over_b": "spread apart", "b_over_a": "brought together"}
FIGURES = (("probe_accuracy.png", "Probe accuracy by layer (fitted on the probe images, "
                                  "evaluated on the analysis images)."),
           ("cluster_change_pvalues.png", "Permutation p-values of each RDX cluster's "
                                          "prediction-change rate."),
           ("cluster_homogeneity_pvalues.png", "Permutation p-values of each RDX cluster's "
                                               "majority-class fraction."),
           ("cluster_change_rate.png", "Prediction-change rate of the RDX clusters against "
                                       "random image sets of the same sizes."),
           ("fraction_significant.png", "Fraction of RDX clusters enriched for prediction "
                                        "changes or for one class."))
PATCH_FIGURES = (("topk_change", "Top-k neighbourhood change when the head is mean-ablated."),
                 ("one_minus_cka", "1 − CKA between the patched and unpatched block output."),
                 ("cluster_delta_mean", "RDX cluster-neighbourhood delta: > 0 means the head "
                                        "helps form the pair's difference clusters."),
                 ("knn_acc_change", "k-NN probe accuracy change on the patched output."),
                 ("linear_acc_change", "Linear probe accuracy change on the patched output."))


def _img(path: Path, alt: str, cls: str = "wide") -> str:
    try:
        return (f'<figure class="{attr(cls)}"><img src="{attr(data_uri(path))}" '
                f'alt="{attr(alt)}"><figcaption>{esc(alt)}</figcaption></figure>')
    except (OSError, ValueError) as exc:
        return note(f"figure {path.name} could not be embedded: {exc}")


def _pct(v: Any) -> str:
    return "—" if v is None else f"{100 * float(v):.1f}%"


def _num(v: Any, digits: int = 3) -> str:
    return f'<td class="num">{fmt(v, digits)}</td>'


def load_layers(out_dir: str | Path) -> dict:
    """``layers.json`` of a finished study."""
    p = Path(out_dir) / "layers.json"
    if not p.is_file():
        raise RDXInputError(f"{p} does not exist: run `rdx layers --config "
                            "configs/layers_<name>.yaml` first.")
    doc = read_json(p)
    if doc.get("format") != "rdx-layers":
        raise RDXInputError(f"{p} is not the result of a layer-wise study.")
    return doc


def _probe_table(doc: dict) -> str:
    rows = [[f"<code>{esc(lay['label'])}</code>", f"<code>{esc(lay['key'])}</code>",
             _num(lay["dim"]), f'<td class="num">{_pct(lay["knn_accuracy"])}</td>',
             f'<td class="num">{_pct(lay["linear_accuracy"])}</td>'] for lay in doc["layers"]]
    return table(["layer", "module", "dim", "k-NN accuracy", "linear accuracy"], rows)


EXPLORER = "explore.html"


def explorer_path(out: Path) -> Path:
    """The study's explorer: one page over all its pairs (``rdx explore <out>/pairs``)."""
    return out / "pairs" / EXPLORER


def _pair_pages(p: dict, i: int, out: Path | None) -> str:
    """Links of one pair: its comparison report (grids of every cluster) and its place in
    the study's explorer, where those pages are written."""
    if out is None:
        return "—"
    links = []
    folder = str(p["folder"]).strip("/")
    if (out / folder / REPORT_NAME).is_file():
        links.append(f'<a href="{attr(folder + "/" + REPORT_NAME)}">grids</a>')
    if explorer_path(out).is_file():
        links.append(f'<a href="{attr("pairs/" + EXPLORER + "#pair=" + str(i))}">explorer</a>')
    return " · ".join(links) or "—"


def _pair_table(doc: dict, out: Path | None = None) -> str:
    rows = []
    for i, p in enumerate(doc["pairs"]):
        cells = [f"{esc(p['a_label'])} → {esc(p['b_label'])}",
                 _num(p.get("cka")), _num((p.get("bsr") or {}).get("mean"))]
        for d in DIRECTIONS:
            s = p["directions"][d]
            cells.append(f'<td class="num">{s["n_clusters"]}</td>')
            cells.append(f'<td class="num">{s["n_significant_change"]} / '
                         f'{s["n_significant_homogeneity"]}</td>')
            cells.append(f'<td class="num">{_pct(s["weighted_change_rate"])} '
                         f'<span class="small">(random {_pct(s["weighted_change_rate_null"]["mean"])}'
                         f', p {fmt(s["weighted_change_p"], 3)})</span></td>')
        cells.append(f'<td class="num">{_pct(p["directions"]["a_over_b"]["overall_change_rate"])}'
                     "</td>")
        cells.append(f"<code>{esc(p['folder'])}</code>")
        cells.append(_pair_pages(p, i, out))
        rows.append(cells)
    header = ["pair", "CKA", "BSR"]
    for d in DIRECTIONS:
        w = DIRECTION_SHORT[d]
        header += [f"{w}: clusters", f"{w}: change / class-enriched", f"{w}: change rate"]
    return table(header + ["change rate (all)", "folder", "pages"], rows)


def _cluster_grids(doc: dict, out: Path, alpha: float, class_names: list) -> str:
    parts = []
    for p in doc["pairs"]:
        blocks = []
        for d in DIRECTIONS:
            figs = []
            for c in p["directions"][d]["clusters"]:
                if not (c["change_p"] < alpha or c["homogeneity_p"] < alpha):
                    continue
                grid = out / p["folder"] / "rdx" / "grids" / f"{d}_{c['label']}.png"
                major = c["majority_class"]
                name = class_names[major] if 0 <= major < len(class_names) else str(major)
                cap = (f"#{c['label']} n={c['size']}, change {_pct(c['change_rate'])} "
                       f"(p {c['change_p']:.3g}), {_pct(c['majority_fraction'])} {name} "
                       f"(p {c['homogeneity_p']:.3g})")
                figs.append(_img(grid, cap, "") if grid.is_file()
                            else note(f"grid {grid.name} is missing"))
            if figs:
                blocks.append(f'<div class="direction"><h4>{esc(DIRECTION_TEXT[d])}'
                              f'</h4><div class="grids">{"".join(figs)}</div></div>')
        if blocks:
            parts.append(f"<details><summary>{esc(p['a_label'])} → {esc(p['b_label'])}"
                         f"</summary>{''.join(blocks)}</details>")
    if not parts:
        return note(f"no RDX cluster reached p < {alpha:g}.")
    return "".join(parts)


def _patching(doc: dict, out: Path) -> str:
    pd = doc.get("patching")
    if not pd:
        return "<p class=\"muted\">Patching was not run.</p>"
    html = [f"<p>Every head of blocks {', '.join(map(str, pd['blocks']))} was mean-ablated "
            "in turn (its attention output replaced by its mean over the analysis images, "
            "per token position) and the block re-run on its unpatched input; "
            f"k = {pd['k']} neighbours.</p>"]
    rows = []
    names = {"topk_change": "top-k change", "one_minus_cka": "1 − CKA",
             "cluster_delta_mean": "cluster delta", "knn_acc_change": "k-NN acc change"}
    for m, items in pd["top_heads"].items():
        rows.append([esc(names.get(m, m)), ", ".join(
            f"block {r['block']} head {r['head']} ({fmt(r['value'], 3)})" for r in items)])
    html.append(table(["metric", "top heads"], rows))
    for m, cap in PATCH_FIGURES:
        f = out / "figures" / f"patching_{m}.png"
        if f.is_file():
            html.append(_img(f, cap))
    check = pd.get("rerun_max_abs_diff") or {}
    if check:
        worst = max(check.values())
        html.append(f'<p class="small">Check: re-running each block on its captured input '
                    f"reproduces the captured output up to {worst:.2g} (max |Δ|).</p>")
    return "".join(html)


def _explorer_note(out: Path) -> str:
    if explorer_path(out).is_file():
        return (f'<p><a href="{attr("pairs/" + EXPLORER)}">Open the interactive explorer</a> '
                "of all layer pairs (both layers' maps, each image's neighbours, box and "
                "lasso selection of a group, the RDX clusters).</p>")
    # an absolute folder by the study's name: a shared page names no folder of the machine
    where = (f"<code>rdx explore {esc(out / 'pairs')}</code>" if not out.is_absolute() else
             f"<code>rdx explore {esc(out.name)}/pairs</code> (in the study's parent folder)")
    return ('<p class="small">The interactive explorer of the pairs is not written yet: '
            f"{where} writes it and links it here.</p>")


def layers_section(doc: dict, out_dir: str | Path) -> str:
    """The report body of a study (``doc``: ``layers.json``)."""
    out = Path(out_dir)
    m, d = doc["model"], doc["data"]
    alpha = float(doc["significance"]["alpha"])
    sig = doc["significance"]["all"]
    cfg = doc.get("config", {})
    stats = cfg.get("stats", {})
    items = [("model", f"<code>{esc(m.get('model_id'))}</code>"),
             # a checkpoint's id holds its path: as seen from the page's folder
             ("weights", f'<span class="mono">'
                         f'{esc(without_machine_paths(str(m.get("weights_id")), out))}</span>'),
             ("images", f"{d['n_images']} analysis + {d['n_probe']} probe images of "
                        f"{esc(d['dataset'])}/{esc(d['split'])} (seed {d['seed']})"),
             ("layers", ", ".join(f"<code>{esc(lay['label'])}</code>" for lay in doc["layers"])),
             ("RDX", f"<code>{esc(doc['rdx'])}</code>"),
             ("statistics", f"{stats.get('n_permutations')} permutations (seed "
                            f"{stats.get('seed')}), p = (1 + #null ≥ observed)/(1 + "
                            f"permutations), α = {alpha:g}; change = "
                            f"{esc(cfg.get('probes', {}).get('change_probe'))} probe "
                            "prediction differs between the two layers"),
             ("significant clusters", f"{sig['n_significant_change']} of {sig['n_clusters']} "
                                      f"({_pct(sig['fraction_significant_change'])}) enriched "
                                      f"for prediction changes, "
                                      f"{sig['n_significant_homogeneity']} "
                                      f"({_pct(sig['fraction_significant_homogeneity'])}) for "
                                      "one class"),
             ("run time", f"{fmt(doc['timings_s'].get('total'), 1)} s")]
    if m.get("test_accuracy") is not None:
        items.insert(2, ("model accuracy", f"train {_pct(m.get('train_accuracy'))}, test "
                                            f"{_pct(m.get('test_accuracy'))}"))
    html = [f'<header class="page"><div class="crumb">layer-wise study</div>'
            f"<h1>{esc(doc['name'])}</h1>"
            + (f"<p>{esc(doc['description'])}</p>" if doc.get("description") else "")
            + "<p class=\"question\">Which groups of images does each step of the model bring "
              "together or spread apart, do those groups change their predictions, and which "
              "attention heads cause them?</p></header>",
            facts(items), "<h2>Probes</h2>", _probe_table(doc)]
    fig = out / "figures" / FIGURES[0][0]
    if fig.is_file():
        html.append(_img(fig, FIGURES[0][1]))
    html += ["<h2>Consecutive layers</h2>",
             "<p>RDX compares each layer (A) with the next (B). Groups "
             f"<b>{esc(DIRECTION_TEXT['a_over_b'])}</b> and groups "
             f"<b>{esc(DIRECTION_TEXT['b_over_a'])}</b>. Enriched: permutation "
             f"p &lt; {alpha:g}.</p>",
             _pair_table(doc, out), _explorer_note(out)]
    for name, cap in FIGURES[1:]:
        f = out / "figures" / name
        if f.is_file():
            html.append(_img(f, cap))
    html += ["<h3>Significant clusters</h3>",
             _cluster_grids(doc, out, alpha, d.get("class_names") or []),
             "<h2>Attention heads (mean-ablation patching)</h2>", _patching(doc, out),
             "<h2>Reproduce</h2>",
             facts([("command", "<code>rdx layers --config CONFIG</code>"),
                    ("timings (s)", esc({k: round(v, 1) for k, v in doc["timings_s"].items()})),
                    ("versions", esc(doc.get("versions"))),
                    ("started", esc(doc.get("started"))), ("finished", esc(doc.get("finished")))]),
             f"<footer>rdx {esc(__version__)} · layer-wise study</footer>"]
    return "\n".join(html)


def write_pair_reports(out_dir: str | Path, doc: dict | None = None) -> list[Path]:
    """Each layer pair's comparison report (``pairs/<pair>/report.html``: scores and the
    grids of every cluster), linking back to the study's report; a pair whose report fails
    is skipped (its row then has no link)."""
    import warnings

    from .comparison import write_comparison_report

    out = Path(out_dir)
    doc = doc if doc is not None else load_layers(out)
    written = []
    for p in doc["pairs"]:
        folder = out / str(p["folder"]).strip("/")
        back = "../" * len(Path(str(p["folder"]).strip("/")).parts) + REPORT_NAME
        try:
            written.append(write_comparison_report(
                folder, index_link=False, parent=(back, f"layer-wise study {doc['name']}")))
        except Exception as exc:  # noqa: BLE001 - the study's own report still gets written
            if environment_error(exc):
                raise   # a full disk, quota, read-only folder: exit 2, never a warning
            warnings.warn(f"{folder}: its report could not be written ({exc})", stacklevel=2)
    return written


def write_layers_report(out_dir: str | Path, *, pair_reports: bool = True) -> Path:
    """Write ``<out_dir>/report.html`` for a finished study; returns its path.

    ``pair_reports``: also (re)write each pair's comparison report, which the pair table
    links to (its grids)."""
    out = Path(out_dir)
    doc = load_layers(out)
    if pair_reports:
        write_pair_reports(out, doc)
    text = page(f"Layer-wise study: {doc['name']}", layers_section(doc, out))
    path = out / REPORT_NAME
    atomic_write(path, lambda fh: fh.write(text.encode()))
    return path


__all__ = ["REPORT_NAME", "explorer_path", "layers_section", "load_layers",
           "write_layers_report", "write_pair_reports"]
