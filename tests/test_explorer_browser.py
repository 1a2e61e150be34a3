"""The explorer in a real browser: headless Chromium driven by Selenium, page opened from
file://. Every console error fails a test (a sentinel page proves that the check sees them).

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them) and the
``selenium`` package (test extras); skipped with a message only where they are missing.
"""
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import MERGED, ToyRun
from rdx.explorer import build_explorer
from rdx.explorer.page import script_hash

from test_explorer import decode, named_groups_comparison, page_data, significance_comparison

webdriver = pytest.importorskip(
    "selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def _binary(*names):
    for name in names:
        if shutil.which(name):
            return shutil.which(name)
    return None


CHROMIUM = _binary("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVER = _binary("chromedriver", "chromium-driver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="no chromium/chromedriver: apt-get install -y chromium chromium-driver "
           "(.ci/run installs them)")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    downloads = tmp_path_factory.mktemp("downloads")
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--hide-scrollbars", "--window-size=1600,1000",
                f"--user-data-dir={tmp_path_factory.mktemp('profile')}"):
        opts.add_argument(arg)
    opts.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                           "download.prompt_for_download": False})
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(DRIVER))
    driver.execute_cdp_cmd("Browser.setDownloadBehavior",
                           {"behavior": "allow", "downloadPath": str(downloads)})
    driver.downloads = downloads
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page(toy_run_module_copy):
    """The page of the shared toy run's first comparison, written into a copy of it."""
    path = build_explorer(toy_run_module_copy.comp(MERGED), embedding="pca", progress=False)
    _, data = page_data(path)
    return path, data


#: Where the screenshots of the pages go when asked: RDX_SCREENSHOTS=docs/img (1400×900 px).
SHOTS = os.environ.get("RDX_SCREENSHOTS")


def page_shot(driver, tmp_path, name):
    """A 1400×900 screenshot of the current page; copied, as a small palette PNG, into
    $RDX_SCREENSHOTS when set (the docs' images)."""
    from PIL import Image

    path = tmp_path / name
    driver.save_screenshot(str(path))
    with Image.open(path) as im:
        assert im.size == (1400, 900), im.size
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            im.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(
                Path(SHOTS) / name, optimize=True)
    return path


@pytest.fixture
def at_1400(browser):  # noqa: F811
    """The browser's viewport at 1400×900 CSS pixels for one test, then as it was."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 1400, "height": 900, "deviceScaleFactor": 1,
                             "mobile": False})
    yield browser
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def console_errors(driver):
    """Error-level console messages since the last call (uncaught exceptions, refused
    resources, CSP violations)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def check_console(driver):
    errors = console_errors(driver)
    assert not errors, "console errors:\n" + "\n".join(errors)


def open_page(driver, path, timeout=20):
    driver.get(Path(path).as_uri())
    WebDriverWait(driver, timeout).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))


def attr(driver, css, name):
    return driver.find_element(By.CSS_SELECTOR, css).get_attribute(name)


def selected(driver):
    return int(attr(driver, "body", "data-selected"))


def shot(driver, tmp_path, name):
    path = tmp_path / name
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    assert path.stat().st_size > 10_000
    return path


# Where an image's point is drawn in a plot, and whether it stands clear of its neighbours
# (so that a click there selects that image and no other).
LOCATE = """
const [plotId, want] = arguments;
const div = document.getElementById(plotId);
const box = div.getBoundingClientRect(), xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis;
const pts = [];
div.data.forEach(function (tr) {
  if (tr.visible === false) return;
  (tr.customdata || []).forEach(function (idx, j) {
    pts.push([idx, box.left + xa._offset + xa.l2p(tr.x[j]), box.top + ya._offset + ya.l2p(tr.y[j])]);
  });
});
function clearance(p) {
  let best = 1e9;
  pts.forEach(function (q) { if (q[0] !== p[0]) best = Math.min(best, Math.hypot(p[1] - q[1], p[2] - q[2])); });
  return best;
}
if (want !== null) { const p = pts.find(q => q[0] === want); return p ? [p[0], p[1], p[2], clearance(p)] : null; }
let best = null;
pts.forEach(function (p) { const c = clearance(p); if (!best || c > best[3]) best = [p[0], p[1], p[2], c]; });
return best;
"""


