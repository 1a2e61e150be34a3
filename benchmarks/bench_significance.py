"""Calibration and power of ``--significance`` on the seed-twin null suite.

For every comparison of :func:`rdx.studies.benchmark.calibration.suite_pairs` (72 seed-twin
pairs over digits MLPs, Fashion-MNIST ConvNets and ViTs, early and final checkpoints; 17
implanted merged-class cases) — or, with ``--suite heldout``, of
:func:`~rdx.studies.benchmark.calibration.heldout_pairs` (32 twin pairs and 12 implanted
cases from other recipes and seeds, fixed before they were first evaluated) — this fits RDX
at its defaults (k = 3), assesses it with each null candidate (the twin null with
``--twins`` seed twins of each model) and several seeds of the null draws, and prints

* the **false-positive rate** — seed-twin comparisons with *any* significant explanation
  (α = 0.05 family-wise) — with its Clopper–Pearson 95 % interval, per null seed and pooled;
* the **power** — implanted cases with a significant explanation in the expected direction
  (``a_over_b``: A merged the two classes), and how many of those are *hits* (at least half
  of the explanation's members come from the two merged classes);
* the median of ``log(T_obs / median null max)`` on twins (how far the null sits from seed
  noise: > 0 means the twins' strongest explanation beats the null's median).
* how many implanted cases RDX's fit *shows* (an ``a_over_b`` explanation at least half of
  whose members come from the merged classes, significant or not) and how many of those
  the null detects: power splits into what the method shows and what the null confirms.
* the ceiling: for each implanted case the statistic of the two merged classes as one
  group in RDX's fit, and its p against the same null maxima — would the null confirm the
  merge were it shown exactly? Power is counted where it would and where it would not.

Models are trained once and cached (features under ``checkpoints/calibration/``, a few
minutes on 2 CPU cores); every (comparison, candidate, seed) result is appended to
``--out`` (JSON lines) and skipped when the script runs again, so it resumes.

``--cost 1500,10000`` instead times whole processes, as users run them: ``rdx explain
A.npy B.npy --n-explanations 5 --quiet`` with and without ``--significance`` (its default
draws) on the random clustered representations of ``bench_core.py`` (A: n × 512, B: n ×
768), alternating, best of ``--repeat``; the ratio is the cost of significance (target ≤ 5×).
Next to the wall times, the CPU seconds of the fastest run of each kind (user + system, and
the system part: the kernel mapping and zeroing memory) and the largest peak resident memory
of each kind.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_significance.py                    # field null, 3 seeds
    .venv/bin/python benchmarks/bench_significance.py --cost 1500,10000 --repeat 3
    .venv/bin/python benchmarks/bench_significance.py --noise field,local --seeds 0
    .venv/bin/python benchmarks/bench_significance.py --noise twin       # held-out twins
    .venv/bin/python benchmarks/bench_significance.py --noise twin --twins 2,6  # more twins
    .venv/bin/python benchmarks/bench_significance.py --noise twin,field --seeds 0 --suite heldout
    .venv/bin/python benchmarks/bench_significance.py --markdown
    .venv/bin/python benchmarks/bench_significance.py --implants   # what each merge implants
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import rdx  # noqa: F401  first, as the rdx command: its threading and SIMD choices precede numpy
import numpy as np


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval of a proportion ``k/n``."""
    from scipy.stats import beta

    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def simd_level() -> str:
    """numpy's SIMD level in this process (printed with every figure)."""
    from rdx.simd import numpy_level

    return numpy_level()


