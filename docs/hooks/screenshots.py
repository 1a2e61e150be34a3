"""The quickstart's screenshot and figures, regenerated from the current code.

Runs ``bash quickstart.sh`` as a user does (its checkpoints trained once and kept in
``outputs/cache/docs_screenshots/checkpoints/``; its outputs written afresh), then:

* opens the comparison's explorer (``early_vs_final/explore.html``) from ``file://`` in
  headless Chromium at 1400×900, as it opens (the top-ranked image selected, the
  explanations' grid images marked), and saves the page as ``docs/explorer.png`` (a
  128-colour palette PNG: the README's picture);
* records what the run printed about itself in ``benchmarks/results/quickstart.json``: the
  two checkpoints' train and test accuracy, the images compared, each direction's BSR and
  explanation sizes, the seconds the whole quickstart took, the machine (CPUs, SIMD level)
  and its load average when the run started, so the README's figures are checked against
  it (``docs/hooks/figures.py``).

As a script (minutes: trains two ConvNets the first time, then runs every method)::

    .venv/bin/python docs/hooks/screenshots.py

As a docs hook it only runs when asked, because it takes minutes:
``RDX_DOCS_SCREENSHOTS=1 .venv/bin/mkdocs build --strict`` regenerates both files before
the site is built (without the variable the build uses the committed ones).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "outputs" / "cache" / "docs_screenshots"
SHOT = ROOT / "docs" / "explorer.png"
RECORD = ROOT / "benchmarks" / "results" / "quickstart.json"
SIZE = (1400, 900)


def run_quickstart(work: Path) -> tuple[Path, float]:
    """``bash quickstart.sh`` into ``work``; the comparison folder and the seconds it took."""
    out = work / "outputs"
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "QUICKSTART_OUT": str(out),
           "QUICKSTART_CHECKPOINTS": str(work / "checkpoints")}
    start = time.perf_counter()
    subprocess.run(["bash", str(ROOT / "quickstart.sh")], cwd=ROOT, env=env, check=True)
    seconds = time.perf_counter() - start
    found = sorted(out.glob("quickstart_*/early_vs_final"))
    if not found:
        raise SystemExit(f"quickstart.sh wrote no quickstart_*/early_vs_final under {out}")
    return found[0], seconds


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = shutil.which("chromium") or shutil.which("google-chrome")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--window-size={SIZE[0]},{SIZE[1]}",
                f"--user-data-dir={tempfile.mkdtemp(prefix='rdx-shots-')}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    # the viewport, not the window, is 1400×900 (as the browser tests' screenshots)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": SIZE[0], "height": SIZE[1], "deviceScaleFactor": 1,
                            "mobile": False})
    return driver


def shoot_explorer(comparison: Path, dest: Path) -> None:
    """The explorer as it opens (the top-ranked image of the strongest method selected), as
    a PNG."""
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = comparison / "explore.html"
    if not page.is_file():
        raise SystemExit(f"the quickstart wrote no explorer ({page} is missing; its "
                         "warnings above say why): no screenshot taken")
    driver = _browser()
    try:
        driver.get(page.as_uri())
        WebDriverWait(driver, 120).until(
            lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
        # as it opens: the top-ranked image selected, its neighbours listed and the
        # explanations' grid images marked in both maps
        time.sleep(1.0)   # plotly's transitions
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        if errors:
            raise SystemExit("the explorer logged console errors:\n" + "\n".join(errors))
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "shot.png"
            driver.save_screenshot(str(raw))
            with Image.open(raw) as im:
                im.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(
                    dest, optimize=True)
    finally:
        driver.quit()


def _checkpoint_figures(path: Path) -> dict:
    """What ``rdx train`` recorded beside a checkpoint (its ``.json`` sidecar)."""
    meta = json.loads(path.with_name(path.name + ".json").read_text())
    return {"checkpoint": path.name, "epoch": meta.get("epoch"), "step": meta.get("step"),
            "train_accuracy": meta.get("train_accuracy"),
            "test_accuracy": meta.get("test_accuracy"),
            "torch_simd": (meta.get("versions") or {}).get("torch_simd")}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def quickstart_figures(comparison: Path, seconds: float, load: tuple[float, ...]) -> dict:
    """What the run recorded about itself, in one record."""
    import rdx
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_core import header_line

    import yaml

    experiment = comparison.parent.name                      # quickstart_fashion / _digits
    config = yaml.safe_load((ROOT / "configs" / f"{experiment}.yaml").read_text())
    record = {"written_by": "docs/hooks/screenshots.py (bash quickstart.sh)",
              "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "rdx": rdx.__version__, "machine": header_line("cpu"),
              "cpu": _cpu_name(), "load_average_at_start": [round(x, 2) for x in load],
              "quickstart_s": round(seconds, 1), "experiment": experiment,
              "models": {}, "methods": {}}
    checkpoints = comparison.parents[2] / "checkpoints"
    for side, rep in config["base"]["representations"].items():
        path = checkpoints / Path(rep["checkpoint"]).relative_to("checkpoints")
        record["models"][side] = _checkpoint_figures(path)
    for path in sorted(comparison.glob("*/explanations.json")):
        doc = json.loads(path.read_text())
        entry = {"method": doc.get("method"), "n_images": doc.get("n_images"),
                 "bsr": doc.get("bsr")}
        for direction, d in (doc.get("directions") or {}).items():
            exps = d.get("explanations", [])
            if exps and all("members" in e for e in exps):   # not every method has members
                entry.setdefault("sizes", {})[direction] = [len(e["members"]) for e in exps]
        record["methods"][path.parent.name] = entry
    return record


def regenerate(work: Path = WORK, shot: Path = SHOT, record: Path = RECORD) -> dict:
    load = os.getloadavg()
    comparison, seconds = run_quickstart(work)
    shoot_explorer(comparison, shot)
    figures = quickstart_figures(comparison, seconds, load)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {shot.relative_to(ROOT)} and {record.relative_to(ROOT)} "
          f"(quickstart {seconds:.0f} s)")
    return figures


def on_pre_build(config, **kwargs):
    """Opt-in (minutes): ``RDX_DOCS_SCREENSHOTS=1`` regenerates before the site builds."""
    if os.environ.get("RDX_DOCS_SCREENSHOTS") == "1":
        regenerate()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=WORK,
                   help="where the quickstart's checkpoints and outputs go "
                        f"(default {WORK.relative_to(ROOT)})")
    args = p.parse_args(argv)
    regenerate(args.work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
