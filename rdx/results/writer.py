"""One writer of comparison folders: ``rdx run``, ``rdx explain --report``, the benchmark and
the layer-wise study all write a comparison through :class:`ComparisonWriter`, so every
comparison folder has the layout of :mod:`rdx.results.store` and is written in the same order.

The order is what makes a folder resumable and readable at every moment:

1. :meth:`ComparisonWriter.write_inputs`: ``images.json`` (with the ``source`` the explorer
   reads the images from; ``images.npy`` first where the folder keeps them) and
   ``representations.npz`` (what every method of the comparison, the report and the
   explorer read);
2. per method, :meth:`ComparisonWriter.write_method`: the files the caller drew (grids), then
   ``<method>/explanations.json`` listing them with their checksums (last: it marks the
   method done), then ``run.json`` with the method's status and time;
3. :meth:`ComparisonWriter.write_run` at the end (``finished``).

The grids themselves are drawn by :func:`rdx.viz.grids.save_result_grids` (drawing belongs
above the store) into :meth:`ComparisonWriter.method_dir`.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..io import folder_lock, read_json
from .store import IMAGES_JSON, IMAGES_NPY, RUN_JSON, ComparisonRun
from .types import MethodResult


def utc_now() -> str:
    """The time stamp of run records (``started``, ``finished``): UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def relative_to_folder(path: str | os.PathLike, folder: str | os.PathLike) -> str:
    """``path`` (absolute, or relative to the working directory) as seen from ``folder``:
    what a comparison folder records, so that it can be read from any working directory
    and moved together with what it points to."""
    return Path(os.path.relpath(os.path.abspath(path), os.path.abspath(folder))).as_posix()


def array_source() -> dict:
    """``images.json``'s ``source`` of images kept in the comparison folder
    (:meth:`ComparisonWriter.write_inputs` with ``image_array``)."""
    return {"kind": "array", "path": IMAGES_NPY}


def dataset_source(folder: str | os.PathLike, options: Mapping[str, Any]) -> dict:
    """``images.json``'s ``source`` of images that are rows ``indices`` of a dataset:
    ``options`` are what :func:`rdx.data.get_dataset` reads (``dataset``, its loader id, and
    ``split``, ``root``, ``data_root``, ``target_classes``:
    :func:`rdx.data.selection.loader_options`), the folders relative to the comparison
    ``folder``."""
    doc: dict[str, Any] = {"kind": "dataset", **options}
    for key in ("root", "data_root"):
        if doc.get(key):
            doc[key] = relative_to_folder(doc[key], folder)
    return doc


def files_source(folder: str | os.PathLike, source: str, *, split: str | None = None) -> dict:
    """``images.json``'s ``source`` of the images ``ids`` of an image source of ``rdx
    features`` (a folder or CSV list, relative to ``folder``; a built-in dataset's name as
    it is)."""
    text = relative_to_folder(source, folder) if Path(source).exists() else str(source)
    return {"kind": "files", "source": text, "split": split}


def images_record(*, dataset: str, n_images: int, class_names: Sequence[str], labels: Any,
                  split: str | None = None, indices: Any = None, ids: Any = None,
                  source: Mapping[str, Any] | None = None,
                  items: Mapping[str, Any] | None = None) -> dict:
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
    source : mapping, optional
        Where the images can be read back (:func:`dataset_source`, :func:`files_source`,
        :func:`array_source`); None when the run has no images.
    items : mapping, optional
        Items that are not images (``rdx explain --texts/--audio``): ``{"kind": "text" |
        "audio", "values": [...]}``, the snippets or the clips' file names, one per row.
    """
    doc: dict[str, Any] = {"dataset": dataset, "split": split, "n_images": int(n_images),
                           "class_names": list(class_names),
                           "source": None if source is None else dict(source)}
    if indices is not None:
        doc["indices"] = indices
    if ids is not None:
        doc["ids"] = ids
    if items is not None:
        doc["items"] = {"kind": str(items["kind"]), "values": [str(v) for v in items["values"]]}
    doc["labels"] = labels
    return doc


#: The lock of a comparison folder (held by ``rdx run`` for the whole run, and by every
#: writer of ``run.json`` while it merges the record).
RUN_LOCK = ".rdx-run.lock"


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
                     labels: np.ndarray | None, *, image_array: np.ndarray | None = None
                     ) -> None:
        """``images.json`` (:func:`images_record`) and ``representations.npz`` (a, b,
        labels): written before any method.

        ``image_array``: the images themselves where no dataset holds them (an ``--images``
        array, an example's images; one per row, as :func:`rdx.viz.grids.display_images`
        gives them), kept as ``images.npy`` before ``images.json`` names it as the source.
        """
        doc = dict(images)
        if image_array is not None:
            if len(image_array) != len(A):
                raise ValueError(f"{len(image_array)} images for {len(A)} representations")
            self.store.write_image_array(image_array)
            doc["source"] = array_source()
        self.store.write_json(IMAGES_JSON, doc)
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
        """``run.json``: the run record with ``updates`` (e.g. ``finished``), merged with
        the record on disk under the folder's lock (:func:`rdx.io.folder_lock`).

        The methods another run finished in this folder (another config writing the same
        comparison with other methods, one after the other or at once) stay in the record:
        their status, time and config entry are carried over while their
        ``explanations.json`` is there. Without the merge the later run's record named only
        its own methods, and the other config's results were no longer listed.
        """
        self.run.update(updates)
        with folder_lock(self.path, RUN_LOCK):
            self._keep_other_methods()
            return self.store.write_json(RUN_JSON, self.run)

    def _keep_other_methods(self) -> None:
        try:
            old = read_json(self.store.file(RUN_JSON))
        except (RDXInputError, OSError, ValueError):
            return   # none yet, or unreadable: this run's record replaces it
        methods = old.get("methods") if isinstance(old, dict) else None
        if not isinstance(methods, dict):
            return
        timings = old.get("timings_s") if isinstance(old.get("timings_s"), dict) else {}
        config = old.get("config") if isinstance(old.get("config"), dict) else {}
        entries = [m for m in config.get("methods") or [] if isinstance(m, dict)]
        mine = self.run.get("config")
        for name, status in methods.items():
            if name in self.run["methods"] or \
                    not self.store.explanations_path(str(name)).is_file():
                continue
            self.run["methods"][name] = status
            if name in timings and name not in self.run["timings_s"]:
                self.run["timings_s"][name] = timings[name]
            if isinstance(mine, dict) and isinstance(mine.get("methods"), list):
                named = {m.get("name", m.get("method")) for m in mine["methods"]
                         if isinstance(m, dict)}
                # a new dict: the run's config (the comparison's own) stays as it was read
                self.run["config"] = mine = {**mine, "methods": mine["methods"] + [
                    m for m in entries if m.get("name", m.get("method")) == name
                    and name not in named]}


__all__ = ["ComparisonWriter", "array_source", "dataset_source", "files_source", "images_record",
           "relative_to_folder", "utc_now"]
