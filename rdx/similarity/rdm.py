"""Representational similarity analysis (RSA): correlate the two dissimilarity matrices.

For each representation an RDM (representational dissimilarity matrix) over the n images
is formed, and the strict upper triangles ``{R^X_ij}_{i<j}`` and ``{R^Y_ij}_{i<j}`` (row-major,
scipy ``pdist`` order) are correlated.

RDMs (``rdm=``):

* ``"correlation"`` (default; the only one the consistency paper ran): ``1 − ρ_ij``, ρ the
  Pearson correlation of the feature vectors of images i and j (each row centred over its
  own features, then cosine), with ρ clipped to [−1, 1] as thingsvision does. Equal to
  rsatoolbox's ``calc_rdm(method="correlation")``.
* ``"cosine"``: ``1 − cos(xᵢ, xⱼ)`` (clipped likewise).
* ``"euclidean"``: the distance ``d_ij = ‖xᵢ − xⱼ‖`` (not squared; thingsvision's/scipy's
  ``euclidean``). Computed as √(|x|² + |y|² − 2x·y) on column-centred data; squared
  distances below the rounding bound of that formula are set to 0, so duplicate images are
  exactly 0 apart.
* ``"mean_squared_euclidean"``: ``d_ij²/p`` (p features), which is what rsatoolbox's
  ``calc_rdm(method="euclidean")`` returns. The two Euclidean conventions rank the pairs
  identically, so Spearman and Kendall comparisons agree, but Pearson (and cosine)
  comparisons of ``d`` and of ``d²/p`` differ (by a few hundredths on typical data).

Comparison (``compare=``), of the two upper-triangle vectors a and b:

* ``"spearman"`` (default): Pearson correlation of the average ranks (ties get their mean
  rank, as scipy/rsatoolbox);
* ``"pearson"``: Pearson correlation of the dissimilarities (rsatoolbox's ``"corr"``);
* ``"cosine"``: ``a·b / (‖a‖‖b‖)``, not centred (rsatoolbox's ``"cosine"``, its default);
* ``"kendall_tau_a"``: Kendall's τ_a = (concordant − discordant pairs of entries) /
  (N(N−1)/2), N = n(n−1)/2; tied pairs count in the denominator (rsatoolbox's ``"tau-a"``,
  its recommended comparison for models that predict tied dissimilarities). O(N log N).

Dissimilarities that differ by less than ``TIE_RTOL`` (1e-12) of the largest one count as
ties (spearman, kendall_tau_a): they are equal up to float64 rounding, and letting the
rounding order them would change ρ (e.g. on integer-valued features, where many pairs are
exactly equidistant).

Computation: the RDM is never stored as an n×n matrix. Row blocks of the upper triangle are
computed with float64 GEMMs (only blocks on or right of the diagonal) and written straight
into the n(n−1)/2 vector; ranks come from one ``torch.sort`` per vector. Memory is a few
vectors of n(n−1)/2 float64 (0.4 GB each at n = 10 000). Fixed relative to thingsvision:
float64 RDMs instead of float32, no two int64 ``triu_indices`` arrays, and
each RDM is built once instead of once per model pair.

Memory refusal: about 16.5·n² bytes at the peak (two standardised vectors of n(n−1)/2
float64, the sorted values and int64 order of one of them): 165 GB at n = 100 000. Above the
available memory (or ``RDX_MEMORY_LIMIT_GB``) RSA refuses before computing, with the figure
and the largest subsample that fits.

Bootstrap (see :mod:`rdx.similarity.calibration`): when images are drawn with replacement, the
pairs formed by two copies of the same image are left out (their dissimilarity is 0 in both
RDMs by construction, which would inflate the correlation) — rsatoolbox's bootstrap does the
same by setting them to NaN. A draw's dissimilarities are entries of the full RDMs (rows and
columns selected), so :class:`_RSAPrepared` builds and sorts each RDM once and evaluates a
draw from the draw counts: O(N) per draw for spearman/pearson/cosine, no GEMM, no sort.
Permutations likewise only reorder the entries of Y's RDM (O(n²) per draw; kendall_tau_a
re-counts its discordant pairs, O(N log N)).
"""
from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError
from .inputs import as_tensor_pair, block_rows, check_choice, serial_blas
from .memory import check_pairwise_memory
from .names import COMPARE_METHODS, RDM_METHODS

