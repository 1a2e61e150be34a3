"""Layer-wise study: layer capture, head patching, permutation statistics, config, runner."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from rdx.configs import validate
from rdx.errors import RDXInputError
from rdx.commands.layers import run_command
from rdx.evaluation.permutation import cluster_permutation_test
from rdx.studies.layers import LayersConfig, load_layers_config, run_layers, select_study_images
from rdx.models.layers import (LayerSpec, as_layer_specs, auto_layers, capture_batch,
                               extract_layers, prefix_tokens)
from rdx.models.patching import (AttentionHooks, ablate_head, cluster_neighbourhood_delta,
                                 head_output_means, mean_ablation, topk_neighbourhood_change)
from rdx.models.vit import build_vit

ROOT = Path(__file__).resolve().parents[1]
TINY = {"img_size": 8, "patch_size": 4, "embed_dim": 16, "depth": 2, "num_heads": 2,
        "mlp_ratio": 2.0, "num_classes": 10}


@pytest.fixture(scope="module")
def vit():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return build_vit(TINY).eval()


@pytest.fixture(scope="module")
def x():
    return torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(1))


def manual_tokens(m, x):
    """The ViT's forward written out: tokens entering block 0, after each block, after norm."""
    t = m.norm_pre(m.patch_drop(m._pos_embed(m.patch_embed(x))))
    seq = [t]
    for blk in m.blocks:
        t = blk(t)
        seq.append(t)
    return seq, m.norm(t)


# ----------------------------------------------------------------------------- capture

def test_capture_matches_manual_forward(vit, x):
    specs = as_layer_specs(["input:blocks.0/mean", "input:blocks.1", "blocks.0", "blocks.1/mean",
                            "norm", "head", "output", "blocks.1/flatten"])
    with torch.no_grad():
        got = capture_batch(vit, x, specs)
        seq, normed = manual_tokens(vit, x)
        logits = vit(x)
    assert prefix_tokens(vit) == 1
    torch.testing.assert_close(got["input:blocks.0/mean"], seq[0][:, 1:].mean(1))
    torch.testing.assert_close(got["input:blocks.1"], seq[1][:, 0])
    torch.testing.assert_close(got["blocks.0"], seq[1][:, 0])
    torch.testing.assert_close(got["blocks.1/mean"], seq[2][:, 1:].mean(1))
    torch.testing.assert_close(got["blocks.1/flatten"], seq[2].flatten(1))
    torch.testing.assert_close(got["norm"], normed[:, 0])
    torch.testing.assert_close(got["head"], logits)
    torch.testing.assert_close(got["output"], logits)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in vit.modules())


def test_capture_stops_after_last_layer_and_leaves_no_hooks(vit, x):
    calls = []
    h = vit.norm.register_forward_hook(lambda *a: calls.append(1))
    try:
        with torch.no_grad():
            capture_batch(vit, x, [LayerSpec("blocks.0")])
        assert calls == []            # the forward pass stopped after block 0
        with torch.no_grad():
            capture_batch(vit, x, [LayerSpec("blocks.0"), LayerSpec("output")])
        assert calls == [1]           # the output was asked for: the whole pass ran
    finally:
        h.remove()
    with pytest.raises(RDXInputError, match="did you mean"):
        capture_batch(vit, x, [LayerSpec("blocks.9x")])


def test_capture_convnet_and_torchvision():
    from torchvision.models import resnet18

    from rdx.models.convnet import ConvNet

    net = ConvNet(width=4).eval()
    xs = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        got = capture_batch(net, xs, auto_layers(net))
        torch.testing.assert_close(got["layer1"], net.layer1(xs).mean((2, 3)))
        torch.testing.assert_close(got["layer2"], net.features(xs))
        torch.testing.assert_close(got["fc"], net(xs))
    rn = resnet18(weights=None).eval()
    xr = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        got = capture_batch(rn, xr, as_layer_specs(["layer2", "input:fc"]))
        h = rn.maxpool(rn.relu(rn.bn1(rn.conv1(xr))))
        h2 = rn.layer2(rn.layer1(h))
        torch.testing.assert_close(got["layer2"], h2.mean((2, 3)))
        torch.testing.assert_close(got["input:fc"], torch.flatten(rn.avgpool(rn.layer4(
            rn.layer3(h2))), 1))


