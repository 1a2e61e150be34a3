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

Entry points: :func:`load_layers_config`, :func:`run_layers`, and
:func:`run_command` for the command line (``rdx layers --config ...``).
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from ..configs import StrictModel, check_safe_name, load_config
from ..errors import RDXInputError
from ..progress import keep_alive, working
from ..io import (array_digest, file_sha256, json_digest, read_json, save_npz_atomic,
                  versions, write_json_atomic)
from ..results.store import IMAGES_JSON, RUN_JSON, ComparisonRun

FORMAT = "rdx-layers"
FORMAT_VERSION = 1
#: The model name of the embedded small ViT (:mod:`rdx.models.vit`).
EMBEDDED_VIT = "rdx_vit"
DIRECTIONS = ("a_over_b", "b_over_a")
#: RDX parameters used unless the config sets them: 10 spectral clusters (9 differences +
#: the no-change group), clusters below a mean affinity of 1.1 merged into the no-change
#: group, γ = 0.05, β = 5, grids of 16 images.
DEFAULT_RDX: dict[str, Any] = {"n_explanations": 9, "gamma": 0.05, "beta": 5.0,
                               "null_threshold": 1.1, "merge_low_affinity": True,
                               "grid_size": 16, "random_state": 42}
METHOD_NAME = "rdx"
#: Scalar per-head metrics (the patching heatmaps).
HEAD_METRICS = ("topk_change", "one_minus_cka", "cluster_delta_mean", "cluster_delta_sum_abs",
                "knn_acc_change", "linear_acc_change", "knn_flip_rate")


# =========================================================================== config

class ModelSection(StrictModel):
    """The model: ``rdx_vit`` (the embedded ViT, from ``checkpoint``) or any zoo name
    (:func:`rdx.models.zoo.load_model`: timm, ``open_clip:...``, ``torchvision:...``,
    ``convnet``)."""

    model: str
    checkpoint: str | None = None
    pretrained: bool = True
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0


class TrainSection(StrictModel):
    """Training of the embedded ViT when its checkpoint is missing."""

    dataset: str = "fashion_mnist"
    split: str = "train"
    root: str | None = None
    data_root: str = "data"
    per_class: int | None = Field(default=2000, gt=0)
    selection_seed: int = 0
    test_split: str | None = "test"
    arch: dict[str, Any] = Field(default_factory=dict)
    epochs: int = Field(default=4, gt=0)
    batch_size: int = Field(default=128, gt=0)
    lr: float = Field(default=0.002, gt=0)
    weight_decay: float = Field(default=0.05, ge=0)
    seed: int = 0


class DataSection(StrictModel):
    """The images: ``n_images`` analysis images (RDX, statistics, patching) and
    ``n_probe`` probe-training images, drawn without replacement by
    ``numpy.random.default_rng(seed).choice`` (analysis first)."""

    dataset: str
    split: str = "train"
    root: str | None = None
    data_root: str = "data"
    n_images: int = Field(default=2000, gt=3)
    n_probe: int = Field(default=2000, gt=1)
    seed: int = 0


class ProbeSection(StrictModel):
    knn_k: int = Field(default=16, gt=0)
    linear_max_iter: int = Field(default=1000, gt=0)
    change_probe: Literal["knn", "linear"] = "knn"
    seed: int = 0


class StatsSection(StrictModel):
    n_permutations: int = Field(default=1000, gt=0)
    seed: int = 42
    alpha: float = Field(default=0.05, gt=0, lt=1)


class PatchingSection(StrictModel):
    enabled: bool = True
    blocks: Literal["auto"] | list[int] = "auto"
    heads: Literal["auto"] | list[int] = "auto"
    k: int = Field(default=16, gt=0)
    blocks_module: str | None = None

    @field_validator("blocks", "heads")
    @classmethod
    def _non_negative(cls, v: Any) -> Any:
        if isinstance(v, list):
            if not v:
                raise ValueError("give at least one index, or 'auto'")
            if any(i < 0 for i in v) or len(set(v)) != len(v):
                raise ValueError(f"expected distinct indices ≥ 0, got {v}")
        return v


class LayersConfig(StrictModel):
    """A layer-wise study (``configs/layers_*.yaml``); see the module docstring."""

    name: str
    description: str = ""
    output: str | None = None
    model: ModelSection
    train: TrainSection | None = None
    data: DataSection
    layers: Literal["auto"] | list[str] = "auto"
    rdx: dict[str, Any] = Field(default_factory=dict)
    probes: ProbeSection = Field(default_factory=ProbeSection)
    stats: StatsSection = Field(default_factory=StatsSection)
    patching: PatchingSection = Field(default_factory=PatchingSection)
    score: bool = True
    chance_draws: int = Field(default=200, ge=0)
    device: str = "auto"
    batch_size: int = Field(default=256, gt=0)
    num_workers: int = Field(default=0, ge=0)
    amp: bool = False
    cache_dir: str | None = "outputs/cache/features"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_safe_name(v, "name")

    @field_validator("layers")
    @classmethod
    def _layers(cls, v: Any) -> Any:
        if isinstance(v, list):
            from ..models.layers import as_layer_specs
            if len(v) < 2:
                raise ValueError("list at least two layers (RDX compares consecutive ones)")
            try:
                as_layer_specs(v)
            except RDXInputError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("rdx")
    @classmethod
    def _rdx(cls, v: dict) -> dict:
        check_rdx_params({**DEFAULT_RDX, **v})
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        from ..backend import check_device
        try:
            check_device(v)
        except RDXInputError as exc:
            raise ValueError(str(exc)) from None
        return v

    @model_validator(mode="after")
    def _embedded(self) -> LayersConfig:
        if self.model.model == EMBEDDED_VIT and not self.model.checkpoint:
            raise ValueError("model.checkpoint: the embedded ViT needs a checkpoint path "
                             "(trained there when missing and a 'train' section is given)")
        if self.train is not None and self.model.model != EMBEDDED_VIT:
            raise ValueError(f"train: only the embedded model ({EMBEDDED_VIT!r}) is trained "
                             "by the study; remove 'train' or use model: rdx_vit")
        return self

    @property
    def output_dir(self) -> Path:
        return Path(self.output or f"outputs/layers/{self.name}")

    @property
    def rdx_params(self) -> dict[str, Any]:
        """The effective RDX parameters (defaults updated by the config)."""
        return {**DEFAULT_RDX, **self.rdx}


