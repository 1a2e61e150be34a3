"""Time and memory of every similarity measure (``rdx.similarity``) at n = 10k, d = 768.

Each (measure, n, d) case runs ``rdx.similarity.similarity(name, A, B)`` with the measure's
default parameters in a fresh child process, so the peak resident memory reported for a
case is that case's alone (it includes the Python/torch baseline and the two float32 input
arrays). The data are :func:`bench_core.make_representations` (20 clustered blobs, merged
and split blobs in B), so every measure sees real shared structure.

Columns: ``time s`` (wall time of the ``similarity`` call; with ``--repeat R`` the fastest
of R calls), ``base GiB`` (resident memory of the child before the first call), ``peak GiB``
(its peak RSS, ``getrusage``), ``value`` (the measure's value), ``null s/draw`` (with
``--permutations P``: seconds per permutation-null draw of ``calibrate``, i.e. its time
minus the one-off preparation, divided by P) and a note (errors, GPU peak memory, or a
warning when other processes kept the CPUs busy during the measurement, which makes the
time unreliable on a small shared machine).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_similarity.py --sizes 10000
    .venv/bin/python benchmarks/bench_similarity.py --measures rsa,cka_rbf --sizes 2000,10000
    .venv/bin/python benchmarks/bench_similarity.py --permutations 20 --markdown \\
        --out /tmp/bench_similarity.json
    .venv/bin/python benchmarks/bench_similarity.py --sizes 2000 --load 2

``--load N`` runs every case a second time while N busy processes compete for the CPUs
(``bench_core.competing_load``) and adds that time and its ratio to the idle time.

Two fixed cases (every figure is printed with the CPU's SIMD level):

``--guide-example`` times the similarity guide's example, ``rdx similarity A.npy B.npy
--measure cka_linear --measure rsa --permutations 1000 --bootstrap 1000 --seed 0``, on the
digits (n = 1797: A the 64 pixels, B a fixed random tanh layer of 128 units on them, with
noise) as a whole ``rdx`` process, idle and while ``--load N`` (default 2 here) busy
processes compete, with the estimate the command printed before it started; then its parts
(each measure's value, null and interval) in one child process.

``--fixed-cost`` times one RSA call (correlation RDMs, Spearman) at n = 200 (64 and 100
features), where the arithmetic is negligible: rdx's ``similarity("rsa", ...)`` against
rsatoolbox's ``compare(calc_rdm(...), calc_rdm(...), method="spearman")`` on the same data,
the median of ``--calls`` calls after a first one (the two libraries' calls alternate, so
that both see the same load), in a fresh process.

    .venv/bin/python benchmarks/bench_similarity.py --guide-example
    .venv/bin/python benchmarks/bench_similarity.py --fixed-cost
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# first, as users import it: rdx chooses the threading and numpy's SIMD kernels
# before numpy and torch load (bench_core imports numpy)
import rdx  # noqa: F401
from bench_core import (OTHER_CPUS_WARN, RESULT_MARKER, _int_list, _own_cpu_s,
                        _peak_rss_gib, _rss_now_gib, _system_busy_s, competing_load,
                        format_markdown, format_plain, header_line, load_args,
                        load_description, make_representations, ratio_text, run_child,
                        simd_line)


MEASURE_NAMES = ("cka_linear", "cka_linear_biased", "cka_rbf", "rsa", "mutual_knn", "cknna",
                 "jaccard_knn", "procrustes", "svcca", "pwcca")


def run_case(name: str, n: int, d: int, *, repeat: int = 1, permutations: int = 0,
             device: str = "auto", seed: int = 0) -> dict[str, Any]:
    """One case in this process; errors are returned in ``row["error"]``."""
    import torch

    from rdx.backend import resolve_device
    from rdx.similarity import calibrate, similarity

    row: dict[str, Any] = {"measure": name, "n": n, "d": d, "repeat": repeat,
                           "permutations": permutations, "error": None,
                           "torch_threads": torch.get_num_threads()}
    try:
        A, B, _ = make_representations(n, d, seed=seed)
        dev = resolve_device(device)
        row["device"] = str(dev)
        if dev.type == "cuda":   # the measures compute where their tensors live
            A, B = torch.from_numpy(A).to(dev), torch.from_numpy(B).to(dev)
        row["base_rss_gib"] = _rss_now_gib()
        times = []
        for _ in range(max(1, repeat)):
            busy0, own0 = _system_busy_s(), _own_cpu_s()
            t0 = time.perf_counter()
            row["value"] = similarity(name, A, B)
            times.append(time.perf_counter() - t0)
            busy1, own1 = _system_busy_s(), _own_cpu_s()
            if times[-1] <= min(times):
                row["other_cpus"] = (None if busy0 is None or busy1 is None else
                                     max(0.0, (busy1 - busy0) - (own1 - own0)) / times[-1])
        row["time_s"] = min(times)
        if permutations:
            t0 = time.perf_counter()
            calibrate(name, A, B, permutations=0, seed=seed)
            t_prep = time.perf_counter() - t0
            t0 = time.perf_counter()
            res = calibrate(name, A, B, permutations=permutations, seed=seed)
            row["calibrate_s"] = time.perf_counter() - t0
            row["null_s_per_draw"] = max(0.0, row["calibrate_s"] - t_prep) / permutations
            row["p_value"] = res["p_value"]
        if dev.type == "cuda":
            row["gpu_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    except Exception as exc:  # noqa: BLE001 - every failure becomes a table row
        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    row["peak_rss_gib"] = _peak_rss_gib()
    return row


def run_case_subprocess(name: str, n: int, d: int, *, repeat: int, permutations: int,
                        device: str, seed: int, timeout: float) -> dict[str, Any]:
    """:func:`run_case` in a fresh Python process (a crash or timeout gives an error row)."""
    return run_child(__file__, ["--measure", name, "--n", str(n), "--d", str(d), "--repeat",
                                str(repeat), "--permutations", str(permutations), "--device",
                                device, "--seed", str(seed)],
                     {"measure": name, "n": n, "d": d}, timeout)


#: The similarity guide's example: measures and draw counts.
GUIDE_MEASURES = ("cka_linear", "rsa")
GUIDE_DRAWS = 1000


def guide_inputs(folder: Path) -> tuple[Path, Path]:
    """The guide example's inputs, written to ``folder``: the digits' pixels (1797 × 64) and
    a fixed random tanh layer of 128 units on them plus noise (seed 0), float32."""
    import numpy as np
    from sklearn.datasets import load_digits

    A = load_digits().data.astype(np.float32)
    rng = np.random.default_rng(0)
    B = np.tanh(A @ rng.normal(size=(64, 128)) / 8) + 0.1 * rng.normal(size=(len(A), 128))
    paths = folder / "A.npy", folder / "B.npy"
    np.save(paths[0], A)
    np.save(paths[1], B.astype(np.float32))
    return paths


def run_guide_command(a: Path, b: Path, out: Path, draws: int) -> dict[str, Any]:
    """The guide's command as a whole ``rdx`` process: wall and CPU seconds, the estimate
    it printed before starting, its exit status."""
    import re
    import resource
    import subprocess

    cmd = [sys.executable, "-m", "rdx", "similarity", str(a), str(b),
           *[x for m in GUIDE_MEASURES for x in ("--measure", m)],
           "--permutations", str(draws), "--bootstrap", str(draws), "--seed", "0",
           "--out", str(out)]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = _system_busy_s()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    busy1 = _system_busy_s()
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    first = re.search(r"— about ([^(]+) \(estimate\)", proc.stderr)
    return {"wall_s": wall, "rc": proc.returncode, "cpu_s": cpu,
            # CPUs that other processes (the competing load included) kept busy, on average
            "other_cpus": (None if busy0 is None or busy1 is None
                           else max(0.0, (busy1 - busy0) - cpu) / wall),
            "estimate": first.group(1).strip() if first else None,
            "error": None if proc.returncode == 0 else proc.stderr.strip()[-400:]}


def guide_parts(a: str, b: str, draws: int) -> dict[str, Any]:
    """Each measure's value, permutation null and interval of the guide's example, timed
    in this process (``calibrate`` with one kind of draw at a time)."""
    import numpy as np

    from rdx.similarity import calibrate

    A, B = np.load(a), np.load(b)
    row: dict[str, Any] = {}
    for name in GUIDE_MEASURES:
        t0 = time.perf_counter()
        calibrate(name, A, B)
        value = time.perf_counter() - t0
        t0 = time.perf_counter()
        calibrate(name, A, B, permutations=draws)
        perm = time.perf_counter() - t0 - value
        t0 = time.perf_counter()
        calibrate(name, A, B, bootstrap=draws)
        boot = time.perf_counter() - t0 - value
        row[name] = {"value_s": value, "permutations_s": perm, "bootstrap_s": boot}
    return row


def fixed_cost(calls: int) -> dict[str, Any]:
    """One RSA call at n = 200 in rdx and in rsatoolbox: the first call and the median of
    ``calls`` more (milliseconds), the two libraries' calls alternating so that both see
    the same load."""
    import statistics

    import numpy as np

    from rdx.similarity import similarity

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 64))
    Y = np.tanh(X @ rng.normal(size=(64, 100)) / 8) + 0.1 * rng.normal(size=(200, 100))
    fns = {"rdx": lambda: similarity("rsa", X, Y)}
    row: dict[str, Any] = {}
    try:
        from rsatoolbox.data import Dataset
        from rsatoolbox.rdm import calc_rdm, compare

        fns["rsatoolbox"] = lambda: compare(
            calc_rdm(Dataset(X), method="correlation"),
            calc_rdm(Dataset(Y), method="correlation"), method="spearman")[0, 0]
    except ImportError as exc:
        row["rsatoolbox_error"] = f"rsatoolbox not importable ({exc}); pip install rsatoolbox"
    times: dict[str, list[float]] = {name: [] for name in fns}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        row[f"{name}_value"] = float(fn())
        row[f"{name}_first_ms"] = 1e3 * (time.perf_counter() - t0)
    for _ in range(calls):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    for name, ts in times.items():
        row[f"{name}_ms"] = 1e3 * statistics.median(ts)
    return row


def main_guide_example(args: argparse.Namespace, simd: str) -> int:
    """``--guide-example``: the whole process idle and under load, then its parts."""
    import tempfile

    load = 2 if args.load is None else args.load
    with tempfile.TemporaryDirectory() as tmp:
        a, b = guide_inputs(Path(tmp))
        what = (f"guide example (rdx similarity, {', '.join(GUIDE_MEASURES)}, n = 1797, "
                f"{args.draws} permutations + {args.draws} bootstrap draws)")
        rows: dict[str, dict[str, Any]] = {}
        for key in ("idle", "load") if load else ("idle",):
            if key == "idle":
                rows[key] = run_guide_command(a, b, Path(tmp) / "s.json", args.draws)
                how = "idle"
            else:
                with competing_load(load, args.load_kind):
                    rows[key] = run_guide_command(a, b, Path(tmp) / "s.json", args.draws)
                how = f"under {load_description(load, args.load_kind)}"
            r = rows[key]
            others = ("" if r.get("other_cpus") is None
                      else f"; other processes kept {r['other_cpus']:.1f} CPUs busy")
            text = r["error"] or (f"{r['wall_s']:.1f} s wall ({r['wall_s'] / 60:.1f} min), "
                                  f"{r['cpu_s']:.1f} s CPU{others}; estimate printed "
                                  f"before it started: about {r['estimate']}")
            print(f"{what} {how}: {text} | {simd}", flush=True)
        parts = run_child(__file__, ["--one-part", "guide", "--a", str(a), "--b", str(b),
                                     "--draws", str(args.draws)], {}, args.timeout)
    if parts.get("error"):
        print(f"parts: {parts['error']}")
    for name in GUIDE_MEASURES:
        p = parts.get(name)
        if p:
            print(f"  part {name:>10}: value {p['value_s']:.2f} s, {args.draws} permutations "
                  f"{p['permutations_s']:.1f} s, {args.draws} interval draws "
                  f"{p['bootstrap_s']:.1f} s (no added load) | {simd}")
    if args.out:
        from rdx.io import write_json_atomic

        write_json_atomic(args.out, {"simd": simd, "whole": rows, "parts": parts})
    return 0 if all(r["rc"] == 0 for r in rows.values()) else 1


def main_fixed_cost(args: argparse.Namespace, simd: str) -> int:
    """``--fixed-cost``: one RSA call at n = 200, rdx against rsatoolbox."""
    r = run_child(__file__, ["--one-part", "fixed", "--calls", str(args.calls)], {},
                  args.timeout)
    if r.get("error"):
        print(f"fixed cost: {r['error']}")
        return 1
    print(f"RSA at n = 200 (correlation RDMs, Spearman), per call: rdx {r['rdx_ms']:.1f} ms "
          f"(first call {r['rdx_first_ms']:.0f} ms) | {simd}")
    if "rsatoolbox_ms" in r:
        print(f"                                       rsatoolbox {r['rsatoolbox_ms']:.1f} "
              f"ms (first call {r['rsatoolbox_first_ms']:.0f} ms); rdx/rsatoolbox "
              f"{r['rdx_ms'] / r['rsatoolbox_ms']:.2f}; values {r['rdx_value']:.12f} and "
              f"{r['rsatoolbox_value']:.12f} | {simd}")
    else:
        print(r["rsatoolbox_error"])
    if args.out:
        from rdx.io import write_json_atomic

        write_json_atomic(args.out, {"simd": simd, **r})
    return 0


def table(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The result table (with ``--load``: the time under load and load/idle after ``time s``)."""
    loaded = any("time_s_load" in r for r in rows)
    header = ["measure", "n", "d", "time s", *(["loaded s", "load/idle"] if loaded else []),
              "base GiB", "peak GiB", "value", "null s/draw", "note"]
    cells = []
    for r in rows:
        def f(key: str, digits: int = 2, r: dict[str, Any] = r) -> str:
            return "" if r.get(key) is None else f"{r[key]:.{digits}f}"

        note = r.get("error") or ""
        if not note and r.get("gpu_peak_gib") is not None:
            note = f"GPU peak {r['gpu_peak_gib']:.2f} GiB"
        if not note and (r.get("other_cpus") or 0.0) >= OTHER_CPUS_WARN:
            note = (f"other processes kept {r['other_cpus']:.1f} CPUs busy: time not "
                    "reliable")
        if r.get("error_load"):
            note = "; ".join(filter(None, [note, f"under load: {r['error_load']}"]))
        under = [f("time_s_load"), ratio_text(r.get("time_s_load"), r.get("time_s"))]
        cells.append([r["measure"], str(r["n"]), str(r["d"]), f("time_s"),
                      *(under if loaded else []), f("base_rss_gib"), f("peak_rss_gib"),
                      f("value", 4), f("null_s_per_draw", 3), note])
    return header, cells


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--measures", default=",".join(MEASURE_NAMES),
                   help="comma-separated measure names (default: all)")
    p.add_argument("--sizes", type=_int_list, default=[10000],
                   help="comma-separated n (images); default %(default)s")
    p.add_argument("--dims", type=_int_list, default=[768],
                   help="comma-separated d (features of A and B); default %(default)s")
    p.add_argument("--repeat", type=int, default=1, help="calls per case; fastest reported")
    p.add_argument("--permutations", type=int, default=0,
                   help="also time calibrate() with this many null draws (default 0)")
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds after which a case is abandoned (default %(default)s)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--out", type=Path, help="also write the rows (and header) as JSON here")
    load_args(p, default=None, default_text="0: idle only; 2 with --guide-example")
    p.add_argument("--guide-example", action="store_true",
                   help="time the similarity guide's example as a whole process, idle and "
                        "under --load (module docstring)")
    p.add_argument("--draws", type=int, default=GUIDE_DRAWS,
                   help="--guide-example: permutations and bootstrap draws (default "
                        "%(default)s, the guide's)")
    p.add_argument("--fixed-cost", action="store_true",
                   help="time one RSA call at n = 200, rdx against rsatoolbox")
    p.add_argument("--calls", type=int, default=50,
                   help="--fixed-cost: calls timed after the first (default %(default)s)")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--one-part", choices=("guide", "fixed"), help=argparse.SUPPRESS)
    p.add_argument("--a", help=argparse.SUPPRESS)
    p.add_argument("--b", help=argparse.SUPPRESS)
    p.add_argument("--measure", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--d", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeat < 1 or args.permutations < 0:
        p.error("--repeat must be ≥ 1 and --permutations ≥ 0")
    if args.one_part == "guide":
        print(RESULT_MARKER + json.dumps(guide_parts(args.a, args.b, args.draws)), flush=True)
        return 0
    if args.one_part == "fixed":
        print(RESULT_MARKER + json.dumps(fixed_cost(args.calls)), flush=True)
        return 0
    if args.draws < 1 or args.calls < 1:
        p.error("--draws and --calls must be ≥ 1")
    if args.guide_example or args.fixed_cost:
        head = header_line(args.device)
        print(head, flush=True)
        simd = head.rsplit(" | ", 1)[-1] if "SIMD" in head.rsplit(" | ", 1)[-1] \
            else simd_line()
        rc = 0
        if args.fixed_cost:
            rc |= main_fixed_cost(args, simd)
        if args.guide_example:
            rc |= main_guide_example(args, simd)
        return rc
    if args.load is None:
        args.load = 0
    if args.one:
        row = run_case(args.measure, args.n, args.d, repeat=args.repeat,
                       permutations=args.permutations, device=args.device, seed=args.seed)
        print(RESULT_MARKER + json.dumps(row), flush=True)
        return 0
    names = [m.strip() for m in args.measures.split(",") if m.strip()]
    unknown = sorted(set(names) - set(MEASURE_NAMES))
    if unknown:
        p.error(f"unknown measure(s) {unknown}; choose from {', '.join(MEASURE_NAMES)}")
    head = header_line(args.device) + f" | load: {load_description(args.load, args.load_kind)}"
    print(head, flush=True)
    t_start = time.perf_counter()
    rows = []
    for n in args.sizes:
        for d in args.dims:
            for name in names:
                kw = dict(repeat=args.repeat, permutations=args.permutations,
                          device=args.device, seed=args.seed, timeout=args.timeout)
                row = run_case_subprocess(name, n, d, **kw)
                if args.load:
                    with competing_load(args.load, args.load_kind):
                        under = run_case_subprocess(name, n, d, **kw)
                    row["time_s_load"], row["error_load"] = (under.get("time_s"),
                                                             under.get("error"))
                rows.append(row)
                status = row.get("error") or (f"{row['time_s']:.2f} s, peak "
                                              f"{row['peak_rss_gib']:.2f} GiB")
                print(f"  {name:>17} n={n:>6} d={d:>4}: {status}", file=sys.stderr,
                      flush=True)
    total = time.perf_counter() - t_start
    header, cells = table(rows)
    numeric = 10 if args.load else 8
    print(format_markdown(header, cells, numeric) if args.markdown
          else format_plain(header, cells, numeric))
    print(f"\nTotal benchmark time {total:.1f} s.")
    if args.out:
        from rdx.io import write_json_atomic

        write_json_atomic(args.out, {"header": head, "total_s": total, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
