"""Figures of the analysis of a run: BSR box plots, the explanation-statistics
table, PCA overlays of the grid images, RDX's intermediate matrices, cluster-summary strips,
coefficient heat maps and known-difference recovery.

Every function reads what the runner wrote (``outputs/<experiment>/<comparison>/``, loaded
as a :class:`rdx.results.store.ComparisonRun`) or the score summaries of
:func:`rdx.evaluation.summary.summarize_comparison`, draws with matplotlib's object API
(no pyplot state, Agg canvas, so it works headless) and writes atomically.
The file format follows the suffix of the output path (``.png`` or ``.pdf``).

One palette, :func:`method_color`, gives every method the same colour in every figure.
"""
from __future__ import annotations

import io
import math
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colors as mcolors
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ..baselines import BASELINE_COLORS
from ..errors import RDXInputError
from ..io import atomic_write
from ..results.store import ComparisonRun
from ..results.types import DIRECTIONS
from ..results.types import DISSIMILARITY_LABELS as RESULT_DISSIMILARITY_LABELS
from ..results.types import SCORE_LABELS

#: Plot labels of the dissimilarities (short, e.g. in axis labels and file names) and their
#: spelled-out names (titles): both from the results' one table, as in the report and JSON.
DISSIMILARITY_LABELS = {key: lab.short for key, lab in RESULT_DISSIMILARITY_LABELS.items()}
DISSIMILARITY_NAMES = {key: lab.name for key, lab in RESULT_DISSIMILARITY_LABELS.items()}
DIRECTION_SHORT = {"a_over_b": "A>B", "b_over_a": "B>A"}
DIRECTION_LABELS = {"a_over_b": "A over B (tight in A, split in B)",
                    "b_over_a": "B over A (tight in B, split in A)"}

# ---------------------------------------------------------------------------- palette

#: Base colour of each method family: Okabe–Ito (colour-blind safe) first, RDX in
#: vermillion so that it stands out; related families get related hues.
_FAMILY_COLORS = {
    "rdx": "#D55E00",
    **BASELINE_COLORS,      # the baselines' registry holds their colours
    "cka": "#999999",
    "classification": "#555555",
}
#: Shade steps of named variants (e.g. ``rdx_nb_lb_pagerank``, ``kmeans_ar0to1``):
#: negative → towards black, positive → towards white.
_SHADES = (-0.45, -0.3, -0.15, 0.15, 0.3, 0.45, 0.6)
_FALLBACK = ("#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2",
             "#7F7F7F", "#BCBD22", "#17BECF")


def _family(name: str, method_type: str | None) -> str | None:
    if method_type in _FAMILY_COLORS:
        return method_type
    # longest family first, so that "topk_sae_x" is a topk_sae and not an sae
    for fam in sorted(_FAMILY_COLORS, key=len, reverse=True):
        if name == fam or name.startswith(fam + "_"):
            return fam
    return None


def _stable_hash(text: str) -> int:
    # crc32, not hash(): Python salts str hashes per process, colours must not change
    return zlib.crc32(text.encode())


def method_color(name: str, method_type: str | None = None) -> tuple[float, float, float]:
    """The colour of a method, the same in every figure and every run.

    Parameters
    ----------
    name : str
        The method's name in the config (``rdx``, ``rdx_nb_lb_pagerank``, ``kmeans_ar0to1``).
    method_type : str, optional
        Its ``method`` (``explanations.json["method"]``); needed only when the name does not
        start with it.

    Returns
    -------
    (r, g, b) floats in [0, 1]
        The family's base colour for the plain name (``"rdx"``, ``"kmeans"``), a lighter or
        darker shade of it — fixed by the name — for named variants, and a colour of a
        fallback palette (again fixed by the name) for unknown methods.
    """
    fam = _family(name, method_type)
    if fam is None:
        return mcolors.to_rgb(_FALLBACK[_stable_hash(name) % len(_FALLBACK)])
    base = np.array(mcolors.to_rgb(_FAMILY_COLORS[fam]))
    if name == fam:
        return tuple(float(v) for v in base)
    t = _SHADES[_stable_hash(name) % len(_SHADES)]
    target = np.ones(3) if t > 0 else np.zeros(3)
    return tuple(float(v) for v in base + abs(t) * (target - base))


def _lighter(color, amount: float = 0.5) -> tuple[float, float, float]:
    c = np.array(mcolors.to_rgb(color))
    return tuple(float(v) for v in c + amount * (1.0 - c))


def class_colors(n_classes: int) -> list[tuple[float, float, float]]:
    """Background colours of the classes (tab10 / tab20; hsv beyond 20 classes)."""
    from matplotlib import colormaps

    if n_classes <= 10:
        return [mcolors.to_rgb(colormaps["tab10"](i)) for i in range(n_classes)]
    if n_classes <= 20:
        return [mcolors.to_rgb(colormaps["tab20"](i)) for i in range(n_classes)]
    return [mcolors.to_rgb(colormaps["hsv"](i / n_classes)) for i in range(n_classes)]


# ---------------------------------------------------------------------------- helpers

def _field(obj: Any, key: str) -> Any:
    """``obj[key]`` for the dict form of a loaded comparison, ``obj.key`` for an object."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _as_loaded(comp: Any) -> Any:
    """The dict view the figures read (``dir``, ``run``, ``images``, ``A``, ``B``, ``labels``,
    ``methods``: {name: explanations document}) of a comparison folder, a
    :class:`~rdx.results.store.ComparisonRun` (its cached files are reused) or that view."""
    if isinstance(comp, (str, Path)):
        comp = ComparisonRun(comp)
    if isinstance(comp, ComparisonRun):
        reps = comp.representations or {}
        return {"dir": comp.path, "run": comp.run, "images": comp.images,
                "A": reps.get("a"), "B": reps.get("b"), "labels": comp.labels,
                "methods": {n: r.to_json() for n, r in comp.results().items()}}
    return comp


def _comp_dir(comp: Any) -> Path:
    if isinstance(comp, (str, Path)):
        return Path(comp)
    if isinstance(comp, ComparisonRun):
        return comp.path
    d = _field(comp, "dir")
    if d is None:
        raise RDXInputError("the loaded comparison has no 'dir': pass the comparison folder "
                            "(outputs/<experiment>/<comparison>) instead.")
    return Path(d)


def _comparison_name(loaded: Any) -> str:
    run = _field(loaded, "run") or {}
    return str(run.get("comparison") or Path(_field(loaded, "dir") or "comparison").name)


def _model_names(loaded: Any) -> dict[str, str]:
    """Readable names of models A and B: the model, checkpoint or features file named in
    the run's config (falls back to 'A' / 'B')."""
    reps = ((_field(loaded, "run") or {}).get("config") or {}).get("representations") or {}
    out = {}
    for side in ("a", "b"):
        spec = reps.get(side) or {}
        label = None
        if spec.get("checkpoint"):
            p = Path(str(spec["checkpoint"]))
            label = p.parent.name if p.stem in ("last", "best") else f"{p.parent.name}/{p.stem}"
        elif spec.get("model"):
            label = str(spec["model"])
        elif spec.get("features"):
            label = Path(str(spec["features"])).stem
        if spec.get("exclude_dims"):
            label = f"{label or side.upper()} − dims {list(spec['exclude_dims'])}"
        same = label is None or label.upper() == side.upper()
        out[side] = f"model {side.upper()}" if same else f"{side.upper()} = {label}"
    return out


