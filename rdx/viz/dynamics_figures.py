"""Every figure of a finished training-dynamics analysis, from its data: the curves (paper
Fig. 1), the class make-up of every cluster track, one cluster figure per chosen
checkpoint (paper Fig. 2) and the grids of every cluster at one checkpoint.

:func:`rdx.report.dynamics.write_dynamics_figures` reads an analysis folder and calls
:func:`draw_dynamics_figures`.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .dynamics_clusters import (checkpoint_clusters_figure, choose_checkpoints,
                                choose_grids_checkpoint, cluster_figure_name,
                                cluster_grids_figure, grids_figure_name)
from .dynamics_curves import dynamics_curves_figure
from .dynamics_makeup import cluster_makeup_figure
from .save import save_figure


def figure_checkpoints(doc: dict) -> list[str]:
    """Names of the checkpoints whose cluster labels and features
    :func:`draw_dynamics_figures` needs (the config's ``figures.checkpoints``)."""
    figs = doc["config"].get("figures") or {}
    return [doc["checkpoints"][i]["checkpoint"]
            for i in choose_checkpoints(doc, figs.get("checkpoints", "auto"))]


def draw_dynamics_figures(doc: dict, fig_dir: str | Path, *,
                          labels: Mapping[str, np.ndarray],
                          features: Mapping[str, np.ndarray],
                          images: Any) -> dict[str, list[Path]]:
    """Write every figure of an analysis into ``fig_dir``, in each of the config's
    ``figures.formats``.

    Parameters
    ----------
    doc : dict
        ``dynamics.json``.
    fig_dir : path
        The analysis' ``figures/`` folder.
    labels, features : mapping
        Cluster labels and probe features of every checkpoint of
        :func:`figure_checkpoints` by name; ``features["final"]``: the final model's.
    images : indexable
        ``images[i]`` is probe image ``i`` (an array).

    Returns
    -------
    dict
        The written files: ``{"curves", "checkpoints", "makeup", "grids"}``.
    """
    cfg = doc["config"]
    figs = cfg.get("figures") or {}
    formats = figs.get("formats") or ["png"]
    fig_dir = Path(fig_dir)
    written: dict[str, list[Path]] = {"curves": [], "checkpoints": [], "makeup": [],
                                      "grids": []}
    fig = dynamics_curves_figure(doc)
    for fmt in formats:
        written["curves"].append(save_figure(fig, fig_dir / f"dynamics_curves.{fmt}"))
    if any("track" in c for r in doc["checkpoints"] for c in r["clusters"]) or \
            all(not r["clusters"] for r in doc["checkpoints"]):
        fig = cluster_makeup_figure(doc, max_tracks=int(figs.get("max_tracks", 12)))
        for fmt in formats:
            written["makeup"].append(save_figure(fig, fig_dir / f"cluster_makeup.{fmt}"))
    for i in choose_checkpoints(doc, figs.get("checkpoints", "auto")):
        rec = doc["checkpoints"][i]
        fig = checkpoint_clusters_figure(
            rec, labels[rec["checkpoint"]], features[rec["checkpoint"]], features["final"],
            images, class_names=doc["probe"]["class_names"],
            cluster=figs.get("cluster", "largest"))
        for fmt in formats:
            written["checkpoints"].append(
                save_figure(fig, fig_dir / cluster_figure_name(rec, fmt)))
    rec = doc["checkpoints"][choose_grids_checkpoint(doc, figs.get("grids_at", "auto"))]
    fig = cluster_grids_figure(rec, images, class_names=doc["probe"]["class_names"],
                               classes=doc["probe"].get("classes"))
    for fmt in formats:
        written["grids"].append(save_figure(fig, fig_dir / grids_figure_name(rec, fmt)))
    return written


__all__ = ["draw_dynamics_figures", "figure_checkpoints"]
