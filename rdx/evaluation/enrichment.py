"""What is this explanation? The attributes its images have more (or less) often than the rest.

For every explanation (its ``members``, or its grid where a method has no members) and every
named group (``info["group_tests"]``), each attribute of the images is tested against the
rest of the images:

Attributes (:class:`Attribute`)
    * the class labels (``class``), where the run has them;
    * the low-level image statistics (:mod:`rdx.evaluation.image_stats`: brightness,
      contrast, colourfulness, edge density, centre of mass, object size), where the run
      has images;
    * any per-image table (:func:`read_table`: a CSV of one row per image), each column
      categorical or numeric (:func:`column_attribute`).
Categorical attributes
    one test per level (for a two-level attribute, its rarer level only: the other's test is
    the same): the level's share among the members and among the rest, their ratio, and
    Fisher's exact test (two-sided, :func:`fisher_two_sided`: the hypergeometric tail
    :func:`scipy.stats.fisher_exact` gives, for all levels at once) of the 2×2 table
    members/rest × level/other. Images without a value are left out of the table.
Numeric attributes
    the members' and the rest's mean and median, their ratio of means (for a non-negative
    attribute), the standardized mean difference (Cohen's d with the pooled standard
    deviation), the rank-biserial correlation ``2U/(m·r) − 1`` (``U`` the members'
    Mann–Whitney statistic, ``m`` and ``r`` the two sizes: +1 when every member is above
    every other image) and the two-sided Mann–Whitney U test (:func:`mann_whitney`: the
    p-value of :func:`scipy.stats.mannwhitneyu`, from ranks computed once per attribute).
    Images without a value (empty, NaN) are left out.
Correction
    the Benjamini–Hochberg adjustment (``correction="benjamini-hochberg"``, the default) over
    *every* test of one call — all attributes, levels, explanations of both directions and
    named groups together — so that among the findings reported at ``alpha`` (0.05) the
    expected share of false ones is at most ``alpha``; when no attribute is related to any
    explanation it is also the chance of reporting anything at all. ``correction="holm"``
    gives Holm's step-down adjustment instead (family-wise error over the same tests). A
    finding is a test whose adjusted p-value is at most ``alpha``.

The results (:func:`enrich`) go into each explanation's ``extra["enrichment"]`` and a
one-line ``extra["description"]`` made only of findings (:func:`describe`), each named
group's record likewise, and ``info["enrichment"]`` (what was tested, with what correction).
"""
from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from .image_stats import IMAGE_STATISTICS, image_statistics

#: Corrections over the tests of one call.
CORRECTIONS = ("benjamini-hochberg", "holm")
#: A column of numbers with at most this many distinct values, all integers, is categorical
#: (class codes, 0/1 flags, sites numbered 1..5); with more it is numeric.
MAX_INTEGER_LEVELS = 12
#: A categorical column with more levels than this is not tested (ids, file names, free
#: text); the class labels are always tested.
MAX_LEVELS = 100
#: Cells read as missing in a table (case-insensitive, after stripping spaces).
MISSING = ("", "na", "n/a", "nan", "null", "none")
#: Findings named in one description.
DESCRIPTION_FINDINGS = 3
#: Words of a higher/lower value of the image statistics in a description.
WORDS = {"brightness": ("brighter", "darker"),
         "contrast": ("more contrast", "less contrast"),
         "colourfulness": ("more colourful", "less colourful"),
         "edge_density": ("more edges", "fewer edges"),
         "object_size": ("larger objects", "smaller objects"),
         "centre_row": ("centred lower", "centred higher"),
         "centre_col": ("centred further right", "centred further left")}


