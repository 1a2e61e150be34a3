"""Consistency of representational similarity across datasets: tables and plots.

:func:`consistency` is what ``rdx consistency`` runs. It reads the matrices written by ``rdx matrix`` (``<root>/matrices/<dataset>/
<measure>.npz|.json``). For every measure and every pair set ``P`` (all model pairs; each
``A × B`` of the values of ``--category``, within and across; each anchor model against all
others and against each category value) it computes ``r_P(D, D')`` — the Pearson and
Spearman correlation of the upper-triangle entries of two datasets' matrices restricted to
``P`` — for all dataset pairs (see :mod:`rdx.similarity.consistency`).

Writes under ``out`` (default ``<root>/consistency``), per measure ``<slug>/``:

    consistency.csv            one row per (pair set, dataset pair): r (both), n_pairs
    summary.csv                per pair set: median, quartiles, mean, Fisher-z mean, ...
    dataset_consistency.csv    the dataset × dataset matrix C_DD' for all pairs (``method``)
    similarity_vs_performance.csv   per dataset: corr(S_ab, |acc_a − acc_b|) when linear
                               probe results exist (``rdx probe``) for ≥ 3 of its models
    similarity_vs_performance_<dataset>.png   the same as a plot: every model pair, its
                               similarity S_ab (x) against the gap of the two models'
                               probe top-1 accuracies |acc_a − acc_b| (y), Spearman and
                               Pearson r in the title; a negative r: more similar
                               representations, more similar performance
    consistency.json           everything above plus the inputs' metadata
    consistency_boxplot.png    distributions over dataset pairs per pair set, sorted by
                               median; grey band = IQR of all pairs
    matrices.png               every dataset's model × model matrix
    dataset_consistency.png    C_DD' heatmap
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ...errors import RDXInputError
from .tables import write_csv

#: The model category whose values define the default pair sets.
DEFAULT_CATEGORIES = ["objective"]


def default_root(models_path: str | Path, datasets_path: str | Path) -> Path:
    """``outputs/similarity/<models>__<datasets>``: where ``rdx matrix`` writes by default."""
    return Path("outputs/similarity") / f"{Path(models_path).stem}__{Path(datasets_path).stem}"


def probe_accuracy(folder: str | Path) -> dict[str, dict[str, float]]:
    """``{dataset: {model: mean test top-1}}`` of the finished ``rdx probe`` records in
    ``folder`` (``<root>/probes``); empty when there are none."""
    acc: dict[str, dict[str, float]] = {}
    for js in sorted(Path(folder).glob("*/*.json")):
        try:
            rec = json.loads(js.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("status") == "done" and rec.get("top1") is not None:
            acc.setdefault(rec["dataset"], {})[rec["model"]] = float(rec["top1"])
    return acc


def load_matrices(root: Path, datasets: list[str] | None):
    """slug → {dataset: SimilarityMatrix} for every matrix file under ``root/matrices``."""
    from rdx.similarity.matrix import SimilarityMatrix

    base = root / "matrices"
    if not base.is_dir():
        raise RDXInputError(f"no matrices under {base}; run `rdx matrix` first (its --out is "
                            "the root).")
    out: dict[str, dict] = {}
    for ds_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        if datasets and ds_dir.name not in datasets:
            continue
        for js in sorted(ds_dir.glob("*.json")):
            out.setdefault(js.stem, {})[ds_dir.name] = SimilarityMatrix.load(js)
    return out


def dataset_order(root: Path, found: list[str]) -> list[str]:
    """Datasets in the order of the run (run.json), else alphabetical."""
    try:
        run = json.loads((root / "run.json").read_text())
        order = [r["dataset"] for r in run.get("matrices", []) if "dataset" in r]
    except (OSError, ValueError):
        order = []
    seen = [d for i, d in enumerate(order) if d in found and d not in order[:i]]
    return seen + sorted(d for d in found if d not in seen)


# --------------------------------------------------------------------------- plots

def plot_boxplot(path: Path, per_set: list[tuple[str, list[float]]], all_values: list[float],
                 method: str, title: str) -> None:
    """:func:`rdx.viz.consistency.consistency_boxplot_figure`, written atomically (nothing
    when no pair set has a finite value)."""
    from ...viz.save import save_figure
    from ...viz.consistency import consistency_boxplot_figure

    fig = consistency_boxplot_figure(per_set, all_values, method, title)
    if fig is not None:
        save_figure(fig, path, dpi=120)


def plot_matrices(path: Path, matrices: dict[str, np.ndarray], ids: list[str],
                  groups: dict[str, str] | None, title: str, higher: bool) -> None:
    """:func:`rdx.viz.consistency.aligned_matrices_figure`, written atomically."""
    from ...viz.save import save_figure
    from ...viz.consistency import aligned_matrices_figure

    save_figure(aligned_matrices_figure(matrices, ids, groups, title, higher), path, dpi=120)


def plot_dataset_consistency(path: Path, C: np.ndarray, names: list[str], title: str) -> None:
    """:func:`rdx.viz.consistency.dataset_consistency_figure`, written atomically."""
    from ...viz.save import save_figure
    from ...viz.consistency import dataset_consistency_figure

    save_figure(dataset_consistency_figure(C, names, title), path, dpi=120)


def plot_similarity_vs_performance(path: Path, S: np.ndarray, ids: list[str],
                                   accuracy: dict[str, float], *, slug: str, dataset: str,
                                   higher: bool, groups: dict[str, str] | None,
                                   correlations: dict[str, float]) -> None:
    """Every model pair of one dataset: similarity against the gap of the two models'
    probe accuracies (:func:`rdx.viz.similarity.similarity_vs_performance_figure`)."""
    from ...viz.save import save_figure
    from ...viz.similarity import similarity_vs_performance_figure

    acc = {k: v for k, v in accuracy.items() if k in ids}
    save_figure(similarity_vs_performance_figure(
        S, ids, acc, measure=slug, dataset=dataset, higher_is_more_similar=higher,
        groups=groups, correlations=correlations), path)


# --------------------------------------------------------------------------- analysis

def analyse_measure(slug: str, mats: dict, order: list[str], *, out_dir: Path,
                    categories: list[str] = DEFAULT_CATEGORIES,
                    categories_override: dict | None = None, anchors: list[str] = (),
                    paper_anchors: bool = False, method: str = "pearson",
                    min_pairs: int = 3, probe_acc: dict | None = None, plots: bool = True,
                    say: Callable[[str], None] = print) -> dict:
    """One measure's consistency across datasets: tables, plots and ``consistency.json``
    in ``out_dir`` (see the module docstring); returns the JSON document."""
    from ...io import write_json_atomic
    from ...similarity.consistency import (PAPER_ANCHORS, align_matrices, consistency_table,
                                            dataset_consistency_matrix,
                                            similarity_performance_correlation,
                                            standard_pair_sets, summarize)

    probe_acc = probe_acc or {}
    names = [d for d in order if d in mats]
    if len(names) < 2:
        raise RDXInputError(f"measure {slug}: matrices for {len(names)} dataset(s) "
                            f"({names}); consistency needs at least 2.")
    first = mats[names[0]]
    aligned, ids = align_matrices({d: (mats[d].values, mats[d].model_ids) for d in names},
                                  order=first.model_ids)
    cats: dict[str, dict[str, str]] = {}
    for d in names:
        for c, g in (mats[d].meta.get("categories") or {}).items():
            cats.setdefault(c, {}).update(g)
    if categories_override:
        cats.update(categories_override)
    missing = [c for c in categories if c not in cats]
    if missing:
        raise RDXInputError(f"categories {missing} are not known for these models; known: "
                            f"{sorted(cats)} (give --models to read them from a config).")
    chosen = {c: {m: v for m, v in cats[c].items() if m in ids} for c in categories}
    unknown = [a for a in anchors if a not in ids]   # the paper's: only those present
    anchors = list(anchors) + (list(PAPER_ANCHORS) if paper_anchors else [])
    if unknown:
        raise RDXInputError(f"anchors {unknown} are not among the models {ids}.")
    sets = standard_pair_sets(ids, chosen, anchors=anchors, min_pairs=min_pairs)

    rows, summary, per_set = [], [], []
    for ps in sets:
        table = consistency_table(aligned, ps.pairs)
        vals = [r[method] for r in table]
        per_set.append((ps.name, vals))
        s = summarize(vals)
        summary.append({"pair_set": ps.name, "kind": ps.kind, "n_model_pairs": len(ps.pairs),
                        "n_dataset_pairs": len(table), **{f"{k}": v for k, v in s.items()},
                        **ps.info})
        for r in table:
            rows.append({"pair_set": ps.name, "kind": ps.kind,
                         **{k: ps.info.get(k) for k in ("category", "group_a", "group_b",
                                                         "anchor")},
                         "dataset_a": r["dataset_a"], "dataset_b": r["dataset_b"],
                         "n_pairs": r["n_pairs"], "pearson": r["pearson"],
                         "spearman": r["spearman"]})
    C, cnames = dataset_consistency_matrix(aligned, None, method)

    perf_rows = []
    for d in names:
        acc = probe_acc.get(d) or {}
        if len(acc) < 3:
            continue
        r_s, n_s = similarity_performance_correlation(aligned[d], ids, acc, method="spearman")
        r_p, _ = similarity_performance_correlation(aligned[d], ids, acc, method="pearson")
        perf_rows.append({"dataset": d, "domain": mats[d].meta.get("domain"), "spearman": r_s,
                          "pearson": r_p, "n_pairs": n_s})

    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "consistency.csv", rows)
    write_csv(out_dir / "summary.csv", summary)
    write_csv(out_dir / "dataset_consistency.csv",
               [{"dataset": n, **{m: C[i, j] for j, m in enumerate(cnames)}}
                for i, n in enumerate(cnames)])
    if perf_rows:
        write_csv(out_dir / "similarity_vs_performance.csv", perf_rows)
    doc = {"measure": first.measure, "params": first.params, "slug": slug,
           "method": method, "model_ids": ids, "datasets": names,
           "categories": chosen, "anchors": [a for a in anchors if a in ids],
           "min_pairs": min_pairs,
           "inputs": {d: {"n_images": mats[d].n_images, "normalize": mats[d].normalize,
                          "domain": mats[d].meta.get("domain"),
                          "subset": mats[d].meta.get("subset"),
                          "errors": mats[d].errors} for d in names},
           "pair_sets": [{"name": ps.name, "kind": ps.kind, **ps.info,
                          "pairs": [[ids[i], ids[j]] for i, j in ps.pairs]} for ps in sets],
           "summary": summary, "consistency": rows,
           "dataset_consistency": {"datasets": cnames, "matrix": C},
           "similarity_vs_performance": perf_rows}
    write_json_atomic(out_dir / "consistency.json", doc)
    if plots:
        allv = next((v for n, v in per_set if n == "all"), [])
        plot_boxplot(out_dir / "consistency_boxplot.png", per_set, allv, method,
                     f"{slug}: consistency across {len(names)} datasets, {len(ids)} models")
        grp = chosen.get(categories[0]) if categories else None
        plot_matrices(out_dir / "matrices.png", aligned, ids, grp, slug,
                      first.higher_is_more_similar)
        plot_dataset_consistency(out_dir / "dataset_consistency.png", C, cnames,
                                 f"{slug}: dataset × dataset consistency (all pairs, "
                                 f"{method})")
        for row in (r for r in perf_rows if r["n_pairs"] >= 2):
            plot_similarity_vs_performance(
                out_dir / f"similarity_vs_performance_{row['dataset']}.png", aligned[
                    row["dataset"]], ids, probe_acc[row["dataset"]], slug=slug,
                dataset=row["dataset"], higher=first.higher_is_more_similar, groups=grp,
                correlations={"spearman": row["spearman"], "pearson": row["pearson"]})
    for s in summary:
        med = s["median"]
        say(f"  {s['pair_set']:45s} pairs={s['n_model_pairs']:4d} median r="
            + ("   n/a" if med is None else f"{med:6.3f}")
            + ("" if s["q1"] is None else f"  IQR [{s['q1']:.3f}, {s['q3']:.3f}]"))
    return doc


def consistency(root: str | Path, *, out: str | Path | None = None,
                measures: Sequence[str] | None = None, datasets: Sequence[str] | None = None,
                categories: Sequence[str] = DEFAULT_CATEGORIES,
                categories_override: dict | None = None, anchors: Sequence[str] = (),
                paper_anchors: bool = False, method: str = "pearson", min_pairs: int = 3,
                probes: str | Path = "auto", plots: bool = True,
                say: Callable[[str], None] = print) -> dict[str, dict]:
    """The consistency of every measure's model × model matrices across datasets.

    Parameters
    ----------
    root : path
        The folder ``rdx matrix`` wrote (``<root>/matrices/<dataset>/<measure>.json``).
    out : path, optional
        Output folder (default ``<root>/consistency``), one subfolder per measure.
    measures, datasets : optional
        Measure slugs and dataset ids to use (default: every one found).
    categories : list of str, default=["objective"]
        Model categories whose values define the pair sets.
    categories_override : dict, optional
        ``{category: {model: value}}`` replacing those stored in the matrices (a models
        config's, :func:`rdx.studies.similarity.categories_of`).
    anchors : list of str
        Anchor models: each one's similarity to all others forms a pair set.
    paper_anchors : bool
        Add the paper's anchor models that are present.
    method : {"pearson", "spearman"}
        Correlation of the summary, box plots and C_DD' (both are in the tables).
    min_pairs : int, default=3
        Leave out pair sets with fewer model pairs (at least 2).
    probes : "auto", "none" or a folder
        Linear-probe results (``rdx probe``) for the similarity-vs-performance tables.
    plots : bool
        Draw the figures (False: tables only).
    say : callable
        Where the per-measure summary lines go (``print``; a no-op to be quiet).

    Returns
    -------
    dict
        ``{slug: consistency.json's document}``.
    """
    root = Path(root)
    if isinstance(min_pairs, bool) or not isinstance(min_pairs, int) or min_pairs < 2:
        raise RDXInputError(f"min_pairs must be an integer ≥ 2, got {min_pairs!r}.")
    if method not in ("pearson", "spearman"):
        raise RDXInputError(f"method must be 'pearson' or 'spearman', got {method!r}.")
    found = load_matrices(root, list(datasets) if datasets else None)
    if not found:
        raise RDXInputError(f"no matrix files under {root / 'matrices'}.")
    slugs = list(measures) if measures else sorted(found)
    unknown = [s for s in slugs if s not in found]
    if unknown:
        raise RDXInputError(f"no matrices for measures {unknown}; found {sorted(found)}.")
    order = dataset_order(root, sorted({d for s in slugs for d in found[s]}))
    probe_acc: dict = {}
    if str(probes) != "none":
        folder = root / "probes" if str(probes) == "auto" else Path(probes)
        if folder.is_dir():
            probe_acc = probe_accuracy(folder)
        elif str(probes) != "auto":
            raise RDXInputError(f"probe folder {folder} does not exist.")
    out = Path(out) if out is not None else root / "consistency"
    docs = {}
    for slug in slugs:
        say(f"{slug}:")
        docs[slug] = analyse_measure(
            slug, found[slug], order, out_dir=out / slug, categories=list(categories),
            categories_override=categories_override, anchors=list(anchors),
            paper_anchors=paper_anchors, method=method, min_pairs=min_pairs,
            probe_acc=probe_acc, plots=plots, say=say)
    return docs


__all__ = ["DEFAULT_CATEGORIES", "analyse_measure", "consistency", "dataset_order",
           "default_root", "load_matrices", "probe_accuracy"]
