"""Speed and memory of a whole RDX fit (both directions, grids included).

Measures ``rdx.RDX(n_explanations=5, random_state=0).fit(A, B)`` on synthetic but
clustered representations (A and B both ``n × d`` float32) for several ``n`` and ``d``.
Every ``(n, d)`` case runs in a fresh child process, so the peak resident memory reported
for a case is that case's alone (it includes the Python/torch baseline of the process and
the input arrays, i.e. what a user's script would see).

For each case the table shows

* ``fit s`` — wall time of ``fit`` only (``time.perf_counter`` around the call; with
  ``--repeat R`` the fastest of R fits in the same child);
* the split of that time from the fitted model's ``timings_`` (``rep A``, ``rep B``:
  distances and neighbour ranks of each model; ``diff``: the difference matrix;
  ``a_over_b``, ``b_over_a``: affinities, spectral clustering and grids of a direction);
* ``base GiB`` — resident memory of the child just before the first fit (interpreter,
  torch, inputs) and ``peak GiB`` — the child's peak resident set size
  (``getrusage(RUSAGE_SELF).ru_maxrss``), in GiB (2**30 bytes);
* the targets (n = 10 000: ≤ 10 s and ≤ 2 GiB; n = 20 000: ≤ 40 s and ≤ 8 GiB) and whether
  the row meets them (blank for other n);
* ``note`` — the error of a failed case, or a warning when other processes kept the CPUs
  busy during the fit (measured from ``/proc/stat`` minus the child's own CPU time), which
  makes its time unreliable on a small shared machine.

A case that fails (e.g. the fit refuses with :class:`rdx.RDXInputError` because the n×n
matrices would not fit in memory, or the child is killed) shows its message in the ``note``
column instead of stopping the benchmark.

Synthetic data (seeded): 20 Gaussian blobs with unequal widths. Each image has a shared
latent offset; A = A-centre of its blob + offset + noise. In B, four pairs of blobs are
merged (same centre) and half of each of the last two blobs is shifted away; B = B-centre
+ the same offset + independent noise. The merged pairs come out as ``b_over_a``
explanations (tight in B only), single blobs of a merged pair and split blobs as
``a_over_b`` and ``b_over_a`` ones, so both directions have real structure to find.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_core.py                      # all default cases
    .venv/bin/python benchmarks/bench_core.py --sizes 1000,2000 --dims 512
    .venv/bin/python benchmarks/bench_core.py --markdown --out /tmp/bench_core.json
    .venv/bin/python benchmarks/bench_core.py --device cuda --repeat 3
    .venv/bin/python benchmarks/bench_core.py --sizes 2000 --dims 512 --load 2

``--load N`` runs every case a second time while N busy processes compete for the CPUs
(:func:`competing_load`, one core each: a shared machine) and adds the time under load and
its ratio to the idle time. The header line ends in the SIMD level numpy and torch compute
with (:func:`simd_line`). The helpers (:func:`competing_load`, :func:`load_args`,
:func:`simd_line`, :func:`no_avx512_env`) serve the other benchmark scripts too.

Nothing here tunes the threading: the children run with what rdx chooses for every user
(rdx/threads.py; the header line records the thread count and the OpenMP wait policy).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

if __name__ == "__main__":
    # timing rdx's fit here: import rdx first, as users do (its threading and SIMD
    # choices precede numpy). Not when bench_cli.py imports this module: its yardstick
    # keeps numpy's own choice, as the original code does.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import rdx  # noqa: F401

import numpy as np  # noqa: E402

#: Default cases.
DEFAULT_SIZES = (1000, 2000, 5000, 10000, 20000)
DEFAULT_DIMS = (512, 768)
#: n → (max fit seconds, max peak RSS in GiB).
TARGETS: dict[int, tuple[float, float]] = {10000: (10.0, 2.0), 20000: (40.0, 8.0)}
#: Steps of ``RDX.timings_``, in execution order, and their column titles.
STEPS = (("representation A", "rep A"), ("representation B", "rep B"),
         ("difference", "diff"), ("a_over_b", "a_over_b"), ("b_over_a", "b_over_a"))
#: Prefix of the one line of JSON a child prints on stdout.
RESULT_MARKER = "BENCH_RESULT "
#: A row's note warns when other processes used at least this many CPUs during its fit.
OTHER_CPUS_WARN = 0.25
N_EXPLANATIONS = 5
RANDOM_STATE = 0


# ---------------------------------------------------------------------------- data
def make_representations(n: int, d: int, seed: int = 0, n_blobs: int = 20
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two clustered ``n × d`` float32 representations of the same images.

    Parameters
    ----------
    n, d : int
        Images and feature dimension (both representations).
    seed : int, default=0
        Seed of the generator; the same arguments always give the same arrays.
    n_blobs : int, default=20
        Gaussian blobs in A (must be ≥ 12: blobs 0–7 are merged in pairs in B and the last
        two are split).

    Returns
    -------
    A, B : np.ndarray of shape (n, d), float32
    blob : np.ndarray of shape (n,), int64
        Blob of each image in A.
    """
    if n_blobs < 12:
        raise ValueError("n_blobs must be at least 12")
    rng = np.random.default_rng(seed)
    blob = rng.integers(0, n_blobs, size=n)
    centres_a = rng.standard_normal((n_blobs, d), dtype=np.float32) * 0.6
    width = rng.uniform(0.7, 1.3, size=n_blobs).astype(np.float32)  # per-blob spread

    # B: blobs (0,1), (2,3), (4,5), (6,7) share a centre; the last two blobs split in two.
    centres_b = centres_a.copy()
    centres_b[1:8:2] = centres_b[0:8:2]
    split = np.isin(blob, [n_blobs - 2, n_blobs - 1]) & (rng.random(n) < 0.5)
    shift = rng.standard_normal((2, d), dtype=np.float32) * 0.6

    offset = rng.standard_normal((n, d), dtype=np.float32)  # image identity, shared by A and B
    offset *= (0.6 * width[blob])[:, None]
    A = centres_a[blob] + offset
    A += rng.standard_normal((n, d), dtype=np.float32) * (0.8 * width[blob])[:, None]
    B = centres_b[blob] + offset
    B += rng.standard_normal((n, d), dtype=np.float32) * (0.8 * width[blob])[:, None]
    B[split] += shift[blob[split] - (n_blobs - 2)]
    return A, B, blob


