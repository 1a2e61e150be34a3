"""The one style module (rdx.viz.style) and the rules of the drawing code: figures take
data (nothing under rdx/viz reads a file), the pages share one palette, and the drawing and
report modules stay small."""
import ast
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib import colormaps
from matplotlib import colors as mcolors

from rdx.viz import style

ROOT = Path(__file__).resolve().parents[1]
VIZ = ROOT / "rdx" / "viz"

#: Calls that read a file or a folder; drawing code is handed data, and may only write the
#: figure it is asked to write.
READING_CALLS = {"open", "load", "read_text", "read_bytes", "read_json", "exists", "is_file",
                 "is_dir", "glob", "rglob", "iterdir", "listdir", "ComparisonRun",
                 "DynamicsRun", "load_dynamics", "load_features", "load_labels",
                 "select_images", "imread"}


def _called_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


def test_nothing_under_viz_reads_files():
    found = {p.name: sorted(_called_names(p) & READING_CALLS) for p in sorted(VIZ.glob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}
    # and no drawing module imports the run store's readers or the datasets
    for p in VIZ.glob("*.py"):
        text = p.read_text(encoding="utf-8")
        assert not re.search(r"import .*\b(ComparisonRun|DynamicsRun|select_images)\b", text), p


def test_drawing_and_report_modules_are_small():
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for d in ("viz", "report") for p in (ROOT / "rdx" / d).glob("*.py")}
    assert {k: n for k, n in sizes.items() if n > 400} == {}


def test_palette_constants_are_matplotlibs_colours():
    tab10 = [mcolors.to_rgb(colormaps["tab10"](i)) for i in range(10)]
    # the cluster palette is tab10 without its blue (cluster 0) and grey (no-change)
    assert style.CLUSTER_PALETTE[:-1] == [tab10[i] for i in (1, 2, 3, 4, 5, 6, 8, 9)]
    assert [style.hex_rgb(c) for c in style.FALLBACK_COLORS] == tab10
    for c in (*style.FAMILY_COLORS.values(), "#0072B2", style.MISSING_COLOR):
        assert style.hex_rgb(c) == mcolors.to_rgb(c)
    assert style.cluster_color(0, True) == style.NO_CHANGE_GREY
    assert style.cluster_color(0, False) == style.CLUSTER0_COLOR
    assert style.cluster_color(1 + len(style.CLUSTER_PALETTE), False) == \
        style.CLUSTER_PALETTE[0]
    assert style.is_dark("black") and not style.is_dark("white")
    assert np.allclose(style.lighter("black", 0.5), 0.5) and style.darker("white", 0.25) == \
        pytest.approx((0.75, 0.75, 0.75))
    # RDX first, the baselines' registry order next, unknown methods last
    assert style.method_order(["mine", "nmf_x", "kmeans", "rdx_v2"], {}) == \
        ["rdx_v2", "kmeans", "nmf_x", "mine"]


def test_pages_share_one_palette():
    from rdx.explorer.page import stylesheet
    from rdx.report.html import CSS

    root = style.css_variables()
    assert root in CSS
    explorer = stylesheet()
    assert explorer.startswith(style.css_variables(style.EXPLORER_RINGS))
    for name, value in style.PAGE_COLORS.items():
        assert f"--{name}: {value};" in CSS and f"--{name}: {value};" in explorer
    # the colours are stated once: the stylesheets only use the variables
    rules = CSS.replace(root, "") + explorer.replace(style.css_variables(style.EXPLORER_RINGS),
                                                     "")
    for value in {*style.PAGE_COLORS.values(), *style.EXPLORER_RINGS.values()} - {"#ffffff"}:
        assert value not in rules, value


def test_explorer_script_takes_its_colours_from_the_page_data():
    from rdx.explorer.page import asset, render_page

    script = asset("explorer.js")
    pal = style.EXPLORER_PALETTE
    colours = {*pal["explanations"], *pal["labels"], *pal["rings"].values(), pal["none"],
               *pal["outcomes"].values(), *(c for s in pal["scales"].values() for _, c in s)}
    assert not {c for c in colours if c.lower() in script.lower()}
    # the rings are the stylesheet's
    assert {f"ring-{k}": v for k, v in pal["rings"].items()} == style.EXPLORER_RINGS
    html = render_page({"n": 0}, title="t", footer="f")
    block = html.split('id="rdx-data">', 1)[1].split("</script>", 1)[0]
    assert '"palette"' in block and pal["none"] in block
