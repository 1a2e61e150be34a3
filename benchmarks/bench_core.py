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

Nothing here tunes the threading: the children run with what rdx chooses for every user
(rdx/threads.py; the header line records the thread count and the OpenMP wait policy).
"""
from __future__ import annotations

import argparse
import os
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

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
    """Header and string cells of the result table."""
    header = ["n", "d", "fit s", *[title for _, title in STEPS], "base GiB", "peak GiB",
              "target", "meets", "note"]
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
        cells.append([str(r["n"]), str(r["d"]), _fmt(r.get("fit_s")),
                      *[_fmt(t.get(step)) for step, _ in STEPS],
                      _fmt(r.get("base_rss_gib")), _fmt(r.get("peak_rss_gib")),
                      target, meets, note])
    return header, cells


def format_plain(header: list[str], cells: list[list[str]]) -> str:
    """Aligned plain-text table (numbers right-aligned, last column unpadded)."""
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, h in enumerate(header)]
    numeric = [True] * 10 + [False] * (len(header) - 10)

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w)
                 for v, w, num in zip(values[:-1], widths[:-1], numeric[:-1])]
        return "  ".join(parts + [values[-1]]).rstrip()

    rule = ["-" * w for w in widths[:-1]] + ["-" * len(header[-1])]
    out = [line(header), line(rule)]
    out += [line(c) for c in cells]
    return "\n".join(out)


def format_markdown(header: list[str], cells: list[list[str]]) -> str:
    """GitHub-flavoured Markdown table (numbers right-aligned)."""
    def esc(v: str) -> str:
        return v.replace("|", "\\|")

    align = ["---:" if i < 10 else "---" for i in range(len(header))]
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


def header_line(device: str) -> str:
    """One line describing the machine and software the benchmark runs on."""
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
            f"device={device} | OMP_WAIT_POLICY={chosen['omp_wait_policy']} (set by "
            f"{chosen['wait_policy_from']}) | Python {platform.python_version()}")


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

    head = header_line(args.device)
    print(head, flush=True)
    t_start = time.perf_counter()
    rows = []
    for n in args.sizes:
        for d in args.dims:
            row = run_case_subprocess(n, d, repeat=args.repeat, device=args.device,
                                      seed=args.seed, timeout=args.timeout)
            rows.append(row)
            status = row["error"] or (f"fit {row['fit_s']:.2f} s, "
                                      f"peak {row['peak_rss_gib']:.2f} GiB")
            print(f"  n={n:>6} d={d:>4}: {status}", file=sys.stderr, flush=True)
    total = time.perf_counter() - t_start

    header, cells = table_rows(rows)
    print(format_markdown(header, cells) if args.markdown else format_plain(header, cells))
    targets = "; ".join(f"n={n}: ≤ {s:g} s and ≤ {g:g} GiB" for n, (s, g) in TARGETS.items())
    print(f"\ntargets: {targets}. Total benchmark time {total:.1f} s.")
    if args.out:
        from rdx.io import write_json_atomic

        write_json_atomic(args.out, {"header": head, "total_s": total, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