def grid_methods(loaded: Any, direction: str | None = None,
                  methods: Sequence[str] | None = None) -> list[str]:
    """Methods that have grids (in ``direction`` if given), in the run's order."""
    loaded = _as_loaded(loaded)
    docs = _field(loaded, "methods") or {}
    if methods is not None:
        missing = [m for m in methods if m not in docs]
        if missing:
            raise RDXInputError(f"method(s) {missing} not in this run; it has {sorted(docs)}.")
        names = list(methods)
    else:
        order = [m.get("name", m.get("method")) for m in
                 ((_field(loaded, "run") or {}).get("config") or {}).get("methods") or []]
        names = [m for m in order if m in docs] + sorted(set(docs) - set(order))
        names = _canonical(names, {m: docs[m].get("method") for m in names})
    out = []
    for name in names:
        dirs = docs[name].get("directions") or {}
        wanted = [direction] if direction else list(DIRECTIONS)
        if any((dirs.get(d) or {}).get("explanations") for d in wanted):
            out.append(name)
    return out


def save_figure(fig: Figure, out_path: str | Path, *, dpi: int = 150) -> Path:
    """Save a figure atomically as ``.png``, ``.pdf`` or ``.svg`` (by the suffix)."""
    p = Path(out_path)
    fmt = p.suffix.lstrip(".").lower() or "png"
    if fmt not in ("png", "pdf", "svg"):
        raise RDXInputError(f"{p}: figures are written as .png, .pdf or .svg, not .{fmt}.")
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight", facecolor="white")
    atomic_write(p, lambda fh: fh.write(buf.getvalue()))
    return p


def _save_formats(fig: Figure, stem: Path, formats: Sequence[str]) -> list[Path]:
    """Save ``fig`` as ``stem.<fmt>`` for every format (png first)."""
    if not formats:
        raise RDXInputError("formats: give at least one of 'png', 'pdf', 'svg'.")
    return [save_figure(fig, stem.with_name(f"{stem.name}.{fmt}")) for fmt in formats]


def is_finite(v: Any) -> bool:
    return v is not None and isinstance(v, (int, float, np.floating, np.integer)) \
        and math.isfinite(float(v))


def summary_rows(summaries: Any) -> list[dict]:
    """Flatten summaries into score rows (each with ``experiment`` and ``comparison``).

    Accepts one :func:`~rdx.evaluation.summary.summarize_comparison` dict, a list of them
    (:func:`~rdx.evaluation.summary.summarize_experiment`), or already flat rows.
    """
    if isinstance(summaries, Mapping):
        summaries = [summaries]
    rows: list[dict] = []
    for s in summaries or []:
        if isinstance(s, Mapping) and "rows" in s:
            for r in s["rows"]:
                rows.append({"experiment": s.get("experiment"),
                             "comparison": s.get("comparison"), **r})
        elif isinstance(s, Mapping) and "method" in s:
            rows.append(dict(s))
        else:
            raise RDXInputError("expected summaries from rdx.evaluation.summary."
                                "summarize_comparison/summarize_experiment (dicts with 'rows').")
    return rows


def _canonical(names: Sequence[str], types: Mapping[str, str | None]) -> list[str]:
    """RDX first, then the baselines in a fixed family order (unknown methods last); the
    given order within a family. The same order in every figure."""
    fams = list(_FAMILY_COLORS)

    def key(item):
        i, name = item
        fam = _family(name, types.get(name))
        return (fams.index(fam) if fam in fams else len(fams), i)

    return [n for _, n in sorted(enumerate(names), key=key)]


def _method_order(rows: Iterable[dict]) -> OrderedDict[str, str | None]:
    seen: OrderedDict[str, str | None] = OrderedDict()
    for r in rows:
        seen.setdefault(r["method"], r.get("method_type"))
    return OrderedDict((m, seen[m]) for m in _canonical(list(seen), seen))


def _mean(values: Iterable[Any]) -> float:
    v = [float(x) for x in values if is_finite(x)]
    return float(np.mean(v)) if v else float("nan")


# ---------------------------------------------------------------------------- BSR box plots