def click_at(driver, x, y):
    body = driver.find_element(By.TAG_NAME, "body")
    ActionChains(driver).move_to_element_with_offset(body, 0, 0).perform()
    actions = ActionChains(driver)
    actions.w3c_actions.pointer_action.move_to_location(int(x), int(y))
    actions.w3c_actions.pointer_action.click()
    actions.perform()


def add_before_body_end(text, html):
    i = text.rindex("</body>")   # the last one: the page's scripts hold the text too
    return text[:i] + html + text[i:]


SENTINEL = """<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src {hashes}">
</head><body><p>sentinel</p>{scripts}</body></html>"""


def test_console_check_catches_a_broken_script(browser, tmp_path):
    """The sentinel: a page whose script throws, and one whose script the CSP refuses —
    the check must fail on both, and pass on the same page with a working script."""
    def sentinel(script, allowed=True):
        path = tmp_path / "sentinel.html"
        path.write_text(SENTINEL.format(hashes=script_hash(script) if allowed else "'none'",
                                        scripts=f"<script>{script}</script>"))
        browser.get(path.as_uri())
        return path

    sentinel("document.body.setAttribute('data-ok', '1');")
    check_console(browser)
    assert attr(browser, "body", "data-ok") == "1"
    sentinel("rdxSentinelUndefinedFunction();")
    with pytest.raises(AssertionError, match="rdxSentinelUndefinedFunction"):
        check_console(browser)
    sentinel("document.body.setAttribute('data-ok', '1');", allowed=False)
    with pytest.raises(AssertionError, match="Content Security Policy"):
        check_console(browser)


