"""The named-group test (rdx.evaluation.group_test)."""
import json
import math

from conftest import rdx_in_process
import numpy as np
import pytest
from scipy import stats as sps

from conftest import planted_pairs, reference_statistic
from rdx.errors import RDXInputError
from rdx.evaluation.group_test import assess_groups, holm, normal_predictive_p


def test_holm_matches_hand_computed_values():
    # sorted 0.01, 0.03, 0.04 times 3, 2, 1 = 0.03, 0.06, 0.04; running maximum keeps 0.06
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(holm([0.5, 0.2]), [0.5, 0.4])
    np.testing.assert_allclose(holm([0.9, 0.6, 0.01]), [1.0, 1.0, 0.03])    # capped at 1
    np.testing.assert_allclose(holm([0.02]), [0.02])                        # one test


def test_normal_predictive_p_is_the_student_t_tail_on_the_values():
    null = [-2.7, 1.9, 3.6, -0.3, -1.7, -1.0]
    x = np.asarray(null)
    z = (143.0 - x.mean()) / (x.std(ddof=1) * math.sqrt(1 + 1 / 6))
    p, _ = normal_predictive_p(null, 143.0)
    assert p == pytest.approx(sps.t.sf(z, df=5), rel=1e-9) and p < 1e-4
    # negative null values are values, not floored logs: the p of their mean is about 1/2
    assert normal_predictive_p(null, float(x.mean()))[0] == pytest.approx(0.5)
    assert normal_predictive_p([2.0, 2.0, 2.0], 3.0) == (0.0, 0.0)
    assert normal_predictive_p([2.0, 2.0, 2.0], 2.0) == (1.0, 0.0)


def _twins(seed, n_per=12):
    """A, B and two twins of each: the same planted clusters with fresh per-image noise."""
    A, B, lab = planted_pairs(n_per=n_per, seed=0)
    r = np.random.default_rng(seed)

    def twin(X):
        return (X + 0.3 * r.standard_normal(X.shape)).astype(np.float32)

    return A, B, [twin(A), twin(A)], [twin(B), twin(B)], lab


def test_twin_null_p_is_the_student_t_tail_of_the_groups_own_null_values():
    """Statistic and null values recomputed pair by pair from independent ranks; the p-value
    recomputed with scipy's t distribution; the null draws are the exact twin draws: A
    against its twins, B's twins against B, and the two twins of each model."""
    A, B, (tA, tA2), (tB, tB2), lab = _twins(1)
    groups = [np.flatnonzero(np.isin(lab, [0, 1])), np.flatnonzero(lab == 4)]
    out = assess_groups(A, B, groups, names=["0|1", "4"], control_a=[tA, tA2],
                        control_b=[tB, tB2], directions=("a_over_b", "b_over_a"),
                        gamma=0.4, beta=3.0)
    assert out["null"] == "twin" and out["n_draws"] == 6 and out["n_tests"] == 4
    recs = out["groups"]
    assert [(r["name"], r["direction"]) for r in recs] == [
        ("0|1", "a_over_b"), ("0|1", "b_over_a"), ("4", "a_over_b"), ("4", "b_over_a")]
    draws = [(A, tA), (A, tA2), (tB, B), (tB2, B), (tA, tA2), (tB, tB2)]
    for r, (g, d) in zip(recs, [(0, "a_over_b"), (0, "b_over_a"), (1, "a_over_b"),
                                (1, "b_over_a")]):
        t = reference_statistic(A, B, groups[g], d, 0.4, 3.0)
        null = [reference_statistic(X, Y, groups[g], d, 0.4, 3.0) for X, Y in draws]
        assert r["statistic"] == pytest.approx(t, rel=1e-6)
        np.testing.assert_allclose(r["null_values"], null, rtol=1e-6)
        x = np.asarray(null)
        z = (t - x.mean()) / (x.std(ddof=1) * math.sqrt(1 + 1 / 6))
        assert r["p_value"] == pytest.approx(sps.t.sf(z, df=5), rel=1e-6)
        assert r["z"] == pytest.approx((t - x.mean()) / x.std(ddof=1), rel=1e-6)
        assert r["p_value_empirical"] == pytest.approx((1 + sum(x >= t for x in null)) / 7)
        assert r["size"] == len(groups[g])
    np.testing.assert_allclose([r["p_value_holm"] for r in recs],
                               holm([r["p_value"] for r in recs]))
    assert [r["significant"] for r in recs] == [r["p_value_holm"] <= 0.05 for r in recs]
    assert out["calibrated"] and all(r["below_alpha"] == r["significant"] for r in recs)


