"""The interactive explorer: its values (against RDX's own graphs and brute force), inputs,
page format and command. The browser tests are in test_explorer_browser.py."""
import argparse
import base64
import json
import re
import shutil

import numpy as np
import pytest

from conftest import MERGED, SEL, ToyRun, digit_features, toy_config
from rdx import RDX, RDXInputError
from rdx.experiments import run_experiment
from rdx.explorer import build_explorer, load_inputs
from rdx.explorer import command as explore_cmd
from rdx.explorer.embedding import embed_pair, pca_pair
from rdx.explorer.graph import (MatrixDifference, graph_spec, neighbour_tables,
                                smallest_by_value_then_index)
from rdx.explorer.page import csp, script_hash
from rdx.explorer.thumbnails import make_thumbnails
from rdx.report.html import significance_badge

# The pages of these tests are built on the shared toy run's first comparison.
N = len(SEL["target_classes"]) * SEL["num_images"]       # its images
RDX_NAME, PCA_NAME = ToyRun.name_of("rdx"), ToyRun.name_of("pca")


def page_data(path):
    text = path.read_text()
    m = re.search(r'<script type="application/json" id="rdx-data">(.*?)</script>', text, re.S)
    return text, json.loads(m.group(1))


def decode(o):
    dt = {"i8": "<i1", "u8": "<u1", "u16": "<u2", "u32": "<u4", "i16": "<i2", "i32": "<i4", "f32": "<f4"}
    a = np.frombuffer(base64.b64decode(o["b64"]), dtype=dt[o["__t"]]).reshape(o["shape"])
    return a * o["scale"] if "scale" in o else a


@pytest.fixture(scope="module")
def comparison(toy_run_module_copy):
    """The comparison folder of a copy: the page is written into it by default."""
    return toy_run_module_copy.comp(MERGED)


# ------------------------------------------------------------------------- graph values

def _brute(A, B, fit, k, s_nb):
    """Everything neighbour_tables computes, from RDX's own n×n graphs, by brute force."""
    G = fit.graphs_
    n = len(A)
    D = {"a_over_b": G["diff_a_over_b"].astype(np.float64)}
    D["b_over_a"] = -G.get("diff_b_over_a_graph", G["diff_a_over_b"]).astype(np.float64)
    RA = np.argsort(np.argsort(((A[:, None] - A[None]) ** 2).sum(-1), axis=1, kind="stable"),
                    axis=1, kind="stable")
    RB = np.argsort(np.argsort(((B[:, None] - B[None]) ** 2).sum(-1), axis=1, kind="stable"),
                    axis=1, kind="stable")
    out = {"RA": RA, "RB": RB, "D": D, "rdx": {}, "aff": {}, "dsum": {}}
    for d, R in (("a_over_b", RA), ("b_over_a", RB)):
        W = D[d].copy()
        np.fill_diagonal(W, np.inf)
        out["rdx"][d] = np.lexsort((np.broadcast_to(np.arange(n), (n, n)), W), axis=1)[:, :k]
        N = np.argsort(R, axis=1)[:, :s_nb]            # the image (rank 0) and its nearest
        out["aff"][d] = np.array([np.exp(-fit.beta * D[d][np.ix_(h, h)]).sum() for h in N])
        out["dsum"][d] = np.array([D[d][np.ix_(h, h)].sum() for h in N])
    return out