def check_rdx_params(params: dict) -> None:
    """Build the estimator and fit it once on a small seeded blob, so that a bad parameter
    fails now (as a ``ValueError`` naming the parameter) and not after the features."""
    from ..method.estimator import RDX

    try:
        est = RDX(**params)
    except TypeError as exc:
        raise ValueError(f"{exc} (these parameters go to rdx.RDX)") from None
    def count(key: str, default: int) -> int:
        v = params.get(key, default)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default

    # enough images for any valid setting of the size-dependent parameters
    n = max(64, (count("n_explanations", 3) + 1) * count("grid_size", 9) + 1,
            count("n_neighbors", 0) + 2, count("sigma_neighbor", 7) + 2)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    Y = rng.normal(size=(n, 4)).astype(np.float32)
    try:
        est.set_params(device="cpu", verbose=0)
        est.fit(X, Y, labels=rng.integers(0, 2, n))
    except RDXInputError as exc:
        raise ValueError(str(exc)) from None


def load_layers_config(path: str | Path) -> LayersConfig:
    """Read and validate a ``configs/layers_*.yaml`` file (errors name the key path)."""
    return load_config(path, LayersConfig, "layer-wise config")


# =========================================================================== statistics

def _chunk_ends(sizes: np.ndarray) -> np.ndarray:
    return np.cumsum(sizes)


def _chunk_sums(cum: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Sums of consecutive chunks from cumulative sums along axis 1 (chunk c ends at
    ``ends[c]``)."""
    at_end = cum[:, ends - 1]
    before = np.concatenate([np.zeros_like(at_end[:, :1]), at_end[:, :-1]], axis=1)
    return at_end - before


def cluster_permutation_test(labels: np.ndarray, *, values: np.ndarray | None = None,
                             classes: np.ndarray | None = None, n_permutations: int = 1000,
                             seed: int | Sequence[int] = 42, block: int = 100) -> dict:
    """Per-cluster permutation tests of a per-image value's mean and of class homogeneity.

    Parameters
    ----------
    labels : (n,) int
        Cluster of each image.
    values : (n,) bool/int/float, optional
        E.g. the prediction-change flags; the statistic is the cluster mean (the rate).
    classes : (n,) int, optional
        Class of each image; the statistic is the majority-class fraction.
    n_permutations : int
        Random permutations of the images; each is cut into consecutive chunks of the
        observed cluster sizes (cluster order), so the null of cluster c is the statistic
        of a random set of |c| images.
    seed : int or sequence of int
        Seeds ``numpy.random.default_rng`` (a local generator).

    Returns
    -------
    dict
        ``clusters`` (labels, ascending), ``sizes``; with ``values``: ``rate``, ``rate_p``,
        ``weighted_rate`` (size-weighted mean over clusters ≥ 1), its null ``mean``/``sd``
        and ``weighted_rate_p``; with ``classes``: ``majority_class``,
        ``majority_fraction``, ``homogeneity_p``. p-values are ``(1 + #{null ≥
        observed}) / (1 + n_permutations)``.
    """
    lab = np.asarray(labels)
    n = lab.shape[0]
    if lab.ndim != 1 or n == 0:
        raise RDXInputError(f"labels must be a non-empty 1-D array, got shape {lab.shape}.")
    clusters, inv, sizes = np.unique(lab, return_inverse=True, return_counts=True)
    ends = _chunk_ends(sizes)
    out: dict[str, Any] = {"clusters": clusters.tolist(), "sizes": sizes.tolist(),
                           "n_permutations": int(n_permutations)}
    diff = clusters >= 1
    if values is not None:
        v = np.asarray(values)
        if v.shape != (n,):
            raise RDXInputError(f"values must have one entry per image ({n}), got {v.shape}.")
        # integer flags are summed exactly, so ties between null and observed are exact
        v = v.astype(np.int64) if v.dtype.kind in "biu" else v.astype(np.float64)
        obs_sum = np.bincount(inv, weights=v, minlength=len(clusters))
        if v.dtype.kind == "i":
            obs_sum = np.rint(obs_sum).astype(np.int64)
        w_obs = obs_sum[diff].sum() / max(sizes[diff].sum(), 1)
        ge_rate = np.zeros(len(clusters), dtype=np.int64)
        w_null = []
    if classes is not None:
        cls_ = np.asarray(classes, dtype=np.int64)
        if cls_.shape != (n,) or (n and cls_.min() < 0):
            raise RDXInputError(f"classes must be one non-negative integer per image ({n}).")
        n_cls = int(cls_.max()) + 1
        counts = np.zeros((len(clusters), n_cls), dtype=np.int64)
        np.add.at(counts, (inv, cls_), 1)
        obs_major = counts.max(axis=1)
        ge_major = np.zeros(len(clusters), dtype=np.int64)
        onehot = np.eye(n_cls, dtype=np.int32)[cls_]
        # keep the cumulative one-hot block under ~64 MB
        block = max(1, min(block, int(16e6 // max(n * n_cls, 1))))
    rng = np.random.default_rng(seed)
    done = 0
    while done < n_permutations:
        b = min(block, n_permutations - done)
        perms = np.argsort(rng.random((b, n)), axis=1)
        if values is not None:
            sums = _chunk_sums(np.cumsum(v[perms], axis=1), ends)
            if v.dtype.kind == "i":
                ge_rate += (sums >= obs_sum[None, :]).sum(axis=0)
            else:
                ge_rate += (sums >= obs_sum[None, :] - 1e-12 * np.abs(obs_sum)[None, :]
                            ).sum(axis=0)
            w_null.append(sums[:, diff].sum(axis=1) / max(sizes[diff].sum(), 1))
        if classes is not None:
            cum = np.cumsum(onehot[perms], axis=1)             # b × n × C
            at_end = cum[:, ends - 1, :]
            before = np.concatenate([np.zeros_like(at_end[:, :1]), at_end[:, :-1]], axis=1)
            ge_major += ((at_end - before).max(axis=2) >= obs_major[None, :]).sum(axis=0)
        done += b
    denom = 1.0 + n_permutations
    if values is not None:
        wn = np.concatenate(w_null) if w_null else np.zeros(0)
        out.update(rate=(obs_sum / sizes).tolist(), rate_p=((1 + ge_rate) / denom).tolist(),
                   weighted_rate=float(w_obs) if diff.any() else None,
                   weighted_rate_null_mean=float(wn.mean()) if diff.any() else None,
                   weighted_rate_null_sd=float(wn.std()) if diff.any() else None,
                   weighted_rate_p=float((1 + (wn >= w_obs - 1e-12).sum()) / denom)
                   if diff.any() else None,
                   overall_rate=float(v.sum() / n))
    if classes is not None:
        out.update(majority_class=counts.argmax(axis=1).tolist(),
                   majority_fraction=(obs_major / sizes).tolist(),
                   homogeneity_p=((1 + ge_major) / denom).tolist(),
                   class_counts=counts.tolist())
    return out


def direction_stats(result_dir: Any, flags: np.ndarray, classes: np.ndarray, *,
                    n_permutations: int, seed: Sequence[int], alpha: float) -> dict:
    """The cluster statistics of one direction of an RDX fit (label 0 = no-change group)."""
    labels = np.asarray(result_dir.labels, dtype=np.int64)
    t = cluster_permutation_test(labels, values=flags, classes=classes,
                                 n_permutations=n_permutations, seed=seed)
    by_label = {c: i for i, c in enumerate(t["clusters"])}
    aff = {j: e.mean_affinity for j, e in enumerate(result_dir.explanations, start=1)}

    def record(c: int) -> dict:
        i = by_label[c]
        return {"label": c, "size": t["sizes"][i], "mean_affinity": aff.get(c),
                "change_rate": t["rate"][i], "change_p": t["rate_p"][i],
                "majority_class": t["majority_class"][i],
                "majority_fraction": t["majority_fraction"][i],
                "homogeneity_p": t["homogeneity_p"][i], "class_counts": t["class_counts"][i]}

    clusters = [record(c) for c in t["clusters"] if c >= 1]
    null = record(0) if 0 in by_label else None
    sig_c = [c["change_p"] < alpha for c in clusters]
    sig_h = [c["homogeneity_p"] < alpha for c in clusters]
    return {"n_clusters": len(clusters), "clusters": clusters, "null_group": null,
            "overall_change_rate": t["overall_rate"], "weighted_change_rate": t["weighted_rate"],
            "weighted_change_rate_null": {"mean": t["weighted_rate_null_mean"],
                                          "sd": t["weighted_rate_null_sd"]},
            "weighted_change_p": t["weighted_rate_p"],
            "n_significant_change": int(sum(sig_c)), "n_significant_homogeneity": int(sum(sig_h)),
            "fraction_significant_change": float(np.mean(sig_c)) if clusters else None,
            "fraction_significant_homogeneity": float(np.mean(sig_h)) if clusters else None,
            "n_permutations": n_permutations, "alpha": alpha, "permutation_seed": list(seed)}


# =========================================================================== probes

def single_blas_thread() -> Any:
    """A context in which BLAS runs one thread: the probes' products are small (a few
    thousand × a few hundred), threads only add synchronisation, and on a busy machine
    spinning BLAS threads made one logistic regression 100× slower."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


