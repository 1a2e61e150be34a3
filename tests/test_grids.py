"""Grid selection rules against brute-force reimplementations."""
import itertools

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from rdx.method.geometry import to_device_centered
from rdx.method.grids import select_grid


def brute_force_mtna(X, members, diff, beta, sign, size):
    """Direct loops: best neighbourhood by total affinity, anchor first, then by distance."""
    members = np.sort(members)
    s = min(len(members), size)
    D = cdist(X[members], X[members], "sqeuclidean")
    scores, grids = [], []
    for a in range(len(members)):
        key = D[a].copy()
        key[a] = -1
        g = members[np.lexsort((np.arange(len(members)), key))[:s]]
        scores.append(sum(np.exp(sign * beta * float(diff[i, j]))
                          for i, j in itertools.product(g, g)))
        grids.append(g)
    best = max(scores)
    first = next(a for a, sc in enumerate(scores) if sc >= best * (1 - 1e-9))
    return grids[first].tolist()


@pytest.mark.parametrize("direction,sign", [("a_over_b", -1.0), ("b_over_a", 1.0)])
@pytest.mark.parametrize("size", [4, 9, 40])
def test_maximize_total_neighborhood_affinity_matches_brute_force(rng, direction, sign, size):
    n = 40
    X = rng.standard_normal((n, 3))
    diff = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    members = rng.choice(n, 25, replace=False)
    ours = select_grid(members, to_device_centered(X, torch.device("cpu")), torch.tensor(diff),
                       beta=5.0, direction=direction, size=size)
    assert ours == brute_force_mtna(X, members, diff, 5.0, sign, size)


def test_grid_picks_the_planted_tight_group():
    # members 0..19; images 10..18 have high mutual affinity and sit together
    n = 20
    X = np.concatenate([np.arange(10)[:, None] * 10.0, 200 + np.arange(10)[:, None] * 0.1])
    diff = np.zeros((n, n), dtype=np.float32)
    diff[10:19, 10:19] = -1.0
    grid = select_grid(np.arange(n), to_device_centered(X, torch.device("cpu")),
                       torch.tensor(diff), beta=5.0, direction="a_over_b", size=9)
    assert sorted(grid) == list(range(10, 19))


def test_centroid_max_affinity_and_random_stay_inside_the_cluster(rng):
    n = 50
    X = rng.standard_normal((n, 4))
    Xt = to_device_centered(X, torch.device("cpu"))
    diff = torch.tensor(rng.uniform(-1, 1, (n, n)), dtype=torch.float32)
    members = np.arange(10, 30)
    c = select_grid(members, Xt, diff, beta=5.0, direction="a_over_b", strategy="centroid")
    d = ((X[members] - X[members].mean(0)) ** 2).sum(1)
    assert c == members[np.argsort(d, kind="stable")[:9]].tolist()
    m = select_grid(members, Xt, diff, beta=5.0, direction="b_over_a", strategy="max_affinity")
    score = np.exp(5.0 * diff.numpy()[np.ix_(members, members)]).mean(1)
    assert m == members[np.argsort(-score, kind="stable")[:9]].tolist()
    r1 = select_grid(members, Xt, diff, beta=5.0, direction="a_over_b", strategy="random",
                     rng=np.random.default_rng(3))
    r2 = select_grid(members, Xt, diff, beta=5.0, direction="a_over_b", strategy="random",
                     rng=np.random.default_rng(3))
    assert r1 == r2 and len(set(r1)) == 9 and set(r1) <= set(members.tolist())


def test_small_clusters():
    Xt = to_device_centered(np.arange(6.0)[:, None], torch.device("cpu"))
    diff = torch.zeros(6, 6)
    assert select_grid(np.array([4]), Xt, diff, beta=5.0, direction="a_over_b") == [4]
    assert select_grid(np.array([], dtype=int), Xt, diff, beta=5.0, direction="a_over_b") == []
    g = select_grid(np.array([5, 1, 3]), Xt, diff, beta=5.0, direction="a_over_b")
    assert sorted(g) == [1, 3, 5] and g[0] == 1   # all equal scores → first anchor, by index
