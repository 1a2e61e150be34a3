"""Lanczos products on one triangle of the symmetric affinity (BLAS symv)."""
import tracemalloc

import numpy as np
import pytest
import torch

from rdx.method.spectral import _operator, symmetric_product, top_eigenvectors


def _sym(rng, n, dtype):
    M = rng.random((n, n))
    return ((M + M.T) / 2).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_symmetric_product_equals_the_full_product(rng, dtype):
    M = _sym(rng, 301, dtype)
    v = rng.standard_normal(301)
    ref = M.astype(np.float64) @ v.astype(dtype).astype(np.float64)
    got = symmetric_product(M)(v)
    assert got.dtype == dtype
    bound = (np.abs(M).astype(np.float64) @ np.abs(v)).max()   # size of the summed terms
    eps = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got, ref, rtol=0, atol=eps * bound)


def test_symmetric_product_reads_the_matrix_in_place(rng):
    # a copy of M (what f2py makes of a non-Fortran array) would show up as n² allocations
    M = _sym(rng, 1500, np.float32)
    product = symmetric_product(M)
    v = rng.standard_normal(1500)
    tracemalloc.start()
    product(v)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < M.nbytes / 10


def test_non_contiguous_or_integer_matrices_fall_back(rng):
    big = _sym(rng, 40, np.float32)
    view = big[::2, ::2]                       # symmetric, not contiguous
    v = rng.standard_normal(20)
    np.testing.assert_allclose(symmetric_product(view)(v), view @ v.astype(np.float32),
                               rtol=1e-6)
    ints = np.arange(9).reshape(3, 3)
    ints = ints + ints.T
    np.testing.assert_array_equal(symmetric_product(ints)(np.ones(3)), ints.sum(1))


def test_operator_scales_both_sides(rng):
    S = torch.from_numpy(_sym(rng, 50, np.float32))
    scale = torch.from_numpy(rng.random(50) + 0.5)
    op = _operator(S, scale)
    M = np.diag(scale.numpy()) @ S.numpy().astype(np.float64) @ np.diag(scale.numpy())
    V = rng.standard_normal((50, 3))
    np.testing.assert_allclose(op.matmat(V), M @ V, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(op.matvec(V[:, 0]), M @ V[:, 0], rtol=1e-5, atol=1e-6)


def test_lanczos_and_dense_solvers_agree(rng):
    # a block-structured affinity: top eigenvectors from symv-Lanczos equal LAPACK's
    blocks = np.repeat(np.arange(4), 150)
    S = np.where(blocks[:, None] == blocks[None, :], 5.0, 0.2) + rng.random((600, 600)) * 0.1
    S = torch.from_numpy(((S + S.T) / 2).astype(np.float32))
    v0 = rng.uniform(-1, 1, 600)
    a = top_eigenvectors(S, 4, "arpack", v0)
    d = top_eigenvectors(S, 4, "dense", v0)
    # the top eigenvalue is simple: its vector agrees up to sign; the others span one space
    assert abs(abs(a[:, 0] @ d[:, 0]) - 1) < 1e-6
    np.testing.assert_allclose(np.linalg.svd(a.T @ d, compute_uv=False), 1.0, atol=1e-4)