@dataclass
class Attribute:
    """One attribute of every image.

    Attributes
    ----------
    name : what the output calls it (``class``, ``brightness``, a table's column name).
    kind : ``"categorical"`` or ``"numeric"``.
    source : ``"labels"``, ``"image"`` (a statistic of :mod:`rdx.evaluation.image_stats`),
        ``"item"`` (of texts or audio clips: :func:`rdx.data.items.item_statistics`) or
        ``"table"``.
    values : numeric: (n,) float64 with NaN where missing; categorical: (n,) int64 codes
        into ``levels``, −1 where missing.
    levels : categorical: the level names (strings), in code order.
    """

    name: str
    kind: str
    source: str
    values: np.ndarray
    levels: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """What ``info["enrichment"]["attributes"]`` records of it."""
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "source": self.source}
        if self.kind == "categorical":
            out["levels"] = len(self.levels)
            out["missing"] = int((self.values < 0).sum())
        else:
            out["missing"] = int(np.isnan(self.values).sum())
        return out


@dataclass
class AttributeTable:
    """Attributes of the same ``n`` images, and the columns left out with the reason."""

    n: int
    attributes: list[Attribute] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def names(self) -> list[str]:
        return [a.name for a in self.attributes]

    def add(self, attribute: Attribute | None, name: str, why: str = "") -> None:
        """Add ``attribute`` under a name of its own (a clash gets the source as prefix),
        or record ``name`` as skipped for ``why``."""
        if attribute is None:
            self.skipped[name] = why
            return
        if attribute.name in self.names():
            attribute.name = f"{attribute.source} {attribute.name}"
        self.attributes.append(attribute)


def _is_missing(cell: str) -> bool:
    return cell.strip().lower() in MISSING


def column_attribute(name: str, values: Sequence[Any], *, source: str = "table"
                     ) -> tuple[Attribute | None, str]:
    """An attribute from one column (strings as a CSV gives them, or numbers), and why not
    where it cannot be tested (``(None, reason)``).

    A column is numeric when every value present is a finite number, unless they are at
    most :data:`MAX_INTEGER_LEVELS` distinct integers (then categorical); anything else is
    categorical, tested when it has 2..:data:`MAX_LEVELS` levels and is not one distinct
    value per image (an id). Missing: None, NaN, and the strings of :data:`MISSING`.
    """
    cells = list(values)
    n = len(cells)
    present: list[Any] = []
    mask = np.zeros(n, bool)
    for i, v in enumerate(cells):
        if v is None or (isinstance(v, str) and _is_missing(v)) or \
                (isinstance(v, (float, np.floating)) and not np.isfinite(v)):
            continue
        mask[i] = True
        present.append(v.strip() if isinstance(v, str) else v)
    if not present:
        return None, "no values"
    numbers = np.full(n, np.nan)
    try:
        parsed = np.array([float(v) for v in present], dtype=np.float64)
        numeric = bool(np.isfinite(parsed).all()) and \
            not any(isinstance(v, (bool, np.bool_)) for v in present)
    except (TypeError, ValueError):
        numeric = False
    if numeric:
        numbers[mask] = parsed
        distinct = np.unique(parsed)
        if distinct.size < 2:
            return None, "one value only"
        if distinct.size > MAX_INTEGER_LEVELS or not np.all(distinct == np.round(distinct)):
            return Attribute(name, "numeric", source, numbers), ""
        text = [str(int(v)) for v in parsed]       # integer codes: categorical
    else:
        text = [str(v) for v in present]
    levels, codes_present = np.unique(np.asarray(text, dtype=object).astype(str),
                                      return_inverse=True)
    if levels.size < 2:
        return None, "one value only"
    if source != "labels":
        if levels.size > MAX_LEVELS:
            return None, f"{levels.size} distinct values (more than {MAX_LEVELS}: an id?)"
        if levels.size == len(present) and len(present) > MAX_INTEGER_LEVELS:
            return None, "a different value for every image (an id?)"
    codes = np.full(n, -1, dtype=np.int64)
    codes[mask] = codes_present
    return Attribute(name, "categorical", source, codes, [str(x) for x in levels]), ""


