"""A Dask scheduler address that misbehaves (rdx.method.knn_dask.check_scheduler): a peer
that accepts and stays silent, one that sends junk or another protocol's bytes, ``tls://``
without certificates and ``local:N`` beyond this process's CPUs each end — exit status 2
from ``rdx explain --executor dask``, RDXInputError from ``RDX(executor=...)`` — with a
message naming the flag, never a traceback or a wait without end. Real loopback sockets;
the subprocess timeouts are hang guards, not speed targets."""
import os
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdx.errors import RDXInputError
from rdx.method.estimator import RDX

distributed = pytest.importorskip("distributed")

from rdx.method import knn_dask  # noqa: E402  (after the skip)

#: The deadline the tests give Dask (its own setting, as a user would set it).
DEADLINE = "2s"
ENV = {**os.environ, knn_dask.TIMEOUT_ENV: DEADLINE}
#: Far above the deadline plus Python's and Dask's start: only a hang reaches it.
HANG_GUARD_S = 180


class Peer:
    """A loopback TCP server that accepts every connection and then sends ``payload``
    (nothing: silent) and keeps the connection open (or closes it with ``close``)."""

    def __init__(self, payload: bytes = b"", close: bool = False):
        self.payload, self.close = payload, close
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepted = 0
        self._open: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:   # closed by stop()
                return
            self.accepted += 1
            try:
                if self.payload:
                    conn.sendall(self.payload)
            except OSError:
                pass
            if self.close:
                conn.close()
            else:
                self._open.append(conn)

    def stop(self):
        self.sock.close()
        for conn in self._open:
            conn.close()


@pytest.fixture
def peer():
    made = []

    def make(payload: bytes = b"", close: bool = False) -> Peer:
        made.append(Peer(payload, close))
        return made[-1]
    yield make
    for p in made:
        p.stop()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    r = np.random.default_rng(1)
    for name in ("a", "b"):
        np.save(folder / f"{name}.npy", r.standard_normal((60, 4)).astype(np.float32))
    return folder


def _explain(inputs, tmp_path, scheduler):
    return subprocess.run(
        [sys.executable, "-m", "rdx.cli", "explain", str(inputs / "a.npy"),
         str(inputs / "b.npy"), "--out", str(tmp_path / "out"), "--quiet", "--graph", "knn",
         "--executor", "dask", "--scheduler", scheduler],
        capture_output=True, text=True, timeout=HANG_GUARD_S, env=ENV)


def _assert_refused(out, *words):
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    message = out.stderr.strip()
    assert message.startswith("rdx explain: error: ") and "\n" not in message, message
    assert "--scheduler" in message, message
    for word in words:
        assert word in message, message
    assert not (out.stdout.strip())


def test_silent_peer_ends_with_exit_2(peer, inputs, tmp_path):
    """A peer that accepts and never answers: Dask's handshake waits forever on it (its
    Client(timeout=) bounds the connection only); the command ends at the deadline."""
    p = peer()
    out = _explain(inputs, tmp_path, p.address)
    _assert_refused(out, "no Dask handshake within 2 s", knn_dask.TIMEOUT_ENV)
    assert p.accepted >= 1          # it really connected: the handshake is what was bounded
    assert not (tmp_path / "out").exists()   # refused before any work


@pytest.mark.parametrize("payload", [b"rdxjunk!" * 8, b"HTTP/1.1 400 Bad Request\r\n\r\n",
                                     b"\x00" * 3])
def test_junk_peer_ends_with_exit_2(peer, inputs, tmp_path, payload):
    """Junk, or another service's answer: its first 8 bytes read as a frame length of
    exabytes made Dask fail with 'Unable to allocate 3.07 EiB'; now the protocol is named."""
    p = peer(payload, close=payload.startswith(b"\x00"))
    out = _explain(inputs, tmp_path, p.address)
    _assert_refused(out, "does not speak Dask's protocol")
    assert "EiB" not in out.stderr and "MemoryError" not in out.stderr


def test_tls_without_certificates_ends_with_exit_2(peer, inputs, tmp_path):
    p = peer()
    out = _explain(inputs, tmp_path, p.address.replace("tcp://", "tls://"))
    _assert_refused(out, "certificates", "DASK_DISTRIBUTED__COMM__TLS__CA_FILE")
    assert "TypeError" not in out.stderr
    assert p.accepted == 0          # refused before connecting


def test_nothing_listening_ends_with_exit_2(inputs, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                       # a port nothing listens on
    _assert_refused(_explain(inputs, tmp_path, f"tcp://127.0.0.1:{port}"), "could not reach")


def test_more_local_workers_than_cpus_is_refused(inputs, tmp_path):
    out = _explain(inputs, tmp_path, "local:100000")
    _assert_refused(out, "CPU(s) this process may run on", "local:N with N between 1 and")


def test_local_workers_bounded_by_the_cpus():
    knn_dask.check_executor("local:4", cpus=4)
    with pytest.raises(RDXInputError, match="between 1 and 4"):
        knn_dask.check_executor("local:5", cpus=4)


def test_a_real_scheduler_passes_and_a_worker_is_named():
    """The check passes a real scheduler and refuses a worker's address (its protocol is
    Dask's, but it schedules nothing)."""
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        knn_dask.check_scheduler(cluster.scheduler_address, timeout=30)
        worker = next(iter(cluster.workers.values())).address
        with pytest.raises(RDXInputError, match="a Dask Worker, not a scheduler"):
            knn_dask.check_scheduler(worker, timeout=30)


@pytest.mark.parametrize("kind", ["silent", "junk", "tls", "local"])
def test_estimator_refuses_a_bad_scheduler(peer, kind):
    """RDX(executor=...) from Python: the same faults are RDXInputError from fit."""
    import dask

    executor = {"silent": lambda: peer().address,
                "junk": lambda: peer(b"rdxjunk!" * 8).address,
                "tls": lambda: peer().address.replace("tcp://", "tls://"),
                "local": lambda: "local:100000"}[kind]()
    r = np.random.default_rng(0)
    A, B = r.standard_normal((80, 5)), r.standard_normal((80, 6))
    done = {}

    def fit():
        with dask.config.set({knn_dask.TIMEOUT_KEY: DEADLINE}):
            try:
                RDX(graph="knn", executor=executor, n_explanations=2).fit(A, B)
            except BaseException as exc:  # noqa: BLE001 - inspected below
                done["error"] = exc

    thread = threading.Thread(target=fit, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), "the fit still waits on the scheduler"
    assert isinstance(done.get("error"), RDXInputError), done
    assert "executor" in str(done["error"])


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.binary(max_size=64), close=st.booleans(),
       repeat=st.integers(min_value=1, max_value=4))
def test_every_network_wait_is_bounded(peer, payload, close, repeat):
    """Property: whatever a peer sends (any bytes, then open or closed), reaching it ends,
    and ends as an RDXInputError (never another exception, never a wait without end)."""
    p = peer(payload * repeat, close=close)
    done = {}

    def probe():
        try:
            knn_dask.check_scheduler(p.address, "--scheduler", timeout=1.0)
        except BaseException as exc:  # noqa: BLE001 - inspected below
            done["error"] = exc

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(60)
    p.stop()
    assert not thread.is_alive()
    assert isinstance(done.get("error"), RDXInputError), done
    assert "--scheduler" in str(done["error"])
