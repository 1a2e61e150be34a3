"""Chance levels, known-difference recovery and the per-experiment score tables."""
import csv
import json

import numpy as np
import pytest

from conftest import MERGED, NO_GRIDS, ODD_NAME, TOY_METHODS, ToyRun, planted_pairs
from rdx import RDXInputError
from rdx.evaluation.bsr import DISSIMILARITIES, bsr_scores
from rdx.evaluation.chance import chance_levels, draw_grids, random_grid_chance
from rdx.evaluation.known_difference import (KNOWN_DIFFERENCE_TYPES, flip_pair_hit,
                                             merged_classes_hit, score_known_difference,
                                             validate_known_difference)
from rdx.results.store import ComparisonRun
from rdx.evaluation.summary import (ROW_COLUMNS, parse_summary_csv,
                                    summarize_comparison, summarize_experiment)
from rdx.io import save_npz_atomic, write_json_atomic
from rdx.method.ranks import ranks_of_rows


# ----------------------------------------------------------------------------- chance


@pytest.fixture(params=["sorted rows", "counted pairs"])
def rank_path(request, monkeypatch):
    """Both ways the chance levels read ranks off a distance row: a sorted copy (many
    pairs per row, small n) and counts per pair (few pairs per row, large n)."""
    import rdx.evaluation.chance as chance
    monkeypatch.setattr(chance, "_COUNT_PAIRS_PER_ROW",
                        0 if request.param == "sorted rows" else 10**9)
    return request.param


def _split(row, sizes):
    offs = np.cumsum([0] + list(sizes))
    return [row[offs[i]:offs[i + 1]].tolist() for i in range(len(sizes))]


def _brute_force(A, B, sizes, direction, kind, n_draws, seed):
    """Score the very draws of the chance level one by one with bsr_scores."""
    sizes = sorted(sizes, reverse=True)
    draws = draw_grids(len(A), sizes, n_draws, np.random.default_rng(seed))
    res = [bsr_scores(A, B, {direction: _split(d, sizes)}, dissimilarity=kind)[direction]
           for d in draws]
    return {k: np.array([r[k] for r in res]) for k in ("bsr", "tsd", "eq")}


@pytest.mark.parametrize("kind", DISSIMILARITIES)
@pytest.mark.parametrize("direction", ["a_over_b", "b_over_a"])
def test_chance_equals_bsr_scores_of_the_same_random_grids(rank_path, rng, kind, direction):
    A = rng.standard_normal((150, 5))
    B = A + rng.standard_normal((150, 5))
    sizes = [2, 9, 5]
    got = random_grid_chance(A, B, sizes, direction, dissimilarity=kind, n_draws=40, seed=7)
    ref = _brute_force(A, B, sizes, direction, kind, 40, 7)
    assert got["n_draws"] == 40 and got["n_pairs"] == 72 + 20 + 2
    assert got["bsr_mean"] == pytest.approx(ref["bsr"].mean(), abs=1e-12)
    assert got["eq_mean"] == pytest.approx(ref["eq"].mean(), abs=1e-12)
    lo, hi = np.percentile(ref["bsr"], [2.5, 97.5])
    assert (got["bsr_lo"], got["bsr_hi"]) == (pytest.approx(lo), pytest.approx(hi))
    assert got["tsd_mean"] == pytest.approx(ref["tsd"].mean(), rel=1e-6, abs=1e-9)
    assert got["bsr_lo"] < got["bsr_mean"] < got["bsr_hi"]


def test_chance_ranks_with_exact_ties_and_duplicates(rank_path, rng):
    # Integer points and their negatives: the column means are exactly 0 and every squared
    # distance is an exact small number, so ties are real ties whatever the BLAS does.
    base = rng.integers(-2, 3, size=(60, 3)).astype(np.float64)
    A = np.concatenate([base, -base])
    B = np.concatenate([base[:, ::-1], -base[:, ::-1]])
    B[:, 0] *= 2
    assert len(np.unique(A, axis=0)) < len(A)              # duplicates present
    got = random_grid_chance(A, B, [9, 9], "a_over_b", n_draws=60, seed=1)
    ref = _brute_force(A, B, [9, 9], "a_over_b", "rank", 60, 1)
    assert got["bsr_mean"] == pytest.approx(ref["bsr"].mean(), abs=1e-12)
    assert got["eq_mean"] == pytest.approx(ref["eq"].mean(), abs=1e-12)
    assert got["tsd_mean"] == pytest.approx(ref["tsd"].mean(), abs=1e-12)
    assert ref["eq"].mean() > 0.05                          # ties really occurred


