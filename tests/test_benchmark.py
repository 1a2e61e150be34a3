"""The known-difference benchmark (rdx.studies.benchmark): data, models, table."""
import argparse
import csv
import dataclasses
import json

import numpy as np
import pytest

from rdx.errors import RDXInputError
from rdx.commands import benchmark as command
from rdx.studies import benchmark as bm


def test_training_sets_implant_the_differences():
    base = bm.training_set(bm.Recipe("d", "digits", per_class=20))
    merged = bm.training_set(bm.Recipe("d", "digits", per_class=20, merge=((6, 0), (7, 1))))
    assert len(base.class_names) == 10 and len(merged.class_names) == 8
    # same images, only the labels of 6 and 7 changed (relabelled 0..7)
    np.testing.assert_array_equal(base.images, merged.images)
    orig = np.array([int(c) for c in base.class_names])[base.labels]
    new = np.array([int(c) for c in merged.class_names])[merged.labels]
    np.testing.assert_array_equal(new, np.where(orig == 6, 0, np.where(orig == 7, 1, orig)))

    cue = bm.training_set(bm.Recipe("d", "digits", per_class=20, cue_class=3))
    r0, r1, c0, c1 = bm.CUE_BOX
    has_cue = (cue.images[:, r0:r1, c0:c1] == 255).all(axis=(1, 2))
    np.testing.assert_array_equal(has_cue, cue.labels == 3)

    marker = bm.training_set(bm.Recipe("d", "digits", per_class=20, marker=True))
    r0, r1, c0, c1 = bm.MARKER_BOX
    marked = (marker.images[:, r0:r1, c0:c1] == 255).all(axis=(1, 2))
    assert 0.3 < marked.mean() < 0.7 and len(marker.class_names) == 20
    np.testing.assert_array_equal(marked, marker.labels >= 10)
    masked = bm.training_set(bm.Recipe("d", "digits", per_class=20, marker=True, mask=True))
    r0, r1, c0, c1 = bm.MASK_BOX
    assert (masked.images[:, r0:r1, c0:c1] == 0).all()
    np.testing.assert_array_equal(masked.labels, marker.labels)   # same task, blind corner

    flips = bm.training_set(bm.Recipe("d", "digits", per_class=20, flips="vflip_nl"))
    assert len(flips) == 2 * len(base) and len(flips.class_names) == 20
    np.testing.assert_array_equal(flips.images[len(base):], base.images[:, ::-1, :])


def test_comparison_images_are_seeded_and_labelled():
    a = bm.comparison_images(bm.ImageSet("digits", 10, marker=True))
    b = bm.comparison_images(bm.ImageSet("digits", 10, marker=True))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[0].shape == (100, 28, 28) and set(np.unique(a[1] % 10)) == set(range(10))
    assert len(a[2]) == 20
    imgs, lab, _ = bm.comparison_images(bm.ImageSet("digits", 10, cue_classes=(1, 8)))
    r0, r1, c0, c1 = bm.CUE_BOX
    cued = (imgs[:, r0:r1, c0:c1] == 255).all(axis=(1, 2))
    assert cued.any() and set(np.unique(lab[cued])) == {11, 18}   # cued: label c + 10
    assert set(np.unique(lab[~cued])) == set(range(10))


def test_chance_hit_rate_matches_the_rule():
    labels = np.repeat(np.arange(2), 50)            # two classes, both merged
    spec = {"type": "merged_classes", "classes": [0, 1], "model": "a"}
    # a hit needs ≥ 2 of each class among 9 from a 50/50 pool (hypergeometric)
    from scipy.stats import hypergeom
    p_miss = sum(hypergeom(100, 50, 9).pmf(k) for k in (0, 1, 8, 9))
    assert bm.chance_hit_rate(spec, labels, draws=4000) == pytest.approx(1 - p_miss, abs=0.02)


def _tiny(monkeypatch):
    tiny = bm.Case("tiny", "digits: A merges 3 and 5",
                   bm.Recipe("tiny_merge35", "digits", per_class=40, epochs=1, width=4,
                             merge=((5, 3),)),
                   bm.Recipe("tiny_fine", "digits", per_class=40, epochs=1, width=4),
                   bm.ImageSet("digits", 12),
                   {"type": "merged_classes", "classes": [3, 5], "model": "a"})
    monkeypatch.setitem(bm.CASES, "tiny", tiny)
    monkeypatch.setitem(bm.SUITES, "quick", bm.Suite(
        ("tiny",), (bm.MethodSpec("rdx", {"n_explanations": 2}, n_null=3, twin=True),
                    bm.MethodSpec("pca", {"n_explanations": 2}))))


