"""Whole-process speed of ``rdx explain`` against a dense yardstick, as users time it.

For each n, two random clustered representations (``A``: n × 512, ``B``: n × 768, from
:func:`bench_core.make_representations`; seeded) are written as ``.npy`` files and two
whole processes are timed from start to exit, alternating:

* **ours** — ``python -m rdx explain A.npy B.npy --n-explanations 5 --out DIR --quiet``: both directions,
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

**Under load** (``--load N``): users run rdx on shared machines. With ``--load N`` every
timed process also runs while N busy processes compete for the CPUs (one core each: a pure
Python loop, or ``--load-kind numpy`` for numpy ufuncs; started before and killed after each
run, also on Ctrl-C, and gone by themselves if this script dies;
:func:`bench_core.competing_load`), and the table shows both times and their ratio
(under load / idle); the yardstick runs under the same load too, and the speed-up target
must hold idle and under load. Nothing here sets a thread count or an OpenMP wait policy: the
processes run with what rdx chooses for every user (rdx/threads.py).

**Every long command** (``--commands``): whole processes of ``rdx explain`` at 1.5k and 10k,
``--example digits`` (the cached second run), ``--guidance classifier`` with labels, dense and
``--graph knn`` at 1.8k (the digits example's features), ``--significance`` at 1.5k,
``rdx probe`` on the embedded models, ``rdx similarity`` with 200 permutations and 200
bootstrap draws at the embedded example's 500 images, ``rdx train --preset digits``,
``rdx benchmark --quick``, ``bash quickstart.sh`` (warm: checkpoints of the warm-up run,
fresh outputs) and ``bash quickstart.sh`` again on the warm-up's finished outputs — each idle and under ``--load`` (default 2 here), run as users run them
(progress on, stderr to a file). Cases marked warm in :data:`COMMAND_CASES` run once untimed
first to fill their cache (the example, the models they train) in the work folder (a temporary
one unless ``--workdir``, which keeps the warm-ups for the next invocation); every timed run
writes into a fresh folder. ``--only NAME,...`` picks cases. The defaults are sized for about
20 minutes on 2 cores (estimated from single runs of each command, not yet timed end to
end); most of it is the warm-ups' training and the similarity draws.

**SIMD**: the header ends in the SIMD level numpy (its dispatch targets,
``__cpu_features__``) and torch compute with, on every table. ``--no-avx512`` emulates a
CPU without AVX-512 in the timed processes: numpy's AVX-512 dispatch targets are switched
off through ``NPY_DISABLE_CPU_FEATURES`` (e.g. ``X86_V4 AVX512_ICL AVX512_SPR`` with numpy
2.4, ``AVX512F AVX512_SKX ...`` with older numpy; its compiled-in baseline cannot be), torch's
kernels are capped by ``ATEN_CPU_CAPABILITY=avx2`` and the BLAS libraries pinned to their
AVX2 kernels (``OPENBLAS_CORETYPE=Haswell``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``); the header
line shows what the children then report. By hand, for one command::

    NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" ATEN_CPU_CAPABILITY=avx2 \\
        .venv/bin/rdx explain A.npy B.npy --out /tmp/x

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_cli.py                       # 1.5k 5k 10k 20k 40k
    .venv/bin/python benchmarks/bench_cli.py --sizes 1500,5000 --repeat 3 --markdown
    .venv/bin/python benchmarks/bench_cli.py --sizes 30000,40000 --out /tmp/bench_cli.json
    .venv/bin/python benchmarks/bench_cli.py --sizes 1500,10000 --load 2
    .venv/bin/python benchmarks/bench_cli.py --commands --markdown --out /tmp/commands.json
    .venv/bin/python benchmarks/bench_cli.py --commands --only explain_1.5k,similarity
    .venv/bin/python benchmarks/bench_cli.py --commands --no-avx512 --load 0
    .venv/bin/python benchmarks/bench_cli.py --sort --markdown     # numpy's row sorts
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

REPO = Path(__file__).resolve().parent.parent
# this checkout's rdx first (also when another one is installed), then bench_core
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
if "--breakdown" in sys.argv[1:]:
    # the instrumented run imports rdx first, as the rdx command does: its threading and
    # SIMD choices (rdx.threads, rdx.simd) are made before numpy loads
    import rdx  # noqa: F401,E402

from bench_core import (OTHER_CPUS_WARN, RESULT_MARKER, SPAWNED_AT,  # noqa: E402
                        competing_load, format_markdown, format_plain, header_line, int_list,
                        load_args, load_description, make_representations, no_avx512_env,
                        ratio_text, run_child, simd_info, system_busy_s)

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
    rc = rdx.cli.main(["explain", a_path, b_path, "--n-explanations", str(K), "--out", out_dir, "--quiet"])
    total = time.perf_counter() - t
    if rc:
        raise RuntimeError(f"rdx explain exited with {rc}")
    parts.update(timed)
    parts["inputs, checks, rest"] = total - sum(timed.values())
    parts["process (measured inside)"] = since_start + (time.perf_counter() - t_main)
    return parts


# ----------------------------------------------------------------------------- parent
def _run_timed(cmd: Sequence[str], timeout: float | None, cwd: Path,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a whole process (``env`` added to this environment); wall seconds, peak RSS (GiB,
    via ``os.wait4``: the largest of the process tree), CPU and status."""
    env = {**os.environ, **(env or {})}
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
             timeout: float | None, work: Path, load: int = 0, load_kind: str = "python",
             env: dict[str, str] | None = None) -> dict[str, Any]:
    """All runs of one n (alternating ours / yardstick, then ours under ``load`` competing
    processes); the row of the table."""
    import numpy as np

    A, B, _ = make_representations(n, D_B, seed=seed)
    a_path, b_path = work / f"A_{n}.npy", work / f"B_{n}.npy"
    np.save(a_path, np.ascontiguousarray(A[:, :D_A]))
    np.save(b_path, B)
    del A, B
    py = sys.executable
    row: dict[str, Any] = {"n": n, "ours": [], "yardstick": [], "ours_load": [],
                           "yardstick_load": []}

    def ours(out: Path) -> list[str]:
        return [py, "-m", "rdx", "explain", str(a_path), str(b_path), "--n-explanations", str(K),
                "--out", str(out), "--quiet"]

    for r in range(repeat):
        out = work / f"ours_{n}_{r}"
        res = _run_timed(ours(out), timeout, REPO, env)
        res["fit_s"] = _fit_seconds(out)
        row["ours"].append(res)
        print(f"  n={n:>6} ours run {r + 1}: {res['wall_s']:.1f} s, peak "
              f"{res['peak_gib']:.2f} GiB {res['error'] or ''}", file=sys.stderr, flush=True)
        if n <= yardstick_max:
            res = _run_timed([py, os.path.abspath(__file__), "--yardstick", str(a_path),
                              str(b_path), str(work / f"yard_{n}_{r}")], timeout, REPO, env)
            row["yardstick"].append(res)
            print(f"  n={n:>6} yardstick run {r + 1}: {res['wall_s']:.1f} s, peak "
                  f"{res['peak_gib']:.2f} GiB {res['error'] or ''}", file=sys.stderr,
                  flush=True)
    for r in range(repeat if load else 0):
        with competing_load(load, load_kind):
            res = _run_timed(ours(work / f"ours_load_{n}_{r}"), timeout, REPO, env)
        res["fit_s"] = _fit_seconds(work / f"ours_load_{n}_{r}")
        row["ours_load"].append(res)
        print(f"  n={n:>6} ours under load, run {r + 1}: {res['wall_s']:.1f} s "
              f"{res['error'] or ''}", file=sys.stderr, flush=True)
        if n <= yardstick_max:   # the ratio under load: both under the same competition
            with competing_load(load, load_kind):
                res = _run_timed([py, os.path.abspath(__file__), "--yardstick", str(a_path),
                                  str(b_path), str(work / f"yard_load_{n}_{r}")], timeout,
                                 REPO, env)
            row["yardstick_load"].append(res)
            print(f"  n={n:>6} yardstick under load, run {r + 1}: {res['wall_s']:.1f} s "
                  f"{res['error'] or ''}", file=sys.stderr, flush=True)
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
    """The whole-process table; with ``--load``, ours under load and load/idle after ours."""
    loaded = any(r.get("ours_load") for r in rows)
    header = ["n", "ours whole s", *(["ours loaded s", "load/idle"] if loaded else []),
              "yardstick whole s", "ratio",
              *(["yardstick loaded s", "ratio under load"] if loaded else []),
              "ours fit s", "ours peak GiB", "yardstick peak GiB", "target", "meets", "note"]
    cells = []
    for r in rows:
        o, y = _best(r["ours"]), _best(r["yardstick"])
        ol = _best(r.get("ours_load") or [])
        ok_l = ol is not None and not ol["error"]
        ok_o = o is not None and not o["error"]
        ok_y = y is not None and not y["error"]
        ratio = y["wall_s"] / o["wall_s"] if ok_o and ok_y else None
        r["ratio"] = ratio
        yl = _best(r.get("yardstick_load") or [])
        ok_yl = yl is not None and not yl["error"]
        ratio_l = yl["wall_s"] / ol["wall_s"] if ok_l and ok_yl else None
        r["ratio_load"] = ratio_l
        notes = [f"ours: {o['error']}"] if o and o["error"] else []
        notes += [f"yardstick: {y['error']}"] if y and y["error"] else []
        notes += [f"ours under load: {ol['error']}"] if ol and ol["error"] else []
        busy = max([x.get("other_cpus") or 0.0 for x in r["ours"] + r["yardstick"]] or [0.0])
        under = [f"{ol['wall_s']:.1f}" if ok_l else "—",
                 ratio_text(ol["wall_s"] if ok_l else None, o["wall_s"] if ok_o else None)]
        if busy >= OTHER_CPUS_WARN:
            notes.append(f"shared machine: others used up to {busy:.1f} CPUs")
        target, meets = _target_cells(r["n"], ratio, o["peak_gib"] if ok_o else None,
                                      ratio_l if loaded else None)
        notes += [f"yardstick under load: {yl['error']}"] if yl and yl["error"] else []
        under_y = [f"{yl['wall_s']:.1f}" if ok_yl else "—",
                   f"{ratio_l:.1f}×" if ratio_l else "—"]
        cells.append([str(r["n"]), f"{o['wall_s']:.1f}" if ok_o else "—",
                      *(under if loaded else []), f"{y['wall_s']:.1f}" if ok_y else "—",
                      f"{ratio:.1f}×" if ratio else "—", *(under_y if loaded else []),
                      f"{o['fit_s']:.1f}" if ok_o and o.get("fit_s") else "—",
                      f"{o['peak_gib']:.2f}" if ok_o else "—",
                      f"{y['peak_gib']:.2f}" if ok_y else "—", target, meets, "; ".join(notes)])
    return header, cells