def test_chance_rank_values_match_the_rank_matrix(rank_path, rng):
    from rdx.evaluation.bsr import prepare_representation
    from rdx.evaluation.chance import _pair_dissimilarities
    base = rng.integers(-1, 2, size=(40, 2)).astype(np.float64)
    X = np.concatenate([base, -base])                       # many exact ties
    pd = prepare_representation(X)
    R = ranks_of_rows(pd.X, np.arange(len(X)))
    a = rng.integers(0, len(X), 3000)
    b = rng.integers(0, len(X), 3000)
    keep = a != b
    got = _pair_dissimilarities(pd, a[keep], b[keep], ["rank"])["rank"]
    assert np.array_equal(got, R[a[keep], b[keep]] + 1.0)
    # a single duplicate pair (distance 0, no further tie): each is the other's 1st neighbour
    Y = rng.standard_normal((30, 3))
    Y[7] = Y[3]
    pd = prepare_representation(Y)
    a, b = np.nonzero(~np.eye(30, dtype=bool))
    got = _pair_dissimilarities(pd, a, b, ["rank"])["rank"]
    assert np.array_equal(got, ranks_of_rows(pd.X, np.arange(30))[a, b] + 1.0)
    assert got[(a == 3) & (b == 7)] == got[(a == 7) & (b == 3)] == 2.0


def test_chance_grids_from_a_pool_above_the_size_limit(rng, monkeypatch):
    """Above CHANCE_POOL_ABOVE images the grids come from a seeded pool: every image of
    every draw is in it, the values are those of bsr_scores on the very same grids, and
    ranks are still within all n images."""
    import rdx.evaluation.chance as chance
    A = rng.standard_normal((150, 5))
    B = A + rng.standard_normal((150, 5))
    plain = random_grid_chance(A, B, [9, 4], "a_over_b", n_draws=30, seed=5)
    assert plain["pool_images"] == 150
    monkeypatch.setattr(chance, "CHANCE_POOL_ABOVE", 100)
    monkeypatch.setattr(chance, "CHANCE_POOL", 40)
    got = random_grid_chance(A, B, [9, 4], "a_over_b", n_draws=30, seed=5)
    assert got["pool_images"] == 40 and got != plain
    r = np.random.default_rng(5)
    members = np.sort(r.choice(150, size=40, replace=False))
    draws = members[draw_grids(40, [9, 4], 30, r)]
    assert len(np.unique(draws)) <= 40
    ref = [bsr_scores(A, B, {"a_over_b": _split(d, [9, 4])})["a_over_b"] for d in draws]
    assert got["bsr_mean"] == pytest.approx(np.mean([x["bsr"] for x in ref]), abs=1e-12)
    assert got["tsd_mean"] == pytest.approx(np.mean([x["tsd"] for x in ref]), rel=1e-6)


def test_chance_single_possible_grid_is_exact():
    # n = 3 and one grid of 3: every draw is {0, 1, 2}, so the chance level is that grid's BSR
    A = np.array([[0.0], [1.0], [5.0]])
    B = np.array([[0.0], [4.0], [5.0]])
    for kind in DISSIMILARITIES[:2]:
        s = bsr_scores(A, B, {"b_over_a": [[0, 1, 2]]}, dissimilarity=kind)["b_over_a"]
        c = random_grid_chance(A, B, [3], "b_over_a", dissimilarity=kind, n_draws=20)
        for q in ("bsr_mean", "bsr_lo", "bsr_hi"):
            assert c[q] == pytest.approx(s["bsr"])
        assert c["tsd_mean"] == pytest.approx(s["tsd"])