@dataclasses.dataclass
class LayerProbes:
    """The fitted probes of one layer and their predictions on the analysis images."""

    knn: Any
    linear: Any
    knn_pred: np.ndarray
    linear_pred: np.ndarray
    knn_accuracy: float
    linear_accuracy: float


def fit_layer_probes(X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray,
                     y_test: np.ndarray, *, k: int = 16, max_iter: int = 1000,
                     seed: int = 0) -> LayerProbes:
    """k-NN (Euclidean) and linear (standardised features, logistic regression) probes
    fitted on the probe images and evaluated on the analysis images."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if len(np.unique(y_train)) < 2:
        raise RDXInputError("the probe images hold a single class; probes need at least two.")
    if k > len(X_train):
        raise RDXInputError(f"probes.knn_k={k} exceeds the {len(X_train)} probe images.")
    knn = KNeighborsClassifier(n_neighbors=k).fit(X_train, y_train)
    linear = make_pipeline(StandardScaler(),
                           LogisticRegression(max_iter=max_iter, random_state=seed))
    with warnings.catch_warnings(), single_blas_thread():
        warnings.simplefilter("ignore", ConvergenceWarning)   # recorded by the accuracy
        linear.fit(X_train, y_train)
        kp, lp = knn.predict(X_test), linear.predict(X_test)
    return LayerProbes(knn, linear, kp, lp, float(np.mean(kp == y_test)),
                       float(np.mean(lp == y_test)))


# =========================================================================== model

@dataclasses.dataclass
class StudyModel:
    """The model of a study: its LoadedModel (cache identity, transform) and forward."""

    loaded: Any
    run: Callable
    info: dict


def _train_embedded(cfg: LayersConfig, path: Path, progress: bool, say: Callable) -> None:
    from ..data import get_dataset
    from ..data.sampling import select_per_class
    from ..models.vit import train_vit

    t = cfg.train
    ds = get_dataset(t.dataset, split=t.split, root=t.root, data_root=t.data_root)
    idx = select_per_class(ds.ids, ds.labels, None, t.per_class, seed=t.selection_seed)
    test = None if t.test_split is None else get_dataset(t.dataset, split=t.test_split,
                                                         root=t.root, data_root=t.data_root)
    say(f"training the embedded ViT on {len(idx)} {ds.name} images → {path}")
    arch = {"num_classes": len(ds.class_names), **t.arch}
    train_vit(ds.subset(idx), path, test_ds=test, arch=arch, epochs=t.epochs,
              batch_size=t.batch_size, lr=t.lr, weight_decay=t.weight_decay, seed=t.seed,
              device=cfg.device, progress=progress,
              data_info={"per_class": t.per_class, "selection_seed": t.selection_seed})


def load_study_model(cfg: LayersConfig, *, progress: bool = True,
                     say: Callable = print) -> StudyModel:
    """Load (and for the embedded ViT, train if missing) the model of a study."""
    from ..models.layers import forward_fn
    from ..models.zoo import LoadedModel, load_model

    m = cfg.model
    if m.model == EMBEDDED_VIT:
        from ..models.vit import load_vit, vit_transform

        path = Path(m.checkpoint)
        if not path.is_file():
            if cfg.train is None:
                raise RDXInputError(f"model.checkpoint {str(path)!r} does not exist; add a "
                                    "'train' section to train the embedded ViT.")
            _train_embedded(cfg, path, progress, say)
        model, meta = load_vit(path)
        arch = meta["vit"]
        model_id = EMBEDDED_VIT + "(" + ",".join(f"{k}={arch[k]!r}" for k in sorted(arch)) + ")"
        loaded = LoadedModel(model, vit_transform(meta), model_id,
                             f"{path.resolve()}:sha256={file_sha256(path)}", "", model,
                             {"family": EMBEDDED_VIT, "checkpoint": str(path)})
        info = {"model": EMBEDDED_VIT, "model_id": model_id, "weights_id": loaded.weights_id,
                "checkpoint": str(path), "train_accuracy": meta.get("train_accuracy"),
                "test_accuracy": meta.get("test_accuracy"), "training": meta.get("training"),
                "arch": arch}
        return StudyModel(loaded, model, info)
    spec = m.model_dump()
    if spec["checkpoint"] is None:
        del spec["checkpoint"]
    loaded = load_model(spec)
    loaded.model.eval()
    return StudyModel(loaded, forward_fn(loaded.model),
                      {"model": m.model, "model_id": loaded.model_id,
                       "weights_id": loaded.weights_id, **loaded.info})


# =========================================================================== images

def select_study_images(n_total: int, n_images: int, n_probe: int, seed: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``default_rng(seed).choice(n_total, n_images + n_probe, replace=False)``: the first
    ``n_images`` are the analysis images, the rest the probe images."""
    if n_images + n_probe > n_total:
        raise RDXInputError(f"data.n_images + data.n_probe = {n_images + n_probe} but the "
                            f"dataset has only {n_total} images; ask for fewer.")
    idx = np.random.default_rng(seed).choice(n_total, n_images + n_probe, replace=False)
    return idx[:n_images].astype(np.int64), idx[n_images:].astype(np.int64)


