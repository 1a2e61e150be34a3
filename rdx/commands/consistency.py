#!/usr/bin/env python
"""Consistency of representational similarity across datasets: tables and plots.

    rdx consistency --root outputs/similarity/models_embedded__datasets_embedded
    rdx consistency --models configs/similarity/models_paper.yaml \\
        --datasets configs/similarity/datasets_paper.yaml --paper-anchors

Reads the matrices written by ``rdx matrix`` (``<root>/matrices/<dataset>/
<measure>.npz|.json``). For every measure and every pair set ``P`` (all model pairs; each
``A × B`` of the values of ``--category``, within and across; each anchor model against all
others and against each category value) it computes ``r_P(D, D')`` — the Pearson and
Spearman correlation of the upper-triangle entries of two datasets' matrices restricted to
``P`` — for all dataset pairs (see :mod:`rdx.similarity.consistency`).

Writes under ``--out`` (default ``<root>/consistency``), per measure ``<slug>/``:

    consistency.csv            one row per (pair set, dataset pair): r (both), n_pairs
    summary.csv                per pair set: median, quartiles, mean, Fisher-z mean, ...
    dataset_consistency.csv    the dataset × dataset matrix C_DD' for all pairs (--correlation)
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

Exit status: 0 done; 2 bad input (e.g. no matrices, fewer than 2 datasets or 3 models).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from rdx.errors import RDXInputError
from rdx.flags import add_deprecated_alias
from rdx.paths import output_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``rdx consistency``."""
    p.description = __doc__.split("\n\n")[0]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--root", help="the folder rdx matrix wrote (its --out)")
    p.add_argument("--models", help="models YAML (with --datasets: derives the default root; "
                                    "its categories override those stored in the matrices)")
    p.add_argument("--datasets", help="datasets YAML (see --models)")
    p.add_argument("--measure", dest="measures", action="append", metavar="SLUG",
                   help="a measure slug (file name under matrices/<dataset>/); repeatable "
                        "(default: all)")
    # the first spelling (one flag, several values), still accepted
    add_deprecated_alias(p, "--measures", "--measure", "measures", nargs="+", extend=True)
    p.add_argument("--only-datasets", nargs="+", metavar="ID", help="datasets to compare")
    p.add_argument("--category", nargs="+", default=["objective"],
                   help="model categories defining the pair sets (default: objective)")
    p.add_argument("--anchors", nargs="+", default=[], metavar="ID",
                   help="anchor models: each one's similarity to all others forms a pair set "
                        "(default: none)")
    p.add_argument("--paper-anchors", action="store_true",
                   help="add the paper's 8 anchor models (those present)")
    p.add_argument("--correlation", dest="method", default="pearson",
                   choices=("pearson", "spearman"),
                   help="correlation for the summary, box plots and C_DD' (both are in the "
                        "tables; default pearson, as the paper)")
    # the first spelling; --method names an explanation method in rdx explain
    add_deprecated_alias(p, "--method", "--correlation", "method",
                         choices=("pearson", "spearman"))
    p.add_argument("--min-pairs", type=int, default=3,
                   help="leave out pair sets with fewer model pairs (default 3)")
    p.add_argument("--probes", default="auto",
                   help="linear-probe results for the similarity-vs-performance tables and "
                        "plots: 'auto' (<root>/probes if present; default), 'none', or a "
                        "probes folder (rdx probe writes <root>/probes)")
    p.add_argument("--out", type=output_arg, help="output folder (default <root>/consistency)")
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _write_csv(path: Path, rows: list[dict]) -> None:
    from rdx.studies.similarity import write_csv

    write_csv(path, rows)


def load_matrices(root: Path, datasets: list[str] | None):
    """slug → {dataset: SimilarityMatrix} for every matrix file under ``root/matrices``."""
    from rdx.similarity.matrix import SimilarityMatrix

    base = root / "matrices"
    if not base.is_dir():
        raise RDXInputError(f"no matrices under {base}; run scripts/similarity_matrix.py first "
                            "(or pass --root / --models and --datasets).")
    out: dict[str, dict] = {}
    for ds_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        if datasets and ds_dir.name not in datasets:
            continue
        for js in sorted(ds_dir.glob("*.json")):
            out.setdefault(js.stem, {})[ds_dir.name] = SimilarityMatrix.load(js)
    return out


