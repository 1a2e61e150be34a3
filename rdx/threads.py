"""How many threads rdx computes with, and how idle OpenMP threads wait.

:func:`configure` runs when the ``rdx`` package is imported (``import rdx``, ``rdx ...``,
``python -m rdx``), before rdx imports torch or scikit-learn. It imports nothing heavy (no
torch, numpy or threadpoolctl): ``rdx --help`` stays instant.

**Wait policy.** An OpenMP worker that finishes its share of a parallel region spins before
it sleeps (GNU libgomp, torch's and scikit-learn's runtime: about 300 000 iterations; LLVM
and Intel libomp: 200 ms). On a machine whose cores are shared, those spinning workers take
the cores from the threads doing the work: the digits example's training took 56.9 s
instead of 5.9 s on a loaded 2-core machine. ``OMP_WAIT_POLICY=PASSIVE`` makes both
runtimes sleep at once (libgomp: spin count 0; libomp: block time 0), so no runtime-specific
variable is needed. rdx sets it unless the user chose a wait behaviour (any of
:data:`WAIT_VARIABLES`). A runtime reads it once, when it is loaded: a script that imports
torch *before* rdx keeps torch's default (import rdx first, or export the variable).

OpenBLAS (numpy's and SciPy's BLAS) has its own pool with the same habit: an idle worker
spins for 2^28 cycles before it sleeps. Small products — a logistic-regression probe on
1.8k × 64 features, many per second — then leave both cores spinning between calls; on the
loaded 2-core machine the digits example's 5-fold probes took 3–6 s per model instead of
0.1–0.9 s. rdx sets ``OPENBLAS_THREAD_TIMEOUT=4`` (2^4 cycles, OpenBLAS's shortest) unless
the user set it or ``GOTO_THREAD_TIMEOUT`` (:data:`BLAS_WAIT_VARIABLES`); like the OpenMP
policy it is read when numpy loads.

**Thread count** (:func:`thread_choice`), in this order:

1. ``RDX_NUM_THREADS`` (or ``rdx --threads N``, which sets it): rdx's own override, applied
   to torch, the BLAS and OpenMP pools and rdx's numpy thread pool;
2. ``OMP_NUM_THREADS``: the user's OpenMP setting, which torch and the BLAS libraries read
   themselves; rdx's numpy pool follows it;
3. otherwise the CPUs this process may really use: the fewest of its CPU affinity, the
   cgroup CPU quota (containers, batch systems) and ``SLURM_CPUS_PER_TASK``.

A value that is not a positive integer is ignored with a warning (``RuntimeWarning``): the
variables are read when rdx is imported, where an exception would make the package
unusable, and the detected count is a safe fallback. Torch gets the count when it is
imported (an import hook, so code paths that never import torch keep not importing it);
the BLAS and OpenMP pools get it through threadpoolctl, only when it differs from what they
chose themselves (:func:`limit_native_pools`).

**Training** is the exception: rdx's trainers (the ConvNet, the ViT, the digits example's
MLP, the SAEs and crosscoders) run torch on :data:`TRAINING_THREADS` threads whatever the
count above (:func:`rdx.backend.reproducible_training`). torch's CPU kernels split a
convolution, a matrix product or a sum into one part per thread and add the parts in that
order, so the same step on 1, 2 or 4 threads rounds differently; training amplifies those
last bits, and checkpoints of one seed would differ between machines (one epoch of the
ConvNet on 300 digits: weights apart by up to 0.03). One count everywhere makes the
weights bit-identical on every machine with the same library versions and the same SIMD
level (torch's ``torch.backends.cpu.get_cpu_capability()``: AVX2 and AVX-512 kernels also
add in different orders).
"""
from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any, NamedTuple

