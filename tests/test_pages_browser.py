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

from conftest import MERGED, ODD_NAME, ToyRun
from test_explorer import page_data
from test_explorer_browser import (at_1400, attr, browser, check_console,  # noqa: F401
                                   open_page, page_shot, pytestmark, selected)

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
    """`rdx layers`, as a user runs it (command line in this process): it writes the
    explorer of the pairs too (before its report, which links it)."""
    from rdx.cli import main

    folder = tmp_path_factory.mktemp("layers")
    assert main(["layers", "--config", str(layers_config(folder)), "--quiet"]) == 0
    out = folder / "out"
    assert (out / "pairs" / "explore.html").is_file()
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
    # the maps' titles name both layers in full: a long name wraps, it is not cut off
    for side in ("a", "b"):
        title = browser.find_element(By.ID, f"title-{side}")
        assert data["pairs"][2][f"{side}_name"] in title.text
        cut = browser.execute_script("const e = arguments[0]; "
                                     "return e.scrollWidth > e.clientWidth + 1", title)
        assert not cut, title.text


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


# ------------------------------------------------------------------ navigation between pages

def open_static(driver, path):
    """A static report page (no script): loaded when its footer is there."""
    driver.get(Path(path).as_uri())
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.TAG_NAME, "footer"))
    check_console(driver)


def follow(driver, css_or_text, *, text=False):
    """Click a link (by CSS selector or by its text) and wait for the new page."""
    old = driver.current_url
    link = (driver.find_element(By.LINK_TEXT, css_or_text) if text
            else driver.find_element(By.CSS_SELECTOR, css_or_text))
    href = link.get_attribute("href")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
    link.click()
    WebDriverWait(driver, 20).until(lambda d: d.current_url != old)
    return href


def local_targets(driver):
    """The local files the page's links point to (no fragment-only links), each existing."""
    from urllib.parse import unquote, urlparse

    out = []
    for a in driver.find_elements(By.CSS_SELECTOR, "a[href]"):
        href = a.get_attribute("href")
        u = urlparse(href)
        if u.scheme == "file":
            out.append(Path(unquote(u.path)))
    missing = [p for p in out if not p.exists()]
    assert not missing, f"links to missing files: {missing}"
    return out


def wait_explorer(driver):
    WebDriverWait(driver, 30).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    check_console(driver)


@pytest.fixture(scope="module")
def run_pages(toy_run_module_copy):
    """The toy run as `rdx run` leaves it: each comparison's explorer (PCA maps, to be
    quick), then every report and the index."""
    from rdx.explorer import build_explorer
    from rdx.report import write_experiment_report

    for comp in (MERGED, ODD_NAME):
        build_explorer(toy_run_module_copy.comp(comp), embedding="pca", progress=False)
    return write_experiment_report(toy_run_module_copy.exp)


def test_run_index_report_explorer(at_1400, run_pages, tmp_path):  # noqa: F811
    """index.html: each comparison's strongest explanations per method as thumbnails that
    open the method in the report, and links to the report and the explorer; then report
    → explorer and back."""
    driver = at_1400
    open_static(driver, run_pages)
    local_targets(driver)
    methods = ToyRun.grid_methods(MERGED)
    head = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "table.strongest th")]
    assert head == ["Comparison"] + methods
    (first,) = [r for r in driver.find_elements(By.CSS_SELECTOR, "table.strongest tbody tr")
                if r.find_element(By.TAG_NAME, "td").text.startswith(MERGED)]
    cells = first.find_elements(By.TAG_NAME, "td")[1:]
    for cell, m in zip(cells, methods):
        imgs = cell.find_elements(By.CSS_SELECTOR, "figure.thumb img")
        assert len(imgs) == 2, m                      # one per direction
        assert all(i.get_property("naturalWidth") > 20 for i in imgs)
    fits_the_width(driver)
    page_shot(driver, tmp_path, "index.png")
    # a thumbnail opens its method in the comparison's report
    link = cells[1].find_element(By.CSS_SELECTOR, "figure.thumb a")
    href = link.get_attribute("href")
    link.click()
    WebDriverWait(driver, 10).until(lambda d: d.current_url == href)
    assert href.endswith(f"/{MERGED}/report.html#method-" + methods[1])
    check_console(driver)
    driver.back()
    WebDriverWait(driver, 10).until(lambda d: d.current_url.endswith("index.html"))
    follow(driver, f"table.strongest a[href='{MERGED}/explore.html']")
    wait_explorer(driver)
    assert driver.current_url.endswith(f"/{MERGED}/explore.html")
    driver.back()
    WebDriverWait(driver, 10).until(lambda d: d.current_url.endswith("index.html"))
    follow(driver, f"table.strongest a[href='{MERGED}/report.html']")
    check_console(driver)
    fits_the_width(driver)
    page_shot(driver, tmp_path, "report.png")
    follow(driver, "Open the interactive explorer", text=True)
    wait_explorer(driver)
    page_shot(driver, tmp_path, "explorer.png")
    # the way back up: the report's crumb names the index
    driver.back()
    WebDriverWait(driver, 10).until(lambda d: d.current_url.endswith("report.html"))
    follow(driver, "header.page .crumb a")
    assert driver.current_url.endswith("index.html")


