"""Attribute enrichment of explanations and the low-level image statistics: each formula
against hand-computed or independently computed (scipy) values, the table's checks, and a
known answer on digits — a planted brightness difference named, a control pair with none
named."""
import json
import math

from conftest import rdx_in_process
import numpy as np
import pytest
from scipy import ndimage
from scipy import stats as sps

from rdx.errors import RDXInputError
from rdx.evaluation.enrichment import (AttributeTable, attribute_tests, benjamini_hochberg,
                                       build_table, column_attribute, describe, enrich,
                                       read_table)
from rdx.evaluation.image_stats import (EDGE_THRESHOLD, channels_last, image_statistics,
                                        intensity_scale)
from rdx.results.types import DirectionResult, Explanation, MethodResult


# ------------------------------------------------------------------ image statistics

def test_brightness_and_contrast_by_hand():
    img = np.array([[[0, 255], [255, 255]]], dtype=np.uint8)      # 3 of 4 pixels white
    s = image_statistics(img)
    assert s["brightness"][0] == pytest.approx(0.75)
    assert s["contrast"][0] == pytest.approx(math.sqrt(0.75 * 0.25))   # sd of {0,1,1,1}
    assert s["object_size"][0] == pytest.approx(0.75)
    assert "colourfulness" not in s


def test_luminance_weights_and_colourfulness_by_hand():
    red = np.zeros((1, 4, 4, 3), dtype=np.uint8)
    red[..., 0] = 255
    s = image_statistics(red)
    assert s["brightness"][0] == pytest.approx(0.299)
    # rg = 1, yb = 0.5 everywhere: no spread, 0.3·sqrt(1 + 0.25)
    assert s["colourfulness"][0] == pytest.approx(0.3 * math.sqrt(1.25))
    grey = np.full((1, 4, 4, 3), 128, dtype=np.uint8)
    assert image_statistics(grey)["colourfulness"][0] == pytest.approx(0.0)


def test_colourfulness_matches_a_pixel_by_pixel_computation():
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, size=(3, 5, 6, 3)).astype(np.uint8)
    got = image_statistics(imgs)["colourfulness"]
    for k in range(3):
        px = [tuple(v / 255 for v in imgs[k, i, j]) for i in range(5) for j in range(6)]
        rg = [r - g for r, g, b in px]
        yb = [(r + g) / 2 - b for r, g, b in px]
        want = math.sqrt(np.var(rg) + np.var(yb)) + 0.3 * math.hypot(np.mean(rg), np.mean(yb))
        assert got[k] == pytest.approx(want, rel=1e-12)


def test_edge_density_matches_scipys_sobel():
    rng = np.random.default_rng(1)
    imgs = rng.random((4, 9, 7))
    imgs[0] = 0.5                                     # flat, but for two corners
    imgs[:, 0, 0] = 0.0
    imgs[:, -1, -1] = 1.0                             # the scale is 0..1 already
    want = []
    for img in imgs:                                  # scipy's Sobel image by image
        mag = np.hypot(ndimage.sobel(img, axis=1), ndimage.sobel(img, axis=0)) / 8
        want.append((mag[1:-1, 1:-1] > EDGE_THRESHOLD).mean())
    np.testing.assert_allclose(image_statistics(imgs)["edge_density"], want)


def test_edge_density_of_a_step_by_hand():
    img = np.zeros((1, 5, 6))
    img[0, :, 3:] = 1.0          # a vertical step between columns 2 and 3
    # interior: rows 1..3, columns 1..4; the gradient is 0.5 at columns 2 and 3, else 0
    assert image_statistics(img)["edge_density"][0] == pytest.approx(6 / 12)


def test_centre_of_mass_matches_scipy():
    rng = np.random.default_rng(2)
    imgs = rng.random((3, 8, 10)) ** 4
    imgs[:, 0, 0] = 0.0
    imgs[:, 1, 1] = 1.0
    s = image_statistics(imgs)
    for k in range(3):
        r, c = ndimage.center_of_mass(imgs[k])
        assert s["centre_row"][k] == pytest.approx(r / 7)
        assert s["centre_col"][k] == pytest.approx(c / 9)


