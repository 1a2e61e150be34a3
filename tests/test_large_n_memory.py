"""Memory of the large-n mode: feature files mapped, not read; centring, norms and input
checks in row blocks with the same values as the one-shot forms; the up-front estimate of
the driver and of each Dask worker, printed before the work starts."""
import sys

import numpy as np
import pytest
import torch

from rdx import validation as V
from rdx.backend import release_mapped_pages
from rdx.errors import RDXInputError
from rdx.io import atomic_write, load_array
from rdx.method import geometry, knn_search
from rdx.method.estimator import RDX
from rdx.method.knn_memory import knn_memory_plan


@pytest.mark.parametrize("shape", [(1000, 7), (513, 2), (300, 64)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_streamed_centring_is_bit_identical(monkeypatch, shape, dtype):
    """Above CENTRE_BLOCK elements the rows are centred in blocks (no float64 copy of X);
    the result equals the one-shot form to the last bit (column sums added in numpy's
    order), for blocks that do not divide n."""
    r = np.random.default_rng(0)
    X = (r.standard_normal(shape) * 3 + 1e3).astype(dtype)
    whole = geometry.centered(X)
    monkeypatch.setattr(geometry, "CENTRE_BLOCK", 5 * shape[1] + 3)
    blocks = geometry.centered(X)
    assert blocks.dtype == np.float32
    np.testing.assert_array_equal(blocks, whole)


def test_feature_norms_in_blocks(monkeypatch):
    X = torch.from_numpy(np.random.default_rng(1).standard_normal((700, 9)).astype(np.float32))
    want = (X.double() ** 2).sum(1).float()
    monkeypatch.setattr(knn_search, "_NORM_ROWS", 64)
    np.testing.assert_array_equal(knn_search.Features(X).sq.numpy(), want.numpy())


def test_npy_files_are_mapped_not_copied(tmp_path):
    """load_array(mmap=True) maps an .npy file; the validated representation is that
    mapping (float32, C order: no copy), writable (copy-on-write) without touching the
    file."""
    A = np.random.default_rng(2).standard_normal((400, 16)).astype(np.float32)
    np.save(tmp_path / "A.npy", A)
    mapped = load_array(tmp_path / "A.npy", "A", mmap=True)
    assert isinstance(mapped, np.memmap)
    rep = V.as_representation(mapped, "A")
    assert np.shares_memory(rep, mapped)
    rep[0, 0] = 99.0                                  # private page, file unchanged
    assert np.load(tmp_path / "A.npy")[0, 0] == A[0, 0]
    assert not isinstance(load_array(tmp_path / "A.npy", "A"), np.memmap)


def _mapping_rss_kib(path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:     # a mapping's header line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps, madvise")
def test_centring_gives_back_the_mapped_pages(tmp_path, monkeypatch):
    """A mapped file's pages, read by centring, are not left resident next to the centred
    copy; the array's values (a written copy-on-write page included) do not change.

    The file is written as rdx writes feature files (``atomic_write``: flushed to disk
    before it is renamed into place). A file still dirty in the page cache (a bare
    ``np.save`` a moment ago) keeps its large folios resident under MADV_PAGEOUT: 128 of
    these 256 pages stayed in half of 30 tries, none once the file was on disk."""
    A = np.random.default_rng(5).standard_normal((4096, 64)).astype(np.float32)
    atomic_write(tmp_path / "A.npy", lambda fh: np.save(fh, A, allow_pickle=False))
    calls = []
    monkeypatch.setattr(geometry, "release_mapped_pages",
                        lambda X: calls.append(X) or release_mapped_pages(X))
    monkeypatch.setattr(geometry, "CENTRE_BLOCK", 64 * 500)   # the streamed path
    mapped = load_array(tmp_path / "A.npy", "A", mmap=True)
    mapped[7, 3] = 42.0                                       # a private page
    A[7, 3] = 42.0
    assert float(mapped.sum(dtype=np.float64)) == pytest.approx(A.sum(dtype=np.float64))
    before = _mapping_rss_kib(tmp_path / "A.npy")
    assert before >= 0.9 * A.nbytes / 1024                    # every page read once
    Xc = geometry.centered(V.as_representation(mapped, "A"))
    after = _mapping_rss_kib(tmp_path / "A.npy")
    assert len(calls) == 1 and np.shares_memory(calls[0], mapped)
    assert after <= 0.02 * before                             # the written page, or a few
    np.testing.assert_array_equal(np.asarray(mapped), A)
    np.testing.assert_array_equal(Xc, geometry.centered(A))
    assert not release_mapped_pages(A)                        # an array in memory: nothing to do


def test_block_checks_report_every_bad_value(monkeypatch):
    monkeypatch.setattr(V, "_SCAN_BLOCK", 40)        # 4 rows of 10 per block
    X = np.ones((50, 10), dtype=np.float32)
    X[:, 0] = np.arange(50)
    X[3, 2] = np.nan
    X[47, 1:4] = np.inf
    with pytest.raises(RDXInputError, match=r"4 NaN/inf values in 2 rows \(first rows: "
                                            r"\[3, 47\]\)"):
        V.as_representation(X, "A")
    V.check_not_constant(X, "A")                     # rows differ (in a later block too)
    with pytest.raises(RDXInputError, match="constant"):
        V.check_not_constant(np.ones((50, 10)), "A")


def test_memory_plan_and_its_line(capsys):
    """The plan's parts add up to the refusal's estimate; an executor moves the distance
    blocks to the workers; a verbose fit prints the line before the pass."""
    local = knn_memory_plan(100_000, 1536, 200, 1000)
    dask = knn_memory_plan(100_000, 1536, 200, 1000, executor=True)
    approx = knn_memory_plan(100_000, 1536, 200, 1000, search="approx")
    assert "distance blocks" in local.driver and not local.worker
    assert "distance blocks" not in dask.driver and dask.worker["distance blocks"] > 0
    assert dask.worker["mapped features"] == 4 * 100_000 * 1536
    assert "search" in approx.driver and "distance blocks" not in approx.driver
    assert 5 * 2**30 < local.driver_total < 8 * 2**30      # measured 5.84 GiB (guide)
    assert "each Dask worker ≈" in dask.describe()
    A = np.random.default_rng(3).standard_normal((120, 5)).astype(np.float32)
    B = np.random.default_rng(4).standard_normal((120, 6)).astype(np.float32)
    RDX(2, graph="knn", n_neighbors=10, n_landmarks=20, verbose=1, n_init=1).fit(A, B)
    err = capsys.readouterr().err
    assert "memory estimate: this process ≈" in err and "graph" in err