#: Variables through which a user chooses how idle OpenMP threads wait (OpenMP's standard
#: one, GNU libgomp's spin count, LLVM/Intel libomp's block time); any of them set → rdx
#: leaves the wait policy alone.
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
#: Variables through which a user chooses how long idle OpenBLAS threads spin (2^n cycles);
#: either set → rdx leaves it alone.
BLAS_WAIT_VARIABLES = ("OPENBLAS_THREAD_TIMEOUT", "GOTO_THREAD_TIMEOUT")
#: OpenBLAS's shortest spin (values below 4 count as 4).
OPENBLAS_SHORTEST_TIMEOUT = "4"
#: Variables with which a user sizes the BLAS pools themselves (left alone unless
#: ``RDX_NUM_THREADS`` is set).
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
#: Modules whose import loads a BLAS or OpenMP runtime (numpy: OpenBLAS; scipy.linalg:
#: SciPy's OpenBLAS; sklearn: its libgomp; faiss: its OpenMP).
_NATIVE_MODULES = ("numpy", "scipy.linalg", "sklearn", "torch", "faiss")

#: torch threads of rdx's trainers, on every machine (see the module docstring, *Training*).
#: Two: the project's reference machine has two cores, so the checkpoints trained there
#: are what every machine now gets, and there one thread would take about twice as long;
#: on a one-core machine the two threads take turns, for a few per cent more time
#: (``benchmarks/bench_training.py``, docs/performance.md).
TRAINING_THREADS = 2

SOURCES = ("RDX_NUM_THREADS", "OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK", "cgroup CPU quota",
           "CPU affinity")


class ThreadChoice(NamedTuple):
    """The thread count rdx computes with.

    Attributes
    ----------
    n : int
        Threads for CPU work.
    source : str
        Where ``n`` comes from (one of :data:`SOURCES`).
    default : int
        What the OpenMP and BLAS runtimes pick by themselves (the CPU affinity); when ``n``
        equals it and no override is set, nothing needs to be told.
    """

    n: int
    source: str
    default: int

    @property
    def tells_runtimes(self) -> bool:
        """Whether torch and the BLAS/OpenMP pools must be given ``n``: an explicit
        ``RDX_NUM_THREADS``, or a detected limit below what they would use. Never for
        ``OMP_NUM_THREADS``, which they read themselves."""
        return self.source == "RDX_NUM_THREADS" or (
            self.source != "OMP_NUM_THREADS" and self.n != self.default)


# ----------------------------------------------------------------------------- detection

