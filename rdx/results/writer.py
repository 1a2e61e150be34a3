"""One writer of comparison folders: ``rdx run``, ``rdx explain --report``, the benchmark and
the layer-wise study all write a comparison through :class:`ComparisonWriter`, so every
comparison folder has the layout of :mod:`rdx.results.store` and is written in the same order.

The order is what makes a folder resumable and readable at every moment:

1. :meth:`ComparisonWriter.write_inputs`: ``images.json`` and ``representations.npz`` (what
   every method of the comparison, the report and the explorer read);
2. per method, :meth:`ComparisonWriter.write_method`: the files the caller drew (grids), then
   ``<method>/explanations.json`` listing them with their checksums (last: it marks the
   method done), then ``run.json`` with the method's status and time;
3. :meth:`ComparisonWriter.write_run` at the end (``finished``).

The grids themselves are drawn by :func:`rdx.viz.grids.save_result_grids` (drawing belongs
above the store) into :meth:`ComparisonWriter.method_dir`.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .store import IMAGES_JSON, RUN_JSON, ComparisonRun
from .types import MethodResult


def utc_now() -> str:
    """The time stamp of run records (``started``, ``finished``): UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def images_record(*, dataset: str, n_images: int, class_names: Sequence[str], labels: Any,
                  split: str | None = None, indices: Any = None, ids: Any = None) -> dict:
    """The ``images.json`` document of a comparison.

    Parameters
    ----------
    dataset : str
        Name of the dataset (or a description of where the features came from).
    n_images : int
        Number of images compared.
    class_names : sequence of str
        Name of each class code.
    labels : array-like or None
        Class code per image (None when unknown).
    split : str, optional
        The dataset's split.
    indices, ids : array-like, optional
        Index and id of each image in the dataset; left out when the images are not a
        selection from a dataset (features given directly).
    """
    doc: dict[str, Any] = {"dataset": dataset, "split": split, "n_images": int(n_images),
                           "class_names": list(class_names)}
    if indices is not None:
        doc["indices"] = indices
    if ids is not None:
        doc["ids"] = ids
    doc["labels"] = labels
    return doc


class ComparisonWriter:
    """Writes one comparison folder of the run store.

    Parameters
    ----------
    folder : str or Path
        The comparison folder (created when missing).
    run : mapping
        The run record (``run.json``): experiment, comparison, seed, config, versions, ...;
        ``methods`` (name → status) and ``timings_s`` (name → seconds) are filled in by
        :meth:`write_method`.

    Attributes
    ----------
    store : ComparisonRun
        The folder, for reads (``is_finished``, ``result``) between the writes.
    run : dict
        The run record as written last.
    """

    def __init__(self, folder: str | Path, run: Mapping[str, Any]):
        self.store = ComparisonRun(folder)
        self.run: dict[str, Any] = {**run}
        self.run.setdefault("timings_s", {})
        self.run.setdefault("methods", {})

    @property
    def path(self) -> Path:
        return self.store.path

    def method_dir(self, name: str) -> Path:
        """The folder of method ``name`` (where its grids are drawn)."""
        return self.store.method_dir(name)

    def write_inputs(self, images: Mapping[str, Any], A: np.ndarray, B: np.ndarray,
                     labels: np.ndarray | None) -> None:
        """``images.json`` (:func:`images_record`) and ``representations.npz`` (a, b,
        labels): written before any method."""
        self.store.write_json(IMAGES_JSON, dict(images))
        self.store.write_representations(A, B, labels)

    def write_alignment(self, alignment: tuple[np.ndarray, np.ndarray, Mapping[str, Any]]
                        ) -> None:
        """``alignment.json|.npz`` from :func:`rdx.method.alignment.align_pair`'s
        ``(A_mapped, B_mapped, info)``."""
        self.store.write_alignment(alignment[2], alignment[0], alignment[1])

    def write_method(self, name: str, result: MethodResult, *, provenance: Mapping[str, Any],
                     files: Iterable[str | Path] = (), seconds: float | None = None) -> Path:
        """One method's result: ``result.run = provenance``, its ``explanations.json``
        listing ``files`` (drawn into :meth:`method_dir`; last, it marks the method done),
        then ``run.json`` with the method done in ``seconds``. Returns the
        ``explanations.json`` path."""
        result.run = dict(provenance)
        path = self.store.write_result(name, result, extra_files=list(files))
        self.run["methods"][name] = "done"
        if seconds is not None:
            self.run["timings_s"][name] = seconds
        self.write_run()
        return path

    def write_run(self, **updates: Any) -> Path:
        """``run.json``: the run record with ``updates`` (e.g. ``finished``)."""
        self.run.update(updates)
        return self.store.write_json(RUN_JSON, self.run)


__all__ = ["ComparisonWriter", "images_record", "utc_now"]