def test_a_moved_cluster_is_detected_and_an_untouched_group_is_not():
    """Recipe A keeps six clusters apart; recipe B puts cluster 1 onto cluster 0. Every run
    (A, B and three seed twins of each) is its recipe plus fresh noise, so twins are
    exchangeable with the model they stand in for. The two clusters as one group are
    significant — most strongly as b_over_a (pairs across them are near in B), and also as
    a_over_b (the neighbours of each cluster's own images interleave with the other's in
    B, so their ranks grow) — while clusters 4 and 5, which B leaves where they are, are not
    significant in either direction."""
    r = np.random.default_rng(0)
    centers = r.standard_normal((6, 16)) * 12
    lab = np.repeat(np.arange(6), 15)
    spread = r.standard_normal((len(lab), 16))
    moved = centers.copy()
    moved[1] = moved[0]
    noise = np.random.default_rng(3)

    def run(C):
        return (C[lab] + spread + 0.2 * noise.standard_normal(spread.shape)).astype(np.float32)

    A, B = run(centers), run(moved)
    twins_a, twins_b = [run(centers) for _ in range(3)], [run(moved) for _ in range(3)]
    out = assess_groups(A, B, [np.flatnonzero(lab <= 1), np.flatnonzero(lab >= 4)],
                        names=["0|1", "4|5"], directions=("a_over_b", "b_over_a"),
                        control_a=twins_a, control_b=twins_b)
    assert out["n_draws"] == 12                      # 6 twins against models, 6 twin pairs
    rec = {(g["name"], g["direction"]): g for g in out["groups"]}
    assert rec[("0|1", "b_over_a")]["significant"] and rec[("0|1", "a_over_b")]["significant"]
    assert rec[("0|1", "b_over_a")]["statistic"] > rec[("0|1", "a_over_b")]["statistic"]
    assert rec[("0|1", "b_over_a")]["p_value"] < 0.01
    assert not rec[("4|5", "a_over_b")]["significant"]
    assert not rec[("4|5", "b_over_a")]["significant"]
    assert min(rec[("4|5", d)]["p_value"] for d in ("a_over_b", "b_over_a")) > 0.05


def test_without_twins_the_perturbation_null_is_seeded_and_local():
    """The field null: n_null draws, calibrated to the pair's overlap; the same seed gives
    the same p, and the caller's global generator is neither used nor moved."""
    A, B, lab = planted_pairs(n_per=12, seed=0)
    merged = np.flatnonzero(np.isin(lab, [0, 1]))
    np.random.seed(7)
    state = np.random.get_state()[1].copy()
    one = assess_groups(A, B, [merged], directions=("b_over_a",), n_null=5, random_state=2)
    np.testing.assert_array_equal(np.random.get_state()[1], state)
    two = assess_groups(A, B, [merged], directions=("b_over_a",), n_null=5, random_state=2)
    assert one["null"] == "field" and one["noise"] == "field" and one["n_draws"] == 5
    # named groups are calibrated against seed twins only: no verdict here
    assert not one["calibrated"] and one["groups"][0]["significant"] is None
    assert 0 < one["calibration"]["observed_overlap"] < 1
    assert one["groups"][0]["p_value"] == two["groups"][0]["p_value"]
    assert one["groups"][0]["null_values"] == two["groups"][0]["null_values"]
    other = assess_groups(A, B, [merged], directions=("b_over_a",), n_null=5, random_state=3)
    assert other["groups"][0]["null_values"] != one["groups"][0]["null_values"]