def test_layouts_scale_and_chunks():
    rng = np.random.default_rng(3)
    hwc = rng.random((5, 6, 7, 3)).astype(np.float32)
    chw = np.moveaxis(hwc, -1, 1)
    a, b = image_statistics(hwc), image_statistics(chw, chunk=2)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6)
    rgba = np.concatenate([hwc, np.ones((5, 6, 7, 1), np.float32)], axis=-1)
    # alpha is dropped; the range of the array (here 0..1, alpha's ones included) scales
    np.testing.assert_allclose(image_statistics(rgba)["brightness"],
                               image_statistics(hwc)["brightness"] * 1.0, rtol=1e-5,
                               atol=1 - hwc.max())
    assert channels_last(np.zeros((2, 4, 4))).shape == (2, 4, 4, 1)
    # one scale for all images: an image at twice the intensity is twice as bright
    pair = np.stack([np.full((4, 4), 10.0), np.full((4, 4), 20.0)])
    pair[:, 0, 0] = 0.0
    s = image_statistics(pair)
    assert s["brightness"][1] == pytest.approx(2 * s["brightness"][0])
    assert intensity_scale(np.array([3, 300])) == (3.0, 297.0)
    assert intensity_scale(np.array([0, 200], np.uint8)) == (0.0, 255.0)
    with pytest.raises(RDXInputError, match="expected n×H×W"):
        image_statistics(np.zeros((2, 5)))


# ------------------------------------------------------------------ the tests

def _table(**columns):
    n = len(next(iter(columns.values())))
    return build_table(n, {k: list(v) for k, v in columns.items()})


def test_a_categorical_level_is_fishers_exact_test_of_its_2x2_table():
    level = ["x"] * 6 + ["y"] * 4 + ["z"] * 10
    members = [0, 1, 2, 3, 6, 10]               # 4 of 6 members are x, 2 of the 14 others
    tests = {t["level"]: t for t in attribute_tests(_table(site=level), members)}
    t = tests["x"]
    assert (t["count"], t["n_members"]) == (4, 6)
    assert t["share_members"] == pytest.approx(4 / 6)
    assert t["share_rest"] == pytest.approx(2 / 14)
    assert t["ratio"] == pytest.approx((4 / 6) / (2 / 14)) and t["direction"] == "over"
    # two-sided: the hypergeometric probabilities no larger than the observed one
    h = sps.hypergeom(20, 6, 6)            # population, level count, members
    probs = h.pmf(np.arange(0, 7))
    want = probs[probs <= h.pmf(4) * (1 + 1e-7)].sum()
    assert t["p_value"] == pytest.approx(want, rel=1e-9)
    assert tests["z"]["direction"] == "under"


def test_a_two_level_attribute_is_tested_once_and_missing_values_are_left_out():
    flag = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, None, ""]
    tests = attribute_tests(_table(flag=flag), [0, 1, 2, 3, 10])
    assert len(tests) == 1 and tests[0]["level"] == "1"
    assert tests[0]["n_members"] == 4 and tests[0]["count"] == 3
    assert tests[0]["share_rest"] == 0.0 and tests[0]["ratio"] is None


def test_a_numeric_attribute_mann_whitney_rank_biserial_and_smd():
    rng = np.random.default_rng(4)
    v = rng.standard_normal(60)
    v[:15] += 1.0
    members = np.arange(15)
    (t,) = attribute_tests(_table(score=v), members)
    x, y = v[:15], v[15:]
    greater = sum(a > b for a in x for b in y)
    less = sum(a < b for a in x for b in y)
    assert t["rank_biserial"] == pytest.approx((greater - less) / (15 * 45))
    # no ties: the normal approximation with continuity correction
    mu, sd = 15 * 45 / 2, math.sqrt(15 * 45 * (15 + 45 + 1) / 12)
    z = (abs(greater - mu) - 0.5) / sd
    assert t["p_value"] == pytest.approx(2 * sps.norm.sf(z), rel=1e-9)
    pooled = math.sqrt((14 * x.var(ddof=1) + 44 * y.var(ddof=1)) / 58)
    assert t["smd"] == pytest.approx((x.mean() - y.mean()) / pooled)
    assert t["mean_members"] == pytest.approx(x.mean()) and t["ratio"] is None  # negatives
    assert t["direction"] == "higher"