# =========================================================================== patching

def _resolve_patching(cfg: LayersConfig, model: torch.nn.Module, specs: list, pairs: list
                      ) -> list[dict]:
    """The blocks to patch: block index, module name, its attention, target layer, pair."""
    from ..models.layers import find_blocks, get_module
    from ..models.patching import attention_of

    p = cfg.patching
    container = p.blocks_module or find_blocks(model)
    if container is None:
        raise RDXInputError("patching: no transformer blocks found; set "
                            "patching.blocks_module or patching.enabled: false.")
    blocks = get_module(model, container)
    n_blocks = len(blocks)
    by_key = {s.key: i for i, s in enumerate(specs)}
    candidates = []
    for b in range(n_blocks):
        target = next((s for s in specs if s.module == f"{container}.{b}"
                       and s.point == "output"), None)
        candidates.append(target)
    if p.blocks == "auto":
        chosen = [b for b, t in enumerate(candidates) if t is not None]
    else:
        bad = [b for b in p.blocks if b >= n_blocks]
        if bad:
            raise RDXInputError(f"patching.blocks: {bad} do not exist ({container} has "
                                f"{n_blocks} blocks).")
        missing = [b for b in p.blocks if candidates[b] is None]
        if missing:
            raise RDXInputError(f"patching.blocks: the outputs of blocks {missing} are not "
                                f"among the layers ({container}.<b>); add them or drop "
                                "those blocks.")
        chosen = list(p.blocks)
    if not chosen:
        raise RDXInputError(f"patching: none of the layers is the output of a block of "
                            f"{container}; list {container}.<b> layers or disable patching.")
    out = []
    for b in chosen:
        name = f"{container}.{b}"
        attn = attention_of(get_module(model, name), name)
        heads = list(range(attn.num_heads)) if p.heads == "auto" else list(p.heads)
        bad = [h for h in heads if h >= attn.num_heads]
        if bad:
            raise RDXInputError(f"patching.heads: {bad} do not exist ({name}.attn has "
                                f"{attn.num_heads} heads).")
        target = candidates[b]
        pair = next((i for i, (_, bb) in enumerate(pairs) if bb == by_key[target.key]), None)
        out.append({"block": b, "module": name, "attn": attn, "heads": heads,
                    "target": target, "pair": pair})
    return out


@torch.no_grad()
def patched_outputs(model: torch.nn.Module, run: Callable, loader: Any, block_name: str,
                    attn: torch.nn.Module, means: np.ndarray, heads: Sequence[int], *,
                    pool: str, n_prefix: int, device: torch.device, progress: Any = None
                    ) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """Block ``block_name`` re-run on its unpatched input with each head mean-ablated.

    Returns ``({head: n × d patched output, pooled}, n × d unpatched re-run)``; the input of
    the block comes from a forward pass stopped at the block.
    """
    from ..models.layers import LayerSpec, capture_batch, get_module, reduce_tensor
    from ..models.patching import mean_ablation

    block = get_module(model, block_name)
    spec_in = LayerSpec(block_name, "input")
    outs: dict[int, list] = {h: [] for h in heads}
    plain = []
    for images, _ in loader:
        x = images.to(device)
        x_in = capture_batch(model, x, [spec_in], run=run, reduce=False)[spec_in.key]
        plain.append(reduce_tensor(block(x_in), pool, n_prefix).float().cpu())
        for h in heads:
            with mean_ablation(attn, means, h):
                y = block(x_in)
            outs[h].append(reduce_tensor(y, pool, n_prefix).float().cpu())
        if progress is not None:
            progress.update(len(images))
    return ({h: torch.cat(v).numpy() for h, v in outs.items()}, torch.cat(plain).numpy())


