"""Image grids of explanations (PNG), drawn with Pillow: :func:`save_result_grids` draws every
grid of a result into its method folder (the run store's file names), for ``rdx run``, ``rdx
explain`` and the studies alike."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image, ImageDraw

from ..errors import RDXInputError
from ..io import atomic_write
from ..results.store import grid_directions, grid_path, summary_grid_path
from ..results.types import SCORE_LABELS, MethodResult
from .style import WEAK_COLOR


def _to_uint8(img: np.ndarray) -> np.ndarray:
    img = np.asarray(img, dtype=np.float64)
    lo, hi = float(img.min()), float(img.max())
    if hi > lo:
        img = (img - lo) / (hi - lo)
    else:
        img = np.zeros_like(img)
    return (img * 255).round().astype(np.uint8)


def display_image(img: np.ndarray, index: int = 0) -> np.ndarray:
    """One image as a grid shows it: min–max normalised to uint8, ``H×W`` (grey) or
    ``H×W×C`` (RGB, RGBA), whichever of the layouts of :func:`image_grid` it came in.

    Raises
    ------
    RDXInputError
        When it is none of them (``index`` names the image).
    """
    arr = _to_uint8(img)
    if arr.ndim == 3 and arr.shape[0] in (1, 3, 4) and arr.shape[-1] not in (1, 3, 4):
        arr = np.moveaxis(arr, 0, -1)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if not (arr.ndim == 2 or (arr.ndim == 3 and arr.shape[-1] in (3, 4))):
        # PIL's own error ("Cannot handle this data type") would not say what to fix
        raise RDXInputError(
            f"image {index} has shape {arr.shape}; grids are drawn from grey (H×W), "
            "RGB or RGBA images (H×W×C or C×H×W with C = 1, 3 or 4).")
    return arr


def display_images(images: np.ndarray) -> np.ndarray:
    """Every image of an array as :func:`display_image` gives it (``n×H×W`` or ``n×H×W×C``
    uint8): what a comparison folder keeps of an ``--images`` array for the explorer — the
    images as the grids show them, in a quarter of a float32 array's bytes."""
    return np.stack([display_image(img, i) for i, img in enumerate(images)])


#: Height of one caption line under a grid image (Pillow's default font is 10 px).
CAPTION_LINE_HEIGHT = 12
#: Short names of the representations in captions (a mapped one is primed).
_REPRESENTATION_NAMES = {"a": "A", "b": "B", "a_mapped": "A'", "b_mapped": "B'"}


