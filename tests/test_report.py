"""The static HTML report: contents, self-containedness, escaping, and a real browser."""
import base64
import html
import io
import json
import os
import re
import shutil
import subprocess
import urllib.parse
from collections import Counter
from html.parser import HTMLParser

import numpy as np
import pytest
from PIL import Image

from conftest import MERGED, ODD_NAME, ToyRun
from rdx import RDXInputError
from rdx.report import write_comparison_report, write_experiment_report

GRID_METHODS = ToyRun.grid_methods(MERGED)


@pytest.fixture(scope="module")
def run(toy_run_module_copy):
    """The report of the shared run's first comparison (its description holds markup; the
    second comparison's name needs URL quoting)."""
    from rdx.evaluation.summary import summarize_comparison

    comp = toy_run_module_copy.comp(MERGED)
    summary = summarize_comparison(comp)
    report = write_comparison_report(comp, summary=summary)
    return {"comp": comp, "summary": summary, "report": report, "text": report.read_text(),
            "features": toy_run_module_copy.folder}


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _tags(text):
    p = _Tags()
    p.feed(text)
    return p.tags


def _embedded(text):
    """The bytes of every <img> (all must be base64 PNG data URIs)."""
    out = []
    for tag, a in _tags(text):
        if tag == "img":
            assert a["src"].startswith("data:image/png;base64,"), a["src"][:60]
            out.append(base64.b64decode(a["src"].split(",", 1)[1]))
    return out


def _row_cells(text, method, direction_label):
    table = text.split('<table class="scores">', 1)[1].split("</table>", 1)[0]
    for tr in re.findall(r"<tr>(.*?)</tr>", table):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", tr)
        if cells and f">{method}</a>" in cells[0] and cells[1] == direction_label:
            return cells
    raise AssertionError(f"no scores row for {method} {direction_label}")


def test_comparison_report_is_self_contained_and_complete(run):
    comp, text = run["comp"], run["text"]
    assert run["report"] == comp / "report.html"
    assert run["report"].stat().st_mode & 0o777 == 0o644     # readable by others: for sharing
    tags = _tags(text)
    # self-contained: no script, stylesheet link, frame or external reference of any kind
    assert not [t for t, _ in tags if t in ("script", "link", "iframe", "object", "embed")]
    for tag, a in tags:
        for key in ("src", "href"):
            if key in a:
                assert re.match(r"data:image/png;base64,|#|\.\./index\.html$", a[key]), a[key]
    assert "http://" not in text and "https://" not in text
    # every grid PNG the run saved is embedded byte for byte, plus one PCA overlay per direction
    grids = {p.read_bytes() for p in comp.glob("*/grids/*.png")}
    directions = [r for m in GRID_METHODS for r in json.loads(
        (comp / m / "explanations.json").read_text())["directions"].values()]
    assert len(grids) == sum(len(r["explanations"]) + 1 for r in directions)   # + summary strip
    embedded = _embedded(text)
    assert grids <= set(embedded)
    extra = [b for b in embedded if b not in grids]
    assert len(extra) == 2 and all(Image.open(io.BytesIO(b)).width > 100
                                   for b in extra)
    # the question: both representations, dataset and n; the description escaped, not markup
    # the features files as seen from the report's folder, not the machine's absolute path
    for name in ("A.npy", "B.npy"):
        assert os.path.relpath(run["features"] / name, comp) in text
        assert str(run["features"] / name) not in text
    assert "120 images of digits (train split, classes 3, 5, 8)" in text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
    assert "<script" not in text
    # scores: BSR of the saved explanations under each dissimilarity, with the chance interval
    rows = {(r["method"], r["direction"], r["dissimilarity"]): r for r in run["summary"]["rows"]}
    for method in GRID_METHODS:
        doc = json.loads((comp / method / "explanations.json").read_text())
        for direction, label in (("a_over_b", "A over B"), ("b_over_a", "B over A")):
            cells = _row_cells(text, method, label)
            assert cells[2] == str(len(doc["directions"][direction]["explanations"]))
            for cell, dis in zip(cells[3:6], ("rank", "max_normalized_euclidean",
                                              "local_scaling")):
                r = rows[(method, direction, dis)]
                assert f">{doc['scores'][dis][direction]['bsr']:.3f}</span>" in cell
                assert (f"chance {r['chance_bsr_mean']:.2f} [{r['chance_bsr_lo']:.2f}, "
                        f"{r['chance_bsr_hi']:.2f}]") in cell
            kd = rows[(method, direction, "rank")]
            assert f"{kd['known_difference_hits']}/{kd['known_difference_total']} hits" in cells[6]
            # B merges 3 and 5 (model b), so the difference should show as B over A
            assert ("expected direction" in cells[6]) == (direction == "b_over_a")
    # similarity scores and grid captions (class make-up computed here from images.json)
    cka = json.loads((comp / "cka" / "explanations.json").read_text())["info"]["similarity"]
    assert f"{cka['cka_debiased']:.3f}" in text
    labels = json.loads((comp / "images.json").read_text())["labels"]
    km = json.loads((comp / "kmeans" / "explanations.json").read_text())
    exp0 = km["directions"]["a_over_b"]["explanations"][0]
    shown = Counter(str(labels[i]) for i in exp0["images"]).most_common()
    whole = Counter(str(labels[i]) for i in exp0["members"]).most_common()
    # both make-ups, each saying what it counts: the grid's images and the whole cluster's
    # shares (its four most frequent classes)
    assert (f"grid ({len(exp0['images'])} images): "
            + ", ".join(f"{k} ×{v}" for k, v in shown)) in text
    n = len(exp0["members"])
    assert (f"whole cluster ({n} images): "
            + ", ".join(f"{100 * v / n:.0f} % {k}" for k, v in whole[:4])) in text
    # reproducibility: seed, parameters and versions
    versions = json.loads((comp / "run.json").read_text())["versions"]
    assert f"<td>{versions['numpy']}</td>" in text and "n_explanations" in text


