"""Time and memory of every method at the paper's sizes (n = 1.5k and 5k, d = 768).

Each (method, n) case runs through the runner's method interface
(``rdx.experiments.methods.method(name).run``: both models, grids and BSR included) in a fresh
child process, so that the reported peak resident memory is that case's alone. The data
are :func:`bench_core.make_representations` (20 clustered blobs, merged pairs in B),
made non-negative (``|x|``) so that NMF accepts them.

Columns: ``fit s`` (the method's own ``timings_s["fit"]``; RDX: its whole fit), ``total s``
(the ``run`` call: fit + scoring), ``epochs`` (training-based methods: the epochs run),
``s/epoch``, ``peak GiB`` (child's peak RSS), ``BSR`` (mean over both directions) and a
note (errors, or the extrapolated time at the paper's epoch count when ``--epochs`` caps
training).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_baselines.py --markdown
    .venv/bin/python benchmarks/bench_baselines.py --methods kmeans,pca --sizes 1500
    .venv/bin/python benchmarks/bench_baselines.py --epochs 20     # cap SAE/USAE training

The training-based methods at the paper's epoch counts (SAE 500, TopK-SAE 200, USAE 2000)
take hours on a 2-core CPU; ``--epochs`` caps them and the note extrapolates linearly.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import rdx  # noqa: F401  first: rdx's threading and SIMD choices precede numpy, as for users
import numpy as np

from bench_core import (RESULT_MARKER, format_markdown, format_plain, header_line,
                        int_list, make_representations, peak_rss_gib, run_child)

from rdx.experiments.methods import method_names  # (the one list of methods)

#: every registered method that explains or compares (the registry's ``similarity`` method
#: has its own benchmark)
METHODS = tuple(m for m in method_names() if m != "similarity")
#: the paper's epoch counts of the training-based methods
PAPER_EPOCHS = {"sae": 500, "topk_sae": 200, "usae": 2000}
K = 5


def run_case(method: str, n: int, d: int, *, epochs: int | None, device: str) -> dict[str, Any]:
    from rdx.evaluation.scoring import Scorer
    from rdx.experiments.methods import MethodContext, method as get_method

    row: dict[str, Any] = {"method": method, "n": n, "d": d, "error": None}
    try:
        A, B, blob = make_representations(n, d, seed=0)
        A, B = np.abs(A), np.abs(B)
        params: dict[str, Any] = {}
        if method not in ("cka", "classification"):
            params["n_explanations"] = K
        if method in PAPER_EPOCHS:
            row["epochs"] = min(epochs, PAPER_EPOCHS[method]) if epochs else \
                PAPER_EPOCHS[method]
            params["n_epochs"] = row["epochs"]
        m = get_method(method)
        m.validate(params, method)
        t0 = time.perf_counter()
        result = m.run(A, B, params, MethodContext(labels=blob, seed=0, device=device))
        Scorer(A, B, chance_draws=0).score(result)     # grids and BSR included in total_s
        row["total_s"] = time.perf_counter() - t0
        row["fit_s"] = result.timings.get("fit", row["total_s"])
        if method == "rdx":
            row["fit_s"] = sum(result.timings.values())
        row["bsr"] = (result.bsr or {}).get("mean")
    except Exception as exc:  # noqa: BLE001 - every failure becomes a table row
        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    row["peak_rss_gib"] = peak_rss_gib()
    return row


def run_case_subprocess(method: str, n: int, d: int, *, epochs: int | None, device: str,
                        timeout: float) -> dict[str, Any]:
    args = ["--method", method, "--n", str(n), "--d", str(d), "--device", device]
    return run_child(__file__, args + (["--epochs", str(epochs)] if epochs else []),
                     {"method": method, "n": n, "d": d}, timeout)


def table(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["method", "n", "d", "fit s", "total s", "epochs", "s/epoch", "peak GiB", "BSR",
              "note"]
    cells = []
    for r in rows:
        f = (lambda k, p=2: "" if r.get(k) is None else f"{r[k]:.{p}f}")
        per = r["fit_s"] / r["epochs"] if r.get("epochs") and r.get("fit_s") else None
        note = r.get("error") or ""
        if not note and per is not None and r["epochs"] < PAPER_EPOCHS[r["method"]]:
            note = (f"≈ {per * PAPER_EPOCHS[r['method']]:.0f} s at the paper's "
                    f"{PAPER_EPOCHS[r['method']]} epochs")
        cells.append([r["method"], str(r["n"]), str(r["d"]), f("fit_s"), f("total_s"),
                      str(r.get("epochs") or ""), "" if per is None else f"{per:.3f}",
                      f("peak_rss_gib"), f("bsr", 3), note])
    return header, cells


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", default=",".join(METHODS),
                   help="comma-separated methods (default: all)")
    p.add_argument("--sizes", type=int_list, default=[1500, 5000])
    p.add_argument("--dims", type=int_list, default=[768])
    p.add_argument("--epochs", type=int, help="cap the epochs of sae/topk_sae/usae")
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    p.add_argument("--timeout", type=float, default=3600.0)
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--out", type=Path, help="also write the rows as JSON here")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--d", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        row = run_case(args.method, args.n, args.d, epochs=args.epochs, device=args.device)
        print(RESULT_MARKER + json.dumps(row), flush=True)
        return 0
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(methods) - set(METHODS)
    if unknown:
        p.error(f"unknown method(s) {sorted(unknown)}; choose from {', '.join(METHODS)}")
    head = header_line(args.device)
    print(head, flush=True)
    rows = []
    for n in args.sizes:
        for d in args.dims:
            for m in methods:
                row = run_case_subprocess(m, n, d, epochs=args.epochs, device=args.device,
                                          timeout=args.timeout)
                rows.append(row)
                print(f"  {m:>14} n={n:>5} d={d}: "
                      + (row.get("error") or f"{row['fit_s']:.2f} s"), file=sys.stderr,
                      flush=True)
    header, cells = table(rows)
    print(format_markdown(header, cells) if args.markdown else format_plain(header, cells))
    if args.out:
        from rdx.io import write_json_atomic

        write_json_atomic(args.out, {"header": head, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
