"""The benchmark's cases and suites: the training recipes of the models with an implanted
difference, the images each case is shown, its ``known_difference`` declaration, and the
methods (with their parameters and null draws) of the ``default`` and ``quick`` suites."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ...evaluation.significance import DEFAULT_N_NULL


#: The spurious cue: a bright 5×5 square in the top-left corner.
CUE_BOX = (1, 6, 1, 6)


#: The region model A cannot see (bottom-right 10×10 corner) and the marker drawn in it.
MASK_BOX = (18, 28, 18, 28)


MARKER_BOX = (20, 26, 20, 26)


#: Seeds of the models compared (A, B) and of B's twin (the control).
SEED, TWIN_SEED = 0, 1

#: The family of every model of the benchmark (the project's ConvNet): it selects the field
#: null's calibration where a comparison has no twin.
FAMILY = "convnet"


#: Part of every result's fingerprint: bump when what a result holds changes.
BENCHMARK_VERSION = 3


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
        from ...io import json_digest
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
    """Cases and methods; with ``twins`` = T > 0 every case also trains T seed twins of A
    (seeds 1 … T) and of B for each comparison (seeds 1 … T + 1: B's seed-1 twin is the
    control's A), and the assessed methods are tested against the twin null — exact null
    draws, calibrated whatever the family — in the test and in the control comparison."""

    cases: tuple[str, ...]
    methods: tuple[MethodSpec, ...]
    per_class_scale: float = 1.0
    twins: int = 0


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
        MethodSpec("crosscoder", _K),
        MethodSpec("dfc_crosscoder", _K),
    )),
    "quick": Suite(("merged", "coarse"), (
        MethodSpec("rdx", {**_K, "gamma": 0.1}, n_null=DEFAULT_N_NULL),
        MethodSpec("kmeans", _K, n_null=DEFAULT_N_NULL),
        MethodSpec("pca", _K),
    # two seed twins of each model: six exact null draws per comparison. With one twin each
    # (two exact draws and four field draws matched to them) the merged case's strongest
    # expected-direction explanation had p 0.15 at this size and 0.39 at half of it; with
    # two, 0.017 (half of the images: 0.12, so the suite shows all of them)
    ), twins=2),
    # The paper's size: its MNIST comparisons show 5000 images (10 classes × 500, or
    # 20 × 250 with flipped copies); the Fashion-MNIST cases at 500/120 of their images
    # are exactly that. ``coarse`` is left out: digits has under 200 images per class.
    # RDX against the dictionary methods (SAEs, crosscoders) at that size.
    "paper": Suite(("merged", "flip", "cue", "mask"), (
        MethodSpec("rdx", {**_K, "gamma": 0.1}, n_null=DEFAULT_N_NULL, twin=True),
        MethodSpec("sae", {**_K, "n_epochs": 100}),
        MethodSpec("topk_sae", {**_K, "n_epochs": 50}),
        MethodSpec("usae", {**_K, "n_epochs": 100}),
        MethodSpec("crosscoder", _K),
        MethodSpec("dfc_crosscoder", _K),
    ), per_class_scale=500 / 120),
}