def read_table(path: str | Path, n: int, *, id_column: str | None = None,
               row_ids: Sequence[str] | None = None, name: str = "--metadata"
               ) -> AttributeTable:
    """The attributes of a CSV table of the ``n`` images (a header row, then one row per
    image).

    Without ``id_column`` the table's rows are the images in row order (row ``i`` describes
    row ``i`` of A/B) and must be exactly ``n``. With ``id_column`` each row names its
    image in that column: one of ``row_ids`` (the image ids of the representation files,
    e.g. those ``rdx features`` records) where given, else a row number ``0..n−1``; every
    image must appear exactly once.

    Raises
    ------
    RDXInputError
        An unreadable file, a header with repeated or empty names, a row of another
        length, a row count other than ``n``, an id column that is absent, has repeated,
        unknown or missing ids.
    """
    p = Path(path)
    if not p.is_file():
        raise RDXInputError(f"{name} {str(path)!r} does not exist or is not a file.")
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RDXInputError(f"{name} {str(path)!r} cannot be read as a UTF-8 CSV table "
                            f"({exc}).") from None
    rows = [r for r in rows if any(c.strip() for c in r)]   # blank lines are no images
    if not rows:
        raise RDXInputError(f"{name} {str(path)!r} is empty; give a header row and one row "
                            "per image.")
    header = [h.strip() for h in rows[0]]
    if any(not h for h in header):
        raise RDXInputError(f"{name}: column {header.index('') + 1} of the header has no "
                            "name; name every column.")
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise RDXInputError(f"{name}: the header names column {repeated[0]!r} twice; give "
                            "each column a name of its own.")
    body = rows[1:]
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise RDXInputError(f"{name}: data row {i + 1} has {len(r)} field(s) but the "
                                f"header has {len(header)}.")
    columns = {h: [r[j] for r in body] for j, h in enumerate(header)}
    if id_column is None:
        if len(body) != n:
            raise RDXInputError(
                f"{name} has {len(body)} data rows but there are {n} images (rows of A/B): "
                "give one row per image, in the images' order, or name a column of image "
                "ids with --metadata-id.")
        order = np.arange(n)
    else:
        if id_column not in columns:
            raise RDXInputError(f"{name}: no column {id_column!r} (the id column); the "
                                f"columns are {', '.join(header)}.")
        order = _match_ids([c.strip() for c in columns.pop(id_column)], n, row_ids,
                           f"{name} column {id_column!r}")
    table = AttributeTable(n)
    for h, cells in columns.items():
        placed: list[Any] = [None] * n
        for r, i in enumerate(order):
            placed[i] = cells[r]
        table.add(*_named(column_attribute(h, placed), h))
    return table


def _named(made: tuple[Attribute | None, str], name: str) -> tuple[Attribute | None, str, str]:
    return made[0], name, made[1]


def _match_ids(ids: list[str], n: int, row_ids: Sequence[str] | None, what: str
               ) -> np.ndarray:
    """The image (row of A/B) each table row describes, from the table's ids."""
    seen: dict[str, int] = {}
    for r, x in enumerate(ids):
        if x in seen:
            raise RDXInputError(f"{what}: id {x!r} is given twice (data rows {seen[x] + 1} "
                                f"and {r + 1}); each image needs exactly one row.")
        seen[x] = r
    if row_ids is not None:
        known = {str(x): i for i, x in enumerate(row_ids)}
        kind = "the images' ids (of the representation files)"
    else:
        known = {str(i): i for i in range(n)}
        kind = f"row numbers 0..{n - 1} (the representation files carry no image ids)"
    unknown = [x for x in ids if x not in known]
    if unknown:
        raise RDXInputError(f"{what}: {len(unknown)} id(s) are not among {kind}, e.g. "
                            f"{unknown[0]!r}.")
    missing = [x for x in known if x not in seen]
    if missing:
        raise RDXInputError(f"{what}: {len(missing)} of the {n} images have no row, e.g. "
                            f"{missing[0]!r}; give one row per image.")
    return np.array([known[x] for x in ids], dtype=np.int64)


