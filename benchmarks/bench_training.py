"""What rdx's fixed training thread count costs: whole-process ``rdx train --preset digits``.

rdx's trainers run torch on :data:`rdx.threads.TRAINING_THREADS` threads on every machine,
so that a seed gives the same checkpoint whatever the core count
(:func:`rdx.backend.reproducible_training`). This script times the whole process of
``rdx train --preset digits`` (6 epochs of the ConvNet on 1797 images resized to 28×28,
174 steps, 7 checkpoints with their accuracies) trained on that count, as users run it, and
on other counts — by default the one rdx uses for the rest of its work on this machine
(:func:`rdx.threads.num_threads`), which is what training used before its count was fixed.
Each count runs ``--repeat`` times idle and ``--repeat`` times while ``--load`` busy
processes compete for the cores (:func:`bench_core.competing_load`); the table shows the
best of each, the CPU seconds of the best idle run and a digest of the final weights (every
run of one count gives the same digest; the fixed count's is the one any machine of this
SIMD level gets). The header names the SIMD level numpy and torch compute with.

The other counts are set inside the child process (it replaces
``rdx.threads.TRAINING_THREADS`` before rdx's command line runs): nothing exports a thread
count or an OpenMP wait policy, and every child gets what rdx chooses for its users
(:mod:`rdx.threads`).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_training.py                 # fixed vs machine, best of 3
    .venv/bin/python benchmarks/bench_training.py --threads 1,2,4 --repeat 1 --load 0
    .venv/bin/python benchmarks/bench_training.py --markdown --out /tmp/bench_training.json
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parent.parent
# this checkout's rdx first (also when another one is installed), then the other benchmarks
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from bench_cli import _best, _run_timed  # noqa: E402
from bench_core import (competing_load, format_markdown, format_plain,  # noqa: E402
                        header_line, int_list, load_args, load_description, ratio_text)

#: The child: ``rdx train --preset digits --out OUT`` exactly as the ``rdx`` command runs it
#: (:func:`rdx.cli.run`), its trainers on THREADS torch threads ("fixed": rdx's own count).
#: With CPUS > 0 the child first narrows its CPU affinity to that many CPUs, before rdx is
#: imported: a machine with fewer cores, as rdx sees it (rdx.threads reads the affinity).
CHILD = """
import os, sys
cpus = int(sys.argv[3])
if cpus:
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cpus])
import rdx.threads
if sys.argv[1] != "fixed":
    rdx.threads.TRAINING_THREADS = int(sys.argv[1])
from rdx.cli import run
sys.argv = ["rdx", "train", "--preset", "digits", "--out", sys.argv[2]]
run()
"""

#: Digest of the weights in ``last.pt`` (a child: the parent holds no torch, so that the
#: timed children's peak memory does not start from its RSS).
DIGEST = """
import hashlib, sys, torch
sd = torch.load(sys.argv[1], weights_only=True)["state_dict"]
h = hashlib.sha256()
for k in sorted(sd):
    h.update(k.encode()); h.update(sd[k].numpy().tobytes())
print(h.hexdigest()[:16])
"""


def weights_digest(last: Path) -> str:
    """The first 16 hex digits of the SHA-256 of ``last``'s weights (``?`` if unreadable)."""
    proc = subprocess.run([sys.executable, "-c", DIGEST, str(last)], capture_output=True,
                          text=True, check=False)
    return proc.stdout.strip() or "?"


def run_count(label: str, cpus: int, work: Path, *, repeat: int, load: int, load_kind: str,
              timeout: float) -> dict[str, Any]:
    """``repeat`` idle and ``repeat`` loaded runs of one thread count on ``cpus`` CPUs (0:
    all), each into a fresh folder; its row (runs and the weights' digest of every run)."""
    row: dict[str, Any] = {"threads": label, "cpus": cpus, "idle": [], "load": [],
                           "digests": []}
    for i, loaded in enumerate([False] * repeat + [True] * (repeat if load else 0)):
        out = work / f"{label}_{cpus}_{i}"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-c", CHILD, label, str(out), str(cpus)]
        if loaded:
            with competing_load(load, load_kind):
                res = _run_timed(cmd, timeout, work)
        else:
            res = _run_timed(cmd, timeout, work)
        row["load" if loaded else "idle"].append(res)
        row["digests"].append(weights_digest(out / "digits" / "last.pt"))
        shutil.rmtree(out, ignore_errors=True)
        print(f"  {cpus or 'all'} CPUs, threads {label}: {'under load' if loaded else 'idle'} {res['wall_s']:.1f} s"
              f" {res['error'] or ''}", file=sys.stderr, flush=True)
    return row