#: Peak bytes per n² of RSA (see the module docstring) and of one condensed RDM.
RSA_BYTES = 16.5
_RDM_BYTES = 4.5
_RSA_WHAT = "two n(n−1)/2 float64 dissimilarity vectors and the sort of one"


def _check_memory(Z: torch.Tensor, bytes_per_n2: float = RSA_BYTES, what: str = "RSA"
                  ) -> None:
    check_pairwise_memory(what, Z.shape[0], bytes_per_n2, Z.device,
                          matrices=_RSA_WHAT if bytes_per_n2 == RSA_BYTES
                          else "an n(n−1)/2 float64 vector")


_EUCLIDEAN = ("euclidean", "mean_squared_euclidean")
#: Comparisons that are a dot product of two standardised vectors.
DOT_COMPARES = ("spearman", "pearson", "cosine")


def _prepare_rows(Z: torch.Tensor, rdm: str, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows transformed so that an RDM block is a function of ``Zp[rows] @ Zp[cols].T``.

    Returns ``Zp`` and squared row norms (used by the Euclidean RDMs only).
    """
    if rdm in _EUCLIDEAN:
        Zc = Z - Z.mean(dim=0, keepdim=True)   # distances are translation invariant
        return Zc, (Zc * Zc).sum(dim=1)
    if rdm == "correlation":
        Z = Z - Z.mean(dim=1, keepdim=True)
    norms = torch.linalg.vector_norm(Z, dim=1)
    bad = torch.nonzero(norms == 0).flatten()
    if len(bad):
        why = ("has zero variance over its features" if rdm == "correlation"
               else "is the zero vector")
        raise RDXInputError(
            f"RSA: image {int(bad[0])} of {name} {why} ({len(bad)} such images), so its "
            f"{rdm} distance is undefined; remove those images or use rdm='euclidean'.")
    return Z / norms[:, None], norms


def _block_dissimilarity(G: torch.Tensor, rdm: str, sq_rows: torch.Tensor,
                         sq_cols: torch.Tensor, d: int) -> torch.Tensor:
    """Turn a block of inner products into dissimilarities, in place.

    Euclidean: ``|x|² + |y|² − 2x·y`` carries a rounding error up to about
    ``(d+2)·u·(|x|² + |y|²)`` (u = 2⁻⁵³), which the square root would blow up to
    ~√u·|x| for (near-)duplicate images; squared distances below that bound are set to 0,
    so duplicates are exactly 0 apart (and tie).
    """
    if rdm in _EUCLIDEAN:
        floor = (sq_rows[:, None] + sq_cols[None, :]) * ((d + 2) * 2.0 ** -53)
        G.mul_(-2.0).add_(sq_rows[:, None]).add_(sq_cols[None, :])
        G.masked_fill_(G <= floor, 0.0)
        return G.sqrt_() if rdm == "euclidean" else G.div_(d)
    return G.clamp_(-1.0, 1.0).neg_().add_(1.0)


def _row_starts(n: int, groups: np.ndarray | None) -> np.ndarray:
    """First column of each row's part of the upper triangle.

    Without groups it is ``i + 1``. With ``groups`` (sorted source-image ids of bootstrap
    rows) every row starts after the last copy of its own image, so pairs of copies of the
    same image are skipped.
    """
    if groups is None:
        return np.arange(1, n + 1, dtype=np.int64)
    g = np.asarray(groups)
    # end of each row's run of equal ids
    return np.searchsorted(g, g, side="right").astype(np.int64)


def rdm_vector(Z: torch.Tensor, rdm: str, *, name: str = "X",
               groups: np.ndarray | None = None) -> torch.Tensor:
    """Strict upper triangle of the RDM of a validated float64 tensor, row-major.

    Parameters
    ----------
    Z : torch.Tensor (n, d), float64
    rdm : one of :data:`RDM_METHODS`
    groups : sorted int array, optional
        Source-image id of each row (bootstrap); pairs within a group are skipped.
    """
    n = Z.shape[0]
    if Z.device.type == "cpu":
        return torch.from_numpy(_rdm_vector_numpy(Z.detach().numpy(), rdm, name, groups))
    Zp, sq = _prepare_rows(Z, rdm, name)
    starts = _row_starts(n, groups)
    lengths = n - starts
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    out = torch.empty(int(offsets[-1]), dtype=torch.float64, device=Z.device)
    step = max(64, block_rows(n))
    starts_t = torch.as_tensor(starts, device=Z.device)
    for s in range(0, n, step):
        e = min(n, s + step)
        c0 = int(starts[s])
        if c0 >= n:
            break
        G = _block_dissimilarity(Zp[s:e] @ Zp[c0:].T, rdm, sq[s:e], sq[c0:], Z.shape[1])
        # each row's part right of its start, row-major: one masked copy per block
        cols = torch.arange(c0, n, device=Z.device)
        out[int(offsets[s]):int(offsets[e])] = G[cols[None, :] >= starts_t[s:e, None]]
    return out


def _rdm_vector_numpy(Z: np.ndarray, rdm: str, name: str,
                      groups: np.ndarray | None) -> np.ndarray:
    """:func:`rdm_vector` on the CPU, in numpy: the same blocks and formulas, with numpy's
    single-threaded elementwise work (torch's two-thread regions wait for a busy core on a
    loaded machine, which made a call at n = 200 cost tens of milliseconds)."""
    n, d = Z.shape
    if rdm in _EUCLIDEAN:
        Zp = Z - Z.mean(axis=0, keepdims=True)
        sq = np.einsum("ij,ij->i", Zp, Zp)
    else:
        if rdm == "correlation":
            Z = Z - Z.mean(axis=1, keepdims=True)
        sq = np.sqrt(np.einsum("ij,ij->i", Z, Z))
        bad = np.flatnonzero(sq == 0)
        if len(bad):
            why = ("has zero variance over its features" if rdm == "correlation"
                   else "is the zero vector")
            raise RDXInputError(
                f"RSA: image {int(bad[0])} of {name} {why} ({len(bad)} such images), so its "
                f"{rdm} distance is undefined; remove those images or use rdm='euclidean'.")
        Zp = Z / sq[:, None]
    starts = _row_starts(n, groups)
    offsets = np.concatenate([[0], np.cumsum(n - starts)])
    out = np.empty(int(offsets[-1]), dtype=np.float64)
    step = max(64, block_rows(n))
    for s in range(0, n, step):
        e = min(n, s + step)
        c0 = int(starts[s])
        if c0 >= n:
            break
        G = Zp[s:e] @ Zp[c0:].T
        if rdm in _EUCLIDEAN:
            floor = (sq[s:e, None] + sq[None, c0:]) * ((d + 2) * 2.0 ** -53)
            G *= -2.0
            G += sq[s:e, None]
            G += sq[None, c0:]
            G[G <= floor] = 0.0
            if rdm == "euclidean":
                np.sqrt(G, out=G)
            else:
                G /= d
        else:
            np.clip(G, -1.0, 1.0, out=G)
            np.subtract(1.0, G, out=G)
        out[int(offsets[s]):int(offsets[e])] = G[np.arange(c0, n)[None, :]
                                                  >= starts[s:e, None]]
    return out


#: Dissimilarities closer than this fraction of the largest one are ranked as ties.
TIE_RTOL = 1e-12


def average_ranks(v: torch.Tensor, *, rtol: float = TIE_RTOL) -> torch.Tensor:
    """1-based ranks with ties given their mean rank (``scipy.stats.rankdata`` default).

    Values within ``rtol · max|v|`` of their sorted predecessor join its tie group: float64
    rounding makes mathematically equal dissimilarities (e.g. of integer-valued features)
    differ in their last bits, which would otherwise break those ties arbitrarily and change
    Spearman's ρ. With ``rtol=0`` only exactly equal values tie. ``v`` is not modified.
    """
    return _average_ranks_(v.to(torch.float64, copy=True), rtol=rtol)


def _tie_starts(sv: np.ndarray, rtol: float = TIE_RTOL) -> np.ndarray:
    """``starts[i]``: sorted value i begins a new tie group (it exceeds its predecessor by
    more than ``rtol · max|v|``)."""
    tol = rtol * float(np.abs(sv).max()) if sv.size else 0.0
    starts = np.ones(len(sv), dtype=bool)
    np.greater(sv[1:] - sv[:-1], tol, out=starts[1:])
    return starts


def _average_ranks_(v: torch.Tensor, *, rtol: float = TIE_RTOL) -> torch.Tensor:
    """:func:`average_ranks` written into the float64 vector ``v`` itself (saves memory).

    Memory beyond ``v``: the sorted values (reused for the ranks), the sort order and a
    boolean vector; tie groups are averaged only over the tied positions. On the CPU the
    sort is numpy's (faster than torch's for the vector sizes of RSA).
    """
    N = v.numel()
    dev = v.device
    if dev.type == "cpu":
        a = v.numpy()
        order = np.argsort(a)   # ties are averaged: their order does not matter
        sv = a[order]
        new = np.ones(N + 1, dtype=bool)
        new[:N] = _tie_starts(sv, rtol)
        ranks = np.arange(1, N + 1, dtype=np.float64)
        tied = np.flatnonzero(~(new[:-1] & new[1:]))      # members of groups of ≥ 2
        if len(tied):
            gid = np.cumsum(new[tied]) - 1
            total = np.bincount(gid, weights=(tied + 1).astype(np.float64))
            ranks[tied] = (total / np.bincount(gid))[gid]
        a[order] = ranks
        return v
    sv, order = torch.sort(v)
    tol = rtol * float(sv.abs().max()) if N else 0.0
    new = torch.ones(N + 1, dtype=torch.bool, device=dev)      # new[i]: i starts a group
    torch.gt(sv[1:] - sv[:-1], tol, out=new[1:N])
    ranks = torch.arange(1, N + 1, dtype=torch.float64, device=dev, out=sv)  # reuse sv
    tied = torch.nonzero(~(new[:-1] & new[1:])).flatten()     # members of groups of ≥ 2
    if len(tied):
        starts = new[tied]
        gid = torch.cumsum(starts, 0) - 1
        total = torch.zeros(int(gid[-1]) + 1, dtype=torch.float64, device=dev)
        total.index_add_(0, gid, (tied + 1).to(torch.float64))
        count = torch.bincount(gid).to(torch.float64)
        ranks[tied] = (total / count)[gid]
    del new
    return v.scatter_(0, order, ranks)


def _standardize_(v: torch.Tensor, name: str, *, center: bool = True) -> torch.Tensor:
    """Centre (unless ``center=False``) and scale to unit norm, in place (so that a dot
    product is a Pearson r, or a cosine)."""
    if v.device.type == "cpu":
        a = v.numpy()
        if center:
            a -= a.mean()
        norm = float(np.sqrt(a @ a))
        if norm > 0:
            a /= norm
            return v
    else:
        if center:
            v.sub_(v.mean())
        norm = torch.linalg.vector_norm(v)
    if not float(norm) > 0:
        what = ("all dissimilarities of {} are equal (e.g. the images are equidistant)"
                if center else "all dissimilarities of {} are 0 (every image is a copy)")
        raise RDXInputError(
            f"RSA: {what.format(name)}, so their comparison with another RDM is undefined.")
    return v.div_(norm)


def _tie_pairs(x: np.ndarray) -> int:
    """Σ t(t−1)/2 over the groups of exactly equal values of ``x``."""
    _, cnt = np.unique(x, return_counts=True)
    cnt = cnt.astype(np.int64)
    return int((cnt * (cnt - 1) // 2).sum())


def kendall_tau_a(x: Any, y: Any) -> float:
    """Kendall's τ_a of two equally long vectors (exact ties), as rsatoolbox's ``tau-a``.

    ``τ_a = (C − D) / (N(N−1)/2)``: C and D count the concordant and discordant pairs of
    entries; pairs tied in x or y count in the denominator only. Computed as scipy's τ_b
    (``scipy.stats.kendalltau``, O(N log N)) times ``√((T − t_x)(T − t_y)) / T``, T =
    N(N−1)/2 and t the tied pairs of each vector, which undoes τ_b's tie correction.
    Returns 0 when either vector is constant.
    """
    from scipy.stats import kendalltau

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    N = len(x)
    total = N * (N - 1) // 2
    tx, ty = _tie_pairs(x), _tie_pairs(y)
    if total == 0 or tx == total or ty == total:
        return 0.0
    tau_b = float(kendalltau(x, y, method="asymptotic").statistic)
    tau = tau_b * math.sqrt(float(total - tx) * float(total - ty)) / total
    return float(min(1.0, max(-1.0, tau)))


def comparable_rdm(Z: torch.Tensor, rdm: str, compare: str, name: str,
                   groups: np.ndarray | None = None) -> torch.Tensor:
    """The RDM vector of ``Z`` in the form its comparison takes: standardised ranks
    (spearman), standardised values (pearson), unit-norm values (cosine), so that the
    comparison is a dot product, or average ranks (kendall_tau_a)."""
    v = rdm_vector(Z, rdm, name=name, groups=groups)
    if v.numel() < 2:
        raise RDXInputError("RSA needs at least 2 image pairs of distinct images.")
    if compare in ("spearman", "kendall_tau_a"):
        v = _average_ranks_(v)
    if compare == "kendall_tau_a":
        if not float(v.max()) > float(v.min()):
            raise RDXInputError(
                f"RSA: all dissimilarities of the RDM of {name} are equal (e.g. the images "
                "are equidistant), so their comparison with another RDM is undefined.")
        return v
    return _standardize_(v, f"the RDM of {name}", center=compare != "cosine")


def standardized_rdm(Z: torch.Tensor, rdm: str, compare: str, name: str,
                     groups: np.ndarray | None = None) -> torch.Tensor:
    """:func:`comparable_rdm` for the comparisons that are a dot product
    (:data:`DOT_COMPARES`)."""
    if compare not in DOT_COMPARES:
        raise ValueError(f"compare={compare!r} is not a dot product of standardised RDMs")
    return comparable_rdm(Z, rdm, compare, name, groups)


def compare_rdms(a: torch.Tensor, b: torch.Tensor, compare: str) -> float:
    """Compare two :func:`comparable_rdm` vectors."""
    if compare == "kendall_tau_a":
        return kendall_tau_a(a.cpu().numpy(), b.cpu().numpy())
    if a.device.type == "cpu":
        return float(min(1.0, max(-1.0, float(a.numpy() @ b.numpy()))))
    return float(torch.dot(a, b).clamp(-1.0, 1.0))


def _check_params(rdm: Any, compare: Any) -> tuple[str, str]:
    return (check_choice(rdm, "rdm", RDM_METHODS, what="RSA"),
            check_choice(compare, "compare", COMPARE_METHODS, what="RSA"))


def rsa(X: Any, Y: Any, *, rdm: str = "correlation", compare: str = "spearman") -> float:
    """RSA: comparison of the upper triangles of the two representations' RDMs.

    Parameters
    ----------
    X, Y : array-like or torch.Tensor of shape (n, p), (n, q)
        Representations of the same n ≥ 4 images (rows).
    rdm : {"correlation", "cosine", "euclidean", "mean_squared_euclidean"}, \