def test_explorer_in_chromium(browser, page, tmp_path):
    path, data = page
    n, k = data["n"], data["k"]
    p = data["pairs"][0]
    ranking = {d: decode(p["directions"][d]["ranking"]).tolist() for d in p["directions"]}
    nearest_a = decode(p["groups"]["a"]["idx"])
    t0 = time.perf_counter()
    open_page(browser, path)
    print(f"first render: {int(attr(browser, 'body', 'data-ready'))} ms after navigation "
          f"({time.perf_counter() - t0:.2f} s wall)")
    check_console(browser)
    # the top-ranked image of A over B is selected at first
    assert selected(browser) == ranking["a_over_b"][0]
    assert browser.find_element(By.ID, "legend").text.startswith("Explanation 1")
    shot(browser, tmp_path, "explorer.png")

    # click a point of B's map → the neighbour view shows that image
    idx, x, y, clear = browser.execute_script(LOCATE, "plot-b", None)
    assert clear > 4 and idx != selected(browser)
    click_at(browser, x, y)
    WebDriverWait(browser, 5).until(lambda d: selected(d) == idx)
    assert browser.find_element(By.ID, "sel-caption").text.startswith(f"#{idx} ")
    assert attr(browser, "#sel-image", "src") == data["thumbs"][idx]
    shown = [int(e.get_attribute("data-idx")) for e in browser.find_elements(
        By.CSS_SELECTOR, '.group[data-group="a"] td.thumb [data-idx]')]
    assert shown == nearest_a[idx].tolist()
    check_console(browser)

    # a box zoom in A's map zooms B's map and both overlays of marked points alike
    box = browser.find_element(By.ID, "plot-a").rect
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    ActionChains(browser).move_to_element_with_offset(browser.find_element(By.TAG_NAME, "body"), 0, 0) \
        .perform()
    drag = ActionChains(browser)
    drag.w3c_actions.pointer_action.move_to_location(int(cx - 80), int(cy - 60))
    drag.w3c_actions.pointer_action.pointer_down()
    drag.w3c_actions.pointer_action.move_to_location(int(cx + 60), int(cy + 70))
    drag.w3c_actions.pointer_action.pointer_up()
    drag.perform()
    ranges = "return ['plot-a', 'plot-b', 'plot-a-ov', 'plot-b-ov'].map(id => " \
             "[document.getElementById(id).layout.xaxis.range, " \
             "document.getElementById(id).layout.yaxis.range])"
    WebDriverWait(browser, 5).until(lambda d: len({json.dumps(np.round(r, 6).tolist())
                                                   for r in d.execute_script(ranges)}) == 1)
    zoomed = browser.execute_script(ranges)[0]
    full = browser.execute_script("return document.getElementById('plot-a-ov').data.length")
    assert full == 6 and np.ptp(zoomed[0]) < 0.5 * np.ptp(
        decode(p["embedding"]["a"])[:, 0])                     # it really zoomed in
    check_console(browser)
    # plotly's tip after a zoom ("Double-click to zoom back out") would lie over the top
    # right corner for seconds and take clicks meant for the controls under it: it is off
    assert not browser.find_elements(By.CSS_SELECTOR, ".notifier-note")

    # the ranking slider and its buttons step through the ranking
    slider = browser.find_element(By.ID, "rank")
    slider.send_keys(Keys.END)
    WebDriverWait(browser, 5).until(lambda d: selected(d) == ranking["a_over_b"][n - 1])
    slider.send_keys(Keys.HOME)
    browser.find_element(By.ID, "next").click()
    WebDriverWait(browser, 5).until(lambda d: selected(d) == ranking["a_over_b"][1])
    assert browser.find_element(By.ID, "ranklabel").text.startswith(f"Rank 2/{n} ")

    # the modal: a neighbour next to the selected image, arrow keys, Esc, click outside
    sel = selected(browser)
    browser.find_element(By.CSS_SELECTOR, '.group[data-group="a"] td.thumb [data-idx]').click()
    modal = browser.find_element(By.ID, "modal")
    assert "open" in modal.get_attribute("class")
    assert int(modal.get_attribute("data-idx")) == nearest_a[sel][0]
    shot(browser, tmp_path, "modal.png")
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.ARROW_RIGHT)
    assert int(modal.get_attribute("data-idx")) == nearest_a[sel][1]
    body.send_keys(Keys.ARROW_LEFT, Keys.ARROW_LEFT)
    assert int(modal.get_attribute("data-idx")) == nearest_a[sel][k - 1]
    body.send_keys(Keys.ESCAPE)
    assert "open" not in modal.get_attribute("class")
    browser.find_element(By.ID, "sel-image").click()
    assert "open" in modal.get_attribute("class")
    ActionChains(browser).move_to_element_with_offset(modal, -700, -400).click().perform()
    assert "open" not in modal.get_attribute("class")

    # a legend entry hides its points in both maps, and shows them again
    item = browser.find_element(By.CSS_SELECTOR, "#legend .item")
    item.click()
    vis = "return [document.getElementById('plot-a').data[0].visible, " \
          "document.getElementById('plot-b').data[0].visible]"
    assert browser.execute_script(vis) == [False, False] and "off" in item.get_attribute("class")
    item.click()
    assert browser.execute_script(vis) == [True, True]

    # the other direction: its own ranking, explanations and meaning
    browser.find_element(By.ID, "dir-b").click()
    WebDriverWait(browser, 5).until(lambda d: selected(d) == ranking["b_over_a"][0])
    assert "on" in attr(browser, "#dir-b", "class")
    assert browser.find_element(By.ID, "meaning").text.startswith("B over A:")
    # every colour mode draws without an error; the no-change group toggles off and on
    for option in browser.find_elements(By.CSS_SELECTOR, "#color option"):
        option.click()
    browser.find_element(By.ID, "shownull").click()
    browser.find_element(By.ID, "shownull").click()
    browser.find_element(By.CSS_SELECTOR, "#color option[value=expl]").click()
    # every method, e.g. the PCA baseline (grids only, no members)
    pca = [m["name"] for m in p["methods"]].index(ToyRun.name_of("pca"))
    browser.find_element(By.CSS_SELECTOR, f"#method option[value='{pca}']").click()
    assert "Grid of explanation 1" in browser.find_element(By.ID, "legend").text
    check_console(browser)

    # the animated transition from A's map to B's
    browser.find_element(By.CSS_SELECTOR, "#view button[data-value=animate]").click()
    browser.execute_script("const s = document.getElementById('tslider'); s.value = 50;"
                           "s.dispatchEvent(new Event('input'));")
    assert browser.find_element(By.ID, "animlabel").text == "t = 0.50"
    browser.find_element(By.ID, "play").click()
    WebDriverWait(browser, 10).until(
        lambda d: d.find_element(By.ID, "animlabel").text.startswith("B:"))
    shot(browser, tmp_path, "animate.png")
    browser.find_element(By.CSS_SELECTOR, "#view button[data-value=side]").click()
    check_console(browser)

    # export a snapshot of the selected image and open it
    sel = selected(browser)
    browser.find_element(By.ID, "snapshot").click()
    WebDriverWait(browser, 15).until(lambda d: attr(d, "body", "data-snapshot"))
    name = attr(browser, "body", "data-snapshot")
    file = browser.downloads / name
    WebDriverWait(browser, 10).until(lambda d: file.is_file() and file.stat().st_size > 0)
    open_page(browser, file)
    check_console(browser)
    assert attr(browser, "img.main", "src") == data["thumbs"][sel]
    snap_a = decode(p["groups"]["a"]["idx"])[sel]
    browser.find_elements(By.CSS_SELECTOR, "img.nb")[0].click()
    modal = browser.find_element(By.ID, "modal")
    assert int(modal.get_attribute("data-idx")) == snap_a[0]
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_RIGHT)
    assert int(modal.get_attribute("data-idx")) == snap_a[1]
    shot(browser, tmp_path, "snapshot.png")
    check_console(browser)
    assert json.loads(browser.find_element(By.ID, "snapshot-data").get_attribute(
        "textContent"))["selected"] == sel


