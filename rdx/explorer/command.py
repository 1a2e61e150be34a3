"""``rdx explore``: write the interactive explorer page of a comparison."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..errors import RDXInputError
from ..flags import add_deprecated_alias, finite_float, seed_int
from .page import MAX_BYTES   # not from .build: --help must not import torch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("comparison_dir", type=Path,
                        help="a comparison folder outputs/<experiment>/<comparison> (or a folder "
                             "of pair folders over the same images, e.g. layer pairs)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output file (default: COMPARISON_DIR/explore.html)")
    parser.add_argument("--embedding", choices=("auto", "knn_layout", "aligned_umap", "pca"),
                        default="auto",
                        help="2-D maps: knn_layout (rdx's aligned UMAP-style layout, a few "
                             "seconds), aligned_umap (umap-learn's AlignedUMAP, the authors' "
                             "viewer's settings, about a minute) or pca (default %(default)s: "
                             "knn_layout, PCA below 20 images)")
    parser.add_argument("--n-neighbors", type=int, default=12, metavar="K",
                        help="neighbours listed per image in each group: nearest in A, "
                             "nearest in B, RDX neighbours (default %(default)s)")
    # the first spelling; --k reads as explanations elsewhere (rdx explain)
    add_deprecated_alias(parser, "--k", "--n-neighbors", "n_neighbors", type=int)
    parser.add_argument("--neighborhood-size", type=int, default=None,
                        help="images per neighbourhood of the ranking (default: the RDX "
                             "method's grid_size, 9)")
    parser.add_argument("--thumb-size", default="auto",
                        help="thumbnail pixels, or auto: the largest of 96..32 that fits "
                             "--max-mb (default %(default)s)")
    parser.add_argument("--max-mb", type=finite_float, default=MAX_BYTES / 1e6,
                        help="size budget of the page in MB (default %(default)g)")
    parser.add_argument("--selection-mb", type=finite_float, default=6.0,
                        help="share of --max-mb for the pairs' n×n difference matrices, "
                             "which give the mean affinities of a box or lasso selection "
                             "(about n² bytes per pair; default %(default)g)")
    parser.add_argument("--seed", type=seed_int, default=None,
                        help="seed of the embedding (default: the run's seed)")
    parser.add_argument("--graph-method", default=None,
                        help="RDX method whose graph gives the neighbour values and ranking "
                             "(default: the first RDX method)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


#: build_explorer's parameters → the flags of rdx explore that set them.
_FLAGS = {"k": "--n-neighbors", "neighborhood_size": "--neighborhood-size",
          "thumb_size": "--thumb-size", "seed": "--seed", "embedding": "--embedding",
          "graph_method": "--graph-method"}


def run_command(args: argparse.Namespace) -> int:
    from ..progress import working
    from ..validation import flag_names

    # said before the heavy imports (the build imports torch), and kept alive: on a busy
    # machine they alone take several seconds
    with working(f"explorer: reading {args.comparison_dir}", show=not args.quiet):
        from .build import build_explorer

    thumb = args.thumb_size
    if thumb != "auto":
        try:
            thumb = int(thumb)
        except ValueError:
            raise RDXInputError(f"--thumb-size {thumb!r}: use 'auto' or a number of pixels."
                                ) from None
    if not args.max_mb > 0:
        raise RDXInputError(f"--max-mb {args.max_mb}: use a positive size in MB.")
    if not args.selection_mb >= 0:
        raise RDXInputError(f"--selection-mb {args.selection_mb}: use a size in MB (0: none).")
    t = time.perf_counter()
    # the build checks its parameters under their Python names: named here as the flags
    with flag_names(_FLAGS):
        path = build_explorer(args.comparison_dir, args.out, embedding=args.embedding,
                              k=args.n_neighbors,
                              neighborhood_size=args.neighborhood_size, thumb_size=thumb,
                              max_bytes=int(args.max_mb * 1e6), seed=args.seed,
                              graph_method=args.graph_method, progress=not args.quiet,
                              selection_bytes=int(args.selection_mb * 1e6))
    if not args.quiet:
        size = path.stat().st_size / 1e6
        print(f"explorer: {path} ({size:.1f} MB, {time.perf_counter() - t:.1f} s)")
    _link_from_study(args.comparison_dir, path, quiet=args.quiet)
    return 0


def _link_from_study(comp_dir: Path, page: Path, *, quiet: bool) -> None:
    """The explorer of a layer-wise study's pairs (``<study>/pairs/explore.html``): rewrite
    the study's report so that it links to it (its pair reports are left as they are)."""
    study = Path(comp_dir).parent
    if Path(comp_dir).name != "pairs" or page != Path(comp_dir) / "explore.html" \
            or not (study / "layers.json").is_file() or not (study / "report.html").is_file():
        return
    from ..report.layers import write_layers_report

    try:
        report = write_layers_report(study, pair_reports=False)
    except Exception as exc:  # noqa: BLE001 - the explorer is written; only the link is missing
        print(f"rdx explore: warning: the study's report {study / 'report.html'} could not be "
              f"updated with a link to the explorer ({exc}).")
        return
    if not quiet:
        print(f"report: {report} (links to the explorer)")
