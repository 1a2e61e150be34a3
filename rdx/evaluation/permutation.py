"""Permutation tests of cluster statistics: is a cluster's rate (of prediction changes, say)
or its class homogeneity higher than that of a random set of images of the same size?

The images are permuted and cut into consecutive chunks of the observed cluster sizes, so the
null of cluster c is the statistic of a random set of |c| images; every p-value is the add-one
estimate ``(1 + #{null ≥ observed}) / (1 + n_permutations)`` (never 0, valid at every level)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import RDXInputError


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
