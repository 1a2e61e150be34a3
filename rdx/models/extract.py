"""Batched feature extraction with an on-disk cache, on one device or under ``torchrun``.

:func:`extract_features` streams images through a
:class:`~rdx.models.loaded_model.LoadedModel` (one batch in memory at a time,
``torch.no_grad``, CUDA when available, optional AMP) and returns an ``n × d`` float32 array,
one row per image in the order asked for.

Cache
-----
Features are stored as ``<cache_dir>/<key>.npy`` plus ``<key>.json`` (metadata), where
``key`` is the SHA-256 of a JSON document holding the model id, weights id, layer, the
transform's ``repr`` (memory addresses removed), the dataset's name and info, the image
ids in order and whether AMP was used. Both files are written atomically (temporary file +
rename), the ``.npy`` first, so a crash never leaves a cache entry that looks complete. A
later call with the same key loads the array instead of running the model; an entry that
does not load, does not match its metadata or whose bytes changed (SHA-256 recorded) is
recomputed with a warning naming the file and the digest expected (:mod:`rdx.io`, stored
data: the array is read once and the bytes checked are the bytes used; the metadata file
carries the digest of its own content, ``record_sha256`` — entries of earlier versions
have none, and are still verified by the array's SHA-256). Image *contents* are not
hashed: change the ids (or clear the cache) when files are replaced in place.

Several GPUs
------------
Run the script that calls :func:`extract_features` with ``torchrun``, e.g.::

    torchrun --standalone --nproc_per_node=4 my_extract_script.py

and call ``torch.distributed.init_process_group("nccl")`` (``"gloo"`` on CPUs) before
extracting. When a process group is initialised, each rank takes a contiguous shard of the
images — the split a ``DistributedSampler`` with ``shuffle=False`` would make, but by
explicit index ranges, so no image is padded in twice — and runs on ``cuda:LOCAL_RANK``;
the shards are gathered so that every rank returns the full array, and rank 0 alone reads
and writes the cache (its hit/miss decision is broadcast, so node-local cache folders
cannot make ranks disagree).
"""
from __future__ import annotations

import copy
import json
import os
import re
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..backend import resolve_device
from ..data.base import ImageDataset
from ..errors import RDXInputError
from ..io import (RECORD_DIGEST, StoredDataMismatch, atomic_write, file_sha256, json_digest,
                  jsonable, load_npy_stored, record_problem, versions, write_record)
from .loaded_model import LoadedModel

#: Version of the cache entry layout; bump to invalidate every old entry.
CACHE_SCHEMA = 1


class FeatureCacheWarning(UserWarning):
    """A cache entry could not be used and the features are being recomputed."""


# --------------------------------------------------------------------------- cache key

def transform_repr(transform: Any) -> str:
    """``repr`` of a transform without memory addresses (``<function f at 0x…>``).

    OpenCLIP's preprocessing contains a plain function, whose repr would otherwise change
    from one process to the next and defeat the cache. Two different lambdas with the same
    qualified name become indistinguishable; give transforms a proper ``__repr__``.
    """
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(transform))


def cache_payload(loaded: LoadedModel, dataset: ImageDataset, ids: Sequence[str],
                  amp: bool) -> dict:
    """Everything that determines the features, as plain JSON data (keys sorted)."""
    payload = {
        "schema": CACHE_SCHEMA,
        "model_id": loaded.model_id,
        "weights_id": loaded.weights_id,
        "layer": loaded.layer,
        "transform": transform_repr(loaded.transform),
        "dataset": {"name": dataset.name, "info": dataset.info},
        "ids": [str(i) for i in ids],
        "amp": bool(amp),
    }
    # one JSON round trip: numpy scalars, Paths and tuples become what the file will hold
    return json.loads(json.dumps(jsonable(payload), sort_keys=True, default=str))


def cache_key(payload: dict) -> str:
    """SHA-256 of the canonical JSON of :func:`cache_payload`."""
    return json_digest(payload)


