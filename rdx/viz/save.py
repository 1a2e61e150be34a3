"""Writing figures: atomically (a reader never sees half a file), on an Agg canvas (no
display needed), white background, tight bounding box; the format follows the suffix."""
from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..errors import RDXInputError
from ..io import atomic_write

#: The formats a figure can be written in (by the suffix of its path).
FORMATS = ("png", "pdf", "svg")


def save_figure(fig: Figure, out_path: str | Path, *, dpi: int = 150) -> Path:
    """Save a figure atomically as ``.png``, ``.pdf`` or ``.svg`` (by the suffix).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        A figure built with the object API (no pyplot state).
    out_path : path
        Where to write it; its suffix names the format.
    dpi : int
        Resolution of raster formats.

    Returns
    -------
    Path
        ``out_path``.
    """
    p = Path(out_path)
    fmt = p.suffix.lstrip(".").lower() or "png"
    if fmt not in FORMATS:
        raise RDXInputError(f"{p}: figures are written as .png, .pdf or .svg, not .{fmt}.")
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight", facecolor="white")
    atomic_write(p, lambda fh: fh.write(buf.getvalue()))
    return p


def save_formats(fig: Figure, stem: Path, formats: Sequence[str]) -> list[Path]:
    """Save ``fig`` as ``stem.<fmt>`` for every format, in the given order."""
    if not formats:
        raise RDXInputError("formats: give at least one of 'png', 'pdf', 'svg'.")
    return [save_figure(fig, stem.with_name(f"{stem.name}.{fmt}")) for fmt in formats]


def save_png(fig: Figure, path: str | Path, dpi: int = 130) -> Path:
    """Write a figure as PNG (the suffix of ``path`` is replaced by ``.png``)."""
    return save_figure(fig, Path(path).with_suffix(".png"), dpi=dpi)


__all__ = ["FORMATS", "save_figure", "save_formats", "save_png"]