def test_pair_selector_and_points_only(browser, page, tmp_path):
    """A folder of several pairs (e.g. layer pairs) gets a pair selector; without the
    dataset the page shows numbered points and says so."""
    path, _ = page
    root = tmp_path / "layers"
    for name in ("pair1", "pair2"):
        shutil.copytree(path.parent, root / name)
        images = json.loads((root / name / "images.json").read_text())
        images["source"]["dataset"] = "missing_dataset"
        (root / name / "images.json").write_text(json.dumps(images))
    reps = dict(np.load(root / "pair2" / "representations.npz"))
    reps["b"] = np.sqrt(np.abs(reps["b"]))
    np.savez(root / "pair2" / "representations.npz", **reps)
    out = build_explorer(root, embedding="pca", progress=False)
    open_page(browser, out)
    check_console(browser)
    assert "Points only, no thumbnails" in browser.find_element(By.ID, "notes").text
    assert browser.find_element(By.ID, "sel-image").tag_name == "span"
    assert all(e.tag_name == "span" for e in browser.find_elements(
        By.CSS_SELECTOR, ".group td.thumb [data-idx]"))
    assert browser.find_element(By.ID, "pair-label").is_displayed()
    first = browser.execute_script("return document.getElementById('plot-b').data[0].x.slice()")
    browser.find_element(By.CSS_SELECTOR, "#pair option[value='1']").click()
    WebDriverWait(browser, 5).until(lambda d: d.execute_script(
        "return document.getElementById('plot-b').data[0].x.slice()") != first)
    check_console(browser)


SIG_BADGE = ".badge.sig, .badge.nonsig, .badge.uncal"


def open_comparison(browser, comp):
    """Build a comparison folder's explorer, open it (no console errors) and return its
    one method's page data per direction."""
    _, data = page_data(build_explorer(comp, embedding="pca", progress=False))
    open_page(browser, comp / "explore.html")
    check_console(browser)
    return data["pairs"][0]["methods"][0]["directions"]


