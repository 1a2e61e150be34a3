"""Size and first-render time of the explorer page, as a user meets them.

For a finished comparison folder (``rdx run`` output), builds ``explore.html`` in a whole
process (``python -m rdx explore DIR --out FILE``), then opens it from ``file://`` in a fresh
headless Chromium (Selenium + chromedriver) ``--repeat`` times and reads the time from
navigation start to the page's ``data-ready`` mark (both maps drawn, the neighbour view
filled), plus the page's own marks (data parsed). The yardstick, in the same browser runs:
a page holding only the same inlined plotly.js and one empty plot — the floor any
plotly-based page pays. Printed: whole-process build seconds, page size (and its parts:
plotly.js, thumbnails, the rest), first render (median, cold browser each time), the
yardstick's, and their ratio. Targets: <= 15 MB and <= 2 s first render at n = 5000.

Usage::

    .venv/bin/python benchmarks/bench_explorer.py outputs/<experiment>/<comparison>
    .venv/bin/python benchmarks/bench_explorer.py DIR --embedding pca --repeat 5
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def first_render_ms(page: Path, repeat: int) -> list[dict]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    out = []
    for _ in range(repeat):
        opts = Options()
        opts.binary_location = shutil.which("chromium") or shutil.which("google-chrome")
        prof = tempfile.mkdtemp()
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1600,1000",
                  f"--user-data-dir={prof}"):
            opts.add_argument(a)
        d = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
        try:
            d.get("about:blank")            # browser start is not part of the page's time
            d.get(page.as_uri())
            WebDriverWait(d, 60).until(
                lambda x: x.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
            marks = d.execute_script(
                "return Object.fromEntries(performance.getEntriesByType('mark')"
                ".map(m => [m.name, m.startTime]))")
            out.append({"ready": float(d.find_element(By.TAG_NAME, "body")
                                       .get_attribute("data-ready")), **marks})
        finally:
            d.quit()
            shutil.rmtree(prof, ignore_errors=True)
    return out


def yardstick_page(path: Path) -> Path:
    from rdx.explorer.page import csp, plotly_js

    app = ("Plotly.newPlot('p', [], {}).then(function () {"
           "document.body.setAttribute('data-ready', String(Math.round(performance.now())));});")
    lib = plotly_js()
    path.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{csp(lib, app)}\">"
        f"<script>{lib}</script></head><body><div id='p' style='height:600px'></div>"
        f"<script>{app}</script></body></html>")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("comparison_dir", type=Path)
    ap.add_argument("--embedding", default="auto")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    page = tmp / "explore.html"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rdx", "explore", str(args.comparison_dir), "--out",
                    str(page), "--embedding", args.embedding, "--quiet"], check=True, cwd=REPO)
    build_s = time.perf_counter() - t
    text = page.read_text()
    data = json.loads(re.search(r'id="rdx-data">(.*?)</script>', text, re.S).group(1))
    size = len(text.encode())
    from rdx.explorer.page import plotly_js
    lib = len(plotly_js().encode())
    thumbs = sum(len(u) for u in data["thumbs"] or [])
    ours = first_render_ms(page, args.repeat)
    yard = first_render_ms(yardstick_page(tmp / "yardstick.html"), args.repeat)
    med = statistics.median(r["ready"] for r in ours)
    ymed = statistics.median(r["ready"] for r in yard)
    parsed = statistics.median(r.get("rdx-data-parsed", float("nan")) for r in ours)
    print(f"n = {data['n']}, {len(data['pairs'])} pair(s), "
          f"thumbnails {data['thumb_info'] and data['thumb_info']['box']} px")
    print(f"build (whole process, embedding={args.embedding}): {build_s:.1f} s")
    print(f"page size: {size / 1e6:.2f} MB (target <= 15 MB) — plotly.js {lib / 1e6:.2f} MB, "
          f"thumbnails {thumbs / 1e6:.2f} MB, rest {(size - lib - thumbs) / 1e6:.2f} MB")
    print(f"first render (median of {args.repeat}, cold browser): {med:.0f} ms "
          f"(target <= 2000 ms); data parsed at {parsed:.0f} ms")
    print(f"yardstick (plotly.js + one empty plot): {ymed:.0f} ms; ratio {med / ymed:.2f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
