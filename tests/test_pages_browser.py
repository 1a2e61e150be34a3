"""Every page of a layer-wise study in headless Chromium: the explorer of its layer pairs
shows the images (not a false "the data changed since the run"), and the study's report
links to each pair's grids and to the explorer.

Shares the browser helpers of test_explorer_browser.py (skipped the same way without
chromium, chromedriver or selenium).
"""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from test_explorer import page_data
from test_explorer_browser import (attr, browser, check_console, open_page,  # noqa: F401
                                   selected)

from selenium.webdriver.common.by import By  # noqa: E402  (importorskip'd above)
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

#: A ViT of 2 blocks on 8×8 digits, one epoch: the smallest study (about 10 s).
TINY_VIT = {"img_size": 8, "patch_size": 4, "embed_dim": 16, "depth": 2, "num_heads": 2,
            "mlp_ratio": 2.0}


def layers_config(folder: Path) -> Path:
    cfg = {"name": "tiny", "output": str(folder / "out"),
           "model": {"model": "rdx_vit", "checkpoint": str(folder / "vit.pt")},
           "train": {"dataset": "digits", "per_class": 15, "test_split": None, "epochs": 1,
                     "arch": TINY_VIT},
           "data": {"dataset": "digits", "n_images": 120, "n_probe": 100},
           "rdx": {"n_explanations": 2, "grid_size": 4},
           "probes": {"knn_k": 5}, "stats": {"n_permutations": 99},
           "patching": {"k": 5}, "chance_draws": 0, "device": "cpu",
           "cache_dir": str(folder / "cache")}
    path = folder / "layers_tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def layers_study(tmp_path_factory):
    """`rdx layers` then `rdx explore <study>/pairs`, as a user runs them (command line in
    this process)."""
    from rdx.cli import main

    folder = tmp_path_factory.mktemp("layers")
    assert main(["layers", "--config", str(layers_config(folder)), "--quiet"]) == 0
    out = folder / "out"
    assert main(["explore", str(out / "pairs"), "--embedding", "pca", "--quiet"]) == 0
    return out


def test_layers_explorer_shows_the_images(browser, layers_study, tmp_path):  # noqa: F811
    """The cause of the false banner: a study's pairs name their images by index
    (``image_selection.indices: images.json``), and the explorer re-drew a per-class
    sample instead (and refused digits' ``split``). Now every pair shows the study's
    images."""
    from rdx.data import get_dataset

    page = layers_study / "pairs" / "explore.html"
    _, data = page_data(page)
    assert not data["notes"], data["notes"]
    assert data["thumbs"] and len(data["thumbs"]) == data["n"] == 120
    assert len(data["pairs"]) == 4
    # the thumbnails are the study's analysis images, in images.json's order
    from rdx.explorer import load_inputs

    inp = load_inputs(layers_study / "pairs")
    images = json.loads((layers_study / "pairs" / data["pairs"][0]["name"] /
                         "images.json").read_text())
    ds = get_dataset("digits")
    for k in (0, 57, 119):
        np.testing.assert_array_equal(np.asarray(inp.load_image(k)),
                                      np.asarray(ds.load_image(images["indices"][k])))

    open_page(browser, page)
    check_console(browser)
    assert not browser.find_element(By.ID, "notes").text
    sel = selected(browser)
    assert attr(browser, "#sel-image", "src") == data["thumbs"][sel]
    thumbs = browser.find_elements(By.CSS_SELECTOR, ".group td.thumb img[data-idx]")
    assert len(thumbs) == 3 * data["k"]
    assert all(t.get_attribute("src").startswith("data:image/") for t in thumbs)
    # another pair: still images
    browser.find_element(By.CSS_SELECTOR, "#pair option[value='2']").click()
    WebDriverWait(browser, 5).until(
        lambda d: d.find_element(By.ID, "title-a").text.startswith(
            data["pairs"][2]["a_short"]))
    assert browser.find_elements(By.CSS_SELECTOR, ".group td.thumb img[data-idx]")
    check_console(browser)


def test_a_real_change_of_the_data_is_still_told(layers_study, tmp_path):
    """Images whose dataset ids no longer match images.json: points only, and the note
    says the data changed."""
    from rdx.explorer import load_inputs

    pairs = tmp_path / "pairs"
    shutil.copytree(layers_study / "pairs", pairs,
                    ignore=shutil.ignore_patterns("explore*", "*.npz.cache"))
    for p in pairs.iterdir():
        if (p / "images.json").is_file():
            doc = json.loads((p / "images.json").read_text())
            doc["ids"] = doc["ids"][1:] + doc["ids"][:1]
            (p / "images.json").write_text(json.dumps(doc))
    inp = load_inputs(pairs)
    assert inp.load_image is None
    assert "the data changed since the run" in inp.notes[0]
