"""The RDX graph: per-model similarity matrices, guidance, symmetrisation, difference and
affinities.

Naming: ``a_over_b`` is the direction "close in A, far in B" (the original code's ``01``);
``b_over_a`` is "close in B, far in A" (``10``). With the difference matrix

    diff_a_over_b = f(R_A, R_B)

the two affinity matrices are ``exp(−β·diff_a_over_b)`` (a_over_b) and
``exp(+β·diff_a_over_b)`` (b_over_a), because ``diff_b_over_a = −diff_a_over_b``.
Affinities therefore lie in ``[e^−β, e^β]`` for the locally biased difference.
"""
from __future__ import annotations

import numpy as np

from ..errors import RDXInputError
from . import arrays as A
from .arrays import Array
from .blockwise import for_blocks, map_row_blocks_
from .geometry import abs_max, kth_neighbor_distance, squared_distances
from .ranks import ranks_from_squared_distances_

SIMILARITY_FUNCTIONS = ("neighborhood", "max_normalized_distance", "zp_local_scaling")
DIFFERENCE_FUNCTIONS = ("locally_biased", "standard")
#: Sign s of the exponent in affinity = exp(s·β·diff_a_over_b), per direction.
DIRECTION_SIGN = {"a_over_b": -1.0, "b_over_a": 1.0}


def similarity_matrix(X: Array, function: str = "neighborhood", *,
                      sigma_neighbor: int = 7, out: Array | None = None,
                      nearest: np.ndarray | None = None) -> Array:
    """Per-model matrix ``R`` that the difference function compares.

    * ``neighborhood``: neighbour ranks (0-based, self 0, ties by index); ``nearest``, an
      (n, K) integer array, then receives each image's K nearest other images in rank order
      (left untouched by the other functions).
    * ``max_normalized_distance``: ``D / max(D)``.
    * ``zp_local_scaling``: ``D(i,j)² / (σ(i)σ(j))`` with σ the distance to the
      ``sigma_neighbor``-th neighbour — computed from this model's distances only (the
      original code mixed the two models' distances for model B).
    """
    D2 = squared_distances(X, out=out)
    if function == "neighborhood":
        return ranks_from_squared_distances_(D2, nearest=nearest)
    if function == "max_normalized_distance":
        A.sqrt_(D2)
        D2 /= float(D2.max())
        return D2
    if function == "zp_local_scaling":
        sigma = kth_neighbor_distance(D2, sigma_neighbor)
        if bool((sigma == 0).any()):
            i = int(np.flatnonzero(A.host(sigma) == 0)[0])
            raise RDXInputError(
                f"zp_local_scaling is undefined: image {i} has at least {sigma_neighbor} exact "
                "duplicates, so its local scale (distance to its "
                f"{sigma_neighbor}th neighbour) is zero. Remove duplicate images or use "
                "similarity='neighborhood'.")
        D2 /= sigma[:, None]
        D2 /= sigma[None, :]
        return D2
    raise RDXInputError(f"unknown similarity function {function!r}; use one of {SIMILARITY_FUNCTIONS}")


def apply_guidance_(R: Array, groups: np.ndarray, value: float | None = None
                    ) -> Array:
    """Guidance: pairs in different groups get the constant ``value`` (ν), in place.

    Pass the same ν for the two matrices a difference compares (see
    :func:`guidance_null_value`): pairs separated by both models' groups then have equal
    values (difference 0, affinity exactly 1) and pairs separated in one model only are
    pushed apart in that model. ``value=None`` is the paper code's per-matrix ``5·max(R)``.
    """
    big = 5.0 * float(R.max()) if value is None else float(value)
    g = A.like(np.unique(groups, return_inverse=True)[1].reshape(-1), R)

    def block(rb: Array, s: int) -> None:
        A.where_(rb, g[s:s + rb.shape[0], None] != g[None, :], big)

    map_row_blocks_(R, block)
    return R


def guidance_null_value(scale: float, *matrices: Array) -> float:
    """ν = ``scale`` × the largest entry of the compared matrices, before guidance and
    symmetrisation: ``scale·(n − 1)`` for neighbour ranks, identical for both models.

    A per-model maximum (or one taken after symmetrising the ranks) would differ between the
    models, and pairs separated by both models' groups would no longer be neutral.
    """
    return float(scale) * max(float(M.max()) for M in matrices)


#: Ways of making a per-model matrix symmetric before the difference (RDX v2).
SYMMETRIZE_MODES = ("mean", "min", "max")


def symmetrize_(M: Array, mode: str = "mean", tile: int = 512) -> Array:
    """``M ← (M + Mᵀ)/2`` (``mean``), ``min(M, Mᵀ)`` or ``max(M, Mᵀ)``, in place, tile by tile
    (one tile of temporary memory; the transposed reads stay in cache)."""
    if mode not in SYMMETRIZE_MODES:
        raise RDXInputError(f"unknown symmetrisation {mode!r}; use one of {SYMMETRIZE_MODES}")
    n = M.shape[0]

    def tile_row(i0: int) -> None:
        i1 = min(n, i0 + tile)
        for j0 in range(i0, n, tile):
            j1 = min(n, j0 + tile)
            t = A.copy(M[i0:i1, j0:j1])
            u = M[j0:j1, i0:i1].T
            if mode == "mean":
                t += u
                t *= 0.5
            elif mode == "min":
                A.minimum(t, u, out=t)
            else:
                A.maximum(t, u, out=t)
            M[i0:i1, j0:j1] = t
            M[j0:j1, i0:i1] = t.T

    # row i0 owns the tile pairs (i0, j0), (j0, i0) with j0 ≥ i0: tasks touch disjoint entries
    for_blocks(M, tile_row, range(0, n, tile))
    return M


