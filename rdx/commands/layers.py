"""``rdx layers --config configs/layers_<name>.yaml``: the layer-wise study of one model
(RDX on consecutive layers, probes, head patching), ending in its report."""
from __future__ import annotations

import argparse

from ..paths import output_arg


# the options live here, not in the study module, so that ``rdx layers --help`` and usage
# errors answer without importing torch
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``rdx layers``."""
    parser.add_argument("--config", required=True,
                        help="a layer-wise study config (configs/layers_*.yaml)")
    parser.add_argument("--output", type=output_arg,
                        help="output folder (default: the config's output, or "
                                         "outputs/layers/<name>)")
    parser.add_argument("--device", help="override the config's device (auto, cpu, cuda)")
    parser.add_argument("--force", action="store_true",
                        help="recompute finished layer pairs and heads")
    parser.add_argument("--check", action="store_true",
                        help="validate the config and stop")
    parser.add_argument("--no-report", action="store_true", help="skip report.html")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def run_command(args: argparse.Namespace) -> int:
    from ..experiments.layers import run_command as run_layers
    from ..report.layers import write_layers_report

    return run_layers(args, report=write_layers_report)