def test_chance_of_pairs_matches_exhaustive_average():
    # n = 4, grids of 2: a draw is one of the 6 pairs, uniformly. Rank δ by hand (1-based):
    # A = 0,1,3,7 ; B = 0,3,1,7. Pair BSR (a_over_b, both orders): {0,1}: 1, {0,2}: 0,
    # {0,3}: 0 (ties), {1,2}: 0.5, {1,3}: 0, {2,3}: 0.5  → exact mean 2/6.
    A = np.array([[0.0], [1.0], [3.0], [7.0]])
    B = np.array([[0.0], [3.0], [1.0], [7.0]])
    per_pair = [bsr_scores(A, B, {"a_over_b": [[i, j]]})["a_over_b"]["bsr"]
                for i in range(4) for j in range(i + 1, 4)]
    assert per_pair == [1.0, 0.0, 0.0, 0.5, 0.0, 0.5]
    c = random_grid_chance(A, B, [2], "a_over_b", n_draws=6000, seed=0)
    se = np.std(per_pair) / np.sqrt(6000)
    assert abs(c["bsr_mean"] - 2 / 6) < 4 * se
    assert c["bsr_lo"] == 0.0 and c["bsr_hi"] == 1.0


def test_chance_interval_contains_the_bsr_of_random_grids():
    A, B, _ = planted_pairs(n_per=40, d=8)
    c = random_grid_chance(A, B, [9, 9, 9], "a_over_b", n_draws=1000, seed=0)
    r = np.random.default_rng(123)              # grids drawn independently of the function
    inside = 0
    for _ in range(200):
        grids = [r.choice(len(A), 9, replace=False).tolist() for _ in range(3)]
        bsr = bsr_scores(A, B, {"a_over_b": grids})["a_over_b"]["bsr"]
        inside += c["bsr_lo"] <= bsr <= c["bsr_hi"]
    assert inside >= 180                        # 95 % interval: expect ~190 of 200
    # a grid that really is tight in A only (one planted cluster of A, merged in B) is above
    tight = [list(range(9)), list(range(9, 18)), list(range(80, 89))]
    assert bsr_scores(A, B, {"a_over_b": tight})["a_over_b"]["bsr"] > c["bsr_hi"]


def test_chance_levels_share_draws_and_directions_mirror(rng):
    A = rng.standard_normal((80, 4))
    B = rng.standard_normal((80, 6))
    all_ = chance_levels(A, B, [9, 4], n_draws=50, seed=3)
    for kind in DISSIMILARITIES:
        one = random_grid_chance(A, B, [4, 9], "b_over_a", dissimilarity=kind, n_draws=50,
                                 seed=3)
        assert all_[kind]["b_over_a"] == one
        ab, ba = all_[kind]["a_over_b"], all_[kind]["b_over_a"]
        assert ab["tsd_mean"] == pytest.approx(-ba["tsd_mean"])
        assert ab["bsr_mean"] + ba["bsr_mean"] + ab["eq_mean"] == pytest.approx(1.0)
    again = chance_levels(A, B, [9, 4], n_draws=50, seed=3)
    assert again == all_
    assert chance_levels(A, B, [9, 4], n_draws=50, seed=4)["rank"] != all_["rank"]


def test_chance_level_of_random_grids_among_5000_images():
    # a noisy copy: random grids are as often closer in A as in B (BSR near 0.5); the pairs
    # are every ordered pair of each grid; the draws are the seed's alone. (How fast this
    # runs is measured by the benchmarks, not asserted here.)
    r = np.random.default_rng(0)
    A = r.standard_normal((5000, 32)).astype(np.float32)
    B = (A + r.standard_normal((5000, 32))).astype(np.float32)
    c = random_grid_chance(A, B, [9, 9, 9], "a_over_b", n_draws=1000, seed=0)
    assert 0.4 < c["bsr_mean"] < 0.6 and c["n_draws"] == 1000
    assert c["n_pairs"] == 3 * 9 * 8
    assert c["bsr_lo"] <= c["bsr_mean"] <= c["bsr_hi"]
    assert c["eq_mean"] < 0.01                       # ties are rare in continuous data
    assert random_grid_chance(A, B, [9, 9, 9], "a_over_b", n_draws=1000, seed=0) == c
    assert random_grid_chance(A, B, [9, 9, 9], "a_over_b", n_draws=1000, seed=1) != c


