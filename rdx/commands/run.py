"""``rdx run --config configs/<experiment>.yaml``: every comparison of an experiment
config (resumable), then the summary table, the report and the explorer."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..flags import add_device_flag
from ..paths import output_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="configs/<experiment>.yaml")
    p.add_argument("--only", help="run just this comparison (by name; default: all)")
    p.add_argument("--output-root", default="outputs", metavar="DIR", type=output_arg,
                   help="folder that receives DIR/<experiment>/<comparison>/ (default "
                        "%(default)s); a root, not the output folder itself")
    add_device_flag(p, what="where models and methods run")
    p.add_argument("--executor", default="local", choices=["local", "submitit-local", "slurm"],
                   help="local: in this process (default %(default)s); submitit-local / slurm: "
                        "one job per comparison through submitit (resumable; same outputs)")
    p.add_argument("--force", action="store_true", help="re-run methods that are done")
    p.add_argument("--check", action="store_true",
                   help="only validate the config and check that every input exists")
    p.add_argument("--allow-unaligned", action="store_true",
                   help="compare features files (representations: {features: ...}) even when "
                        "their rows do not look like the same images in the same order "
                        "(normally refused: different image ids, or no more shared nearest "
                        "neighbours than rows paired at random, or rows shifted by one to "
                        "three)")
    p.add_argument("--no-report", action="store_true",
                   help="skip the summary table, HTML report and explorer written at the end")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars or messages (warnings and errors still show)")


def run_command(args: argparse.Namespace) -> int:
    from ..experiments import run_experiment
    from .common import check_output_dir

    if not args.check:
        # only checked: a run refused later (config, inputs, overlap) leaves nothing behind
        check_output_dir(args.output_root, "--output-root", create=False)
    outs = run_experiment(args.config, only=args.only, output_root=args.output_root,
                          device=args.device, progress=not args.quiet, force=args.force,
                          check_only=args.check, executor=args.executor,
                          allow_unaligned=args.allow_unaligned)
    if args.check and not args.quiet:
        print(f"{args.config}: config valid, all datasets, checkpoints and features present")
    if not args.quiet:
        for o in outs:
            print(f"results: {o}")
    if outs and not args.no_report:
        write_reports(outs, quiet=args.quiet)
    return 0


def write_reports(outs: list, *, quiet: bool = False) -> None:
    """Each comparison's explorer, then the experiment's report (which links to them); a
    failure here costs only that page: the results are complete."""
    from ..experiments.run import comparison_lock
    from ..explorer import build_explorer
    from ..io import environment_error
    from ..report import write_experiment_report

    for o in outs:
        try:
            # under the comparison's lock: another config's run finishing at the same time
            # must not replace this page with one made before its own methods were done
            with comparison_lock(Path(o)):
                path = build_explorer(o, progress=not quiet)
        except Exception as exc:  # noqa: BLE001 - the results are safe; only the page failed
            if environment_error(exc):
                raise   # a full disk, quota, read-only folder: exit 2, never a warning
            print(f"rdx run: warning: the explorer of {o} could not be written ({exc}); "
                  f"retry with `rdx explore {o}`.", file=sys.stderr)
        else:
            if not quiet:
                print(f"explorer: {path}")
    try:
        index = write_experiment_report(outs[0].parent)
    except Exception as exc:  # noqa: BLE001
        if environment_error(exc):
            raise   # a full disk, quota, read-only folder: exit 2, never a warning
        print(f"rdx run: warning: the report could not be written ({exc}); the results are "
              f"complete — retry with `rdx report {outs[0].parent}`.", file=sys.stderr)
        return
    if not quiet:
        print(f"report: {index}")
