"""The scores of a comparison's report: the BSR table against the chance level, the
known-difference cells, the glossary that spells out every abbreviation, and the helpers
the report's other sections share (rows by method and direction, anchors)."""
from __future__ import annotations

from ..results.store import grid_directions
from ..results.types import DIRECTIONS, DISSIMILARITY_LABELS, SCORE_LABELS
from .html import attr, esc, fmt, note, table

#: (key in the scores, label in the tables): one name per thing, from the results' table
DISSIMILARITIES = tuple((key, lab.short) for key, lab in DISSIMILARITY_LABELS.items())
DIRECTION_LABEL = {"a_over_b": "A over B", "b_over_a": "B over A"}
BSR = SCORE_LABELS["bsr"].short


def rows_by_method(summary: dict | None) -> dict[tuple[str, str], dict[str, dict]]:
    """The rows of a :func:`~rdx.evaluation.summary.summarize_comparison` summary as
    ``{(method, direction): {dissimilarity: row}}``."""
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for row in (summary or {}).get("rows", []):
        out.setdefault((row.get("method"), row.get("direction")), {})[
            row.get("dissimilarity")] = row
    return out


def chance_side(row: dict) -> str:
    """``"above"`` or ``"below"`` when a row's BSR lies outside its chance interval (the
    CSS class that colours it), else ``""``."""
    bsr, lo, hi = row.get("bsr"), row.get("chance_bsr_lo"), row.get("chance_bsr_hi")
    if bsr is None or lo is None or hi is None:
        return ""
    return "above" if bsr > hi else "below" if bsr < lo else ""


def _bsr_cell(row: dict | None) -> str:
    if not row or row.get("bsr") is None:
        return '<td class="num">—</td>'
    cls = chance_side(row)
    tip = (f"{SCORE_LABELS['tsd'].short} {fmt(row.get('tsd'))}, "
           f"{SCORE_LABELS['eq'].short} {fmt(row.get('eq'))}, "
           f"{row.get('n_pairs', '?')} image pairs")
    chance = ""
    if row.get("chance_bsr_mean") is not None:
        chance = (f'<span class="chance">{SCORE_LABELS["chance"].short} '
                  f'{fmt(row.get("chance_bsr_mean"), 2)} '
                  f'[{fmt(row.get("chance_bsr_lo"), 2)}, {fmt(row.get("chance_bsr_hi"), 2)}]'
                  "</span>")
    span = f'<span class="{cls}">' if cls else "<span>"
    return f'<td class="num" title="{attr(tip)}">{span}{esc(fmt(row["bsr"]))}</span>{chance}</td>'


def known_difference_row(rows: dict[str, dict]) -> dict | None:
    """The first row (of one method and direction) that carries a known-difference score."""
    for row in rows.values():
        if row.get("known_difference_total") is not None or \
                row.get("known_difference_score") is not None:
            return row
    return None


def known_difference_text(row: dict | None, *, badge: bool = True) -> str:
    """A known-difference score as HTML (hits or masked-concept score; with ``badge``,
    marked when it is the expected direction)."""
    if row is None:
        return "—"
    parts = []
    if row.get("known_difference_total") is not None:
        parts.append(f"{row.get('known_difference_hits')}/{row['known_difference_total']} hits"
                     f" ({fmt(row.get('known_difference_rate'), 2)})")
    if row.get("known_difference_score") is not None:
        parts.append(f"score {fmt(row['known_difference_score'], 2)}")
    text = esc("; ".join(parts))
    if badge and row.get("known_difference_expected"):
        text += '<span class="badge expected">expected direction</span>'
    return text


def explained_methods(data: dict) -> list[str]:
    """Methods that produced explanations (cka/classification have no directions)."""
    return [n for n in data["order"] if n in data["results"]
            and grid_directions(data["results"][n])]


