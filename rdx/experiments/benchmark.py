"""Known-difference benchmark (``rdx benchmark``): models with implanted differences and
their seed twins, every grid-producing method, hits and calibrated strength in one table.

Each *case* compares a model A that lacks a distinction (it merges classes, is invariant
to flips, follows a spurious cue, or cannot see an input region) with a model B that has
it, on images where the difference shows (the ``test`` comparison), and B's *seed twin* B′
— the same recipe as B, another training seed — with B as the negative control
(``control``): a pair that does not differ systematically. Every method's grids are scored
with :class:`rdx.evaluation.scoring.Scorer` against the case's ``known_difference``
declaration (also on the control, where any hit is a false one) and assessed by
:func:`rdx.evaluation.significance.assess`.

Cases (``default`` suite; ``--quick`` runs ``merged`` and ``coarse`` on fewer images with
fewer methods and null draws):

``merged``   Fashion-MNIST; A is trained with sandal (5) and sneaker (7) as one label.
``coarse``   digits; A learns 5 coarse classes (0|6, 1|7, 2|3, 4|9, 5|8), B the 10 digits.
``flip``     Fashion-MNIST + upside-down copies; A gives a copy its original's label
             (invariant), B a label of its own. Shown: originals and copies (labels c, c+10).
``cue``      Fashion-MNIST; every training coat (4) of A carries a bright corner square, a
             shortcut A learns; B never saw it. Shown: the square on a random half of the
             pullovers (2) and coats (labels c + 10 with the square): A separates images by
             the square, B is blind to it (``model: b`` lacks the distinction, b_over_a).
``mask``     Fashion-MNIST; both learn 20 labels, class c with or without a marker in the
             bottom-right corner (c, c+10), but A's input has that corner blacked out.

Everything runs offline on 2 CPU cores: Fashion-MNIST (Debian's ``dataset-fashion-mnist``)
and scikit-learn's digits (resized to 28×28), the project's ConvNet (16/32 channels, a
32-d ``gap`` feature) trained by :func:`rdx.models.training.train_classifier`. Models are
cached as ``<checkpoints>/<recipe>-<digest>_s<seed>/last.pt`` (the digest is the recipe's
content, so cases with the same recipe share a model); each comparison is a run-store
folder (:class:`rdx.results.store.ComparisonRun`) under ``<out>/<case>/{test,control}`` and
a method whose result is there with the same fingerprint is not run again, so an
interrupted benchmark resumes. The table goes to ``<out>/benchmark.{json,csv,md}``.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..evaluation.significance import DEFAULT_N_NULL
from ..progress import working

#: The spurious cue: a bright 5×5 square in the top-left corner.
CUE_BOX = (1, 6, 1, 6)
#: The region model A cannot see (bottom-right 10×10 corner) and the marker drawn in it.
MASK_BOX = (18, 28, 18, 28)
MARKER_BOX = (20, 26, 20, 26)
#: Seeds of the models compared (A, B) and of B's twin (the control).
SEED, TWIN_SEED = 0, 1
#: Part of every result's fingerprint: bump when what a result holds changes.
BENCHMARK_VERSION = 2


# --------------------------------------------------------------------------- recipes

@dataclass(frozen=True)
class Recipe:
    """How one model is trained: data, implanted difference and schedule.

    ``merge`` maps training labels (``(src, dst)``: src becomes dst); ``flips`` is an
    :func:`rdx.data.mnist.apply_modification` name (``vflip``: copies keep their label,
    ``vflip_nl``: copies get c + 10); ``cue_class``: its training images carry the cue;
    ``marker``: a seeded random half of the images carry the marker and get label c + 10;
    ``mask``: the masked region is blacked out, in training and when extracting features.
    """

    name: str
    dataset: str
    per_class: int
    merge: tuple[tuple[int, int], ...] = ()
    flips: str | None = None
    cue_class: int | None = None
    marker: bool = False
    mask: bool = False
    epochs: int = 6
    batch_size: int = 64
    lr: float = 1e-2
    width: int = 16

    def digest(self) -> str:
        from ..io import json_digest
        return json_digest(dataclasses.asdict(self))[:10]

    def folder(self, seed: int) -> str:
        return f"{self.name}-{self.digest()}_s{seed}"


@dataclass(frozen=True)
class ImageSet:
    """The images a case's comparisons are computed on (a seeded selection). Images with
    the cue or the marker get label c + 10, flipped copies too (``vflip_nl``)."""

    dataset: str
    per_class: int
    flips: str | None = None
    cue_classes: tuple[int, ...] = ()
    marker: bool = False


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    a: Recipe
    b: Recipe
    images: ImageSet
    known_difference: Any


_F = dict(dataset="fashion_mnist", per_class=300)
_FINE = Recipe("fashion_fine", **_F)
_DIGITS_FINE = Recipe("digits_fine", "digits", per_class=200, epochs=8)
CASES: dict[str, Case] = {c.name: c for c in (
    Case("merged", "Fashion-MNIST: A trained with sandal and sneaker as one class",
         Recipe("fashion_merge57", **_F, merge=((5, 7),)), _FINE,
         ImageSet("fashion_mnist", 120),
         {"type": "merged_classes", "classes": [5, 7], "model": "a"}),
    Case("coarse", "digits: A trained on 5 coarse classes (0|6, 1|7, 2|3, 4|9, 5|8)",
         Recipe("digits_coarse", "digits", per_class=200, epochs=8,
                merge=((6, 0), (7, 1), (3, 2), (9, 4), (8, 5))), _DIGITS_FINE,
         ImageSet("digits", 120),
         [{"type": "merged_classes", "classes": list(p), "model": "a"}
          for p in ((0, 6), (1, 7), (2, 3), (4, 9), (5, 8))]),
    Case("flip", "Fashion-MNIST + upside-down copies: A invariant (same label), B not",
         Recipe("fashion_vflip", "fashion_mnist", per_class=150, flips="vflip"),
         Recipe("fashion_vflip_nl", "fashion_mnist", per_class=150, flips="vflip_nl"),
         ImageSet("fashion_mnist", 60, flips="vflip_nl"),
         {"type": "flip_pairs", "n_classes": 10, "model": "a"}),
    Case("cue", "Fashion-MNIST: every training coat of A carries a corner square (a shortcut)",
         Recipe("fashion_cue4", **_F, cue_class=4), _FINE,
         ImageSet("fashion_mnist", 120, cue_classes=(2, 4)),
         {"type": "flip_pairs", "n_classes": 10, "model": "b"}),
    Case("mask", "Fashion-MNIST, labels c / c+10 by a corner marker; A cannot see the corner",
         Recipe("fashion_marker_masked", **_F, marker=True, mask=True),
         Recipe("fashion_marker", **_F, marker=True),
         ImageSet("fashion_mnist", 120, marker=True),
         {"type": "flip_pairs", "n_classes": 10, "model": "a"}),
)}


@dataclass(frozen=True)
class MethodSpec:
    """One method of the suite: its registry name, parameters and null draws (0: not
    assessed)."""

    method: str
    params: dict = field(default_factory=dict)
    n_null: int = 0
    #: also assess the test comparison with B's seed twin as the null (``control_b``)
    twin: bool = False


@dataclass(frozen=True)
class Suite:
    cases: tuple[str, ...]
    methods: tuple[MethodSpec, ...]
    per_class_scale: float = 1.0


_K = {"n_explanations": 3}
SUITES: dict[str, Suite] = {
    "default": Suite(tuple(CASES), (
        MethodSpec("rdx", {**_K, "gamma": 0.1}, n_null=DEFAULT_N_NULL, twin=True),
        MethodSpec("kmeans", _K, n_null=DEFAULT_N_NULL),
        MethodSpec("pca", _K, n_null=DEFAULT_N_NULL),
        MethodSpec("nmf", _K, n_null=DEFAULT_N_NULL),
        MethodSpec("cnmf", _K),
        MethodSpec("spec", _K),
        MethodSpec("sae", {**_K, "n_epochs": 100}),
        MethodSpec("topk_sae", {**_K, "n_epochs": 50}),
        MethodSpec("usae", {**_K, "n_epochs": 100}),
        MethodSpec("nlmcd", _K),
    )),
    "quick": Suite(("merged", "coarse"), (
        MethodSpec("rdx", {**_K, "gamma": 0.1}, n_null=DEFAULT_N_NULL),
        MethodSpec("kmeans", _K, n_null=DEFAULT_N_NULL),
        MethodSpec("pca", _K),
    ), per_class_scale=0.5),
}


# --------------------------------------------------------------------------- images

def _draw(images: np.ndarray, rows: np.ndarray, box: tuple[int, int, int, int],
          value: int) -> np.ndarray:
    out = images.copy()
    r0, r1, c0, c1 = box
    out[np.asarray(rows, dtype=np.int64), r0:r1, c0:c1] = value
    return out


def _source(dataset: str, split: str, data_root: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """28×28 uint8 images and labels: Fashion-MNIST's split, or the digits resized (PIL
    bilinear, as the ConvNet presets resize them; digits has one split)."""
    from ..data import get_dataset

    if dataset == "digits":
        from PIL import Image

        ds = get_dataset("digits")
        images = np.stack([np.asarray(Image.fromarray(im).resize((28, 28), Image.BILINEAR))
                           for im in ds.images]).astype(np.uint8)
        return images, ds.labels.copy()
    if dataset != "fashion_mnist":
        raise RDXInputError(f"benchmark dataset {dataset!r}: use 'fashion_mnist' or 'digits'.")
    ds = get_dataset("fashion_mnist", split=split, data_root=data_root)
    return ds.images, ds.labels.copy()


def _per_class(labels: np.ndarray, per_class: int, seed: int) -> np.ndarray:
    from ..data import select_per_class

    ids = [f"{lab}/{i}" for i, lab in enumerate(labels)]
    return select_per_class(ids, labels, None, per_class, seed=seed)


def training_set(recipe: Recipe, *, data_root: str | Path = "data"):
    """The recipe's training images (modified) as an :class:`~rdx.data.ImageDataset`,
    labels relabelled ``0..K-1`` in ascending order of the modified labels."""
    from ..data import ImageDataset
    from ..data.mnist import apply_modification

    images, labels = _source(recipe.dataset, "train", data_root)
    idx = _per_class(labels, recipe.per_class, seed=0)
    images, labels = images[idx], labels[idx]
    if recipe.flips:
        images, labels, _ = apply_modification(images, labels, recipe.flips)
    if recipe.cue_class is not None:
        images = _draw(images, np.flatnonzero(labels == recipe.cue_class), CUE_BOX, 255)
    if recipe.marker:
        marked = np.random.default_rng(123).random(len(labels)) < 0.5
        images = _draw(images, np.flatnonzero(marked), MARKER_BOX, 255)
        labels = labels + 10 * marked
    if recipe.mask:
        images = _draw(images, np.arange(len(labels)), MASK_BOX, 0)
    for src, dst in recipe.merge:
        labels = np.where(labels == src, dst, labels)
    present = np.unique(labels)
    return ImageDataset(name=f"benchmark_{recipe.name}", labels=np.searchsorted(present, labels),
                        class_names=[str(c) for c in present],
                        ids=[str(i) for i in range(len(labels))],
                        images=np.ascontiguousarray(images),
                        info={"recipe": dataclasses.asdict(recipe), "split": "train"})


def comparison_images(spec: ImageSet, *, scale: float = 1.0, data_root: str | Path = "data"
                      ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The images, labels and class names a case is compared on (seeded; Fashion-MNIST's
    test split, the digits themselves)."""
    from ..data.mnist import FASHION_CLASSES, apply_modification

    split = "train" if spec.dataset == "digits" else "test"
    images, labels = _source(spec.dataset, split, data_root)
    idx = _per_class(labels, max(2, int(round(spec.per_class * scale))), seed=1)
    images, labels = images[idx], labels[idx]
    names = list(FASHION_CLASSES) if spec.dataset == "fashion_mnist" else \
        [str(c) for c in range(10)]
    rng = np.random.default_rng(7)
    if spec.flips:
        images, labels, _ = apply_modification(images, labels, spec.flips)
        names = names + [f"{c} (flipped)" for c in names]
    if spec.cue_classes:
        cued = np.isin(labels, spec.cue_classes) & (rng.random(len(labels)) < 0.5)
        images = _draw(images, np.flatnonzero(cued), CUE_BOX, 255)
        labels = labels + 10 * cued
        names = names + [f"{c} (square)" for c in names]
    if spec.marker:
        marked = rng.random(len(labels)) < 0.5
        images = _draw(images, np.flatnonzero(marked), MARKER_BOX, 255)
        labels = labels + 10 * marked
        names = names + [f"{c} (marker)" for c in names]
    return np.ascontiguousarray(images), labels.astype(np.int64), names