@pytest.mark.parametrize("kwargs, message", [
    ({"groups": [[3]]}, "at least two"),
    ({"groups": [[0, 1, 999]]}, "must lie in 0..71"),
    ({"groups": [[0, -1]]}, "must lie in 0..71"),
    ({"groups": [0, 1, 2]}, "list of integers"),
    ({"groups": np.arange(5)}, "list of image-index lists"),
    ({"groups": []}, "list of image-index lists"),
    ({"groups": [[0.5, 1.5]]}, "list of integers"),
    ({"groups": [[0, 1]], "names": ["x", "y"]}, "2 names for 1 groups"),
    ({"groups": [[0, 1]], "directions": ("sideways",)}, "directions must be"),
    ({"groups": [[0, 1]], "directions": ("a_over_b", "a_over_b")}, "directions must be"),
    ({"groups": [[0, 1]], "control_b": "twin"}, "control_b has dtype"),
    ({"groups": [[0, 1]], "alpha": 1.5}, "alpha"),
])
def test_bad_input_says_what_is_wrong(kwargs, message):
    A, B, _ = planted_pairs(n_per=12, seed=0)
    with pytest.raises(RDXInputError, match=message):
        assess_groups(A, B, **kwargs)


def test_too_few_twin_draws_are_refused_with_what_to_give():
    """One twin of each model gives 2 exact draws, two twins of B give 3: refused (two
    null values can agree by chance); two of each give 6, three of one give 6."""
    A, B, (tA, tA2), (tB, tB2), _ = _twins(2)
    for kw in ({"control_a": tA}, {"control_a": tA, "control_b": tB},
               {"control_b": [tB, tB2]}):
        with pytest.raises(RDXInputError, match="give two twins of each model"):
            assess_groups(A, B, [[0, 1, 2]], **kw)
    tB3 = (tB - 0.1).astype(np.float32)
    assert assess_groups(A, B, [[0, 1, 2]], control_a=[tA, tA2],
                         control_b=[tB, tB2])["n_draws"] == 6
    assert assess_groups(A, B, [[0, 1, 2]], control_b=[tB, tB2, tB3])["n_draws"] == 6
    with pytest.raises(RDXInputError, match="n_null"):
        assess_groups(A, B, [[0, 1, 2]], n_null=4)


# ------------------------------------------------------------------ rdx explain --test-classes

_rdx = rdx_in_process


@pytest.fixture
def cli_inputs(tmp_path):
    A, B, twins_a, twins_b, lab = _twins(4)
    files = {"A": A, "B": B, "tA": twins_a[0], "tA2": twins_a[1], "tB": twins_b[0],
             "tB2": twins_b[1], "y": lab * 10}          # label values 0, 10, ..., 50
    for name, arr in files.items():
        np.save(tmp_path / f"{name}.npy", arr)
    return tmp_path, files


def test_explain_tests_the_named_classes_with_the_fits_statistic(cli_inputs):
    """The groups are the images of the named label values; the record in
    explanations.json is assess_groups' at the fit's γ and β, with the twins' draws."""
    w, f = cli_inputs
    rc, out, err = _rdx(["explain", w / "A.npy", w / "B.npy", "--labels", w / "y.npy",
                         "--test-classes", "0,10", "--test-classes", "40",
                         "--control-a", w / "tA.npy", "--control-a", w / "tA2.npy",
                         "--control-b", w / "tB.npy", "--control-b", w / "tB2.npy",
                         "--beta", "4", "--out", w / "o"])
    assert rc == 0, err
    doc = json.loads((w / "o" / "explanations.json").read_text())
    got = doc["info"]["group_tests"]
    assert got["null"] == "twin" and got["n_draws"] == 6 and got["n_tests"] == 4
    want = assess_groups(f["A"], f["B"], [np.flatnonzero(f["y"] <= 10),
                                          np.flatnonzero(f["y"] == 40)],
                         names=["0|10", "40"], directions=("a_over_b", "b_over_a"),
                         control_a=[f["tA"], f["tA2"]], control_b=[f["tB"], f["tB2"]],
                         gamma=doc["params"]["gamma_resolved"], beta=4.0)
    assert got["params"]["beta"] == 4.0
    assert [(g["name"], g["direction"], g["size"]) for g in got["groups"]] == [
        ("0|10", "a_over_b", 24), ("0|10", "b_over_a", 24), ("40", "a_over_b", 12),
        ("40", "b_over_a", 12)]
    for g, h in zip(got["groups"], want["groups"]):
        assert g["p_value"] == pytest.approx(h["p_value"], rel=1e-9)
    assert "named groups (6 null draws of each; Holm over 4 tests); null = twin null" in out
    assert "0|10 (24 images), close in B, far in A:" in out


