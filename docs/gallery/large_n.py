"""Large n: the k-NN graph mode against the exact method

`RDX(graph="knn")` never forms an n×n matrix: pairs that either model ranks among its K
nearest neighbours keep their exact ranks, the far pairs are modelled from landmark images.
On the digits example (n = 1797, K = 200; 300 landmarks instead of the default 1000, to
keep this page quick to build) it is compared here with the
exact (dense) fit of the same seed: the agreement of the two partitions (adjusted Rand
index) and the share of grid images they have in common. At this size the dense method is
the one to use; the mode is meant for 10⁴–10⁵ images.
"""
import numpy as np
from sklearn.metrics import adjusted_rand_score

from rdx import RDX
from rdx.examples import digits_example

ex = digits_example(progress=False)
dense = RDX(n_explanations=3, random_state=42).fit(ex.A, ex.B)
knn = RDX(n_explanations=3, random_state=42, graph="knn", n_landmarks=300).fit(ex.A, ex.B)
print("knn graph:", {k: knn.result().info["knn_graph"][k]
                     for k in ("n_neighbors", "n_neighbors_rule")})
print("landmarks:", knn.result().info["knn_graph"]["far_sketch"]["n_landmarks"])
for direction in ("a_over_b", "b_over_a"):
    d, k = dense.result().directions[direction], knn.result().directions[direction]
    ari = adjusted_rand_score(np.asarray(d.labels), np.asarray(k.labels))
    shared = np.mean([len(set(a.images) & set(b.images)) / len(a.images)
                      for a, b in zip(d.explanations, k.explanations)])
    print(f"{direction}: ARI {ari:.2f}, grid images shared {shared:.2f}")