def _target_cells(n: int, ratio: float | None, peak: float | None,
                  ratio_load: float | None = None) -> tuple[str, str]:
    """The targets of n and whether they are met; with a ratio under load, the speed-up
    must hold idle and under load."""
    want = []
    if n in SPEEDUP_TARGETS:
        want.append(("speed", f"≥ {SPEEDUP_TARGETS[n]:g}×",
                     ratio is not None and ratio >= SPEEDUP_TARGETS[n]))
        if ratio_load is not None:
            want.append(("speed under load", "",
                         ratio_load >= SPEEDUP_TARGETS[n]))
    if n in MEMORY_TARGETS:
        want.append(("memory", f"≤ {MEMORY_TARGETS[n]:g} GiB",
                     peak is not None and peak <= MEMORY_TARGETS[n]))
    if not want:
        return "", ""
    misses = [w for w, _, ok in want if not ok]
    return ", ".join(t for _, t, _ in want if t), \
        "yes" if not misses else "no (" + ", ".join(misses) + ")"


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


# ----------------------------------------------------------------------------- --commands
#: Images of the similarity example's datasets (configs/similarity/datasets_embedded.yaml).
EMBEDDED_N = 500


class Inputs:
    """The input files of the command cases, made on first use in ``work`` (so that
    ``--only`` makes only what its cases read). ``env``: the children's additions."""

    def __init__(self, work: Path, seed: int, env: dict[str, str]) -> None:
        self.work, self.seed, self.env = work, seed, env
        self._made: dict[str, Any] = {}

    def pair(self, n: int) -> tuple[Path, Path]:
        """A (n × 512) and B (n × 768) of :func:`make_representations`, as ``.npy``."""
        if n not in self._made:
            import numpy as np

            A, B, _ = make_representations(n, D_B, seed=self.seed)
            paths = self.work / f"A_{n}.npy", self.work / f"B_{n}.npy"
            np.save(paths[0], np.ascontiguousarray(A[:, :D_A]))
            np.save(paths[1], B)
            self._made[n] = paths
        return self._made[n]

    def digits(self) -> tuple[Path, Path, Path]:
        """The digits example's A, B (1797 × 64) and labels, written by a child (it trains
        the example into the benchmark's cache if ``explain_example`` has not)."""
        if "digits" not in self._made:
            code = ("import sys, numpy as np; from rdx.examples import digits_example; "
                    "ex = digits_example(progress=False); d = sys.argv[1]; "
                    "np.save(d + '/dA.npy', ex.A); np.save(d + '/dB.npy', ex.B); "
                    "np.save(d + '/dy.npy', ex.labels)")
            subprocess.run([sys.executable, "-c", code, str(self.work)], check=True, cwd=REPO,
                           env={**os.environ, **self.env})
            self._made["digits"] = tuple(self.work / f"d{x}.npy" for x in ("A", "B", "y"))
        return self._made["digits"]


