"""The explorer's class enrichment of a selection, in headless Chromium: the page's own
hypergeometric tail (log-gamma, Lanczos) against scipy's, Benjamini–Hochberg against
rdx.evaluation.enrichment's, and a box drawn around one class's points naming that class
as over-represented with its adjusted p-value.

Shares the browser helpers and the page of test_explorer_browser.py (skipped the same way
without chromium, chromedriver or selenium).
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import hypergeom

from rdx.evaluation.enrichment import benjamini_hochberg
from test_explorer_browser import (at_1400, browser, check_console,  # noqa: F401
                                   drag_path, group_size, open_page, page, pytestmark)

from selenium.webdriver.common.by import By  # noqa: E402  (importorskip'd above)
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

#: (N images, K of the class, n selected, k of the class selected): small and large, tails
#: near 1, moderate and far below double precision's smallest normal (1e-308 is not reached)
CASES = [(100, 30, 20, 12), (50, 10, 5, 1), (20, 5, 10, 5), (1797, 180, 200, 60),
         (1797, 180, 200, 21), (5000, 2500, 2500, 1300), (10000, 1000, 500, 120),
         (60000, 6000, 3000, 400), (60000, 6000, 3000, 290), (300, 40, 60, 25),
         (10000, 1000, 500, 300), (1797, 180, 200, 150), (50, 10, 5, 0)]

# The screen position of every point drawn in a plot: [image index, x, y] in CSS pixels.
POINTS = """
const div = document.getElementById(arguments[0]);
const box = div.getBoundingClientRect(), xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis;
const out = [];
div.data.forEach(function (tr) {
  if (tr.visible === false) return;
  (tr.customdata || []).forEach(function (idx, j) {
    out.push([idx, box.left + xa._offset + xa.l2p(tr.x[j]), box.top + ya._offset + ya.l2p(tr.y[j])]);
  });
});
return out;
"""


def scipy_enrichment(labels, members):
    """Per class (sorted): the one-sided hypergeometric p of over-representation, and
    Benjamini–Hochberg over the classes, by scipy and rdx.evaluation.enrichment."""
    inside = np.zeros(len(labels), bool)
    inside[members] = True
    classes = np.unique(labels)
    p = np.array([hypergeom.sf(int((labels[inside] == c).sum()) - 1, len(labels),
                               int((labels == c).sum()), int(inside.sum())) for c in classes])
    return classes, p, benjamini_hochberg(p)


def test_hypergeometric_tail_and_correction_match_scipy(browser, page):  # noqa: F811
    """hypergeomSf(N, K, n, k) = scipy.stats.hypergeom.sf(k − 1, N, K, n) to 1e-9 relative
    (tails from 1 down to ~1e-182); the page's Benjamini–Hochberg equals the Python one."""
    path, _ = page
    open_page(browser, path)
    got = browser.execute_script(
        "return arguments[0].map(c => window.RDXStats.hypergeomSf(c[0], c[1], c[2], c[3]))",
        [list(c) for c in CASES])
    want = [hypergeom.sf(k - 1, N, K, n) for N, K, n, k in CASES]
    assert min(want) < 1e-100 and max(want) == 1.0     # the cases span the range
    for case, g, w in zip(CASES, got, want):
        assert g == pytest.approx(w, rel=1e-9, abs=0), case
    # a wrong tail (P(X > k) instead of P(X ≥ k)) would fail here
    assert got[0] != pytest.approx(hypergeom.sf(12, 100, 30, 20), rel=1e-3)
    p = [0.01, 0.04, 0.03, 0.2, 0.001, 0.04, 1.0]
    assert browser.execute_script("return window.RDXStats.benjaminiHochberg(arguments[0])", p) \
        == pytest.approx(benjamini_hochberg(p).tolist(), rel=1e-12)
    check_console(browser)


