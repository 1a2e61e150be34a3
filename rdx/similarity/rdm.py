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
* ``"euclidean"``: ``‖xᵢ − xⱼ‖`` (not squared; thingsvision's/scipy's ``euclidean``;
  rsatoolbox's ``"euclidean"`` RDM is the squared distance divided by d, which has the same
  Spearman RSA but not the same Pearson RSA). Computed as √(|x|² + |y|² − 2x·y) on
  column-centred data; squared distances below the rounding bound of that formula are set
  to 0, so duplicate images are exactly 0 apart.

Comparison (``compare=``): ``"spearman"`` (default; Pearson correlation of the average ranks,
ties get their mean rank, as scipy/rsatoolbox) or ``"pearson"``. Dissimilarities that differ
by less than ``TIE_RTOL`` (1e-12) of the largest one count as ties: they are equal up to
float64 rounding, and letting the rounding order them would change ρ (e.g. on
integer-valued features, where many pairs are exactly equidistant).

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
same by setting them to NaN.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError
from .inputs import as_tensor_pair, block_rows, check_choice
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


def _prepare_rows(Z: torch.Tensor, rdm: str, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows transformed so that an RDM block is a function of ``Zp[rows] @ Zp[cols].T``.

    Returns ``Zp`` and squared row norms (used by the Euclidean RDM only).
    """
    if rdm == "euclidean":
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
    if rdm == "euclidean":
        floor = (sq_rows[:, None] + sq_cols[None, :]) * ((d + 2) * 2.0 ** -53)
        G.mul_(-2.0).add_(sq_rows[:, None]).add_(sq_cols[None, :])
        return G.masked_fill_(G <= floor, 0.0).sqrt_()
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
    Zp, sq = _prepare_rows(Z, rdm, name)
    starts = _row_starts(n, groups)
    lengths = n - starts
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    out = torch.empty(int(offsets[-1]), dtype=torch.float64, device=Z.device)
    step = max(64, block_rows(n))
    for s in range(0, n, step):
        e = min(n, s + step)
        c0 = int(starts[s])
        if c0 >= n:
            break
        G = _block_dissimilarity(Zp[s:e] @ Zp[c0:].T, rdm, sq[s:e], sq[c0:], Z.shape[1])
        for i in range(s, e):
            if lengths[i]:
                out[offsets[i]:offsets[i + 1]] = G[i - s, starts[i] - c0:]
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


def _average_ranks_(v: torch.Tensor, *, rtol: float = TIE_RTOL) -> torch.Tensor:
    """:func:`average_ranks` written into the float64 vector ``v`` itself (saves memory).

    Memory beyond ``v``: the sorted values (reused for the ranks), the sort order and a
    boolean vector; tie groups are averaged only over the tied positions.
    """
    N = v.numel()
    dev = v.device
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


def _standardize_(v: torch.Tensor, name: str) -> torch.Tensor:
    """Centre and scale to unit norm, in place (so that a dot product is a Pearson r)."""
    v.sub_(v.mean())
    norm = torch.linalg.vector_norm(v)
    if not float(norm) > 0:
        raise RDXInputError(
            f"RSA: all dissimilarities of {name} are equal (e.g. the images are equidistant), "
            "so their correlation with another RDM is undefined.")
    return v.div_(norm)


def standardized_rdm(Z: torch.Tensor, rdm: str, compare: str, name: str,
                      groups: np.ndarray | None = None) -> torch.Tensor:
    v = rdm_vector(Z, rdm, name=name, groups=groups)
    if v.numel() < 2:
        raise RDXInputError("RSA needs at least 2 image pairs of distinct images.")
    if compare == "spearman":
        v = _average_ranks_(v)
    return _standardize_(v, f"the RDM of {name}")


def _check_params(rdm: Any, compare: Any) -> tuple[str, str]:
    return (check_choice(rdm, "rdm", RDM_METHODS, what="RSA"),
            check_choice(compare, "compare", COMPARE_METHODS, what="RSA"))


def rsa(X: Any, Y: Any, *, rdm: str = "correlation", compare: str = "spearman") -> float:
    """RSA: correlation of the upper triangles of the two representations' RDMs.

    Parameters
    ----------
    X, Y : array-like or torch.Tensor of shape (n, p), (n, q)
        Representations of the same n ≥ 4 images (rows).
    rdm : {"correlation", "cosine", "euclidean"}, default="correlation"
        Dissimilarity of two images (see the module docstring).
    compare : {"spearman", "pearson"}, default="spearman"
        Correlation of the two RDMs' upper triangles.

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
    with torch.no_grad():
        a = standardized_rdm(X.detach(), rdm, compare, "X")
        b = standardized_rdm(Y.detach(), rdm, compare, "Y")
        return float(torch.dot(a, b).clamp(-1.0, 1.0))


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
    pairs formed by two copies of the same image (see the module docstring)."""
    rdm, compare = _check_params(rdm, compare)
    X, Y, _ = as_tensor_pair(X, Y, what="RSA", min_n=4)
    _check_memory(X)
    order = np.sort(np.asarray(idx, dtype=np.int64))   # RSA is invariant to a joint reorder
    t = torch.as_tensor(order, device=X.device)
    with torch.no_grad():
        a = standardized_rdm(X.detach()[t], rdm, compare, "X", groups=order)
        b = standardized_rdm(Y.detach()[t], rdm, compare, "Y", groups=order)
        return float(torch.dot(a, b).clamp(-1.0, 1.0))


def _upper_matrix(v: torch.Tensor, n: int, *, symmetric: bool) -> torch.Tensor:
    """n×n matrix with ``v`` (row-major strict upper triangle) above the diagonal, zeros on
    it, and either zeros or the mirror image below."""
    M = torch.zeros((n, n), dtype=v.dtype, device=v.device)
    off = 0
    for i in range(n - 1):
        m = n - i - 1
        M[i, i + 1:] = v[off:off + m]
        off += m
    if symmetric:
        step = max(64, block_rows(n))
        for s in range(step, n, step):
            e = min(n, s + step)
            M[s:e, :s] = M[:s, s:e].T
        # blocks on the diagonal
        for s in range(0, n, step):
            e = min(n, s + step)
            blk = M[s:e, s:e]
            blk += blk.triu(1).T
    return M


class _RSAPrepared:
    """Standardised (rank) RDMs kept for repeated evaluation under row permutations of Y.

    A row permutation of Y permutes the entries of its RDM (and of their ranks) without
    changing their mean or spread, so ``RSA(X, Y[perm]) = Σ_{i<j} a_ij · b_{perm_i perm_j}``
    with the standardised vectors a, b: no RDM rebuild and no re-sort per permutation
    (two n×n float64 matrices are kept).
    """

    def __init__(self, X: Any, Y: Any, rdm: str, compare: str):
        rdm, compare = _check_params(rdm, compare)
        X, Y, _ = as_tensor_pair(X, Y, what="RSA", min_n=4)
        _check_memory(X)
        self.n = X.shape[0]
        self._inputs = (X, Y, rdm, compare)
        self._sorted: tuple | None = None
        with torch.no_grad():
            a = standardized_rdm(X.detach(), rdm, compare, "X")
            b = standardized_rdm(Y.detach(), rdm, compare, "Y")
            self.value = float(torch.dot(a, b).clamp(-1.0, 1.0))
            self._a, self._b = a, b
        self._Ma: torch.Tensor | None = None
        self._Mb: torch.Tensor | None = None

    def permuted(self, perm: np.ndarray) -> float:
        with torch.no_grad():
            if self._Ma is None:   # built on first use only (n×n each); vectors freed
                self._Ma = _upper_matrix(self._a, self.n, symmetric=False)
                self._a = None
                self._Mb = _upper_matrix(self._b, self.n, symmetric=True)
                self._b = None
            p = torch.as_tensor(perm, device=self._Ma.device)
            step = block_rows(self.n)
            total = torch.zeros((), dtype=torch.float64, device=self._Ma.device)
            for s in range(0, self.n, step):
                total += (self._Ma[s:s + step] * self._Mb[p[s:s + step]][:, p]).sum()
            return float(total.clamp(-1.0, 1.0))


    def bootstrap(self, idx: np.ndarray) -> float:
        """:func:`rsa_bootstrap` of the draw ``idx``, without rebuilding and re-sorting the
        RDMs: the draw's dissimilarities are the original pairs (a, b), a ≠ b, each
        ``c_a·c_b`` times (``c``: how often each image was drawn; pairs of copies of one
        image are left out), so their ranks follow from each RDM's one sort and cumulative
        sums of those counts — O(n²) per draw instead of a sort. Ties are the values within
        ``TIE_RTOL`` of their present predecessor, as :func:`average_ranks` groups them."""
        if self._sorted is None:
            X, Y, rdm, compare = self._inputs
            with torch.no_grad():
                vecs = [rdm_vector(Z.detach(), rdm, name=nm).cpu().numpy()
                        for Z, nm in ((X, "X"), (Y, "Y"))]
            rows, cols = np.triu_indices(self.n, 1)
            self._sorted = (rows.astype(np.int32), cols.astype(np.int32),
                            [(v, np.argsort(v, kind="stable")) for v in vecs], compare)
        rows, cols, sorted_vecs, compare = self._sorted
        counts = np.bincount(np.asarray(idx, dtype=np.int64), minlength=self.n)
        w = (counts[rows] * counts[cols]).astype(np.float64)
        if not w.sum() >= 2:
            raise RDXInputError("RSA needs at least 2 image pairs of distinct images.")
        xs = [self._sample_values(v, order, w, compare) for v, order in sorted_vecs]
        total = w.sum()
        centred = [x - (w * x).sum() / total for x in xs]
        norms = [float(np.sqrt((w * c * c).sum())) for c in centred]
        for nm, norm in zip(("X", "Y"), norms):
            if not norm > 0:
                raise RDXInputError(
                    f"RSA: all dissimilarities of the RDM of {nm} are equal in this draw, so "
                    "their correlation with another RDM is undefined.")
        r = float((w * centred[0] * centred[1]).sum()) / (norms[0] * norms[1])
        return float(min(1.0, max(-1.0, r)))

    @staticmethod
    def _sample_values(v: np.ndarray, order: np.ndarray, w: np.ndarray,
                       compare: str) -> np.ndarray:
        """Per original pair: its value (pearson) or its average rank among the draw's
        dissimilarities (spearman; 0 for pairs absent from the draw)."""
        if compare != "spearman":
            return v
        ws = w[order]
        present = np.flatnonzero(ws > 0)
        sv, wp = v[order[present]], ws[present]
        tol = TIE_RTOL * float(np.abs(sv).max()) if sv.size else 0.0
        starts = np.ones(len(sv), dtype=bool)
        starts[1:] = (sv[1:] - sv[:-1]) > tol
        first = np.flatnonzero(starts)
        group_w = np.add.reduceat(wp, first)
        before = np.concatenate([[0.0], np.cumsum(group_w)[:-1]])
        gid = np.cumsum(starts) - 1
        ranks = np.zeros(len(v))
        ranks[order[present]] = (before + (group_w + 1.0) / 2.0)[gid]
        return ranks


def prepare_rsa(X: Any, Y: Any, *, rdm: str = "correlation",
                 compare: str = "spearman") -> _RSAPrepared:
    return _RSAPrepared(X, Y, rdm, compare)
