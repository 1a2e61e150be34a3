"""Score tables of a run: BSR/TSD/EQ, chance levels and known-difference recovery (issue 5).

``summarize_comparison`` reads one comparison's outputs (``outputs/<experiment>/<comparison>``,
written by :mod:`rdx.experiments.run`) and returns one row per method × direction ×
dissimilarity; ``summarize_experiment`` does every comparison of an experiment and writes
``analysis/summary.csv`` (the rows, flat) and ``analysis/summary.json`` (the comparison
summaries; their rows are exactly the CSV's rows).

Scores are recomputed on the original (unmapped) representations of
``representations.npz`` — the same values the methods stored, but also for runs made by an
older version and with the chance level drawn from the same data. A run without
``representations.npz`` falls back to the scores stored in each ``explanations.json`` (no
chance level then).
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..io import atomic_write, jsonable, read_json, write_json_atomic
from .bsr import DISSIMILARITIES
from .chance import chance_levels
from .known_difference import score_known_difference, validate_known_difference

DIRECTIONS = ("a_over_b", "b_over_a")
#: Columns of ``summary.csv`` (and keys of every row), in order.
ROW_COLUMNS = (
    "experiment", "comparison", "method", "method_type", "direction", "dissimilarity",
    "bsr", "tsd", "eq", "n_pairs", "n_explanations", "grid_size",
    "chance_bsr_mean", "chance_bsr_lo", "chance_bsr_hi",
    "chance_tsd_mean", "chance_tsd_lo", "chance_tsd_hi",
    "chance_eq_mean", "chance_n_draws", "bsr_minus_chance",
    "known_difference_type", "known_difference_hits", "known_difference_total",
    "known_difference_rate", "known_difference_expected", "known_difference_score",
)
_INT_COLUMNS = {"n_pairs", "n_explanations", "grid_size", "chance_n_draws",
                "known_difference_hits", "known_difference_total"}
_FLOAT_COLUMNS = {"bsr", "tsd", "eq", "chance_bsr_mean", "chance_bsr_lo", "chance_bsr_hi",
                  "chance_tsd_mean", "chance_tsd_lo", "chance_tsd_hi", "chance_eq_mean",
                  "bsr_minus_chance", "known_difference_rate", "known_difference_score"}
_BOOL_COLUMNS = {"known_difference_expected"}


def load_comparison(comp_dir: str | Path) -> dict[str, Any]:
    """Everything a comparison's run wrote, loaded.

    Returns
    -------
    dict
        ``{"dir": Path, "run": run.json, "images": images.json (or None), "A", "B",
        "labels": arrays of representations.npz (None if the file is missing),
        "methods": {method name: explanations.json}}``. Methods are in the order of the
        run's config (then any other finished method folder, alphabetically).
    """
    d = Path(comp_dir)
    if not (d / "run.json").is_file():
        raise RDXInputError(f"no run found in {d}: run `rdx run --config configs/<experiment>"
                            ".yaml` first (a comparison folder holds run.json).")
    run = read_json(d / "run.json")
    images = read_json(d / "images.json") if (d / "images.json").is_file() else None
    A = B = labels = None
    rep = d / "representations.npz"
    if rep.is_file():
        with np.load(rep, allow_pickle=False) as z:
            A, B = z["a"], z["b"]
            labels = z["labels"] if "labels" in z.files else None
    if labels is None and images is not None and images.get("labels") is not None:
        labels = np.asarray(images["labels"])
    configured = [m.get("name", m.get("method")) for m in
                  (run.get("config") or {}).get("methods", []) if isinstance(m, dict)]
    found = {p.parent.name for p in d.glob("*/explanations.json")}
    order = [m for m in configured if m in found] + sorted(found - set(configured))
    methods = {name: read_json(d / name / "explanations.json") for name in order}
    return {"dir": d, "run": run, "images": images, "A": A, "B": B, "labels": labels,
            "methods": methods}


def _similarity(methods: dict[str, dict]) -> dict[str, dict[str, float]]:
    """Flat similarity numbers of the cka/classification documents, keyed by method name."""
    out: dict[str, dict[str, float]] = {}
    for name, doc in methods.items():
        flat: dict[str, float] = {}
        for k, v in (doc.get("similarity") or {}).items():
            flat[k] = v
        for k, v in (doc.get("probe") or {}).items():
            if isinstance(v, dict) and "accuracy" in v:
                flat[f"probe_accuracy_{k}"] = v["accuracy"]
        for k, v in (doc.get("agreement") or {}).items():
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


def _grids(doc: dict) -> dict[str, list[list[int]]]:
    return {d: [list(map(int, e["images"])) for e in doc["directions"][d].get("explanations", [])]
            for d in DIRECTIONS if d in (doc.get("directions") or {})}


def summarize_comparison(comp_dir: str | Path, *, n_draws: int = 1000, seed: int = 0,
                         sigma_neighbor: int = 7) -> dict[str, Any]:
    """Score table of one comparison.

    Parameters
    ----------
    comp_dir : path
        ``outputs/<experiment>/<comparison>`` (a folder with ``run.json``).
    n_draws, seed : chance-level draws (see :func:`rdx.evaluation.chance.chance_levels`);
        every method whose grids have the same sizes gets the same random grids.
    sigma_neighbor : neighbour of the local-scaling σ (as in ``bsr_scores``).

    Returns
    -------
    dict
        ``{"experiment", "comparison", "n_images", "known_difference" (normalised
        declaration or None), "warnings" (what could not be scored), "similarity":
        {method name: {"cka_debiased", ..., "probe_accuracy_a", ..., "agreement_a_b",
        ...}}, "rows": [...]}``; a row per method
        with grids × direction × dissimilarity with the keys ``ROW_COLUMNS``
        (``known_difference_*`` None without a declaration; ``known_difference_hits``/
        ``total``/``rate`` for merged classes and flips, ``known_difference_score`` for a
        masked concept; ``known_difference_expected`` True in the direction where the
        implanted difference should show). Undefined numbers are None.
    """
    # imported here: rdx.results imports rdx.evaluation, whose __init__ may import this module
    from ..results.document import grid_scores

    comp = load_comparison(comp_dir)
    run = comp["run"]
    A, B, labels = comp["A"], comp["B"], comp["labels"]
    cfg = run.get("config") or {}
    kd = validate_known_difference(cfg.get("known_difference"),
                                   f"{comp['dir']}/run.json: config.known_difference")
    kd_type = (None if kd is None else
               "+".join(sorted({s["type"] for s in (kd if isinstance(kd, list) else [kd])})))
    n_images = (A.shape[0] if A is not None else
                (comp["images"] or {}).get("n_images"))
    chance_cache: dict[tuple[int, ...], dict] = {}
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    for name, doc in comp["methods"].items():
        grids = _grids(doc)
        if not grids:
            continue  # cka / classification: no grids (their numbers go to "similarity")
        if A is not None:
            _, scores = grid_scores(A, B, grids, sigma_neighbor=sigma_neighbor)
        else:
            scores = doc.get("scores") or {}
        known: dict = {}
        if kd is not None:
            try:
                known = score_known_difference(kd, grids, labels, A=A, B=B)
            except RDXInputError as exc:   # e.g. a run made before representations.npz
                warnings.append(f"{name}: known difference not scored: {exc}")
        for d, dgrids in grids.items():
            sizes = tuple(sorted((len(g) for g in dgrids), reverse=True))
            chance = None
            if A is not None and sizes:
                if sizes not in chance_cache:
                    chance_cache[sizes] = chance_levels(A, B, list(sizes), n_draws=n_draws,
                                                        seed=seed, sigma_neighbor=sigma_neighbor)
                chance = chance_cache[sizes]
            kdd = known.get(d, {})
            for dis in DISSIMILARITIES:
                s = (scores.get(dis) or {}).get(d) or {}
                c = ((chance or {}).get(dis) or {}).get(d) or {}
                row = {"experiment": run.get("experiment"), "comparison": run.get("comparison"),
                       "method": name, "method_type": doc.get("method"), "direction": d,
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
                       "known_difference_score": kdd.get("score")}
                row = {k: _clean(v) for k, v in row.items()}
                if row["bsr"] is not None and row["chance_bsr_mean"] is not None:
                    row["bsr_minus_chance"] = row["bsr"] - row["chance_bsr_mean"]
                rows.append(row)
    return {"experiment": run.get("experiment"), "comparison": run.get("comparison"),
            "n_images": _clean(n_images), "known_difference": kd,
            "similarity": jsonable(_similarity(comp["methods"])), "warnings": warnings,
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


def summarize_experiment(exp_dir: str | Path, **kw: Any) -> list[dict[str, Any]]:
    """Summaries of every comparison of an experiment, written to ``exp_dir/analysis/``.

    Writes (atomically) ``analysis/summary.csv`` — one row per comparison × method ×
    direction × dissimilarity, columns ``ROW_COLUMNS`` (empty cell = undefined/not
    applicable) — and ``analysis/summary.json``, the list returned (one
    :func:`summarize_comparison` dict per comparison, comparisons in name order).
    Keyword arguments go to :func:`summarize_comparison`.
    """
    d = Path(exp_dir)
    comps = sorted(p.parent for p in d.glob("*/run.json"))
    if not comps:
        raise RDXInputError(f"no run found in {d}: run `rdx run --config configs/{d.name}.yaml` "
                            "first (it writes outputs/<experiment>/<comparison>/run.json).")
    summaries = [summarize_comparison(c, **kw) for c in comps]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(ROW_COLUMNS)
    for s in summaries:
        for row in s["rows"]:
            w.writerow([_csv_value(row[c]) for c in ROW_COLUMNS])
    text = buf.getvalue().encode()
    atomic_write(d / "analysis" / "summary.csv", lambda fh: fh.write(text))
    write_json_atomic(d / "analysis" / "summary.json", summaries)
    return summaries