@pytest.mark.parametrize("params", [
    {"gamma": 0.1},
    {"difference": "standard"},                      # normalised: needs the global maximum
    {"similarity": "max_normalized_distance", "gamma": 0.5},
])
def test_neighbour_tables_match_rdx_graphs(params):
    rng = np.random.default_rng(1)
    A = rng.normal(size=(70, 6)).astype(np.float32)
    B = (A @ rng.normal(size=(6, 5)) + 0.8 * rng.normal(size=(70, 5))).astype(np.float32)
    fit = RDX(n_explanations=2, keep_graphs=True, random_state=0, **params).fit(A, B)
    k, s_nb = 7, 5
    spec = graph_spec({**fit.get_params(), "gamma_resolved": fit.gamma_,
                       "normalize_diff_resolved": fit.normalize_diff_}, len(A), "rdx")
    assert spec.row_computable
    bf = _brute(A, B, fit, k, s_nb)
    saved = MatrixDifference(fit.graphs_["diff_a_over_b"])
    for matrices in (None, saved):                   # rows from A and B / rows of graphs.npz
        T = neighbour_tables(A, B, spec, k=k, neighborhood_size=s_nb, matrices=matrices)
        i = np.arange(len(A))[:, None]
        for m, R, other in (("a", bf["RA"], bf["RB"]), ("b", bf["RB"], bf["RA"])):
            assert (R[i, T.nearest[m]] == np.arange(1, k + 1)).all()
            own, oth = T.ranks[m] if m == "a" else T.ranks[m][::-1]
            assert (own == np.arange(1, k + 1)).all() and (oth == other[i, T.nearest[m]]).all()
        for d in ("a_over_b", "b_over_a"):
            assert (T.rdx[d] == bf["rdx"][d]).all()
            assert np.array_equal(T.ranks[f"rdx_{d}"][0], bf["RA"][i, T.rdx[d]])
            for grp, idx in (("a", T.nearest["a"]), ("b", T.nearest["b"]), ("rdx", T.rdx[d])):
                np.testing.assert_allclose(T.diff[d][grp], bf["D"][d][i, idx], atol=1e-6)
            np.testing.assert_allclose(T.affinity_sum[d], bf["aff"][d], rtol=1e-6)
            np.testing.assert_allclose(T.difference_sum[d], bf["dsum"][d], atol=1e-5)


def test_neighbourhood_sums_by_hand():
    """Four points on a line in A; B swaps the two ends: sums checked by hand."""
    A = np.array([[0.0], [1.0], [3.0], [7.0]], dtype=np.float32)
    B = np.array([[7.0], [1.0], [3.0], [0.0]], dtype=np.float32)
    spec = graph_spec({"difference": "standard", "normalize_diff": False, "beta": 1.0}, 4)
    T = neighbour_tables(A, B, spec, k=2, neighborhood_size=2)
    # ranks: A rows 0:[0,1,2,3] 1:[1,0,2,3] 2:[2,1,0,3] 3:[3,2,1,0];
    #        B rows 0:[0,2,1,3] 1:[3,0,2,1] 2:[3,1,0,2] 3:[3,1,2,0]
    # a_over_b, image 0: N = {0, 1}; diff = R_A − R_B: d(0,1) = 1−2 = −1, d(1,0) = 1−3 = −2
    assert T.nearest["a"][0].tolist() == [1, 2]
    assert T.difference_sum["a_over_b"][0] == pytest.approx(-3.0)
    assert T.affinity_sum["a_over_b"][0] == pytest.approx(2 + np.e ** 1 + np.e ** 2)
    # b_over_a, image 0: nearest in B is 2 → N = {0, 2}; diff = R_B − R_A:
    # d(0,2) = 1−2 = −1, d(2,0) = 3−2 = 1
    assert T.nearest["b"][0].tolist() == [2, 1]
    assert T.difference_sum["b_over_a"][0] == pytest.approx(0.0)
    assert T.affinity_sum["b_over_a"][0] == pytest.approx(2 + np.e + np.e ** -1)


def test_smallest_by_value_then_index_breaks_ties_by_index():
    v = np.array([[3.0, 1.0, 1.0, 0.0, 1.0, 5.0]])
    assert smallest_by_value_then_index(v, 3).tolist() == [[3, 1, 2]]
    assert smallest_by_value_then_index(v, 5).tolist() == [[3, 1, 2, 4, 0]]


def test_graph_spec_uses_resolved_values_and_flags_whole_matrix_graphs():
    s = graph_spec({"gamma": None, "gamma_scale": 80.0, "gamma_resolved": 0.25,
                    "difference": "standard", "normalize_diff_resolved": True}, 100, "m")
    assert (s.gamma, s.normalize, s.source) == (0.25, True, "m")
    assert graph_spec(None, 400).gamma == pytest.approx(80 / 400)   # RDX's default γ
    assert not graph_spec({"guidance": "ground_truth"}, 10).row_computable
    assert not graph_spec({"variant": "v2"}, 10).row_computable          # symmetrised ranks


