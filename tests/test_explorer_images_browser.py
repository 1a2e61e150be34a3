"""The explorer of what ``rdx explain`` writes, in headless Chromium: ``rdx explain …
--images … --report`` and an example's run show their images as thumbnails; no page names
a folder of the machine that wrote it; a new box or lasso selection clears the old one's
outline.

Shares the browser helpers of test_explorer_browser.py (skipped the same way without
chromium, chromedriver or selenium).
"""
from __future__ import annotations

import numpy as np

from conftest import planted_pairs
from rdx.cli import main
from test_explorer import page_data
from test_explorer_browser import (at_1400, browser, check_console,  # noqa: F401
                                   drag_path, group_size, open_page, page, pytestmark)
from test_explorer_images import N, explain_inputs, explain_report

from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402  (importorskip'd above)
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def shown_thumbnails(driver) -> list:
    """The thumbnails drawn in the panel of the selected image (itself and its neighbour
    tables), each loaded (a decoded image, not a broken one)."""
    imgs = [driver.find_element(By.ID, "sel-image"),
            *driver.find_elements(By.CSS_SELECTOR, ".group td.thumb img")]
    assert all(i.tag_name == "img" for i in imgs)
    assert all(i.get_property("naturalWidth") > 0 and i.get_attribute("src").startswith(
        "data:image/") for i in imgs)
    return imgs


def test_explain_report_explorer_shows_the_images(at_1400, tmp_path):  # noqa: F811
    """`rdx explain A B --images imgs.npy --report --significance 3 --out OUT` (the path the
    docs give) writes the explorer too: thumbnails, no "unknown dataset" banner, each
    explanation's one-line description in its list and in the selection panel. Its report
    shows each grid's significance, make-up beside its whole cluster's and description
    without a click, needs no sideways scroll at 1400 px, and neither page names a folder
    of the machine."""
    import json

    driver = at_1400
    images = np.random.default_rng(5).integers(0, 255, (N, 8, 8), dtype=np.uint8)
    out = tmp_path / "mine"
    path = explain_report(explain_inputs(tmp_path / "in", images), out, "--significance", "3")
    for page_path in (path, out / "report.html"):
        assert str(tmp_path) not in page_path.read_text(), page_path
    exps = json.loads((out / "rdx" / "explanations.json").read_text())["directions"][
        "a_over_b"]["explanations"]
    described = [e["description"] for e in exps if e.get("description")]
    assert described                    # planted, class-pure clusters: the class is named
    open_page(driver, path)
    check_console(driver)
    assert len(shown_thumbnails(driver)) > 10
    notes = driver.find_element(By.ID, "notes").text
    assert "unknown dataset" not in notes and "Points only" not in notes
    shown = driver.find_elements(By.CSS_SELECTOR, "#explanations .exp .description")
    assert [d.text for d in shown] == described and all(d.is_displayed() for d in shown)
    # a click on an image of an explanation's strip selects it: the panel names the
    # description of the explanation it belongs to
    item = shown[0].find_element(By.XPATH, "./ancestor::div[contains(@class, 'exp')]")
    first = next(i for i in exps[0]["images"] if i in exps[0]["members"])
    member = item.find_element(By.CSS_SELECTOR, f"img[data-idx='{first}']")
    driver.execute_script("arguments[0].scrollIntoView(); arguments[0].click()", member)
    WebDriverWait(driver, 5, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: d.find_element(By.ID, "sel-description").text == described[0])
    # the report: open grids, their badges and make-up visible as the page opens
    driver.get((out / "report.html").as_uri())
    check_console(driver)
    wide, inner = driver.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]")
    assert wide <= inner
    caps = driver.find_elements(By.CSS_SELECTOR, "section.method figcaption")
    assert len(caps) == 2 * 2 and all(c.is_displayed() for c in caps)
    assert all("whole cluster (" in c.text and "grid (" in c.text for c in caps)
    sig = driver.find_elements(By.CSS_SELECTOR, "figcaption .badge[title]")
    assert any("FWER" in b.text and b.is_displayed() for b in sig)
    descs = driver.find_elements(By.CSS_SELECTOR, "figcaption .description")
    assert described[0] in [d.text for d in descs if d.is_displayed()]


def example_stand_in(**_kw):
    """A small stand-in of the EfficientNet example (which extracts features for minutes):
    the same kind of record (a description as its dataset, class names, the source folder
    of its images), 28×28 grey images."""
    from rdx.example_store import Example

    A, B, labels = planted_pairs(n_per=10, d=6)
    images = np.random.default_rng(6).integers(0, 255, (len(A), 28, 28), dtype=np.uint8)
    info = {"dataset": f"Fashion-MNIST test split ({len(A)} images, 6 classes, 10 per "
                       "class; /usr/share/datasets/fashion-mnist)",
            "split": "test", "model": "EfficientNet-Lite, penultimate features",
            "A": {"checkpoint": "Lite0, 224 px"}, "B": {"checkpoint": "Lite2, 260 px"},
            "seed": 0, "class_names": [f"class {c}" for c in range(6)]}
    return Example(A=A, B=B, labels=labels, images=images,
                   description="Lite0 A vs Lite2 B on 60 images", info=info)


