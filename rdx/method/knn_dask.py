"""The blocked neighbour/landmark pass of the large-n mode on a Dask cluster.

:func:`rdx.method.knn_graph.build_union_graph` computes the union K-NN graph row block by
row block; every block needs the features of all n images but nothing from other blocks.
With ``executor`` set, each row block is one Dask task:

* the driver writes the centred float32 features of both models once, as ``.npy`` files in
  a folder the workers can read (a temporary folder; for workers on other machines a shared
  file system named by ``RDX_SHARED_DIR``), and tasks receive only the paths;
* a worker memory-maps the files (pages are read on demand and shared by the workers of one
  machine through the page cache) and keeps the prepared
  :class:`~rdx.method.knn_search.Features` of a file for its next blocks;
* a task runs :func:`~rdx.method.knn_graph.graph_block` — the same function as the local
  loop — and returns its :class:`~rdx.method.knn_graph.GraphBlock` (top-K lists, union
  pairs, landmark columns); the driver collects them into the same
  :class:`~rdx.method.knn_graph.UnionGraph`. The spectral step stays in the driver.

Blocks are computed on the workers' CPUs with the CPU block size, so the graph equals the
single-process CPU pass (tested on a 2-worker LocalCluster). A task that fails, or whose
worker dies, is run again (``retries``; the scheduler also reschedules the tasks of a lost
worker): a block's result does not depend on where or how often it ran.

``executor`` is ``"local:N"`` (a :class:`distributed.LocalCluster` of N one-thread worker
processes, started and closed around the pass), a scheduler address (``tcp://host:8786``;
e.g. from dask-jobqueue's ``SLURMCluster``) or a :class:`distributed.Client`.

Every network wait is bounded (:func:`check_scheduler`): before the client is made, one
connection to the address does Dask's handshake and asks the peer who it is, all of it under
one deadline (Dask's ``distributed.comm.timeouts.connect``, 30 s by default) — Dask's own
``Client(timeout=)`` bounds the connection but not the handshake, so a peer that accepts and
stays silent would hold the command forever, and one that sends junk may make Dask read a
frame length of exabytes. Each fault (nothing listening, silence, junk, a peer that is not a
scheduler, ``tls://`` without certificates) is an :class:`~rdx.errors.RDXInputError` that
says what was wrong and how to fix it.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ..errors import RDXInputError

if TYPE_CHECKING:
    import torch

    from .knn_graph import GraphBlock
    from .knn_search import Features

#: How to get the optional dependency (the project's extra, or Dask itself).
INSTALL_HINT = ('pip install "rdx-toolkit[distributed]" (or: pip install '
                '"dask[distributed]")')
#: Runs of a failed block task beyond the first (a worker lost mid-task counts separately,
#: under the scheduler's ``distributed.scheduler.allowed-failures``).
RETRIES = 3
#: What the deadline of :func:`check_scheduler` is, in Dask's configuration (the user's
#: setting: ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=60s`` or a Dask config file).
TIMEOUT_KEY = "distributed.comm.timeouts.connect"
TIMEOUT_ENV = "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"
_LOCAL = re.compile(r"^local:(\d+)$")
#: protocol://anything (Dask's own address forms) or host[:port], the host a name, an IPv4
#: address or a bracketed IPv6 one
_ADDRESS = re.compile(r"^([a-z][a-z0-9+]*://\S+|(\[[0-9a-f:.]+\]|[^\s/:\[\]]+)(:\d+)?)$",
                      re.IGNORECASE)
_EXAMPLES = '"local:N" (N worker processes on this machine) or a scheduler address such ' \
            'as "tcp://host:8786"'
_START_ONE = ("Start one (`dask scheduler`, then `dask worker ADDRESS` on each machine, or "
              "dask-jobqueue's SLURMCluster) and pass the address it prints")


def _named(name: str, value: Any) -> str:
    """``--scheduler tcp://h:1`` for a flag, ``executor='tcp://h:1'`` for a parameter."""
    return f"{name} {value}" if name.startswith("--") else f"{name}={value!r}"


