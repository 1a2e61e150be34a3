"""Everything the explorer reads from disk, in one place.

:func:`load_inputs` turns a comparison folder written by the experiment runner into an
:class:`ExplorerInputs` of plain arrays and dicts; the rest of the package never opens a
file. The folder holds either one representation pair (``representations.npz`` at its top)
or several (each sub-folder with a ``representations.npz`` is one pair, e.g. the layer
pairs of a layer-wise study), all over the same images.

Read per pair through the run store (:class:`rdx.results.store.ComparisonRun`, which owns
the file names): the run record (config, seed), the selected images (dataset, indices,
labels, class names), the representations (``a``, ``b``), the alignment maps when present,
and every method's result plus its concept arrays when present.
The images themselves come from where images.json's ``source`` says (the folder's own
``images.npy``, rows of a dataset, or files of an image folder or list; see
:mod:`rdx.results.store`), or, in folders written before it was recorded, from the dataset
named in the config's ``image_selection``. When there are none or they cannot be loaded,
``load_image`` is None and ``notes`` says why.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image

from ..errors import RDXInputError
from ..results.store import EXPLANATIONS_JSON, IMAGES_NPY, ComparisonRun


@dataclass
class MethodInputs:
    """One method's results: its ``explanations.json`` and ``concepts.npz`` arrays."""

    name: str                       #: folder name (the config's ``name``)
    doc: dict[str, Any]             #: explanations.json as read
    arrays: dict[str, np.ndarray] = field(default_factory=dict)   #: concepts.npz (may be empty)
    #: reads the named n×n arrays of the method's graphs.npz; None when it has none
    load_graphs: Callable[[tuple[str, ...]], dict[str, np.ndarray]] | None = None

    @property
    def method(self) -> str:
        return str(self.doc.get("method", self.name))


@dataclass
class PairInputs:
    """One representation pair (A, B) over the explorer's images."""

    name: str
    a: np.ndarray                   #: n×d_A features
    b: np.ndarray                   #: n×d_B features
    a_spec: dict[str, Any]          #: the config's ``representations.a`` block
    b_spec: dict[str, Any]
    methods: list[MethodInputs]
    run: dict[str, Any]             #: run.json
    alignment: tuple[np.ndarray, np.ndarray] | None = None   #: (A mapped into B, B into A)


@dataclass
class ExplorerInputs:
    """Everything :func:`rdx.explorer.build_explorer` needs, read once."""

    comp_dir: Path
    title: str
    labels: np.ndarray              #: (n,) int class ids
    class_names: list[str]
    ids: list[str]
    dataset: str
    split: str
    pairs: list[PairInputs]
    #: row k → PIL image of the k-th selected image, or None when the dataset is missing
    load_image: Callable[[int], Image.Image] | None = None
    notes: list[str] = field(default_factory=list)
    #: items that are not images (rdx explain --texts/--audio): images.json's
    #: ``{"kind": "text" | "audio", "values": [...]}``, or None
    items: dict[str, Any] | None = None

    @property
    def n(self) -> int:
        return len(self.labels)