def build_table(n: int, table: Any = None, *, images: Any = None, labels: Any = None,
                class_names: Sequence[str] | None = None) -> AttributeTable:
    """Every attribute of the ``n`` images: the class labels (``labels``, named by
    ``class_names`` where given: ``labels`` then are codes 0..C−1), the image statistics of
    ``images`` and the columns of ``table`` — an :class:`AttributeTable`, a CSV path
    (:func:`read_table`, in row order) or a mapping of column name to one value per image
    (a pandas DataFrame works: its columns are read by name).
    """
    out = AttributeTable(n)
    if labels is not None:
        lab = np.asarray(labels)
        if lab.shape != (n,):
            raise RDXInputError(f"labels have shape {lab.shape}; expected one per image ({n}).")
        if class_names is not None:
            lab = np.asarray(class_names, dtype=object)[lab.astype(np.int64)]
        out.add(*_named(column_attribute("class", [str(x) for x in lab], source="labels"),
                        "class"))
    if images is not None:
        stats = image_statistics(images)
        for k, v in stats.items():
            if len(v) != n:
                raise RDXInputError(f"{len(v)} images for {n} rows of A/B.")
            a = Attribute(k, "numeric", "image", v.astype(np.float64))
            if np.ptp(v) > 0:
                out.add(a, k)
            else:
                out.add(None, f"image {k}", "one value only")
    if table is None:
        return out
    if isinstance(table, (str, Path)):
        table = read_table(table, n)
    if isinstance(table, AttributeTable):
        if table.n != n:
            raise RDXInputError(f"the table describes {table.n} images but there are {n}.")
        for a in table.attributes:
            out.add(a, a.name)
        out.skipped.update(table.skipped)
        return out
    if hasattr(table, "columns") and not isinstance(table, Mapping):   # a DataFrame
        table = {str(c): list(table[c]) for c in table.columns}
    if not isinstance(table, Mapping):
        raise RDXInputError(f"table: give a CSV path, a mapping of column name to values or "
                            f"a DataFrame, not {type(table).__name__}.")
    for k, v in table.items():
        vals = list(np.asarray(v, dtype=object)) if not isinstance(v, list) else v
        if len(vals) != n:
            raise RDXInputError(f"table column {k!r} has {len(vals)} values but there are "
                                f"{n} images.")
        out.add(*_named(column_attribute(str(k), vals), str(k)))
    return out


# ------------------------------------------------------------------ the tests

def benjamini_hochberg(p: Sequence[float]) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values: ``min_{k ≥ i} p_(k)·N/k``, at most 1, in the
    order given."""
    x = np.asarray(p, dtype=np.float64)
    if x.size == 0:
        return x
    order = np.argsort(x, kind="stable")
    ranked = x[order] * x.size / np.arange(1, x.size + 1)
    adj = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty_like(x)
    out[order] = np.minimum(adj, 1.0)
    return out


def _log_choose(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``log C(a, b)``, −inf outside ``0 ≤ b ≤ a``."""
    from scipy.special import gammaln

    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    ok = (b >= 0) & (b <= a)
    out = np.full(a.shape, -np.inf)
    out[ok] = gammaln(a[ok] + 1) - gammaln(b[ok] + 1) - gammaln(a[ok] - b[ok] + 1)
    return out


def fisher_two_sided(k: Any, m: int, total: Any, n: int) -> np.ndarray:
    """Two-sided p-values of Fisher's exact test of 2×2 tables, one per level:
    ``k`` members of ``m`` have the level, ``total`` of all ``n`` images have it. The sum
    of the hypergeometric probabilities of the members' counts that are no more probable
    than the one observed (relative tolerance 1e-7, as :func:`scipy.stats.fisher_exact`)."""
    from scipy.special import logsumexp

    k = np.atleast_1d(np.asarray(k, np.float64))
    t = np.atleast_1d(np.asarray(total, np.float64))[:, None]
    x = np.arange(m + 1, dtype=np.float64)[None, :]
    logp = _log_choose(t, x) + _log_choose(n - t, m - x) - _log_choose(n, m)
    observed = np.take_along_axis(logp, k.astype(np.int64)[:, None], axis=1)
    kept = np.where(logp <= observed + 1e-7, logp, -np.inf)
    return np.minimum(np.exp(logsumexp(kept, axis=1)), 1.0)


