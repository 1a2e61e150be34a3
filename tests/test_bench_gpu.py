"""The one-GPU benchmark script (benchmarks/bench_gpu.py), run whole on the CPU at tiny sizes
(``--cpu-smoke``): every step runs, each figure is printed next to its target, and the
record says where each run computed. Its figures are not checked (they say nothing here)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gpu.py"
FIGURES = ["1e4 whole", "1e4 fit", "1e4 significance", "1e5 whole", "1e6 projected pass",
           "1e6 whole"]


@pytest.mark.slow
def test_cpu_smoke_runs_every_step_and_prints_the_targets(tmp_path):
    out = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cpu-smoke", "--json", str(out),
                           "--work-dir", str(tmp_path / "work")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("card: none (CPU smoke test)")
    assert "torch " in lines[0] and "CUDA " in lines[0] and "SIMD: numpy" in lines[0]
    for name, target in zip(FIGURES, ["≤ 3 s", "≤ 0.5 s", "≤ 3×", "≤ 60 s", "≤ 600 s",
                                      "≤ 600 s"]):
        line = next(ln for ln in lines if ln.startswith(name + " "))
        assert f"target {target}" in line and "peak host" in line and "error" not in line

    doc = json.loads(out.read_text())
    assert doc["plan"]["smoke"] and doc["machine"]["gpu"] is None
    rows = {r["figure"]: r for r in doc["figures"]}
    assert list(rows) == FIGURES
    for name in FIGURES:
        run = rows[name]["run"]
        assert run.get("error") is None, (name, run)
        assert rows[name]["value"] is not None and rows[name]["value"] > 0
        assert run["peak_rss_gib"] > 0
        if name != "1e6 projected pass":   # an rdx explain run: its own record
            assert run["exit"] == 0 and run["device_used"] == "cpu"
    assert rows["1e4 whole"]["run"]["graph"] == "dense"
    assert rows["1e4 significance"]["run"]["n_null"] > 0
    assert rows["1e5 whole"]["run"]["graph"] in ("dense", "knn")
    big = rows["1e6 whole"]["run"]
    assert big["graph"] == "knn" and big["knn_search"] == "exact"
    blocks = rows["1e6 projected pass"]["run"]
    assert blocks["device"] == "cpu" and blocks["n"] == rows["1e6 whole"]["n"]
    assert blocks["projected_pass_s"] == pytest.approx(blocks["s_per_block"] * blocks["blocks"])
    # the inputs are removed as each step ends; the 10⁶ files stay for a rerun to reuse
    assert not list((tmp_path / "work").glob("A_*.npy"))
