"""CPU/GPU parity of RDX: the same fit on ``device="cpu"`` and ``device="cuda"``.

The CUDA half compares every step the estimator exposes — both models' neighbour-rank
matrices and the difference (``keep_graphs=True``), each image's nearest neighbours
(``nearest_``), the explanations (members, grids, no-change group) and the BSR scores of the
grids — and, for ``graph="knn"``, the graph's fingerprint (lists, pairs, both ranks and the
far-pair sketch) and the explanations. It is skipped where torch sees no GPU. The CPU half
always runs: it pins the CPU reference itself (two fits identical) and checks that the
device a fit used is recorded in its result, which is what the CUDA half compares against.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from rdx import RDX
from rdx.evaluation.bsr import bsr_scores

N_PER, N_CLUSTERS, D_A, D_B = 50, 8, 32, 48
DIRECTIONS = ("a_over_b", "b_over_a")
no_gpu = pytest.mark.skipif(not torch.cuda.is_available(),
                            reason="no CUDA GPU visible to torch: the CPU/GPU parity needs one")


def clustered(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """400 images in 8 Gaussian clusters; A (d = 32) tells all 8 apart, B (d = 48) merges
    clusters (0, 1), (2, 3) and (4, 5) — a planted difference in each direction's sense."""
    r = np.random.default_rng(seed)
    lab = np.repeat(np.arange(N_CLUSTERS), N_PER)
    ca = r.standard_normal((N_CLUSTERS, D_A)) * 6.0
    cb = r.standard_normal((N_CLUSTERS, D_B)) * 6.0
    cb[1:6:2] = cb[0:6:2]
    A = ca[lab] + r.standard_normal((len(lab), D_A))
    B = cb[lab] + r.standard_normal((len(lab), D_B))
    return A.astype(np.float32), B.astype(np.float32)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return clustered()


@pytest.fixture
def no_tf32() -> Iterator[None]:
    """TF32 off for the block (it rounds matmul inputs to 10 mantissa bits on Ampere and
    later, so GPU distances would not be the float32 ones the CPU computes); the caller's
    settings come back afterwards."""
    was = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = was


def fit(A: np.ndarray, B: np.ndarray, device: str, **kw: Any) -> RDX:
    return RDX(n_explanations=3, random_state=0, device=device, **kw).fit(A, B)


def explanations(model: RDX) -> dict[str, list[dict[str, Any]]]:
    """What a user is shown per direction: each explanation's members, grid and flag, and
    the no-change group (the mean affinities are compared separately, to float tolerance)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for d in DIRECTIONS:
        r = model.directions_[d]
        out[d] = [{"members": sorted(int(i) for i in e.members),
                   "images": [int(i) for i in e.images],
                   "low_affinity": bool(e.low_affinity)} for e in r.explanations]
        out[d].append({"null": sorted(int(i) for i in (r.null_members or []))})
    return out


def affinities(model: RDX) -> np.ndarray:
    return np.array([e.mean_affinity for d in DIRECTIONS
                     for e in model.directions_[d].explanations], dtype=np.float64)


def scores(model: RDX, A: np.ndarray, B: np.ndarray) -> dict[str, Any]:
    return bsr_scores(A, B, model.result().grids)


def assert_same_fit(ref: RDX, other: RDX, A: np.ndarray, B: np.ndarray) -> None:
    """``other`` is ``ref``'s fit: identical ranks and neighbours, the same explanations and
    BSR; only floating-point sums (difference, affinities) may differ in their last bits."""
    if ref.graphs_ is not None:
        assert other.graphs_ is not None and set(other.graphs_) == set(ref.graphs_)
        for key in ("rank_a", "rank_b"):
            np.testing.assert_array_equal(other.graphs_[key], ref.graphs_[key], err_msg=key)
        np.testing.assert_allclose(other.graphs_["diff_a_over_b"], ref.graphs_["diff_a_over_b"],
                                   rtol=1e-6, atol=1e-6)
    assert set(other.nearest_) == set(ref.nearest_)
    for m in ref.nearest_:
        np.testing.assert_array_equal(other.nearest_[m], ref.nearest_[m], err_msg=m)
    if ref.graph_ == "knn":
        assert other.graph_info_["graph_digest"] == ref.graph_info_["graph_digest"]
    assert explanations(other) == explanations(ref)
    for d in DIRECTIONS:
        np.testing.assert_array_equal(other.directions_[d].labels, ref.directions_[d].labels)
    np.testing.assert_allclose(affinities(other), affinities(ref), rtol=1e-5)
    s_ref, s_other = scores(ref, A, B), scores(other, A, B)
    for d in DIRECTIONS:
        for key in ("bsr", "tsd", "eq"):
            np.testing.assert_allclose(s_other[d][key], s_ref[d][key], rtol=1e-6, err_msg=key)
        assert s_other[d]["n_pairs"] == s_ref[d]["n_pairs"]


# ------------------------------------------------------------------ CPU: always runs
@pytest.mark.parametrize("graph", ["dense", "knn"])
def test_cpu_fit_is_its_own_reference_and_records_its_device(data, graph):
    A, B = data
    kw: dict[str, Any] = {"graph": graph}
    if graph == "dense":
        kw["keep_graphs"] = True
    first, second = fit(A, B, "cpu", **kw), fit(A, B, "cpu", **kw)
    assert first.graph_ == graph
    assert_same_fit(first, second, A, B)
    res = first.result()
    assert first.device_ == "cpu"
    assert res.params["device"] == "cpu" and res.params["device_used"] == "cpu"
    assert res.params["graph_resolved"] == graph
    if graph == "dense":
        # the kept ranks are ranks: each row a permutation of 0..n-1 (self first)
        n = len(A)
        for key in ("rank_a", "rank_b"):
            R = first.graphs_[key]
            np.testing.assert_array_equal(np.sort(R, axis=1),
                                          np.broadcast_to(np.arange(n), (n, n)))
            np.testing.assert_array_equal(np.diag(R), np.zeros(n))
    else:
        assert set(first.graph_info_["graph_digest"]) == {"both"}
    # the planted difference is found: some b_over_a explanation (tight in B, which merges
    # pairs of A's clusters) spans two of A's clusters
    lab = np.repeat(np.arange(N_CLUSTERS), N_PER)
    spans = [len(set(lab[e.members].tolist())) for e in first.directions_["b_over_a"].explanations
             if not e.low_affinity]
    assert max(spans, default=0) >= 2


def test_auto_records_the_device_it_chose(data):
    A, B = data
    m = fit(A, B, "auto")
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert m.result().params["device"] == "auto"
    assert m.result().params["device_used"].startswith(expected.split(":")[0])


# ------------------------------------------------------------------ CUDA: needs a GPU
@no_gpu
def test_dense_fit_is_the_same_on_gpu_and_cpu(data, no_tf32):
    A, B = data
    cpu = fit(A, B, "cpu", graph="dense", keep_graphs=True)
    gpu = fit(A, B, "cuda", graph="dense", keep_graphs=True)
    assert gpu.device_.startswith("cuda") and gpu.result().params["device_used"] == gpu.device_
    assert_same_fit(cpu, gpu, A, B)


@no_gpu
def test_knn_fit_is_the_same_on_gpu_and_cpu(data, no_tf32):
    A, B = data
    cpu = fit(A, B, "cpu", graph="knn", knn_search="exact")
    gpu = fit(A, B, "cuda", graph="knn", knn_search="exact")
    assert gpu.device_.startswith("cuda") and gpu.graph_ == "knn"
    assert_same_fit(cpu, gpu, A, B)

