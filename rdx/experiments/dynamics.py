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
    figures/*.png, report.html    (rdx.viz.dynamics, rdx.report.dynamics)

Entry points: :func:`load_config`, :func:`run_dynamics` (and ``scripts/training_dynamics.py``).
"""
from __future__ import annotations

import csv
import io
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from pydantic import ConfigDict, Field, field_validator, model_validator

from ..configs import StrictModel, check_safe_name, validate
from ..errors import RDXInputError
from ..progress import working
from .config import ImageSelection
from ..results.store import load_dynamics, load_features, load_labels  # noqa: F401  (re-exported)
from ..io import (
    atomic_write,
    file_sha256,
    json_digest,
    jsonable,
    read_json,
    save_npz_atomic,
    versions,
    write_json_atomic,
)

FORMAT = "rdx-training-dynamics"
FORMAT_VERSION = 1
#: The paper's settings: 10 clusters (0 = no-change group), threshold 1.5.
DEFAULT_N_CLUSTERS = 10
DEFAULT_THRESHOLD = 1.5
#: RDX parameters a config may set (``n_clusters`` replaces ``n_explanations``); the rest
#: is fixed by the method: spectral clustering, merge_low_affinity, direction a_over_b.
DIRECTION = "a_over_b"   # close in the final model (A), far apart in the checkpoint (B)


# =========================================================================== pure analysis

def no_change_rule(means: Sequence[float], threshold: float = DEFAULT_THRESHOLD) -> dict:
    """The paper's post-processing of the clusters' mean affinities.

    Clusters are ordered by mean affinity, low to high (ties by index); the lowest one is
    cluster 0 and every other cluster whose mean is below ``threshold`` joins it in the
    no-change group. This is what ``RDX(merge_low_affinity=True)`` does with its spectral
    clusters (tested against it).

    Returns
    -------
    dict
        ``order`` (cluster ids, ascending mean), ``null`` (ids in the no-change group,
        cluster 0 first), ``explained`` (the others, ascending: new labels 1, 2, …),
        ``no_change`` (whether cluster 0 is itself below the threshold) and ``new_label``
        (array mapping an old id to its label: 0 for the no-change group).
    """
    m = np.asarray(means, dtype=np.float64)
    if m.ndim != 1 or m.size == 0:
        raise RDXInputError(f"means must be a non-empty 1-D sequence, got shape {m.shape}.")
    order = np.lexsort((np.arange(m.size), m))
    explained = [int(c) for c in order[1:] if not m[c] < threshold]
    null = [int(order[0])] + [int(c) for c in order[1:] if m[c] < threshold]
    new_label = np.zeros(m.size, dtype=np.int64)
    new_label[explained] = np.arange(1, len(explained) + 1)
    return {"order": order.tolist(), "null": null, "explained": explained,
            "no_change": bool(m[order[0]] < threshold), "new_label": new_label}


def cluster_mean_affinities(S: np.ndarray | torch.Tensor, labels: np.ndarray,
                            n_labels: int | None = None) -> np.ndarray:
    """Mean within-cluster affinity ``mean_{i,j∈c} S[i, j]`` of every label (NaN if empty)."""
    S = torch.as_tensor(np.asarray(S) if not isinstance(S, torch.Tensor) else S).double()
    lab = np.asarray(labels, dtype=np.int64)
    k = int(lab.max()) + 1 if n_labels is None else int(n_labels)
    Y = torch.zeros((len(lab), k), dtype=torch.float64)
    Y[torch.arange(len(lab)), torch.as_tensor(lab)] = 1.0
    sums = torch.diag(Y.T @ S @ Y).numpy()
    sizes = np.bincount(lab, minlength=k).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sizes > 0, sums / sizes**2, np.nan)


def band(values: Sequence[float]) -> dict | None:
    """``{"mean", "min", "max"}`` of the finite values (None when there are none)."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return None
    return {"mean": float(v.mean()), "min": float(v.min()), "max": float(v.max())}


def cluster_stats(members: np.ndarray, correct_t: np.ndarray, correct_final: np.ndarray,
                  classes: np.ndarray, n_classes: int) -> dict:
    """Size, accuracy of the checkpoint and of the final model, and class counts of a cluster."""
    members = np.asarray(members, dtype=np.int64)
    n = int(members.size)
    return {"size": n,
            "accuracy": float(correct_t[members].mean()) if n else None,
            "accuracy_final": float(correct_final[members].mean()) if n else None,
            "class_counts": np.bincount(classes[members], minlength=n_classes).astype(int).tolist()}


def summarize_direction(result: Any, *, n_clusters: int, threshold: float,
                        correct_t: np.ndarray, correct_final: np.ndarray, classes: np.ndarray,
                        n_classes: int) -> dict:
    """One checkpoint's record from an RDX :class:`~rdx.method.estimator.DirectionResult`
    fitted with ``merge_low_affinity=True`` (label 0 = no-change group, j = explanation j).

    Returns ``cluster0`` (the no-change group: mean affinity, size, accuracies, class
    counts), ``clusters`` (the difference clusters 1–m, ascending affinity, each with its grid
    images), ``band`` (mean/min/max over clusters 1–m of mean affinity, size and both
    accuracies; size 0 and the rest None when m = 0), ``no_change`` (cluster 0 is a
    no-change cluster: its mean affinity is below the threshold — necessarily so when other
    clusters were merged into it), ``n_merged`` and ``n_difference_clusters``.
    """
    labels = np.asarray(result.labels, dtype=np.int64)
    null_members = np.flatnonzero(labels == 0)
    n_merged = int(n_clusters) - 1 - len(result.explanations)
    null_mean = float(result.null_mean_affinity)
    c0 = {"label": 0, "mean_affinity": null_mean,
          **cluster_stats(null_members, correct_t, correct_final, classes, n_classes)}
    clusters = []
    for j, e in enumerate(result.explanations, start=1):
        clusters.append({"label": j, "mean_affinity": float(e.mean_affinity),
                         **cluster_stats(np.asarray(e.members), correct_t, correct_final,
                                         classes, n_classes),
                         "grid": [int(i) for i in e.images]})
    if clusters:
        bands = {key: band([c[key] for c in clusters])
                 for key in ("mean_affinity", "size", "accuracy", "accuracy_final")}
    else:
        bands = {"mean_affinity": None, "size": {"mean": 0.0, "min": 0.0, "max": 0.0},
                 "accuracy": None, "accuracy_final": None}
    return {"no_change": bool(n_merged > 0 or null_mean < threshold), "n_merged": n_merged,
            "n_difference_clusters": len(clusters), "cluster0": c0, "clusters": clusters,
            "band": bands}


#: Difference clusters of consecutive checkpoints are the same cluster (one track) when the
#: Hungarian matching pairs them and their member sets overlap at least this much (Jaccard).
MIN_TRACK_JACCARD = 0.1


def match_clusters(previous: np.ndarray, current: np.ndarray, *,
                   min_jaccard: float = MIN_TRACK_JACCARD) -> dict[int, int]:
    """Which difference cluster of the previous checkpoint each one of the current
    checkpoint continues: ``{current label: previous label}``.

    The clusters (labels ≥ 1; 0 is the no-change group, which is always itself) are paired
    one-to-one by the Hungarian method (:func:`scipy.optimize.linear_sum_assignment`)
    maximising the total Jaccard overlap of their member sets; a pair that shares less
    than ``min_jaccard`` is no continuation (the current cluster is new).
    """
    from scipy.optimize import linear_sum_assignment

    previous, current = np.asarray(previous), np.asarray(current)
    if previous.shape != current.shape:
        raise RDXInputError(f"cluster labels of {previous.shape} and {current.shape} images: "
                            "both checkpoints must label the same probe images.")
    P, C = np.unique(previous[previous > 0]), np.unique(current[current > 0])
    if not len(P) or not len(C):
        return {}
    onehot_p = previous[:, None] == P[None, :]
    onehot_c = current[:, None] == C[None, :]
    inter = onehot_p.T.astype(np.int64) @ onehot_c.astype(np.int64)
    union = onehot_p.sum(0)[:, None] + onehot_c.sum(0)[None, :] - inter
    jaccard = inter / np.maximum(union, 1)
    rows, cols = linear_sum_assignment(jaccard, maximize=True)
    return {int(C[j]): int(P[i]) for i, j in zip(rows, cols) if jaccard[i, j] >= min_jaccard}


def cluster_tracks(labels: Sequence[np.ndarray], *,
                   min_jaccard: float = MIN_TRACK_JACCARD) -> list[dict[int, int]]:
    """A track id for every cluster of every checkpoint (in training order), so that one
    cluster can be followed across checkpoints: track 0 is the no-change group; a
    difference cluster keeps the track of the previous checkpoint's cluster it continues
    (:func:`match_clusters`), else it starts a new track (numbered in order of appearance).
    Returns ``[{label: track}, ...]``, one mapping per checkpoint."""
    out: list[dict[int, int]] = []
    next_id, prev, prev_tracks = 1, None, {}
    for lab in labels:
        lab = np.asarray(lab)
        cont = match_clusters(prev, lab, min_jaccard=min_jaccard) if prev is not None else {}
        tracks = {0: 0}
        for c in (int(v) for v in np.unique(lab[lab > 0])):
            if c in cont:
                tracks[c] = prev_tracks[cont[c]]
            else:
                tracks[c] = next_id
                next_id += 1
        out.append(tracks)
        prev, prev_tracks = lab, tracks
    return out


def add_tracks(records: list[dict], labels: Sequence[np.ndarray], *,
               min_jaccard: float = MIN_TRACK_JACCARD) -> int:
    """Write ``track`` into cluster 0 and every difference cluster of each record (in
    place, from :func:`cluster_tracks`); returns the number of tracks."""
    tracks = cluster_tracks(labels, min_jaccard=min_jaccard)
    for rec, tr in zip(records, tracks, strict=True):
        rec["cluster0"]["track"] = 0
        for c in rec["clusters"]:
            c["track"] = tr[int(c["label"])]
    return 1 + max((t for tr in tracks for t in tr.values()), default=0)


def rdx_estimator(params: dict | None = None, device: str = "auto"):
    """The RDX estimator of the analysis: ``n_clusters`` → ``n_explanations = n_clusters −
    1`` (cluster 0 is the no-change group), spectral clustering, ``merge_low_affinity``."""
    from ..method.estimator import RDX

    p = dict(params or {})
    n_clusters = int(p.pop("n_clusters", DEFAULT_N_CLUSTERS))
    if n_clusters < 2:
        raise RDXInputError(f"rdx.n_clusters must be at least 2 (cluster 0 + one difference), "
                            f"got {n_clusters}.")
    p.setdefault("null_threshold", DEFAULT_THRESHOLD)
    return RDX(n_explanations=n_clusters - 1, clustering="spectral", merge_low_affinity=True,
               device=device, **p)


def analyse_checkpoint(final_features: np.ndarray, features: np.ndarray, *,
                       correct_t: np.ndarray, correct_final: np.ndarray, classes: np.ndarray,
                       n_classes: int, rdx_params: dict | None = None, device: str = "auto",
                       similarity_final: torch.Tensor | None = None
                       ) -> tuple[dict, np.ndarray]:
    """RDX of the final model (A) against one checkpoint (B) and its summary.

    ``similarity_final``: ``rdx_estimator(...).similarity_of(final_features)``, computed
    once for all checkpoints. Returns ``(summary, labels)`` with ``labels[i]`` the cluster
    of probe image i (0 = no-change group). See :func:`summarize_direction`.
    """
    est = rdx_estimator(rdx_params, device)
    t0 = time.perf_counter()
    est.fit(final_features, features, similarity_a=similarity_final)
    result = est.directions_[DIRECTION]
    summary = summarize_direction(result, n_clusters=est.n_explanations + 1,
                                  threshold=float(est.null_threshold), correct_t=correct_t,
                                  correct_final=correct_final, classes=classes,
                                  n_classes=n_classes)
    summary["rdx_seconds"] = time.perf_counter() - t0
    summary["gamma"] = float(est.gamma_)
    return summary, np.asarray(result.labels, dtype=np.int64)


# =========================================================================== checkpoints

_STEP = re.compile(r"epoch=(\d+)-step=(\d+)")


@dataclass
class CheckpointInfo:
    """A checkpoint file and what its sidecar says about it."""

    name: str                      # file name without .pt, e.g. "epoch=0-step=16"
    path: Path
    step: int | None
    epoch: int | None
    epochs_completed: float | None
    meta: dict = field(default_factory=dict, repr=False)

    def accuracies(self) -> dict:
        return {k: self.meta.get(k) for k in ("train_accuracy", "test_accuracy")}


def _sidecar(path: Path) -> dict:
    side = path.with_name(path.name + ".json")
    if side.is_file():
        try:
            return json.loads(side.read_text())
        except json.JSONDecodeError:
            return {}
    return {}


def checkpoint_info(path: str | Path) -> CheckpointInfo:
    """Step/epoch of a checkpoint from its sidecar, else from its ``epoch=E-step=S`` name."""
    p = Path(path)
    meta = _sidecar(p)
    m = _STEP.search(p.name)
    step = meta.get("step", int(m.group(2)) if m else None)
    epoch = meta.get("epoch", int(m.group(1)) if m else None)
    done = meta.get("epochs_completed")
    spe = (meta.get("training") or {}).get("steps_per_epoch")
    if done is None and step is not None and spe:
        done = step / spe
    return CheckpointInfo(p.name[:-3] if p.name.endswith(".pt") else p.stem, p, step, epoch,
                          done, meta)


def list_checkpoints(directory: str | Path, *, pattern: str = "epoch=*-step=*.pt",
                     final: str = "last.pt", every: int = 1, include_final_step: bool = True
                     ) -> tuple[list[CheckpointInfo], CheckpointInfo]:
    """The checkpoints of a training run in step order, and the final one.

    ``every`` keeps every n-th checkpoint (the first and the last always);
    ``include_final_step`` keeps a checkpoint saved at the final step (identical to the
    final model: a sanity point where every image is in the no-change group).
    """
    d = Path(directory)
    if not d.is_dir():
        raise RDXInputError(f"checkpoint folder {str(d)!r} does not exist; train the run "
                            "first (`rdx train --preset NAME`, or the config's "
                            "'train' section with scripts/training_dynamics.py).")
    final_info = checkpoint_info(d / final)
    if not final_info.path.is_file():
        raise RDXInputError(f"final checkpoint {str(final_info.path)!r} does not exist "
                            f"(checkpoints.final: {final!r}); finish the training first.")
    infos = [checkpoint_info(p) for p in d.glob(pattern) if p.is_file() and p.name != final]
    if not infos:
        raise RDXInputError(f"no checkpoint matches {pattern!r} in {d}.")
    infos.sort(key=lambda c: (c.step is None, c.step if c.step is not None else 0, c.name))
    if not include_final_step and final_info.step is not None:
        infos = [c for c in infos if c.step != final_info.step] or infos
    if every > 1:
        keep = set(range(0, len(infos), every)) | {len(infos) - 1}
        infos = [c for i, c in enumerate(infos) if i in keep]
    return infos, final_info


# =========================================================================== models, features

def load_network(path: Path, model_spec: dict | None = None) -> tuple[torch.nn.Module, Any, dict]:
    """``(model in eval mode, its transform, meta)`` of a checkpoint file.

    ConvNet checkpoints of :mod:`rdx.models.training` (the default) carry their transform;
    other architectures go through :func:`rdx.models.zoo.load_model` with ``model_spec``
    (e.g. ``{"model": "torchvision:resnet18", "model_kwargs": {"num_classes": 5},
    "pretrained": False}``) and the model's own preprocessing.
    """
    spec = dict(model_spec or {"model": "convnet"})
    if spec.get("model", "convnet") in ("convnet", "convnet_tiny"):
        from ..models.checkpoint import grey_transform, load_checkpoint, transform_from_description

        model, meta = load_checkpoint(path)
        transform = transform_from_description(meta["transform"]) if "transform" in meta \
            else grey_transform(28)
        return model.eval(), transform, meta
    from ..models.zoo import load_model

    loaded = load_model({**spec, "checkpoint": str(path)})
    return loaded.model.eval(), loaded.transform, _sidecar(Path(path))


def head_module(model: torch.nn.Module) -> torch.nn.Linear:
    """The classification head: the last ``nn.Linear`` of the model (``fc`` of the ConvNet
    and of torchvision ResNets)."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise RDXInputError(f"{type(model).__name__} has no nn.Linear classification head; the "
                            "analysis needs its input (features) and output (logits).")
    return linears[-1]


@torch.no_grad()
def forward_features(model: torch.nn.Module, x: torch.Tensor, *, batch_size: int = 500,
                     device: str | torch.device = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Features (input of the classification head) and logits of every image, in one
    forward pass per batch. For the ConvNet the features are exactly its ``gap`` layer."""
    dev = torch.device(device)
    model = model.to(dev).eval()
    head = head_module(model)
    grabbed: list[torch.Tensor] = []
    handle = head.register_forward_hook(
        lambda _m, inputs, _out: grabbed.append(torch.flatten(inputs[0], 1).float().cpu()))
    feats, logits = [], []
    try:
        for i in range(0, len(x), batch_size):
            out = model(x[i:i + batch_size].to(dev))
            logits.append(out.float().cpu())
            feats.append(grabbed.pop())
    finally:
        handle.remove()
    return torch.cat(feats).numpy(), torch.cat(logits).numpy()


# =========================================================================== config

class CheckpointsConfig(StrictModel):
    dir: str
    pattern: str = "epoch=*-step=*.pt"
    final: str = "last.pt"
    every: int = Field(default=1, ge=1)
    include_final_step: bool = True


class RDXSettings(StrictModel):
    """RDX parameters a config may set (``n_clusters`` replaces ``n_explanations``); the rest
    is fixed by the method: spectral clustering, merge_low_affinity, direction a_over_b."""

    n_clusters: int = Field(default=DEFAULT_N_CLUSTERS, ge=2)
    null_threshold: float = DEFAULT_THRESHOLD
    similarity: str | None = None
    difference: str | None = None
    gamma: float | None = None
    gamma_scale: float | None = None
    beta: float | None = None
    normalize_diff: bool | None = None
    sigma_neighbor: int | None = None
    n_init: int | None = None
    eigen_solver: str | None = None
    grid_size: int | None = None
    grid_strategy: str | None = None
    random_state: int | None = None


class FiguresConfig(StrictModel):
    """Which figures to draw: ``checkpoints`` (PCA + one cluster's grid per chosen
    checkpoint), ``grids_at`` (the grids of every cluster at one checkpoint: an index, a
    checkpoint name, or auto = where cluster 0 becomes the no-change group), ``max_tracks``
    (clusters followed across checkpoints in the class make-up figure)."""

    checkpoints: Literal["auto"] | list[int | str] = "auto"
    cluster: Literal["largest", "strongest", "lowest_accuracy"] = "largest"
    grids_at: Literal["auto"] | int | str = "auto"
    max_tracks: int = Field(default=12, ge=1)
    formats: list[str] = ["png"]


class ModelSpec(StrictModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    model: str

    @model_validator(mode="after")
    def _checkpoints_elsewhere(self) -> "ModelSpec":
        if "checkpoint" in (self.model_extra or {}):
            raise ValueError("model.checkpoint: the checkpoints come from checkpoints.dir")
        return self


class TrainConfig(StrictModel):
    """``preset`` of ``rdx train`` and any of its fields to override."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    preset: str


class DynamicsConfig(StrictModel):
    """A ``configs/training_dynamics_<dataset>.yaml`` file::

        name: fashion5                          # a label (and the default output folder name)
        output: outputs/training_dynamics/fashion5
        train: {preset: fashion5_dynamics}      # optional: trained first if missing
        checkpoints: {dir: checkpoints/fashion5_dynamics, final: last.pt, every: 1}
        model: {model: convnet}                 # other architectures: a zoo spec
        probe: {dataset: fashion_mnist, split: train, target_classes: [1, 2, 4, 6, 8],
                num_images: 400, seed: 0}       # runner image_selection keys (per class)
        rdx: {n_clusters: 10, null_threshold: 1.5}
        figures: {checkpoints: auto, cluster: largest, formats: [png]}
        device: auto
    """

    name: str
    description: str = ""
    output: str | None = None
    train: TrainConfig | None = None
    checkpoints: CheckpointsConfig
    model: ModelSpec = ModelSpec(model="convnet")
    probe: ImageSelection
    rdx: RDXSettings = RDXSettings()
    figures: FiguresConfig = FiguresConfig()
    device: str = "auto"
    batch_size: int = Field(default=500, ge=1)

    @field_validator("name")
    @classmethod
    def _folder(cls, value: str) -> str:
        return check_safe_name(value, "name")


def validate_config(doc: dict, where: str = "config") -> dict:
    """Check a training-dynamics config (:class:`DynamicsConfig`) and fill in defaults;
    returns a new plain dict (unset RDX parameters are left out)."""
    cfg = validate(DynamicsConfig, doc, where)
    out = cfg.model_dump(exclude={"rdx", "probe", "model", "train"})
    out["output"] = cfg.output or f"outputs/training_dynamics/{cfg.name}"
    out["rdx"] = cfg.rdx.model_dump(exclude_none=True)
    out["probe"] = cfg.probe.model_dump(exclude_unset=True)
    out["model"] = {"model": cfg.model.model, **(cfg.model.model_extra or {})}
    out["train"] = (None if cfg.train is None else
                    {"preset": cfg.train.preset, **(cfg.train.model_extra or {})})
    return out


def load_config(path: str | Path) -> dict:
    """Read and validate a ``configs/training_dynamics_<dataset>.yaml`` file."""
    from ..io import read_yaml

    p = Path(path)
    cfg = validate_config(read_yaml(p), str(p))
    cfg["config_path"] = str(p)
    return cfg


# =========================================================================== driver

@dataclass
class Probe:
    """The probe images: dataset, indices, labels in the model's label space, the input
    tensor (per transform) and the raw images for grids."""

    dataset: Any
    indices: np.ndarray
    classes: np.ndarray                 # model labels 0..n_classes-1
    class_names: list[str]
    ids_digest: str
    tensors: dict = field(default_factory=dict, repr=False)

    def tensor(self, transform: Any) -> torch.Tensor:
        """The probe images through ``transform`` (computed once per transform)."""
        from ..models.extract import transform_repr
        from ..models.training import materialize

        key = transform_repr(transform)
        if key not in self.tensors:
            self.tensors[key] = materialize(self.dataset.subset(self.indices), transform)[0]
        return self.tensors[key]

    def images(self, which: Sequence[int]) -> np.ndarray:
        """Raw images (uint8) of probe images ``which`` for drawing grids."""
        return self.dataset.image_array(self.indices[np.asarray(which, dtype=np.int64)])


def make_probe(selection: dict, final_meta: dict) -> Probe:
    """Select the probe images and map their labels to the model's outputs (the training
    run's ``label_map``, recorded in the checkpoint)."""
    from ..data.selection import select_images

    ds, idx = select_images(selection)
    data = final_meta.get("data") or {}
    label_map = data.get("label_map")
    raw = np.asarray(ds.labels)[idx]
    if label_map:
        missing = sorted({int(c) for c in raw} - {int(k) for k in label_map})
        if missing:
            raise RDXInputError(f"probe classes {missing} were not trained on (the final "
                                f"checkpoint's classes: {sorted(int(k) for k in label_map)}); "
                                "set probe.target_classes to the training classes.")
        classes = np.array([label_map[str(int(c))] for c in raw], dtype=np.int64)
    else:
        classes = raw.astype(np.int64)
    n_classes = int(final_meta.get("num_classes") or classes.max() + 1)
    names = list(data.get("class_names") or [])
    if len(names) != n_classes:
        names = [ds.class_names[c] if label_map is None and c < len(ds.class_names) else str(c)
                 for c in range(n_classes)]
    ids = [ds.ids[i] for i in idx]
    return Probe(ds, np.asarray(idx, dtype=np.int64), classes, names,
                 json_digest({"dataset": ds.name, "ids": ids, "classes": classes}))


def checkpoint_outputs(info: CheckpointInfo, probe: Probe, cache_dir: Path, *,
                       model_spec: dict, device: str, batch_size: int,
                       sha256: str | None = None) -> dict:
    """Features, logits and per-image correctness of one checkpoint on the probe set,
    cached in ``cache_dir/<name>.npz`` (keyed by the checkpoint's bytes and the probe)."""
    sha = sha256 or file_sha256(info.path)
    key = json_digest({"checkpoint_sha256": sha, "probe": probe.ids_digest,
                   "model": model_spec, "features": "head input"})
    path = cache_dir / f"{info.name}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["key"]) == key:
                    out = {"features": z["features"], "logits": z["logits"], "key": key,
                           "sha256": sha, "cached": True, "seconds": 0.0}
                    out["correct"] = out["logits"].argmax(1) == probe.classes
                    return out
        except (OSError, ValueError, KeyError, EOFError):
            pass   # unreadable cache entry: recompute
    from ..backend import resolve_device

    t0 = time.perf_counter()
    model, transform, _meta = load_network(info.path, model_spec)
    x = probe.tensor(transform)
    feats, logits = forward_features(model, x, batch_size=batch_size,
                                     device=resolve_device(device))
    if not (np.isfinite(feats).all() and np.isfinite(logits).all()):
        raise RDXInputError(f"{info.path}: NaN/inf features or logits on the probe set.")
    save_npz_atomic(path, features=feats, logits=logits, key=np.array(key))
    return {"features": feats, "logits": logits, "key": key, "sha256": sha, "cached": False,
            "correct": logits.argmax(1) == probe.classes, "seconds": time.perf_counter() - t0}


def class_accuracy(correct: np.ndarray, classes: np.ndarray, n_classes: int) -> list:
    """Accuracy per class (None for a class without images)."""
    return [float(correct[classes == c].mean()) if np.any(classes == c) else None
            for c in range(n_classes)]


def _record_path(out: Path, info: CheckpointInfo) -> tuple[Path, Path]:
    return out / "checkpoints" / f"{info.name}.json", out / "checkpoints" / f"{info.name}.npz"


def run_dynamics(cfg: dict, *, force: bool = False, progress: bool = True,
                 log: Callable[[str], None] | None = None) -> dict:
    """Analyse every checkpoint of a validated config (:func:`validate_config`); writes the
    outputs listed in the module docstring (not the figures) and returns ``dynamics.json``.

    A checkpoint whose result exists with the same fingerprint (its bytes, the final
    model's, the probe images, the RDX parameters) is loaded instead of recomputed;
    ``force`` recomputes everything.
    """
    say = log or (print if progress else (lambda _m: None))
    t_start = time.perf_counter()
    out = Path(cfg["output"])
    ck = cfg["checkpoints"]
    infos, final = list_checkpoints(ck["dir"], pattern=ck["pattern"], final=ck["final"],
                                    every=ck["every"], include_final_step=ck["include_final_step"])
    probe = make_probe(cfg["probe"], final.meta)
    n, n_classes = len(probe.indices), len(probe.class_names)
    say(f"training dynamics {cfg['name']}: {len(infos)} checkpoints vs {final.path}, probe "
        f"set of {n} images ({', '.join(probe.class_names)})")
    kw = {"model_spec": cfg["model"], "device": cfg["device"], "batch_size": cfg["batch_size"]}
    cache = out / "features"
    # the final model's cache file is features/final.npz whatever its file name
    with working(f"  final model {final.name}: features of the {n} probe images",
                 show=progress, keep=False):
        fo = _final_outputs(final, probe, cache, kw)
    rdx_params = dict(cfg["rdx"])
    est = rdx_estimator(rdx_params, cfg["device"])
    similarity_final = None
    records = []
    timings = {"features": fo["seconds"], "rdx": 0.0, "similarity_final": 0.0}
    for i, info in enumerate(infos):
        rec_json, rec_npz = _record_path(out, info)
        sha = file_sha256(info.path)
        # fingerprint without running the checkpoint: its bytes, the probe, the parameters
        finger = json_digest({"checkpoint_sha256": sha, "final": fo["key"],
                          "probe": probe.ids_digest, "rdx": rdx_params, "model": cfg["model"],
                          "format": FORMAT_VERSION})
        rec = None
        if not force and rec_json.is_file() and rec_npz.is_file():
            try:
                old = read_json(rec_json)
                rec = old if old.get("fingerprint") == finger else None
            except RDXInputError:
                rec = None
        if rec is None:
            # features and an RDX fit per checkpoint: seconds each; the line below reports
            # it, the live line says what runs meanwhile
            with working(f"  C{i:<3d} {info.name}: features and RDX against the final model",
                         show=progress, keep=False):
                if sha == fo["sha256"]:   # the final model saved under another name too
                    co = {**fo, "seconds": 0.0}
                    save_npz_atomic(cache / f"{info.name}.npz", features=fo["features"],
                                    logits=fo["logits"], key=np.array(fo["key"]))
                else:
                    co = checkpoint_outputs(info, probe, cache, sha256=sha, **kw)
                timings["features"] += co["seconds"]
                if similarity_final is None:
                    t0 = time.perf_counter()
                    similarity_final = est.similarity_of(fo["features"])
                    timings["similarity_final"] = time.perf_counter() - t0
                summary, labels = analyse_checkpoint(
                    fo["features"], co["features"], correct_t=co["correct"],
                    correct_final=fo["correct"], classes=probe.classes, n_classes=n_classes,
                    rdx_params=rdx_params, device=cfg["device"],
                    similarity_final=similarity_final)
            timings["rdx"] += summary["rdx_seconds"]
            rec = {"index": i, "checkpoint": info.name, "path": str(info.path),
                   "step": info.step, "epoch": info.epoch,
                   "epochs_completed": info.epochs_completed, **info.accuracies(),
                   "probe_accuracy": float(co["correct"].mean()),
                   "probe_accuracy_final": float(fo["correct"].mean()),
                   "class_accuracy": class_accuracy(co["correct"], probe.classes, n_classes),
                   **summary, "fingerprint": finger}
            save_npz_atomic(rec_npz, labels=labels)
            write_json_atomic(rec_json, rec)
            state = "computed"
        else:
            state = "reused"
        rec["index"] = i
        records.append(rec)
        c0 = rec["cluster0"]
        say(f"  C{i:<3d} {info.name:24s} acc {rec['probe_accuracy']:.3f}  cluster 0: "
            f"n={c0['size']:5d} aff={c0['mean_affinity']:.3f}"
            f"{' (no-change)' if rec['no_change'] else ''}  "
            f"{rec['n_difference_clusters']} difference clusters  [{state}]")
    first = next((r["index"] for r in records if r["no_change"]), None)
    n_tracks = add_tracks(records, [load_labels(out, r["checkpoint"]) for r in records])
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": cfg["name"],
           "description": cfg.get("description", ""), "config": cfg,
           "direction": DIRECTION,
           "question": "which groups of probe images does the final model hold together "
                       "that checkpoint C_t still spreads apart?",
           "final": {"checkpoint": final.name, "path": str(final.path), "step": final.step,
                     "epoch": final.epoch, **final.accuracies(),
                     "probe_accuracy": float(fo["correct"].mean()),
                     "class_accuracy": class_accuracy(fo["correct"], probe.classes, n_classes)},
           "probe": {"n_images": n, "selection": cfg["probe"], "class_names": probe.class_names,
                     "class_counts": np.bincount(probe.classes, minlength=n_classes).tolist(),
                     "indices": probe.indices.tolist(), "classes": probe.classes.tolist(),
                     "ids_sha256": probe.ids_digest,
                     "is_training_set": _is_training_set(cfg["probe"], final.meta)},
           "rdx": {**rdx_params, "direction": DIRECTION, "clustering": "spectral",
                   "merge_low_affinity": True},
           "no_change_from": first,
           "tracks": {"n_tracks": n_tracks, "min_jaccard": MIN_TRACK_JACCARD,
                      "how": "difference clusters of consecutive checkpoints paired by the "
                             "Hungarian method on the Jaccard overlap of their members; "
                             "track 0 is the no-change group"},
           "checkpoints": records,
           "timings": {**timings, "total": time.perf_counter() - t_start},
           "versions": versions()}
    write_outputs(out, doc)
    return doc


def _final_outputs(final: CheckpointInfo, probe: Probe, cache: Path, kw: dict) -> dict:
    alias = CheckpointInfo("final", final.path, final.step, final.epoch,
                           final.epochs_completed, final.meta)
    return checkpoint_outputs(alias, probe, cache, **kw)


def _is_training_set(sel: dict, meta: dict) -> bool | None:
    """Whether the probe selection reproduces the final model's training images."""
    data = meta.get("data") or {}
    if not data:
        return None
    same = (sel.get("dataset") == data.get("dataset")
            and sel.get("split", "train") == data.get("split", "train")
            and (sel.get("target_classes") or None) == (data.get("class_subset") or None)
            and sel.get("num_images") == data.get("per_class")
            and sel.get("seed", 0) == data.get("selection_seed", 0))
    return bool(same)


# =========================================================================== tables

def csv_row(rec: dict, class_names: Sequence[str]) -> dict:
    """The flat ``dynamics.csv`` row of one checkpoint record."""
    c0, b = rec["cluster0"], rec["band"]
    row = {k: rec.get(k) for k in ("index", "checkpoint", "step", "epoch", "epochs_completed",
                                   "train_accuracy", "test_accuracy", "probe_accuracy",
                                   "probe_accuracy_final")}
    row.update(no_change=rec["no_change"], n_difference_clusters=rec["n_difference_clusters"],
               n_merged=rec["n_merged"], c0_mean_affinity=c0["mean_affinity"],
               c0_size=c0["size"], c0_accuracy=c0["accuracy"],
               c0_accuracy_final=c0["accuracy_final"])
    for key, short in (("mean_affinity", "affinity"), ("size", "size"),
                       ("accuracy", "accuracy"), ("accuracy_final", "accuracy_final")):
        for stat in ("mean", "min", "max"):
            row[f"band_{short}_{stat}"] = (b.get(key) or {}).get(stat)
    for name, count in zip(class_names, c0["class_counts"]):
        row[f"c0_n_{name}"] = count
    for name, acc in zip(class_names, rec.get("class_accuracy") or []):
        row[f"accuracy_{name}"] = acc
    return row


def cluster_rows(rec: dict, class_names: Sequence[str]) -> list[dict]:
    """The ``clusters.csv`` rows of one checkpoint: cluster 0 then 1–m."""
    rows = []
    for c in [rec["cluster0"], *rec["clusters"]]:
        row = {"index": rec["index"], "checkpoint": rec["checkpoint"], "step": rec["step"],
               "cluster": c["label"], "track": c.get("track"),
               "no_change": bool(c["label"] == 0 and rec["no_change"]),
               "mean_affinity": c["mean_affinity"], "size": c["size"],
               "accuracy": c["accuracy"], "accuracy_final": c["accuracy_final"]}
        for name, count in zip(class_names, c["class_counts"]):
            row[f"n_{name}"] = count
        rows.append(row)
    return rows


def _csv_bytes(rows: list[dict]) -> bytes:
    buf = io.StringIO()
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else f"{v:.6g}" if isinstance(v, float) else v)
                    for k, v in jsonable(r).items()})
    return buf.getvalue().encode()


def write_outputs(out: Path, doc: dict) -> None:
    """``dynamics.json``, ``dynamics.csv`` and ``clusters.csv`` (atomically)."""
    names = doc["probe"]["class_names"]
    rows = [csv_row(r, names) for r in doc["checkpoints"]]
    crow = [row for r in doc["checkpoints"] for row in cluster_rows(r, names)]
    atomic_write(out / "dynamics.csv", lambda fh: fh.write(_csv_bytes(rows)))
    atomic_write(out / "clusters.csv", lambda fh: fh.write(_csv_bytes(crow)))
    write_json_atomic(out / "dynamics.json", doc)


__all__ = ["CheckpointInfo", "Probe", "add_tracks", "analyse_checkpoint", "band",
           "checkpoint_info", "cluster_tracks", "match_clusters",
           "checkpoint_outputs", "cluster_mean_affinities", "cluster_stats", "csv_row",
           "forward_features", "head_module", "list_checkpoints", "load_config",
           "load_dynamics", "load_features", "load_labels", "make_probe", "no_change_rule",
           "rdx_estimator", "run_dynamics", "summarize_direction", "validate_config",
           "write_outputs"]
