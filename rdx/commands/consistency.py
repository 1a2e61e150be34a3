#!/usr/bin/env python
"""Consistency of representational similarity across datasets: tables and plots.

    rdx consistency --root outputs/similarity/models_embedded__datasets_embedded
    rdx consistency --models configs/similarity/models_paper.yaml \\
        --datasets configs/similarity/datasets_paper.yaml --paper-anchors

The command parses its flags and calls
:func:`rdx.studies.similarity.consistency_study.consistency`, whose module says what is
read (the matrices of ``rdx matrix``), what is computed (for every measure and pair set,
the correlation of two datasets' matrices over all dataset pairs) and what is written
under ``--out`` (default ``<root>/consistency``).

Exit status: 0 done; 2 bad input (e.g. no matrices, fewer than 2 datasets or 3 models).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rdx.errors import RDXInputError
from rdx.flags import add_deprecated_alias
from rdx.paths import output_arg
# the functions, for scripts that import them from here (scripts/consistency.py)
from rdx.studies.similarity.consistency_study import (analyse_measure,  # noqa: F401
                                                      consistency, dataset_order,
                                                      default_root, load_matrices,
                                                      probe_accuracy)


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


def run_command(args: argparse.Namespace) -> int:
    """``rdx consistency``: bad input raises :class:`RDXInputError` (exit status 2)."""
    from rdx.paths import check_output_dir

    categories_override = None
    if args.root:
        root = Path(args.root)
    elif args.models and args.datasets:
        root = default_root(args.models, args.datasets)
    else:
        raise RDXInputError("give --root (the output root of rdx matrix) or both --models "
                            "and --datasets.")
    if args.models:
        from rdx.studies.similarity import categories_of, load_models_config
        categories_override = categories_of(load_models_config(args.models)[0])
    if args.min_pairs < 2:
        raise RDXInputError("--min-pairs must be at least 2.")
    # before any work (a file there, a path under a file, no rights)
    given = args.out is not None
    out = Path(args.out) if given else root / "consistency"
    check_output_dir(out, "--out" if given else "the output folder <root>/consistency",
                     create=False)
    consistency(root, out=out, measures=args.measures, datasets=args.only_datasets,
                categories=args.category, categories_override=categories_override,
                anchors=args.anchors, paper_anchors=args.paper_anchors, method=args.method,
                min_pairs=args.min_pairs, probes=args.probes, plots=not args.no_plots,
                say=(lambda *a, **k: None) if args.quiet else print)
    if not args.quiet:
        print(f"→ {out}")
    if out == root / "consistency":
        # the matrix report of this root links the results it reads from there
        from rdx.commands.matrix import refresh_report

        refresh_report(root, command="rdx consistency", quiet=args.quiet)
    return 0