# --------------------------------------------------------------------------- models

def train_model(recipe: Recipe, seed: int, *, checkpoints: str | Path,
                data_root: str | Path = "data", progress: bool = True) -> Path:
    """``last.pt`` of the recipe trained with ``seed``, trained now if not cached."""
    from ..models.training import load_checkpoint, train_classifier

    folder = Path(checkpoints) / recipe.folder(seed)
    last = folder / "last.pt"
    if last.is_file():
        try:
            load_checkpoint(last)
            return last
        except RDXInputError:   # a truncated file from an interrupted run: train again
            pass
    train_classifier(training_set(recipe, data_root=data_root), epochs=recipe.epochs,
                     batch_size=recipe.batch_size, lr=recipe.lr, seed=seed,
                     width=recipe.width, save_dir=folder, save_every=None, device="cpu",
                     progress=progress,
                     extra_meta={"benchmark_recipe": dataclasses.asdict(recipe)})
    return last


def features(checkpoint: Path, images: np.ndarray, *, mask: bool = False) -> np.ndarray:
    """The model's ``gap`` features of the images (the masked region blacked out first when
    the model was trained that way)."""
    import torch

    from ..models.training import grey_transform, load_checkpoint

    model, _ = load_checkpoint(checkpoint)
    if mask:
        images = _draw(images, np.arange(len(images)), MASK_BOX, 0)
    x = grey_transform(28).batch(np.ascontiguousarray(images))
    with torch.no_grad():
        return np.concatenate([model.features(x[i:i + 1000]).numpy()
                               for i in range(0, len(x), 1000)]).astype(np.float32)


