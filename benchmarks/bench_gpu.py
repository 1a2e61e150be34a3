"""One GPU, end to end: whole-process ``rdx explain`` on one card, in one call.

Prepared to run once on a machine with one CUDA GPU, within about ten minutes
(``--budget``, default 570 s), each step in its own child process (its time and peak host
memory are its own)::

    python benchmarks/bench_gpu.py [--json results.json]

It prints the machine (card, memory, torch, CUDA and cuDNN versions, the CPU's SIMD level
numpy and torch compute with), then, as each finishes, one line per figure with its target:

* **10⁴ dense** — ``rdx explain A.npy B.npy --device cuda`` (A 10⁴ × 512, B 10⁴ × 768,
  5 explanations): the whole process (best of ``--repeat``, default 2, and the first, cold
  run) and the fit (the sum of the fit's steps in ``timings_s``); targets ≤ 3 s and ≤ 0.5 s;
* **10⁴ --significance** — the same with ``--significance`` against the plain run; ≤ 3×;
* **10⁵ exact** — ``--graph auto --knn-search exact``: the dense method where its n×n
  buffers fit the card, else the exact knn pass (the line says which); ≤ 60 s;
* **10⁶ knn** — first the exact pass projected from a few measured row blocks on the card
  (``bench_large_n.child_blocks``: rows per block × blocks), then, if the projection leaves
  room in the budget, the whole ``rdx explain --graph knn --knn-search exact`` on
  ``bench_large_n.write_representations``' files, cut at the budget's end; ≤ 10 min.

Every run reports its peak host memory (the child's ``ru_maxrss`` from ``wait4``). The data
are :func:`bench_core.make_representations`' clustered representations (d = 768 at 10⁶).
``--cpu-smoke`` runs the same steps on the CPU at tiny sizes, so that the script itself is
tested on machines without a GPU; its figures say nothing about the targets.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:  # run from a checkout without installing the package
        sys.path.insert(0, str(p))

# first, as the rdx command does: its threading and SIMD choices precede numpy. The parent
# never imports torch: a child's peak memory must not start from a parent holding it.
import rdx  # noqa: E402,F401
import numpy as np  # noqa: E402

from bench_core import RESULT_MARKER, make_representations, run_child, simd_line  # noqa: E402
from bench_large_n import child_blocks, write_representations  # noqa: E402

N_EXPLANATIONS = 5
#: Seconds kept free at the end of the budget for the summary.
RESERVE_S = 10.0


@dataclass(frozen=True)
class Plan:
    """Sizes of one benchmark run: the full one on a GPU or the CPU smoke test."""

    device: str
    n_small: int        # the 10⁴ runs
    n_medium: int       # the 10⁵ exact run
    n_large: int        # the 10⁶ knn run
    d_a: int
    d_b: int
    d_large: int
    n_blocks: int       # measured row blocks of the 10⁶ projection
    smoke: bool


FULL = Plan("cuda", 10_000, 100_000, 1_000_000, 512, 768, 768, 3, smoke=False)
SMOKE = Plan("cpu", 400, 800, 1_500, 32, 48, 48, 2, smoke=True)

#: Target of each figure (name → (limit, unit)); ``ratio``: significance ÷ plain.
TARGETS: dict[str, tuple[float, str]] = {
    "1e4 whole": (3.0, "s"), "1e4 fit": (0.5, "s"), "1e4 significance": (3.0, "×"),
    "1e5 whole": (60.0, "s"), "1e6 whole": (600.0, "s"), "1e6 projected pass": (600.0, "s"),
}

_MACHINE_CHILD = """
import json
import rdx, torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda,
       "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
       "threads": torch.get_num_threads(), "gpu": None, "gpu_memory_gib": None}
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    out.update(gpu=props.name, gpu_memory_gib=props.total_memory / 2**30,
               capability=f"{props.major}.{props.minor}")
