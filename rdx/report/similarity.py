"""The small report of a model × model similarity run (``rdx matrix``): heat maps and
``report.html``.

``write_similarity_report(root)`` reads every matrix under ``<root>/matrices/<dataset>/
<measure>.npz|.json`` (:class:`rdx.similarity.matrix.SimilarityMatrix`), draws one heat map
per dataset and measure into ``<root>/figures/<dataset>/<measure>.png`` and, where linear
probes exist (``<root>/probes``, written by ``rdx probe``), one similarity-vs-performance
plot per dataset and measure (``<root>/figures/<dataset>/<measure>_vs_probe.png``), then
writes ``<root>/report.html``: self-contained like the comparison reports (inline CSS,
images embedded, no JavaScript).
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import RDXInputError
from ..io import atomic_write
from ..studies.similarity.consistency_study import probe_accuracy
from .html import attr, data_uri, esc, facts, fmt, note, page, table, zoomable

REPORT_NAME = "report.html"
FIGURES_DIR = "figures"


def load_matrices(root: str | Path) -> dict[str, dict[str, Any]]:
    """``{dataset: {measure slug: SimilarityMatrix}}`` of every matrix under
    ``<root>/matrices`` (datasets and measures in name order)."""
    from ..similarity.matrix import SimilarityMatrix

    base = Path(root) / "matrices"
    if not base.is_dir():
        raise RDXInputError(f"no matrices under {base}: run `rdx matrix --models ... "
                            "--datasets ...` first.")
    out: dict[str, dict[str, Any]] = {}
    for ds_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        for js in sorted(ds_dir.glob("*.json")):
            out.setdefault(ds_dir.name, {})[js.stem] = SimilarityMatrix.load(js)
    if not out:
        raise RDXInputError(f"no matrix files under {base}.")
    return out


def heatmap_path(root: str | Path, dataset: str, slug: str) -> Path:
    return Path(root) / FIGURES_DIR / dataset / f"{slug}.png"


def performance_path(root: str | Path, dataset: str, slug: str) -> Path:
    return Path(root) / FIGURES_DIR / dataset / f"{slug}_vs_probe.png"


def _groups(matrix: Any, category: str | None) -> dict[str, str] | None:
    cats = matrix.meta.get("categories") or {}
    return cats.get(category) if category else None


def write_similarity_figures(root: str | Path, matrices: dict[str, dict[str, Any]] | None = None,
                             *, category: str | None = "objective",
                             accuracy: dict[str, dict[str, float]] | None = None
                             ) -> dict[str, list[Path]]:
    """Heat maps of every matrix and, with probe accuracies (read from ``<root>/probes``
    when not given) for at least 3 of a dataset's models, its similarity-vs-performance
    plots. Returns ``{"heatmaps": [...], "performance": [...]}``."""
    from ..similarity.consistency import similarity_performance_correlation
    from ..viz.save import save_figure
    from ..viz.similarity import similarity_heatmap_figure, similarity_vs_performance_figure

    root = Path(root)
    matrices = load_matrices(root) if matrices is None else matrices
    if accuracy is None:
        accuracy = probe_accuracy(root / "probes")
    out: dict[str, list[Path]] = {"heatmaps": [], "performance": []}
    for ds, by_slug in matrices.items():
        for slug, m in by_slug.items():
            fig = similarity_heatmap_figure(
                m.values, m.model_ids, higher_is_more_similar=m.higher_is_more_similar,
                groups=_groups(m, category),
                title=f"{ds}: {slug} ({m.n_images} images, {m.normalize} features)")
            out["heatmaps"].append(save_figure(fig, heatmap_path(root, ds, slug)))
            acc = {k: v for k, v in (accuracy.get(ds) or {}).items() if k in m.model_ids}
            if len(acc) < 3:
                continue
            corr = {meth: similarity_performance_correlation(m.values, m.model_ids, acc,
                                                             method=meth)[0]
                    for meth in ("spearman", "pearson")}
            fig = similarity_vs_performance_figure(
                m.values, m.model_ids, acc, measure=slug, dataset=ds,
                higher_is_more_similar=m.higher_is_more_similar, groups=_groups(m, category),
                correlations=corr)
            out["performance"].append(save_figure(fig, performance_path(root, ds, slug)))
    return out


def _img(path: Path, alt: str) -> str:
    if not path.is_file():
        return note(f"Figure missing: {path.name} was not found in {path.parent}.")
    try:
        img = f'<img src="{attr(data_uri(path))}" alt="{attr(alt)}">'
    except (OSError, ValueError) as exc:
        return note(f"Figure {path.name} could not be embedded: {exc}.")
    return zoomable(img, f"{path.parent.name}-{path.stem}", alt)


#: ``rdx consistency``'s files per measure (``<root>/consistency/<measure>/``), as linked
CONSISTENCY_FILES = (("summary.csv", "summary per pair set"),
                     ("consistency.csv", "every dataset pair"),
                     ("dataset_consistency.csv", "dataset × dataset"),
                     ("similarity_vs_performance.csv", "similarity vs probe accuracy gap"),
                     ("consistency.json", "everything, with the inputs"))


def _href(root: Path, path: Path) -> str:
    return "/".join(path.relative_to(root).parts)


def consistency_section(root: str | Path, slugs: list[str]) -> str:
    """Links to the results of ``rdx consistency`` and ``rdx probe`` under ``root`` (where
    they exist), with the consistency box plot of each measure embedded; otherwise the
    commands that write them."""
    root = Path(root)
    parts = ['<h2 id="consistency">Consistency across datasets and probe results</h2>']
    cons = root / "consistency"
    found = False
    for slug in slugs:
        d = cons / slug
        if not d.is_dir():
            continue
        found = True
        links = [f'<a href="{attr(_href(root, d / f))}">{esc(f)}</a> ({esc(what)})'
                 for f, what in CONSISTENCY_FILES if (d / f).is_file()]
        links += [f'<a href="{attr(_href(root, f))}">{esc(f.name)}</a>'
                  for f in sorted(d.glob("*.png"))]
        parts.append(f"<h3>{esc(slug)}</h3><p>" + " · ".join(links) + "</p>")
        box = d / "consistency_boxplot.png"
        if box.is_file():
            parts.append(_img(box, f"{slug}: how consistent the model pairs' similarities are "
                                   "across datasets, per pair set (rdx consistency)."))
    if not found:
        # no path of this machine on the page: the folder is the page's own
        parts.append(note("No consistency results yet: `rdx consistency --root DIR` (DIR: "
                          "this page's folder) compares the datasets' matrices and writes "
                          "them to consistency/ next to this page, then rewrites this page "
                          "with them (no `rdx matrix --stage report` needed)."))
    acc = probe_accuracy(root / "probes")
    if acc:
        models = sorted({m for by in acc.values() for m in by})
        rows = [[esc(ds)] + [f'<td class="num">{fmt(by.get(m), 3)}</td>' for m in models]
                for ds, by in acc.items()]
        csv = root / "probes" / "probes.csv"
        parts.append("<h3 id=\"probes\">Linear probes (rdx probe)</h3>"
                     + table(["dataset"] + models, rows)
                     + '<p class="small">Mean test top-1 accuracy over the seeds. Records: '
                     + " · ".join(f'<a href="{attr(_href(root, f))}">{esc(_href(root, f))}</a>'
                                  for f in ([csv] if csv.is_file() else [])
                                  + sorted((root / "probes").glob("*/*.json"))[:40])
                     + "</p>")
    else:
        parts.append(note("No probe results yet: `rdx probe` (with this run's --models and "
                          "--datasets) writes them to probes/ next to this page and rewrites "
                          "this page when it finishes: the heat maps above then gain "
                          "similarity-vs-accuracy plots (no `rdx matrix --stage report` "
                          "needed)."))
    return "".join(parts)


def render_similarity_report(root: str | Path, matrices: dict[str, dict[str, Any]],
                             run: dict | None = None) -> str:
    """The page (see :func:`write_similarity_report`)."""
    root = Path(root)
    slugs = sorted({s for by in matrices.values() for s in by})
    models = sorted({mid for by in matrices.values() for m in by.values() for mid in m.model_ids})
    rows = []
    for ds, by in matrices.items():
        for slug, m in by.items():
            errors = len(m.errors or {})
            rows.append([esc(ds), esc(slug), f'<td class="num">{len(m.model_ids)}</td>',
                         f'<td class="num">{m.n_images}</td>', esc(m.normalize),
                         "higher" if m.higher_is_more_similar else "lower",
                         f'<td class="num">{errors}</td>'])
    parts = ['<header class="page"><div class="crumb">RDX report · model × model similarity'
             f'</div><h1>{esc(root.name)}</h1><p class="question">How similar are the '
             "representations of these models, dataset by dataset?</p>"
             # the page's own folder by its name: a shared page names no folder of the
             # machine that wrote it
             + facts([("folder", f"<code>{esc(root.name)}</code>"),
                      ("datasets", esc(", ".join(matrices))),
                      ("measures", esc(", ".join(slugs))),
                      ("models", f"{len(models)}: {esc(', '.join(models))}")])
             + "</header>",
             "<h2>Matrices</h2>",
             table(["dataset", "measure", "models", "images", "features", "more similar",
                    "failed entries"], rows),
             '<p class="small">One heat map per dataset and measure, models grouped by their '
             "training objective when the models file gives one (white lines). Files: "
             "<code>matrices/&lt;dataset&gt;/&lt;measure&gt;.npz</code> (the values) and "
             "<code>.json</code> (model order, measure, parameters); figures in "
             "<code>figures/</code>. Consistency across datasets and probe accuracies: "
             '<a href="#consistency">below</a>.</p>']
    for slug in slugs:
        parts.append(f'<h2 id="{attr("m-" + slug)}">{esc(slug)}</h2>')
        for ds, by in matrices.items():
            if slug not in by:
                continue
            parts.append(f"<h3>{esc(ds)}</h3>")
            parts.append(_img(heatmap_path(root, ds, slug), f"{ds}: {slug}, model × model"))
            perf = performance_path(root, ds, slug)
            if perf.is_file():
                parts.append(_img(perf, f"{ds}: {slug} similarity of each model pair against "
                                        "the gap of their linear-probe accuracies (rdx probe); "
                                        "a negative correlation: more similar models perform "
                                        "more alike."))
    parts.append(consistency_section(root, slugs))
    if run:
        probs = run.get("problems") or []
        if probs:
            parts.append("<h2>Problems</h2>" + "".join(note(p) for p in probs))
        parts.append("<h2>Run</h2>" + facts([
            ("started", esc(run.get("started", "—"))),
            ("seconds", esc(fmt(run.get("seconds"), 1))),
            ("versions", esc(", ".join(f"{k} {v}" for k, v in
                                       (run.get("versions") or {}).items())))]))
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    parts.append(f"<footer>Generated by rdx {esc(__version__)} at {esc(stamp)}.</footer>")
    return page(f"RDX similarity: {root.name}", "\n".join(parts))


def write_similarity_report(root: str | Path, *, category: str | None = "objective",
                            run: dict | None = None) -> Path:
    """Draw the figures (:func:`write_similarity_figures`) and write ``<root>/report.html``;
    returns its path. ``run``: the run's ``run.json`` (problems, timing, versions)."""
    root = Path(root)
    matrices = load_matrices(root)
    write_similarity_figures(root, matrices, category=category)
    text = render_similarity_report(root, matrices, run)
    path = root / REPORT_NAME
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))
    return path


__all__ = ["consistency_section", "heatmap_path", "load_matrices", "performance_path",
           "probe_accuracy", "render_similarity_report", "write_similarity_figures",
           "write_similarity_report"]