def test_guided_graph_is_refitted_and_matches_saved_graph(tmp_path):
    """A guided RDX graph cannot be computed row by row: the explorer refits the method;
    its values equal those of the method's own graphs.npz."""
    methods = [{"method": "rdx", "name": "guided", "n_explanations": 2, "gamma": 0.1,
                "guidance": "ground_truth", "save_graphs": True}]
    digit_features(tmp_path)
    (out,) = run_experiment(toy_config(tmp_path, base={"methods": methods}),
                            output_root=tmp_path / "out", progress=False)
    saved = build_explorer(out, tmp_path / "saved.html", embedding="pca", progress=False)
    shutil.move(out / "guided" / "graphs.npz", tmp_path / "graphs.npz")
    refit = build_explorer(out, tmp_path / "refit.html", embedding="pca", progress=False)
    (_, d1), (_, d2) = page_data(saved), page_data(refit)
    assert d1["pairs"][0]["graph"]["values"] == "graphs.npz"
    assert d2["pairs"][0]["graph"]["values"] == "refit"
    for d in ("a_over_b", "b_over_a"):
        q1, q2 = d1["pairs"][0]["directions"][d], d2["pairs"][0]["directions"][d]
        np.testing.assert_allclose(decode(q1["affinity_sum"]), decode(q2["affinity_sum"]),
                                   rtol=1e-5)
        np.testing.assert_array_equal(decode(d1["pairs"][0]["groups"][f"rdx_{d}"]["idx"]),
                                      decode(d2["pairs"][0]["groups"][f"rdx_{d}"]["idx"]))


def test_crosscoder_from_a_run_config_in_the_explorer(tmp_path):
    """The crosscoder baseline runs from an ``rdx run`` config and the explorer shows it:
    its grids, and its shown latents' codes (``concepts.npz``) as the code view."""
    methods = [{"method": "crosscoder", "n_explanations": 2, "n_epochs": 30,
                "n_latents": 16, "batch_size": 32}]
    digit_features(tmp_path)
    (out,) = run_experiment(toy_config(tmp_path, base={"methods": methods}),
                            output_root=tmp_path / "out", progress=False)
    doc = json.loads((out / "crosscoder" / "explanations.json").read_text())
    assert doc["method"] == "crosscoder" and doc["params"]["n_latents"] == 16
    _, data = page_data(build_explorer(out, embedding="pca", progress=False))
    (m,) = data["pairs"][0]["methods"]
    assert m["name"] == "crosscoder"
    for d in ("a_over_b", "b_over_a"):
        q = m["directions"][d]
        assert [e["images"] for e in q["explanations"]] == \
            [e["images"] for e in doc["directions"][d]["explanations"]]
        assert decode(q["codes"]).shape == (N, 2) and not q["has_members"]


# ------------------------------------------------------------------------- parts

def test_pca_maps_are_aligned_by_procrustes(rng):
    A = rng.normal(size=(50, 8)) * [5, 3, 1, 1, 1, 1, 1, 1]
    Q, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    Ya, Yb = pca_pair(A, A @ Q)                  # B = a rotation of A: the same map
    np.testing.assert_allclose(Ya, Yb, atol=1e-8)
    emb = embed_pair(A[:10], (A @ Q)[:10])        # too few images for UMAP: flagged PCA
    assert emb.method == "pca" and "only 10 images" in emb.note
    with pytest.raises(RDXInputError, match="embedding='tsne'"):
        embed_pair(A, A, method="tsne")


def test_default_maps_need_no_umap_learn(rng, monkeypatch):
    """The default layout is rdx's own (no umap-learn); asking for AlignedUMAP without it
    says how to install it."""
    monkeypatch.setitem(__import__("sys").modules, "umap", None)    # import umap fails
    A = rng.normal(size=(40, 4))
    emb = embed_pair(A, A + 0.1)
    assert emb.method == "knn_layout" and emb.note is None and emb.a.shape == (40, 2)
    with pytest.raises(RDXInputError, match="needs umap-learn"):
        embed_pair(A, A, method="aligned_umap")


