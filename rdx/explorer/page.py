"""The explorer's HTML: one self-contained file with a strict Content-Security-Policy.

The page holds plotly.js (from the installed ``plotly`` Python package), the explorer's own
script and stylesheet (files next to this module) and the data as a JSON block. Scripts are
allowed by their SHA-256 hashes only (no ``unsafe-inline``, no ``unsafe-eval``), images only
as ``data:`` URIs and nothing may be fetched, so the page works offline from ``file://`` and
a browser refuses — and logs — anything external that slipped in.
"""
from __future__ import annotations

import base64
import hashlib
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..report.html import attr, esc
from ..viz.style import EXPLORER_PALETTE, EXPLORER_RINGS, css_variables

#: dtype codes the page's decoder understands
#: size budget of the page (bytes); thumbnails shrink to fit it
MAX_BYTES = 15_000_000
_TYPE_CODES = {np.dtype(np.int8): "i8", np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16", np.dtype(np.uint32): "u32",
               np.dtype(np.int16): "i16", np.dtype(np.int32): "i32",
               np.dtype(np.float32): "f32"}


def asset(name: str) -> str:
    """A file shipped with this package (the page's script and stylesheets)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def stylesheet() -> str:
    """The page's CSS: the colours shared with the reports (:mod:`rdx.viz.style`), then
    ``explorer.css``."""
    return css_variables(EXPLORER_RINGS) + "\n" + asset("explorer.css")


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.min.js as bundled by the ``plotly`` Python package."""
    try:
        import plotly
    except ImportError:
        raise RDXInputError("the explorer needs the plotly package (pip install plotly); it "
                            "inlines its plotly.min.js.") from None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise RDXInputError(f"{path} is missing: reinstall plotly (pip install --force-reinstall "
                            "plotly).")
    text = path.read_text(encoding="utf-8")
    if "</script" in text.lower():  # would end the inline <script> early
        raise RDXInputError(f"{path} contains '</script' and cannot be inlined.")
    return text


def script_hash(text: str) -> str:
    """CSP source expression allowing exactly this inline script."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def csp(*scripts: str, blob_images: bool = False) -> str:
    """The page's policy: only the given inline scripts, inline styles and data: images;
    ``blob_images`` also allows images the page itself makes in memory (``blob:`` URLs:
    plotly draws a map into one for the snapshot), never anything fetched."""
    img = "data: blob:" if blob_images else "data:"
    return (f"default-src 'none'; img-src {img}; style-src 'unsafe-inline'; script-src "
            + " ".join(script_hash(s) for s in scripts))


def typed(array: np.ndarray, *, dtype: Any | None = None) -> dict[str, Any]:
    """A numeric array for the page: little-endian bytes in base64 plus type and shape."""
    a = np.ascontiguousarray(array, dtype=dtype)
    if a.dtype not in _TYPE_CODES:
        raise TypeError(f"unsupported dtype {a.dtype} for the page")
    return {"__t": _TYPE_CODES[a.dtype], "shape": list(a.shape),
            "b64": base64.b64encode(a.astype(a.dtype.newbyteorder("<")).tobytes()).decode()}


def quantized(array: np.ndarray) -> dict[str, Any]:
    """Floats as int16 × scale (error ≤ scale/2, scale = max|x|/32767): half of float32."""
    a = np.asarray(array, dtype=np.float64)
    peak = float(np.abs(a[np.isfinite(a)]).max()) if np.isfinite(a).any() else 0.0
    scale = peak / 32767 if peak > 0 else 1.0
    out = typed(np.round(np.nan_to_num(a / scale)).astype(np.int16))
    out["scale"] = scale
    return out


def quantized8(array: np.ndarray) -> dict[str, Any]:
    """Floats as int8 × scale (error ≤ scale/2, scale = max|x|/127): a quarter of float32,
    for the large n×n matrices."""
    a = np.asarray(array, dtype=np.float32)
    finite = np.isfinite(a)
    peak = float(np.abs(a[finite]).max()) if finite.any() else 0.0
    scale = peak / 127 if peak > 0 else 1.0
    q = np.empty(a.shape, dtype=np.int8)
    step = max(1, (1 << 22) // max(a.shape[-1], 1))
    for s in range(0, a.shape[0], step):     # bounded temporaries
        q[s:s + step] = np.round(np.nan_to_num(a[s:s + step] / np.float32(scale)))
    out = typed(q)
    out["scale"] = scale
    return out


def index_dtype(n: int) -> type:
    return np.uint16 if n <= np.iinfo(np.uint16).max else np.uint32


def json_block(data: Any) -> str:
    """JSON for a ``<script type="application/json">`` block: every ``<`` escaped, so no
    string in the data can end the block or start markup."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


