"""What the figures of one comparison draw from, read from its folder once.

The figures (:mod:`rdx.viz`) take data, never a folder: :func:`read_comparison_view` reads
a comparison folder (through its :class:`~rdx.results.store.ComparisonRun`, so a report
that already holds the store reuses the files it read) into a :class:`ComparisonView`, and
:func:`require_graphs`, :func:`require_concepts` and :func:`read_summary_strips` read the
per-method files that a figure needs, with an error that says how to get a missing one.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from .store import ComparisonRun
from .types import DIRECTIONS


@dataclass(frozen=True)
class ComparisonView:
    """One comparison as plain data.

    Attributes
    ----------
    name : str
        The comparison's name (``run.json``'s ``comparison``, else its folder's name).
    run : dict
        ``run.json`` (its ``config`` names the models and lists the methods in order).
    images : dict
        ``images.json`` (dataset, labels, class names); empty when missing.
    methods : dict
        ``{method name: explanations document}`` (the JSON form of each result).
    A : ndarray, optional
        Model A's representation (n × d), None without ``representations.npz``.
    B : ndarray, optional
        Model B's representation (n × d), None without ``representations.npz``.
    labels : ndarray, optional
        The class of every image, None when unknown.
    """

    name: str
    run: Mapping[str, Any]
    images: Mapping[str, Any] = field(default_factory=dict)
    methods: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    A: np.ndarray | None = None
    B: np.ndarray | None = None
    labels: np.ndarray | None = None


def comparison_store(comp: ComparisonRun | str | Path) -> ComparisonRun:
    """The store of a comparison folder (the store itself when given one)."""
    return comp if isinstance(comp, ComparisonRun) else ComparisonRun(comp)


def read_comparison_view(comp: ComparisonRun | str | Path) -> ComparisonView:
    """Read a comparison folder (or its store) into a :class:`ComparisonView`."""
    store = comparison_store(comp)
    run = store.run
    reps = store.representations or {}
    return ComparisonView(
        name=str(run.get("comparison") or store.name), run=run, images=store.images or {},
        methods={n: r.to_json() for n, r in store.results().items()},
        A=reps.get("a"), B=reps.get("b"), labels=store.labels)


def require_graphs(comp: ComparisonRun | str | Path, method: str) -> dict[str, np.ndarray]:
    """RDX's intermediate matrices of ``method`` (``<method>/graphs.npz``)."""
    store = comparison_store(comp)
    graphs = store.graphs(method)
    if graphs is None:
        raise RDXInputError(f"{store.graphs_path(method)} is missing: the intermediate "
                            "matrices are saved only for rdx methods with `save_graphs: true` "
                            f"in the config; add it to {method!r} and re-run (`rdx run "
                            "--config ... --force`).")
    return graphs


def require_concepts(comp: ComparisonRun | str | Path, method: str) -> dict[str, np.ndarray]:
    """A factorisation baseline's codes and dictionary (``<method>/concepts.npz``)."""
    store = comparison_store(comp)
    concepts = store.concepts(method)
    if concepts is None:
        raise RDXInputError(f"{store.concepts_path(method)} is missing: coefficient heat maps "
                            "need a factorisation baseline's codes (nmf, cnmf, pca, sae, "
                            "topk_sae, usae, kmeans), which the runner saves as concepts.npz.")
    return concepts


def representation_labels(comp: ComparisonRun | str | Path) -> np.ndarray | None:
    """The labels saved with the representations (None when they were not saved)."""
    return (comparison_store(comp).representations or {}).get("labels")


def read_summary_strips(comp: ComparisonRun | str | Path, methods: Iterable[str]
                        ) -> dict[tuple[str, str], np.ndarray]:
    """``{(method, direction): RGB array}`` of the summary strips that exist
    (``<method>/grids/<direction>_summary.png``)."""
    from PIL import Image

    store = comparison_store(comp)
    strips: dict[tuple[str, str], np.ndarray] = {}
    for m in methods:
        for d in DIRECTIONS:
            p = store.summary_grid_path(m, d)
            if p.exists():
                with Image.open(p) as im:
                    strips[(m, d)] = np.asarray(im.convert("RGB"))
    return strips


__all__ = ["ComparisonView", "comparison_store", "read_comparison_view", "read_summary_strips",
           "representation_labels", "require_concepts", "require_graphs"]
