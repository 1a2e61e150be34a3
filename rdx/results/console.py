"""What a user reads in the terminal after a method ran (``rdx explain``): per direction the
BSR under every dissimilarity against its chance level, then each explanation with its size,
mean affinity, weak and significance flags and the class make-up of its grid; labels as in
the reports (:data:`rdx.results.types.SCORE_LABELS`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .nulls import standing_text


def grid_labels_text(labels: np.ndarray | None, grid: list[int]) -> str:
    if labels is None:
        return ""
    vals, counts = np.unique(np.asarray(labels)[grid], return_counts=True)
    return "  grid labels " + ",".join(f"{v}×{c}" for v, c in zip(vals, counts))


def bsr_text(result: Any, direction: str) -> str:
    """``BSR (rank) 0.812 (chance 0.520 [0.47, 0.57], above)``, then the other two
    dissimilarities' BSR, labelled as in the report (:data:`SCORE_LABELS`)."""
    from .types import DISSIMILARITY_LABELS, SCORE_LABELS

    bsr_label, chance_label = SCORE_LABELS["bsr"].short, SCORE_LABELS["chance"].short
    scores = result.scores or {}
    parts = []
    for key, lab in DISSIMILARITY_LABELS.items():
        bsr = ((scores.get(key) or {}).get(direction) or {}).get("bsr")
        if bsr is None:
            continue
        ch = ((scores.get("chance") or {}).get(direction) or {}).get(key) or {}
        text = f"{bsr_label} ({lab.short}) {bsr:.3f}"
        if ch.get("bsr_mean") is not None:
            verdict = ("above" if bsr > ch["bsr_hi"] else "below" if bsr < ch["bsr_lo"]
                       else "within")
            text += (f" ({chance_label} {ch['bsr_mean']:.3f} [{ch['bsr_lo']:.3f}, "
                     f"{ch['bsr_hi']:.3f}], {verdict})")
        parts.append(text)
    return "; ".join(parts) if parts else f"{bsr_label} —"


#: What a guidance mode groups by (rdx.method.guidance), for the reading of a guided BSR.
GUIDANCE_GROUPS = {"ground_truth": "the same class",
                   "classifier": "the same class predicted by that model's probe",
                   "tpfp": "the same predicted class and correctness, per model",
                   "tpnfpn": "the same outcome (true/false positive/negative), per model",
                   "true_pos": "true positive or not, per model"}


def guided_bsr_reading(guidance: str, below: bool) -> str:
    """How to read BSR under guidance (the report says the same): ``below`` when a BSR of
    the run is below its chance interval."""
    groups = GUIDANCE_GROUPS.get(str(guidance), f"the {guidance} groups")
    text = (f"Guidance ({guidance}): the graph only links images that a model puts in "
            f"{groups}, so each explanation is a difference within those groups. BSR and its "
            "chance level use the plain distances, without the groups, over random grids "
            "of all images.")
    if below:
        text += (" A BSR below chance is therefore not a failure by itself: in plain "
                 "distances the grid is not tighter in the explained model (the difference "
                 "the guided graph found lies in the groups, i.e. in what the models' labels "
                 "or predictions put together, or inside groups both models already hold "
                 "tight). Read such an explanation by its classes and predictions, its "
                 "significance if assessed, and compare with a run without guidance.")
    return text


def _below_chance(result: Any) -> bool:
    """Some direction's rank BSR is below its chance interval."""
    scores = result.scores or {}
    for d in result.directions:
        bsr = ((scores.get("rank") or {}).get(d) or {}).get("bsr")
        ch = ((scores.get("chance") or {}).get(d) or {}).get("rank") or {}
        if bsr is not None and ch.get("bsr_lo") is not None and bsr < ch["bsr_lo"]:
            return True
    return False


#: How the summary names the corrections of the enrichment (``info["enrichment"]``).
CORRECTION_NAMES = {"benjamini-hochberg": "Benjamini–Hochberg", "holm": "Holm"}


def enrichment_text(record: dict[str, Any]) -> str:
    """``enrichment: 3 findings in 180 tests of 9 attributes (class, brightness, ...);
    Benjamini–Hochberg at 0.05 over every test``: what the descriptions under each
    explanation were tested on (``info["enrichment"]``, as
    :func:`rdx.evaluation.enrichment.enrich` writes it)."""
    names = [a["name"] for a in record.get("attributes", [])]
    shown = ", ".join(names[:8]) + (f", ... ({len(names) - 8} more)" if len(names) > 8 else "")
    text = (f"enrichment: {record['n_findings']} finding(s) in {record['n_tests']} tests of "
            f"{len(names)} attribute(s) ({shown}); "
            f"{CORRECTION_NAMES.get(record['correction'], record['correction'])} at "
            f"{record['alpha']:g} over every test (p_adj)")
    skipped = record.get("skipped") or {}
    if skipped:
        text += "; not tested: " + ", ".join(f"{k} ({v})" for k, v in skipped.items())
    return text


