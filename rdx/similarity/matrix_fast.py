"""The per-model fast paths of model × model similarity matrices
(:func:`rdx.similarity.matrix.similarity_matrix`): each model's work is done once and shared
by every pair it is part of.

Linear CKA (:func:`linear_cka_matrix`): each model's centred features, row norms and
self-HSIC once; a pair costs one ``F_aᵀF_b`` product. RSA (:func:`rsa_matrix`): each
model's RDM built and ranked once; the matrix is a Gram matrix of the standardised rank
vectors. RBF CKA and the k-NN measures (:func:`per_model_matrix`, :data:`PER_MODEL`): each
model's centred kernel or k-NN table once, as many resident as fit in half the free memory,
the others streamed past each resident block.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..backend import available_memory_bytes
from ..errors import RDXInputError
from .cka_rbf import cka_of_states, rbf_kernel_state
from .neighbors import NeighborPrepared, neighbor_table


def linear_cka_matrix(arrays: list[np.ndarray], debiased: bool, device: torch.device
                      ) -> tuple[np.ndarray, dict[int, str]]:
    """All-pairs linear CKA with per-model precomputation (float64).

    Debiased: ``HSIC_u(K, L)·n(n−3) = tr(K̃L̃) + (1ᵀK̃1)(1ᵀL̃1)/((n−1)(n−2))
    − 2/(n−2)·(K̃1)ᵀ(L̃1)`` with ``tr(K̃L̃) = ‖XᵀY‖²_F − Σᵢ|xᵢ|²|yᵢ|²``, ``1ᵀK̃1 =
    |Xᵀ1|² − Σ|xᵢ|²``, ``K̃1 = X(Xᵀ1) − (|xᵢ|²)ᵢ`` (the feature-space form of
    :mod:`rdx.similarity.cka`). Only ``‖XᵀY‖²_F`` depends on the pair.
    Biased: ``‖XcᵀYc‖²_F / (‖XcᵀXc‖_F ‖YcᵀYc‖_F)``.
    """
    M, n = len(arrays), arrays[0].shape[0]
    if n < (4 if debiased else 2):
        raise RDXInputError(f"{'debiased' if debiased else 'biased'} linear CKA needs at least "
                            f"{4 if debiased else 2} images, got n={n}.")
    prep = []
    for A in arrays:
        X = torch.from_numpy(np.ascontiguousarray(A, dtype=np.float64)).to(device)
        X = X - X.mean(dim=0, keepdim=True)   # translation invariant; centring helps accuracy
        nx, sx = (X * X).sum(dim=1), X.sum(dim=0)
        prep.append((X, nx, sx, X @ sx - nx, (sx * sx).sum() - nx.sum()))

    def cross(i: int, j: int) -> float:
        X, nx, _, kone, one_k = prep[i]
        Y, ny, _, lone, one_l = prep[j]
        frob = float(((X.T @ Y) ** 2).sum())
        if not debiased:
            return frob
        tr = frob - float((nx * ny).sum())
        return tr + float(one_k * one_l) / ((n - 1) * (n - 2)) \
            - 2.0 / (n - 2) * float((kone * lone).sum())

    self_h = [cross(i, i) for i in range(M)]
    errors: dict[int, str] = {}
    for i, h in enumerate(self_h):
        if not h > 0:
            errors[i] = ("the representation is constant or its debiased self-HSIC is not "
                         f"positive ({h:.3g}); CKA is undefined (use more images)")
    S = np.full((M, M), np.nan)
    for i in range(M):
        if i in errors:
            continue
        S[i, i] = 1.0   # h/sqrt(h·h), written exactly
        for j in range(i + 1, M):
            if j not in errors:
                S[i, j] = S[j, i] = cross(i, j) / math.sqrt(self_h[i] * self_h[j])
    return S, errors


def rsa_matrix(arrays: list[np.ndarray], ids: list[str], rdm: str, compare: str,
               device: torch.device) -> tuple[np.ndarray, dict[int, str]] | None:
    """All-pairs RSA from one standardised (rank) RDM vector per model.

    ``rsa(X, Y)`` is the dot product of the two standardised upper-triangle vectors
    (:func:`rdx.similarity.rsa`), so each model's RDM is built and ranked once and the
    M × M matrix is a Gram matrix of M vectors of length n(n−1)/2 — M RDM builds and sorts
    instead of M(M−1). The vectors are stored in float32 (half the memory; the dot products
    are accumulated in float64 block by block, |error| ≲ 1e-6). Returns None when the
    vectors would not fit in half the free memory, or for ``compare="kendall_tau_a"``,
    which is not a dot product (the caller then goes pair by pair).
    """
    from .rdm import DOT_COMPARES, standardized_rdm

    if compare not in DOT_COMPARES:
        return None

    M, n = len(arrays), arrays[0].shape[0]
    if n < 4:
        raise RDXInputError(f"RSA needs at least 4 images, got n={n}.")
    N = n * (n - 1) // 2
    if M * N * 4 > 0.5 * available_memory_bytes(device):
        return None
    V = torch.zeros((M, N), dtype=torch.float32, device=device)
    errors: dict[int, str] = {}
    with torch.no_grad():
        for i, A in enumerate(arrays):
            Z = torch.from_numpy(np.ascontiguousarray(A, dtype=np.float64)).to(device)
            try:
                V[i] = standardized_rdm(Z, rdm, compare, ids[i]).to(torch.float32)
            except RDXInputError as exc:
                errors[i] = str(exc)
            del Z
        G = torch.zeros((M, M), dtype=torch.float64, device=device)
        step = max(1, (64 << 20) // (8 * M))    # ~64 MB of float64 per block
        for s in range(0, N, step):
            B = V[:, s:s + step].double()
            G += B @ B.T
    S = G.clamp_(-1.0, 1.0).cpu().numpy()
    for i in errors:
        S[i, :] = S[:, i] = np.nan
    return S, errors


@dataclass(frozen=True)
class _PerModel:
    """How a measure's per-model work is shared by every pair of a matrix."""

    #: ``(Z, resolved params, model id) -> state``; raises RDXInputError for a bad model
    prepare: Callable[[Any, dict, str], Any]
    #: ``(state_a, state_b, resolved params) -> value``
    pair: Callable[[Any, Any, dict], float]
    #: ``(n, d, resolved params) -> bytes`` of one state
    nbytes: Callable[[int, int, dict], int]


