"""The similarity study's own outputs: heat maps and report.html of ``rdx matrix``, the
similarity-vs-probe-performance plot (``rdx consistency``), ``rdx probe``'s default cap and
progress bar — on hand-built matrices and records, in process through ``rdx.cli.main``."""
from __future__ import annotations

import base64
import json
import re
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import yaml

from rdx.cli import main
from rdx.similarity.matrix import SimilarityMatrix
from rdx.viz.similarity import (pair_points, similarity_heatmap_figure,
                                similarity_vs_performance_figure)

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "similarity"
IDS = ["sup_a", "sup_b", "rot_a", "raw_a"]
OBJECTIVE = {"sup_a": "supervised", "sup_b": "supervised", "rot_a": "self-supervised",
             "raw_a": "untrained"}
ACCURACY = {"sup_a": 0.9, "sup_b": 0.85, "rot_a": 0.6, "raw_a": 0.3}


def _matrix(seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    M = r.uniform(0.2, 0.9, (4, 4))
    M = (M + M.T) / 2
    np.fill_diagonal(M, 1.0)
    return M


@pytest.fixture
def root(tmp_path):
    """A similarity folder as rdx matrix and rdx probe leave it: two datasets' cka_linear
    matrices of four models, probe records of every model on ds_one."""
    for k, ds in enumerate(("ds_one", "ds_two")):
        SimilarityMatrix(values=_matrix(k), model_ids=IDS, measure="cka_linear", n_images=50,
                         normalize="l2", meta={"categories": {"objective": OBJECTIVE}}
                         ).save(tmp_path / "matrices" / ds / "cka_linear")
    for m, acc in ACCURACY.items():
        p = tmp_path / "probes" / "ds_one" / f"{m}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"status": "done", "dataset": "ds_one", "model": m,
                                 "top1": acc}))
    return tmp_path


def test_heatmap_shows_the_matrix_grouped_by_objective():
    V = _matrix(0)
    fig = similarity_heatmap_figure(V, IDS, groups=OBJECTIVE, title="t")
    (ax,) = [a for a in fig.axes if a.get_images()]
    order = sorted(range(4), key=lambda i: (OBJECTIVE[IDS[i]], i))
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), V[np.ix_(order, order)])
    assert [t.get_text() for t in ax.get_yticklabels()] == [IDS[i] for i in order]
    texts = {t.get_text() for t in ax.texts}
    assert f"{V[0, 1]:.2f}" in texts                       # values written in the cells


def test_similarity_vs_performance_points_are_the_model_pairs():
    V = _matrix(0)
    pts = pair_points(V, IDS, {k: v for k, v in ACCURACY.items() if k != "raw_a"})
    assert [(a, b) for a, b, _, _ in pts] == [("sup_a", "sup_b"), ("sup_a", "rot_a"),
                                              ("sup_b", "rot_a")]
    for a, b, s, gap in pts:
        assert s == V[IDS.index(a), IDS.index(b)]
        assert gap == pytest.approx(abs(ACCURACY[a] - ACCURACY[b]))
    fig = similarity_vs_performance_figure(V, IDS, ACCURACY, measure="cka_linear",
                                           dataset="ds_one", correlations={"spearman": -0.5})
    (ax,) = fig.axes
    (coll,) = [c for c in ax.collections if c.get_gid() == "pairs"]
    want = [(V[i, j], abs(ACCURACY[IDS[i]] - ACCURACY[IDS[j]]))
            for i, j in combinations(range(4), 2)]
    np.testing.assert_allclose(coll.get_offsets(), want)
    assert "spearman r = -0.50" in ax.get_title()


def test_matrix_report_stage_writes_heatmaps_and_page(root, capsys):
    args = ["matrix", "--models", str(CONFIGS / "models_embedded.yaml"), "--datasets",
            str(CONFIGS / "datasets_embedded.yaml"), "--out", str(root), "--stage", "report"]
    assert main(args) == 0
    assert f"report: {root / 'report.html'}" in capsys.readouterr().out
    figs = {p.relative_to(root).as_posix() for p in (root / "figures").rglob("*.png")}
    # heat maps of both datasets; the performance plot only where probes exist
    assert figs == {"figures/ds_one/cka_linear.png", "figures/ds_two/cka_linear.png",
                    "figures/ds_one/cka_linear_vs_probe.png"}
    text = (root / "report.html").read_text()
    embedded = [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"',
                                                        text)]
    assert sorted(embedded) == sorted((root / f).read_bytes() for f in figs)
    assert "<script" not in text and "ds_two" in text and "cka_linear" in text