# ---------------------------------------------------------------------------- child
def rss_now_gib() -> float | None:
    """Current resident set size of this process in GiB (None if it cannot be read)."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (OSError, ValueError, IndexError):
        return None


def system_busy_s() -> float | None:
    """CPU seconds all processes of the machine have spent busy since boot (``/proc/stat``)."""
    try:
        with open("/proc/stat") as fh:
            f = [int(v) for v in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = f
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds (user + system, all threads) this process has used."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_rss_gib() -> float:
    """Peak resident set size of this process in GiB (``ru_maxrss`` is KiB on Linux)."""
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / 2**30 if sys.platform == "darwin" else maxrss / 2**20


def run_case(n: int, d: int, *, repeat: int = 1, device: str = "auto", seed: int = 0
             ) -> dict[str, Any]:
    """Run one case in this process and return its row (see :func:`main` for the fields).

    Errors of the fit are caught and returned in ``row["error"]``.
    """
    import rdx
    from rdx.backend import n_cpu_threads

    # no torch here: a CPU fit does not load it (threads: what torch would use)
    row: dict[str, Any] = {"n": n, "d": d, "repeat": repeat, "device_requested": device,
                           "torch_threads": n_cpu_threads(), "error": None}
    try:
        A, B, _ = make_representations(n, d, seed=seed)
        row["base_rss_gib"] = rss_now_gib()
        fit_times: list[float] = []
        best: dict[str, float] | None = None
        for _ in range(max(1, repeat)):
            model = rdx.RDX(n_explanations=N_EXPLANATIONS, random_state=RANDOM_STATE,
                            device=device)
            busy0, own0 = system_busy_s(), own_cpu_s()
            t0 = time.perf_counter()
            model.fit(A, B)
            fit_times.append(time.perf_counter() - t0)
            busy1, own1 = system_busy_s(), own_cpu_s()
            if best is None or fit_times[-1] <= min(fit_times):
                best = dict(model.timings_)
                row["fit_cpu_s"] = own1 - own0
                # average number of CPUs that *other* processes kept busy during the fit
                row["other_cpus"] = (None if busy0 is None or busy1 is None else
                                     max(0.0, (busy1 - busy0) - (own1 - own0)) / fit_times[-1])
            row["device"] = model.device_
            if model.device_.startswith("cuda"):
                import torch
                row["gpu_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
            row["cluster_sizes"] = {
                name: [len(e.members) for e in res.explanations]
                for name, res in model.directions_.items()}
            del model
        row["fit_s"] = min(fit_times)
        row["fit_s_all"] = fit_times
        row["timings_s"] = best
    except Exception as exc:  # noqa: BLE001 - every failure becomes a table row
        msg = " ".join(str(exc).split())
        row["error"] = f"{type(exc).__name__}: {msg}"
    row["peak_rss_gib"] = peak_rss_gib()
    return row


# Former private names, still imported by bench_baselines.py and bench_similarity.py.
_rss_now_gib, _system_busy_s, _own_cpu_s, _peak_rss_gib = (rss_now_gib, system_busy_s,
                                                          own_cpu_s, peak_rss_gib)


# ---------------------------------------------------------------------------- parent
#: Environment variable in which :func:`run_child` passes the wall-clock time of the spawn.
SPAWNED_AT = "RDX_BENCH_SPAWNED_AT"


def run_child(script: str, args: Sequence[str], base: dict[str, Any],
              timeout: float | None) -> dict[str, Any]:
    """Run ``script --one ARGS`` in a fresh Python process and return the row it prints.

    Shared by the benchmark scripts: a child that crashes, is killed or times out gives
    ``base`` with ``error`` set.
    """
    cmd = [sys.executable, os.path.abspath(script), "--one", *args]
    env = dict(os.environ)
    # the child's start-up time is measured from here: a process's own creation time
    # (psutil) is rounded to clock ticks and can be off by a few tenths of a second
    env[SPAWNED_AT] = repr(time.time())
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return {**base, "error": f"timed out after {timeout:g} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    tail = " ".join(proc.stderr.strip().splitlines()[-3:]) or "no output"
    how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
           else f"exit status {proc.returncode}")
    return {**base, "error": f"child {how}: {tail}"}


def run_case_subprocess(n: int, d: int, *, repeat: int, device: str, seed: int,
                        timeout: float | None) -> dict[str, Any]:
    """Run :func:`run_case` in a fresh Python process and return its row."""
    return run_child(__file__, ["--n", str(n), "--d", str(d), "--repeat", str(repeat),
                                "--device", device, "--seed", str(seed)],
                     {"n": n, "d": d, "repeat": repeat, "device_requested": device}, timeout)


def target_columns(row: dict[str, Any]) -> tuple[str, str]:
    """``(target, meets)`` cells of a row: blank when its n has no target."""
    if row["n"] not in TARGETS:
        return "", ""
    max_s, max_gib = TARGETS[row["n"]]
    target = f"≤ {max_s:g} s, ≤ {max_gib:g} GiB"
    if row.get("error") or row.get("fit_s") is None:
        return target, "no (failed)"
    misses = [what for what, ok in (("time", row["fit_s"] <= max_s),
                                    ("memory", row["peak_rss_gib"] <= max_gib)) if not ok]
    return target, "yes" if not misses else "no (" + ", ".join(misses) + ")"


def _fmt(x: float | None, digits: int = 2) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def table_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and string cells of the result table (with ``--load``: the fit time under
    load and its ratio to the idle one after ``fit s``)."""
    loaded = any("fit_s_load" in r for r in rows)
    header = ["n", "d", "fit s", *(["fit s loaded", "load/idle"] if loaded else []),
              *[title for _, title in STEPS], "base GiB", "peak GiB", "target", "meets",
              "note"]
    cells = []
    for r in rows:
        t = r.get("timings_s") or {}
        target, meets = target_columns(r)
        note = r.get("error") or ""
        if not note and r.get("gpu_peak_gib") is not None:
            note = f"GPU peak {r['gpu_peak_gib']:.2f} GiB"
        if not note and (r.get("other_cpus") or 0.0) >= OTHER_CPUS_WARN:
            note = (f"other processes kept {r['other_cpus']:.1f} CPUs busy during the fit: "
                    "time not reliable")
        if r.get("error_load"):
            note = "; ".join(filter(None, [note, f"under load: {r['error_load']}"]))
        under = [_fmt(r.get("fit_s_load")), ratio_text(r.get("fit_s_load"), r.get("fit_s"))]
        cells.append([str(r["n"]), str(r["d"]), _fmt(r.get("fit_s")),
                      *(under if loaded else []), *[_fmt(t.get(step)) for step, _ in STEPS],
                      _fmt(r.get("base_rss_gib")), _fmt(r.get("peak_rss_gib")),
                      target, meets, note])
    return header, cells