def test_significance_badges_on_page_and_snapshot(at_1400, tmp_path):
    """Each explanation of a run with --significance shows its badge and p_FWER (with the
    meaning as the tooltip), in the list, next to the selected image and in its snapshot;
    a run without it shows no badge at all."""
    browser = at_1400
    exps = open_comparison(browser, significance_comparison(tmp_path / "sig"))

    def expect(e, badge):
        b = e["significance"]["badge"]
        assert badge.is_displayed()
        # beside it: the BSR of the explanation's own grid
        bsr = badge.find_element(By.XPATH, "preceding-sibling::span[contains(@class, 'bsr')]")
        assert bsr.text == f"BSR {e['bsr']:.2f}"
        assert badge.text == f"{b['text']}, pFWER {b['p']}"          # p<sub>FWER</sub>
        assert b["cls"] in badge.get_attribute("class").split()
        assert b["cls"] == (("sig" if b["significant"] else "nonsig") if b["calibrated"]
                            else "uncal")
        assert badge.get_attribute("title") == b["title"]
        assert "seed twins" in b["title"]

    for d, button in (("a_over_b", "dir-a"), ("b_over_a", "dir-b")):
        browser.find_element(By.ID, button).click()
        items = browser.find_elements(By.CSS_SELECTOR, "#explanations .exp")
        assert len(items) == len(exps[d]["explanations"]) == 3
        q = exps[d]["significance"]
        summary = browser.find_element(By.ID, "exp-summary").text
        # random files name no model family: the field null gives no verdict, and says so
        assert q["calibrated"] is False
        assert "3 assessed, no verdict (not calibrated for this pair)" in summary
        standing = browser.find_element(By.ID, "sig-standing").text
        assert standing.startswith("Significance: null = field null") and \
            "NO VERDICT" in standing and "seed twin" in standing
        for item, e in zip(items, exps[d]["explanations"]):
            assert e["significance"]["badge"]["text"] == "no verdict (not calibrated)"
            expect(e, item.find_element(By.CSS_SELECTOR, SIG_BADGE))
    # select explanation 1's first image (B over A): the panel shows that explanation's badge
    first = exps["b_over_a"]["explanations"][0]
    items[0].click()
    WebDriverWait(browser, 5).until(lambda d: selected(d) == first["images"][0])
    expect(first, browser.find_element(By.CSS_SELECTOR, f"#selected-panel {SIG_BADGE}"))
    page_shot(browser, tmp_path, "explorer_significance.png")
    check_console(browser)

    # the downloaded snapshot keeps it, with its tooltip
    browser.find_element(By.ID, "snapshot").click()
    WebDriverWait(browser, 15).until(lambda d: attr(d, "body", "data-snapshot"))
    file = browser.downloads / attr(browser, "body", "data-snapshot")
    WebDriverWait(browser, 10).until(lambda d: file.is_file() and file.stat().st_size > 0)
    open_page(browser, file)
    check_console(browser)
    assert "explanation 1" in browser.find_element(By.CSS_SELECTOR, ".sel").text
    expect(first, browser.find_element(By.CSS_SELECTOR, SIG_BADGE))
    shot(browser, tmp_path, "significance_snapshot.png")

    # with a seed twin: the twin null, calibrated for any pair, gives verdicts
    (tmp_path / "twin").mkdir()
    B = np.load(tmp_path / "sig" / "B.npy")
    np.save(tmp_path / "twin" / "Bt.npy",
            (B + 0.05 * np.random.default_rng(2).normal(size=B.shape)).astype(np.float32))
    exps = open_comparison(browser, significance_comparison(
        tmp_path / "twin", extra=["--control-b", str(tmp_path / "twin" / "Bt.npy")]))
    browser.find_element(By.ID, "dir-b").click()
    q = exps["b_over_a"]["significance"]
    assert q["calibrated"] is True
    assert f"{q['n_significant']} of 3 significant at α = " in browser.find_element(
        By.ID, "exp-summary").text
    assert browser.find_element(By.ID, "sig-standing").text.startswith(
        "Significance: null = twin null")
    for item, e in zip(browser.find_elements(By.CSS_SELECTOR, "#explanations .exp"),
                       exps["b_over_a"]["explanations"]):
        expect(e, item.find_element(By.CSS_SELECTOR, SIG_BADGE))
        assert e["significance"]["badge"]["text"] in ("significant", "not significant")
    check_console(browser)

    # without --significance: no badge anywhere (not an empty one)
    plain = significance_comparison(tmp_path / "plain", significance=False)
    build_explorer(plain, embedding="pca", progress=False)
    open_page(browser, plain / "explore.html")
    check_console(browser)
    assert browser.find_elements(By.CSS_SELECTOR, "#explanations .exp")
    browser.find_element(By.CSS_SELECTOR, "#explanations .exp").click()
    assert not browser.find_elements(By.CSS_SELECTOR, SIG_BADGE)
    assert "FWER" not in browser.find_element(By.TAG_NAME, "body").text
    check_console(browser)


