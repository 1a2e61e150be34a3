"""Image grids of explanations (PNG), drawn with Pillow."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw

from ..errors import RDXInputError
from ..io import atomic_write


def _to_uint8(img: np.ndarray) -> np.ndarray:
    img = np.asarray(img, dtype=np.float64)
    lo, hi = float(img.min()), float(img.max())
    if hi > lo:
        img = (img - lo) / (hi - lo)
    else:
        img = np.zeros_like(img)
    return (img * 255).round().astype(np.uint8)


def image_grid(images: np.ndarray, indices: Sequence[int], *, ncols: int = 3,
               cell: int = 96, pad: int = 4, background: int = 255) -> Image.Image:
    """A grid of ``images[indices]`` (each scaled to ``cell``×``cell``, min–max normalised).

    ``images`` is anything indexable by image number (an array or a lazy loader) whose items
    are ``(H, W)`` (grey), ``(H, W, 3)`` or ``(3, H, W)`` arrays.
    """
    if len(indices) == 0:
        raise RDXInputError("cannot draw an empty grid")
    nrows = -(-len(indices) // ncols)
    canvas = Image.new("RGB", (ncols * cell + (ncols + 1) * pad, nrows * cell + (nrows + 1) * pad),
                       (background,) * 3)
    for pos, idx in enumerate(indices):
        arr = _to_uint8(images[int(idx)])
        if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3):
            arr = np.moveaxis(arr, 0, -1)
        if arr.ndim == 3 and arr.shape[-1] == 1:
            arr = arr[..., 0]
        tile = Image.fromarray(arr).convert("RGB").resize((cell, cell), Image.NEAREST)
        r, c = divmod(pos, ncols)
        canvas.paste(tile, (pad + c * (cell + pad), pad + r * (cell + pad)))
    return canvas


def summary_strip(grids: Sequence[Image.Image], titles: Sequence[str], *, pad: int = 10,
                  title_height: int = 18) -> Image.Image:
    """Grids side by side with a title above each (the paper's per-direction summary)."""
    w = sum(g.width for g in grids) + pad * (len(grids) + 1)
    h = max(g.height for g in grids) + title_height + 2 * pad
    strip = Image.new("RGB", (w, h), (0, 0, 0))
    draw = ImageDraw.Draw(strip)
    x = pad
    for g, title in zip(grids, titles):
        draw.text((x, pad // 2), title, fill=(255, 255, 255))
        strip.paste(g, (x, pad + title_height))
        x += g.width + pad
    return strip


def explanation_title(i: int, exp: dict) -> str:
    """Short caption: rank, concept id (baselines), cluster size and mean affinity (RDX)."""
    parts = [f"#{i}"]
    if "concept" in exp:
        parts.append(f"c{exp['concept']}")
    if "members" in exp:
        parts.append(f"n={len(exp['members'])}")
    if "mean_affinity" in exp:
        parts.append(f"aff={exp['mean_affinity']:.2f}")
    return "  ".join(parts)


def save_direction_grids(images, explanations: Sequence[dict], paths: Sequence[Path],
                         summary_path: Path | None = None) -> list[Path]:
    """Write one PNG per explanation (``paths[i]`` for ``explanations[i]``) and, with
    ``summary_path``, the direction's grids side by side; returns the files written.

    File names are the caller's (the run store's) to choose: this module only draws.
    """
    if len(paths) != len(explanations):
        raise RDXInputError(f"{len(explanations)} explanations but {len(paths)} grid paths.")
    written, grids, titles = [], [], []
    for i, (exp, p) in enumerate(zip(explanations, paths), start=1):
        grid = image_grid(images, exp["images"])
        written.append(_save_png(grid, Path(p)))
        grids.append(grid)
        titles.append(explanation_title(i, exp))
    if grids and summary_path is not None:
        written.append(_save_png(summary_strip(grids, titles), Path(summary_path)))
    return written


def _save_png(img: Image.Image, path: Path) -> Path:
    """Atomic PNG write (a reader never sees half an image)."""
    atomic_write(path, lambda fh: img.save(fh, format="PNG"))
    return path
