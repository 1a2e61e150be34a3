"""The interactive explorer of a comparison (``rdx explore outputs/<experiment>/<comparison>``).

``build_explorer(comp_dir)`` writes ``<comparison>/explore.html``: one self-contained page
(plotly.js and the data inlined, thumbnails as ``data:`` URIs, a strict Content-Security-
Policy, no network) with the two representations' aligned 2-D maps side by side or animated,
colour modes, a ranking of images by neighbourhood affinity, each image's neighbours in A, in
B and in the RDX graph, every method's explanations, and snapshot export.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

# loaded on first use: building a page needs torch, ``rdx explore --help`` does not
_LAZY = {"EXPLORER_NAME": ".build", "build_explorer": ".build", "ExplorerInputs": ".inputs",
         "load_inputs": ".inputs"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EXPLORER_NAME", "ExplorerInputs", "build_explorer", "load_inputs"]
