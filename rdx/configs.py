"""The one config layer: YAML files validated by pydantic models.

Every config the project reads (experiments, training dynamics, similarity matrices,
layer-wise studies) is a :class:`StrictModel`: unknown keys are refused, and every error
names its key path exactly as the user wrote it (``comparisons[1].methods[0].gamma: ...``),
so a typo costs seconds, not a half-finished run. :func:`load_config` reads a file and
returns the validated model; :func:`validate` does the same for a dict.

Each part is validated once, by the model that holds it; method parameters are still
checked by the estimators themselves (the models call their checks in validators).
"""
from __future__ import annotations

import os
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import RDXInputError
from .io import read_yaml

M = TypeVar("M", bound=BaseModel)

class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors, values are not coerced silently
    (``"3"`` is not an int), and a model is immutable once validated."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def check_safe_name(value: Any, what: str = "name") -> str:
    """For field validators: ``value`` if it is a single safe folder name (see
    :func:`rdx.results.store.check_path_component`)."""
    from .results.store import check_path_component
    return check_path_component(value, what)


def error_path(loc: tuple[Any, ...]) -> str:
    """pydantic's error location as the user's key path: ``comparisons[1].methods[0].gamma``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and "[" not in part and "-" not in part:
            out += f".{part}" if out else part
        # union-branch tags such as "function-after[...]" carry no key: skip them
    return out


def input_error(exc: ValidationError, where: str = "config") -> RDXInputError:
    """One readable message (one line per problem) from a pydantic ``ValidationError``."""
    lines = []
    for err in exc.errors(include_url=False):
        path = error_path(tuple(err.get("loc", ())))
        msg = str(err.get("msg", "invalid value"))
        msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown key (check the spelling; see the documented keys)"
        lines.append(f"{path}: {msg}" if path else msg)
    seen = list(dict.fromkeys(lines))
    return RDXInputError(f"{where}: " + ("\n  ".join(seen) if len(seen) > 1 else seen[0]))


def validate(model: type[M], data: Any, where: str = "config") -> M:
    """``data`` validated as ``model``; problems become one :class:`RDXInputError`."""
    if not isinstance(data, dict):
        raise RDXInputError(f"{where}: expected a mapping of keys, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise input_error(exc, where) from None


def load_config(path: str | os.PathLike, model: type[M], what: str = "config") -> M:
    """Read a YAML file and validate it as ``model``."""
    return validate(model, read_yaml(path, what), str(path))