def test_chance_input_errors(rng):
    A = rng.standard_normal((10, 2))
    with pytest.raises(RDXInputError, match="cannot be drawn from 10 images"):
        random_grid_chance(A, A, [11], "a_over_b")
    with pytest.raises(RDXInputError, match="unknown direction"):
        random_grid_chance(A, A, [3], "a_to_b")
    with pytest.raises(RDXInputError, match="unknown dissimilarity"):
        random_grid_chance(A, A, [3], "a_over_b", dissimilarity="cosine")
    with pytest.raises(RDXInputError, match="n_draws"):
        random_grid_chance(A, A, [3], "a_over_b", n_draws=0)
    dup = np.repeat(A[:2], 9, axis=0)        # 8 exact duplicates each: σ_7 = 0
    with pytest.raises(RDXInputError, match="zero local scale"):
        random_grid_chance(dup, dup, [3], "a_over_b", dissimilarity="local_scaling")
    assert chance_levels(dup, dup, [3], n_draws=5)["local_scaling"]["undefined"]
    assert np.isnan(random_grid_chance(A, A, [1, 1], "a_over_b", n_draws=5)["bsr_mean"])


# ------------------------------------------------------------------ known difference


@pytest.mark.parametrize("labels,hit", [
    ([3] * 6 + [5] * 2 + [8], True),        # 8 of 9 merged, each ≥ 2
    ([3] * 7 + [5] * 1 + [8], False),       # 8 of 9 but 7 + 1: 5 has only one
    ([3] * 5 + [5] * 2 + [8] * 2, False),   # only 7 of 9 merged
    ([3] * 9, False),                       # a class alone is not the merge
    ([3] * 4 + [5] * 5, True),
    ([3, 3, 5, 5], True),                   # g = 4: all 4 merged, each ≥ 1
    ([3, 3, 3, 8], False),
    ([3] * 12 + [5] * 4 + [1, 2], True),    # g = 18: ≥ 16 merged, each ≥ 4
    ([3] * 13 + [5] * 3 + [1, 2], False),
    ([], False),
])
def test_merged_classes_hit_rule(labels, hit):
    assert merged_classes_hit(labels, [3, 5]) is hit


def test_flip_pair_hit_rule():
    assert flip_pair_hit([2, 12, 7, 7], 10)
    assert not flip_pair_hit([2, 13, 4, 5], 10)          # flipped 3, but no original 3
    assert not flip_pair_hit([12, 13, 14], 10)           # flipped copies only
    assert flip_pair_hit([0, 3], 3)                      # n_classes scales the offset


def test_score_merged_classes_per_direction():
    labels = np.array([3, 3, 3, 3, 5, 5, 5, 5, 8, 8, 8, 8, 4, 4, 9, 9, 9, 9])
    hit_grid = [0, 1, 2, 3, 4, 5, 6, 7, 8]             # 4+4 merged + one 8
    miss_grid = [0, 1, 2, 3, 4, 8, 9, 10, 11]           # 5 merged
    kd = {"type": "merged_classes", "classes": [3, 5], "model": "a"}
    grids = {"a_over_b": [hit_grid, miss_grid, hit_grid], "b_over_a": [miss_grid, hit_grid]}
    s = score_known_difference(kd, grids, labels)
    assert {k: s["a_over_b"][k] for k in ("hits", "total", "rate", "expected")} == \
        {"hits": 2, "total": 3, "rate": 2 / 3, "expected": True}
    assert s["a_over_b"]["hit_grids"] == [0, 2] and s["a_over_b"]["score"] is None
    assert (s["b_over_a"]["hits"], s["b_over_a"]["expected"]) == (1, False)
    s_b = score_known_difference({**kd, "model": "b"}, grids, labels)
    assert s_b["b_over_a"]["expected"] and not s_b["a_over_b"]["expected"]

    # two declarations (m35 vs m49): each direction is scored against the one it expects
    both = [kd, {"type": "merged_classes", "classes": [4, 9], "model": "b"}]
    g49 = [12, 13, 14, 15, 16, 17, 12, 14, 15]          # 4,4,9,9,9,9,4,9,9: a 4/9 grid
    s2 = score_known_difference(both, {"a_over_b": [hit_grid, g49], "b_over_a": [hit_grid, g49]},
                                labels)
    assert (s2["a_over_b"]["hits"], s2["a_over_b"]["hit_grids"]) == (1, [0])
    assert (s2["b_over_a"]["hits"], s2["b_over_a"]["hit_grids"]) == (1, [1])
    assert s2["a_over_b"]["expected"] and s2["b_over_a"]["expected"]
    assert [p["hits"] for p in s2["b_over_a"]["parts"]] == [1, 1]