def _dataset_order(root: Path, found: list[str]) -> list[str]:
    """Datasets in the order of the run (run.json), else alphabetical."""
    try:
        run = json.loads((root / "run.json").read_text())
        order = [r["dataset"] for r in run.get("matrices", []) if "dataset" in r]
    except (OSError, ValueError):
        order = []
    seen = [d for i, d in enumerate(order) if d in found and d not in order[:i]]
    return seen + sorted(d for d in found if d not in seen)


def load_probe_accuracy(folder: Path) -> dict[str, dict[str, float]]:
    """dataset → {model: mean test top-1} from ``rdx probe`` records."""
    from rdx.report.similarity import probe_accuracy

    return probe_accuracy(folder)


# --------------------------------------------------------------------------- plots

def plot_boxplot(path: Path, per_set: list[tuple[str, list[float]]], all_values: list[float],
                 method: str, title: str) -> None:
    """:func:`rdx.viz.consistency.consistency_boxplot_figure`, written atomically (nothing
    when no pair set has a finite value)."""
    from rdx.viz.save import save_figure
    from rdx.viz.consistency import consistency_boxplot_figure

    fig = consistency_boxplot_figure(per_set, all_values, method, title)
    if fig is not None:
        save_figure(fig, path, dpi=120)


def plot_matrices(path: Path, matrices: dict[str, np.ndarray], ids: list[str],
                  groups: dict[str, str] | None, title: str, higher: bool) -> None:
    """:func:`rdx.viz.consistency.aligned_matrices_figure`, written atomically."""
    from rdx.viz.save import save_figure
    from rdx.viz.consistency import aligned_matrices_figure

    save_figure(aligned_matrices_figure(matrices, ids, groups, title, higher), path, dpi=120)


def plot_dataset_consistency(path: Path, C: np.ndarray, names: list[str], title: str) -> None:
    """:func:`rdx.viz.consistency.dataset_consistency_figure`, written atomically."""
    from rdx.viz.save import save_figure
    from rdx.viz.consistency import dataset_consistency_figure

    save_figure(dataset_consistency_figure(C, names, title), path, dpi=120)


def plot_similarity_vs_performance(path: Path, S: np.ndarray, ids: list[str],
                                   accuracy: dict[str, float], *, slug: str, dataset: str,
                                   higher: bool, groups: dict[str, str] | None,
                                   correlations: dict[str, float]) -> None:
    """Every model pair of one dataset: similarity against the gap of the two models'
    probe accuracies (:func:`rdx.viz.similarity.similarity_vs_performance_figure`)."""
    from rdx.viz.save import save_figure
    from rdx.viz.similarity import similarity_vs_performance_figure

    acc = {k: v for k, v in accuracy.items() if k in ids}
    save_figure(similarity_vs_performance_figure(
        S, ids, acc, measure=slug, dataset=dataset, higher_is_more_similar=higher,
        groups=groups, correlations=correlations), path)


# --------------------------------------------------------------------------- main

