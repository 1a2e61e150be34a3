#!/usr/bin/env python
"""Model × model similarity matrices per dataset and measure, from cached features.

    rdx matrix \\
        --models configs/similarity/models_embedded.yaml \\
        --datasets configs/similarity/datasets_embedded.yaml --measure cka_linear --measure rsa

    # the paper's run on a SLURM cluster (one GPU job per (model, dataset) shard)
    rdx matrix --models configs/similarity/models_paper.yaml \\
        --datasets configs/similarity/datasets_paper.yaml --executor slurm \\
        --slurm-partition gpu --matrix-device cuda

Steps (see :mod:`rdx.studies.similarity`): train the models that have a ``train`` block
(embedded example) → choose ≤ ``--max-images`` images per dataset (per-class, seeded) →
one feature job per (model, dataset) through the feature cache → one matrix job per
dataset for all measures → one heat map per dataset and measure and ``report.html``
(:mod:`rdx.report.similarity`; with ``rdx probe`` results, also similarity against the gap
of probe accuracies; ``rdx probe`` and ``rdx consistency`` rewrite this report when they
finish, so it shows what has finished without ``--stage report``). Every step skips work that is already done (finished shards,
up-to-date matrices), so an interrupted run is resumed by running the same command again.

Measures: names of ``rdx.similarity.MEASURES`` with optional parameters, e.g.
``cka_linear``, ``cka_rbf:sigma=0.4,sigma_mode=absolute``,
``rsa:rdm=correlation,compare=spearman`` (default: these three, the paper's).

Results under ``--out`` (default
``outputs/similarity/<models>__<datasets>``)::

    subsets/<dataset>.npz|json         chosen images (indices, labels, ids hash)
    shards/<dataset>/<model>.json      finished feature shard → cache entry
    matrices/<dataset>/<measure>.npz   matrix + model ids; .json: measure, params, n, ...
    figures/<dataset>/<measure>.png    heat map (+ <measure>_vs_probe.png with probes)
    report.html                        every heat map on one self-contained page
    run.json                           arguments, statuses, versions

Exit status: 0 done; 1 some model/dataset failed or was unavailable (the rest is written;
``--allow-missing`` makes this 0); 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from rdx.errors import RDXInputError
from rdx.flags import add_deprecated_alias
from rdx.paths import output_arg

PAPER_MEASURES = ("cka_linear", "cka_rbf:sigma=0.4,sigma_mode=absolute",
                  "rsa:rdm=correlation,compare=spearman")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``rdx matrix``."""
    from rdx.similarity.names import NORMALIZATIONS
    from rdx.commands.similarity_jobs import add_common_args

    p.description = __doc__.split("\n\n")[0]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    add_common_args(p)
    p.add_argument("--out", dest="output_root", metavar="DIR", type=output_arg,
                   help="results folder (default: outputs/similarity/"
                        "<models stem>__<datasets stem>)")
    p.add_argument("--measure", dest="measures", action="append", metavar="M",
                   help="a measure, NAME or NAME:key=value,...; repeatable (default: the "
                        "paper's three: " + ", ".join(PAPER_MEASURES) + ")")
    # the first spelling (one flag, several values), still accepted
    add_deprecated_alias(p, "--measures", "--measure", "measures", nargs="+", extend=True)
    p.add_argument("--max-images", type=int,
                   help="images per dataset (per-class subsampling); default: the datasets "
                        "file's max_images, else 10000")
    p.add_argument("--normalize", default="l2", choices=NORMALIZATIONS,
                   help="feature normalisation before every measure (default %(default)s, as "
                        "the paper's extractor; recorded in the matrix files)")
    p.add_argument("--matrix-device", default="cpu",
                   help="device of the linear-CKA fast path: cpu, cuda (default %(default)s)")
    p.add_argument("--amp", action="store_true", help="autocast during extraction")
    p.add_argument("--stage", default="all", choices=("all", "extract", "matrices", "report"),
                   help="all (default); extract: train + subsets + shards only; matrices: "
                        "only matrices from finished shards (then the report); report: only "
                        "the heat maps and report.html of the matrices already written")
    p.add_argument("--force-matrices", action="store_true",
                   help="recompute matrices even when up to date")
    p.add_argument("--no-report", action="store_true",
                   help="skip the heat maps and report.html written after the matrices")
    p.add_argument("--train-device", default="auto",
                   help="device for training embedded models (default %(default)s)")


