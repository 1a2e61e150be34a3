"""``rdx similarity A.npy B.npy``: how similar two representations are (CKA, RSA, k-NN,
Procrustes, SVCCA), optionally with a permutation p-value and a resampling interval."""
from __future__ import annotations

import argparse

from ..errors import RDXInputError
from ..flags import add_deprecated_alias, finite_float, seed_int
from ..progress import format_seconds, status, working
from .common import check_output_file, output_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..similarity.names import (COMPARE_METHODS, CONVENTIONS, MEASURE_NAMES, RDM_METHODS,
                                    SIGMA_MODES, SVCCA_AVERAGES)

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "conventions (docs/guide/similarity.md relates them to other packages):\n" + \
        "\n".join(_wrap(f"{name}: {text}") for name, text in CONVENTIONS.items())

    p.add_argument("A", help="representation A: .npy, or .npz (FILE.npz:KEY picks an array), n×d")
    p.add_argument("B", help="representation B: .npy or .npz[:KEY], n×d' (same images)")
    p.add_argument("--measure", action="append", choices=sorted(MEASURE_NAMES), metavar="NAME",
                   help="repeatable; default: all of " + ", ".join(MEASURE_NAMES))
    p.add_argument("--permutations", type=int, default=0,
                   help="shuffles of the image correspondence for a p-value (default 0)")
    p.add_argument("--bootstrap", type=int, default=0,
                   help="resamples of the images (random halves for CKA, Procrustes and "
                        "SVCCA) for a 95%% interval (default 0)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--sigma", type=finite_float, help="cka_rbf bandwidth (see --sigma-mode)")
    p.add_argument("--sigma-mode", choices=SIGMA_MODES,
                   help="cka_rbf: absolute σ, or σ = sigma × median distance")
    p.add_argument("--rdm", choices=RDM_METHODS, help="rsa: RDM dissimilarity")
    p.add_argument("--compare", choices=COMPARE_METHODS, help="rsa: RDM comparison")
    p.add_argument("--svcca-average", choices=SVCCA_AVERAGES,
                   help="svcca: mean of the canonical correlations over min(r_X, r_Y) "
                        "(default) or over sqrt(r_X r_Y) (geometric)")
    p.add_argument("--n-neighbors", dest="knn", type=int, metavar="K",
                   help="mutual_knn, cknna, jaccard_knn: neighbours per image (default 10)")
    # the first spelling (every command says --n-neighbors for neighbours per image)
    add_deprecated_alias(p, "--knn", "--n-neighbors", "knn", type=int)
    p.add_argument("--out", type=output_arg, help="also write the scores to this JSON file")
    p.add_argument("--allow-identical", action="store_true",
                   help="score A against itself anyway (normally refused)")
    p.add_argument("--allow-unaligned", action="store_true",
                   help="score A and B even when their rows do not look like the same images "
                        "in the same order (normally refused: different image ids in rdx "
                        "features files, no more shared nearest neighbours than rows paired "
                        "at random, or rows shifted by one to three)")
    p.add_argument("--quiet", action="store_true",
                   help="no estimate, status lines or progress bars (the scores only)")


def _wrap(text: str) -> str:
    import textwrap

    return textwrap.fill(text, width=88, initial_indent="  ", subsequent_indent="      ",
                         break_on_hyphens=False)


#: The measures' parameters → the flags of rdx similarity that set them.
_FLAGS = {"k": "--n-neighbors", "sigma": "--sigma", "sigma_mode": "--sigma-mode",
          "rdm": "--rdm", "compare": "--compare", "average": "--svcca-average"}


def run_command(args: argparse.Namespace) -> int:
    from ..validation import flag_names

    # a measure checks its parameters under their own names (k, sigma): named as the flags
    with flag_names(_FLAGS):
        return _run_command(args)


def _run_command(args: argparse.Namespace) -> int:
    from .. import validation as V
    from ..backend import format_bytes
    from ..io import load_array, write_json_atomic
    from ..similarity import MEASURES, calibrate
    from ..similarity.resources import check_draws, check_memory, estimate_seconds

    out = None if args.out is None else check_output_file(args.out, inputs=[args.A, args.B])
    for flag, value in (("--permutations", args.permutations), ("--bootstrap", args.bootstrap)):
        if value < 0:
            raise RDXInputError(f"{flag} must be 0 or a positive number of draws, got {value}.")
    A, B = load_array(args.A, "A"), load_array(args.B, "B")
    if not args.allow_identical:
        V.check_not_identical(A, B, hint=" Pass --allow-identical to score them anyway.")
    options = {"sigma": args.sigma, "sigma_mode": args.sigma_mode, "rdm": args.rdm,
               "compare": args.compare, "k": args.knn, "average": args.svcca_average}
    names = args.measure or list(MEASURES)
    kws = {name: {k: v for k, v in options.items()
                  if v is not None and k in MEASURES[name].params} for name in names}
    draws = {"permutations": args.permutations, "bootstrap": args.bootstrap}
    # every measure's memory first: nothing is computed when one of them cannot fit
    if A.ndim == 2 and B.ndim == 2 and len(A) == len(B):
        (n, p), q = A.shape, B.shape[1]
        need = {name: check_memory(name, n, p, q, **draws, **kws[name]) for name in names}
        # and every measure's time: a draw count that cannot finish is refused, by its flag
        for name in names:
            check_draws(name, n, p, q, **draws, options=("--permutations", "--bootstrap"),
                        **kws[name])
    else:
        need = {}
    from ..method.row_check import check_same_rows, rows_scope

    with rows_scope():   # the rows of this command's inputs, checked once
        check_same_rows([(("A", A, args.A), ("B", B, args.B))],
                        allow_unaligned=args.allow_unaligned, hint="Pass --allow-unaligned "
                        "to score them anyway.")
    show = not args.quiet
    what = "".join(f", {v} {k}" for k, v in draws.items() if v)
    secs = {name: estimate_seconds(name, n, p, q, **draws, **kws[name])
            for name in need} if show else {}
    if secs and (any(draws.values()) or sum(secs.values()) > 5):
        # before any work: the user decides now whether to wait (the estimate is rough,
        # within a factor of about 3, from this machine's measured GEMM and sort rates)
        status(f"similarity: {len(names)} measure(s) on n = {n} images{what} — about "
               f"{format_seconds(sum(secs.values()))} (estimate)", show=show)
    scores = {}
    for name in names:
        line = name
        if name in secs:
            line += f": about {format_seconds(secs[name])} (estimate)"
            if len(A) >= 2000:
                line += f", {format_bytes(need[name])} of memory"
        with working(line, show=show):   # the permutation and bootstrap bars show inside
            scores[name] = calibrate(name, A, B, **draws, seed=args.seed, progress=show,
                                     **kws[name])
    doc = {"n_images": int(len(A)), "scores": scores}
    for name, c in scores.items():
        extra = ""
        if c.get("ci95"):
            extra += f"  95% CI [{c['ci95'][0]:.4f}, {c['ci95'][1]:.4f}]"
        if c.get("p_value") is not None:
            extra += f"  p = {c['p_value']:.4g}"
        arrow = "↑" if c["higher_is_more_similar"] else "↓"
        print(f"{name:>18} {arrow} {c['value']:.4f}{extra}")
    if out is not None:
        print(f"written: {write_json_atomic(out, doc)}")
    return 0

