"""Static HTML reports of a run (``rdx report outputs/<experiment>``).

``write_comparison_report(comp_dir)`` writes ``<comparison>/report.html``;
``write_experiment_report(exp_dir)`` writes every comparison's report and
``<experiment>/index.html`` linking them. The pages are self-contained: inline CSS, images
embedded as ``data:`` URIs, no JavaScript, no external resource, so they work from a
``file://`` URL, can be copied anywhere and opened without a server.
"""
from .build import (
                    describe_representation,
                    render_comparison,
                    render_experiment,
                    write_comparison_report,
                    write_experiment_report,
)

__all__ = [
                    "describe_representation",
                    "render_comparison",
                    "render_experiment",
                    "write_comparison_report",
                    "write_experiment_report",
]
