"""Command-line flags made from parameter declarations, and earlier spellings kept working.

* :func:`add_option_flags` turns a table of :class:`rdx.method.options.Option` into argparse
  options — type, default, choices and help come from the declaration, so a command's
  flags cannot drift from the estimator they set — and :func:`option_values` reads them
  back as the estimator's parameters.
* :func:`add_deprecated_alias` keeps a flag's earlier spelling working, hidden from
  ``--help``; using it prints one line naming the current spelling.

Only argparse and the standard library here: ``--help`` of every command stays instant.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["DeprecatedAlias", "SEED_MAX", "add_deprecated_alias", "add_device_flag",
           "add_option_flags", "cli_word", "device_name", "finite_float", "option_values",
           "seed_int"]

#: Largest seed: numpy's and scikit-learn's generators take seeds in 0..2³²−1.
SEED_MAX = 2**32 - 1


def seed_int(text: str) -> int:
    """argparse ``type`` of every seed flag (``--seed``, ``--seeds``): an integer in
    0..:data:`SEED_MAX`, the range every generator the commands seed accepts — refused where
    the flag is read, not by the first generator that meets it, after work has started."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"{value} is not a seed: use an integer from 0 to "
                                         f"{SEED_MAX} (2**32 - 1)")
    return value


def finite_float(text: str) -> float:
    """argparse ``type`` of a real-valued flag: a finite number. ``float`` alone would take
    ``nan`` and ``inf``, which pass every range check written as a comparison (or overflow
    later, in a conversion to int); this refuses them where the flag is read."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


finite_float.__name__ = "number"   # argparse names the type in its own messages


class DeprecatedAlias(argparse.Action):
    """An earlier spelling of a flag: hidden from ``--help``, stores into the same ``dest``
    as the current flag ``new`` (appending with ``extend=True``) and says once on stderr
    which spelling to use instead."""

    def __init__(self, option_strings: list[str], dest: str, *, new: str,
                 extend: bool = False, **kwargs: Any) -> None:
        kwargs["help"] = argparse.SUPPRESS
        kwargs.setdefault("default", argparse.SUPPRESS)   # the current flag's default holds
        super().__init__(option_strings, dest, **kwargs)
        self.new = new
        self.extend = extend

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"{parser.prog}: {option_string} is deprecated, use {self.new} (same meaning).",
              file=sys.stderr)
        if self.nargs == 0:   # an earlier spelling of a switch
            values = self.const
        if self.extend:
            items = list(getattr(namespace, self.dest, None) or [])
            items.extend(values if isinstance(values, list) else [values])
            values = items
        setattr(namespace, self.dest, values)


#: The device names every ``--device`` takes (whether one is present is checked before the
#: work, by :func:`rdx.backend.check_device`).
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def device_name(text: str) -> str:
    """``--device``'s value: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (argparse type)."""
    if not _DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use auto, cpu, cuda or "
                                         "cuda:N")
    return text


def add_device_flag(parser: argparse.ArgumentParser, *, default: str | None = "auto",
                    what: str = "where the models run") -> None:
    """The one declaration of ``--device`` that every command uses. ``default=None``: the
    config's device unless the flag is given."""
    text = ("default: the config's" if default is None
            else "default %(default)s" + (": cuda when available" if default == "auto" else ""))
    parser.add_argument("--device", type=device_name, default=default,
                        metavar="auto|cpu|cuda[:N]", help=f"{what} ({text})")


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str, dest: str,
                         **kwargs: Any) -> None:
    """Accept ``old`` as a hidden spelling of the flag ``new`` (same ``dest``; ``kwargs``:
    ``type``, ``nargs``, ``extend``, as the current flag takes its value)."""
    parser.add_argument(old, dest=dest, action=DeprecatedAlias, new=new, **kwargs)


# --- options from declarations -----------------------------------------------------------
def cli_word(option: Any, value: Any) -> Any:
    """How ``value`` of ``option`` is written on the command line: None as the option's
    ``none_word``, booleans as ``true``/``false``, numbers unchanged."""
    if value is None:
        return option.none_word
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _words(option: Any, values: Iterable[Any]) -> list[str]:
    return [str(cli_word(option, v)) for v in values]


def _number_or_words(option: Any) -> Callable[[str], Any]:
    """argparse ``type`` of an int or float option with special values: a special word
    (kept as the word) or a number."""
    cast = int if option.kind == "int" else float
    words = _words(option, option.special)
    base = "an integer" if cast is int else "a number"
    expected = ", ".join([base, *map(repr, words[:-1])]) + \
        (f" or {words[-1]!r}" if words else "")

    def parse(text: str) -> Any:
        if text in words:
            return text
        try:
            return cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    parse.__name__ = f"{option.name} value"   # named in argparse's own messages
    return parse


def flag_spec(option: Any) -> dict[str, Any]:
    """The ``add_argument`` keywords of one declared option (without its flag)."""
    spec: dict[str, Any] = {"dest": option.name}
    help_text = option.help.replace("%", "%%")
    if option.kind == "bool" and not option.special and option.default is False:
        spec.update(action="store_true", default=False, help=help_text)
        return spec
    if option.kind == "bool":
        spec["choices"] = _words(option, (*option.special, True, False))
    elif option.kind == "choice":
        spec["choices"] = _words(option, option.choices)
    elif option.kind in ("int", "float"):
        spec["type"] = _number_or_words(option) if option.special else \
            (int if option.kind == "int" else float)
        if option.metavar:
            spec["metavar"] = option.metavar
    else:
        raise TypeError(f"{option.name}: no command-line form for values of "
                        f"{option.types}; give it no flag")
    spec["default"] = cli_word(option, option.default)
    spec["help"] = f"{help_text} (default %(default)s)"
    return spec


def add_option_flags(parser: argparse.ArgumentParser | Any, options: Iterable[Any]) -> None:
    """One flag per declared option that has one (``option.flag``), with the option's name
    as ``dest``, and a hidden alias per earlier spelling (``option.aliases``)."""
    for option in options:
        if option.flag is None:
            continue
        spec = flag_spec(option)
        parser.add_argument(option.flag, **spec)
        for old in option.aliases:
            extra = {k: spec[k] for k in ("type", "choices", "metavar") if k in spec}
            if spec.get("action") == "store_true":
                extra = {"nargs": 0, "const": True}
            add_deprecated_alias(parser, old, option.flag, option.name, **extra)


def option_flags(options: Iterable[Any]) -> dict[str, str]:
    """Each declared option's name → its flag (those that have one): the mapping of
    :func:`rdx.validation.flag_names`, so that a parameter's check names the flag."""
    return {o.name: o.flag for o in options if o.flag is not None}


def option_values(args: argparse.Namespace, options: Iterable[Any]) -> dict[str, Any]:
    """The parameters the flags of :func:`add_option_flags` set, as the estimator takes
    them (words back to None, True, False and the choices)."""
    out: dict[str, Any] = {}
    for option in options:
        if option.flag is None:
            continue
        value = getattr(args, option.name)
        if isinstance(value, str):
            allowed = (*option.special, *(option.choices or ()),
                       *((True, False) if option.kind == "bool" else ()))
            value = {str(cli_word(option, v)): v for v in allowed}.get(value, value)
        out[option.name] = value
    return out
