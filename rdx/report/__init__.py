"""Static HTML reports of a run (``rdx report outputs/<experiment>``).

``write_comparison_report(comp_dir)`` writes ``<comparison>/report.html``
(:mod:`.comparison`, laid out from :mod:`.scores`, :mod:`.explanations` and
:mod:`.wording`); ``write_experiment_report(exp_dir)`` writes every comparison's report and
``<experiment>/index.html`` linking them (:mod:`.experiment`). The pages are
self-contained: inline CSS, images embedded as ``data:`` URIs, no JavaScript, no external
resource, so they work from a ``file://`` URL, can be copied anywhere and opened without a
server.
"""
from .comparison import render_comparison, write_comparison_report
from .experiment import render_experiment, write_experiment_report
from .wording import describe_representation

__all__ = [
    "describe_representation",
    "render_comparison",
    "render_experiment",
    "write_comparison_report",
    "write_experiment_report",
]
