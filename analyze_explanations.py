"""Analyse the explanations of a run (the original ``analyze_explanations.py``).

Reads ``outputs/<experiment>/<comparison>/`` as written by ``rdx run`` and writes figures
and tables into ``outputs/<experiment>/analysis/``:

=====================  ====================================================================
analysis               output (under ``analysis/``)
=====================  ====================================================================
``load``               nothing; prints what each comparison holds (methods, n, CKA)
``scores``             ``summary.csv`` / ``summary.json``: BSR/TSD/EQ of every method,
                       direction and dissimilarity with chance levels and known differences
``bsr``                ``BSR_{rank,MNED,LS}_boxplot.png``: BSR over comparisons per method
``stats``              ``explanation_stats.png``: BSR, chance, TSD, EQ table
``pca``                ``pca_sample_plots/<comparison>_<direction>.png``: grid images on the
                       2-D PCA of both models
``intermediates``      ``intermediate_steps_plots/<comparison>_<rdx method>_*.png``: ranks,
                       differences, difference/affinity reordered by cluster (needs
                       ``save_graphs: true``)
``clusters``           ``cluster_meta_summaries/<comparison>_cms.png``: every method's grids
``coefficients``       ``coefficient_plots/<comparison>_<method>_coeffs.png`` (+ dictionary)
``known_difference``   ``known_difference.csv`` / ``.png``: hit rates in the expected and
                       the opposite direction (comparisons declaring ``known_difference``)
=====================  ====================================================================

Two ways to use it, as in the original:

* command line, nothing to edit::

      python analyze_explanations.py --experiment mnist_835 --analysis bsr,stats,pca
      python analyze_explanations.py --experiment cub_pcbm --analysis all --paper

* or edit the block at the bottom (``if __name__ == "__main__":``), uncomment the analyses
  you want and run ``python analyze_explanations.py`` without arguments.

``--paper`` also writes every figure as PDF. Colours are fixed per method
(:func:`rdx.viz.style.method_color`), so a method looks the same in every figure.
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("MPLBACKEND", "Agg")

from rdx.errors import RDXInputError
from rdx.io import atomic_write
from rdx.paths import output_arg
from rdx.results.comparison_view import (read_comparison_view, read_summary_strips,
                                         representation_labels, require_concepts,
                                         require_graphs)
from rdx.results.store import ComparisonRun
from rdx.viz.coefficients import coefficient_heatmaps
from rdx.viz.known_difference import known_difference_plot
from rdx.viz.labels import DIRECTION_SHORT
from rdx.viz.matrices import intermediate_matrices
from rdx.viz.methods import grid_methods
from rdx.viz.pca_overlay import pca_overlay
from rdx.viz.score_figures import bsr_boxplots, explanation_stats_table
from rdx.viz.score_rows import format_number, is_finite, known_difference_rows, summary_rows
from rdx.viz.strips import cluster_summary_strips

ROOT_OUTPUT_FOLDER = "outputs"
ANALYSES = ("load", "scores", "bsr", "stats", "pca", "intermediates", "clusters",
            "coefficients", "known_difference")
DIRECTIONS = ("a_over_b", "b_over_a")


# ---------------------------------------------------------------------------- locations

def experiment_dir(experiment: str, output_root: str | Path = ROOT_OUTPUT_FOLDER) -> Path:
    """``<output_root>/<experiment>``, checked to hold at least one comparison."""
    d = Path(output_root) / experiment
    if not d.is_dir():
        have = sorted(p.name for p in Path(output_root).iterdir()
                      if p.is_dir() and p.name not in ("cache",)) \
            if Path(output_root).is_dir() else []
        raise RDXInputError(
            f"no run found in {d}: run `rdx run --config configs/{experiment}.yaml` first"
            + (f" (experiments in {output_root}: {', '.join(have)})" if have else "") + ".")
    if not comparison_dirs(d):
        raise RDXInputError(f"{d} holds no comparison (no */run.json): run "
                            f"`rdx run --config configs/{experiment}.yaml` first.")
    return d


def comparison_dirs(exp_dir: Path, only: Sequence[str] | None = None) -> list[Path]:
    """The comparison folders of an experiment (those with a ``run.json``), by name."""
    dirs = sorted(p.parent for p in Path(exp_dir).glob("*/run.json"))
    if only:
        names = [p.name for p in dirs]
        missing = [c for c in only if c not in names]
        if missing:
            raise RDXInputError(f"comparison(s) {missing} not in {exp_dir}; it has {names}.")
        dirs = [p for p in dirs if p.name in only]
    return dirs


def analysis_dir(exp_dir: Path) -> Path:
    return Path(exp_dir) / "analysis"


def _formats(paper: bool) -> tuple[str, ...]:
    return ("png", "pdf") if paper else ("png",)


def _say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------- analyses

def load_outputs(experiment: str, *, output_root: str | Path = ROOT_OUTPUT_FOLDER,
                 comparisons: Sequence[str] | None = None) -> dict[str, Any]:
    """Open every comparison of a run (its :class:`rdx.results.store.ComparisonRun`) and print
    what it holds. Returns ``{comparison name: ComparisonRun}``."""
    exp = experiment_dir(experiment, output_root)
    out = {}
    for cdir in comparison_dirs(exp, comparisons):
        loaded = ComparisonRun(cdir)
        out[cdir.name] = loaded
        docs = loaded.results()
        sims = {}
        for res in docs.values():
            sims.update(res.info.get("similarity") or {})
        reps = loaded.representations
        n = len(reps["a"]) if reps is not None else (loaded.images or {}).get("n_images")
        cka = sims.get("cka_debiased")
        _say(f"[{experiment}/{cdir.name}] n={n}, methods: {', '.join(sorted(docs)) or 'none'}"
             + (f", debiased CKA {cka:.3f}" if isinstance(cka, float) else ""))
    return out


def _fresh_summary(exp_dir: Path) -> Path | None:
    """``analysis/summary.json`` if it is newer than every result it summarises."""
    p = analysis_dir(exp_dir) / "summary.json"
    if not p.exists():
        return None
    inputs = list(exp_dir.glob("*/run.json")) + list(exp_dir.glob("*/*/explanations.json"))
    newest = max((q.stat().st_mtime_ns for q in inputs), default=0)
    return p if p.stat().st_mtime_ns >= newest else None


def scores(experiment: str, *, output_root: str | Path = ROOT_OUTPUT_FOLDER,
           n_draws: int = 1000, seed: int = 0, recompute: bool = True) -> list[dict]:
    """BSR/TSD/EQ, chance levels and known-difference scores of every comparison
    (``rdx.evaluation.summary.summarize_experiment``, which writes ``analysis/summary.csv``
    and ``summary.json``); prints the rank-dissimilarity BSR table.

    With ``recompute=False`` an ``analysis/summary.json`` newer than every result is reused
    (the other analyses do that, so that they do not redraw 1000 chance grids each).
    """
    import json

    from rdx.evaluation.summary import summarize_experiment

    exp = experiment_dir(experiment, output_root)
    cached = None if recompute else _fresh_summary(exp)
    if cached is not None:
        summaries = json.loads(cached.read_text())
        _say(f"[{experiment}] scores: reusing {cached} (--recompute to redo)")
    else:
        # stored scores are read; n_draws/seed only score results that lack them
        summaries = summarize_experiment(exp, chance_draws=n_draws, chance_seed=seed)
        _say(f"[{experiment}] scores: wrote {analysis_dir(exp) / 'summary.csv'} and .json")
        _print_bsr_table(summaries)
    return summaries


def _print_bsr_table(summaries: list[dict]) -> None:
    rows = [r for r in summary_rows(summaries) if r.get("dissimilarity") == "rank"]
    if not rows:
        return
    _say(f"  {'comparison':<28} {'method':<24} {'direction':<9} {'BSR':>6}  chance [95%]")
    for r in rows:
        ch = r.get("chance_bsr_mean")
        chance = (f"{ch:.3f} [{r.get('chance_bsr_lo', float('nan')):.3f}, "
                  f"{r.get('chance_bsr_hi', float('nan')):.3f}]") if is_finite(ch) else "–"
        bsr = f"{r['bsr']:.3f}" if is_finite(r.get("bsr")) else "–"
        _say(f"  {r.get('comparison')!s:<28} {r['method']:<24} "
             f"{DIRECTION_SHORT[r['direction']]:<9} {bsr:>6}  {chance}")


def _summaries(experiment: str, output_root, summaries):
    return summaries if summaries is not None else \
        scores(experiment, output_root=output_root, recompute=False)


def bsr_box_plots(experiment: str, *, output_root: str | Path = ROOT_OUTPUT_FOLDER,
                  paper: bool = False, summaries: list[dict] | None = None) -> list[Path]:
    """Box plots of BSR over the comparisons, one figure per dissimilarity."""
    exp = experiment_dir(experiment, output_root)
    paths = bsr_boxplots(_summaries(experiment, output_root, summaries), analysis_dir(exp),
                         paper=paper)
    _say(f"[{experiment}] BSR box plots: {', '.join(p.name for p in paths)}")
    return paths


def explanation_statistics(experiment: str, *, output_root: str | Path = ROOT_OUTPUT_FOLDER,
                           paper: bool = False,
                           summaries: list[dict] | None = None) -> list[Path]:
    """The explanation-statistics table (BSR, chance, TSD, EQ per method and direction)."""
    exp = experiment_dir(experiment, output_root)
    s = _summaries(experiment, output_root, summaries)
    paths = [explanation_stats_table(s, analysis_dir(exp) / f"explanation_stats.{fmt}")
             for fmt in _formats(paper)]
    _say(f"[{experiment}] statistics table: {paths[0]}")
    return paths


def pca_sample_plots(experiment: str, *, output_root: str | Path = ROOT_OUTPUT_FOLDER,
                     paper: bool = False, comparisons: Sequence[str] | None = None,
                     methods: Sequence[str] | None = None,
                     directions: Sequence[str] = DIRECTIONS) -> list[Path]:
    """PCA overlays of the grid images on both models, per comparison and direction."""
    exp = experiment_dir(experiment, output_root)
    out = analysis_dir(exp) / "pca_sample_plots"
    paths = []
    for cdir in comparison_dirs(exp, comparisons):
        store = ComparisonRun(cdir)
        view = read_comparison_view(store)
        docs = store.method_names()
        wanted = [m for m in methods if m in docs] if methods else None
        for d in directions:
            if not grid_methods(view, d, wanted):
                _say(f"  {cdir.name}: no grids for {d} (skipped)")
                continue
            for fmt in _formats(paper):
                paths.append(pca_overlay(view, d, out / f"{cdir.name}_{d}.{fmt}",
                                         methods=wanted))
    _say(f"[{experiment}] PCA overlays: {len(paths)} file(s) in {out}")
    return paths


def _methods_with(cdir: Path, fname: str, methods: Sequence[str] | None) -> list[str]:
    have = sorted(p.parent.name for p in cdir.glob(f"*/{fname}"))
    return [m for m in have if not methods or m in methods]


def intermediate_steps_plots(experiment: str, *, output_root: str | Path = ROOT_OUTPUT_FOLDER,
                             paper: bool = False, comparisons: Sequence[str] | None = None,
                             methods: Sequence[str] | None = None) -> list[Path]:
    """RDX's rank, difference and affinity matrices (every rdx method with ``graphs.npz``)."""
    exp = experiment_dir(experiment, output_root)
    out = analysis_dir(exp) / "intermediate_steps_plots"
    paths = []
    for cdir in comparison_dirs(exp, comparisons):
        found = _methods_with(cdir, "graphs.npz", methods)
        if not found:
            _say(f"  {cdir.name}: no graphs.npz — add `save_graphs: true` to an rdx method in "
                 "the config and re-run it (skipped)")
        for m in found:
            paths += intermediate_matrices(require_graphs(cdir, m), out, comparison=cdir.name,
                                           method=m, formats=_formats(paper))
    _say(f"[{experiment}] intermediate steps: {len(paths)} file(s) in {out}")
    return paths