def head_metrics(P: np.ndarray, T: np.ndarray, R_T: torch.Tensor, S_T: torch.Tensor | None,
                 est: Any, *, k: int, labels: dict[str, np.ndarray] | None,
                 probes: LayerProbes, y: np.ndarray) -> tuple[dict, dict]:
    """Metrics of one patched output ``P`` against the unpatched target ``T``.

    ``R_T``: neighbour ranks of T; ``S_T``: RDX's similarity matrix of T (``est.
    similarity_of(T)``; None when it is the rank matrix); ``labels``: the RDX clusters of
    the pair ending at this block, per direction. Returns (record, arrays).
    """
    from ..method.geometry import rank_matrix, to_device_centered
    from ..models.patching import cluster_neighbourhood_delta, topk_neighbourhood_change
    from ..similarity.cka import debiased_linear_cka

    dev = R_T.device
    R_P = rank_matrix(to_device_centered(P, dev))
    # similarity_of gives numpy on the CPU; the patching metrics work on tensors
    S_P = R_P if S_T is None else torch.as_tensor(est.similarity_of(P), device=dev)
    S_T = R_T if S_T is None else S_T
    rec: dict[str, Any] = {"topk_change": topk_neighbourhood_change(R_P, R_T, k),
                           "one_minus_cka": 1.0 - float(debiased_linear_cka(P, T))}
    deltas: dict[str, dict] = {}
    if labels is not None:
        for d in DIRECTIONS:
            deltas[d] = cluster_neighbourhood_delta(S_P, S_T, labels[d], d)
        flat = [x for d in DIRECTIONS for x in deltas[d]["delta"] if x is not None]
        rec["cluster_delta_mean"] = float(np.mean(flat)) if flat else None
        rec["cluster_delta_sum_abs"] = float(np.sum(np.abs(flat))) if flat else None
        rec["cluster_delta_max"] = float(np.max(flat)) if flat else None
    else:
        rec.update(cluster_delta_mean=None, cluster_delta_sum_abs=None, cluster_delta_max=None)
    rec["cluster_delta"] = deltas
    with single_blas_thread():
        kp, lp = probes.knn.predict(P), probes.linear.predict(P)
    rec["knn_acc"] = float(np.mean(kp == y))
    rec["linear_acc"] = float(np.mean(lp == y))
    rec["knn_acc_change"] = rec["knn_acc"] - probes.knn_accuracy
    rec["linear_acc_change"] = rec["linear_acc"] - probes.linear_accuracy
    rec["knn_flip_rate"] = float(np.mean(kp != probes.knn_pred))
    rec["linear_flip_rate"] = float(np.mean(lp != probes.linear_pred))
    return rec, {"knn_pred": kp.astype(np.int32), "linear_pred": lp.astype(np.int32)}


# =========================================================================== the run

def _pair_folder(i: int, a: Any, b: Any) -> str:
    return f"{i:02d}_{a.label}__{b.label}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _images_doc(ds: Any, idx: np.ndarray, split: str) -> dict:
    return {"dataset": ds.name, "split": split, "n_images": len(idx),
            "class_names": list(ds.class_names), "indices": idx,
            "ids": [ds.ids[i] for i in idx], "labels": np.asarray(ds.labels)[idx]}


def _read_record(path: Path, fingerprint: str) -> dict | None:
    if not path.is_file():
        return None
    try:
        rec = read_json(path)
    except (RDXInputError, OSError, UnicodeDecodeError):
        return None
    return rec if rec.get("fingerprint") == fingerprint else None


