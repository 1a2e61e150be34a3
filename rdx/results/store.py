"""The run store: the only code that knows the output folder's layout.

```
outputs/<experiment>/                       ExperimentRun
  index.html                                the experiment's report
  analysis/summary.csv, summary.json        score tables
  <comparison>/                             ComparisonRun
    run.json                                config, seed, versions, timings, status
    images.json                             dataset, split, indices, ids, labels, class names,
                                            source: where the images are (see below)
    images.npy                              the images, when no dataset holds them (an
                                            --images array, an example's images)
    representations.npz                     a, b (n×d float32), labels
    alignment.json, alignment.npz           aligned runs: CKA curves; a_mapped, b_mapped
    report.html, explore.html               the static report and the interactive explorer
    <method>/explanations.json              the MethodResult (written last: marks it done)
    <method>/concepts.npz                   codes of the shown concepts, probe predictions, ...
    <method>/graphs.npz                     RDX with save_graphs: the n×n matrices
    <method>/grids/<direction>_<i>.png      one grid per explanation (1-based)
    <method>/grids/<direction>_summary.png  the grids of a direction side by side
```

``images.json``'s ``source`` says where the compared images can be read back (the explorer's
thumbnails), with every path relative to the comparison folder, so that the folder can be
moved or read from any working directory:

* ``{"kind": "array", "path": "images.npy"}``: an array of the folder, one image per row
  (uint8, ``n×H×W`` or ``n×H×W×C``, as the grids draw them);
* ``{"kind": "dataset", "dataset": ID, "split", "root", "data_root"}``: rows ``indices`` of a
  dataset of :func:`rdx.data.get_dataset` (``ids`` check that it did not change);
* ``{"kind": "files", "source": FOLDER|CSV|NAME, "split"}``: the images ``ids`` of an image
  source of ``rdx features`` (a folder, a CSV list, a built-in dataset);
* ``null``: the run had no images (features given without ``--images``).

Reads are lazy and cached (a report reads each file once); a missing or corrupt file
becomes a note in :attr:`ComparisonRun.problems` (shown by the report, warned by the
command line) instead of a crash. Every file a method wrote is listed with its SHA-256 in
its ``explanations.json`` (``run.files``), and ``explanations.json`` carries the digest of
its own content (``record_sha256``, :mod:`rdx.io`, stored data), so a resumed run redoes a
method whose ``concepts.npz`` or grid was truncated or replaced, or whose JSON was altered,
not only one whose JSON is missing; a result written before the digest existed is
unverified and done again. Readers do not show an altered result or a concepts/graphs file
that differs from its listed digest: each becomes a note in :attr:`ComparisonRun.problems`.
"""
from __future__ import annotations

import json
import re
import warnings
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..io import (RECORD_DIGEST, atomic_write, file_sha256, read_json, record_problem,
                  save_npz_atomic, stored_problem, write_json_atomic, write_record)
from ..paths import check_name
from .types import DIRECTIONS, MethodResult

RUN_JSON = "run.json"
IMAGES_JSON = "images.json"
IMAGES_NPY = "images.npy"
REPRESENTATIONS_NPZ = "representations.npz"
ALIGNMENT_JSON = "alignment.json"
ALIGNMENT_NPZ = "alignment.npz"
REPORT_HTML = "report.html"
EXPLORE_HTML = "explore.html"
EXPLANATIONS_JSON = "explanations.json"
CONCEPTS_NPZ = "concepts.npz"
GRAPHS_NPZ = "graphs.npz"
GRIDS_DIR = "grids"
INDEX_HTML = "index.html"
ANALYSIS_DIR = "analysis"
SUMMARY_CSV = "summary.csv"
SUMMARY_JSON = "summary.json"

_GRID_RE = re.compile(r"^(a_over_b|b_over_a)_(\d+)\.png$")

