"""What the commands share: output-location checks before long work, ``--param`` parsing."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import RDXInputError


def _nearest_existing(p: Path) -> Path:
    top = p
    while not top.exists() and top != top.parent:
        top = top.parent
    return top


def check_output_dir(path: str | os.PathLike, flag: str = "--out", *,
                     create: bool = True) -> Path:
    """A folder the command may write into, checked before any work: created if needed
    (``create=False``: only checked — the nearest existing folder above it must be
    writable, so a refused run leaves nothing behind); refused (with what to do) when it is
    a file, lies under a file or is not writable."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise RDXInputError(f"{flag} {str(p)!r} is a file; give a folder (it is created if "
                            "missing).")
    top = _nearest_existing(p)
    if top.exists() and not top.is_dir():
        raise RDXInputError(f"{flag} {str(p)!r} lies under the file {str(top)!r}; give a "
                            "folder path.")
    try:
        if create:
            p.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=p if create else top):
            pass
    except OSError as exc:
        where = "" if top == p else f" in {str(top)!r}"
        raise RDXInputError(f"{flag} {str(p)!r} cannot be created or written{where} "
                            f"({exc.strerror or exc}); choose a folder you can write to."
                            ) from None
    return p


def check_output_file(path: str | os.PathLike, flag: str = "--out") -> Path:
    """A file the command will write, checked before any work: not a folder, and its
    folder can be written."""
    p = Path(path)
    if p.is_dir():
        raise RDXInputError(f"{flag} {str(p)!r} is a folder; give a file name, e.g. "
                            f"{str(p / 'scores.json')!r}.")
    if p.name in ("", ".", ".."):
        raise RDXInputError(f"{flag} {str(p)!r} names a folder; give a file name.")
    top = _nearest_existing(p.parent)
    if top.exists() and not top.is_dir():
        raise RDXInputError(f"{flag} {str(p)!r} lies under the file {str(top)!r}; give a path "
                            "in a folder.")
    # only checked: the file's folder is made when the file is written
    check_output_dir(p.parent if str(p.parent) else ".", f"the folder of {flag}", create=False)
    return p


def parse_params(items: list[str]) -> dict:
    """``--param KEY=VALUE`` items (values parsed as YAML) as a dict."""
    import yaml

    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RDXInputError(f"--param {item!r}: expected KEY=VALUE, e.g. --param n_epochs=50")
        try:
            params[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise RDXInputError(f"--param {item!r}: the value is not valid YAML ({exc}).") \
                from None
    return params