def evaluate(pair, A, B, labels, noise: str, seed: int, n_null: int, max_null: int,
             n_twins: int = 2) -> dict:
    """One comparison under one null candidate: the perturbation nulls by name (``field``,
    ``local``), or ``twin``: the twin null on ``n_twins`` of the suite's held-out seed twins
    of each of the pair's models (every draw a real seed twin; the seed is irrelevant
    there)."""
    from rdx import RDX
    from rdx.evaluation.significance import (assess, explanation_statistics, predictive_p,
                                             twin_null_pairs)
    from rdx.studies.benchmark.calibration import model_features, twin_controls

    t0 = time.perf_counter()
    fit = RDX(n_explanations=3).fit(A, B)
    res = fit.result()
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    if noise == "twin":
        ca, cb = ([model_features(m) for m in ms] for ms in twin_controls(pair, n_twins))
        # every exact draw the twins give: each twin against its model, and every two
        # twins of one recipe
        required, extra = twin_null_pairs(A, B, ca, cb)
        n_null = max_null = len(required) + len(extra)
        out = assess(res, A, B, n_null=n_null, control_a=ca or None, control_b=cb or None,
                     random_state=seed)
    else:
        out = assess(res, A, B, n_null=n_null, max_null=max_null, random_state=seed,
                     noise=noise)
    t_sig = time.perf_counter() - t0
    rec = out["explanations"]
    merged = set(pair.classes)
    expected = []
    for e, r in zip(res.directions["a_over_b"].explanations, rec["a_over_b"]):
        share = float(np.isin(labels[np.asarray(e.members)], list(merged)).mean()) \
            if merged and e.members else 0.0
        # the test's own decision at alpha, whether or not the null is calibrated for the
        # family (the suite measures that calibration)
        expected.append({"p": r["p_value_fwer"], "significant": r["p_value_fwer"] <= out["alpha"],
                         "hit": share >= 0.5})
    if pair.kind == "implanted":
        # the ceiling of any explanation of this merge: were the two merged classes returned
        # as one explanation, would this null confirm them? (the same statistic and p rule)
        members = np.flatnonzero(np.isin(labels, list(merged)))
        t_merge = explanation_statistics(A, B, {"a_over_b": [members]}, gamma=fit.gamma_,
                                         beta=fit.beta)["a_over_b"][0]
        p_merge = predictive_p(np.asarray(out["null_max"]["values"]), t_merge,
                               out["null_max"]["log_sd_used"])
        merge = {"merge_statistic": t_merge, "merge_p": p_merge,
                 "merge_beats_noise": bool(p_merge <= out["alpha"]),
                 "merge_log_ratio": float(np.log(max(t_merge, 1e-9) /
                                                 max(out["null_max"]["q50"], 1e-9)))}
    else:
        merge = {}
    med = out["null_max"]["q50"]
    t_max = max(r["statistic"] for v in rec.values() for r in v)
    return {"pair": pair.name, "kind": pair.kind, "family": pair.family, "noise": noise,
            "seed": seed, "n_null": n_null, "max_null": max_null, "n_draws": out["n_draws"],
            "p_method": out["p_method"],
            **({"twin_draws": TWIN_DRAWS, "n_twins": n_twins} if noise == "twin" else {}),
            "min_p_fwer": out["min_p_value_fwer"],
            "any_significant": out["min_p_value_fwer"] <= out["alpha"],
            "expected_significant": any(x["significant"] for x in expected),
            "expected_hit": any(x["significant"] and x["hit"] for x in expected),
            # RDX shows the merge at all (whether or not the null calls it significant)
            "shown": any(x["hit"] for x in expected),
            "log_ratio": float(np.log(max(t_max, 1e-9) / max(med, 1e-9))), **merge,
            # the raw material of the p-values, so that another reading of the same null
            # draws (a family's calibration of the field null) is scored without refitting
            "null_max_values": out["null_max"]["values"],
            "log_sd_used": out["null_max"]["log_sd_used"],
            "statistics": {d: [r["statistic"] for r in v] for d, v in rec.items()},
            "expected_hits": [x["hit"] for x in expected],
            "fit_s": t_fit, "significance_s": t_sig}


