"""The benchmark run: every method on each case's test and control comparison (run, score,
assess, grids, written to the run store; finished methods are read back), then the table."""
from __future__ import annotations

import dataclasses
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import RDXInputError
from ...progress import working
from .cases import (BENCHMARK_VERSION, CASES, FAMILY, SEED, SUITES, TWIN_SEED, Case,
                    MethodSpec, Suite)
from .data import comparison_images, features, source_arrays, train_model
from .tables import CSV_COLUMNS, markdown_table, summarize, write_table_csv


def chance_hit_rate(spec: Any, labels: np.ndarray, *, grid_size: int = 9, draws: int = 2000,
                    seed: int = 0) -> float | None:
    """Probability that a grid of ``grid_size`` random images is a hit of the (validated)
    declaration: the hit rate a method would reach by chance."""
    from ...evaluation.known_difference import score_known_difference

    rng = np.random.default_rng(seed)
    n = len(labels)
    grids = [rng.choice(n, size=min(grid_size, n), replace=False).tolist() for _ in range(draws)]
    res = score_known_difference(spec, {"a_over_b": grids}, labels, validated=True)["a_over_b"]
    return res["rate"]


def _direction_summary(result, direction: str, kd: dict | None) -> dict[str, Any]:
    exps = result.directions[direction].explanations if direction in result.directions else []
    sig = [e.extra.get("significance") for e in exps]
    hit_grids = set((kd or {}).get(direction, {}).get("hit_grids") or [])
    kdd = (kd or {}).get(direction) or {}
    p = [s["p_value_fwer"] for s in sig if s]
    return {"hits": kdd.get("hits"), "total": kdd.get("total"),
            "assessed": bool(p),
            "significant": sum(bool(s and s["significant"]) for s in sig) if p else None,
            "significant_hits": sum(bool(s and s["significant"]) and j in hit_grids
                                    for j, s in enumerate(sig)) if p else None,
            "min_p_fwer": min(p) if p else None}


def _row(case: Case, name: str, test, control, chance: float | None, seconds: float
         ) -> dict[str, Any]:
    from ...evaluation.known_difference import expected_direction

    specs = case.known_difference if isinstance(case.known_difference, list) \
        else [case.known_difference]
    expected = expected_direction(specs[0])
    opposite = "b_over_a" if expected == "a_over_b" else "a_over_b"
    kd_t = (test.scores or {}).get("known_difference")
    kd_c = (control.scores or {}).get("known_difference")
    te, to = _direction_summary(test, expected, kd_t), _direction_summary(test, opposite, kd_t)
    ce, co = (_direction_summary(control, expected, kd_c),
              _direction_summary(control, opposite, kd_c))
    assessed = te["assessed"]
    bsr_t, bsr_c = test.bsr or {}, control.bsr or {}
    tw = (test.info.get("significance_twin") or {}).get("explanations") or {}
    tw_exp = tw.get(expected) or []
    return {
        "case": case.name, "method": name, "expected_direction": expected,
        "hits_expected": te["hits"], "grids_expected": te["total"],
        "hits_opposite": to["hits"], "grids_opposite": to["total"],
        "hits_control": ce["hits"], "grids_control": ce["total"],
        "chance_hit_rate": chance,
        "significant_expected": te["significant"], "significant_hits": te["significant_hits"],
        "significant_opposite": to["significant"],
        "significant_control": (ce["significant"] + co["significant"]) if assessed else None,
        "min_p_fwer_expected": te["min_p_fwer"], "min_p_fwer_opposite": to["min_p_fwer"],
        "min_p_fwer_control": min(x for x in (ce["min_p_fwer"], co["min_p_fwer"])
                                  if x is not None) if assessed else None,
        "detected": bool(te["significant"]) if assessed else None,
        "significant_expected_twin": sum(r["significant"] for r in tw_exp) if tw else None,
        "min_p_fwer_expected_twin": min(r["p_value_fwer"] for r in tw_exp) if tw_exp else None,
        "control_clean": (ce["significant"] + co["significant"] == 0) if assessed else None,
        "bsr_test": bsr_t.get("mean"), "bsr_control": bsr_c.get("mean"),
        "n_null": (test.info.get("significance") or {}).get("n_null"),
        "seconds": seconds, "error": None,
    }