#: The files a method's writer replaces in its folder ("/**": every file under a folder).
METHOD_FILES = (EXPLANATIONS_JSON, CONCEPTS_NPZ, GRAPHS_NPZ, f"{GRIDS_DIR}/**")
#: A comparison folder's own files: no method may take one of these names as its folder.
COMPARISON_FILES = (RUN_JSON, IMAGES_JSON, IMAGES_NPY, REPRESENTATIONS_NPZ, ALIGNMENT_JSON,
                    ALIGNMENT_NPZ, REPORT_HTML, EXPLORE_HTML)
#: An experiment folder's own files: no comparison may be called so.
EXPERIMENT_FILES = (INDEX_HTML, ANALYSIS_DIR)
#: What ``rdx run`` keeps next to the experiments in its output root (the feature cache,
#: submitit's logs): no experiment may be called so.
ROOT_FOLDERS = ("cache", "submitit")


def check_path_component(name: Any, what: str = "name", *,
                         reserved: Iterable[str] = ()) -> str:
    """``name`` if it is one safe folder name inside the output folder (see
    :func:`rdx.paths.check_name`: one component, valid text, not one of ``reserved``), so
    that no name (e.g. from a shared config) can reach outside the output folder, hide there
    or take the place of one of its files."""
    return check_name(name, what, reserved=reserved)


def check_method_name(name: Any) -> str:
    """A method's folder name inside a comparison folder (not one of its own files)."""
    return check_name(name, "method name", reserved=COMPARISON_FILES,
                      within="a comparison folder")


def check_comparison_name(name: Any) -> str:
    """A comparison's folder name inside an experiment folder."""
    return check_name(name, "comparison name", reserved=EXPERIMENT_FILES,
                      within="an experiment folder")


def check_experiment_name(name: Any) -> str:
    """An experiment's folder name inside the output root."""
    return check_name(name, "experiment name", reserved=ROOT_FOLDERS,
                      within="the output root")


def comparison_writes(methods: Iterable[str]) -> list[str]:
    """The paths, relative to a comparison folder, that writing it (``rdx run``, ``rdx
    explain --report``) may replace: the comparison's own files and each method's."""
    return [*COMPARISON_FILES, *(f"{m}/{f}" for m in methods for f in METHOD_FILES)]


def comparison_data_files(folder: str | Path) -> list[Path]:
    """The result files a reader of ``folder`` reads (run, images, representations,
    alignment, each method's explanations, concepts and graphs) — of the comparison itself,
    or of each pair folder in it (a folder of layer pairs); the inputs of ``rdx explore``."""
    folder = Path(folder)
    comps = [folder] if (folder / RUN_JSON).is_file() else \
        [p.parent for p in sorted(folder.glob(f"*/{RUN_JSON}"))]
    out = []
    for c in comps:
        out += [c / n for n in (RUN_JSON, IMAGES_JSON, IMAGES_NPY, REPRESENTATIONS_NPZ,
                                ALIGNMENT_JSON, ALIGNMENT_NPZ)]
        for js in sorted(c.glob(f"*/{EXPLANATIONS_JSON}")):
            out += [js, js.parent / CONCEPTS_NPZ, js.parent / GRAPHS_NPZ]
    return [p for p in out if p.is_file()]


def grid_path(method_dir: str | Path, direction: str, i: int) -> Path:
    """The PNG of explanation ``i`` (1-based) of a direction, in a method's folder."""
    return Path(method_dir) / GRIDS_DIR / f"{direction}_{int(i)}.png"


def summary_grid_path(method_dir: str | Path, direction: str) -> Path:
    """The PNG of a direction's grids side by side, in a method's folder."""
    return Path(method_dir) / GRIDS_DIR / f"{direction}_summary.png"