def analyse_measure(slug: str, mats: dict, dataset_order: list[str], args, categories_override,
                    probe_acc, out_dir: Path, say) -> dict:
    from rdx.io import write_json_atomic
    from rdx.similarity.consistency import (PAPER_ANCHORS, align_matrices, consistency_table,
                                            dataset_consistency_matrix,
                                            similarity_performance_correlation,
                                            standard_pair_sets, summarize)

    names = [d for d in dataset_order if d in mats]
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
    missing = [c for c in args.category if c not in cats]
    if missing:
        raise RDXInputError(f"categories {missing} are not known for these models; known: "
                            f"{sorted(cats)} (give --models to read them from a config).")
    chosen = {c: {m: v for m, v in cats[c].items() if m in ids} for c in args.category}
    anchors = list(args.anchors) + (list(PAPER_ANCHORS) if args.paper_anchors else [])
    unknown = [a for a in args.anchors if a not in ids]
    if unknown:
        raise RDXInputError(f"anchors {unknown} are not among the models {ids}.")
    sets = standard_pair_sets(ids, chosen, anchors=anchors, min_pairs=args.min_pairs)

    rows, summary, per_set = [], [], []
    for ps in sets:
        table = consistency_table(aligned, ps.pairs)
        vals = [r[args.method] for r in table]
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
    C, cnames = dataset_consistency_matrix(aligned, None, args.method)

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
    _write_csv(out_dir / "consistency.csv", rows)
    _write_csv(out_dir / "summary.csv", summary)
    _write_csv(out_dir / "dataset_consistency.csv",
               [{"dataset": n, **{m: C[i, j] for j, m in enumerate(cnames)}}
                for i, n in enumerate(cnames)])
    if perf_rows:
        _write_csv(out_dir / "similarity_vs_performance.csv", perf_rows)
    doc = {"measure": first.measure, "params": first.params, "slug": slug,
           "method": args.method, "model_ids": ids, "datasets": names,
           "categories": chosen, "anchors": [a for a in anchors if a in ids],
           "min_pairs": args.min_pairs,
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
    if not args.no_plots:
        allv = next((v for n, v in per_set if n == "all"), [])
        plot_boxplot(out_dir / "consistency_boxplot.png", per_set, allv, args.method,
                     f"{slug}: consistency across {len(names)} datasets, {len(ids)} models")
        grp = chosen.get(args.category[0]) if args.category else None
        plot_matrices(out_dir / "matrices.png", aligned, ids, grp, slug,
                      first.higher_is_more_similar)
        plot_dataset_consistency(out_dir / "dataset_consistency.png", C, cnames,
                                 f"{slug}: dataset × dataset consistency (all pairs, "
                                 f"{args.method})")
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


def run_command(args: argparse.Namespace) -> int:
    """``rdx consistency``: bad input raises :class:`RDXInputError` (exit status 2)."""
    say = (lambda *a, **k: None) if args.quiet else print
    categories_override = None
    if args.root:
        root = Path(args.root)
    elif args.models and args.datasets:
        from rdx.commands.similarity_jobs import default_root
        root = default_root(args.models, args.datasets)
    else:
        raise RDXInputError("give --root (the output root of scripts/similarity_matrix.py) or "
                            "both --models and --datasets.")
    if args.models:
        from rdx.studies.similarity import categories_of, load_models_config
        categories_override = categories_of(load_models_config(args.models)[0])
    if args.min_pairs < 2:
        raise RDXInputError("--min-pairs must be at least 2.")
    # --- output check: before any work (a file there, a path under a file, no rights) ---
    from rdx.commands.common import check_output_dir
    given = args.out is not None
    check_output_dir(args.out if given else root / "consistency",
                     "--out" if given else "the output folder <root>/consistency", create=False)
    # --- end output check ---
    found = load_matrices(root, args.only_datasets)
    if not found:
        raise RDXInputError(f"no matrix files under {root / 'matrices'}.")
    slugs = args.measures or sorted(found)
    unknown = [s for s in slugs if s not in found]
    if unknown:
        raise RDXInputError(f"no matrices for measures {unknown}; found {sorted(found)}.")
    datasets = sorted({d for s in slugs for d in found[s]})
    order = _dataset_order(root, datasets)
    probe_acc = {}
    if args.probes != "none":
        folder = root / "probes" if args.probes == "auto" else Path(args.probes)
        if folder.is_dir():
            probe_acc = load_probe_accuracy(folder)
        elif args.probes != "auto":
            raise RDXInputError(f"probe folder {folder} does not exist.")
    out = Path(args.out) if args.out is not None else root / "consistency"
    for slug in slugs:
        say(f"{slug}:")
        analyse_measure(slug, found[slug], order, args, categories_override, probe_acc,
                        out / slug, say)
    say(f"→ {out}")
    if out == root / "consistency":
        # the matrix report of this root links the results it reads from there
        from rdx.commands.matrix import refresh_report

        refresh_report(root, command="rdx consistency", quiet=args.quiet)
    return 0