def _knn_per_model(measure: str) -> _PerModel:
    return _PerModel(
        prepare=lambda Z, p, mid: neighbor_table(Z, p["k"], measure, name=mid),
        pair=lambda a, b, p: NeighborPrepared.from_tables(a, b, measure).value,
        nbytes=lambda n, d, p: n * (int(p["k"]) * 16 + 8))


#: Measures with per-model states (:func:`per_model_matrix`): how each state is built and
#: paired, and its size.
PER_MODEL: dict[str, _PerModel] = {
    "cka_rbf": _PerModel(
        prepare=lambda Z, p, mid: rbf_kernel_state(Z, sigma=p["sigma"],
                                                   sigma_mode=p["sigma_mode"],
                                                   debiased=p["debiased"], name=mid),
        pair=lambda a, b, p: cka_of_states(a, b),
        nbytes=lambda n, d, p: 8 * n * n),
    **{m: _knn_per_model(m) for m in ("mutual_knn", "jaccard_knn", "cknna")},
}


def per_model_matrix(arrays: list[Any], ids: list[str], measure: str, params: dict,
                     device: torch.device, progress: bool
                     ) -> tuple[np.ndarray, dict[int, str], dict[str, str], int]:
    """All pairs of a symmetric measure from per-model states (see the module docstring).

    As many states as fit in half the free memory stay resident (a block); every later
    model is built once per block and streamed past it. With all states resident each is
    built once (M builds instead of the M(M+1) of pair-by-pair calls).

    Returns the matrix, model errors (index → message), pair errors ("a|b" → message) and
    the number of states built. Raises the error when every model fails (a bad parameter,
    e.g. k ≥ n, rather than bad models).
    """
    spec = PER_MODEL[measure]
    M, n = len(arrays), arrays[0].shape[0]
    d = max(int(A.shape[1]) for A in arrays)
    per_state = max(1, spec.nbytes(n, d, params))
    resident = int(max(1, min(M, 0.5 * available_memory_bytes(device) // per_state - 1)))
    S = np.full((M, M), np.nan)
    bad: dict[int, str] = {}
    pair_errors: dict[str, str] = {}
    built = 0

    def build(i: int) -> Any:
        nonlocal built
        if i in bad:
            return None
        built += 1
        try:
            return spec.prepare(arrays[i], params, ids[i])
        except RDXInputError as exc:
            bad[i] = str(exc)
            return None

    def fill(i: int, j: int, si: Any, sj: Any) -> None:
        if si is None or sj is None:
            return
        try:
            S[i, j] = S[j, i] = float(spec.pair(si, sj, params))
        except RDXInputError as exc:
            pair_errors[f"{ids[i]}|{ids[j]}"] = str(exc)

    with tqdm(total=M * (M + 1) // 2, desc=f"{measure} pairs", disable=not progress) as bar:
        for s0 in range(0, M, resident):
            block = {i: build(i) for i in range(s0, min(M, s0 + resident))}
            for i, si in block.items():
                for j in range(i, s0 + len(block)):
                    fill(i, j, si, block[j])
                    bar.update(1)
            for j in range(s0 + len(block), M):
                sj = build(j)
                for i, si in block.items():
                    fill(i, j, si, sj)
                    bar.update(1)
                del sj
            del block
    if len(bad) == M:
        raise RDXInputError(bad[0])
    return S, bad, pair_errors, built