@pytest.mark.parametrize("extra, needle", [
    (["--test-classes", "0,99"], "not in the labels: 99"),
    (["--test-classes", " , "], "names no class"),
    (["--test-classes", "0", "--control-b", "{w}/tB.npy"], "give two twins of each model"),
    (["--test-classes", "0", "--control-a", "{w}/tA.npy", "--control-b", "{w}/tB.npy"],
     "2 exact null draw"),
    (["--control-b", "{w}/tB.npy"], "--significance, --test-classes and --test-group"),
    (["--test-group", "{w}/tA.npy"], "holds a float32 array of shape (72, 16)"),
    (["--test-group", "g={w}/float_idx.npy"], "1-D array of image indices"),
    (["--test-group", "{w}/short_mask.npy"], "mask has 71 entries but there are 72"),
    (["--test-group", "{w}/out_of_range.npy"], "must lie in 0..71 (there are 72 images), got 72"),
    (["--test-group", "{w}/one.npy"], "group 'one' has 1 distinct image"),
    (["--test-group", "{w}/nothere.npy"], "does not exist"),
    (["--test-group", "=x.npy"], "give NAME=FILE"),
    (["--test-group", "g={w}/idx.npy", "--test-group", "g={w}/mask.npy"], "called 'g'"),
    (["--test-classes", "0", "--test-group", "0={w}/idx.npy"], "called '0'"),
])
def test_explain_refuses_bad_named_groups_before_the_fit(cli_inputs, extra, needle):
    w, _ = cli_inputs
    _group_files(w)
    argv = ["explain", w / "A.npy", w / "B.npy", "--labels", w / "y.npy", "--out", w / "o"]
    rc, _out, err = _rdx(argv + [str(x).format(w=w) for x in extra])
    assert rc == 2 and "Traceback" not in err and needle in err, err
    assert not (w / "o").exists()


def _group_files(w):
    """--test-group files: indices, a boolean mask, an .npz, and bad ones."""
    np.save(w / "idx.npy", np.array([5, 3, 9, 3, 40], dtype=np.int32))   # repeats count once
    mask = np.zeros(72, bool)
    mask[60:] = True
    np.save(w / "mask.npy", mask)
    np.savez(w / "groups.npz", first=np.arange(12), last=np.arange(60, 72))
    np.save(w / "float_idx.npy", np.array([1.0, 2.0]))
    np.save(w / "short_mask.npy", mask[1:])
    np.save(w / "out_of_range.npy", np.array([0, 72]))
    np.save(w / "one.npy", np.array([4, 4]))


def test_explain_tests_groups_from_files(cli_inputs):
    """--test-group: image indices or a boolean mask from .npy/.npz, named NAME= or by the
    file; tested like --test-classes groups (one Holm family with them), and each record
    keeps the group's images. Needs no labels."""
    w, f = cli_inputs
    _group_files(w)
    rc, out, err = _rdx(["explain", w / "A.npy", w / "B.npy", "--labels", w / "y.npy",
                         "--test-classes", "50", "--test-group", f"picked={w / 'idx.npy'}",
                         "--test-group", w / "mask.npy",
                         "--test-group", f"{w / 'groups.npz'}:first", "--out", w / "o"])
    assert rc == 0, err
    got = json.loads((w / "o" / "explanations.json").read_text())["info"]["group_tests"]
    members = {"50": np.flatnonzero(f["y"] == 50), "picked": [3, 5, 9, 40],
               "mask": np.arange(60, 72), "groups": np.arange(12)}
    assert [g["name"] for g in got["groups"]] == [x for x in members for _ in range(2)]
    assert got["n_tests"] == 8
    for g in got["groups"]:
        assert g["members"] == list(members[g["name"]]) and g["size"] == len(g["members"])
    want = assess_groups(f["A"], f["B"], list(members.values()), names=list(members),
                         directions=("a_over_b", "b_over_a"),
                         gamma=got["params"]["gamma"], beta=got["params"]["beta"],
                         random_state=got["random_state"])
    for g, h in zip(got["groups"], want["groups"]):
        assert g["p_value_holm"] == pytest.approx(h["p_value_holm"], rel=1e-9)
    assert "picked (4 images), close in A, far in B:" in out
    # no labels needed for groups of image indices
    rc, _out, err = _rdx(["explain", w / "A.npy", w / "B.npy", "--test-group", w / "mask.npy",
                          "--quiet", "--out", w / "o2"])
    assert rc == 0, err


