"""``rdx benchmark``: the known-difference benchmark with seed-twin controls
(:mod:`rdx.studies.benchmark`)."""
from __future__ import annotations

import argparse

from ..paths import output_arg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rdx benchmark``."""
    from ..studies.benchmark.cases import CASES

    parser.add_argument("--out", default="outputs/benchmark", type=output_arg,
                        help="output folder (default: outputs/benchmark)")
    parser.add_argument("--suite", choices=("default", "quick", "paper"), default=None,
                        help="default: 5 cases, 1200 images each, every method; quick: the "
                             "CI-sized subset (2 cases, half the images, rdx/kmeans/pca); "
                             "paper: the paper's 5000 images per comparison, RDX against "
                             "the SAEs and crosscoders")
    parser.add_argument("--quick", action="store_true", help="the same as --suite quick")
    parser.add_argument("--cases", help=f"comma-separated cases ({', '.join(CASES)})")
    parser.add_argument("--methods", help="comma-separated methods (default: the suite's)")
    parser.add_argument("--n-null", type=int, default=None,
                        help="null draws of every assessed method (default: the suite's)")
    parser.add_argument("--checkpoints", default="checkpoints/benchmark", type=output_arg,
                        help="model cache (default: checkpoints/benchmark)")
    parser.add_argument("--data-root", default="data", help="dataset root (default: data)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def _split(text: str | None, flag: str) -> list[str] | None:
    """``a,b`` → ``["a", "b"]``; None when the option was not given. A value that names
    nothing (``--cases ""``, an unset shell variable) is refused: taken as "not given" it
    started the whole suite, minutes of training the user did not ask for."""
    if text is None:
        return None
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        from ..errors import RDXInputError

        raise RDXInputError(f"{flag} {text!r} names nothing; give comma-separated names or "
                            "leave the option out for the suite's.")
    return names


def run_command(args: argparse.Namespace) -> int:
    """``rdx benchmark``: run the suite; bad input raises RDXInputError (exit 2)."""
    from ..paths import check_output_dir
    from ..studies.benchmark import run_benchmark

    # both folders are written (results; trained models): a file there, a path under a
    # file or no right to write is refused before the first model trains, not after it
    check_output_dir(args.out, "--out", create=False)
    check_output_dir(args.checkpoints, "--checkpoints", create=False)
    cases, methods = _split(args.cases, "--cases"), _split(args.methods, "--methods")
    if args.quick and args.suite not in (None, "quick"):
        from ..errors import RDXInputError

        raise RDXInputError(f"--quick is --suite quick; it cannot be combined with "
                            f"--suite {args.suite}.")
    suite = "quick" if args.quick else (args.suite or "default")
    doc = run_benchmark(args.out, suite=suite, cases=cases, methods=methods,
                        n_null=args.n_null, checkpoints=args.checkpoints,
                        data_root=args.data_root, progress=not args.quiet)
    from ..report.benchmark import write_benchmark_report

    # report.html, like the other commands' reports (the study itself knows no page)
    write_benchmark_report(args.out, doc)
    return 0