def test_missing_or_broken_figures_become_notes(run, tmp_path, monkeypatch):
    from rdx.viz import pca_overlay

    comp = tmp_path / MERGED
    shutil.copytree(run["comp"], comp)
    (comp / "kmeans" / "grids" / "a_over_b_2.png").unlink()
    (comp / "kmeans" / "grids" / "b_over_a_1.png").write_bytes(b"not an image")
    truncated = (comp / "rdx" / "grids" / "a_over_b_1.png").read_bytes()[:200]
    (comp / "rdx" / "grids" / "a_over_b_1.png").write_bytes(truncated)

    def broken(*args, **kwargs):
        raise RuntimeError("no PCA today")

    monkeypatch.setattr(pca_overlay, "pca_overlay", broken)
    text = write_comparison_report(comp, summary=run["summary"]).read_text()
    assert "a_over_b_2.png was not found" in text
    assert "b_over_a_1.png could not be embedded" in text
    assert "a_over_b_1.png could not be embedded" in text
    assert text.count("could not be made: RuntimeError: no PCA today") == 2
    embedded = _embedded(text)
    assert all(b.startswith(b"\x89PNG") for b in embedded)
    assert len(embedded) == len(_embedded(run["text"])) - 3 - 2   # 3 grids, 2 PCA overlays


