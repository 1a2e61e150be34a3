"""Methods the runner can list in a config, behind one small interface.

A method validates its parameters up front (``validate``) and turns two representations
into an explanations document in the schema of ``explanations.json`` (``run``). The
baselines, ``cka`` and ``classification`` register here as well.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import RDXInputError


@dataclass
class MethodContext:
    """What the runner hands every method besides A and B."""

    labels: np.ndarray
    seed: int
    device: str = "auto"
    #: (A_mapped, B_mapped, info) — the comparison's CKA alignment (spec §1.9), learned once
    #: by the runner for the first method that asks for it and shared with the others.
    alignment: tuple | None = None


class Method(Protocol):
    def validate(self, params: dict[str, Any], path: str) -> None: ...

    def run(self, A: np.ndarray, B: np.ndarray, params: dict[str, Any],
            ctx: MethodContext) -> dict[str, Any]: ...


class RDXMethod:
    """``method: rdx`` — every :class:`rdx.RDX` parameter except the run-level ones."""

    RUN_LEVEL = {"random_state", "device", "verbose", "keep_graphs"}

    def __init__(self) -> None:
        from ..method.estimator import RDX

        self._cls = RDX
        self.params = set(inspect.signature(RDX.__init__).parameters) - {"self"} - self.RUN_LEVEL

    def validate(self, params: dict[str, Any], path: str) -> None:
        unknown = set(params) - self.params
        if unknown:
            raise RDXInputError(f"{path}: unknown RDX parameter(s) {sorted(unknown)}; "
                                f"allowed: {sorted(self.params)}")
        try:  # types and choices; the image count is only known at run time
            self._cls(**params)._check_params(n=2**31)
        except RDXInputError as exc:
            raise RDXInputError(f"{path}: {exc}") from None

    def run(self, A: np.ndarray, B: np.ndarray, params: dict[str, Any],
            ctx: MethodContext) -> dict[str, Any]:
        model = self._cls(**params, random_state=ctx.seed, device=ctx.device)
        model.fit(A, B, labels=ctx.labels if params.get("guidance") else None,
                  alignment=ctx.alignment if params.get("align_representations") else None)
        return model.to_dict()

    def alignment_params(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The alignment this method needs (its ``align_params``), or None."""
        return dict(params.get("align_params") or {}) if params.get("align_representations") \
            else None


METHODS: dict[str, Method] = {"rdx": RDXMethod()}
