#!/usr/bin/env python3
"""Kept for users of the original layout: the same as ``rdx dynamics ...``
(:mod:`rdx.commands.dynamics`)."""
import sys
from pathlib import Path

try:
    import rdx  # noqa: F401
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rdx.commands.dynamics import *  # noqa: E402,F401,F403  (the functions, for scripts importing them)
from rdx.commands.dynamics import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
