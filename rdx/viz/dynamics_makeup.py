"""The class make-up of every cluster of a training-dynamics analysis at every checkpoint
in one figure: one row per cluster *track* (the same cluster followed across checkpoints,
:func:`rdx.studies.dynamics.cluster_tracks`), stacked bars of its class counts.

The figure takes ``dynamics.json`` as a dict (read it with
:func:`rdx.results.store.load_dynamics`).
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..errors import RDXInputError
from .dynamics_curves import checkpoint_ticks
from .style import FONT_LABEL, FONT_NOTE, FONT_SMALL, FONT_TINY, FONT_TITLE, class_colors


def cluster_tracks_of(doc: dict) -> dict[int, dict[int, dict]]:
    """``{track: {checkpoint index: cluster record}}`` of a ``dynamics.json`` whose clusters
    carry a ``track`` (cluster 0, the no-change group, is track 0)."""
    out: dict[int, dict[int, dict]] = {}
    for r in doc["checkpoints"]:
        for c in [r["cluster0"], *r["clusters"]]:
            t = c.get("track", 0 if c["label"] == 0 else None)
            if t is not None:
                out.setdefault(int(t), {})[int(r["index"])] = c
    return out


def _ordered_tracks(tracks: dict[int, dict[int, dict]]) -> list[int]:
    """Track 0 first, then the longest-lived tracks (ties: the earliest, then the largest)."""
    rest = sorted((t for t in tracks if t != 0),
                  key=lambda t: (-len(tracks[t]), min(tracks[t]),
                                 -max(c["size"] for c in tracks[t].values())))
    return ([0] if 0 in tracks else []) + rest


def cluster_makeup_figure(doc: dict, *, max_tracks: int = 12) -> Figure:
    """The class make-up of every cluster across all checkpoints: one row per track (the
    no-change group first, then the longest-lived difference clusters, at most
    ``max_tracks`` rows), one stacked bar per checkpoint (its images per class; the number
    above a bar is the cluster's label at that checkpoint). Bars carry the gid
    ``makeup:<track>:<checkpoint index>:<class>``."""
    recs = doc["checkpoints"]
    if not recs:
        raise RDXInputError("no checkpoints in the training-dynamics result; nothing to plot.")
    names = list(doc["probe"]["class_names"])
    tracks = cluster_tracks_of(doc)
    order = _ordered_tracks(tracks)
    shown, hidden = order[:max_tracks], order[max_tracks:]
    colors = class_colors(len(names))
    x = np.arange(len(recs))
    fig = Figure(figsize=(max(8.0, 0.42 * len(recs) + 3.0), 1.45 * len(shown) + 1.6))
    axes = fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    for ax, t in zip(axes, shown):
        per = tracks[t]
        bottom = np.zeros(len(recs))
        for k, name in enumerate(names):
            h = np.array([per[i]["class_counts"][k] if i in per else 0 for i in x], float)
            ax.bar(x, h, bottom=bottom, color=colors[k], width=0.8, linewidth=0,
                   gid=f"makeup:{t}:{k}", label=name)
            bottom += h
        if t == 0:   # grey rim where cluster 0 is a no-change cluster
            nc = [i for i in x if recs[i]["no_change"]]
            ax.bar(nc, bottom[nc], width=0.8, fill=False, edgecolor="0.35", linewidth=1.0,
                   gid="makeup:no_change")
        elif len(recs) <= 40:
            for i, c in per.items():
                ax.text(i, bottom[i], str(c["label"]), ha="center", va="bottom", fontsize=FONT_TINY,
                        color="0.3")
        ax.set_ylim(0, max(bottom.max(), 1) * 1.18)
        ax.set_ylabel("cluster 0 /\nno-change\n(track 0)" if t == 0 else f"track {t}",
                      fontsize=FONT_NOTE,
                      rotation=0, ha="right", va="center")
        ax.tick_params(labelsize=FONT_SMALL)
        ax.grid(axis="y", alpha=0.25)
        for sp in ("top", "right"):
            ax.spines[sp].set_visible(False)
    idx, labels = checkpoint_ticks(recs)
    axes[-1].set_xticks(idx)
    axes[-1].set_xticklabels(labels, fontsize=FONT_SMALL)
    axes[-1].set_xlabel("checkpoint (epochs trained)", fontsize=FONT_LABEL)
    handles = [Patch(facecolor=colors[k], label=n) for k, n in enumerate(names)]
    handles.append(Patch(facecolor="white", edgecolor="0.35",
                         label="cluster 0 is a no-change cluster"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=FONT_NOTE,
               title="class (bar height: images of the cluster)", title_fontsize=FONT_NOTE,
               bbox_to_anchor=(0.5, 0.0))
    more = (f"; {len(hidden)} shorter-lived tracks not shown (clusters.csv lists them)"
            if hidden else "")
    fig.suptitle(f"{doc.get('name', '')}: class make-up of every cluster at every checkpoint "
                 f"(rows: one cluster followed across checkpoints by member overlap{more})",
                 fontsize=FONT_TITLE)
    fig.tight_layout(rect=(0, 0.8 / fig.get_figheight(), 1, 1 - 0.5 / fig.get_figheight()))
    return fig


__all__ = ["cluster_makeup_figure", "cluster_tracks_of"]