def test_consistency_plots_similarity_against_probe_accuracy(root):
    from rdx.report.similarity import write_similarity_report

    # the matrix report as rdx matrix leaves it: the command that fills it in, no path of
    # the machine
    before = write_similarity_report(root).read_text()
    assert "No consistency results yet" in before and str(root) not in before
    # two datasets (consistency needs two); the probes cover ds_one only
    assert main(["consistency", "--root", str(root), "--measure", "cka_linear",
                 "--quiet"]) == 0
    # ... and rewritten by rdx consistency: its results linked, no `--stage report` needed
    after = (root / "report.html").read_text()
    assert "No consistency results yet" not in after
    assert 'href="consistency/cka_linear/' in after
    out = root / "consistency" / "cka_linear"
    assert (out / "similarity_vs_performance_ds_one.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "similarity_vs_performance_ds_two.png").exists()
    rows = (out / "similarity_vs_performance.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith("ds_one")
    # the first spelling of the flag still works
    assert main(["consistency", "--root", str(root), "--measures", "cka_linear",
                 "--quiet", "--no-plots"]) == 0


def _probe_configs(tmp_path: Path) -> list[str]:
    models = {"models": [{"id": f"raw_{s}", "objective": "untrained",
                          "spec": {"model": "convnet", "pretrained": False, "seed": s,
                                   "layer": "gap", "model_kwargs": {"width": 8}}}
                         for s in range(3)]}
    datasets = {"datasets": [{"id": "digits", "dataset": "digits", "test": None}]}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(models))
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(datasets))
    return ["--models", str(tmp_path / "m.yaml"), "--datasets", str(tmp_path / "d.yaml"),
            "--out", str(tmp_path / "out")]


def test_probe_caps_training_images_by_default_and_shows_progress(tmp_path, monkeypatch,
                                                                  capsys):
    import rdx.studies.similarity as sim

    seen = []

    def fake_probe(task):
        seen.append(task)
        rec = {"status": "done", "dataset": task.dataset["id"], "model": task.model["id"],
               "top1": 0.5, "top5": None, "balanced_accuracy": 0.5, "top1_per_seed": [0.5],
               "n_train": 10, "n_test": 5, "test_set": "hold-out", "signature": task.signature,
               "runs": [{"lr": 0.1, "weight_decay": 1e-3}]}
        task.record_path.parent.mkdir(parents=True, exist_ok=True)
        task.record_path.write_text(json.dumps(rec))
        return {"status": "done", "top1": 0.5, "model": task.model["id"],
                "dataset": task.dataset["id"]}

    monkeypatch.setattr(sim, "run_probe", fake_probe)
    base = ["probe", *_probe_configs(tmp_path), "--device", "cpu"]
    assert main(base) == 0
    assert [t.max_train for t in seen] == [10000] * 3
    err = capsys.readouterr().err
    assert "linear probes" in err and "3/3" in err and "raw_2 × digits" in err
    seen.clear()
    assert main(base + ["--max-train", "all", "--force", "--quiet"]) == 0
    assert [t.max_train for t in seen] == [None] * 3
    assert "linear probes" not in capsys.readouterr().err           # --quiet: no bar
    with pytest.raises(SystemExit):
        main(base + ["--max-train", "0"])
    assert "positive number of images or 'all'" in capsys.readouterr().err


def test_consistency_figures_take_numbers_and_use_no_pyplot_state():
    """rdx consistency's figures are built from numbers with matplotlib's object API."""
    import subprocess
    import sys

    from rdx.viz.consistency import (aligned_matrices_figure, consistency_boxplot_figure,
                                     dataset_consistency_figure)

    fig = consistency_boxplot_figure([("a", [0.1, 0.5, np.nan]), ("b", [0.9, 0.8]),
                                      ("empty", [np.nan])], [0.1, 0.5, 0.9, 0.8], "pearson", "t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]   # by median; no empty
    assert consistency_boxplot_figure([("x", [np.nan])], [], "m", "t") is None
    mats = {f"d{i}": np.eye(3) * i for i in range(5)}
    fig = aligned_matrices_figure(mats, ["m1", "m2", "m3"], {"m3": "g0"}, "t", True)
    shown = [a for a in fig.axes if a.get_title()]
    assert [a.get_title() for a in shown] == list(mats)        # one panel per dataset
    fig = dataset_consistency_figure(np.array([[1.0, -0.5], [-0.5, 1.0]]), ["x", "y"], "t")
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["-0.50", "-0.50", "1.00", "1.00"]
    # no pyplot state: building every figure in a fresh process never imports pyplot
    code = ("import sys, numpy as np; from rdx.viz import consistency as c; "
            "c.consistency_boxplot_figure([('a', [0.1, 0.2])], [0.1], 'm', 't'); "
            "c.aligned_matrices_figure({'d': np.eye(2)}, ['x', 'y'], None, 't', True); "
            "c.dataset_consistency_figure(np.eye(2), ['x', 'y'], 't'); "
            "print('matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr
