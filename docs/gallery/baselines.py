"""Baselines on the same data

Every baseline of the paper's comparison runs behind the same interface and gives the
same kind of result, so grids and scores treat them alike. Per-model baselines (k-means,
PCA, ...) are fitted on one representation at a time: their `a_over_b` grids are simply
concepts of model A. This is what `rdx explain --example digits --method kmeans` computes.
"""
from rdx.baselines import baseline_class
from rdx.examples import digits_example
from rdx.viz.grids import image_grid, summary_strip

ex = digits_example(progress=False)
for name in ("kmeans", "pca"):
    estimator = baseline_class(name)(n_explanations=3, random_state=42)
    concepts = estimator.fit(ex.A).explanations()       # model A's concepts
    grids = [image_grid(ex.images, c["images"]) for c in concepts]
    titles = [f"{name} concept {c['concept']}" for c in concepts]
    summary_strip(grids, titles).save(f"{name}_model_a.png")
    digits = [sorted(set(int(ex.labels[i]) for i in c["images"])) for c in concepts]
    print(f"{name}: model A's concepts show digits {digits}")
