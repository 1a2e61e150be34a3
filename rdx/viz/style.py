"""The one visual style of rdx: the colours, markers and font sizes of every figure
(``rdx/viz``) and the colours of the static HTML pages (``rdx/report``).

* Methods: :func:`method_color` gives every method the same colour in every figure and
  every run — its family's base colour (Okabe–Ito, colour-blind safe; RDX in vermilion so
  that it stands out; the baselines' colours come from their registry), a shade of it for a
  named variant, a fixed colour of :data:`FALLBACK_COLORS` for an unknown method.
  :func:`method_order` puts methods in the same order in every figure (RDX first).
* Classes: :func:`class_colors` (tab10 / tab20 / hsv by the number of classes).
* Clusters of the training-dynamics figures: :func:`cluster_color` (the no-change group
  grey, cluster 0 blue, difference clusters from :data:`CLUSTER_PALETTE`).
* Grid images marked in scatter plots: :data:`GRID_MARKER_FACE` / :data:`GRID_MARKER_EDGE`
  and one shape per explanation (:data:`MARKERS`).
* Weak (low-affinity) explanations: :data:`WEAK_COLOR` (grid strips) and the page colours
  ``weak*``.
* Font sizes in points (:data:`FONT_TINY` … :data:`FONT_HEADING`) and the colour of a
  missing value in a heat map (:data:`MISSING_COLOR`).
* Pages: :data:`PAGE_COLORS`, the CSS variables of the reports (:func:`css_variables`).

Colours are hex strings or RGB float tuples; nothing here imports matplotlib when the module
is imported (the pages use it too, and they draw nothing).
"""
from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..baselines import BASELINE_COLORS

RGB = tuple[float, float, float]


def hex_rgb(color: str) -> RGB:
    """``"#RRGGBB"`` as (r, g, b) floats in [0, 1] (the floats matplotlib makes of it)."""
    c = color.lstrip("#")
    return tuple(int(c[i:i + 2], 16) / 255 for i in (0, 2, 4))


def to_rgb(color: Any) -> RGB:
    """Any matplotlib colour (name, hex, grey level string, RGB(A) tuple) as (r, g, b)."""
    from matplotlib import colors as mcolors

    return mcolors.to_rgb(color)


# ---------------------------------------------------------------------------- methods

#: Base colour of each method family: Okabe–Ito (colour-blind safe) first, RDX in
#: vermilion so that it stands out; related families get related hues. The order of the
#: keys is the order of the methods in every figure (:func:`method_order`).
FAMILY_COLORS = {
    "rdx": "#D55E00",
    **BASELINE_COLORS,      # the baselines' registry holds their colours
    "cka": "#999999",
    "classification": "#555555",
}
#: Shade steps of named variants (e.g. ``rdx_nb_lb_pagerank``, ``kmeans_ar0to1``):
#: negative → towards black, positive → towards white.
SHADES = (-0.45, -0.3, -0.15, 0.15, 0.3, 0.45, 0.6)
#: Colours of methods of no known family (matplotlib's tab10).
FALLBACK_COLORS = ("#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B",
                   "#E377C2", "#7F7F7F", "#BCBD22", "#17BECF")


def method_family(name: str, method_type: str | None = None) -> str | None:
    """The family (a key of :data:`FAMILY_COLORS`) of a method, None when it has none."""
    if method_type in FAMILY_COLORS:
        return method_type
    # longest family first, so that "topk_sae_x" is a topk_sae and not an sae
    for fam in sorted(FAMILY_COLORS, key=len, reverse=True):
        if name == fam or name.startswith(fam + "_"):
            return fam
    return None


def stable_hash(text: str) -> int:
    """A hash of ``text`` that is the same in every process."""
    # crc32, not hash(): Python salts str hashes per process, colours must not change
    return zlib.crc32(text.encode())


def method_color(name: str, method_type: str | None = None) -> RGB:
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
    fam = method_family(name, method_type)
    if fam is None:
        return hex_rgb(FALLBACK_COLORS[stable_hash(name) % len(FALLBACK_COLORS)])
    base = np.array(hex_rgb(FAMILY_COLORS[fam]))
    if name == fam:
        return tuple(float(v) for v in base)
    t = SHADES[stable_hash(name) % len(SHADES)]
    target = np.ones(3) if t > 0 else np.zeros(3)
    return tuple(float(v) for v in base + abs(t) * (target - base))


