"""Up-front checks of user input (shapes, values, parameters).

Everything here raises :class:`~rdx.errors.RDXInputError` with an actionable message, so
that bad input never surfaces as a traceback from deep inside numpy or torch.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Mapping

import numpy as np

from .errors import RDXInputError

#: Parameter name → what the user typed for it (a command's flags), while a command runs
#: (:func:`flag_names`).
_FLAG_NAMES: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "rdx_flag_names", default={})


@contextlib.contextmanager
def flag_names(names: Mapping[str, str]) -> Iterator[None]:
    """Within the block, the checks here name a parameter by the flag that set it.

    A command sets the value of ``--n-neighbors`` as the ``k`` of a function several
    calls deep; that function checks ``k`` under its own name, and the user, who never
    typed ``k``, would read "k must be a positive integer". A command wraps the work its
    flags feed in ``flag_names({"k": "--n-neighbors"})`` and the same check says
    "--n-neighbors must be a positive integer". One mapping per command, at the place the
    flags become parameters; the functions keep their parameter names for Python callers.
    """
    token = _FLAG_NAMES.set({**_FLAG_NAMES.get(), **names})
    try:
        yield
    finally:
        _FLAG_NAMES.reset(token)


def shown_name(name: str) -> str:
    """``name`` as the user typed it: its flag within :func:`flag_names`, else itself."""
    return _FLAG_NAMES.get().get(name, name)


def shown_setting(name: str, value: Any) -> str:
    """A setting as the user would write it: ``--n-neighbors auto`` within
    :func:`flag_names`, else ``n_neighbors='auto'``."""
    shown = shown_name(name)
    return f"{shown} {value}" if shown.startswith("--") else f"{shown}={value!r}"

_F32, _F64 = np.finfo(np.float32), np.finfo(np.float64)

#: The magnitudes (largest absolute value of a representation) that rdx computes with at
#: full precision, per computing precision. RDX and the baselines compute in float32: the
#: whole normal float32 range works (results at the ends equal those of the unscaled
#: features), below it the cast leaves subnormals without precision or 0, above it inf.
#: The similarity measures compute in float64, where fourth powers (kernel sums) overflow
#: from about 1e77: each measure was checked to give the unscaled value across 1e±60.
SAFE_MAGNITUDE: dict[str, tuple[float, float]] = {
    "float32": (float(_F32.smallest_normal), float(_F32.max)),
    "float64": (1e-60, 1e60)}


def check_magnitude(peak: float, name: str, precision: str = "float32") -> None:
    """Refuse a representation whose largest absolute value ``peak`` (finite) is outside
    :data:`SAFE_MAGNITUDE` for ``precision``, saying what the values are.

    Values beyond float32's range become inf in a float32 cast, and float64 subnormals
    become 0, so the checks that follow the cast would report "NaN/inf" or "constant" for
    data that is neither; this check runs on the values as given and names the actual
    problem and its fix (rescaling: no comparison here depends on a common scale factor
    of the features).

    Raises
    ------
    RDXInputError
        When ``0 < peak < low`` or ``peak > high`` for ``precision``.
    """
    low, high = SAFE_MAGNITUDE[precision]
    if peak == 0 or low <= peak <= high:   # all zero: the constant check says so
        return
    rescale = (f" Rescale the features, e.g. divide them by their largest absolute value "
               f"({peak:.3g}): the comparisons do not depend on a common scale factor.")
    if peak > high:
        if precision == "float32":
            what = (f"beyond float32's range (largest {high:.3g}): rdx computes in float32, "
                    "where they would become inf")
        else:
            what = ("too large for the float64 computations of the similarity measures "
                    f"(their kernel sums overflow from about 1e77; magnitudes up to "
                    f"{high:.0e} work)")
        raise RDXInputError(f"{name} has finite values up to {peak:.3g}, {what}.{rescale}")
    kinds = []
    if peak < float(_F64.smallest_normal):
        kinds.append(f"subnormal float64 numbers (below {float(_F64.smallest_normal):.3g})")
    if precision == "float32":
        kinds.append(
            "0 in float32, where rdx computes" if peak < float(_F32.smallest_subnormal) else
            f"subnormal in float32 (below {low:.3g}), where rdx computes: they lose their "
            "precision")
    else:
        kinds.append("too small for the float64 computations of the similarity measures "
                     f"(their kernel sums underflow; magnitudes from {low:.0e} work)")
    raise RDXInputError(
        f"{name} has tiny values only: its largest absolute value is {peak:.3g} — "
        f"{', and '.join(kinds)}.{rescale}")


def as_representation(X: Any, name: str) -> np.ndarray:
    """Validate one representation and return it as a C-contiguous float32 ``n×d`` array.

    The values are checked as given (NaN/inf, magnitude: :func:`check_magnitude`), and a
    representation whose images become equal only through the float32 cast is refused
    with that reason, so that no later check reports an artefact of the cast.
    """
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
    n_bad, bad_rows = _non_finite(arr)
    if n_bad:
        raise RDXInputError(
            f"{name} contains {n_bad} NaN/inf values in {len(bad_rows)} rows "
            f"(first rows: {bad_rows[:5].tolist()}); remove those images from both "
            "representations or fix the feature extraction."
        )
    # the largest and smallest value, not |arr|: no n×d temporary for large inputs
    peak = max(abs(float(arr.max())), abs(float(arr.min())))
    check_magnitude(peak, name, "float32")
    out = np.ascontiguousarray(arr, dtype=np.float32)
    # equal images only after the cast (a large offset, tiny differences): every column
    # constant in float32 but not in the given values; column ranges need no n×d temporary
    if out.dtype != arr.dtype and len(out) > 1 and np.array_equal(out.max(0), out.min(0)) \
            and not np.array_equal(arr.max(0), arr.min(0)):
        spread = float((arr.max(0) - arr.min(0)).max())   # exact for integers too
        raise RDXInputError(
            f"{name}'s images differ only by up to {spread:.3g}, below float32's precision "
            f"at values up to {peak:.3g} (a relative 6e-8): in float32, "
            "where rdx computes, every image is the same. Subtract the mean image (e.g. "
            f"{name} - {name}.mean(axis=0)), then rescale.")
    return out


#: Elements per row block of the checks that scan a whole n × d array (a bool temporary of
#: this size instead of one of n·d: 768 MB at 10⁶ × 768).
_SCAN_BLOCK = 1 << 22


def _non_finite(X: np.ndarray) -> tuple[int, np.ndarray]:
    """How many NaN/inf values ``X`` (n × d) holds and the rows that hold them, scanned in
    row blocks (a memory-mapped file is read once and never copied)."""
    step = max(1, _SCAN_BLOCK // max(1, X.shape[1]))
    count, rows = 0, []
    for i in range(0, len(X), step):
        finite = np.isfinite(X[i:i + step])
        if not finite.all():
            count += int((~finite).sum())
            rows.append(np.flatnonzero(~finite.all(axis=1)) + i)
    return count, (np.concatenate(rows) if rows else np.empty(0, dtype=np.int64))


def check_pair(A: np.ndarray, B: np.ndarray) -> None:
    if A.shape[0] != B.shape[0]:
        raise RDXInputError(
            f"A has {A.shape[0]} images but B has {B.shape[0]}; both representations must "
            "describe the same images in the same row order."
        )


def check_same_images(ids_a: Any, ids_b: Any, names: tuple[str, str] = ("A", "B"), *,
                      hint: str = "") -> None:
    """Refuse two representations whose files list different images, row for row.

    ``ids_a``, ``ids_b``: the image id of each row, as a features file of ``rdx features``
    stores them (:func:`rdx.io.load_image_ids`); None (a file without ids) is not checked.
    The message names the first row that differs, and says when the two hold the same
    images in another order.

    Raises
    ------
    RDXInputError
        When the lists differ in length or in any row.
    """
    if ids_a is None or ids_b is None:
        return
    a, b = np.asarray(ids_a).astype(str).reshape(-1), np.asarray(ids_b).astype(str).reshape(-1)
    tail = f" {hint.strip()}" if hint.strip() else ""
    if len(a) != len(b):
        raise RDXInputError(
            f"{names[0]} lists {len(a)} images and {names[1]} {len(b)} (the image ids stored "
            "with their features); both must describe the same images in the same order: "
            "extract both from the same image source and selection." + tail)
    differ = np.flatnonzero(a != b)
    if not len(differ):
        return
    i = int(differ[0])
    order = (f" {names[1]} holds the same images in another order: put its rows in "
             f"{names[0]}'s order (or extract both with the same image selection)."
             if np.array_equal(np.sort(a), np.sort(b)) else
             " Extract both from the same image source and selection.")
    raise RDXInputError(
        f"{names[0]} and {names[1]} do not describe the same images row for row: row {i} "
        f"is image {str(a[i])!r} in {names[0]} but {str(b[i])!r} in {names[1]} "
        f"({len(differ)} of {len(a)} rows differ, by the image ids stored with the "
        f"features).{order}" + tail)


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
    # row blocks: stops at the first block with another image, no n×d temporary
    step = max(1, _SCAN_BLOCK // max(1, X.shape[1])) if X.ndim == 2 else len(X)
    if all(np.all(X[i:i + step] == X[0]) for i in range(0, len(X), max(1, step))):
        raise RDXInputError(
            f"{name} is constant: all {X.shape[0]} images have the same features, so every "
            "pairwise distance is zero and neighbourhoods are undefined. Check the layer choice "
            "or the feature extraction."
        )


#: Relative tolerance of a distance matrix's symmetry and zero diagonal
#: (:func:`check_distance_matrix`): rounding in whatever computed it (float32 distances
#: from a Gram matrix are off by about 1e-7 of the largest one), not a real asymmetry.
DISTANCE_RTOL = 1e-5


def check_distance_matrix(D: Any, name: str, *, hint: str = "") -> np.ndarray:
    """Check a precomputed distance matrix and return it as a numpy array (not copied:
    a memory-mapped file stays mapped).

    A distance matrix of n images is an n × n array of real numbers, finite,
    non-negative, symmetric and zero on the diagonal; symmetry and the diagonal within
    :data:`DISTANCE_RTOL` of its largest entry (rounding). It is scanned in row blocks,
    so the checks never hold an n × n temporary.

    Parameters
    ----------
    D : array-like of shape (n_images, n_images)
    name : str
        The input's name in messages (a parameter or a file).
    hint : str
        Appended to every refusal (e.g. the flag that made the input a distance matrix).

    Raises
    ------
    RDXInputError
        Naming the first property that fails, where, and the usual fix.
    """
    tail = f" {hint.strip()}" if hint.strip() else ""
    if hasattr(D, "detach"):  # torch tensor
        D = D.detach().cpu().numpy()
    try:
        arr = np.asarray(D)
    except Exception as exc:  # ragged lists and the like
        raise RDXInputError(f"{name} could not be read as an array: {exc}.{tail}") from None
    if arr.dtype.kind not in "biuf":
        raise RDXInputError(f"{name} has dtype {arr.dtype}; a distance matrix holds real "
                            f"numbers.{tail}")
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise RDXInputError(
            f"{name} has shape {arr.shape}; a distance matrix is square, n_images × "
            f"n_images (entry i, j: the distance between images i and j). Features "
            f"(n_images × n_features) are compared without this option.{tail}")
    n = arr.shape[0]
    if n < 2:
        raise RDXInputError(f"{name} is a {n} × {n} matrix; it needs at least two "
                            f"images.{tail}")
    step = max(1, _SCAN_BLOCK // n)
    peak = 0.0
    for i in range(0, n, step):
        block = arr[i:i + step]
        finite = np.isfinite(block)
        if not finite.all():
            r, c = np.argwhere(~finite)[0]
            raise RDXInputError(
                f"{name} holds {int((~finite).sum())}+ NaN/infinite values (first at row "
                f"{i + r}, column {c}); every pair of images needs a finite distance.{tail}")
        low = float(block.min())
        if low < 0:
            r, c = np.argwhere(block < 0)[0]
            raise RDXInputError(
                f"{name} holds negative values (the smallest {low:.4g}, first at row "
                f"{i + r}, column {c}); distances are non-negative. A similarity matrix S "
                f"(larger = closer) is not a distance: convert it (e.g. 1 − S for a "
                f"cosine similarity) or clip rounding errors with np.maximum(D, 0).{tail}")
        peak = max(peak, float(block.max()))
    if peak == 0:
        raise RDXInputError(f"{name} is all zero: every pair of images is at distance 0, "
                            f"so neighbourhoods are undefined.{tail}")
    check_magnitude(peak, name, "float32")
    tol = DISTANCE_RTOL * peak
    diag = np.abs(np.diagonal(arr).astype(np.float64))
    if diag.max() > tol:
        i = int(np.argmax(diag))
        raise RDXInputError(
            f"{name} is not zero on the diagonal (entry {i}, {i} is {float(arr[i, i]):.4g}, "
            f"the largest entry {peak:.4g}); an image is at distance 0 from itself. A "
            f"similarity matrix (diagonal 1 for cosine) must be converted to distances "
            f"first; set a diagonal of rounding errors to 0 with np.fill_diagonal(D, 0)."
            f"{tail}")
    for i in range(0, n, step):
        gap = np.abs(arr[i:i + step].astype(np.float64) - arr[:, i:i + step].T)
        if gap.max() > tol:
            r, c = np.unravel_index(int(np.argmax(gap)), gap.shape)
            raise RDXInputError(
                f"{name} is not symmetric: entries {i + r}, {c} and {c}, {i + r} are "
                f"{float(arr[i + r, c]):.6g} and {float(arr[c, i + r]):.6g} (more than "
                f"{DISTANCE_RTOL:g} of the largest entry apart); a distance matrix has "
                f"D[i, j] = D[j, i]. Symmetrise it, e.g. (D + D.T) / 2, if the asymmetry "
                f"is rounding.{tail}")
    return arr


def check_distance_pair(D_A: Any, D_B: Any, names: tuple[str, str] = ("A", "B"), *,
                        hint: str = "") -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_distance_matrix` of both, and the same number of images in both."""
    a = check_distance_matrix(D_A, names[0], hint=hint)
    b = check_distance_matrix(D_B, names[1], hint=hint)
    if len(a) != len(b):
        tail = f" {hint.strip()}" if hint.strip() else ""
        raise RDXInputError(f"{names[0]} is a distance matrix of {len(a)} images but "
                            f"{names[1]} one of {len(b)}; both must describe the same "
                            f"images in the same order.{tail}")
    return a, b


