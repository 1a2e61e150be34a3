"""scikit-learn's estimator parameter protocol, without importing scikit-learn.

Estimators keep their constructor arguments as attributes of the same names; ``get_params``,
``set_params`` and the repr work from the constructor's signature, exactly as for
:class:`sklearn.base.BaseEstimator`, so :func:`sklearn.base.clone`, grid searches and
pipelines accept RDX's estimators. The reason for not inheriting scikit-learn's class:
importing any part of scikit-learn costs ~0.6 s (it loads ``scipy.stats`` and pandas), a
third of a whole ``rdx explain`` at the paper's sizes, which otherwise needs none of it.
"""
from __future__ import annotations

import inspect
from typing import Any


class Params:
    """Mixin: ``get_params``/``set_params``/``repr`` from the ``__init__`` signature."""

    @classmethod
    def _get_param_names(cls) -> list[str]:
        init = cls.__init__
        if init is object.__init__:
            return []
        params = inspect.signature(init).parameters.values()
        if any(p.kind == p.VAR_POSITIONAL for p in params):
            raise TypeError(f"{cls.__name__} must not take *args: scikit-learn's parameter "
                            "protocol needs every parameter named.")
        return sorted(p.name for p in params
                      if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Parameters of this estimator (with ``deep``, also ``name__sub`` of parameters
        that are estimators themselves)."""
        out: dict[str, Any] = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{name}__{k}", v) for k, v in value.get_params().items())
            out[name] = value
        return out

    def set_params(self, **params: Any) -> "Params":
        """Set parameters (``name__sub`` reaches into nested estimators); returns self."""
        valid = self.get_params(deep=True)
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            name, sep, sub = key.partition("__")
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for estimator {self!r}. "
                                 f"Valid parameters are: {sorted(self._get_param_names())!r}.")
            if sep:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
                valid[name] = value
        for name, sub_params in nested.items():
            valid[name].set_params(**sub_params)
        return self

    def __repr__(self) -> str:
        """``Name(param=value, ...)`` listing the parameters that differ from their defaults
        (scikit-learn's compact repr)."""
        sig = inspect.signature(type(self).__init__).parameters
        changed = []
        for name in self._get_param_names():
            value = getattr(self, name)
            default = sig[name].default
            same = default is not inspect.Parameter.empty and _same(value, default)
            if not same:
                changed.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(changed)})"


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(type(a) is type(b) and a == b) or (a is b)
    except Exception:  # e.g. arrays: compare by identity only
        return a is b