def summarize_clusters(experiment: str, *, output_root: str | Path = ROOT_OUTPUT_FOLDER,
                       paper: bool = False,
                       comparisons: Sequence[str] | None = None) -> list[Path]:
    """Every method's explanation grids (both directions) side by side, per comparison."""
    exp = experiment_dir(experiment, output_root)
    out = analysis_dir(exp) / "cluster_meta_summaries"
    paths = []
    for cdir in comparison_dirs(exp, comparisons):
        store = ComparisonRun(cdir)
        view = read_comparison_view(store)
        strips = read_summary_strips(store, grid_methods(view))
        for fmt in _formats(paper):
            paths.append(cluster_summary_strips(view, strips,
                                                out / f"{cdir.name}_cms.{fmt}"))
    _say(f"[{experiment}] cluster summaries: {len(paths)} file(s) in {out}")
    return paths


def coefficient_plots(experiment: str, *, output_root: str | Path = ROOT_OUTPUT_FOLDER,
                      paper: bool = False, comparisons: Sequence[str] | None = None,
                      methods: Sequence[str] | None = None) -> list[Path]:
    """Heat maps of the concept codes (and dictionaries) of the factorisation baselines."""
    exp = experiment_dir(experiment, output_root)
    out = analysis_dir(exp) / "coefficient_plots"
    paths = []
    for cdir in comparison_dirs(exp, comparisons):
        store = ComparisonRun(cdir)
        for m in _methods_with(cdir, "concepts.npz", methods):
            concepts = require_concepts(store, m)
            if "a_codes" not in concepts and "b_codes" not in concepts:
                continue          # classification probes: predictions, no codes
            paths += coefficient_heatmaps(
                concepts, out, comparison=cdir.name, method=m,
                labels=representation_labels(store),
                class_names=(store.images or {}).get("class_names") or [],
                formats=_formats(paper))
    _say(f"[{experiment}] coefficient heat maps: {len(paths)} file(s) in {out}")
    return paths