def significance_text(sig: Any) -> str:
    """``significant: p_FWER < 0.001, z 6.2`` (or "not significant", or "no verdict (not
    calibrated)"): an explanation's test as ``extra["significance"]`` holds it; "" when it
    was not tested."""
    if not isinstance(sig, dict) or sig.get("p_value_fwer") is None:
        return ""
    p_fwer, z = sig["p_value_fwer"], sig.get("z")
    verdict = ("no verdict (not calibrated)" if sig.get("significant") is None
               else "significant" if sig["significant"] else "not significant")
    return (f"{verdict}: p_FWER {'< 0.001' if p_fwer < 0.001 else f'{p_fwer:.3f}'}"
            f"{'' if z is None else f', z {z:.1f}'}")


def print_summary(result: Any, labels: np.ndarray | None, seconds: float, path: Path) -> None:
    """What a user reads after ``rdx explain``: per direction BSR against chance and each
    explanation (weak ones flagged)."""
    from .types import SCORE_LABELS, direction_meaning

    p = result.params
    head = f"{result.method} on n={result.n_images} images in {seconds:.1f} s"
    if result.method == "rdx":
        head += f" (γ={p['gamma_resolved']:.4g}, β={p['beta']})"
    print(head)
    chosen = result.info.get("graph")
    if chosen:      # graph="auto" (the default): what it chose and why
        print(f"  graph: {chosen['used']} ({chosen['why']})")
    for key in ("similarity", "agreement"):
        for name, v in (result.info.get(key) or {}).items():
            print(f"  {name}: {v:.4f}")
    for name, v in (result.info.get("probe") or {}).items():
        print(f"  probe accuracy {name}: {v['accuracy']:.4f}")
    weak_label = SCORE_LABELS["low_affinity"].short
    for d, r in result.directions.items():
        what = direction_meaning(result.method, d, short=True)
        extra = (f"; no-change group {len(r.null_members)} images"
                 if r.null_members is not None else "")
        filt = r.extra.get("filter") or {}
        if filt.get("n_filtered"):
            extra += (f"; {filt['n_filtered']} weak cluster(s) filtered (mean affinity < "
                      f"{filt['threshold']})")
        print(f"  {d} ({what}): {bsr_text(result, d)}{extra}")
        for i, e in enumerate(r.explanations, start=1):
            desc = (f"{len(e.members)} members" if e.members is not None
                    else f"concept {e.concept}")
            if e.mean_affinity is not None:
                desc += f", mean affinity {e.mean_affinity:.2f}"
            if e.low_affinity:
                desc += f"  [{weak_label.upper()}: mean affinity below null_threshold]"
            sig = significance_text(e.extra.get("significance"))
            if sig:
                desc += f"  [{sig}]"
            print(f"    #{i}: {desc}{grid_labels_text(labels, e.images)}")
            if e.extra.get("description"):
                print(f"        {e.extra['description']}")
    sig_info = result.info.get("significance")
    if isinstance(sig_info, dict):
        # what the p-values are measured against, what that null is calibrated on, and what
        # to do where it is not
        print(f"  significance: {sig_info['n_null']} null draws; "
              + standing_text(sig_info.get("null"), sig_info.get("noise"),
                              sig_info.get("standing")))
    groups = result.info.get("group_tests")
    if isinstance(groups, dict):
        print(f"  named groups ({groups['n_draws']} null draws of each; Holm over "
              f"{groups['n_tests']} tests); "
              + standing_text(groups.get("null"), groups.get("noise"), groups.get("standing"))
              + ":")
        for g in groups["groups"]:
            p_text = "< 0.001" if g["p_value"] < 0.001 else f"{g['p_value']:.3f}"
            verdict = ("no verdict (not calibrated)" if g.get("significant") is None
                       else "significant" if g["significant"] else "not significant")
            print(f"    {g['name']} ({g['size']} images), "
                  f"{direction_meaning('rdx', g['direction'], short=True)}: "
                  f"statistic {g['statistic']:.1f}, p {p_text}, Holm {g['p_value_holm']:.3f}"
                  f"  [{verdict}]")
            if g.get("description"):
                print(f"        {g['description']}")
    enrichment = result.info.get("enrichment")
    if isinstance(enrichment, dict):
        print("  " + enrichment_text(enrichment))
    bsr = result.bsr
    if bsr and bsr.get("mean") is not None:
        print(f"  mean {SCORE_LABELS['bsr'].short} (rank) {bsr['mean']:.3f}")
    if p.get("guidance"):
        import textwrap
        print(textwrap.fill(guided_bsr_reading(p["guidance"], _below_chance(result)), 92,
                            initial_indent="  ", subsequent_indent="    "))
    print(f"  results: {path}")


__all__ = ["CORRECTION_NAMES", "GUIDANCE_GROUPS", "bsr_text", "enrichment_text",
           "grid_labels_text", "guided_bsr_reading", "print_summary"]