def run_layers(cfg: LayersConfig, *, force: bool = False, progress: bool = True,
               log: Callable[[str], None] | None = None) -> dict:
    """Run (or resume) a layer-wise study; returns the ``layers.json`` document.

    Everything is checked before the first forward pass (dataset and sizes, model and
    weights, layers, RDX parameters, patchable blocks). ``force`` recomputes finished layer
    pairs and heads (features still come from the cache).
    """
    from tqdm.auto import tqdm

    from ..backend import resolve_device
    from ..data import get_dataset
    from ..data.selection import LazyImages
    from ..evaluation.scoring import Scorer
    from ..method.estimator import RDX
    from ..models.layers import (as_layer_specs, auto_layers, check_layers, extract_layers,
                                 prefix_tokens)
    from ..similarity.cka import debiased_linear_cka
    from .run import save_result_grids

    say = log or (print if progress else (lambda _m: None))
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    out = cfg.output_dir
    started = _now()

    # ---------------------------------------------------------------- checks, up front
    d = cfg.data
    with working(f"layers: loading {d.dataset}/{d.split}", show=progress, keep=False):
        ds = get_dataset(d.dataset, split=d.split, root=d.root, data_root=d.data_root)
    idx_a, idx_p = select_study_images(len(ds), d.n_images, d.n_probe, d.seed)
    y_all = np.asarray(ds.labels, dtype=np.int64)
    y, y_probe = y_all[idx_a], y_all[idx_p]
    t = time.perf_counter()
    sm = load_study_model(cfg, progress=progress, say=say)
    timings["model"] = time.perf_counter() - t
    model = sm.loaded.model
    specs = auto_layers(model) if cfg.layers == "auto" else as_layer_specs(cfg.layers)
    if len(specs) < 2:
        raise RDXInputError("the study needs at least two layers.")
    check_layers(model, specs)
    pairs = [(i, i + 1) for i in range(len(specs) - 1)]
    params = cfg.rdx_params
    plan = _resolve_patching(cfg, model, specs, pairs) if cfg.patching.enabled else []
    dev = resolve_device(cfg.device)
    say(f"layer-wise study {cfg.name}: {sm.info['model_id']}, {len(specs)} layers "
        f"({', '.join(s.label for s in specs)}), {d.n_images} analysis + {d.n_probe} probe "
        f"images of {ds.name}/{d.split}"
        + (f", patching {len(plan)} blocks × {len(plan[0]['heads'])} heads" if plan else ""))

    # ---------------------------------------------------------------- features
    t = time.perf_counter()
    both = np.concatenate([idx_a, idx_p])
    feats = extract_layers(sm.loaded, ds, specs, both, batch_size=cfg.batch_size, device=dev,
                           num_workers=cfg.num_workers, amp=cfg.amp, cache_dir=cfg.cache_dir,
                           progress=progress, run=sm.run)
    n = len(idx_a)
    X = {s.key: feats[s.key][:n] for s in specs}
    Xp = {s.key: feats[s.key][n:] for s in specs}
    for s in specs:
        if np.ptp(X[s.key], axis=0).max() == 0:
            raise RDXInputError(
                f"layer {s.key!r} gives the same features for every image (e.g. the CLS token "
                "entering the first block is a learned constant); use its patch tokens "
                f"('{s.key.split('/')[0]}/mean') or another layer.")
    timings["features"] = time.perf_counter() - t
    write_json_atomic(out / IMAGES_JSON, {"analysis": _images_doc(ds, idx_a, d.split),
                                          "probe": _images_doc(ds, idx_p, d.split),
                                          "selection": d.model_dump()})

    # ---------------------------------------------------------------- probes
    t = time.perf_counter()
    probes: dict[str, LayerProbes] = {}
    # one layer's probes (k-NN, logistic regression on wide features) take seconds: the
    # bars are redrawn meanwhile (keep_alive), so their clocks move
    bar = tqdm(specs, desc="probes", disable=not progress, leave=False)
    with keep_alive(bar):
        for s in bar:
            probes[s.key] = fit_layer_probes(Xp[s.key], y_probe, X[s.key], y,
                                             k=cfg.probes.knn_k,
                                             max_iter=cfg.probes.linear_max_iter,
                                             seed=cfg.probes.seed)
    layer_docs = [{"index": i, "key": s.key, "label": s.label, "module": s.module,
                   "point": s.point, "pool": s.pool, "dim": int(X[s.key].shape[1]),
                   "knn_accuracy": probes[s.key].knn_accuracy,
                   "linear_accuracy": probes[s.key].linear_accuracy}
                  for i, s in enumerate(specs)]
    write_json_atomic(out / "probes.json", {"layers": layer_docs, "params": cfg.probes.model_dump(),
                                            "n_train": len(idx_p), "n_test": n})
    save_npz_atomic(out / "probes.npz", labels=y,
                    **{f"knn_{i}": probes[s.key].knn_pred for i, s in enumerate(specs)},
                    **{f"linear_{i}": probes[s.key].linear_pred for i, s in enumerate(specs)})
    timings["probes"] = time.perf_counter() - t
    for ld in layer_docs:
        say(f"  {ld['label']:>10s} {ld['dim']:5d}-d  k-NN {ld['knn_accuracy']:.3f}  linear "
            f"{ld['linear_accuracy']:.3f}")

    # ---------------------------------------------------------------- pairs
    t_pairs = time.perf_counter()
    images = LazyImages(ds, idx_a)
    pair_docs, pair_labels = [], {}
    change = cfg.probes.change_probe
    st = cfg.stats
    pair_bar = tqdm(pairs, desc="RDX layer pairs", disable=not progress)
    with keep_alive(pair_bar):   # one pair (an RDX fit, scores, grids) takes seconds
        for pi, (ia, ib) in enumerate(pair_bar):
            sa, sb = specs[ia], specs[ib]
            A, B = X[sa.key], X[sb.key]
            pa = getattr(probes[sa.key], f"{change}_pred")
            pb = getattr(probes[sb.key], f"{change}_pred")
            flags = pa != pb
            fingerprint = json_digest({"format": FORMAT_VERSION, "data": array_digest(A, B, y),
                                       "flags": array_digest(flags), "rdx": params,
                                       "stats": st.model_dump(), "change_probe": change,
                                       "score": cfg.score, "chance_draws": cfg.chance_draws})
            folder = _pair_folder(pi, sa, sb)
            store = ComparisonRun(out / "pairs" / folder)
            mdir = store.method_dir(METHOD_NAME)
            tp = time.perf_counter()
            if not force and store.is_finished(METHOD_NAME, fingerprint):
                stats_doc = read_json(mdir / "cluster_stats.json")
                with np.load(mdir / "clusters.npz", allow_pickle=False) as z:
                    labels = {dd: z[f"labels_{dd}"] for dd in DIRECTIONS}
                state = "reused"
            else:
                store.write_json(IMAGES_JSON, _images_doc(ds, idx_a, d.split))
                store.write_representations(A, B, y)
                est = RDX(**{**params, "device": cfg.device})
                est.fit(A, B, labels=y)
                result = est.result()
                if cfg.score:
                    Scorer(A, B, labels=y, chance_draws=cfg.chance_draws).score(result)
                result.run = {"experiment": f"layers/{cfg.name}", "comparison": folder,
                              "method": "rdx", "name": METHOD_NAME,
                              "seed": int(params.get("random_state", 42)),
                              "fingerprint": fingerprint, "layers": [sa.key, sb.key]}
                labels = {dd: np.asarray(result.directions[dd].labels, dtype=np.int64)
                          for dd in DIRECTIONS}
                stats_doc = {"pair": pi, "a": sa.key, "b": sb.key, "change_probe": change,
                             "directions": {}}
                for di, dd in enumerate(DIRECTIONS):
                    stats_doc["directions"][dd] = direction_stats(
                        result.directions[dd], flags, y, n_permutations=st.n_permutations,
                        seed=[st.seed, pi, di], alpha=st.alpha)
                extra = [save_npz_atomic(mdir / "clusters.npz", flags=flags,
                                         **{f"labels_{dd}": labels[dd] for dd in DIRECTIONS}),
                         write_json_atomic(mdir / "cluster_stats.json", stats_doc)]
                extra += save_result_grids(result, images, mdir)
                store.write_json(RUN_JSON, {
                    "experiment": f"layers/{cfg.name}", "comparison": folder,
                    "seed": int(params.get("random_state", 42)),
                    "config": {"image_selection": {"dataset": d.dataset, "split": d.split,
                                                   "indices": "images.json"},
                               "representations": {"a": {"model": sm.info["model_id"],
                                                         "layer": sa.key},
                                                   "b": {"model": sm.info["model_id"],
                                                         "layer": sb.key}},
                               "methods": [{"method": "rdx", "name": METHOD_NAME, **params}]},
                    "versions": versions(), "started": _now(), "device": cfg.device,
                    "timings_s": {METHOD_NAME: time.perf_counter() - tp},
                    "methods": {METHOD_NAME: "done"}, "layers": {"a": sa.key, "b": sb.key}})
                store.write_result(METHOD_NAME, result, extra_files=extra)   # last: marks it done
                state = "computed"
            pair_labels[pi] = labels
            res = store.result(METHOD_NAME)
            bsr = res.bsr if res is not None else None
            pair_docs.append({"index": pi, "a": sa.key, "b": sb.key, "a_label": sa.label,
                              "b_label": sb.label, "folder": f"pairs/{folder}",
                              "cka": float(debiased_linear_cka(A, B)),
                              "bsr": bsr, "directions": stats_doc["directions"], "state": state,
                              "seconds": time.perf_counter() - tp})
            dirs = stats_doc["directions"]
            say(f"  {sa.label}→{sb.label}: "
                + "; ".join(f"{dd}: {dirs[dd]['n_clusters']} clusters, "
                            f"{dirs[dd]['n_significant_change']} change- / "
                            f"{dirs[dd]['n_significant_homogeneity']} class-enriched"
                            for dd in DIRECTIONS) + f"  [{state}]")
    timings["pairs"] = time.perf_counter() - t_pairs

    # ---------------------------------------------------------------- patching
    patch_doc = None
    if plan:
        t = time.perf_counter()
        patch_doc = _run_patching(cfg, sm, ds, idx_a, y, X, probes, plan, pair_labels,
                                  pair_docs, params, dev, out, force=force, progress=progress,
                                  say=say, n_prefix=prefix_tokens(model))
        timings["patching"] = time.perf_counter() - t

    # ---------------------------------------------------------------- summary
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": cfg.name,
           "description": cfg.description, "config": cfg.model_dump(),
           "rdx": params, "model": sm.info, "n_prefix_tokens": prefix_tokens(model),
           "data": {"dataset": ds.name, "split": d.split, "n_images": n,
                    "n_probe": len(idx_p), "seed": d.seed, "class_names": list(ds.class_names),
                    "class_counts": np.bincount(y, minlength=len(ds.class_names)).tolist()},
           "layers": layer_docs, "pairs": pair_docs,
           "significance": significance_summary(pair_docs, cfg.stats.alpha),
           "patching": patch_doc, "started": started, "finished": _now(),
           "timings_s": {**timings, "total": time.perf_counter() - t_start},
           "versions": versions()}
    write_json_atomic(out / "layers.json", doc)
    t = time.perf_counter()
    from ..viz.layers import layer_figures
    layer_figures(doc, out / "figures")
    doc["timings_s"]["figures"] = time.perf_counter() - t
    write_json_atomic(out / "layers.json", doc)
    return doc


