"""The layer-wise study: how the representation changes inside one model.

For a list of layers L_0, L_1, …, L_m of one model (by default the input of the first
transformer block, the output of every block, the final norm and the projection/head),
on a seeded random set of images:

1. **Features** of every layer in one forward pass per batch (:mod:`rdx.models.layers`,
   cached), for the *analysis* images and, separately, the *probe* images.
2. **Probes** per layer: a k-NN classifier (``KNeighborsClassifier(k)``, Euclidean) and a
   linear one (standardised features, ``LogisticRegression``), fitted on the probe images
   and evaluated on the analysis images.
3. **RDX on every consecutive pair** (A = L_i, B = L_i+1) with the ``rdx`` parameters
   passed as they are to :class:`rdx.RDX` (so any variant the estimator offers works):
   ``b_over_a`` clusters are images that the step brings together (close after, far
   before), ``a_over_b`` images it spreads apart.
4. **Cluster statistics** per pair, direction and cluster: the rate of prediction changes
   (the change probe's prediction at L_i differs from L_i+1) and the class homogeneity
   (fraction of the majority class), each with a one-sided permutation p-value: the image
   labels are permuted ``n_permutations`` times and cut into consecutive chunks of the
   observed cluster sizes; ``p = (1 + #{null ≥ observed}) / (1 + n_permutations)`` (the
   add-one estimate, never 0, valid at every level), local RNG seeded per pair and
   direction.
5. **Mean-ablation patching** (timm ViT blocks): for block b and head h, head h's attention
   output is replaced by its mean over the analysis images per token position, block b is
   re-run on its unpatched input, and the patched output P (pooled like the layer) is
   compared with the unpatched output T: the change of the k nearest neighbours
   (``topk_change``), ``1 − CKA`` (debiased linear CKA), the RDX cluster-neighbourhood
   delta of each cluster of the pair ending at block b (both rank matrices symmetrised,
   always against the unpatched target layer; :func:`rdx.models.patching.
   cluster_neighbourhood_delta`) and the change of both probes' accuracy.

Outputs (``output``, default ``outputs/layers/<name>``; every file written atomically; a
finished layer pair or head is skipped when the run is repeated with the same inputs)::

    layers.json                   summary (schema below), config, seeds, versions, timings
    images.json                   analysis and probe images: indices, ids, labels
    probes.json, probes.npz       per-layer probe accuracies; predictions on the analysis set
    pairs/<NN>_<A>__<B>/          one comparison folder per layer pair (``rdx report`` reads
                                  it): run.json, images.json, representations.npz (a, b,
                                  labels), rdx/explanations.json, rdx/grids/*.png,
                                  rdx/cluster_stats.json, rdx/clusters.npz (labels per
                                  direction, change flags)
    patching/head_means.npz       mean attention output per block (tokens × heads × dim)
    patching/b<B>_h<H>.json|.npz  one head's metrics | probe predictions on the patched output
    patching.npz                  blocks × heads matrices of every scalar metric
    figures/*.png                 (rdx.viz.layers)
    report.html                   (rdx.report.layers)

``layers.json`` (``format: "rdx-layers"``, ``format_version: 1``): ``layers`` (key, label,
module, point, pool, dim, knn/linear accuracy), ``pairs`` (index, a, b, folder, cka, bsr,
``directions.<d>`` = cluster statistics: ``clusters`` with label, size, mean_affinity,
change_rate, change_p, majority_class, majority_fraction, homogeneity_p, class_counts;
``null_group``; overall and size-weighted change rates with the null's mean/sd and p;
fractions of significant clusters), ``significance`` (totals over all pairs),
``patching`` (blocks, heads, metric matrices, top heads), ``data``, ``model``, ``config``,
``timings_s``, ``versions``.

Modules: :mod:`.config` (the YAML config), :mod:`.analysis` (image split, probes, cluster
statistics), :mod:`.patching` (head ablation), :mod:`.pipeline` (:func:`run_layers`); the
permutation test is :mod:`rdx.evaluation.permutation`, the model loading
:mod:`rdx.models.study_model`, the command line :mod:`rdx.commands.layers`
(``rdx layers --config ...``).
"""
from __future__ import annotations

from ...lazy import lazy_exports

# the public names load on first use: a command's options and --help import no torch
__getattr__ = lazy_exports(__name__, {
    "LayerProbes": ".analysis", "direction_stats": ".analysis", "fit_layer_probes": ".analysis",
    "select_study_images": ".analysis", "significance_summary": ".analysis",
    "DEFAULT_RDX": ".config", "DIRECTIONS": ".config", "FORMAT": ".config",
    "FORMAT_VERSION": ".config", "HEAD_METRICS": ".config", "LayersConfig": ".config",
    "check_rdx_params": ".config", "load_layers_config": ".config",
    "head_metrics": ".patching", "patched_outputs": ".patching",
    "run_layers": ".pipeline",
})

__all__ = ["DEFAULT_RDX", "DIRECTIONS", "FORMAT", "FORMAT_VERSION", "HEAD_METRICS", "LayerProbes",
           "LayersConfig", "check_rdx_params", "direction_stats", "fit_layer_probes",
           "head_metrics", "load_layers_config", "patched_outputs", "run_layers",
           "select_study_images", "significance_summary"]