@pytest.mark.slow
def test_aligned_umap_maps(rng):
    """umap-learn's AlignedUMAP (seeded): same seed, same maps; numba compiles ~20 s."""
    A = rng.normal(size=(60, 5)).astype(np.float32)
    B = A + 0.1 * rng.normal(size=(60, 5)).astype(np.float32)
    e1 = embed_pair(A, B, method="aligned_umap", seed=1)
    assert e1.method == "aligned_umap" and e1.note is None and e1.a.shape == (60, 2)
    assert np.isfinite(e1.a).all() and np.isfinite(e1.b).all()
    e2 = embed_pair(A, B, method="aligned_umap", seed=1)
    np.testing.assert_array_equal(e1.a, e2.a)


def test_maps_are_cached_by_content(rng, tmp_path, monkeypatch):
    """The second build of the same maps reads them from the folder (no recomputation);
    other features, parameters or a damaged file compute them again."""
    import rdx.explorer.embedding as E

    A = rng.normal(size=(60, 5)).astype(np.float32)
    B = A + 0.1 * rng.normal(size=(60, 5)).astype(np.float32)
    calls = []
    real = E.embed_pair
    monkeypatch.setattr(E, "embed_pair", lambda *a, **k: calls.append(k) or real(*a, **k))
    e1, hit1 = E.cached_embed_pair(A, B, tmp_path, method="pca", seed=3)
    e2, hit2 = E.cached_embed_pair(A, B, tmp_path, method="pca", seed=3)
    assert (hit1, hit2) == (False, True) and len(calls) == 1
    np.testing.assert_array_equal(e1.a, e2.a)
    np.testing.assert_array_equal(e1.b, e2.b)
    assert (e2.method, e2.params, e2.note) == (e1.method, e1.params, e1.note)
    assert not E.cached_embed_pair(A, B * 2, tmp_path, method="pca", seed=3)[1]
    assert not E.cached_embed_pair(A, B, tmp_path, method="pca", seed=4)[1]
    for f in tmp_path.glob("explorer_embedding_*.npz"):
        f.write_bytes(b"damaged")
    assert not E.cached_embed_pair(A, B, tmp_path, method="pca", seed=3)[1]
    assert E.cached_embed_pair(A, B, tmp_path, method="pca", seed=3)[1]


