"""Difference clustering over training: the no-change rule, the estimator's
precomputed-similarity hook, the per-checkpoint analysis and the embedded run end to end on
a tiny schedule (trained here from Fashion-MNIST, which is available offline)."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import planted_pairs

from rdx.studies.dynamics import (
    analyse_checkpoint,
    band,
    cluster_mean_affinities,
    cluster_tracks,
    match_clusters,
    csv_row,
    load_config,
    no_change_rule,
    rdx_estimator,
    run_dynamics,
    validate_config,
)
from rdx.errors import RDXInputError
from rdx.method.estimator import RDX

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "training_dynamics.py"


def load_script(path: Path = SCRIPT, name: str = "training_dynamics_script"):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------- no-change rule

def test_no_change_rule_orders_and_merges_constructed_means():
    means = [3.0, 1.2, 7.0, 1.4, 1.6, 0.9]
    r = no_change_rule(means, 1.5)
    assert r["order"] == [5, 1, 3, 4, 0, 2]
    assert r["null"] == [5, 1, 3] and r["explained"] == [4, 0, 2]
    assert r["no_change"] is True
    assert r["new_label"].tolist() == [2, 0, 3, 0, 1, 0]
    # cluster 0 above the threshold: it stays the (difference) cluster 0, nothing merges
    r = no_change_rule([2.0, 5.0, 1.6], 1.5)
    assert r["null"] == [2] and r["explained"] == [0, 1] and r["no_change"] is False
    # ties are broken by index; a mean exactly at the threshold is not merged
    r = no_change_rule([1.5, 1.5, 1.0], 1.5)
    assert r["order"] == [2, 0, 1] and r["explained"] == [0, 1]


def test_rule_on_constructed_affinity_matrix():
    rng = np.random.default_rng(0)
    block = np.array([[1.1, 1.0, 1.0, 1.0],      # cluster 0: 1.1 → no-change
                      [1.0, 9.0, 1.0, 1.0],      # cluster 1: 9.0 → strongest difference
                      [1.0, 1.0, 1.3, 1.0],      # cluster 2: 1.3 → merged
                      [1.0, 1.0, 1.0, 2.5]])     # cluster 3: 2.5 → difference 1
    labels = rng.permutation(np.repeat(np.arange(4), [30, 5, 12, 8]))
    S = block[labels][:, labels]
    means = cluster_mean_affinities(S, labels)
    np.testing.assert_allclose(means, [1.1, 9.0, 1.3, 2.5])
    r = no_change_rule(means, 1.5)
    assert r["null"] == [0, 2] and r["explained"] == [3, 1]
    new = r["new_label"][labels]
    assert (new == 0).sum() == 42 and (new == 1).sum() == 8 and (new == 2).sum() == 5
    # ascending affinity of the relabelled difference clusters
    relabelled = cluster_mean_affinities(S, new)
    assert relabelled[1] < relabelled[2] and relabelled[0] < 1.5


def test_estimator_merge_follows_the_rule():
    """RDX(merge_low_affinity=True) puts exactly the clusters the rule names into the
    no-change group (same seed → same spectral clustering)."""
    A, B, _ = planted_pairs(n_per=30)
    raw = RDX(5, random_state=3, device="cpu", keep_graphs=True).fit(A, B)
    d = raw.directions_["a_over_b"]
    means = [d.null_mean_affinity] + [e.mean_affinity for e in d.explanations]
    assert means == sorted(means)
    # the affinity matrix gives the same means for the estimator's labels
    S = raw.graph_arrays()["affinity_a_over_b"]
    np.testing.assert_allclose(cluster_mean_affinities(S, d.labels), means, rtol=1e-4)
    threshold = float(np.mean(means[2:4]))           # merges clusters 1 and 2, keeps 3–5
    rule = no_change_rule(means, threshold)
    assert rule["null"] == [0, 1, 2]
    merged = RDX(5, random_state=3, device="cpu", merge_low_affinity=True,
                 null_threshold=threshold).fit(A, B).directions_["a_over_b"]
    np.testing.assert_array_equal(merged.labels, rule["new_label"][d.labels])
    assert [e.mean_affinity for e in merged.explanations] == means[3:]


# --------------------------------------------------------------------------- estimator hook

def test_precomputed_similarity_gives_the_same_fit_and_is_not_modified():
    A, B, lab = planted_pairs(n_per=25)
    est = RDX(3, random_state=0, device="cpu")
    R = est.similarity_of(A)     # numpy on the CPU
    before = R.copy()
    plain = RDX(3, random_state=0, device="cpu").fit(A, B).to_dict()
    reused = RDX(3, random_state=0, device="cpu").fit(A, B, similarity_a=R)
    assert np.array_equal(R, before)
    doc = reused.to_dict()
    assert json.dumps(plain["directions"], sort_keys=True) == \
        json.dumps(doc["directions"], sort_keys=True)
    # a torch tensor works too, and guidance still applies on top of the reused ranks
    g1 = RDX(3, random_state=0, device="cpu", guidance="ground_truth").fit(A, B, lab)
    g2 = RDX(3, random_state=0, device="cpu", guidance="ground_truth").fit(
        A, B, lab, similarity_a=torch.from_numpy(R))
    assert np.array_equal(g1.directions_["a_over_b"].labels, g2.directions_["a_over_b"].labels)
    with pytest.raises(RDXInputError, match="similarity_a"):
        RDX(3, device="cpu").fit(A, B, similarity_a=R[:10, :10])


# --------------------------------------------------------------------------- one checkpoint

def test_identical_checkpoint_puts_every_image_in_the_no_change_group():
    A, _, lab = planted_pairs(n_per=25)
    correct = np.ones(len(A), dtype=bool)
    est = rdx_estimator({}, "cpu")
    summary, labels = analyse_checkpoint(A, A.copy(), correct_t=correct, correct_final=correct,
                                         classes=lab % 3, n_classes=3, device="cpu",
                                         similarity_final=est.similarity_of(A))
    assert (labels == 0).all()
    assert summary["no_change"] and summary["n_difference_clusters"] == 0
    assert summary["n_merged"] == 9
    assert summary["cluster0"]["size"] == len(A)
    assert summary["cluster0"]["mean_affinity"] == pytest.approx(1.0)
    assert summary["band"]["size"] == {"mean": 0.0, "min": 0.0, "max": 0.0}
    assert summary["band"]["accuracy"] is None


def test_different_checkpoint_summary_is_consistent():
    A, B, lab = planted_pairs(n_per=25)
    classes = lab % 4
    correct_t = classes != 1                 # C_t is wrong on class 1
    correct_f = np.ones(len(A), dtype=bool)
    s, labels = analyse_checkpoint(A, B, correct_t=correct_t, correct_final=correct_f,
                                   classes=classes, n_classes=4, device="cpu")
    sizes = [s["cluster0"]["size"]] + [c["size"] for c in s["clusters"]]
    assert sum(sizes) == len(A) and np.bincount(labels).tolist() == sizes
    affs = [c["mean_affinity"] for c in s["clusters"]]
    assert affs == sorted(affs) and all(a >= 1.5 for a in affs)
    assert s["n_merged"] + s["n_difference_clusters"] == 9
    for c in s["clusters"]:
        members = labels == c["label"]
        assert c["accuracy"] == pytest.approx(correct_t[members].mean())
        assert c["class_counts"] == np.bincount(classes[members], minlength=4).tolist()
        assert c["accuracy_final"] == 1.0 and len(c["grid"]) <= 9
    assert s["band"]["size"]["min"] == min(sizes[1:]) and s["band"]["size"]["max"] == max(sizes[1:])
    assert band([1.0, None, float("nan"), 3.0]) == {"mean": 2.0, "min": 1.0, "max": 3.0}


def test_config_validation_names_the_key():
    good = {"name": "x", "checkpoints": {"dir": "d"},
            "probe": {"dataset": "fashion_mnist", "num_images": 5}}
    cfg = validate_config(good)
    assert cfg["rdx"] == {"n_clusters": 10, "null_threshold": 1.5}
    assert cfg["output"] == "outputs/training_dynamics/x"
    with pytest.raises(RDXInputError, match=r"rdx\.merge_low_affinity: unknown key"):
        validate_config({**good, "rdx": {"merge_low_affinity": False}})
    with pytest.raises(RDXInputError, match="probe"):
        validate_config({**good, "probe": {"split": "train"}})
    with pytest.raises(RDXInputError, match="figures.cluster"):
        validate_config({**good, "figures": {"cluster": "biggest"}})
    for name in ("fashion5", "butterflies"):
        load_config(REPO / "configs" / f"training_dynamics_{name}.yaml")


def test_save_every_steps_option():
    from rdx.models.training import _save_plan

    assert _save_plan(["every:3", 0], 4, 10) == {0, 3, 6, 9}
    assert _save_plan("every:4", 4, 8) == {4, 8}
    with pytest.raises(RDXInputError, match="every:N"):
        _save_plan(["every:0"], 4, 8)
    tc = load_script(REPO / "scripts" / "train_classifier.py", "train_classifier_for_dyn")
    assert tc.parse_save_every("epoch,0,4,every:8") == ("epoch", 0, 4, "every:8")
    assert tc.PRESETS["fashion5_dynamics"].class_subset == (1, 2, 4, 6, 8)


# --------------------------------------------------------------------------- cluster tracks

def test_match_clusters_pairs_by_member_overlap():
    # checkpoint 1: clusters 1 = {0..9}, 2 = {10..19}, 3 = {20..24}; the rest no-change
    prev = np.zeros(40, dtype=int)
    prev[:10], prev[10:20], prev[20:25] = 1, 2, 3
    # checkpoint 2: the labels are permuted, cluster "2" lost two images, a new one appears
    cur = np.zeros(40, dtype=int)
    cur[:10], cur[12:20], cur[30:36] = 3, 1, 2
    # Jaccard: (3 vs 1) = 1, (1 vs 2) = 8/10; the new cluster 2 shares nothing
    assert match_clusters(prev, cur) == {3: 1, 1: 2}
    tracks = cluster_tracks([prev, cur, cur])
    assert tracks[0] == {0: 0, 1: 1, 2: 2, 3: 3}
    assert tracks[1] == {0: 0, 3: 1, 1: 2, 2: 4}          # new cluster: next free track
    assert tracks[2] == tracks[1]
    # one-to-one: two current clusters overlapping the same previous one share nothing
    cur2 = np.zeros(40, dtype=int)
    cur2[:6], cur2[6:10] = 1, 2
    assert match_clusters(prev, cur2) == {1: 1}            # {0..5}: J 0.6 > {6..9}: 0.4
    assert match_clusters(prev, cur2, min_jaccard=0.7) == {}
    with pytest.raises(RDXInputError, match="same probe images"):
        match_clusters(prev, cur[:30])


def test_match_clusters_maximises_the_total_overlap():
    import itertools

    rng = np.random.default_rng(3)
    for _ in range(20):
        prev, cur = rng.integers(0, 5, 60), rng.integers(0, 5, 60)
        m = match_clusters(prev, cur, min_jaccard=0.0)
        P, C = np.unique(prev[prev > 0]), np.unique(cur[cur > 0])

        def jac(p, c):
            a, b = prev == p, cur == c
            return (a & b).sum() / (a | b).sum()

        best = max(sum(jac(p, c) for p, c in zip(perm, C))
                   for perm in itertools.permutations(P, len(C)))
        assert sum(jac(p, c) for c, p in m.items()) == pytest.approx(best)


# --------------------------------------------------------------------------- embedded run

@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The embedded fashion5 config on a tiny schedule: 50 images per class, 4 epochs of 4
    steps, checkpoints at steps 0, 1, 2 and every epoch end; trained and analysed by the
    script."""
    root = tmp_path_factory.mktemp("dynamics")
    base = yaml.safe_load((REPO / "configs" / "training_dynamics_fashion5.yaml").read_text())
    base.update(output=str(root / "out"), device="cpu",
                checkpoints={"dir": str(root / "ck" / "fashion5_dynamics")},
                train={"preset": "fashion5_dynamics", "per_class": 50, "epochs": 4,
                       "test": False, "save_every": ["epoch", 0, 1, 2]})
    base["probe"]["num_images"] = 50
    cfg_path = root / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(base))
    script = load_script()
    assert script.main(["--config", str(cfg_path), "--quiet"]) == 0
    return {"root": root, "cfg": cfg_path, "out": root / "out", "script": script,
            "doc": json.loads((root / "out" / "dynamics.json").read_text())}


