"""Distances, neighbour ranks and local scales against hand-computed / brute-force values."""
import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from rdx.method.geometry import (kth_neighbor_distance, max_squared_distance, squared_distances,
                                 to_device_centered)
from rdx.method.gram import gram_cpu_
from rdx.method.ranks import ranks_from_squared_distances_, rank_matrix, ranks_of_rows

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _t(x, device="cpu"):
    return to_device_centered(np.asarray(x, dtype=np.float64), torch.device(device))


def reference_ranks(X: np.ndarray) -> np.ndarray:
    """Brute force: exact float64 distances, order by (distance, index), self first."""
    D = cdist(X, X, "sqeuclidean")
    n = len(X)
    R = np.empty((n, n), dtype=np.int64)
    for i in range(n):
        key = D[i].copy()
        key[i] = -1.0
        order = np.lexsort((np.arange(n), key))
        R[i, order] = np.arange(n)
    return R


@pytest.mark.parametrize("device", DEVICES)
def test_rank_matrix_hand_computed(device):
    R = rank_matrix(_t([[0.0], [1.0], [3.0], [7.0]], device)).cpu().numpy()
    expected = np.array([[0, 1, 2, 3],
                         [1, 0, 2, 3],
                         [2, 1, 0, 3],
                         [3, 2, 1, 0]])
    np.testing.assert_array_equal(R, expected)
    assert not np.array_equal(R, R.T)  # ranks are not symmetric


@pytest.mark.parametrize("device", DEVICES)
def test_rank_ties_broken_by_index_and_self_first(device):
    # 0 and 3 are duplicates; 1 and 2 are equidistant from 0.
    X = [[0.0], [2.0], [-2.0], [0.0]]
    R = rank_matrix(_t(X, device)).cpu().numpy()
    expected = np.array([[0, 2, 3, 1],    # self, then dup 3 (dist 0), then 1 before 2
                         [1, 0, 3, 2],    # dists 2,0,4,2: self, 0, 3 (tie → index), 2
                         [1, 3, 0, 2],    # dists 2,4,0,2: self, 0, 3, 1
                         [1, 2, 3, 0]])   # self before its duplicate 0
    np.testing.assert_array_equal(R, expected)


@pytest.mark.parametrize("use_torch_kernel", [False, True])
def test_rank_matrix_matches_brute_force_with_many_ties(use_torch_kernel):
    # small integer coordinates, not centred: float32 distances are exact, ties everywhere
    X = np.random.default_rng(1).integers(-3, 4, size=(150, 3)).astype(np.float64)
    D2 = squared_distances(torch.tensor(X, dtype=torch.float32))
    R = ranks_from_squared_distances_(D2, use_torch_kernel=use_torch_kernel).numpy()
    np.testing.assert_array_equal(R, reference_ranks(X))


@pytest.mark.parametrize("use_torch_kernel", [False, True])
def test_the_rank_pass_hands_over_each_images_nearest_in_rank_order(use_torch_kernel):
    X = np.random.default_rng(1).integers(-3, 4, size=(150, 3)).astype(np.float64)
    X[7] = X[3]                                          # a duplicate: still ranked after self
    D2 = squared_distances(torch.tensor(X, dtype=torch.float32))
    nearest = np.full((150, 6), -1, dtype=np.int64)
    ranks_from_squared_distances_(D2, use_torch_kernel=use_torch_kernel, nearest=nearest)
    order = np.argsort(reference_ranks(X), axis=1, kind="stable")   # column of rank r
    np.testing.assert_array_equal(nearest, order[:, 1:7])
    assert nearest[3, 0] == 7 and nearest[7, 0] == 3


@pytest.mark.parametrize("device", DEVICES)
def test_exact_duplicates_are_exactly_tied(rng, device):
    X = rng.standard_normal((80, 12)) * 3 + 40   # centring makes coordinates non-integer
    X[9] = X[5]
    X[50] = X[5]
    R = rank_matrix(_t(X, device)).cpu().numpy()
    others = np.setdiff1d(np.arange(80), [5, 9, 50])
    # every other image sees the three copies consecutively, in index order
    np.testing.assert_array_equal(R[others, 9], R[others, 5] + 1)
    np.testing.assert_array_equal(R[others, 50], R[others, 5] + 2)
    # each copy sees itself first, then the other copies by index, then the same order
    np.testing.assert_array_equal(R[[5, 9, 50]][:, [5, 9, 50]], [[0, 1, 2], [1, 0, 2], [1, 2, 0]])
    np.testing.assert_array_equal(R[5, others], R[9, others])
    np.testing.assert_array_equal(R[5, others], R[50, others])
    rows = ranks_of_rows(_t(X, device), np.array([9, 3]))
    np.testing.assert_array_equal(rows, R[[9, 3]])


def test_rank_rows_are_permutations(rng):
    X = rng.standard_normal((300, 20))
    R = rank_matrix(_t(X)).numpy().astype(np.int64)
    np.testing.assert_array_equal(np.sort(R, axis=1), np.broadcast_to(np.arange(300), R.shape))
    np.testing.assert_array_equal(np.diag(R), 0)


def test_ranks_invariant_to_rotation_translation_scaling(rng):
    X = rng.standard_normal((120, 10))
    Q, _ = np.linalg.qr(rng.standard_normal((10, 10)))
    R0 = rank_matrix(_t(X)).numpy()
    R1 = rank_matrix(_t(3.7 * X @ Q + 1000.0)).numpy()
    np.testing.assert_array_equal(R0, R1)


