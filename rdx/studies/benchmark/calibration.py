"""Seed-twin null suite: does ``--significance`` hold on models it was never tuned to?

A *seed-twin pair* is two models trained with the same recipe, differing only in their
training seed: any explanation RDX finds between them is seed noise, so a calibrated test
flags "a significant explanation" in at most α of these comparisons. An *implanted case*
compares a model that lacks a distinction (two classes trained as one label) with one that
has it: a test with power flags an explanation in the expected direction.

The suite spans three families that train on 2 CPU cores in a few minutes, from shipped
recipes (no weights are shipped; features are cached under ``<cache>/``):

``digits-mlp``  scikit-learn's digits (1797 images, 64 pixels), MLPs of widths 32/64/128
                and 1 or 2 hidden layers; features of the last hidden layer of all images;
                early (1 epoch) and final (20 epochs) checkpoints of every run.
``fashion-cnn`` Fashion-MNIST (Debian's ``dataset-fashion-mnist``), the project's ConvNet of
                width 8 or 16 trained 1 (early) or 6 (final) epochs on 3000 images; ``gap``
                features of 1200 test images.
``fashion-vit`` the project's small ViT (width 32, 2 blocks) trained 1 or 4 epochs on the
                same images; pre-logit features of the same 1200 test images.

:func:`suite_pairs` lists every comparison (twins and implanted) with the features it needs;
:func:`heldout_pairs` a second set from other recipes and seeds, fixed before it was first
evaluated (out-of-sample figures); :func:`load_pair` trains or loads both models and returns
their features. The evaluation (false-positive rate with a binomial interval, power) is
``benchmarks/bench_significance.py``.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import RDXInputError

#: Images of the Fashion-MNIST comparisons per class (test split, seeded selection).
FASHION_PER_CLASS = 120
#: Seeds of the held-out twins of both models of an implanted case of :func:`suite_pairs`
#: (A, merged, is seed 0; B, fine, is seed 1).
IMPLANTED_TWIN_SEEDS = (2, 3)


@dataclass(frozen=True)
class Model:
    """One trained model of the suite: family, architecture, schedule, implanted merge."""

    family: str               # "digits-mlp", "fashion-cnn", "fashion-vit"
    width: int
    depth: int = 1
    epochs: int = 20
    merge: tuple[tuple[int, int], ...] = ()
    seed: int = 0

    def key(self) -> str:
        from ...io import json_digest
        recipe = dataclasses.asdict(self)
        seed = recipe.pop("seed")
        return f"{self.family}-{json_digest(recipe)[:10]}_s{seed}"

    def describe(self) -> str:
        arch = {"digits-mlp": f"MLP w{self.width}×{self.depth}",
                "fashion-cnn": f"ConvNet w{self.width}",
                "fashion-vit": f"ViT w{self.width}×{self.depth}"}[self.family]
        merged = "".join(f" merge {a}|{b}" for a, b in self.merge)
        return f"{arch} {self.epochs} ep{merged} s{self.seed}"


@dataclass(frozen=True)
class Pair:
    """A comparison of the suite: ``kind`` is ``twin`` (no systematic difference) or
    ``implanted`` (A merges ``classes``: expected direction ``a_over_b``)."""

    name: str
    kind: str
    a: Model
    b: Model
    classes: tuple[int, ...] = ()
    #: Seeds of an implanted case's held-out twins, of A's recipe and of B's.
    twin_seeds: tuple[int, ...] = IMPLANTED_TWIN_SEEDS

    @property
    def family(self) -> str:
        return self.a.family


def _twins(m: Model, seeds: tuple[tuple[int, int], ...]) -> list[Pair]:
    out = []
    for s, t in seeds:
        a, b = dataclasses.replace(m, seed=s), dataclasses.replace(m, seed=t)
        out.append(Pair(f"twin {a.describe()} vs s{t}", "twin", a, b))
    return out


def _implanted(fine: Model, merges: tuple[tuple[int, int], ...], seeds: tuple[int, int],
               twin_seeds: tuple[int, ...]) -> list[Pair]:
    """A (``seeds[0]``) trained with each merge's two classes as one label against the fine
    model B (``seeds[1]``)."""
    out = []
    for a_cls, b_cls in merges:
        a = dataclasses.replace(fine, merge=((b_cls, a_cls),), seed=seeds[0])
        b = dataclasses.replace(fine, seed=seeds[1])
        out.append(Pair(f"implanted {a.describe()} vs fine s{b.seed}", "implanted", a, b,
                        (a_cls, b_cls), twin_seeds))
    return out


def suite_pairs() -> list[Pair]:
    """Every comparison of the suite: 72 seed-twin pairs and 17 implanted cases."""
    pairs: list[Pair] = []
    # Four disjoint pairs per recipe: no model is in two twin comparisons, so the
    # comparisons' false positives are independent draws (what a binomial interval assumes).
    two = ((0, 1), (2, 3), (4, 5), (6, 7))
    for width in (32, 64, 128):
        for depth in (1, 2):
            for epochs in (1, 20):
                pairs += _twins(Model("digits-mlp", width, depth, epochs), two)
    for width in (8, 16):
        for epochs in (1, 6):
            pairs += _twins(Model("fashion-cnn", width, 1, epochs), two)
    for epochs in (1, 4):
        pairs += _twins(Model("fashion-vit", 32, 2, epochs), two)

    # Merges of classes the fine model tells apart (a linear probe on its features confuses
    # them in under 10 % of images): merging classes it already confuses — Fashion-MNIST's
    # T-shirt/shirt or pullover/coat, 24–33 % confused by the ConvNet, or sandal/sneaker by
    # the ViT — implants almost nothing, and not even the twin null detects it.
    digit_merges = ((3, 5), (4, 9), (1, 7), (3, 8), (5, 9))
    for fine, merges in ((Model("digits-mlp", 64, 1, 20), digit_merges),
                         (Model("digits-mlp", 128, 2, 20), digit_merges),
                         (Model("fashion-cnn", 16, 1, 6), ((5, 7), (1, 8), (0, 7), (2, 9))),
                         (Model("fashion-vit", 32, 2, 4), ((1, 7), (0, 9), (2, 5)))):
        pairs += _implanted(fine, merges, (0, 1), IMPLANTED_TWIN_SEEDS)
    return pairs


#: Recipes of the held-out set: none is in :func:`suite_pairs` (other widths, depths and
#: schedules), and neither are its seeds (8–15).
HELDOUT_TWIN_RECIPES = (Model("digits-mlp", 48, 1, 5), Model("digits-mlp", 48, 1, 20),
                        Model("digits-mlp", 96, 3, 5), Model("digits-mlp", 96, 3, 20),
                        Model("fashion-cnn", 12, 1, 3), Model("fashion-cnn", 12, 1, 6),
                        Model("fashion-vit", 48, 1, 2), Model("fashion-vit", 48, 1, 4))
#: Fine recipes of the held-out implanted cases, each with the merges :func:`draw_merges`
#: drew for it (``count=4, seed=0``) before the set was first evaluated.
HELDOUT_IMPLANTED = (
    (Model("digits-mlp", 96, 3, 20, seed=9), ((1, 5), (2, 8), (3, 7), (5, 6))),
    (Model("fashion-cnn", 12, 1, 6, seed=9), ((1, 5), (2, 9), (3, 7), (5, 7))),
    (Model("fashion-vit", 48, 1, 4, seed=9), ((1, 5), (2, 9), (3, 7), (4, 9))))


def heldout_pairs() -> list[Pair]:
    """A second suite that played no part in designing the null: 32 seed-twin pairs and 12
    implanted cases from recipes and seeds :func:`suite_pairs` does not use.

    It was fixed — recipes, seeds, and merges drawn by rule (:func:`draw_merges`: four
    random pairs of classes that the fine model's linear probe confuses in under 10 % of
    their images) — before it was first evaluated, and is evaluated with the null as
    released, so its false-positive rate and power are out-of-sample figures. Twins pair
    seeds 8–9, 10–11, 12–13 and 14–15; an implanted case is A (merged, seed 8) against B
    (fine, seed 9) with held-out twins of seeds 10 and 11 of both recipes.
    """
    pairs: list[Pair] = []
    for m in HELDOUT_TWIN_RECIPES:
        pairs += _twins(m, ((8, 9), (10, 11), (12, 13), (14, 15)))
    for fine, merges in HELDOUT_IMPLANTED:
        pairs += _implanted(fine, merges, (8, 9), (10, 11))
    return pairs


#: The suites :mod:`benchmarks/bench_significance.py` evaluates, by name.
SUITES = {"design": suite_pairs, "heldout": heldout_pairs}


def probe_confusion(F: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """How often a linear probe on features ``F`` confuses each two classes: ``C[a, b]`` is
    the share of the images of classes a and b that a cross-validated (5-fold,
    standardised, multinomial logistic) probe assigns to the other one of the two."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import confusion_matrix
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    labels = np.asarray(labels)
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    pred = cross_val_predict(probe, np.asarray(F, dtype=np.float64), labels,
                             cv=StratifiedKFold(5, shuffle=True, random_state=0))
    counts = confusion_matrix(labels, pred, labels=np.unique(labels)).astype(np.float64)
    sizes = counts.sum(axis=1)
    return (counts + counts.T) / (sizes[:, None] + sizes[None, :])


def draw_merges(fine: Model, *, count: int = 4, seed: int = 0, limit: float = 0.1,
                **kw) -> tuple[tuple[int, int], ...]:
    """``count`` pairs of classes ``(a, b)``, ``a < b``, drawn at random (``seed``) among
    those the fine model's probe confuses in under ``limit`` of their images
    (:func:`probe_confusion`): distinctions the fine model makes, so merging them implants
    a difference."""
    C = probe_confusion(model_features(fine, **kw),
                        comparison_labels(fine.family, kw.get("data_root", "data")))
    eligible = [(a, b) for a, b in zip(*np.triu_indices(len(C), 1)) if C[a, b] < limit]
    if len(eligible) < count:
        raise RDXInputError(f"{fine.describe()}: only {len(eligible)} pairs of classes are "
                            f"confused in under {limit:g} of their images; {count} needed.")
    picks = np.random.default_rng(seed).choice(len(eligible), size=count, replace=False)
    return tuple((int(eligible[i][0]), int(eligible[i][1])) for i in sorted(picks))


#: Training seeds of every recipe in the suite (twins pair 0–1, 2–3, 4–5 and 6–7).
SEEDS = (0, 1, 2, 3, 4, 5, 6, 7)


def twin_controls(pair: Pair, count: int = 2) -> tuple[list[Model], list[Model]]:
    """Seed twins of the pair's models that the pair does not use, for the twin null
    (``control_a``, ``control_b`` of :func:`rdx.evaluation.significance.assess`).

    ``count`` twins of each model (at most 6). A suite's recipes have eight seeds (0–7;
    8–15 in the held-out set). A twin pair's seeds lie in a block of four (0–3, 4–7, ...);
    the block's other two seeds come first, then the other four of its eight — twins of
    both A and B (one recipe). An implanted case has ``pair.twin_seeds`` of its merged
    recipe and of its fine one first, then its eight's other seeds. With the default two,
    every comparison gets four twin comparisons, two with twins of A and two with twins of B.
    """
    if not 1 <= count <= 6:
        raise RDXInputError(f"count must be 1 to 6 twins per model, got {count}.")
    used = {pair.a.seed, pair.b.seed}
    eight = range(8 * (pair.a.seed // 8), 8 * (pair.a.seed // 8) + 8)
    if pair.kind == "twin":
        first = 4 * (pair.a.seed // 4)
        block = [s for s in range(first, first + 4) if s not in used]
        seeds = (block + [s for s in eight if s not in used and s not in block])[:count]
        others = [dataclasses.replace(pair.a, seed=s) for s in seeds]
        return others, others
    seeds = (list(pair.twin_seeds)
             + [s for s in eight if s not in used and s not in pair.twin_seeds])[:count]
    return ([dataclasses.replace(pair.a, seed=s) for s in seeds],
            [dataclasses.replace(pair.b, seed=s) for s in seeds])


# --------------------------------------------------------------------------- data

def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def comparison_labels(family: str, data_root: str | Path = "data") -> np.ndarray:
    """Labels of the images a family's comparisons are computed on."""
    if family == "digits-mlp":
        return _digits()[1]
    from .cases import ImageSet
    from .data import comparison_images
    return comparison_images(ImageSet("fashion_mnist", FASHION_PER_CLASS),
                             data_root=data_root)[1]


def _merged(labels: np.ndarray, merge: tuple[tuple[int, int], ...]) -> np.ndarray:
    for src, dst in merge:
        labels = np.where(labels == src, dst, labels)
    return np.searchsorted(np.unique(labels), labels)


def _digits_mlp(m: Model) -> np.ndarray:
    """Last hidden layer of an MLP trained on all digits (Adam, batch 32)."""
    import torch
    from torch import nn

    from ...backend import seeded

    X, y = _digits()
    y = _merged(y, m.merge)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    with seeded(m.seed):
        layers: list[nn.Module] = []
        width_in = X.shape[1]
        for _ in range(m.depth):
            layers += [nn.Linear(width_in, m.width), nn.ReLU()]
            width_in = m.width
        body = nn.Sequential(*layers)
        model = nn.Sequential(body, nn.Linear(width_in, int(y.max()) + 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(m.seed)
        for _ in range(m.epochs):
            for batch in torch.randperm(len(Xt), generator=gen).split(32):
                opt.zero_grad()
                nn.functional.cross_entropy(model(Xt[batch]), yt[batch]).backward()
                opt.step()
        with torch.no_grad():
            return body(Xt).numpy().astype(np.float32)


def _fashion(m: Model, checkpoints: Path, data_root: str | Path) -> np.ndarray:
    from .cases import ImageSet, Recipe
    from .data import comparison_images, features, train_model, training_set

    recipe = Recipe(f"calib_{m.family}_w{m.width}", "fashion_mnist", per_class=300,
                    merge=m.merge, epochs=m.epochs, width=m.width)
    images = comparison_images(ImageSet("fashion_mnist", FASHION_PER_CLASS),
                               data_root=data_root)[0]
    if m.family == "fashion-cnn":
        return features(train_model(recipe, m.seed, checkpoints=checkpoints,
                                    data_root=data_root, progress=False), images)
    import torch

    from ...models.checkpoint import grey_transform
    from ...models.vit import load_vit, train_vit

    path = checkpoints / f"{recipe.folder(m.seed)}_vit{m.depth}" / "last.pt"
    if not path.is_file():
        train_vit(training_set(recipe, data_root=data_root), path, epochs=m.epochs,
                  arch={"embed_dim": m.width, "depth": m.depth, "num_heads": 2},
                  seed=m.seed, progress=False, batch_size=64)
    model = load_vit(path)[0]
    x = grey_transform(28).batch(np.ascontiguousarray(images))
    with torch.no_grad():
        return np.concatenate([model.forward_head(model.forward_features(x[i:i + 500]),
                                                  pre_logits=True).numpy()
                               for i in range(0, len(x), 500)]).astype(np.float32)


def model_features(m: Model, *, cache: str | Path = "checkpoints/calibration",
                   data_root: str | Path = "data") -> np.ndarray:
    """The model's features of its family's comparison images, trained and cached once
    (``<cache>/<key>.npz``, written atomically)."""
    from ...io import save_npz_atomic

    cache = Path(cache)
    path = cache / f"{m.key()}.npz"
    if path.is_file():
        with np.load(path) as z:
            return z["features"]
    if m.family == "digits-mlp":
        F = _digits_mlp(m)
    elif m.family in ("fashion-cnn", "fashion-vit"):
        F = _fashion(m, cache / "models", data_root)
    else:
        raise RDXInputError(f"unknown model family {m.family!r}")
    cache.mkdir(parents=True, exist_ok=True)
    save_npz_atomic(path, features=F, model=np.asarray(m.describe()))
    return F


def load_pair(pair: Pair, **kw) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features of both models of a comparison and the images' labels."""
    return model_features(pair.a, **kw), model_features(pair.b, **kw), \
        comparison_labels(pair.family, kw.get("data_root", "data"))


def class_separation(F: np.ndarray, labels: np.ndarray, a: int, b: int) -> float:
    """Separation of classes ``a`` and ``b`` in features ``F``: the distance between their
    centroids over their within-class spread (the root mean squared distance of an image
    to its class centroid, averaged over the two classes). Scale-free; small when the
    representation puts the two classes on top of each other."""
    F = np.asarray(F, dtype=np.float64)
    Xa, Xb = F[labels == a], F[labels == b]
    if len(Xa) == 0 or len(Xb) == 0:
        raise RDXInputError(f"classes {a} and {b} both need images; counts {len(Xa)}, {len(Xb)}.")
    ca, cb = Xa.mean(axis=0), Xb.mean(axis=0)
    within = math.sqrt(0.5 * (((Xa - ca) ** 2).sum(axis=1).mean()
                              + ((Xb - cb) ** 2).sum(axis=1).mean()))
    return float(np.linalg.norm(ca - cb) / within) if within > 0 else math.inf


def implant_strength(pair: Pair, **kw) -> dict[str, list[float] | float]:
    """How much an implanted case implants, measured without RDX: the merged classes'
    :func:`class_separation` in the merged model A and the fine model B, each with its
    held-out twins (:func:`twin_controls`), and ``ratio`` = mean over A's / mean over B's.
    A ratio near 1 means the merge left the representation as it was (nothing to detect);
    spread among A's seeds means the recipe itself is unsure whether to merge."""
    if pair.kind != "implanted":
        raise RDXInputError(f"{pair.name} is not an implanted case.")
    labels = comparison_labels(pair.family, kw.get("data_root", "data"))
    twins_a, twins_b = twin_controls(pair)
    a_cls, b_cls = pair.classes
    sep_a = [class_separation(model_features(m, **kw), labels, a_cls, b_cls)
             for m in [pair.a, *twins_a]]
    sep_b = [class_separation(model_features(m, **kw), labels, a_cls, b_cls)
             for m in [pair.b, *twins_b]]
    return {"a": sep_a, "b": sep_b, "ratio": float(np.mean(sep_a) / np.mean(sep_b))}


__all__ = ["HELDOUT_IMPLANTED", "HELDOUT_TWIN_RECIPES", "IMPLANTED_TWIN_SEEDS", "SEEDS",
           "SUITES", "Model", "Pair", "class_separation", "comparison_labels", "draw_merges",
           "heldout_pairs", "implant_strength", "load_pair", "model_features",
           "probe_confusion", "suite_pairs", "twin_controls"]