def fits_the_width(driver) -> None:
    """The page needs no sideways scroll at its viewport's width (1400 px here): a wide
    table scrolls inside its own container instead."""
    wide, inner = driver.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]")
    assert wide <= inner, f"{driver.current_url}: {wide} px wide at {inner} px"


def names_no_machine_folder(page: Path, folder: Path) -> None:
    """The page holds no path inside ``folder`` (the test's temporary root, where its
    inputs and outputs are): a shared page shows no folder of the machine that wrote it."""
    text = Path(page).read_text()
    assert str(folder) not in text, f"{page} names {folder}"


def test_no_page_names_a_folder_of_the_machine(run_pages, layers_study,  # noqa: F811
                                                tmp_path_factory):
    """The run's index, reports and explorers (features given by absolute paths) and the
    layer-wise study's report, pair reports and explorer (an absolute checkpoint)."""
    root = tmp_path_factory.getbasetemp()
    pages = [run_pages, *run_pages.parent.glob("*/report.html"),
             *run_pages.parent.glob("*/explore.html"), layers_study / "report.html",
             *layers_study.glob("pairs/*/report.html"), layers_study / "pairs" / "explore.html"]
    assert len(pages) >= 8
    for page in pages:
        names_no_machine_folder(page, root)


def test_layers_report_links_pairs_and_explorer(at_1400, layers_study,  # noqa: F811
                                                tmp_path):
    """The study's report links each pair's grids (its comparison report, which links
    back) and the explorer at that pair (explore.html#pair=i)."""
    driver = at_1400
    open_static(driver, layers_study / "report.html")
    local_targets(driver)
    rows = driver.find_elements(By.CSS_SELECTOR, "table tr")
    pair_rows = [r for r in rows if r.find_elements(By.LINK_TEXT, "grids")]
    assert len(pair_rows) == 4
    fits_the_width(driver)
    page_shot(driver, tmp_path, "layers_report.png")
    href = pair_rows[1].find_element(By.LINK_TEXT, "grids").get_attribute("href")
    pair_rows[1].find_element(By.LINK_TEXT, "grids").click()
    WebDriverWait(driver, 10).until(lambda d: d.current_url == href)
    check_console(driver)
    assert driver.find_elements(By.CSS_SELECTOR, "img[src^='data:image/png']")
    follow(driver, "header.page .crumb a")
    assert driver.current_url.endswith("/out/report.html")
    rows = [r for r in driver.find_elements(By.CSS_SELECTOR, "table tr")
            if r.find_elements(By.LINK_TEXT, "explorer")]
    rows[1].find_element(By.LINK_TEXT, "explorer").click()
    wait_explorer(driver)
    assert driver.current_url.endswith("explore.html#pair=1")
    assert driver.find_element(By.ID, "pair").get_attribute("value") == "1"
    assert driver.find_elements(By.CSS_SELECTOR, ".group td.thumb img[data-idx]")
    page_shot(driver, tmp_path, "layers_explorer.png")


def test_benchmark_report_links_its_comparisons(at_1400, toy_run_module_copy,  # noqa: F811
                                                tmp_path):
    """The benchmark's HTML report (built from its document): summary, every case × method,
    links to each case's comparison reports (which link back) and tables."""
    from rdx.report.benchmark import write_benchmark_report

    out = tmp_path / "benchmark"
    for pair in ("test", "control"):
        shutil.copytree(toy_run_module_copy.comp(MERGED), out / "tiny" / pair,
                        ignore=shutil.ignore_patterns("report.html", "explore*"))
    row = {"case": "tiny", "method": "rdx", "hits_expected": 2, "grids_expected": 3,
           "hits_opposite": 0, "grids_opposite": 3, "hits_control": 0, "grids_control": 3,
           "chance_hit_rate": 0.12, "significant_expected": 1, "significant_hits": 1,
           "min_p_fwer_expected": 0.004, "min_p_fwer_expected_twin": 0.02,
           "min_p_fwer_control": 0.4, "bsr_test": 0.83, "bsr_control": 0.52,
           "detected": True, "control_clean": True}
    doc = {"suite": "quick", "alpha": 0.05, "rows": [row, {"case": "tiny", "method": "pca",
                                                            "error": "no explanations"}],
           "summary": {"rdx": {"cases": 1, "detected": 1, "controls_clean": 1,
                               "significant_hits": 1, "detected_twin_null": 1}},
           "cases": {"tiny": {"description": "B merges 3 & 5", "n_images": 120,
                              "known_difference": {"type": "merged_classes",
                                                   "classes": [3, 5]},
                              "chance_hit_rate": 0.12, "train_accuracy": {"a": 0.9}}},
           "methods": [{"method": "rdx"}, {"method": "pca"}],
           "timings_s": {"total": 12.0}, "machine": {"cpu_count": 2}}
    (out / "benchmark.json").write_text(json.dumps(doc))
    path = write_benchmark_report(out, doc)
    open_static(at_1400, path)
    local_targets(at_1400)
    text = at_1400.find_element(By.TAG_NAME, "main").text
    assert "1/1" in text and "< 0.001" not in text and "0.004" in text
    assert "failed: no explanations" in text
    fits_the_width(at_1400)
    page_shot(at_1400, tmp_path, "benchmark_report.png")
    follow(at_1400, "test report", text=True)
    assert at_1400.current_url.endswith("/tiny/test/report.html")
    check_console(at_1400)
    follow(at_1400, "header.page .crumb a")
    assert at_1400.current_url.endswith("/benchmark/report.html")


