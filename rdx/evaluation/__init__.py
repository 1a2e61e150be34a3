"""Scores of explanations (BSR/TSD/EQ)."""
from .bsr import DISSIMILARITIES, bsr_scores

__all__ = ["DISSIMILARITIES", "bsr_scores"]
