"""Tables of the similarity study: rows as CSV files."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path


def write_csv(path: str | os.PathLike, rows: Sequence[Mapping]) -> Path:
    """Rows (dicts) as a CSV file, columns in first-seen order, written atomically."""
    import csv
    import io

    from ...io import atomic_write

    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in keys})
    p = Path(path)
    atomic_write(p, lambda fh: fh.write(buf.getvalue().encode()))
    return p
