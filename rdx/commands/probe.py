#!/usr/bin/env python
"""Linear probes with the consistency paper's protocol on cached features.

    rdx probe --models configs/similarity/models_embedded.yaml \\
        --datasets configs/similarity/datasets_embedded.yaml --max-train 5000

Per (model, dataset): features of the dataset's training split (``--max-train``, default
10,000 images per dataset chosen per class with the dataset's seed; ``all`` for every image
as the paper) and of its test set (the entry's ``test``
overrides, e.g. ``{split: test}``; ``test: null`` → a seeded stratified 20 % hold-out),
extracted through the feature cache and normalised (``--normalize``, default ``l2`` as the
paper). Then, per seed, the paper's probe (:mod:`rdx.similarity.probe`): AdamW + cosine
schedule, 20 epochs, batch 1024, lr ∈ {1e-1, 1e-2, 1e-3, 1e-4} × a coarse-to-fine search
over 64 weight decays on an 80/20 split, refit on all training images, test top-1 / top-5
/ balanced accuracy. Seeds 0, 1, 2 by default (the paper's), averaged.

Writes ``<out>/probes/<dataset>/<model>.json`` (one record, resumable: a record with
the same settings is not recomputed) and ``<out>/probes/probes.csv`` (one row per
model and dataset). ``rdx consistency`` (and ``rdx matrix``'s report) read them to
correlate similarity with performance gaps. A progress bar (local executor) names the
probe being run and estimates the time left.

Exit status: 0 done; 1 some probe failed (``--allow-missing`` → 0); 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from rdx.errors import RDXInputError
from rdx.flags import finite_float, seed_int
from rdx.paths import output_arg
from rdx.progress import working

#: Training images per dataset by default: a per-class, seeded subset (the paper used every
#: image; 60,000 Fashion-MNIST images cost minutes per model on a CPU for little change in
#: accuracy). ``--max-train all`` restores the paper's protocol.
DEFAULT_MAX_TRAIN = 10000


def _count_or_all(text: str) -> int | None:
    """argparse type: a positive number of images, or ``all`` (None)."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of images or 'all', got "
                                         f"{text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of images or 'all', "
                                         f"got {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``rdx probe``."""
    from rdx.similarity.names import NORMALIZATIONS
    from rdx.commands.similarity_jobs import add_common_args

    p.description = __doc__.split("\n\n")[0]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    add_common_args(p)
    p.add_argument("--seeds", type=seed_int, nargs="+", default=[0, 1, 2],
                   help="probe seeds, averaged (default: %(default)s, as the paper)")
    p.add_argument("--epochs", type=int, default=20,
                   help="epochs per probe fit (default %(default)s)")
    p.add_argument("--probe-batch-size", type=int, default=1024,
                   help="probe training batch (default %(default)s)")
    p.add_argument("--lrs", type=finite_float, nargs="+", default=[1e-1, 1e-2, 1e-3, 1e-4],
                   help="learning rates searched (default: %(default)s)")
    p.add_argument("--max-train", type=_count_or_all, default=DEFAULT_MAX_TRAIN, metavar="N|all",
                   help="training images per dataset, chosen per class with the dataset's "
                        "seed (default %(default)s; 'all' = every training image, the "
                        "paper's protocol)")
    p.add_argument("--max-test", type=_count_or_all, default=None, metavar="N|all",
                   help="test images per dataset, chosen per class (default: all)")
    p.add_argument("--holdout", type=finite_float, default=0.2,
                   help="test share for datasets without a test set (default %(default)s)")
    p.add_argument("--normalize", default="l2", choices=NORMALIZATIONS,
                   help="feature normalisation before the probe (default %(default)s)")
    p.add_argument("--force", action="store_true", help="recompute existing records")
    p.add_argument("--train-device", default="auto",
                   help="device for training embedded models (default %(default)s)")
    p.add_argument("--out", dest="output_root", metavar="DIR", type=output_arg,
                   help="results folder (the one rdx matrix writes; "
                        "records go to DIR/probes)")