def bsr_boxplots(summaries: Any, out_dir: str | Path, *, paper: bool = False) -> list[Path]:
    """One box plot of BSR per dissimilarity: over comparisons, two boxes per method (its
    two directions, the second hatched), each point a comparison, and the chance level
    (mean BSR of random grids) as a black tick.

    Writes ``BSR_{rank|MNED|LS}_boxplot.png`` into ``out_dir`` (also ``.pdf`` with
    ``paper``, which drops the title for a caption). Returns the written paths.
    """
    rows = [r for r in summary_rows(summaries) if is_finite(r.get("bsr"))]
    if not rows:
        raise RDXInputError("no BSR scores in the summaries: run the methods (rdx run) and "
                            "summarise the experiment first (rdx.evaluation.summary).")
    out_dir = Path(out_dir)
    paths = []
    dissims = list(OrderedDict.fromkeys(r["dissimilarity"] for r in rows))
    for dis in dissims:
        drows = [r for r in rows if r["dissimilarity"] == dis]
        methods = _method_order(drows)
        n_comp = len({(r.get("experiment"), r.get("comparison")) for r in drows})
        fig = Figure(figsize=(max(5.0, 1.1 * len(methods) + 1.5), 4.2))
        ax = fig.add_subplot()
        ticks = []
        for i, (m, mtype) in enumerate(methods.items()):
            color = method_color(m, mtype)
            for j, d in enumerate(DIRECTIONS):
                vals = [float(r["bsr"]) for r in drows if r["method"] == m and r["direction"] == d]
                if not vals:
                    continue
                x = i + (j - 0.5) * 0.38
                bp = ax.boxplot([vals], positions=[x], widths=0.32, patch_artist=True,
                                showfliers=False, manage_ticks=False)
                for box in bp["boxes"]:
                    box.set_facecolor(color if j == 0 else _lighter(color, 0.55))
                    box.set_edgecolor("black")
                    if j == 1:
                        box.set_hatch("///")
                for key in ("medians", "whiskers", "caps"):
                    for ln in bp[key]:
                        ln.set_color("black")
                # the comparisons themselves (deterministic jitter)
                jit = (np.arange(len(vals)) - (len(vals) - 1) / 2) * (0.18 / max(len(vals), 1))
                ax.scatter(x + jit, vals, s=12, color="black", zorder=3, linewidths=0)
                chance = _mean(r.get("chance_bsr_mean") for r in drows
                               if r["method"] == m and r["direction"] == d)
                if math.isfinite(chance):
                    ax.hlines(chance, x - 0.17, x + 0.17, colors="black", linestyles=(0, (2, 1)),
                              linewidth=1.6, zorder=4)
            ticks.append(i)
        ax.set_xticks(ticks, list(methods), rotation=30, ha="right")
        for lbl, (m, mtype) in zip(ax.get_xticklabels(), methods.items()):
            lbl.set_color(darker(method_color(m, mtype)))
        ax.set_xlim(-0.6, len(methods) - 0.4)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel(f"{SCORE_LABELS['bsr'].short} ({DISSIMILARITY_LABELS.get(dis, dis)})")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(handles=[Patch(facecolor="0.55", edgecolor="black", label=DIRECTION_LABELS[
                      "a_over_b"]),
                           Patch(facecolor="0.85", edgecolor="black", hatch="///",
                                 label=DIRECTION_LABELS["b_over_a"]),
                           Line2D([], [], color="black", linestyle=(0, (2, 1)),
                                  label=f"{SCORE_LABELS['chance'].short} (random grids, mean)")],
                  loc="lower left", fontsize=8, framealpha=0.9)
        if not paper:
            ax.set_title(f"{SCORE_LABELS['bsr'].name.capitalize()} "
                         f"({SCORE_LABELS['bsr'].short}), {DISSIMILARITY_NAMES.get(dis, dis)} "
                         f"dissimilarity ({n_comp} comparison{'s' if n_comp != 1 else ''})")
        stem = f"{SCORE_LABELS['bsr'].short}_{DISSIMILARITY_LABELS.get(dis, dis)}_boxplot"
        paths.append(save_figure(fig, out_dir / f"{stem}.png", dpi=300 if paper else 150))
        if paper:
            paths.append(save_figure(fig, out_dir / f"{stem}.pdf"))
    return paths


def darker(color, amount: float = 0.25) -> tuple[float, float, float]:
    c = np.array(mcolors.to_rgb(color))
    return tuple(float(v) for v in c * (1.0 - amount))


# ---------------------------------------------------------------------------- statistics table

_TABLE_COLS = (SCORE_LABELS["bsr"].short, f"{SCORE_LABELS['chance'].short} [95%]",
               SCORE_LABELS["tsd"].short, SCORE_LABELS["eq"].short)