def summarise(rows: list[dict], markdown: bool, shown: dict[str, bool] | None = None) -> str:
    """The tables of the docs from result records. ``shown``: per implanted case, whether
    RDX's fit shows the merge (recorded by any null's record of the case; default: the
    records in ``rows``)."""
    # the twin null is named with its twins per model: more twins, more draws
    rows = [{**r, "noise": null_label(r)} for r in rows]
    lines = []
    head = ("| null | seed | twins: false positives | FPR | 95 % CI | implanted: detected "
            "| power | hits | median log(T/null median), twins |")
    lines += [head, "|" + "---|" * 9] if markdown else [head]
    keys = sorted({(r["noise"], r["seed"]) for r in rows})
    for noise in sorted({k[0] for k in keys}):
        groups = [(str(s), [r for r in rows if r["noise"] == noise and r["seed"] == s])
                  for s in sorted({k[1] for k in keys if k[0] == noise})]
        groups.append(("all", [r for r in rows if r["noise"] == noise]))
        for label, rs in groups:
            tw = [r for r in rs if r["kind"] == "twin"]
            im = [r for r in rs if r["kind"] == "implanted"]
            fp = sum(r["any_significant"] for r in tw)
            lo, hi = clopper_pearson(fp, len(tw)) if tw else (float("nan"),) * 2
            det = sum(r["expected_significant"] for r in im)
            hits = sum(r["expected_hit"] for r in im)
            lr = np.median([r["log_ratio"] for r in tw]) if tw else float("nan")
            lines.append(f"| {noise} | {label} | {fp}/{len(tw)} | {fp / max(len(tw), 1):.3f} "
                         f"| {lo:.3f}–{hi:.3f} | {det}/{len(im)} | "
                         f"{det / max(len(im), 1):.2f} | {hits}/{len(im)} | {lr:+.2f} |")
    # power splits into "does RDX show the merge" (an a_over_b explanation at least half
    # of whose members are the merged classes; the fit, not the null) and "is what it shows
    # significant"; the first is the ceiling of any null
    if shown is None:
        shown = {r["pair"]: r["shown"] for r in rows if "shown" in r}
    head = ("| null | implanted | RDX shows the merge | detected | detected where shown "
            "| power where shown |")
    lines += ["", head, "|" + "---|" * 6] if markdown else ["", head]
    for noise in sorted({r["noise"] for r in rows}):
        im = [r for r in rows if r["noise"] == noise and r["kind"] == "implanted"
              and r["pair"] in shown]
        if not im:
            continue
        sh = [r for r in im if shown[r["pair"]]]
        det = sum(r["expected_significant"] for r in sh)
        lines.append(f"| {noise} | {len(im)} | {len(sh)} | "
                     f"{sum(r['expected_significant'] for r in im)} | {det}/{len(sh)} | "
                     f"{det / max(len(sh), 1):.2f} |")
    # the ceiling: an implanted merge whose two classes, as one group, are weaker than seed
    # noise's strongest group cannot be confirmed by a calibrated null whatever RDX shows;
    # RDX can still find a tighter core of it
    head = ("| null | implanted | merged classes beat seed noise | detected there "
            "| detected where they do not | median log(T merged classes / null median) |")
    if any("merge_p" in r for r in rows):
        lines += ["", head, "|" + "---|" * 6] if markdown else ["", head]
    for noise in sorted({r["noise"] for r in rows}):
        im = [r for r in rows if r["noise"] == noise and r["kind"] == "implanted"
              and "merge_p" in r]
        if not im:
            continue
        beat = [r for r in im if r["merge_beats_noise"]]
        rest = [r for r in im if not r["merge_beats_noise"]]
        lines.append(f"| {noise} | {len(im)} | {len(beat)} | "
                     f"{sum(r['expected_significant'] for r in beat)}/{len(beat)} | "
                     f"{sum(r['expected_significant'] for r in rest)}/{len(rest)} | "
                     f"{np.median([r['merge_log_ratio'] for r in im]):+.2f} |")
    # calibration beyond α = 0.05: under a calibrated null the twins' smallest (family-wise)
    # p is uniform, so about a share α of them falls at or below α for every α
    alphas = (0.01, 0.05, 0.1, 0.2, 0.3, 0.5)
    head = ("| null | twins | " + " | ".join(f"p ≤ {a:g}" for a in alphas)
            + " | KS distance to uniform (p) |")
    lines += ["", head, "|" + "---|" * (len(alphas) + 3)] if markdown else ["", head]
    for noise in sorted({r["noise"] for r in rows}):
        ps = np.asarray([r["min_p_fwer"] for r in rows
                         if r["noise"] == noise and r["kind"] == "twin"])
        if not len(ps):
            continue
        from scipy.stats import kstest

        ks = kstest(ps, "uniform")
        lines.append(f"| {noise} | {len(ps)} | "
                     + " | ".join(f"{int((ps <= a).sum())} ({(ps <= a).mean():.2f})"
                                  for a in alphas)
                     + f" | {ks.statistic:.3f} ({ks.pvalue:.2f}) |")
    head = ("| null | family | twins flagged | implanted detected "
            "| median log(T/null median), twins |")
    lines += ["", head, "|---|---|---|---|---|"] if markdown else ["", head]
    for noise in sorted({r["noise"] for r in rows}):
        for fam in sorted({r["family"] for r in rows}):
            rs = [r for r in rows if r["noise"] == noise and r["family"] == fam]
            tw = [r for r in rs if r["kind"] == "twin"]
            im = [r for r in rs if r["kind"] == "implanted"]
            lr = np.median([r["log_ratio"] for r in tw]) if tw else float("nan")
            lines.append(f"| {noise} | {fam} | {sum(r['any_significant'] for r in tw)}/{len(tw)} "
                         f"| {sum(r['expected_significant'] for r in im)}/{len(im)} | {lr:+.2f} |")
    return "\n".join(lines)