@dataclass(frozen=True)
class CommandCase:
    """One whole process timed by ``--commands``.

    ``argv(inputs, run_dir)`` gives the command line (``run_dir``: an empty folder of this
    run for its outputs); ``warm``: run once, untimed, before the timed runs (it fills a
    cache the timed runs reuse, as a user's second run does); ``env(inputs, run_dir)``:
    variables of this case; ``cwd``: the repository (the scripts' relative paths) or None
    for ``run_dir``.
    """

    name: str
    what: str
    argv: Callable[[Inputs, Path], list[str]]
    warm: bool = False
    env: Callable[[Inputs, Path], dict[str, str]] = field(default=lambda i, d: {})
    repo_cwd: bool = False


def _rdx(*args: str) -> list[str]:
    return [sys.executable, "-m", "rdx", *args]


def _explain_pair(n: int, *extra: str) -> Callable[[Inputs, Path], list[str]]:
    def argv(inp: Inputs, run: Path) -> list[str]:
        a, b = inp.pair(n)
        return _rdx("explain", str(a), str(b), "--n-explanations", str(K), "--out", str(run / "out"),
                    *extra)
    return argv


def _explain_digits(*extra: str, labels: bool = False) -> Callable[[Inputs, Path], list[str]]:
    def argv(inp: Inputs, run: Path) -> list[str]:
        a, b, y = inp.digits()
        return _rdx("explain", str(a), str(b), *(["--labels", str(y)] if labels else []),
                    "--out", str(run / "out"), *extra)
    return argv