def _ratio(value: float | None, base: float | None) -> str:
    """``1.07×``: ``value`` over ``base`` (blank when either is missing)."""
    return f"{value / base:.2f}×" if value and base else ""


def table(rows: Sequence[dict[str, Any]], load: int) -> tuple[list[str], list[list[str]]]:
    """One row per thread count (of one CPU count): best idle and loaded wall seconds, CPU
    seconds, and the time relative to the first row (the fixed count)."""
    header = ["CPUs", "torch threads", "idle s", "idle CPU s",
              *([f"load {load} s", "load/idle"] if load else []), "vs fixed idle",
              *(["vs fixed load"] if load else []), "weights", "note"]
    base_i, base_l = _best(rows[0]["idle"]), _best(rows[0]["load"])
    cells = []
    for r in rows:
        idle, under = _best(r["idle"]), _best(r["load"])
        ok_i = idle is not None and not idle["error"]
        ok_l = under is not None and not under["error"]
        notes = [x["error"] for x in (idle, under) if x is not None and x["error"]]
        if len(set(r["digests"])) > 1:
            notes.append("runs gave different weights")
        cells.append([
            str(r["cpus_shown"]), r["threads"], f"{idle['wall_s']:.1f}" if ok_i else "—",
            f"{idle['cpu_s']:.1f}" if ok_i else "—",
            *([f"{under['wall_s']:.1f}" if ok_l else "—",
               ratio_text(under["wall_s"] if ok_l else None,
                          idle["wall_s"] if ok_i else None)] if load else []),
            _ratio(idle["wall_s"] if ok_i else None, base_i and base_i["wall_s"]),
            *([_ratio(under["wall_s"] if ok_l else None, base_l and base_l["wall_s"])]
              if load else []),
            ",".join(sorted(set(r["digests"]))), "; ".join(notes)])
    return header, cells


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int_list, default=[1], metavar="N,...",
                   help="torch thread counts to compare with the fixed one, besides the "
                        "count rdx uses for its other work on the (emulated) machine "
                        "(default: 1)")
    p.add_argument("--cpus", type=int_list, metavar="N,...",
                   help="also emulate machines with N CPUs (the child's affinity), idle "
                        "only: the competing load is not confined to those CPUs "
                        "(default: 1)")
    p.add_argument("--repeat", type=int, default=3, help="runs per count and load (best of)")
    load_args(p, default=2, default_text="2")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--out", type=Path, help="also write the rows as JSON here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import rdx.threads

    fixed = rdx.threads.TRAINING_THREADS
    usable = rdx.threads.affinity_cpus()
    machines = [(0, usable, args.load)] + [(n, n, 0) for n in (args.cpus or [1])
                                           if n < usable]
    head = header_line("cpu") + f" | load: {load_description(args.load, args.load_kind)}"
    print(head, flush=True)
    t0 = time.perf_counter()
    rows, cells = [], []
    with tempfile.TemporaryDirectory(prefix="bench_training_") as tmp:
        for cpus, shown, load in machines:
            # rdx's count for its other work there: what training used before it was fixed
            machine = rdx.threads.choose_threads(affinity=shown).n
            counts = [n for n in dict.fromkeys([machine, *args.threads]) if n != fixed]
            group = [run_count(label, cpus, Path(tmp), repeat=args.repeat, load=load,
                               load_kind=args.load_kind, timeout=args.timeout)
                     for label in ["fixed", *map(str, counts)]]
            for r in group:
                r["cpus_shown"] = shown
                if r["threads"] == "fixed":
                    r["threads"] = f"{fixed} (fixed)"
                elif r["threads"] == str(machine):
                    r["threads"] += " (rdx's count)"
            header, part = table(group, args.load)
            rows += group
            cells += part
    fmt = format_markdown if args.markdown else format_plain
    print(f"\nrdx train --preset digits, whole process (wall seconds, best of {args.repeat}; "
          "emulated machines idle only):\n")
    print(fmt(header, cells, len(header) - 2))
    total = time.perf_counter() - t0
    print(f"\nTotal benchmark time {total:.0f} s.")
    if args.out:
        from rdx.io import write_json_atomic
        write_json_atomic(args.out, {"header": head, "load": args.load,
                                     "load_kind": args.load_kind, "total_s": total,
                                     "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