def explanation_stats_table(summaries: Any, out_path: str | Path) -> Path:
    """A table figure of BSR, chance level, TSD and EQ per method and direction, one block
    of rows per dissimilarity, averaged over the comparisons in ``summaries``.

    BSR, TSD and mean-BSR cells are shaded by the method's rank within the block (darkest
    = best); a BSR above the 97.5th percentile of random grids is bold.
    """
    rows = summary_rows(summaries)
    rows = [r for r in rows if r.get("dissimilarity")]
    if not rows:
        raise RDXInputError("no scores in the summaries: nothing to tabulate.")
    from matplotlib import colormaps

    greens = colormaps["Greens"]
    n_comp = len({(r.get("experiment"), r.get("comparison")) for r in rows})
    header = ["method", "dissimilarity"] + [f"{DIRECTION_SHORT[d]} {c}" for d in DIRECTIONS
                                            for c in _TABLE_COLS] + [f"mean {SCORE_LABELS['bsr'].short}", "grids A>B/B>A"]
    cells, colours, bold, types = [], [], [], []
    for dis in OrderedDict.fromkeys(r["dissimilarity"] for r in rows):
        drows = [r for r in rows if r["dissimilarity"] == dis]
        methods = _method_order(drows)
        stats: dict[str, dict[str, float]] = {}
        for m in methods:
            s: dict[str, float] = {}
            for d in DIRECTIONS:
                rr = [r for r in drows if r["method"] == m and r["direction"] == d]
                for k in ("bsr", "tsd", "eq", "chance_bsr_mean", "chance_bsr_lo",
                          "chance_bsr_hi", "n_explanations"):
                    s[f"{d}:{k}"] = _mean(r.get(k) for r in rr)
            s["mean"] = _mean([s["a_over_b:bsr"], s["b_over_a:bsr"]]) \
                if all(math.isfinite(s[f"{d}:bsr"]) for d in DIRECTIONS) else float("nan")
            stats[m] = s
        # rank shading within the block: 1 = best (highest)
        shade: dict[tuple[str, str], float] = {}
        for key in [f"{d}:{k}" for d in DIRECTIONS for k in ("bsr", "tsd")] + ["mean"]:
            vals = {m: stats[m][key] for m in methods if math.isfinite(stats[m][key])}
            ordered = sorted(vals, key=lambda m: -vals[m])
            for rank, m in enumerate(ordered):
                shade[(m, key)] = 0.75 - 0.6 * rank / max(len(ordered) - 1, 1)
        for m in methods:
            s = stats[m]
            row, col, bld = [m, DISSIMILARITY_LABELS.get(dis, dis)], ["white", "white"], \
                [False, False]
            for d in DIRECTIONS:
                b, lo, hi = s[f"{d}:bsr"], s[f"{d}:chance_bsr_lo"], s[f"{d}:chance_bsr_hi"]
                ch = s[f"{d}:chance_bsr_mean"]
                row += [format_number(b, ".3f"),
                        f"{format_number(ch, '.2f')} [{format_number(lo, '.2f')}, {format_number(hi, '.2f')}]"
                        if math.isfinite(ch) else "–",
                        format_number(s[f"{d}:tsd"], ".3g"), format_number(s[f"{d}:eq"], ".3f")]
                col += [_shade(greens, shade.get((m, f"{d}:bsr"))), "white",
                        _shade(greens, shade.get((m, f"{d}:tsd"))), "white"]
                bld += [math.isfinite(b) and math.isfinite(hi) and b > hi, False, False, False]
            k1, k2 = s["a_over_b:n_explanations"], s["b_over_a:n_explanations"]
            row += [format_number(s["mean"], ".3f"), f"{format_number(k1, '.0f')}/{format_number(k2, '.0f')}"]
            col += [_shade(greens, shade.get((m, "mean"))), "white"]
            bld += [False, False]
            cells.append(row)
            types.append(methods[m])
            colours.append(col)
            bold.append(bld)
    fig = Figure(figsize=(1.15 * len(header) + 1.0, 0.32 * (len(cells) + 1) + 1.0))
    ax = fig.add_subplot()
    ax.axis("off")
    table = ax.table(cellText=cells, cellColours=colours, colLabels=header, loc="upper center",
                     cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    table.auto_set_column_width(list(range(len(header))))
    for j in range(len(header)):
        table[0, j].set_text_props(weight="bold")
        table[0, j].set_facecolor("#DDDDDD")
    for i, (row, bld) in enumerate(zip(cells, bold), start=1):
        table[i, 0].get_text().set_color(darker(method_color(row[0], types[i - 1])))
        for j, b in enumerate(bld):
            if b:
                table[i, j].set_text_props(weight="bold")
            if colours[i - 1][j] != "white" and _dark(colours[i - 1][j]):
                table[i, j].get_text().set_color("white")
    table.scale(1.0, 1.3)
    ax.set_title(f"Explanation statistics (mean over {n_comp} comparison"
                 f"{'s' if n_comp != 1 else ''}; bold BSR: above the 97.5th percentile of "
                 "random grids; shading: rank)", fontsize=9)
    return save_figure(fig, out_path)


def format_number(v: float, spec: str) -> str:
    return format(v, spec) if is_finite(v) else "–"


def _shade(cmap, value: float | None):
    return "white" if value is None else cmap(value)


def _dark(color) -> bool:
    r, g, b = mcolors.to_rgb(color)
    return 0.299 * r + 0.587 * g + 0.114 * b < 0.45


# ---------------------------------------------------------------------------- PCA overlays

def pca_coordinates(X: np.ndarray, random_state: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """2-D PCA of one representation: ``(coords n×2, explained variance ratio (2,))``."""
    from sklearn.decomposition import PCA

    X = np.asarray(X, dtype=np.float64)
    k = min(2, X.shape[0], X.shape[1])
    pca = PCA(n_components=k, random_state=random_state).fit(X)
    coords = pca.transform(X)
    if k < 2:
        coords = np.hstack([coords, np.zeros((len(X), 2 - k))])
    return coords, np.pad(pca.explained_variance_ratio_, (0, 2 - k))


def pca_overlay_points(comp: Any, direction: str,
                       methods: Sequence[str] | None = None) -> dict[str, Any]:
    """What :func:`pca_overlay` plots, without drawing.

    Returns
    -------
    dict
        ``coords`` ``{"a": n×2, "b": n×2}`` (PCA of each model, fitted separately),
        ``variance`` (explained-variance ratios), ``labels`` (n,) or None, and ``grids``
        ``{method: [index array per explanation]}`` — the grid images of ``direction``
        (RDX's no-change group is not a grid, so it is not marked).
    """
    if direction not in DIRECTIONS:
        raise RDXInputError(f"direction must be one of {DIRECTIONS}, not {direction!r}.")
    loaded = _as_loaded(comp)
    A, B = _field(loaded, "A"), _field(loaded, "B")
    if A is None or B is None:
        raise RDXInputError(f"{_field(loaded, 'dir')}: no representations.npz; re-run the "
                            "comparison (`rdx run --config ...`), which saves it.")
    docs = _field(loaded, "methods") or {}
    coords, var = {}, {}
    for side, X in (("a", A), ("b", B)):
        coords[side], var[side] = pca_coordinates(X)
    grids = OrderedDict()
    for m in grid_methods(loaded, direction, methods):
        grids[m] = [np.asarray(e["images"], dtype=np.int64)
                    for e in docs[m]["directions"][direction]["explanations"]]
    labels = _field(loaded, "labels")
    return {"coords": coords, "variance": var, "grids": grids,
            "labels": None if labels is None else np.asarray(labels)}


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "p", "h")
#: Grid images in the overlays: black markers with a white rim, so that they can never be
#: mistaken for the class-coloured background points (nor a class colour for a method's);
#: the method's colour marks its panel (frame and title), its grids differ by marker shape.
GRID_MARKER_FACE = (0.0, 0.0, 0.0)
GRID_MARKER_EDGE = (1.0, 1.0, 1.0)


def overlay_layout(n_methods: int, max_columns: int = 3) -> tuple[int, int]:
    """(columns, blocks of two rows) of an overlay of ``n_methods`` panels: at most
    ``max_columns`` per row, the rows as evenly filled as possible (5 methods → 3 + 2)."""
    n = max(int(n_methods), 1)
    nblock = -(-n // max(int(max_columns), 1))
    return -(-n // nblock), nblock


def pca_overlay_figure(comp: Any, direction: str, *, methods: Sequence[str] | None = None,
                       max_columns: int = 3) -> Figure:
    """The figure of :func:`pca_overlay` (scatter artists of grid images carry the gid
    ``grid:<method>:<model>:<explanation number>``)."""
    loaded = _as_loaded(comp)
    pts = pca_overlay_points(loaded, direction, methods)
    if not pts["grids"]:
        raise RDXInputError(f"no method of {_comparison_name(loaded)} has grids for "
                            f"{direction}; nothing to overlay.")
    docs = _field(loaded, "methods") or {}
    names = _model_names(loaded)
    class_names = list((_field(loaded, "images") or {}).get("class_names") or [])
    labels = pts["labels"]
    if labels is not None:
        uniq = np.unique(labels)
        pal = class_colors(len(uniq))
        lut = {u: pal[i] for i, u in enumerate(uniq)}
        point_colors = np.array([lut[v] for v in labels])
    else:
        uniq, lut, point_colors = np.array([]), {}, np.full((len(pts["coords"]["a"]), 3), 0.5)
    n = len(pts["coords"]["a"])
    alpha = float(np.clip(0.1 * np.sqrt(1000 / max(n, 1)), 0.1, 0.4))
    mlist = list(pts["grids"])
    ncol, nblock = overlay_layout(len(mlist), max_columns)
    panel = 3.6
    fig = Figure(figsize=(panel * ncol + 0.8, panel * 2 * nblock + 1.6))
    gs = fig.add_gridspec(2 * nblock, ncol)
    for i, m in enumerate(mlist):
        blk, c = divmod(i, ncol)
        mtype = docs[m].get("method")
        color = method_color(m, mtype)
        for r, side in enumerate(("a", "b")):
            ax = fig.add_subplot(gs[2 * blk + r, c])
            xy = pts["coords"][side]
            ax.scatter(xy[:, 0], xy[:, 1], s=8 if n > 1000 else 16, c=point_colors, alpha=alpha,
                       linewidths=0,
                       rasterized=True, gid="background")
            for j, g in enumerate(pts["grids"][m], start=1):
                ax.scatter(xy[g, 0], xy[g, 1], s=52, marker=_MARKERS[(j - 1) % len(_MARKERS)],
                           color=GRID_MARKER_FACE, edgecolors=GRID_MARKER_EDGE,
                           linewidths=0.9, zorder=3, label=f"#{j}", gid=f"grid:{m}:{side}:{j}")
            ax.set_xticks([])
            ax.set_yticks([])
            for sp in ax.spines.values():
                sp.set_edgecolor(color)
                sp.set_linewidth(2.0)
            if r == 0:
                ax.set_title(m, color=darker(color), fontsize=12, fontweight="bold")
                ax.legend(fontsize=8, loc="best", framealpha=0.7, handletextpad=0.2,
                          borderpad=0.3, title="grid", title_fontsize=8)
            ev = pts["variance"][side]
            ax.set_ylabel(f"{names[side]}\nPC2 ({100 * ev[1]:.0f}%)" if c == 0
                          else f"PC2 ({100 * ev[1]:.0f}%)", fontsize=9)
            ax.set_xlabel(f"PC1 ({100 * ev[0]:.0f}%)", fontsize=8)
    if labels is not None and len(uniq) <= 20:
        handles = [Line2D([], [], marker="o", linestyle="", color=lut[u], markersize=7,
                          label=(class_names[int(u)] if 0 <= int(u) < len(class_names)
                                 else str(u))) for u in uniq]
        fig.legend(handles=handles, loc="lower center", ncol=min(len(uniq), 10), fontsize=9,
                   title="class (background points; black markers: grid images)",
                   title_fontsize=9, bbox_to_anchor=(0.5, -0.005))
    fig.suptitle(f"{_comparison_name(loaded)} — grid images of {DIRECTION_LABELS[direction]}; "
                 "PCA of each model fitted separately", fontsize=12)
    fig.tight_layout(rect=(0, 0.5 / fig.get_figheight() + 0.03, 1, 0.97))
    return fig


def pca_overlay(comp_dir_or_loaded: Any, direction: str, out_path: str | Path, *,
                methods: Sequence[str] | None = None, max_columns: int = 3,
                dpi: int = 150) -> Path:
    """2-D PCA of each model (rows A, B) with all images coloured by class (alpha 0.1) and
    each method's grid images of ``direction`` overlaid (one panel pair per method, framed
    in the method's colour; black markers, one shape per explanation).

    ``comp_dir_or_loaded``: a comparison folder or its :class:`~rdx.results.store.ComparisonRun`;
    ``methods``: the methods to show (default: every method with grids, RDX first);
    ``max_columns``: methods per row (3 keeps the panels readable at page width).
    The PCA is of the original (unmapped) representations — the ones the grids are scored
    on — also in aligned runs (the original script plotted the mapped ones there).
    The background points' opacity is 0.1 (as in the original) from 1000 images up and
    rises for fewer images (up to 0.4), so that the classes stay visible in small runs.
    Returns ``out_path``.
    """
    return save_figure(pca_overlay_figure(comp_dir_or_loaded, direction, methods=methods,
                                    max_columns=max_columns), out_path, dpi=dpi)


# ---------------------------------------------------------------------------- RDX intermediates

def cluster_order(labels: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Order that groups images by cluster label (ascending, stable within a cluster).

    Returns
    -------
    order : (n,) int array
        ``labels[order]`` is sorted; within a cluster the images keep their original order.
    blocks : list of (label, start, stop)
        The rows ``start:stop`` of the reordered matrix that belong to ``label``.
    """
    labels = np.asarray(labels)
    order = np.argsort(labels, kind="stable")
    blocks, start = [], 0
    for lab, cnt in zip(*np.unique(labels, return_counts=True)):
        blocks.append((int(lab), start, start + int(cnt)))
        start += int(cnt)
    return order, blocks


def reorder_by_cluster(M: np.ndarray, labels: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]]]:
    """``M[order][:, order]`` with :func:`cluster_order`, and the order and blocks."""
    order, blocks = cluster_order(labels)
    return np.asarray(M)[np.ix_(order, order)], order, blocks


def _load_graphs(comp: Any, method: str) -> dict[str, np.ndarray]:
    path = _comp_dir(comp) / method / "graphs.npz"
    if not path.exists():
        raise RDXInputError(f"{path} is missing: the intermediate matrices are saved only for "
                            f"rdx methods with `save_graphs: true` in the config; add it to "
                            f"{method!r} and re-run (`rdx run --config ... --force`).")
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _matrix_panel(fig: Figure, ax, M: np.ndarray, *, cmap: str, title: str,
                  diverging: bool = False, log: bool = False, label: str = "") -> None:
    kw: dict[str, Any] = {}
    if diverging:
        lim = float(np.nanmax(np.abs(M))) or 1.0
        kw["norm"] = mcolors.TwoSlopeNorm(0.0, -lim, lim)
    elif log:
        lo, hi = float(np.nanmin(M)), float(np.nanmax(M))
        if lo > 0 and hi / lo > 100:   # affinities span orders of magnitude
            kw["norm"] = mcolors.LogNorm(lo, hi)
    im = ax.imshow(M, cmap=cmap, interpolation="nearest", aspect="equal", **kw)
    ax.set_title(title, fontsize=10)
    cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
    cb.ax.tick_params(labelsize=7)
    if label:
        cb.set_label(label, fontsize=8)


def _thinned(centres: Sequence[float], span: float, length_pt: float,
             fontsize: float) -> list[bool]:
    """Which of the (ascending) label positions to keep so that no two kept labels are
    closer than one text line (``fontsize`` · 1.4 points) on an axis ``length_pt`` points
    long showing ``span`` data units; the first label is always kept."""
    gap = span * 1.4 * fontsize / max(length_pt, 1.0)
    keep, last = [], -np.inf
    for c in centres:
        ok = c - last >= gap
        keep.append(bool(ok))
        if ok:
            last = c
    return keep


def _block_name(lab: int, size: int, with_size: bool) -> str:
    name = "no change" if lab == 0 else f"#{lab}"
    return f"{name} ({size})" if with_size else name


def _outline_blocks(ax, blocks: list[tuple[int, int, int]], *, offset: int = 0) -> None:
    """Magenta outlines around the clusters' diagonal blocks (``offset``: the first row of
    the panel in block coordinates)."""
    for lab, s, e in blocks:
        ax.add_patch(Rectangle((s - offset - 0.5, s - offset - 0.5), e - s, e - s, fill=False,
                               edgecolor="magenta", linewidth=1.2, gid=f"block:{lab}"))


def _label_blocks(ax, blocks: list[tuple[int, int, int]], *, offset: int = 0,
                  fontsize: float = 7, with_size: bool = False) -> None:
    """One tick label per block, from the axes' current size: labels that would overlap
    their neighbour (blocks a few pixels wide) are left out — the outlines stay."""
    fig = ax.figure
    bbox = ax.get_position()
    length_pt = min(bbox.width * fig.get_figwidth(), bbox.height * fig.get_figheight()) * 72
    span = float(max(e for _, _, e in blocks) - offset)
    centres = [(s + e - 1) / 2 - offset for _, s, e in blocks]
    keep = _thinned(centres, span, length_pt, fontsize)
    ticks = [c for c, k in zip(centres, keep) if k]
    names = [_block_name(lab, e - s, with_size) for (lab, s, e), k in zip(blocks, keep) if k]
    ax.set_xticks(ticks, names, rotation=90, fontsize=fontsize)
    ax.set_yticks(ticks, names, fontsize=fontsize)


def direction_difference(graphs: Mapping[str, np.ndarray], direction: str) -> np.ndarray:
    """The difference matrix in the sign of ``direction``: negative = the pair is closer in
    the direction's tight model (its affinity is ``exp(−β·diff)``).

    ``graphs.npz`` stores ``diff_a_over_b`` (and, aligned, ``diff_b_over_a_graph`` with the
    same a_over_b sign), so ``b_over_a`` is its negation.
    """
    if direction == "a_over_b":
        return graphs["diff_a_over_b"]
    return -graphs.get("diff_b_over_a_graph", graphs["diff_a_over_b"])


def intermediate_matrices(comp_dir: Any, method: str, out_dir: str | Path, *,
                          formats: Sequence[str] = ("png",)) -> list[Path]:
    """RDX's intermediate matrices from ``<method>/graphs.npz``.

    Writes into ``out_dir`` (prefixed ``<comparison>_<method>_``): ``ranks.png`` (neighbour
    ranks in A and in B, images in selection order), ``differences.png`` (bwr, each
    direction in its own sign) and ``clusters_<direction>.png``
    (difference and affinity reordered by the direction's cluster labels, magenta outlines
    around each cluster's block, label 0 = no-change group), in each of ``formats``.
    Returns the paths.
    """
    comp_dir = _comp_dir(comp_dir)
    g = _load_graphs(comp_dir, method)
    comp = comp_dir.name
    out_dir = Path(out_dir)
    prefix = f"{comp}_{method}_"
    paths = []
    fig = Figure(figsize=(11.0, 4.6))
    for k, side in enumerate(("a", "b")):
        ax = fig.add_subplot(1, 2, k + 1)
        _matrix_panel(fig, ax, g[f"rank_{side}"], cmap="viridis",
                      title=f"neighbour ranks in {side.upper()}",
                      label="rank of column in row's neighbour list")
        ax.set_xlabel("image (selection order)")
        ax.set_ylabel("image")
    fig.suptitle(f"{comp} · {method}: rank matrices", fontsize=11)
    fig.tight_layout()
    paths += _save_formats(fig, out_dir / f"{prefix}ranks", formats)
    fig = Figure(figsize=(11.0, 4.6))
    for k, d in enumerate(DIRECTIONS):
        ax = fig.add_subplot(1, 2, k + 1)
        _matrix_panel(fig, ax, direction_difference(g, d), cmap="bwr", diverging=True,
                      title=f"difference, {DIRECTION_LABELS[d]}",
                      label="< 0: closer in the tight model")
        ax.set_xlabel("image (selection order)")
        ax.set_ylabel("image")
    fig.suptitle(f"{comp} · {method}: difference matrices", fontsize=11)
    fig.tight_layout()
    paths += _save_formats(fig, out_dir / f"{prefix}differences", formats)
    for d in DIRECTIONS:
        paths += _save_formats(cluster_matrices_figure(g, d, title=f"{comp} · {method} · "
                                                                   f"{DIRECTION_LABELS[d]}"),
                               out_dir / f"{prefix}clusters_{d}", formats)
    return paths


def cluster_matrices_figure(graphs: Mapping[str, np.ndarray], direction: str, *,
                            title: str = "") -> Figure:
    """Difference and affinity of one direction reordered by cluster (top row, the whole
    matrix with the no-change group) and, when the direction has explanations, the same two
    zoomed on the explanation clusters alone (bottom row: the no-change group, usually
    most of the images, left out so that clusters of a few dozen images fill the panel).
    Block labels that would overlap are left out (the outlines stay)."""
    labels = graphs[f"labels_{direction}"]
    mats = ((direction_difference(graphs, direction), {"cmap": "bwr", "diverging": True},
             "difference"),
            (graphs[f"affinity_{direction}"], {"cmap": "viridis", "log": True}, "affinity"))
    order, blocks = cluster_order(labels)
    explained = [b for b in blocks if b[0] != 0]
    zoom = bool(explained) and any(b[0] == 0 and b[2] > b[1] for b in blocks)
    nrow = 2 if zoom else 1
    fig = Figure(figsize=(11.0, 4.9 * nrow))
    panels = []
    for k, (M, kw, ttl) in enumerate(mats):
        R = np.asarray(M)[np.ix_(order, order)]
        ax = fig.add_subplot(nrow, 2, k + 1)
        _matrix_panel(fig, ax, R, title=f"{ttl} reordered by cluster", **kw)
        _outline_blocks(ax, blocks)
        panels.append((ax, blocks, 0, False))
        if zoom:
            start = explained[0][1]
            ax = fig.add_subplot(nrow, 2, k + 3)
            _matrix_panel(fig, ax, R[start:, start:],
                          title=f"{ttl}: explanation clusters only (zoom)", **kw)
            ax.set_gid("zoom")
            _outline_blocks(ax, explained, offset=start)
            panels.append((ax, explained, start, True))
    if title:
        fig.suptitle(title + ("  (bottom: the no-change group left out)" if zoom else ""),
                     fontsize=11)
    # labels are thinned for the panels' final size: lay out, label, lay out again
    fig.tight_layout()
    for ax, blks, start, with_size in panels:
        _label_blocks(ax, blks, offset=start, with_size=with_size)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------- summary strips

def cluster_summary_strips(comp_dir: Any, out_path: str | Path) -> Path:
    """Every method's two summary strips (``<method>/grids/<direction>_summary.png``, the
    explanation grids side by side) in one figure: one row per method, one column per
    direction. Returns ``out_path``."""
    loaded = _as_loaded(comp_dir)
    cdir = _comp_dir(loaded if not isinstance(comp_dir, (str, Path)) else comp_dir)
    docs = _field(loaded, "methods") or {}
    mlist = grid_methods(loaded)
    if not mlist:
        raise RDXInputError(f"{cdir}: no method with explanation grids (only scores such as "
                            "cka/classification?); nothing to summarise.")
    from PIL import Image

    strips: dict[tuple[str, str], Any] = {}
    for m in mlist:
        for d in DIRECTIONS:
            p = cdir / m / "grids" / f"{d}_summary.png"
            if p.exists():
                with Image.open(p) as im:
                    strips[(m, d)] = np.asarray(im.convert("RGB"))
    # width of a column ∝ its widest strip, so strips keep their aspect ratio
    aspect = {d: max([s.shape[1] / s.shape[0] for (m, dd), s in strips.items() if dd == d]
                     or [1.0]) for d in DIRECTIONS}
    row_h = 1.6
    fig = Figure(figsize=(row_h * sum(aspect.values()) + 2.0, row_h * len(mlist) + 0.8))
    gs = fig.add_gridspec(len(mlist), 2, width_ratios=[aspect[d] for d in DIRECTIONS],
                          wspace=0.04, hspace=0.12)
    names = _model_names(loaded)
    for i, m in enumerate(mlist):
        color = method_color(m, docs[m].get("method"))
        for j, d in enumerate(DIRECTIONS):
            ax = fig.add_subplot(gs[i, j])
            ax.set_xticks([])
            ax.set_yticks([])
            s = strips.get((m, d))
            if s is not None:
                ax.imshow(s, aspect="equal")
                ax.set_xlim(-0.5, s.shape[0] * aspect[d] - 0.5)
            else:
                ax.text(0.5, 0.5, "no grids", ha="center", va="center", transform=ax.transAxes,
                        color="0.4")
            for sp in ax.spines.values():
                sp.set_visible(False)
            if j == 0:
                ax.set_ylabel(m, rotation=0, ha="right", va="center", fontsize=10,
                              color=darker(color), fontweight="bold")
            if i == 0:
                ax.set_title(f"{DIRECTION_LABELS[d]}\n({names[d[0]]})", fontsize=10)
    fig.suptitle(f"{_comparison_name(loaded)}: explanations of every method", fontsize=12)
    return save_figure(fig, out_path, dpi=200)   # keeps the grids' pixels legible


# ---------------------------------------------------------------------------- coefficients

def coefficient_heatmaps(comp_dir: Any, method: str, out_dir: str | Path, *,
                         formats: Sequence[str] = ("png",)) -> list[Path]:
    """Heat maps of a baseline's concept codes ``U`` (``concepts.npz``: ``a_codes``,
    ``b_codes``, n×k of the shown concepts), images sorted by class (class boundaries
    drawn), and of its dictionary ``V`` (k×d) when it has one.

    Writes ``<comparison>_<method>_coeffs.png`` (and ``..._dictionary.png``) into ``out_dir``,
    in each of ``formats``. Returns the paths.
    """
    cdir = _comp_dir(comp_dir)
    path = cdir / method / "concepts.npz"
    if not path.exists():
        raise RDXInputError(f"{path} is missing: coefficient heat maps need a factorisation "
                            "baseline's codes (nmf, cnmf, pca, sae, topk_sae, usae, kmeans), "
                            "which the runner saves as concepts.npz.")
    with np.load(path) as z:
        arr = {k: z[k] for k in z.files}
    sides = [s for s in ("a", "b") if f"{s}_codes" in arr]
    if not sides:
        raise RDXInputError(f"{path} holds no codes (a_codes/b_codes): {method!r} is not a "
                            "per-model concept baseline.")
    labels, class_names = None, []
    rep = cdir / "representations.npz"
    if rep.exists():
        with np.load(rep) as z:
            labels = z["labels"] if "labels" in z.files else None
    imgs = cdir / "images.json"
    if imgs.exists():
        import json

        class_names = json.loads(imgs.read_text()).get("class_names") or []
    comp = cdir.name
    out_dir = Path(out_dir)
    color = method_color(method)
    paths = []
    fig = Figure(figsize=(3.6 * len(sides) + 0.6, 6.0))
    for k, s in enumerate(sides):
        U = arr[f"{s}_codes"]
        ax = fig.add_subplot(1, len(sides), k + 1)
        if labels is not None and len(labels) == len(U):
            # by class, then by the dominant concept, so that class structure shows
            order = np.lexsort((np.argmax(U, axis=1), labels))
            lab = labels[order]
            cuts = np.flatnonzero(np.diff(lab)) + 1
        else:
            order, lab, cuts = np.arange(len(U)), None, np.array([], dtype=int)
        lim = float(np.abs(U).max()) or 1.0
        diverging = float(U.min()) < 0
        im = ax.imshow(U[order], aspect="auto", interpolation="nearest",
                       cmap="RdBu_r" if diverging else "magma",
                       norm=mcolors.TwoSlopeNorm(0.0, -lim, lim) if diverging else None)
        for c in cuts:
            ax.axhline(c - 0.5, color="white" if not diverging else "black", linewidth=0.8)
        concepts = arr.get(f"{s}_concepts")
        ax.set_xticks(range(U.shape[1]),
                      [f"c{int(c)}" for c in concepts] if concepts is not None
                      else [str(i) for i in range(U.shape[1])], fontsize=8)
        if lab is not None:
            starts = np.concatenate([[0], cuts])
            stops = np.concatenate([cuts, [len(lab)]])
            ax.set_yticks((starts + stops - 1) / 2,
                          [class_names[int(lab[a])] if 0 <= int(lab[a]) < len(class_names)
                           else str(lab[a]) for a in starts], fontsize=7)
        else:
            ax.set_ylabel("image")
        ax.set_xlabel("concept")
        d = "a_over_b" if s == "a" else "b_over_a"
        ax.set_title(f"codes U, model {s.upper()} ({DIRECTION_SHORT[d]} concepts)", fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.08, pad=0.04).ax.tick_params(labelsize=7)
    fig.suptitle(f"{comp} · {method}: concept coefficients (images sorted by class)",
                 fontsize=11, color=darker(color))
    fig.tight_layout()
    paths += _save_formats(fig, out_dir / f"{comp}_{method}_coeffs", formats)
    dsides = [s for s in sides if f"{s}_dictionary" in arr]
    if dsides:
        fig = Figure(figsize=(10.0, 1.6 * len(dsides) + 1.2))
        for k, s in enumerate(dsides):
            V = arr[f"{s}_dictionary"]
            ax = fig.add_subplot(len(dsides), 1, k + 1)
            lim = float(np.abs(V).max()) or 1.0
            im = ax.imshow(V, aspect="auto", interpolation="nearest", cmap="RdBu_r",
                           norm=mcolors.TwoSlopeNorm(0.0, -lim, lim))
            ax.set_ylabel(f"{s.upper()} concept", fontsize=8)
            concepts = arr.get(f"{s}_concepts")
            if concepts is not None:
                ax.set_yticks(range(len(concepts)), [f"c{int(c)}" for c in concepts], fontsize=7)
            fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01).ax.tick_params(labelsize=7)
        ax.set_xlabel("feature dimension")
        fig.suptitle(f"{comp} · {method}: dictionary V (one row per shown concept)",
                     fontsize=11)
        fig.tight_layout()
        paths += _save_formats(fig, out_dir / f"{comp}_{method}_dictionary", formats)
    return paths


# ---------------------------------------------------------------------------- known differences

def known_difference_rows(summaries: Any) -> list[dict]:
    """One row per comparison × method × direction with a known-difference score (the
    score does not depend on the dissimilarity: the ``rank`` row is kept when present)."""
    out: OrderedDict[tuple, dict] = OrderedDict()
    for r in summary_rows(summaries):
        if r.get("known_difference_expected") is None and \
                r.get("known_difference_score") is None and \
                r.get("known_difference_rate") is None:
            continue
        key = (r.get("experiment"), r.get("comparison"), r["method"], r["direction"])
        if key not in out or r.get("dissimilarity") == "rank":
            out[key] = r
    return list(out.values())


def known_difference_plot(summaries: Any, out_path: str | Path) -> Path:
    """Known-difference recovery per comparison (one panel each): per method, the hit rate
    (or the masked-concept score) in the expected direction (solid) and in the opposite
    one (hatched, should stay low)."""
    rows = known_difference_rows(summaries)
    if not rows:
        raise RDXInputError("no known-difference scores in the summaries: declare "
                            "`known_difference` in the comparison's config (e.g. {type: "
                            "merged_classes, classes: [3, 5], model: a}) and summarise again.")
    comps = list(OrderedDict.fromkeys(r.get("comparison") for r in rows))
    fig = Figure(figsize=(max(5.0, 1.0 + 1.0 * max(len(_method_order(
        [r for r in rows if r.get("comparison") == c])) for c in comps)), 3.4 * len(comps)))
    for k, comp in enumerate(comps):
        crows = [r for r in rows if r.get("comparison") == comp]
        methods = _method_order(crows)
        ax = fig.add_subplot(len(comps), 1, k + 1)
        is_rate = any(is_finite(r.get("known_difference_rate")) for r in crows)
        key = "known_difference_rate" if is_rate else "known_difference_score"
        for i, (m, mtype) in enumerate(methods.items()):
            color = method_color(m, mtype)
            for j, expected in enumerate((True, False)):
                rr = [r for r in crows if r["method"] == m
                      and bool(r.get("known_difference_expected")) is expected]
                v = _mean(r.get(key) for r in rr)
                if not math.isfinite(v):
                    continue
                x = i + (j - 0.5) * 0.38
                ax.bar(x, v, width=0.36, color=color if expected else _lighter(color, 0.55),
                       edgecolor="black", hatch=None if expected else "///",
                       gid=f"kd:{m}:{'expected' if expected else 'opposite'}")
                if is_rate and rr and is_finite(rr[0].get("known_difference_total")):
                    ax.text(x, v + 0.02, f"{int(rr[0].get('known_difference_hits') or 0)}/"
                            f"{int(rr[0]['known_difference_total'])}", ha="center",
                            va="bottom", fontsize=7)
        ax.set_xticks(range(len(methods)), list(methods), rotation=30, ha="right")
        ax.set_xlim(-0.6, len(methods) - 0.4)
        if is_rate:
            ax.set_ylim(0, 1.12)
            ax.set_ylabel("hit rate of grids")
        else:
            ax.axhline(1.0, color="0.4", linewidth=0.8, linestyle=":")
            ax.set_ylabel("masked-concept score")
        exp_dirs = sorted({r["direction"] for r in crows if r.get("known_difference_expected")})
        ax.set_title(f"{comp}: known-difference recovery (expected direction: "
                     f"{', '.join(DIRECTION_LABELS[d] for d in exp_dirs) or '?'})", fontsize=10)
        ax.legend(handles=[Patch(facecolor="0.55", edgecolor="black",
                                 label="expected direction"),
                           Patch(facecolor="0.85", edgecolor="black", hatch="///",
                                 label="opposite direction")], fontsize=8, loc="upper right")
    fig.tight_layout()
    return save_figure(fig, out_path)
