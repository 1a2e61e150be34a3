"""Is the difference *I suspect* real? The same statistic and null for a group you name.

:func:`~rdx.evaluation.significance.assess` judges the explanations a method *found*: each is
compared with the strongest explanation found in null pairs (the family-wise maximum),
because a method shows the strongest groups it can find, in null pairs as in the observed
one. A difference is then confirmed only if it moves its images more than seed noise moves
the images of the strongest group anywhere; two classes that one model merged can be a real
difference and still stay below that (measured by ``benchmarks/bench_significance.py``: the
Fashion-MNIST merges of the seed-twin suite).

A group named *before* looking — the images of two classes the user expects one model to
confuse, a slice of the data set — needs no such correction: its statistic is compared with
the *same group's* statistic in null pairs. Nothing is refitted, so a test costs a few
neighbour-rank passes.

Statistic
    The explanations' excess affinity from neighbour ranks
    (:func:`~rdx.evaluation.excess_affinity.explanation_statistics`): for the group ``M``,
    ``T = (1/|M|) Σ_{i≠j∈M} (exp(β·tanh(γ·(R_B[i,j] − R_A[i,j]) / (min(R_A, R_B)[i,j] + 1)))
    − 1)`` in ``a_over_b`` (tighter in A than in B; ``b_over_a`` swaps A and B), ``γ = 80/n``
    and ``β = 5`` unless given — RDX's default fit scores its explanations with the same value.

Null (``null``)
    * ``"twin"`` when seed twins are given: every exact null pair they give
      (:func:`~rdx.evaluation.significance.twin_null_pairs`: each twin against its model and
      every two twins of one recipe), at least :data:`MIN_GROUP_DRAWS` — two twins of each
      model, or three of one.
    * the field null (``"field"``; ``"perturbation"`` before) otherwise: ``n_null`` pairs
      of noisy copies of A and of B (alternately, at least :data:`MIN_GROUP_DRAWS`), the
      noise calibrated so that a pair shares as many neighbours as A and B do
      (:class:`~rdx.evaluation.null_noise.NullNoise`, ``noise="field"`` by default) — a
      model of seed noise that is not calibrated for named groups: its tests get no verdict
      (``significant`` None, ``calibrated`` False; the p-values stay as readings).

p-values
    ``p_value``: the Student-t predictive tail of ``T`` among the group's ``m`` null values,
    ``P(t_{m−1} ≥ (T − mean) / (sd·√(1 + 1/m)))`` with their own mean and spread (exactly
    uniform when the null values are normal). On the values themselves, not on their logs as
    for the explanations' maxima: a fixed group's null values sit near zero and can be
    negative (the two merged digits classes between seed twins: −2.7 to 3.6, against 143 in
    the merged model), where a log scale would make their spread enormous;
    ``z``: ``(T − mean) / sd``; ``p_value_empirical``: ``(1 + #{null ≥ T}) / (1 + m)``;
    ``p_value_holm``: Holm's step-down adjustment over the groups of one call (family-wise
    error over them); ``significant``: ``p_value_holm ≤ alpha``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..results.types import DIRECTIONS
from ..validation import as_representation, check_int, check_pair
from .excess_affinity import STATISTIC, explanation_statistics, p_upper, resolve_statistic_gamma
from .null_calibration import group_standing
from .null_noise import (CALIBRATION_ANCHORS, DEFAULT_K_NEIGHBORS, DEFAULT_LENGTHSCALE, NOISES,
                         NullNoise, calibrate_noise, neighbor_overlap)
from .significance import (DEFAULT_N_NULL, MAX_N_NULL, as_twins, check_null_params,
                           twin_null_pairs)

#: Fewest null draws of a named group. The p-value takes the spread of the group's own null
#: values; with two or three draws they can agree closely by chance (two seed-twin draws at
#: 2.69 and 2.67 once made a group at 6.2 look significant), and the smallest twin null
#: measured on the seed-twin suite has five draws (two twins of each model).
MIN_GROUP_DRAWS = 5


def normal_predictive_p(null: Sequence[float], t: float) -> tuple[float, float]:
    """``(p, z)``: the Student-t predictive tail of ``t`` among normal ``null`` values of
    unknown mean and variance, ``P(t_{m−1} ≥ (t − mean) / (sd·√(1 + 1/m)))``, and
    ``z = (t − mean) / sd``. Null values that all agree give p 1 or 0."""
    from scipy.special import stdtr

    x = np.asarray(null, dtype=np.float64)
    m = x.size
    sd = float(x.std(ddof=1))
    if not sd > 0:
        return (1.0 if t <= x.mean() else 0.0), 0.0
    z = (float(t) - float(x.mean())) / sd
    return float(stdtr(m - 1, -z / np.sqrt(1 + 1 / m))), z


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values: the ``i``-th smallest of ``m`` is multiplied by
    ``m − i`` (0-based), running maxima taken so the order is kept, capped at 1.

    ``[0.01, 0.04, 0.03]`` gives ``[0.03, 0.06, 0.06]``.
    """
    p = np.asarray(p, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, p[order] * (len(p) - np.arange(len(p))))
    out = np.empty_like(p)
    out[order] = np.maximum.accumulate(scaled)
    return out