def write_method_result(out_dir: str | Path, result: MethodResult,
                        extra_files: Iterable[str | Path] = ()) -> Path:
    """Write a method's outputs into ``out_dir``: ``concepts.npz`` (``result.arrays``),
    ``graphs.npz`` (``result.graphs``) and then ``explanations.json`` — last, because it
    marks the method as finished and lists every file (with ``extra_files``, e.g. grids the
    caller drew) with its SHA-256 for the resume check; the JSON is sealed with the digest
    of its own content (:func:`rdx.io.write_record`)."""
    out = Path(out_dir)
    written: list[Path] = []
    if result.arrays:
        written.append(save_npz_atomic(out / CONCEPTS_NPZ, **result.arrays))
    if result.graphs:
        written.append(save_npz_atomic(out / GRAPHS_NPZ, **result.graphs))
    written += [Path(p) for p in extra_files]
    files = {p.relative_to(out).as_posix(): file_sha256(p) for p in written}
    if files:
        result.run = {**(result.run or {}), "files": files}
    return write_record(out / EXPLANATIONS_JSON, result.to_json())


def _npz_ok(path: Path) -> bool:
    """A zip whose members all pass their CRC check (a truncated .npz fails)."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.testzip() is None
    except (OSError, zipfile.BadZipFile, EOFError):
        return False


class ComparisonRun:
    """One comparison's output folder (``outputs/<experiment>/<comparison>``)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.problems: list[str] = []
        self._cache: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"ComparisonRun({str(self.path)!r})"

    def _repr_html_(self) -> str:
        """Jupyter's view: every finished method with its grids (:mod:`rdx.results.notebook`)."""
        from .notebook import comparison_html
        return comparison_html(self)

    @property
    def name(self) -> str:
        return self.path.name

    # ------------------------------------------------------------------ paths
    def file(self, name: str) -> Path:
        """Path of a comparison-level file (``RUN_JSON``, ``REPORT_HTML``, ...)."""
        return self.path / name

    def method_dir(self, method: str) -> Path:
        return self.path / check_method_name(method)

    def explanations_path(self, method: str) -> Path:
        return self.method_dir(method) / EXPLANATIONS_JSON

    def concepts_path(self, method: str) -> Path:
        return self.method_dir(method) / CONCEPTS_NPZ

    def graphs_path(self, method: str) -> Path:
        return self.method_dir(method) / GRAPHS_NPZ

    def grid_dir(self, method: str) -> Path:
        return self.method_dir(method) / GRIDS_DIR

    def grid_path(self, method: str, direction: str, i: int) -> Path:
        """The PNG of explanation ``i`` (1-based) of a direction."""
        return grid_path(self.method_dir(method), direction, i)

    def summary_grid_path(self, method: str, direction: str) -> Path:
        return summary_grid_path(self.method_dir(method), direction)

    def grid_paths(self, method: str, direction: str) -> list[Path]:
        """The grid PNGs of a direction that exist, in explanation order."""
        found = []
        for p in self.grid_dir(method).glob(f"{direction}_*.png"):
            m = _GRID_RE.match(p.name)
            if m:
                found.append((int(m.group(2)), p))
        return [p for _, p in sorted(found)]

    # ------------------------------------------------------------------ reading
    @property
    def exists(self) -> bool:
        return self.file(RUN_JSON).is_file()

    def _note(self, msg: str) -> None:
        if msg not in self.problems:
            self.problems.append(msg)
            warnings.warn(f"{self.path}: {msg}", stacklevel=3)

    def read(self, name: str, *, required: bool = False) -> Any:
        """A comparison-level JSON file, read once (None, with a note, if missing/corrupt)."""
        if name not in self._cache:
            p = self.file(name)
            value = None
            if p.is_file():
                try:
                    value = read_json(p)
                except (RDXInputError, OSError, UnicodeDecodeError) as exc:
                    self._note(f"{name} could not be read ({exc})")
            elif required:
                raise RDXInputError(
                    f"no run found in {self.path} ({name} is missing): run `rdx run --config "
                    "configs/<experiment>.yaml` first (a comparison folder holds run.json).")
            self._cache[name] = value
        return self._cache[name]

    @property
    def run(self) -> dict[str, Any]:
        """``run.json`` (an error when missing: this is not a comparison folder)."""
        value = self.read(RUN_JSON, required=True)
        if value is None:
            raise RDXInputError(f"{self.file(RUN_JSON)} could not be read: {self.problems[-1]}")
        return value

    @property
    def config(self) -> dict[str, Any]:
        return self.run.get("config") or {}

    @property
    def images(self) -> dict[str, Any] | None:
        return self.read(IMAGES_JSON)

    @property
    def alignment(self) -> dict[str, Any] | None:
        return self.read(ALIGNMENT_JSON)

    def image_array(self, path: str = IMAGES_NPY) -> np.ndarray:
        """The folder's image array (``images.json``'s ``source`` names it), memory-mapped:
        a reader of a few thumbnails does not load every image.

        Raises
        ------
        RDXInputError
            When the file is missing, unreadable or not inside the folder.
        """
        file = (self.path / path).resolve()
        if not file.is_relative_to(self.path.resolve()):
            raise RDXInputError(f"{path!r} is not a file of the comparison folder")
        try:
            return np.load(file, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise RDXInputError(f"{path} could not be read ({type(exc).__name__}: {exc})"
                                ) from None

    def _listed_digest(self, method: str, name: str) -> str | None:
        """The SHA-256 ``method``'s ``explanations.json`` lists for its file ``name`` (None:
        not listed, or no readable result)."""
        p = self.explanations_path(method)
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        files = ((doc.get("run") or {}).get("files") or {}) if isinstance(doc, dict) else {}
        return files.get(name) if isinstance(files, dict) else None

    def _arrays(self, path: Path, key: str, expected: str | None = None
                ) -> dict[str, np.ndarray] | None:
        if key not in self._cache:
            value = None
            bad = None if expected is None or not path.is_file() else \
                stored_problem(path, expected, "")
            if bad is not None:
                rel = path.relative_to(self.path).as_posix()
                self._note(f"{rel} is not shown: its SHA-256 is {bad.found[:16]}…, "
                           f"explanations.json lists {expected[:16]}… (damaged or replaced "
                           "after the run wrote it; run the comparison again with `rdx run "
                           "--config CONFIG`)" if bad.found else f"{rel} could not be read")
            elif path.is_file():
                try:
                    with np.load(path, allow_pickle=False) as z:
                        value = {k: z[k] for k in z.files}
                except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
                    rel = path.relative_to(self.path).as_posix()
                    self._note(f"{rel} could not be read ({type(exc).__name__}: {exc})")
            self._cache[key] = value
        return self._cache[key]

    @property
    def representations(self) -> dict[str, np.ndarray] | None:
        """``{"a", "b", "labels"}`` of ``representations.npz`` (None if missing/unreadable)."""
        return self._arrays(self.file(REPRESENTATIONS_NPZ), "representations")

    @property
    def labels(self) -> np.ndarray | None:
        reps = self.representations
        if reps is not None and "labels" in reps:
            return reps["labels"]
        images = self.images or {}
        return None if images.get("labels") is None else np.asarray(images["labels"])

    def concepts(self, method: str) -> dict[str, np.ndarray] | None:
        """``concepts.npz`` of a method; None (with a note) when missing, unreadable, or
        not the file its ``explanations.json`` lists."""
        return self._arrays(self.concepts_path(method), f"concepts:{method}",
                            self._listed_digest(method, CONCEPTS_NPZ))

    def graphs(self, method: str) -> dict[str, np.ndarray] | None:
        """``graphs.npz`` of a method, checked as :meth:`concepts`."""
        return self._arrays(self.graphs_path(method), f"graphs:{method}",
                            self._listed_digest(method, GRAPHS_NPZ))

    def method_names(self) -> list[str]:
        """Methods with results: the config's order first, then any other, alphabetically."""
        if not self.path.is_dir():
            return []
        found = {p.parent.name for p in self.path.glob(f"*/{EXPLANATIONS_JSON}")}
        try:
            configured = [m.get("name", m.get("method")) for m in self.config.get("methods", [])
                          if isinstance(m, dict)]
        except RDXInputError:
            configured = []
        configured = list(dict.fromkeys(configured))
        return [m for m in configured if m in found] + sorted(found - set(configured))

    def result(self, method: str) -> MethodResult | None:
        """A method's result, read once (None, with a note, if missing or corrupt)."""
        key = f"result:{method}"
        if key not in self._cache:
            p = self.explanations_path(method)
            value = None
            if p.is_file():
                try:
                    doc = read_json(p)
                    # a sealed result that was altered is not shown; one of an earlier
                    # version (no seal) is shown as it is: nothing can recompute it here
                    altered = record_problem(doc, p, f"{method}/{EXPLANATIONS_JSON}") \
                        if isinstance(doc, dict) and RECORD_DIGEST in doc else None
                    if altered is not None:
                        raise RDXInputError(f"{altered}; run the comparison again with "
                                            "`rdx run --config CONFIG`")
                    value = MethodResult.from_json(doc)
                except (RDXInputError, OSError, UnicodeDecodeError) as exc:
                    self._note(f"{method}/{EXPLANATIONS_JSON} could not be read ({exc})")
            self._cache[key] = value
        return self._cache[key]

    def results(self) -> dict[str, MethodResult]:
        """Every readable method result, in :meth:`method_names` order."""
        out = {}
        for name in self.method_names():
            res = self.result(name)
            if res is not None:
                out[name] = res
        return out

    def is_finished(self, method: str, fingerprint: str | None = None) -> bool:
        """Whether a method's outputs are complete (and, with ``fingerprint``, were made from
        the same parameters and data): its JSON reads and carries the digest of its own
        content, and every file it lists still has the SHA-256 it was written with.

        A result that fails a digest (altered, damaged, replaced, or written before the
        digests existed) is named in a warning — the caller then computes it again."""
        return self.unfinished_reason(method, fingerprint) is None

    def unfinished_reason(self, method: str, fingerprint: str | None = None) -> str | None:
        """None when :meth:`is_finished`; else why not — ``""`` when there is simply no
        result of these parameters, else the file that fails its digest and the digest
        expected (also warned)."""
        p = self.explanations_path(method)
        if not p.is_file():
            return ""
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return ""
        if not isinstance(doc, dict):
            return ""
        run = doc.get("run") or {}
        if fingerprint is not None and run.get("fingerprint") != fingerprint:
            return ""
        problem = record_problem(doc, p, f"{method}/{EXPLANATIONS_JSON}")
        if problem is None:
            for rel, digest in (run.get("files") or {}).items():
                problem = stored_problem(self.method_dir(method) / rel, digest,
                                         f"{method}'s file")
                if problem is not None:
                    break
        if problem is None:
            return None
        reason = f"{problem}; {method} is computed again"
        warnings.warn(f"{self.path}: {reason}", stacklevel=3)
        return reason

    # ------------------------------------------------------------------ writing
    def write_json(self, name: str, doc: Any) -> Path:
        self._cache.pop(name, None)
        return write_json_atomic(self.file(name), doc)

    def write_representations(self, A: np.ndarray, B: np.ndarray,
                              labels: np.ndarray | None) -> Path:
        self._cache.pop("representations", None)
        arrays = {"a": A, "b": B} if labels is None else {"a": A, "b": B, "labels": labels}
        return save_npz_atomic(self.file(REPRESENTATIONS_NPZ), **arrays)

    def write_image_array(self, images: np.ndarray) -> Path:
        """``images.npy``: the compared images, one per row (see :attr:`images`'s
        ``source``)."""
        p = self.file(IMAGES_NPY)
        atomic_write(p, lambda fh: np.save(fh, np.asarray(images), allow_pickle=False))
        return p

    def write_alignment(self, info: Mapping[str, Any], A_mapped: np.ndarray,
                        B_mapped: np.ndarray) -> None:
        self.write_json(ALIGNMENT_JSON, info)
        save_npz_atomic(self.file(ALIGNMENT_NPZ), a_mapped=A_mapped, b_mapped=B_mapped)

    def read_alignment_arrays(self) -> tuple[np.ndarray, np.ndarray] | None:
        arrays = self._arrays(self.file(ALIGNMENT_NPZ), "alignment_arrays")
        return None if arrays is None else (arrays["a_mapped"], arrays["b_mapped"])

    def write_result(self, method: str, result: MethodResult,
                     extra_files: Iterable[str | Path] = ()) -> Path:
        """Write a method's outputs (see :func:`write_method_result`)."""
        self._cache.pop(f"result:{method}", None)
        return write_method_result(self.method_dir(method), result, extra_files)


class ExperimentRun:
    """An experiment's output folder (``outputs/<experiment>``): its comparisons and the
    experiment-level analysis and report."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"ExperimentRun({str(self.path)!r})"

    @property
    def name(self) -> str:
        return self.path.name

    def comparisons(self) -> list[ComparisonRun]:
        """Every comparison folder (one with ``run.json``), by name."""
        return [ComparisonRun(p.parent) for p in sorted(self.path.glob(f"*/{RUN_JSON}"))]

    def comparison(self, name: str) -> ComparisonRun:
        return ComparisonRun(self.path / check_comparison_name(name))

    def require_comparisons(self) -> list[ComparisonRun]:
        comps = self.comparisons()
        if not comps:
            raise RDXInputError(
                f"no run found in {self.path}: run `rdx run --config configs/{self.path.name}"
                ".yaml` first (it writes outputs/<experiment>/<comparison>/run.json).")
        return comps

    @property
    def analysis_dir(self) -> Path:
        return self.path / ANALYSIS_DIR

    @property
    def summary_csv(self) -> Path:
        return self.analysis_dir / SUMMARY_CSV

    @property
    def summary_json(self) -> Path:
        return self.analysis_dir / SUMMARY_JSON

    @property
    def index_html(self) -> Path:
        return self.path / INDEX_HTML


def grid_directions(result: MethodResult) -> list[str]:
    """The directions of a result that have grids, in the canonical order."""
    return [d for d in DIRECTIONS if d in result.directions and result.directions[d].explanations]


# ----------------------------------------------------------------------------- training dynamics

class DynamicsRun:
    """A training-dynamics output folder (``dynamics.json``, ``checkpoints/<name>.npz`` with
    cluster labels, ``features/<name>.npz`` with probe features, ``figures/``)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def doc(self) -> dict[str, Any]:
        p = self.path / "dynamics.json"
        if not p.is_file():
            raise RDXInputError(f"{p} does not exist: run `rdx dynamics --config "
                                "configs/training_dynamics_<dataset>.yaml` first.")
        return read_json(p)

    def labels(self, name: str) -> np.ndarray:
        """Cluster label per probe image of checkpoint ``name`` (0 = no-change group)."""
        with np.load(self.path / "checkpoints" / f"{name}.npz", allow_pickle=False) as z:
            return z["labels"]

    def features(self, name: str) -> np.ndarray:
        """Cached probe features of checkpoint ``name`` (also ``final``)."""
        with np.load(self.path / "features" / f"{name}.npz", allow_pickle=False) as z:
            return z["features"]


def load_dynamics(out_dir: str | Path) -> dict[str, Any]:
    """``dynamics.json`` of a finished training-dynamics run."""
    return DynamicsRun(out_dir).doc()


def load_labels(out_dir: str | Path, name: str) -> np.ndarray:
    return DynamicsRun(out_dir).labels(name)


def load_features(out_dir: str | Path, name: str) -> np.ndarray:
    return DynamicsRun(out_dir).features(name)
