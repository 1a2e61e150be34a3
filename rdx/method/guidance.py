"""Group labels that guide the RDX graph (spec §1.6)."""
from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ..errors import RDXInputError

GUIDANCE = (None, "ground_truth", "classifier")


def probe_predictions(X: np.ndarray, labels: np.ndarray, *, n_folds: int = 5,
                      random_state: int = 0) -> tuple[np.ndarray, list[float]]:
    """Out-of-fold logistic-regression predictions and the accuracy of each fold's probe.

    The runner's ``classification`` probe (spec §2.9): ``KFold(n_folds, shuffle=True,
    random_state=0)`` and ``LogisticRegression(random_state=0)``, with two changes so that the
    probe converges instead of stopping at the iteration cap with a warning: each fold's
    features are standardised (a ``StandardScaler`` fit on the training fold; 5× fewer lbfgs
    iterations on raw ViT-like features) and ``max_iter`` is 1000. Every image is predicted by
    the probe of the fold that held it out, so the same splits give comparable predictions for
    two representations.
    """
    _, counts = np.unique(labels, return_counts=True)
    if len(counts) < 2:
        raise RDXInputError("a linear probe needs at least 2 classes; the labels have "
                            f"{len(counts)}.")
    if len(labels) < n_folds:
        raise RDXInputError(f"{n_folds}-fold probes need at least {n_folds} images, got "
                            f"{len(labels)}.")
    cv = KFold(n_splits=n_folds, shuffle=True, random_state=random_state)
    clf = make_pipeline(StandardScaler(), LogisticRegression(random_state=random_state,
                                                             max_iter=1000))
    pred = cross_val_predict(clf, X, labels, cv=cv)
    accs = [float(np.mean(pred[test] == labels[test])) for _, test in cv.split(X)]
    return pred, accs


def out_of_fold_predictions(X: np.ndarray, labels: np.ndarray, *, n_folds: int = 5,
                            random_state: int = 0) -> np.ndarray:
    """Out-of-fold predictions of :func:`probe_predictions` (classifier guidance)."""
    return probe_predictions(X, labels, n_folds=n_folds, random_state=random_state)[0]


def guidance_groups(guidance: str | None, labels: np.ndarray | None, A: np.ndarray,
                    B: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-model group vectors ``(g_A, g_B)`` or None without guidance.

    ``ground_truth``: both models use the dataset labels. ``classifier``: each model uses
    out-of-fold predictions of a linear probe trained on its own representation.
    """
    if guidance is None:
        return None
    if labels is None:
        raise RDXInputError(f"guidance={guidance!r} needs labels (one class label per image).")
    if guidance == "ground_truth":
        return labels, labels
    if guidance == "classifier":
        _, counts = np.unique(labels, return_counts=True)
        if len(counts) < 2 or counts.min() < 5:
            raise RDXInputError("guidance='classifier' trains 5-fold linear probes and needs at "
                                "least 2 classes with 5 images each.")
        return out_of_fold_predictions(A, labels), out_of_fold_predictions(B, labels)
    raise RDXInputError(f"unknown guidance {guidance!r}; use one of {GUIDANCE}")