def assess_groups(A: Any, B: Any, groups: Sequence[Sequence[int]], *,
                  names: Sequence[str] | None = None,
                  directions: Sequence[str] = ("a_over_b",),
                  control_a: Any = None, control_b: Any = None,
                  n_null: int = DEFAULT_N_NULL, noise: str = "field",
                  gamma: float | None = None, beta: float = 5.0,
                  k_neighbors: int = DEFAULT_K_NEIGHBORS,
                  lengthscale: float = DEFAULT_LENGTHSCALE, alpha: float = 0.05,
                  random_state: int = 0) -> dict[str, Any]:
    """Test named image groups for a difference beyond seed noise (module docstring).

    Parameters
    ----------
    A, B : (n, d_A), (n, d_B) arrays
        The two representations (same images, same order).
    groups : list of lists of int
        Image indices of each group, at least two images each; name them before looking
        at the result, or the test is not valid.
    names : list of str, optional
        A name per group (default ``group 1``, ``group 2`` ...).
    directions : sequence of {"a_over_b", "b_over_a"}
        ``a_over_b``: is the group tighter in A than in B beyond seed noise? Both: two tests
        per group (Holm's correction counts them).
    control_a, control_b : array or list of arrays, optional
        Seed twins of A / of B: the twin null (at least :data:`MIN_GROUP_DRAWS` exact draws:
        two twins of each model, or three of one).
    n_null : int, default=6
        Perturbation draws when no twins are given (at least :data:`MIN_GROUP_DRAWS`).
    noise : {"field", "local"}
        Shape of the null's noise: the field null (default) or the local null.
    gamma, beta : float
        Of the statistic (``γ = 80/n`` if None, ``β = 5``).
    k_neighbors : int
        Neighbour defining the noise scale and the overlap.
    lengthscale : float
        Of the field noise, in units of the median local scale.
    alpha : float
        Family-wise level over the groups (Holm).
    random_state : int
        Seeds the calibration anchors and the noise (a local generator).

    Returns
    -------
    dict
        ``{"null", "noise", "statistic", "n_draws", "n_tests", "alpha", "random_state",
        "params", "calibration", "groups": [{"name", "direction", "size", "members",
        "statistic", "p_value", "p_value_holm", "p_value_empirical", "z", "null_values",
        "significant"}, ...]}``, one record per group and direction (groups first);
        ``members``: the group's image indices, sorted.
    """
    A = as_representation(A, "A")
    B = as_representation(B, "B")
    check_pair(A, B)
    n = A.shape[0]
    directions = [directions] if isinstance(directions, str) else list(directions)
    if not directions or any(d not in DIRECTIONS for d in directions) or \
            len(set(directions)) < len(directions):
        raise RDXInputError(f"directions must be one or both of {DIRECTIONS}, got "
                            f"{directions!r}.")
    if noise not in NOISES:
        raise RDXInputError(f"noise must be one of {NOISES}, got {noise!r}.")
    members = check_groups(groups, n)
    if names is None:
        names = [f"group {i + 1}" for i in range(len(members))]
    names = [str(x) for x in names]
    if len(names) != len(members):
        raise RDXInputError(f"{len(names)} names for {len(members)} groups.")
    check_int(n_null, "n_null", minimum=MIN_GROUP_DRAWS, maximum=MAX_N_NULL)
    check_null_params(n, random_state=random_state, k_neighbors=k_neighbors, alpha=alpha,
                      beta=beta, lengthscale=lengthscale, gamma=gamma)
    required, extra = twin_null_pairs(A, B, as_twins(control_a, n, "control_a"),
                                      as_twins(control_b, n, "control_b"))
    pairs = [(X, Y) for X, Y, _ in required + extra]
    if pairs and len(pairs) < MIN_GROUP_DRAWS:
        raise RDXInputError(too_few_twins(len(pairs)))
    g = resolve_statistic_gamma(gamma, n)

    def stats(X: np.ndarray, Y: np.ndarray) -> list[float]:   # groups first, then directions
        t = explanation_statistics(X, Y, {d: members for d in directions}, gamma=g, beta=beta)
        return [t[d][i] for i in range(len(members)) for d in directions]

    observed = stats(A, B)
    null_rows = [stats(X, Y) for X, Y in pairs]
    calibration: dict[str, Any] = {}
    rng = np.random.default_rng(random_state)
    if not pairs:
        anchors = np.sort(rng.choice(n, size=min(n, CALIBRATION_ANCHORS), replace=False))
        target = neighbor_overlap(A, B, k=k_neighbors, anchors=anchors)
        calibration["observed_overlap"] = target
        noises = {}
        for base, X in (("a", A), ("b", B)):
            noises[base] = NullNoise(X, noise, k_neighbors=k_neighbors, lengthscale=lengthscale)
            calibration[f"noise_{base}"] = calibrate_noise(
                X, target, k=k_neighbors, rng=rng, noise=noises[base],
                tau0=calibration["noise_a"]["tau"] if base == "b" else 1.0)
        for j in range(n_null):   # one noisy pair in memory at a time
            base = "a" if j % 2 == 0 else "b"
            nz = noises[base]
            null_rows.append(stats(*nz.pair(calibration[f"noise_{base}"]["tau"],
                                            nz.draw(rng), nz.draw(rng))))
    null = np.asarray(null_rows, dtype=np.float64)   # draws × tests
    pz = [normal_predictive_p(null[:, i], t) for i, t in enumerate(observed)]
    p = [x for x, _ in pz]
    adjusted = holm(p)
    tests = [(g, d) for g in range(len(members)) for d in directions]
    stand = group_standing("twin" if required else noise)
    calibrated = bool(stand["calibrated"])
    records = [{"name": names[g], "direction": d, "size": int(members[g].size),
                "members": members[g].tolist(), "statistic": float(t),
                "p_value": float(p[i]), "p_value_holm": float(adjusted[i]),
                "p_value_empirical": p_upper(null[:, i], t), "z": pz[i][1],
                "null_values": [float(x) for x in null[:, i]],
                # no verdict where the null is not calibrated for named groups
                "significant": bool(adjusted[i] <= alpha) if calibrated else None,
                "below_alpha": bool(adjusted[i] <= alpha), "calibrated": calibrated}
               for i, ((g, d), t) in enumerate(zip(tests, observed))]
    return {"null": "twin" if required else noise, "standing": stand,
            "calibrated": calibrated,
            "noise": None if required else noise, "statistic": STATISTIC,
            "n_draws": len(null_rows), "n_tests": len(records), "alpha": float(alpha),
            "random_state": int(random_state),
            "params": {"gamma": g, "beta": float(beta), "k_neighbors": int(k_neighbors),
                       "lengthscale": float(lengthscale)},
            "calibration": calibration, "groups": records}


