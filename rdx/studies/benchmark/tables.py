"""The benchmark's table: per-method summary (cases detected, controls clean), CSV and
Markdown."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per assessed method: in how many cases an expected-direction explanation is
    significant, and in how many controls none is."""
    out: dict[str, Any] = {}
    for r in rows:
        if r.get("detected") is None:
            continue
        s = out.setdefault(r["method"], {"cases": 0, "detected": 0, "controls_clean": 0,
                                         "significant_hits": 0})
        s["cases"] += 1
        s["detected"] += int(r["detected"])
        s["controls_clean"] += int(r["control_clean"])
        s["significant_hits"] += int(bool(r["significant_hits"]))
        if r.get("significant_expected_twin") is not None:
            s["detected_twin_null"] = s.get("detected_twin_null", 0) + \
                int(r["significant_expected_twin"] > 0)
    return out


CSV_COLUMNS = ("case", "method", "expected_direction", "hits_expected", "grids_expected",
               "hits_opposite", "grids_opposite", "hits_control", "grids_control",
               "chance_hit_rate", "significant_expected", "significant_hits",
               "significant_opposite", "significant_control", "min_p_fwer_expected",
               "min_p_fwer_opposite", "min_p_fwer_control", "detected", "control_clean",
               "significant_expected_twin", "min_p_fwer_expected_twin",
               "bsr_test", "bsr_control", "n_null", "seconds", "error")


def write_table_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    import csv
    import io

    from ...io import atomic_write

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r[k]) for k in CSV_COLUMNS})
    atomic_write(Path(path), lambda fh: fh.write(buf.getvalue().encode()))
    return Path(path)


def _frac(h: Any, t: Any) -> str:
    return "—" if h is None or t is None else f"{h}/{t}"


def _p(p: Any) -> str:
    return "—" if p is None else f"{p:.3f}"


def markdown_table(doc: dict[str, Any]) -> str:
    """The table as Markdown: hits (expected direction, opposite, control), chance, and
    the calibrated strength (FWER p of the strongest expected-direction explanation, number
    of significant ones, the control's smallest p)."""
    lines = ["| case | method | hits expected | hits opposite | hits control | chance/grid "
             "| significant expected (hits) | min p expected | min p expected, twin null "
             "| min p control | BSR test | BSR control |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if r.get("error"):
            lines.append(f"| {r['case']} | {r['method']} | failed: {r['error'][:80]} "
                         "| | | | | | | | | |")
            continue
        sig = "—" if r["significant_expected"] is None else \
            f"{r['significant_expected']} ({r['significant_hits']})"
        chance = "—" if r["chance_hit_rate"] is None else f"{r['chance_hit_rate']:.2g}"
        bt = "—" if r["bsr_test"] is None else f"{r['bsr_test']:.2f}"
        bc = "—" if r["bsr_control"] is None else f"{r['bsr_control']:.2f}"
        lines.append(
            f"| {r['case']} | {r['method']} | {_frac(r['hits_expected'], r['grids_expected'])} "
            f"| {_frac(r['hits_opposite'], r['grids_opposite'])} "
            f"| {_frac(r['hits_control'], r['grids_control'])} | {chance} | {sig} "
            f"| {_p(r['min_p_fwer_expected'])} | {_p(r.get('min_p_fwer_expected_twin'))} "
            f"| {_p(r['min_p_fwer_control'])} | {bt} | {bc} |")
    lines.append("")
    from ...results.nulls import null_name

    null = (f"{null_name('twin')}, {doc.get('twins_trained')} seed twin(s) of each model "
            "trained by the benchmark"
            if doc.get("twins_trained") else null_name(doc.get("null") or "field"))
    for m, s in doc["summary"].items():
        lines.append(f"{m} ({null}): significant expected-direction explanation in "
                     f"{s['detected']}/"
                     f"{s['cases']} cases (a significant hit in {s['significant_hits']}), "
                     f"no significant explanation in {s['controls_clean']}/{s['cases']} seed "
                     f"controls (α = {doc['alpha']}, family-wise)"
                     + (f"; with B's seed twin as the null: significant in "
                        f"{s['detected_twin_null']}/{s['cases']} cases." if
                        "detected_twin_null" in s else "."))
    lines.append(f"total {doc['timings_s']['total']:.0f} s on {doc['machine']['cpu_count']} "
                 "CPU cores")
    return "\n".join(lines) + "\n"