def method_order(names: Sequence[str], types: Mapping[str, str | None]) -> list[str]:
    """RDX first, then the baselines in the fixed family order of :data:`FAMILY_COLORS`
    (unknown methods last); the given order within a family. The same order in every
    figure. ``types``: each name's ``method`` where known."""
    fams = list(FAMILY_COLORS)

    def key(item: tuple[int, str]) -> tuple[int, int]:
        i, name = item
        fam = method_family(name, types.get(name))
        return (fams.index(fam) if fam in fams else len(fams), i)

    return [n for _, n in sorted(enumerate(names), key=key)]


def lighter(color: Any, amount: float = 0.5) -> RGB:
    """``color`` moved ``amount`` of the way to white (the second direction's boxes)."""
    c = np.array(to_rgb(color))
    return tuple(float(v) for v in c + amount * (1.0 - c))


def darker(color: Any, amount: float = 0.25) -> RGB:
    """``color`` moved ``amount`` of the way to black (text in a method's colour)."""
    c = np.array(to_rgb(color))
    return tuple(float(v) for v in c * (1.0 - amount))


def is_dark(color: Any) -> bool:
    """Whether white text reads better than black on ``color`` (luma below 0.45)."""
    r, g, b = to_rgb(color)
    return 0.299 * r + 0.587 * g + 0.114 * b < 0.45


# ---------------------------------------------------------------------------- classes

def class_colors(n_classes: int) -> list[RGB]:
    """Colours of the classes (tab10 / tab20; hsv beyond 20 classes)."""
    from matplotlib import colormaps

    if n_classes <= 10:
        return [to_rgb(colormaps["tab10"](i)) for i in range(n_classes)]
    if n_classes <= 20:
        return [to_rgb(colormaps["tab20"](i)) for i in range(n_classes)]
    return [to_rgb(colormaps["hsv"](i / n_classes)) for i in range(n_classes)]


# ---------------------------------------------------------------------------- clusters

#: Colour of the no-change group, and of cluster 0 while it is still a difference cluster.
NO_CHANGE_GREY = (0.72, 0.72, 0.72)
CLUSTER0_COLOR = hex_rgb("#0072B2")
#: Difference clusters 1, 2, …: tab10 without its blue (cluster 0) and grey (no-change),
#: then black.
CLUSTER_PALETTE = [hex_rgb(FALLBACK_COLORS[i].lower()) for i in (1, 2, 3, 4, 5, 6, 8, 9)] \
    + [(0.0, 0.0, 0.0)]


def cluster_color(label: int, no_change: bool) -> RGB:
    """Colour of cluster ``label`` of a checkpoint (0 = grey when it is a no-change group)."""
    if label == 0:
        return NO_CHANGE_GREY if no_change else CLUSTER0_COLOR
    return CLUSTER_PALETTE[(label - 1) % len(CLUSTER_PALETTE)]


# ---------------------------------------------------------------------------- marks

#: Grid images in scatter plots: black markers with a white rim, so that they can never be
#: mistaken for class-coloured background points (nor a class colour for a method's).
GRID_MARKER_FACE = (0.0, 0.0, 0.0)
GRID_MARKER_EDGE = (1.0, 1.0, 1.0)
#: One marker shape per explanation of a method.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "p", "h")
#: Weak (low-affinity) explanations on the grid strips: title and frame, 0–255 RGB.
WEAK_COLOR = (255, 160, 0)
#: Heat-map cells without a value.
MISSING_COLOR = "#e6e6e6"
#: Header cells of table figures.
TABLE_HEADER_COLOR = "#DDDDDD"

# ---------------------------------------------------------------------------- fonts

#: Font sizes in points, smallest first: dense ticks, values written in heat-map cells,
#: tick labels, captions over image grids, legends and notes, axis labels, axes titles,
#: figure titles, method names over panels.
FONT_TINY = 6
FONT_CELL = 6.5
FONT_SMALL = 7
FONT_CAPTION = 7.5
FONT_NOTE = 8
FONT_LABEL = 9
FONT_TITLE = 10
FONT_SUPTITLE = 11
FONT_HEADING = 12

# ---------------------------------------------------------------------------- pages