def run_command(args: argparse.Namespace) -> int:
    """``rdx matrix``: bad input raises :class:`RDXInputError` (exit status 2)."""
    from rdx.io import jsonable, versions, write_json_atomic
    from rdx.similarity.matrix import parse_measure
    from rdx.commands.similarity_jobs import setup_from_args, slurm_params
    from rdx.experiments.executors import run_tasks
    from rdx.studies.similarity import (MatrixTask, ShardTask, categories_of, ensure_trained,
                                        model_task_dict, prepare_subset, resolved_spec,
                                        run_matrix_job, run_shard, shard_finished,
                                        shard_record_path, shard_signature)

    say = (lambda *a, **k: None) if args.quiet else print
    t_start = time.perf_counter()
    st = setup_from_args(args)
    # --- output checks: before any work (a file there, a path under a file, no rights) ---
    from rdx.commands.common import check_output_dir
    check_output_dir(st.root, "--out", create=False)
    check_output_dir(args.cache_dir, "--cache-dir", create=False)
    # --- end output checks ---
    if args.stage == "report":
        path = write_report(st.root, quiet=args.quiet)
        return 0 if path is not None else 1
    measures = [parse_measure(m) for m in (args.measures or PAPER_MEASURES)]
    if args.max_images is not None and args.max_images < 1:
        raise RDXInputError("--max-images must be a positive integer.")
    max_images = args.max_images if args.max_images is not None else \
        st.dataset_settings.get("max_images", 10000)
    folder = args.submitit_folder or st.root / "submitit"
    problems: list[str] = []
    report: dict = {"args": vars(args), "root": str(st.root), "measures": measures,
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    # 1. models trained here (embedded example)
    if args.stage != "matrices":
        report["training"] = ensure_trained(st.models, st.checkpoint_root,
                                            device=args.train_device, log=say,
                                            progress=not args.quiet)

    # 2. subsets
    subsets = {}
    for d in st.datasets:
        try:
            subsets[d.id] = prepare_subset(d, st.root, max_images)
            say(f"dataset {d.id}: {subsets[d.id]['n_images']} of {subsets[d.id]['n_total']} "
                f"images" + (f" ({subsets[d.id]['per_class']} per class)"
                            if subsets[d.id]["per_class"] else ""))
        except RDXInputError as exc:
            msg = f"dataset {d.id} unavailable: {exc}"
            say(("skipped optional " if d.optional else "") + msg)
            if not d.optional:
                problems.append(msg)
    datasets = [d for d in st.datasets if d.id in subsets]
    if st.datasets and not datasets:
        # not one dataset can be read: nothing would be computed, and what to fix is the
        # user's (a name, a download) — one message and exit 2, not exit 1 for a partial run
        raise RDXInputError("no dataset of --datasets is available, so nothing can be "
                            "computed: " + " ".join(problems or [
                                "every dataset is optional and unavailable."]))

    # 3. shards
    usable = [m for m in st.models if m.spec is not None]
    for m in st.models:
        if m.spec is None:
            problems.append(f"model {m.id}: no loader in rdx.models.zoo ({m.note or 'spec: null'})")
    finished: dict[tuple[str, str], str] = {}
    tasks = []
    for d in datasets:
        for m in usable:
            spec = resolved_spec(m, st.checkpoint_root)
            sig = shard_signature(spec, d, subsets[d.id], args.amp)
            if shard_finished(shard_record_path(st.root, d.id, m.id), sig) is not None:
                finished[(m.id, d.id)] = sig
            elif args.stage != "matrices":
                tasks.append(ShardTask(model_task_dict(m, st.checkpoint_root), jsonable(
                    d.__dict__), str(st.root), str(args.cache_dir), sig, args.device,
                    args.batch_size, args.num_workers, args.amp))
    say(f"shards: {len(finished)} finished, {len(tasks)} to run ({args.executor})")
    results = run_tasks(run_shard, tasks, executor=args.executor, folder=folder,
                        slurm=slurm_params(args), name="rdx-features", log=say)
    for t, r in zip(tasks, results, strict=True):
        if r.get("status") == "done":
            finished[(t.model["id"], t.dataset["id"])] = t.signature
        else:
            problems.append(f"shard {t.model['id']} × {t.dataset['id']}: {r.get('error')}")
            say(f"FAILED {t.model['id']} × {t.dataset['id']}: {r.get('error')}")
    report["shards"] = {"finished_before": len(finished) - sum(
        r.get("status") == "done" for r in results), "run": results}

    # 4. matrices
    mresults = []
    if args.stage != "extract":
        cats = categories_of(st.models)
        mtasks = []
        for d in datasets:
            ids = [m.id for m in usable if (m.id, d.id) in finished]
            if len(ids) < 2:
                problems.append(f"dataset {d.id}: {len(ids)} model(s) with features; a "
                                "matrix needs 2")
                continue
            mtasks.append(MatrixTask(jsonable(d.__dict__), str(st.root), ids,
                                     {c: {m: v for m, v in g.items() if m in ids}
                                      for c, g in cats.items()},
                                     measures, args.normalize, args.matrix_device,
                                     args.force_matrices))
        for res in run_tasks(run_matrix_job, mtasks, executor=args.executor, folder=folder,
                             slurm=slurm_params(args), name="rdx-matrices", log=say):
            res = res if isinstance(res, list) else [res]
            mresults += res
            for r in res:
                if r.get("status") == "failed":
                    problems.append(f"matrices of {r.get('dataset')}: {r.get('error')}")
                    say(f"FAILED matrices of {r.get('dataset')}: {r.get('error')}")
        done = sum(r.get("status") == "done" for r in mresults)
        skipped = sum(r.get("status") == "skipped" for r in mresults)
        say(f"matrices: {done} computed, {skipped} up to date → {st.root / 'matrices'}")
    report.update({"matrices": mresults, "problems": problems, "versions": versions(),
                   "seconds": time.perf_counter() - t_start})
    write_json_atomic(st.root / "run.json", report)
    for msg in problems:
        print(f"warning: {msg}", file=sys.stderr)
    if args.stage != "extract" and not args.no_report and any(
            r.get("status") in ("done", "skipped") for r in mresults):
        write_report(st.root, run=report, quiet=args.quiet)
    return 0 if not problems or args.allow_missing else 1


def write_report(root, *, run: dict | None = None, quiet: bool = False,
                 command: str = "rdx matrix"):
    """Heat maps and ``report.html`` of the matrices under ``root``; a failure costs only
    the page (warned, in the words of ``command``), the matrices are complete. Returns the
    report's path or None."""
    from rdx.report.similarity import write_similarity_report

    if run is None and (root / "run.json").is_file():
        try:
            run = json.loads((root / "run.json").read_text())
        except ValueError:
            run = None
    try:
        path = write_similarity_report(root, run=run)
    except RDXInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the matrices are written; only the page failed
        from ..io import environment_error

        if environment_error(exc):
            raise   # a full disk, quota, read-only folder: exit 2, never a warning
        print(f"{command}: warning: the report could not be written ({exc}); retry with "
              f"`rdx matrix ... --stage report`.", file=sys.stderr)
        return None
    if not quiet:
        print(f"report: {path}")
    return path


def refresh_report(root, *, command: str, quiet: bool = False):
    """After ``rdx probe`` or ``rdx consistency`` has written its results under ``root``:
    rewrite the matrix report there (when ``rdx matrix`` wrote one), so that it shows what
    has finished without a manual ``--stage report``. Returns the report's path or None."""
    from pathlib import Path

    from rdx.report.similarity import REPORT_NAME

    root = Path(root)
    if not (root / REPORT_NAME).is_file() or not (root / "matrices").is_dir():
        return None
    return write_report(root, quiet=quiet, command=command)

