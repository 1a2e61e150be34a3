"""Names of the similarity measures and of their options, importable without torch.

The command-line parsers (``rdx similarity``, ``rdx matrix``, ``rdx probe``) build their
choices from these, so that ``--help`` and usage errors answer at once; the measure modules
import them from here (one definition each).
"""
from __future__ import annotations

#: Stable measure names, in the order of :data:`rdx.similarity.MEASURES`.
MEASURE_NAMES = ("cka_linear", "cka_linear_biased", "cka_rbf", "rsa", "mutual_knn", "cknna",
                 "jaccard_knn", "procrustes", "svcca")
#: Dissimilarities of an RSA RDM.
RDM_METHODS = ("correlation", "cosine", "euclidean")
#: Comparisons of two RDMs.
COMPARE_METHODS = ("spearman", "pearson")
#: Bandwidth modes of the RBF kernel.
SIGMA_MODES = ("absolute", "median_fraction")
#: Row normalisations applied to every model's features before a measure.
NORMALIZATIONS = ("none", "l2", "center", "zscore")