#: The colours of the static HTML pages (the report's and the explorer's CSS variables
#: ``--<name>``): text, secondary text, rules, background, panels, links and headers,
#: scores above / below chance, weak explanations (frame, badge fill, badge text) and notes
#: (rule, fill).
PAGE_COLORS = {
    "fg": "#1d2330", "muted": "#5b6475", "line": "#d9dee7", "bg": "#ffffff",
    "panel": "#f5f7fa", "accent": "#2f5fa7", "good": "#1d7a46", "bad": "#a3372b",
    "weak": "#d08000", "weak-fill": "#fff1d6", "weak-text": "#8a5200",
    "note": "#e0a030", "note-fill": "#fff7e6",
}
#: The explorer's rings around selected points: in model A, in model B, an RDX explanation's
#: members (its script draws them in the same colours).
EXPLORER_RINGS = {"ring-a": "#1b9e77", "ring-b": "#7570b3", "ring-rdx": "#e9b450"}
#: The explorer's colours (its script reads them from the page's data): one per explanation
#: (grey first: in no explanation), one per class (tab10, then ten more), the rings (as in
#: its stylesheet), points outside every group, prediction outcomes (right, wrong, and the
#: two other outcomes of a colouring: true / false negatives, only A / only B right) and the
#: colour scales of continuous values (stops of matplotlib's magma, a blue–white–red,
#: viridis, and the oranges of the neighbour tables' ranks).
EXPLORER_PALETTE = {
    "explanations": ["#9aa0a6", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                     "#e377c2", "#1b9e77", "#bcbd22", "#17becf", "#7570b3", "#e7298a"],
    "labels": [c.lower() for c in FALLBACK_COLORS]
    + ["#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354",
       "#756bb1", "#636363"],
    "rings": {k.removeprefix("ring-"): v for k, v in EXPLORER_RINGS.items()},
    "none": "#c9ced6",
    "outcomes": {"right": "#2ca02c", "wrong": "#d62728", "first": "#1f77b4", "second": "#ff7f0e"},
    "scales": {
        "magma": [[0, "#000004"], [0.13, "#1c1044"], [0.25, "#4f127b"], [0.38, "#812581"],
                  [0.5, "#b5367a"], [0.63, "#e55064"], [0.75, "#fb8761"], [0.88, "#fec287"],
                  [1, "#fcfdbf"]],
        "bwr": [[0, "#2166ac"], [0.25, "#67a9cf"], [0.5, "#f7f7f7"], [0.75, "#ef8a62"],
                [1, "#b2182b"]],
        "viridis": [[0, "#440154"], [0.25, "#3b528b"], [0.5, "#21918c"], [0.75, "#5ec962"],
                    [1, "#fde725"]],
        "oranges": [[0, "#fff5eb"], [0.5, "#fdae6b"], [1, "#d94801"]],
    },
}


def css_variables(extra: Mapping[str, str] | None = None) -> str:
    """The ``:root { --fg: …; }`` rule of :data:`PAGE_COLORS` (and ``extra``), five
    variables per line."""
    items = [f"--{k}: {v};" for k, v in {**PAGE_COLORS, **(extra or {})}.items()]
    lines = [" ".join(items[i:i + 5]) for i in range(0, len(items), 5)]
    return ":root { " + "\n        ".join(lines) + " }"


__all__ = [
    "CLUSTER0_COLOR", "CLUSTER_PALETTE", "EXPLORER_PALETTE", "EXPLORER_RINGS", "FALLBACK_COLORS",
    "FAMILY_COLORS", "FONT_CAPTION", "FONT_CELL", "FONT_HEADING", "FONT_LABEL", "FONT_NOTE", "FONT_SMALL",
    "FONT_SUPTITLE", "FONT_TINY", "FONT_TITLE", "GRID_MARKER_EDGE", "GRID_MARKER_FACE",
    "MARKERS", "MISSING_COLOR", "NO_CHANGE_GREY", "PAGE_COLORS", "RGB", "SHADES",
    "TABLE_HEADER_COLOR", "WEAK_COLOR", "class_colors", "cluster_color", "css_variables",
    "darker", "hex_rgb", "is_dark", "lighter", "method_color", "method_family", "method_order",
    "stable_hash", "to_rgb",
]
