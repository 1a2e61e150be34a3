"""Where a comparison folder records its images (``images.json``'s ``source``) and how the
explorer reads them back: ``rdx explain --report`` keeps its ``--images`` (or an example's
images) in the folder, ``rdx run`` records the dataset's rows with its folders relative to
the comparison, and a run without images says so plainly. No page names a folder of the
machine that wrote it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from conftest import planted_pairs
from rdx.cli import main
from rdx.errors import RDXInputError
from rdx.explorer import load_inputs
from rdx.viz.grids import display_image

from test_explorer import page_data


#: Images of explain_inputs' representations.
N = 60


def explain_inputs(folder: Path, images: np.ndarray | None = None) -> dict[str, Path]:
    """A, B (planted clusters of N images), labels and, unless ``images`` is None, the
    images, saved as .npy files in ``folder``."""
    A, B, lab = planted_pairs(n_per=10, d=6)
    assert len(A) == N
    arrays = {"A": A, "B": B, "y": lab}
    if images is not None:
        arrays["img"] = images
    folder.mkdir(parents=True, exist_ok=True)
    for name, arr in arrays.items():
        np.save(folder / f"{name}.npy", arr)
    return {name: folder / f"{name}.npy" for name in arrays}


def explain_report(files: dict[str, Path], out: Path, *extra: str) -> Path:
    """``rdx explain A B --labels y [--images img] --report --out OUT``, as a user runs it:
    it writes the explorer too (``OUT/explore.html``, linked from the report)."""
    images = ["--images", str(files["img"])] if "img" in files else []
    assert main(["explain", str(files["A"]), str(files["B"]), "--labels", str(files["y"]),
                 *images, "--n-explanations", "2", "--report", "--out", str(out), "--quiet",
                 *extra]) == 0
    assert 'href="explore.html"' in (out / "report.html").read_text()
    return out / "explore.html"


def test_explain_report_keeps_its_images_for_the_explorer(tmp_path):
    """The float, channels-first --images of rdx explain --report come back in the explorer
    as the grids draw them (min-max to uint8, channels last), one thumbnail per image; no
    'unknown dataset' banner."""
    rng = np.random.default_rng(1)
    images = rng.normal(size=(N, 3, 6, 5)).astype(np.float32)      # n×C×H×W floats
    page = explain_report(explain_inputs(tmp_path / "in", images), tmp_path / "mine")
    doc = json.loads((tmp_path / "mine" / "images.json").read_text())
    assert doc["source"] == {"kind": "array", "path": "images.npy"}
    kept = np.load(tmp_path / "mine" / "images.npy")
    assert kept.shape == (N, 6, 5, 3) and kept.dtype == np.uint8
    inp = load_inputs(tmp_path / "mine")
    assert inp.load_image is not None and not inp.notes
    for k in (0, 17, N - 1):
        np.testing.assert_array_equal(np.asarray(inp.load_image(k)), display_image(images[k]))
    _, data = page_data(page)
    assert not any("unknown dataset" in t for t in data["notes"]), data["notes"]
    assert data["thumbs"] and len(data["thumbs"]) == N
    assert all(t.startswith("data:image/") for t in data["thumbs"])


def test_a_moved_explain_folder_still_shows_its_images(tmp_path, monkeypatch):
    """The record is relative to the folder: moved (or read from another working
    directory), it finds its images, and the inputs may be gone."""
    images = np.random.default_rng(2).integers(0, 255, (N, 8, 8), dtype=np.uint8)
    files = explain_inputs(tmp_path / "in", images)
    explain_report(files, tmp_path / "mine")
    for f in files.values():
        f.unlink()
    moved = tmp_path / "elsewhere" / "mine"
    moved.parent.mkdir()
    (tmp_path / "mine").rename(moved)
    monkeypatch.chdir(tmp_path / "elsewhere")
    inp = load_inputs("mine")
    np.testing.assert_array_equal(np.asarray(inp.load_image(5)), display_image(images[5]))


def test_without_images_the_page_says_so_plainly(tmp_path):
    page = explain_report(explain_inputs(tmp_path / "in"), tmp_path / "noimg")
    assert json.loads((tmp_path / "noimg" / "images.json").read_text())["source"] is None
    _, data = page_data(page)
    assert data["thumbs"] is None
    (note,) = [t for t in data["notes"] if t.startswith("Points only")]
    assert "the run recorded no images" in note and "--images" in note
    assert "unknown dataset" not in note


def test_an_older_folder_without_a_source_says_so_plainly(tmp_path):
    """A folder written before images.json named its source, by rdx explain without images
    (its 'dataset' is a description): no 'unknown dataset', the plain reason."""
    explain_report(explain_inputs(tmp_path / "in"), tmp_path / "old")
    doc = json.loads((tmp_path / "old" / "images.json").read_text())
    del doc["source"]
    (tmp_path / "old" / "images.json").write_text(json.dumps(doc))
    inp = load_inputs(tmp_path / "old")
    assert inp.load_image is None
    assert any("the run recorded no images" in t for t in inp.notes)
    assert not any("unknown dataset" in t for t in inp.notes)


def test_a_folder_of_plain_rdx_explain_says_to_add_report(tmp_path):
    files = explain_inputs(tmp_path / "in")
    assert main(["explain", str(files["A"]), str(files["B"]), "--n-explanations", "2",
                 "--out", str(tmp_path / "flat"), "--quiet"]) == 0
    with pytest.raises(RDXInputError, match="without --report.*with --report"):
        load_inputs(tmp_path / "flat")


def image_tree(root: Path) -> np.ndarray:
    """``root/<class>/<i>.png``: 3 classes of 8 grey 10×10 images; returns them in the
    ImageFolder's order (class, then name)."""
    rng = np.random.default_rng(3)
    out = []
    for c in ("cat", "dog", "eel"):
        (root / c).mkdir(parents=True)
        for i in range(8):
            img = rng.integers(0, 255, (10, 10), dtype=np.uint8)
            Image.fromarray(img).save(root / c / f"{i:02d}.png")
            out.append(img)
    return np.stack(out)