def _check_names(suite: Suite, cases: list[str] | None, methods: list[str] | None
                 ) -> tuple[list[Case], list[MethodSpec]]:
    from ...experiments.methods import method_names

    chosen = list(suite.cases) if not cases else list(cases)
    unknown = [c for c in chosen if c not in CASES]
    if unknown:
        raise RDXInputError(f"unknown benchmark case(s) {unknown}; choose from "
                            f"{', '.join(CASES)}.")
    specs = list(suite.methods)
    if methods:
        known = {m.method for m in SUITES["default"].methods}
        bad = [m for m in methods if m not in known]
        if bad:
            grid = sorted(set(method_names()) & known)
            raise RDXInputError(f"--methods: {bad} are not grid-producing methods of the "
                                f"benchmark; choose from {', '.join(grid)}.")
        by_name = {m.method: m for m in (*SUITES["default"].methods, *suite.methods)}
        specs = [by_name[m] for m in methods]
    return [CASES[c] for c in chosen], specs


def _run_method(writer, spec: MethodSpec, X: np.ndarray, Y: np.ndarray, labels: np.ndarray,
                scorer, images, data_digest: str, *, n_null: int | None, progress: bool,
                class_names: list[str] | None = None, twin: np.ndarray | None = None,
                twins: dict[str, list[np.ndarray]] | None = None):
    """One method on one comparison: run, score, assess, grids, write (or read if done).

    The built-in assessment (``extra["significance"]``) is against the twin null where
    ``twins`` (``{"a": [...], "b": [...]}``, seed twins of X and of Y) are given, else the
    field null of the benchmark's model family. With ``twin`` (a seed twin of ``Y``) the
    result is also assessed against the twin null on that twin alone; that assessment goes
    to ``info["significance_twin"]`` (the per-explanation records under its
    ``"explanations"``).
    """
    from ...backend import seeded
    from ...evaluation.significance import assess
    from ...io import json_digest
    from ...experiments.methods import MethodContext, method
    from ...viz.grids import save_result_grids

    draws = spec.n_null if n_null is None or not spec.n_null else n_null
    use_twin = twin is not None and spec.twin and bool(draws)
    fingerprint = json_digest({"method": spec.method, "params": spec.params, "seed": SEED,
                               "n_null": draws, "twin": use_twin, "data": data_digest,
                               "twins": {k: len(v) for k, v in (twins or {}).items()},
                               "benchmark": BENCHMARK_VERSION})
    if writer.store.is_finished(spec.method, fingerprint):
        res = writer.store.result(spec.method)
        if res is not None:
            writer.run["methods"][spec.method] = "skipped (done)"
            return res, (res.run or {}).get("seconds", 0.0)
    t0 = time.perf_counter()
    ctx = MethodContext(labels=labels, seed=SEED, device="cpu")
    runner = method(spec.method)

    def refit(A: np.ndarray, B: np.ndarray):
        with seeded(SEED):
            return runner.run(A, B, dict(spec.params), ctx)

    result = refit(X, Y)
    scorer.score(result)
    if use_twin:
        from ...results.types import MethodResult
        copy = MethodResult.from_json(result.to_json())
        twin_out = assess(copy, X, Y, n_null=draws, random_state=SEED, refit=refit,
                          control_b=twin, progress=progress)
        result.info["significance_twin"] = twin_out
    if draws:
        assess(result, X, Y, n_null=draws, random_state=SEED, refit=refit, progress=progress,
               control_a=(twins or {}).get("a") or None,
               control_b=(twins or {}).get("b") or None, family=FAMILY)
    seconds = time.perf_counter() - t0
    grids = save_result_grids(result, images, writer.method_dir(spec.method),
                              class_names=class_names)
    writer.write_method(spec.method, result, files=grids, seconds=seconds,
                        provenance={"benchmark": True, "method": spec.method,
                                    "name": spec.method, "seed": SEED,
                                    "fingerprint": fingerprint, "seconds": seconds})
    return result, seconds


