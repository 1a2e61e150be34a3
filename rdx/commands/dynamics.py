#!/usr/bin/env python
"""Difference clustering over training: every saved checkpoint against the final model.

    python rdx dynamics --config configs/training_dynamics_fashion5.yaml
    python rdx dynamics --config configs/training_dynamics_butterflies.yaml

Steps (see :mod:`rdx.studies.dynamics`):

1. training, when the config has a ``train`` section and the final checkpoint is missing:
   ``rdx train``'s preset (``train: {preset: NAME, <preset field>: value,
   ...}``), written to ``checkpoints.dir``;
2. for every checkpoint C_t: features and logits of the probe images (one forward pass,
   cached), RDX of the final model (A) against C_t (B) with 10 clusters and the no-change
   rule, the per-checkpoint summary (resumable: finished checkpoints are reused);
3. clusters followed across checkpoints (Hungarian matching on member overlap: a track
   id per cluster); ``dynamics.json``, ``dynamics.csv``, ``clusters.csv``, the figures
   (curves, every cluster's class make-up across checkpoints, the grids of every cluster at
   one checkpoint, PCA panels) and ``report.html`` in the config's ``output`` folder.

Options: ``--out DIR`` (instead of the config's; ``--output`` is the old spelling),
``--force`` (recompute every checkpoint), ``--no-train`` (fail instead of training),
``--device``, ``--grids-at C`` (the checkpoint whose clusters' grids are drawn),
``--quiet``.
A missing dataset, checkpoint or bad config exits with status 2 and a one-paragraph message.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rdx.errors import RDXInputError
from rdx.flags import add_deprecated_alias, add_device_flag
from rdx.paths import output_arg

#: ``train`` keys that are not preset fields.
TRAIN_KEYS = {"preset", "seed", "epochs", "data_root"}


def train_if_needed(cfg: dict, *, allow: bool = True, device: str = "auto",
                    progress: bool = True) -> list[Path] | None:
    """Train the config's ``train`` preset into ``checkpoints.dir`` if its final checkpoint
    is missing; returns the checkpoints written (None when nothing was trained)."""
    ck = cfg["checkpoints"]
    final = Path(ck["dir"]) / ck["final"]
    train = cfg.get("train")
    if final.is_file() or train is None:
        return None
    if not allow:
        raise RDXInputError(f"{final} does not exist and --no-train was given; train it with "
                            f"rdx train --preset {train['preset']} --out "
                            f"{Path(ck['dir']).parent}.")
    from ..models import presets as tc
    name = train["preset"]
    if name not in tc.PRESETS:
        raise RDXInputError(f"train.preset: unknown preset {name!r}; choose from "
                            f"{', '.join(tc.PRESETS)}.")
    overrides = {k: v for k, v in train.items() if k not in TRAIN_KEYS}
    if "save_every" in overrides:
        se = overrides["save_every"]
        overrides["save_every"] = tc.parse_save_every(
            ",".join(map(str, se)) if isinstance(se, list) else str(se), "train.save_every")
    if "class_subset" in overrides and overrides["class_subset"] is not None:
        overrides["class_subset"] = tuple(overrides["class_subset"])
    out = Path(ck["dir"])
    if out.name != name:
        raise RDXInputError(f"checkpoints.dir must end in the preset's name ({name!r}) when "
                            f"the config trains it (train_classifier writes <out>/{name}/), "
                            f"got {out}.")
    print(f"training {name} into {out} (final checkpoint {final.name} is missing)",
          file=sys.stderr)
    t0 = time.perf_counter()
    paths = tc.train_preset(name, out=out.parent, epochs=train.get("epochs"),
                            seed=int(train.get("seed", 0)), device=device,
                            data_root=train.get("data_root", "data"), progress=progress,
                            overrides=overrides)
    print(f"trained {len(paths)} checkpoints in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    return paths


def run(cfg: dict, *, force: bool = False, train: bool = True, progress: bool = True) -> dict:
    """Train (if needed), analyse every checkpoint, draw the figures and write the report."""
    from rdx.studies.dynamics import run_dynamics
    from rdx.report.dynamics import write_dynamics_figures, write_dynamics_report

    train_if_needed(cfg, allow=train, device=cfg["device"], progress=progress)
    doc = run_dynamics(cfg, force=force, progress=progress)
    t0 = time.perf_counter()
    written = write_dynamics_figures(cfg["output"], doc)
    report = write_dynamics_report(cfg["output"], doc)
    if progress:
        n_figs = sum(len(v) for v in written.values())
        first = doc["no_change_from"]
        print(f"{doc['name']}: {len(doc['checkpoints'])} checkpoints analysed in "
              f"{doc['timings']['total']:.1f} s (features {doc['timings']['features']:.1f} s, "
              f"RDX {doc['timings']['rdx']:.1f} s); {n_figs} figures and the report in "
              f"{time.perf_counter() - t0:.1f} s")
        print("cluster 0 becomes the no-change cluster at "
              + ("no checkpoint" if first is None else
                 f"C{first} ({doc['checkpoints'][first]['checkpoint']})"))
        print(f"report: {report}")
    return doc


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``rdx dynamics``."""
    p.description = __doc__.split("\n")[0]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--config", required=True,
                   help="configs/training_dynamics_<dataset>.yaml")
    p.add_argument("--out", dest="output", metavar="DIR", type=output_arg,
                   help="output folder (default: the config's 'output')")
    # the first spelling, still accepted (every other command says --out)
    add_deprecated_alias(p, "--output", "--out", "output", type=output_arg)
    p.add_argument("--force", action="store_true", help="recompute every checkpoint")
    p.add_argument("--no-train", action="store_true",
                   help="do not train missing checkpoints (exit 2 instead)")
    add_device_flag(p, default=None, what="where the checkpoints and RDX run")
    p.add_argument("--grids-at", metavar="C",
                   help="draw the grid of every cluster at this checkpoint: an index (5 or "
                        "C5) or a checkpoint name (default: the config's figures.grids_at, "
                        "auto = where cluster 0 becomes the no-change group)")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def run_command(args: argparse.Namespace) -> int:
    """``rdx dynamics``: bad input raises :class:`RDXInputError` (exit status 2)."""
    from rdx.commands.common import check_output_dir
    from rdx.studies.dynamics import load_config

    cfg = load_config(args.config)
    if args.output is not None:
        cfg["output"] = args.output
    if args.device:
        cfg["device"] = args.device
    if args.grids_at is not None:
        wanted = args.grids_at
        cfg["figures"] = {**(cfg.get("figures") or {}),
                          "grids_at": int(wanted) if wanted.isdigit() else wanted}
    # before any work: a file there, a path under a file, no rights
    check_output_dir(cfg["output"], "--out" if args.output is not None else
                     "output (config)", create=False)
    run(cfg, force=args.force, train=not args.no_train, progress=not args.quiet)
    return 0