def significance_summary(pair_docs: list[dict], alpha: float) -> dict:
    """Totals over all pairs: how many difference clusters are change- / class-enriched."""
    out: dict[str, Any] = {"alpha": alpha}
    for dd in (*DIRECTIONS, "all"):
        dirs = DIRECTIONS if dd == "all" else (dd,)
        n = sum(p["directions"][x]["n_clusters"] for p in pair_docs for x in dirs)
        c = sum(p["directions"][x]["n_significant_change"] for p in pair_docs for x in dirs)
        h = sum(p["directions"][x]["n_significant_homogeneity"] for p in pair_docs
                for x in dirs)
        out[dd] = {"n_clusters": n, "n_significant_change": c, "n_significant_homogeneity": h,
                   "fraction_significant_change": c / n if n else None,
                   "fraction_significant_homogeneity": h / n if n else None}
    return out


def _run_patching(cfg: LayersConfig, sm: StudyModel, ds: Any, idx_a: np.ndarray,
                  y: np.ndarray, X: dict, probes: dict, plan: list[dict], pair_labels: dict,
                  pair_docs: list[dict], params: dict, dev: torch.device, out: Path, *,
                  force: bool, progress: bool, say: Callable, n_prefix: int) -> dict:
    from tqdm.auto import tqdm

    from ..models.layers import image_loader
    from ..method.estimator import RDX
    from ..method.geometry import rank_matrix, to_device_centered
    from ..models.patching import head_output_means

    model = sm.loaded.model.to(dev).eval()
    pdir = out / "patching"
    k = cfg.patching.k
    n = len(idx_a)
    if not 1 <= k < n:
        raise RDXInputError(f"patching.k={k} must be below the {n} analysis images.")

    def loader():
        return image_loader(ds, idx_a, sm.loaded.transform, batch_size=cfg.batch_size,
                            num_workers=cfg.num_workers, pin_memory=dev.type == "cuda")

    # the head means: cached next to the results, keyed by the model and the images
    means_key = json_digest({"weights": sm.loaded.weights_id, "model": sm.loaded.model_id,
                             "ids": [ds.ids[i] for i in idx_a],
                             "transform": repr(sm.loaded.transform),
                             "blocks": [p["module"] for p in plan]})
    means_path = pdir / "head_means.npz"
    means = None
    if means_path.is_file() and not force:
        try:
            with np.load(means_path, allow_pickle=False) as z:
                if str(z["key"]) == means_key:
                    means = {p["module"]: z[f"b{p['block']}"] for p in plan}
        except (OSError, ValueError, KeyError, EOFError):
            means = None
    if means is None:
        with tqdm(total=n, desc="head means", unit="img", disable=not progress,
                  leave=False) as bar:
            means = head_output_means((x for x, _ in loader()), sm.run,
                                      {p["module"]: p["attn"] for p in plan}, device=dev,
                                      progress=bar)
        save_npz_atomic(means_path, key=np.array(means_key),
                        **{f"b{p['block']}": means[p["module"]] for p in plan})
    means_digest = json_digest({k_: array_digest(v) for k_, v in means.items()})

    est = RDX(**{**params, "device": cfg.device})
    heads_total = sum(len(p["heads"]) for p in plan)
    records: dict[tuple[int, int], dict] = {}
    checks = {}
    bar = tqdm(total=heads_total, desc="patching heads", disable=not progress)
    for p in plan:
        b, target = p["block"], p["target"]
        T = X[target.key]
        pair = p["pair"]
        labels = pair_labels.get(pair) if pair is not None else None
        pair_fp = None if pair is None else json_digest(pair_docs[pair]["directions"])
        fps = {h: json_digest({"format": FORMAT_VERSION, "weights": sm.loaded.weights_id,
                               "target": array_digest(T), "pair": pair_fp, "block": b,
                               "head": h, "k": k, "means": means_digest,
                               "probes": cfg.probes.model_dump(), "rdx": params})
               for h in p["heads"]}
        pending = []
        for h in p["heads"]:
            rec = None if force else _read_record(pdir / f"b{b}_h{h}.json", fps[h])
            if rec is not None and (pdir / f"b{b}_h{h}.npz").is_file():
                records[(b, h)] = rec
                bar.update(1)
            else:
                pending.append(h)
        if not pending:
            continue
        with tqdm(total=n, desc=f"block {b}: {len(pending)} heads", unit="img",
                  disable=not progress, leave=False) as ibar:
            P, plain = patched_outputs(model, sm.run, loader(), p["module"], p["attn"],
                                       means[p["module"]], pending, pool=target.pool,
                                       n_prefix=n_prefix, device=dev, progress=ibar)
        # the block re-run on its captured input must give the captured output
        checks[b] = float(np.abs(plain - T).max())
        R_T = rank_matrix(to_device_centered(T, est_device(est)))
        S_T = None if est.similarity == "neighborhood" else torch.as_tensor(
            est.similarity_of(T), device=R_T.device)
        for h in pending:
            rec, arrays = head_metrics(P[h], T, R_T, S_T, est, k=k, labels=labels,
                                       probes=probes[target.key], y=y)
            rec.update(block=b, head=h, module=p["module"], target=target.key, pair=pair,
                       rerun_max_abs_diff=checks[b], fingerprint=fps[h])
            save_npz_atomic(pdir / f"b{b}_h{h}.npz", **arrays)
            write_json_atomic(pdir / f"b{b}_h{h}.json", rec)   # last: marks the head done
            records[(b, h)] = rec
            bar.update(1)
        del P
    bar.close()
    blocks = [p["block"] for p in plan]
    heads = sorted({h for p in plan for h in p["heads"]})
    matrices = {}
    for m in HEAD_METRICS:
        M = np.full((len(blocks), len(heads)), np.nan)
        for i, b in enumerate(blocks):
            for j, h in enumerate(heads):
                v = (records.get((b, h)) or {}).get(m)
                if v is not None:
                    M[i, j] = v
        matrices[m] = M
    save_npz_atomic(out / "patching.npz", blocks=np.array(blocks), heads=np.array(heads),
                    **matrices)
    top = {}
    for m in ("topk_change", "one_minus_cka", "cluster_delta_mean", "knn_acc_change"):
        items = [r for r in records.values() if r.get(m) is not None]
        # accuracy changes: the most harmful heads (most negative) first
        items.sort(key=lambda r: r[m], reverse=m != "knn_acc_change")
        top[m] = [{"block": r["block"], "head": r["head"], "value": r[m]} for r in items[:5]]
    for m, rows in top.items():
        if rows:
            say(f"  top heads by {m}: " + ", ".join(f"b{r['block']}h{r['head']} "
                                                     f"({r['value']:.3f})" for r in rows[:3]))
    return {"blocks": blocks, "heads": heads, "k": k,
            "metrics": {m: matrices[m].tolist() for m in HEAD_METRICS},
            "target_layers": {str(p["block"]): p["target"].key for p in plan},
            "pairs": {str(p["block"]): p["pair"] for p in plan},
            "rerun_max_abs_diff": {str(b_): v for b_, v in checks.items()},
            "top_heads": top,
            "records": [records[key] for key in sorted(records)]}


