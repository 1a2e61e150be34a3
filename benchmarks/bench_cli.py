"""Whole-process speed of ``rdx explain`` against a dense yardstick, as users time it.

For each n, two random clustered representations (``A``: n × 512, ``B``: n × 768, from
:func:`bench_core.make_representations`; seeded) are written as ``.npy`` files and two
whole processes are timed from start to exit, alternating:

* **ours** — ``python -m rdx explain A.npy B.npy --k 5 --out DIR --quiet``: both directions,
  grids, scores (BSR under every dissimilarity and the chance levels as ``rdx explain``
  computes them today) and ``explanations.json``;
* **yardstick** — this file run with ``--yardstick``: the method written from its
  description with the original implementation's compute pattern: ``scipy cdist`` (float64)
  per model, ranks by two ``argsort``\\ s, the locally biased difference
  ``tanh(γ (R_B − R_A) / (min(R_A, R_B) + 1))`` with ``γ = 80/n``, affinities
  ``exp(∓β·diff)`` (β = 5), scikit-learn ``SpectralClustering(affinity="precomputed",
  n_clusters=k + 1)`` of each symmetrised affinity, the lowest-affinity cluster as the
  no-change group, 9-image grids by the original's ``maximize_total_neighborhood_affinity``,
  rank BSR from the rank matrices and a JSON file. It imports only numpy, scipy and
  scikit-learn.

Columns: whole-process seconds of each (best of ``--repeat`` runs), their ratio, our fit
time (the estimator's own ``timings_s`` in ``explanations.json``) and the peak resident
memory of each process tree (``os.wait4``'s ``ru_maxrss``: the largest of the process and
its waited-for children). The yardstick runs up to ``--yardstick-max`` images (its
spectral step factorises the dense n × n Laplacian: O(n³)); larger rows show "—".

Then the split of our whole process (a separate, instrumented run up to ``--breakdown-max``
images): interpreter start and ``rdx`` command line, the heavy imports of the explain path,
reading and checking the inputs, the fit, scoring, writing — so that what is left besides
the fit is visible. Finally the import time of ``rdx explain --help`` and the largest imports
of the explain path (``python -X importtime``).

Targets (printed with whether they are met): ours ≥ 2.5× faster than the yardstick at
n = 1500 and ≥ 10× at n = 10000, and ≤ 2.5 GiB peak memory at n = 10000.

The machine may be shared: each row notes when other processes kept the CPUs busy while
it ran (``/proc/stat`` minus the child's own CPU time), which makes its time unreliable.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_cli.py                       # 1.5k 5k 10k 20k 40k
    .venv/bin/python benchmarks/bench_cli.py --sizes 1500,5000 --repeat 3 --markdown
    .venv/bin/python benchmarks/bench_cli.py --sizes 30000,40000 --out /tmp/bench_cli.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parent.parent
# this checkout's rdx first (also when another one is installed), then bench_core
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from bench_core import (OTHER_CPUS_WARN, RESULT_MARKER, SPAWNED_AT,  # noqa: E402
                        format_markdown, format_plain, header_line, int_list,
                        make_representations, run_child, system_busy_s)

DEFAULT_SIZES = (1500, 5000, 10000, 20000, 40000)
K = 5
D_A, D_B = 512, 768
#: n → minimal speed-up over the yardstick.
SPEEDUP_TARGETS = {1500: 2.5, 10000: 10.0}
#: n → maximal peak resident memory of ``rdx explain`` (GiB).
MEMORY_TARGETS = {10000: 2.5}
#: Modules ``rdx explain`` imports when it runs (timed as "imports" in the breakdown).
EXPLAIN_IMPORTS = ("scipy.linalg", "scipy.sparse.linalg", "rdx.commands.explain",
                   "rdx.experiments.methods", "rdx.evaluation.scoring", "rdx.results.store",
                   "rdx.method.estimator", "rdx.io")


# ----------------------------------------------------------------------------- yardstick
def yardstick(a_path: str, b_path: str, out_dir: str, k: int = K, beta: float = 5.0,
              gamma_scale: float = 80.0, grid_size: int = 9, seed: int = 42) -> None:
    """The dense reference pipeline (see the module docstring); writes ``out_dir/result.json``."""
    import numpy as np
    from scipy.spatial.distance import cdist
    from sklearn.cluster import SpectralClustering

    t0 = time.perf_counter()
    X = {"a": np.load(a_path), "b": np.load(b_path)}
    n = len(X["a"])
    gamma = gamma_scale / n
    R = {}
    for m, data in X.items():
        D = cdist(data, data).astype(np.float32)
        R[m] = np.argsort(np.argsort(D, axis=1), axis=1).astype(np.float32)
        del D
    diff = np.tanh(gamma * (R["b"] - R["a"]) / (np.minimum(R["a"], R["b"]) + 1))
    out: dict[str, Any] = {"n": n, "directions": {}}
    # a_over_b (close in A, far in B): exp(-β·diff_ab) with diff_ab = -diff; b_over_a: exp(-β·diff)
    for direction, sign, tight in (("a_over_b", 1.0, "a"), ("b_over_a", -1.0, "b")):
        am = np.exp(sign * beta * diff)
        sym = (am + am.T) / 2
        np.random.seed(seed)
        labels = SpectralClustering(n_clusters=k + 1, affinity="precomputed",
                                    random_state=seed).fit_predict(sym)
        del sym
        means = np.array([am[np.ix_(labels == c, labels == c)].mean() if (labels == c).any()
                          else -np.inf for c in range(k + 1)])
        order = np.argsort(means)          # lowest first: the no-change group
        grids = []
        for c in order[1:]:
            members = np.flatnonzero(labels == c)
            if len(members) <= 1:
                grids.append(members.tolist())
                continue
            Dm = cdist(X[tight][members], X[tight][members])
            m = min(len(members), grid_size)
            nbrs = np.argsort(Dm, axis=1)[:, :m]
            sub = am[np.ix_(members, members)]
            scores = [sub[np.ix_(nb, nb)].sum() for nb in nbrs]
            grids.append(members[nbrs[int(np.argmax(scores))]].tolist())
        del am
        succ = pairs = 0
        for g in grids:
            g = np.asarray(g)
            off = ~np.eye(len(g), dtype=bool)
            da, db = (R["a"][np.ix_(g, g)] + 1)[off], (R["b"][np.ix_(g, g)] + 1)[off]
            succ += int((da < db).sum() if direction == "a_over_b" else (da > db).sum())
            pairs += int(off.sum())
        out["directions"][direction] = {"grids": grids, "bsr": succ / pairs if pairs else None,
                                        "cluster_sizes": np.bincount(labels).tolist()}
    out["seconds_in_process"] = time.perf_counter() - t0
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "result.json").write_text(json.dumps(out))


# ----------------------------------------------------------------------------- breakdown
def breakdown(a_path: str, b_path: str, out_dir: str) -> dict[str, float]:
    """One instrumented ``rdx explain`` in this process; seconds per part."""
    t_main = time.perf_counter()
    try:   # interpreter start and this harness's own imports, timed from the spawn
        since_start = time.time() - float(os.environ[SPAWNED_AT])
    except (KeyError, ValueError):  # run by hand, not through run_child: start unknown
        since_start = float("nan")
    parts: dict[str, float] = {"start (interpreter, harness)": since_start}
    t = time.perf_counter()
    import rdx.cli
    parts["rdx command line"] = time.perf_counter() - t
    t = time.perf_counter()
    import importlib
    for name in EXPLAIN_IMPORTS:
        importlib.import_module(name)
    parts["imports"] = time.perf_counter() - t

    from rdx.evaluation import scoring
    from rdx.experiments import methods
    from rdx.results import store
    timed = {"fit": 0.0, "scoring": 0.0, "writing": 0.0}

    def wrap(owner: Any, attr: str, key: str) -> None:
        real = getattr(owner, attr)

        def inner(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return real(*a, **kw)
            finally:
                timed[key] += time.perf_counter() - t0
        setattr(owner, attr, inner)

    wrap(methods.RDXMethod, "run", "fit")
    wrap(scoring.Scorer, "score", "scoring")
    wrap(store, "write_method_result", "writing")
    t = time.perf_counter()
    rc = rdx.cli.main(["explain", a_path, b_path, "--k", str(K), "--out", out_dir, "--quiet"])
    total = time.perf_counter() - t
    if rc:
        raise RuntimeError(f"rdx explain exited with {rc}")
    parts.update(timed)
    parts["inputs, checks, rest"] = total - sum(timed.values())
    parts["process (measured inside)"] = since_start + (time.perf_counter() - t_main)
    return parts


# ----------------------------------------------------------------------------- parent
def _run_timed(cmd: Sequence[str], timeout: float | None, cwd: Path) -> dict[str, Any]:
    """Run a whole process; wall seconds, peak RSS (GiB, via ``os.wait4``), CPU and status."""
    env = dict(os.environ)
    busy0 = system_busy_s()
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=err, env=env,
                                cwd=cwd)
        deadline = None if timeout is None else t0 + timeout
        status = ru = None
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                proc.kill()
                _, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = " ".join(err.read().decode(errors="replace").strip().splitlines()[-3:])
    busy1 = system_busy_s()
    cpu = ru.ru_utime + ru.ru_stime
    row: dict[str, Any] = {"wall_s": wall, "peak_gib": ru.ru_maxrss / 2**20, "cpu_s": cpu,
                           "error": None}
    if busy0 is not None and busy1 is not None and wall > 0:
        row["other_cpus"] = max(0.0, (busy1 - busy0) - cpu) / wall
    if deadline is not None and wall > timeout:
        row["error"] = f"timed out after {timeout:g} s"
    elif proc.returncode != 0:
        row["error"] = f"exit status {proc.returncode}: {tail or 'no output'}"
    return row


def _fit_seconds(out_dir: Path) -> float | None:
    try:
        doc = json.loads((out_dir / "explanations.json").read_text())
    except (OSError, ValueError):
        return None
    t = doc.get("timings_s") or {}
    if "fit" in t:
        return float(t["fit"])
    return float(sum(v for v in t.values() if isinstance(v, (int, float)))) or None


def run_size(n: int, *, repeat: int, yardstick_max: int, breakdown_max: int, seed: int,
             timeout: float | None, work: Path) -> dict[str, Any]:
    """All runs of one n (alternating ours / yardstick); the row of the table."""
    import numpy as np

    A, B, _ = make_representations(n, D_B, seed=seed)
    a_path, b_path = work / f"A_{n}.npy", work / f"B_{n}.npy"
    np.save(a_path, np.ascontiguousarray(A[:, :D_A]))
    np.save(b_path, B)
    del A, B
    py = sys.executable
    row: dict[str, Any] = {"n": n, "ours": [], "yardstick": []}
    for r in range(repeat):
        out = work / f"ours_{n}_{r}"
        res = _run_timed([py, "-m", "rdx", "explain", str(a_path), str(b_path), "--k", str(K),
                          "--out", str(out), "--quiet"], timeout, REPO)
        res["fit_s"] = _fit_seconds(out)
        row["ours"].append(res)
        print(f"  n={n:>6} ours run {r + 1}: {res['wall_s']:.1f} s, peak "
              f"{res['peak_gib']:.2f} GiB {res['error'] or ''}", file=sys.stderr, flush=True)
        if n <= yardstick_max:
            res = _run_timed([py, os.path.abspath(__file__), "--yardstick", str(a_path),
                              str(b_path), str(work / f"yard_{n}_{r}")], timeout, REPO)
            row["yardstick"].append(res)
            print(f"  n={n:>6} yardstick run {r + 1}: {res['wall_s']:.1f} s, peak "
                  f"{res['peak_gib']:.2f} GiB {res['error'] or ''}", file=sys.stderr,
                  flush=True)
    if n <= breakdown_max:
        row["breakdown"] = run_child(__file__, ["--breakdown", str(a_path), str(b_path),
                                                str(work / f"parts_{n}")],
                                     {"error": None}, timeout)
    a_path.unlink()
    b_path.unlink()
    return row


def _best(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in runs if not r["error"]]
    return min(ok, key=lambda r: r["wall_s"]) if ok else (runs[0] if runs else None)


def table(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["n", "ours whole s", "yardstick whole s", "ratio", "ours fit s", "ours peak GiB",
              "yardstick peak GiB", "target", "meets", "note"]
    cells = []
    for r in rows:
        o, y = _best(r["ours"]), _best(r["yardstick"])
        ok_o = o is not None and not o["error"]
        ok_y = y is not None and not y["error"]
        ratio = y["wall_s"] / o["wall_s"] if ok_o and ok_y else None
        r["ratio"] = ratio
        notes = [f"ours: {o['error']}"] if o and o["error"] else []
        notes += [f"yardstick: {y['error']}"] if y and y["error"] else []
        busy = max([x.get("other_cpus") or 0.0 for x in r["ours"] + r["yardstick"]] or [0.0])
        if busy >= OTHER_CPUS_WARN:
            notes.append(f"shared machine: others used up to {busy:.1f} CPUs")
        target, meets = _target_cells(r["n"], ratio, o["peak_gib"] if ok_o else None)
        cells.append([str(r["n"]), f"{o['wall_s']:.1f}" if ok_o else "—",
                      f"{y['wall_s']:.1f}" if ok_y else "—",
                      f"{ratio:.1f}×" if ratio else "—",
                      f"{o['fit_s']:.1f}" if ok_o and o.get("fit_s") else "—",
                      f"{o['peak_gib']:.2f}" if ok_o else "—",
                      f"{y['peak_gib']:.2f}" if ok_y else "—", target, meets, "; ".join(notes)])
    return header, cells


def _target_cells(n: int, ratio: float | None, peak: float | None) -> tuple[str, str]:
    want = []
    if n in SPEEDUP_TARGETS:
        want.append(("speed", f"≥ {SPEEDUP_TARGETS[n]:g}×",
                     ratio is not None and ratio >= SPEEDUP_TARGETS[n]))
    if n in MEMORY_TARGETS:
        want.append(("memory", f"≤ {MEMORY_TARGETS[n]:g} GiB",
                     peak is not None and peak <= MEMORY_TARGETS[n]))
    if not want:
        return "", ""
    misses = [w for w, _, ok in want if not ok]
    return ", ".join(t for _, t, _ in want), "yes" if not misses else "no (" + ", ".join(misses) + ")"


def breakdown_table(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    parts = ["start (interpreter, harness)", "rdx command line", "imports", "inputs, checks, rest", "fit",
             "scoring", "writing", "process (measured inside)"]
    header = ["n", *parts, "note"]
    cells = []
    for r in rows:
        b = r.get("breakdown")
        if not b:
            continue
        cells.append([str(r["n"]), *[f"{b[p]:.2f}" if isinstance(b.get(p), float) else "—"
                                     for p in parts], b.get("error") or ""])
    return header, cells


def import_offenders(python_args: Sequence[str], top: int = 8
                     ) -> tuple[float, list[tuple[str, float]]]:
    """``python -X importtime PYTHON_ARGS``: total import seconds and the packages that take
    longest (own import time of all their modules, summed per top-level package)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *python_args],
                          capture_output=True, text=True, cwd=REPO, check=False)
    own: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        try:
            self_us, _, name = line[len("import time:"):].split("|")
            seconds = int(self_us) / 1e6
        except ValueError:          # the header line
            continue
        package = name.strip().split(".")[0]
        own[package] = own.get(package, 0.0) + seconds
    return sum(own.values()), sorted(own.items(), key=lambda kv: -kv[1])[:top]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int_list, default=list(DEFAULT_SIZES),
                   help="comma-separated n; default %(default)s")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs of each (alternating); the fastest is shown")
    p.add_argument("--yardstick-max", type=int, default=10000,
                   help="largest n the yardstick runs at (default %(default)s)")
    p.add_argument("--breakdown-max", type=int, default=10000,
                   help="largest n with an instrumented breakdown run (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per process")
    p.add_argument("--workdir", type=Path, help="folder for inputs and outputs (default: a "
                                                "temporary folder, removed afterwards)")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--out", type=Path, help="also write the rows as JSON here")
    p.add_argument("--yardstick", nargs=3, metavar=("A", "B", "OUT"), help=argparse.SUPPRESS)
    p.add_argument("--breakdown", nargs=3, metavar=("A", "B", "OUT"), help=argparse.SUPPRESS)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # bench_core.run_child
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.yardstick:
        yardstick(*args.yardstick)
        return 0
    if args.breakdown:
        try:
            parts = breakdown(*args.breakdown)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            parts = {"error": f"{type(exc).__name__}: {exc}"}
        print(RESULT_MARKER + json.dumps(parts), flush=True)
        return 0

    head = header_line("cpu")
    print(head, flush=True)
    rows = []
    t_start = time.perf_counter()
    # byte-compile the package first, as `pip install` does: with PYTHONDONTWRITEBYTECODE set
    # (or a read-only checkout) every run would otherwise recompile each changed module
    import compileall
    compileall.compile_dir(REPO / "rdx", quiet=1)
    with tempfile.TemporaryDirectory(prefix="bench_cli_") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for n in args.sizes:
            rows.append(run_size(n, repeat=args.repeat, yardstick_max=args.yardstick_max,
                                 breakdown_max=args.breakdown_max, seed=args.seed,
                                 timeout=args.timeout, work=work))
    fmt = format_markdown if args.markdown else format_plain
    header, cells = table(rows)
    print("\nWhole process (rdx explain, k = 5, both directions, scores, JSON), best of "
          f"{args.repeat}; A n×{D_A}, B n×{D_B}:\n")
    print(fmt(header, cells))
    header, cells = breakdown_table(rows)
    if cells:
        print("\nWhere our whole process goes (seconds, one instrumented run):\n")
        print(fmt(header, cells))
    total, _ = import_offenders(["-m", "rdx", "explain", "--help"])
    print(f"\n`rdx explain --help`: {total:.2f} s of imports.")
    total, offenders = import_offenders(["-c", "import " + ", ".join(EXPLAIN_IMPORTS)])
    print(f"What `rdx explain` imports when it runs: {total:.2f} s; largest: "
          + ", ".join(f"{name} {s:.2f} s" for name, s in offenders))
    targets = "; ".join([f"n={n}: ≥ {x:g}× faster" for n, x in SPEEDUP_TARGETS.items()]
                        + [f"n={n}: ≤ {g:g} GiB" for n, g in MEMORY_TARGETS.items()])
    print(f"\ntargets: {targets}. Total benchmark time {time.perf_counter() - t_start:.0f} s.")
    if args.out:
        from rdx.io import write_json_atomic
        write_json_atomic(args.out, {"header": head, "rows": rows,
                                     "imports": {"total_s": total, "largest": offenders}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