# --------------------------------------------------------------------------- scoring

def chance_hit_rate(spec: Any, labels: np.ndarray, *, grid_size: int = 9, draws: int = 2000,
                    seed: int = 0) -> float | None:
    """Probability that a grid of ``grid_size`` random images is a hit of the (validated)
    declaration: the hit rate a method would reach by chance."""
    from ..evaluation.known_difference import score_known_difference

    rng = np.random.default_rng(seed)
    n = len(labels)
    grids = [rng.choice(n, size=min(grid_size, n), replace=False).tolist() for _ in range(draws)]
    res = score_known_difference(spec, {"a_over_b": grids}, labels, validated=True)["a_over_b"]
    return res["rate"]


def _direction_summary(result, direction: str, kd: dict | None) -> dict[str, Any]:
    exps = result.directions[direction].explanations if direction in result.directions else []
    sig = [e.extra.get("significance") for e in exps]
    hit_grids = set((kd or {}).get(direction, {}).get("hit_grids") or [])
    kdd = (kd or {}).get(direction) or {}
    p = [s["p_value_fwer"] for s in sig if s]
    return {"hits": kdd.get("hits"), "total": kdd.get("total"),
            "assessed": bool(p),
            "significant": sum(bool(s and s["significant"]) for s in sig) if p else None,
            "significant_hits": sum(bool(s and s["significant"]) and j in hit_grids
                                    for j, s in enumerate(sig)) if p else None,
            "min_p_fwer": min(p) if p else None}


