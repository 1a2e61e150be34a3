"""The one config layer: YAML files validated by pydantic models.

Every config the project reads (experiments, training dynamics, similarity matrices,
layer-wise studies) is a :class:`StrictModel`: unknown keys are refused, and every error
names its key path exactly as the user wrote it (``comparisons[1].methods[0].gamma: ...``),
so a typo costs seconds, not a half-finished run. :func:`load_config` reads a file and
returns the validated model; :func:`validate` does the same for a dict.

Each part is validated once, by the model that holds it. A method's parameters are
validated by a model made from the estimator's own declarations (:func:`options_model`;
for RDX :data:`rdx.method.options.RDX_OPTIONS`), so that a config accepts exactly what the
estimator and ``rdx explain`` accept, with the same defaults and the same messages.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, \
    create_model, model_validator

from .errors import RDXInputError
from .io import read_yaml

M = TypeVar("M", bound=BaseModel)

class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors, values are not coerced silently
    (``"3"`` is not an int), and a model is immutable once validated."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_validator(mode="after")
    def _within_ceilings(self) -> "StrictModel":
        # every count that multiplies work (rdx.budget.CEILINGS, by the key's name) and
        # every seed is bounded in every config section, as check_int and the seed flags
        # bound them for options: one check for every config, present and future
        from .budget import check_ceiling
        from .flags import SEED_MAX

        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                try:
                    check_ceiling(value, name)
                except RDXInputError as exc:
                    raise ValueError(str(exc)) from None
                # seeds: the range every generator they reach accepts, checked before work
                if (name in ("seed", "random_state") or name.endswith("_seed")) and \
                        not 0 <= value <= SEED_MAX:
                    raise ValueError(f"{name}={value} is not a seed: use an integer from 0 "
                                     f"to {SEED_MAX} (2**32 - 1)")
        return self


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


def input_error(exc: ValidationError, where: str = "config", *,
                key_path: bool = False) -> RDXInputError:
    """One readable message (one line per problem) from a pydantic ``ValidationError``.

    ``where`` names what was validated: a file (``configs/x.yaml: seed: ...``) or, with
    ``key_path``, the key path of a part of one (``comparisons[1].methods[0].gamma: ...``).
    """
    lines = []
    for err in exc.errors(include_url=False):
        path = error_path(tuple(err.get("loc", ())))
        msg = str(err.get("msg", "invalid value"))
        msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown key (check the spelling; see the documented keys)"
        if key_path:
            lines.append(f"{where}{'' if path.startswith('[') else '.'}{path}: {msg}"
                         if path else f"{where}: {msg}")
        else:
            lines.append(f"{path}: {msg}" if path else msg)
    seen = list(dict.fromkeys(lines))
    text = "\n  ".join(seen) if len(seen) > 1 else seen[0]
    return RDXInputError(text if key_path else f"{where}: {text}")


def check_ceilings(data: Any, where: str = "config") -> None:
    """Refuse a count that multiplies work (``epochs``, ``n_epochs``, ``permutations``, ...)
    above its ceiling (:data:`rdx.budget.CEILINGS`) anywhere in a config, naming its key
    path: the config models bound these counts only from below."""
    from .budget import CEILINGS, check_ceiling

    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, node = stack.pop()
        items = (node.items() if isinstance(node, dict) else
                 ((f"[{i}]", v) for i, v in enumerate(node)) if isinstance(node, list) else ())
        for key, value in items:
            sub = f"{path}{key}" if str(key).startswith("[") else \
                f"{path}.{key}" if path else str(key)
            if key in CEILINGS and isinstance(value, int) and not isinstance(value, bool):
                try:
                    check_ceiling(value, str(key))
                except RDXInputError as exc:
                    raise RDXInputError(f"{where}: {sub}: {exc}") from None
            stack.append((sub, value))


def validate(model: type[M], data: Any, where: str = "config", *,
             key_path: bool = False) -> M:
    """``data`` validated as ``model``; problems become one :class:`RDXInputError` (see
    :func:`input_error` for ``where`` and ``key_path``). Counts above their ceilings are
    refused first (:func:`check_ceilings`)."""
    if not isinstance(data, dict):
        raise RDXInputError(f"{where}: expected a mapping of keys, got {type(data).__name__}")
    check_ceilings(data, where)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise input_error(exc, where, key_path=key_path) from None


def load_config(path: str | os.PathLike, model: type[M], what: str = "config") -> M:
    """Read a YAML file and validate it as ``model``."""
    return validate(model, read_yaml(path, what), str(path))


# --- models from parameter declarations ---------------------------------------------------
def _annotation(option: Any) -> Any:
    """The Python type of a declared option (:class:`rdx.method.options.Option`): its
    choices as a ``Literal``, else its types with its special values."""
    if option.kind == "choice":
        return Literal[tuple(option.choices)]
    if not option.types:
        return Any
    # an int is a valid float parameter (YAML writes 5 for 5.0)
    types = (float, int) if option.kind == "float" else option.types
    parts = list(types)
    words = tuple(s for s in option.special if s is not None)
    if words:
        parts.append(Literal[words])
    if any(s is None for s in option.special):
        parts.append(type(None))
    return Union[tuple(parts)] if len(parts) > 1 else parts[0]


def _checked(option: Any) -> BeforeValidator:
    """The option's own check, run before the type: the same refusal, word for word, as
    the estimator's (numpy scalars, which Python callers may pass, are checked as the
    numbers they hold)."""
    def check(value: Any) -> Any:
        option.check(value)   # raises RDXInputError, a ValueError: pydantic reports it
        return value.item() if hasattr(value, "item") and hasattr(value, "dtype") else value
    return BeforeValidator(check)


def options_model(name: str, options: Iterable[Any], *,
                  extra: dict[str, tuple[Any, Any]] | None = None) -> type[StrictModel]:
    """A :class:`StrictModel` with one field per declared option that configs set
    (``option.config``): the option's type, default and help as the field's annotation,
    default and description, and its check as the field's validator. ``extra``: more
    fields, ``{name: (annotation, default)}`` (keys only configs have)."""
    fields: dict[str, Any] = {}
    for option in options:
        if option.config:
            fields[option.name] = (
                Annotated[_annotation(option), _checked(option)],
                Field(default=option.default, description=option.help))
    for key, (annotation, default) in (extra or {}).items():
        fields[key] = (annotation, default)
    return create_model(name, __base__=StrictModel, **fields)


def validate_params(model: type[M], params: dict[str, Any], where: str) -> M:
    """A method's ``params`` validated as ``model`` (:func:`options_model`); the first
    problem becomes an :class:`RDXInputError` ``"<where>: <message>"``, the message naming
    its key (the options' own messages do; pydantic's get the key in front)."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = error_path(tuple(err.get("loc", ())))
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = f"{key}: unknown parameter (check the spelling; see the documented keys)"
        elif key and not msg.startswith(key):
            msg = f"{key}: {msg}"
        raise RDXInputError(f"{where}: {msg}") from None
