"""The large-n pass on Dask (rdx.method.knn_dask): the same graph and labels as the
single-process pass on a 2-worker LocalCluster, a failed task retried without changing the
result, bad executors refused with exit status 2."""
import subprocess
import sys

import numpy as np
import pytest
import torch

from rdx.errors import RDXInputError
from rdx.method.estimator import RDX
from rdx.method.geometry import to_device_centered
from rdx.method.knn_graph import build_union_graph
from rdx.method.knn_sketch import choose_landmarks

distributed = pytest.importorskip("distributed")

from rdx.method import knn_dask  # noqa: E402  (after the skip: needs nothing of Dask)

CPU = torch.device("cpu")
N, K, M = 3000, 15, 60


@pytest.fixture(scope="module")
def client():
    # in-process workers (threads): start in ~1 s, and the test can replace a task function
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def data():
    r = np.random.default_rng(0)
    centres = r.standard_normal((6, 12)) * 4
    lab = r.integers(0, 6, N)
    A = (centres[lab] + r.standard_normal((N, 12))).astype(np.float32)
    # B splits two of A's clusters differently and merges two others
    lab_b = np.where(lab == 1, 0, lab) + 6 * (r.random(N) < 0.5) * (lab == 2)
    centres_b = r.standard_normal((12, 10)) * 4
    B = (centres_b[lab_b] + r.standard_normal((N, 10))).astype(np.float32)
    A[5] = A[6]                     # an exact duplicate: the duplicate-group path
    return A, B


@pytest.fixture(scope="module")
def local_graph(data):
    A, B = data
    return _graph(A, B, None)


def _graph(A, B, executor):
    XA, XB = to_device_centered(A, CPU), to_device_centered(B, CPU)
    return build_union_graph(XA, XB, K, landmarks=choose_landmarks(N, M, 0), gamma=80 / N,
                             executor=executor)


def _assert_same_graph(g, h):
    for name in ("indptr", "cols", "rank_a", "rank_b", "neighbors_a", "neighbors_b",
                 "landmarks", "far_out", "far_in"):
        np.testing.assert_array_equal(getattr(g, name), getattr(h, name), err_msg=name)


def test_graph_equals_single_process(client, data, local_graph):
    """Every array of the union graph (neighbour lists, union pairs and their ranks,
    landmark columns and rows) is the single-process pass's, bit for bit."""
    A, B = data
    g = _graph(A, B, client)
    _assert_same_graph(g, local_graph)
    # ... so their fingerprints agree, and each block's seconds came back from its worker
    assert g.digest() == local_graph.digest()
    assert len(g.block_seconds) == len(local_graph.block_seconds) >= 1
    assert (g.block_seconds > 0).all()


def test_fit_equals_single_process(client, data):
    """The fitted labels and grids of graph='knn' are the same with the Dask executor."""
    A, B = data
    kw = dict(graph="knn", n_neighbors=K, n_landmarks=M, n_init=2, device="cpu")
    one = RDX(3, **kw).fit(A, B)
    many = RDX(3, executor=client, **kw).fit(A, B)
    for d in one.directions_:
        np.testing.assert_array_equal(one.directions_[d].labels, many.directions_[d].labels)
        assert [e.images for e in one.directions_[d].explanations] == \
            [e.images for e in many.directions_[d].explanations]
    # the result records where the pass ran, as text (a client by its address)
    assert many.result().params["executor"] == client.scheduler.address
    # the same graph fingerprint; the blocks' seconds say where they ran
    g1, g2 = one.result().info["knn_graph"], many.result().info["knn_graph"]
    assert g1["graph_digest"] == g2["graph_digest"]
    assert {k: v["where"] for k, v in g2["search"]["blocks"].items()} == {"both": "dask workers"}
    assert g1["search"]["blocks"]["both"]["where"] == "this process"


def test_failed_task_is_retried(client, data, local_graph, monkeypatch, tmp_path):
    """Block tasks that fail once (as on a lost worker) are run again; the graph does not
    change."""
    A, B = data
    task = knn_dask.graph_block_task

    def flaky(path_a, path_b, start, *args):
        # the task is serialised to the workers: a file, not a Python set, marks its failure
        mark = tmp_path / f"failed-{start}"
        if start % 2 == 0 and not mark.exists():
            mark.touch()
            raise OSError("worker lost")
        return task(path_a, path_b, start, *args)

    monkeypatch.setattr(knn_dask, "graph_block_task", flaky)
    _assert_same_graph(_graph(A, B, client), local_graph)
    assert len(list(tmp_path.glob("failed-*"))) >= 2   # several blocks really failed once