def load_cached(npy: Path, meta_path: Path, key: str, payload: dict
                ) -> tuple[np.ndarray | None, str | None]:
    """(features, None) on a valid entry, (None, reason) on a bad one, (None, None) if absent."""
    if not npy.exists() and not meta_path.exists():
        return None, None
    if not meta_path.exists():
        return None, "its metadata file is missing (interrupted write?)"
    if not npy.exists():
        return None, "its .npy file is missing"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"its metadata does not load ({type(exc).__name__}: {exc})"
    if isinstance(meta, dict) and RECORD_DIGEST in meta:
        # sealed (this version): an altered field is told from the seal; an entry of an
        # earlier version has none, and its array is still checked by its SHA-256 below
        altered = record_problem(meta, meta_path, "its metadata")
        if altered is not None:
            return None, str(altered)
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None, "its metadata belongs to another key"
    stale = [k for k, v in payload.items() if meta.get(k) != v]
    if stale:
        return None, f"its metadata differs in {stale}"
    try:
        features = load_npy_stored(npy, meta.get("npy_sha256"), "the cached array")
    except StoredDataMismatch as exc:
        return None, str(exc)
    except (OSError, ValueError, EOFError) as exc:
        return None, f"it does not load ({type(exc).__name__}: {exc})"
    n = len(payload["ids"])
    if features.dtype != np.float32 or features.ndim != 2 or features.shape[0] != n \
            or list(features.shape) != meta.get("shape"):
        return None, (f"the array is {features.dtype} {features.shape}, expected float32 with "
                      f"{n} rows and shape {meta.get('shape')}")
    return features, None


