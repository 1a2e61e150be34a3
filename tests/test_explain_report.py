"""``rdx explain --report``: the user's own features get the same comparison folder and HTML
report as ``rdx run`` (scores against chance, grids with their classes), in process through
``rdx.cli.main``."""
from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from conftest import planted_pairs

from rdx.cli import main
from rdx.results.store import ComparisonRun
from rdx.results.types import DISSIMILARITY_LABELS, SCORE_LABELS


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("explain_report")
    A, B, lab = planted_pairs(n_per=10, d=6)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, size=(len(A), 8, 8)).astype(np.uint8)
    for name, arr in (("A", A), ("B", B), ("y", lab), ("img", images)):
        np.save(d / f"{name}.npy", arr)
    return d


def _explain(files, out, *extra):
    return main(["explain", str(files / "A.npy"), str(files / "B.npy"), "--labels",
                 str(files / "y.npy"), "--out", str(out), "--quiet", *map(str, extra)])


def test_report_folder_is_a_comparison_with_chance_levels(files, tmp_path, capsys):
    out = tmp_path / "mine"
    assert main(["explain", str(files / "A.npy"), str(files / "B.npy"), "--labels",
                 str(files / "y.npy"), "--images", str(files / "img.npy"), "--out", str(out),
                 "--n-explanations", "2", "--report"]) == 0
    printed = capsys.readouterr().out
    # the console: BSR under every dissimilarity next to its chance level, and the report
    for lab in DISSIMILARITY_LABELS.values():
        assert re.search(rf"BSR \({re.escape(lab.short)}\) [0-9.]+ \(chance [0-9.]+ "
                         r"\[[0-9.]+, [0-9.]+\], (above|below|within)\)", printed)
    assert f"report: {out / 'report.html'}" in printed
    # the store reads the folder like a comparison of `rdx run`
    store = ComparisonRun(out)
    assert store.exists and store.method_names() == ["rdx"]
    res = store.result("rdx")
    assert res.params["n_explanations"] == 2 and res.scores["chance"]
    np.testing.assert_array_equal(store.representations["a"], np.load(files / "A.npy"))
    np.testing.assert_array_equal(store.labels, np.load(files / "y.npy"))
    assert store.is_finished("rdx")                   # every file listed with its SHA-256
    run = store.run
    assert run["config"]["representations"]["a"] == {"features": str(files / "A.npy")}
    assert run["methods"] == {"rdx": "done"} and run["no_images"] is False
    # the report: the stored BSR and chance of every direction and dissimilarity
    text = (out / "report.html").read_text()
    for d in ("a_over_b", "b_over_a"):
        for key, lab in DISSIMILARITY_LABELS.items():
            bsr = res.scores[key][d]["bsr"]
            ch = res.scores["chance"][d][key]
            assert f"BSR {lab.short} " in text
            assert f"{bsr:.3f}" in text
            assert (f"chance {ch['bsr_mean']:.2f} [{ch['bsr_lo']:.2f}, "
                    f"{ch['bsr_hi']:.2f}]") in text
    # every grid the folder holds is embedded, and each grid lists both class make-ups
    grids = sorted(out.glob("rdx/grids/*.png"))
    assert len(grids) == 2 * (2 + 1)
    embedded = {base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"',
                                                        text)}
    assert {p.read_bytes() for p in grids} <= embedded
    assert text.count("whole cluster (") == 4 and text.count("grid (") == 4
    assert SCORE_LABELS["bsr"].name in text            # the glossary


def test_without_images_the_report_says_why_there_are_no_grids(files, tmp_path):
    out = tmp_path / "noimg"
    assert _explain(files, out, "--k", "2", "--report") == 0     # --k: the old spelling
    store = ComparisonRun(out)
    assert store.result("rdx").params["n_explanations"] == 2
    assert not list(out.glob("rdx/grids/*"))
    text = (out / "report.html").read_text()
    assert "No images were given" in text and "Figure missing" not in text
    assert text.count("whole cluster (") == 4          # the classes are still listed


def test_baseline_report_says_what_its_directions_are(files, tmp_path):
    out = tmp_path / "km"
    assert _explain(files, out, "--method", "kmeans", "--n-explanations", "2",
                    "--report") == 0
    text = (out / "report.html").read_text()
    assert "concepts of model A alone" in text and "concepts of model B alone" in text
    assert "holds tightly together" not in text.split('id="pca"')[0]


def test_without_report_the_flat_layout_stays(files, tmp_path):
    out = tmp_path / "flat"
    assert _explain(files, out, "--n-explanations", "2") == 0
    assert (out / "explanations.json").is_file()
    assert not (out / "run.json").exists() and not (out / "report.html").exists()
    doc = json.loads((out / "explanations.json").read_text())
    assert doc["params"]["n_explanations"] == 2


def test_help_shows_the_canonical_flag_only(capsys):
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    text = capsys.readouterr().out
    assert "--n-explanations" in text and "--report" in text
    assert not re.search(r"--k\b", text)
