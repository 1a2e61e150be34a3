"""The training-dynamics section of the HTML report: one self-contained page per analysis.

``write_dynamics_report(out_dir)`` writes ``<out_dir>/report.html`` for a folder written by
:func:`rdx.studies.dynamics.run_dynamics` (``rdx dynamics``): what was compared, the
curves of paper Fig. 1, the class make-up of every cluster followed across all checkpoints,
a table with one row per checkpoint, the grids of every cluster at one checkpoint, the
cluster figures of paper Fig. 2 with the class make-up of their clusters, and how to
reproduce it. Like the
comparison reports (:mod:`rdx.report.comparison`) it uses the blocks of :mod:`rdx.report.html`:
inline CSS, images embedded as ``data:`` URIs, no JavaScript, no external resource.
:func:`dynamics_section` returns the body alone, for embedding in another page.
:func:`write_dynamics_figures` reads the folder (cluster labels, features, the probe
images) and draws its figures (:mod:`rdx.viz.dynamics_figures`) before the page is written.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import RDXInputError
from ..io import atomic_write
from ..paths import shown_path
from ..viz.dynamics_clusters import (choose_checkpoints, choose_grids_checkpoint,
                                     cluster_figure_name, grids_figure_name)
from .html import attr, data_uri, esc, facts, fmt, note, page, table, zoomable

REPORT_NAME = "report.html"


def _img(path: Path, alt: str) -> str:
    """A figure at page width that a click enlarges (see :func:`rdx.report.html.zoomable`)."""
    try:
        img = f'<img src="{attr(data_uri(path))}" alt="{attr(alt)}">'
    except (OSError, ValueError) as exc:
        return note(f"figure {path.name} could not be embedded: {exc}")
    return zoomable(img, path.stem, alt)


def _pct(v: Any) -> str:
    return "—" if v is None else f"{100 * float(v):.1f}%"


def _band(b: dict | None, digits: int = 2) -> str:
    if not b:
        return "—"
    return f"{fmt(b['mean'], digits)} <span class=\"small\">[{fmt(b['min'], digits)}, " \
           f"{fmt(b['max'], digits)}]</span>"


def _checkpoint_table(doc: dict) -> str:
    rows = []
    for r in doc["checkpoints"]:
        c0, b = r["cluster0"], r["band"]
        state = '<span class="badge">no-change</span>' if r["no_change"] else ""
        rows.append([
            f"C{r['index']}", f"<code>{esc(r['checkpoint'])}</code>",
            f'<td class="num">{fmt(r.get("epochs_completed"), 2)}</td>',
            f'<td class="num">{_pct(r.get("train_accuracy"))}</td>',
            f'<td class="num">{_pct(r.get("test_accuracy"))}</td>',
            f'<td class="num">{_pct(r.get("probe_accuracy"))}</td>',
            f'<td class="num">{c0["size"]}</td>',
            f'<td class="num">{fmt(c0["mean_affinity"], 3)}{state}</td>',
            f'<td class="num">{_pct(c0["accuracy"])} / {_pct(c0["accuracy_final"])}</td>',
            f'<td class="num">{r["n_difference_clusters"]}</td>',
            f'<td class="num">{_band(b.get("size"), 1)}</td>',
            f'<td class="num">{_band(b.get("mean_affinity"))}</td>',
            f'<td class="num">{_band(b.get("accuracy"))}</td>'])
    return table(["", "checkpoint", "epochs", "train acc", "test acc", "probe acc",
                  "cluster 0 size", "cluster 0 affinity", "cluster 0 acc C_t / CF",
                  "difference clusters", "size 1–9 mean [min, max]",
                  "affinity 1–9", "acc C_t 1–9"], rows)


def _makeup_table(rec: dict, class_names: list[str]) -> str:
    rows = []
    for c in [rec["cluster0"], *rec["clusters"]]:
        name = ("no-change" if rec["no_change"] else "0") if c["label"] == 0 else str(c["label"])
        rows.append([name, f'<td class="num">{esc(c.get("track", "—"))}</td>',
                     f'<td class="num">{c["size"]}</td>',
                     f'<td class="num">{fmt(c["mean_affinity"], 2)}</td>',
                     f'<td class="num">{_pct(c["accuracy"])}</td>',
                     f'<td class="num">{_pct(c["accuracy_final"])}</td>']
                    + [f'<td class="num">{n}</td>' for n in c["class_counts"]])
    return table(["cluster", "track", "size", "mean affinity", f"acc C{rec['index']}",
                  "acc CF", *class_names], rows)


def dynamics_section(out_dir: str | Path, doc: dict | None = None) -> str:
    """The report's training-dynamics section (HTML fragment) of one analysis folder."""
    from ..results.store import load_dynamics

    out = Path(out_dir)
    doc = load_dynamics(out) if doc is None else doc
    recs = doc["checkpoints"]
    names = doc["probe"]["class_names"]
    rdx = doc["rdx"]
    first = doc.get("no_change_from")
    final = doc["final"]
    probe = doc["probe"]
    sel = probe["selection"]
    counts = ", ".join(f"{esc(n)} {c}" for n, c in zip(names, probe["class_counts"]))
    intro = ("<p>For every checkpoint C<sub>t</sub> RDX compares A = the final model (CF) "
             "with B = C<sub>t</sub> on the probe images (direction <em>A over B</em>). "
             f"Spectral clustering finds {rdx.get('n_clusters', 10)} clusters ordered by mean "
             "affinity; cluster 0, the lowest, holds the images that changed least. Clusters "
             f"whose mean affinity is below {fmt(rdx.get('null_threshold', 1.5), 2)} join the "
             "no-change group (grey); the rest, clusters 1–9, are what C<sub>t</sub> has yet "
             "to learn. Accuracy of a cluster: the fraction of its images that the "
             "checkpoint's own classifier (C<sub>t</sub>) or the final one (CF) gets right.</p>")
    # files as seen from the page's folder: a shared page names no folder of the machine
    final_text = (f"<code>{esc(shown_path(final['path'], out))}</code> (probe accuracy "
                  f"{_pct(final.get('probe_accuracy'))}, test "
                  f"{_pct(final.get('test_accuracy'))})")
    ck_text = (f"{len(recs)} from "
               f"<code>{esc(shown_path(doc['config']['checkpoints']['dir'], out))}</code>")
    probe_text = (f"{probe['n_images']} images of {esc(sel.get('dataset'))} "
                  f"({esc(sel.get('split', 'train'))}): {counts}"
                  + (" — the final model's training images"
                     if probe.get("is_training_set") else ""))
    first_text = "never" if first is None else (
        f"C{first} (<code>{esc(recs[first]['checkpoint'])}</code>, "
        f"{fmt(recs[first].get('epochs_completed'), 2)} epochs)")
    t = doc["timings"]
    time_text = (f"{fmt(t.get('total'), 1)} s (features {fmt(t.get('features'), 1)} s, "
                 f"RDX {fmt(t.get('rdx'), 1)} s)")
    parts = [('<h2 id="dynamics">Training dynamics: every checkpoint against the final '
              "model</h2>"),
             ('<p class="question">Which groups of images does the final model hold together '
              "that checkpoint C<sub>t</sub> still spreads apart?</p>"),
             intro,
             facts([("name", esc(doc.get("name"))), ("final model", final_text),
                    ("checkpoints", ck_text), ("probe set", probe_text),
                    ("RDX", esc(", ".join(f"{k}={v}" for k, v in rdx.items()))),
                    ("cluster 0 becomes no-change", first_text), ("time", time_text)])]
    curves = out / "figures" / "dynamics_curves.png"
    if curves.is_file():
        parts.append(_img(curves, "Mean affinity, cluster size and cluster accuracy of "
                                     "cluster 0 and of clusters 1–9 (mean line, min–max "
                                     "shaded) at every checkpoint; grey points: cluster 0 is a "
                                     "no-change cluster."))
    else:
        parts.append(note("The curves figure is missing: run `rdx dynamics` again (it "
                          "writes the figures)."))
    makeup = out / "figures" / "cluster_makeup.png"
    if makeup.is_file():
        tr = doc.get("tracks") or {}
        parts.append('<h3 id="makeup">Every cluster across checkpoints</h3>'
                     "<p>One row per cluster followed across checkpoints (a <em>track</em>): "
                     "the difference clusters of consecutive checkpoints are paired by the "
                     "Hungarian method on the overlap of their images (Jaccard ≥ "
                     f"{esc(fmt(tr.get('min_jaccard'), 2))}; a cluster without a partner "
                     "starts a new track). Bars: the cluster's images per class at each "
                     "checkpoint; the number above a bar is the cluster's label there. The "
                     "first row is the no-change group (grey rim: cluster 0 is a no-change "
                     f"cluster). {esc(tr.get('n_tracks', '?'))} tracks in all.</p>")
        parts.append(_img(makeup, "Class make-up of every cluster at every checkpoint."))
    parts.append("<h3>Per checkpoint</h3>" + _checkpoint_table(doc))
    try:
        g = choose_grids_checkpoint(doc, (doc["config"].get("figures") or {})
                                    .get("grids_at", "auto"))
    except RDXInputError as exc:
        parts.append(note(str(exc)))
    else:
        grids = out / "figures" / grids_figure_name(recs[g])
        if grids.is_file():
            parts.append(f'<h3 id="grids">The grid of every cluster at C{g} '
                         f"(<code>{esc(recs[g]['checkpoint'])}</code>)</h3>"
                         "<p>Each difference cluster's image grid with its size, mean affinity, "
                         "both classifiers' accuracy and its class make-up (whole cluster and "
                         "the images shown). Another checkpoint: <code>rdx dynamics --config "
                         "... --grids-at C5</code> (or <code>figures.grids_at</code>).</p>"
                         + _img(grids, f"C{g}: the grid of every difference cluster."))
    try:
        chosen = choose_checkpoints(doc, (doc["config"].get("figures") or {})
                                    .get("checkpoints", "auto"))
    except RDXInputError as exc:
        chosen = []
        parts.append(note(str(exc)))
    by_index = {i: out / "figures" / cluster_figure_name(recs[i]) for i in chosen}
    missing = [f"C{i}" for i, p in by_index.items() if not p.is_file()]
    if missing:
        parts.append(note(f"cluster figures of {', '.join(missing)} are missing: run "
                          "`rdx dynamics` again (it writes the figures)."))
    by_index = {i: p for i, p in by_index.items() if p.is_file()}
    if by_index:
        parts.append("<h3>Clusters of selected checkpoints</h3>"
                     "<p>PCA of C<sub>t</sub> (left) and of the final model (right), points "
                     "coloured by cluster (no-change grey); below, the image grid of one "
                     "cluster with both models' accuracy on it. Points of a difference "
                     "cluster lie close together in CF and apart in C<sub>t</sub>.</p>")
        for i in sorted(by_index):
            rec = recs[i]
            parts.append(f"<h4>C{i}: <code>{esc(rec['checkpoint'])}</code></h4>")
            parts.append(_img(by_index[i], f"C{i} vs the final model"))
            parts.append("<details><summary>class make-up of every cluster</summary>"
                         + _makeup_table(rec, names) + "</details>")
    files = ["dynamics.json", "dynamics.csv", "clusters.csv", "checkpoints/", "features/",
             "figures/"]
    command = ("<code>rdx dynamics --config "
               f"{esc(shown_path(doc['config'].get('config_path', 'CONFIG'), out))}</code>")
    def link(f: str) -> str:
        # the tables open from the page; folders are named (a browser lists them from file://)
        path = Path(out) / f
        if path.is_file() or (f.endswith("/") and path.is_dir()):
            return f'<a href="{attr(f)}"><code>{esc(f)}</code></a>'
        return f"<code>{esc(f)}</code>"
    parts.append("<h3>Files and reproduction</h3>"
                 + facts([("folder", f"<code>{esc(out.name)}</code>"),
                          ("files", ", ".join(link(f) for f in files)),
                          ("command", command)]))
    return "\n".join(parts)


