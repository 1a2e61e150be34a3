"""The README's main job, end to end, on a smaller setting (4 epochs — the early checkpoints of both presets, epoch 1 or 2, must come before the last — temporary folders)."""
import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_quickstart_end_to_end(tmp_path):
    env = {**os.environ, "QUICKSTART_EPOCHS": "4", "QUICKSTART_OUT": str(tmp_path / "out"),
           "QUICKSTART_CHECKPOINTS": str(tmp_path / "ckpt")}
    res = subprocess.run(["bash", str(REPO / "quickstart.sh")], env=env, capture_output=True,
                         text=True, cwd=tmp_path, timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    runs = list((tmp_path / "out").glob("quickstart_*/early_vs_final"))
    assert len(runs) == 1, res.stdout
    out = runs[0]
    doc = json.loads((out / "rdx_nb_lb_spectral" / "explanations.json").read_text())
    assert all(len(r["explanations"]) == 3 for r in doc["directions"].values())
    assert doc["bsr"]["mean"] > 0.6          # the grids are closer in the model they explain
    assert len(list((out / "rdx_nb_lb_spectral" / "grids").glob("*.png"))) == 8
    # the model and its seed twin (rdx train --twins 1): the RDX methods are tested against
    # the twin null, and the run says so
    ckpts = sorted(p.parent.name for p in (tmp_path / "ckpt").glob("*/last.pt"))
    assert len(ckpts) == 2 and ckpts[1] == ckpts[0] + "_seed1" and "results:" in res.stdout
    for name in ("rdx_nb_lb_spectral", "rdx_nb_lb_pagerank"):
        sig = json.loads((out / name / "explanations.json").read_text())["info"]["significance"]
        assert sig["null"] == "twin" and sig["n_twin_draws"] == 2 and sig["calibrated"]
    assert "(twin null)" in res.stdout
    # every configured method finished, and the run ends with the scores table and the report
    methods = {p.parent.name for p in out.glob("*/explanations.json")}
    assert methods == {"rdx_nb_lb_spectral", "rdx_nb_lb_pagerank", "kmeans", "pca", "nmf",
                       "spec", "classification", "cka"}
    index = out.parent / "index.html"
    assert index.is_file() and (out / "report.html").is_file() and "report:" in res.stdout
    rows = (out.parent / "analysis" / "summary.csv").read_text().splitlines()
    assert len(rows) == 1 + 6 * 2 * 3        # header + method × direction × dissimilarity