def test_similarity_report_links_consistency_and_probes(at_1400, tmp_path):  # noqa: F811
    """rdx matrix's report links the results of rdx consistency (files, box plot) and of
    rdx probe (accuracies, records)."""
    from rdx.cli import main
    from rdx.report.similarity import write_similarity_report
    from test_similarity_report import ACCURACY, IDS, OBJECTIVE, _matrix

    from rdx.similarity.matrix import SimilarityMatrix

    root = tmp_path / "sim"
    for k, ds in enumerate(("ds_one", "ds_two")):
        SimilarityMatrix(values=_matrix(k), model_ids=IDS, measure="cka_linear", n_images=50,
                         normalize="l2", meta={"categories": {"objective": OBJECTIVE}}
                         ).save(root / "matrices" / ds / "cka_linear")
    for m, acc in ACCURACY.items():
        p = root / "probes" / "ds_one" / f"{m}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"status": "done", "dataset": "ds_one", "model": m,
                                 "top1": acc}))
    assert main(["consistency", "--root", str(root), "--measure", "cka_linear",
                 "--quiet"]) == 0
    path = write_similarity_report(root)
    names_no_machine_folder(path, tmp_path)
    open_static(at_1400, path)
    targets = local_targets(at_1400)
    assert root / "consistency" / "cka_linear" / "summary.csv" in targets
    assert any(t.parent == root / "probes" / "ds_one" for t in targets)
    section = at_1400.find_element(By.ID, "consistency")
    at_1400.execute_script("arguments[0].scrollIntoView()", section)
    assert "sup_a" in at_1400.find_element(By.ID, "probes").find_element(
        By.XPATH, "following::table[1]").text
    fits_the_width(at_1400)
    page_shot(at_1400, tmp_path, "similarity_report.png")


def test_dynamics_report_links_its_tables(at_1400, tmp_path):  # noqa: F811
    """The training-dynamics report (a tiny embedded run, as test_dynamics makes it): opens
    without an error, its tables and folders are linked and exist."""
    from test_dynamics import REPO, load_script

    base = yaml.safe_load((REPO / "configs" / "training_dynamics_fashion5.yaml").read_text())
    base.update(output=str(tmp_path / "out"), device="cpu",
                checkpoints={"dir": str(tmp_path / "ck" / "fashion5_dynamics")},
                train={"preset": "fashion5_dynamics", "per_class": 20, "epochs": 1,
                       "test": False, "save_every": ["epoch", 0]})
    base["probe"]["num_images"] = 30
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(base))
    assert load_script().main(["--config", str(cfg), "--quiet"]) == 0
    names_no_machine_folder(tmp_path / "out" / "report.html", tmp_path)
    open_static(at_1400, tmp_path / "out" / "report.html")
    targets = local_targets(at_1400)
    assert {tmp_path / "out" / f for f in ("dynamics.csv", "clusters.csv",
                                           "dynamics.json")} <= set(targets)
    fits_the_width(at_1400)
    page_shot(at_1400, tmp_path, "dynamics_report.png")


def test_a_wide_table_scrolls_inside_the_page(at_1400, tmp_path):  # noqa: F811
    """A table wider than the window (many methods or comparisons, long names) scrolls in
    its own container: the page stays as wide as the window, the table keeps its width."""
    from rdx.report.html import page, table

    head = ["Comparison"] + [f"method_with_a_long_name_{k}" for k in range(30)]
    path = tmp_path / "wide.html"
    path.write_text(page("wide", "<main>" + table(head, [["x"] * len(head)])
                         + "<footer>end</footer></main>"))
    open_static(at_1400, path)
    fits_the_width(at_1400)
    wide = at_1400.execute_script("return document.querySelector('table').scrollWidth")
    assert wide > 1400                                  # it would have widened the page
