"""How results show themselves in Jupyter: the HTML behind the ``_repr_html_`` methods.

A fitted :class:`~rdx.method.estimator.RDX`, a :class:`~rdx.results.types.MethodResult` and
a comparison folder (:class:`~rdx.results.store.ComparisonRun`) render as the same block:
per direction its meaning and BSR against chance, then one row per explanation with its
grid (where the images are at hand: a comparison folder's grid PNGs, inline as ``data:``
URIs so that the notebook carries them), its size, mean affinity, weak and significance
flags, the class make-up of the grid beside its whole cluster's, and its one-line
description; below, what the significance test was measured against and what the
descriptions were tested on. The words are the console's (:mod:`rdx.results.console`), so
a notebook and a terminal say the same thing.

Pure string building with :func:`html.escape`; nothing here imports torch or draws.
"""
from __future__ import annotations

import base64
import html
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .console import bsr_text, enrichment_text, significance_text
from .nulls import standing_text

#: inline style of the block: readable in Jupyter's light and dark themes alike
_STYLE = ("font-family:system-ui,sans-serif;font-size:13px;line-height:1.4;"
          "max-width:1100px")
_CELL = "padding:3px 8px;border-bottom:1px solid #8884;text-align:left;vertical-align:top"


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def png_data_uri(path: str | Path) -> str:
    """A PNG file as a ``data:`` URI (the notebook then holds the picture itself)."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _label(v: Any) -> str:
    """A class as the descriptions name it: ``class 4`` for a number, else its name."""
    return f"class {v}" if isinstance(v, (int, np.integer)) else str(v)


def makeup_text(labels: np.ndarray | None, rows: Sequence[int] | None, *, top: int = 3) -> str:
    """``Coat×6, Shirt×2`` of the given rows' labels (most frequent first), "" without."""
    if labels is None or not rows:
        return ""
    counts = Counter(np.asarray(labels)[list(rows)].tolist()).most_common()
    text = ", ".join(f"{_label(v)}×{c}" for v, c in counts[:top])
    return text + (f", {len(counts) - top} more classes" if len(counts) > top else "")


def _cluster_text(labels: np.ndarray | None, members: Sequence[int] | None) -> str:
    """``48 % 8, 30 % 9, ...``: the whole cluster's make-up in shares."""
    if labels is None or not members:
        return ""
    counts = Counter(np.asarray(labels)[list(members)].tolist()).most_common(3)
    return ", ".join(f"{100 * c / len(members):.0f} % {_label(v)}" for v, c in counts)


