"""One comparison writer (:mod:`rdx.results.writer`): ``rdx run``, ``rdx explain --report``
and the benchmark write comparison folders of the same layout, which every reader (report,
explorer, summary tables) can open alike."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from rdx.cli import main
from rdx.results.store import ComparisonRun

METHOD = "pca"
#: Pages and the run's lock are not the store's data: which of them a command writes is its
#: own choice (``rdx run`` writes the explorer, ``rdx explain --report`` the report).
PAGES = {"report.html", "explore.html", ".rdx-run.lock"}
#: What every comparison's ``images.json`` and ``run.json`` hold.
IMAGES_KEYS = {"dataset", "split", "n_images", "class_names", "labels", "source"}
#: The images themselves, kept by the writers whose images no dataset holds (an --images
#: array, the benchmark's made images); ``rdx run`` records the dataset's rows instead.
IMAGES_NPY = "images.npy"
RUN_KEYS = {"experiment", "comparison", "seed", "config", "versions", "started", "finished",
            "methods", "timings_s", "known_difference", "device"}


def layout(folder: Path) -> dict:
    """The comparison's files (the method folder named by its role), the keys of its
    records, and what its method's result lists."""
    files = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    # the pages and the explorer's cached maps (explorer_embedding_<key>.npz) are not data
    top = {f for f in files if "/" not in f and not f.startswith("explorer_embedding_")} \
        - PAGES
    method = {f.split("/", 1)[1] for f in files if f.startswith(f"{METHOD}/")}
    images = json.loads((folder / "images.json").read_text())
    run = json.loads((folder / "run.json").read_text())
    result = ComparisonRun(folder).result(METHOD)
    assert result is not None and ComparisonRun(folder).problems == []
    return {"top": top - {IMAGES_NPY}, "method": method,
            "source": images["source"]["kind"] if images["source"] else None,
            "images": IMAGES_KEYS <= set(images) and images["n_images"] == len(images["labels"]),
            "run": RUN_KEYS - set(run), "config": {"representations", "image_selection",
                                                    "methods"} - set(run["config"]),
            "status": run["methods"].get(METHOD),
            "listed": set(result.run["files"]) == {f for f in method
                                                   if f != "explanations.json"}}


def _inputs(tmp_path: Path) -> tuple[Path, Path, Path, Path, dict]:
    """Features, labels and images of 24 digits (two fixed representations, no training)."""
    from rdx.data.selection import select_images

    sel = {"dataset": "digits", "target_classes": [3, 5, 8], "num_images": 8, "seed": 0}
    ds, idx = select_images(sel)
    images = np.stack([np.asarray(ds.load_image(int(i)), np.uint8) for i in idx])
    A = images.reshape(len(idx), -1).astype(np.float32) / 255.0
    W = np.random.default_rng(7).standard_normal((A.shape[1], 12)).astype(np.float32)
    B = np.maximum(A @ W, 0.0) + 0.01
    paths = []
    for name, arr in (("A", A), ("B", B), ("y", np.asarray(ds.labels)[idx]), ("img", images)):
        np.save(tmp_path / f"{name}.npy", arr)
        paths.append(tmp_path / f"{name}.npy")
    return (*paths, sel)


def _run(tmp_path: Path, a: Path, b: Path, sel: dict) -> Path:
    cfg = {"experiment": "layout", "seed": 0,
           "base": {"image_selection": sel,
                    "representations": {"a": {"features": str(a)}, "b": {"features": str(b)}},
                    "methods": [{"method": METHOD, "n_explanations": 2}]},
           "comparisons": [{"name": "a_vs_b"}]}
    config = tmp_path / "layout.yaml"
    config.write_text(yaml.safe_dump(cfg))
    root = tmp_path / "outputs"
    assert main(["run", "--config", str(config), "--output-root", str(root), "--quiet",
                 "--no-report"]) == 0
    return root / "layout" / "a_vs_b"


def _explain(tmp_path: Path, a: Path, b: Path, y: Path, img: Path) -> Path:
    out = tmp_path / "explain"
    assert main(["explain", str(a), str(b), "--labels", str(y), "--images", str(img),
                 "--out", str(out), "--method", METHOD, "--n-explanations", "2", "--report",
                 "--quiet"]) == 0
    return out


def _benchmark(tmp_path: Path, monkeypatch) -> Path:
    import argparse

    from rdx.commands import benchmark as command
    from rdx.studies import benchmark as bm

    tiny = bm.Case("tiny", "digits: A merges 3 and 5",
                   bm.Recipe("tiny_merge35", "digits", per_class=40, epochs=1, width=4,
                             merge=((5, 3),)),
                   bm.Recipe("tiny_fine", "digits", per_class=40, epochs=1, width=4),
                   bm.ImageSet("digits", 12),
                   {"type": "merged_classes", "classes": [3, 5], "model": "a"})
    monkeypatch.setitem(bm.CASES, "tiny", tiny)
    monkeypatch.setitem(bm.SUITES, "quick", bm.Suite(
        ("tiny",), (bm.MethodSpec(METHOD, {"n_explanations": 2}),)))
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--quick", "--out", str(tmp_path / "benchmark"), "--checkpoints",
                              str(tmp_path / "ckpt"), "--quiet"])
    assert command.run_command(args) == 0
    return tmp_path / "benchmark" / "tiny" / "test"


def test_run_explain_and_benchmark_write_the_same_layout(tmp_path, monkeypatch):
    a, b, y, img, sel = _inputs(tmp_path)
    folders = {"run": _run(tmp_path, a, b, sel), "explain": _explain(tmp_path, a, b, y, img),
               "benchmark": _benchmark(tmp_path, monkeypatch)}
    layouts = {who: layout(folder) for who, folder in folders.items()}
    expected = layouts["run"]
    assert expected["top"] == {"run.json", "images.json", "representations.npz"}
    assert "explanations.json" in expected["method"]
    assert any(f.startswith("grids/") for f in expected["method"])
    assert expected["images"] and expected["run"] == set() and expected["config"] == set()
    assert expected["status"] == "done" and expected["listed"]
    # where the explorer reads the images from: the dataset's rows, or the folder's array
    assert {who: got.pop("source") for who, got in layouts.items()} == {
        "run": "dataset", "explain": "array", "benchmark": "array"}
    assert not (folders["run"] / IMAGES_NPY).exists()
    for who in ("explain", "benchmark"):
        n = json.loads((folders[who] / "images.json").read_text())["n_images"]
        kept = np.load(folders[who] / IMAGES_NPY)
        assert kept.dtype == np.uint8 and len(kept) == n, who
    for who, got in layouts.items():
        assert got == expected, who
