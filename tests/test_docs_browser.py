"""The built documentation site in headless Chromium, opened from disk as a reader would.

Every page makes no request beyond ``file:``/``data:``/``blob:`` (the requests are read
from Chrome's DevTools ``Network`` events in the performance log) and logs no console
error; the search box is there, and from ``file://`` it answers a query with results
(Material's ``offline`` plugin, with the iframe-worker shim that ``docs/hooks/offline.py``
installs from npm instead of the CDN the plugin names).

Shares the browser set-up of test_explorer_browser.py (skipped the same way without
chromium, chromedriver or selenium) and builds the site once (skipped without mkdocs).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_docs import skip_without_npm
from test_explorer_browser import CHROMIUM, DRIVER, pytestmark  # noqa: F401

from selenium import webdriver  # noqa: E402  (importorskip'd by the import above)
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOCAL = ("file:", "data:", "blob:", "about:")

pytestmark = [pytestmark, pytest.mark.slow]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """``mkdocs build --strict`` into a temporary folder (the gallery's runs are cached)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings")
    skip_without_npm()
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-d", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out


@pytest.fixture(scope="module")
def chrome(tmp_path_factory):
    """Chromium logging the console and the DevTools network events."""
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--window-size=1400,900",
                f"--user-data-dir={tmp_path_factory.mktemp('profile')}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(DRIVER))
    yield driver
    driver.quit()


def requests_since_last_call(driver) -> list[str]:
    """The URLs the page asked for since the last call (every ``Network.requestWillBeSent``
    event: documents, scripts, styles, images, fonts, fetches and workers)."""
    out = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            out.append(msg["params"]["request"]["url"])
    return out


def open_doc(driver, path: Path) -> None:
    driver.get(path.as_uri())
    # Material's bundle has run once the header's search is wired up
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
        and d.find_elements(By.CSS_SELECTOR, "input.md-search__input"))


def pages(site: Path) -> list[Path]:
    # 404.html is a web server's page: its links are absolute ("/assets/...") and it is
    # never opened from disk
    return [p for p in sorted(site.rglob("*.html")) if p.name != "404.html"]


def test_every_page_loads_from_disk_with_no_request_and_no_error(site, chrome):
    found = pages(site)
    assert len(found) >= 40, f"only {len(found)} pages built"
    bad = []
    chrome.get("about:blank")   # past the new-tab page Chromium opens with (chrome://)
    for page in found:
        requests_since_last_call(chrome)
        chrome.get_log("browser")
        open_doc(chrome, page)
        urls = requests_since_last_call(chrome)
        remote = [u for u in urls if not u.startswith(LOCAL)]
        errors = [e["message"] for e in chrome.get_log("browser") if e["level"] == "SEVERE"]
        if remote or errors:
            bad.append(f"{page.relative_to(site)}: requests {remote}, console {errors}")
        # the check sees the page's own requests (else an empty list proves nothing)
        assert any(u.endswith("iframe-worker-shim.js") for u in urls), (page, urls)
    assert not bad, "\n".join(bad)


def test_the_search_answers_from_disk(site, chrome):
    open_doc(chrome, site / "guide" / "similarity.html")
    box = chrome.find_element(By.CSS_SELECTOR, "input.md-search__input")
    # the search is in the header, not only behind a narrow-screen icon
    assert box.is_displayed()
    assert box.get_attribute("placeholder") == "Search"
    box.click()
    box.send_keys("CKA")
    items = WebDriverWait(chrome, 20).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item"))
    meta = chrome.find_element(By.CSS_SELECTOR, ".md-search-result__meta").text
    assert "matching" in meta.lower(), meta
    links = [a.get_attribute("href") for a in chrome.find_elements(
        By.CSS_SELECTOR, ".md-search-result__item a")]
    assert items and links
    assert all(h.startswith("file:") for h in links), links[:5]
    assert any("similarity.html" in h for h in links), links[:10]
    # each result is a page of the site on disk
    from urllib.parse import unquote, urlparse
    for href in links:
        assert Path(unquote(urlparse(href).path)).is_file(), href
    # a word on no page finds nothing (the results above are not the page's decoration)
    box.clear()
    box.send_keys("qqzzxxnotaword")
    WebDriverWait(chrome, 20).until(
        lambda d: "no matching" in d.find_element(
            By.CSS_SELECTOR, ".md-search-result__meta").text.lower())
    assert not chrome.find_elements(By.CSS_SELECTOR, ".md-search-result__item")
    errors = [e["message"] for e in chrome.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    assert not [u for u in requests_since_last_call(chrome) if not u.startswith(LOCAL)]
