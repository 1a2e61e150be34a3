"""Small HTML building blocks for the static report: escaping, numbers, tables, embedding.

Everything the report shows passes through :func:`esc` (text) or :func:`attr` (attribute
values), so names, paths and config values can never inject markup. Images are embedded as
``data:`` URIs, and the stylesheet is inline, so a page works alone from a ``file://`` URL
(no server, no network, no JavaScript).
"""
from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..results.types import SCORE_LABELS
from ..viz.style import css_variables

#: The page's Content-Security-Policy: nothing may load except inline CSS and embedded
#: images. A browser then refuses (and logs) any external resource that slipped in, which
#: the browser test would see as a console error.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

#: The pages' stylesheet; its colours are the variables of :data:`rdx.viz.style.PAGE_COLORS`.
CSS = "\n" + css_variables() + """
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
       font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 24px 28px 48px; }
header.page { border-bottom: 3px solid var(--accent); padding-bottom: 12px; margin-bottom: 18px; }
header.page .crumb { color: var(--muted); font-size: 13px; }
h1 { font-size: 26px; margin: 4px 0 8px; }
h2 { font-size: 20px; margin: 34px 0 10px; border-bottom: 1px solid var(--line);
     padding-bottom: 4px; }
h3 { font-size: 17px; margin: 24px 0 8px; }
h4 { font-size: 15px; margin: 18px 0 6px; }
p.question { font-size: 17px; margin: 6px 0; }
.muted, .small { color: var(--muted); }
.small { font-size: 12.5px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 8px 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; word-break: break-word; }
table { border-collapse: collapse; margin: 8px 0 14px; font-size: 14px; }
.table-scroll { max-width: 100%; overflow-x: auto; }
.table-scroll > table { margin-bottom: 6px; }
td code { word-break: break-word; }
th, td { border: 1px solid var(--line); padding: 5px 9px; text-align: left; vertical-align: top; }
th { background: var(--panel); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td .chance { display: block; color: var(--muted); font-size: 11.5px; }
.above { color: var(--good); font-weight: 600; }
.below { color: var(--bad); font-weight: 600; }
.badge { display: inline-block; font-size: 11.5px; padding: 1px 7px; border-radius: 9px;
         background: var(--panel); border: 1px solid var(--line); color: var(--muted);
         margin-left: 6px; vertical-align: middle; }
.badge.expected { border-color: var(--good); color: var(--good); }
.badge.weak { border-color: var(--weak); background: var(--weak-fill); color: var(--weak-text);
              font-weight: 600; }
.badge.uncal { border-style: dotted; font-style: italic; }
.badge.unlike { border-color: var(--bad); color: var(--bad); font-weight: 600; }
figcaption .description { color: var(--fg); }
figure.weak { border-color: var(--weak); }
table.glossary td:first-child { white-space: nowrap; }
input.zoom { position: absolute; opacity: 0; width: 1px; height: 1px; }
input.zoom + label { display: block; overflow-x: auto; cursor: zoom-in; }
input.zoom:checked + label { cursor: zoom-out; }
input.zoom:checked + label img { width: auto; max-width: none; }
input.zoom:focus-visible + label { outline: 2px solid var(--accent); }
.note { background: var(--note-fill); border-left: 4px solid var(--note); padding: 6px 10px;
        margin: 8px 0; font-size: 13.5px; }
section.method { border: 1px solid var(--line); border-radius: 6px; padding: 4px 18px 14px;
                 margin: 18px 0; }
.direction { margin-top: 10px; }
.strip { max-width: 100%; max-height: 300px; width: auto; height: auto; display: block;
         margin: 6px 0 10px;
         border: 1px solid var(--line); }
.grids { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; background: var(--panel); border: 1px solid var(--line); padding: 6px;
         border-radius: 4px; }
figure img { display: block; width: 210px; height: auto; image-rendering: pixelated; }
figure.wide img { width: auto; max-width: 100%; image-rendering: auto; }
figcaption { font-size: 12px; color: var(--muted); max-width: 210px; margin-top: 4px; }
figure.wide figcaption { max-width: none; }
figure.thumb { display: inline-block; margin: 0 6px 6px 0; vertical-align: top; }
figure.thumb img { width: 150px; }
figure.thumb figcaption { max-width: 150px; }
table.strongest td { vertical-align: top; }
details { margin: 6px 0; }
summary { cursor: pointer; color: var(--accent); }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
a { color: var(--accent); }
footer { margin-top: 40px; color: var(--muted); font-size: 12.5px;
         border-top: 1px solid var(--line); padding-top: 8px; }
"""


def esc(value: Any) -> str:
    """Text content, escaped (quotes too, so the result is also safe inside attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def attr(value: Any) -> str:
    """An attribute value (always use it inside double quotes)."""
    return esc(value)


def fmt(value: Any, digits: int = 3) -> str:
    """A number for a table: ``digits`` decimals for floats, '—' for missing/non-finite."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(f):
        return "—"
    return f"{f:.{digits}f}"