def test_example_run_explorer_shows_the_images(browser, tmp_path, monkeypatch):  # noqa: F811
    """`rdx explain --example efficientnet --report`, then `rdx explore`: the example's
    images as thumbnails, its class names, and the source folder of its images not on
    the page (only its name)."""
    from rdx import examples

    monkeypatch.setitem(examples.EXAMPLES, "efficientnet", example_stand_in)
    out = tmp_path / "efficientnet_example"
    assert main(["explain", "--example", "efficientnet", "--report", "--out", str(out),
                 "--quiet"]) == 0
    assert main(["explore", str(out), "--embedding", "pca", "--quiet"]) == 0
    text, data = page_data(out / "explore.html")
    assert data["thumbs"] and len(data["thumbs"]) == N and not data["notes"]
    assert data["class_names"][:2] == ["class 0", "class 1"]
    assert data["dataset"]["name"].endswith("per class; .../fashion-mnist)")
    for page_path in (out / "explore.html", out / "report.html"):
        html = page_path.read_text()
        assert "/usr/share/datasets" not in html and str(tmp_path) not in html
    open_page(browser, out / "explore.html")
    check_console(browser)
    assert len(shown_thumbnails(browser)) > 10
    assert "unknown dataset" not in browser.find_element(By.ID, "notes").text


#: Plotly's own outlines of box / lasso selections on a map, and whether any trace of it
#: still greys the points outside an old selection.
OUTLINES = """
const div = document.getElementById(arguments[0]);
return [(div.layout.selections || []).length,
        div.data.some(tr => Array.isArray(tr.selectedpoints))];
"""


def outlines(driver, plot):
    return driver.execute_script(OUTLINES, plot)


def select_mode(driver, mode):
    driver.find_element(By.CSS_SELECTOR, f"#drag button[data-value={mode}]").click()


def box_in(driver, plot, fx0, fy0, fx1, fy1):
    r = driver.find_element(By.ID, plot).rect
    x0, y0 = r["x"] + fx0 * r["width"], r["y"] + fy0 * r["height"]
    x1, y1 = r["x"] + fx1 * r["width"], r["y"] + fy1 * r["height"]
    drag_path(driver, [(x0, y0), ((x0 + x1) / 2, (y0 + y1) / 2), (x1, y1)])


def lasso_in(driver, plot, corners):
    r = driver.find_element(By.ID, plot).rect
    tri = [(r["x"] + fx * r["width"], r["y"] + fy * r["height"]) for fx, fy in corners]
    pts = []
    for a, b in zip(tri, tri[1:] + tri[:1]):
        pts += [(a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)
                for t in np.linspace(0, 1, 8, endpoint=False)]
    drag_path(driver, pts + [tri[0]])


def wait_title(driver, words):
    """Until the selection panel shows a selection made so (``words``); the panel is drawn
    again meanwhile, so an element read as it is replaced is read again."""
    WebDriverWait(driver, 5, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: group_size(d) > 0 and words in d.find_element(By.ID, "group-title").text)


def test_a_new_selection_clears_the_old_outline(at_1400, page):  # noqa: F811
    """A box in A's map, then a lasso in B's: A's outline (and its greyed points) is gone,
    B's is drawn; a box in A again clears B's; a second box in A replaces the first; Clear
    clears them all."""
    driver = at_1400
    path, _ = page
    open_page(driver, path)
    select_mode(driver, "select")
    box_in(driver, "plot-a", 0.15, 0.2, 0.6, 0.75)
    wait_title(driver, "box in A's map")
    assert outlines(driver, "plot-a") == [1, True]
    assert outlines(driver, "plot-b")[0] == 0

    select_mode(driver, "lasso")
    lasso_in(driver, "plot-b", ((0.1, 0.15), (0.9, 0.3), (0.3, 0.9)))
    wait_title(driver, "lasso in B's map")
    WebDriverWait(driver, 5).until(lambda d: outlines(d, "plot-a") == [0, False])
    assert outlines(driver, "plot-b") == [1, True]

    select_mode(driver, "select")
    box_in(driver, "plot-a", 0.2, 0.2, 0.7, 0.7)
    wait_title(driver, "box in A's map")
    WebDriverWait(driver, 5).until(lambda d: outlines(d, "plot-b") == [0, False])
    assert outlines(driver, "plot-a") == [1, True]
    before = group_size(driver)
    box_in(driver, "plot-a", 0.3, 0.1, 0.9, 0.5)      # another box in the same map
    WebDriverWait(driver, 5).until(lambda d: group_size(d) != before)
    assert outlines(driver, "plot-a") == [1, True]
    check_console(driver)

    driver.find_element(By.ID, "group-clear").click()
    WebDriverWait(driver, 5).until(lambda d: outlines(d, "plot-a") == [0, False])
    assert group_size(driver) == 0
    check_console(driver)