def test_score_flip_pairs():
    labels = np.array([0, 1, 2, 10, 11, 12, 3, 13])
    kd = {"type": "flip_pairs", "model": "a", "n_classes": 10}
    s = score_known_difference(kd, {"a_over_b": [[0, 3, 1], [6, 7], [1, 2, 3]],
                                    "b_over_a": [[0, 1, 2], [3, 4, 5]]}, labels)
    assert (s["a_over_b"]["hits"], s["a_over_b"]["total"], s["a_over_b"]["expected"]) == \
        (2, 3, True)
    assert (s["b_over_a"]["hits"], s["b_over_a"]["rate"], s["b_over_a"]["expected"]) == \
        (0, 0.0, False)
    with pytest.raises(RDXInputError, match="needs the images' labels"):
        score_known_difference(kd, {"a_over_b": [[0, 1]]}, None)


def test_score_masked_concept_on_a_constructed_representation():
    # Full representation B; its column 1 is the concept A is blind to.
    v = np.array([0.0, 2.0, 4.0, 4.0, 1.0, 3.0])
    B = np.stack([np.zeros(6), v, np.ones(6)], axis=1)
    A = np.delete(B, 1, axis=1)
    grids = {"a_over_b": [[0, 1], [2, 4]],      # stds 1 and 1.5 → 1.25
             "b_over_a": [[2, 3], [4, 5], [0]]}  # stds 0 and 1 → 0.5 (1-image grid skipped)
    kd = {"type": "masked_concept", "dim": 1, "model": "a"}
    s = score_known_difference(kd, grids, A=A, B=B)
    assert s["a_over_b"]["score"] == pytest.approx(2.5) and s["a_over_b"]["expected"]
    assert s["b_over_a"]["score"] == pytest.approx(0.4) and not s["b_over_a"]["expected"]
    assert s["a_over_b"]["hits"] is None and s["a_over_b"]["rate"] is None
    assert s["a_over_b"]["parts"][0]["within_std"] == pytest.approx(1.25)
    # model b masked: the full representation is A (column 1 of A is the constant 1)
    sb = score_known_difference({**kd, "model": "b"}, grids, A=B, B=A)
    assert sb["b_over_a"]["score"] == pytest.approx(0.4) and sb["b_over_a"]["expected"]
    with pytest.raises(RDXInputError, match="dim=5 is not a column"):
        score_known_difference({**kd, "dim": 5}, grids, A=A, B=B)
    with pytest.raises(RDXInputError, match="needs the full representation B"):
        score_known_difference(kd, grids, A=A)


@pytest.mark.parametrize("spec,match", [
    ({"type": "merged", "classes": [3, 5], "model": "a"}, r"^kd\.type: expected one of"),
    ({"type": "merged_classes", "classes": [3], "model": "a"},
     r"^kd\.classes: expected at least two distinct"),
    ({"type": "merged_classes", "classes": [3, "5"], "model": "a"},
     r"^kd\.classes: expected a list"),
    ({"type": "merged_classes", "classes": [3, 5], "model": "c"},
     r"^kd\.model: expected 'a' or 'b'"),
    ({"type": "merged_classes", "classes": [3, 5]}, r"^kd: missing key\(s\) \['model'\]"),
    ({"type": "flip_pairs", "model": "a", "n_classes": 10, "dim": 3},
     r"^kd: unknown key\(s\) \['dim'\]"),
    ({"type": "flip_pairs", "model": "a", "n_classes": 0},
     r"^kd\.n_classes: expected a positive"),
    ({"type": "masked_concept", "model": "a", "dim": True},
     r"^kd\.dim: expected a non-negative"),
    ([{"type": "masked_concept", "model": "a", "dim": 1}, {"type": "flip_pairs", "model": "x",
                                                           "n_classes": 2}],
     r"^kd\[1\]\.model: expected 'a' or 'b'"),
    ([], r"^kd: expected a mapping or a non-empty list"),
    ("merged_classes", r"^kd: expected a mapping"),
])
def test_validate_known_difference_errors_name_the_key_path(spec, match):
    with pytest.raises(RDXInputError, match=match):
        validate_known_difference(spec, "kd")


def test_validate_known_difference_normalises():
    assert validate_known_difference(None) is None
    assert validate_known_difference({"type": "merged_classes", "classes": (np.int64(3), 5),
                                      "model": "b"}) == \
        {"type": "merged_classes", "model": "b", "classes": [3, 5]}
    assert [s["type"] for s in validate_known_difference(
        [{"type": t, "model": "a", **extra} for t, extra in
         zip(KNOWN_DIFFERENCE_TYPES, ({"classes": [1, 2]}, {"n_classes": 3}, {"dim": 0}))])] == \
        list(KNOWN_DIFFERENCE_TYPES)


