"""Command line: ``rdx explain ...`` (also ``python -m rdx explain ...``).

Bad input exits with status 2 and a one-paragraph message on stderr (no traceback).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from ._validation import check_labels
from .errors import RDXInputError


def _explain_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain", help="difference explanations of two representations",
        description="Find groups of images that are close in one representation and far in the "
                    "other (both directions); write DIR/explanations.json.")
    p.add_argument("A", nargs="?", help="representation A: .npy or .npz (first array), n×d")
    p.add_argument("B", nargs="?", help="representation B: .npy or .npz, n×d' (same images)")
    p.add_argument("--example", choices=["digits"],
                   help="use the embedded example instead of A and B (no download)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--method", default="rdx", metavar="NAME",
                   help="rdx (default) or a baseline: kmeans, pca, nmf, cnmf, sae, topk_sae, "
                        "usae, nlmcd, spec; or cka, classification (no grids)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter of a non-RDX method (value parsed as YAML, e.g. "
                        "--param n_epochs=50 --param max_iter=200); repeatable")
    p.add_argument("--align", choices=["0to1", "1to0"],
                   help="baselines: replace A (0to1) or B (1to0) by its CKA-aligned linear map "
                        "into the other model's space (spec §2)")
    p.add_argument("--k", type=int, default=3, help="explanations per direction (default 3)")
    p.add_argument("--gamma", type=float, default=None, help="γ (default: gamma-scale / n)")
    p.add_argument("--gamma-scale", type=float, default=80.0)
    p.add_argument("--beta", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--similarity", default="neighborhood",
                   choices=["neighborhood", "max_normalized_distance", "zp_local_scaling"])
    p.add_argument("--difference", default="locally_biased", choices=["locally_biased", "standard"])
    p.add_argument("--clustering", default="spectral",
                   choices=["spectral", "pagerank", "eigenvector_centrality"])
    p.add_argument("--grid-strategy", default="maximize_total_neighborhood_affinity",
                   choices=["maximize_total_neighborhood_affinity", "centroid", "max_affinity",
                            "random"])
    p.add_argument("--grid-size", type=int, default=9)
    p.add_argument("--labels", help="class label per image (.npy), for --guidance")
    p.add_argument("--guidance", choices=["ground_truth", "classifier"])
    p.add_argument("--images", help="images (.npy: n×H×W, n×H×W×3 or n×3×H×W) to draw grids")
    p.add_argument("--save-graphs", action="store_true",
                   help="also write DIR/graphs.npz with the n×n matrices (large)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def _run_explain(args: argparse.Namespace) -> int:
    from .io import load_array
    from .method.estimator import RDX

    labels = images = None
    info = None
    if args.example:
        if args.A or args.B:
            raise RDXInputError("give either --example or the two representation files, not both.")
        from .examples import EXAMPLES
        ex = EXAMPLES[args.example]()
        A, B, labels, images, info = ex.A, ex.B, ex.labels, ex.images, ex.info
        if not args.quiet:
            print(f"example: {ex.description}")
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
    # check everything that can be checked before the (possibly long) fit
    n = len(A) if np.ndim(A) else 0
    if labels is not None:
        labels = check_labels(labels, n, "--labels")
    if images is not None:
        images = np.asarray(images)
        if images.ndim not in (3, 4) or len(images) != n:
            raise RDXInputError(
                f"--images has shape {images.shape}; expected one image per row of A "
                f"({n}), as n×H×W, n×H×W×3 or n×3×H×W.")
    if args.method != "rdx":
        return _run_method(args, A, B, labels, images, info)
    if args.param or args.align:
        raise RDXInputError("--param and --align are for the other methods; RDX has its own "
                            "flags (see rdx explain --help).")
    model = RDX(n_explanations=args.k, gamma=args.gamma, gamma_scale=args.gamma_scale,
                beta=args.beta, similarity=args.similarity, difference=args.difference,
                clustering=args.clustering, grid_strategy=args.grid_strategy,
                grid_size=args.grid_size, guidance=args.guidance, random_state=args.seed,
                device=args.device, keep_graphs=args.save_graphs, verbose=0 if args.quiet else 1)
    t0 = time.perf_counter()
    model.fit(A, B, labels=labels if args.guidance else None)
    out = Path(args.out)
    doc = model.to_dict()
    path = model.save(out, save_graphs=args.save_graphs, doc=doc)
    _write_extras(doc, images, info, out)
    if not args.quiet:
        _print_summary(doc, labels, time.perf_counter() - t0, path)
    return 0


def _write_extras(doc: dict, images, info, out: Path) -> None:
    """Grids (when images were given) and the example's description."""
    from .io import write_json_atomic

    if images is not None:
        from .viz.grids import save_direction_grids
        for d, r in doc["directions"].items():
            save_direction_grids(np.asarray(images), r["explanations"], out / "grids", d)
    if info is not None:
        write_json_atomic(out / "example.json", info)