def test_auto_layers_of_a_clip_like_tower(vit):
    class Tower(nn.Module):   # the shape of OpenCLIP's timm towers (BiomedCLIP)
        def __init__(self):
            super().__init__()
            self.trunk = vit
            self.head = nn.Sequential(nn.Linear(16, 5))

        def forward(self, x):
            return self.head(self.trunk.forward_head(self.trunk.forward_features(x),
                                                     pre_logits=True))

    class Clip(nn.Module):
        def __init__(self):
            super().__init__()
            self.visual = Tower()

        def encode_image(self, x):
            return self.visual(x)

    keys = [s.key for s in auto_layers(Clip())]
    assert keys == ["input:visual.trunk.blocks.0/mean", "visual.trunk.blocks.0",
                    "visual.trunk.blocks.1", "visual.trunk.norm", "visual.head"]
    assert [s.label for s in auto_layers(vit)] == ["b0.in-mean", "b0", "b1", "norm", "head"]


def test_extract_layers_caches_every_layer(tmp_path, vit):
    from rdx.data import get_dataset
    from rdx.models.checkpoint import grey_transform
    from rdx.models.loaded_model import LoadedModel

    ds = get_dataset("digits")
    loaded = LoadedModel(vit, grey_transform(8), "tiny-vit", "seed0", "", vit)
    specs = as_layer_specs(["blocks.0", "norm/mean"])
    idx = np.arange(0, 40)
    first = extract_layers(loaded, ds, specs, idx, batch_size=16, device="cpu",
                           cache_dir=tmp_path, progress=False)
    assert len(list(tmp_path.glob("*.npy"))) == 2
    x = torch.stack([grey_transform(8)(ds.load_image(i)) for i in idx])
    with torch.no_grad():
        ref = capture_batch(vit, x, specs)
    np.testing.assert_allclose(first["norm/mean"], ref["norm/mean"].numpy(), atol=1e-6)
    # second call: from the cache (a model that fails if run proves it)
    broken = LoadedModel(vit, grey_transform(8), "tiny-vit", "seed0", "",
                         lambda _x: (_ for _ in ()).throw(AssertionError("ran")))
    again = extract_layers(broken, ds, specs, idx, batch_size=16, device="cpu",
                           cache_dir=tmp_path, progress=False, run=broken.feature_fn)
    np.testing.assert_array_equal(again["blocks.0"], first["blocks.0"])


# ----------------------------------------------------------------------------- patching

def test_no_hook_means_timm_output_and_unfused_matches(vit, x):
    attn = vit.blocks[1].attn
    with torch.no_grad():
        ref = vit(x)
        hooks = AttentionHooks(attn)
        assert vit(x).equal(ref)                      # nothing registered: timm's own path
        removers = [hooks.register(p, lambda t: t) for p in ("q", "k", "v", "attn_weights",
                                                              "attn_output")]
        assert attn._forward_hooks                   # now the unfused recomputation runs
        torch.testing.assert_close(vit(x), ref, atol=1e-5, rtol=1e-5)
        for r in removers:
            r()
        assert not attn._forward_hooks
        assert vit(x).equal(ref)


def test_patching_with_the_true_mean_of_identical_images_changes_nothing(vit, x):
    same = x[:1].repeat(5, 1, 1, 1)
    with torch.no_grad():
        ref = vit(same)
        means = head_output_means([same], vit, {str(b): blk.attn
                                                for b, blk in enumerate(vit.blocks)})
        for b, blk in enumerate(vit.blocks):
            for h in range(blk.attn.num_heads):
                with mean_ablation(blk.attn, means[str(b)], h):
                    torch.testing.assert_close(vit(same), ref, atol=1e-5, rtol=1e-5)