def _probe(inp: Inputs, run: Path) -> list[str]:
    # the embedded models (trained once by the warm-up run into the work folder) probed on
    # digits with one seed and 1000 training images: the protocol at a CI size
    return _rdx("probe", "--models", str(REPO / "configs/similarity/models_embedded.yaml"),
                "--datasets", str(REPO / "configs/similarity/datasets_embedded.yaml"),
                "--only-datasets", "digits", "--seeds", "0", "--max-train", "1000",
                "--checkpoint-root", str(inp.work / "similarity_checkpoints"),
                "--cache-dir", str(run / "features"), "--out", str(run / "out"))


def _similarity(inp: Inputs, run: Path) -> list[str]:
    a, b = inp.pair(EMBEDDED_N)
    return _rdx("similarity", str(a), str(b), "--permutations", "200", "--bootstrap", "200")


COMMAND_CASES: tuple[CommandCase, ...] = (
    CommandCase("explain_1.5k", "rdx explain, n = 1500 (A 512-d, B 768-d), k = 5",
                _explain_pair(1500)),
    CommandCase("explain_10k", "rdx explain, n = 10000, k = 5", _explain_pair(10000)),
    CommandCase("explain_example", "rdx explain --example digits (cached: second run)",
                lambda inp, run: _rdx("explain", "--example", "digits", "--out",
                                      str(run / "out")), warm=True),
    CommandCase("explain_guidance", "rdx explain --guidance classifier, digits n = 1797 "
                "with labels (5-fold probes on A and B first)",
                _explain_digits("--guidance", "classifier", labels=True)),
    CommandCase("explain_dense_1.8k", "rdx explain, digits n = 1797 (dense, the knn row's "
                "reference)", _explain_digits()),
    CommandCase("explain_knn_1.8k", "rdx explain --graph knn, digits n = 1797",
                _explain_digits("--graph", "knn")),
    CommandCase("explain_significance", "rdx explain --significance (6 null draws), n = 1500",
                _explain_pair(1500, "--significance")),
    CommandCase("probe", "rdx probe: the 9 embedded models on digits, 1 seed, 1000 training "
                "images (models trained by the warm-up)", _probe, warm=True),
    CommandCase("similarity", f"rdx similarity, all measures, n = {EMBEDDED_N}, "
                "--permutations 200 --bootstrap 200", _similarity),
    CommandCase("train_digits", "rdx train --preset digits (6 epochs, 174 steps)",
                lambda inp, run: _rdx("train", "--preset", "digits", "--out",
                                      str(run / "ckpt"))),
    CommandCase("benchmark_quick", "rdx benchmark --quick (models cached by the warm-up)",
                lambda inp, run: _rdx("benchmark", "--quick", "--out", str(run / "bench"),
                                      "--checkpoints", str(inp.work / "benchmark_models")),
                warm=True, repo_cwd=True),
    CommandCase("quickstart", "bash quickstart.sh, warm: the checkpoints of the warm-up, "
                "fresh outputs (rdx run of every method)",
                lambda inp, run: ["bash", str(REPO / "quickstart.sh")], warm=True,
                env=lambda inp, run: {"QUICKSTART_OUT": str(run / "outputs"),
                                      "QUICKSTART_CHECKPOINTS": str(inp.work / "quickstart"),
                                      "RDX_PYTHON": sys.executable}),
    CommandCase("quickstart_rerun", "bash quickstart.sh again on its finished outputs (the "
                "warm-up's): every method done already, the explorer's embedding reused",
                lambda inp, run: ["bash", str(REPO / "quickstart.sh")], warm=True,
                env=lambda inp, run: {"QUICKSTART_OUT": str(inp.work / "quickstart_rerun"),
                                      "QUICKSTART_CHECKPOINTS": str(inp.work / "quickstart"),
                                      "RDX_PYTHON": sys.executable}),
)
COMMAND_NAMES = tuple(c.name for c in COMMAND_CASES)