def _parse_params(items: list[str]) -> dict:
    import yaml

    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RDXInputError(f"--param {item!r}: expected KEY=VALUE, e.g. --param n_epochs=50")
        params[key.strip()] = yaml.safe_load(value)
    return params


def _run_method(args: argparse.Namespace, A, B, labels, images, info) -> int:
    """A baseline, ``cka`` or ``classification`` through the runner's method registry."""
    from .experiments.methods import MethodContext, method, save_method_outputs

    m = method(args.method)
    params = _parse_params(args.param)
    if args.method not in ("cka", "classification"):
        params.setdefault("n_explanations", args.k)
        params.setdefault("grid_size", args.grid_size)
    if args.align:
        params["align_representations"] = (True if args.method in ("cka", "classification")
                                           else args.align)
    if args.method == "classification" and labels is None:
        raise RDXInputError("--method classification trains probes on class labels; give "
                            "--labels y.npy (or --example digits).")
    m.validate(params, f"--method {args.method}")
    alignment = None
    wanted = getattr(m, "alignment_params", lambda p: None)(params)
    if wanted is not None:
        from .method.alignment import align_pair
        alignment = align_pair(A, B, seed=args.seed, device=args.device, **wanted)
    from ._backend import seed_everything
    seed_everything(args.seed)
    t0 = time.perf_counter()
    doc = m.run(A, B, params, MethodContext(labels=labels, seed=args.seed, device=args.device,
                                            alignment=alignment, progress=not args.quiet))
    out = Path(args.out)
    path = save_method_outputs(doc, out)
    _write_extras(doc, images, info, out)
    if not args.quiet:
        _print_method_summary(doc, labels, time.perf_counter() - t0, path)
    return 0


def _grid_labels(labels, grid) -> str:
    if labels is None:
        return ""
    vals, counts = np.unique(np.asarray(labels)[grid], return_counts=True)
    return "  grid labels " + ",".join(f"{v}×{c}" for v, c in zip(vals, counts))


def _print_method_summary(doc: dict, labels, seconds: float, path: Path) -> None:
    print(f"{doc['method']} on n={doc['n_images']} images in {seconds:.1f} s")
    for key in ("similarity", "agreement"):
        for name, v in doc.get(key, {}).items():
            print(f"  {name}: {v:.4f}")
    for name, v in doc.get("probe", {}).items():
        print(f"  probe accuracy {name}: {v['accuracy']:.4f}")
    for d, r in doc["directions"].items():
        print(f"  {d} (concepts of model {d[0].upper()}): BSR {doc['bsr'][d]:.3f}")
        for i, e in enumerate(r["explanations"], start=1):
            print(f"    #{i}: concept {e.get('concept', '?')}{_grid_labels(labels, e['images'])}")
    if doc["directions"]:
        print(f"  mean BSR {doc['bsr']['mean']:.3f}")
    print(f"  results: {path}")


def _print_summary(doc: dict, labels, seconds: float, path: Path) -> None:
    print(f"RDX on n={doc['n_images']} images in {seconds:.1f} s "
          f"(γ={doc['params']['gamma_resolved']:.4g}, β={doc['params']['beta']})")
    names = {"a_over_b": "close in A, far in B", "b_over_a": "close in B, far in A"}
    for d, r in doc["directions"].items():
        print(f"  {d} ({names[d]}): BSR {doc['bsr'][d]:.3f}; no-change group "
              f"{len(r['null_members'])} images")
        for i, e in enumerate(r["explanations"], start=1):
            extra = _grid_labels(labels, e["images"])
            print(f"    #{i}: {len(e['members'])} members, mean affinity "
                  f"{e['mean_affinity']:.2f}{extra}")
    print(f"  mean BSR {doc['bsr']['mean']:.3f}; results: {path}")


def _run_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run an experiment config (all comparisons, resumable)",
        description="Select images, extract (cached) features and run every method of a YAML "
                    "experiment config; finished methods are skipped on a re-run.")
    p.add_argument("--config", required=True, help="configs/<experiment>.yaml")
    p.add_argument("--only", help="run just this comparison (by name)")
    p.add_argument("--output-root", default="outputs")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--force", action="store_true", help="re-run methods that are done")
    p.add_argument("--check", action="store_true",
                   help="only validate the config and check that every input exists")
    p.add_argument("--no-report", action="store_true",
                   help="skip the summary table and HTML report written at the end")
    p.add_argument("--quiet", action="store_true")


