"""Low-level image statistics, one number per image, in numpy alone.

They let the attribute enrichment (:mod:`rdx.evaluation.enrichment`) tell whether the images
of an explanation differ from the rest by something as plain as brightness before anyone
reads a concept into them. Every statistic is computed on the images as one array, on one
intensity scale for all of them:

Intensity scale
    Integer images (``uint8``, ``int``...) are divided by 255 when their values lie in
    0..255, else (and for floats) by the array's own range: ``(x − min) / (max − min)``
    over *all* images, so that an image twice as bright as another stays twice as bright
    (a per-image rescaling, as the grids draw them, would remove brightness).
Luminance
    ``L = 0.299 R + 0.587 G + 0.114 B`` (ITU-R BT.601) for RGB(A) images (alpha dropped), the
    grey value itself for one channel.

The statistics (:data:`IMAGE_STATISTICS`):

``brightness``
    mean of ``L`` over the image's pixels.
``contrast``
    RMS contrast: the standard deviation of ``L`` over the pixels (``ddof = 0``).
``colourfulness`` (RGB only)
    Hasler and Süsstrunk's (2003) measure: with ``rg = R − G`` and ``yb = (R + G)/2 − B``,
    ``sqrt(σ_rg² + σ_yb²) + 0.3·sqrt(μ_rg² + μ_yb²)`` over the pixels.
``edge_density``
    the share of interior pixels (one-pixel border left out) where the Sobel gradient of
    ``L`` has magnitude above :data:`EDGE_THRESHOLD`; each Sobel kernel is divided by 8,
    so that a ramp rising by ``s`` per pixel has gradient ``s``.
``centre_row``, ``centre_col``
    centre of mass of ``L`` (pixels weighted by their luminance), as a fraction of the
    image's height/width from its top/left edge (``0`` first row, ``1`` last; 0.5 for an
    image without any light). Meaningful for bright objects on a dark background (digits).
``object_size``
    the share of pixels brighter than the middle of the image's own luminance range,
    ``(min L + max L)/2`` (0 for a constant image): the area of a bright object on a dark
    background.

Images are read ``chunk`` at a time, so that a large array of big images never has a
floating-point copy in memory.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import RDXInputError

#: The statistics, in the order :func:`image_statistics` returns them, with what each says
#: (colourfulness only for RGB images).
IMAGE_STATISTICS = {
    "brightness": "mean luminance (0 black, 1 white)",
    "contrast": "RMS contrast: standard deviation of the luminance",
    "colourfulness": "Hasler–Süsstrunk colourfulness (RGB images)",
    "edge_density": "share of pixels on an edge (Sobel gradient above the threshold)",
    "centre_row": "centre of mass of the luminance, from the top (0) to the bottom (1)",
    "centre_col": "centre of mass of the luminance, from the left (0) to the right (1)",
    "object_size": "share of pixels brighter than the middle of the image's range",
}
#: Gradient magnitude (intensity per pixel, on the 0..1 scale) above which a pixel is on an
#: edge: a step of 0.2 between two pixels gives 0.1 at the pixels on either side of it.
EDGE_THRESHOLD = 0.1
#: BT.601 luma weights of R, G, B.
LUMA = np.array([0.299, 0.587, 0.114])


def channels_last(images: Any) -> np.ndarray:
    """``images`` as ``n×H×W×C`` (a view where possible): ``n×H×W`` gets ``C = 1``,
    ``n×C×H×W`` with ``C`` 1, 3 or 4 (and a last axis that is not) is moved last.

    Raises
    ------
    RDXInputError
        When the array is none of these layouts.
    """
    arr = np.asarray(images)
    if arr.ndim == 3:
        return arr[..., None]
    if arr.ndim == 4:
        if arr.shape[-1] in (1, 3, 4):
            return arr
        if arr.shape[1] in (1, 3, 4):
            return np.moveaxis(arr, 1, -1)
    raise RDXInputError(f"images of shape {arr.shape}: expected n×H×W, n×H×W×C or n×C×H×W "
                        "with C = 1, 3 or 4.")


def intensity_scale(images: np.ndarray) -> tuple[float, float]:
    """``(offset, scale)`` mapping the array's values to 0..1 as ``(x − offset) / scale``
    (module docstring): integers in 0..255 by 255, anything else by its own range (a
    constant array: scale 1)."""
    arr = np.asarray(images)
    lo, hi = float(arr.min()), float(arr.max())
    if arr.dtype.kind in "biu" and lo >= 0 and hi <= 255:
        return 0.0, 255.0
    return lo, (hi - lo) if hi > lo else 1.0


def luminance(rgb: np.ndarray) -> np.ndarray:
    """BT.601 luminance of ``...×C`` images on the 0..1 scale (``C`` 1: the value itself;
    3 or 4: ``0.299 R + 0.587 G + 0.114 B``, alpha dropped)."""
    if rgb.shape[-1] == 1:
        return rgb[..., 0]
    return rgb[..., :3] @ LUMA


def sobel_magnitude(lum: np.ndarray) -> np.ndarray:
    """Sobel gradient magnitude of ``n×H×W`` images at their interior pixels
    (``n×(H−2)×(W−2)``), each kernel divided by 8 (module docstring)."""
    p = lum
    # horizontal derivative: [1 2 1]ᵀ smoothing down the rows, [−1 0 1] across the columns
    gx = ((p[:, :-2, 2:] - p[:, :-2, :-2]) + 2 * (p[:, 1:-1, 2:] - p[:, 1:-1, :-2])
          + (p[:, 2:, 2:] - p[:, 2:, :-2])) / 8.0
    gy = ((p[:, 2:, :-2] - p[:, :-2, :-2]) + 2 * (p[:, 2:, 1:-1] - p[:, :-2, 1:-1])
          + (p[:, 2:, 2:] - p[:, :-2, 2:])) / 8.0
    return np.hypot(gx, gy)


def _chunk_statistics(x: np.ndarray, rgb: bool) -> dict[str, np.ndarray]:
    n, h, w = x.shape[:3]
    lum = luminance(x)
    flat = lum.reshape(n, -1)
    out = {"brightness": flat.mean(axis=1), "contrast": flat.std(axis=1)}
    if rgb:
        r, g, b = x[..., 0].reshape(n, -1), x[..., 1].reshape(n, -1), x[..., 2].reshape(n, -1)
        rg, yb = r - g, 0.5 * (r + g) - b
        out["colourfulness"] = (np.sqrt(rg.var(axis=1) + yb.var(axis=1))
                                + 0.3 * np.sqrt(rg.mean(axis=1) ** 2 + yb.mean(axis=1) ** 2))
    if h >= 3 and w >= 3:
        out["edge_density"] = (sobel_magnitude(lum) > EDGE_THRESHOLD).reshape(n, -1).mean(axis=1)
    else:   # no interior pixel
        out["edge_density"] = np.zeros(n)
    mass = flat.sum(axis=1)
    rows = np.arange(h) / max(h - 1, 1)
    cols = np.arange(w) / max(w - 1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cr = (lum.sum(axis=2) @ rows) / mass
        cc = (lum.sum(axis=1) @ cols) / mass
    out["centre_row"] = np.where(mass > 0, cr, 0.5)
    out["centre_col"] = np.where(mass > 0, cc, 0.5)
    lo, hi = flat.min(axis=1), flat.max(axis=1)
    mid = (lo + hi) / 2
    out["object_size"] = np.where(hi > lo, (flat > mid[:, None]).mean(axis=1), 0.0)
    return out


def image_statistics(images: Any, *, chunk: int = 64) -> dict[str, np.ndarray]:
    """Every statistic of :data:`IMAGE_STATISTICS` for each image (module docstring).

    Parameters
    ----------
    images : array
        ``n×H×W`` (grey), ``n×H×W×C`` or ``n×C×H×W`` with ``C`` 1, 3 (RGB) or 4 (RGBA), real
        numbers (what ``rdx explain --images`` accepts).
    chunk : int
        Images converted to floating point at a time.

    Returns
    -------
    dict of str to (n,) float64 arrays
        In the order of :data:`IMAGE_STATISTICS`; ``colourfulness`` only for RGB(A) images.
    """
    arr = channels_last(images)
    if arr.dtype.kind not in "biuf" or len(arr) == 0:
        raise RDXInputError(f"images of dtype {arr.dtype} and {len(arr)} images: give at "
                            "least one image of real numbers.")
    offset, scale = intensity_scale(arr)
    rgb = arr.shape[-1] in (3, 4)
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(arr), max(1, int(chunk))):
        x = (np.asarray(arr[start:start + chunk], dtype=np.float64) - offset) / scale
        for k, v in _chunk_statistics(x, rgb).items():
            parts.setdefault(k, []).append(v)
    return {k: np.concatenate(parts[k]) for k in IMAGE_STATISTICS if k in parts}


__all__ = ["EDGE_THRESHOLD", "IMAGE_STATISTICS", "LUMA", "channels_last", "image_statistics",
           "intensity_scale", "luminance", "sobel_magnitude"]