def test_embedded_run_end_to_end(tiny_run):
    doc, out = tiny_run["doc"], tiny_run["out"]
    recs = doc["checkpoints"]
    assert [r["step"] for r in recs] == [0, 1, 2, 4, 8, 12, 16]
    assert doc["probe"]["n_images"] == 250 and doc["probe"]["is_training_set"] is True
    assert doc["probe"]["class_names"] == ["Trouser", "Pullover", "Coat", "Shirt", "Bag"]
    for r in recs:
        sizes = [r["cluster0"]["size"]] + [c["size"] for c in r["clusters"]]
        assert sum(sizes) == 250
        assert r["train_accuracy"] is not None and 0 <= r["probe_accuracy"] <= 1
        assert sum(r["cluster0"]["class_counts"]) == r["cluster0"]["size"]
        labels = np.load(out / "checkpoints" / f"{r['checkpoint']}.npz")["labels"]
        assert np.bincount(labels, minlength=len(sizes)).tolist() == sizes
    # the last checkpoint is the final model itself: everything is "no change"
    assert recs[-1]["cluster0"]["size"] == 250 and recs[-1]["n_difference_clusters"] == 0
    assert recs[-1]["probe_accuracy"] == doc["final"]["probe_accuracy"]
    first = doc["no_change_from"]
    assert first is not None and recs[first]["no_change"]
    # tables: one row per checkpoint, one per checkpoint × cluster
    rows = (out / "dynamics.csv").read_text().splitlines()
    assert len(rows) == 1 + len(recs) and rows[0].startswith("index,checkpoint,step")
    assert "c0_mean_affinity" in rows[0] and "band_size_max" in rows[0]
    n_clusters = sum(1 + len(r["clusters"]) for r in recs)
    assert len((out / "clusters.csv").read_text().splitlines()) == 1 + n_clusters
    assert set(csv_row(recs[0], doc["probe"]["class_names"])) >= {"c0_n_Shirt", "accuracy_Bag"}