def _categorical_tests(a: Attribute, inside: np.ndarray) -> list[dict[str, Any]]:
    valid = a.values >= 0
    m_in, m_out = int((inside & valid).sum()), int((~inside & valid).sum())
    if m_in == 0 or m_out == 0:
        return []
    counts_in = np.bincount(a.values[inside & valid], minlength=len(a.levels))
    counts_out = np.bincount(a.values[~inside & valid], minlength=len(a.levels))
    total = counts_in + counts_out
    levels = np.flatnonzero(total > 0)
    if len(a.levels) == 2:   # one test: the other level's is the same table
        levels = np.array([int(np.argmin(total))])
    p = fisher_two_sided(counts_in[levels], m_in, total[levels], m_in + m_out)
    out = []
    for j, pj in zip(levels, p):
        k, K = int(counts_in[j]), int(counts_out[j])
        s_in, s_out = k / m_in, K / m_out
        out.append({"attribute": a.name, "kind": "categorical", "source": a.source,
                    "level": a.levels[j], "count": k, "n_members": m_in,
                    "share_members": s_in, "share_rest": s_out,
                    "ratio": s_in / s_out if s_out > 0 else None,
                    "direction": "over" if s_in > s_out else "under", "p_value": float(pj)})
    return out


def _ranks(a: Attribute) -> tuple[np.ndarray, np.ndarray, float]:
    """The attribute's present values, their ranks among themselves (ties averaged) and
    the tie term ``Σ (t³ − t)`` of the Mann–Whitney variance; computed once per
    attribute."""
    cached = getattr(a, "_ranks", None)
    if cached is None:
        from scipy.stats import rankdata

        valid = np.isfinite(a.values)
        ranks = np.full(a.values.shape, np.nan)
        ranks[valid] = rankdata(a.values[valid])
        _, t = np.unique(a.values[valid], return_counts=True)
        cached = (valid, ranks, float(np.sum(t.astype(np.float64) ** 3 - t)))
        a._ranks = cached   # type: ignore[attr-defined]
    return cached


def mann_whitney(a: Attribute, inside: np.ndarray) -> tuple[float, float, int, int]:
    """``(U, p, m, r)``: the members' Mann–Whitney statistic against the rest's present
    values and its two-sided p-value — exact where both groups have at most 8 values and no
    ties, else the normal approximation with tie and continuity corrections (the methods
    :func:`scipy.stats.mannwhitneyu` chooses by default)."""
    valid, ranks, ties = _ranks(a)
    m = int((inside & valid).sum())
    r = int((~inside & valid).sum())
    u = float(ranks[inside & valid].sum() - m * (m + 1) / 2)
    N = m + r
    if m <= 8 and r <= 8 and ties == 0:
        from scipy.stats import mannwhitneyu

        return u, float(mannwhitneyu(a.values[inside & valid], a.values[~inside & valid],
                                     method="exact").pvalue), m, r
    var = m * r / 12 * ((N + 1) - ties / (N * (N - 1)))
    if not var > 0:
        return u, 1.0, m, r
    from scipy.stats import norm

    z = (abs(u - m * r / 2) - 0.5) / math.sqrt(var)
    return u, float(min(1.0, 2 * norm.sf(max(z, 0.0)))), m, r


def _numeric_test(a: Attribute, inside: np.ndarray) -> list[dict[str, Any]]:
    x, y = a.values[inside], a.values[~inside]
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if x.size < 2 or y.size < 2 or np.ptp(np.concatenate([x, y])) == 0:
        return []
    u, p, _, _ = mann_whitney(a, inside)
    pooled = math.sqrt(((x.size - 1) * x.var(ddof=1) + (y.size - 1) * y.var(ddof=1))
                       / (x.size + y.size - 2))
    mx, my = float(x.mean()), float(y.mean())
    nonneg = bool(np.nanmin(a.values) >= 0)
    return [{"attribute": a.name, "kind": "numeric", "source": a.source,
             "n_members": int(x.size), "mean_members": mx, "mean_rest": my,
             "median_members": float(np.median(x)), "median_rest": float(np.median(y)),
             "ratio": mx / my if nonneg and my > 0 else None,
             "smd": (mx - my) / pooled if pooled > 0 else None,
             "rank_biserial": 2 * u / (x.size * y.size) - 1,
             "direction": "higher" if u > x.size * y.size / 2 else "lower",
             "p_value": p if np.isfinite(p) else 1.0}]


