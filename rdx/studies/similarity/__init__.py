"""Many models × many datasets: configs, feature shards, matrix jobs, probe jobs, executors.

The consistency paper's pipeline as resumable jobs:

1. **train** (embedded example only): models with a ``train`` block are trained here
   (:func:`ensure_trained`), skipped when a checkpoint of the same recipe exists.
2. **subsets**: per dataset, ≤ ``max_images`` images by per-class seeded sampling
   (:func:`select_subset`), saved to ``subsets/<dataset>.npz|.json`` and shared by every
   model and measure.
3. **shards**: one job per (model, dataset) extracts features through the feature cache
   (:func:`rdx.models.extract.extract_features`) and writes a small record
   ``shards/<dataset>/<model>.json`` pointing at the cache entry. A shard whose record
   matches its signature (model spec, checkpoint file, dataset, subset ids, AMP) and whose
   cache file is present is *finished* and not run again.
4. **matrices**: one job per dataset computes every requested measure's model × model
   matrix (:func:`rdx.similarity.matrix.similarity_matrix`) into
   ``matrices/<dataset>/<measure slug>.npz|.json``; skipped when the file's signature
   (measure, parameters, normalisation, the shards' signatures) matches.

Linear probes (:func:`run_probe`) are jobs per (model, dataset) too.

Executors (:func:`rdx.experiments.executors.run_tasks`): ``local`` runs the jobs one after
another in this process; ``slurm`` submits them as a SLURM job array through ``submitit`` and
waits; ``submitit-local`` uses submitit's local executor (one subprocess per job, the SLURM
code path on one machine); ``debug`` uses submitit's in-process debug executor.

Fixed relative to the paper's code: subsampling uses a fresh
``numpy.random.default_rng(seed)`` per class (via :func:`rdx.data.select_per_class`), so the
indices do not depend on which other datasets were processed before; nothing reads
``SLURM_ARRAY_TASK_ID`` — the same code runs with or without a cluster.

Modules: :mod:`.config` (models and datasets configs), :mod:`.models` (training, specs),
:mod:`.subsets`, :mod:`.matrix_jobs` (feature shards, matrices), :mod:`.probe_jobs`,
:mod:`.tables`; the executors are :mod:`rdx.experiments.executors`, the command lines
``rdx matrix``, ``rdx probe`` and ``rdx consistency`` (:mod:`rdx.commands`, with their shared
options in :mod:`rdx.commands.similarity_jobs`).
"""
from __future__ import annotations

from ...lazy import lazy_exports

# the public names load on first use: a command's options and --help import no torch
__getattr__ = lazy_exports(__name__, {
    "DatasetEntry": ".config", "ModelEntry": ".config", "OBJECTIVES_PAPER": ".config",
    "categories_of": ".config", "load_dataset": ".config", "load_datasets_config": ".config",
    "load_models_config": ".config",
    "MatrixTask": ".matrix_jobs", "SHARD_SCHEMA": ".matrix_jobs", "ShardTask": ".matrix_jobs",
    "matrix_signature": ".matrix_jobs", "matrix_stem": ".matrix_jobs",
    "run_matrix_job": ".matrix_jobs", "run_shard": ".matrix_jobs",
    "shard_finished": ".matrix_jobs", "shard_record_path": ".matrix_jobs",
    "shard_signature": ".matrix_jobs",
    "checkpoint_path": ".models", "ensure_trained": ".models", "model_task_dict": ".models",
    "resolved_spec": ".models", "rotation_dataset": ".models", "train_model": ".models",
    "ProbeTask": ".probe_jobs", "check_holdout": ".probe_jobs",
    "probe_record_path": ".probe_jobs",
    "probe_signature": ".probe_jobs", "run_probe": ".probe_jobs",
    "ids_sha256": ".subsets", "load_subset": ".subsets", "prepare_subset": ".subsets",
    "select_subset": ".subsets",
    "write_csv": ".tables",
})

__all__ = ["DatasetEntry", "MatrixTask", "ModelEntry", "OBJECTIVES_PAPER", "ProbeTask",
           "SHARD_SCHEMA", "ShardTask", "categories_of", "check_holdout", "checkpoint_path",
           "ensure_trained",
           "ids_sha256", "load_dataset", "load_datasets_config", "load_models_config",
           "load_subset", "matrix_signature", "matrix_stem", "model_task_dict", "prepare_subset",
           "probe_record_path", "probe_signature", "resolved_spec", "rotation_dataset",
           "run_matrix_job", "run_probe", "run_shard", "select_subset", "shard_finished",
           "shard_record_path", "shard_signature", "train_model", "write_csv"]
