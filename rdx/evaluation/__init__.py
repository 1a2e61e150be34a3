"""Scores of explanations (BSR/TSD/EQ)."""
from .bsr import DISSIMILARITIES, PreparedRepresentation, bsr_scores, prepare_representation

__all__ = ["DISSIMILARITIES", "PreparedRepresentation", "bsr_scores", "prepare_representation"]