def test_explain_named_classes_need_labels(cli_inputs):
    w, _ = cli_inputs
    rc, _out, err = _rdx(["explain", w / "A.npy", w / "B.npy", "--test-classes", "0,10",
                          "--out", w / "o"])
    assert rc == 2 and "give --labels" in err and not (w / "o").exists()


def test_the_report_lists_the_named_groups(cli_inputs):
    """rdx explain --report: the method's section holds a table of the named groups, each
    direction with its p, Holm's p and a badge."""
    w, _ = cli_inputs
    rc, _out, err = _rdx(["explain", w / "A.npy", w / "B.npy", "--labels", w / "y.npy",
                          "--test-classes", "0,10", "--report", "--quiet", "--out", w / "r"])
    assert rc == 0, err
    html = (w / "r" / "report.html").read_text(encoding="utf-8")
    doc = json.loads((w / "r" / "rdx" / "explanations.json").read_text())
    tests = doc["info"]["group_tests"]
    assert tests["null"] == "field" and tests["n_tests"] == 2
    part = html[html.index("<h4>Named groups</h4>"):]
    part = part[:part.index("</table>")]
    assert "6 null pairs (null: field null)" in part and "0|10" in part
    for g in tests["groups"]:
        assert f"{g['p_value_holm']:.4f}" in part
    assert part.count("no verdict (not calibrated)</span>") == 2


def test_the_bench_tables_count_tests_holm_families_and_the_expected_direction():
    """bench_group_test's summary: calibration pools every test of the twin comparisons
    and counts comparisons with any Holm-significant test; power counts implanted cases
    whose expected direction (a_over_b) survives Holm, and the other direction's alarms."""
    import importlib.util
    import sys
    from pathlib import Path

    bench_dir = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(bench_dir))
    try:
        spec = importlib.util.spec_from_file_location("bench_group_test",
                                                      bench_dir / "bench_group_test.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(bench_dir))
    tests = [["0|1", "a_over_b"], ["0|1", "b_over_a"]]

    def rec(pair, kind, p, p_holm, family="digits-mlp"):
        return {"pair": pair, "kind": kind, "family": family, "noise": "twin", "seed": 0,
                "n_twins": 2, "tests": tests, "p": p, "p_holm": p_holm}

    rows = [rec("t1", "twin", [0.004, 0.6], [0.008, 0.6]),
            rec("t2", "twin", [0.03, 0.5], [0.06, 0.5]),
            rec("m1", "implanted", [0.01, 0.9], [0.02, 0.9]),
            rec("m2", "implanted", [0.04, 0.7], [0.08, 0.7], family="fashion-cnn"),
            rec("m3", "implanted", [0.9, 0.001], [0.9, 0.002], family="fashion-cnn")]
    field = [dict(rec("m1", "implanted", [0.01, 0.9], [0.02, 0.9]), noise="field", seed=s)
             for s in (0, 1)]                  # one case, two seeds of the draws: two records
    assert "| field | 2/2 (1.00) | 2/2 | 0.01 | 0/2 |" in bench.summarise(field, True)
    out = bench.summarise(rows, markdown=True)
    # 4 tests: p ≤ 0.01 once, ≤ 0.05 twice; one comparison with a Holm-significant test
    assert "| twin ×2 | 2 | 4 | 0.250 | 0.500 | 0.500 | 0.500 |" in out
    assert "| 1/2 | 0.013–0.987 |" in out
    # detected: m1 only (m2's Holm p is 0.08; m3 is flagged the other way)
    assert "| twin ×2 | 1/3 (0.33) | 1/1 | 0/2 | 0.04 | 1/3 |" in out
