#!/usr/bin/env python3
"""Kept for users of the original layout: the same as ``rdx matrix ...``
(:mod:`rdx.commands.matrix`)."""
import sys
from pathlib import Path

try:
    import rdx  # noqa: F401
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rdx.commands.matrix import *  # noqa: E402,F401,F403  (the functions, for scripts importing them)


def main(argv: list[str] | None = None) -> int:
    """``rdx matrix ARGV`` (:func:`rdx.cli.main`): exit status 0, or 2 for bad input."""
    from rdx.cli import main as rdx_main

    return rdx_main(["matrix", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
