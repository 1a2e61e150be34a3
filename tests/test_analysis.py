"""The analysis figures (score figures, PCA overlays, RDX's matrices, summary strips,
coefficients, known differences; the palette) and analyze_explanations.py on a small real
run."""
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from matplotlib import colors as mcolors
from PIL import Image

from conftest import MERGED, TOY_METHODS, ToyRun
from rdx import RDXInputError
from rdx.results.comparison_view import (read_comparison_view, read_summary_strips,
                                         representation_labels, require_concepts,
                                         require_graphs)
from rdx.results.store import ComparisonRun
from rdx.viz import style
from rdx.viz.coefficients import coefficient_heatmaps
from rdx.viz.known_difference import known_difference_plot
from rdx.viz.labels import DISSIMILARITY_LABELS
from rdx.viz.matrices import (cluster_matrices_figure, cluster_order, direction_difference,
                              intermediate_matrices, reorder_by_cluster)
from rdx.viz.methods import grid_methods
from rdx.viz.pca_overlay import (overlay_layout, pca_overlay, pca_overlay_figure,
                                 pca_overlay_points)
from rdx.viz.score_figures import bsr_boxplots, explanation_stats_table
from rdx.viz.score_rows import known_difference_rows, summary_rows
from rdx.viz.strips import cluster_summary_strips

ROOT = Path(__file__).resolve().parents[1]
METHODS = ToyRun.grid_methods(MERGED)             # methods with grids in the first comparison


