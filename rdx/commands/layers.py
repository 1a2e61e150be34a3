"""``rdx layers --config configs/layers_<name>.yaml``: the layer-wise study of one model
(RDX on consecutive layers, probes, head patching), ending in its report."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..flags import add_deprecated_alias, add_device_flag
from ..paths import output_arg


# the options live here, not in the study package, so that ``rdx layers --help`` and usage
# errors answer without importing torch
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rdx layers``."""
    parser.add_argument("--config", required=True,
                        help="a layer-wise study config (configs/layers_*.yaml)")
    parser.add_argument("--out", dest="output", metavar="DIR", type=output_arg,
                        help="output folder (default: the config's output, or "
                             "outputs/layers/<name>)")
    # the spelling of earlier releases, kept working (every command says --out)
    add_deprecated_alias(parser, "--output", "--out", "output", type=output_arg)
    add_device_flag(parser, default=None, what="where the models run")
    parser.add_argument("--force", action="store_true",
                        help="recompute finished layer pairs and heads")
    parser.add_argument("--check", action="store_true",
                        help="validate the config and stop")
    parser.add_argument("--no-report", action="store_true",
                        help="skip report.html and the explorer of the layer pairs "
                             "(pairs/explore.html; `rdx explore DIR/pairs` writes it later)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def run_command(args: argparse.Namespace, *,
                report: Callable[[Path], Path] | None = None) -> int:
    """``rdx layers --config ...``: run the study, then ``report(output folder)`` (by default
    :func:`rdx.report.layers.write_layers_report`) unless ``--no-report``."""
    from ..configs import validate
    from ..paths import check_output_dir
    from ..studies.layers import LayersConfig, load_layers_config, run_layers

    if report is None:
        from ..report.layers import write_layers_report as report
    cfg = load_layers_config(args.config)
    updates: dict[str, Any] = {}
    given = getattr(args, "output", None) is not None
    if given:
        updates["output"] = str(args.output)
    if getattr(args, "device", None):
        updates["device"] = args.device
    if updates:
        cfg = validate(LayersConfig, {**cfg.model_dump(), **updates}, str(args.config))
    # before the study — and part of --check, which says the output is usable: a file
    # there, a path under a file, no rights
    check_output_dir(cfg.output_dir, "--out" if given else "output (config)", create=False)
    if getattr(args, "check", False):
        if not args.quiet:
            print(f"{args.config}: valid; output {cfg.output_dir}")
        return 0
    doc = run_layers(cfg, force=bool(getattr(args, "force", False)),
                     progress=not getattr(args, "quiet", False))
    if not getattr(args, "no_report", False):
        # the explorer first: the report links it when it is there (as rdx run does)
        _write_explorer(Path(cfg.output_dir) / "pairs", quiet=bool(args.quiet))
        path = report(cfg.output_dir)
        if not args.quiet:
            print(f"report: {path}")
    if not args.quiet:
        print(f"layer-wise study written to {cfg.output_dir} "
              f"({doc['timings_s']['total']:.1f} s)")
    return 0


def _write_explorer(pairs: Path, *, quiet: bool) -> Path | None:
    """The explorer of a study's layer pairs (``pairs/explore.html``); a failure costs only
    the page (warned): the study's results are complete."""
    import sys

    try:
        from ..explorer import build_explorer

        page = build_explorer(pairs, progress=not quiet)
    except Exception as exc:  # noqa: BLE001 - the results are safe; only the page failed
        print(f"rdx layers: warning: the explorer could not be written ({exc}); retry with "
              f"`rdx explore {pairs}`.", file=sys.stderr)
        return None
    if not quiet:
        print(f"explorer: {page}")
    return page
