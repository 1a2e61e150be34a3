"""Representation similarity measures (CKA and, later, the rest of the measure family).

All measures take two ``n_images × d`` representations of the same images (widths may
differ) and return a scalar; torch inputs give a differentiable torch scalar, numpy inputs a
float.
"""
from .cka import biased_linear_cka, debiased_linear_cka

__all__ = ["biased_linear_cka", "debiased_linear_cka"]