def test_squared_distances_match_scipy(rng):
    X = rng.standard_normal((200, 30)) * 5
    Xt = torch.tensor(X, dtype=torch.float32)
    D2 = squared_distances(Xt).numpy()
    np.testing.assert_allclose(D2, cdist(X, X, "sqeuclidean"), rtol=1e-4, atol=1e-2)
    assert (np.diag(D2) == 0).all() and (D2 >= 0).all()
    assert not np.signbit(D2).any()  # no -0.0 (sort keys rely on the sign bit being clear)
    assert max_squared_distance(Xt, tile=64) == pytest.approx(D2.max(), rel=1e-5)


def test_centring_scales_by_a_power_of_two_only(rng):
    X = rng.standard_normal((50, 6)) * 1e25 + 3e26     # would overflow float32 distances
    Xt = to_device_centered(X, torch.device("cpu")).numpy().astype(np.float64)
    ratio = (X - X.mean(0)) / Xt
    scale = np.median(ratio)
    np.testing.assert_allclose(ratio, scale, rtol=1e-6)
    assert abs(np.log2(scale) - np.round(np.log2(scale))) < 1e-6   # float32 rounding only
    assert np.isfinite(squared_distances(torch.tensor(Xt, dtype=torch.float32)).numpy()).all()


def test_ranks_of_rows_equals_rank_matrix(rng):
    X = rng.standard_normal((250, 8))
    rows = np.array([0, 17, 249, 100])
    np.testing.assert_array_equal(ranks_of_rows(_t(X), rows), rank_matrix(_t(X)).numpy()[rows])


def test_kth_neighbor_distance_hand_computed():
    D2 = squared_distances(torch.tensor([[0.0], [1.0], [3.0], [7.0]]))
    # sorted distances per row: [0,1,3,7], [0,1,2,6], [0,2,3,4], [0,4,6,7]
    np.testing.assert_allclose(kth_neighbor_distance(D2, 2).numpy(), [3, 2, 3, 6])
    np.testing.assert_allclose(kth_neighbor_distance(D2, 1).numpy(), [1, 1, 2, 4])


@pytest.mark.parametrize("use_syrk", [True, False])
@pytest.mark.parametrize("n,strip,tile", [(10, 3, 4), (64, 16, 16), (100, 64, 24), (33, 100, 512)])
def test_triangle_gram_equals_full_gram(rng, n, strip, tile, use_syrk):
    X = rng.standard_normal((n, 5)).astype(np.float32)
    G = np.full((n, n), np.nan, dtype=np.float32)
    gram_cpu_(X, G, strip=strip, tile=tile, use_syrk=use_syrk)
    # every tile, computed or mirrored, must hold the right values (an unfilled or
    # misplaced tile would be NaN or off by O(1)), and mirroring makes G exactly symmetric
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_allclose(G, X.astype(np.float64) @ X.T.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


def test_bounded_max_distance_brackets_the_all_pairs_maximum():
    """The largest squared distance from the far rows: never above the all-pairs maximum,
    the certified bound never below it, exact with every row a candidate, and exact on
    centred blobs where the diameter's ends are far from the origin."""
    from rdx.method.geometry import max_squared_distance, max_squared_distance_bounded

    rng = np.random.default_rng(0)
    for trial in range(6):
        X = rng.standard_normal((400, 8)).astype(np.float32) * rng.uniform(0.5, 2, 8)
        X -= X.mean(0)
        exact = max_squared_distance(X)
        D = ((X[:, None, :].astype(np.float64) - X[None]) ** 2).sum(-1)
        assert exact == pytest.approx(D.max(), rel=1e-5)
        for c in (1, 10, 50):
            value, upper = max_squared_distance_bounded(X, candidates=c)
            assert value <= exact * (1 + 1e-5) and upper >= exact * (1 - 1e-5), (trial, c)
        value, upper = max_squared_distance_bounded(X, candidates=400)
        assert value == pytest.approx(exact, rel=1e-5) and upper == value
    # two far blobs: the ends of the diameter are the rows of largest norm
    X = np.concatenate([rng.standard_normal((300, 5)) - 20, rng.standard_normal((300, 5)) + 20])
    X = (X - X.mean(0)).astype(np.float32)
    value, upper = max_squared_distance_bounded(X, candidates=20, block_bytes=4 * 600 * 3)
    assert value == pytest.approx(max_squared_distance(X), rel=1e-5)
    assert max_squared_distance_bounded(X[:1])[0] == 0.0


def test_scoring_above_the_exact_size_records_the_bounded_scale(monkeypatch):
    """Above EXACT_MAX_DISTANCE_N images the MNED scale comes from the bounded search and
    the scores say so (value, bound, exact); below, nothing is added."""
    from rdx.evaluation import bsr
    from rdx.evaluation.scoring import Scorer
    from rdx.method import geometry
    from rdx.method.estimator import RDX

    rng = np.random.default_rng(1)
    A = rng.standard_normal((300, 6)).astype(np.float32)
    B = A + 0.5 * rng.standard_normal((300, 6)).astype(np.float32)
    res = RDX(n_explanations=2, random_state=0).fit(A, B).result()
    plain = Scorer(A, B, chance_draws=0).score(res).scores
    assert "max_distance" not in plain["params"]
    monkeypatch.setattr(geometry, "EXACT_MAX_DISTANCE_N", 100)
    res = RDX(n_explanations=2, random_state=0).fit(A, B).result()
    scored = Scorer(A, B, chance_draws=0).score(res).scores
    info = scored["params"]["max_distance"]
    assert set(info) == {"A", "B"}
    # 300 rows ≤ FAR_CANDIDATES: every row is a candidate, so the bounded search is exact
    # and gives the all-pairs scale, hence the same MNED scores
    for rec in info.values():
        assert rec["exact"] is True and rec["value"] == rec["upper_bound"]
    assert scored["max_normalized_euclidean"] == plain["max_normalized_euclidean"]
    assert bsr.PreparedRepresentation(A).max_distance() > 0
