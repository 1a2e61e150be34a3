"""Names of the similarity measures and of their options, importable without torch.

The command-line parsers (``rdx similarity``, ``rdx matrix``, ``rdx probe``) build their
choices from these, so that ``--help`` and usage errors answer at once; the measure modules
import them from here (one definition each).
"""
from __future__ import annotations

#: Stable measure names, in the order of :data:`rdx.similarity.MEASURES`.
MEASURE_NAMES = ("cka_linear", "cka_linear_biased", "cka_rbf", "rsa", "mutual_knn", "cknna",
                 "jaccard_knn", "procrustes", "svcca", "pwcca")
#: Dissimilarities of an RSA RDM.
RDM_METHODS = ("correlation", "cosine", "euclidean", "mean_squared_euclidean")
#: Comparisons of two RDMs.
COMPARE_METHODS = ("spearman", "pearson", "cosine", "kendall_tau_a")
#: How SVCCA averages its canonical correlations.
SVCCA_AVERAGES = ("min", "geometric")
#: Bandwidth modes of the RBF kernel.
SIGMA_MODES = ("absolute", "median_fraction")
#: Row normalisations applied to every model's features before a measure.
NORMALIZATIONS = ("none", "l2", "center", "zscore")

#: Each measure's convention where the field has more than one (``rdx similarity --help``
#: prints them; the similarity guide's table relates them to the reference libraries).
CONVENTIONS = {
    "cka_linear": "debiased: unbiased HSIC (U-statistic) in the numerator and in both "
                  "self-terms, as Kornblith's debiased CKA; packages that divide the "
                  "unbiased cross-HSIC by biased self-HSICs give other values",
    "cka_linear_biased": "biased HSIC everywhere (Kornblith et al. 2019; the platonic "
                         "metrics' cka with unbiased=False)",
    "cka_rbf": "sigma = fraction of the median pairwise distance of each input "
               "(--sigma-mode absolute: sigma itself); debiased HSIC",
    "rsa": "RDM 1 - Pearson r of the images' features; Spearman of the upper triangles. "
           "--rdm euclidean is the distance d, mean_squared_euclidean rsatoolbox's d^2/p "
           "(same ranks, different Pearson/cosine values); --compare pearson|cosine|"
           "kendall_tau_a are rsatoolbox's corr|cosine|tau-a",
    "mutual_knn": "cosine neighbours, self excluded, mean |N_X ∩ N_Y| / k (the platonic "
                  "metrics' mutual_knn on L2-normalised features)",
    "cknna": "CKA of the row-centred cosine kernels restricted to the mutual k-NN pairs, "
             "the paper's formula (Huh et al. 2024, App. A); the platonic code's cknna "
             "applies the unbiased-HSIC formula to the masked kernels, another number",
    "jaccard_knn": "cosine neighbours, mean |N_X ∩ N_Y| / |N_X ∪ N_Y|",
    "procrustes": "2 - 2||X'Y||_* of centred unit-norm inputs (squared); euclidean: its "
                  "root (netrep's LinearMetric(alpha=1) 'euclidean' on inputs scaled to "
                  "unit norm); angular: arccos, netrep's 'angular'; exact to rounding "
                  "near 0",
    "svcca": "99% of each input's variance kept; mean canonical correlation over "
             "min(r_X, r_Y) (Google's cca_core); average=geometric: over sqrt(r_X r_Y) "
             "(netrep's CCA score)",
    "pwcca": "canonical correlations weighted by sum_j |<h_i, z_j>| over the centred "
             "neurons z_j of the input with fewer neurons (X on a tie), as Google's "
             "compute_pwcca on centred activations; not symmetric",
}