@pytest.mark.parametrize("executor", ["local:0", "local:x", "no such scheduler", 3, ""])
def test_bad_executor_is_refused(executor):
    with pytest.raises(RDXInputError, match="executor"):
        knn_dask.check_executor(executor)


def test_executor_needs_the_knn_graph():
    with pytest.raises(RDXInputError, match="graph"):
        RDX(graph="dense", executor="local:2").fit(np.eye(20, 3), np.eye(20, 4) + 1)


def _explain(tmp_path, *flags):
    r = np.random.default_rng(1)
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", r.standard_normal((60, 4)).astype(np.float32))
    return subprocess.run([sys.executable, "-m", "rdx.cli", "explain", str(tmp_path / "a.npy"),
                           str(tmp_path / "b.npy"), "--out", str(tmp_path / "out"), "--quiet",
                           *flags], capture_output=True, text=True, timeout=120,
                          # Dask's connect deadline (30 s by default): nothing listens at :9
                          env={**__import__("os").environ, knn_dask.TIMEOUT_ENV: "3s"})


@pytest.mark.parametrize("flags, message", [
    (["--graph", "knn", "--executor", "dask"], "--scheduler"),
    (["--graph", "knn", "--scheduler", "local:2"], "--executor dask"),
    (["--executor", "dask", "--scheduler", "local:2"], "--graph knn"),
    (["--graph", "knn", "--executor", "dask", "--scheduler", "local:0"], "local:N"),
    (["--graph", "knn", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:9"],
     "could not reach"),
])
def test_explain_bad_executor_exits_2(tmp_path, flags, message):
    out = _explain(tmp_path, *flags)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr


def test_explain_without_dask_says_how_to_install(tmp_path, monkeypatch):
    """Dask missing: exit 2 and the extra to install."""
    # a module that fails to import stands in for the missing package
    (tmp_path / "distributed.py").write_text("raise ImportError('no distributed')\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    r = np.random.default_rng(1)
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", r.standard_normal((60, 4)).astype(np.float32))
    out = subprocess.run([sys.executable, "-m", "rdx.cli", "explain", str(tmp_path / "a.npy"),
                          str(tmp_path / "b.npy"), "--out", str(tmp_path / "out"), "--quiet",
                          "--graph", "knn", "--executor", "dask", "--scheduler", "local:2"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2, out.stderr
    assert "rdx-toolkit[distributed]" in out.stderr


@pytest.mark.xfail(strict=False, reason=(
    "known bug, open: on an AMD EPYC (AVX2) machine the landmark columns (far_out) of the "
    "blocks re-run after the kill differ from the single-process pass (1 to 1615 of 180 000 "
    "entries, varying from run to run; also with the code of earlier releases, and with one "
    "thread), while every neighbour array is identical; on the machines before it passed"))
def test_killed_worker_process_does_not_change_the_graph(data, local_graph):
    """A worker process killed (SIGKILL) while blocks are running: Dask restarts it and
    reschedules its tasks; the graph is the single-process one."""
    import os
    import signal
    import threading
    import time

    A, B = data
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        before = c.run(os.getpid)
        out = {}
        run = threading.Thread(target=lambda: out.update(graph=_graph(A, B, c)))
        run.start()
        t0 = time.perf_counter()
        # kill as soon as one block is done: the others are still queued or running
        while not any(str(k).startswith("rdx-knn-block") for k in c.who_has()) \
                and time.perf_counter() - t0 < 60:
            time.sleep(0.05)
        busy = sum(len(v) for v in c.processing().values())
        os.kill(next(iter(before.values())), signal.SIGKILL)
        run.join(120)
        after = c.run(os.getpid)
    assert busy > 0                                     # the kill hit a running pass
    assert set(after.values()) != set(before.values())  # a worker really was replaced
    _assert_same_graph(out["graph"], local_graph)
