"""Thumbnails of the selected images as ``data:`` URIs, sized to fit the page's budget.

Each image is shrunk to fit a ``size``×``size`` box (aspect kept, never enlarged: an 8×8 or
28×28 image stays that small and the page scales it up pixelated), grey images are stored
as one channel, and each is encoded as JPEG (``quality``) or PNG, whichever is smaller.
With ``size="auto"`` the largest size (and quality) of :data:`SIZES` × :data:`QUALITIES`
whose estimated total fits the byte budget is used; the effective values are recorded.
"""
from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from ..errors import RDXInputError

SIZES = (96, 80, 64, 48, 40, 32)
QUALITIES = (75, 60, 45)
#: images encoded to estimate the size of a setting
SAMPLE = 96


@dataclass
class Thumbnails:
    uris: list[str]
    info: dict[str, Any] = field(default_factory=dict)


def _prepare(img: Image.Image, box: int) -> Image.Image:
    if img.mode not in ("L", "RGB"):
        img = img.convert("RGB")
    if img.mode == "RGB":
        arr = np.asarray(img)
        if arr.ndim == 3 and (arr[..., 0] == arr[..., 1]).all() and \
                (arr[..., 1] == arr[..., 2]).all():
            img = Image.fromarray(arr[..., 0])
    if max(img.size) > box:
        img = img.copy()
        img.thumbnail((box, box), Image.Resampling.LANCZOS)
    return img


def encode(img: Image.Image, size: int, quality: int) -> str:
    """One image as the smaller of a JPEG and a PNG ``data:`` URI."""
    img = _prepare(img, size)
    jpg, png = io.BytesIO(), io.BytesIO()
    img.save(jpg, format="JPEG", quality=int(quality), optimize=True)
    img.save(png, format="PNG", optimize=True)
    raw, mime = (jpg.getvalue(), "image/jpeg") if jpg.tell() <= png.tell() \
        else (png.getvalue(), "image/png")
    return f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}"


def make_thumbnails(load: Callable[[int], Image.Image], n: int, *, size: int | str = "auto",
                    budget_bytes: int | None = None, quality: int | None = None,
                    progress: bool = False) -> Thumbnails:
    """Thumbnails of images ``load(0..n-1)`` within ``budget_bytes`` of URI text."""
    if size != "auto" and (not isinstance(size, int) or isinstance(size, bool) or size < 8):
        raise RDXInputError(f"thumb_size={size!r}: use 'auto' or a number of pixels >= 8.")
    if quality is not None and not 1 <= int(quality) <= 95:
        raise RDXInputError(f"thumb_quality={quality!r}: use a JPEG quality between 1 and 95.")
    box = max(SIZES) if size == "auto" else int(size)
    images = [_prepare(load(i), box) for i in tqdm(range(n), desc="explorer: images",
                                                   disable=not progress, leave=False)]
    sizes = SIZES if size == "auto" else (int(size),)
    qualities = QUALITIES if quality is None else (int(quality),)
    sample = np.unique(np.linspace(0, n - 1, min(n, SAMPLE)).round().astype(int))
    chosen, estimate, fits = (sizes[-1], qualities[-1]), None, False
    for s in sizes:
        for q in qualities:
            per = float(np.mean([len(encode(images[i], s, q)) for i in sample]))
            estimate = per * n
            if budget_bytes is None or estimate <= budget_bytes:
                chosen, fits = (s, q), True
                break
        if fits:
            break
    s, q = chosen
    uris = [encode(im, s, q) for im in tqdm(images, desc="explorer: thumbnails",
                                            disable=not progress, leave=False)]
    total = sum(len(u) for u in uris)
    native = max(max(im.size) for im in images)
    info = {"size": min(s, native), "box": s, "jpeg_quality": q, "bytes": total,
            "budget_bytes": budget_bytes,
            "formats": sorted({u[5:u.index(";")] for u in uris}),
            "within_budget": budget_bytes is None or total <= budget_bytes}
    return Thumbnails(uris, info)
