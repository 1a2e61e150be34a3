"""Paper and v2 variants

`variant="v2"` is the authors' newer algorithm: each model's neighbour ranks are
symmetrised before the locally biased difference, and clusters whose mean affinity stays
below `filter_threshold` (1.1) join the no-change group, so a direction keeps 0 to k+1
explanations instead of always k. The filtered clusters are recorded with their reason.
"""
from rdx import RDX, score
from rdx.examples import digits_example
from rdx.viz.grids import explanation_title, image_grid, summary_strip

ex = digits_example(progress=False)
for variant in ("paper", "v2"):
    model = RDX(n_explanations=3, variant=variant, random_state=42).fit(ex.A, ex.B)
    result = score(model.result(), ex.A, ex.B)
    kept = {d: len(r.explanations) for d, r in result.directions.items()}
    print(f"{variant}: mean BSR (rank) {result.bsr['mean']:.3f}, explanations kept {kept}")
    for direction, found in result.directions.items():
        for cluster in found.extra.get("filter", {}).get("filtered", []):
            print(f"  {direction}: filtered a cluster of mean affinity "
                  f"{cluster['mean_affinity']:.2f}")
    if variant == "v2":
        for direction, found in result.directions.items():
            if found.explanations:
                grids = [image_grid(ex.images, e.images) for e in found.explanations]
                titles = [explanation_title(i, e.to_json())
                          for i, e in enumerate(found.explanations, start=1)]
                summary_strip(grids, titles).save(f"v2_{direction}.png")