def _row(case: Case, name: str, test, control, chance: float | None, seconds: float
         ) -> dict[str, Any]:
    from ..evaluation.known_difference import expected_direction

    specs = case.known_difference if isinstance(case.known_difference, list) \
        else [case.known_difference]
    expected = expected_direction(specs[0])
    opposite = "b_over_a" if expected == "a_over_b" else "a_over_b"
    kd_t = (test.scores or {}).get("known_difference")
    kd_c = (control.scores or {}).get("known_difference")
    te, to = _direction_summary(test, expected, kd_t), _direction_summary(test, opposite, kd_t)
    ce, co = (_direction_summary(control, expected, kd_c),
              _direction_summary(control, opposite, kd_c))
    assessed = te["assessed"]
    bsr_t, bsr_c = test.bsr or {}, control.bsr or {}
    tw = (test.info.get("significance_twin") or {}).get("explanations") or {}
    tw_exp = tw.get(expected) or []
    return {
        "case": case.name, "method": name, "expected_direction": expected,
        "hits_expected": te["hits"], "grids_expected": te["total"],
        "hits_opposite": to["hits"], "grids_opposite": to["total"],
        "hits_control": ce["hits"], "grids_control": ce["total"],
        "chance_hit_rate": chance,
        "significant_expected": te["significant"], "significant_hits": te["significant_hits"],
        "significant_opposite": to["significant"],
        "significant_control": (ce["significant"] + co["significant"]) if assessed else None,
        "min_p_fwer_expected": te["min_p_fwer"], "min_p_fwer_opposite": to["min_p_fwer"],
        "min_p_fwer_control": min(x for x in (ce["min_p_fwer"], co["min_p_fwer"])
                                  if x is not None) if assessed else None,
        "detected": bool(te["significant"]) if assessed else None,
        "significant_expected_twin": sum(r["significant"] for r in tw_exp) if tw else None,
        "min_p_fwer_expected_twin": min(r["p_value_fwer"] for r in tw_exp) if tw_exp else None,
        "control_clean": (ce["significant"] + co["significant"] == 0) if assessed else None,
        "bsr_test": bsr_t.get("mean"), "bsr_control": bsr_c.get("mean"),
        "n_null": (test.info.get("significance") or {}).get("n_null"),
        "seconds": seconds, "error": None,
    }