def attribute_tests(table: AttributeTable, members: Sequence[int]) -> list[dict[str, Any]]:
    """Every test of one group of images against the rest (module docstring), unadjusted:
    ``p_value`` only."""
    inside = np.zeros(table.n, bool)
    inside[np.asarray(members, dtype=np.int64)] = True
    tests: list[dict[str, Any]] = []
    if not inside.any() or inside.all():
        return tests
    for a in table.attributes:
        tests += (_categorical_tests(a, inside) if a.kind == "categorical"
                  else _numeric_test(a, inside))
    return tests


def _factor_text(factor: float) -> str:
    """``2.1×``; two decimals near 1 (``1.04×``), where one would read ``1.0×``."""
    return f"{factor:.2f}×" if 0.905 < factor < 1.095 else f"{factor:.2g}×" \
        if factor < 1 else f"{factor:.1f}×"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _p_text(p: float) -> str:
    if p >= 0.001:
        return f"p_adj {p:.3f}"
    k = min(int(math.floor(-math.log10(max(p, 1e-300)))), 300)
    return f"p_adj < 1e-{k}"


def finding_text(t: Mapping[str, Any]) -> str:
    """One finding in words: ``82 % Coat (rest 8 %)``, ``2.1× brighter than the rest`` ...,
    with its adjusted p-value."""
    if t["kind"] == "categorical":
        if t["source"] != "labels":
            what = f"{t['attribute']}={t['level']}"
        else:   # a class by its name; a class that is a number as "class 3"
            what = f"class {t['level']}" if _is_number(t["level"]) else t["level"]
        text = (f"{100 * t['share_members']:.0f} % {what} "
                f"(rest {100 * t['share_rest']:.0f} %)")
    else:
        higher = t["direction"] == "higher"
        stat = t["attribute"] if t["source"] == "image" else None
        words = WORDS.get(stat or "")
        ratio = t.get("ratio")
        if words and ratio and not stat.startswith("centre"):
            factor = ratio if ratio >= 1 else 1 / ratio
            text = f"{_factor_text(factor)} {words[0 if ratio >= 1 else 1]} than the rest"
        elif words:
            text = f"{words[0 if higher else 1]} than the rest (d {t['smd']:+.1f})" \
                if t.get("smd") is not None else f"{words[0 if higher else 1]} than the rest"
        elif ratio:
            text = f"{t['attribute']} {_factor_text(ratio)} the rest's mean"
        else:
            text = (f"{t['attribute']} {'higher' if higher else 'lower'} than the rest"
                    + (f" (d {t['smd']:+.1f})" if t.get("smd") is not None else ""))
    return f"{text} ({_p_text(t['p_adjusted'])})"


def describe(record: Mapping[str, Any]) -> str:
    """The one-line description of an enrichment record: its findings (adjusted p at most
    alpha), strongest first, at most :data:`DESCRIPTION_FINDINGS`; else that nothing tested
    stands out."""
    found = [t for t in record.get("tests", []) if t.get("significant")]
    if not found:
        return (f"no tested attribute differs from the rest ({record.get('n_tests', 0)} "
                "tests)")
    found.sort(key=lambda t: (t["p_adjusted"], t["p_value"]))
    more = len(found) - DESCRIPTION_FINDINGS
    return "; ".join(finding_text(t) for t in found[:DESCRIPTION_FINDINGS]) + \
        (f"; {more} more" if more > 0 else "")