def _similarity_parser(sub: argparse._SubParsersAction) -> None:
    from .similarity import MEASURES, RDM_METHODS, SIGMA_MODES

    p = sub.add_parser(
        "similarity", help="how similar are two representations (CKA, RSA, k-NN, ...)",
        description="Similarity measures of two representations of the same images, optionally "
                    "with a permutation p-value and a bootstrap 95 %% interval.")
    p.add_argument("A", help="representation A: .npy or .npz (first array), n×d")
    p.add_argument("B", help="representation B: .npy or .npz, n×d' (same images)")
    p.add_argument("--measure", action="append", choices=sorted(MEASURES), metavar="NAME",
                   help="repeatable; default: all of " + ", ".join(MEASURES))
    p.add_argument("--permutations", type=int, default=0,
                   help="shuffles of the image correspondence for a p-value (default 0)")
    p.add_argument("--bootstrap", type=int, default=0,
                   help="resamples of the images (random halves for CKA, Procrustes and "
                        "SVCCA) for a 95%% interval (default 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sigma", type=float, help="cka_rbf bandwidth (see --sigma-mode)")
    p.add_argument("--sigma-mode", choices=SIGMA_MODES,
                   help="cka_rbf: absolute σ, or σ = sigma × median distance")
    p.add_argument("--rdm", choices=RDM_METHODS, help="rsa: RDM dissimilarity")
    p.add_argument("--compare", choices=("spearman", "pearson"), help="rsa: RDM comparison")
    p.add_argument("--knn", type=int, help="mutual_knn, cknna, jaccard_knn: k (default 10)")
    p.add_argument("--out", help="also write the scores to this JSON file")


def _run_similarity(args: argparse.Namespace) -> int:
    from .io import load_array, write_json_atomic
    from .similarity import MEASURES, calibrate

    A, B = load_array(args.A, "A"), load_array(args.B, "B")
    options = {"sigma": args.sigma, "sigma_mode": args.sigma_mode, "rdm": args.rdm,
               "compare": args.compare, "k": args.knn}
    scores = {}
    for name in args.measure or list(MEASURES):
        kw = {k: v for k, v in options.items() if v is not None and k in MEASURES[name].params}
        scores[name] = calibrate(name, A, B, permutations=args.permutations,
                                 bootstrap=args.bootstrap, seed=args.seed, **kw)
    doc = {"n_images": int(len(A)), "scores": scores}
    for name, c in scores.items():
        extra = ""
        if c.get("ci95"):
            extra += f"  95% CI [{c['ci95'][0]:.4f}, {c['ci95'][1]:.4f}]"
        if c.get("p_value") is not None:
            extra += f"  p = {c['p_value']:.4g}"
        arrow = "↑" if c["higher_is_more_similar"] else "↓"
        print(f"{name:>18} {arrow} {c['value']:.4f}{extra}")
    if args.out:
        print(f"written: {write_json_atomic(args.out, doc)}")
    return 0


def _report_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="scores table and static HTML report of a finished run",
        description="Score every method of an experiment's outputs (BSR/TSD/EQ under three "
                    "dissimilarities, chance levels of random grids, known-difference recovery) "
                    "into DIR/analysis/summary.csv|json and write a self-contained report.html "
                    "per comparison plus DIR/index.html.")
    p.add_argument("experiment_dir", help="outputs/<experiment>")
    p.add_argument("--quiet", action="store_true")


def _run_report(args: argparse.Namespace) -> int:
    from .report import write_experiment_report

    path = write_experiment_report(Path(args.experiment_dir))
    if not args.quiet:
        print(f"report: {path}")
    return 0


def _run_run(args: argparse.Namespace) -> int:
    from .experiments import run_experiment

    outs = run_experiment(args.config, only=args.only, output_root=args.output_root,
                          device=args.device, progress=not args.quiet, force=args.force,
                          check_only=args.check)
    if args.check and not args.quiet:
        print(f"{args.config}: config valid, all datasets, checkpoints and features present")
    if not args.quiet:
        for o in outs:
            print(f"results: {o}")
    if outs and not args.no_report:
        from .report import write_experiment_report
        try:
            index = write_experiment_report(outs[0].parent)
        except Exception as exc:  # noqa: BLE001 - the results are safe; only the report failed
            print(f"rdx run: warning: the report could not be written ({exc}); the results are "
                  f"complete — retry with `rdx report {outs[0].parent}`.", file=sys.stderr)
        else:
            if not args.quiet:
                print(f"report: {index}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rdx", description="Representational Difference "
                                     "Explanations: how do two models' representations differ?")
    sub = parser.add_subparsers(dest="command", required=True)
    _explain_parser(sub)
    _run_parser(sub)
    _report_parser(sub)
    _similarity_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "explain":
            return _run_explain(args)
        if args.command == "run":
            return _run_run(args)
        if args.command == "report":
            return _run_report(args)
        if args.command == "similarity":
            return _run_similarity(args)
    except RDXInputError as exc:
        print(f"rdx {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