def render_dynamics(out_dir: str | Path, doc: dict | None = None) -> str:
    """The whole page (see :func:`write_dynamics_report`)."""
    from ..results.store import load_dynamics

    doc = load_dynamics(out_dir) if doc is None else doc
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = ('<header class="page"><div class="crumb">RDX report · training dynamics</div>'
            f"<h1>{esc(doc.get('name'))}</h1>"
            + (f'<p class="muted">{esc(doc.get("description"))}</p>'
               if doc.get("description") else "") + "</header>")
    foot = f"<footer>rdx {esc(__version__)} · written {esc(stamp)}</footer>"
    return page(f"RDX training dynamics: {doc.get('name', '')}",
                head + dynamics_section(out_dir, doc) + foot)


def write_dynamics_report(out_dir: str | Path, doc: dict | None = None) -> Path:
    """Write ``<out_dir>/report.html`` (self-contained: inline CSS, embedded images)."""
    path = Path(out_dir) / REPORT_NAME
    text = render_dynamics(out_dir, doc)
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))
    return path


# ----------------------------------------------------------------------------- figures

class ProbeImages:
    """``images[i]``: probe image ``i`` of an analysis, loaded one at a time through
    ``load(indices) → images`` (figures index images one by one)."""

    def __init__(self, load: Any) -> None:
        self.load = load

    def __getitem__(self, i: int) -> Any:
        return self.load([int(i)])[0]