def affinity_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where the
    platform has none)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _own_cgroup_paths(proc_cgroup: str | os.PathLike) -> dict[str, str]:
    """This process's cgroup per hierarchy: ``{"": path}`` for cgroup v2, ``{"cpu": path}``
    for a v1 hierarchy with the cpu controller."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return {}
    paths = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            paths[""] = path
        elif "cpu" in controllers.split(","):
            paths["cpu"] = path
    return paths


def _folders(base: Path, path: str | None) -> list[Path]:
    """``base/path`` and its parents up to ``base``. Inside a container the path listed in
    /proc/self/cgroup may not exist under the mount (its root is the container's own
    cgroup), and a parent's quota limits its children too: every level is read."""
    parts = [p for p in (path or "").split("/") if p]
    if ".." in parts:   # a cgroup outside this namespace: only the mount's root is ours
        parts = []
    return [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _read_quota(text: str) -> float | None:
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_cpu_limit(root: str | os.PathLike = "/sys/fs/cgroup",
                     proc_cgroup: str | os.PathLike = "/proc/self/cgroup") -> float | None:
    """CPUs allowed by the cgroup CPU quota, or None without a quota.

    Reads cgroup v2's ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD") and v1's
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota −1: none) of this process's cgroup
    and its parents; the smallest limit wins.

    Parameters
    ----------
    root : path
        Where the cgroup file systems are mounted (tests point it at a temporary folder).
    proc_cgroup : path
        This process's cgroup membership (``/proc/self/cgroup``); a missing file means the
        mount's root only.

    Returns
    -------
    float or None
        Quota / period, e.g. 1.5 for "150000 100000".
    """
    root = Path(root)
    own = _own_cgroup_paths(proc_cgroup)
    found: list[float] = []
    for folder in _folders(root, own.get("")):
        try:
            limit = _read_quota((folder / "cpu.max").read_text())
        except OSError:
            continue
        if limit is not None:
            found.append(limit)
    for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        for folder in _folders(root / mount, own.get("cpu")):
            try:
                text = ((folder / "cpu.cfs_quota_us").read_text().strip() + " "
                        + (folder / "cpu.cfs_period_us").read_text().strip())
            except OSError:
                continue
            limit = _read_quota(text)
            if limit is not None:
                found.append(limit)
    return min(found) if found else None


def _positive_int(environ: Mapping[str, str], name: str, fallback: str) -> int | None:
    """``environ[name]`` as a positive integer; None when unset or empty. A bad value is
    ignored with a warning naming what is used instead. ``OMP_NUM_THREADS`` may list one
    count per nesting level ("4,2"): the first is the one that matters here."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    value = raw.split(",")[0].strip() if name == "OMP_NUM_THREADS" else raw
    if value.isdigit() and int(value) > 0:
        return int(value)
    warnings.warn(f"{name}={raw!r} is not a positive integer; rdx ignores it and uses "
                  f"{fallback}.", RuntimeWarning, stacklevel=2)
    return None


def choose_threads(environ: Mapping[str, str] | None = None, *, affinity: int | None = None,
                   cgroup_root: str | os.PathLike = "/sys/fs/cgroup",
                   proc_cgroup: str | os.PathLike = "/proc/self/cgroup") -> ThreadChoice:
    """The thread count for this process (see the module's docstring for the order).

    Parameters
    ----------
    environ : mapping, optional
        Environment to read (default ``os.environ``).
    affinity : int, optional
        CPUs in the affinity mask (default: this process's, :func:`affinity_cpus`).
    cgroup_root, proc_cgroup : path
        Passed to :func:`cgroup_cpu_limit`.

    Returns
    -------
    ThreadChoice
    """
    env = os.environ if environ is None else environ
    cpus = affinity_cpus() if affinity is None else max(1, int(affinity))
    detected = [(cpus, "CPU affinity")]
    quota = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    if quota is not None:   # 1.5 CPUs of quota: two threads, each running 75 % of the time
        detected.append((max(1, math.ceil(quota)), "cgroup CPU quota"))
    slurm = _positive_int(env, "SLURM_CPUS_PER_TASK", "the other limits")
    if slurm is not None:
        detected.append((slurm, "SLURM_CPUS_PER_TASK"))
    n, source = min(detected, key=lambda c: c[0])   # ties: the first (affinity)
    fallback = f"{n} threads ({source})"
    omp = _positive_int(env, "OMP_NUM_THREADS", fallback)
    if omp is not None:
        n, source = omp, "OMP_NUM_THREADS"
    own = _positive_int(env, "RDX_NUM_THREADS", f"{n} threads ({source})")
    if own is not None:
        n, source = own, "RDX_NUM_THREADS"
    return ThreadChoice(n, source, cpus)


_CHOICES: dict[tuple[Any, ...], ThreadChoice] = {}


def thread_choice() -> ThreadChoice:
    """:func:`choose_threads` for this process, computed once per value of the variables
    it reads (``rdx --threads`` sets one after import; a forked worker may get another
    affinity and reads it again only if the variables differ)."""
    key = tuple(os.environ.get(v) for v in ("RDX_NUM_THREADS", "OMP_NUM_THREADS",
                                            "SLURM_CPUS_PER_TASK"))
    choice = _CHOICES.get(key)
    if choice is None:
        choice = _CHOICES[key] = choose_threads()
    return choice


def num_threads() -> int:
    """Threads for CPU work in this process (:func:`thread_choice`'s count)."""
    return thread_choice().n


# ----------------------------------------------------------------------------- applying

def set_wait_policy(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless one of :data:`WAIT_VARIABLES` is set, and
    OpenBLAS's shortest spin unless one of :data:`BLAS_WAIT_VARIABLES` is.

    Returns
    -------
    bool
        True when rdx set it, False when the user's choice was left alone.
    """
    env = os.environ if environ is None else environ
    if not any(env.get(v) for v in BLAS_WAIT_VARIABLES):   # OpenBLAS's own spin (docstring)
        env["OPENBLAS_THREAD_TIMEOUT"] = OPENBLAS_SHORTEST_TIMEOUT
    if any(env.get(v) for v in WAIT_VARIABLES):
        return False
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def _give_torch_threads(torch: Any) -> None:
    choice = thread_choice()
    if choice.tells_runtimes and torch.get_num_threads() != choice.n:
        torch.set_num_threads(choice.n)


def _on_torch_import(torch: Any) -> None:
    """Run by the import hook right after torch's first import."""
    if _HOOK is not None and _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)
    try:
        _give_torch_threads(torch)
    except Exception as exc:  # noqa: BLE001 - never fail the user's import over a tuning
        warnings.warn(f"rdx could not set torch's thread count ({exc}).", RuntimeWarning,
                      stacklevel=2)


_LIMITED: tuple[Any, ...] | None = None


def limit_native_pools() -> None:
    """Give the BLAS and OpenMP pools loaded so far :func:`thread_choice`'s count.

    Nothing happens (threadpoolctl is not even imported) when the count is what the pools
    chose themselves; otherwise threadpoolctl is asked once per set of loaded runtimes, so
    the call is cheap enough for every parallel pass. BLAS pools that the user sized
    (:data:`BLAS_VARIABLES`) keep their size unless ``RDX_NUM_THREADS`` is set.
    """
    global _LIMITED
    choice = thread_choice()
    if not choice.tells_runtimes:
        return
    key = (choice, tuple(m in sys.modules for m in _NATIVE_MODULES))
    if key == _LIMITED:
        return
    _LIMITED = key
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:   # a dependency of scikit-learn and of rdx; tolerate its absence
        return
    explicit = choice.source == "RDX_NUM_THREADS"
    apis = ["openmp"]
    if explicit or not any(os.environ.get(v) for v in BLAS_VARIABLES):
        apis.append("blas")
    for api in apis:
        threadpool_limits(limits=choice.n, user_api=api)


def describe() -> dict[str, Any]:
    """The threading this process runs with, for the record next to results.

    Returns
    -------
    dict
        ``threads`` (count), ``threads_from`` (its source), ``omp_wait_policy`` and
        ``openblas_thread_timeout`` (the values in the environment, None when unset) and
        ``wait_policy_from`` ("rdx" or "user", of the OpenMP policy).
    """
    choice = thread_choice()
    return {"threads": choice.n, "threads_from": choice.source,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "openblas_thread_timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
            "wait_policy_from": "rdx" if _STATE.get("set_wait_policy") else "user"}


_HOOK: Any = None
_STATE: dict[str, bool] = {}


def configure() -> None:
    """Choose rdx's threading; called by ``rdx/__init__.py`` (once per process).

    Sets the wait policy (:func:`set_wait_policy`), then makes torch use the thread count:
    now if torch is already loaded and still at its default count (a count the user set
    with ``torch.set_num_threads`` is kept, unless ``RDX_NUM_THREADS`` is set), else right
    after its first import.
    """
    global _HOOK
    if _STATE:
        return
    _STATE["set_wait_policy"] = set_wait_policy()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        choice = thread_choice()
        if choice.source == "RDX_NUM_THREADS" or torch.get_num_threads() == choice.default:
            _give_torch_threads(torch)
        return
    if torch is None:
        from .lazy import AfterImport

        _HOOK = AfterImport("torch", _on_torch_import)
        sys.meta_path.insert(0, _HOOK)
