#!/usr/bin/env python
"""Train the ConvNet checkpoints the MNIST experiments use (and Fashion-MNIST / digits ones).

    python rdx train --list
    python rdx train --preset mnist_835            # → checkpoints/mnist_835/
    python rdx train --preset mnist_all            # every MNIST preset
    python rdx train --preset fashion_pcs --epochs 2 --device cpu
    python rdx train --preset fashion5_dynamics --save-every epoch,0,4 \
        --per-class 100                                          # a shorter schedule
    python rdx train --preset fashion_pcs --twins 1    # + a seed twin → checkpoints/fashion_pcs_seed1/

The presets, their recipes and the library call each model's training is
(:func:`rdx.models.presets.train_preset`) live in :mod:`rdx.models.presets`.

A missing dataset or bad option exits with status 2 and a one-paragraph message.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from rdx import validation as V
from rdx.errors import RDXInputError
from rdx.flags import add_device_flag, seed_int
from rdx.models.presets import (GROUPS, PRESETS, expand_presets, parse_save_every,  # noqa: F401
                                preset_table, train_preset, twin_folder)
from rdx.paths import output_arg

#: The flag of each parameter of :func:`rdx.models.presets.train_preset`, for messages.
FLAGS = {"out": "--out", "epochs": "--epochs"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``rdx train`` (the preset list is the help's epilog)."""
    p.description = "Train ConvNet checkpoints for the experiments."
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "presets:\n" + preset_table()
    p.add_argument("--preset", nargs="+", metavar="NAME",
                   help="preset(s) to train (or a group: mnist_all)")
    p.add_argument("--list", action="store_true", help="list the presets and exit")
    p.add_argument("--out", default="checkpoints", type=output_arg,
                   help="root folder (default: checkpoints)")
    p.add_argument("--epochs", type=int, help="override the preset's epochs (checkpoint steps "
                                              "past the shorter run are skipped)")
    p.add_argument("--seed", type=seed_int, default=0, help="training seed (default 0)")
    p.add_argument("--twins", type=int, default=0, metavar="N",
                   help="also train N seed twins of each preset (seeds SEED+1 … SEED+N, each "
                        "into OUT/PRESET_seedS/): the twin null of --significance and of a "
                        "config's significance.twins (default 0)")
    add_device_flag(p, what="where the model trains")
    p.add_argument("--data-root", default="data", help="dataset root (default: data)")
    p.add_argument("--save-every", metavar="LIST",
                   help="override the checkpoint schedule: comma-separated 'epoch', "
                        "'every:N' (every N steps) and step numbers, e.g. epoch,0,4,8")
    p.add_argument("--per-class", type=int, metavar="N",
                   help="override the preset's training images per class")
    p.add_argument("--restart", action="store_true",
                   help="train from step 0 even when an interrupted (or finished) run of the "
                        "same settings can be resumed")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run_command(args: argparse.Namespace) -> int:
    """``rdx train``: bad input raises :class:`RDXInputError` (exit status 2)."""
    from rdx.backend import check_device
    from rdx.commands.common import check_output_dir

    if args.list:
        print(preset_table())
        return 0
    if not args.preset:
        raise RDXInputError("give --preset NAME (or --list to see them).")
    names = expand_presets(args.preset)
    check_device(args.device)
    check_output_dir(args.out, "--out", create=False)
    for flag, value in (("--epochs", args.epochs), ("--per-class", args.per_class)):
        if value is not None and value < 1:
            raise RDXInputError(f"{flag} must be a positive integer, got {value}.")
    V.check_int(args.twins, "--twins", minimum=0, maximum=16)
    if args.seed + args.twins > 2**32 - 1:
        raise RDXInputError(f"--seed {args.seed} with --twins {args.twins}: the twins' seeds "
                            "run past 2**32 − 1; give a smaller --seed.")
    overrides: dict = {}
    if args.save_every is not None:
        overrides["save_every"] = parse_save_every(args.save_every, "--save-every")
    if args.per_class is not None:
        overrides["per_class"] = args.per_class
    for name in names:
        # the model, then its seed twins: the same recipe, seeds seed+1 … seed+twins
        for k in range(args.twins + 1):
            seed = args.seed + k
            folder = name if k == 0 else twin_folder(name, seed)
            t0 = time.perf_counter()
            paths = train_preset(name, out=args.out, epochs=args.epochs, seed=seed,
                                 device=args.device, data_root=args.data_root,
                                 progress=not args.quiet, overrides=overrides,
                                 resume=not args.restart, folder=folder, names=FLAGS)
            _summarise(folder if k == 0 else f"{folder} (seed twin of {name})", paths,
                       time.perf_counter() - t0)
    return 0


def _summarise(name: str, paths: list[Path], seconds: float) -> None:
    import json

    from rdx.models.checkpoint import sidecar_path

    print(f"{name}: {len(paths)} checkpoints in {paths[-1].parent} ({seconds:.1f} s)")
    for p in paths:
        meta = json.loads(sidecar_path(p).read_text())
        test = meta.get("test_accuracy")
        print(f"  {p.name:24s} train acc {meta['train_accuracy']:.4f}"
              + ("" if test is None else f"  test acc {test:.4f}"))

