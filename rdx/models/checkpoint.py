"""The checkpoint format of the project's ConvNets: files, metadata, the transform they record.

Checkpoints are ``torch.save({"state_dict": ..., "meta": ...})`` files named like the
authors' PyTorch Lightning checkpoints: ``epoch=E-step=S.pt`` where ``S`` is the number of
optimizer steps taken and ``E`` the 0-based epoch that step belongs to (``epoch=0-step=136``
closes the first epoch of 136 steps, ``epoch=1-step=184`` lies inside the second; step 0 is
the initialisation), plus ``last.pt`` at the end. Every checkpoint has a JSON sidecar
``<name>.pt.json`` holding the same ``meta`` (model, training, data, transform, accuracies,
versions), so a checkpoint can be inspected without torch; :func:`list_checkpoints` lists
the checkpoints of a training run in step order. ``meta["weights_sha256"]``
(:func:`state_dict_sha256`) lets :func:`load_checkpoint` refuse damaged weights; the
sidecar also records the SHA-256 of the checkpoint file's bytes (``file_sha256``) and of
its own content (``record_sha256``, :mod:`rdx.io`, stored data), so a checkpoint file that
was damaged anywhere, or replaced by another valid one, is refused too.

Training (:mod:`rdx.models.training`) writes this format and the zoo
(:mod:`rdx.models.zoo`) reads it; both import it from here, so neither imports the other."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torchvision import transforms as T

from ..errors import RDXInputError
from ..io import (atomic_write, bytes_sha256, jsonable, record_problem, stored_problem,
                  write_record)
from ..input_files import check_input_file
from .convnet import ConvNet, build_model


CHECKPOINT_FORMAT = "rdx-convnet-checkpoint"


CHECKPOINT_FORMAT_VERSION = 1


_TRAIN_HINT = ("train it with `rdx train --preset NAME` (`--list` shows "
               "the presets; each writes checkpoints/<preset>/), or fetch the authors' MNIST "
               "checkpoints with `bash download_checkpoints.sh`")


class OneChannel:
    """A transform step: a colour PIL image (RGB, RGBA, palette, ...) becomes grey (``L``,
    PIL's luma weights); a one-band image (``L``, ``F``, ``I;16``, ...) passes unchanged.

    The ConvNet's first layer takes exactly one channel, and ``rdx features`` gives it
    whatever a folder or CSV of images holds. A class, not a lambda, so that data-loader
    worker processes can pickle it.
    """

    def __call__(self, img):
        bands = getattr(img, "getbands", None)
        return img.convert("L") if bands is not None and len(bands()) > 1 else img

    def __repr__(self) -> str:
        return "OneChannel()"


class GreyTransform(T.Compose):
    """Grey image → tensor: one channel (colour images are converted to grey), optional
    resize, ``ToTensor`` (0–1), ``Normalize(0.5, 0.5)``.

    A plain torchvision ``Compose`` (usable by any ``Dataset``) that also carries its
    :attr:`description` (stored in checkpoints so feature extraction uses the same
    preprocessing) and a vectorised :meth:`batch` for uint8 arrays.

    Parameters
    ----------
    size : int, optional
        Resize images to ``size × size`` (PIL bilinear, as ``transforms.Resize``) first.
        None keeps the size. 28×28 images are not touched by ``size=28``.
    """

    MEAN, STD = 0.5, 0.5

    def __init__(self, size: int | None = 28) -> None:
        if size is not None and (not isinstance(size, int) or size < 4):
            raise RDXInputError(f"transform size must be an integer ≥ 4 or None, got {size!r}.")
        self.size = size
        steps: list = [OneChannel()]
        if size is not None:
            steps.append(T.Resize((size, size)))
        super().__init__(steps + [T.ToTensor(), T.Normalize((self.MEAN,), (self.STD,))])

    @property
    def description(self) -> dict:
        """JSON description; :func:`transform_from_description` rebuilds the transform."""
        return {"name": "grey", "resize": self.size, "resize_interpolation": "bilinear",
                "to_tensor": "uint8 / 255 -> [0, 1]", "normalize_mean": [self.MEAN],
                "normalize_std": [self.STD]}

    def batch(self, images: np.ndarray) -> torch.Tensor | None:
        """``n×H×W`` uint8 → ``n×1×H×W`` float tensor, bit-identical to the per-image path.

        Returns None when a resize would be needed (PIL's resampling is not reproduced).
        """
        if images.ndim != 3 or images.dtype != np.uint8:
            return None
        if self.size is not None and images.shape[1:] != (self.size, self.size):
            return None
        # the same operations, in the same order, as ToTensor and Normalize
        x = torch.from_numpy(np.ascontiguousarray(images)).unsqueeze(1)
        return x.to(torch.get_default_dtype()).div(255).sub_(self.MEAN).div_(self.STD)


def grey_transform(size: int | None = 28) -> GreyTransform:
    """The ConvNet's preprocessing for grey images (see :class:`GreyTransform`)."""
    return GreyTransform(size)


def transform_from_description(description: dict) -> GreyTransform:
    """Rebuild the transform recorded in a checkpoint's ``meta["transform"]``."""
    if not isinstance(description, dict) or description.get("name") != "grey":
        raise RDXInputError(f"unknown transform description {description!r}; expected the "
                            "'grey' transform written by rdx.models.training.")
    return GreyTransform(description.get("resize"))


def state_dict_sha256(model: nn.Module) -> str:
    """SHA-256 over a model's parameters and buffers (names, dtypes, shapes, bytes)."""
    h = hashlib.sha256()
    for key, value in sorted(model.state_dict().items()):
        t = value.detach().cpu().contiguous().reshape(-1)
        h.update(f"{key}|{t.dtype}|{tuple(value.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def checkpoint_name(epoch: int, step: int) -> str:
    """``epoch=E-step=S.pt`` (the authors' Lightning naming)."""
    return f"epoch={epoch}-step={step}.pt"


def sidecar_path(checkpoint: str | os.PathLike) -> Path:
    """The JSON sidecar of a checkpoint: ``<checkpoint>.json``."""
    p = Path(checkpoint)
    return p.with_name(p.name + ".json")


def save_checkpoint(path: str | os.PathLike, model: nn.Module, meta: dict) -> Path:
    """Write ``{"state_dict", "meta"}`` and the JSON sidecar, each atomically.

    ``meta["weights_sha256"]`` (in the file and in the sidecar) is the SHA-256 of the
    weights (:func:`state_dict_sha256`); :func:`load_checkpoint` recomputes
    it, so damaged tensor bytes — which ``torch.load`` does not notice — are refused.
    """
    p = Path(path)
    # a JSON round trip makes meta plain data: str subclasses such as torch's TorchVersion
    # would otherwise be pickled as objects that ``weights_only`` loading refuses
    meta = json.loads(json.dumps(jsonable({**meta, "weights_sha256": state_dict_sha256(model)}),
                                 allow_nan=False))
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    buf = io.BytesIO()
    torch.save({"state_dict": state, "meta": meta}, buf)
    data = buf.getvalue()
    # the record describes these bytes; without it (killed in between) the old sidecar
    # would describe a file that is no longer there
    sidecar_path(p).unlink(missing_ok=True)
    atomic_write(p, lambda fh: fh.write(data))
    write_record(sidecar_path(p), {**meta, "file_sha256": bytes_sha256(data)})
    return p


def verify_file(p: Path, data: bytes) -> None:
    """Check a checkpoint's bytes ``data`` against the ``file_sha256`` its sidecar records
    (sidecars of this version; earlier ones record the weights only, which
    :func:`verify_weights` checks). This catches what the weights' digest cannot see — a
    changed byte outside the tensors, or another valid checkpoint copied over this one."""
    side = sidecar_path(p)
    if not side.is_file():
        return
    try:
        doc = json.loads(side.read_text())
    except (OSError, ValueError):
        return   # unreadable: verify_weights has said so if it matters
    if not isinstance(doc, dict) or "file_sha256" not in doc:
        return
    problem = record_problem(doc, side, "its record") or stored_problem(
        p, doc.get("file_sha256"), "checkpoint", found=bytes_sha256(data))
    if problem is not None:
        raise RDXInputError(f"checkpoint {str(p)!r} cannot be used: {problem}. Train it "
                            f"again or fetch a fresh copy (with its .pt.json sidecar); "
                            f"{_TRAIN_HINT}.")


def _strip_prefix(state_dict: dict) -> dict | None:
    """Find the ConvNet inside a (possibly wrapped, e.g. Lightning ``model.``) state dict."""
    anchor = "layer1.0.weight"
    prefixes = [k[: -len(anchor)] for k in state_dict if isinstance(k, str) and k.endswith(anchor)]
    if len(prefixes) != 1:
        return None
    pre = prefixes[0]
    return {k[len(pre):]: v for k, v in state_dict.items() if k.startswith(pre)}


def _infer_config(state_dict: dict) -> dict:
    """Architecture from weight shapes (for checkpoints without our ``meta``)."""
    try:
        w1, w2, fc = (state_dict[k].shape for k in ("layer1.0.weight", "layer2.0.weight",
                                                     "fc.weight"))
    except (KeyError, AttributeError):
        raise RDXInputError("state dict lacks layer1.0.weight / layer2.0.weight / fc.weight; "
                            "it is not a ConvNet.") from None
    tiny = (w1[0], w2[0]) == (8, 8)
    return {"model": "convnet_tiny" if tiny else "convnet", "in_channels": int(w1[1]),
            "num_classes": int(fc[0]), "width": int(w1[0]), "feature_dim": int(w2[0])}


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu"
                    ) -> tuple[ConvNet, dict]:
    """Load a checkpoint written by :func:`train_classifier` (or an authors' Lightning one).

    Parameters
    ----------
    path : str or PathLike
        ``.pt`` file from :func:`train_classifier`; a Lightning ``.ckpt`` or a bare state
        dict of the same ConvNet also works (architecture inferred from weight shapes).
    device : str or torch.device
        Where to put the model.

    Returns
    -------
    model : ConvNet
        In eval mode, on ``device``.
    meta : dict
        The checkpoint's metadata (for foreign checkpoints: the inferred architecture and
        whatever epoch/step they record).

    Raises
    ------
    RDXInputError
        Missing file (the message says how to train or download it), a file that is not a
        checkpoint, or weights that do not fit the recorded architecture.
    """
    p = check_input_file(path, "checkpoint", expect="a checkpoint file (.pt)",
                         missing=_TRAIN_HINT, register=False)
    try:
        data = p.read_bytes()   # read once: the bytes loaded are the bytes verified
    except OSError as exc:
        raise RDXInputError(f"checkpoint {str(p)!r} cannot be read ({exc.strerror or exc})."
                            ) from None
    try:
        # weights_only: never execute pickled code from a file we did not write
        obj = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except Exception as exc:  # noqa: BLE001 (torch.load raises many types on foreign files)
        text = str(exc).strip()
        if "Unsupported global" in text or "Weights only load failed" in text:
            reason = ("it holds pickled Python objects besides tensors and plain data, which "
                      "are not loaded for safety")
        else:
            reason = text.splitlines()[0][:200] if text else type(exc).__name__
        raise RDXInputError(f"{str(p)!r} is not a readable model checkpoint ({reason}); "
                            f"{_TRAIN_HINT}.") from None
    if isinstance(obj, dict) and isinstance(obj.get("meta"), dict) and "state_dict" in obj:
        meta, state = obj["meta"], obj["state_dict"]
    elif isinstance(obj, dict):
        state = obj.get("state_dict", obj)
        state = _strip_prefix(state) if isinstance(state, dict) else None
        if state is None:
            raise RDXInputError(f"{str(p)!r} is not a ConvNet checkpoint (no layer1/layer2/fc "
                                f"weights found); {_TRAIN_HINT}.")
        meta = {**_infer_config(state), "source": "foreign checkpoint",
                "epoch": obj.get("epoch"), "step": obj.get("global_step")}
    else:
        raise RDXInputError(f"{str(p)!r} holds a {type(obj).__name__}, not a checkpoint dict; "
                            f"{_TRAIN_HINT}.")
    model = build_model(meta)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise RDXInputError(f"{str(p)!r}: the weights do not fit a {meta.get('model')} with "
                            f"{meta.get('num_classes')} classes: {str(exc).splitlines()[0]}") from None
    verify_weights(p, model, meta)
    verify_file(p, data)
    return model.to(device).eval(), meta


def verify_weights(path: str | os.PathLike, model: nn.Module, meta: dict) -> None:
    """Check the loaded weights against the SHA-256 recorded when the checkpoint was saved
    (``meta["weights_sha256"]`` in the file, and in the JSON sidecar when there is one).

    Raises :class:`RDXInputError` when they differ (damaged bytes, or a checkpoint replaced
    without its sidecar). Checkpoints of this format written before the checksum existed
    load with a warning; foreign checkpoints (no format record) carry none and load quietly.
    """
    import warnings

    p = Path(path)
    side = sidecar_path(p)
    side_sha = None
    if side.is_file():
        try:
            side_meta = json.loads(side.read_text())
        except (OSError, ValueError):
            side_meta = None
        side_sha = side_meta.get("weights_sha256") if isinstance(side_meta, dict) else None
    recorded = [(where, sha) for where, sha in (("the checkpoint", meta.get("weights_sha256")),
                                                 (f"its sidecar {side.name}", side_sha))
                if isinstance(sha, str)]
    if not recorded:
        if meta.get("format") == CHECKPOINT_FORMAT:
            warnings.warn(f"checkpoint {str(p)!r} was written before checkpoints carried a "
                          "checksum (weights_sha256), so damage cannot be detected; train it "
                          "again (`rdx train`) to get a verifiable one.", stacklevel=3)
        return
    actual = state_dict_sha256(model)
    for where, sha in recorded:
        if sha != actual:
            raise RDXInputError(
                f"checkpoint {str(p)!r} is damaged: its weights do not match the SHA-256 "
                f"recorded in {where} when it was saved ({sha[:12]}… ≠ {actual[:12]}…). "
                f"Train it again or fetch a fresh copy (with its .pt.json sidecar); "
                f"{_TRAIN_HINT}.")


# --------------------------------------------------------------------------- a run's checkpoints

_STEP = re.compile(r"epoch=(\d+)-step=(\d+)")


@dataclass
class CheckpointInfo:
    """A checkpoint file and what its sidecar says about it."""

    name: str                      # file name without .pt, e.g. "epoch=0-step=16"
    path: Path
    step: int | None
    epoch: int | None
    epochs_completed: float | None
    meta: dict = field(default_factory=dict, repr=False)

    def accuracies(self) -> dict:
        return {k: self.meta.get(k) for k in ("train_accuracy", "test_accuracy")}


def read_sidecar(path: Path) -> dict:
    """The JSON sidecar of a checkpoint as a dict (empty when missing or unreadable)."""
    side = sidecar_path(path)
    if side.is_file():
        try:
            return json.loads(side.read_text())
        except json.JSONDecodeError:
            return {}
    return {}


def checkpoint_info(path: str | Path) -> CheckpointInfo:
    """Step/epoch of a checkpoint from its sidecar, else from its ``epoch=E-step=S`` name."""
    p = Path(path)
    meta = read_sidecar(p)
    m = _STEP.search(p.name)
    step = meta.get("step", int(m.group(2)) if m else None)
    epoch = meta.get("epoch", int(m.group(1)) if m else None)
    done = meta.get("epochs_completed")
    spe = (meta.get("training") or {}).get("steps_per_epoch")
    if done is None and step is not None and spe:
        done = step / spe
    return CheckpointInfo(p.name[:-3] if p.name.endswith(".pt") else p.stem, p, step, epoch,
                          done, meta)


def list_checkpoints(directory: str | Path, *, pattern: str = "epoch=*-step=*.pt",
                     final: str = "last.pt", every: int = 1, include_final_step: bool = True
                     ) -> tuple[list[CheckpointInfo], CheckpointInfo]:
    """The checkpoints of a training run in step order, and the final one.

    ``every`` keeps every n-th checkpoint (the first and the last always);
    ``include_final_step`` keeps a checkpoint saved at the final step (identical to the
    final model: a sanity point where every image is in the no-change group).
    """
    d = Path(directory)
    if not d.is_dir():
        raise RDXInputError(f"checkpoint folder {str(d)!r} does not exist; train the run "
                            "first (`rdx train --preset NAME`, or the config's "
                            "'train' section with scripts/training_dynamics.py).")
    final_info = checkpoint_info(d / final)
    if not final_info.path.is_file():
        raise RDXInputError(f"final checkpoint {str(final_info.path)!r} does not exist "
                            f"(checkpoints.final: {final!r}); finish the training first.")
    infos = [checkpoint_info(p) for p in d.glob(pattern) if p.is_file() and p.name != final]
    if not infos:
        raise RDXInputError(f"no checkpoint matches {pattern!r} in {d}.")
    infos.sort(key=lambda c: (c.step is None, c.step if c.step is not None else 0, c.name))
    if not include_final_step and final_info.step is not None:
        infos = [c for c in infos if c.step != final_info.step] or infos
    if every > 1:
        keep = set(range(0, len(infos), every)) | {len(infos) - 1}
        infos = [c for i, c in enumerate(infos) if i in keep]
    return infos, final_info