print(json.dumps(out))
"""


def machine() -> dict[str, Any]:
    """The card and software, asked in a child (the parent never loads torch)."""
    proc = subprocess.run([sys.executable, "-c", _MACHINE_CHILD], capture_output=True,
                          text=True, check=False)
    try:
        info = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        info = {"error": " ".join(proc.stderr.split()[-12:])}
    info["simd"] = simd_line()
    info["rdx"] = rdx.__version__
    return info


def explain(a: Path, b: Path, out: Path, extra: Sequence[str], timeout: float
            ) -> dict[str, Any]:
    """``rdx explain A B EXTRA --out OUT --quiet`` as a user runs it, in a child process:
    whole-process seconds, peak host memory (its own rusage, from ``wait4``), the fit's
    seconds and where it ran (from ``explanations.json``); killed after ``timeout`` s."""
    cmd = [sys.executable, "-m", "rdx", "explain", str(a), str(b), "--n-explanations",
           str(N_EXPLANATIONS), *extra, "--out", str(out), "--quiet"]
    log = out.with_suffix(".log")
    print("  $ " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        # wait4 rather than communicate(): it gives this child's own peak RSS
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
                return {"wall_s": time.perf_counter() - t0, "exit": None,
                        "peak_rss_gib": usage.ru_maxrss / 2**20,
                        "error": f"cut after {timeout:.0f} s (log: {log})"}
            time.sleep(0.02)
    wall = time.perf_counter() - t0
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    row: dict[str, Any] = {"wall_s": wall, "exit": code,
                           "peak_rss_gib": usage.ru_maxrss / 2**20}   # KiB → GiB
    doc_path = out / "explanations.json"
    if code != 0 or not doc_path.is_file():
        row["error"] = " ".join(log.read_text(errors="replace").strip().splitlines()[-1:])
        return row
    doc = json.loads(doc_path.read_text())
    timings, info = doc.get("timings_s") or {}, doc.get("info") or {}
    row.update(fit_s=float(sum(v for v in timings.values() if isinstance(v, (int, float)))),
               device_used=doc["params"].get("device_used"),
               graph=doc["params"].get("graph_resolved"),
               knn_search=(info.get("knn_graph") or {}).get("search", {}).get("kind"),
               n_null=(info.get("significance") or {}).get("n_null"))
    return row


def verdict(name: str, value: float | None, smoke: bool) -> str:
    """``target ≤ X: met/missed`` for a figure (``smoke``: the target is only shown)."""
    limit, unit = TARGETS[name]
    text = f"target ≤ {limit:g}" + (unit if unit == "×" else f" {unit}")
    if smoke or value is None:
        return text + (" (applies to the full sizes)" if smoke else "")
    return text + (": met" if value <= limit else ": missed")


class Report:
    """Figures as they come (printed at once: a run cut short still shows what it had)."""

    def __init__(self, plan: Plan) -> None:
        self.plan, self.rows = plan, []

    def add(self, name: str, n: int, value: float | None, unit: str, run: dict[str, Any],
            note: str = "") -> None:
        shown = "—" if value is None else (f"{value:.2f} {unit}" if unit != "×"
                                           else f"{value:.2f}×")
        peak = run.get("peak_rss_gib")
        line = (f"{name:<20} n={n:<9} {shown:>10}   {verdict(name, value, self.plan.smoke)}"
                f" | peak host {'—' if peak is None else f'{peak:.2f} GiB'}"
                + (f" | {note}" if note else "")
                + (f" | error: {run['error']}" if run.get("error") else ""))
        print(line, flush=True)
        self.rows.append({"figure": name, "n": n, "value": value, "unit": unit,
                          "target": TARGETS[name][0], "note": note, "run": run})


def write_pair(folder: Path, n: int, d_a: int, d_b: int) -> tuple[Path, Path]:
    """``bench_core.make_representations``' pair as A.npy (its first ``d_a`` columns) and
    B.npy (``d_b`` columns), as bench_cli.py and bench_significance.py write theirs."""
    A, B, _ = make_representations(n, max(d_a, d_b), seed=0)
    a, b = folder / f"A_{n}.npy", folder / f"B_{n}.npy"
    np.save(a, np.ascontiguousarray(A[:, :d_a]))
    np.save(b, np.ascontiguousarray(B[:, :d_b]))
    return a, b


def run(plan: Plan, budget: float, repeat: int, work: Path) -> Report:
    """Every step of the module docstring within ``budget`` seconds from now."""
    end = time.perf_counter() + budget
    left = lambda: end - time.perf_counter() - RESERVE_S  # noqa: E731
    rep = Report(plan)
    dev = ["--device", plan.device]

    # 10⁴ dense, plain and with --significance
    a, b = write_pair(work, plan.n_small, plan.d_a, plan.d_b)
    runs = [explain(a, b, work / f"plain{i}", [*dev, "--graph", "dense"], max(left(), 1))
            for i in range(repeat)]
    ok = [r for r in runs if r.get("error") is None]
    best = min(ok, key=lambda r: r["wall_s"]) if ok else runs[0]
    note = (f"first (cold) run {runs[0]['wall_s']:.2f} s, device {best.get('device_used')}"
            if ok else "")
    rep.add("1e4 whole", plan.n_small, best["wall_s"] if ok else None, "s", best, note)
    rep.add("1e4 fit", plan.n_small, best.get("fit_s"), "s", best)
    sig = explain(a, b, work / "sig", [*dev, "--graph", "dense", "--significance"],
                  max(left(), 1))
    ratio = sig["wall_s"] / best["wall_s"] if ok and sig.get("error") is None else None
    rep.add("1e4 significance", plan.n_small, ratio, "×", sig,
            f"{sig['wall_s']:.2f} s with --significance ({sig.get('n_null')} draws)")
    for p in (a, b):
        p.unlink()

    # 10⁵, the exact method: dense where it fits the card, else the exact knn pass
    a, b = write_pair(work, plan.n_medium, plan.d_a, plan.d_b)
    r5 = explain(a, b, work / "medium", [*dev, "--graph", "auto", "--knn-search", "exact"],
                 max(min(left() * 0.5, 300.0), 1))
    rep.add("1e5 whole", plan.n_medium, r5["wall_s"] if r5.get("error") is None else None,
            "s", r5, f"graph {r5.get('graph')}" + (f" ({r5['knn_search']} search)"
                                                   if r5.get("knn_search") else "")
            + f", fit {r5.get('fit_s', float('nan')):.2f} s")
    for p in (a, b):
        p.unlink()

    # 10⁶: the exact pass projected from measured blocks, then as much of the real run
    blocks = run_child(__file__, ["blocks", str(plan.n_large), str(plan.d_large),
                                  str(plan.n_blocks), plan.device],
                       {"n": plan.n_large}, timeout=max(left(), 1))
    projected = blocks.get("projected_pass_s")
    rep.add("1e6 projected pass", plan.n_large, projected, "s", blocks,
            f"{blocks.get('blocks')} blocks of {blocks.get('rows_per_block')} rows, "
            f"{blocks.get('s_per_block', float('nan')):.3f} s each; the pass only")
    if projected is not None and projected < left():
        files = write_representations(work / "large", plan.n_large, plan.d_large)
        r6 = explain(files["A"], files["B"], work / "large_explain",
                     [*dev, "--graph", "knn", "--knn-search", "exact"], max(left(), 1))
        rep.add("1e6 whole", plan.n_large, r6["wall_s"] if r6.get("error") is None else None,
                "s", r6, f"fit {r6.get('fit_s', float('nan')):.1f} s")
    else:
        rep.add("1e6 whole", plan.n_large, None, "s", {},
                f"not run: the projected pass does not fit the {left():.0f} s left")
    return rep


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true",
                   help="the same steps on the CPU at tiny sizes (tests the script)")
    p.add_argument("--budget", type=float, default=570.0,
                   help="seconds for everything (default 570: one 10-minute call)")
    p.add_argument("--repeat", type=int, default=None,
                   help="plain runs at 10⁴ (best reported; default 2, 1 with --cpu-smoke)")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="where the inputs and outputs go (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--one":   # run_child's child
        kind, n, d, n_blocks, device = sys.argv[2:7]
        assert kind == "blocks"
        print(RESULT_MARKER + json.dumps(child_blocks(int(n), int(d), int(n_blocks),
                                                      device=device)), flush=True)
        return 0
    args = parse_args(argv)
    plan = SMOKE if args.cpu_smoke else FULL
    info = machine()
    if not plan.smoke and not info.get("gpu"):
        print(f"no CUDA GPU visible to torch ({info}); use --cpu-smoke to test the script "
              "on the CPU.", file=sys.stderr)
        return 2
    print(f"card: {info.get('gpu') or 'none (CPU smoke test)'}"
          + (f", {info['gpu_memory_gib']:.0f} GiB, compute {info.get('capability')}"
             if info.get("gpu") else "")
          + f" | torch {info.get('torch')} (CUDA {info.get('cuda')}, cuDNN {info.get('cudnn')},"
          f" {info.get('threads')} threads) | rdx {info['rdx']} | {info['simd']}", flush=True)
    print(f"plan: {plan}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rdx_bench_gpu_") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        rep = run(plan, args.budget, args.repeat or (1 if plan.smoke else 2), work)
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "plan": plan.__dict__,
                                         "figures": rep.rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
