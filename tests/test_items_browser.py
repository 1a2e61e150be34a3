"""The explorer of text and audio items in a real browser (headless Chromium, as in
test_explorer_browser): the selected item's snippet or clip name is shown next to it, text
items get their cards as thumbnails, and the page has no console error."""
import pytest

from rdx.explorer import build_explorer

from test_explorer import page_data
from test_explorer_browser import (CHROMIUM, DRIVER, browser, check_console,  # noqa: F401
                                   open_page, selected)
from test_items import _rdx

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="no chromium/chromedriver: apt-get install -y chromium chromium-driver")
By = pytest.importorskip("selenium.webdriver.common.by").By
WebDriverWait = pytest.importorskip("selenium.webdriver.support.ui").WebDriverWait


def _comparison(tmp_path, kind):
    from rdx.examples_items import make_audio_example, make_text_example

    if kind == "text":
        ex = make_text_example(tmp_path / kind, n=150)
        items = ["--texts", ex / "texts.txt"]
        values = (ex / "texts.txt").read_text(encoding="utf-8").splitlines()
    else:
        ex = make_audio_example(tmp_path / kind, n=60)
        items = ["--audio", ex / "clips"]
        values = sorted(p.name for p in (ex / "clips").iterdir())
    rc, _, err = _rdx(["explain", ex / "A.npy", ex / "B.npy", *items, "--labels",
                       ex / "labels.npy", "--out", ex / "result", "--report", "--quiet"])
    assert rc == 0, err
    return ex / "result", values


@pytest.mark.parametrize("kind, word", [("text", "text"), ("audio", "clip")])
def test_explorer_shows_the_selected_item(browser, tmp_path, kind, word):  # noqa: F811
    comp, values = _comparison(tmp_path, kind)
    _, data = page_data(build_explorer(comp, embedding="pca", progress=False))
    assert data["items"] == {"kind": kind, "values": values}
    # the thumbnails: text cards, or the clips' spectrograms (kept as the folder's images)
    assert data["thumbs"] is not None
    open_page(browser, comp / "explore.html")
    check_console(browser)
    # the first selection (the top-ranked item), then another one clicked in the list
    start = selected(browser)
    assert browser.find_element(By.ID, "sel-item").text == f"{word} {values[start]}"
    browser.find_element(By.ID, "dir-a").click()
    browser.find_elements(By.CSS_SELECTOR, "#explanations .exp")[0].click()
    WebDriverWait(browser, 5).until(lambda d: selected(d) != start)
    now = selected(browser)
    assert browser.find_element(By.ID, "sel-item").text == f"{word} {values[now]}"
    check_console(browser)