def test_named_groups_listed_and_selectable(at_1400, tmp_path):
    """A run with --test-classes / --test-group lists the named groups under each
    direction's explanations with their p and Holm p; a click selects the group's images
    (the selection panel: its size, how it was made, its grid); Escape clears it."""
    browser = at_1400
    dirs = open_comparison(browser, named_groups_comparison(tmp_path / "named"))

    def p_text(p):      # as the page writes a p-value
        return "< 0.001" if p < 0.001 else str(int(p)) if float(p).is_integer() else f"{p:.3f}"
    for d, button in (("a_over_b", "dir-a"), ("b_over_a", "dir-b")):
        browser.find_element(By.ID, button).click()
        items = browser.find_elements(By.CSS_SELECTOR, "#named-groups .named-group")
        groups = dirs[d]["named_groups"]["groups"]
        assert [i.get_attribute("data-name") for i in items] == ["0", "last"]
        assert len(browser.find_elements(By.CSS_SELECTOR, "#explanations .exp")) == 3
        for item, g in zip(items, groups):
            badge = item.find_element(By.CSS_SELECTOR, SIG_BADGE)
            # the field null is not calibrated for named groups: no verdict, and why
            assert g["significant"] is None and "uncal" in badge.get_attribute("class")
            assert badge.text == (f"no verdict (not calibrated), p {p_text(g['p_value'])}, "
                                  f"Holm {p_text(g['p_value_holm'])}")
            assert "seed twins" in badge.get_attribute("title")
            assert f"{g['size']} images" in item.text
        assert "6 null pairs (null: field null)" in browser.find_element(
            By.ID, "named-groups").text
    # B's planted cluster (class 0, images 0..19) tested in b_over_a: click selects it
    items[0].click()
    WebDriverWait(browser, 5).until(lambda d: group_size(d) == 20)
    assert "named group 0" in browser.find_element(By.ID, "group-title").text
    shown = browser.find_elements(By.CSS_SELECTOR, "#group-grid .gi")
    assert len(shown) == 20
    page_shot(browser, tmp_path, "explorer_named_groups.png")
    check_console(browser)
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    WebDriverWait(browser, 5).until(lambda d: group_size(d) == 0)
    check_console(browser)


# The points of a plot inside a box / polygon of page pixels (what plotly's selection holds).
INSIDE = """
const [plotId, poly] = arguments;
const div = document.getElementById(plotId);
const box = div.getBoundingClientRect(), xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis;
function inside(x, y) {
  let c = false;
  for (let i = 0, j = poly.length - 1; i < poly.length; j = i++) {
    const [xi, yi] = poly[i], [xj, yj] = poly[j];
    if (((yi > y) !== (yj > y)) && (x < (xj - xi) * (y - yi) / (yj - yi) + xi)) c = !c;
  }
  return c;
}
const out = [];
div.data.forEach(function (tr) {
  if (tr.visible === false) return;
  (tr.customdata || []).forEach(function (idx, j) {
    const x = box.left + xa._offset + xa.l2p(tr.x[j]), y = box.top + ya._offset + ya.l2p(tr.y[j]);
    if (inside(x, y)) out.push(idx);
  });
});
return out.sort((a, b) => a - b);
"""


def drag_path(driver, points):
    """Press at the first point, move through the others, release at the last."""
    ActionChains(driver).move_to_element_with_offset(driver.find_element(By.TAG_NAME, "body"),
                                                     0, 0).perform()
    act = ActionChains(driver, duration=20)
    act.w3c_actions.pointer_action.move_to_location(*map(int, points[0]))
    act.w3c_actions.pointer_action.pointer_down()
    for x, y in points[1:]:
        act.w3c_actions.pointer_action.move_to_location(int(x), int(y))
    act.w3c_actions.pointer_action.pointer_up()
    act.perform()