def test_box_around_one_class_names_it_over_represented(at_1400, page):  # noqa: F811
    """A box drawn in A's map around the densest part of one class's points: the panel's
    description names that class first as over-represented, with its p_adj in Python's
    words; every class's p_adj in the table equals scipy's hypergeometric tail, Benjamini–
    Hochberg adjusted; the note names the test and the correction."""
    driver = at_1400
    path, data = page
    labels = np.asarray(data["labels"])
    open_page(driver, path)
    driver.find_element(By.CSS_SELECTOR, "#drag button[data-value=select]").click()
    pts = np.asarray(driver.execute_script(POINTS, "plot-a"), dtype=np.float64)
    idx, xy = pts[:, 0].astype(int), pts[:, 1:]
    lab = labels[idx]
    rect = driver.find_element(By.ID, "plot-a").rect
    best = None     # (count, class, centre, half-size): the largest box at least 85 % one class
    for c in np.unique(lab):
        centre = np.median(xy[lab == c], axis=0)
        for h in range(6, 120, 3):
            lo, hi = centre - h, centre + h
            if lo[0] < rect["x"] + 5 or lo[1] < rect["y"] + 5 or \
                    hi[0] > rect["x"] + rect["width"] - 5 or hi[1] > rect["y"] + rect["height"] - 5:
                break
            inside = np.all((xy > lo + 2) & (xy < hi - 2), axis=1)
            if inside.sum() >= 8 and (lab[inside] == c).mean() >= 0.85 and \
                    (best is None or inside.sum() > best[0]):
                best = (int(inside.sum()), int(c), centre, h)
    assert best is not None, "no region of the map is dominated by one class"
    _, c, centre, h = best
    (x0, y0), (x1, y1) = centre - h, centre + h
    drag_path(driver, [(x0, y0), ((x0 + x1) / 2, (y0 + y1) / 2), (x1, y1)])
    WebDriverWait(driver, 5).until(lambda d: group_size(d) > 0)
    members = sorted(int(e.get_attribute("data-idx")) for e in driver.find_elements(
        By.CSS_SELECTOR, "#group-grid .gi"))
    assert len(members) == group_size(driver) and (labels[members] == c).mean() >= 0.8

    classes, p, p_adj = scipy_enrichment(labels, members)
    rows = driver.find_elements(By.CSS_SELECTOR, "#group-enrichment-table tr[data-label]")
    shown = {int(r.get_attribute("data-label")): (float(r.get_attribute("data-p-adj")),
                                                  r.get_attribute("data-significant") == "1")
             for r in rows}
    assert sorted(shown) == classes.tolist()
    for cl, want in zip(classes.tolist(), p_adj):
        assert shown[cl][0] == pytest.approx(want, rel=1e-9, abs=1e-300), cl
    # the class the box was drawn around: significant and listed first
    assert shown[c][1] and int(rows[0].get_attribute("data-label")) == c
    name = str(data["class_names"][c]) if data.get("class_names") else str(c)
    word = f"class {name}" if name.lstrip("-").replace(".", "", 1).isdigit() else name
    share_in = f"{100 * (labels[members] == c).mean():.0f}"     # as finding_text writes it
    rest = np.ones(len(labels), bool)
    rest[members] = False
    share_rest = f"{100 * (labels[rest] == c).mean():.0f}"
    pa = p_adj[classes.tolist().index(c)]
    assert pa < 1e-3
    p_words = f"p_adj < 1e-{int(np.floor(-np.log10(pa)))}"
    first = driver.find_element(By.ID, "group-description").text.split("; ")[0]
    assert first == f"{share_in} % {word} (rest {share_rest} %) ({p_words})"
    note = driver.find_element(By.ID, "group-enrichment-note").text
    assert "hypergeometric" in note and "Benjamini" in note
    check_console(driver)

    # the snapshot keeps the description
    driver.find_element(By.ID, "group-snapshot").click()
    WebDriverWait(driver, 15).until(lambda d: d.find_element(By.TAG_NAME, "body")
                                    .get_attribute("data-snapshot"))
    file = driver.downloads / driver.find_element(By.TAG_NAME, "body").get_attribute(
        "data-snapshot")
    WebDriverWait(driver, 10).until(lambda d: file.is_file() and file.stat().st_size > 0)
    open_page(driver, file)
    assert first in driver.find_element(By.CSS_SELECTOR, ".selection").text
    check_console(driver)