def resolve_gamma(gamma: float | None, gamma_scale: float, n: int) -> float:
    """γ: the explicit value, else ``gamma_scale / n`` (80/n by default)."""
    return float(gamma) if gamma is not None else float(gamma_scale) / n


#: Largest γ, ``gamma_scale`` and ``guidance_scale``. γ multiplies rank differences — up
#: to the guidance value ν = guidance_scale·(n − 1) — in float32, whose range ends at
#: 3.4e38: with each at most 1e10 the products stay far inside it for any n.
MAX_SCALE = 1e10
#: Why :data:`MAX_SCALE` (appended to the refusal).
SCALE_WHY = ("it multiplies neighbour ranks (and the guidance value) in float32, which "
             "overflows beyond 3.4e38 — every explanation would come out empty; the "
             "difference tanh(γ·…) is already ±1 for every pair of different ranks from "
             "γ ≈ 10·n, so larger values change nothing")
#: Smallest affinity contrast (β × the largest |difference|) that float32 resolves around
#: exp(0) = 1 (its epsilon is 1.2e-7): below it every affinity rounds to 1 and the graph
#: has nothing to cluster.
MIN_AFFINITY_CONTRAST = 1e-6


def check_affinity_contrast(beta: float, gamma: float, n: int, *, difference: str,
                            normalize: bool, ranks: bool) -> None:
    """Refuse β and γ whose affinities ``exp(−β·diff)`` would all round to 1 in float32.

    The largest |difference| is about ``min(1, γ·(n − 1))`` for ``locally_biased`` on
    neighbour ranks (``γ·1`` on similarities in [0, 1]), ``n − 1`` (or 1) for
    ``standard``, and 1 when normalised.

    Raises
    ------
    RDXInputError
        With the smallest β (and γ) that work.
    """
    spread = float(n - 1) if ranks else 1.0
    if normalize:
        peak = 1.0
    elif difference == "locally_biased":
        peak = min(1.0, gamma * spread)
    else:
        peak = spread
    contrast = beta * peak
    if contrast >= MIN_AFFINITY_CONTRAST:
        return
    fix = f"use beta ≥ {MIN_AFFINITY_CONTRAST / peak:.2g}" if peak > 0 else "use larger values"
    if difference == "locally_biased" and not normalize and gamma * spread < 1:
        fix += (f" or gamma ≥ {MIN_AFFINITY_CONTRAST / (beta * spread):.2g} (gamma_scale ≥ "
                f"{n * MIN_AFFINITY_CONTRAST / (beta * spread):.2g})")
    raise RDXInputError(
        f"beta={beta:g} and gamma={gamma:g} at n={n} give affinities exp(−β·difference) "
        f"that differ from 1 by at most {contrast:.2g}, below what float32 resolves "
        f"({MIN_AFFINITY_CONTRAST:g}): every affinity would be 1 and the explanations "
        f"arbitrary. {fix[0].upper() + fix[1:]}.")


def difference_matrix_(Ra: Array, Rb: Array, function: str = "locally_biased", *,
                       gamma: float = 0.05, normalize: bool = False) -> Array:
    """``diff_a_over_b`` written into ``Ra`` (in place; ``Rb`` is left unchanged).

    * ``locally_biased``: ``tanh(γ·(R_A − R_B) / (min(R_A, R_B) + 1))``
    * ``standard``: ``R_A − R_B``
    * ``normalize``: divide by ``max|diff|`` afterwards.
    """
    if function == "locally_biased":
        def block(ra: Array, s: int) -> None:
            rb = Rb[s:s + ra.shape[0]]
            den = A.minimum(ra, rb)
            den += 1.0
            ra -= rb
            ra *= gamma
            ra /= den
            A.tanh_(ra)
    elif function == "standard":
        def block(ra: Array, s: int) -> None:
            ra -= Rb[s:s + ra.shape[0]]
    else:
        raise RDXInputError(f"unknown difference function {function!r}; use one of {DIFFERENCE_FUNCTIONS}")
    map_row_blocks_(Ra, block)
    if normalize:
        m = abs_max(Ra)
        if m > 0:
            Ra /= m
    return Ra


def affinity(diff: Array, beta: float, direction: str) -> Array:
    """Unsymmetrised affinity of a direction (a new tensor of the same shape as ``diff``)."""
    return A.exp_(diff * (DIRECTION_SIGN[direction] * beta))


def symmetrized_affinity(diff: Array, beta: float, direction: str,
                         out: Array | None = None, tile: int = 512) -> Array:
    """``(A + Aᵀ)/2`` of the direction's affinity ``A``, computed tile by tile into ``out``.

    Tiles of 512 keep the transposed reads in cache (2× faster than 2048 on a 2-core CPU).
    """
    n = diff.shape[0]
    if out is None:
        out = A.empty(tuple(diff.shape), diff)
    c = DIRECTION_SIGN[direction] * beta

    def tile_row(i0: int) -> None:
        i1 = min(n, i0 + tile)
        for j0 in range(i0, n, tile):
            j1 = min(n, j0 + tile)
            t = A.exp_(diff[i0:i1, j0:j1] * c)
            t += A.exp_(diff[j0:j1, i0:i1] * c).T
            t *= 0.5
            out[i0:i1, j0:j1] = t
            if j0 != i0:
                out[j0:j1, i0:i1] = t.T

    for_blocks(out, tile_row, range(0, n, tile))   # disjoint tile pairs, as in symmetrize_
    return out