def test_fisher_and_mann_whitney_match_scipy_on_random_tables():
    from rdx.evaluation.enrichment import Attribute, fisher_two_sided, mann_whitney

    rng = np.random.default_rng(8)
    for _ in range(40):
        n = int(rng.integers(10, 300))
        m = int(rng.integers(1, n))
        total = rng.integers(1, n, size=5)
        k = np.array([rng.integers(max(0, m - (n - t)), min(m, t) + 1) for t in total])
        want = [sps.fisher_exact([[ki, m - ki], [t - ki, n - m - t + ki]]).pvalue
                for ki, t in zip(k, total)]
        np.testing.assert_allclose(fisher_two_sided(k, m, total, n), want, rtol=1e-6)
    for n, levels, m in ((40, 5, 12), (300, 1000, 90), (12, 100, 6)):
        v = rng.integers(0, levels, n).astype(float)          # ties in the first two
        inside = np.zeros(n, bool)
        inside[rng.choice(n, m, replace=False)] = True
        a = Attribute("v", "numeric", "table", v)
        u, p, _, _ = mann_whitney(a, inside)
        ref = sps.mannwhitneyu(v[inside], v[~inside], alternative="two-sided")
        assert u == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue, rel=1e-9)


def test_benjamini_hochberg_matches_scipy():
    rng = np.random.default_rng(5)
    p = np.concatenate([rng.random(40), rng.random(10) * 1e-3, [1.0, 0.0]])
    np.testing.assert_allclose(benjamini_hochberg(p), sps.false_discovery_control(p))
    # by hand: N = 4, sorted 0.01 0.02 0.03 0.5
    np.testing.assert_allclose(benjamini_hochberg([0.03, 0.01, 0.5, 0.02]),
                               [0.04, 0.04, 0.5, 0.04])


def test_columns_are_numeric_categorical_or_skipped():
    n = 30
    a, why = column_attribute("age", [str(20 + i * 0.5) for i in range(n)])
    assert a.kind == "numeric" and why == ""
    a, _ = column_attribute("site", [str(i % 3 + 1) for i in range(n)])
    assert a.kind == "categorical" and a.levels == ["1", "2", "3"]
    a, why = column_attribute("file", [f"img{i}.png" for i in range(n)])
    assert a is None and "id" in why
    a, why = column_attribute("const", ["x"] * n)
    assert a is None and why == "one value only"
    a, why = column_attribute("empty", ["", "NA"] * 15)
    assert a is None and why == "no values"
    a, _ = column_attribute("size", ["1.5", "", "nan", "2.5"] + ["3.25"] * 26)
    assert a.kind == "numeric" and np.isnan(a.values[1:3]).all()


def _result(n, groups):
    return MethodResult(method="rdx", params={}, n_images=n, directions={
        "a_over_b": DirectionResult([Explanation(images=list(g[:9]), members=list(g))
                                     for g in groups])})


