"""Device selection, thread pools and memory accounting shared by the numerical code.

torch is imported by the functions that need it, not with this module: checking a device
name (config validation, ``--help``) does not pay torch's import time.
"""
from __future__ import annotations

import contextlib
import mmap
import os
import re
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .errors import RDXInputError

if TYPE_CHECKING:
    import torch

_DEVICE_NAME = re.compile(r"(cpu|cuda)(:\d+)?")
_OTHER_DEVICE_TYPES = ("mps", "xpu", "meta", "hip", "xla", "ipu", "mtia", "hpu", "vulkan",
                       "ve", "fpga", "maia", "lazy", "opengl", "opencl", "ideep", "mkldnn",
                       "privateuseone")


def _check_device_name(device: object) -> None:
    """What ``_parse_device`` checks, without torch for strings."""
    if isinstance(device, str):
        if _DEVICE_NAME.fullmatch(device):
            return
        kind = device.split(":")[0]
        if kind in _OTHER_DEVICE_TYPES:
            raise RDXInputError(f"device={device!r} is not supported; use 'auto', 'cpu' or "
                                "'cuda'.")
        raise RDXInputError(f"device={device!r} is not a device; use 'auto', 'cpu' or "
                            "'cuda' (or 'cuda:N').")
    _parse_device(device)


def _parse_device(device: object) -> "torch.device":
    import torch

    if not isinstance(device, (str, torch.device)):
        raise RDXInputError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}.")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise RDXInputError(f"device={device!r} is not a device; use 'auto', 'cpu' or "
                            "'cuda' (or 'cuda:N').") from None
    if dev.type not in ("cpu", "cuda"):
        raise RDXInputError(f"device={device!r} is not supported; use 'auto', 'cpu' or 'cuda'.")
    return dev


