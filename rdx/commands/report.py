"""``rdx report outputs/<experiment>``: the summary table and the static HTML report of a
finished run (scores are read from the results, not recomputed)."""
from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment_dir",
                   help="outputs/<experiment>: writes its index.html, every comparison's "
                        "report.html and analysis/summary.csv|json")
    p.add_argument("--quiet", action="store_true", help="print nothing but warnings")


def run_command(args: argparse.Namespace) -> int:
    import warnings
    from pathlib import Path

    from ..paths import check_output_dir
    from ..report import write_experiment_report

    if Path(args.experiment_dir).is_dir():   # (a missing one: the report says what to run)
        # the report is written into the run's folder: a read-only one is refused up front
        check_output_dir(args.experiment_dir, "experiment_dir", create=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = write_experiment_report(args.experiment_dir)
    for w in caught:   # unreadable files: the report shows them as notes, and so do we
        print(f"rdx report: warning: {w.message}", file=sys.stderr)
    if not args.quiet:
        print(f"report: {path}")
    return 0