def cost(sizes: list[int], repeat: int, load: int = 0, load_kind: str = "python") -> None:
    """Whole-process seconds of ``rdx explain`` with and without ``--significance``, idle
    and, with ``load`` > 0, while ``load`` busy processes compete for the CPUs (both runs of
    a pair under the same load: the ratio is the figure that holds on a shared machine)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_core import load_description

    print("| n | load | plain s | --significance s | ratio | CPU s plain (system) | "
          "CPU s --significance (system) | peak GiB plain | peak GiB --significance | draws "
          "| target ≤ 5× |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in sizes:
        for n_load in ([0, load] if load else [0]):
            _cost_row(n, repeat, n_load, load_kind,
                      "idle" if not n_load else load_description(n_load, load_kind))


def _cost_row(n: int, repeat: int, load: int, load_kind: str, what: str) -> None:
    """One row of the cost table: n images, under one load."""
    import subprocess
    import tempfile

    from bench_core import competing_load, make_representations

    with tempfile.TemporaryDirectory() as tmp:
        A, B, _ = make_representations(n, 768, seed=0)
        A = A[:, :512]   # as bench_cli.py: A n × 512, B n × 768
        np.save(f"{tmp}/A.npy", A)
        np.save(f"{tmp}/B.npy", B)
        base = [sys.executable, "-m", "rdx", "explain", f"{tmp}/A.npy", f"{tmp}/B.npy",
                "--n-explanations", "5", "--quiet"]
        # per run: wall seconds, and the rdx process's own CPU seconds (user, system) and
        # peak resident memory (its rusage from wait4: the competing processes are children
        # of this one too)
        runs: dict[str, list[tuple[float, float, float, float]]] = {"plain": [], "sig": []}
        with competing_load(load, load_kind):
            for _ in range(repeat):
                for kind, extra in (("plain", []), ("sig", ["--significance"])):
                    t0 = time.perf_counter()
                    proc = subprocess.Popen(base + ["--out", f"{tmp}/{kind}"] + extra,
                                            stdout=subprocess.DEVNULL)
                    _, status, usage = os.wait4(proc.pid, 0)
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    if proc.returncode:
                        raise subprocess.CalledProcessError(proc.returncode, proc.args)
                    runs[kind].append((time.perf_counter() - t0, usage.ru_utime,
                                       usage.ru_stime, usage.ru_maxrss / 2**20))   # KiB → GiB
        doc = json.loads(Path(f"{tmp}/sig/explanations.json").read_text())
        draws = doc["info"]["significance"]["n_null"]
    best = {kind: min(r) for kind, r in runs.items()}     # the fastest run of each kind
    worst = {kind: max(r[0] for r in rs) for kind, rs in runs.items()}
    plain, sig = best["plain"][0], best["sig"][0]

    def cpu(kind: str) -> str:
        _, user, system, _ = best[kind]
        return f"{user + system:.1f} ({system:.1f})"

    def peak(kind: str) -> str:       # the largest over the runs of this kind
        return f"{max(r[3] for r in runs[kind]):.2f}"

    print(f"| {n} | {what} | {plain:.2f} ({worst['plain']:.2f}) | {sig:.2f} "
          f"({worst['sig']:.2f}) | {sig / plain:.2f}× | {cpu('plain')} | {cpu('sig')} | "
          f"{peak('plain')} | {peak('sig')} | {draws} | "
          f"{'met' if sig / plain <= 5 else 'missed'} |", flush=True)


def implants(results: Path, suite: str) -> None:
    """Per implanted case: the merged classes' separation (centroid distance over
    within-class spread) in A (merged, then its held-out twins) and B (fine, then its
    twins), the ratio of the means, how often a linear probe on B confuses the two classes
    (the merges were chosen under 10 %), the minimum p of each null in ``results``
    (current p rule only) and the twin null's p of the two merged classes as one group."""
    from rdx.evaluation.significance import P_METHOD
    from rdx.studies.benchmark.calibration import (SUITES, comparison_labels,
                                                   implant_strength, model_features,
                                                   probe_confusion)

    best: dict[tuple[str, str], list[float]] = {}
    ceiling: dict[str, float] = {}
    if results.is_file():
        for line in results.read_text().splitlines():
            r = json.loads(line)
            if r["kind"] == "implanted" and r.get("p_method") == P_METHOD and current(r):
                if r.get("n_twins", 2) == 2:
                    best.setdefault((r["pair"], r["noise"]), []).append(r["min_p_fwer"])
                    if r["noise"] == "twin":
                        ceiling[r["pair"]] = r["merge_p"]
    print("| implanted case | separation in A (merged; twins) | in B (fine; twins) | A/B | "
          "probe confusion in B | min p, twin null | merged classes' p, twin null "
          "| min p, field null (seeds) |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    confusion = {}
    for pair in SUITES[suite]():
        if pair.kind != "implanted":
            continue
        s = implant_strength(pair)
        if pair.b not in confusion:
            confusion[pair.b] = probe_confusion(model_features(pair.b),
                                                comparison_labels(pair.family))
        c = confusion[pair.b][pair.classes]
        twin = best.get((pair.name, "twin"))
        field = best.get((pair.name, "field"))
        name = pair.name.replace("|", "\\|")   # a cell of a markdown table
        print(f"| {name} | {', '.join(f'{x:.2f}' for x in s['a'])} | "
              f"{', '.join(f'{x:.2f}' for x in s['b'])} | {s['ratio']:.2f} | {c:.3f} | "
              f"{f'{min(twin):.4f}' if twin else '–'} | "
              f"{f'{ceiling[pair.name]:.4f}' if pair.name in ceiling else '–'} | "
              f"{', '.join(f'{x:.3f}' for x in field) if field else '–'} |", flush=True)


#: p-value rule of records written before it was recorded.
FIRST_P_METHOD = "student_t_predictive_log"
#: The twin null's draws: each twin against its model, and every two twins of one recipe
#: (:func:`rdx.evaluation.significance.twin_null_pairs`); records made before the twin
#: pairs were drawn have no ``twin_draws`` and are not reused.
TWIN_DRAWS = "twins and twin pairs"


def shifted_p(record: dict, t: float, log_shift: float) -> float:
    """The family-wise p of statistic ``t`` against a record's null maxima rescaled by
    ``exp(log_shift)`` (the field null read through a family's calibration)."""
    from rdx.evaluation.excess_affinity import predictive_p

    M = np.asarray(record["null_max_values"], dtype=np.float64) * np.exp(log_shift)
    return predictive_p(M, t, record["log_sd_used"])


def family_counts(records: list[dict], log_shift: float, alpha: float = 0.05) -> dict:
    """Twins flagged and merges detected among ``records`` (one family, one suite) when the
    field null is rescaled by ``exp(log_shift)``."""
    tw = [r for r in records if r["kind"] == "twin"]
    im = [r for r in records if r["kind"] == "implanted"]
    flagged = sum(min(shifted_p(r, t, log_shift) for v in r["statistics"].values() for t in v)
                  <= alpha for r in tw)
    detected = sum(any(shifted_p(r, t, log_shift) <= alpha
                       for t in r["statistics"]["a_over_b"]) for r in im)
    return {"twins": len(tw), "flagged": int(flagged), "implanted": len(im),
            "detected": int(detected)}


#: The shifts tried by :func:`fitted_shift` (log scale, step 0.05).
SHIFT_GRID = np.round(np.arange(-3.0, 3.0001, 0.05), 2)


def fitted_shift(design: list[dict], alpha: float = 0.05) -> float:
    """The family's ``log_shift``: the smallest rescaling of the field null's maxima (the
    most power) at which at most a share ``alpha`` of the family's design-suite seed twins
    is flagged. The median twin's log ratio is not enough: a family's recipes (early and
    final checkpoints, widths) sit at different distances from the field null, so the spread
    of the twins exceeds the spread within one null."""
    twins = [r for r in design if r["kind"] == "twin"]
    for c in SHIFT_GRID:
        if family_counts(twins, float(c), alpha)["flagged"] <= alpha * len(twins):
            return float(c)
    return float(SHIFT_GRID[-1])


def family_table(path: Path, markdown: bool, write: Path | None) -> None:
    """The field null's calibration by family: on the design suite each family's shift
    ``log_shift`` (:func:`fitted_shift`, from the design suite alone), then the false
    positives and power with and without it on both suites. A family is calibrated when its held-out false-positive rate
    is at most 0.05 with the upper end of its 95 % interval at most 0.15 (design and
    held-out counts pooled over the seeds of the draws recorded)."""
    from rdx.evaluation.null_calibration import SUITE_FAMILIES

    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    recs = [r for r in recs if r["noise"] == "field" and "null_max_values" in r]
    seeds = sorted({r["seed"] for r in recs})
    table: dict[str, dict] = {}
    head = ("| family | suite | log shift | twins flagged, uncalibrated | twins flagged, "
            "calibrated | FPR | 95 % CI | merges detected, uncalibrated | merges detected, "
            "calibrated | calibrated, per seed of the draws: flagged; detected |")
    lines = [head, "|" + "---|" * 10] if markdown else [head]
    for suite_family, family in SUITE_FAMILIES.items():
        design = [r for r in recs if r["family"] == suite_family and r.get("suite") == "design"]
        held = [r for r in recs if r["family"] == suite_family and r.get("suite") == "heldout"]
        if not any(r["kind"] == "twin" for r in design):
            continue
        shift = fitted_shift(design)
        row: dict = {"log_shift": shift}
        for name, rs in (("design", design), ("heldout", held)):
            raw, cal = family_counts(rs, 0.0), family_counts(rs, shift)
            lo, hi = clopper_pearson(cal["flagged"], cal["twins"]) if cal["twins"] else (1, 1)
            row[name] = {"uncalibrated": raw, "calibrated": cal, "fpr_ci": [lo, hi]}
            # the spread over seeds of the null's draws (the same comparisons each time)
            per = [family_counts([r for r in rs if r["seed"] == seed], shift) for seed in seeds]
            row[name]["per_seed"] = per
            spread = (", ".join(str(c["flagged"]) for c in per) + "; "
                      + ", ".join(str(c["detected"]) for c in per))
            lines.append(f"| {family} | {name} | {shift:+.2f} | {raw['flagged']}/{raw['twins']} "
                         f"| {cal['flagged']}/{cal['twins']} | "
                         f"{cal['flagged'] / max(cal['twins'], 1):.3f} | {lo:.3f}–{hi:.3f} | "
                         f"{raw['detected']}/{raw['implanted']} | "
                         f"{cal['detected']}/{cal['implanted']} | {spread} |")
        h = row["heldout"]["calibrated"]
        ok = bool(h["twins"]) and h["flagged"] / h["twins"] <= 0.05 and \
            row["heldout"]["fpr_ci"][1] <= 0.15
        d = row["design"]["calibrated"]
        row["calibrated"] = ok
        power = (d["detected"] + h["detected"]) / max(d["implanted"] + h["implanted"], 1)
        row["basis"] = (
            f"{family} seed twins of the suite: {d['flagged']} of {d['twins']} flagged on the "
            f"design suite, {h['flagged']} of {h['twins']} on held-out recipes (null maxima "
            f"rescaled by e^{shift:+.2f}); implanted merges found: {d['detected']} of "
            f"{d['implanted']} and {h['detected']} of {h['implanted']}"
            + ("" if ok else "; the held-out rate misses the target (≤ 0.05, upper end of "
                             "its 95 % interval ≤ 0.15)")
            + ("; so 'not significant' says little here" if ok and power < 0.25 else ""))
        table[family] = row
    print("\n".join(lines))
    if write is not None:
        from rdx.io import write_json_atomic

        doc = {"source": "benchmarks/bench_significance.py --family-table (records of "
                         f"--noise field --seeds {','.join(map(str, seeds))}, suites design "
                         "and heldout)", "seeds": seeds, "alpha": 0.05,
               "rule": "log_shift: the smallest rescaling (step 0.05) at which at most 5 % of "
                       "the family's design twins are flagged; calibrated: held-out FPR <= "
                       "0.05 and its 95 % upper end <= 0.15",
               "families": table}
        write_json_atomic(write, doc)
        print(f"wrote {write}")


def null_label(record: dict) -> str:
    """The null of a record as the tables name it: ``twin ×2`` is the twin null with two
    seed twins of each model."""
    return f"twin ×{record.get('n_twins', 2)}" if record["noise"] == "twin" else record["noise"]


def current(record: dict) -> bool:
    """False for a twin-null record drawn from the twins alone (before :data:`TWIN_DRAWS`)
    and for an implanted case's record without the merged classes' own p (``merge_p``)."""
    return (record["noise"] != "twin" or record.get("twin_draws") == TWIN_DRAWS) and \
        (record["kind"] != "implanted" or "merge_p" in record)


def _key(pair: str, noise: str, seed: int, n_null: int, max_null: int, p_method: str,
         n_twins: int = 2) -> tuple:
    """What identifies a result in ``--out`` (the twin null's draws are the pair's twins)."""
    return (pair, noise, p_method, TWIN_DRAWS, n_twins) if noise == "twin" else \
        (pair, noise, seed, n_null, max_null, p_method)


def main(argv: list[str] | None = None) -> int:
    from rdx.studies.benchmark.calibration import SUITES, load_pair

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--noise", default="field",
                   help="null candidates, comma-separated: field, local, twin (the twin null "
                        "on the suite's held-out seed twins)")
    p.add_argument("--seeds", default="0,1,2", help="seeds of the null draws")
    p.add_argument("--twins", default="2", metavar="N[,N...]",
                   help="seed twins of each model for the twin null, 1-6, comma-separated "
                        "(default 2)")
    p.add_argument("--n-null", type=int, default=None, help="null draws (default: rdx's)")
    p.add_argument("--max-null", type=int, default=None,
                   help="sequential: draw up to this many while a decision is unclear")
    p.add_argument("--only", default=None, help="twin or implanted")
    p.add_argument("--suite", default="design", choices=("design", "heldout"),
                   help="design: the suite the null was designed on; heldout: recipes and "
                        "seeds fixed beforehand and never used to choose the null")
    p.add_argument("--out", default="outputs/bench_significance.jsonl")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--cost", default=None, metavar="SIZES",
                   help="time rdx explain with and without --significance at these n instead")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--load", type=int, default=0, metavar="N",
                   help="with --cost: also time every n while N busy processes compete for "
                        "the CPUs (one core each; default 0: idle only)")
    p.add_argument("--load-kind", choices=("python", "numpy"), default="python",
                   help="with --load: what the competing processes spin on")
    p.add_argument("--implants", action="store_true",
                   help="print how much each implanted case implants (class separation of the "
                        "merged classes in A and B and their twins) next to its results in --out")
    p.add_argument("--family-table", action="store_true",
                   help="the field null's calibration by family from the records in --out "
                        "(both suites; the records of the table rdx ships are "
                        "benchmarks/results/bench_significance_field.jsonl), and with "
                        "--write-table the table rdx reads")
    p.add_argument("--write-table", default=None, metavar="JSON",
                   help="with --family-table: write it here (rdx's own table is "
                        "rdx/evaluation/field_null_calibration.json)")
    args = p.parse_args(argv)
    if args.family_table:
        family_table(Path(args.out), args.markdown,
                     Path(args.write_table) if args.write_table else None)
        return 0
    if args.implants:
        implants(Path(args.out), args.suite)
        return 0
    if args.cost:
        print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy "
              f"SIMD {simd_level()}; best (worst) of {args.repeat} runs, whole process")
        cost([int(x) for x in args.cost.split(",")], args.repeat, args.load, args.load_kind)
        return 0
    from rdx.evaluation.significance import DEFAULT_N_NULL, P_METHOD

    twins = [int(t) for t in args.twins.split(",")]
    if not all(1 <= t <= 6 for t in twins):
        p.error(f"--twins takes 1 to 6 twins per model, got {args.twins}")
    n_null = args.n_null or DEFAULT_N_NULL
    max_null = max(args.max_null or n_null, n_null)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {}
    if out.is_file():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            # records of the sequential trial (version 2) had max_null = 30
            rec_max = r.get("max_null", 30 if r.get("version") == 2 else r["n_null"])
            if current(r):
                done[_key(r["pair"], r["noise"], r["seed"], r["n_null"], rec_max,
                          r.get("p_method", FIRST_P_METHOD), r.get("n_twins", 2))] = r
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy SIMD "
          f"{simd_level()}; suite {args.suite}, n_null={n_null}, max_null={max_null}; "
          f"results: {out}", flush=True)
    pairs = [q for q in SUITES[args.suite]() if args.only in (None, q.kind)]
    rows = []
    for pair in pairs:
        A = B = labels = None
        for noise in args.noise.split(","):
            # the twin null draws nothing at random: one seed
            runs = [(0, t) for t in twins] if noise == "twin" else \
                [(int(s), 2) for s in args.seeds.split(",")]
            for seed, n_twins in runs:
                key = _key(pair.name, noise, seed, n_null, max_null, P_METHOD, n_twins)
                if key not in done:
                    if A is None:
                        A, B, labels = load_pair(pair)
                    done[key] = {"suite": args.suite,
                                 **evaluate(pair, A, B, labels, noise, seed, n_null,
                                            max_null, n_twins)}
                    with out.open("a") as f:
                        f.write(json.dumps(done[key]) + "\n")
                    r = done[key]
                    print(f"{r['pair']:<55} {null_label(r):>7} s{seed} min p {r['min_p_fwer']:.4f} "
                          f"{'SIGNIFICANT' if r['any_significant'] else '':<11} "
                          f"log ratio {r['log_ratio']:+.2f}  {r.get('n_draws', n_null)} draws, "
                          f"fit {r['fit_s']:.1f} s, "
                          f"significance {r['significance_s']:.1f} s", flush=True)
                rows.append(done[key])
    # whether the fit shows a merge does not depend on the null: any record of the case says
    print(summarise(rows, args.markdown,
                    {r["pair"]: r["shown"] for r in done.values() if "shown" in r}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
