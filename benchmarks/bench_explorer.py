"""Build time, progress and first render of the explorer page, as a user meets them.

For a finished comparison folder (``rdx run`` output, or a folder of layer pairs), builds
``explore.html`` in a whole process (``python -m rdx explore DIR --out FILE``), ``--builds``
times idle and ``--builds`` times while ``--load`` busy processes started by this script
compete for the CPUs (``bench_core.competing_load``, one core each), each build into a fresh
folder (no cached maps). For each build it also records the longest silence on the
command's output (the progress lines and bars). Then it opens the page from ``file://`` in
a fresh headless Chromium (Selenium + chromedriver) ``--repeat`` times and reads the time
from navigation start to the page's ``data-ready`` mark (both maps drawn, the neighbour view
filled), plus the page's own marks (data parsed). The yardstick, in the same browser runs:
a page holding only the same inlined plotly.js and one empty plot — the floor any
plotly-based page pays.

Printed: the machine and the CPU's SIMD level (``bench_core.header_line``); whole-process
build seconds idle and under load (median, min–max over the builds) next to the targets;
the longest silence; the build's parts (the page's ``build.parts``: reading the inputs, the
2-D maps, the rest of the pairs, the thumbnails); page size and its parts; first render
and the yardstick's. Targets (issue 46): a 1.5k-image comparison built in <= 20 s on 2
idle cores and <= 2.5× that under two busy processes, progress at least every 5 s, six
layer pairs <= 2 min, page usable <= 3 s after load; page <= 15 MB.

Usage::

    .venv/bin/python benchmarks/bench_explorer.py outputs/<experiment>/<comparison>
    .venv/bin/python benchmarks/bench_explorer.py DIR --embedding aligned_umap --builds 2
    .venv/bin/python benchmarks/bench_explorer.py DIR --load 0 --repeat 5
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: targets of issue 46: idle build (1.5k images, one pair), under-load ratio, progress gap,
#: six layer pairs, first render
TARGET_BUILD_S = 20.0
TARGET_LOAD_RATIO = 2.5
TARGET_SILENCE_S = 5.0
TARGET_SIX_PAIRS_S = 120.0
TARGET_READY_MS = 3000.0


def timed_build(comparison_dir: Path, page: Path, embedding: str) -> tuple[float, float]:
    """Whole-process seconds of ``rdx explore`` and the longest silence on its output
    (stdout and stderr, from start to the first output, between outputs, to exit)."""
    import os

    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rdx", "explore", str(comparison_dir),
                             "--out", str(page), "--embedding", embedding],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    last, gap = t, 0.0
    tail = b""
    while True:
        chunk = os.read(proc.stdout.fileno(), 65536)
        now = time.perf_counter()
        if not chunk:
            break
        gap, last = max(gap, now - last), now
        tail = (tail + chunk)[-4000:]
    rc = proc.wait()
    end = time.perf_counter()
    if rc != 0:
        raise SystemExit(f"rdx explore failed ({rc}):\n{tail.decode(errors='replace')}")
    return end - t, max(gap, end - last)


def spread(values: list[float]) -> str:
    """``12.3 s (11.9–12.8, 3 builds)``."""
    if len(values) == 1:
        return f"{values[0]:.1f} s (1 build)"
    return (f"{statistics.median(values):.1f} s ({min(values):.1f}–{max(values):.1f}, "
            f"{len(values)} builds)")


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
    from bench_core import competing_load, header_line, load_description

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("comparison_dir", type=Path)
    ap.add_argument("--embedding", default="auto")
    ap.add_argument("--repeat", type=int, default=3, help="cold browser runs (default 3)")
    ap.add_argument("--builds", type=int, default=3,
                    help="whole-process builds idle and under load each (default 3)")
    ap.add_argument("--load", type=int, default=2,
                    help="busy processes during the loaded builds (default 2; 0: idle only)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    print(header_line("cpu"))
    times: dict[int, list[float]] = {}
    silences: list[float] = []
    page = tmp / "explore.html"
    for load in sorted({0, max(0, args.load)}):
        with competing_load(load):
            for b in range(max(1, args.builds)):
                out = tmp / f"build_{load}_{b}"
                out.mkdir()
                page = out / "explore.html"          # a fresh folder: no cached maps
                seconds, silence = timed_build(args.comparison_dir, page, args.embedding)
                times.setdefault(load, []).append(seconds)
                silences.append(silence)
    text = page.read_text()
    data = json.loads(re.search(r'id="rdx-data">(.*?)</script>', text, re.S).group(1))
    n_pairs = len(data["pairs"])
    size = len(text.encode())
    from rdx.explorer.page import plotly_js
    lib = len(plotly_js().encode())
    thumbs = sum(len(u) for u in data["thumbs"] or [])
    ours = first_render_ms(page, args.repeat)
    yard = first_render_ms(yardstick_page(tmp / "yardstick.html"), args.repeat)
    med = statistics.median(r["ready"] for r in ours)
    ymed = statistics.median(r["ready"] for r in yard)
    parsed = statistics.median(r.get("rdx-data-parsed", float("nan")) for r in ours)
    methods = sorted({p["embedding"]["method"] for p in data["pairs"]})
    print(f"n = {data['n']}, {n_pairs} pair(s), maps: {', '.join(methods)} "
          f"(--embedding {args.embedding}), thumbnails "
          f"{data['thumb_info'] and data['thumb_info']['box']} px")
    idle = statistics.median(times[0])
    target = TARGET_SIX_PAIRS_S if n_pairs >= 6 else TARGET_BUILD_S
    print(f"build idle (whole process): {spread(times[0])} — target <= {target:.0f} s "
          f"({'six layer pairs' if n_pairs >= 6 else '1.5k images, one pair'})")
    if args.load > 0:
        loaded = statistics.median(times[args.load])
        print(f"build under load ({load_description(args.load, 'python')}): "
              f"{spread(times[args.load])}; {loaded / idle:.1f}× idle — target <= "
              f"{TARGET_LOAD_RATIO}× ({TARGET_LOAD_RATIO * target:.0f} s)")
    print(f"longest silence on the build's output: {max(silences):.1f} s "
          f"(target <= {TARGET_SILENCE_S:.0f} s)")
    parts = data["build"].get("parts") or {}
    print("parts of the last build (in-process s): "
          + ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
          + f"; total {data['build'].get('seconds', float('nan')):.1f} "
          "(the rest of the whole process: Python and rdx's imports, writing the page)")
    print(f"page size: {size / 1e6:.2f} MB (target <= 15 MB) — plotly.js {lib / 1e6:.2f} MB, "
          f"thumbnails {thumbs / 1e6:.2f} MB, rest {(size - lib - thumbs) / 1e6:.2f} MB")
    print(f"first render (median of {args.repeat}, cold browser): {med:.0f} ms "
          f"(target <= {TARGET_READY_MS:.0f} ms); data parsed at {parsed:.0f} ms; "
          f"runs {', '.join(str(round(r['ready'])) for r in ours)} ms")
    print(f"yardstick (plotly.js + one empty plot): {ymed:.0f} ms; ratio {med / ymed:.2f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
