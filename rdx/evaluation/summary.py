"""Score tables of a run: BSR/TSD/EQ, chance levels and known-difference recovery.

``summarize_comparison`` reads one comparison (a :class:`~rdx.results.store.ComparisonRun`)
and returns one row per method × direction × dissimilarity; ``summarize_experiment`` does
every comparison of an experiment and writes ``analysis/summary.csv`` (the rows, flat) and
``analysis/summary.json`` (the comparison summaries; their rows are exactly the CSV's rows).

Scores are the ones stored with each result when it was run (:mod:`rdx.evaluation.scoring`):
nothing is recomputed. Only a result that lacks them (written by an older version or
another tool) is scored here, on the comparison's ``representations.npz``.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..io import atomic_write, jsonable, write_json_atomic
from ..results.store import ComparisonRun, ExperimentRun
from ..results.types import DIRECTIONS, MethodResult
from .bsr import DISSIMILARITIES
from .known_difference import validate_known_difference
from .scoring import Scorer
#: Columns of ``summary.csv`` (and keys of every row), in order.
ROW_COLUMNS = (
    "experiment", "comparison", "method", "method_type", "direction", "dissimilarity",
    "bsr", "tsd", "eq", "n_pairs", "n_explanations", "grid_size",
    "chance_bsr_mean", "chance_bsr_lo", "chance_bsr_hi",
    "chance_tsd_mean", "chance_tsd_lo", "chance_tsd_hi",
    "chance_eq_mean", "chance_n_draws", "bsr_minus_chance",
    "known_difference_type", "known_difference_hits", "known_difference_total",
    "known_difference_rate", "known_difference_expected", "known_difference_score",
    "significance_null", "significance_n_assessed", "significance_n_significant",
    "significance_min_p_fwer",
)
_INT_COLUMNS = {"n_pairs", "n_explanations", "grid_size", "chance_n_draws",
                "known_difference_hits", "known_difference_total",
                "significance_n_assessed", "significance_n_significant"}
_FLOAT_COLUMNS = {"significance_min_p_fwer", "bsr", "tsd", "eq", "chance_bsr_mean", "chance_bsr_lo", "chance_bsr_hi",
                  "chance_tsd_mean", "chance_tsd_lo", "chance_tsd_hi", "chance_eq_mean",
                  "bsr_minus_chance", "known_difference_rate", "known_difference_score"}
_BOOL_COLUMNS = {"known_difference_expected"}


def _similarity(results: dict[str, MethodResult]) -> dict[str, dict[str, float]]:
    """Flat similarity numbers of the cka/classification results, keyed by method name."""
    out: dict[str, dict[str, float]] = {}
    for name, res in results.items():
        flat: dict[str, float] = {}
        for k, v in (res.info.get("similarity") or {}).items():
            flat[k] = v
        for k, v in (res.info.get("probe") or {}).items():
            if isinstance(v, dict) and "accuracy" in v:
                flat[f"probe_accuracy_{k}"] = v["accuracy"]
        for k, v in (res.info.get("agreement") or {}).items():
            flat[f"agreement_{k}"] = v
        if flat:
            out[name] = flat
    return out


def _clean(x: Any) -> Any:
    """NaN/inf → None and numpy scalars → Python, so CSV and JSON hold the same values."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else None
    return x


def _significance_columns(res: MethodResult, direction: str) -> dict[str, Any]:
    """Calibrated strength of a direction's explanations (``rdx.evaluation.significance``),
    when it was assessed: the null, how many were assessed and significant, the smallest
    family-wise p."""
    sigs = [e.extra["significance"] for e in res.directions[direction].explanations
            if isinstance(e.extra.get("significance"), dict)]
    if not sigs:
        return {"significance_null": None, "significance_n_assessed": None,
                "significance_n_significant": None, "significance_min_p_fwer": None}
    ps = [s["p_value_fwer"] for s in sigs if s.get("p_value_fwer") is not None]
    from ..results.nulls import null_id

    # one name per null: records written before it said "perturbation" for the field null
    return {"significance_null": null_id(sigs[0].get("null")),
            "significance_n_assessed": len(sigs),
            "significance_n_significant": sum(bool(s.get("significant")) for s in sigs),
            "significance_min_p_fwer": min(ps) if ps else None}


def comparison_scorer(run: ComparisonRun, kd: Any, **kw: Any) -> Scorer | None:
    """A scorer on the comparison's saved representations (None when they are missing)."""
    reps = run.representations
    if reps is None:
        return None
    return Scorer(reps["a"], reps["b"], labels=run.labels, known_difference=kd, **kw)


