"""RDX on the digits example

Two checkpoints of one small MLP trained on scikit-learn's 8×8 digits (1797 real images,
no download): A after 40 optimiser steps, B at the end of training. RDX finds groups of
images that one model holds tightly together and the other spreads apart, in both
directions, and shows each as a grid of 9 images; BSR says how often the pairs inside a
grid are closer in the model the explanation is about, next to the chance level of random
grids. This is what `rdx explain --example digits` computes.
"""
from rdx import RDX, score
from rdx.examples import digits_example
from rdx.viz.grids import explanation_title, image_grid, summary_strip

ex = digits_example(progress=False)
print(ex.description)

model = RDX(n_explanations=3, random_state=42).fit(ex.A, ex.B)
result = score(model.result(), ex.A, ex.B)   # BSR/TSD/EQ and chance levels, computed once

for direction, found in result.directions.items():
    chance = result.scores["chance"][direction]["rank"]["bsr_mean"]
    print(f"{direction}: BSR (rank) {result.bsr[direction]:.3f}, chance {chance:.3f}")
    for i, exp in enumerate(found.explanations, start=1):
        classes = sorted(set(int(ex.labels[j]) for j in exp.images))
        weak = "  (weak: mean affinity below the null threshold)" if exp.low_affinity else ""
        print(f"  #{i}: {len(exp.members)} images, mean affinity {exp.mean_affinity:.2f}, "
              f"grid digits {classes}{weak}")
    grids = [image_grid(ex.images, exp.images) for exp in found.explanations]
    titles = [explanation_title(i, exp.to_json())
              for i, exp in enumerate(found.explanations, start=1)]
    weak = [bool(exp.low_affinity) for exp in found.explanations]
    summary_strip(grids, titles, weak=weak).save(f"{direction}.png")
print(f"mean BSR (rank) {result.bsr['mean']:.3f}")
