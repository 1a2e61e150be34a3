"""RDX: compare the learned representations of two vision models.

``RDX`` finds groups of images that one representation holds tightly together and the other
spreads apart (Representational Difference Explanations, NeurIPS 2025).
"""
__version__ = "0.1.0"

from .errors import RDXInputError  # noqa: E402
from .method.estimator import RDX, DirectionResult, Explanation  # noqa: E402
from .evaluation.bsr import bsr_scores  # noqa: E402

__all__ = ["RDX", "DirectionResult", "Explanation", "RDXInputError", "bsr_scores", "__version__"]
