"""Training presets: the ConvNet checkpoints the MNIST experiments use, and the Fashion-MNIST,
digits and butterflies ones of the quickstart and the training-dynamics study.

:func:`train_preset` is what ``rdx train --preset NAME`` runs for each model (and each seed
twin, in :func:`twin_folder`). Each preset writes ``<out>/<preset>/epoch=E-step=S.pt`` (+
``.pt.json`` sidecars) and ``last.pt``; see :mod:`rdx.models.checkpoint` for the format.
Training follows the authors' checkpoints (Adam + OneCycleLR, cross-entropy, batch 128,
ConvNet 32/64 channels, images normalised to [-1, 1]); the epochs of the MNIST
modification models are not recorded in the paper and are set to 5 like ``mnist_835``.

``digits`` (scikit-learn's 8×8 images) is resized to 28×28 (PIL bilinear) by the transform,
so it uses the same network, receptive fields and pooling as the MNIST models; the resize
is recorded in the checkpoints' ``meta["transform"]``.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .. import validation as V
from ..errors import RDXInputError

MNIST_835_STEPS = (0, 32, 56, 136, 160, 184, 272)


@dataclass(frozen=True)
class Preset:
    """One training run: data, schedule and which checkpoints to keep."""

    description: str
    dataset: str
    class_subset: tuple[int, ...] | None = None
    per_class: int | None = None          # images per class (seeded selection); None = all
    test: bool = True                     # measure accuracy on the dataset's test split
    epochs: int = 5
    batch_size: int = 128
    lr: float = 1e-3
    save_every: tuple = ("epoch",)
    size: int = 28
    early: str | None = None              # the checkpoint the experiments compare to last.pt
    selection_seed: int = 0
    root: str | None = None               # image folder under --data-root (imagefolder)
    extra: dict = field(default_factory=dict)


PRESETS: dict[str, Preset] = {
    "mnist_835": Preset(
        "MNIST digits 8, 3, 5 (labels 0, 1, 2 in that order); the paper's strong "
        "(epoch=1-step=184) vs expert (last) comparison",
        "mnist", class_subset=(8, 3, 5), save_every=("epoch", *MNIST_835_STEPS),
        early="epoch=1-step=184.pt"),
    "mnist_expert": Preset("standard MNIST, 10 classes", "mnist"),
    "mnist_m35": Preset("MNIST with 5 labelled as 3 (10 outputs, 5 never a target)",
                        "mnist_m35"),
    "mnist_m49": Preset("MNIST with 9 labelled as 4", "mnist_m49"),
    "mnist_hflip": Preset("MNIST + left-right mirrored copies, same labels", "mnist_hflip"),
    "mnist_hflip_nl": Preset("MNIST + mirrored copies labelled 10-19 (20 classes)",
                             "mnist_hflip_nl"),
    "mnist_vflip": Preset("MNIST + upside-down copies, same labels", "mnist_vflip"),
    "mnist_vflip_nl": Preset("MNIST + upside-down copies labelled 10-19 (20 classes)",
                             "mnist_vflip_nl"),
    # Pullover, coat and shirt are Fashion-MNIST's most confused classes, so an early
    # checkpoint and the final one differ clearly. 1500 training images per class, batch 64
    # and max lr 1e-2 (more, larger updates per image than the MNIST recipe) reach the
    # architecture's plateau (~81 % train accuracy) in 6 epochs, about a minute on 2 CPU
    # cores (the quickstart trains it).
    "fashion_pcs": Preset(
        "Fashion-MNIST pullover/coat/shirt (classes 2, 4, 6 → 0, 1, 2), 1500 train images "
        "per class; early (epoch=1-step=142) vs final checkpoint",
        "fashion_mnist", class_subset=(2, 4, 6), per_class=1500, epochs=6, batch_size=64,
        lr=1e-2, save_every=("epoch",), early="epoch=1-step=142.pt"),
    "fashion_expert": Preset("Fashion-MNIST, all 10 classes", "fashion_mnist"),
    # Training dynamics (scripts/training_dynamics.py): the workshop paper's setup — a
    # network trained from scratch on five classes, three of them hard to tell apart, every
    # checkpoint compared with the final one. Trouser and bag are the easy classes; pullover,
    # coat and shirt the confused ones. 400 training images per class (~2000, like the
    # paper's butterflies) are also the probe set; 20 epochs of 32 steps with checkpoints at
    # steps 0, 4, 8, 16 and every epoch end (24 checkpoints + last.pt).
    "fashion5_dynamics": Preset(
        "Fashion-MNIST trouser/pullover/coat/shirt/bag (classes 1, 2, 4, 6, 8 → 0..4), 400 "
        "train images per class, 20 epochs, 24 checkpoints for training_dynamics.py",
        "fashion_mnist", class_subset=(1, 2, 4, 6, 8), per_class=400, epochs=20,
        batch_size=64, lr=1e-2, save_every=("epoch", 0, 4, 8, 16)),
    # The paper's butterflies (Mac Aodha et al. 2018; five species, three of them confusable)
    # for users who have them as data/butterflies/<species>/<image>; RGB resized to 64×64,
    # no test split (the probe set is the training set, as in the paper).
    "butterflies_dynamics": Preset(
        "butterflies image folder (data/butterflies/<species>/*), 64×64 RGB, 50 epochs, "
        "checkpoints every epoch for training_dynamics.py",
        "imagefolder", root="butterflies", test=False, epochs=50, batch_size=64, lr=1e-2,
        save_every=("epoch", 0), size=64),
    "digits": Preset(
        "scikit-learn digits (1797 8×8 images resized to 28×28, 10 classes; no test split)",
        "digits", test=False, epochs=6, batch_size=64, lr=1e-2, save_every=("epoch", 0),
        early="epoch=2-step=87.pt"),
}
GROUPS = {"mnist_all": [name for name in PRESETS if name.startswith("mnist_")]}


def preset_table() -> str:
    """One line per preset and group (``rdx train --list``)."""
    lines = []
    for name, p in PRESETS.items():
        classes = "all" if p.class_subset is None else ",".join(map(str, p.class_subset))
        lines.append(f"{name:15s} {p.dataset:15s} classes={classes:7s} epochs={p.epochs:<3d}"
                     f" {p.description}")
    for name, members in GROUPS.items():
        lines.append(f"{name:15s} (group) {' '.join(members)}")
    return "\n".join(lines)



def expand_presets(names: list[str]) -> list[str]:
    """Preset names with groups (``mnist_all``) expanded, each once, in order."""
    out: list[str] = []
    for name in names:
        members = GROUPS.get(name, [name])
        for m in members:
            if m not in PRESETS:
                raise RDXInputError(f"unknown preset {m!r}; choose from "
                                    f"{', '.join([*PRESETS, *GROUPS])} (see --list).")
            if m not in out:
                out.append(m)
    return out


def parse_save_every(text: str, name: str = "save_every") -> tuple:
    """``"epoch,0,4,every:50"`` → ``("epoch", 0, 4, "every:50")``; ``name``: what the
    caller's user typed (``--save-every``, ``train.save_every``), for the message."""
    items: list = []
    for part in (p.strip() for p in str(text).split(",")):
        if part == "epoch" or part.startswith("every:"):
            items.append(part)
        elif part.isdigit():
            items.append(int(part))
        else:
            raise RDXInputError(f"{name}: {part!r} is not 'epoch', 'every:N' or a step "
                                "number (e.g. epoch,0,4,8).")
    return tuple(items)