def enrich(result: Any, table: Any = None, *, images: Any = None, labels: Any = None,
           class_names: Sequence[str] | None = None, alpha: float = 0.05,
           correction: str = "benjamini-hochberg") -> dict[str, Any]:
    """Test the attributes of every explanation of ``result`` (and of its named groups)
    against the rest of the images; record the tests and a description in the result.

    Parameters
    ----------
    result : rdx.results.types.MethodResult
        Changed in place: each explanation's ``extra["enrichment"]`` and
        ``extra["description"]``, each record of ``info["group_tests"]["groups"]`` the same
        keys, ``info["enrichment"]`` the summary.
    table : AttributeTable, str, Path or mapping, optional
        Per-image attributes (:func:`build_table`): a CSV path (rows in the images' order;
        :func:`read_table` for an id column), a mapping of column to one value per image,
        a DataFrame.
    images : array, optional
        The images (rows of A/B): their statistics (:mod:`rdx.evaluation.image_stats`) are
        numeric attributes.
    labels : (n,) array, optional
        Class of each image (the ``class`` attribute); codes 0..C−1 when ``class_names``
        names them.
    class_names : list of str, optional
        Names of the class codes.
    alpha : float
        Level of a finding, after the correction.
    correction : {"benjamini-hochberg", "holm"}
        Over every test of this call (module docstring).

    Returns
    -------
    dict
        ``info["enrichment"]``: ``{"correction", "alpha", "n_tests", "n_findings",
        "attributes": [{"name", "kind", "source", ...}], "skipped": {column: reason}}``.
    """
    from .group_test import holm

    if correction not in CORRECTIONS:
        raise RDXInputError(f"correction must be one of {CORRECTIONS}, not {correction!r}.")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise RDXInputError(f"alpha must be a number between 0 and 1, not {alpha!r}.")
    n = int(result.n_images)
    attrs = table if isinstance(table, AttributeTable) and images is None and labels is None \
        else build_table(n, table, images=images, labels=labels, class_names=class_names)
    if attrs.n != n:
        raise RDXInputError(f"the table describes {attrs.n} images but the result has {n}.")
    targets: list[tuple[dict[str, Any], dict[str, Any]]] = []   # (record, where it goes)
    for d, r in result.directions.items():
        for e in r.explanations:
            basis = "members" if e.members is not None else "grid"
            idx = e.members if e.members is not None else e.images
            targets.append(({"basis": basis, "n": len(set(int(i) for i in idx)),
                             "tests": attribute_tests(attrs, idx)}, e.extra))
    groups = (result.info.get("group_tests") or {}).get("groups") or []
    by_name: dict[str, dict[str, Any]] = {}
    for g in groups:       # one set of tests per group (its two directions share it)
        if g["name"] not in by_name:
            by_name[g["name"]] = {"basis": "members", "n": len(g["members"]),
                                  "tests": attribute_tests(attrs, g["members"])}
            targets.append((by_name[g["name"]], {}))
    p = [t["p_value"] for rec, _ in targets for t in rec["tests"]]
    adjusted = benjamini_hochberg(p) if correction == "benjamini-hochberg" else holm(p)
    k = 0
    for rec, _ in targets:
        for t in rec["tests"]:
            t["p_adjusted"] = float(adjusted[k])
            t["significant"] = bool(adjusted[k] <= alpha)
            k += 1
        rec["tests"].sort(key=lambda t: t["p_value"])
        rec["n_tests"] = len(rec["tests"])
        rec["n_findings"] = sum(t["significant"] for t in rec["tests"])
    for rec, extra in targets[:len(targets) - len(by_name)]:
        extra["enrichment"] = rec
        extra["description"] = describe(rec)
    for g in groups:
        g["enrichment"] = by_name[g["name"]]
        g["description"] = describe(by_name[g["name"]])
    summary = {"correction": correction, "alpha": float(alpha), "n_tests": len(p),
               "n_findings": int(sum(rec["n_findings"] for rec, _ in targets)),
               "attributes": [a.summary() for a in attrs.attributes],
               "skipped": dict(attrs.skipped)}
    result.info["enrichment"] = summary
    return summary


__all__ = ["CORRECTIONS", "DESCRIPTION_FINDINGS", "IMAGE_STATISTICS", "MAX_INTEGER_LEVELS",
           "MAX_LEVELS", "MISSING", "Attribute", "AttributeTable", "attribute_tests",
           "benjamini_hochberg", "build_table", "column_attribute", "describe", "enrich",
           "finding_text", "fisher_two_sided", "mann_whitney", "read_table"]