def probe_image_loader(doc: dict) -> Any:
    """``indices → raw images`` of an analysis' probe set, rebuilt from its config (an error
    when the selection no longer gives the analysed images)."""
    import numpy as np

    from ..data.selection import select_images

    ds, idx = select_images(doc["config"]["probe"])
    if np.asarray(idx).tolist() != doc["probe"]["indices"]:
        raise RDXInputError("the probe selection no longer gives the analysed images; "
                            "re-run the analysis.")
    return lambda which: ds.image_array(np.asarray(idx)[np.asarray(which)])


def write_dynamics_figures(out_dir: str | Path, doc: dict | None = None, *,
                           images: Any = None) -> dict[str, list[Path]]:
    """Every figure of a finished analysis into ``<out_dir>/figures``: the curves, the
    class make-up, one cluster figure per chosen checkpoint (config ``figures``) and the
    grids of one checkpoint's clusters (:func:`rdx.viz.dynamics_figures.draw_dynamics_figures`).

    Parameters
    ----------
    out_dir : path
        The analysis folder (``rdx dynamics``).
    doc : dict, optional
        Its ``dynamics.json`` (read when not given).
    images : callable, optional
        ``indices → raw images`` of the probe set (rebuilt from the config when None).
    """
    from ..results.store import DynamicsRun
    from ..viz.dynamics_figures import draw_dynamics_figures, figure_checkpoints

    run = DynamicsRun(out_dir)
    doc = run.doc() if doc is None else doc
    names = figure_checkpoints(doc)
    labels = {n: run.labels(n) for n in names}
    features = {n: run.features(n) for n in [*names, "final"]}
    load = probe_image_loader(doc) if images is None else images
    return draw_dynamics_figures(doc, Path(out_dir) / "figures", labels=labels,
                                 features=features, images=ProbeImages(load))


__all__ = ["ProbeImages", "dynamics_section", "probe_image_loader", "render_dynamics",
           "write_dynamics_figures", "write_dynamics_report"]