def run_command(args: argparse.Namespace) -> int:
    """``rdx probe``: bad input raises :class:`RDXInputError` (exit status 2)."""
    from dataclasses import asdict

    from rdx.io import jsonable, write_json_atomic
    from rdx.commands.similarity_jobs import setup_from_args, slurm_params
    from rdx.experiments.executors import run_tasks
    from rdx.studies.similarity import (ProbeTask, check_holdout, ensure_trained,
                                        model_task_dict,
                                        probe_record_path, probe_signature, run_probe,
                                        write_csv)

    from rdx import validation as V

    say = (lambda *a, **k: None) if args.quiet else print
    for name in ("epochs", "probe_batch_size", "max_train", "max_test"):
        v = getattr(args, name)
        if v is not None:   # --epochs also within its ceiling (rdx.budget)
            V.check_int(v, f"--{name.replace('_', '-')}", minimum=1)
    if not 0 < args.holdout < 1:
        raise RDXInputError("--holdout must be in (0, 1).")
    # checked here, not by each probe after its features are extracted: a bad value is one
    # message before any work instead of a failed probe per model and dataset
    for lr in args.lrs:
        V.check_positive(lr, "--lrs")
    st = setup_from_args(args)
    # --- output checks: before any work (a file there, a path under a file, no rights) ---
    from rdx.commands.common import check_output_dir
    check_output_dir(st.root, "--out", create=False)
    check_output_dir(args.cache_dir, "--cache-dir", create=False)
    # --- end output checks ---
    ensure_trained(st.models, st.checkpoint_root, device=args.train_device, log=say,
                   progress=not args.quiet)
    problems = [f"model {m.id}: no loader in rdx.models.zoo" for m in st.models if m.spec is None]
    tasks, records = [], []
    n_loaded = 0
    for d in st.datasets:
        try:
            # once here, so a missing dataset is one message, not one per model
            with working(f"dataset {d.id}: loading", show=not args.quiet, keep=False):
                d.load()
                if d.test is not None:
                    d.load(**d.test)
        except RDXInputError as exc:
            msg = f"dataset {d.id} unavailable: {exc}"
            say(("skipped optional " if d.optional else "") + msg)
            if not d.optional:
                problems.append(msg)
            continue
        check_holdout(d, args.holdout)      # a bad --holdout is the user's, not the data's
        n_loaded += 1
        for m in st.models:
            if m.spec is None:
                continue
            task = ProbeTask(model_task_dict(m, st.checkpoint_root), jsonable(asdict(d)),
                             str(st.root), str(args.cache_dir), "", list(args.seeds),
                             args.epochs, args.probe_batch_size, list(args.lrs), args.max_train,
                             args.max_test, args.holdout, args.normalize, args.device,
                             args.batch_size, args.num_workers)
            task.signature = probe_signature(asdict(task))
            path = probe_record_path(st.root, d.id, m.id)
            if not args.force and path.exists():
                try:
                    rec = json.loads(path.read_text())
                except ValueError:
                    rec = {}
                if rec.get("signature") == task.signature and rec.get("status") == "done":
                    records.append(rec)
                    continue
            tasks.append(task)
    if st.datasets and not n_loaded:
        # not one dataset can be read: nothing would be computed, and what to fix is the
        # user's (a name, a download) — one message and exit 2, not exit 1 for a partial run
        raise RDXInputError("no dataset of --datasets is available, so nothing can be "
                            "computed: " + " ".join([p for p in problems if p.startswith(
                                "dataset ")] or ["every dataset is optional and "
                                                 "unavailable."]))
    say(f"probes: {len(records)} up to date, {len(tasks)} to run ({args.executor})")
    t0 = time.perf_counter()
    if tasks:
        say(f"each probe: features of ≤ {args.max_train or 'all'} training images, then "
            f"{len(args.seeds)} seed(s) × {len(args.lrs)} learning rates × 64 weight decays "
            f"× {args.epochs} epochs (the estimate appears after the first probe)")
    if args.executor == "local":
        results = run_local(run_probe, tasks, progress=not args.quiet)
    else:
        results = run_tasks(run_probe, tasks, executor=args.executor,
                            folder=args.submitit_folder or st.root / "submitit",
                            slurm=slurm_params(args), name="rdx-probes", log=say)
    for t, r in zip(tasks, results, strict=True):
        if r.get("status") == "done":
            records.append(json.loads(t.record_path.read_text()))
            say(f"{t.model['id']:28s} {t.dataset['id']:16s} top-1 {r['top1']:.3f}")
        else:
            msg = f"probe {t.model['id']} × {t.dataset['id']}: {r.get('error')}"
            say("FAILED " + msg)
            problems.append(msg)
    rows = [{"dataset": r["dataset"], "model": r["model"], "objective": r.get("objective"),
             "top1": r["top1"], "top5": r.get("top5"),
             "balanced_accuracy": r["balanced_accuracy"],
             "top1_per_seed": " ".join(f"{v:.4f}" for v in r["top1_per_seed"]),
             "n_train": r["n_train"], "n_test": r["n_test"], "test_set": r["test_set"],
             "lr": " ".join(str(x["lr"]) for x in r["runs"]),
             "weight_decay": " ".join(f"{x['weight_decay']:.3g}" for x in r["runs"])}
            for r in records]
    order = {d.id: i for i, d in enumerate(st.datasets)}
    morder = {m.id: i for i, m in enumerate(st.models)}
    rows.sort(key=lambda r: (order.get(r["dataset"], 1e9), morder.get(r["model"], 1e9)))
    if rows:
        write_csv(st.root / "probes" / "probes.csv", rows)
        write_json_atomic(st.root / "probes" / "probes.json",
                          {"rows": rows, "problems": problems,
                           "seconds": time.perf_counter() - t0})
        say(f"→ {st.root / 'probes' / 'probes.csv'}")
        # the matrix report of this root gains the probes (similarity against accuracy)
        from rdx.commands.matrix import refresh_report

        refresh_report(st.root, command="rdx probe", quiet=args.quiet)
    for msg in problems:
        print(f"warning: {msg}", file=sys.stderr)
    return 0 if not problems or args.allow_missing else 1


def run_local(fn, tasks: list, *, progress: bool = True) -> list[dict]:
    """Run the probe tasks here, one after another, with a progress bar (tqdm, on stderr)
    that names the model and dataset being probed and, from the second task on, estimates
    the time left. One probe takes seconds to minutes (features, then the learning-rate and
    weight-decay search): the bar is redrawn meanwhile, so its clock moves."""
    from tqdm.auto import tqdm

    from rdx.progress import keep_alive

    results = []
    with tqdm(total=len(tasks), desc="linear probes", unit="probe",
              disable=not progress or not tasks) as bar, keep_alive(bar):
        for t in tasks:
            bar.set_postfix_str(f"{t.model['id']} × {t.dataset['id']}", refresh=True)
            results.append(fn(t))
            bar.update()
    return results