def test_mean_ablation_replaces_exactly_one_head(vit, x):
    attn = vit.blocks[0].attn
    with torch.no_grad():
        means = head_output_means([x], vit, {"a": attn})["a"]
        seen = {}
        rec = AttentionHooks(attn)
        remove = rec.register("attn_output", lambda t: seen.setdefault("plain", t))
        vit(x)
        remove()
        with mean_ablation(attn, means, 1) as hooks:
            hooks.register("attn_output", lambda t: seen.setdefault("patched", t))
            out = vit(x)
    plain, patched, dh = seen["plain"], seen["patched"], attn.head_dim
    torch.testing.assert_close(patched[:, :, :dh], plain[:, :, :dh])
    torch.testing.assert_close(patched[:, :, dh:], torch.as_tensor(
        means[:, 1], dtype=torch.float32).expand(len(x), -1, -1))
    torch.testing.assert_close(torch.as_tensor(means, dtype=torch.float32),
                               plain.mean(0).reshape(-1, 2, dh), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(patched, plain)
    assert out.shape == (len(x), 10)
    assert ablate_head(plain, torch.zeros_like(torch.as_tensor(means)).float(), 0, dh)[
        :, :, :dh].abs().max() == 0
    with pytest.raises(RDXInputError, match="timm"):
        AttentionHooks(nn.MultiheadAttention(4, 2))


def test_patching_metrics_by_hand():
    # ranks of 4 points on a line (0, 1, 3, 7): neighbours by distance
    R = torch.tensor([[0, 1, 2, 3], [1, 0, 2, 3], [2, 1, 0, 3], [3, 2, 1, 0]], dtype=torch.float32)
    Q = R.clone()
    Q[0] = torch.tensor([0, 2, 1, 3])     # image 0 now prefers image 2
    # k=1: rows 1-3 keep their nearest neighbour, row 0 loses it
    assert topk_neighbourhood_change(Q, R, 1) == pytest.approx(0.25)
    labels = np.array([1, 1, 0, 0])
    d = cluster_neighbourhood_delta(Q, R, labels, "b_over_a")
    # symmetrised ranks of (0, 1): R (1+1)/2 = 1, Q (2+1)/2 = 1.5 → δ = 0.5 / (n − 1)
    assert d["labels"] == [1] and d["delta"][0] == pytest.approx(0.5 / 3)
    # outside the cluster: pair (2, 3) unchanged → |Δ| = 0, selectivity = δ / 1e-8
    assert d["selectivity"][0] == pytest.approx(0.5 / 1e-8)
    assert cluster_neighbourhood_delta(Q, R, labels, "a_over_b")["delta"][0] == \
        pytest.approx(-0.5 / 3)


# ----------------------------------------------------------------------------- statistics

def test_permutation_pvalues_are_uniform_under_the_null():
    from scipy.stats import kstest

    ps, binary = [], []
    for seed in range(300):
        rng = np.random.default_rng(seed)
        labels = rng.permutation(np.repeat([0, 1, 2], [20, 25, 15]))
        t = cluster_permutation_test(labels, values=rng.normal(size=60), n_permutations=199,
                                     seed=seed + 1000)
        ps.append(t["rate_p"][1])
        flags = rng.random(60) < 0.3
        binary.append(cluster_permutation_test(labels, values=flags, classes=rng.integers(
            0, 3, 60), n_permutations=199, seed=seed)["rate_p"][1])
    assert min(ps) >= 1 / 200                       # add-one: never 0
    assert kstest(ps, "uniform").pvalue > 0.01
    binary = np.array(binary)
    for a in (0.05, 0.1, 0.25):                     # ties make it conservative, never liberal
        assert np.mean(binary <= a) <= a + 3 * np.sqrt(a * (1 - a) / len(binary))


def test_permutation_pvalues_match_exact_tails():
    from itertools import combinations

    from scipy.stats import hypergeom

    labels = np.repeat([0, 1], [30, 10])
    flags = np.zeros(40, bool)
    flags[[30, 31, 32, 33, 0, 1]] = True            # cluster 1 holds 4 of the 6 changes
    t = cluster_permutation_test(labels, values=flags, n_permutations=20000, seed=0)
    exact = hypergeom.sf(3, 40, 6, 10)              # P(X ≥ 4)
    assert t["rate"][1] == pytest.approx(0.4)
    assert t["rate_p"][1] == pytest.approx(exact, abs=0.004)
    # majority fraction: 8 images, two clusters of 4, classes 0 0 0 1 | 1 1 1 1 → cluster 1
    # is pure; exact p = P(a random 4-set is pure) by enumeration
    cls = np.array([0, 0, 0, 1, 1, 1, 1, 1])
    lab = np.repeat([0, 1], 4)
    t = cluster_permutation_test(lab, classes=cls, n_permutations=20000, seed=1)
    subsets = list(combinations(range(8), 4))
    pure = np.mean([len(set(cls[list(s)])) == 1 for s in subsets])
    assert t["majority_fraction"] == [0.75, 1.0]
    assert t["homogeneity_p"][1] == pytest.approx(pure, abs=0.006)
    again = cluster_permutation_test(lab, classes=cls, n_permutations=20000, seed=1)
    assert again == t                               # local, seeded generator


def test_select_study_images_is_seeded_and_disjoint():
    a, p = select_study_images(100, 30, 20, 0)
    assert len(set(a) | set(p)) == 50
    a2, _ = select_study_images(100, 30, 20, 0)
    np.testing.assert_array_equal(a, a2)
    with pytest.raises(RDXInputError, match="only 100"):
        select_study_images(100, 90, 20, 0)


# ----------------------------------------------------------------------------- config

BASE = {"name": "t", "model": {"model": "timm:vit_tiny_patch16_224", "pretrained": False},
        "data": {"dataset": "digits"}}


@pytest.mark.parametrize("patch, path", [
    ({"data": {"dataset": "digits", "n_images": -1}}, "data.n_images"),
    ({"patching": {"blok": 1}}, "patching.blok"),
    ({"patching": {"heads": [0, 0]}}, "patching.heads"),
    ({"stats": {"alpha": 2}}, "stats.alpha"),
    ({"rdx": {"beta": -1}}, "rdx"),
    ({"rdx": {"bogus": 1}}, "rdx"),
    ({"name": "../up"}, "name"),
    ({"layers": ["blocks.0"]}, "layers"),
    ({"layers": ["blocks.0", "blocks.1/median"]}, "layers"),
])
def test_config_errors_name_the_key(patch, path):
    with pytest.raises(RDXInputError) as err:
        validate(LayersConfig, {**BASE, **patch})
    assert f"{path}:" in str(err.value)


def test_shipped_configs_validate():
    cfgs = sorted((ROOT / "configs").glob("layers_*.yaml"))
    assert len(cfgs) >= 2
    for p in cfgs:
        load_layers_config(p)


# ----------------------------------------------------------------------------- runner

def _tiny_config(tmp_path: Path, **extra) -> Path:
    import yaml

    cfg = {"name": "tiny", "output": str(tmp_path / "out"),
           "model": {"model": "rdx_vit", "checkpoint": str(tmp_path / "vit.pt")},
           "train": {"dataset": "digits", "per_class": 15, "test_split": None, "epochs": 1,
                     "arch": {k: v for k, v in TINY.items() if k != "num_classes"}},
           "data": {"dataset": "digits", "n_images": 120, "n_probe": 100},
           "rdx": {"n_explanations": 2, "grid_size": 4},
           "probes": {"knn_k": 5}, "stats": {"n_permutations": 99},
           "patching": {"k": 5}, "chance_draws": 0, "device": "cpu",
           "cache_dir": str(tmp_path / "cache"), **extra}
    p = tmp_path / "layers_tiny.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_runner_end_to_end_resumes_and_reports(tmp_path):
    from rdx.report.layers import write_layers_report
    from rdx.results.store import ComparisonRun

    path = _tiny_config(tmp_path)
    args = argparse.Namespace(config=str(path), output=None, device=None, force=False,
                              check=False, no_report=False, quiet=True)
    assert run_command(args, report=write_layers_report) == 0
    out = tmp_path / "out"
    doc = json.loads((out / "layers.json").read_text())
    assert doc["format"] == "rdx-layers" and doc["model"]["model"] == "rdx_vit"
    assert [lay["label"] for lay in doc["layers"]] == ["b0.in-mean", "b0", "b1", "norm", "head"]
    assert len(doc["pairs"]) == 4
    for p in doc["pairs"]:
        run = ComparisonRun(out / p["folder"])
        reps = run.representations
        assert reps["a"].shape[0] == reps["b"].shape[0] == len(reps["labels"]) == 120
        # the pair names where its images come from (the explorer reads them from there)
        sel = json.loads((out / p["folder"] / "run.json").read_text())["config"][
            "image_selection"]
        cfg_data = load_layers_config(path).data
        assert sel["indices"] == "images.json" and sel["data_root"] == cfg_data.data_root
        assert sel["root"] == cfg_data.root
        res = run.result("rdx")
        for d in ("a_over_b", "b_over_a"):
            st = p["directions"][d]
            assert st["n_clusters"] == len(res.directions[d].explanations)
            for c in st["clusters"]:
                assert 1 / 100 <= c["change_p"] <= 1 and 1 / 100 <= c["homogeneity_p"] <= 1
    pd = doc["patching"]
    assert pd["blocks"] == [0, 1] and pd["heads"] == [0, 1]
    assert max(pd["rerun_max_abs_diff"].values()) < 1e-4
    assert np.isfinite(np.array(pd["metrics"]["topk_change"])).all()
    html = (out / "report.html").read_text()
    assert "http://" not in html and "https://" not in html and "data:image/png" in html
    assert (out / "figures" / "patching_topk_change.png").is_file()
    # a second run reuses every pair and head
    stamps = {p: p.stat().st_mtime_ns for p in (out / "patching").glob("b*_h*.json")}
    doc2 = run_layers(load_layers_config(path), progress=False)
    assert all(p["state"] == "reused" for p in doc2["pairs"])
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert doc2["patching"]["metrics"] == pd["metrics"]


def test_run_command_check_and_bad_layers(tmp_path, capsys):
    path = _tiny_config(tmp_path, layers=["blocks.0", "blocks.7"])
    args = argparse.Namespace(config=str(path), output=None, device=None, force=False,
                              check=True, no_report=True, quiet=False)
    assert run_command(args) == 0
    assert "valid" in capsys.readouterr().out
    args.check = False
    with pytest.raises(RDXInputError, match="blocks.7"):
        run_command(args)


def test_open_clip_timm_tower_like_biomedclip():
    """A real OpenCLIP model whose image tower is a timm ViT trunk plus a linear projection
    (BiomedCLIP's layout), randomly initialised and tiny."""
    from open_clip.model import CLIP, CLIPTextCfg, CLIPVisionCfg

    with torch.random.fork_rng():
        torch.manual_seed(0)
        clip = CLIP(embed_dim=8, vision_cfg=CLIPVisionCfg(
            timm_model_name="vit_tiny_patch16_224", timm_model_pretrained=False, timm_pool="",
            timm_proj="linear"), text_cfg=CLIPTextCfg(context_length=8, vocab_size=50,
                                                      width=16, heads=2, layers=1)).eval()
    specs = auto_layers(clip)
    assert specs[0].key == "input:visual.trunk.blocks.0/mean"
    assert [s.key for s in specs[-3:]] == ["visual.trunk.blocks.11", "visual.trunk.norm",
                                           "visual.head"]
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = capture_batch(clip, x, specs[-2:])
        torch.testing.assert_close(got["visual.head"], clip.encode_image(x))
        trunk = clip.visual.trunk
        torch.testing.assert_close(got["visual.trunk.norm"],
                                   trunk.norm(trunk.blocks(trunk.norm_pre(trunk._pos_embed(
                                       trunk.patch_embed(x)))))[:, 0])
        same = x[:1].repeat(3, 1, 1, 1)
        attn = clip.visual.trunk.blocks[5].attn
        means = head_output_means([same], clip.encode_image, {"b5": attn})["b5"]
        ref = clip.encode_image(same)
        with mean_ablation(attn, means, 2):
            torch.testing.assert_close(clip.encode_image(same), ref, atol=1e-5, rtol=1e-4)


def test_vit_training_is_seeded_and_checkpointed(tmp_path):
    from rdx.data import get_dataset
    from rdx.data.sampling import select_per_class
    from rdx.models.vit import load_vit, train_vit

    ds = get_dataset("digits")
    sub = ds.subset(select_per_class(ds.ids, ds.labels, None, 10, seed=0))
    arch = {k: v for k, v in TINY.items() if k != "num_classes"}
    state = torch.get_rng_state()
    p1 = train_vit(sub, tmp_path / "a.pt", arch=arch, epochs=2, batch_size=32, seed=3,
                   progress=False)
    # the second run from a process on another thread count (another machine): the same
    # weights, bit for bit (rdx.backend.reproducible_training)
    was = torch.get_num_threads()
    torch.set_num_threads(4 if was != 4 else 1)
    try:
        p2 = train_vit(sub, tmp_path / "b.pt", arch=arch, epochs=2, batch_size=32, seed=3,
                       progress=False)
        assert torch.get_num_threads() == (4 if was != 4 else 1)   # the caller's, restored
    finally:
        torch.set_num_threads(was)
    assert torch.get_rng_state().equal(state)          # the caller's generator is untouched
    (m1, _), (m2, _) = load_vit(p1), load_vit(p2)
    for (k, v), v2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert v.equal(v2), k
    side = json.loads((tmp_path / "a.pt.json").read_text())
    assert side["vit"]["embed_dim"] == 16 and side["seed"] == 3
    assert 0 <= side["train_accuracy"] <= 1 and side["data"]["n_images"] == 100
    with pytest.raises(RDXInputError, match="does not exist"):
        load_vit(tmp_path / "missing.pt")
