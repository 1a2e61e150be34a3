"""Calibration and power of the named-group test (``assess_groups``) on the seed-twin suite.

A group named before looking is compared with the same group in null pairs, not with the
strongest group of every null pair (:mod:`rdx.evaluation.group_test`). This script measures,
on :func:`rdx.studies.benchmark.calibration.suite_pairs` (or, with ``--suite heldout``,
:func:`~rdx.studies.benchmark.calibration.heldout_pairs`):

* **calibration** — on every seed-twin comparison, all 45 pairs of classes, each as one
  group tested in both directions as ``rdx explain --test-classes`` tests it ("are these
  two classes closer in A than in B, or in B than in A, beyond seed noise?"; no pair of
  seed twins has such a difference): the share of the 90 tests with p ≤ α for several α
  (a calibrated test gives about α), and the comparisons where Holm's correction over the
  90 finds any (the family-wise false-positive rate, with its Clopper–Pearson 95 %
  interval);
* **power** — on every implanted case, the two merged classes as one group, tested in both
  directions: detected when the expected direction (``a_over_b``: A merged them) is
  significant after Holm's correction over the two (α = 0.05); the other direction's
  false alarms are counted too.

Nulls: ``twin`` (``--twins``: seed twins of each model, the pairs' held-out twins as in
``bench_significance.py``) and ``field`` (``--seeds``: seeds of the perturbation draws). No
method is refitted, so the whole suite takes a few minutes. Results are appended to
``--out`` (JSON lines) and skipped when the script runs again.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_group_test.py --noise twin,field --twins 2,6 --markdown
    .venv/bin/python benchmarks/bench_group_test.py --suite heldout --noise twin,field --twins 2,6 --markdown
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

import rdx  # noqa: F401  first, as the rdx command: its threading and SIMD choices precede numpy
import numpy as np

from bench_significance import clopper_pearson, simd_level

ALPHAS = (0.01, 0.05, 0.1, 0.2)


def class_pair_groups(labels: np.ndarray) -> tuple[list[np.ndarray], list[str]]:
    """Every pair of classes as one group of images, with its name ``a|b``."""
    classes = np.unique(labels)
    groups, names = [], []
    for a, b in itertools.combinations(classes, 2):
        groups.append(np.flatnonzero(np.isin(labels, [a, b])))
        names.append(f"{a}|{b}")
    return groups, names


def evaluate(pair, A, B, labels, noise: str, seed: int, n_twins: int) -> dict:
    """One comparison under one null: twin comparisons test every class pair, implanted
    cases their merged classes."""
    from rdx.evaluation.group_test import assess_groups
    from rdx.results.types import DIRECTIONS
    from rdx.studies.benchmark.calibration import model_features, twin_controls

    if pair.kind == "twin":
        groups, names = class_pair_groups(labels)
    else:
        groups = [np.flatnonzero(np.isin(labels, list(pair.classes)))]
        names = ["|".join(str(c) for c in pair.classes)]
    t0 = time.perf_counter()
    if noise == "twin":
        ca, cb = ([model_features(m) for m in ms] for ms in twin_controls(pair, n_twins))
        out = assess_groups(A, B, groups, names=names, directions=DIRECTIONS,
                            control_a=ca or None, control_b=cb or None)
    else:
        out = assess_groups(A, B, groups, names=names, directions=DIRECTIONS, noise=noise,
                            random_state=seed)
    recs = out["groups"]
    return {"pair": pair.name, "kind": pair.kind, "family": pair.family, "noise": noise,
            "seed": seed, **({"n_twins": n_twins} if noise == "twin" else {}),
            "n_draws": out["n_draws"], "tests": [[r["name"], r["direction"]] for r in recs],
            "p": [r["p_value"] for r in recs], "p_holm": [r["p_value_holm"] for r in recs],
            "seconds": time.perf_counter() - t0}


def null_label(record: dict) -> str:
    return f"twin ×{record['n_twins']}" if record["noise"] == "twin" else record["noise"]


def summarise(rows: list[dict], markdown: bool) -> str:
    """The calibration and power tables of the docs from result records."""
    from scipy.stats import kstest

    rows = [{**r, "null": null_label(r)} for r in rows]
    lines = []
    head = ("| null | twin comparisons | class-pair tests | "
            + " | ".join(f"p ≤ {a:g}" for a in ALPHAS)
            + " | KS distance to uniform | comparisons with a Holm-significant group "
              "| 95 % CI |")
    lines += [head, "|" + "---|" * (len(ALPHAS) + 6)] if markdown else [head]
    for null in sorted({r["null"] for r in rows}):
        tw = [r for r in rows if r["null"] == null and r["kind"] == "twin"]
        if not tw:
            continue
        ps = np.concatenate([r["p"] for r in tw])
        fw = sum(min(r["p_holm"]) <= 0.05 for r in tw)
        lo, hi = clopper_pearson(fw, len(tw))
        lines.append(f"| {null} | {len(tw)} | {len(ps)} | "
                     + " | ".join(f"{(ps <= a).mean():.3f}" for a in ALPHAS)
                     + f" | {kstest(ps, 'uniform').statistic:.3f} | {fw}/{len(tw)} "
                       f"| {lo:.3f}–{hi:.3f} |")
    fams = sorted({r["family"] for r in rows if r["kind"] == "implanted"})
    head = ("| null | implanted: merged classes detected | "
            + " | ".join(fams) + " | median p (expected direction) "
              "| flagged in the other direction |")
    lines += ["", head, "|" + "---|" * (len(fams) + 4)] if markdown else ["", head]
    for null in sorted({r["null"] for r in rows}):
        im = [r for r in rows if r["null"] == null and r["kind"] == "implanted"]
        if not im:
            continue

        def holm_p(r: dict, direction: str) -> float:
            return r["p_holm"][[t[1] for t in r["tests"]].index(direction)]

        # one entry per record: the field null has one per seed of its draws
        det = [holm_p(r, "a_over_b") <= 0.05 for r in im]
        per = []
        for f in fams:
            fr = [d for d, r in zip(det, im) if r["family"] == f]
            per.append(f"{sum(fr)}/{len(fr)}")
        expected = [r["p"][[t[1] for t in r["tests"]].index("a_over_b")] for r in im]
        wrong = sum(holm_p(r, "b_over_a") <= 0.05 for r in im)
        lines.append(f"| {null} | {sum(det)}/{len(im)} ({np.mean(det):.2f}) | "
                     + " | ".join(per)
                     + f" | {np.median(expected):.3g} | {wrong}/{len(im)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from rdx.studies.benchmark.calibration import SUITES, load_pair

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--noise", default="twin,field", help="nulls, comma-separated: twin, field")
    p.add_argument("--twins", default="2", metavar="N[,N...]",
                   help="seed twins of each model for the twin null, 2-6 (default 2; one of "
                        "each gives two exact draws, fewer than a named group needs)")
    p.add_argument("--seeds", default="0,1,2", help="seeds of the field null's draws")
    p.add_argument("--suite", default="design", choices=("design", "heldout"))
    p.add_argument("--out", default="outputs/bench_group_test.jsonl")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    twins = [int(t) for t in args.twins.split(",")]
    if not all(2 <= t <= 6 for t in twins):
        p.error(f"--twins takes 2 to 6 twins per model, got {args.twins}")
    noises = args.noise.split(",")
    if not set(noises) <= {"twin", "field", "local"}:
        p.error(f"--noise takes twin, field and local, got {args.noise}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {}
    if out.is_file():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            if "tests" in r:     # both directions (records before had one)
                done[(r["pair"], r["noise"], r["seed"], r.get("n_twins"))] = r
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy SIMD "
          f"{simd_level()}; suite {args.suite}; results: {out}", flush=True)
    rows = []
    for pair in SUITES[args.suite]():
        A = B = labels = None
        for noise in noises:
            runs = [(0, t) for t in twins] if noise == "twin" else \
                [(int(s), None) for s in args.seeds.split(",")]
            for seed, n_twins in runs:
                key = (pair.name, noise, seed, n_twins)
                if key not in done:
                    if A is None:
                        A, B, labels = load_pair(pair)
                    done[key] = {"suite": args.suite,
                                 **evaluate(pair, A, B, labels, noise, seed, n_twins)}
                    with out.open("a") as f:
                        f.write(json.dumps(done[key]) + "\n")
                    r = done[key]
                    print(f"{r['pair']:<55} {null_label(r):>7} s{seed} min p {min(r['p']):.4f}"
                          f"  {r['n_draws']} draws, {r['seconds']:.1f} s", flush=True)
                rows.append(done[key])
    print(summarise(rows, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