# ------------------------------------------------------------------- summaries


def _hand_built_comparison(root, rng):
    """A comparison folder written by hand: grid 0..8 tight in A but 100 apart in B."""
    grid = list(range(9))
    A = rng.standard_normal((90, 5)) * 10
    A[grid] = rng.standard_normal((9, 5)) * 0.01
    centres = rng.standard_normal((9, 5)) * 100
    B = np.concatenate([centres, np.repeat(centres, 9, axis=0) + rng.standard_normal((81, 5))])
    B = np.concatenate([B, np.linspace(0, 1, 90)[:, None]], axis=1)   # extra concept column
    A = np.concatenate([A, B[:, :1] * 0], axis=1)
    labels = np.repeat(np.arange(10), 9)
    comp = root / "hand" / "c1"
    write_json_atomic(comp / "run.json", {
        "experiment": "hand", "comparison": "c1", "seed": 0,
        "config": {"methods": [{"method": "kmeans", "name": "made"}],
                   "known_difference": {"type": "masked_concept", "dim": 5, "model": "a"}},
        "methods": {"made": "done"}})
    write_json_atomic(comp / "images.json", {"dataset": "none", "n_images": 90,
                                             "labels": labels})
    save_npz_atomic(comp / "representations.npz", a=A.astype(np.float32),
                    b=B.astype(np.float32), labels=labels)
    b_grid = list(range(9, 18))                  # one tight group of B (9 copies of centre 0)
    write_json_atomic(comp / "made" / "explanations.json", {
        "schema_version": 1, "method": "kmeans", "params": {}, "n_images": 90,
        "directions": {"a_over_b": {"explanations": [{"images": grid}]},
                       "b_over_a": {"explanations": [{"images": b_grid}]}}})
    return comp, A, B, grid, b_grid


def test_summarize_comparison_on_hand_built_grids(tmp_path, rng):
    comp, A, B, grid, b_grid = _hand_built_comparison(tmp_path, rng)
    s = summarize_comparison(comp, chance_draws=200, chance_seed=0)
    assert (s["experiment"], s["comparison"], s["n_images"]) == ("hand", "c1", 90)
    assert len(s["rows"]) == 2 * 3 and all(list(r) == list(ROW_COLUMNS) for r in s["rows"])
    rows = {(r["direction"], r["dissimilarity"]): r for r in s["rows"]}
    for kind in DISSIMILARITIES:
        ab = rows["a_over_b", kind]
        assert ab["bsr"] == 1.0 and ab["n_pairs"] == 72 and ab["n_explanations"] == 1
        assert ab["grid_size"] == 9 and ab["method"] == "made" and ab["method_type"] == "kmeans"
        assert ab["chance_bsr_hi"] < 1.0 and ab["bsr_minus_chance"] > 0
        assert ab["chance_bsr_lo"] <= ab["chance_bsr_mean"] <= ab["chance_bsr_hi"]
        ref = random_grid_chance(A, B, [9], "a_over_b", dissimilarity=kind, n_draws=200)
        assert ab["chance_bsr_mean"] == ref["bsr_mean"]
    # masked concept = column 5 of B: spread inside the a_over_b grid, constant-ish in b_over_a
    v = B[:, 5].astype(np.float32).astype(np.float64)
    expect = v[grid].std() / v[b_grid].std()
    assert rows["a_over_b", "rank"]["known_difference_score"] == pytest.approx(expect, rel=1e-5)
    assert rows["a_over_b", "rank"]["known_difference_expected"] is True
    assert rows["b_over_a", "rank"]["known_difference_score"] == pytest.approx(1 / expect, rel=1e-5)
    assert rows["b_over_a", "rank"]["known_difference_hits"] is None
    assert s["known_difference"] == {"type": "masked_concept", "model": "a", "dim": 5}


def test_summarize_experiment_without_runs_says_what_to_do(tmp_path):
    with pytest.raises(RDXInputError, match=r"no run found in .*rdx run --config"):
        summarize_experiment(tmp_path)
    with pytest.raises(RDXInputError, match="no run found"):
        ComparisonRun(tmp_path).run


@pytest.fixture(scope="module")
def real_run(toy_run_module_copy):
    """The shared run (B merges 3s and 5s: model b), summarized into this module's copy."""
    exp = toy_run_module_copy.exp
    return exp, summarize_experiment(exp)