def twin_folder(name: str, seed: int) -> str:
    """The folder of a preset's seed twin trained with ``seed``: ``<name>_seed<seed>``."""
    return f"{name}_seed{seed}"


def train_preset(name: str, *, out: str | Path = "checkpoints", epochs: int | None = None,
                 seed: int = 0, device: str = "auto", data_root: str | Path = "data",
                 progress: bool = True, overrides: dict | None = None,
                 resume: bool = True, folder: str | None = None,
                 names: dict[str, str] | None = None) -> list[Path]:
    """Train one preset into ``<out>/<folder or name>/``; returns the checkpoints written.

    ``folder``: another folder name (a seed twin's, :func:`twin_folder`).

    An interrupted run of the same settings resumes from its last checkpoint (``resume``;
    see :func:`rdx.models.training.train_classifier`), and a finished one is not repeated.

    ``overrides`` replaces fields of the preset (e.g. ``{"per_class": 50, "save_every":
    ("epoch", 0), "test": False}``); they are recorded in ``meta["preset_overrides"]``.
    ``names`` maps ``out`` and ``epochs`` to what the caller's user typed, for messages
    (``rdx train`` passes its flags).
    """
    import dataclasses

    import numpy as np

    from ..data import get_dataset, select_per_class
    from ..paths import check_output_dir
    from ..progress import working

    def n(param: str) -> str:
        return (names or {}).get(param, param)

    preset = PRESETS[name]
    folder = folder or name
    # before any work (a file there, no rights); created only when training starts
    check_output_dir(Path(out) / folder, n("out"), create=False)
    overrides = dict(overrides or {})
    if overrides:
        fields = {f.name for f in dataclasses.fields(Preset)} - {"description"}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise RDXInputError(f"unknown preset field(s) {unknown}; use {sorted(fields)}.")
        preset = dataclasses.replace(preset, **overrides)
    epochs = preset.epochs if epochs is None else epochs
    # a positive integer within the ceiling of training epochs (rdx.budget)
    epochs = V.check_int(epochs, n("epochs"), minimum=1)
    root = None if preset.root is None else Path(data_root) / preset.root
    # torch and a dataset load for seconds before the training bar appears (more on a busy
    # machine): say so
    with working(f"train {name}: loading torch and {preset.dataset}", show=progress):
        from .checkpoint import grey_transform
        from .training import train_classifier

        train_ds = get_dataset(preset.dataset, split="train", data_root=data_root, root=root)
        test_ds = get_dataset(preset.dataset, split="test", data_root=data_root, root=root) \
            if preset.test else None
    data_info: dict = {}
    if preset.per_class is not None:
        idx = select_per_class(train_ds.ids, train_ds.labels, preset.class_subset,
                               preset.per_class, seed=preset.selection_seed)
        train_ds = train_ds.subset(idx)
        data_info = {"per_class": preset.per_class, "selection_seed": preset.selection_seed,
                     "selection": "rdx.data.select_per_class"}
    n_train = len(train_ds) if preset.class_subset is None else \
        int(np.isin(train_ds.labels, preset.class_subset).sum())
    total = epochs * math.ceil(n_train / preset.batch_size)
    save_every = [s for s in preset.save_every if isinstance(s, str) or s <= total]
    skipped = [s for s in preset.save_every if not isinstance(s, str) and s > total]
    if skipped and progress:
        print(f"{name}: {total} steps in {epochs} epoch(s); skipping checkpoints at steps "
              f"{skipped}", file=sys.stderr)
    return train_classifier(
        train_ds, test_ds=test_ds, epochs=epochs, batch_size=preset.batch_size, lr=preset.lr,
        seed=seed, save_dir=Path(out) / folder, save_every=save_every,
        class_subset=preset.class_subset, device=device, progress=progress,
        transform=grey_transform(preset.size), data_info=data_info,
        extra_meta={"preset": name, "early_checkpoint": preset.early, **preset.extra,
                    **({"preset_overrides": overrides} if overrides else {})},
        resume=resume)


__all__ = ["GROUPS", "MNIST_835_STEPS", "PRESETS", "Preset", "expand_presets",
           "parse_save_every", "preset_table", "train_preset", "twin_folder"]