# --------------------------------------------------------------------------- running

def _check_names(suite: Suite, cases: list[str] | None, methods: list[str] | None
                 ) -> tuple[list[Case], list[MethodSpec]]:
    from .methods import method_names

    chosen = list(suite.cases) if not cases else list(cases)
    unknown = [c for c in chosen if c not in CASES]
    if unknown:
        raise RDXInputError(f"unknown benchmark case(s) {unknown}; choose from "
                            f"{', '.join(CASES)}.")
    specs = list(suite.methods)
    if methods:
        known = {m.method for m in SUITES["default"].methods}
        bad = [m for m in methods if m not in known]
        if bad:
            grid = sorted(set(method_names()) & known)
            raise RDXInputError(f"--methods: {bad} are not grid-producing methods of the "
                                f"benchmark; choose from {', '.join(grid)}.")
        by_name = {m.method: m for m in (*SUITES["default"].methods, *suite.methods)}
        specs = [by_name[m] for m in methods]
    return [CASES[c] for c in chosen], specs


def _run_method(store, spec: MethodSpec, X: np.ndarray, Y: np.ndarray, labels: np.ndarray,
                scorer, images, data_digest: str, *, n_null: int | None, progress: bool,
                class_names: list[str] | None = None, twin: np.ndarray | None = None):
    """One method on one comparison: run, score, assess, grids, write (or read if done).

    With ``twin`` (a seed twin of ``Y``) the result is also assessed against the twin null;
    that assessment goes to ``info["significance_twin"]`` (the per-explanation records under
    its ``"explanations"``), the built-in one stays in ``extra["significance"]``.
    """
    from ..backend import seeded
    from ..evaluation.significance import assess
    from ..io import json_digest
    from .methods import MethodContext, method
    from .run import save_result_grids

    draws = spec.n_null if n_null is None or not spec.n_null else n_null
    use_twin = twin is not None and spec.twin and bool(draws)
    fingerprint = json_digest({"method": spec.method, "params": spec.params, "seed": SEED,
                               "n_null": draws, "twin": use_twin, "data": data_digest,
                               "benchmark": BENCHMARK_VERSION})
    if store.is_finished(spec.method, fingerprint):
        res = store.result(spec.method)
        if res is not None:
            return res, (res.run or {}).get("seconds", 0.0)
    t0 = time.perf_counter()
    ctx = MethodContext(labels=labels, seed=SEED, device="cpu")
    runner = method(spec.method)

    def refit(A: np.ndarray, B: np.ndarray):
        with seeded(SEED):
            return runner.run(A, B, dict(spec.params), ctx)

    result = refit(X, Y)
    scorer.score(result)
    if use_twin:
        from ..results.types import MethodResult
        copy = MethodResult.from_json(result.to_json())
        twin_out = assess(copy, X, Y, n_null=draws, random_state=SEED, refit=refit,
                          control_b=twin, progress=progress)
        result.info["significance_twin"] = twin_out
    if draws:
        assess(result, X, Y, n_null=draws, random_state=SEED, refit=refit, progress=progress)
    seconds = time.perf_counter() - t0
    result.run = {"benchmark": True, "method": spec.method, "name": spec.method, "seed": SEED,
                  "fingerprint": fingerprint, "seconds": seconds}
    grids = save_result_grids(result, images, store.method_dir(spec.method),
                              class_names=class_names)
    store.write_result(spec.method, result, extra_files=grids)
    return result, seconds