def check_n_explanations(k: Any, n: int, *, extra: int = 1, what: str = "n_explanations") -> int:
    what = shown_name(what)
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


def encode_labels(labels: Any, n: int, name: str = "labels") -> tuple[np.ndarray, np.ndarray]:
    """Checked labels (:func:`check_labels`) as class codes ``0..C−1`` and the classes.

    Anything that sizes an allocation or a table by the labels (class names, bincounts,
    probe heads) must use the codes: the label values themselves may be huge integers
    (2**40 as a class id), negative or strings, none of which can index an array of C
    entries. The codes keep the classes' sorted order (``np.unique``), and ``classes[codes]``
    gives the labels back.

    Returns
    -------
    codes : (n,) int64 array with values in ``0..C−1``
    classes : (C,) array of the distinct label values, sorted
    """
    arr = check_labels(labels, n, name)
    classes, codes = np.unique(arr, return_inverse=True)
    return codes.reshape(-1).astype(np.int64), classes


def check_images(images: Any, n: int, name: str = "--images") -> np.ndarray:
    """Images to draw grids from: ``n×H×W`` (grey), ``n×H×W×C`` or ``n×C×H×W`` with
    ``C`` 1, 3 (RGB) or 4 (RGBA), real numbers without NaN/inf.

    Raises
    ------
    RDXInputError
        Saying what the shape or values are and which layouts are drawn.
    """
    arr = np.asarray(images)
    layouts = "n×H×W (grey), n×H×W×C or n×C×H×W with C = 1, 3 (RGB) or 4 (RGBA)"
    if arr.dtype.kind not in "biuf":
        raise RDXInputError(f"{name} has dtype {arr.dtype}; images are arrays of numbers "
                            f"({layouts}).")
    if arr.ndim not in (3, 4) or len(arr) != n:
        raise RDXInputError(
            f"{name} has shape {arr.shape}; expected one image per row of the "
            f"representations ({n}), as {layouts}.")
    if arr.ndim == 4 and arr.shape[-1] not in (1, 3, 4) and arr.shape[1] not in (1, 3, 4):
        raise RDXInputError(
            f"{name} has shape {arr.shape}: {arr.shape[-1]} channels last and "
            f"{arr.shape[1]} first, but grids are drawn from grey, RGB or RGBA images "
            f"({layouts}). Keep 3 channels (e.g. images[..., :3]) or save one channel per "
            "file.")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise RDXInputError(f"{name} contains NaN/inf pixel values; fix or drop those "
                            "images.")
    return arr