def too_few_twins(n_draws: int) -> str:
    """What to do when seed twins give fewer than :data:`MIN_GROUP_DRAWS` exact draws."""
    return (f"the seed twins give {n_draws} exact null draw(s) (each twin against its model, "
            f"every two twins of one recipe); a named group needs at least {MIN_GROUP_DRAWS} "
            "— with fewer, its null values can agree by chance and make any group look "
            "significant: give two twins of each model (or three of one), or none for the "
            "field null.")


def check_groups(groups: Any, n: int, names: Sequence[str] | None = None
                 ) -> list[np.ndarray]:
    """Each group as sorted unique indices in ``0..n−1``, with at least two images (errors
    name a group by ``names`` where given, else by its place)."""
    if isinstance(groups, np.ndarray) and groups.ndim == 1 or not len(groups):
        raise RDXInputError("groups: give a list of image-index lists (one per group), "
                            "e.g. [[0, 4, 9], [2, 3]].")
    out = []
    for i, grp in enumerate(groups):
        what = f"group {i + 1}" if names is None else f"group {names[i]!r}"
        idx = np.asarray(grp)
        if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise RDXInputError(f"{what}: image indices must be a list of integers.")
        if idx.size == n and np.isin(idx, (0, 1)).all():
            # one entry per image, all 0 or 1: a mask passed as integers, which read as
            # indices would be the group of images 0 and 1 — refused rather than guessed
            raise RDXInputError(
                f"{what}: {n} integers, all 0 or 1 — one per image, like a mask, but a group "
                "is a list of image indices (read so, it would be images 0 and 1); pass "
                "the mask's indices, np.flatnonzero(mask).")
        idx = np.unique(idx.astype(np.int64))
        if idx.size < 2:
            raise RDXInputError(f"{what} has {idx.size} distinct image(s); a group "
                                "needs at least two (its statistic is over pairs).")
        if idx[0] < 0 or idx[-1] >= n:
            raise RDXInputError(f"{what}: image indices must lie in 0..{n - 1} (there "
                                f"are {n} images), got {int(idx[0] if idx[0] < 0 else idx[-1])}.")
        out.append(idx)
    return out


__all__ = ["MIN_GROUP_DRAWS", "assess_groups", "check_groups", "holm", "normal_predictive_p",
           "too_few_twins"]