def format_plain(header: list[str], cells: list[list[str]], numeric_cols: int = 10) -> str:
    """Aligned plain-text table (the first ``numeric_cols`` columns right-aligned, last
    column unpadded)."""
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, h in enumerate(header)]
    numeric = [True] * numeric_cols + [False] * (len(header) - numeric_cols)

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w)
                 for v, w, num in zip(values[:-1], widths[:-1], numeric[:-1])]
        return "  ".join(parts + [values[-1]]).rstrip()

    rule = ["-" * w for w in widths[:-1]] + ["-" * len(header[-1])]
    out = [line(header), line(rule)]
    out += [line(c) for c in cells]
    return "\n".join(out)


def format_markdown(header: list[str], cells: list[list[str]], numeric_cols: int = 10) -> str:
    """GitHub-flavoured Markdown table (the first ``numeric_cols`` columns right-aligned)."""
    def esc(v: str) -> str:
        return v.replace("|", "\\|")

    align = ["---:" if i < numeric_cols else "---" for i in range(len(header))]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(esc(v) for v in c) + " |" for c in cells]
    return "\n".join(out)


def _git_state() -> str:
    """Short commit of the repository holding this file, with ``+dirty`` for local changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "rdx"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (commit or "unknown") + ("+dirty" if dirty else "")


def _torch_info() -> tuple[str, int, str]:
    """torch's version, threads and GPU name, asked in a child process unless torch is
    loaded here: a child's peak memory (``ru_maxrss``) starts from the RSS of the process
    that forked it, so a benchmark's parent must not hold torch (~0.5 GiB)."""
    # rdx first, as in the cases: the thread count torch runs with there
    code = ("import json, rdx, torch; print(json.dumps([torch.__version__, "
            "torch.get_num_threads(), "
            "torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none']))")
    if "torch" in sys.modules:
        import torch

        return (torch.__version__, torch.get_num_threads(),
                torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    try:
        version, threads, cuda = json.loads(proc.stdout)
    except ValueError:
        return ("unknown", 0, "unknown")
    return version, int(threads), cuda


def header_line(device: str, env: dict[str, str] | None = None) -> str:
    """One line describing the machine and software the benchmark runs on, ending in the
    SIMD level the children compute with (:func:`simd_line`; ``env``: what the benchmark
    adds to the children's environment, e.g. :func:`no_avx512_env`)."""
    import rdx

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    version, threads, cuda = _torch_info()
    chosen = rdx.threads.describe()
    return (f"rdx {rdx.__version__} (git {_git_state()}) | torch {version} ({threads} "
            f"threads) | numpy {np.__version__} | CPUs {os.cpu_count()} ({usable} usable) | "
            f"rdx threads {chosen['threads']} ({chosen['threads_from']}) | CUDA: {cuda} | "
            f"device={device} | OpenMP wait policy {chosen['omp_wait_policy']} (set by "
            f"{chosen['wait_policy_from']}) | Python {platform.python_version()} | "
            + simd_line(env))


# ---------------------------------------------------------------------------- machine
# Competing load (``--load N``): what a user's shared machine does to rdx. Each load process
# spins on one core (pure-Python arithmetic, or numpy ufuncs, which run on one thread: no BLAS
# call, so a load process never starts threads of its own). It exits by itself when its
# parent is gone (checked between short work chunks), so a benchmark that is killed does
# not leave spinning orphans; the context manager also terminates it at the end of the block,
# on an exception and on Ctrl-C.
LOAD_KINDS = ("python", "numpy")
_SPIN = """
import os, sys
kind, parent = sys.argv[1], int(sys.argv[2])
try:
    if kind == "numpy":
        import numpy as np
        a = np.linspace(0.0, 1.0, 1 << 18)      # 2 MiB: a core's cache, memory traffic too
        def work():
            for _ in range(20):
                np.sqrt(a * a + 1.0, out=a)
    else:
        def work():
            x = 0
            for i in range(100000):
                x += i * i
    while os.getppid() == parent:          # chunks of ~10 ms: gone soon after the parent
        work()
except KeyboardInterrupt:                  # Ctrl-C reaches the whole process group
    pass
"""


@contextlib.contextmanager
def competing_load(n: int, kind: str = "python") -> Iterator[list[subprocess.Popen]]:
    """``n`` busy processes (``kind``: :data:`LOAD_KINDS`) for the duration of the block.

    They start before the block (a short pause lets them reach their loop) and are
    terminated, then killed if needed, when it ends — normally, on an exception or on
    Ctrl-C. ``n`` = 0: nothing is started.
    """
    if kind not in LOAD_KINDS:
        raise ValueError(f"load kind must be one of {LOAD_KINDS}, got {kind!r}")
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(max(0, n)):
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _SPIN, kind, str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        if procs:
            time.sleep(0.5 if kind == "python" else 1.0)   # numpy's import: ~0.3 s
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def load_args(p: argparse.ArgumentParser, default: int | None = 0,
              default_text: str = "0: idle only") -> None:
    """The ``--load N`` and ``--load-kind`` options of the benchmark scripts."""
    p.add_argument("--load", type=int, default=default, metavar="N",
                   help="also run every case while N busy processes compete for the CPUs "
                        "(one core each) and show both times and their ratio (default "
                        f"{default_text})")
    p.add_argument("--load-kind", choices=LOAD_KINDS, default="python",
                   help="what the competing processes spin on (default %(default)s)")


def load_description(n: int, kind: str) -> str:
    """``2 competing python spin processes (one core each)`` for a header."""
    return (f"{n} competing {kind} spin process{'es' if n != 1 else ''} (one core each)"
            if n else "no competing load")


# The CPU's SIMD level: numpy's dispatch targets (``__cpu_features__``), torch's kernel level.
# ``--no-avx512`` runs the children as on a CPU without AVX-512: numpy's AVX-512 dispatch
# targets are switched off (NPY_DISABLE_CPU_FEATURES; its baseline cannot be), torch's ATen
# kernels are capped at AVX2 (ATEN_CPU_CAPABILITY), OpenBLAS (numpy's and scipy's wheels)
# and MKL (torch's BLAS on x86) are pinned to their AVX2 kernels (OPENBLAS_CORETYPE,
# MKL_ENABLE_INSTRUCTIONS). None of these sets a thread count or a wait policy.
_SIMD_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import rdx   # first, as the rdx command does: its SIMD choice is made before numpy loads
try:
    from numpy._core._multiarray_umath import (__cpu_baseline__ as base,
                                               __cpu_dispatch__ as disp, __cpu_features__ as f)
except ImportError:   # numpy < 2
    from numpy.core._multiarray_umath import (__cpu_baseline__ as base,
                                              __cpu_dispatch__ as disp, __cpu_features__ as f)
out = {"numpy_on": [t for t in [*base, *disp] if f.get(t)],
       "avx512_cpu": bool(f.get("AVX512F")), "rdx": rdx.simd.describe()}
if len(sys.argv) > 2:   # row-sort speed, one thread: rdx's rank pass sorts rows like these
    import time
    import numpy as np
    rng = np.random.default_rng(0)
    for name, x in (("int64", rng.integers(0, 2**62, size=(200, 10000))),
                    ("float32", rng.random((200, 10000), dtype=np.float32))):
        best = float("inf")
        for _ in range(3):
            y = x.copy()
            t0 = time.perf_counter()
            y.sort(axis=1)
            best = min(best, time.perf_counter() - t0)
        out["sort_" + name] = x.size / best / 1e6
try:
    import torch
    out["torch"] = torch.backends.cpu.get_cpu_capability()
except Exception as exc:  # noqa: BLE001 - torch missing or too old: say so
    out["torch"] = f"unknown ({type(exc).__name__})"
print(json.dumps(out))
"""


def _numpy_cpu_tables() -> tuple[dict[str, bool], list[str], list[str]]:
    # imported here: this module is imported by bench_cli's yardstick, after numpy
    from rdx.simd import numpy_cpu_tables

    return numpy_cpu_tables()


def no_avx512_env() -> dict[str, str]:
    """Environment variables under which a child process computes as on a CPU without
    AVX-512 (see the comment above :data:`_SIMD_CHILD`)."""
    feats, base, disp = _numpy_cpu_tables()
    # numpy ≥ 2.3 groups AVX-512 as the X86_V4 target, older numpy names AVX512F, _SKX, ...
    targets = [t for t in disp if (t.startswith("AVX512") or t == "X86_V4") and t not in base]
    env = {"ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell",
           "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    if targets:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(targets)
    return env


def simd_info(env: dict[str, str] | None = None, *, sort: bool = False) -> dict[str, Any]:
    """What a child process started with ``env`` added to this environment computes with:
    numpy's enabled targets, torch's level, rdx's SIMD choice (:func:`rdx.simd.describe`)
    and, with ``sort``, numpy's row-sort speed on one thread (M values/s, rows of 10 000
    int64 keys and float32 values). Asked in a child because numpy and torch read those
    variables once, at import."""
    child_env = {**os.environ, **(env or {})}
    repo = str(Path(__file__).resolve().parent.parent)
    proc = subprocess.run([sys.executable, "-c", _SIMD_CHILD, repo, *(["sort"] if sort else [])],
                          capture_output=True, text=True, env=child_env, check=False)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": " ".join(proc.stderr.split()[-12:])}


def simd_line(env: dict[str, str] | None = None) -> str:
    """One header line: the SIMD level numpy and torch compute with in a child process
    started with ``env`` added to this environment (``--no-avx512``: :func:`no_avx512_env`).
    Asked in a child because numpy and torch read those variables once, at import."""
    info = simd_info(env)
    if "error" in info:
        return f"SIMD: unknown ({info['error']})"
    on = info["numpy_on"]
    best = on[-1] if on else "none"
    avx512 = any(t.startswith("AVX512") or t == "X86_V4" for t in on)
    text = (f"SIMD: numpy {best} (AVX-512 kernels {'on' if avx512 else 'off'}), torch "
            f"{info['torch']}; CPU has AVX-512: {'yes' if info['avx512_cpu'] else 'no'}")
    if info["rdx"]["numpy_simd_from"] == "rdx":
        text += " (rdx chose numpy's AVX2 kernels: AMD Zen 4, see rdx.simd)"
    if env:
        text += " | emulating a CPU without AVX-512: " + " ".join(
            f"{k}={v!r}" for k, v in sorted(env.items()))
    return text


def ratio_text(loaded: float | None, idle: float | None) -> str:
    """``2.3×``: time under load over idle time (blank when either is missing)."""
    if not loaded or not idle:
        return ""
    return f"{loaded / idle:.1f}×"


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


_int_list = int_list


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int_list, default=list(DEFAULT_SIZES),
                   help="comma-separated n (images); default %(default)s")
    p.add_argument("--dims", type=int_list, default=list(DEFAULT_DIMS),
                   help="comma-separated d (features of A and B); default %(default)s")
    p.add_argument("--repeat", type=int, default=1,
                   help="fits per case in the same child; the fastest is reported")
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds after which a case is abandoned (default %(default)s)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--out", type=Path, help="also write the rows (and header) as JSON here")
    load_args(p)
    # internal: run one case in this process and print its row as JSON
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--d", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.one and (args.n is None or args.d is None):
        p.error("--one needs --n and --d")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns the process exit status (0 even if cases failed)."""
    args = parse_args(argv)
    if args.one:
        row = run_case(args.n, args.d, repeat=args.repeat, device=args.device, seed=args.seed)
        print(RESULT_MARKER + json.dumps(row), flush=True)
        return 0

    head = header_line(args.device) + f" | load: {load_description(args.load, args.load_kind)}"
    print(head, flush=True)
    t_start = time.perf_counter()
    rows = []
    for n in args.sizes:
        for d in args.dims:
            row = run_case_subprocess(n, d, repeat=args.repeat, device=args.device,
                                      seed=args.seed, timeout=args.timeout)
            if args.load:
                with competing_load(args.load, args.load_kind):
                    under = run_case_subprocess(n, d, repeat=args.repeat, device=args.device,
                                                seed=args.seed, timeout=args.timeout)
                row["fit_s_load"], row["error_load"] = under.get("fit_s"), under["error"]
            rows.append(row)
            status = row["error"] or (f"fit {row['fit_s']:.2f} s, "
                                      f"peak {row['peak_rss_gib']:.2f} GiB")
            if args.load:
                status += (f"; under load {row['fit_s_load']:.2f} s" if row["fit_s_load"]
                           else f"; under load: {row['error_load']}")
            print(f"  n={n:>6} d={d:>4}: {status}", file=sys.stderr, flush=True)
    total = time.perf_counter() - t_start

    header, cells = table_rows(rows)
    numeric = 12 if args.load else 10
    print(format_markdown(header, cells, numeric) if args.markdown
          else format_plain(header, cells, numeric))
    targets = "; ".join(f"n={n}: ≤ {s:g} s and ≤ {g:g} GiB" for n, (s, g) in TARGETS.items())
    print(f"\ntargets: {targets}. Total benchmark time {total:.1f} s.")
    if args.out:
        from rdx.io import write_json_atomic

        write_json_atomic(args.out, {"header": head, "total_s": total, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