def check_positive(value: Any, name: str, *, allow_none: bool = False,
                   maximum: float | None = None, why: str = "") -> float | None:
    """A positive finite number (None passes when ``allow_none``).

    ``maximum`` bounds a parameter whose effect overflows beyond it; ``why`` (appended to
    the message) says what overflows, so that the user learns the range that works.
    """
    if value is None and allow_none:
        return None
    name = shown_name(name)
    v = check_number(value, name, what="a positive finite number")
    if v <= 0:
        raise RDXInputError(f"{name} must be a positive finite number, got {value!r}.")
    if maximum is not None and v > maximum:
        raise RDXInputError(f"{name}={v:g} is out of the range that works, 0 < {name} ≤ "
                            f"{maximum:g}{': ' + why if why else ''}.")
    return v


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise RDXInputError(f"{shown_name(name)}={value!r} is not one of "
                            f"{', '.join(map(repr, choices))}.")
    return value


def check_int(value: Any, name: str, *, minimum: int, maximum: int | None = None,
              hint: str = "") -> int:
    """An integer (not bool) in [minimum, maximum].

    Without ``maximum``, a count that multiplies work (``n_epochs``, ``n_init``,
    ``permutations``, ...: :data:`rdx.budget.CEILINGS`, found by the last word of
    ``name``) is bounded by its ceiling: every integer parameter passes through here, so
    no command can start a run of 10¹² epochs.
    """
    what = "a positive integer" if minimum == 1 else "an integer"
    name = shown_name(name)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise RDXInputError(f"{name} must be {what}, got {value!r}.{hint}")
    v = int(value)
    if maximum is not None and not minimum <= v <= maximum:
        raise RDXInputError(f"{name}={v} must be in {minimum}..{maximum}.{hint}")
    if v < minimum:
        what = what if minimum == 1 else f">= {minimum}"
        raise RDXInputError(f"{name} must be {what}, got {v}.{hint}")
    if maximum is None:
        from .budget import check_ceiling

        check_ceiling(v, name)
    return v


def check_number(value: Any, name: str, what: str = "a finite number") -> float:
    """A real, finite number (not bool, not a string)."""
    name = shown_name(name)
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
