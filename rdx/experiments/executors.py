"""Where jobs run: in this process, or one job per task through submitit (local
subprocesses or SLURM). Used by the experiment runner (one job per comparison) and the
similarity pipeline (one job per model × dataset shard)."""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import RDXInputError

EXECUTORS = ("local", "slurm", "submitit-local", "debug")


def make_executor(executor: str, folder: str | os.PathLike, slurm: Mapping[str, Any] | None,
                  name: str = "rdx-similarity"):
    """A configured ``submitit.AutoExecutor`` for ``slurm``, ``submitit-local`` or ``debug``."""
    try:
        import submitit
    except ImportError:
        raise RDXInputError(f"executor {executor!r} needs submitit: `pip install submitit` "
                            "(or use --executor local).") from None
    cluster = {"slurm": "slurm", "submitit-local": "local", "debug": "debug"}[executor]
    try:
        ex = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    except RuntimeError as exc:   # e.g. no srun/sbatch on this machine
        raise RDXInputError(f"cannot use executor {executor!r} here: {exc}") from None
    s = dict(slurm or {})
    params: dict[str, Any] = {"name": name, "timeout_min": int(s.get("timeout_min", 120))}
    for key in ("gpus_per_node", "cpus_per_task", "mem_gb"):
        if s.get(key) is not None:
            params[key] = s[key]
    if cluster == "slurm":
        for key in ("partition", "array_parallelism", "account", "qos", "constraint"):
            if s.get(key) is not None:
                params[f"slurm_{key}"] = s[key]
    ex.update_parameters(**params)
    return ex


def run_tasks(fn: Callable[[Any], Any], tasks: Sequence[Any], *, executor: str = "local",
              folder: str | os.PathLike = "outputs/submitit",
              slurm: Mapping[str, Any] | None = None, name: str = "rdx-similarity",
              log: Callable[[str], None] = print) -> list[Any]:
    """Run ``fn`` on every task and return the results in task order.

    ``local``: in this process, one after another. ``slurm`` / ``submitit-local`` /
    ``debug``: through ``submitit`` (``pip install submitit``) as one job array; this call
    waits for all jobs. ``slurm`` maps to ``submitit.AutoExecutor`` parameters:
    ``partition``, ``timeout_min``, ``gpus_per_node``, ``cpus_per_task``, ``mem_gb``,
    ``array_parallelism``, ``account``, ``qos``, ``constraint``.
    A job that dies (e.g. killed by the scheduler) gives ``{"status": "failed", ...}``.
    """
    if executor not in EXECUTORS:
        raise RDXInputError(f"executor {executor!r} is not one of {EXECUTORS}.")
    if not tasks:
        return []
    if executor == "local":
        return [fn(t) for t in tasks]
    ex = make_executor(executor, folder, slurm, name)
    cluster = ex.cluster
    jobs = ex.map_array(fn, list(tasks))
    if cluster == "slurm":
        log(f"submitted {len(jobs)} SLURM jobs (array {jobs[0].job_id.split('_')[0]}); "
            f"logs in {folder}")
    out = []
    for task, job in zip(tasks, jobs, strict=True):
        try:
            out.append(job.result())
        except Exception as exc:  # noqa: BLE001 - the job itself failed (killed, OOM, ...)
            ident = {k: getattr(task, k)["id"] for k in ("model", "dataset")
                     if isinstance(getattr(task, k, None), dict)}
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
            out.append({**ident, "status": "failed",
                        "error": f"job {job.job_id}: {type(exc).__name__}: {last}"})
    return out
