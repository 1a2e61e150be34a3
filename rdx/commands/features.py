"""``rdx features MODEL SOURCE --out FILE``: one model's features of a set of images.

The command parses its flags and calls :func:`rdx.models.features_file.features` (also
``rdx.features`` from Python), which writes the resumable, verified features file
described in :mod:`rdx.models.feature_store`; ``rdx explain A.npz:features
B.npz:features`` and configs (``features: A.npz:features``) read it.
"""
from __future__ import annotations

import argparse

from ..errors import RDXInputError
from ..flags import add_device_flag, seed_int
from ..models.feature_store import DEFAULT_CHUNK
from ..progress import format_seconds, working

#: The flag of each parameter of :func:`rdx.models.features_file.features`, for messages.
FLAGS = {"out": "--out", "layer": "--layer", "split": "--split", "per_class": "--per-class",
         "seed": "--seed", "batch_size": "--batch-size", "device": "--device", "amp": "--amp",
         "chunk_size": "--chunk-size", "workers": "--workers", "checkpoint": "--checkpoint",
         "random_init": "--random-init"}


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
    add_device_flag(p, what="where the model runs")
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


def run_command(args: argparse.Namespace) -> int:
    from ..models.features_file import features, list_layers, load, model_spec

    show = not args.quiet
    if args.list_layers:
        spec = model_spec(args.model, seed=args.seed, checkpoint=args.checkpoint,
                          random_init=args.random_init, layer=args.layer)
        with working(f"loading {args.model}", show=show):
            loaded = _in_flags(load, spec)
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
    result = _in_flags(
        features, args.model, args.source, args.out, layer=args.layer, split=args.split,
        per_class=args.per_class, seed=args.seed, batch_size=args.batch_size,
        device=args.device, amp=args.amp, chunk_size=args.chunk_size, workers=args.workers,
        checkpoint=args.checkpoint, random_init=args.random_init, progress=show, names=FLAGS)
    if show and not result.reused:
        out = result.path
        n, d = result.shape
        key_hint = ":features" if out.suffix == ".npz" else ""
        print(f"features: {out} ({n} × {d} float32, {result.model_id} [{result.layer}], "
              f"{format_seconds(result.seconds)}"
              + (f", {len(result.chunks_resumed)} chunks resumed" if result.chunks_resumed
                 else "") + ")")
        print(f"  provenance: {result.provenance_path}")
        print(f"  use: rdx explain {out}{key_hint} OTHER{key_hint} --out DIR")
    return 0


#: What the model zoo's messages call a spec key, as this command's flags.
_ZOO_WORDS = {"checkpoint=<path to a weights file>": "--checkpoint FILE",
              "random_init=True": "--random-init",
              " (or rdx.models.features_file.list_layers)": ""}


def _in_flags(fn, *a, **kw):
    """Call ``fn``; an input error from the model zoo speaks of flags, not spec keys."""
    try:
        return fn(*a, **kw)
    except RDXInputError as exc:
        text = str(exc)
        for word, flag in _ZOO_WORDS.items():
            text = text.replace(word, flag)
        if text == str(exc):
            raise
        raise RDXInputError(text) from None


__all__ = ["FLAGS", "add_arguments", "run_command"]
