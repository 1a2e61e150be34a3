"""Figures of the scores of a run: BSR box plots over comparisons (one per dissimilarity)
and the explanation-statistics table (BSR, chance level, TSD and EQ per method and
direction).

Both take the score summaries of :func:`rdx.evaluation.summary.summarize_comparison` (one,
a list, or flat rows), draw with matplotlib's object API and write atomically.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..errors import RDXInputError
from ..results.types import DIRECTIONS, SCORE_LABELS
from .labels import DIRECTION_LABELS, DIRECTION_SHORT, DISSIMILARITY_LABELS, DISSIMILARITY_NAMES
from .save import save_figure
from .score_rows import finite_mean, format_number, is_finite, row_methods, summary_rows
from .style import FONT_LABEL, FONT_NOTE, TABLE_HEADER_COLOR, darker, is_dark, lighter, method_color


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
        methods = row_methods(drows)
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
                    box.set_facecolor(color if j == 0 else lighter(color, 0.55))
                    box.set_edgecolor("black")
                    if j == 1:
                        box.set_hatch("///")
                for key in ("medians", "whiskers", "caps"):
                    for ln in bp[key]:
                        ln.set_color("black")
                # the comparisons themselves (deterministic jitter)
                jit = (np.arange(len(vals)) - (len(vals) - 1) / 2) * (0.18 / max(len(vals), 1))
                ax.scatter(x + jit, vals, s=12, color="black", zorder=3, linewidths=0)
                chance = finite_mean(r.get("chance_bsr_mean") for r in drows
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
                  loc="lower left", fontsize=FONT_NOTE, framealpha=0.9)
        if not paper:
            ax.set_title(f"{SCORE_LABELS['bsr'].name.capitalize()} "
                         f"({SCORE_LABELS['bsr'].short}), {DISSIMILARITY_NAMES.get(dis, dis)} "
                         f"dissimilarity ({n_comp} comparison{'s' if n_comp != 1 else ''})")
        stem = f"{SCORE_LABELS['bsr'].short}_{DISSIMILARITY_LABELS.get(dis, dis)}_boxplot"
        paths.append(save_figure(fig, out_dir / f"{stem}.png", dpi=300 if paper else 150))
        if paper:
            paths.append(save_figure(fig, out_dir / f"{stem}.pdf"))
    return paths


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
                                            for c in _TABLE_COLS] \
        + [f"mean {SCORE_LABELS['bsr'].short}", "grids A>B/B>A"]
    cells, colours, bold, types = [], [], [], []
    for dis in OrderedDict.fromkeys(r["dissimilarity"] for r in rows):
        drows = [r for r in rows if r["dissimilarity"] == dis]
        methods = row_methods(drows)
        stats: dict[str, dict[str, float]] = {}
        for m in methods:
            s: dict[str, float] = {}
            for d in DIRECTIONS:
                rr = [r for r in drows if r["method"] == m and r["direction"] == d]
                for k in ("bsr", "tsd", "eq", "chance_bsr_mean", "chance_bsr_lo",
                          "chance_bsr_hi", "n_explanations"):
                    s[f"{d}:{k}"] = finite_mean(r.get(k) for r in rr)
            s["mean"] = finite_mean([s["a_over_b:bsr"], s["b_over_a:bsr"]]) \
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
                        f"{format_number(ch, '.2f')} [{format_number(lo, '.2f')}, "
                        f"{format_number(hi, '.2f')}]" if math.isfinite(ch) else "–",
                        format_number(s[f"{d}:tsd"], ".3g"), format_number(s[f"{d}:eq"], ".3f")]
                col += [_shade(greens, shade.get((m, f"{d}:bsr"))), "white",
                        _shade(greens, shade.get((m, f"{d}:tsd"))), "white"]
                bld += [math.isfinite(b) and math.isfinite(hi) and b > hi, False, False, False]
            k1, k2 = s["a_over_b:n_explanations"], s["b_over_a:n_explanations"]
            row += [format_number(s["mean"], ".3f"),
                    f"{format_number(k1, '.0f')}/{format_number(k2, '.0f')}"]
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
    table.set_fontsize(FONT_NOTE)
    table.auto_set_column_width(list(range(len(header))))
    for j in range(len(header)):
        table[0, j].set_text_props(weight="bold")
        table[0, j].set_facecolor(TABLE_HEADER_COLOR)
    for i, (row, bld) in enumerate(zip(cells, bold), start=1):
        table[i, 0].get_text().set_color(darker(method_color(row[0], types[i - 1])))
        for j, b in enumerate(bld):
            if b:
                table[i, j].set_text_props(weight="bold")
            if colours[i - 1][j] != "white" and is_dark(colours[i - 1][j]):
                table[i, j].get_text().set_color("white")
    table.scale(1.0, 1.3)
    ax.set_title(f"Explanation statistics (mean over {n_comp} comparison"
                 f"{'s' if n_comp != 1 else ''}; bold BSR: above the 97.5th percentile of "
                 "random grids; shading: rank)", fontsize=FONT_LABEL)
    return save_figure(fig, out_path)


def _shade(cmap: Any, value: float | None) -> Any:
    return "white" if value is None else cmap(value)


__all__ = ["bsr_boxplots", "explanation_stats_table"]
