"""How similar? Similarity measures with intervals

RDX says *how* two representations differ; the similarity measures say *how much*. Here
the two checkpoints of the digits example are compared with four measures, each with a
95 % interval over images (random halves of the images for CKA, SVCCA and Procrustes, a
fixed neighbour graph for mutual k-NN). This is what `rdx similarity` computes.
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from rdx.examples import digits_example
from rdx.similarity import MEASURES, calibrate

ex = digits_example(progress=False)
measures = ("cka_linear", "svcca", "mutual_knn", "procrustes")
rows = []
for name in measures:
    out = calibrate(name, ex.A, ex.B, bootstrap=20, seed=0)
    lo, hi = out["ci95"]
    more = "higher = more similar" if MEASURES[name].higher_is_more_similar else \
        "a distance: lower = more similar"
    print(f"{name:12s} {out['value']:.3f}  95 % interval [{lo:.3f}, {hi:.3f}]  ({more})")
    rows.append((name, out["value"], lo, hi))

fig, ax = plt.subplots(figsize=(6, 2.6))
for y, (name, value, lo, hi) in enumerate(rows):
    ax.errorbar(value, y, xerr=[[value - lo], [hi - value]], fmt="o", color="#0072B2",
                capsize=4)
ax.set_yticks(range(len(rows)), [r[0] for r in rows])
ax.invert_yaxis()
ax.set_xlabel("value (early vs final checkpoint), 95 % interval")
fig.tight_layout()
fig.savefig("measures.png", dpi=110)