def test_no_change_group_grows_towards_the_final_model(tiny_run):
    recs = tiny_run["doc"]["checkpoints"][:-1]        # without the final model itself
    steps = np.array([r["step"] for r in recs], dtype=float)
    sizes = np.array([r["cluster0"]["size"] for r in recs], dtype=float)
    rank = lambda v: np.argsort(np.argsort(v, kind="stable"), kind="stable")
    rho = np.corrcoef(rank(steps), rank(sizes))[0, 1]
    assert rho > 0.5, (steps, sizes)
    assert sizes[-1] > sizes[0]
    assert sizes[len(sizes) // 2:].mean() > sizes[:len(sizes) // 2].mean()


def test_figures_and_report_written(tiny_run):
    out, doc = tiny_run["out"], tiny_run["doc"]
    figs = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert "dynamics_curves.png" in figs and any(f.startswith("clusters_C0_") for f in figs)
    assert "cluster_makeup.png" in figs and any(f.startswith("grids_C") for f in figs)
    for f in figs:
        assert (out / "figures" / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(figs)
    assert "http://" not in html.replace("http-equiv", "") and "<script" not in html
    assert "Training dynamics" in html and f"C{len(doc['checkpoints']) - 1}" in html
    # the no-change badges sit inside their table cells (not hoisted out of the table)
    table = html.split("<h3>Per checkpoint</h3>", 1)[1].split("</table>", 1)[0]
    n_badges = sum(r["no_change"] for r in doc["checkpoints"])
    assert len(re.findall(r'<span class="badge">no-change</span></td>', table)) == n_badges


def test_every_cluster_is_followed_across_checkpoints(tiny_run):
    from rdx.viz.dynamics_makeup import cluster_makeup_figure, cluster_tracks_of

    doc, out = tiny_run["doc"], tiny_run["out"]
    recs = doc["checkpoints"]
    labels = [np.load(out / "checkpoints" / f"{r['checkpoint']}.npz")["labels"] for r in recs]
    expected = cluster_tracks(labels)
    for r, tr in zip(recs, expected):
        assert r["cluster0"]["track"] == 0
        assert {c["label"]: c["track"] for c in r["clusters"]} == \
            {k: v for k, v in tr.items() if k}
    assert doc["tracks"]["n_tracks"] == 1 + max(max(t.values()) for t in expected)
    header = (out / "clusters.csv").read_text().splitlines()[0].split(",")
    assert "track" in header
    # the make-up figure: one bar per (track, class, checkpoint) = the cluster's class counts
    fig = cluster_makeup_figure(doc, max_tracks=100)
    tracks = cluster_tracks_of(doc)
    bars = {}
    for ax in fig.axes:
        for p in ax.patches:
            gid = p.get_gid() or ""
            if gid.startswith("makeup:") and gid.count(":") == 2:
                _, t, k = gid.split(":")
                i = int(round(p.get_x() + p.get_width() / 2))
                bars[(int(t), int(k), i)] = p.get_height()
    assert {t for t, _, _ in bars} == set(tracks)
    assert len(bars) == len(tracks) * len(doc["probe"]["class_names"]) * len(recs)
    for (t, k, i), h in bars.items():
        c = tracks[t].get(i)
        assert h == (c["class_counts"][k] if c else 0)


def test_grids_at_a_chosen_checkpoint_through_the_cli(tiny_run, capsys):
    from rdx.cli import main

    out = tiny_run["out"]
    rec = tiny_run["doc"]["checkpoints"][2]
    assert main(["dynamics", "--config", str(tiny_run["cfg"]), "--out", str(out),
                 "--grids-at", "C2", "--quiet"]) == 0
    fig = out / "figures" / f"grids_C2_{rec['checkpoint']}.png"
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert "The grid of every cluster at C2" in html
    assert main(["dynamics", "--config", str(tiny_run["cfg"]), "--out", str(out),
                 "--grids-at", "C99", "--quiet"]) == 2
    assert "grids_at" in capsys.readouterr().err


def test_rerun_reuses_finished_checkpoints(tiny_run, capsys):
    cfg = load_config(tiny_run["cfg"])
    out = tiny_run["out"]
    victim = tiny_run["doc"]["checkpoints"][2]["checkpoint"]
    (out / "checkpoints" / f"{victim}.json").unlink()
    doc = run_dynamics(cfg, progress=True)
    log = capsys.readouterr().out
    assert log.count("[reused]") == len(doc["checkpoints"]) - 1
    assert log.count("[computed]") == 1 and victim in [ln.split()[1] for ln in
                                                       log.splitlines() if "[computed]" in ln]
    strip = lambda d: [{k: v for k, v in r.items() if k != "rdx_seconds"}
                       for r in d["checkpoints"]]
    assert strip(doc) == strip(tiny_run["doc"])


def test_missing_checkpoints_exit_2(tmp_path, capsys):
    cfg = {"name": "none", "output": str(tmp_path / "o"),
           "checkpoints": {"dir": str(tmp_path / "nothing")},
           "train": {"preset": "fashion5_dynamics"},
           "probe": {"dataset": "fashion_mnist", "num_images": 5}}
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(cfg))
    assert load_script().main(["--config", str(p), "--no-train", "--quiet"]) == 2
    assert "--no-train" in capsys.readouterr().err
