"""What the commands share: output-location checks before long work, ``--param`` parsing,
argparse types that take ``auto`` or a number."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import RDXInputError
# the output checks live in rdx.paths (one check for every command); re-exported here,
# where the commands have always found them
from ..paths import check_output_dir, check_output_file, check_output_location, output_arg

__all__ = ["auto_float", "auto_int", "auto_or", "check_output_dir", "check_output_file",
           "check_output_location", "explore_paths", "output_arg", "parse_params"]


def explore_paths(args: argparse.Namespace) -> None:
    """The path checks of ``rdx explore`` (called by :func:`rdx.cli.main` before the
    command: its module lives with the explorer): the page must be writable, fit the free
    space at its size budget, and not replace any file of the comparison it shows (its
    results, report, grids) other than an earlier ``explore.html``."""
    from ..results.store import EXPLORE_HTML, comparison_data_files

    comp = Path(args.comparison_dir)
    if not comp.is_dir():
        return   # the explorer says what a comparison folder is
    given = args.out is not None
    max_mb = getattr(args, "max_mb", None)
    # the page's size budgets become byte counts (here and in the explorer): infinity
    # or NaN would overflow them
    from ..validation import check_number, check_positive
    if max_mb is not None:
        check_positive(max_mb, "--max-mb")
    if getattr(args, "selection_mb", None) is not None:
        check_number(args.selection_mb, "--selection-mb", "a finite size in MB (0: none)")
    # every file of the comparison is protected, not only those the explorer reads: a page
    # written over report.html or a grid would destroy what another command made. The
    # page's own default place (explore.html, rewritten on every run) is the exception.
    kept = [p for p in comp.rglob("*") if p.name != EXPLORE_HTML and p.is_file()]
    check_output_file(args.out if given else comp / EXPLORE_HTML,
                      "--out" if given else "the page COMPARISON_DIR/explore.html",
                      inputs=[*comparison_data_files(comp), *kept], example=EXPLORE_HTML,
                      need_bytes=int(max_mb * 1e6) if max_mb and max_mb > 0 else None)


def parse_params(items: list[str]) -> dict:
    """``--param KEY=VALUE`` items (values parsed as YAML, :func:`rdx.io.parse_yaml`:
    malformed or absurdly nested values are refused) as a dict."""
    from ..io import parse_yaml

    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RDXInputError(f"--param {item!r}: expected KEY=VALUE, e.g. --param n_epochs=50")
        shown = item if len(item) <= 60 else item[:57] + "..."   # a value may be huge
        params[key.strip()] = parse_yaml(value, f"--param {shown!r}")
    return params


def auto_or(cast: type, what: str, *, none: bool = False, extra: tuple[str, ...] = ()) -> Any:
    """An argparse type: ``auto``, ``none`` (when ``none``; parsed as None), the ``extra``
    words or a ``cast`` value."""
    words = ("auto", *extra, "none") if none else ("auto", *extra)
    options = [what, *(repr(w) for w in words)]
    expected = ", ".join(options[:-1]) + " or " + options[-1]

    def parse(text: str) -> Any:
        if text in words:
            return None if text == "none" else text
        try:
            return cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    return parse


auto_float = auto_or(float, "a number", none=True)
auto_int = auto_or(int, "an integer", extra=("null",))