def image_grid(images: np.ndarray, indices: Sequence[int], *, ncols: int = 3,
               cell: int = 96, pad: int = 4, background: int = 255,
               captions: Sequence[Sequence[str]] | None = None) -> Image.Image:
    """A grid of ``images[indices]`` (each scaled to ``cell``×``cell``, min–max normalised).

    ``images`` is anything indexable by image number (an array or a lazy loader) whose items
    are ``(H, W)`` (grey), ``(H, W, C)`` or ``(C, H, W)`` arrays with ``C`` 1, 3 or 4.
    ``captions[i]`` are text lines written under image ``i`` (cut to the cell width);
    without captions the grid is exactly the uncaptioned one.
    """
    if len(indices) == 0:
        raise RDXInputError("cannot draw an empty grid")
    if captions is not None and len(captions) != len(indices):
        raise RDXInputError(f"{len(captions)} captions for {len(indices)} grid images.")
    n_lines = max((len(c) for c in captions), default=0) if captions is not None else 0
    band = n_lines * CAPTION_LINE_HEIGHT + (2 if n_lines else 0)
    nrows = -(-len(indices) // ncols)
    canvas = Image.new("RGB", (ncols * cell + (ncols + 1) * pad,
                               nrows * (cell + band) + (nrows + 1) * pad),
                       (background,) * 3)
    draw = ImageDraw.Draw(canvas) if n_lines else None
    for pos, idx in enumerate(indices):
        arr = display_image(images[int(idx)], int(idx))
        tile = Image.fromarray(arr).convert("RGB").resize((cell, cell), Image.NEAREST)
        r, c = divmod(pos, ncols)
        x, y = pad + c * (cell + pad), pad + r * (cell + band + pad)
        canvas.paste(tile, (x, y))
        if draw is not None:
            for line_no, text in enumerate(captions[pos]):
                draw.text((x + 1, y + cell + 1 + line_no * CAPTION_LINE_HEIGHT),
                          _fit(draw, str(text), cell - 2), fill=(0, 0, 0))
    return canvas


def _fit(draw: ImageDraw.ImageDraw, text: str, width: int) -> str:
    """``text`` cut (with an ellipsis) to at most ``width`` pixels."""
    if draw.textlength(text) <= width:
        return text
    while text and draw.textlength(text + "…") > width:
        text = text[:-1]
    return text + "…"


def grid_label_captions(grid_labels: dict, class_names: Sequence[str] | None = None
                        ) -> list[list[str]]:
    """Caption lines of every grid image from an explanation's ``grid_labels`` record
    (``{"true": [...], "predicted": {representation: [...], ...}}``): the two compared
    representations' predictions (the explained model first; ``'`` marks an aligned map)
    and the true label, e.g. ``["A:3 B':5", "GT:3"]``."""
    def name(y) -> str:
        if class_names is not None and isinstance(y, (int, np.integer)) \
                and 0 <= int(y) < len(class_names):
            return str(class_names[int(y)])
        return str(y)

    preds = grid_labels.get("predicted") or {}
    out = []
    for i, y in enumerate(grid_labels["true"]):
        line = " ".join(f"{_REPRESENTATION_NAMES.get(r, r)}:{name(p[i])}"
                        for r, p in preds.items())
        out.append([line, f"GT:{name(y)}"] if line else [f"GT:{name(y)}"])
    return out


def summary_strip(grids: Sequence[Image.Image], titles: Sequence[str], *, pad: int = 10,
                  title_height: int = 18, weak: Sequence[bool] | None = None) -> Image.Image:
    """Grids side by side with a title above each (the paper's per-direction summary).

    ``weak[i]``: grid ``i`` is a low-affinity explanation; its title is written in orange
    and ends in ``WEAK``, and an orange frame surrounds it (the grids themselves are
    pasted unchanged)."""
    if weak is not None and len(weak) != len(grids):
        raise RDXInputError(f"{len(weak)} weak flags for {len(grids)} grids.")
    w = sum(g.width for g in grids) + pad * (len(grids) + 1)
    h = max(g.height for g in grids) + title_height + 2 * pad
    strip = Image.new("RGB", (w, h), (0, 0, 0))
    draw = ImageDraw.Draw(strip)
    x = pad
    for i, (g, title) in enumerate(zip(grids, titles)):
        top = pad + title_height
        if weak is not None and weak[i]:
            draw.text((x, pad // 2), f"{title}  WEAK", fill=WEAK_COLOR)
            draw.rectangle((x - 4, top - 4, x + g.width + 3, top + g.height + 3),
                           outline=WEAK_COLOR, width=3)
        else:
            draw.text((x, pad // 2), title, fill=(255, 255, 255))
        strip.paste(g, (x, top))
        x += g.width + pad
    return strip


def explanation_title(i: int, exp: dict) -> str:
    """Short caption: rank, concept id (baselines), cluster size and mean affinity (RDX),
    abbreviated as in :data:`rdx.results.types.SCORE_LABELS` (``n``, ``aff``)."""
    parts = [f"#{i}"]
    if "concept" in exp:
        parts.append(f"c{exp['concept']}")
    if "members" in exp:
        parts.append(f"{SCORE_LABELS['n_members'].short}={len(exp['members'])}")
    if "mean_affinity" in exp:
        parts.append(f"{SCORE_LABELS['mean_affinity'].short}={exp['mean_affinity']:.2f}")
    return "  ".join(parts)


def save_direction_grids(images, explanations: Sequence[dict], paths: Sequence[Path],
                         summary_path: Path | None = None, *,
                         captions: Sequence[Sequence[Sequence[str]] | None] | None = None,
                         class_names: Sequence[str] | None = None) -> list[Path]:
    """Write one PNG per explanation (``paths[i]`` for ``explanations[i]``) and, with
    ``summary_path``, the direction's grids side by side; returns the files written.

    Weak (``low_affinity``) explanations are marked on the summary strip (orange title and
    frame); their own PNG is the same as any other's.
    ``captions[i][j]`` are the text lines under image ``j`` of explanation ``i``. Without
    them, an explanation that has ``grid_labels`` (RDX ``label_grids=True``) is captioned
    with its predictions and true labels (class ids, or ``class_names`` when given).
    File names are the caller's (the run store's) to choose: this module only draws.
    """
    if len(paths) != len(explanations):
        raise RDXInputError(f"{len(explanations)} explanations but {len(paths)} grid paths.")
    if captions is not None and len(captions) != len(explanations):
        raise RDXInputError(f"{len(captions)} caption lists for {len(explanations)} "
                            "explanations.")
    written, grids, titles = [], [], []
    for i, (exp, p) in enumerate(zip(explanations, paths), start=1):
        cap = captions[i - 1] if captions is not None else None
        if cap is None and exp.get("grid_labels"):
            cap = grid_label_captions(exp["grid_labels"], class_names)
        # items that are not images (rdx.viz.items) say which cell size keeps them legible
        grid = image_grid(images, exp["images"], captions=cap,
                          cell=int(getattr(images, "grid_cell", 96)))
        written.append(_save_png(grid, Path(p)))
        grids.append(grid)
        titles.append(explanation_title(i, exp))
    if grids and summary_path is not None:
        weak = [bool(exp.get("low_affinity")) for exp in explanations]
        written.append(_save_png(summary_strip(grids, titles, weak=weak), Path(summary_path)))
    return written


def save_result_grids(result: MethodResult, images: Any, method_dir: Path, *,
                      class_names: Any = None) -> list[Path]:
    """Draw every direction's grids of a result into a method's folder; returns the files
    (explanations with ``grid_labels`` get captions, with ``class_names`` when given)."""
    paths: list[Path] = []
    for direction in grid_directions(result):
        exps = result.directions[direction].explanations
        paths += save_direction_grids(
            images, [e.to_json() for e in exps],
            [grid_path(method_dir, direction, i) for i in range(1, len(exps) + 1)],
            summary_grid_path(method_dir, direction), class_names=class_names)
    return paths


def _save_png(img: Image.Image, path: Path) -> Path:
    """Atomic PNG write (a reader never sees half an image)."""
    atomic_write(path, lambda fh: img.save(fh, format="PNG"))
    return path
