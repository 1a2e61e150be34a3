"""The interactive explorer of a comparison (``rdx explore outputs/<experiment>/<comparison>``).

``build_explorer(comp_dir)`` writes ``<comparison>/explore.html``: one self-contained page
(plotly.js and the data inlined, thumbnails as ``data:`` URIs, a strict Content-Security-
Policy, no network) with the two representations' aligned 2-D maps side by side or animated,
colour modes, a ranking of images by neighbourhood affinity, each image's neighbours in A, in
B and in the RDX graph, every method's explanations (each with the BSR of its grid and, after
``--significance``, its p_FWER badge), the groups named with ``--test-classes`` /
``--test-group`` with their p-values, box and lasso selection of a group of images (its grid,
class make-up, place in both maps and RDX mean affinity in both directions; a named group is
selected by a click), and snapshot export (the maps, the selected image and the selection in
one stand-alone file).
"""
from __future__ import annotations

from ..lazy import lazy_exports

# loaded on first use: building a page needs torch, ``rdx explore --help`` does not
__getattr__ = lazy_exports(__name__, {"EXPLORER_NAME": ".build", "build_explorer": ".build",
                                      "ExplorerInputs": ".inputs", "load_inputs": ".inputs"})


__all__ = ["EXPLORER_NAME", "ExplorerInputs", "build_explorer", "load_inputs"]
