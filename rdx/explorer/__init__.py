"""The interactive explorer of a comparison (``rdx explore outputs/<experiment>/<comparison>``).

``build_explorer(comp_dir)`` writes ``<comparison>/explore.html``: one self-contained page
(plotly.js and the data inlined, thumbnails as ``data:`` URIs, a strict Content-Security-
Policy, no network) with the two representations' aligned 2-D maps side by side or animated,
colour modes, a ranking of images by neighbourhood affinity, each image's neighbours in A, in
B and in the RDX graph, every method's explanations, and snapshot export.
"""
from .build import EXPLORER_NAME, build_explorer
from .inputs import ExplorerInputs, load_inputs

__all__ = ["EXPLORER_NAME", "ExplorerInputs", "build_explorer", "load_inputs"]
