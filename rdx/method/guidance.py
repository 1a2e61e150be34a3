"""Group labels that guide the RDX graph, and the out-of-fold probe predictions they use.

Guidance assigns every image a group per model; pairs in different groups of a model get a
large constant ν in that model's rank matrix (:func:`rdx.method.graphs.apply_guidance_`), so
that the difference cannot link images across that model's groups. The modes:

============== ================================================================================
``ground_truth`` the class label ``y(i)``, for both models
``classifier``   the model's out-of-fold probe prediction ``p_m(i)``
``tpfp``         (predicted class, correct?): with ``C`` the sorted classes and ``l`` the index
                 of ``p_m(i)`` in ``C``, group ``1 + 2l`` if ``p_m(i) = y(i)`` (true positive
                 of that class) and ``2 + 2l`` otherwise (false positive of that class)
``tpnfpn``       binary labels only: true positive 1, true negative 2, false positive 3,
                 false negative 4 with respect to the positive class
``true_pos``     two groups: ``p_m(i) = y(i) = positive`` (True) or not (False)
============== ================================================================================

The positive class of ``tpnfpn`` and ``true_pos`` is the *largest* label unless given (1 for
0/1 labels). The original code took the smallest label for ``tpnfpn`` while its viewer coloured
the largest as positive; one convention is used here for both modes.

Predictions come from :func:`probe_predictions` — 5-fold out-of-fold logistic-regression
probes trained on the ground-truth labels — on the representations each direction compares
(in aligned mode the mapped ones: see :func:`predictions_needed`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import RDXInputError

GUIDANCE = (None, "ground_truth", "classifier", "tpfp", "tpnfpn", "true_pos")
#: Modes whose groups depend on the probes' predictions.
PREDICTION_GUIDANCE = ("classifier", "tpfp", "tpnfpn", "true_pos")
#: Folds of the guidance probes (the ``classification`` method's default).
GUIDANCE_FOLDS = 5


def probe_predictions(X: np.ndarray, labels: np.ndarray, *, n_folds: int = 5,
                      random_state: int = 0) -> tuple[np.ndarray, list[float]]:
    """Out-of-fold logistic-regression predictions and the accuracy of each fold's probe.

    The runner's ``classification`` probe: ``KFold(n_folds, shuffle=True, random_state=0)``
    and ``LogisticRegression(random_state=0)``, with two changes so that the probe converges
    instead of stopping at the iteration cap with a warning: each fold's features are
    standardised (a ``StandardScaler`` fit on the training fold; 5× fewer lbfgs iterations on
    raw ViT-like features) and ``max_iter`` is 1000. Every image is predicted by the probe of
    the fold that held it out, so the same splits give comparable predictions for two
    representations.
    """
    _, counts = np.unique(labels, return_counts=True)
    if len(counts) < 2:
        raise RDXInputError("a linear probe needs at least 2 classes; the labels have "
                            f"{len(counts)}.")
    if len(labels) < n_folds:
        raise RDXInputError(f"{n_folds}-fold probes need at least {n_folds} images, got "
                            f"{len(labels)}.")
    from sklearn.linear_model import LogisticRegression   # only here: scikit-learn loads
    from sklearn.model_selection import cross_val_predict  # slowly (~0.6 s)
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    cv = _folds(n_folds, random_state)
    clf = make_pipeline(StandardScaler(), LogisticRegression(random_state=random_state,
                                                             max_iter=1000))
    pred = cross_val_predict(clf, X, labels, cv=cv)
    return pred, fold_accuracies(pred, labels, n_folds=n_folds, random_state=random_state)


def fold_accuracies(pred: np.ndarray, labels: np.ndarray, *, n_folds: int = 5,
                    random_state: int = 0) -> list[float]:
    """Accuracy of each fold's probe, from out-of-fold predictions (same splits as
    :func:`probe_predictions`; the splits depend on the number of images only)."""
    cv = _folds(n_folds, random_state)
    idx = np.arange(len(labels))
    return [float(np.mean(pred[test] == labels[test])) for _, test in cv.split(idx)]


def _folds(n_folds: int, random_state: int):
    from sklearn.model_selection import KFold

    return KFold(n_splits=n_folds, shuffle=True, random_state=random_state)


def out_of_fold_predictions(X: np.ndarray, labels: np.ndarray, *, n_folds: int = 5,
                            random_state: int = 0) -> np.ndarray:
    """Out-of-fold predictions of :func:`probe_predictions` (classifier guidance)."""
    return probe_predictions(X, labels, n_folds=n_folds, random_state=random_state)[0]


def check_probe_labels(labels: np.ndarray, what: str, n_folds: int = GUIDANCE_FOLDS) -> None:
    """Probes are trained per fold: at least 2 classes with ``n_folds`` images each."""
    _, counts = np.unique(labels, return_counts=True)
    if len(counts) < 2 or counts.min() < n_folds:
        raise RDXInputError(f"{what} trains {n_folds}-fold linear probes and needs at least 2 "
                            f"classes with {n_folds} images each.")


def predictions_needed(aligned: bool) -> tuple[str, ...]:
    """Representations whose predictions guidance uses: each direction compares its own pair,
    ``a_over_b`` (A, mapped B) and ``b_over_a`` (mapped A, B) when aligned, else (A, B)."""
    return ("a", "b", "a_mapped", "b_mapped") if aligned else ("a", "b")


def representation_predictions(reps: Mapping[str, np.ndarray], labels: np.ndarray, *,
                               have: Mapping[str, np.ndarray] | None = None,
                               n_folds: int = GUIDANCE_FOLDS) -> dict[str, np.ndarray]:
    """Out-of-fold predictions for every representation in ``reps`` (keys ``a``, ``b``,
    ``a_mapped``, ``b_mapped``), reusing those already in ``have``; returns all of them."""
    out = dict(have or {})
    for key, X in reps.items():
        if key not in out:
            out[key] = probe_predictions(X, labels, n_folds=n_folds, random_state=0)[0]
    return out


def check_predictions(predictions: Mapping[str, Any], keys: tuple[str, ...], n: int,
                      labels: np.ndarray | None) -> dict[str, np.ndarray]:
    """The given predictions for ``keys`` as 1-D arrays of length n (classes of ``labels``)."""
    if not isinstance(predictions, Mapping):
        raise RDXInputError("predictions must be a mapping {'a': ..., 'b': ...} of per-image "
                            f"predicted classes, got {type(predictions).__name__}.")
    unknown = set(predictions) - {"a", "b", "a_mapped", "b_mapped"}
    if unknown:
        raise RDXInputError(f"predictions has unknown key(s) {sorted(unknown)}; use 'a', 'b', "
                            "'a_mapped', 'b_mapped'.")
    out = {}
    classes = None if labels is None else np.unique(labels)
    for key in keys:
        if key not in predictions:
            continue
        p = np.asarray(predictions[key])
        if p.ndim != 1 or p.shape[0] != n:
            raise RDXInputError(f"predictions[{key!r}] has shape {p.shape}; expected one "
                                f"predicted class per image ({n},).")
        if classes is not None and not np.isin(p, classes).all():
            bad = np.setdiff1d(np.unique(p), classes)[:5].tolist()
            raise RDXInputError(f"predictions[{key!r}] holds classes {bad} that are not among "
                                "the labels; predictions must use the labels' class ids.")
        out[key] = p
    return out


def positive_class(labels: np.ndarray, positive: Any = None) -> Any:
    """The positive class of ``tpnfpn``/``true_pos``: ``positive`` if given (it must be a
    label), else the largest label."""
    classes = np.unique(labels)
    if positive is None:
        return classes[-1]
    if not np.isin(np.asarray([positive]).astype(classes.dtype, copy=False), classes).all():
        raise RDXInputError(f"guidance_positive={positive!r} is not one of the labels "
                            f"{classes[:10].tolist()}.")
    return np.asarray([positive]).astype(classes.dtype)[0]


def group_labels(mode: str | None, labels: np.ndarray | None,
                 predictions: np.ndarray | None = None, *, positive: Any = None
                 ) -> np.ndarray | None:
    """Group of every image for one model (see the module docstring), None without guidance.

    ``labels`` are the ground-truth classes, ``predictions`` this model's predicted classes
    (needed by every mode except ``ground_truth``).
    """
    if mode is None:
        return None
    if mode not in GUIDANCE:
        raise RDXInputError(f"unknown guidance {mode!r}; use one of {GUIDANCE}")
    if mode == "ground_truth":
        return np.asarray(labels)
    p = np.asarray(predictions)
    if mode == "classifier":
        return p
    y = np.asarray(labels)
    correct = p == y
    if mode == "tpfp":
        classes = np.unique(y)
        l = np.searchsorted(classes, p)
        return np.where(correct, 1 + 2 * l, 2 + 2 * l).astype(np.int64)
    pos = positive_class(y, positive)
    if mode == "true_pos":
        return correct & (y == pos)
    # tpnfpn
    if len(np.unique(y)) != 2:
        raise RDXInputError(f"guidance='tpnfpn' needs binary labels; these have "
                            f"{len(np.unique(y))} classes (use 'tpfp' for more classes).")
    pp, yp = p == pos, y == pos
    return np.select([pp & yp, ~pp & ~yp, pp & ~yp], [1, 2, 3], default=4).astype(np.int64)
