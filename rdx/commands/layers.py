"""``rdx layers --config configs/layers_<name>.yaml``: the layer-wise study of one model
(RDX on consecutive layers, probes, head patching), ending in its report."""
from __future__ import annotations

import argparse

from ..experiments.layers import add_arguments  # noqa: F401  (the command's options)


def run_command(args: argparse.Namespace) -> int:
    from ..experiments.layers import run_command as run_layers
    from ..report.layers import write_layers_report

    return run_layers(args, report=write_layers_report)