def test_summarize_experiment_writes_csv_and_json(real_run):
    exp, summaries = real_run
    assert [s["comparison"] for s in summaries] == sorted([MERGED, ODD_NAME])   # name order
    by_name = {s["comparison"]: s for s in summaries}
    s = by_name[MERGED]
    assert s["n_images"] == 120 and s["warnings"] == []
    assert set(s["similarity"]) == set(NO_GRIDS) and by_name[ODD_NAME]["similarity"] == {}
    cka_doc = json.loads((exp / MERGED / "cka" / "explanations.json").read_text())
    assert s["similarity"]["cka"]["cka_debiased"] == cka_doc["info"]["similarity"]["cka_debiased"]
    assert 0 <= s["similarity"]["classification"]["probe_accuracy_a"] <= 1
    assert "agreement_a_b" in s["similarity"]["classification"]

    with open(exp / "analysis" / "summary.csv", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        cells = list(reader)
    assert tuple(header) == ROW_COLUMNS
    # comparison, method, direction, dissimilarity: one row each (no similarity methods)
    assert len(cells) == 2 * 3 * sum(len(ToyRun.grid_methods(c)) for c in TOY_METHODS)
    assert {(c[1], c[2], c[4], c[5]) for c in cells} == {
        (comp, m, d, k) for comp in TOY_METHODS for m in ToyRun.grid_methods(comp)
        for d in ("a_over_b", "b_over_a") for k in DISSIMILARITIES}

    # the JSON holds exactly the CSV's content (cell by cell, typed)
    on_disk = json.loads((exp / "analysis" / "summary.json").read_text())
    json_rows = [r for comp in on_disk for r in comp["rows"]]
    assert len(json_rows) == len(cells)
    for cell_row, jrow in zip(cells, json_rows):
        assert list(jrow) == header
        for cell, value in zip(cell_row, jrow.values()):
            if value is None:
                assert cell == ""
            elif isinstance(value, bool):
                assert cell == str(value).lower()
            elif isinstance(value, (int, float)):
                assert float(cell) == value
            else:
                assert cell == value
    assert parse_summary_csv(exp / "analysis" / "summary.csv") == json_rows
    assert on_disk == json.loads(json.dumps(summaries))


def test_summary_rows_agree_with_the_run(real_run):
    exp, summaries = real_run
    comp = ComparisonRun(exp / MERGED)
    assert comp.method_names() == ToyRun.methods(MERGED)
    reps = comp.representations
    assert reps["a"].shape[0] == reps["b"].shape[0] == len(comp.labels) == 120
    labels = np.asarray(comp.images["labels"])
    (summary,) = [s for s in summaries if s["comparison"] == MERGED]
    for row in summary["rows"]:
        doc = comp.result(row["method"]).to_json()
        d, k = row["direction"], row["dissimilarity"]
        # the scores the method stored when it ran (same representations, same formulas)
        assert row["bsr"] == pytest.approx(doc["scores"][k][d]["bsr"])
        assert row["tsd"] == pytest.approx(doc["scores"][k][d]["tsd"])
        grids = [e["images"] for e in doc["directions"][d]["explanations"]]
        assert row["n_explanations"] == len(grids) and row["grid_size"] == 9
        assert row["chance_n_draws"] == 1000           # the runner's chance levels, stored
        assert row["chance_bsr_lo"] <= row["chance_bsr_mean"] <= row["chance_bsr_hi"]
        assert row["bsr_minus_chance"] == pytest.approx(row["bsr"] - row["chance_bsr_mean"])
        # known difference: B merges 3 and 5 → expected in b_over_a; hits by the rule
        hits = sum(merged_classes_hit(labels[g], [3, 5]) for g in grids)
        assert row["known_difference_type"] == "merged_classes"
        assert row["known_difference_expected"] is (d == "b_over_a")
        assert (row["known_difference_hits"], row["known_difference_total"]) == (hits, len(grids))
        assert row["known_difference_rate"] == pytest.approx(hits / len(grids))
        assert row["known_difference_score"] is None
    rdx_ba = next(r for r in summary["rows"]
                  if r["method"] == "rdx" and r["direction"] == "b_over_a")
    assert rdx_ba["known_difference_hits"] >= 1     # RDX finds the 3/5 merge of B