def test_weak_explanations_badges_wording_and_open_grids(run, tmp_path):
    comp = tmp_path / MERGED
    shutil.copytree(run["comp"], comp)
    doc = json.loads((comp / "rdx" / "explanations.json").read_text())
    for i, e in enumerate(doc["directions"]["a_over_b"]["explanations"]):
        e["low_affinity"] = i == 0            # exactly one weak explanation
    for e in doc["directions"]["b_over_a"]["explanations"]:
        e["low_affinity"] = False
    # written as the run store writes results: sealed with its own digest (an edit the
    # store did not make is refused as damage)
    from rdx.io import write_record
    # one grid unlike its cluster: the images shown are of a class its members lack, and
    # one explanation described (the enrichment's line)
    labels = json.loads((comp / "images.json").read_text())["labels"]
    unlike = doc["directions"]["b_over_a"]["explanations"][0]
    lead = Counter(labels[i] for i in unlike["members"]).most_common(1)[0][0]
    others = [i for i in range(len(labels)) if labels[i] != lead]
    unlike["images"] = others[:len(unlike["images"])]
    for e in doc["directions"]["b_over_a"]["explanations"]:
        e["description"] = "82 % planted; 2.1× brighter than the rest (p < 1e-4)"
    write_record(comp / "rdx" / "explanations.json", doc)
    text = write_comparison_report(comp, summary=run["summary"]).read_text()
    # the index shows the strongest explanation's description under its thumbnail
    index = write_experiment_report(tmp_path).read_text()
    assert index.count('<span class="description">82 % planted; 2.1× brighter') == 1
    rdx_part = text.split('id="method-rdx"', 1)[1].split("</section>", 1)[0]
    assert rdx_part.count('class="badge unlike"') == 1
    assert ('<span class="description">82 % planted; 2.1× brighter than the rest '
            "(p &lt; 1e-4)</span>") in rdx_part
    # a visible badge on the weak grid's caption, and a line saying how many are weak
    assert text.count('<span class="badge weak"') == 2
    assert f"1 of {len(doc['directions']['a_over_b']['explanations'])} explanations are weak" \
        in text
    assert text.count('<figure class="weak">') == 1
    # the individual grids are open: their make-up and badges are read without a click
    assert "individual grids" not in text
    for part in text.split("<details>")[1:]:
        assert "<figcaption>" not in part.split("</details>", 1)[0]
    # directions worded per method: RDX's differences, k-means's concepts of one model
    km_part = text.split('id="method-kmeans"', 1)[1].split("</section>", 1)[0]
    assert "model A holds tightly together and model B spreads apart" in rdx_part
    assert "concepts of model A alone" in km_part and "spreads apart" not in km_part
    # the PCA overlays: at page width, a click (a CSS-only checkbox) shows the full size
    pca = text.split('id="pca"', 1)[1]
    assert pca.count('<input type="checkbox" class="zoom"') == 2
    assert re.search(r'<label for="zoom-pca-a_over_b"[^>]*><img ', pca)


def test_experiment_index_links_every_comparison(run):
    exp = run["comp"].parent
    index = write_experiment_report(exp)
    assert index == exp / "index.html"
    text = index.read_text()
    hrefs = [a["href"] for t, a in _tags(text) if t == "a"]
    reports = [h for h in hrefs if h.endswith("/report.html")]
    assert {urllib.parse.unquote(h) for h in reports} == \
        {f"{MERGED}/report.html", f"{ODD_NAME}/report.html"}
    for h in hrefs:      # a thumbnail links to its method's section: a file#fragment
        assert (exp / urllib.parse.unquote(h.split("#")[0])).is_file(), h
    assert "analysis/summary.csv" in hrefs
    # the strongest explanation of each direction of each method, as a small thumbnail
    # linking to the method in the report (no explorer written here: no link to one)
    assert "explore.html" not in text
    thumbs = re.findall(r'<figure class="thumb"><a href="([^"]+)"', text)
    n_dirs = sum(len(json.loads((exp / c / m / "explanations.json").read_text())["directions"])
                 for c in (MERGED, ODD_NAME) for m in ToyRun.grid_methods(c))
    assert len(thumbs) == n_dirs
    assert f"{MERGED}/report.html#method-{ToyRun.name_of('rdx')}" in thumbs
    # headline numbers: rank BSR per method, "A over B / B over A", to two decimals; a column
    # per method of any comparison (ODD_NAME has k-means only)
    bsr_table = text.split("BSR (rank) by method", 1)[1].split("</table>", 1)[0]
    for comp in (MERGED, ODD_NAME):
        row = bsr_table.split(f">{html.escape(comp)}</a>", 1)[1].split("</tr>", 1)[0]
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        expect = []
        for m in GRID_METHODS:
            if m in ToyRun.grid_methods(comp):
                sc = json.loads((exp / comp / m / "explanations.json").read_text())["scores"]
                expect.append(f"{sc['rank']['a_over_b']['bsr']:.2f} / "
                              f"{sc['rank']['b_over_a']['bsr']:.2f}")
            else:
                expect.append("—")
        assert cells == expect
    # the comparison reports were rewritten with a link back to the index
    assert 'href="../index.html"' in (exp / ODD_NAME / "report.html").read_text()


def test_no_run_is_an_input_error(tmp_path):
    with pytest.raises(RDXInputError, match=r"no run found in .*rdx run --config"):
        write_comparison_report(tmp_path)
    with pytest.raises(RDXInputError, match=r"no run found in .*rdx run --config"):
        write_experiment_report(tmp_path)
    with pytest.raises(RDXInputError, match="is not a folder"):
        write_experiment_report(tmp_path / "nope")


