"""Train the paper's ConvNet (Adam + OneCycleLR, cross-entropy), saving checkpoints in the
format of :mod:`rdx.models.checkpoint` along the way.

Training is deterministic on the CPU for a seed: the model is initialised after
``torch.manual_seed(seed)`` (inside :func:`torch.random.fork_rng`, so the caller's global RNG
is left alone), batches are shuffled by a seeded ``torch.Generator``, ``num_workers=0``, and
for the duration of the run torch uses deterministic algorithms on a fixed number of
threads (:func:`rdx.backend.reproducible_training`), so the checkpoints are bit-identical on
any machine with the same library versions and SIMD level, whatever its core count or
``RDX_NUM_THREADS``. Evaluating accuracy at a
checkpoint does not change the trajectory (no randomness, BatchNorm in eval mode), so the
weights at step S do not depend on which other checkpoints were requested."""
from __future__ import annotations

import contextlib
import io
import math
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import threads
from ..data.base import ImageDataset
from ..errors import RDXInputError
from ..io import (array_digest, atomic_write, bytes_sha256, file_sha256, json_digest,
                  read_record, stored_problem, versions, write_record)
from .checkpoint import (CHECKPOINT_FORMAT, CHECKPOINT_FORMAT_VERSION, GreyTransform,
                         checkpoint_name, grey_transform, save_checkpoint, sidecar_path)
from .convnet import ConvNet, ConvNetTiny, FEATURE_LAYERS


#: The training state a killed run resumes from (not a checkpoint: no ``.pt`` suffix, so
#: checkpoint globs never pick it up).
RESUME_STATE = "training-state.resume"


RESUME_FORMAT = "rdx-training-state"


#: How many images go through the network at once when measuring accuracy.
EVAL_BATCH = 1000


def select_classes(ds: ImageDataset, class_subset: Sequence[int] | None
                   ) -> tuple[ImageDataset, dict[str, int] | None, list[str]]:
    """Keep the images of ``class_subset`` and relabel them ``0..k-1`` in the order given.

    Returns the new dataset, the label map ``{str(old): new}`` (None without a subset) and
    the class names of the new labels.
    """
    if class_subset is None:
        return ds, None, list(ds.class_names)
    subset = [int(c) for c in class_subset]
    if len(set(subset)) != len(subset) or not subset:
        raise RDXInputError(f"class_subset must list distinct classes, got {list(class_subset)}.")
    missing = [c for c in subset if not np.any(ds.labels == c)]
    if missing:
        raise RDXInputError(f"class_subset {subset}: classes {missing} have no images in "
                            f"{ds.name} (labels present: {np.unique(ds.labels).tolist()[:20]}).")
    lookup = {c: i for i, c in enumerate(subset)}
    keep = np.flatnonzero(np.isin(ds.labels, subset))
    new_labels = np.array([lookup[int(c)] for c in ds.labels[keep]], dtype=np.int64)
    names = [ds.class_names[c] if 0 <= c < len(ds.class_names) else str(c) for c in subset]
    return ds.subset(keep, labels=new_labels), {str(c): i for c, i in lookup.items()}, names


def materialize(ds: ImageDataset, transform) -> tuple[torch.Tensor, torch.Tensor]:
    """All images through ``transform`` once (no augmentation, so once is enough).

    Array datasets with a :class:`GreyTransform` that needs no resize take a vectorised path
    (the same numbers, ~100× faster than PIL image by image).
    """
    x = None
    if isinstance(transform, GreyTransform) and ds.images is not None:
        x = transform.batch(ds.images)
    if x is None:
        x = torch.stack([transform(ds.load_image(i)) for i in range(len(ds))])
    return x, torch.as_tensor(np.asarray(ds.labels), dtype=torch.int64)


def _resolve_device(device: str | torch.device) -> torch.device:
    from ..backend import resolve_device

    return resolve_device(device)   # an unknown or absent device is an input error