def run_command_case(case: CommandCase, inputs: Inputs, *, repeat: int, load: int,
                     load_kind: str, timeout: float | None) -> dict[str, Any]:
    """The warm-up (if any), ``repeat`` idle runs and ``repeat`` runs under load of one
    case, each in a fresh run folder; the row of the table."""
    row: dict[str, Any] = {"command": case.name, "what": case.what, "idle": [], "load": []}
    count = [0]

    def once() -> dict[str, Any]:
        count[0] += 1
        run = inputs.work / "runs" / f"{case.name}_{count[0]}"
        if run.exists():   # left by an earlier invocation with the same --workdir
            shutil.rmtree(run)
        run.mkdir(parents=True)
        cmd = case.argv(inputs, run)
        env = {**inputs.env, **case.env(inputs, run)}
        res = _run_timed(cmd, timeout, REPO if case.repo_cwd else run, env)
        res["cmd"] = " ".join(cmd)
        return res

    if case.warm:
        res = once()
        row["warm_up"] = res
        _say(f"  {case.name}: warm-up {res['wall_s']:.1f} s {res['error'] or ''}")
    for r in range(repeat):
        res = once()
        row["idle"].append(res)
        _say(f"  {case.name}: idle {res['wall_s']:.1f} s {res['error'] or ''}")
    for r in range(repeat if load else 0):
        with competing_load(load, load_kind):
            res = once()
        row["load"].append(res)
        _say(f"  {case.name}: under load {res['wall_s']:.1f} s {res['error'] or ''}")
    return row


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def command_table(rows: Sequence[dict[str, Any]], load: int
                  ) -> tuple[list[str], list[list[str]]]:
    """One row per command: best idle and loaded wall time, their ratio, peak memory."""
    header = ["command", "idle s", *([f"load {load} s", "load/idle"] if load else []),
              "peak GiB", "what", "note"]
    cells = []
    for r in rows:
        idle, under = _best(r["idle"]), _best(r["load"])
        ok_i = idle is not None and not idle["error"]
        ok_l = under is not None and not under["error"]
        notes = [f"{what}: {x['error']}" for what, x in (("idle", idle), ("under load", under))
                 if x is not None and x["error"]]
        busy = max([x.get("other_cpus") or 0.0 for x in r["idle"]] or [0.0])
        if busy >= OTHER_CPUS_WARN:
            notes.append(f"not idle: others used up to {busy:.1f} CPUs during the idle run")
        loaded = [f"{under['wall_s']:.1f}" if ok_l else "—",
                  ratio_text(under["wall_s"] if ok_l else None,
                             idle["wall_s"] if ok_i else None)]
        cells.append([r["command"], f"{idle['wall_s']:.1f}" if ok_i else "—",
                      *(loaded if load else []), f"{idle['peak_gib']:.2f}" if ok_i else "—",
                      r["what"], "; ".join(notes)])
    return header, cells


