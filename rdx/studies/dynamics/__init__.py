"""Difference clustering over training: every checkpoint against the final model.

The workshop paper *Representational Difference Clustering* compares the checkpoints saved
while a network trains with its final representation, to see what the model still has to
learn. For every checkpoint ``C_t`` RDX runs with A = the final model (``CF``) and B = ``C_t``
on a probe set (the training set in the paper), direction ``a_over_b``: groups of images
that the final model holds close together and ``C_t`` spreads apart.

With ``n_clusters = 10`` spectral clustering finds clusters 0–9 ordered by mean within-
cluster affinity (low to high). The lowest one, cluster 0, is special: it holds the images
that changed least. The paper's no-change rule: a cluster whose mean affinity is below
``null_threshold = 1.5`` joins the no-change group (``RDX(merge_low_affinity=True)``; the
estimator always puts cluster 0 there, so "cluster 0" below is the whole no-change group and
it *is* a no-change cluster once its mean affinity drops below the threshold). The
remaining clusters 1–m (m ≤ 9) are the differences.

Per checkpoint the analysis records the mean affinity, size and accuracy — of ``C_t``'s own
classifier and of the final model's — of cluster 0 and of clusters 1–m (mean, min, max over
the clusters), the class make-up of every cluster, and the image grid of each difference.
Clusters are followed across checkpoints (:func:`cluster_tracks`): the difference clusters
of consecutive checkpoints are paired by the Hungarian method on their member overlap, so
each cluster carries a ``track`` id (0: the no-change group).

Speed: the probe images are transformed once; each checkpoint needs one forward pass (a
hook on the classification head gives its input — the features — and its output — the
logits — together), cached per checkpoint; the final model's similarity (rank) matrix is
computed once and reused by every RDX fit (``RDX.fit(similarity_a=...)``).

Outputs (``output`` folder; every file written atomically, each checkpoint's result saved
as soon as it is done, so an interrupted run resumes where it stopped)::

    dynamics.json             config, probe set, final model, one summary per checkpoint
    dynamics.csv              one row per checkpoint (cluster 0, the band of clusters 1–9)
    clusters.csv              one row per checkpoint × cluster, with the class make-up and
                              its track (the same cluster followed across checkpoints)
    checkpoints/<ckpt>.json   one checkpoint's summary (+ fingerprint: reused if unchanged)
    checkpoints/<ckpt>.npz    its cluster label per probe image
    features/<ckpt>.npz       cached features and logits of the probe images
    figures/*.png, report.html    (rdx.viz.dynamics_*, rdx.report.dynamics)

Modules: :mod:`.analysis` (the pure analysis of one checkpoint, tracks), :mod:`.config`
(:func:`load_config`, :func:`validate_config`), :mod:`.pipeline` (:func:`run_dynamics`),
:mod:`.tables` (the CSV tables); a run's checkpoints are listed by
:func:`rdx.models.checkpoint.list_checkpoints`, a checkpoint's features and logits come from
:mod:`rdx.models.classifier`; the command line is :mod:`rdx.commands.dynamics`
(``rdx dynamics``).
"""
from __future__ import annotations

from ...lazy import lazy_exports

# the public names load on first use: a command's options and --help import no torch
__getattr__ = lazy_exports(__name__, {
    "DEFAULT_N_CLUSTERS": ".analysis", "DEFAULT_THRESHOLD": ".analysis", "DIRECTION": ".analysis",
    "MIN_TRACK_JACCARD": ".analysis", "add_tracks": ".analysis",
    "analyse_checkpoint": ".analysis", "band": ".analysis",
    "cluster_mean_affinities": ".analysis", "cluster_stats": ".analysis",
    "cluster_tracks": ".analysis", "match_clusters": ".analysis", "no_change_rule": ".analysis",
    "rdx_estimator": ".analysis", "summarize_direction": ".analysis",
    "DynamicsConfig": ".config", "load_config": ".config", "validate_config": ".config",
    "FORMAT": ".pipeline", "FORMAT_VERSION": ".pipeline", "Probe": ".pipeline",
    "checkpoint_outputs": ".pipeline", "class_accuracy": ".pipeline", "make_probe": ".pipeline",
    "run_dynamics": ".pipeline",
    "cluster_rows": ".tables", "csv_row": ".tables", "write_outputs": ".tables",
})

__all__ = ["DEFAULT_N_CLUSTERS", "DEFAULT_THRESHOLD", "DIRECTION", "DynamicsConfig", "FORMAT",
           "FORMAT_VERSION", "MIN_TRACK_JACCARD", "Probe", "add_tracks", "analyse_checkpoint",
           "band", "checkpoint_outputs", "class_accuracy", "cluster_mean_affinities",
           "cluster_rows", "cluster_stats", "cluster_tracks", "csv_row", "load_config",
           "make_probe", "match_clusters", "no_change_rule", "rdx_estimator", "run_dynamics",
           "summarize_direction", "validate_config", "write_outputs"]
