"""Up-front checks of user input (shapes, values, parameters).

Everything here raises :class:`~rdx.errors.RDXInputError` with an actionable message, so
that bad input never surfaces as a traceback from deep inside numpy or torch.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import RDXInputError


def as_representation(X: Any, name: str) -> np.ndarray:
    """Validate one representation and return it as a C-contiguous float32 ``n×d`` array."""
    if hasattr(X, "detach"):  # torch tensor
        X = X.detach().cpu().numpy()
    try:
        arr = np.asarray(X)
    except Exception as exc:  # ragged lists and the like
        raise RDXInputError(f"{name} could not be read as an array: {exc}") from None
    if arr.dtype.kind not in "biuf":  # bool, int, uint, float; not complex/time/object/str
        raise RDXInputError(
            f"{name} has dtype {arr.dtype}; representations must be real numbers "
            "(an n_images × n_features float array)."
        )
    if arr.ndim != 2:
        raise RDXInputError(
            f"{name} has shape {arr.shape}; expected a 2-D array n_images × n_features. "
            + ("Reshape a single feature vector with X.reshape(-1, 1)." if arr.ndim == 1 else
               "Flatten per-image features, e.g. X.reshape(len(X), -1).")
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise RDXInputError(f"{name} is empty (shape {arr.shape}); it needs images and features.")
    finite = np.isfinite(arr)
    if not finite.all():
        bad_rows = np.flatnonzero(~finite.all(axis=1))
        raise RDXInputError(
            f"{name} contains {int((~finite).sum())} NaN/inf values in {len(bad_rows)} rows "
            f"(first rows: {bad_rows[:5].tolist()}); remove those images from both "
            "representations or fix the feature extraction."
        )
    big = float(np.abs(arr).max())
    if big > 1e30:
        raise RDXInputError(
            f"{name} has values up to {big:.3g}, beyond what float32 computations can hold; "
            "rescale the features (e.g. divide by their maximum) — RDX is scale invariant.")
    return np.ascontiguousarray(arr, dtype=np.float32)


def check_pair(A: np.ndarray, B: np.ndarray) -> None:
    if A.shape[0] != B.shape[0]:
        raise RDXInputError(
            f"A has {A.shape[0]} images but B has {B.shape[0]}; both representations must "
            "describe the same images in the same row order."
        )


def check_not_identical(A: Any, B: Any, names: tuple[str, str] = ("A", "B"), *,
                        hint: str = "") -> None:
    """Refuse to compare a representation with itself.

    Two inputs with the same shape and equal values make every comparison trivial (similarity
    at its maximum, no difference to explain) — almost always a mistake in naming the inputs,
    e.g. the same ``.npz`` file given twice, whose first array is then read both times. Call
    it on the arrays the comparison will use; a float32 copy of a float64 array counts as
    different unless the values are equal.

    Parameters
    ----------
    A, B : array-like (numpy arrays, torch tensors, nested lists)
    names : the two inputs' names in the message.
    hint : appended to the message, e.g. the flag that allows the comparison anyway.

    Raises
    ------
    RDXInputError
        When ``A`` and ``B`` have the same shape and equal values.
    """
    def as_array(X: Any) -> np.ndarray:
        if hasattr(X, "detach"):  # torch tensor
            X = X.detach().cpu().numpy()
        return np.asarray(X)

    try:
        a, b = as_array(A), as_array(B)
    except (ValueError, TypeError):  # not arrays at all: as_representation says why
        return
    shape = "×".join(map(str, a.shape)) or "scalar"
    if A is not B:
        if a.shape != b.shape:
            return
        if a.ndim and a.size:
            # row blocks: different inputs usually differ in the first block, so the check
            # stops early and never builds an n×d temporary
            a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
            step = max(1, (1 << 20) // a.shape[1])
            for i in range(0, len(a), step):
                if not np.array_equal(a[i:i + step], b[i:i + step]):
                    return
        elif not np.array_equal(a, b):
            return
    raise RDXInputError(
        f"{names[0]} and {names[1]} are the same array ({shape}, equal values): comparing a "
        "representation with itself gives trivial results (similarity at its maximum, no "
        "differences to explain). To compare two arrays of one .npz file, name them as "
        "file.npz:key, e.g. representations.npz:a representations.npz:b." + (
            f" {hint.strip()}" if hint.strip() else ""))


def check_not_constant(X: np.ndarray, name: str) -> None:
    if np.all(X == X[0]):
        raise RDXInputError(
            f"{name} is constant: all {X.shape[0]} images have the same features, so every "
            "pairwise distance is zero and neighbourhoods are undefined. Check the layer choice "
            "or the feature extraction."
        )


def check_n_explanations(k: Any, n: int, *, extra: int = 1, what: str = "n_explanations") -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise RDXInputError(f"{what} must be a positive integer, got {k!r}.")
    k = int(k)
    if k <= 0:
        raise RDXInputError(f"{what} must be a positive integer, got {k}.")
    if n < k + 1 + extra:
        raise RDXInputError(
            f"{what}={k} needs at least {k + 1 + extra} images (k + {1 + extra}: the images "
            f"are clustered into k + 1 groups — k explanations and a no-change group — and "
            f"their spectral embedding of k + 1 eigenvectors needs more images than groups), "
            f"but there are only {n}. " + (
                f"Use fewer explanations (at most {n - 1 - extra}) or more images."
                if n - 1 - extra >= 1 else
                f"Even one explanation needs {2 + extra} images: give more images.")
        )
    return k


def check_labels(labels: Any, n: int, name: str = "labels") -> np.ndarray:
    """Class labels, one per image: integers, strings, or floats that are whole numbers.

    Labels name classes (guidance, probes, grid captions, scoring), so continuous values are
    refused: taken as classes, every image would be its own class and the result would be
    silently meaningless.
    """
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise RDXInputError(f"{name} has shape {arr.shape}; expected one label per image (1-D).")
    if arr.shape[0] != n:
        raise RDXInputError(
            f"{name} has {arr.shape[0]} entries but there are {n} images; give one label per "
            "image, in the same order as the representations."
        )
    if arr.dtype.kind not in "biufUS":
        raise RDXInputError(
            f"{name} have dtype {arr.dtype}; labels are class ids: integers, strings, or "
            "floats that are whole numbers (e.g. 2.0), one per image.")
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(arr))
        if len(bad):
            raise RDXInputError(
                f"{name} have {len(bad)} missing (NaN/inf) values (first at images "
                f"{bad[:5].tolist()}); give every image a class id.")
        frac = np.flatnonzero(arr != np.round(arr))
        if len(frac):
            i = int(frac[0])
            raise RDXInputError(
                f"{name} have {len(frac)} values that are not whole numbers (e.g. "
                f"{arr[i]:.6g} at image {i}): labels are class ids, not continuous values. "
                "Use integers or strings (floats are fine when they are whole numbers, e.g. "
                "2.0); bin a continuous variable into classes first.")
    return arr


def check_positive(value: Any, name: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    v = check_number(value, name, what="a positive finite number")
    if v <= 0:
        raise RDXInputError(f"{name} must be a positive finite number, got {value!r}.")
    return v


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise RDXInputError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}.")
    return value


def check_int(value: Any, name: str, *, minimum: int, maximum: int | None = None,
              hint: str = "") -> int:
    """An integer (not bool) in [minimum, maximum]."""
    what = "a positive integer" if minimum == 1 else "an integer"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise RDXInputError(f"{name} must be {what}, got {value!r}.{hint}")
    v = int(value)
    if maximum is not None and not minimum <= v <= maximum:
        raise RDXInputError(f"{name}={v} must be in {minimum}..{maximum}.{hint}")
    if v < minimum:
        what = what if minimum == 1 else f">= {minimum}"
        raise RDXInputError(f"{name} must be {what}, got {v}.{hint}")
    return v


def check_number(value: Any, name: str, what: str = "a finite number") -> float:
    """A real, finite number (not bool, not a string)."""
    bad = RDXInputError(f"{name} must be {what}, got {value!r}.")
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise bad
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise bad from None
    if not np.isfinite(v):
        raise bad
    return v