def method_result_html(result: Any, *, grid_uris: Mapping[str, Sequence[str]] | None = None,
                       labels: np.ndarray | None = None, title: str | None = None,
                       name: str | None = None) -> str:
    """The HTML block of one method's result (see the module docstring).

    Parameters
    ----------
    result : MethodResult
    grid_uris : {direction: [uri, ...]}, optional
        Each explanation's grid picture (``data:`` or file URIs), in explanation order.
    labels : (n_images,) array, optional
        Class names or ids of the images, for the make-up of the grids and clusters.
    title : str, optional
        A heading above the block (e.g. the comparison's name).
    name : str, optional
        The method's name in its run (``pca_ar0to1``), shown with its kind when they differ.
    """
    from .types import SCORE_LABELS, direction_meaning

    weak = SCORE_LABELS["low_affinity"].short
    out = [f'<div style="{_STYLE}">']
    if title:
        out.append(f"<h3 style='margin:4px 0'>{_e(title)}</h3>")
    head = f"<b>{_e(name or result.method)}</b>"
    if name and name != result.method:
        head += f" ({_e(result.method)})"
    head += f" on {int(result.n_images)} images"
    bsr = result.bsr
    if bsr and bsr.get("mean") is not None:
        head += f" · mean {_e(SCORE_LABELS['bsr'].short)} (rank) {bsr['mean']:.3f}"
    out.append(f"<div>{head}</div>")
    for d, r in result.directions.items():
        out.append(f"<h4 style='margin:10px 0 2px'>{_e(d)}: "
                   f"{_e(direction_meaning(result.method, d))}</h4>")
        if result.scores:
            out.append(f"<div>{_e(bsr_text(result, d))}</div>")
        if not r.explanations:
            out.append("<div><i>no explanation</i></div>")
            continue
        uris = list((grid_uris or {}).get(d, []))
        cols = ["#"] + (["grid"] if uris else []) + ["members", "mean affinity", "verdict"] \
            + (["grid's classes", "cluster's classes"] if labels is not None else []) \
            + ["description"]
        out.append("<table style='border-collapse:collapse;margin-top:4px'><tr>"
                   + "".join(f"<th style='{_CELL}'>{_e(c)}</th>" for c in cols) + "</tr>")
        for i, e in enumerate(r.explanations, start=1):
            cells = [str(i)]
            if uris:
                img = (f"<img src='{_e(uris[i - 1])}' alt='grid {i}' "
                       "style='width:150px;image-rendering:pixelated'>"
                       if i <= len(uris) else "")
                cells.append(img)
            cells.append(_e(len(e.members)) if e.members is not None
                         else f"concept {_e(e.concept)}")
            cells.append("" if e.mean_affinity is None else f"{e.mean_affinity:.2f}")
            flags = [weak] if e.low_affinity else []
            sig = significance_text(e.extra.get("significance"))
            if sig:
                flags.append(sig)
            cells.append(_e("; ".join(flags)))
            if labels is not None:
                cells.append(_e(makeup_text(labels, e.images)))
                cells.append(_e(_cluster_text(labels, e.members)))
            cells.append(_e(e.extra.get("description") or ""))
            out.append("<tr>" + "".join(f"<td style='{_CELL}'>{c}</td>" for c in cells)
                       + "</tr>")
        out.append("</table>")
    sig_info = result.info.get("significance")
    if isinstance(sig_info, dict):
        out.append(f"<div style='margin-top:6px'>significance: {int(sig_info['n_null'])} null "
                   "draws; " + _e(standing_text(sig_info.get("null"), sig_info.get("noise"),
                                               sig_info.get("standing"))) + "</div>")
    enrichment = result.info.get("enrichment")
    if isinstance(enrichment, dict):
        out.append(f"<div style='margin-top:4px'>{_e(enrichment_text(enrichment))}</div>")
    out.append("</div>")
    return "".join(out)


def comparison_html(comp: Any) -> str:
    """A comparison folder's block: every finished method with its grid pictures inline,
    and where its report and explorer pages are (paths relative to the folder)."""
    results = comp.results()
    labels = comp.labels
    parts = [f'<div style="{_STYLE}"><h3 style="margin:4px 0">comparison '
             f'{_e(comp.name)}</h3>']
    description = (comp.config or {}).get("description")
    if description:
        parts.append(f"<div>{_e(description)}</div>")
    if not results:
        parts.append("<div><i>no finished method in this folder yet</i></div>")
    for name, result in results.items():
        uris = {d: [png_data_uri(p) for p in comp.grid_paths(name, d)]
                for d in result.directions}
        parts.append(method_result_html(result, grid_uris=uris, labels=labels, name=name))
    pages = [p.relative_to(comp.path).as_posix() for p in sorted(comp.path.rglob("*.html"))]
    if pages:
        parts.append("<div style='margin-top:6px'>pages: " + ", ".join(
            f"<code>{_e(p)}</code>" for p in pages) + "</div>")
    parts.append("</div>")
    return "".join(parts)


def estimator_html(estimator: Any) -> str:
    """A fitted RDX's result block, or its parameters that differ from the defaults."""
    if hasattr(estimator, "directions_"):
        return method_result_html(estimator.result())
    defaults = type(estimator)().get_params()
    changed = {k: v for k, v in estimator.get_params().items() if v != defaults.get(k)}
    args = ", ".join(f"{k}={v!r}" for k, v in changed.items())
    return (f'<div style="{_STYLE}"><b>{_e(type(estimator).__name__)}({_e(args)})</b> '
            "<i>not fitted</i></div>")