def _save_plan(save_every: str | Sequence[int | str] | None, steps_per_epoch: int,
               total_steps: int) -> set[int]:
    """Steps at which to save: ``"epoch"`` → every epoch end; ``"every:N"`` → every N-th
    step (N, 2N, …); integers → those steps."""
    items = [] if save_every is None else [save_every] if isinstance(save_every, (str, int)) \
        else list(save_every)
    steps: set[int] = set()
    for item in items:
        every = item.partition(":")[2] if isinstance(item, str) and item.startswith("every:") \
            else None
        if item == "epoch":
            steps.update(range(steps_per_epoch, total_steps + 1, steps_per_epoch))
        elif every is not None and every.isdigit() and int(every) > 0:
            steps.update(range(int(every), total_steps + 1, int(every)))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool) \
                and 0 <= item <= total_steps:
            steps.add(int(item))
        else:
            raise RDXInputError(
                f"save_every entries must be 'epoch', 'every:N' or a step in 0..{total_steps} "
                f"({steps_per_epoch} steps per epoch × epochs), got {item!r}.")
    return steps


def epoch_of_step(step: int, steps_per_epoch: int) -> int:
    """0-based epoch in which optimizer step ``step`` is taken (step 0 → epoch 0)."""
    return 0 if step == 0 else (step - 1) // steps_per_epoch


@contextlib.contextmanager
def _deterministic(device: torch.device, seed: int) -> Iterator[None]:
    """Seeded RNG (the caller's given back afterwards) and the fixed thread count and
    deterministic kernels of :func:`rdx.backend.reproducible_training` for a run."""
    from ..backend import reproducible_training

    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), reproducible_training(device):
        torch.manual_seed(seed)
        yield


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> float:
    """Top-1 accuracy of ``model`` (switched to eval mode, restored after)."""
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(x), EVAL_BATCH):
        logits = model(x[i:i + EVAL_BATCH].to(device))
        correct += int((logits.argmax(1).cpu() == y[i:i + EVAL_BATCH]).sum())
    model.train(was_training)
    return correct / max(len(x), 1)


def _check_positive(name: str, value, kind=int) -> None:
    ok = isinstance(value, (int, np.integer)) if kind is int else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not value > 0 or (kind is float
                                                              and not math.isfinite(value)):
        raise RDXInputError(f"{name} must be a positive {kind.__name__}, got {value!r}.")


def _prepare_data(train_ds: ImageDataset, test_ds: ImageDataset | None,
                  class_subset: Sequence[int] | None, transform
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None,
                             torch.Tensor | None, dict]:
    """Class selection, relabelling and transform of both splits, plus ``meta["data"]``."""
    train_sub, label_map, class_names = select_classes(train_ds, class_subset)
    num_classes = len(class_names)
    bad = train_sub.labels[(train_sub.labels < 0) | (train_sub.labels >= num_classes)]
    if len(bad):
        raise RDXInputError(f"labels must lie in 0..{num_classes - 1} (one per class name); "
                            f"found {np.unique(bad).tolist()[:10]}.")
    x_train, y_train = materialize(train_sub, transform)
    if x_train.ndim != 4 or x_train.shape[-1] < 4 or x_train.shape[-2] < 4:
        raise RDXInputError(f"the transform must give C×H×W images of at least 4×4 pixels, "
                            f"got {tuple(x_train.shape[1:])}.")
    x_test = y_test = test_info = None
    if test_ds is not None:
        if class_subset is not None:   # the test split may hold the other classes too
            test_ds = test_ds.subset(np.flatnonzero(np.isin(test_ds.labels, list(class_subset))))
        test_sub, _, _ = select_classes(test_ds, class_subset)
        x_test, y_test = materialize(test_sub, transform)
        if len(x_test) and x_test.shape[1:] != x_train.shape[1:]:
            raise RDXInputError(f"test images {tuple(x_test.shape[1:])} differ from training "
                                f"images {tuple(x_train.shape[1:])} after the transform.")
        test_info = {"dataset": test_sub.name, "split": test_sub.info.get("split"),
                     "n_images": len(x_test)}
    data_meta = {"dataset": train_ds.name, "split": train_ds.info.get("split"),
                 "n_images": len(x_train),
                 "class_subset": None if class_subset is None else [int(c) for c in class_subset],
                 "label_map": label_map, "class_names": class_names,
                 "modification": train_ds.info.get("modification"), "test": test_info}
    return x_train, y_train, x_test, y_test, data_meta


