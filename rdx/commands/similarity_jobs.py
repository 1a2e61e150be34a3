"""What ``rdx matrix``, ``rdx probe`` and ``rdx consistency`` share: the options of the
similarity study's jobs (configs, output roots, executors, SLURM) and the configs read and
filtered by them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import RDXInputError
from ..experiments.executors import EXECUTORS
from ..studies.similarity.consistency_study import default_root
from ..studies.similarity.config import (DatasetEntry, ModelEntry, load_datasets_config,
                                         load_models_config)


def add_common_args(p) -> None:
    """Arguments shared by scripts/similarity_matrix.py and scripts/linear_probe.py."""
    p.add_argument("--models", required=True, help="models YAML (configs/similarity/...)")
    p.add_argument("--datasets", required=True, help="datasets YAML")
    from ..flags import add_deprecated_alias, add_device_flag
    from ..paths import output_arg

    # the results folder is --out (declared by each command, with its own help); this was
    # its first spelling
    add_deprecated_alias(p, "--output-root", "--out", "output_root", type=output_arg)
    p.add_argument("--cache-dir", default="outputs/cache/features", type=output_arg,
                   help="feature cache (default: outputs/cache/features)")
    p.add_argument("--checkpoint-root", help="where models with a train block keep "
                                             "checkpoints (default: the models file's "
                                             "checkpoint_root, else checkpoints/similarity)")
    p.add_argument("--only-models", nargs="+", metavar="ID", help="restrict to these models")
    p.add_argument("--only-datasets", nargs="+", metavar="ID",
                   help="restrict to these datasets")
    add_device_flag(p, what="where features are extracted and probes trained")
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers")
    p.add_argument("--executor", default="local", choices=EXECUTORS,
                   help="local: jobs in this process; slurm: a SLURM job array via submitit; "
                        "submitit-local: submitit subprocesses; debug: submitit in-process")
    p.add_argument("--submitit-folder", help="submitit logs (default: <out>/submitit)")
    p.add_argument("--slurm-partition")
    p.add_argument("--slurm-account")
    p.add_argument("--slurm-qos")
    p.add_argument("--slurm-constraint")
    p.add_argument("--slurm-timeout-min", type=int, default=120)
    p.add_argument("--slurm-gpus", type=int, default=1, help="GPUs per job (default 1)")
    p.add_argument("--slurm-cpus", type=int, default=4)
    p.add_argument("--slurm-mem-gb", type=int, default=64)
    p.add_argument("--slurm-array-parallelism", type=int, default=32)
    p.add_argument("--allow-missing", action="store_true",
                   help="exit 0 even when some models/datasets could not be used")
    p.add_argument("--quiet", action="store_true", help="less output")


def slurm_params(args) -> dict:
    return {"partition": args.slurm_partition, "account": args.slurm_account,
            "qos": args.slurm_qos, "constraint": args.slurm_constraint,
            "timeout_min": args.slurm_timeout_min, "gpus_per_node": args.slurm_gpus,
            "cpus_per_task": args.slurm_cpus, "mem_gb": args.slurm_mem_gb,
            "array_parallelism": args.slurm_array_parallelism}


@dataclass
class Setup:
    models: list[ModelEntry]
    datasets: list[DatasetEntry]
    model_settings: dict
    dataset_settings: dict
    root: Path
    checkpoint_root: Path


def _check_job_options(args) -> None:
    """Devices (present here when the jobs run here), ``--batch-size`` and
    ``--num-workers`` of the jobs, for the commands that have them."""
    from ..backend import check_device
    from ..validation import check_int

    local = getattr(args, "executor", "local") == "local"
    for dest in ("device", "train_device", "matrix_device"):
        value = getattr(args, dest, None)
        if value is not None:
            try:
                check_device(value, usable=local)
            except RDXInputError as exc:
                raise RDXInputError(f"--{dest.replace('_', '-')}: {exc}") from None
    if getattr(args, "batch_size", None) is not None:
        check_int(args.batch_size, "--batch-size", minimum=1)
    if getattr(args, "num_workers", None) is not None:
        check_int(args.num_workers, "--num-workers", minimum=0)


def setup_from_args(args) -> Setup:
    """Configs read, filtered by --only-*, with the output and checkpoint roots resolved.

    The options every feature or probe job reads (devices, batch size, workers) are
    checked here, before any work: each job checked them itself, so a bad value failed
    every (model, dataset) job after the models were loaded — exit 1 with one warning per
    job instead of one message.
    """
    _check_job_options(args)
    models, mset = load_models_config(args.models)
    datasets, dset = load_datasets_config(args.datasets)
    for flag, chosen, items in (("--only-models", args.only_models, models),
                                ("--only-datasets", args.only_datasets, datasets)):
        if chosen:
            known = [e.id for e in items]
            bad = sorted(set(chosen) - set(known))
            if bad:
                raise RDXInputError(f"{flag}: unknown ids {bad}; known: {known}.")
    if args.only_models:
        models = [m for m in models if m.id in args.only_models]
    if args.only_datasets:
        datasets = [d for d in datasets if d.id in args.only_datasets]
    root = (Path(args.output_root) if args.output_root is not None
            else default_root(args.models, args.datasets))
    ck = args.checkpoint_root or mset.get("checkpoint_root") or "checkpoints/similarity"
    return Setup(models, datasets, mset, dset, root, Path(ck))