def test_enrich_adjusts_over_every_test_and_describes_findings_only():
    n = 200
    rng = np.random.default_rng(6)
    kind = np.where(np.arange(n) < 40, "coat", rng.choice(["shirt", "bag"], n))
    bright = rng.random(n)
    bright[100:130] += 2.0
    res = _result(n, [np.arange(40), np.arange(100, 130), rng.choice(n, 25, replace=False)])
    res.info["group_tests"] = {"groups": [
        {"name": "g", "direction": d, "members": list(range(150, 170))}
        for d in ("a_over_b", "b_over_a")]}
    summary = enrich(res, {"kind": kind, "brightness": bright})
    recs = [e.extra["enrichment"] for e in res.directions["a_over_b"].explanations]
    group = res.info["group_tests"]["groups"][0]["enrichment"]
    assert res.info["group_tests"]["groups"][1]["enrichment"] is group
    assert summary["n_tests"] == sum(r["n_tests"] for r in recs) + group["n_tests"] == 16
    p = [t["p_value"] for r in recs + [group] for t in r["tests"]]
    adj = sorted(t["p_adjusted"] for r in recs + [group] for t in r["tests"])
    np.testing.assert_allclose(adj, np.sort(sps.false_discovery_control(p)))
    d0 = res.directions["a_over_b"].explanations[0].extra["description"]
    assert d0.startswith("100 % kind=coat (rest 0 %) (p_adj < 1e-")
    d1 = res.directions["a_over_b"].explanations[1].extra["description"]
    assert "brightness" in d1 and "× the rest's mean" in d1
    assert all(t["significant"] == (t["p_adjusted"] <= 0.05) for r in recs for t in r["tests"])
    assert describe({"tests": [], "n_tests": 0}).startswith("no tested attribute")
    holm = enrich(res, {"kind": kind, "brightness": bright}, correction="holm")
    assert holm["correction"] == "holm"
    with pytest.raises(RDXInputError, match="correction"):
        enrich(res, {"kind": kind}, correction="bonferroni")
    with pytest.raises(RDXInputError, match="has 3 values but there are 200"):
        enrich(res, {"kind": ["a", "b", "c"]})


def test_findings_in_words():
    from rdx.evaluation.enrichment import finding_text

    cat = {"kind": "categorical", "source": "labels", "attribute": "class", "level": "Coat",
           "share_members": 0.82, "share_rest": 0.08, "p_adjusted": 3e-5}
    assert finding_text(cat) == "82 % Coat (rest 8 %) (p_adj < 1e-4)"
    assert finding_text({**cat, "level": "3"}).startswith("82 % class 3 ")
    assert finding_text({**cat, "source": "table", "attribute": "site", "level": "b",
                         "p_adjusted": 0.012}) == "82 % site=b (rest 8 %) (p_adj 0.012)"
    num = {"kind": "numeric", "source": "image", "attribute": "brightness", "ratio": 2.13,
           "direction": "higher", "smd": 1.5, "p_adjusted": 1e-9}
    assert finding_text(num) == "2.1× brighter than the rest (p_adj < 1e-9)"
    assert finding_text({**num, "ratio": 0.96, "direction": "lower"}).startswith(
        "1.04× darker than the rest")
    assert finding_text({**num, "attribute": "centre_row", "smd": -0.8,
                         "direction": "lower"}).startswith("centred higher than the rest (d -0.8)")
    assert finding_text({**num, "source": "table", "attribute": "age"}).startswith(
        "age 2.1× the rest's mean")
    assert finding_text({**num, "source": "table", "attribute": "z", "ratio": None}
                        ).startswith("z higher than the rest (d +1.5)")


def test_nothing_is_named_at_the_stated_rate_when_no_attribute_is_related():
    """Random groups against random attributes (no relation): the share of calls that name
    anything stays at about alpha (Benjamini–Hochberg controls the family-wise error when
    every hypothesis is null)."""
    rng = np.random.default_rng(7)
    n, calls, named = 150, 200, 0
    for _ in range(calls):
        res = _result(n, [rng.choice(n, size, replace=False) for size in (10, 25, 40, 60)])
        table = {"site": rng.choice(["a", "b", "c"], n), "flag": rng.integers(0, 2, n),
                 "score": rng.standard_normal(n), "skewed": rng.exponential(size=n)}
        named += enrich(res, table)["n_findings"] > 0
    assert named / calls <= 0.09     # 0.05 expected at most; sd of the share ~0.015


# ------------------------------------------------------------------ the table