def train_classifier(train_ds: ImageDataset, *, test_ds: ImageDataset | None = None,
                     epochs: int, batch_size: int = 128, lr: float = 1e-3, seed: int = 0,
                     width: int = 32, save_dir: str | os.PathLike,
                     save_every: str | Sequence[int | str] | None = "epoch",
                     class_subset: Sequence[int] | None = None, device: str = "auto",
                     progress: bool = True, transform: GreyTransform | None = None,
                     tiny: bool = False, data_info: dict | None = None,
                     extra_meta: dict | None = None, resume: bool = True) -> list[Path]:
    """Train a :class:`ConvNet` with Adam + OneCycleLR and save checkpoints along the way.

    Resumable: with every checkpoint the training state (weights, optimizer, schedule,
    shuffling generator) goes to ``save_dir/training-state.resume``; a run killed part way
    continues from the last checkpoint when started again with the same settings, and the
    result is bit-identical to an uninterrupted run (on the CPU). A finished run is not
    repeated: the same call returns its checkpoints at once.

    Parameters
    ----------
    train_ds : ImageDataset
        Training images (grey, any size the transform accepts) and labels.
    test_ds : ImageDataset, optional
        Held-out images; if given, every checkpoint records ``test_accuracy``.
    epochs : int
        Passes over the training set; OneCycleLR spans all of them.
    batch_size : int
        Images per step (the last batch of an epoch may be smaller).
    lr : float
        Maximum learning rate of the one-cycle schedule (Adam).
    seed : int
        Seeds the initialisation and the shuffling; CPU runs are bit-reproducible.
    width : int
        ``layer1`` channels (``layer2`` gets twice as many); ignored with ``tiny``.
    save_dir : str or PathLike
        Folder for the checkpoints (created).
    save_every : "epoch", "every:N", list of int / "epoch" / "every:N", or None
        When to save besides ``last.pt``: at every epoch end, every N optimizer steps and/or
        after the listed steps (0 = the initialisation), e.g. ``["epoch", 0, 32, 56]``. Every
        checkpoint's sidecar records its ``train_accuracy`` (and ``test_accuracy``).
    class_subset : list of int, optional
        Train on these classes only, relabelled ``0..k-1`` in the given order (the map is
        recorded in ``meta["data"]["label_map"]``); applied to ``test_ds`` too.
    device : "auto", "cpu", "cuda", ...
        ``auto`` uses a GPU when there is one.
    progress : bool
        Show a tqdm progress bar (stderr).
    transform : GreyTransform, optional
        Preprocessing; :func:`grey_transform` (28×28) by default.
    tiny : bool
        Train :class:`ConvNetTiny` (8-D feature) instead.
    data_info, extra_meta : dict, optional
        Extra JSON-able entries for ``meta["data"]`` and for ``meta`` (e.g. a preset name).
    resume : bool
        Continue from the saved training state when it was made with the same settings
        (False: train from step 0 and overwrite the checkpoints).

    Returns
    -------
    list of Path
        The checkpoints written, in step order, ``last.pt`` last.
    """
    _check_positive("epochs", epochs)
    _check_positive("batch_size", batch_size)
    _check_positive("lr", lr, float)
    _check_positive("width", width)
    if not isinstance(train_ds, ImageDataset):
        raise RDXInputError(f"train_ds must be an rdx ImageDataset (rdx.data.get_dataset), "
                            f"got {type(train_ds).__name__}.")
    dev = _resolve_device(device)
    transform = grey_transform(28) if transform is None else transform
    x_train, y_train, x_test, y_test, data_meta = _prepare_data(train_ds, test_ds,
                                                                class_subset, transform)
    num_classes = len(data_meta["class_names"])
    in_channels = int(x_train.shape[1])

    steps_per_epoch = math.ceil(len(x_train) / batch_size)
    total_steps = epochs * steps_per_epoch
    save_steps = _save_plan(save_every, steps_per_epoch, total_steps)
    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)

    base_meta = {
        **(extra_meta or {}), "seed": seed,
        "layers": FEATURE_LAYERS,
        "training": {"optimizer": "Adam", "scheduler": "OneCycleLR", "max_lr": lr,
                     "loss": "cross_entropy", "batch_size": batch_size, "epochs": epochs,
                     "steps_per_epoch": steps_per_epoch, "total_steps": total_steps,
                     "device": dev.type, "torch_threads": threads.TRAINING_THREADS},
        "data": {**data_meta, **(data_info or {})},
        "transform": getattr(transform, "description", {"name": repr(transform)}),
        "versions": versions(),
    }

    from tqdm.auto import tqdm

    state_path = save_dir / RESUME_STATE
    fingerprint = json_digest({
        "model": "convnet_tiny" if tiny else "convnet", "width": width,
        "in_channels": in_channels, "num_classes": num_classes,
        "meta": {k: v for k, v in base_meta.items() if k != "versions"},
        "save_steps": sorted(save_steps), "data": array_digest(x_train.numpy(),
                                                                y_train.numpy())})
    written: list[Path] = []
    written_sha: dict[str, str] = {}   # checkpoint name → SHA-256 of its file
    history: list[dict] = []
    postfix: dict[str, str] = {}
    with _deterministic(dev, seed):
        model: ConvNet = (ConvNetTiny(in_channels, num_classes) if tiny
                          else ConvNet(in_channels, num_classes, width)).to(dev)
        gen = torch.Generator().manual_seed(seed)
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x_train, y_train), batch_size=batch_size,
            shuffle=True, num_workers=0, generator=gen)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total_steps)
        # the shuffling generator's state when the current epoch's iterator was created:
        # with it (and the batches done) a resumed run draws the same batches
        epoch_gen_state = gen.get_state()
        step = 0
        resumed = read_training_state(state_path, fingerprint, save_dir) if resume else None
        if resumed is not None:
            model.load_state_dict(resumed["model"])
            opt.load_state_dict(resumed["optimizer"])
            sched.load_state_dict(resumed["scheduler"])
            torch.set_rng_state(resumed["torch_rng"])
            gen.set_state(resumed["generator"])
            epoch_gen_state = resumed["epoch_generator"]
            step = int(resumed["step"])
            history = list(resumed["history"])
            written = [save_dir / name for name in resumed["written"]]
            written_sha = dict(resumed["written_sha256"])
            if progress:
                print(f"train {save_dir.name}: " + (
                    f"already trained ({len(written)} checkpoints); nothing to do (resume=False, "
                    "or `rdx train --restart`, trains again)" if step == total_steps else
                    f"resuming after step {step} of {total_steps} (the checkpoints up to "
                    f"{written[-1].name if written else 'none'} are kept)"), file=sys.stderr)

        def save(step: int, names: list[str]) -> None:
            meta = {"format": CHECKPOINT_FORMAT, "format_version": CHECKPOINT_FORMAT_VERSION,
                    **model.config(), **base_meta,
                    "epoch": epoch_of_step(step, steps_per_epoch), "step": step,
                    "epochs_completed": step / steps_per_epoch,
                    "train_accuracy": accuracy(model, x_train, y_train, dev)}
            if x_test is not None:
                meta["test_accuracy"] = accuracy(model, x_test, y_test, dev)
            history.append({k: meta[k] for k in ("epoch", "step", "train_accuracy",
                                                  "test_accuracy") if k in meta})
            for name in names:
                if name == "last.pt":
                    meta = {**meta, "history": history}
                written.append(save_checkpoint(save_dir / name, model, meta))
                written_sha[name] = file_sha256(written[-1])
            # last: a run killed before this line resumes from the previous state and
            # writes these checkpoints again (identically)
            write_training_state(state_path, {
                "fingerprint": fingerprint, "step": step, "model": model.state_dict(),
                "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "torch_rng": torch.get_rng_state(), "generator": gen.get_state(),
                "epoch_generator": epoch_gen_state,
                "history": history, "written": [p.name for p in written],
                "written_sha256": dict(written_sha)})
            postfix["acc"] = f"{meta['train_accuracy']:.3f}"
            bar.set_postfix(postfix, refresh=False)

        with tqdm(total=total_steps, initial=step, desc=f"train {save_dir.name}", unit="step",
                  disable=not progress, dynamic_ncols=True) as bar:
            if resumed is None and 0 in save_steps:
                save(0, [checkpoint_name(0, 0)])
            model.train()
            for epoch in range(step // steps_per_epoch, epochs):
                skip = step - epoch * steps_per_epoch   # batches of this epoch already done
                if skip == 0:
                    epoch_gen_state = gen.get_state()
                else:
                    gen.set_state(epoch_gen_state)
                for i, (xb, yb) in enumerate(loader):
                    if i < skip:
                        continue
                    opt.zero_grad(set_to_none=True)
                    loss = nn.functional.cross_entropy(model(xb.to(dev)), yb.to(dev))
                    loss.backward()
                    opt.step()
                    sched.step()
                    step += 1
                    bar.update(1)
                    postfix["loss"] = f"{loss.item():.3f}"
                    bar.set_postfix(postfix, refresh=False)
                    names = [checkpoint_name(epoch_of_step(step, steps_per_epoch), step)] \
                        if step in save_steps else []
                    if step == total_steps:
                        names.append("last.pt")
                    if names:
                        save(step, names)
    return written


def _state_record(path: Path) -> Path:
    """The record of the training state's bytes: ``training-state.resume.json``."""
    return path.with_name(path.name + ".json")


def write_training_state(path: Path, state: dict) -> None:
    """The state a killed run resumes from (model, optimizer, schedule, random generators,
    checkpoints written so far), written atomically next to the checkpoints, after its
    record ``training-state.resume.json`` (the SHA-256 of these bytes and of the ones they
    replace, :mod:`rdx.io` stored data)."""
    buf = io.BytesIO()
    torch.save({"format": RESUME_FORMAT, **state}, buf)
    data = buf.getvalue()
    # the record first, vouching for the new bytes and the ones they replace: killed
    # between the two writes, the run resumes from the previous state (and writes its
    # later checkpoints again, identically), as it did before states had records
    old, _ = read_record(_state_record(path))
    previous = None
    if old is not None and path.is_file():
        on_disk = file_sha256(path)   # vouched for again only if the record vouched for it
        previous = on_disk if on_disk in (old.get("sha256"), old.get("previous")) else None
    write_record(_state_record(path), {"name": path.name, "sha256": bytes_sha256(data),
                                       "previous": previous})
    atomic_write(path, lambda fh: fh.write(data))


def read_training_state(path: Path, fingerprint: str, save_dir: Path) -> dict | None:
    """The saved state of an interrupted (or finished) run with the same settings, or None
    when there is none, its bytes are not those its record vouches for (damaged, replaced,
    or written before records existed), it belongs to other settings, or a checkpoint it
    lists is missing or changed (then the run starts again from step 0 and says why)."""
    if not path.is_file():
        return None
    record, problem = read_record(_state_record(path), "the record of the training state")
    try:
        data = path.read_bytes()   # read once: the bytes loaded are the bytes verified
    except OSError:
        data = b""
    found = bytes_sha256(data)
    # "previous": the state a kill between the record's write and the state's left in place
    if record is None or found not in (record.get("sha256"), record.get("previous")):
        # damaged, replaced, or of an earlier version (no record): resuming from it could
        # continue from other weights than the ones trained
        why = problem or stored_problem(path, (record or {}).get("sha256"),
                                        "the saved training state", found=found)
        print(f"train {save_dir.name}: {why}; starting from step 0.", file=sys.stderr)
        return None
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a damaged state file: start over
        print(f"train {save_dir.name}: the saved training state {path.name} cannot be read "
              f"({type(exc).__name__}); starting from step 0.", file=sys.stderr)
        return None
    if not isinstance(state, dict) or state.get("format") != RESUME_FORMAT:
        return None
    if state.get("fingerprint") != fingerprint:
        print(f"train {save_dir.name}: the checkpoints there were trained with other settings "
              "(data, schedule, seed or checkpoint plan); training again from step 0.",
              file=sys.stderr)
        return None
    for name, sha in state.get("written_sha256", {}).items():
        p = save_dir / name
        if not p.is_file() or not sidecar_path(p).is_file() or file_sha256(p) != sha:
            print(f"train {save_dir.name}: checkpoint {name} is missing or changed since it "
                  "was written; training again from step 0.", file=sys.stderr)
            return None
    return state
