"""The figure of known-difference recovery: how often each method's grids found a
difference that was implanted on purpose, in the expected direction and in the opposite
one (from the score summaries of :func:`rdx.evaluation.summary.summarize_comparison`)."""
from __future__ import annotations

import math
from collections import OrderedDict
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..errors import RDXInputError
from .labels import DIRECTION_LABELS
from .save import save_figure
from .score_rows import finite_mean, is_finite, known_difference_rows, row_methods
from .style import FONT_NOTE, FONT_SMALL, FONT_TITLE, lighter, method_color


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
    fig = Figure(figsize=(max(5.0, 1.0 + 1.0 * max(len(row_methods(
        [r for r in rows if r.get("comparison") == c])) for c in comps)), 3.4 * len(comps)))
    for k, comp in enumerate(comps):
        crows = [r for r in rows if r.get("comparison") == comp]
        methods = row_methods(crows)
        ax = fig.add_subplot(len(comps), 1, k + 1)
        is_rate = any(is_finite(r.get("known_difference_rate")) for r in crows)
        key = "known_difference_rate" if is_rate else "known_difference_score"
        for i, (m, mtype) in enumerate(methods.items()):
            color = method_color(m, mtype)
            for j, expected in enumerate((True, False)):
                rr = [r for r in crows if r["method"] == m
                      and bool(r.get("known_difference_expected")) is expected]
                v = finite_mean(r.get(key) for r in rr)
                if not math.isfinite(v):
                    continue
                x = i + (j - 0.5) * 0.38
                ax.bar(x, v, width=0.36, color=color if expected else lighter(color, 0.55),
                       edgecolor="black", hatch=None if expected else "///",
                       gid=f"kd:{m}:{'expected' if expected else 'opposite'}")
                if is_rate and rr and is_finite(rr[0].get("known_difference_total")):
                    ax.text(x, v + 0.02, f"{int(rr[0].get('known_difference_hits') or 0)}/"
                            f"{int(rr[0]['known_difference_total'])}", ha="center",
                            va="bottom", fontsize=FONT_SMALL)
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
                     f"{', '.join(DIRECTION_LABELS[d] for d in exp_dirs) or '?'})",
                     fontsize=FONT_TITLE)
        ax.legend(handles=[Patch(facecolor="0.55", edgecolor="black",
                                 label="expected direction"),
                           Patch(facecolor="0.85", edgecolor="black", hatch="///",
                                 label="opposite direction")], fontsize=FONT_NOTE,
                  loc="upper right")
    fig.tight_layout()
    return save_figure(fig, out_path)


__all__ = ["known_difference_plot"]