def _import_script():
    spec = importlib.util.spec_from_file_location("analyze_explanations",
                                                  ROOT / "analyze_explanations.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def run(toy_run_module_copy):
    """The shared run (B merges 3 and 5: the known difference); the figures and the script
    write their outputs into this module's copy of it."""
    from rdx.evaluation.summary import summarize_experiment

    copy = toy_run_module_copy
    comps = [copy.comp(c) for c in TOY_METHODS]
    store = ComparisonRun(comps[0])
    return {"root": copy.root, "exp": copy.exp, "comps": comps,
            "loaded": store, "view": read_comparison_view(store),
            "summaries": summarize_experiment(copy.exp), "tmp": copy.root.parent}


def _png(path, min_w=300, min_h=200):
    """A readable PNG of sensible size (not an empty canvas)."""
    path = Path(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        w, h = im.size
        assert min_w <= w <= 12000 and min_h <= h <= 12000, (path, im.size)
        px = np.asarray(im.convert("L"))
    assert px.std() > 5, f"{path} is (nearly) blank"
    return w, h


def _hand_summary(comparison="x", bsr_rank=(0.9, 0.7), undefined_lsed=False):
    """A summarize_comparison-shaped dict built by hand (two methods)."""
    rows = []
    for m, mtype, shift in (("rdx", "rdx", 0.0), ("kmeans_ar0to1", "kmeans", -0.2)):
        for dis in ("rank", "max_normalized_euclidean", "local_scaling"):
            for d, b in zip(("a_over_b", "b_over_a"), bsr_rank):
                bsr = None if (undefined_lsed and dis == "local_scaling") else b + shift
                rows.append({"method": m, "method_type": mtype, "direction": d,
                             "dissimilarity": dis, "bsr": bsr, "tsd": 0.1, "eq": 0.0,
                             "n_pairs": 216, "n_explanations": 3, "grid_size": 9,
                             "chance_bsr_mean": 0.5, "chance_bsr_lo": 0.4,
                             "chance_bsr_hi": 0.6, "chance_tsd_mean": 0.0,
                             "known_difference_hits": 2 if d == "a_over_b" else 0,
                             "known_difference_total": 3,
                             "known_difference_rate": 2 / 3 if d == "a_over_b" else 0.0,
                             "known_difference_expected": d == "a_over_b",
                             "known_difference_score": None})
    return {"experiment": "hand", "comparison": comparison, "n_images": 100,
            "similarity": {}, "rows": rows}


# ---------------------------------------------------------------------------- palette

def test_method_color_is_one_fixed_palette():
    base = {f: np.array(mcolors.to_rgb(c)) for f, c in style.FAMILY_COLORS.items()}
    assert style.method_color("rdx") == pytest.approx(tuple(mcolors.to_rgb("#D55E00")))
    assert style.method_color("kmeans") == pytest.approx(tuple(mcolors.to_rgb("#0072B2")))
    # every family has its own colour
    assert len({style.method_color(f) for f in base}) == len(base)
    # a named variant is a shade of its family: on the line from its base colour to white
    # (lighter) or to black (darker)
    for name, fam in (("rdx_nb_lb_pagerank", "rdx"), ("kmeans_ar0to1", "kmeans"),
                      ("sae_ar1to0", "sae"), ("topk_sae_big", "topk_sae"), ("cnmf_x", "cnmf")):
        c, b = np.array(style.method_color(name)), base[fam]
        darker = np.allclose(np.cross(c, b), 0, atol=1e-9) and c.sum() < b.sum()
        lighter = np.allclose(np.cross(1 - c, 1 - b), 0, atol=1e-9) and c.sum() > b.sum()
        assert darker or lighter, name
        assert style.method_color(name, fam) == style.method_color(name)
    assert style.method_color("topk_sae") == pytest.approx(tuple(base["topk_sae"]))
    # same name → same colour; method_type picks the family of an arbitrary name
    assert style.method_color("rdx_nb_lb_spectral") == style.method_color("rdx_nb_lb_spectral")
    assert style.method_color("mine", "nmf") != style.method_color("mine")
    # crc32, not the salted str hash: this value holds in every process
    assert style.method_color("mine") == pytest.approx(
        mcolors.to_rgb(style.FALLBACK_COLORS[0x69A8D393 % len(style.FALLBACK_COLORS)]))


def test_cluster_order_groups_labels_stably():
    labels = np.array([2, 0, 1, 2, 0, 0, 3])
    order, blocks = cluster_order(labels)
    assert order.tolist() == [1, 4, 5, 2, 0, 3, 6]
    assert blocks == [(0, 0, 3), (1, 3, 4), (2, 4, 6), (3, 6, 7)]
    M = np.arange(49).reshape(7, 7)
    R, _, _ = reorder_by_cluster(M, labels)
    assert R[0, 4] == M[1, 0] and R[5, 3] == M[3, 2]


# ---------------------------------------------------------------------------- score figures

def test_bsr_boxplots_from_hand_built_summaries(tmp_path):
    sums = [_hand_summary("x", (0.9, 0.7)), _hand_summary("y", (0.8, 0.6), undefined_lsed=True)]
    paths = bsr_boxplots(sums, tmp_path)
    assert [p.name for p in paths] == ["BSR_rank_boxplot.png", "BSR_MNED_boxplot.png",
                                      "BSR_LS_boxplot.png"]
    for p in paths:
        _png(p, 500, 300)
    paper = bsr_boxplots(sums, tmp_path / "paper", paper=True)
    assert sorted(p.suffix for p in paper) == [".pdf"] * 3 + [".png"] * 3
    assert all(p.read_bytes()[:4] == b"%PDF" for p in paper if p.suffix == ".pdf")
    with pytest.raises(RDXInputError, match="no BSR scores"):
        bsr_boxplots([{"experiment": "e", "comparison": "c", "rows": []}], tmp_path)


def test_explanation_stats_table_and_known_difference_plot_by_hand(tmp_path):
    sums = [_hand_summary("x"), _hand_summary("y")]
    _png(explanation_stats_table(sums, tmp_path / "stats.png"), 600, 150)
    rows = known_difference_rows(sums)
    # one row per comparison × method × direction (not per dissimilarity), rank preferred
    assert len(rows) == 2 * 2 * 2 and {r["dissimilarity"] for r in rows} == {"rank"}
    _png(known_difference_plot(sums, tmp_path / "kd.png"), 300, 200)
    masked = _hand_summary("m")
    for r in masked["rows"]:   # masked concept: a score instead of hits
        r.update(known_difference_hits=None, known_difference_total=None,
                 known_difference_rate=None,
                 known_difference_score=2.5 if r["direction"] == "a_over_b" else 0.4)
    _png(known_difference_plot([masked], tmp_path / "kd_masked.png"), 300, 200)
    with pytest.raises(RDXInputError, match="known_difference"):
        known_difference_plot([{"comparison": "c", "rows": [
            {k: v for k, v in r.items() if not k.startswith("known")}
            for r in _hand_summary()["rows"]]}], tmp_path / "none.png")


def test_summary_rows_of_the_real_run(run):
    """The real summaries feed the figures (drawn by the script test below)."""
    rows = summary_rows(run["summaries"])
    assert {r["method"] for r in rows} == set(METHODS)          # cka has no grids
    assert {(r["comparison"], r["method"], r["dissimilarity"]) for r in rows} == {
        (c, m, d) for c in TOY_METHODS for m in ToyRun.grid_methods(c)
        for d in DISSIMILARITY_LABELS}
    kd = known_difference_rows(run["summaries"])
    # model b merges 3 and 5: the expected direction is b_over_a (tight in B)
    assert {(r["direction"], r["known_difference_expected"]) for r in kd} == \
        {("b_over_a", True), ("a_over_b", False)}
    assert len(kd) == 2 * sum(len(ToyRun.grid_methods(c)) for c in TOY_METHODS)


# ---------------------------------------------------------------------------- PCA overlay

def _pca_by_svd(X):
    X = np.asarray(X, dtype=np.float64)
    Xc = X - X.mean(0)
    _, _, Vt = np.linalg.svd(Xc, full_matrices=False)
    return Xc @ Vt[:2].T


@pytest.mark.parametrize("direction", ["a_over_b", "b_over_a"])
def test_pca_overlay_marks_exactly_the_grid_images(run, direction, tmp_path):
    store = run["loaded"]
    docs = {n: r.to_json() for n, r in store.results().items()}
    reps = store.representations
    view = run["view"]
    fig = pca_overlay_figure(view, direction)
    plotted = {}
    for ax in fig.axes:
        for coll in ax.collections:
            gid = coll.get_gid() or ""
            if gid.startswith("grid:"):
                _, m, side, j = gid.split(":")
                plotted[(m, side, int(j))] = np.asarray(coll.get_offsets())
            elif gid == "background":
                assert len(coll.get_offsets()) == 120
    expected_methods = [m for m in METHODS if docs[m]["directions"][direction]["explanations"]]
    assert {m for m, _, _ in plotted} == set(expected_methods)   # no cka, no null group
    for side, X in (("a", reps["a"]), ("b", reps["b"])):
        ref = _pca_by_svd(X)
        for m in expected_methods:
            exps = docs[m]["directions"][direction]["explanations"]
            assert {j for mm, s, j in plotted if mm == m and s == side} == \
                set(range(1, len(exps) + 1))
            for j, e in enumerate(exps, start=1):
                got = plotted[(m, side, j)]
                want = ref[e["images"]]
                signs = np.sign((got * want).sum(0))   # PCA axes are defined up to sign
                np.testing.assert_allclose(got, want * signs, atol=1e-6 * np.abs(ref).max())
    # the helper agrees and the file is a sensible PNG
    pts = pca_overlay_points(view, direction)
    # RDX first, then the baselines in a fixed order (not the config's)
    assert list(pts["grids"]) == ["rdx", "kmeans", "pca_ar0to1", "nmf"]
    # 4 methods, at most 3 per row: two rows of two (readable at page width); one row of 4
    assert overlay_layout(4, 3) == (2, 2) and overlay_layout(5, 3) == (3, 2)
    # read from the folder itself (a fresh store): the same view
    from_folder = read_comparison_view(run["comps"][0])
    assert from_folder.name == view.name and list(from_folder.methods) == list(view.methods)
    w, h = _png(pca_overlay(from_folder, direction, tmp_path / "p.png"), 800, 500)
    assert h > w
    w, h = _png(pca_overlay(from_folder, direction, tmp_path / "p4.png", max_columns=4),
                800, 500)
    assert w > h          # one column per method, two rows
    one = pca_overlay(view, direction, tmp_path / "one.png", methods=["kmeans"])
    assert _png(one, 200, 300)[0] < w
    with pytest.raises(RDXInputError, match="direction"):
        pca_overlay(view, "sideways", tmp_path / "x.png")
    with pytest.raises(RDXInputError, match="not in this run"):
        pca_overlay(view, direction, tmp_path / "x.png", methods=["sae"])


# ---------------------------------------------------------------------------- RDX matrices

def test_intermediate_matrices_blocks_are_the_clusters(run, tmp_path):
    comp = run["comps"][0]
    paths = intermediate_matrices(require_graphs(comp, "rdx"), tmp_path, comparison=MERGED,
                                  method="rdx")
    assert sorted(p.name for p in paths) == sorted(
        f"{MERGED}_rdx_{s}.png" for s in ("ranks", "differences", "clusters_a_over_b",
                                          "clusters_b_over_a"))
    for p in paths:
        _png(p, 300, 300)
    doc = json.loads((comp / "rdx" / "explanations.json").read_text())
    with np.load(comp / "rdx" / "graphs.npz") as g:
        graphs = {k: g[k] for k in g.files}
    for d in ("a_over_b", "b_over_a"):
        labels = graphs[f"labels_{d}"]
        aff = graphs[f"affinity_{d}"]
        R, order, blocks = reorder_by_cluster(aff, labels)
        assert np.all(np.diff(labels[order]) >= 0)
        exps = doc["directions"][d]["explanations"]
        assert [b[0] for b in blocks] == list(range(len(exps) + 1))   # no-change group + k
        for lab, s, e in blocks:
            members = doc["directions"][d]["null_members"] if lab == 0 else \
                exps[lab - 1]["members"]
            assert e - s == len(members)
            assert sorted(order[s:e].tolist()) == sorted(members)
            np.testing.assert_array_equal(R[s:e, s:e], aff[np.ix_(members, members)])
            if lab:   # the block's mean affinity is the explanation's (its definition)
                assert R[s:e, s:e].mean() == pytest.approx(exps[lab - 1]["mean_affinity"],
                                                           rel=1e-4)
        # the direction's difference: pairs of an explanation are closer in its tight model
        diff = direction_difference(graphs, d)
        for e_ in exps:
            mem = e_["members"]
            assert diff[np.ix_(mem, mem)].mean() < 0
    with pytest.raises(RDXInputError, match="save_graphs: true"):
        require_graphs(comp, "kmeans")


def _tick_extents(fig, ax):
    """Window extents of the visible x and y tick labels of ``ax`` after drawing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    r = fig.canvas.get_renderer()
    return ([t.get_window_extent(r) for t in ax.get_xticklabels() if t.get_text()],
            [t.get_window_extent(r) for t in ax.get_yticklabels() if t.get_text()])


def _no_overlap(boxes, axis):
    spans = sorted((b.x0, b.x1) if axis == "x" else (b.y0, b.y1) for b in boxes)
    return all(a[1] <= b[0] + 0.5 for a, b in zip(spans, spans[1:]))


def test_cluster_matrices_zoom_on_the_explanations_without_overlapping_labels():
    # a no-change group of 400 images and eight explanation clusters of 2..30 images: at
    # full scale the small blocks are a few pixels wide
    sizes = [400, 30, 2, 3, 25, 14, 2, 27, 4]
    labels = np.repeat(np.arange(len(sizes)), sizes)
    labels = labels[np.random.default_rng(0).permutation(len(labels))]
    n = len(labels)
    rng = np.random.default_rng(1)
    diff = rng.normal(size=(n, n))
    graphs = {"labels_a_over_b": labels, "diff_a_over_b": (diff + diff.T) / 2,
              "affinity_a_over_b": np.exp(rng.normal(size=(n, n)))}
    fig = cluster_matrices_figure(graphs, "a_over_b", title="t")
    zooms = [ax for ax in fig.axes if ax.get_gid() == "zoom"]
    assert len(zooms) == 2
    for ax in fig.axes:
        if not ax.get_images() or ax.get_label() == "<colorbar>":
            continue
        xs, ys = _tick_extents(fig, ax)
        assert xs and _no_overlap(xs, "x") and _no_overlap(ys, "y"), ax.get_title()
    for ax in zooms:
        # the zoom shows exactly the explanation clusters, each outlined and labelled
        assert ax.get_images()[0].get_array().shape == (n - 400, n - 400)
        blocks = sorted(p.get_gid() for p in ax.patches)
        assert blocks == sorted(f"block:{lab}" for lab in range(1, len(sizes)))
        shown = [t.get_text() for t in ax.get_yticklabels()]
        assert shown[0] == "#1 (30)" and len(shown) >= 4
    # the full panels keep every outline (labels may be thinned)
    full = [ax for ax in fig.axes if ax.get_title().endswith("reordered by cluster")]
    assert len(full) == 2 and all(len(ax.patches) == len(sizes) for ax in full)
    # without explanations there is nothing to zoom on
    one = {k: v for k, v in graphs.items()}
    one["labels_a_over_b"] = np.zeros(n, dtype=int)
    fig = cluster_matrices_figure(one, "a_over_b")
    assert not [ax for ax in fig.axes if ax.get_gid() == "zoom"]


def test_overlay_grid_markers_cannot_be_taken_for_classes(run):
    fig = pca_overlay_figure(run["view"], "a_over_b")
    background, markers = [], []
    for ax in fig.axes:
        for coll in ax.collections:
            gid = coll.get_gid() or ""
            if gid == "background":
                background += [tuple(c[:3]) for c in coll.get_facecolors()]
            elif gid.startswith("grid:"):
                markers += [tuple(c[:3]) for c in coll.get_facecolors()]
                assert all(tuple(e[:3]) == style.GRID_MARKER_EDGE for e in coll.get_edgecolors())
    assert markers and set(markers) == {style.GRID_MARKER_FACE}
    classes = np.unique(np.round(background, 6), axis=0)
    assert len(classes) == 3                               # digits 3, 5, 8
    # every class colour is far from the markers' black (the method colour frames panels)
    assert np.sqrt(((classes - np.array(style.GRID_MARKER_FACE)) ** 2).sum(1)).min() > 0.3


def test_summary_strip_marks_weak_explanations_and_keeps_their_grids(tmp_path):
    from rdx.viz.grids import save_direction_grids, summary_strip
    from rdx.viz.style import WEAK_COLOR

    images = np.random.default_rng(0).integers(0, 255, size=(20, 8, 8)).astype(np.uint8)
    exps = [{"images": list(range(i, i + 4)), "members": list(range(i, i + 6)),
             "mean_affinity": a, "low_affinity": a < 1.5}
            for i, a in ((0, 4.0), (5, 1.2), (10, 6.0))]
    plain = [dict(e, low_affinity=False) for e in exps]
    out = {}
    for name, docs in (("weak", exps), ("plain", plain)):
        d = tmp_path / name
        paths = [d / f"a_over_b_{i}.png" for i in (1, 2, 3)]
        save_direction_grids(images, docs, paths, d / "a_over_b_summary.png")
        out[name] = d
    # the per-explanation PNGs are pixel-identical, weak or not
    for i in (1, 2, 3):
        a = np.asarray(Image.open(out["weak"] / f"a_over_b_{i}.png"))
        b = np.asarray(Image.open(out["plain"] / f"a_over_b_{i}.png"))
        np.testing.assert_array_equal(a, b)
    # the strip: orange title and frame around the weak grid (the second) only
    weak = np.asarray(Image.open(out["weak"] / "a_over_b_summary.png").convert("RGB"))
    plain_strip = np.asarray(Image.open(out["plain"] / "a_over_b_summary.png").convert("RGB"))
    assert weak.shape == plain_strip.shape
    orange = np.all(weak == np.array(WEAK_COLOR, dtype=np.uint8), axis=-1)
    assert not np.all(plain_strip == np.array(WEAK_COLOR, dtype=np.uint8), axis=-1).any()
    cols = np.flatnonzero(orange.any(axis=0))
    g = Image.open(out["weak"] / "a_over_b_1.png").width
    assert cols.min() >= 10 + g + 10 - 4 and cols.max() <= 10 + 2 * (g + 10) + 3
    with pytest.raises(RDXInputError, match="weak flags"):
        summary_strip([Image.new("RGB", (4, 4))], ["t"], weak=[True, False])


# ---------------------------------------------------------------------------- strips, coeffs

def _strips_figure(comp, out):
    view = read_comparison_view(comp)
    return cluster_summary_strips(view, read_summary_strips(comp, grid_methods(view)), out)


def test_cluster_summary_strips_has_a_row_per_method(run, tmp_path):
    _w, h = _png(_strips_figure(run["comps"][0], tmp_path / "cms.png"), 600, 400)
    only_two = run["tmp"] / "two"
    # a comparison folder with two of the methods: the figure gets shorter
    shutil.copytree(run["comps"][0], only_two)
    for m in METHODS[2:]:
        shutil.rmtree(only_two / m)
    _w2, h2 = _png(_strips_figure(only_two, tmp_path / "cms2.png"), 400, 200)
    assert h2 < 0.75 * h


def _coefficients(comp, method, out, **kw):
    store = ComparisonRun(comp)
    return coefficient_heatmaps(require_concepts(store, method), out, comparison=comp.name,
                                method=method, labels=representation_labels(store),
                                class_names=store.images["class_names"], **kw)


def test_coefficient_heatmaps(run, tmp_path):
    comp = run["comps"][0]
    paths = _coefficients(comp, "nmf", tmp_path, formats=("png", "pdf"))
    assert [p.name for p in paths] == [f"{MERGED}_nmf_{f}" for f in (
        "coeffs.png", "coeffs.pdf", "dictionary.png", "dictionary.pdf")]
    assert all(p.read_bytes()[:4] == b"%PDF" for p in paths if p.suffix == ".pdf")
    (km,) = [p for p in _coefficients(comp, "kmeans", tmp_path)
             if p.name.endswith("_coeffs.png")]
    for p in [*paths, km]:
        if p.suffix == ".png":
            _png(p, 300, 200)
    with pytest.raises(RDXInputError, match="concepts.npz"):
        require_concepts(comp, "rdx")
    # a concepts file without codes (a classification probe's) is no concept baseline
    with pytest.raises(RDXInputError, match="holds no codes"):
        coefficient_heatmaps({"a_pred": np.zeros(3)}, tmp_path, comparison="c", method="p")


# ---------------------------------------------------------------------------- the script

def test_analyze_explanations_cli_writes_every_analysis(run, capsys):
    script = _import_script()
    root = run["root"]
    rc = script.main(["--experiment", "toy", "--analysis", "all", "--output-root", str(root),
                      "--n-draws", "30", "--comparisons", MERGED, "--methods", "rdx,nmf"])
    assert rc == 0, capsys.readouterr().err
    out = run["exp"] / "analysis"
    for rel in ["summary.csv", "summary.json", "BSR_rank_boxplot.png", "BSR_MNED_boxplot.png",
                "BSR_LS_boxplot.png", "explanation_stats.png", "known_difference.csv",
                "known_difference.png", f"pca_sample_plots/{MERGED}_a_over_b.png",
                f"pca_sample_plots/{MERGED}_b_over_a.png",
                f"cluster_meta_summaries/{MERGED}_cms.png",
                f"intermediate_steps_plots/{MERGED}_rdx_clusters_a_over_b.png",
                f"coefficient_plots/{MERGED}_nmf_coeffs.png"]:
        assert (out / rel).exists(), rel
        if rel.endswith(".png"):
            _png(out / rel, 200, 150)
    assert sorted(p.name for p in (out / "pca_sample_plots").iterdir()) == \
        [f"{MERGED}_a_over_b.png", f"{MERGED}_b_over_a.png"]            # --comparisons
    assert sorted(p.name for p in (out / "coefficient_plots").iterdir()) == \
        [f"{MERGED}_nmf_coeffs.png", f"{MERGED}_nmf_dictionary.png"]   # --methods
    kd = (out / "known_difference.csv").read_text().splitlines()
    assert kd[0].startswith("experiment,comparison,method") and \
        len(kd) == 1 + 2 * sum(len(ToyRun.grid_methods(c)) for c in TOY_METHODS)
    printed = capsys.readouterr().out
    assert f"[toy/{MERGED}] n=120" in printed and "known-difference recovery" in printed
    # the scores are reused while fresh; --paper adds PDFs
    before = (out / "summary.json").stat().st_mtime_ns
    assert script.main(["--experiment", "toy", "--analysis", "bsr", "--output-root", str(root),
                        "--paper"]) == 0
    assert (out / "summary.json").stat().st_mtime_ns == before
    assert (out / "BSR_rank_boxplot.pdf").read_bytes()[:4] == b"%PDF"


def test_analyze_explanations_cli_errors(run, tmp_path, capsys):
    script = _import_script()
    assert script.main(["--experiment", "nope", "--output-root", str(run["root"])]) == 2
    err = capsys.readouterr().err
    assert "no run found" in err and "rdx run --config configs/nope.yaml" in err and "toy" in err
    assert script.main(["--experiment", "toy", "--analysis", "bsr,histogram",
                        "--output-root", str(run["root"])]) == 2
    assert "unknown analysis ['histogram']" in capsys.readouterr().err
    assert script.main(["--experiment", "toy", "--analysis", "pca", "--comparisons", "c9",
                        "--output-root", str(run["root"])]) == 2
    assert "c9" in capsys.readouterr().err
    assert script.main(["--experiment", "toy", "--analysis", "pca", "--methods", "rdx,sea",
                        "--output-root", str(run["root"])]) == 2
    assert "['sea'] not in" in capsys.readouterr().err
