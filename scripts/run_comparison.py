#!/usr/bin/env python
"""Run an experiment config: ``python scripts/run_comparison.py --config configs/X.yaml
[--only COMPARISON] [--output-root outputs] [--device cpu|cuda] [--force]``.

Same as ``rdx run ...``; kept under this name for users of the original research code.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rdx.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(["run", *sys.argv[1:]]))