def test_run_on_an_image_folder_is_explored_from_anywhere(tmp_path, monkeypatch):
    """rdx run on an ImageFolder given by a relative root: images.json records the root
    relative to the comparison folder (not to the run's working directory), so rdx explore
    run from elsewhere shows the images; the report shows that relative root, not the
    machine's path."""
    work = tmp_path / "work"
    pixels = image_tree(work / "imgs")
    rng = np.random.default_rng(4)
    A = pixels.reshape(len(pixels), -1).astype(np.float32)
    B = A @ rng.normal(size=(A.shape[1], 12)).astype(np.float32)
    np.save(work / "A.npy", A)
    np.save(work / "B.npy", B)
    cfg = {"experiment": "folder", "seed": 0,
           "base": {"image_selection": {"dataset": "imagefolder", "root": "imgs",
                                        "strategy": "full_dataset"},
                    "representations": {"a": {"features": str(work / "A.npy")},
                                        "b": {"features": str(work / "B.npy")}},
                    "methods": [{"method": "kmeans", "n_explanations": 2}]},
           "comparisons": [{"name": "a_vs_b"}]}
    (work / "folder.yaml").write_text(yaml.safe_dump(cfg))
    monkeypatch.chdir(work)
    assert main(["run", "--config", "folder.yaml", "--output-root", "outputs", "--quiet",
                 "--no-report"]) == 0
    comp = work / "outputs" / "folder" / "a_vs_b"
    source = json.loads((comp / "images.json").read_text())["source"]
    assert source == {"kind": "dataset", "dataset": "imagefolder", "root": "../../../imgs"}
    monkeypatch.chdir(tmp_path)           # where "imgs" means nothing
    inp = load_inputs(comp)
    assert inp.load_image is not None, inp.notes
    np.testing.assert_array_equal(np.asarray(inp.load_image(9).convert("L")), pixels[9])
    assert main(["report", str(comp.parent), "--quiet"]) == 0
    text = (comp / "report.html").read_text()
    assert str(tmp_path) not in text
    assert "features ../../../A.npy" in text


def test_pages_name_no_folder_of_the_machine(tmp_path, monkeypatch):
    """The report and the explorer of rdx explain --report on absolute input paths (and a
    home folder): the pages hold neither the inputs' tmp folder nor the home folder, but the
    files as seen from the output folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    files = explain_inputs(tmp_path / "home" / "data",
                           np.zeros((N, 4, 4), dtype=np.uint8))
    page = explain_report(files, tmp_path / "out" / "mine")
    for html in (page, page.parent / "report.html"):
        text = html.read_text()
        assert str(tmp_path) not in text, html.name
        assert "../../home/data/A.npy" in text, html.name


def test_explain_on_rdx_features_outputs_shows_their_image_folder(tmp_path, monkeypatch):
    """Features written by rdx features from a folder of images, compared by rdx explain
    --report without --images: images.json names that folder (relative to the comparison)
    and the images' ids, and the explorer shows them, from any working directory."""
    from rdx.models.feature_store import write_output
    from rdx.data.sources import open_source

    folder = tmp_path / "pngs"
    folder.mkdir()
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 255, (N, 9, 9), dtype=np.uint8)
    for i, img in enumerate(pixels):
        Image.fromarray(img).save(folder / f"img{i:03d}.png")
    ds = open_source(str(folder))
    A, B, _ = planted_pairs(n_per=10, d=6)
    for name, X in (("a", A), ("b", B)):      # as rdx features writes them, with provenance
        write_output(tmp_path / f"{name}.npz", X, list(ds.ids), ds.labels, ds.class_names,
                     {"source": "pngs", "dataset": {"name": ds.name, "info": ds.info,
                                                    "split": None}})
    out = tmp_path / "runs" / "mine"
    assert main(["explain", f"{tmp_path / 'a.npz'}:features", f"{tmp_path / 'b.npz'}:features",
                 "--n-explanations", "2", "--report", "--out", str(out), "--quiet"]) == 0
    doc = json.loads((out / "images.json").read_text())
    assert doc["source"] == {"kind": "files", "source": "../../pngs", "split": None}
    assert doc["ids"] == list(ds.ids)
    monkeypatch.chdir(out)
    inp = load_inputs(".")
    assert inp.load_image is not None, inp.notes
    k = ds.ids.index("img017.png")
    np.testing.assert_array_equal(np.asarray(inp.load_image(k).convert("L")), pixels[17])
    # a file gone since the run: said so, points only
    (folder / "img017.png").unlink()
    inp = load_inputs(".")
    assert inp.load_image is None
    assert any("1 of the run's 60 images are no longer in '../../pngs'" in t for t in inp.notes)
