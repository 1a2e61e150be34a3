"""Known-difference benchmark (``rdx benchmark``): models with implanted differences and
their seed twins, every grid-producing method, hits and calibrated strength in one table.

Each *case* compares a model A that lacks a distinction (it merges classes, is invariant
to flips, follows a spurious cue, or cannot see an input region) with a model B that has
it, on images where the difference shows (the ``test`` comparison), and B's *seed twin* B′
— the same recipe as B, another training seed — with B as the negative control
(``control``): a pair that does not differ systematically. Every method's grids are scored
with :class:`rdx.evaluation.scoring.Scorer` against the case's ``known_difference``
declaration (also on the control, where any hit is a false one) and assessed by
:func:`rdx.evaluation.significance.assess`.

Cases (``default`` suite; ``--quick`` runs ``merged`` and ``coarse`` on fewer images with
fewer methods and null draws):

``merged``   Fashion-MNIST; A is trained with sandal (5) and sneaker (7) as one label.
``coarse``   digits; A learns 5 coarse classes (0|6, 1|7, 2|3, 4|9, 5|8), B the 10 digits.
``flip``     Fashion-MNIST + upside-down copies; A gives a copy its original's label
             (invariant), B a label of its own. Shown: originals and copies (labels c, c+10).
``cue``      Fashion-MNIST; every training coat (4) of A carries a bright corner square, a
             shortcut A learns; B never saw it. Shown: the square on a random half of the
             pullovers (2) and coats (labels c + 10 with the square): A separates images by
             the square, B is blind to it (``model: b`` lacks the distinction, b_over_a).
``mask``     Fashion-MNIST; both learn 20 labels, class c with or without a marker in the
             bottom-right corner (c, c+10), but A's input has that corner blacked out.

Everything runs offline on 2 CPU cores: Fashion-MNIST (Debian's ``dataset-fashion-mnist``)
and scikit-learn's digits (resized to 28×28), the project's ConvNet (16/32 channels, a
32-d ``gap`` feature) trained by :func:`rdx.models.training.train_classifier`. Models are
cached as ``<checkpoints>/<recipe>-<digest>_s<seed>/last.pt`` (the digest is the recipe's
content, so cases with the same recipe share a model); each comparison is a run-store
folder (:class:`rdx.results.store.ComparisonRun`) under ``<out>/<case>/{test,control}`` and
a method whose result is there with the same fingerprint is not run again, so an
interrupted benchmark resumes. The table goes to ``<out>/benchmark.{json,csv,md}``.

Modules: :mod:`.cases` (recipes, cases, suites), :mod:`.data` (training sets, comparison
images, models, features), :mod:`.pipeline` (:func:`run_benchmark`), :mod:`.tables` (summary,
CSV, Markdown), :mod:`.calibration` (the seed-twin suite of
``benchmarks/bench_significance.py``); the command line is :mod:`rdx.commands.benchmark`.
"""
from __future__ import annotations

from ...lazy import lazy_exports

# the public names load on first use: a command's options and --help import no torch
__getattr__ = lazy_exports(__name__, {
    "BENCHMARK_VERSION": ".cases", "CASES": ".cases", "CUE_BOX": ".cases", "Case": ".cases",
    "ImageSet": ".cases", "MARKER_BOX": ".cases", "MASK_BOX": ".cases", "MethodSpec": ".cases",
    "Recipe": ".cases", "SEED": ".cases", "SUITES": ".cases", "Suite": ".cases",
    "TWIN_SEED": ".cases",
    "comparison_images": ".data", "features": ".data", "train_model": ".data",
    "training_set": ".data",
    "chance_hit_rate": ".pipeline", "run_benchmark": ".pipeline", "run_case": ".pipeline",
    "CSV_COLUMNS": ".tables", "markdown_table": ".tables", "summarize": ".tables",
    "write_table_csv": ".tables",
})

__all__ = ["BENCHMARK_VERSION", "CASES", "CSV_COLUMNS", "CUE_BOX", "Case", "ImageSet",
           "MARKER_BOX", "MASK_BOX", "MethodSpec", "Recipe", "SEED", "SUITES", "Suite",
           "TWIN_SEED", "chance_hit_rate", "comparison_images", "features", "markdown_table",
           "run_benchmark", "run_case", "summarize", "train_model", "training_set",
           "write_table_csv"]