def main_commands(args: argparse.Namespace) -> int:
    """``--commands``: every (or ``--only``) command case, idle and under ``--load``."""
    load = 2 if args.load is None else args.load
    env = no_avx512_env() if args.no_avx512 else {}
    cases = [c for c in COMMAND_CASES if not args.only or c.name in args.only]
    head = (header_line("cpu", env) + f" | load: {load_description(load, args.load_kind)}")
    print(head, flush=True)
    t_start = time.perf_counter()
    import compileall   # as pip install does (see main)
    compileall.compile_dir(REPO / "rdx", quiet=1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_commands_") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        # the example's cache and every model a warm-up trains live in the work folder:
        # a run never reads (or fills) the user's own caches
        env = {**env, "RDX_CACHE": str(work / "cache")}
        inputs = Inputs(work, args.seed, env)
        for case in cases:
            rows.append(run_command_case(case, inputs, repeat=args.repeat, load=load,
                                         load_kind=args.load_kind, timeout=args.timeout))
    fmt = format_markdown if args.markdown else format_plain
    header, cells = command_table(rows, load)
    print(f"\nWhole processes (wall seconds, best of {args.repeat}; peak GiB: idle run's "
          "process tree):\n")
    print(fmt(header, cells, 5 if load else 3))
    total = time.perf_counter() - t_start
    print(f"\nTotal benchmark time {total:.0f} s.")
    if args.out:
        from rdx.io import write_json_atomic
        write_json_atomic(args.out, {"header": head, "load": load,
                                     "load_kind": args.load_kind, "total_s": total,
                                     "rows": rows})
    return 0


def _names(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = sorted(set(names) - set(COMMAND_NAMES))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown command case(s) {unknown}; choose from {', '.join(COMMAND_NAMES)}")
    return names


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
    p.add_argument("--commands", action="store_true",
                   help="time whole processes of every long command (see the module "
                        "docstring), idle and under --load, instead of the n sweep")
    p.add_argument("--only", type=_names, metavar="NAME,...",
                   help="--commands: only these cases (" + ", ".join(COMMAND_NAMES) + ")")
    p.add_argument("--no-avx512", action="store_true",
                   help="run the children as on a CPU without AVX-512 (numpy's "
                        "NPY_DISABLE_CPU_FEATURES, torch's ATEN_CPU_CAPABILITY=avx2, the "
                        "BLAS libraries' AVX2 kernels)")
    p.add_argument("--sort", action="store_true",
                   help="only numpy's row-sort speed (one thread; what rdx's rank pass does) "
                        "with numpy's own SIMD choice, as rdx runs, and without AVX-512")
    load_args(p, default=None, default_text="0 for the n sweep, 2 for --commands")
    p.add_argument("--yardstick", nargs=3, metavar=("A", "B", "OUT"), help=argparse.SUPPRESS)
    p.add_argument("--breakdown", nargs=3, metavar=("A", "B", "OUT"), help=argparse.SUPPRESS)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # bench_core.run_child
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    return args


def main_sort(args: argparse.Namespace) -> int:
    """numpy's row-sort speed in child processes (M values per second, one thread, rows of
    10 000 values, best of 3): with numpy's own SIMD choice (``RDX_NUMPY_AVX512=1``), as
    rdx runs (:mod:`rdx.simd`) and emulating a CPU without AVX-512."""
    print(header_line("cpu", {}), flush=True)
    header = ["numpy kernels", "numpy SIMD", "int64 keys M/s", "float32 M/s"]
    cells = []
    for label, env in (("numpy's own choice (RDX_NUMPY_AVX512=1)", {"RDX_NUMPY_AVX512": "1"}),
                       ("as rdx runs", {}), ("without AVX-512 (--no-avx512)", no_avx512_env())):
        info = simd_info(env, sort=True)
        if "error" in info:
            cells.append([label, "error: " + info["error"], "", ""])
            continue
        cells.append([label, info["numpy_on"][-1], f"{info['sort_int64']:.0f}",
                      f"{info['sort_float32']:.0f}"])
    fmt = format_markdown if args.markdown else format_plain
    print(fmt(header, cells, 0))
    return 0


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

    if args.sort:
        return main_sort(args)
    if args.commands:
        return main_commands(args)
    load = args.load or 0
    env = no_avx512_env() if args.no_avx512 else {}
    head = header_line("cpu", env) + f" | load: {load_description(load, args.load_kind)}"
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
                                 timeout=args.timeout, work=work, load=load,
                                 load_kind=args.load_kind, env=env))
    fmt = format_markdown if args.markdown else format_plain
    header, cells = table(rows)
    print("\nWhole process (rdx explain, k = 5, both directions, scores, JSON), best of "
          f"{args.repeat}; A n×{D_A}, B n×{D_B}:\n")
    print(fmt(header, cells, 11 if load else 7))
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