def significance_badge(sig: Any, summary: Mapping[str, Any] | None = None
                       ) -> dict[str, Any] | None:
    """What the badge of one explanation's significance says, or None where the run did not
    assess it (then nothing is shown, not an empty badge).

    ``sig`` is ``extra["significance"]`` and ``summary`` the method's
    ``info["significance"]`` (both written by :func:`rdx.evaluation.significance.assess`).
    The report and the explorer both spell their badge from here, so they say the same:
    ``{"significant": bool, "calibrated": bool, "text": "significant" | "not significant" |
    "no verdict (not calibrated)", "cls": "sig" | "nonsig" | "uncal", "p": p_FWER with 3
    decimals or "< 0.001", "title": what p_FWER means, which null, and why there is no
    verdict where there is none}``.
    """
    if not isinstance(sig, Mapping):
        return None
    p = sig.get("p_value_fwer")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p):
        return None
    from ..results.nulls import null_name

    label = SCORE_LABELS["p_value_fwer"]
    summary = summary if isinstance(summary, Mapping) else {}
    run = [null_name(sig.get("null"), summary.get("noise"))]
    if summary.get("n_null") is not None:
        run.append(f"{summary['n_null']} null draws")
    if summary.get("alpha") is not None:
        run.append(f"significant when {label.short} ≤ {summary['alpha']:g}")
    # a record written before the calibration by family has no "calibrated": its verdict
    # was given as calibrated then
    calibrated = sig.get("calibrated", True) is not False and sig.get("significant") is not None
    significant = calibrated and bool(sig.get("significant"))
    title = f"{label.short}: {label.meaning} (this run: {', '.join(run)})."
    if not calibrated:
        stand = summary.get("standing") or {}
        title += (" No verdict: this null is not calibrated for this pair"
                  + (f" ({stand['basis']})" if stand.get("basis") else "")
                  + (f"; {stand['advice']}" if stand.get("advice") else "") + ".")
    return {"significant": significant, "calibrated": calibrated,
            "text": ("significant" if significant else "not significant") if calibrated
            else "no verdict (not calibrated)",
            "cls": ("sig" if significant else "nonsig") if calibrated else "uncal",
            # three decimals would print a tiny p as 0.000, which reads as "impossible"
            "p": "< 0.001" if p < 0.001 else f"{p:.3f}",
            "title": title}


def data_uri(path: Path) -> str:
    """``data:`` URI of an image file (PNG, JPEG, GIF or SVG, recognised by its content)."""
    raw = Path(path).read_bytes()
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        mime = "image/png"
    elif raw.startswith(b"\xff\xd8\xff"):
        mime = "image/jpeg"
    elif raw[:6] in (b"GIF87a", b"GIF89a"):
        mime = "image/gif"
    elif raw.lstrip()[:5] in (b"<?xml", b"<svg ") or raw.lstrip().startswith(b"<svg"):
        mime = "image/svg+xml"
    else:
        # embedding unknown bytes would give a broken image; the caller shows a note instead
        raise ValueError(f"{path} is not a PNG/JPEG/GIF/SVG image")
    return f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}"


def note(text: str) -> str:
    """A visible remark about something that could not be shown."""
    return f'<p class="note">{esc(text)}</p>'


def table(header: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "") -> str:
    """A table; ``header`` is plain text (escaped here), cells are ready-made HTML."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(c) for c in r) + "</tr>" for r in rows)
    cls_attr = f' class="{attr(cls)}"' if cls else ""
    # in a container that scrolls sideways: a wide table (many methods or comparisons,
    # long config values) scrolls inside the page instead of widening it
    return (f'<div class="table-scroll"><table{cls_attr}><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _cell(cell: str) -> str:
    """Cells are HTML; a cell already starting with ``<td`` keeps its own attributes."""
    return cell if cell.startswith("<td") else f"<td>{cell}</td>"


def facts(items: Iterable[tuple[str, str]]) -> str:
    """A definition list of (label, HTML value) pairs."""
    inner = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<dl class="facts">{inner}</dl>'


def page(title: str, body: str) -> str:
    """A complete, self-contained HTML5 document."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{attr(CSP)}\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
            f"{body}\n</main>\n</body>\n</html>\n")


def zoomable(img_html: str, key: str, caption: str) -> str:
    """A page-width figure that a click shows at full resolution (and a second click
    shrinks again): a hidden checkbox toggles the image's size through CSS, so it needs no
    JavaScript (the page's CSP allows none) and embeds the image once."""
    ident = "zoom-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in key)
    return (f'<figure class="wide zoomable"><input type="checkbox" class="zoom" '
            f'id="{attr(ident)}"><label for="{attr(ident)}" title="click: full size / fit '
            f'to the page">{img_html}</label><figcaption>{esc(caption)} '
            "<em>Click the figure for its full size; click again to fit it to the page."
            "</em></figcaption></figure>")