KNOWN_DIFFERENCE_COLUMNS = ("experiment", "comparison", "method", "method_type", "direction",
                            "known_difference_type",
                            "known_difference_expected", "known_difference_hits",
                            "known_difference_total", "known_difference_rate",
                            "known_difference_score")


def known_difference_scores(experiment: str, *, output_root: str | Path = ROOT_OUTPUT_FOLDER,
                            paper: bool = False,
                            summaries: list[dict] | None = None) -> list[Path]:
    """Known-difference recovery of every method (comparisons declaring
    ``known_difference``): ``known_difference.csv`` and a bar chart of the expected vs the
    opposite direction; prints the table."""
    exp = experiment_dir(experiment, output_root)
    rows = known_difference_rows(_summaries(experiment, output_root, summaries))
    if not rows:
        _say(f"[{experiment}] known differences: no comparison declares `known_difference` "
             "in its config (skipped)")
        return []
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=KNOWN_DIFFERENCE_COLUMNS, extrasaction="ignore",
                       lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in KNOWN_DIFFERENCE_COLUMNS})
    csv_path = analysis_dir(exp) / "known_difference.csv"
    atomic_write(csv_path, lambda fh: fh.write(buf.getvalue().encode()))
    _say(f"[{experiment}] known-difference recovery ({csv_path}):")
    for r in rows:
        exp_txt = "expected" if r.get("known_difference_expected") else "opposite"
        if is_finite(r.get("known_difference_rate")):
            val = (f"{r.get('known_difference_hits')}/{r.get('known_difference_total')} = "
                   f"{r['known_difference_rate']:.2f}")
        else:
            val = format_number(r.get("known_difference_score"), ".3f")
        _say(f"  {r.get('comparison')!s:<28} {r['method']:<24} "
             f"{DIRECTION_SHORT[r['direction']]} ({exp_txt}): {val}")
    paths = [csv_path]
    for fmt in _formats(paper):
        paths.append(known_difference_plot(rows, analysis_dir(exp) /
                                           f"known_difference.{fmt}"))
    return paths