def run_case(case: Case, specs: list[MethodSpec], out: Path, *, checkpoints: Path,
             scale: float = 1.0, n_null: int | None = None, data_root: str | Path = "data",
             progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train (or load) the case's three models, run every method on the test and the
    control comparison; returns the table rows and the case's record."""
    from ..data import ImageDataset
    from ..data.selection import LazyImages
    from ..evaluation.known_difference import validate_known_difference
    from ..evaluation.scoring import Scorer
    from ..io import array_digest, read_json
    from ..models.training import sidecar_path
    from ..results.store import IMAGES_JSON, ComparisonRun

    say = print if progress else (lambda *a, **k: None)
    t0 = time.perf_counter()
    ckpt = {}
    for key, recipe, seed in (("a", case.a, SEED), ("b", case.b, SEED),
                              ("b_twin", case.b, TWIN_SEED)):
        # a cached model loads at once; a new one loads its data (seconds) before its bar
        with working(f"  [{case.name}] model {key}: {recipe.folder(seed)}", show=progress):
            ckpt[key] = train_model(recipe, seed, checkpoints=checkpoints,
                                    data_root=data_root, progress=progress)
    t_train = time.perf_counter() - t0
    with working(f"  [{case.name}] images and features of the three models", show=progress):
        images, labels, names = comparison_images(case.images, scale=scale,
                                                  data_root=data_root)
        reps = {"a": features(ckpt["a"], images, mask=case.a.mask),
                "b": features(ckpt["b"], images, mask=case.b.mask),
                "b_twin": features(ckpt["b_twin"], images, mask=case.b.mask)}
    kd = validate_known_difference(case.known_difference, f"cases.{case.name}.known_difference")
    chance = chance_hit_rate(kd if isinstance(kd, list) else kd, labels)
    ds = ImageDataset(name=f"benchmark_{case.name}", labels=labels, class_names=names,
                      ids=[str(i) for i in range(len(labels))], images=images)
    lazy = LazyImages(ds, np.arange(len(labels)))
    results: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    errors: dict[str, str] = {}
    for pair, (xa, xb) in {"test": ("a", "b"), "control": ("b_twin", "b")}.items():
        X, Y = reps[xa], reps[xb]
        store = ComparisonRun(out / case.name / pair)
        store.write_representations(X, Y, labels)
        store.write_json(IMAGES_JSON, {"dataset": ds.name, "n_images": len(labels),
                                       "class_names": names, "ids": ds.ids,
                                       "labels": labels, "indices": list(range(len(labels)))})
        scorer = Scorer(X, Y, labels=labels, known_difference=kd, chance_draws=200)
        digest = array_digest(X, Y, labels)
        for spec in specs:
            draws = spec.n_null if n_null is None or not spec.n_null else n_null
            # fit, scoring and the null draws of significance (each a refit): the longest
            # step of the suite; the significance bar shows inside it
            doing = f"  [{case.name}/{pair}] {spec.method}: fit, scoring" + (
                f", {draws} null draws" if draws else "")
            try:
                with working(doing, show=progress, keep=False):   # said below, with time
                    res, sec = _run_method(store, spec, X, Y, labels, scorer, lazy, digest,
                                           n_null=n_null, progress=progress,
                                           class_names=names,
                                           twin=reps["b_twin"] if pair == "test" else None)
            except RDXInputError as exc:   # one method failing must not stop the suite
                errors[spec.method] = f"{pair}: {exc}"
                say(f"  [{case.name}/{pair}] {spec.method}: failed: {exc}")
                continue
            results.setdefault(spec.method, {})[pair] = res
            seconds[spec.method] = seconds.get(spec.method, 0.0) + sec
            sig = res.info.get("significance")
            say(f"  [{case.name}/{pair}] {spec.method}: {sec:.1f} s"
                + (f", min p_fwer {sig['min_p_value_fwer']:.3f}" if sig else ""))
    rows = [_row(case, spec.method, results[spec.method]["test"],
                 results[spec.method]["control"], chance, seconds[spec.method])
            if spec.method not in errors else
            {**{k: None for k in CSV_COLUMNS}, "case": case.name, "method": spec.method,
             "error": errors[spec.method]}
            for spec in specs]
    accuracy = {k: read_json(sidecar_path(p)).get("train_accuracy") for k, p in ckpt.items()}
    record = {"description": case.description, "n_images": int(len(labels)),
              "known_difference": kd, "chance_hit_rate": chance,
              "recipes": {"a": dataclasses.asdict(case.a), "b": dataclasses.asdict(case.b)},
              "seeds": {"a": SEED, "b": SEED, "b_twin": TWIN_SEED},
              "checkpoints": {k: str(p) for k, p in ckpt.items()},
              "train_accuracy": accuracy, "seconds_training": t_train,
              "seconds": time.perf_counter() - t0}
    return rows, record


def run_benchmark(out: str | Path = "outputs/benchmark", *, quick: bool = False,
                  cases: list[str] | None = None, methods: list[str] | None = None,
                  n_null: int | None = None, checkpoints: str | Path = "checkpoints/benchmark",
                  data_root: str | Path = "data", progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the suite and write ``benchmark.json``, ``.csv`` and ``.md``.

    Returns the JSON document: ``rows`` (one per case × method), ``summary`` (per assessed
    method: cases detected and controls clean at α = 0.05 family-wise), ``cases``,
    ``timings_s`` and the machine and versions.
    """
    from ..io import versions, write_json_atomic

    suite = SUITES["quick" if quick else "default"]
    chosen, specs = _check_names(suite, cases, methods)
    if n_null is not None:
        from ..validation import check_int
        check_int(n_null, "--n-null", minimum=1)
    for dataset in sorted({c.images.dataset for c in chosen}):
        _source(dataset, "train", data_root)     # a missing dataset fails before any work
    out = Path(out)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    records: dict[str, Any] = {}
    say = print if progress else (lambda *a, **k: None)
    for case in chosen:
        say(f"[benchmark] {case.name}: {case.description}")
        case_rows, records[case.name] = run_case(
            case, specs, out, checkpoints=Path(checkpoints), scale=suite.per_class_scale,
            n_null=n_null, data_root=data_root, progress=progress)
        rows += case_rows
    summary = summarize(rows)
    doc = {"suite": "quick" if quick else "default", "alpha": 0.05, "rows": rows,
           "summary": summary, "cases": records,
           "methods": [dataclasses.asdict(m) for m in specs],
           "timings_s": {"total": time.perf_counter() - t0,
                         **{c: r["seconds"] for c, r in records.items()}},
           "machine": {"cpu_count": __import__("os").cpu_count(),
                       "platform": platform.platform()},
           "versions": versions()}
    write_json_atomic(out / "benchmark.json", doc)
    write_table_csv(out / "benchmark.csv", rows)
    text = markdown_table(doc)
    from ..io import atomic_write
    atomic_write(out / "benchmark.md", lambda fh: fh.write(text.encode()))
    say(text)
    return doc


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per assessed method: in how many cases an expected-direction explanation is
    significant, and in how many controls none is."""
    out: dict[str, Any] = {}
    for r in rows:
        if r.get("detected") is None:
            continue
        s = out.setdefault(r["method"], {"cases": 0, "detected": 0, "controls_clean": 0,
                                         "significant_hits": 0})
        s["cases"] += 1
        s["detected"] += int(r["detected"])
        s["controls_clean"] += int(r["control_clean"])
        s["significant_hits"] += int(bool(r["significant_hits"]))
        if r.get("significant_expected_twin") is not None:
            s["detected_twin_null"] = s.get("detected_twin_null", 0) + \
                int(r["significant_expected_twin"] > 0)
    return out


CSV_COLUMNS = ("case", "method", "expected_direction", "hits_expected", "grids_expected",
               "hits_opposite", "grids_opposite", "hits_control", "grids_control",
               "chance_hit_rate", "significant_expected", "significant_hits",
               "significant_opposite", "significant_control", "min_p_fwer_expected",
               "min_p_fwer_opposite", "min_p_fwer_control", "detected", "control_clean",
               "significant_expected_twin", "min_p_fwer_expected_twin",
               "bsr_test", "bsr_control", "n_null", "seconds", "error")


def write_table_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    import csv
    import io

    from ..io import atomic_write

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r[k]) for k in CSV_COLUMNS})
    atomic_write(Path(path), lambda fh: fh.write(buf.getvalue().encode()))
    return Path(path)