def import_distributed() -> Any:
    """``distributed``, or an :class:`~rdx.errors.RDXInputError` saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise RDXInputError("the Dask executor needs dask.distributed, which is not installed: "
                            f"{INSTALL_HINT}.") from None
    return distributed


def is_client(executor: Any) -> bool:
    """Whether ``executor`` is a :class:`distributed.Client` (without importing Dask)."""
    return type(executor).__name__ == "Client" and \
        type(executor).__module__.startswith("distributed")


def check_executor(executor: Any, name: str = "executor", *, connect: bool = False,
                   cpus: int | None = None) -> None:
    """Refuse an ``executor`` that cannot be used, before any work.

    ``local:N`` is bounded by the CPUs this process may run on (``cpus``, default
    :func:`rdx.threads.affinity_cpus`: each worker is a one-thread process, more only
    compete for the CPUs and each holds its copy of the features' pages). With ``connect``
    a scheduler address is also reached (:func:`check_scheduler`, bounded in time); without,
    an unreachable scheduler is reported when the pass starts. ``name`` is what the message
    calls the value (the CLI's ``--scheduler``).
    """
    if executor is None:
        return
    if is_client(executor):
        return
    if not isinstance(executor, str) or not executor.strip():
        raise RDXInputError(f"{name} must be None (this process), {_EXAMPLES} or a "
                            f"dask.distributed.Client, got {executor!r}.")
    local = _LOCAL.match(executor)
    if local is not None:
        workers = int(local.group(1))
        if workers < 1:
            raise RDXInputError(f"{_named(name, executor)} asks for no workers; use local:N with "
                                "N ≥ 1.")
        if cpus is None:
            from ..threads import affinity_cpus

            cpus = affinity_cpus()
        if workers > cpus:
            raise RDXInputError(
                f"{_named(name, executor)} starts {workers} worker processes, more than the "
                f"{cpus} CPU(s) this process may run on, where they only compete for the CPUs "
                f"(and each maps the features); use local:N with N between 1 and {cpus}, or "
                "a scheduler address for workers on other machines.")
    elif executor.startswith("local") or not _ADDRESS.match(executor):
        raise RDXInputError(f"{_named(name, executor)} is neither local:N nor a scheduler address; "
                            f"use {_EXAMPLES}.")
    import_distributed()
    if connect and local is None:
        check_scheduler(executor, name)


def connect_timeout() -> float:
    """Seconds :func:`check_scheduler` waits for a scheduler, handshake included: Dask's
    ``distributed.comm.timeouts.connect`` (30 s unless the user set it)."""
    import_distributed()   # registers Dask's distributed configuration
    import dask
    from dask.utils import parse_timedelta

    try:
        seconds = parse_timedelta(dask.config.get(TIMEOUT_KEY, 30), default="seconds")
    except (TypeError, ValueError, KeyError):
        raise RDXInputError(f"Dask's {TIMEOUT_KEY} ({TIMEOUT_ENV}) is not a duration: "
                            f"{dask.config.get(TIMEOUT_KEY)!r}; set it to e.g. 30s.") from None
    if not seconds or seconds <= 0 or seconds != seconds:
        raise RDXInputError(f"Dask's {TIMEOUT_KEY} ({TIMEOUT_ENV}) must be a positive "
                            f"duration, got {seconds!r}; set it to e.g. 30s.")
    return float(seconds)


def _connection_args(address: str, name: str) -> dict[str, Any]:
    """What a :class:`distributed.Client` would connect with (its default ``Security``,
    from Dask's configuration), refusing ``tls://`` without certificates: Dask itself fails
    later with a TypeError about an ``ssl_context``."""
    from distributed.security import Security

    args = Security().get_connection_args("client")
    if address.lower().startswith("tls://") and args.get("ssl_context") is None:
        raise RDXInputError(
            f"{_named(name, address)} is a TLS address, but Dask has no certificates to connect "
            "with. Set them in Dask's configuration (distributed.comm.tls.ca-file, "
            "distributed.comm.tls.client.cert and .key; e.g. the environment variables "
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE, DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT "
            "and DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY), or use the scheduler's tcp:// "
            "address.")
    return args


def check_scheduler(address: str, name: str = "executor", timeout: float | None = None
                    ) -> None:
    """Reach the Dask scheduler at ``address`` within ``timeout`` seconds (default
    :func:`connect_timeout`): connect, do Dask's handshake, ask its identity.

    One deadline covers all of it, in a thread with its own event loop (the caller may be
    inside one, as in a notebook); Dask's ``connect`` bounds the TCP connection only, and
    its handshake read waits forever on a peer that accepts and stays silent.

    Raises
    ------
    RDXInputError
        Nothing listening, no answer within the deadline, an answer that is not Dask's
        protocol (junk, another service), a peer that is not a scheduler, or ``tls://``
        without certificates — each named with ``name`` and how to fix it.
    """
    distributed = import_distributed()
    seconds = connect_timeout() if timeout is None else float(timeout)
    args = _connection_args(address, name)

    async def identity() -> Any:
        # the connection's retries (Dask retries a refused one: a scheduler may be starting)
        # end before the deadline, so that nothing listening is told apart from silence
        comm = await distributed.comm.connect(address, timeout=max(seconds - 1, seconds / 2),
                                              **args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    outcome: dict[str, Any] = {}

    def probe() -> None:
        try:
            outcome["reply"] = asyncio.run(asyncio.wait_for(identity(), seconds))
        except BaseException as exc:  # noqa: BLE001 - every fault of the peer is reported
            outcome["error"] = exc

    thread = threading.Thread(target=probe, name="rdx-dask-probe", daemon=True)
    thread.start()
    # the probe's own deadline ends it; the margin covers a loop that cannot cancel at once
    thread.join(seconds + 5)
    where = f"the Dask scheduler at {_named(name, address)}"
    error = outcome.get("error")
    if thread.is_alive() or isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        raise RDXInputError(
            f"{where} accepted no Dask handshake within {seconds:g} s: something may listen "
            f"there but does not speak Dask's protocol, or the scheduler is overloaded. Check "
            f"the address and port (`dask scheduler` prints them), or wait longer with "
            f"{TIMEOUT_ENV}=60s.")
    if isinstance(error, OSError) and not isinstance(error, distributed.comm.CommClosedError):
        # nothing listening (refused until the deadline), no route, an unknown host
        raise RDXInputError(f"could not reach {where} ({error}). {_START_ONE}, or use "
                            "local:N for worker processes on this machine.")
    if error is not None or not isinstance(outcome.get("reply"), dict):
        # not the peer's words: junk read as Dask's frames gives errors such as 'Unable to
        # allocate 3.07 EiB' (8 bytes of text read as a frame length), which mislead
        what = "closed the connection during Dask's handshake" if isinstance(
            error, distributed.comm.CommClosedError) else "answered with bytes that are not " \
            "a Dask message"
        raise RDXInputError(
            f"{where} does not speak Dask's protocol (it {what}): another service listens "
            f"on that port, or the protocol differs (tcp:// and tls:// must match the "
            f"scheduler's). Check the address `dask scheduler` prints, or {_START_ONE[0].lower()}"
            f"{_START_ONE[1:]}.")
    kind = outcome["reply"].get("type")
    if kind != "Scheduler":
        raise RDXInputError(f"{where} is a Dask {kind or 'server'}, not a scheduler; pass "
                            "the scheduler's address (the one `dask worker` was given).")


def describe_executor(executor: Any) -> Any:
    """The executor as a results document records it: a client by its scheduler address."""
    if is_client(executor):
        return str(executor.scheduler.address)
    return executor


@contextlib.contextmanager
def dask_client(executor: Any) -> Iterator[Any]:
    """A client of ``executor`` (see :func:`check_executor`); a LocalCluster or connection
    opened here is closed on exit, a given client is left open. A scheduler address is
    reached first under one deadline (:func:`check_scheduler`)."""
    check_executor(executor, connect=True)
    distributed = import_distributed()
    if is_client(executor):
        yield executor
        return
    local = _LOCAL.match(executor)
    if local is not None:
        # one thread per worker process: a block's GEMM and sorts are the unit of work, and
        # several one-thread processes keep their BLAS from competing for the same cores
        with distributed.LocalCluster(n_workers=int(local.group(1)), threads_per_worker=1,
                                      processes=True, dashboard_address=None) as cluster, \
                distributed.Client(cluster) as client:
            yield client
        return
    try:
        # the scheduler answered check_scheduler just now: the same handshake again
        client = distributed.Client(executor, timeout=f"{connect_timeout()}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise RDXInputError(
            f"could not reach the Dask scheduler at {executor!r} ({exc}). {_START_ONE}, or "
            "use executor='local:N' for worker processes on this machine.") from None
    with client:
        yield client


def shared_folder() -> tempfile.TemporaryDirectory:
    """Where the driver writes the features for the workers: under ``RDX_SHARED_DIR`` (a
    folder every worker can read at the same path) when set, else the system's temporary
    folder (enough for workers on this machine)."""
    root = os.environ.get("RDX_SHARED_DIR") or None
    if root is not None and not Path(root).is_dir():
        raise RDXInputError(f"RDX_SHARED_DIR={root!r} is not a folder; set it to a folder "
                            "that every Dask worker can read (or unset it).")
    return tempfile.TemporaryDirectory(prefix="rdx-knn-", dir=root)


# ----------------------------------------------------------------------------- workers
#: Prepared features per (worker thread, file): a worker keeps those of the pass it is
#: working on, so that the O(n·d) preparation (norms, duplicate groups) runs once per
#: worker, not once per block.
_FEATURES: dict[tuple[int, str, bool | None], "Features"] = {}
_FEATURES_LOCK = threading.Lock()


def _worker_features(path: str, torch_sort: bool | None) -> "Features":
    import torch

    from .knn_search import Features

    key = (threading.get_ident(), path, torch_sort)
    with _FEATURES_LOCK:
        feats = _FEATURES.get(key)
    if feats is None:
        # copy-on-write map: writable for torch, never written, pages read on demand
        X = torch.from_numpy(np.load(path, mmap_mode="c"))
        feats = Features(X, torch_sort=torch_sort)
        with _FEATURES_LOCK:
            for k in [k for k in _FEATURES
                      if k[0] == key[0] and Path(k[1]).parent != Path(path).parent]:
                del _FEATURES[k]          # an earlier pass's files: not needed again
            _FEATURES[key] = feats
    return feats


def forget_features(folder: str) -> int:
    """Drop the prepared features of the files in ``folder`` (run on every worker at the
    end of a pass). Returns how many were dropped."""
    with _FEATURES_LOCK:
        keys = [k for k in _FEATURES if Path(k[1]).parent == Path(folder)]
        for k in keys:
            del _FEATURES[k]
    return len(keys)


def graph_block_task(path_a: str, path_b: str, start: int, end: int, n_neighbors: int,
                     landmarks: np.ndarray | None, gamma: float | None,
                     torch_sort: bool | None) -> "GraphBlock":
    """One Dask task: rows ``start:end`` of the union graph from the memory-mapped features
    (:func:`rdx.method.knn_graph.graph_block`)."""
    from .knn_graph import graph_block

    FA = _worker_features(path_a, torch_sort)
    FB = _worker_features(path_b, torch_sort)
    return graph_block(FA, FB, start, end, n_neighbors, landmarks=landmarks, gamma=gamma)


# ----------------------------------------------------------------------------- driver
def union_graph_blocks(XA: "torch.Tensor", XB: "torch.Tensor", n_neighbors: int,
                       spans: list[tuple[int, int]], *, landmarks: np.ndarray | None,
                       gamma: float | None, executor: Any, progress: bool = False,
                       torch_sort: bool | None = None) -> Iterator["GraphBlock"]:
    """The :class:`~rdx.method.knn_graph.GraphBlock` of every row block ``spans``, computed
    as Dask tasks, in the order they finish.

    Parameters
    ----------
    XA, XB : centred float32 features (any device; written to disk once for the workers).
    n_neighbors : K.
    spans : row blocks ``(start, end)``.
    landmarks, gamma : the far-pair sketch's landmarks (sorted ids) and γ, or None.
    executor : see :func:`check_executor`.
    progress : show a bar over the blocks.
    torch_sort : see :class:`~rdx.method.knn_search.Features`.
    """
    from tqdm.auto import tqdm

    with dask_client(executor) as client, shared_folder() as folder:
        distributed = import_distributed()
        paths = []
        for name, X in (("a", XA), ("b", XB)):
            path = str(Path(folder) / f"features_{name}.npy")
            np.save(path, X.detach().cpu().numpy())
            paths.append(path)
        tag = uuid.uuid4().hex[:12]
        futures = [client.submit(graph_block_task, *paths, s, e, int(n_neighbors), landmarks,
                                 gamma, torch_sort, key=f"rdx-knn-block-{tag}-{s}",
                                 retries=RETRIES, pure=False)
                   for s, e in spans]
        try:
            for future in tqdm(distributed.as_completed(futures), total=len(futures),
                               desc="K-NN graph (Dask)", disable=not progress, leave=False):
                block = future.result()
                future.release()           # the worker may drop its copy now
                yield block
        finally:
            for future in futures:
                future.cancel()
            with contextlib.suppress(Exception):   # best effort: workers may be gone
                client.run(forget_features, folder)