def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_read_table_in_row_order_or_by_id(tmp_path):
    rows = "".join(f"{i},{'ab'[i % 2]},{i * 0.5}\n" for i in range(20))
    t = read_table(_write(tmp_path / "t.csv", "id,site,size\n" + rows), 20)
    assert t.names() == ["id", "site", "size"] and not t.skipped
    # by id: rows reversed, matched to the row numbers
    rev = "".join(f"{19 - i},{'ab'[(19 - i) % 2]},{(19 - i) * 0.5}\n" for i in range(20))
    t = read_table(_write(tmp_path / "r.csv", "id,site,size\n" + rev), 20, id_column="id")
    size = next(a for a in t.attributes if a.name == "size")
    np.testing.assert_allclose(size.values, np.arange(20) * 0.5)
    # by the image ids of the representation files
    ids = [f"img{i:02d}" for i in range(20)]
    text = "name,size\n" + "".join(f"img{19 - i:02d},{19 - i}.5\n" for i in range(20))
    t = read_table(_write(tmp_path / "n.csv", text), 20, id_column="name", row_ids=ids)
    np.testing.assert_allclose(t.attributes[0].values, np.arange(20) + 0.5)


@pytest.mark.parametrize("text, kw, needle", [
    ("a,b\n1,2\n", {}, "has 1 data rows but there are 3 images"),
    ("id,a\n0,x\n0,y\n2,z\n", {"id_column": "id"}, "id '0' is given twice"),
    ("id,a\n0,x\n1,y\n5,z\n", {"id_column": "id"}, "are not among row numbers 0..2"),
    ("id,a\n0,x\n1,y\n", {"id_column": "id"}, "1 of the 3 images have no row"),
    ("a,b\n1,2\n3,4\n5,6\n", {"id_column": "id"}, "no column 'id'"),
    ("a,a\n1,2\n3,4\n5,6\n", {}, "names column 'a' twice"),
    ("a,b\n1,2\n3\n5,6\n", {}, "data row 2 has 1 field"),
    ("", {}, "is empty"),
])
def test_read_table_refuses_what_does_not_describe_the_images(tmp_path, text, kw, needle):
    with pytest.raises(RDXInputError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        read_table(_write(tmp_path / "t.csv", text), 3, **kw)


# ------------------------------------------------------------------ known answer on digits

_rdx = rdx_in_process


def _digits():
    """Digits 3, 5, 8, 9 at half intensity, a random half of the 3s at full intensity
    (brightened 2×): A = the pixels (sees brightness), B = the pixels scaled to unit norm
    (ignores it)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    keep = np.isin(d.target, [3, 5, 8, 9])
    images, y = d.images[keep] / 16.0, d.target[keep]
    rng = np.random.default_rng(0)
    threes = np.flatnonzero(y == 3)
    planted = np.sort(rng.choice(threes, size=threes.size // 2, replace=False))
    factor = np.full(len(y), 0.5)
    factor[planted] = 1.0
    images = images * factor[:, None, None]
    flat = images.reshape(len(y), -1)
    unit = flat / np.linalg.norm(flat, axis=1, keepdims=True)
    return flat.astype(np.float32), unit.astype(np.float32), images, y, planted


@pytest.fixture(scope="module")
def digits_files(tmp_path_factory):
    w = tmp_path_factory.mktemp("digits")
    A, B, images, y, planted = _digits()
    np.save(w / "A.npy", A)
    np.save(w / "B.npy", B)
    np.save(w / "images.npy", images.astype(np.float32))
    np.save(w / "y.npy", y)
    flag = np.isin(np.arange(len(y)), planted).astype(int)
    rng = np.random.default_rng(1)
    order = rng.permutation(len(y))      # rows in another order, matched by the id column
    site = rng.choice(["north", "south", "east"], len(y))
    _write(w / "meta.csv", "site,brightened,row\n" + "".join(
        f"{site[i]},{flag[i]},{i}\n" for i in order))
    return w, planted


def test_the_planted_brightness_is_named_for_the_explanation_that_holds_it(digits_files):
    w, planted = digits_files
    rc, out, err = _rdx(["explain", w / "A.npy", w / "B.npy", "--images", w / "images.npy",
                         "--labels", w / "y.npy", "--metadata", w / "meta.csv",
                         "--metadata-id", "row", "--test-classes", "3", "--out", w / "o"])
    assert rc == 0, err
    doc = json.loads((w / "o" / "explanations.json").read_text())
    expl = doc["directions"]["a_over_b"]["explanations"]
    held = max(expl, key=lambda e: np.isin(e["members"], planted).mean())
    assert np.isin(held["members"], planted).mean() > 0.9
    found = {t["attribute"]: t for t in held["enrichment"]["tests"] if t["significant"]}
    assert found["brightness"]["direction"] == "higher"          # the image statistic
    assert found["brightness"]["ratio"] > 1.5
    assert found["brightened"]["level"] == "1" and found["brightened"]["direction"] == "over"
    assert "site" not in found                                   # unrelated: not named
    assert "brighter than the rest" in held["description"]
    assert held["description"] in out
    info = doc["info"]["enrichment"]
    assert info["correction"] == "benjamini-hochberg" and info["alpha"] == 0.05
    assert {a["name"] for a in info["attributes"]} >= {"class", "brightness", "contrast",
                                                       "edge_density", "site", "brightened"}
    assert "Benjamini–Hochberg at 0.05 over every test" in out
    # the named group: tested once (its two directions share the record), in the same family
    g1, g2 = doc["info"]["group_tests"]["groups"]
    assert g1["enrichment"] == g2["enrichment"] and g1["description"] in out
    shares = {t["level"]: t["share_members"] for t in g1["enrichment"]["tests"]
              if t["attribute"] == "brightened"}
    assert shares["1"] == pytest.approx(np.isin(planted, g1["members"]).sum() / g1["size"])
    total = sum(e["enrichment"]["n_tests"] for r in doc["directions"].values()
                for e in r["explanations"]) + g1["enrichment"]["n_tests"]
    assert info["n_tests"] == total


def test_a_control_pair_without_a_planted_difference_names_nothing():
    """Two brightness-blind views of the same digits (unit-norm pixels with independent
    noise): the explanations are noise, and a brightness flag, a site and a number that
    the models cannot see are named for none of them."""
    from rdx.method.estimator import RDX

    _, unit, _, y, _ = _digits()
    rng = np.random.default_rng(2)
    A = unit + 0.03 * rng.standard_normal(unit.shape).astype(np.float32)
    B = unit + 0.03 * rng.standard_normal(unit.shape).astype(np.float32)
    res = RDX(random_state=0, device="cpu").fit(A, B).result()
    n = len(y)
    flag = np.zeros(n, int)
    flag[rng.choice(n, n // 8, replace=False)] = 1
    summary = enrich(res, {"brightened": flag, "site": rng.choice(["a", "b", "c"], n),
                           "brightness": np.where(flag == 1, 1.0, 0.5)
                           + 0.01 * rng.standard_normal(n)})
    assert summary["n_tests"] > 0 and summary["n_findings"] == 0
    for r in res.directions.values():
        for e in r.explanations:
            assert e.extra["description"].startswith("no tested attribute differs")


@pytest.mark.parametrize("extra, needle", [
    (["--metadata", "{w}/short.csv"], "has 3 data rows but there are"),
    (["--metadata", "{w}/dup.csv", "--metadata-id", "row"], "is given twice"),
    (["--metadata-id", "row"], "add --metadata"),
    (["--metadata", "{w}/meta.csv", "--no-enrichment"], "drop one of them"),
])
def test_explain_refuses_a_bad_table_before_the_fit(digits_files, extra, needle):
    w, _ = digits_files
    _write(w / "short.csv", "a\n1\n2\n3\n")
    _write(w / "dup.csv", "row,a\n0,x\n0,y\n")
    rc, _out, err = _rdx(["explain", w / "A.npy", w / "B.npy", "--out", w / "bad"]
                         + [str(x).format(w=w) for x in extra])
    assert rc == 2 and needle in err and "Traceback" not in err, err
    assert not (w / "bad").exists()


def test_an_attribute_table_is_used_as_given():
    t = AttributeTable(4)
    t.add(column_attribute("x", ["a", "a", "b", "b"])[0], "x")
    res = _result(4, [[0, 1]])
    assert enrich(res, t)["attributes"][0]["name"] == "x"