# ------------------------------------------------------------------------- real browser

def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


# What the instrumented copy of the page does once everything has loaded: list the images
# that did not decode into the DOM (read back with --dump-dom), and log a sentinel so the
# test can tell that console messages really are captured.
CHECK = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (im) { return !(im.complete && im.naturalWidth > 0); })
                   .map(function (im) { return im.alt; });
  document.body.setAttribute('data-images', String(imgs.length));
  document.body.setAttribute('data-broken', JSON.stringify(broken));
  console.error('rdx-check-sentinel');
});
</script>"""


def _browse(binary, url, tmp_path, *args):
    cmd = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", *args, url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    console = [line for line in out.stderr.splitlines() if re.search(r":CONSOLE[(:]", line)]
    return out.stdout, console


@pytest.mark.skipif(_chromium() is None,
                    reason="no chromium binary (CI installs Debian's `chromium` in .ci/run)")
def test_report_loads_in_headless_chromium(run, tmp_path):
    binary, report = _chromium(), run["report"]
    n_img = sum(1 for t, _ in _tags(run["text"]) if t == "img")
    assert n_img > 10
    # 1. the page itself: no console message at all (it has no script, so any message is an
    #    error: a refused resource, a bad image), and a screenshot
    shot = tmp_path / "report.png"
    _, console = _browse(binary, report.as_uri(), tmp_path, f"--screenshot={shot}",
                         "--window-size=1280,2400")
    assert console == []
    with Image.open(shot) as im:
        assert im.size == (1280, 2400)
        assert np.asarray(im.convert("L")).std() > 10      # not a blank page
    # 2. an instrumented copy (CSP relaxed for the one check script) plus one deliberately
    #    broken image: the check must find exactly that one, every real image decoded
    text, n = re.subn(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">',
                      r'<meta http-equiv="Content-Security-Policy" content="\1; '
                      r'script-src &#x27;unsafe-inline&#x27;">', run["text"])
    assert n == 1
    text = text.replace("</body>", '<img alt="sentinel-broken" src="data:image/png;base64,AAAA">'
                        + CHECK + "</body>")
    check = tmp_path / "check.html"
    check.write_text(text)
    dom, console = _browse(binary, check.as_uri(), tmp_path, "--dump-dom")
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert f'data-images="{n_img + 1}"' in body
    broken = json.loads(re.search(r'data-broken="([^"]*)"', body).group(1).replace("&quot;", '"'))
    assert broken == ["sentinel-broken"]
    assert len(console) == 1 and "rdx-check-sentinel" in console[0]


def test_guided_run_says_how_to_read_bsr_below_chance(tmp_path, capsys):
    """Under guidance the console and the report explain BSR against chance (plain
    distances, random grids of all images); below chance, that it is no failure by itself
    and how to read the explanation instead."""
    from conftest import digit_features
    from rdx.cli import main
    from rdx.data import get_dataset
    from rdx.evaluation.summary import summarize_comparison
    from rdx.report.comparison import render_comparison

    idx, _, _ = digit_features(tmp_path)
    np.save(tmp_path / "y.npy", get_dataset("digits").labels[idx])
    out = tmp_path / "guided"
    assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--guidance",
                 "ground_truth", "--labels", str(tmp_path / "y.npy"), "--report", "--out",
                 str(out), "--n-explanations", "3"]) == 0
    console = " ".join(capsys.readouterr().out.split())
    assert "Guidance (ground_truth): the graph only links images that a model puts in the " \
           "same class" in console
    text = (out / "report.html").read_text()
    assert 'class="note guided"' in text and "guided: ground_truth</a>" in text
    # a rank BSR below its chance interval: the longer reading
    summary = summarize_comparison(out)
    rank = [r for r in summary["rows"] if r["dissimilarity"] == "rank"
            and r.get("chance_bsr_lo") is not None]
    assert rank
    for r in rank:
        r["bsr"] = r["chance_bsr_lo"] - 0.05
    below = render_comparison(out, summary)
    assert "A BSR below chance is therefore not a failure by itself" in below