def run_case(case: Case, specs: list[MethodSpec], out: Path, *, checkpoints: Path,
             scale: float = 1.0, n_null: int | None = None, data_root: str | Path = "data",
             twins: int = 0, progress: bool = True
             ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train (or load) the case's three models — with ``twins`` = T also T seed twins of A
    and T more of B (:class:`~.cases.Suite`) —, run every method on the test and the
    control comparison; returns the table rows and the case's record."""
    from ...data import ImageDataset
    from ...data.selection import LazyImages
    from ...evaluation.known_difference import validate_known_difference
    from ...evaluation.scoring import Scorer
    from ...io import array_digest, read_json, versions
    from ...models.checkpoint import sidecar_path
    from ...results.writer import ComparisonWriter, images_record, utc_now
    from ...viz.grids import display_images

    say = print if progress else (lambda *a, **k: None)
    t0 = time.perf_counter()
    ckpt = {}
    models = [("a", case.a, SEED), ("b", case.b, SEED), ("b_twin", case.b, TWIN_SEED)]
    # seed twins for the twin null of the test (A's seeds 1..T, B's 1..T) and of the control
    # (B's seed 1 against B: B's seeds 2..T+1)
    models += [(f"a_twin{s}", case.a, s) for s in range(TWIN_SEED, TWIN_SEED + twins)]
    models += [(f"b_twin{s}", case.b, s) for s in range(TWIN_SEED + 1, TWIN_SEED + twins + 1)]
    t_model = {}
    for key, recipe, seed in models:
        # a cached model loads at once; a new one loads its data (seconds) before its bar
        t1 = time.perf_counter()
        with working(f"  [{case.name}] model {key}: {recipe.folder(seed)}", show=progress):
            ckpt[key] = train_model(recipe, seed, checkpoints=checkpoints,
                                    data_root=data_root, progress=progress)
        t_model[key] = time.perf_counter() - t1
    t_train = time.perf_counter() - t0
    t_twins = sum(t for key, t in t_model.items() if key[-1].isdigit())
    if twins:
        say(f"  [{case.name}] the twins for the twin null: {t_twins:.0f} s of the "
            f"{t_train:.0f} s of training (0 when cached)")
    with working(f"  [{case.name}] images and features of the {len(models)} models",
                 show=progress):
        images, labels, names = comparison_images(case.images, scale=scale,
                                                  data_root=data_root)
        reps = {key: features(ckpt[key], images, mask=recipe.mask)
                for key, recipe, _ in models}
    # the twins of each comparison's A and B: the test's A and B have one each; the
    # control compares two seeds of B's recipe, whose third seed is a twin of both
    if twins:
        control = [reps[f"b_twin{s}"] for s in range(TWIN_SEED + 1, TWIN_SEED + twins + 1)]
        null_twins = {"test": {"a": [reps[f"a_twin{s}"]
                                     for s in range(TWIN_SEED, TWIN_SEED + twins)],
                               "b": [reps["b_twin"]] + control[:twins - 1]},
                      "control": {"a": control, "b": control}}
    else:
        null_twins = {"test": None, "control": None}
    kd = validate_known_difference(case.known_difference, f"cases.{case.name}.known_difference")
    chance = chance_hit_rate(kd if isinstance(kd, list) else kd, labels)
    ds = ImageDataset(name=f"benchmark_{case.name}", labels=labels, class_names=names,
                      ids=[str(i) for i in range(len(labels))], images=images)
    lazy = LazyImages(ds, np.arange(len(labels)))
    results: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    errors: dict[str, str] = {}
    for pair, (xa, xb) in {"test": ("a", "b"), "control": ("b_twin", "b")}.items():
        X, Y = reps[xa], reps[xb]
        writer = ComparisonWriter(out / case.name / pair, run={
            "experiment": f"benchmark/{case.name}", "comparison": pair, "seed": SEED,
            "config": {"description": case.description,
                       "representations": {"a": {"checkpoint": str(ckpt[xa])},
                                           "b": {"checkpoint": str(ckpt[xb])}},
                       "image_selection": {"dataset": ds.name},
                       "methods": [{"method": m.method, "name": m.method, **m.params}
                                   for m in specs]},
            "known_difference": kd, "versions": versions(), "device": "cpu",
            "started": utc_now()})
        writer.write_inputs(images_record(dataset=ds.name, n_images=len(labels),
                                          class_names=names, ids=ds.ids, labels=labels,
                                          indices=list(range(len(labels)))), X, Y, labels,
                            image_array=display_images(images))   # for the explorer
        scorer = Scorer(X, Y, labels=labels, known_difference=kd, chance_draws=200)
        digest = array_digest(X, Y, labels)
        for spec in specs:
            draws = spec.n_null if n_null is None or not spec.n_null else n_null
            # fit, scoring and the null draws of significance (each a refit): the longest
            # step of the suite; the significance bar shows inside it
            doing = f"  [{case.name}/{pair}] {spec.method}: fit, scoring" + (
                f", {draws} null draws" if draws else "")
            try:
                with working(doing, show=progress, keep=False):   # said below, with time
                    res, sec = _run_method(writer, spec, X, Y, labels, scorer, lazy, digest,
                                           n_null=n_null, progress=progress,
                                           class_names=names,
                                           twin=reps["b_twin"] if pair == "test" else None,
                                           twins=null_twins[pair])
            except RDXInputError as exc:   # one method failing must not stop the suite
                errors[spec.method] = f"{pair}: {exc}"
                say(f"  [{case.name}/{pair}] {spec.method}: failed: {exc}")
                continue
            results.setdefault(spec.method, {})[pair] = res
            seconds[spec.method] = seconds.get(spec.method, 0.0) + sec
            sig = res.info.get("significance")
            say(f"  [{case.name}/{pair}] {spec.method}: {sec:.1f} s"
                + (f", min p_fwer {sig['min_p_value_fwer']:.3f}" if sig else ""))
        writer.write_run(finished=utc_now())
    rows = [_row(case, spec.method, results[spec.method]["test"],
                 results[spec.method]["control"], chance, seconds[spec.method])
            if spec.method not in errors else
            {**{k: None for k in CSV_COLUMNS}, "case": case.name, "method": spec.method,
             "error": errors[spec.method]}
            for spec in specs]
    accuracy = {k: read_json(sidecar_path(p)).get("train_accuracy") for k, p in ckpt.items()}
    record = {"description": case.description, "n_images": int(len(labels)),
              "known_difference": kd, "chance_hit_rate": chance,
              "recipes": {"a": dataclasses.asdict(case.a), "b": dataclasses.asdict(case.b)},
              "seeds": {key: seed for key, _, seed in models},
              "null": "twin" if twins else "field",
              "checkpoints": {k: str(p) for k, p in ckpt.items()},
              "train_accuracy": accuracy, "seconds_training": t_train,
              "seconds_training_twins": t_twins,
              "seconds": time.perf_counter() - t0}
    return rows, record


def run_benchmark(out: str | Path = "outputs/benchmark", *, suite: str = "default",
                  cases: list[str] | None = None, methods: list[str] | None = None,
                  n_null: int | None = None, checkpoints: str | Path = "checkpoints/benchmark",
                  data_root: str | Path = "data", progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the suite and write ``benchmark.json``, ``.csv`` and ``.md``
    (``rdx benchmark`` then writes ``report.html`` from the returned document with
    :func:`rdx.report.benchmark.write_benchmark_report`).

    ``suite``: ``default``, ``quick`` (CI-sized) or ``paper`` (the paper's 5000 images per
    comparison, RDX against the dictionary methods); :data:`~.cases.SUITES`.

    Returns the JSON document: ``rows`` (one per case × method), ``summary`` (per assessed
    method: cases detected and controls clean at α = 0.05 family-wise), ``cases``,
    ``timings_s`` and the machine and versions.
    """
    from ...io import versions, write_json_atomic

    if suite not in SUITES:
        raise RDXInputError(f"unknown benchmark suite {suite!r}; choose from "
                            f"{', '.join(SUITES)}.")
    suite_name, suite = suite, SUITES[suite]
    chosen, specs = _check_names(suite, cases, methods)
    if n_null is not None:
        from ...validation import check_int
        check_int(n_null, "--n-null", minimum=1)
    for dataset in sorted({c.images.dataset for c in chosen}):
        source_arrays(dataset, "train", data_root)     # a missing dataset fails before any work
    out = Path(out)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    records: dict[str, Any] = {}
    say = print if progress else (lambda *a, **k: None)
    for case in chosen:
        say(f"[benchmark] {case.name}: {case.description}")
        case_rows, records[case.name] = run_case(
            case, specs, out, checkpoints=Path(checkpoints), scale=suite.per_class_scale,
            n_null=n_null, data_root=data_root, twins=suite.twins, progress=progress)
        rows += case_rows
    summary = summarize(rows)
    doc = {"suite": suite_name, "alpha": 0.05, "rows": rows,
           "null": "twin" if suite.twins else "field", "twins_trained": suite.twins,
           "summary": summary, "cases": records,
           "methods": [dataclasses.asdict(m) for m in specs],
           "timings_s": {"total": time.perf_counter() - t0,
                         **{c: r["seconds"] for c, r in records.items()}},
           "machine": {"cpu_count": __import__("os").cpu_count(),
                       "platform": platform.platform()},
           "versions": versions()}
    write_json_atomic(out / "benchmark.json", doc)
    write_table_csv(out / "benchmark.csv", rows)
    text = markdown_table(doc)
    from ...io import atomic_write
    atomic_write(out / "benchmark.md", lambda fh: fh.write(text.encode()))
    say(text)
    return doc
