"""What the layer-wise study measures per layer and per layer pair: the seeded split into
analysis and probe images, the k-NN and linear probes of every layer, and the permutation
statistics of each RDX cluster (prediction changes, class homogeneity) with their totals."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import RDXInputError
from ...evaluation.permutation import cluster_permutation_test
from .config import DIRECTIONS


def select_study_images(n_total: int, n_images: int, n_probe: int, seed: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``default_rng(seed).choice(n_total, n_images + n_probe, replace=False)``: the first
    ``n_images`` are the analysis images, the rest the probe images."""
    if n_images + n_probe > n_total:
        raise RDXInputError(f"data.n_images + data.n_probe = {n_images + n_probe} but the "
                            f"dataset has only {n_total} images; ask for fewer.")
    idx = np.random.default_rng(seed).choice(n_total, n_images + n_probe, replace=False)
    return idx[:n_images].astype(np.int64), idx[n_images:].astype(np.int64)


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