def est_device(est: Any) -> torch.device:
    from ..backend import resolve_device

    return resolve_device(est.device)


# =========================================================================== command line

def run_command(args: argparse.Namespace, *,
                report: Callable[[Path], Path] | None = None) -> int:
    """``rdx layers --config ...``: run the study, then ``report(output folder)`` (the
    command line passes :func:`rdx.report.layers.write_layers_report`) unless
    ``--no-report``."""
    cfg = load_layers_config(args.config)
    updates: dict[str, Any] = {}
    given = getattr(args, "output", None) is not None
    if given:
        updates["output"] = str(args.output)
    if getattr(args, "device", None):
        updates["device"] = args.device
    if updates:
        from ..configs import validate
        cfg = validate(LayersConfig, {**cfg.model_dump(), **updates}, str(args.config))
    if getattr(args, "check", False):
        if not args.quiet:
            print(f"{args.config}: valid; output {cfg.output_dir}")
        return 0
    from ..paths import check_output_dir
    # before the study: a file there, a path under a file, no rights
    check_output_dir(cfg.output_dir, "--output" if given else "output (config)", create=False)
    doc = run_layers(cfg, force=bool(getattr(args, "force", False)),
                     progress=not getattr(args, "quiet", False))
    if report is not None and not getattr(args, "no_report", False):
        path = report(cfg.output_dir)
        if not args.quiet:
            print(f"report: {path}")
    if not args.quiet:
        print(f"layer-wise study written to {cfg.output_dir} "
              f"({doc['timings_s']['total']:.1f} s)")
    return 0


__all__ = ["DEFAULT_RDX", "FORMAT", "HEAD_METRICS", "LayerProbes", "LayersConfig",
           "check_rdx_params", "cluster_permutation_test", "direction_stats",
           "fit_layer_probes", "head_metrics", "load_layers_config", "load_study_model",
           "patched_outputs", "run_command", "run_layers", "select_study_images",
           "significance_summary"]
