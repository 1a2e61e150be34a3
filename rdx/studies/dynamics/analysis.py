"""The analysis of one checkpoint against the final model, as pure functions: the paper's
no-change rule on the clusters' mean affinities, per-cluster statistics and their band, the
RDX estimator of the analysis, and clusters followed across checkpoints (tracks)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ...errors import RDXInputError


#: The paper's settings: 10 clusters (0 = no-change group), threshold 1.5.
DEFAULT_N_CLUSTERS = 10


DEFAULT_THRESHOLD = 1.5


#: RDX parameters a config may set (``n_clusters`` replaces ``n_explanations``); the rest
#: is fixed by the method: spectral clustering, merge_low_affinity, direction a_over_b.
DIRECTION = "a_over_b"   # close in the final model (A), far apart in the checkpoint (B)


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
    from ...method.estimator import RDX

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