def _natural_key(name: str) -> list:
    """'block2' before 'block10'."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _graph_loader(path: Path) -> Callable[[tuple[str, ...]], dict[str, np.ndarray]]:
    """Reads only the asked arrays of a (large) graphs.npz, when asked."""
    def load(keys: tuple[str, ...]) -> dict[str, np.ndarray]:
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in keys if k in z.files}
        except (OSError, ValueError, EOFError) as exc:
            raise RDXInputError(f"{path} could not be read ({exc}); re-run the comparison "
                                "with `rdx run --config CONFIG --force`.") from None
    return load


def _load_pair(pair_dir: Path, name: str) -> tuple[PairInputs, dict[str, Any]]:
    store = ComparisonRun(pair_dir)
    if not store.exists:
        raise RDXInputError(
            f"no run found in {pair_dir} (run.json is missing): run `rdx run --config "
            "configs/<experiment>.yaml` first, then `rdx explore outputs/<experiment>/"
            "<comparison>`.")
    run, images, reps = store.run, store.images, store.representations
    if images is None or reps is None:
        raise RDXInputError(f"{pair_dir}: the selected images or their representations are "
                            "missing or unreadable (" + "; ".join(store.problems or
                                                                 ["the run did not finish its "
                                                                  "feature step"])
                            + "); resume it with `rdx run --config CONFIG`.")
    if "a" not in reps or "b" not in reps:
        raise RDXInputError(f"{pair_dir}: representations lack the arrays 'a' and 'b'.")
    a, b = np.asarray(reps["a"], dtype=np.float32), np.asarray(reps["b"], dtype=np.float32)
    # a comparison made without labels (rdx explain --report, no --labels) stores None
    labels = images.get("labels")
    n = len(labels) if labels is not None else int(images.get("n_images") or 0)
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != n or b.shape[0] != n:
        raise RDXInputError(f"{pair_dir}: representations {a.shape} / {b.shape} do not match "
                            f"the {n} selected images; re-run with --force.")
    alignment = store.read_alignment_arrays()
    if alignment is not None:
        alignment = (np.asarray(alignment[0], np.float32), np.asarray(alignment[1], np.float32))
    methods = []
    for method_name, result in store.results().items():   # the config's order, then the rest
        graphs = store.graphs_path(method_name)
        methods.append(MethodInputs(method_name, result.to_json(),
                                    store.concepts(method_name) or {},
                                    _graph_loader(graphs) if graphs.is_file() else None))
    if any((m.doc.get("params") or {}).get("metric") == "precomputed" for m in methods):
        raise RDXInputError(
            f"{pair_dir} compares distance matrices (rdx explain --distances), and the "
            "explorer's maps and neighbour lists are made from features; open its "
            "report.html (whose maps are the distances' classical MDS), or run rdx explain "
            "--report on the features.")
    broken = [p for p in store.problems if "explanations.json" in p]
    if broken:
        raise RDXInputError(f"{pair_dir}: " + "; ".join(broken) + "; re-run the comparison "
                            "with `rdx run --config CONFIG --force`.")
    cfg = run.get("config", {}) if isinstance(run.get("config"), dict) else {}
    reps_cfg = cfg.get("representations", {}) if isinstance(cfg.get("representations"), dict) \
        else {}
    pair = PairInputs(name=name, a=a, b=b, a_spec=dict(reps_cfg.get("a") or {}),
                      b_spec=dict(reps_cfg.get("b") or {}), methods=methods, run=run,
                      alignment=alignment)
    return pair, images


#: An ``image_selection`` whose ``indices`` name this file lists its images explicitly: the
#: rows of images.json's ``indices`` (a layer-wise study's pairs), not a seeded sampling.
INDICES_IN_IMAGES_JSON = "images.json"


def _explicit_indices(selection: dict, indices: np.ndarray, root_hint: dict | None
                      ) -> tuple[Any, np.ndarray]:
    """The dataset of a selection that lists its images (``indices``), and those indices.

    The record was written by a run, not a user: options the dataset does not read (a
    layer study's ``split`` on ``digits``) are dropped, not refused; ``root``/``data_root``
    missing from it come from ``root_hint`` (the study's own data block)."""
    from ..data import DATASET_OPTIONS, get_dataset

    name = selection["dataset"]
    opts = {**(root_hint or {}), **selection}
    reads = DATASET_OPTIONS.get(name, frozenset({"split", "root", "data_root"}))
    kw = {k: opts[k] for k in ("split", "root", "data_root") if k in reads and opts.get(k)}
    listed = selection.get("indices")
    idx = indices if isinstance(listed, str) else np.asarray(listed, dtype=np.int64)
    return get_dataset(name, **kw), idx


def _checked_rows(ds: Any, idx: np.ndarray, indices: np.ndarray, ids: list[str] | None
                  ) -> tuple[Callable[[int], Image.Image] | None, str | None]:
    """A loader of rows ``idx`` of dataset ``ds``, if they are still the images the run
    recorded (images.json's ``indices`` and, where it has them, ``ids``)."""
    idx = np.asarray(idx, dtype=np.int64)
    changed = ("the dataset's image selection no longer matches images.json (the data "
               "changed since the run), so no images are shown")
    if len(idx) != len(indices) or not np.array_equal(idx, indices):
        return None, changed
    if idx.size and (idx.min() < 0 or idx.max() >= len(ds)):
        return None, changed
    if ids and len(ids) == len(idx) and list(getattr(ds, "ids", None) or []):
        now = [str(ds.ids[i]) for i in idx]
        if now != [str(i) for i in ids]:
            return None, ("the dataset's images at the run's indices have other ids than "
                          "images.json records (the data changed since the run), so no "
                          "images are shown")

    def load(k: int) -> Image.Image:
        return ds.load_image(int(idx[k]))

    return load, None


def _image_loader(selection: Any, indices: np.ndarray, ids: list[str] | None = None,
                  root_hint: dict | None = None
                  ) -> tuple[Callable[[int], Image.Image] | None, str | None]:
    """A loader of the selected images of a folder whose images.json has no ``source``
    (written before comparison folders recorded one), or None and the reason why there is
    none.

    ``indices``/``ids`` are images.json's. A selection either lists its images
    (``"indices": "images.json"`` or a list: layer-wise studies) or is a seeded sampling
    (``rdx run``), which is redrawn here and must give the same indices. Either way, where
    images.json has ids, the dataset's ids of those rows must equal them: only then has the
    data changed since the run."""
    from ..data import DATASETS

    if not isinstance(selection, dict) or "dataset" not in selection:
        return None, "the run's config has no image_selection, so no images can be shown"
    if selection["dataset"] not in DATASETS:
        # a description (rdx explain's "features given to rdx explain"), not a dataset
        return None, NO_IMAGES
    explicit = selection.get("indices") is not None
    try:
        if explicit:
            ds, idx = _explicit_indices(selection, indices, root_hint)
        else:
            from ..data.selection import select_images

            ds, idx = select_images(selection)
    except Exception as exc:  # noqa: BLE001 - any failure: show points without thumbnails
        return None, f"the images of dataset {selection.get('dataset')!r} could not be loaded " \
                     f"({exc})"
    return _checked_rows(ds, idx, indices, ids)


#: Why a page of a run without images shows points only.
NO_IMAGES = ("the run recorded no images (features given without images: rdx explain "
             "--report keeps those of --images IMAGES.npy for this page)")


def _source_loader(source: Any, folder: Path, indices: np.ndarray, ids: list[str] | None
                   ) -> tuple[Callable[[int], Image.Image] | None, str | None]:
    """A loader of the images images.json's ``source`` names (see
    :mod:`rdx.results.store`; its paths are relative to the comparison ``folder``), or None
    and the reason why there is none."""
    if source is None:
        return None, NO_IMAGES
    kind = source.get("kind") if isinstance(source, dict) else None
    try:
        if kind == "array":
            arr = ComparisonRun(folder).image_array(str(source.get("path") or IMAGES_NPY))
            if len(arr) != len(indices) or arr.ndim not in (3, 4):
                return None, (f"{source.get('path')} holds {arr.shape} images for the run's "
                              f"{len(indices)}, so no images are shown")

            def load(k: int) -> Image.Image:
                return Image.fromarray(np.asarray(arr[k], dtype=np.uint8))

            return load, None
        if kind == "dataset":
            from ..data.selection import open_dataset

            opts = {k: v for k, v in source.items() if k != "kind"}
            for key in ("root", "data_root"):
                if opts.get(key):
                    opts[key] = str(folder / opts[key])
            return _checked_rows(open_dataset(opts), indices, indices, ids)
        if kind == "files":
            from ..data.sources import open_source

            text = str(source.get("source"))
            where = folder / text
            ds = open_source(str(where) if where.exists() else text,
                             split=source.get("split") or "train")
            row = {str(i): k for k, i in enumerate(ds.ids)}
            missing = [i for i in ids or [] if str(i) not in row]
            if not ids or len(ids) != len(indices):
                return None, (f"images.json does not list the ids of its images in {text!r}, "
                              "so they cannot be found")
            if missing:
                return None, (f"{len(missing)} of the run's {len(ids)} images are no longer "
                              f"in {text!r} (the data changed since the run), so no images "
                              "are shown")
            idx = np.asarray([row[str(i)] for i in ids], dtype=np.int64)
            return _checked_rows(ds, idx, idx, ids)
    except Exception as exc:  # noqa: BLE001 - any failure: show points without thumbnails
        return None, f"the run's images could not be loaded ({exc})"
    return None, f"images.json names its images in a way this rdx cannot read ({source!r})"


def _study_data_block(comp_dir: Path) -> dict | None:
    """A layer-wise study's ``data`` block (root, data_root) from its layers.json, found
    above a folder of its pairs (``<study>/pairs``) or one pair (``<study>/pairs/<pair>``)."""
    import json

    for d in (comp_dir, comp_dir.parent, comp_dir.parent.parent):
        f = d / "layers.json"
        if f.is_file():
            try:
                data = (json.loads(f.read_text()).get("config") or {}).get("data") or {}
            except (OSError, ValueError, AttributeError):
                return None
            return {k: data[k] for k in ("root", "data_root") if data.get(k)} or None
    return None


#: The one class of a comparison without labels.
NO_LABELS_CLASS = "no labels"


def load_inputs(comp_dir: str | Path, *, load_images: bool = True) -> ExplorerInputs:
    """Read a comparison folder (one pair) or a folder of pair folders (several pairs).

    Raises :class:`RDXInputError` when the folder holds no finished run or the pairs'
    images differ.
    """
    comp_dir = Path(comp_dir)
    if not comp_dir.is_dir():
        raise RDXInputError(f"{comp_dir} is not a folder; pass a comparison folder, e.g. "
                            "outputs/<experiment>/<comparison>.")
    if ComparisonRun(comp_dir).exists:
        pair_dirs = [(comp_dir, comp_dir.name)]
    else:
        subs = sorted((p for p in comp_dir.iterdir() if p.is_dir() and ComparisonRun(p).exists),
                      key=lambda p: _natural_key(p.name))
        if not subs and (comp_dir / EXPLANATIONS_JSON).is_file():
            raise RDXInputError(
                f"{comp_dir} holds one method's explanations (rdx explain without --report) "
                "but not the representations the explorer maps: run the same rdx explain "
                "again with --report (and --images IMAGES.npy for the thumbnails), then "
                f"`rdx explore {comp_dir}`.")
        if not subs:
            raise RDXInputError(
                f"no run found in {comp_dir}: it holds neither run.json nor pair folders with "
                "representations.npz; pass a comparison folder, e.g. outputs/<experiment>/"
                "<comparison> (run `rdx run --config CONFIG` first).")
        pair_dirs = [(p, p.name) for p in subs]
    pairs, first = [], None
    for d, name in pair_dirs:
        pair, images = _load_pair(d, name)
        if first is None:
            first = images
        elif (list(images.get("indices", [])) != list(first.get("indices", []))
              or images.get("dataset") != first.get("dataset")):
            raise RDXInputError(f"{d}: its images differ from those of {pair_dirs[0][0]}; the "
                                "pairs of one explorer page must use the same images.")
        pairs.append(pair)
    assert first is not None
    notes: list[str] = []
    names = [str(c) for c in first.get("class_names") or []]
    if first.get("labels") is None:
        # no labels (rdx explain --report without --labels): every image in one class
        labels = np.zeros(len(pairs[0].a), dtype=np.int64)
        names = [NO_LABELS_CLASS]
        notes.append("No class labels: the comparison was made without labels, so every "
                     "image is shown in one class.")
    else:
        labels = np.asarray(first["labels"], dtype=np.int64)
    indices = np.asarray(first.get("indices", np.arange(len(labels))), dtype=np.int64)
    ids = [str(i) for i in first.get("ids", [])] or [str(i) for i in indices]
    loader = None
    if load_images:
        recorded = [str(i) for i in first.get("ids") or []]
        items = _items_of(first, len(labels))
        if items is not None and items["kind"] == "text" and first.get("source") is None:
            loader, why = _text_card_loader(items["values"]), None   # the grids' text cards
        elif "source" in first:
            loader, why = _source_loader(first["source"], pair_dirs[0][0], indices, recorded)
        else:
            loader, why = _image_loader(pairs[0].run.get("config", {}).get("image_selection"),
                                        indices, recorded, _study_data_block(comp_dir))
        if why:
            notes.append(f"Points only, no thumbnails: {why}.")
    run = pairs[0].run
    title = "/".join(str(x) for x in (run.get("experiment"), run.get("comparison")) if x) \
        if len(pairs) == 1 else comp_dir.name
    return ExplorerInputs(comp_dir=comp_dir, title=title or comp_dir.name, labels=labels,
                          class_names=names, ids=ids, dataset=str(first.get("dataset", "?")),
                          split=str(first.get("split", "")), pairs=pairs, load_image=loader,
                          notes=notes, items=_items_of(first, len(labels)))


def _items_of(images: dict, n: int) -> dict[str, Any] | None:
    """images.json's ``items`` record when it has one value per image, else None."""
    items = images.get("items")
    if not isinstance(items, dict) or items.get("kind") not in ("text", "audio") or \
            not isinstance(items.get("values"), list) or len(items["values"]) != n:
        return None
    return {"kind": items["kind"], "values": [str(v) for v in items["values"]]}


def _text_card_loader(texts: list[str]) -> Callable[[int], Image.Image]:
    """Thumbnails of text items: the text cards their grids show (:mod:`rdx.viz.items`)."""
    from ..viz.items import TextCards

    cards = TextCards(texts)
    return lambda k: Image.fromarray(cards[int(k)])