def group_size(driver):
    return int(driver.find_element(By.TAG_NAME, "body").get_attribute("data-group-size") or 0)


def test_box_and_lasso_selection_to_a_grid(at_1400, page, tmp_path):
    """Box and lasso on a map: the selection's images as a grid, its class make-up, its
    place in the other map and RDX's mean affinity within it in both directions (checked
    against RDX's own saved graph); the snapshot keeps the selection and the maps."""
    browser = at_1400
    path, data = page
    p = data["pairs"][0]
    labels = np.asarray(data["labels"])
    open_page(browser, path)
    assert group_size(browser) == 0
    browser.find_element(By.CSS_SELECTOR, "#drag button[data-value=select]").click()
    assert browser.execute_script("return document.getElementById('plot-a').layout.dragmode") \
        == "select"
    box = browser.find_element(By.ID, "plot-a").rect
    x0, y0 = int(box["x"] + 0.15 * box["width"]), int(box["y"] + 0.2 * box["height"])
    x1, y1 = int(box["x"] + 0.6 * box["width"]), int(box["y"] + 0.75 * box["height"])

    def inside(m):      # the box grown (m > 0) or shrunk (m < 0) by m pixels
        return browser.execute_script(INSIDE, "plot-a", [[x0 - m, y0 - m], [x1 + m, y0 - m],
                                                         [x1 + m, y1 + m], [x0 - m, y1 + m]])
    sure, maybe = inside(-2), inside(2)     # a point on the edge may go either way
    assert 5 <= len(sure) and len(maybe) < data["n"]
    drag_path(browser, [(x0, y0), ((x0 + x1) // 2, (y0 + y1) // 2), (x1, y1)])
    WebDriverWait(browser, 5).until(lambda d: group_size(d) > 0)
    want = [int(e.get_attribute("data-idx")) for e in browser.find_elements(
        By.CSS_SELECTOR, "#group-grid .gi")]
    assert set(sure) <= set(want) <= set(maybe) and want == sorted(want)
    assert group_size(browser) == len(want)
    assert "box in A's map" in browser.find_element(By.ID, "group-title").text
    # class make-up: counts per class, largest first
    rows = browser.find_elements(By.CSS_SELECTOR, "#group-makeup tr")[1:]
    counts = sorted(((int((labels[want] == c).sum()), data["class_names"][c])
                     for c in set(labels[want].tolist())), key=lambda t: -t[0])
    assert [(int(r.find_elements(By.TAG_NAME, "td")[1].text), r.find_elements(
        By.TAG_NAME, "td")[0].text.strip()) for r in rows] == counts
    # in the other map: the group is marked there too
    ov = "return document.getElementById(arguments[0]).data[0].x.length"
    assert browser.execute_script(ov, "plot-b-ov") == browser.execute_script(ov, "plot-a-ov") \
        == len(want)
    # RDX's mean affinity of the group, A over B and B over A, from the saved graph
    with np.load(path.parent / ToyRun.name_of("rdx") / "graphs.npz") as z:
        D = z["diff_a_over_b"].astype(np.float64)
    beta = p["graph"]["beta"]
    G = np.ix_(want, want)
    expect = {"a_over_b": np.exp(-beta * D[G]).mean(), "b_over_a": np.exp(beta * D[G]).mean()}
    for d, v in expect.items():
        shown = browser.find_element(By.CSS_SELECTOR, f"#group-affinity tr[data-dir={d}] td")
        assert float(shown.text) == pytest.approx(v, rel=0.03)
    # a click on the grid steps through the selection
    browser.find_elements(By.CSS_SELECTOR, "#group-grid .gi")[1].click()
    modal = browser.find_element(By.ID, "modal")
    assert int(modal.get_attribute("data-idx")) == want[1]
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_RIGHT)
    assert int(modal.get_attribute("data-idx")) == want[2 % len(want)]
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    page_shot(browser, tmp_path, "explorer_selection.png")
    check_console(browser)

    # the snapshot keeps the selection (grid, make-up, affinities) and both maps
    browser.find_element(By.ID, "group-snapshot").click()
    WebDriverWait(browser, 15).until(lambda d: d.find_element(By.TAG_NAME, "body")
                                     .get_attribute("data-snapshot"))
    file = browser.downloads / attr(browser, "body", "data-snapshot")
    WebDriverWait(browser, 10).until(lambda d: file.is_file() and file.stat().st_size > 0)
    open_page(browser, file)
    check_console(browser)
    page_shot(browser, tmp_path, "snapshot.png")
    assert [int(e.get_attribute("data-idx")) for e in browser.find_elements(
        By.CSS_SELECTOR, ".selection .gi")] == want
    maps = browser.find_elements(By.CSS_SELECTOR, "img.map")
    assert len(maps) == 2 and all(m.get_attribute("src").startswith("data:image/png")
                                  and m.get_property("naturalWidth") > 100 for m in maps)
    assert "Mean affinity within the group" in browser.find_element(By.CSS_SELECTOR,
                                                                    ".selection").text
    browser.find_elements(By.CSS_SELECTOR, ".selection .gi")[0].click()
    assert int(browser.find_element(By.ID, "modal").get_attribute("data-idx")) == want[0]

    # lasso in B's map: a triangle
    open_page(browser, path)
    browser.find_element(By.CSS_SELECTOR, "#drag button[data-value=lasso]").click()
    box = browser.find_element(By.ID, "plot-b").rect
    tri = [(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
           for fx, fy in ((0.1, 0.15), (0.9, 0.3), (0.3, 0.9))]
    want = browser.execute_script(INSIDE, "plot-b", [list(t) for t in tri])
    assert len(want) >= 3
    path_pts = []
    for a, b in zip(tri, tri[1:] + tri[:1]):
        path_pts += [(a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)
                     for t in np.linspace(0, 1, 8, endpoint=False)]
    drag_path(browser, path_pts + [tri[0]])
    WebDriverWait(browser, 5).until(lambda d: group_size(d) > 0)
    got = [int(e.get_attribute("data-idx")) for e in browser.find_elements(
        By.CSS_SELECTOR, "#group-grid .gi")]
    # the drawn outline passes through sampled points: allow a point on its edge either way
    assert len(set(got) ^ set(want)) <= 2 and len(got) >= 3
    assert "lasso in B's map" in browser.find_element(By.ID, "group-title").text
    page_shot(browser, tmp_path, "explorer_lasso.png")
    browser.find_element(By.ID, "group-clear").click()
    assert group_size(browser) == 0
    assert browser.execute_script(ov, "plot-a-ov") == 0
    check_console(browser)


def test_neighbour_tables_fit_at_1400_px(at_1400, page):
    """At 1400×900 the three neighbour tables need no sideways scrolling: the k neighbours
    are laid out over as many tables as the panel's width needs, in order."""
    browser = at_1400
    path, data = page
    nearest_a = decode(data["pairs"][0]["groups"]["a"]["idx"])
    open_page(browser, path)
    fits = browser.execute_script(
        "return Array.from(document.querySelectorAll('#selected-panel .group')).map("
        "g => [g.scrollWidth, g.clientWidth, g.querySelector('.gscroll').scrollWidth, "
        "g.querySelector('.gscroll').clientWidth])")
    assert len(fits) == 3
    for sw, cw, tsw, tcw in fits:
        assert sw <= cw and tsw <= tcw, fits
    assert browser.execute_script("return document.querySelector('aside.right').scrollWidth"
                                  " <= document.querySelector('aside.right').clientWidth")
    sel = selected(browser)
    shown = [int(e.get_attribute("data-idx")) for e in browser.find_elements(
        By.CSS_SELECTOR, '.group[data-group="a"] td.thumb [data-idx]')]
    assert shown == nearest_a[sel].tolist()
    check_console(browser)


def test_page_says_which_layout_its_maps_are(browser, page):
    """The maps' layout is named in view, under the legend, from the page's data."""
    path, data = page
    open_page(browser, path)
    shown = browser.find_element(By.ID, "map-method").text
    assert shown == "Maps: " + data["pairs"][0]["embedding"]["label"] + "."
    assert "principal components" in shown          # this page's maps are PCA
