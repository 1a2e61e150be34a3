"""The dense method on the CPU runs on numpy and loads neither torch nor scikit-learn; on a
GPU the same code runs on torch tensors. Both give the same fit; the numpy k-means is
scikit-learn's, label for label."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.cluster import KMeans

from conftest import planted_pairs
from rdx import RDX
from rdx.method import arrays as A
from rdx.method import estimator as estimator_mod
from rdx.method.geometry import centered, squared_distances, squared_distances_between
from rdx.method.kmeans import kmeans

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "sklearn", "PIL", "pandas")


def _python(code: str, **env: str) -> str:
    full = {**os.environ, **env}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env=full, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_rdx_explain_on_the_cpu_loads_neither_torch_nor_scikit_learn(tmp_path):
    a, b, _ = planted_pairs(n_per=30, seed=1)
    np.save(tmp_path / "A.npy", a)
    np.save(tmp_path / "B.npy", b)
    out = tmp_path / "out"
    code = ("import sys, json; from rdx.cli import main; "
            f"rc = main(['explain', {str(tmp_path / 'A.npy')!r}, {str(tmp_path / 'B.npy')!r}, "
            f"'--k', '3', '--out', {str(out)!r}, '--quiet', '--device', 'cpu']); "
            f"print(json.dumps([rc, sorted(m for m in {HEAVY!r} if m in sys.modules)]))")
    rc, loaded = json.loads(_python(code))
    assert rc == 0 and loaded == []
    doc = json.loads((out / "explanations.json").read_text())
    assert len(doc["directions"]["a_over_b"]["explanations"]) == 3
    # the versions are still recorded (from the packages' metadata)
    assert doc["versions"]["torch"] == torch.__version__ and doc["versions"]["scikit-learn"]


def test_auto_device_picks_the_cpu_without_torch_when_no_gpu_can_exist():
    code = ("import sys; from rdx.backend import resolve_device_name; "
            "print(resolve_device_name('auto'), 'torch' in sys.modules)")
    assert _python(code, CUDA_VISIBLE_DEVICES="") == "cpu False"


def test_torch_imported_inside_seeded_is_seeded():
    code = ("from rdx.backend import seeded\n"
            "with seeded(7):\n"
            "    import torch\n"
            "    a = torch.rand(3).tolist()\n"
            "torch.manual_seed(7)\n"
            "print(a == torch.rand(3).tolist())")
    assert _python(code) == "True"


# --------------------------------------------------------------------------- same fit on tensors

CASES = {
    "default": {},
    "v2": {"variant": "v2"},
    "guided": {"guidance": "ground_truth"},
    "zp_local_scaling": {"similarity": "zp_local_scaling"},
    "max_normalized": {"similarity": "max_normalized_distance", "difference": "standard"},
    "pagerank": {"clustering": "pagerank", "grid_size": 5},
    "dense_solver_centroid": {"eigen_solver": "dense", "grid_strategy": "centroid"},
    "max_affinity": {"grid_strategy": "max_affinity", "symmetrize_difference": True},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fit_on_torch_tensors_equals_the_numpy_fit(case, monkeypatch):
    """What runs on a GPU (every operation on torch tensors) gives the CPU's numpy fit:
    the same clusters and grids (the same anchor and images; two images at equal distance
    from the anchor up to float32 rounding may swap places), mean affinities and graphs to
    float32 rounding."""
    a, b, labels = planted_pairs(n_per=25, seed=4)
    kw = dict(n_explanations=3, random_state=0, device="cpu", keep_graphs=True, **CASES[case])
    ref = RDX(**kw).fit(a, b, labels)
    monkeypatch.setattr(estimator_mod, "centered_on",
                        lambda X, device: torch.from_numpy(centered(X)))
    got = RDX(**kw).fit(a, b, labels)
    for d in ("a_over_b", "b_over_a"):
        r, g = ref.directions_[d], got.directions_[d]
        np.testing.assert_array_equal(r.labels, g.labels)
        assert [(x[0], sorted(x)) for x in r.grids] == [(x[0], sorted(x)) for x in g.grids]
        np.testing.assert_allclose([e.mean_affinity for e in r.explanations],
                                   [e.mean_affinity for e in g.explanations], rtol=1e-5)
    for key, value in ref.graph_arrays().items():
        np.testing.assert_allclose(value, got.graph_arrays()[key], rtol=1e-5, atol=1e-6,
                                   err_msg=key)


def test_array_helpers_agree_on_numpy_and_torch():
    r = np.random.default_rng(0)
    x = r.standard_normal((7, 5)).astype(np.float32)
    y = r.standard_normal((7, 5)).astype(np.float32)
    t, u = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    for fn in (lambda v: A.exp_(A.copy(v)), lambda v: A.tanh_(A.copy(v)),
               lambda v: A.clamp_nonnegative_(A.copy(v)), A.row_sums64, A.squared_norms,
               lambda v: A.take(v, [4, 0, 4]), lambda v: A.take(v, [1, 3], axis=1),
               lambda v: A.fill_diagonal_(A.copy(v[:5]), 2.0),
               lambda v: A.where_(A.copy(v), v > 0, -1.0)):
        np.testing.assert_allclose(fn(x), A.host(fn(t)), rtol=1e-6)
    np.testing.assert_array_equal(A.minimum(x, y), A.host(A.minimum(t, u)))
    np.testing.assert_array_equal(A.maximum(x, y), A.host(A.maximum(t, u)))
    assert A.is_tensor(t) and not A.is_tensor(x)
    assert A.host(A.like(np.arange(3), t)).tolist() == [0, 1, 2]
    sq = A.clamp_nonnegative_(np.array([-0.0, -1.0, 2.0], dtype=np.float32))
    assert not np.signbit(sq).any()       # +0.0, never -0.0: sort keys read the sign bit


def test_squared_norms_equal_the_float64_copy_bit_for_bit():
    """A row block at a time through one small buffer: the same sums as over a float64 copy
    of the whole array (each row is reduced on its own)."""
    r = np.random.default_rng(2)
    for n, d in ((5000, 300), (3, 1), (2, 2**18 + 5), (0, 4)):   # many blocks, 1 row each
        X = (r.standard_normal((n, d)) * 50).astype(np.float32)
        X64 = X.astype(np.float64)
        np.testing.assert_array_equal(A.squared_norms(X),
                                      np.einsum("ij,ij->i", X64, X64).astype(np.float32))


def test_distances_between_subsets_match_the_full_matrix():
    r = np.random.default_rng(1)
    X = r.integers(0, 3, (60, 4)).astype(np.float32)     # many exact duplicates
    D = squared_distances(X.copy())
    for t in range(60):
        rows = r.choice(60, int(r.integers(1, 30)), replace=bool(t % 2))
        cols = r.choice(60, int(r.integers(1, 40)), replace=bool(t % 3 == 0))
        got = squared_distances_between(X, rows, cols)
        np.testing.assert_array_equal(got, D[np.ix_(rows, cols)])   # integer data: exact
        np.testing.assert_array_equal(got, squared_distances_between(torch.from_numpy(X),
                                                                     rows, cols))


# --------------------------------------------------------------------------- k-means

@pytest.mark.parametrize("seed", range(40))
def test_kmeans_gives_scikit_learns_labels(seed):
    r = np.random.default_rng(seed)
    n, d, k = int(r.integers(20, 300)), int(r.integers(2, 8)), int(r.integers(2, 8))
    X = r.standard_normal((n, d))
    if seed % 3 == 0:
        X[: n // 2] += 3.0
    if seed % 4 == 0:
        X = np.round(X, 1)            # ties and duplicates
    ours = kmeans(X, k, n_init=10, random_state=np.random.RandomState(seed))
    ref = KMeans(k, n_init=10, random_state=np.random.RandomState(seed)).fit_predict(X)
    np.testing.assert_array_equal(ours, ref)


def test_kmeans_relocates_empty_clusters_like_scikit_learn():
    # four distinct points, heavily repeated, and five clusters: a cluster empties
    X = np.repeat(np.array([[0.0, 0.0], [0.0, 1.0], [5.0, 5.0], [5.0, 6.1]]), [20, 3, 9, 2],
                  axis=0)
    ours = kmeans(X, 5, n_init=4, random_state=np.random.RandomState(3))
    with pytest.warns(Warning):   # scikit-learn warns: fewer distinct points than clusters
        ref = KMeans(5, n_init=4, random_state=np.random.RandomState(3)).fit_predict(X)
    np.testing.assert_array_equal(ours, ref)


# --------------------------------------------------------------------------- parameters

def test_estimator_parameters_follow_scikit_learns_protocol():
    est = RDX(4, beta=3.0, grid_size=6)
    params = est.get_params()
    assert params["n_explanations"] == 4 and params["beta"] == 3.0
    twin = clone(est)
    assert twin is not est and twin.get_params() == params
    assert est.set_params(beta=2.0) is est and est.beta == 2.0
    with pytest.raises(ValueError, match="Invalid parameter 'betta'"):
        est.set_params(betta=1.0)
    assert repr(RDX()) == "RDX()"
    assert repr(est) == "RDX(beta=2.0, grid_size=6, n_explanations=4)"


def test_the_thread_pool_works_in_a_forked_child():
    """A child forked after the pool was used gets its own pool (the parent's threads do
    not exist there: submitting to the inherited pool would hang)."""
    from rdx.method.blockwise import in_thread_pool

    assert in_thread_pool(lambda s: s * 2, range(4)) == [0, 2, 4, 6]
    pid = os.fork()
    if pid == 0:   # child: exit status says whether the pool answered
        os._exit(0 if in_thread_pool(lambda s: s + 1, range(3)) == [1, 2, 3] else 1)
    import signal
    import time

    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on the inherited thread pool")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0