def test_quick_suite_end_to_end_and_resumes(tmp_path, monkeypatch, capsys):
    _tiny(monkeypatch)
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--quick", "--out", str(tmp_path / "out"), "--checkpoints",
                              str(tmp_path / "ckpt"), "--quiet"])
    assert command.run_command(args) == 0
    doc = json.loads((tmp_path / "out" / "benchmark.json").read_text())
    assert [(r["case"], r["method"]) for r in doc["rows"]] == [("tiny", "rdx"), ("tiny", "pca")]
    rdx, pca = doc["rows"]
    assert rdx["n_null"] == 3 and rdx["min_p_fwer_expected"] >= 1 / 4
    assert pca["significant_expected"] is None                  # not assessed
    assert rdx["min_p_fwer_expected_twin"] >= 1 / 4 and pca["min_p_fwer_expected_twin"] is None
    assert rdx["grids_expected"] == 2 and rdx["grids_control"] == 2
    assert set(doc["summary"]) == {"rdx"} and doc["summary"]["rdx"]["cases"] == 1
    with open(tmp_path / "out" / "benchmark.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and rows[0]["method"] == "rdx"
    assert "| tiny | rdx |" in (tmp_path / "out" / "benchmark.md").read_text()
    # each comparison is a run-store folder with scored, assessed results
    from rdx.results.store import ComparisonRun
    res = ComparisonRun(tmp_path / "out" / "tiny" / "control").result("rdx")
    assert "known_difference" in res.scores and res.info["significance"]["n_null"] == 3
    assert "significance_twin" not in res.info                   # the control has no twin
    test = ComparisonRun(tmp_path / "out" / "tiny" / "test").result("rdx")
    assert test.info["significance_twin"]["null"] == "twin"
    # no twins trained: the built-in null is the field null of the benchmark's ConvNets
    assert test.info["significance"]["null"] == "field"
    assert test.info["significance"]["standing"]["families"] == ["convnet", "convnet"]
    assert all("significance" in e.extra for e in res.directions["a_over_b"].explanations)
    # three cached models; a second run trains nothing and recomputes nothing
    ckpts = sorted(p.parent.name for p in (tmp_path / "ckpt").glob("*/last.pt"))
    assert len(ckpts) == 3 and ckpts[0].startswith("tiny_fine-")
    stamp = (tmp_path / "out" / "tiny" / "test" / "rdx" / "explanations.json").stat().st_mtime_ns
    assert command.run_command(args) == 0
    assert (tmp_path / "out" / "tiny" / "test" / "rdx" /
            "explanations.json").stat().st_mtime_ns == stamp
    again = json.loads((tmp_path / "out" / "benchmark.json").read_text())
    assert again["rows"][0]["min_p_fwer_expected"] == rdx["min_p_fwer_expected"]


def test_a_suite_with_twins_trains_them_and_tests_against_the_twin_null(tmp_path, monkeypatch,
                                                                       capsys):
    """Suite(twins=1): five models per case (A, B, B's twin, A's twin, B's second twin);
    the test comparison's null draws are A against its twin and B's twin against B, the
    control's its two seeds of B against the third; the summary says so."""
    _tiny(monkeypatch)
    quick = bm.SUITES["quick"]
    monkeypatch.setitem(bm.SUITES, "quick", bm.Suite(quick.cases, (
        bm.MethodSpec("rdx", {"n_explanations": 2}, n_null=3),), twins=1))
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--quick", "--out", str(tmp_path / "out"), "--checkpoints",
                              str(tmp_path / "ckpt")])
    assert command.run_command(args) == 0
    printed = capsys.readouterr().out
    assert "the twins for the twin null:" in printed
    assert "rdx (twin null, 1 seed twin(s) of each model trained by the benchmark)" in printed
    doc = json.loads((tmp_path / "out" / "benchmark.json").read_text())
    assert doc["null"] == "twin" and doc["twins_trained"]
    rec = doc["cases"]["tiny"]
    assert rec["seeds"] == {"a": 0, "b": 0, "b_twin": 1, "a_twin1": 1, "b_twin2": 2}
    assert rec["seconds_training_twins"] > 0
    assert len(list((tmp_path / "ckpt").glob("*/last.pt"))) == 5
    from rdx.results.store import ComparisonRun
    for pair in ("test", "control"):
        sig = ComparisonRun(tmp_path / "out" / "tiny" / pair).result("rdx").info["significance"]
        assert sig["null"] == "twin" and sig["calibrated"] and sig["n_twin_draws"] == 2
        assert sig["n_draws"] == 3
    (row,) = doc["rows"]
    assert row["detected"] is not None and row["control_clean"] is not None
    assert "twin null" in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")


def test_paper_suite_shows_the_papers_5000_images():
    suite = bm.SUITES["paper"]
    for name in suite.cases:
        images, labels, names = bm.comparison_images(bm.CASES[name].images,
                                                     scale=suite.per_class_scale)
        # 10 classes × 500, or 20 labels × 250 (flipped copies; the cue and marker halves)
        assert images.shape == (5000, 28, 28) and len(labels) == 5000
    methods = [m.method for m in suite.methods]
    assert methods[0] == "rdx" and suite.methods[0].twin
    assert {"sae", "topk_sae", "usae", "crosscoder", "dfc_crosscoder"} <= set(methods)


def test_recipe_digest_names_the_cache():
    a = bm.Recipe("x", "digits", per_class=10)
    assert a.folder(0) == bm.Recipe("x", "digits", per_class=10).folder(0)
    assert a.folder(0) != dataclasses.replace(a, epochs=7).folder(0)
    assert a.folder(0) != a.folder(1)


def test_bad_input(tmp_path):
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    for argv, match in ((["--cases", "nope"], "unknown benchmark case"),
                        (["--methods", "cka"], "grid-producing"),
                        (["--n-null", "0"], "n-null"),
                        (["--quick", "--suite", "paper"], "cannot be combined")):
        args = parser.parse_args(argv + ["--out", str(tmp_path), "--quiet"])
        with pytest.raises(RDXInputError, match=match):
            command.run_command(args)
    assert not (tmp_path / "benchmark.json").exists()