def write_cache(npy: Path, meta_path: Path, key: str, payload: dict, features: np.ndarray,
                extra: dict) -> None:
    # array first, metadata last: the JSON file is what marks an entry complete
    atomic_write(npy, lambda fh: np.save(fh, features, allow_pickle=False))
    meta = {"key": key, **payload, "shape": list(features.shape), "dtype": "float32",
            "npy_sha256": file_sha256(npy), **extra, "versions": versions(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_record(meta_path, meta)


# --------------------------------------------------------------------------- distributed

def _dist() -> tuple[int, int]:
    """(rank, world size); (0, 1) without an initialised process group."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _comm_device() -> torch.device:
    """Where collective tensors must live: the current GPU for NCCL, else the CPU."""
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _broadcast_object(obj: Any) -> Any:
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def _broadcast_array(arr: np.ndarray | None, rank: int) -> np.ndarray:
    shape = _broadcast_object(None if arr is None else arr.shape)
    dev = _comm_device()
    t = (torch.from_numpy(arr).to(dev) if rank == 0
         else torch.empty(shape, dtype=torch.float32, device=dev))
    torch.distributed.broadcast(t, src=0)
    return t.cpu().numpy()


def _gather_rows(local: np.ndarray, counts: list[int]) -> np.ndarray:
    """Concatenate every rank's rows in rank order (all_gather of zero-padded blocks)."""
    dist = torch.distributed
    dev = _comm_device()
    dim = torch.tensor([local.shape[1] if len(local) else 0], device=dev)
    dist.all_reduce(dim, op=dist.ReduceOp.MAX)   # a rank with no images has no d
    d = int(dim.item())
    block = torch.zeros((max(counts), d), dtype=torch.float32, device=dev)
    if len(local):
        block[:len(local)] = torch.from_numpy(local).to(dev)
    parts = [torch.empty_like(block) for _ in counts]
    dist.all_gather(parts, block)
    return np.concatenate([p[:c].cpu().numpy() for p, c in zip(parts, counts, strict=True)])


def _device(device: str | torch.device, world: int) -> torch.device:
    if world > 1 and str(device) in ("auto", "cuda") and torch.cuda.is_available():
        # "cuda" alone would put every rank on GPU 0
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
        return dev
    return resolve_device(device)


# --------------------------------------------------------------------------- extraction

def check_extract_args(dataset: ImageDataset, indices, batch_size: int, num_workers: int
                       ) -> np.ndarray:
    if not isinstance(dataset, ImageDataset):
        raise RDXInputError(f"dataset must be an rdx ImageDataset (rdx.data.get_dataset), "
                            f"got {type(dataset).__name__}.")
    for name, value, low in (("batch_size", batch_size, 1), ("num_workers", num_workers, 0)):
        if name == "batch_size" and value is None:      # automatic (auto_batch_size)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise RDXInputError(f"{name} must be an integer ≥ {low}, got {value!r}.")
    if len(dataset) == 0:
        raise RDXInputError(f"dataset {dataset.name!r} has no images.")
    if indices is None:
        return np.arange(len(dataset), dtype=np.int64)
    idx = np.asarray(indices)
    if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise RDXInputError(f"indices must be a 1-D sequence of integers, got shape {idx.shape} "
                            f"dtype {idx.dtype}.")
    if idx.size == 0:
        raise RDXInputError("indices is empty; select at least one image.")
    idx = idx.astype(np.int64)
    bad = idx[(idx < 0) | (idx >= len(dataset))]
    if bad.size:
        raise RDXInputError(f"indices {bad[:5].tolist()} are outside 0..{len(dataset) - 1} "
                            f"({dataset.name} has {len(dataset)} images).")
    return idx


#: ``auto_batch_size`` on the CPU: images of 224×224 per batch. Measured on 2 cores with
#: EfficientNet-Lite: batches of 32 ran at half the speed of batches of 4 (Lite0 8 vs 18
#: images/s, Lite2 2 vs 6), the difference being system time: every batch's large
#: activation tensors are fresh memory mappings that the kernel must fault in and zero.
CPU_BATCH_PIXELS = 4 * 224 * 224
#: ``auto_batch_size`` on a GPU (the caller halves it on out-of-memory).
GPU_BATCH = 128


def auto_batch_size(device: torch.device, image_shape: Sequence[int]) -> int:
    """A batch size for ``device`` and one transformed image's shape (C×H×W): on a GPU
    :data:`GPU_BATCH`; on the CPU about :data:`CPU_BATCH_PIXELS` pixels (4 images of 224²,
    2 of 260², 64 at most for small images)."""
    if device.type == "cuda":
        return GPU_BATCH
    pixels = int(np.prod(image_shape[-2:])) if len(image_shape) >= 2 else 1
    return int(min(64, max(1, CPU_BATCH_PIXELS // max(pixels, 1))))


def feature_batches(loaded: LoadedModel, dataset: ImageDataset, idx: np.ndarray, *,
                    batch_size: int, device: torch.device, num_workers: int = 0,
                    amp: bool = False) -> Iterator[np.ndarray]:
    """Features of ``dataset[idx]``, one ``b × d`` float32 array per batch, in order.

    ``dataset`` must already carry ``loaded.transform`` and ``loaded.model`` be on
    ``device``. The one loop of the package that runs a model over images for one layer:
    :func:`extract_features` fills an array from it, ``rdx features`` writes chunks of it.
    """
    loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(dataset, idx.tolist()), batch_size=batch_size, shuffle=False,
        num_workers=num_workers, pin_memory=device.type == "cuda")
    # fp16 on GPUs; the CPU autocast only supports bfloat16
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    for images, _labels in loader:
        images = images.to(device, non_blocking=True)
        # no_grad per batch, not around the loop: a generator suspended inside a `with`
        # would leave gradients off in the caller's code between batches
        with torch.no_grad(), torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            feats = loaded.feature_fn(images)
        if not isinstance(feats, torch.Tensor) or feats.ndim != 2 \
                or feats.shape[0] != len(images):
            shape = tuple(feats.shape) if isinstance(feats, torch.Tensor) else type(feats)
            raise RDXInputError(f"layer {loaded.layer!r} of {loaded.model_id} gave {shape} "
                                f"for a batch of {len(images)} images; expected "
                                f"{len(images)}×d.")
        yield feats.float().cpu().numpy()


def _run(loaded: LoadedModel, dataset: ImageDataset, idx: np.ndarray, *, batch_size: int,
         device: torch.device, num_workers: int, amp: bool, progress: bool, desc: str
         ) -> np.ndarray:
    """Features of ``dataset[idx]``, streamed batch by batch into a preallocated array."""
    from tqdm.auto import tqdm

    out: np.ndarray | None = None
    start = 0
    with tqdm(total=len(idx), desc=desc, unit="img", disable=not progress,
              dynamic_ncols=True) as bar:
        for feats in feature_batches(loaded, dataset, idx, batch_size=batch_size,
                                     device=device, num_workers=num_workers, amp=amp):
            if out is None:
                out = np.empty((len(idx), feats.shape[1]), dtype=np.float32)
            out[start:start + len(feats)] = feats
            start += len(feats)
            bar.update(len(feats))
    return np.empty((0, 0), np.float32) if out is None else out


def extract_features(loaded: LoadedModel, dataset: ImageDataset,
                     indices: Sequence[int] | np.ndarray | None = None, *,
                     batch_size: int | None = None, device: str | torch.device = "auto",
                     num_workers: int = 0, amp: bool = False,
                     cache_dir: str | os.PathLike | None = "outputs/cache/features",
                     progress: bool = True) -> np.ndarray:
    """Features of the chosen layer for every (or every selected) image.

    Parameters
    ----------
    loaded : LoadedModel
        From :func:`rdx.models.zoo.load_model`. Its model is moved to ``device``.
    dataset : ImageDataset
        Images; its ``transform`` is replaced by ``loaded.transform`` on a shallow copy
        (the caller's dataset is not changed).
    indices : sequence of int, optional
        Images to use, in this order (rows of the result); all images if None.
    batch_size : int, optional
        Images per forward pass; None (default): :func:`auto_batch_size` for the device and
        the size of one transformed image (on the CPU a few large images per pass: larger
        batches ran at half the speed, the time going to fresh activation memory). Results
        do not depend on it (up to float rounding).
    device : "auto", "cpu", "cuda", "cuda:N"
        ``auto`` uses a GPU when there is one. Under ``torchrun`` "auto"/"cuda" mean
        ``cuda:LOCAL_RANK``.
    num_workers : int
        DataLoader worker processes decoding and transforming images.
    amp : bool
        Autocast to float16 (GPU) / bfloat16 (CPU); part of the cache key.
    cache_dir : str or PathLike, optional
        Folder of cached features; None disables the cache.
    progress : bool
        tqdm progress bar (rank 0 only).

    Returns
    -------
    numpy.ndarray
        ``n × d`` float32, row ``i`` = image ``indices[i]``.

    Raises
    ------
    RDXInputError
        Bad arguments, a layer that does not give ``n × d`` features, or non-finite features.
    """
    idx = check_extract_args(dataset, indices, batch_size, num_workers)
    rank, world = _dist()
    dev = _device(device, world)
    ds = copy.copy(dataset)          # shallow: images are shared, only the transform differs
    ds.transform = loaded.transform
    ids = [dataset.ids[i] for i in idx]
    payload = cache_payload(loaded, dataset, ids, amp)
    key = cache_key(payload)
    npy = meta_path = None
    if cache_dir is not None:
        npy, meta_path = Path(cache_dir) / f"{key}.npy", Path(cache_dir) / f"{key}.json"

    cached = None
    if npy is not None and rank == 0:
        cached, problem = load_cached(npy, meta_path, key, payload)
        if problem:
            warnings.warn(f"feature cache {npy} is unusable ({problem}); recomputing.",
                          FeatureCacheWarning, stacklevel=2)
    if world > 1:
        if _broadcast_object(cached is not None):   # rank 0 decides for everyone
            return _broadcast_array(cached, rank)
    elif cached is not None:
        return cached

    loaded.model.to(dev).eval()
    if batch_size is None:
        batch_size = auto_batch_size(dev, tuple(ds[int(idx[0])][0].shape))
    desc = f"features {loaded.model_id} [{loaded.layer}]"
    t0 = time.perf_counter()
    bounds = [len(idx) * r // world for r in range(world + 1)]
    local = _run(loaded, ds, idx[bounds[rank]:bounds[rank + 1]], batch_size=batch_size,
                 device=dev, num_workers=num_workers, amp=amp,
                 progress=progress and rank == 0, desc=desc)
    features = local if world == 1 else _gather_rows(
        local, [bounds[r + 1] - bounds[r] for r in range(world)])
    seconds = time.perf_counter() - t0

    if not np.isfinite(features).all():
        bad = int((~np.isfinite(features).all(axis=1)).sum())
        hint = " (AMP overflow? try amp=False)" if amp else ""
        raise RDXInputError(f"{bad} of {len(features)} images got NaN/inf features from "
                            f"{loaded.model_id} layer {loaded.layer!r}{hint}; nothing cached.")
    if npy is not None and rank == 0:
        write_cache(npy, meta_path, key, payload, features,
                    {"seconds": seconds, "device": str(dev), "world_size": world,
                     "batch_size": batch_size})
    if world > 1:
        torch.distributed.barrier()   # the entry exists for everyone once this returns
    return features


__all__ = ["FeatureCacheWarning", "auto_batch_size", "cache_key", "cache_payload",
           "check_extract_args", "extract_features", "feature_batches", "load_cached", "transform_repr",
           "write_cache"]