default="correlation"
        Dissimilarity of two images (see the module docstring; ``"euclidean"`` is the
        distance d, ``"mean_squared_euclidean"`` rsatoolbox's d²/p).
    compare : {"spearman", "pearson", "cosine", "kendall_tau_a"}, default="spearman"
        Comparison of the two RDMs' upper triangles (module docstring).

    Returns
    -------
    float in [−1, 1]; higher is more similar.

    Raises
    ------
    RDXInputError
        Bad shapes/values/parameters, an image whose correlation/cosine distance is
        undefined (constant or zero row), or an RDM whose entries are all equal.
    """
    rdm, compare = _check_params(rdm, compare)
    X, Y, _ = as_tensor_pair(X, Y, what="RSA", min_n=4)
    _check_memory(X)
    with torch.no_grad(), _serial_if_small(X, Y):
        a = comparable_rdm(X.detach(), rdm, compare, "X")
        b = comparable_rdm(Y.detach(), rdm, compare, "Y")
        return compare_rdms(a, b, compare)


def _serial_if_small(X: torch.Tensor, Y: torch.Tensor) -> Any:
    """One BLAS thread for the RDM products of a small CPU problem (:func:`serial_blas`)."""
    if X.device.type != "cpu":
        return contextlib.nullcontext()
    n = X.shape[0]
    return serial_blas(n * n * (X.shape[1] + Y.shape[1]) / 2)


def compute_rdm(X: Any, *, rdm: str = "correlation") -> np.ndarray:
    """The condensed RDM (strict upper triangle, scipy ``pdist`` order) as float64 numpy."""
    check_choice(rdm, "rdm", RDM_METHODS, what="RDM")
    Z, _, _ = as_tensor_pair(X, X, what="RDM", min_n=2)
    _check_memory(Z, _RDM_BYTES, "the condensed RDM")
    with torch.no_grad():
        return rdm_vector(Z.detach(), rdm).cpu().numpy()


def rsa_bootstrap(X: Any, Y: Any, idx: np.ndarray, *, rdm: str = "correlation",
                  compare: str = "spearman") -> float:
    """RSA of the bootstrap sample ``idx`` (rows drawn with replacement), leaving out the
    pairs formed by two copies of the same image (see the module docstring). Rebuilds the
    resampled RDMs (the reference for :meth:`_RSAPrepared.bootstrap`)."""
    rdm, compare = _check_params(rdm, compare)
    X, Y, _ = as_tensor_pair(X, Y, what="RSA", min_n=4)
    _check_memory(X)
    order = np.sort(np.asarray(idx, dtype=np.int64))   # RSA is invariant to a joint reorder
    t = torch.as_tensor(order, device=X.device)
    with torch.no_grad():
        a = comparable_rdm(X.detach()[t], rdm, compare, "X", groups=order)
        b = comparable_rdm(Y.detach()[t], rdm, compare, "Y", groups=order)
        return compare_rdms(a, b, compare)


def _square(v: np.ndarray, n: int, *, symmetric: bool) -> np.ndarray:
    """n×n array with ``v`` (row-major strict upper triangle) above the diagonal, zeros on
    it, and either zeros or the mirror image below."""
    M = np.zeros((n, n), dtype=v.dtype)
    M[np.triu_indices(n, 1)] = v
    if symmetric:
        M += M.T
    return M


def _upper_matrix(v: torch.Tensor, n: int, *, symmetric: bool) -> torch.Tensor:
    """:func:`_square` of a tensor, on its device."""
    if v.device.type == "cpu":
        return torch.from_numpy(_square(v.numpy(), n, symmetric=symmetric))
    M = torch.zeros((n, n), dtype=v.dtype, device=v.device)
    r, c = torch.triu_indices(n, n, 1, device=v.device)
    M[r, c] = v
    if symmetric:
        M[c, r] = v
    return M


class _SortedRDM:
    """One RDM kept for the bootstrap: its values, their sort order, the two images of each
    sorted pair and its tie groups (:data:`TIE_RTOL`, over all n(n−1)/2 pairs)."""

    def __init__(self, v: np.ndarray, rows: np.ndarray, cols: np.ndarray):
        self.order = np.argsort(v)
        self.rows, self.cols = rows[self.order], cols[self.order]
        new = np.ones(len(v) + 1, dtype=bool)
        new[:-1] = _tie_starts(v[self.order])
        # sorted positions in tie groups of ≥ 2, each group's first and last position, and
        # the group of every such position
        self.tied = np.flatnonzero(~(new[:-1] & new[1:]))
        if len(self.tied):
            head = new[self.tied]
            self.group = np.cumsum(head) - 1
            self.first = self.tied[head]
            # the last member of each group
            ends = np.flatnonzero(np.diff(self.group)) if len(self.tied) > 1 else []
            self.last = np.append(self.tied[ends], self.tied[-1])

    def ranks(self, ws: np.ndarray) -> np.ndarray:
        """Average rank, in sorted order, of each pair among the draw's dissimilarities
        when pair u (sorted position) is present ``ws[u]`` times (meaningless where 0)."""
        cs = np.cumsum(ws)
        r = np.multiply(ws, -0.5)          # copies of one pair share their mean rank,
        r += cs                            # cs − (ws − 1)/2
        r += 0.5
        if len(self.tied):
            before = cs[self.first] - ws[self.first]
            r[self.tied] = (before + 0.5 * (cs[self.last] - before + 1.0))[self.group]
        return r


class _RSAPrepared:
    """RSA kept for repeated evaluation under row permutations of Y and bootstrap draws.

    A row permutation of Y permutes the entries of its RDM (and of their ranks) without
    changing their mean or spread, so ``RSA(X, Y[perm]) = Σ_{i<j} a_ij · b_{perm_i perm_j}``
    with the standardised vectors a, b: no RDM rebuild and no re-sort per permutation (two
    n×n float64 matrices are kept). kendall_tau_a counts the permuted pairs anew
    (O(N log N) per permutation, N = n(n−1)/2).
    """

    def __init__(self, X: Any, Y: Any, rdm: str, compare: str):
        rdm, compare = _check_params(rdm, compare)
        X, Y, _ = as_tensor_pair(X, Y, what="RSA", min_n=4)
        _check_memory(X)
        self.n = X.shape[0]
        self.compare = compare
        self._inputs = (X, Y, rdm, compare)
        self._sorted: tuple | None = None
        with torch.no_grad(), _serial_if_small(X, Y):
            a = comparable_rdm(X.detach(), rdm, compare, "X")
            b = comparable_rdm(Y.detach(), rdm, compare, "Y")
            self.value = compare_rdms(a, b, compare)
            self._a, self._b = a, b
        self._Ma: Any = None
        self._Mb: Any = None
        self._iu: tuple[np.ndarray, np.ndarray] | None = None

    def permuted(self, perm: np.ndarray) -> float:
        with torch.no_grad():
            if self._Mb is None:   # built on first use only (n×n each)
                cpu = self._b.device.type == "cpu"
                sq = _square if cpu else _upper_matrix
                a, b = (self._a.numpy(), self._b.numpy()) if cpu else (self._a, self._b)
                if self.compare == "kendall_tau_a":
                    self._Ma = a                       # kept as the vector
                else:
                    self._Ma = sq(a, self.n, symmetric=False)
                    self._a = None
                self._Mb = sq(b, self.n, symmetric=True)
                self._b = None
            if self.compare == "kendall_tau_a":
                return self._permuted_tau_a(perm)
            if isinstance(self._Mb, np.ndarray):
                p = np.asarray(perm, dtype=np.int64)
                Bp = self._Mb.take(p, axis=0).take(p, axis=1)
                total = float(np.einsum("ij,ij->", self._Ma, Bp))
                return float(min(1.0, max(-1.0, total)))
            p = torch.as_tensor(perm, device=self._Mb.device)
            step = block_rows(self.n)
            total = torch.zeros((), dtype=torch.float64, device=self._Mb.device)
            for s in range(0, self.n, step):
                total += (self._Ma[s:s + step]
                          * self._Mb.index_select(0, p[s:s + step]).index_select(1, p)).sum()
            return float(total.clamp(-1.0, 1.0))

    def _permuted_tau_a(self, perm: np.ndarray) -> float:
        """τ_a of X's ranks and the permuted entries of Y's (kept as an n×n matrix)."""
        if self._iu is None:
            self._iu = np.triu_indices(self.n, 1)
        Mb = self._Mb if isinstance(self._Mb, np.ndarray) else self._Mb.cpu().numpy()
        a = self._Ma if isinstance(self._Ma, np.ndarray) else self._Ma.cpu().numpy()
        p = np.asarray(perm, dtype=np.int64)
        r, c = self._iu
        return kendall_tau_a(a, Mb[p[r], p[c]])

    def _prepare_bootstrap(self) -> tuple:
        X, Y, rdm, compare = self._inputs
        with torch.no_grad():
            vecs = [rdm_vector(Z.detach(), rdm, name=nm).cpu().numpy()
                    for Z, nm in ((X, "X"), (Y, "Y"))]
        # int64 image ids: numpy gathers with them fastest (smaller types are converted)
        rows, cols = np.triu_indices(self.n, 1)
        if compare == "spearman":
            sx, sy = _SortedRDM(vecs[0], rows, cols), _SortedRDM(vecs[1], rows, cols)
            del vecs
            inv_y = np.empty_like(sy.order)
            inv_y[sy.order] = np.arange(len(inv_y))
            y_pos = inv_y[sx.order]   # position in Y's sort order of each pair, X's order
            sx.order = sy.order = None
            return (sx, sy, y_pos)
        if compare == "kendall_tau_a":
            return tuple(average_ranks(torch.from_numpy(v)).numpy() for v in vecs) + (
                rows, cols)
        return (vecs[0], vecs[1], rows, cols)

    def bootstrap(self, idx: np.ndarray) -> float:
        """:func:`rsa_bootstrap` of the draw ``idx``, without rebuilding or re-sorting the
        RDMs.

        The draw's dissimilarities are the original pairs (a, b), a ≠ b, each ``c_a·c_b``
        times (``c``: how often each image was drawn; pairs of copies of one image are left
        out). pearson and cosine are those weighted sums; spearman's average ranks are
        cumulative sums of the weights in each RDM's one sort order (O(N) per draw; ties
        are the tie groups of the full RDM); kendall_tau_a counts the repeated entries
        (O(N log N)).
        """
        if self._sorted is None:
            self._sorted = self._prepare_bootstrap()
        c = np.bincount(np.asarray(idx, dtype=np.int64), minlength=self.n).astype(np.float64)
        if self.compare == "kendall_tau_a":
            rx, ry, rows, cols = self._sorted
            w = (c[rows] * c[cols]).astype(np.int64)
            self._check_pairs(float(w.sum()))
            keep = np.flatnonzero(w)
            xs, ys = np.repeat(rx[keep], w[keep]), np.repeat(ry[keep], w[keep])
            for nm, z in (("X", xs), ("Y", ys)):
                self._check_spread(nm, float(z.max() - z.min()))
            return kendall_tau_a(xs, ys)
        if self.compare == "spearman":
            sx, sy, y_pos = self._sorted
            wx = c[sx.rows] * c[sx.cols]
            total = float(wx.sum())
            self._check_pairs(total)
            wy = c[sy.rows] * c[sy.cols]
            x, y = sx.ranks(wx), sy.ranks(wy)
            x -= float(wx @ x) / total
            y -= float(wy @ y) / total
            wx *= x                                  # now w·x
            sxx, syy = float(wx @ x), float(np.dot(wy * y, y))
            sxy = float(wx @ y[y_pos])
        else:
            vx, vy, rows, cols = self._sorted
            w = c[rows] * c[cols]
            total = float(w.sum())
            self._check_pairs(total)
            x, y = vx, vy
            if self.compare == "pearson":
                x = vx - float(w @ vx) / total
                y = vy - float(w @ vy) / total
            wx = w * x
            sxx, syy, sxy = float(wx @ x), float(w @ (y * y)), float(wx @ y)
        for nm, ss in (("X", sxx), ("Y", syy)):
            self._check_spread(nm, ss)
        r = sxy / math.sqrt(sxx * syy)
        return float(min(1.0, max(-1.0, r)))

    @staticmethod
    def _check_pairs(total: float) -> None:
        if not total >= 2:
            raise RDXInputError("RSA needs at least 2 image pairs of distinct images.")

    def _check_spread(self, name: str, spread: float) -> None:
        if not spread > 0:
            what = "0" if self.compare == "cosine" else "equal"
            raise RDXInputError(
                f"RSA: all dissimilarities of the RDM of {name} are {what} in this draw, so "
                "their comparison with another RDM is undefined.")


def prepare_rsa(X: Any, Y: Any, *, rdm: str = "correlation",
                compare: str = "spearman") -> _RSAPrepared:
    """:class:`_RSAPrepared` of X and Y (the permutation null and bootstrap of
    :func:`rdx.similarity.calibrate`)."""
    return _RSAPrepared(X, Y, rdm, compare)