def _frac(h: Any, t: Any) -> str:
    return "—" if h is None or t is None else f"{h}/{t}"


def _p(p: Any) -> str:
    return "—" if p is None else f"{p:.3f}"


def markdown_table(doc: dict[str, Any]) -> str:
    """The table as Markdown: hits (expected direction, opposite, control), chance, and
    the calibrated strength (FWER p of the strongest expected-direction explanation, number
    of significant ones, the control's smallest p)."""
    lines = ["| case | method | hits expected | hits opposite | hits control | chance/grid "
             "| significant expected (hits) | min p expected | min p expected, twin null "
             "| min p control | BSR test | BSR control |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if r.get("error"):
            lines.append(f"| {r['case']} | {r['method']} | failed: {r['error'][:80]} "
                         "| | | | | | | | | |")
            continue
        sig = "—" if r["significant_expected"] is None else \
            f"{r['significant_expected']} ({r['significant_hits']})"
        chance = "—" if r["chance_hit_rate"] is None else f"{r['chance_hit_rate']:.2g}"
        bt = "—" if r["bsr_test"] is None else f"{r['bsr_test']:.2f}"
        bc = "—" if r["bsr_control"] is None else f"{r['bsr_control']:.2f}"
        lines.append(
            f"| {r['case']} | {r['method']} | {_frac(r['hits_expected'], r['grids_expected'])} "
            f"| {_frac(r['hits_opposite'], r['grids_opposite'])} "
            f"| {_frac(r['hits_control'], r['grids_control'])} | {chance} | {sig} "
            f"| {_p(r['min_p_fwer_expected'])} | {_p(r.get('min_p_fwer_expected_twin'))} "
            f"| {_p(r['min_p_fwer_control'])} | {bt} | {bc} |")
    lines.append("")
    for m, s in doc["summary"].items():
        lines.append(f"{m}: significant expected-direction explanation in {s['detected']}/"
                     f"{s['cases']} cases (a significant hit in {s['significant_hits']}), "
                     f"no significant explanation in {s['controls_clean']}/{s['cases']} seed "
                     f"controls (α = {doc['alpha']}, family-wise)"
                     + (f"; with B's seed twin as the null: significant in "
                        f"{s['detected_twin_null']}/{s['cases']} cases." if
                        "detected_twin_null" in s else "."))
    lines.append(f"total {doc['timings_s']['total']:.0f} s on {doc['machine']['cpu_count']} "
                 "CPU cores")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- command line

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rdx benchmark``."""
    parser.add_argument("--out", default="outputs/benchmark",
                        help="output folder (default: outputs/benchmark)")
    parser.add_argument("--quick", action="store_true",
                        help="the CI-sized subset: 2 cases, half the images, rdx/kmeans/pca")
    parser.add_argument("--cases", help=f"comma-separated cases ({', '.join(CASES)})")
    parser.add_argument("--methods", help="comma-separated methods (default: the suite's)")
    parser.add_argument("--n-null", type=int, default=None,
                        help="null draws of every assessed method (default: the suite's)")
    parser.add_argument("--checkpoints", default="checkpoints/benchmark",
                        help="model cache (default: checkpoints/benchmark)")
    parser.add_argument("--data-root", default="data", help="dataset root (default: data)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def _split(text: str | None) -> list[str] | None:
    return None if not text else [t.strip() for t in text.split(",") if t.strip()]


def run_command(args: argparse.Namespace) -> int:
    """``rdx benchmark``: run the suite; bad input raises RDXInputError (exit 2)."""
    run_benchmark(args.out, quick=args.quick, cases=_split(args.cases),
                  methods=_split(args.methods), n_null=args.n_null,
                  checkpoints=args.checkpoints, data_root=args.data_root,
                  progress=not args.quiet)
    return 0