# ---------------------------------------------------------------------------- driver

def analyze_experiment(experiment: str, analyses: Sequence[str] = ANALYSES, *,
                       output_root: str | Path = ROOT_OUTPUT_FOLDER, paper: bool = False,
                       comparisons: Sequence[str] | None = None,
                       methods: Sequence[str] | None = None, n_draws: int = 1000,
                       seed: int = 0, recompute: bool = False) -> dict[str, Any]:
    """Run the named analyses (see the module docstring) on one experiment; the scores are
    computed once (or reused from a fresh ``analysis/summary.json``) and shared.

    Returns ``{analysis: its result}``.
    """
    unknown = [a for a in analyses if a not in ANALYSES]
    if unknown:
        raise RDXInputError(f"unknown analysis {unknown}; choose from {', '.join(ANALYSES)} "
                            "(or 'all').")
    exp = experiment_dir(experiment, output_root)
    # --- bad input: the analysis folder must be writable before any work -------------------
    from rdx.commands.common import check_output_dir
    check_output_dir(analysis_dir(exp), "the analysis folder", create=False)
    # ------------------------------------------------------------------------------------------
    if methods:
        have = {p.parent.name for c in comparison_dirs(exp, comparisons)
                for p in c.glob("*/explanations.json")}
        missing = [m for m in methods if m not in have]
        if missing:
            raise RDXInputError(f"--methods: {missing} not in {exp}; its methods are "
                                f"{sorted(have)}.")
    kw = {"output_root": output_root}
    results: dict[str, Any] = {}
    summaries = None
    # in the table's order (load first), each once, whatever order they were given in
    analyses = [a for a in ANALYSES if a in analyses]
    needs_scores = {"scores", "bsr", "stats", "known_difference"} & set(analyses)
    if "load" in analyses:
        results["load"] = load_outputs(experiment, comparisons=comparisons, **kw)
    if needs_scores:
        summaries = scores(experiment, n_draws=n_draws, seed=seed,
                           recompute=recompute or "scores" in analyses, **kw)
        results["scores"] = summaries
    for a in analyses:
        if a == "bsr":
            results[a] = bsr_box_plots(experiment, paper=paper, summaries=summaries, **kw)
        elif a == "stats":
            results[a] = explanation_statistics(experiment, paper=paper, summaries=summaries,
                                                **kw)
        elif a == "pca":
            results[a] = pca_sample_plots(experiment, paper=paper, comparisons=comparisons,
                                          methods=methods, **kw)
        elif a == "intermediates":
            results[a] = intermediate_steps_plots(experiment, paper=paper,
                                                  comparisons=comparisons, methods=methods, **kw)
        elif a == "clusters":
            results[a] = summarize_clusters(experiment, paper=paper, comparisons=comparisons,
                                            **kw)
        elif a == "coefficients":
            results[a] = coefficient_plots(experiment, paper=paper, comparisons=comparisons,
                                           methods=methods, **kw)
        elif a == "known_difference":
            results[a] = known_difference_scores(experiment, paper=paper, summaries=summaries,
                                                 **kw)
    return results


