"""Do A and B describe the same images, row for row?

Nothing in two feature arrays says which image a row is, so a B whose rows are shuffled, or
shifted by one against A's, would be compared as if it were aligned. Two representations of
the same images put the same images near each other, though: two genuinely different models
still share far more of each image's nearest neighbours than rows paired at random (on
scikit-learn's digits, the pixels and their 10 principal components share 66 % of each
image's 10 nearest neighbours, the pixels and an MLP's hidden layer 69 %; rows paired at
random share 0.6 %). :func:`check_rows_aligned` measures this on a sample of anchor images
and refuses two kinds of pair:

* **shifted**: B's row ``i + s`` (``0 < |s| ≤`` :data:`MAX_SHIFT`) shares clearly more of
  image ``i``'s neighbours in A than B's row ``i`` does — one file has ``|s|`` rows more or
  fewer before its first image (a header row, a dropped first image). The anchors are runs
  of :data:`RUN` consecutive rows, so these comparisons reuse the anchors' neighbour lists.
* **unrelated**: A and B share no more neighbours than rows paired at random, although each
  of them has neighbour structure of its own (:func:`neighbour_structure`): B shuffled, or in
  another image order than A. The reference is the same neighbour lists under random
  permutations of the anchors — the same hubs, no correspondence — rather than the
  ``k/(n − 1)`` of uniform chance, which hubs exceed.

Noise has no neighbour structure, and two independent noise arrays legitimately share
nothing (random test inputs): a pair in which A or B is as structureless as noise is never
refused as unrelated. Structure is measured against surrogates that have none: the features
with each column shuffled on its own, in their own coordinates and in their principal axes
(which leave noise of independent columns, and any Gaussian cloud whatever its covariance,
as they were); an array counts as structured when its images' nearest neighbours are
clearly nearer than in both.

The check reads each representation once (a centred copy, one at a time) and computes the
distances of :data:`N_ANCHORS` anchors to all images: O(anchors·n·d), against a fit's
O(n²·d). The structure of A and B is measured only when the overlap is at chance (on at most
:data:`STRUCTURE_ROWS` images), never on an aligned pair. ``benchmarks/bench_row_check.py``
measures both against a plain fit.

A command that has checked its inputs (or was told to go on: ``--allow-unaligned``) calls
:func:`mark_rows_checked` inside a :func:`rows_scope`; until the scope ends the check does
nothing, so the estimator's own check and those of a significance test's refits on null
pairs (as unrelated as an allowed pair may be) are not repeated.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .. import validation as V
from ..errors import RDXInputError
from .geometry import DistanceRows, centered, neighbor_sets

#: Neighbours per image whose overlap is measured (fewer for small n: at most (n − 1)/3).
K_NEIGHBORS = 10
#: Anchor images sampled (all of them for smaller n); four times as many before a pair is
#: called unrelated, or passed with a hint of a shift.
N_ANCHORS = 64
#: Anchors come in runs of this many consecutive rows (shifts up to RUN − 1 are tested).
RUN = 4
#: Largest shift of B's rows against A's that is looked for.
MAX_SHIFT = RUN - 1
#: Random permutations of the anchors that make the reference of rows paired at random.
NULL_DRAWS = 32
#: A and B count as sharing no neighbours when their overlap is less than this many standard
#: deviations of the reference above its mean (aligned pairs of different models on real
#: images are hundreds of standard deviations above it; misaligned ones within a few).
Z_UNRELATED = 5.0
#: A shift ``s`` is reported when B's row i + s shares at least SHIFT_GAIN more of image i's
#: neighbours than B's row i does, by at least Z_SHIFT standard errors (paired over the
#: anchors), and Z_SHIFT standard deviations more than the reference.
Z_SHIFT = 6.0
SHIFT_GAIN = 0.1
#: Least neighbour structure (:func:`neighbour_structure`: effect and z) for an array not to
#: count as noise.
MIN_STRUCTURE = 0.08
Z_STRUCTURE = 4.0
#: Images on which the structure is measured (a random sample), and surrogates per kind.
STRUCTURE_ROWS = 400
STRUCTURE_DRAWS = 8
#: Fewer images than this are not checked (too few neighbours to tell).
MIN_IMAGES = 20
#: Elements of one block of anchor-to-image distances (float64: 128 MiB; all anchors in one
#: block up to n ≈ 65 000).
_BLOCK = 1 << 24

VERDICTS = ("aligned", "noise", "unrelated", "shifted", "skipped")

_CHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar("rdx_rows_checked",
                                                                 default=False)


@dataclass(frozen=True)
class RowCheck:
    """What :func:`row_alignment` measured.

    Attributes
    ----------
    verdict : {"aligned", "noise", "unrelated", "shifted", "skipped"}
        ``aligned``: A and B share clearly more neighbours than rows paired at random and no
        shift fits better; ``noise``: they share none, but A or B has no neighbour structure
        (nothing to share); ``unrelated`` and ``shifted``: misaligned rows (module
        docstring); ``skipped``: too few images or inputs that other checks refuse.
    overlap : float
        Mean fraction of each anchor's ``k`` nearest neighbours that A and B share.
    reference, reference_sd : float
        Mean and standard deviation of that overlap for rows paired at random.
    z : float
        ``(overlap − reference) / reference_sd``.
    shift : int or None
        With ``shifted``: B's row ``i + shift`` matches A's row ``i``.
    shift_overlap : float or None
        The overlap of A's row i with B's row i + shift (with ``shifted``), and
        ``shift_base`` that of the same anchors without the shift.
    structure : dict or None
        Measured when the overlap is at chance: the neighbour structure of A (``a``, ``a_z``:
        :func:`neighbour_structure`'s effect and z) and, when A has structure, of B.
    reason : str
        Why the check was skipped.
    """

    verdict: str
    n_images: int
    k: int = 0
    n_anchors: int = 0
    overlap: float = float("nan")
    reference: float = float("nan")
    reference_sd: float = float("nan")
    z: float = float("nan")
    shift: int | None = None
    shift_overlap: float | None = None
    shift_base: float | None = None
    structure: dict[str, float] | None = None
    reason: str = field(default="", compare=False)

    @property
    def misaligned(self) -> bool:
        return self.verdict in ("unrelated", "shifted")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextlib.contextmanager
def rows_scope() -> Iterator[None]:
    """The extent of a :func:`mark_rows_checked`: the mark ends with the scope (a command
    runs in one, so that the next command in the same process checks again)."""
    token = _CHECKED.set(_CHECKED.get())
    try:
        yield
    finally:
        _CHECKED.reset(token)


def mark_rows_checked() -> None:
    """Until the enclosing :func:`rows_scope` ends (call it inside one: a mark outside any
    scope would last for the process), :func:`check_rows_aligned` does nothing:
    for work on a pair whose rows were checked already, or that the user asked to compare
    anyway (``--allow-unaligned``). The estimator's fits and a significance test's refits
    on null pairs then neither check again nor refuse null pairs as unrelated as an allowed
    pair."""
    _CHECKED.set(True)


@contextlib.contextmanager
def rows_checked() -> Iterator[None]:
    """A :func:`rows_scope` with the rows marked as checked from its start."""
    with rows_scope():
        mark_rows_checked()
        yield


def _anchor_runs(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted anchors: ``m // RUN`` runs of RUN consecutive rows (blocks at multiples of
    RUN, so runs never overlap), or every row when ``n ≤ m``."""
    if n <= m:
        return np.arange(n, dtype=np.int64)
    blocks = np.sort(rng.choice(n // RUN, size=max(1, m // RUN), replace=False))
    return (blocks[:, None] * RUN + np.arange(RUN)[None, :]).reshape(-1).astype(np.int64)


def _neighbours(X: np.ndarray, anchors: np.ndarray, k: int) -> np.ndarray:
    """The anchors' k nearest neighbours in X, the anchor-to-image distances in blocks of
    about :data:`_BLOCK` elements (a few anchors at a time when n is large)."""
    rows_of = DistanceRows(centered(X))
    step = max(1, _BLOCK // max(1, len(X)))
    return np.concatenate([neighbor_sets(X, anchors[s:s + step], k, rows_of=rows_of)
                           for s in range(0, len(anchors), step)])


def _shared(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, how many of the k indices in ``a`` are also in ``b`` (both m × k)."""
    return (a[:, :, None] == b[:, None, :]).any(axis=2).sum(axis=1)


def _contrast(Z: np.ndarray, k: int) -> float:
    """Mean over the images of log(distance to the k-th neighbour / median distance), the
    ratio floored at 0.03 (duplicates, at distance 0, count as very near, not as −∞)."""
    p = len(Z)
    d2 = DistanceRows(Z)(np.arange(p)).astype(np.float64)
    d2[np.arange(p), np.arange(p)] = np.inf
    kth = np.partition(d2, k - 1, axis=1)[:, k - 1]
    mid = np.partition(d2, (p - 2) // 2, axis=1)[:, (p - 2) // 2]
    ok = mid > 0
    if not ok.any():
        return 0.0
    return float(np.mean(0.5 * np.log(np.maximum(kth[ok] / mid[ok], 1e-3))))


def neighbour_structure(X: np.ndarray, *, rows: int = STRUCTURE_ROWS,
                        draws: int = STRUCTURE_DRAWS,
                        random_state: int = 0) -> tuple[float, float]:
    """How much nearer each image's neighbours are in ``X`` than in surrogates without
    structure, on a random sample of at most ``rows`` images: ``(effect, z)``.

    An image's contrast is log(distance to its k-th nearest neighbour / its median distance
    to the others), k = p/12 between 3 and 10 for p images. A surrogate shuffles each column
    on its own — in ``X``'s coordinates, or in its principal axes — which leaves noise of
    independent columns, and any Gaussian cloud, as it was. Per kind of surrogate, ``draws``
    of them give a mean contrast and its spread; ``effect`` is the smaller of the two mean
    contrasts minus X's own, and ``z`` the smaller of the two differences in units of the
    surrogates' standard deviation. Noise: effect within about ±0.05 and z below 4 (arrays of
    20 to 300 images of Gaussian, uniform, exponential, Student-t, integer, low-rank and
    correlated noise); digits' pixels and their principal components: effect 0.14–0.35,
    z above 40 from 300 images.
    """
    rng = np.random.default_rng(random_state)
    n = len(X)
    sample = np.sort(rng.choice(n, size=min(n, rows), replace=False))
    Xs = centered(np.asarray(X[sample]))
    k = max(3, min(K_NEIGHBORS, len(Xs) // 12))
    own = _contrast(Xs, k)
    # the principal axes: from the d × d covariance, or for wide features from the sample's
    # p × p Gram matrix (whichever is smaller); the scores have the sample's distances
    X64 = Xs.astype(np.float64)
    if X64.shape[1] <= len(X64):
        lam, vecs = np.linalg.eigh(X64.T @ X64)
        scores = X64 @ vecs[:, lam > max(lam.max(), 0.0) * 1e-10]
    else:
        lam, vecs = np.linalg.eigh(X64 @ X64.T)
        keep = lam > max(lam.max(), 0.0) * 1e-10
        scores = vecs[:, keep] * np.sqrt(lam[keep])
    effect, z = math.inf, math.inf
    for Z in (Xs, scores.astype(np.float32)):
        if Z.shape[1] == 0:
            continue
        # each column shuffled on its own
        values = [_contrast(rng.permuted(Z, axis=0), k) for _ in range(draws)]
        gap = float(np.mean(values)) - own
        effect = min(effect, gap)
        z = min(z, gap / max(float(np.std(values, ddof=1)), 1e-3))
    return (0.0, 0.0) if math.isinf(effect) else (effect, z)


def has_structure(X: np.ndarray, *, random_state: int = 0) -> tuple[bool, float, float]:
    """Whether ``X`` has neighbour structure (:func:`neighbour_structure` at least
    :data:`MIN_STRUCTURE` and :data:`Z_STRUCTURE`), with the effect and z."""
    effect, z = neighbour_structure(X, random_state=random_state)
    return effect >= MIN_STRUCTURE and z >= Z_STRUCTURE, effect, z


def _measure(A: np.ndarray, B: np.ndarray, S: np.ndarray, k: int,
             rng: np.random.Generator) -> tuple[dict[str, Any], tuple | None, bool]:
    """The overlap of A's and B's neighbours at the anchors ``S``, its reference and the
    best shift: (the fields of a :class:`RowCheck`, ``(s, overlap, base)`` or None, and
    whether some shift came half-way to being reported — worth more anchors)."""
    n, m = len(A), len(S)
    NA = _neighbours(A, S, k)
    NB = _neighbours(B, S, k)
    own = _shared(NA, NB) / k
    overlap = float(own.mean())

    # the reference: B's rows permuted by σ, a random permutation that maps the anchors
    # onto the anchors (so their neighbour lists are known): anchor a's lists become
    # σ⁻¹(N_B(σ(a)))
    others = np.setdiff1d(np.arange(n), S)
    null = np.empty(NULL_DRAWS)
    for t in range(NULL_DRAWS):
        sigma = np.empty(n, dtype=np.int64)
        sigma[S] = rng.permutation(S)
        sigma[others] = rng.permutation(others)
        inverse = np.empty(n, dtype=np.int64)
        inverse[sigma] = np.arange(n)
        null[t] = _shared(NA, inverse[NB[np.searchsorted(S, sigma[S])]]).mean() / k
    reference = float(null.mean())
    # at least one shared neighbour in all the anchors: the overlap's resolution
    sd = max(float(null.std(ddof=1)), 1.0 / (k * m))
    fields = dict(n_images=n, k=k, n_anchors=m, overlap=overlap, reference=reference,
                  reference_sd=sd, z=float((overlap - reference) / sd))

    # shifts: anchor a against B's row a + s, where both are anchors (within a run)
    best, hint = None, False
    for s in [t * sign for t in range(1, MAX_SHIFT + 1) for sign in (1, -1)]:
        i = np.flatnonzero(np.isin(S + s, S))
        if len(i) < 10:
            continue
        moved = _shared(NA[i], (NB[np.searchsorted(S, S[i] + s)] - s) % n) / k
        diff = moved - own[i]
        se = float(diff.std(ddof=1)) / math.sqrt(len(i))
        paired = diff.mean() / se if se > 0 else (math.inf if diff.mean() > 0 else 0.0)
        above = (moved.mean() - reference) / (sd * math.sqrt(m / len(i)))
        if diff.mean() >= SHIFT_GAIN and paired >= Z_SHIFT \
                and above >= Z_SHIFT and (best is None or moved.mean() > best[1]):
            best = (s, float(moved.mean()), float(own[i].mean()))
        hint |= bool(diff.mean() >= SHIFT_GAIN / 2 and paired >= 2.0)
    return fields, best, hint


def row_alignment(A: Any, B: Any, *, k: int = K_NEIGHBORS, n_anchors: int = N_ANCHORS,
                  random_state: int = 0) -> RowCheck:
    """Measure whether the rows of ``A`` and ``B`` describe the same images (module
    docstring); never raises on the data: inputs that other checks refuse (shapes, NaN,
    constant arrays) and fewer than :data:`MIN_IMAGES` images give ``skipped``.

    Parameters
    ----------
    A, B : array-like of shape (n_images, d_A), (n_images, d_B)
    k : int, default=10
        Neighbours per anchor (at most (n − 1)/3).
    n_anchors : int, default=64
        Anchor images sampled, in runs of :data:`RUN` consecutive rows; four times as many
        before the pair is called unrelated or passed with a hint of a shift.
    random_state : int, default=0
        Seeds the anchors, the reference permutations and the structure's sample.

    Returns
    -------
    RowCheck
    """
    try:
        A = V.as_representation(A, "A")
        B = V.as_representation(B, "B")
        V.check_pair(A, B)
        V.check_not_constant(A, "A")
        V.check_not_constant(B, "B")
    except RDXInputError as exc:
        return RowCheck("skipped", n_images=0, reason=str(exc))
    n = len(A)
    if n < MIN_IMAGES:
        return RowCheck("skipped", n_images=n, reason=f"fewer than {MIN_IMAGES} images")
    k = max(1, min(int(k), (n - 1) // 3))
    rng = np.random.default_rng(random_state)
    m = int(n_anchors)
    base, shift, hint = _measure(A, B, _anchor_runs(n, m, rng), k, rng)
    if shift is None and (base["z"] < Z_UNRELATED or hint) and base["n_anchors"] < n:
        # before calling a pair unrelated (or noise), or passing one with a hint of a shift,
        # four times the anchors: a weakly related pair, or a shift of rows sorted by class
        # (where the shifted rows share much already), stands out twice as clearly
        base, shift, _ = _measure(A, B, _anchor_runs(n, 4 * m, rng), k, rng)
    if shift is not None:
        return RowCheck("shifted", shift=shift[0], shift_overlap=shift[1],
                        shift_base=shift[2], **base)
    z = base["z"]
    if z >= Z_UNRELATED:
        return RowCheck("aligned", **base)
    # noise has nothing to share: B is measured only when A has structure
    structure: dict[str, float] = {}
    verdict = "unrelated"
    for name, X in (("a", A), ("b", B)):
        found, structure[name], structure[f"{name}_z"] = has_structure(
            X, random_state=random_state)
        if not found:
            verdict = "noise"
            break
    return RowCheck(verdict, structure=structure, **base)


def misalignment_message(check: RowCheck, names: tuple[str, str] = ("A", "B")) -> str:
    """What a misaligned :class:`RowCheck` saw, in words (without the way out)."""
    a, b = names
    if check.verdict == "shifted":
        s = check.shift
        rows = f"{abs(s)} row" + ("s" if abs(s) > 1 else "")
        where = (f"{b} has {rows} more before its first image than {a} (a header row?), or "
                 f"{a} lacks its first {rows}" if s > 0 else
                 f"{b} lacks its first {rows}, or {a} has {rows} more before its first "
                 f"image (a header row?)")
        return (
            f"{a} and {b} look shifted against each other by {rows}: image i's "
            f"{check.k} nearest neighbours in {a} are {check.shift_overlap:.0%} the same as "
            f"those of {b}'s row i{s:+d}, only {check.shift_base:.0%} those of {b}'s row i "
            f"(measured on {check.n_anchors} images). {b}'s row i{s:+d} holds image i: "
            f"{where}. Both must list the same images in the same order.")
    return (
        f"{a} and {b} do not look like features of the same images in the same row order: "
        f"of each image's {check.k} nearest neighbours they share {check.overlap:.1%} on "
        f"average ({check.n_anchors} images sampled), what rows paired at random share "
        f"({check.reference:.1%} ± {check.reference_sd:.1%}), although each has neighbour "
        f"structure of its own — two models of the same images share far more (different "
        f"models on real images: typically 10–70 %). {b}'s rows may be shuffled or in "
        f"another image order than {a}'s; put them in the same order.")


def check_rows_aligned(A: Any, B: Any, names: tuple[str, str] = ("A", "B"), *,
                       hint: str = "", random_state: int = 0) -> RowCheck | None:
    """Refuse ``A`` and ``B`` whose rows do not look like the same images in the same order
    (:func:`row_alignment`: shuffled or shifted rows).

    Parameters
    ----------
    A, B : array-like of shape (n_images, d_A), (n_images, d_B)
    names : the two inputs' names in the message.
    hint : how to go on anyway (the flag or parameter), appended to the message.
    random_state : seeds the check (:func:`row_alignment`).

    Returns
    -------
    RowCheck or None
        What was measured; None inside :func:`rows_checked` (nothing is checked there).

    Raises
    ------
    RDXInputError
        With verdict ``unrelated`` or ``shifted``, saying what was seen and how to proceed.
    """
    if _CHECKED.get():
        return None
    check = row_alignment(A, B, random_state=random_state)
    if check.misaligned:
        raise RDXInputError(misalignment_message(check, names)
                            + (f" {hint.strip()}" if hint.strip() else ""))
    return check


Side = tuple[str, Any, "str | None"]


def check_same_rows(pairs: Sequence[tuple[Side, Side]], *, allow_unaligned: bool = False,
                    hint: str = "Pass --allow-unaligned to compare them anyway.") -> None:
    """The check of the commands' inputs: each pair describes the same images row for row.

    Each side is ``(name, array, file)``; ``file`` (None for arrays that come from no file)
    may carry image ids (:func:`rdx.io.load_image_ids`: ``rdx features`` output), which
    must be the same for both sides, row for row
    (:func:`rdx.validation.check_same_images`); then the rows' neighbours must match
    (:func:`check_rows_aligned`). ``allow_unaligned`` skips both (the same images may be
    named differently by two image sources). Either way the rows count as checked for the
    rest of the enclosing :func:`rows_scope` (:func:`mark_rows_checked`).

    Raises
    ------
    RDXInputError
        Different image ids (naming the first row that differs) or rows that do not match,
        each with ``hint``.
    """
    from ..io import load_image_ids

    if not allow_unaligned:
        ids: dict[str, Any] = {}

        def of(path: str | None) -> Any:
            if path is None:
                return None
            if path not in ids:
                ids[path] = load_image_ids(path)
            return ids[path]

        for (na, _, fa), (nb, _, fb) in pairs:
            V.check_same_images(of(fa), of(fb), (na, nb), hint=(
                f"If they are the same images under other names, {hint[0].lower()}{hint[1:]}"
                if hint else ""))
        for (na, X, _), (nb, Y, _) in pairs:
            check_rows_aligned(X, Y, (na, nb), hint=hint)
    mark_rows_checked()


__all__ = ["K_NEIGHBORS", "MAX_SHIFT", "MIN_IMAGES", "MIN_STRUCTURE", "N_ANCHORS", "RUN",
           "RowCheck", "VERDICTS", "check_rows_aligned", "misalignment_message",
           "check_same_rows", "has_structure", "mark_rows_checked", "neighbour_structure",
           "row_alignment", "rows_checked", "rows_scope"]