def test_thumbnails_shrink_to_the_budget():
    rng = np.random.default_rng(0)
    from PIL import Image
    imgs = [Image.fromarray(rng.integers(0, 255, (120, 120, 3), dtype=np.uint8))
            for _ in range(8)]
    big = make_thumbnails(imgs.__getitem__, 8)
    assert big.info["box"] == 96 and all(u.startswith("data:image/") for u in big.uris)
    small = make_thumbnails(imgs.__getitem__, 8, budget_bytes=big.info["bytes"] // 3)
    assert small.info["box"] < 96 and small.info["within_budget"]
    assert small.info["bytes"] <= big.info["bytes"] // 3
    grey = make_thumbnails(lambda i: Image.fromarray(np.full((8, 8), 40 * i, np.uint8)), 3)
    assert grey.info["size"] == 8                 # never enlarged: the page scales it up
    with pytest.raises(RDXInputError, match="thumb_size"):
        make_thumbnails(imgs.__getitem__, 8, size=3)


# ------------------------------------------------------------------------- the page

def test_method_payload_keeps_extra_fields_and_checks_indices():
    """Fields of newer runs (v2's filter record) are shown as they come; a significance
    record gets its own badge (not repeated among the extra fields), none without one."""
    from rdx.explorer.build import method_payload
    from rdx.explorer.inputs import MethodInputs

    sig = {"p_value_fwer": 0.01, "significant": True, "null": "twin"}
    doc = {"method": "rdx", "directions": {"a_over_b": {
        "explanations": [{"images": [0, 1], "members": [0, 1, 2], "mean_affinity": 2.5,
                          "low_affinity": False, "filtered": False, "significance": sig},
                         {"images": [3], "members": [2, 3], "mean_affinity": 1.2}],
        "null_members": [4, 5], "filter": {"threshold": 1.1, "clusters": [3]},
        "null_mean_affinity": 1.0}}}
    out = method_payload(MethodInputs("m", doc), 6)
    q = out["directions"]["a_over_b"]
    assert decode(q["assign"]).tolist() == [1, 1, 1, 2, 0, 0]   # overlap: the first wins
    assert q["explanations"][0]["extra"] == {"filtered": False}
    assert q["explanations"][0]["significance"] == {**sig, "badge": significance_badge(sig)}
    assert q["explanations"][1]["n_members"] == 2
    assert q["explanations"][1]["significance"] is None
    assert q["extra"] == {"filter": '{"threshold":1.1,"clusters":[3]}', "null_mean_affinity": 1.0}
    assert "b_over_a" not in out["directions"]
    assert method_payload(MethodInputs("cka", {"method": "cka", "directions": {}}), 6) is None
    doc["directions"]["a_over_b"]["null_members"] = [4, 9]
    with pytest.raises(RDXInputError, match="outside 0..5"):
        method_payload(MethodInputs("m", doc), 6)


def test_page_is_self_contained_with_strict_csp(comparison):
    path = build_explorer(comparison, embedding="pca", progress=False)
    assert path == comparison / "explore.html"
    text, data = page_data(path)
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', text).group(1)
    policy = policy.replace("&#x27;", "'")
    # blob: images: the maps plotly draws in memory for a snapshot; nothing is fetched
    assert policy.startswith("default-src 'none'; img-src data: blob:; style-src "
                             "'unsafe-inline';")
    assert "unsafe-eval" not in policy and "'unsafe-inline'" not in policy.split("script-src")[1]
    scripts = re.findall(r"<script>(.*?)</script>", text, re.S)
    assert len(scripts) == 2                                   # plotly.js and the explorer
    assert policy == csp(*scripts, blob_images=True)            # each allowed by its hash
    assert script_hash(data["snapshot"]["script"]) in data["snapshot"]["csp"]
    # nothing loaded from anywhere: no external src/href, no link or import (plotly.js's own
    # text holds links it never renders with displaylogo off; the CSP would block them)
    own = text.replace(scripts[0], "")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", own)
    assert "<link" not in text and "@import" not in text and "@font-face" not in text
    n = data["n"]
    assert n == N and len(data["thumbs"]) == n
    assert all(u.startswith("data:image/") for u in data["thumbs"])
    p = data["pairs"][0]
    assert p["embedding"]["method"] == "pca"
    assert p["graph"]["source"] == RDX_NAME and p["graph"]["gamma"] == 0.1
    names = [m["name"] for m in p["methods"]]
    assert names == ToyRun.grid_methods()                       # config order; no cka/probe
    assert p["probe"]["source"] == "classification"
    for d in ("a_over_b", "b_over_a"):
        q = p["directions"][d]
        ranking, aff = decode(q["ranking"]), decode(q["affinity_sum"])
        assert sorted(ranking.tolist()) == list(range(n))
        assert (np.diff(aff[ranking]) <= 0).all()               # by affinity sum, descending
    expl = json.loads((comparison / RDX_NAME / "explanations.json").read_text())
    for d in ("a_over_b", "b_over_a"):
        q = p["methods"][names.index(RDX_NAME)]["directions"][d]
        assign = decode(q["assign"])
        for k, e in enumerate(expl["directions"][d]["explanations"], start=1):
            assert sorted(np.flatnonzero(assign == k).tolist()) == sorted(e["members"])
            assert q["explanations"][k - 1]["images"] == e["images"]
        assert sorted(np.flatnonzero(assign == 0)) == sorted(expl["directions"][d]["null_members"])
        assert q["has_null"] and q["has_members"]
    pca = p["methods"][names.index(PCA_NAME)]["directions"]["a_over_b"]
    assert not pca["has_members"] and decode(pca["codes"]).shape == (n, 2)
    assert p["groups"]["a"]["ra"] is None and p["groups"]["b"]["rb"] is None   # implied 1..k
    assert decode(p["groups"]["a"]["rb"]).shape == (n, 12)
    eff = data["build"]["effective"][0]
    assert eff["k"] == 12 and eff["neighborhood_size"] == 9 and eff["seed"] == 3


def test_points_only_when_the_dataset_cannot_be_loaded(comparison, tmp_path):
    copy = tmp_path / "cmp"
    shutil.copytree(comparison, copy)
    images = json.loads((copy / "images.json").read_text())
    images["source"]["dataset"] = "no_such_dataset"        # where the explorer reads them
    (copy / "images.json").write_text(json.dumps(images))
    inp = load_inputs(copy)
    assert inp.load_image is None and "no_such_dataset" in inp.notes[0]
    _, data = page_data(build_explorer(copy, embedding="pca", progress=False))
    assert data["thumbs"] is None and data["notes"][0].startswith("Points only, no thumbnails")


def test_several_pairs_give_a_pair_selector(comparison, tmp_path):
    root = tmp_path / "layers"
    for name in ("block2", "block10"):
        shutil.copytree(comparison, root / name)
    reps = dict(np.load(root / "block10" / "representations.npz"))
    reps["b"] = reps["b"][:, ::-1] * 2.0
    np.savez(root / "block10" / "representations.npz", **reps)
    _, data = page_data(build_explorer(root, embedding="pca", progress=False))
    assert [p["name"] for p in data["pairs"]] == ["block2", "block10"]   # natural order
    images = json.loads((root / "block2" / "images.json").read_text())
    images["indices"] = images["indices"][::-1]
    (root / "block2" / "images.json").write_text(json.dumps(images))
    with pytest.raises(RDXInputError, match="same images"):
        load_inputs(root)


def test_command(comparison, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    explore_cmd.add_arguments(parser)
    out = tmp_path / "page.html"
    args = parser.parse_args([str(comparison), "--out", str(out), "--embedding", "pca",
                              "--k", "5", "--thumb-size", "32"])
    assert explore_cmd.run_command(args) == 0
    assert str(out) in capsys.readouterr().out
    _, data = page_data(out)
    assert data["k"] == 5 and data["thumb_info"]["box"] == 32
    for argv, match in (([str(tmp_path / "missing")], "is not a folder"),
                        ([str(tmp_path)], "no run found"),
                        ([str(comparison), "--thumb-size", "big"], "--thumb-size"),
                        ([str(comparison), "--k", "0"],
                         "--n-neighbors must be a positive integer"),
                        ([str(comparison), "--max-mb", "0.01"], "max_bytes"),
                        ([str(comparison), "--graph-method", "kmeans"], "graph_method"),
                        ([str(comparison), "--out", str(tmp_path)], "is a folder")):
        with pytest.raises(RDXInputError, match=match):
            explore_cmd.run_command(parser.parse_args(argv + ["--quiet", "--embedding", "pca"]))


def test_without_an_rdx_method_the_graph_uses_rdx_defaults(comparison, tmp_path):
    inp = load_inputs(comparison, load_images=False)
    inp.pairs[0].methods = [m for m in inp.pairs[0].methods if m.method != "rdx"]
    _, data = page_data(build_explorer(comparison, tmp_path / "p.html", embedding="pca",
                                       inputs=inp, progress=False))
    g = data["pairs"][0]["graph"]
    assert g["source"] == "defaults" and g["gamma"] == pytest.approx(80 / N)
    assert [m["name"] for m in data["pairs"][0]["methods"]] == [
        m for m in ToyRun.grid_methods() if m != RDX_NAME]
    assert data["thumbs"] is None and data["neighborhood_size"] == 9


def test_typed_and_quantized_arrays_round_trip(rng):
    from rdx.explorer.page import json_block, quantized, typed

    x = rng.normal(size=(7, 3)).astype(np.float32)
    np.testing.assert_array_equal(decode(typed(x)), x)
    q = quantized(x)
    assert q["__t"] == "i16" and q["scale"] == pytest.approx(np.abs(x).max() / 32767)
    assert np.abs(decode(q) - x).max() <= q["scale"] / 2 + 1e-12
    assert decode(typed(np.array([65535], np.uint16)))[0] == 65535
    assert json_block({"s": "</script><!--"}) == '{"s":"\\u003c/script>\\u003c!--"}'


# ------------------------------------------------------------------------- significance

def significance_comparison(root, *, significance=True, extra=()):
    """A comparison folder written by ``rdx explain --report`` (in this process), with
    ``--significance 3`` unless told otherwise: 120 random points in 8 dimensions, of which
    B gathers the first 20 tightly (a planted difference). About 2 s. The explorer reads the
    class of each image from images.json, hence ``--labels``."""
    from rdx.cli import main

    rng = np.random.default_rng(0)
    A = rng.normal(size=(120, 8)).astype(np.float32)
    B = A.copy()
    B[:20] = 3 + 0.1 * rng.normal(size=(20, 8))
    root.mkdir(parents=True, exist_ok=True)
    for name, x in (("A", A), ("B", B), ("y", (np.arange(120) >= 20).astype(np.int64))):
        np.save(root / f"{name}.npy", x)
    out = root / "comparison"
    argv = ["explain", str(root / "A.npy"), str(root / "B.npy"), "--labels",
            str(root / "y.npy"), "--report", "--out", str(out), "--quiet"]
    assert main(argv + (["--significance", "3"] if significance else []) + list(extra)) == 0
    return out


def named_groups_comparison(root):
    """:func:`significance_comparison` without --significance, with two named groups: class
    0 (B's planted cluster, images 0..19) and images 100..119 from a file."""
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "last.npy", np.arange(100, 120))
    return significance_comparison(root, significance=False, extra=[
        "--test-classes", "0", "--test-group", f"last={root / 'last.npy'}"])


def test_page_carries_the_named_groups(tmp_path):
    """Each direction lists the named groups tested in it, with their images (decoded
    exactly) and the record's p-values; a run without them has none."""
    comp = named_groups_comparison(tmp_path / "named")
    tests = json.loads((comp / "rdx" / "explanations.json").read_text())["info"]["group_tests"]
    _, data = page_data(build_explorer(comp, embedding="pca", progress=False))
    (method,) = data["pairs"][0]["methods"]
    for d in ("a_over_b", "b_over_a"):
        q = method["directions"][d]["named_groups"]
        assert {k: q[k] for k in ("null", "n_draws", "n_tests", "alpha")} == {
            "null": "field", "n_draws": 6, "n_tests": 4, "alpha": 0.05}
        assert q["null_name"] == "field null" and "seed twins" in q["no_verdict"]
        want = [g for g in tests["groups"] if g["direction"] == d]
        assert [g["name"] for g in q["groups"]] == ["0", "last"]
        for g, w in zip(q["groups"], want):
            assert decode(g["members"]).tolist() == w["members"]
            assert (g["p_value"], g["p_value_holm"], g["significant"], g["size"]) == (
                w["p_value"], w["p_value_holm"], w["significant"], w["size"])
    assert decode(method["directions"]["b_over_a"]["named_groups"]["groups"][0]["members"]
                  ).tolist() == list(range(20))
    plain = significance_comparison(tmp_path / "plain", significance=False)
    _, data = page_data(build_explorer(plain, embedding="pca", progress=False))
    assert all(q["named_groups"] is None
               for q in data["pairs"][0]["methods"][0]["directions"].values())


def test_significance_badge_wording():
    """One wording for the report and the explorer: p_FWER with 3 decimals, "< 0.001" below
    (not a misleading 0.000); nothing at all where there is no usable record."""
    sig = {"p_value_fwer": 0.0004, "significant": True, "null": "perturbation"}
    b = significance_badge(sig, {"n_null": 3, "alpha": 0.05})
    assert (b["significant"], b["text"], b["p"]) == (True, "significant", "< 0.001")
    assert b["title"].startswith("p_FWER: probability that a comparison of two seed twins")
    assert "family-wise over all explanations" in b["title"]
    # a record of the old name ("perturbation") reads as the field null
    assert "field null, 3 null draws, significant when p_FWER ≤ 0.05" in b["title"]
    assert b["cls"] == "sig" and b["calibrated"]
    b = significance_badge({**sig, "p_value_fwer": 0.2341, "significant": False})
    assert (b["text"], b["p"]) == ("not significant", "0.234")
    assert significance_badge({**sig, "p_value_fwer": 0.001})["p"] == "0.001"
    for bad in (None, 0.01, {}, {"p_value_fwer": None}, {"p_value_fwer": float("nan")}):
        assert significance_badge(bad) is None
    # no verdict where the null is not calibrated for the pair: the badge says so and why
    stand = {"calibrated": False, "basis": "the model family is not known",
             "advice": "pass a seed twin"}
    b = significance_badge({"p_value_fwer": 0.01, "significant": None, "calibrated": False,
                            "null": "field"}, {"n_null": 6, "alpha": 0.05, "standing": stand})
    assert (b["significant"], b["calibrated"], b["cls"]) == (False, False, "uncal")
    assert b["text"] == "no verdict (not calibrated)" and b["p"] == "0.010"
    assert "(the model family is not known); pass a seed twin." in b["title"]


def test_page_carries_each_explanations_significance(tmp_path):
    comp = significance_comparison(tmp_path)
    doc = json.loads((comp / "rdx" / "explanations.json").read_text())
    _, data = page_data(build_explorer(comp, embedding="pca", progress=False))
    (method,) = data["pairs"][0]["methods"]
    for d in ("a_over_b", "b_over_a"):
        written = doc["directions"][d]["explanations"]
        shown = method["directions"][d]["explanations"]
        assert len(shown) == len(written) == 3
        for e, s in zip(written, shown):
            record = s["significance"]
            assert {k: record[k] for k in e["significance"]} == e["significance"]   # all of it
            assert record["badge"] == significance_badge(e["significance"],
                                                         doc["info"]["significance"])
            assert "significance" not in s["extra"]
    # beside each badge, the BSR of the explanation's own grid; per direction, how many of
    # the assessed explanations are significant
    from rdx.evaluation.bsr import bsr_scores

    reps = np.load(comp / "representations.npz")
    for d in ("a_over_b", "b_over_a"):
        q = method["directions"][d]
        for s in q["explanations"]:
            want = bsr_scores(reps["a"], reps["b"], {d: [s["images"]]})[d]["bsr"]
            assert s["bsr"] == pytest.approx(want)
        assert q["significance"]["n_assessed"] == 3
        assert q["significance"]["n_significant"] == sum(
            s["significance"]["badge"]["significant"] for s in q["explanations"])
        assert q["significance"]["alpha"] == doc["info"]["significance"]["alpha"]


def test_selection_matrix_is_kept_within_the_budgets(comparison, tmp_path):
    """The n×n difference for a selection's mean affinities is in the page when it fits
    --selection-mb and leaves the images their share of --max-mb; otherwise the pair says
    why it is missing."""
    full = build_explorer(comparison, tmp_path / "full.html", embedding="pca", progress=False)
    _, data = page_data(full)
    m = data["pairs"][0]["matrix"]
    assert m is not None and m["shared"] and m["b_over_a"] is None
    assert decode(m["a_over_b"]).shape == (N, N)
    none = build_explorer(comparison, tmp_path / "none.html", embedding="pca", progress=False,
                          selection_bytes=0)
    _, data = page_data(none)
    assert data["pairs"][0]["matrix"] is None and "--selection-mb" in \
        data["pairs"][0]["matrix_note"]
    base = none.stat().st_size
    tight = build_explorer(comparison, tmp_path / "tight.html", embedding="pca",
                           progress=False, max_bytes=int(1.2 * base))
    _, data = page_data(tight)
    assert data["pairs"][0]["matrix"] is None and "--max-mb" in data["pairs"][0]["matrix_note"]
    assert data["thumbs"] and tight.stat().st_size <= int(1.2 * base)