def _csv_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [t.strip() for t in text.split(",") if t.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="analyze_explanations.py",
        description="Figures and tables of a run's explanations, written to "
                    "<output-root>/<experiment>/analysis/.")
    p.add_argument("--experiment", required=True, metavar="NAME",
                   help="experiment name (the `experiment:` of its config; a folder of "
                        "--output-root)")
    p.add_argument("--analysis", default="all", metavar="A,B,...",
                   help=f"comma-separated, from: {', '.join(ANALYSES)}; or all (default)")
    p.add_argument("--output-root", default=ROOT_OUTPUT_FOLDER, type=output_arg,
                   help=f"where `rdx run` wrote the results (default {ROOT_OUTPUT_FOLDER})")
    p.add_argument("--paper", action="store_true", help="also write every figure as PDF")
    p.add_argument("--comparisons", metavar="C1,C2", help="only these comparisons "
                   "(figures per comparison; the score tables always cover all)")
    p.add_argument("--methods", metavar="M1,M2",
                   help="only these methods in the PCA overlays, intermediate-step and "
                        "coefficient plots")
    p.add_argument("--n-draws", type=int, default=1000,
                   help="random grids per chance level (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random chance grids")
    p.add_argument("--recompute", action="store_true",
                   help="recompute the scores even if analysis/summary.json is up to date")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = _csv_list(args.analysis) or ["all"]
    analyses = list(ANALYSES) if "all" in names else names
    import warnings

    try:
        # unreadable result files are skipped with a warning: say so in one line each
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            analyze_experiment(args.experiment, analyses, output_root=args.output_root,
                               paper=args.paper, comparisons=_csv_list(args.comparisons),
                               methods=_csv_list(args.methods), n_draws=args.n_draws,
                               seed=args.seed, recompute=args.recompute)
    except RDXInputError as exc:
        print(f"analyze_explanations.py: error: {exc}", file=sys.stderr)
        return 2
    finally:
        for w in caught:
            if issubclass(w.category, UserWarning):
                print(f"analyze_explanations.py: warning: {w.message}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main())
    # No arguments: the original workflow — set the experiment, uncomment what you want.
    EXPERIMENT = "quickstart_fashion"          # e.g. mnist_835, mnist_modifications, cub_pcbm
    PAPER = False                              # True: also PDF
    try:
        load_outputs(EXPERIMENT)
        summaries = scores(EXPERIMENT, recompute=False)
        bsr_box_plots(EXPERIMENT, paper=PAPER, summaries=summaries)
        explanation_statistics(EXPERIMENT, paper=PAPER, summaries=summaries)
        pca_sample_plots(EXPERIMENT, paper=PAPER)
        # intermediate_steps_plots(EXPERIMENT, paper=PAPER)   # needs save_graphs: true
        summarize_clusters(EXPERIMENT, paper=PAPER)
        # coefficient_plots(EXPERIMENT, paper=PAPER)
        known_difference_scores(EXPERIMENT, paper=PAPER, summaries=summaries)
        # analyze_experiment("mnist_modifications")          # everything for one experiment
        # analyze_experiment("cub_pcbm", paper=True)
    except RDXInputError as exc:
        print(f"analyze_explanations.py: error: {exc}", file=sys.stderr)
        sys.exit(2)