BODY = """<header class="bar">
<h1>{title}</h1><span class="meaning" id="subtitle"></span>
<label id="pair-label">pair <select id="pair"></select></label>
<label>method <select id="method"></select></label>
<span class="seg" id="dir"><button type="button" id="dir-a" data-value="a_over_b">A over B</button><button type="button" id="dir-b" data-value="b_over_a">B over A</button></span>
<span class="seg" id="view"><button type="button" data-value="side" class="on">Side by side</button><button type="button" data-value="animate">Animate</button></span>
<span class="seg" id="drag" role="group" aria-label="what a drag on a map does"><button type="button" data-value="zoom" class="on" title="drag: zoom into a region (double-click: zoom out)">Zoom</button><button type="button" data-value="select" title="drag: select the points inside a box">Box</button><button type="button" data-value="lasso" title="drag: select the points inside a free-hand outline">Lasso</button></span>
<label>colour <select id="color"></select></label>
<label id="shownull-label"><input type="checkbox" id="shownull" checked> no-change group</label>
<label><input type="checkbox" id="showgrids" checked> grid images</label>
</header>
<div class="notes" id="notes"></div>
<div class="layout">
<section class="left">
<div class="notes" id="pair-notes"></div>
<div class="meaning" id="meaning"></div>
<div class="legend" id="legend"></div>
<div class="plots" id="side"><div class="plot"><div class="base" id="plot-a"></div><div class="ov" id="plot-a-ov"></div><div class="ptitle" id="title-a"></div></div><div class="plot"><div class="base" id="plot-b"></div><div class="ov" id="plot-b-ov"></div><div class="ptitle" id="title-b"></div></div><div class="hoverbox" id="hoverbox" style="display:none"></div></div>
<div class="plots" id="anim" style="display:none"><div class="plot"><div class="base" id="plot-anim"></div><div class="ov" id="plot-anim-ov"></div><div class="ptitle" id="title-anim"></div></div></div>
<div class="animbar" id="animbar" style="display:none"><button type="button" class="btn" id="play">Play</button><input type="range" id="tslider" min="0" max="100" value="0" step="1"><span id="animlabel"></span></div>
</section>
<aside class="right">
<div id="group-panel" aria-live="polite"></div>
<h2>Ranking by neighbourhood affinity</h2>
<div class="rankbar"><button type="button" id="prev" title="previous rank">&#9664;</button><input type="range" id="rank" min="1" max="1" value="1" step="1"><button type="button" id="next" title="next rank">&#9654;</button></div>
<div class="ranklabel" id="ranklabel"></div>
<div id="selected-panel"></div>
<div id="explanations" class="explist"></div>
<div id="info"></div>
<footer>{footer}</footer>
</aside>
</div>
<div class="modal" id="modal" aria-hidden="true"><div class="box" id="modal-box"></div><div class="hint">&#8592; &#8594; step through the group · Esc or a click outside closes</div></div>
"""


def render_page(data: dict[str, Any], *, title: str, footer: str) -> str:
    """The complete HTML document for ``data`` (see :mod:`rdx.explorer.build`)."""
    app = asset("explorer.js")
    snapshot_js = asset("snapshot.js")
    data = dict(data)
    data["palette"] = EXPLORER_PALETTE
    data["snapshot"] = {"script": snapshot_js, "css": asset("snapshot.css"),
                        "csp": csp(snapshot_js)}
    lib = plotly_js()
    for name, text in (("explorer.js", app), ("snapshot.js", snapshot_js)):
        if "</script" in text.lower():
            raise RuntimeError(f"{name} contains '</script'")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{attr(csp(lib, app, blob_images=True))}\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{esc(title)}</title>\n<style>{stylesheet()}</style>\n"
            f"<script>{lib}</script>\n</head>\n<body>\n"
            + BODY.format(title=esc(title), footer=footer)
            + f"<script type=\"application/json\" id=\"rdx-data\">{json_block(data)}</script>\n"
            f"<script>{app}</script>\n</body>\n</html>\n")