def scores_table(data: dict, rows: dict) -> str:
    """The BSR table of every method with explanations, against the chance level."""
    methods = explained_methods(data)
    if not methods:
        return note("No method with explanations has finished in this comparison yet.")
    kd = any(known_difference_row(r) for r in rows.values())
    header = ["Method", "Direction", "Explanations"] + \
        [f"{BSR} ({label})" for _, label in DISSIMILARITIES] + (["Known difference"] if kd else [])
    body = []
    for name in methods:
        res = data["results"][name]
        for d in DIRECTIONS:
            if d not in res.directions:
                continue
            by_dis = rows.get((name, d), {})
            n_exp = len(res.directions[d].explanations)
            guided = (res.params or {}).get("guidance")
            cells = [f'<a href="#{attr(method_anchor(name))}">{esc(name)}</a>'
                     + (f'<a class="badge" href="#{attr("guided-" + method_anchor(name))}" '
                        f'title="how to read BSR under guidance">guided: {esc(guided)}</a>'
                        if guided else ""),
                     esc(DIRECTION_LABEL[d]), f'<td class="num">{n_exp}</td>']
            cells += [_bsr_cell(by_dis.get(key)) for key, _ in DISSIMILARITIES]
            if kd:
                cells.append(known_difference_text(known_difference_row(by_dis)))
            body.append(cells)
    n_draws = next((r.get("chance_n_draws") for rr in rows.values() for r in rr.values()
                    if r.get("chance_n_draws")), None)
    draws = f" over {n_draws} draws" if n_draws else ""
    legend = (f'<p class="small">Below each value: the {esc(SCORE_LABELS["chance"].name)}'
              f"{esc(draws)}. "
              '<span class="above">Green</span>: above that interval; '
              '<span class="below">red</span>: below it. Hover a value for '
              f'{esc(SCORE_LABELS["tsd"].short)}/{esc(SCORE_LABELS["eq"].short)}; '
              'every abbreviation is spelled out in the <a href="#glossary">glossary</a>.</p>')
    if not rows:
        legend += note("Scores could not be computed for this comparison (no summary rows).")
    return table(header, body, cls="scores") + legend


#: The glossary's entries, in reading order: the scores, then the dissimilarities.
GLOSSARY_KEYS = ("bsr", "chance", "tsd", "eq", "mean_affinity", "low_affinity", "n_members")


def glossary_items() -> list[tuple[str, str, str]]:
    """(short label, spelled-out name, meaning) of every abbreviation the report uses, from
    the one naming table (:data:`rdx.results.types.SCORE_LABELS` and
    :data:`~rdx.results.types.DISSIMILARITY_LABELS`)."""
    items = [SCORE_LABELS[k] for k in GLOSSARY_KEYS]
    items += [DISSIMILARITY_LABELS[k] for k in DISSIMILARITY_LABELS]
    return [(lab.short, lab.name, lab.meaning) for lab in items]


def glossary_html() -> str:
    """The glossary section (every abbreviation the report uses)."""
    dis = ", ".join(f"{esc(DISSIMILARITY_LABELS[k].short)}" for k in DISSIMILARITY_LABELS)
    rows = [[f"<strong>{esc(short)}</strong>", esc(name), esc(meaning)]
            for short, name, meaning in glossary_items()]
    return ('<h3 id="glossary">Glossary</h3>'
            f'<p class="small">{esc(BSR)} is computed under three dissimilarities ({dis}): '
            "the same grids, three ways of saying how far apart two images are in a model. "
            "The no-change group (RDX) holds the images whose neighbourhoods barely differ "
            "between the models; it is not an explanation and not scored.</p>"
            + table(["", "name", "meaning"], rows, cls="glossary"))


def method_anchor(name: str) -> str:
    """The HTML id of a method's section in the report."""
    return "method-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


__all__ = ["BSR", "DIRECTION_LABEL", "DISSIMILARITIES", "GLOSSARY_KEYS", "chance_side",
           "explained_methods", "glossary_html", "glossary_items", "known_difference_row",
           "known_difference_text", "method_anchor", "rows_by_method", "scores_table"]
