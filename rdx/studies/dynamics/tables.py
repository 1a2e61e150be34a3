"""The training-dynamics tables: ``dynamics.csv`` (one row per checkpoint), ``clusters.csv``
(one row per checkpoint × cluster) and ``dynamics.json``, written atomically."""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from ...io import atomic_write, jsonable, write_json_atomic


def csv_row(rec: dict, class_names: Sequence[str]) -> dict:
    """The flat ``dynamics.csv`` row of one checkpoint record."""
    c0, b = rec["cluster0"], rec["band"]
    row = {k: rec.get(k) for k in ("index", "checkpoint", "step", "epoch", "epochs_completed",
                                   "train_accuracy", "test_accuracy", "probe_accuracy",
                                   "probe_accuracy_final")}
    row.update(no_change=rec["no_change"], n_difference_clusters=rec["n_difference_clusters"],
               n_merged=rec["n_merged"], c0_mean_affinity=c0["mean_affinity"],
               c0_size=c0["size"], c0_accuracy=c0["accuracy"],
               c0_accuracy_final=c0["accuracy_final"])
    for key, short in (("mean_affinity", "affinity"), ("size", "size"),
                       ("accuracy", "accuracy"), ("accuracy_final", "accuracy_final")):
        for stat in ("mean", "min", "max"):
            row[f"band_{short}_{stat}"] = (b.get(key) or {}).get(stat)
    for name, count in zip(class_names, c0["class_counts"]):
        row[f"c0_n_{name}"] = count
    for name, acc in zip(class_names, rec.get("class_accuracy") or []):
        row[f"accuracy_{name}"] = acc
    return row


def cluster_rows(rec: dict, class_names: Sequence[str]) -> list[dict]:
    """The ``clusters.csv`` rows of one checkpoint: cluster 0 then 1–m."""
    rows = []
    for c in [rec["cluster0"], *rec["clusters"]]:
        row = {"index": rec["index"], "checkpoint": rec["checkpoint"], "step": rec["step"],
               "cluster": c["label"], "track": c.get("track"),
               "no_change": bool(c["label"] == 0 and rec["no_change"]),
               "mean_affinity": c["mean_affinity"], "size": c["size"],
               "accuracy": c["accuracy"], "accuracy_final": c["accuracy_final"]}
        for name, count in zip(class_names, c["class_counts"]):
            row[f"n_{name}"] = count
        rows.append(row)
    return rows


def _csv_bytes(rows: list[dict]) -> bytes:
    buf = io.StringIO()
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else f"{v:.6g}" if isinstance(v, float) else v)
                    for k, v in jsonable(r).items()})
    return buf.getvalue().encode()


def write_outputs(out: Path, doc: dict) -> None:
    """``dynamics.json``, ``dynamics.csv`` and ``clusters.csv`` (atomically)."""
    names = doc["probe"]["class_names"]
    rows = [csv_row(r, names) for r in doc["checkpoints"]]
    crow = [row for r in doc["checkpoints"] for row in cluster_rows(r, names)]
    atomic_write(out / "dynamics.csv", lambda fh: fh.write(_csv_bytes(rows)))
    atomic_write(out / "clusters.csv", lambda fh: fh.write(_csv_bytes(crow)))
    write_json_atomic(out / "dynamics.json", doc)