def summarize_comparison(comp: ComparisonRun | str | Path, **score_kw: Any) -> dict[str, Any]:
    """Score table of one comparison, from the scores stored with its results.

    Parameters
    ----------
    comp : ComparisonRun or path
        ``outputs/<experiment>/<comparison>`` (a folder with ``run.json``).
    **score_kw : for results that lack stored scores only: :class:`Scorer` options
        (``sigma_neighbor``, ``chance_draws``, ``chance_seed``).

    Returns
    -------
    dict
        ``{"experiment", "comparison", "n_images", "known_difference" (normalised
        declaration or None), "warnings" (what could not be scored or read), "similarity":
        {method name: {"cka_debiased", ..., "probe_accuracy_a", ..., "agreement_a_b",
        ...}}, "rows": [...]}``; a row per method with grids × direction × dissimilarity
        with the keys ``ROW_COLUMNS`` (``known_difference_*`` None without a declaration;
        ``known_difference_hits``/``total``/``rate`` for merged classes and flips,
        ``known_difference_score`` for a masked concept; ``known_difference_expected`` True
        in the direction where the implanted difference should show). Undefined numbers are
        None.
    """
    run = comp if isinstance(comp, ComparisonRun) else ComparisonRun(comp)
    meta = run.run
    # the runner records the declaration as validated; runs of the first release did not
    kd = meta["known_difference"] if "known_difference" in meta else validate_known_difference(
        (meta.get("config") or {}).get("known_difference"),
        f"{run.path}/run.json: config.known_difference")
    kd_type = (None if kd is None else
               "+".join(sorted({s["type"] for s in (kd if isinstance(kd, list) else [kd])})))
    results = run.results()
    scorer: Scorer | None = None
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    for name, res in results.items():
        grids = {d: g for d, g in res.grids.items() if d in DIRECTIONS and g}
        if not grids:
            continue  # cka / classification: no grids (their numbers go to "similarity")
        if not res.scores:
            # an older or foreign result: score it now, on the saved representations
            scorer = scorer or comparison_scorer(run, kd, **score_kw)
            if scorer is None:
                warnings.append(f"{name}: not scored (no stored scores and no "
                                "representations.npz to score on)")
                continue
            try:
                scorer.score(res)
            except RDXInputError as exc:   # e.g. an empty explanation of an old run
                warnings.append(f"{name}: not scored ({exc})")
                continue
        scores = res.scores or {}
        known = scores.get("known_difference") or {}
        if "undefined" in known:
            warnings.append(f"{name}: known difference not scored: {known['undefined']}")
            known = {}
        chance_all = scores.get("chance") or {}
        for d, dgrids in grids.items():
            sizes = sorted((len(g) for g in dgrids), reverse=True)
            kdd = known.get(d, {})
            sig = _significance_columns(res, d)
            for dis in DISSIMILARITIES:
                s = (scores.get(dis) or {}).get(d) or {}
                c = (chance_all.get(d) or {}).get(dis) or {}
                row = {"experiment": meta.get("experiment"), "comparison": meta.get("comparison"),
                       "method": name, "method_type": res.method, "direction": d,
                       "dissimilarity": dis, "bsr": s.get("bsr"), "tsd": s.get("tsd"),
                       "eq": s.get("eq"), "n_pairs": s.get("n_pairs"),
                       "n_explanations": len(dgrids),
                       "grid_size": max(sizes) if sizes else None,
                       "chance_bsr_mean": c.get("bsr_mean"), "chance_bsr_lo": c.get("bsr_lo"),
                       "chance_bsr_hi": c.get("bsr_hi"), "chance_tsd_mean": c.get("tsd_mean"),
                       "chance_tsd_lo": c.get("tsd_lo"), "chance_tsd_hi": c.get("tsd_hi"),
                       "chance_eq_mean": c.get("eq_mean"), "chance_n_draws": c.get("n_draws"),
                       "bsr_minus_chance": None,
                       "known_difference_type": kd_type,
                       "known_difference_hits": kdd.get("hits"),
                       "known_difference_total": kdd.get("total"),
                       "known_difference_rate": kdd.get("rate"),
                       "known_difference_expected": kdd.get("expected"),
                       "known_difference_score": kdd.get("score"), **sig}
                row = {k: _clean(v) for k, v in row.items()}
                if row["bsr"] is not None and row["chance_bsr_mean"] is not None:
                    row["bsr_minus_chance"] = row["bsr"] - row["chance_bsr_mean"]
                rows.append(row)
    reps = run.representations
    n_images = reps["a"].shape[0] if reps is not None else (run.images or {}).get("n_images")
    warnings += run.problems
    return {"experiment": meta.get("experiment"), "comparison": meta.get("comparison"),
            "n_images": _clean(n_images), "known_difference": kd,
            "similarity": jsonable(_similarity(results)), "warnings": warnings,
            "rows": rows}


def _csv_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)       # shortest string that reads back to the same float
    return str(v)


def parse_summary_csv(path: str | Path) -> list[dict[str, Any]]:
    """Read ``summary.csv`` back into rows with the types of the JSON (None for empty)."""
    with open(path, newline="") as fh:
        out = []
        for rec in csv.DictReader(fh):
            row: dict[str, Any] = {}
            for k, v in rec.items():
                if v == "":
                    row[k] = None
                elif k in _INT_COLUMNS:
                    row[k] = int(v)
                elif k in _FLOAT_COLUMNS:
                    row[k] = float(v)
                elif k in _BOOL_COLUMNS:
                    row[k] = v == "true"
                else:
                    row[k] = v
            out.append(row)
    return out


def summarize_experiment(exp_dir: ExperimentRun | str | Path, *,
                         comparisons: list[ComparisonRun] | None = None,
                         **kw: Any) -> list[dict[str, Any]]:
    """Summaries of every comparison of an experiment, written to ``exp_dir/analysis/``.

    Writes (atomically) ``analysis/summary.csv`` — one row per comparison × method ×
    direction × dissimilarity, columns ``ROW_COLUMNS`` (empty cell = undefined/not
    applicable) — and ``analysis/summary.json``, the list returned (one
    :func:`summarize_comparison` dict per comparison, comparisons in name order).
    ``comparisons`` are the experiment's comparison stores to reuse (their files are then
    read once for the summary and the report together). Keyword arguments go to
    :func:`summarize_comparison`.
    """
    exp = exp_dir if isinstance(exp_dir, ExperimentRun) else ExperimentRun(exp_dir)
    comps = comparisons if comparisons is not None else exp.require_comparisons()
    summaries = [summarize_comparison(c, **kw) for c in comps]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(ROW_COLUMNS)
    for s in summaries:
        for row in s["rows"]:
            w.writerow([_csv_value(row[c]) for c in ROW_COLUMNS])
    text = buf.getvalue().encode()
    atomic_write(exp.summary_csv, lambda fh: fh.write(text))
    write_json_atomic(exp.summary_json, summaries)
    return summaries