def no_gpu_possible() -> bool:
    """True when this machine surely has no GPU torch could use: no NVIDIA or AMD (ROCm)
    driver device files, or ``CUDA_VISIBLE_DEVICES`` hides every GPU. Lets ``"auto"`` pick
    the CPU without importing torch (~0.8 s) on machines without a GPU."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return True
    return not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0",
                                                "/proc/driver/nvidia", "/dev/kfd"))


def resolve_device_name(device: object = "auto") -> str:
    """The device to compute on, as a name ("cpu", "cuda", "cuda:N"); like
    :func:`resolve_device`, but without importing torch when the answer is the CPU and no
    GPU can exist here (or torch is already loaded)."""
    if device is None or str(device) in ("auto", "cpu"):
        if str(device) == "cpu" or ("torch" not in sys.modules and no_gpu_possible()):
            return "cpu"
    dev = resolve_device(device)
    return "cpu" if dev.type == "cpu" else str(dev)


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """Return the torch device to compute on.

    ``"auto"`` (or None) picks CUDA when a GPU is visible and the CPU otherwise.
    """
    import torch

    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = _parse_device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RDXInputError(
            f"device={str(device)!r} was requested but no CUDA GPU is visible to torch "
            f"(torch {torch.__version__}); use device='cpu' or 'auto'."
        )
    return dev


def check_device(device: object, *, usable: bool = True) -> None:
    """Validate a device setting; with ``usable`` also that it is present here.

    Config validation passes ``usable=False``: a config may be checked on a machine without
    the GPU that the run will use.
    """
    if device is None or str(device) == "auto":
        return
    if usable:
        resolve_device(device)  # type: ignore[arg-type]
    else:
        _check_device_name(device)


def n_cpu_threads() -> int:
    """Threads for CPU work (rdx's numpy thread pool, row blocks).

    torch's intra-op setting when torch is loaded (rdx gives it :func:`rdx.threads.num_threads`
    when it is imported; a count the caller set later with ``torch.set_num_threads`` wins),
    else :func:`rdx.threads.num_threads`: ``RDX_NUM_THREADS``, ``OMP_NUM_THREADS`` or the
    CPUs this process may really use (affinity, cgroup quota, SLURM allocation). Called at
    the start of each parallel pass, it also sizes the BLAS/OpenMP pools loaded since the
    last call (:func:`rdx.threads.limit_native_pools`; nothing to do in the common case).
    """
    from . import threads

    threads.limit_native_pools()
    torch = sys.modules.get("torch")
    if torch is not None:
        return max(1, torch.get_num_threads())
    return threads.num_threads()


def available_memory_bytes(device: torch.device | str) -> int:
    """Memory the computation may use on ``device`` right now."""
    import psutil

    if str(device).startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    from .allocator import kept_free_bytes

    # memory a significance assessment's re-fits keep for reuse is this process's to use
    avail = psutil.virtual_memory().available + kept_free_bytes()
    limit = memory_limit_from_env()
    return int(avail if limit is None else min(avail, limit))


#: madvise(2) advice that reclaims a range's pages but keeps their contents (Linux ≥ 5.4);
#: Python names it only from 3.12.
_MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)


def release_mapped_pages(X: object) -> bool:
    """Give back the resident pages of a memory-mapped array (an ``np.memmap`` or a view of
    one); True if there was a mapping to release.

    A mapped feature file's pages count in the process's resident memory once they are read
    (validation, centring), on top of the working copy made from them: at 10⁶ images of
    d = 768 that is 5.7 GiB counted twice. ``MADV_PAGEOUT`` reclaims them without changing
    any value: clean pages are read again from the file (or the page cache) when used,
    written copy-on-write pages stay. It is advice: pages of a file not yet written back to
    disk stay resident (rdx's own feature files are flushed before they are renamed into
    place, see :func:`rdx.io.atomic_write`). Elsewhere than Linux, or on a kernel without
    the advice, nothing happens.
    """
    if not sys.platform.startswith("linux"):
        return False
    obj, mm = X, None
    while obj is not None and mm is None:       # a view's base chain leads to the memmap
        mm = getattr(obj, "_mmap", None)
        obj = getattr(obj, "base", None)
    if not isinstance(mm, mmap.mmap):
        return False
    try:
        mm.madvise(_MADV_PAGEOUT)
    except (OSError, ValueError):                # kernel < 5.4 or a closed mapping
        return False
    return True


def memory_limit_from_env() -> int | None:
    """Bytes allowed by ``RDX_MEMORY_LIMIT_GB`` (GiB), or None when unset."""
    raw = os.environ.get("RDX_MEMORY_LIMIT_GB")
    if not raw:
        return None
    try:
        gb = float(raw)
    except ValueError:
        gb = -1.0
    if not gb > 0:
        raise RDXInputError(f"RDX_MEMORY_LIMIT_GB={raw!r} must be a positive number of GiB.")
    return int(gb * 2**30)


def format_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed Python's ``random``, numpy's global RNG and torch inside the block and give the
    caller's generators back untouched afterwards.

    Estimators that call libraries drawing from the global generators (torch layer
    initialisation, scikit-learn internals) fit inside this block: their results depend only
    on ``seed``, and fitting never changes the state a user's own code relies on.
    """
    import random

    import numpy as np

    py_state, np_state = random.getstate(), np.random.get_state()
    torch = sys.modules.get("torch")
    if torch is None:  # nothing to give back; seeded when imported inside the block
        torch_state = _seed_torch_on_import(seed)
    else:
        devices = (list(range(torch.cuda.device_count())) if torch.cuda.is_initialized()
                   else [])
        torch_state = torch.random.fork_rng(devices=devices)
    with torch_state:
        try:
            seed_everything(seed)
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, numpy's global RNG and torch (CPU and CUDA).

    torch is seeded when it is loaded; when it is not, nothing can draw from its generator
    yet, and :func:`seeded` seeds it if code in its block imports it.
    """
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


@contextlib.contextmanager
def reproducible_training(device: torch.device | str = "cpu") -> Iterator[None]:
    """Train with the same arithmetic on every machine, then give the caller its settings back.

    Inside the block torch runs on :data:`rdx.threads.TRAINING_THREADS` threads, whatever the
    machine's core count, ``RDX_NUM_THREADS`` or the caller's ``torch.set_num_threads``: its
    CPU kernels add per-thread partial results in an order set by the thread count, so
    another count gives other weights. Deterministic algorithms are on (on the CPU
    ``warn_only=False``: an operation without a deterministic kernel is an error, not a
    checkpoint that differs from run to run; on a GPU, where some kernels have no
    deterministic version, a warning) and cuDNN's autotuner is off. Afterwards the
    caller's thread count, deterministic setting and autotuner are restored, also when the
    block raises. The random generators are left alone (:func:`seeded` seeds them).

    Parameters
    ----------
    device : torch.device or str
        Where the training computes; a CUDA device also gets cuBLAS's fixed workspace
        (``CUBLAS_WORKSPACE_CONFIG``, unless set), without which cuBLAS is not deterministic.

    Notes
    -----
    The thread count is the process's (torch has one intra-op pool): work in other Python
    threads during the block runs on that many threads too.
    """
    import torch

    from .threads import TRAINING_THREADS

    dev = torch.device(device) if isinstance(device, str) else device
    was_threads = torch.get_num_threads()
    was, was_warn = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    bench = torch.backends.cudnn.benchmark
    if dev.type == "cuda":
        # effective if set before the process's first cuBLAS call (harmless otherwise)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(TRAINING_THREADS)
    try:
        torch.use_deterministic_algorithms(True, warn_only=dev.type != "cpu")
        torch.backends.cudnn.benchmark = False
        yield
    finally:
        torch.set_num_threads(was_threads)
        torch.use_deterministic_algorithms(was, warn_only=was_warn)
        torch.backends.cudnn.benchmark = bench


@contextlib.contextmanager
def _seed_torch_on_import(seed: int) -> Iterator[None]:
    from .lazy import AfterImport

    # through the finders after it: composes with rdx.threads' hook (thread count first)
    hook = AfterImport("torch", lambda torch: torch.manual_seed(seed))
    sys.meta_path.insert(0, hook)
    try:
        yield
    finally:
        sys.meta_path.remove(hook)
