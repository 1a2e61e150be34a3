"""The Gram matrix in row blocks: the path that avoids OpenBLAS's threaded-SSYRK crash.

One ``ssyrk`` call over more than ``SYRK_MAX_ROWS`` rows can crash OpenBLAS (SIGSEGV at
30000 × 768 with two threads; see ``rdx.method.gram.SYRK_MAX_ROWS``). Above that size the
triangle is computed in row blocks. The block logic does not depend on the size, so it is
exercised here on small data with lowered thresholds, at block boundaries (n = b − 1, b,
b + 1, …), against a float64 reference. The real failing shape runs in a child process in the
slow test at the end.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import psutil
import pytest
import torch

from rdx.method.geometry import squared_distances, to_device_centered
from rdx.method.gram import SYRK_BLOCK_ROWS, SYRK_MAX_ROWS, gram_cpu_


def _reference(X):
    X64 = X.astype(np.float64)
    return X64 @ X64.T


@pytest.mark.parametrize("block", [1, 7, 16])
@pytest.mark.parametrize("offset", [-1, 0, 1, 5])
@pytest.mark.parametrize("d", [1, 3, 40])
def test_blocked_gram_matches_float64_around_block_boundaries(rng, block, offset, d):
    for mult in (1, 2, 3):
        n = mult * block + offset
        if n < 1:
            continue
        X = rng.standard_normal((n, d)).astype(np.float32)
        G = np.full((n, n), np.nan, dtype=np.float32)       # unfilled entries would stay NaN
        gram_cpu_(X, G, syrk_max_rows=0, syrk_block_rows=block, tile=5)
        np.testing.assert_array_equal(G, G.T)
        np.testing.assert_allclose(G, _reference(X), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n", [47, 48, 49])
def test_blocked_and_single_call_paths_agree(rng, n):
    # 48 rows: one ssyrk call with syrk_max_rows = 48, blocks of 16 above it
    X = rng.standard_normal((n, 24)).astype(np.float32)
    single = np.empty((n, n), dtype=np.float32)
    blocked = np.full((n, n), np.nan, dtype=np.float32)
    gram_cpu_(X, single, syrk_max_rows=10**9)
    gram_cpu_(X, blocked, syrk_max_rows=48, syrk_block_rows=16, tile=8)
    np.testing.assert_allclose(blocked, single, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(blocked, _reference(X), rtol=1e-5, atol=1e-4)


def test_block_rows_never_exceed_the_single_call_limit(rng, monkeypatch):
    # whatever syrk_block_rows asks for, no ssyrk call gets more than syrk_max_rows rows
    import scipy.linalg.blas
    seen = []
    real = scipy.linalg.blas.ssyrk

    def spy(alpha, a, *args, **kw):
        seen.append(a.shape[1])          # a = X[rows].T: rows are its columns
        return real(alpha, a, *args, **kw)

    monkeypatch.setattr(scipy.linalg.blas, "ssyrk", spy)
    X = rng.standard_normal((50, 6)).astype(np.float32)
    G = np.empty((50, 50), dtype=np.float32)
    gram_cpu_(X, G, syrk_max_rows=12, syrk_block_rows=1000)
    assert seen and max(seen) <= 12 and sum(seen) == 50
    np.testing.assert_allclose(G, _reference(X), rtol=1e-5, atol=1e-4)
    assert SYRK_BLOCK_ROWS <= SYRK_MAX_ROWS


def test_squared_distances_with_duplicates_through_blocks(rng, monkeypatch):
    # the whole distance path on the blocked Gram: zero diagonal, exact duplicate ties
    import rdx.method.gram as gram
    monkeypatch.setattr(gram, "SYRK_MAX_ROWS", 20)
    monkeypatch.setattr(gram, "SYRK_BLOCK_ROWS", 8)
    X = rng.standard_normal((61, 9))
    X[40] = X[3]
    Xt = to_device_centered(X, torch.device("cpu"))
    D2 = squared_distances(Xt).numpy()
    Xc = Xt.numpy().astype(np.float64)
    ref = ((Xc[:, None, :] - Xc[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(D2, ref, rtol=1e-4, atol=1e-5)
    assert (np.diag(D2) == 0).all() and D2[3, 40] == 0.0
    np.testing.assert_array_equal(D2[3], D2[40])


_CHILD = textwrap.dedent("""
    import numpy as np, torch
    from rdx.method.geometry import squared_distances
    n, d = {n}, {d}
    X = torch.from_numpy(np.random.default_rng(0).standard_normal((n, d), dtype=np.float32))
    D2 = squared_distances(X).numpy()
    rows = np.array([0, 1, n // 2, n - 2, n - 1])
    Xr = X.numpy()[rows].astype(np.float64)
    ref = ((Xr[:, None, :] - X.numpy()[None, :, :].astype(np.float64)) ** 2).sum(-1)
    err = float(np.abs(D2[rows] - ref).max() / ref.max())
    assert err < 1e-5, err
    assert (np.diagonal(D2) == 0).all()
    print("ok", err)
""")


def _has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as fh:
            return "avx512f" in fh.read()
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _has_avx512(), reason="the crashing OpenBLAS kernels need AVX-512")
@pytest.mark.skipif(psutil.virtual_memory().available < 8 * 2**30,
                    reason="needs ~4 GB free memory")
def test_shape_that_crashed_openblas_ssyrk_runs():
    # 30000 × 768 with OpenBLAS's SkylakeX kernels and two threads: one ssyrk call over all
    # rows dies with SIGSEGV (a child process, so a regression cannot kill the test run)
    env = dict(os.environ, OPENBLAS_CORETYPE="SkylakeX", OPENBLAS_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(n=30000, d=768)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.startswith("ok")
