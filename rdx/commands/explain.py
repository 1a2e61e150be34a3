"""``rdx explain A.npy B.npy --out DIR``: one method on two representations.

RDX (default) or any registered method (``--method``); the result is scored once (BSR under
the three dissimilarities with the chance level of random grids) and written to
``DIR/explanations.json`` (+ ``concepts.npz``, ``graphs.npz``, ``grids/`` with ``--images``).
Everything that can be checked — inputs, parameters, the output folder — is checked before
the fit.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from .common import check_output_dir, parse_params

DIRECTION_MEANING = {"a_over_b": "close in A, far in B", "b_over_a": "close in B, far in A"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..experiments.methods import method_names

    p.add_argument("A", nargs="?", help="representation A: .npy, or .npz (FILE.npz:KEY picks "
                                        "an array), n×d")
    p.add_argument("B", nargs="?", help="representation B: .npy or .npz[:KEY], n×d' (same "
                                        "images, same order)")
    p.add_argument("--example", choices=["digits"],
                   help="use the embedded example instead of A and B (no download)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--method", default="rdx", choices=method_names(), metavar="NAME",
                   help="rdx (default) or another registered method: "
                        + ", ".join(m for m in method_names() if m != "rdx"))
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter of a non-RDX method (value parsed as YAML, e.g. "
                        "--param n_epochs=50); repeatable")
    p.add_argument("--align", choices=["0to1", "1to0"],
                   help="baselines: replace A (0to1) or B (1to0) by its CKA-aligned linear map "
                        "into the other model's space")
    p.add_argument("--k", type=int, default=3,
                   help="explanations per direction (n_explanations; default %(default)s)")
    p.add_argument("--gamma", type=float, default=None, help="γ (default: gamma-scale / n)")
    p.add_argument("--gamma-scale", type=float, default=80.0, help="default %(default)s")
    p.add_argument("--beta", type=float, default=5.0, help="default %(default)s")
    p.add_argument("--seed", type=int, default=42, help="default %(default)s")
    p.add_argument("--similarity", default="neighborhood",
                   choices=["neighborhood", "max_normalized_distance", "zp_local_scaling"],
                   help="default %(default)s")
    p.add_argument("--difference", default="locally_biased",
                   choices=["locally_biased", "standard"], help="default %(default)s")
    p.add_argument("--normalize-diff", choices=["auto", "true", "false"], default="auto",
                   help="divide the difference by its largest |value| (auto: only for "
                        "--difference standard)")
    p.add_argument("--clustering", default="spectral",
                   choices=["spectral", "pagerank", "eigenvector_centrality"],
                   help="default %(default)s")
    p.add_argument("--grid-strategy", default="maximize_total_neighborhood_affinity",
                   help="how grid images are picked (default %(default)s)")
    p.add_argument("--grid-size", type=int, default=9, help="default %(default)s")
    p.add_argument("--labels", help="class label per image (.npy, integers), for --guidance")
    p.add_argument("--guidance", help="use labels or probe predictions to neutralise pairs "
                                      "of different classes (e.g. ground_truth, classifier)")
    p.add_argument("--variant", choices=["paper", "v2"], default="paper",
                   help="paper (default) or v2: neighbour ranks symmetrised before the "
                        "difference, weak clusters filtered into the no-change group")
    p.add_argument("--filter-threshold", type=_auto_float, default="auto", metavar="X|none",
                   help="clusters with mean affinity below X join the no-change group "
                        "(auto: 1.1 for v2, none for paper)")
    p.add_argument("--symmetrize-ranks", choices=["auto", "none", "mean", "min", "max"],
                   default="auto", help="how each model's ranks are symmetrised (auto: the "
                                        "variant's; v2: mean)")
    p.add_argument("--guidance-scale", type=_auto_float, default="auto", metavar="S",
                   help="cross-group entries of guided graphs become S·(n−1) (auto: 5 paper, "
                        "10 v2)")
    p.add_argument("--label-grids", action="store_true",
                   help="caption grid images with both models' predictions and the true class "
                        "(needs --labels)")
    p.add_argument("--graph", choices=["dense", "knn"], default="dense",
                   help="dense (exact, two n×n matrices) or knn (large-n mode: nothing n×n)")
    p.add_argument("--n-neighbors", type=int, default=200, metavar="K",
                   help="K of --graph knn (default %(default)s)")
    p.add_argument("--images", help="images (.npy: n×H×W, n×H×W×3 or n×3×H×W) to draw grids")
    p.add_argument("--save-graphs", action="store_true",
                   help="also write DIR/graphs.npz with the n×n matrices (large)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="default %(default)s")
    p.add_argument("--allow-identical", action="store_true",
                   help="compare A with itself anyway (normally refused: the result is trivial)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def _auto_float(text: str) -> Any:
    """``auto``, ``none`` or a number (argparse type)."""
    if text in ("auto", "none"):
        return None if text == "none" else "auto"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, 'auto' or 'none', got {text!r}") \
            from None


def _rdx_params(args: argparse.Namespace) -> dict[str, Any]:
    if args.param or args.align:
        raise RDXInputError("--param and --align are for the other methods; RDX has its own "
                            "flags (see rdx explain --help).")
    normalize = {"auto": None, "true": True, "false": False}[args.normalize_diff]
    params = {"n_explanations": args.k, "gamma": args.gamma, "gamma_scale": args.gamma_scale,
              "beta": args.beta, "similarity": args.similarity, "difference": args.difference,
              "normalize_diff": normalize, "clustering": args.clustering,
              "grid_strategy": args.grid_strategy, "grid_size": args.grid_size,
              "guidance": args.guidance, "variant": args.variant,
              "filter_threshold": args.filter_threshold,
              "symmetrize_ranks": None if args.symmetrize_ranks == "none" else args.symmetrize_ranks,
              "guidance_scale": args.guidance_scale, "label_grids": args.label_grids}
    if args.graph != "dense":
        params.update(graph=args.graph, n_neighbors=args.n_neighbors)
    if args.save_graphs:
        params["save_graphs"] = True
    return params


def _method_params(args: argparse.Namespace) -> dict[str, Any]:
    params = parse_params(args.param)
    if args.method not in ("cka", "classification", "similarity"):
        params.setdefault("n_explanations", args.k)
        params.setdefault("grid_size", args.grid_size)
    if args.align:
        params["align_representations"] = (True if args.method in ("cka", "classification")
                                           else args.align)
    return params


def run_command(args: argparse.Namespace) -> int:
    from .. import _validation as V
    from .._backend import seeded
    from ..evaluation.scoring import Scorer
    from ..experiments.methods import MethodContext, method
    from ..experiments.run import save_result_grids
    from ..io import load_array, write_json_atomic
    from ..results.store import write_method_result

    labels = images = info = None
    if args.example:
        if args.A or args.B:
            raise RDXInputError("give either --example or the two representation files, not both.")
        from ..examples import EXAMPLES
        ex = EXAMPLES[args.example]()
        A, B, labels, images, info = ex.A, ex.B, ex.labels, ex.images, ex.info
    else:
        if not (args.A and args.B):
            raise RDXInputError("give two representation files A.npy B.npy (or --example digits).")
        A, B = load_array(args.A, "A"), load_array(args.B, "B")
    if args.labels:
        labels = load_array(args.labels, "labels")
    if args.images:
        images = load_array(args.images, "images")
    if args.guidance and labels is None:
        raise RDXInputError(f"--guidance {args.guidance} needs --labels y.npy.")
    if args.label_grids and labels is None:
        raise RDXInputError("--label-grids needs --labels y.npy (the true class under each image).")
    # everything that can be checked is checked before the (possibly long) fit
    A, B = V.as_representation(A, "A"), V.as_representation(B, "B")
    V.check_pair(A, B)
    if not args.allow_identical:
        V.check_not_identical(A, B, hint=" Pass --allow-identical to compare them anyway.")
    n = len(A)
    if labels is not None:
        labels = V.check_labels(labels, n, "--labels")
    if images is not None:
        images = np.asarray(images)
        if images.ndim not in (3, 4) or len(images) != n:
            raise RDXInputError(
                f"--images has shape {images.shape}; expected one image per row of A "
                f"({n}), as n×H×W, n×H×W×3 or n×3×H×W.")
    m = method(args.method)
    params = _rdx_params(args) if args.method == "rdx" else _method_params(args)
    if args.method == "classification" and labels is None:
        raise RDXInputError("--method classification trains probes on class labels; give "
                            "--labels y.npy (or --example digits).")
    m.validate(params, f"--method {args.method}")
    out = check_output_dir(args.out, "--out")
    if not args.quiet and info is not None:
        print(f"example: {info.get('description', args.example)}")

    t0 = time.perf_counter()
    alignment = None
    wanted = getattr(m, "alignment_params", lambda p: None)(params)
    if wanted is not None:
        from ..method.alignment import align_pair
        alignment = align_pair(A, B, seed=args.seed, device=args.device, **wanted)
    with seeded(args.seed):
        result = m.run(A, B, params, MethodContext(labels=labels, seed=args.seed,
                                                   device=args.device, alignment=alignment,
                                                   progress=not args.quiet))
    Scorer(A, B, labels=labels).score(result)
    grids = save_result_grids(result, images, out) if images is not None else []
    path = write_method_result(out, result, extra_files=grids)
    if info is not None:
        write_json_atomic(out / "example.json", info)
    if not args.quiet:
        print_summary(result, labels, time.perf_counter() - t0, path)
    return 0


def _grid_labels(labels: np.ndarray | None, grid: list[int]) -> str:
    if labels is None:
        return ""
    vals, counts = np.unique(np.asarray(labels)[grid], return_counts=True)
    return "  grid labels " + ",".join(f"{v}×{c}" for v, c in zip(vals, counts))


def _bsr_text(result: Any, direction: str) -> str:
    rank = (result.scores or {}).get("rank") or {}
    bsr = (rank.get(direction) or {}).get("bsr")
    if bsr is None:
        return "BSR —"
    ch = (((result.scores or {}).get("chance") or {}).get(direction) or {}).get("rank") or {}
    text = f"BSR {bsr:.3f}"
    if ch.get("bsr_mean") is not None:
        text += (f" (chance {ch['bsr_mean']:.3f} [{ch['bsr_lo']:.3f}, {ch['bsr_hi']:.3f}]"
                 + (", above" if bsr > ch["bsr_hi"] else "") + ")")
    return text


def print_summary(result: Any, labels: np.ndarray | None, seconds: float, path: Path) -> None:
    """What a user reads after ``rdx explain``: per direction BSR against chance and each
    explanation (weak ones flagged)."""
    p = result.params
    head = f"{result.method} on n={result.n_images} images in {seconds:.1f} s"
    if result.method == "rdx":
        head += f" (γ={p['gamma_resolved']:.4g}, β={p['beta']})"
    print(head)
    for key in ("similarity", "agreement"):
        for name, v in (result.info.get(key) or {}).items():
            print(f"  {name}: {v:.4f}")
    for name, v in (result.info.get("probe") or {}).items():
        print(f"  probe accuracy {name}: {v['accuracy']:.4f}")
    for d, r in result.directions.items():
        what = DIRECTION_MEANING[d] if result.method == "rdx" else \
            f"concepts of model {d[0].upper()}"
        extra = (f"; no-change group {len(r.null_members)} images"
                 if r.null_members is not None else "")
        filt = r.extra.get("filter") or {}
        if filt.get("n_filtered"):
            extra += (f"; {filt['n_filtered']} weak cluster(s) filtered (mean affinity < "
                      f"{filt['threshold']})")
        print(f"  {d} ({what}): {_bsr_text(result, d)}{extra}")
        for i, e in enumerate(r.explanations, start=1):
            desc = (f"{len(e.members)} members" if e.members is not None
                    else f"concept {e.concept}")
            if e.mean_affinity is not None:
                desc += f", mean affinity {e.mean_affinity:.2f}"
            if e.low_affinity:
                desc += "  [weak: below null_threshold]"
            print(f"    #{i}: {desc}{_grid_labels(labels, e.images)}")
    bsr = result.bsr
    if bsr and bsr.get("mean") is not None:
        print(f"  mean BSR {bsr['mean']:.3f}")
    print(f"  results: {path}")
