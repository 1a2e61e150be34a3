"""Model zoo layers and cached feature extraction (tiny random models, no downloads)."""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torchvision import transforms as T

from rdx.data import get_dataset
from rdx.errors import RDXInputError
from rdx.models.extract import FeatureCacheWarning, extract_features
from rdx.models.loaded_model import LoadedModel
from rdx.models.taps import spatial_mean, tap
from rdx.models.zoo import load_model

ROOT = Path(__file__).resolve().parent.parent
# a 2-block ViT on 32×32 inputs: the timm code path of the paper's ViTs at a fraction of
# the cost (about 1 ms per image on a CPU)
TINY_VIT = {"model": "vit_tiny_patch16_224", "pretrained": False,
            "model_kwargs": {"img_size": 32, "depth": 2, "embed_dim": 48, "num_heads": 3}}
IDX = [11, 3, 0, 7, 5, 2, 13, 8, 1, 9, 4]


@pytest.fixture(scope="module")
def digits():
    return get_dataset("digits")


def _batch(loaded: LoadedModel, ds, idx) -> torch.Tensor:
    return torch.stack([loaded.transform(ds.load_image(i)) for i in idx])


class TinyCNN(nn.Module):
    """Stand-in conv net: two convs, global average pooling, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 6, 3, padding=1)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(self.conv2(torch.relu(self.conv1(x))).mean(dim=(2, 3)))


def _stand_in(seed: int = 0, layer: str = "gap") -> tuple[LoadedModel, list[int]]:
    """A LoadedModel around TinyCNN whose feature_fn counts its calls."""
    torch.manual_seed(seed)
    model = TinyCNN().eval()
    inner = tap(model, model.conv2, spatial_mean, "gap")
    calls = [0]

    def counted(x):
        calls[0] += 1
        return inner(x)

    loaded = LoadedModel(model, T.Compose([T.ToTensor()]), "test:tinycnn", f"seed={seed}",
                         layer, counted)
    return loaded, calls


# --------------------------------------------------------------------------- layers

def test_vit_cls_layers_match_manual_computation(digits):
    ll = load_model({**TINY_VIT, "layer": "cls_tok_ll"})
    post = load_model({**TINY_VIT, "layer": "v1"})
    assert (ll.layer, post.layer) == ("cls_tok_ll", "cls_post_norm")
    assert ll.weights_id == post.weights_id and ll.weights_id.startswith("random-init")
    model = ll.model
    x = _batch(ll, digits, IDX[:4])
    assert x.shape == (4, 3, 32, 32)    # grey digits → RGB, transform follows img_size

    norm_calls = []
    handle = model.norm.register_forward_hook(lambda *a: norm_calls.append(1))
    with torch.no_grad():
        f_ll = ll.feature_fn(x)
        assert norm_calls == []          # the tap stops the forward pass after the last block
        f_post = post.feature_fn(x)
        handle.remove()
        full = model.forward_features(x)              # blocks → norm, all tokens
        no_norm = copy.deepcopy(model)
        no_norm.norm = nn.Identity()
        blocks_out = no_norm.forward_features(x)
    assert f_ll.shape == f_post.shape == (4, 48)
    torch.testing.assert_close(f_ll, blocks_out[:, 0])
    torch.testing.assert_close(f_post, full[:, 0])
    torch.testing.assert_close(model.norm(f_ll), f_post)   # LayerNorm acts per token
    assert not torch.allclose(f_ll, f_post, atol=1e-3)


def test_resnet_gap_is_avgpool_of_layer4(digits):
    loaded = load_model({"model": "torchvision:resnet18", "pretrained": False,
                         "layer": "gap"})
    m = loaded.model
    x = _batch(loaded, digits, [0, 1])
    with torch.no_grad():
        h = m.maxpool(m.relu(m.bn1(m.conv1(x))))
        h = m.layer4(m.layer3(m.layer2(m.layer1(h))))
        manual = torch.flatten(m.avgpool(h), 1)
        torch.testing.assert_close(loaded.feature_fn(x), manual)
        logits = load_model({"model": "torchvision:resnet18", "pretrained": False,
                             "layer": "logits"})
        torch.testing.assert_close(logits.feature_fn(x), m(x))
    assert not m.layer4._forward_hooks              # the tap leaves no hook behind
    assert loaded.model_id == "torchvision:resnet18"


def test_unknown_layer_lists_valid_ones():
    with pytest.raises(RDXInputError, match=r"unknown layer 'cls_tok'.*cls_post_norm.*"
                                            r"cls_tok_ll.*logits"):
        load_model({**TINY_VIT, "layer": "cls_tok"})
    with pytest.raises(RDXInputError, match=r"'gap'.*layer4"):
        load_model({"model": "torchvision:resnet18", "pretrained": False, "layer": "fc7"})
    with pytest.raises(RDXInputError, match="unknown model spec keys"):
        load_model({**TINY_VIT, "pretrainde": False})


def test_submodule_layers_and_hf_hub_names(digits):
    block0 = load_model({**TINY_VIT, "layer": "blocks.0"})
    x = _batch(block0, digits, [0, 1])
    m = block0.model
    with torch.no_grad():
        tokens = m.norm_pre(m.patch_drop(m._pos_embed(m.patch_embed(x))))
        torch.testing.assert_close(block0.feature_fn(x), m.blocks[0](tokens)[:, 0])
    # hf_hub:timm/<known name> is the registry model: same id, no config download
    a = load_model({"model": "hf_hub:timm/vit_tiny_patch16_224.augreg_in21k", "pretrained": False})
    b = load_model({"model": "vit_tiny_patch16_224.augreg_in21k", "pretrained": False})
    assert a.model_id == b.model_id == "timm:vit_tiny_patch16_224.augreg_in21k"


def test_convnet_checkpoint_and_random_init(digits, tmp_path):
    from rdx.models.checkpoint import grey_transform, save_checkpoint

    rand = load_model({"model": "convnet_tiny", "pretrained": False})
    assert rand.layer == "gap" and rand.weights_id.startswith("random-init(seed=0")
    meta = {**rand.model.config(), "transform": grey_transform(28).description}
    ckpt = save_checkpoint(tmp_path / "epoch=0-step=0.pt", rand.model, meta)
    loaded = load_model({"model": "convnet", "checkpoint": str(ckpt), "layer": "v0"})
    assert loaded.layer == "gap" and f"{ckpt.resolve()}:sha256=" in loaded.weights_id
    x = _batch(loaded, digits, [0, 1, 2])
    with torch.no_grad():
        torch.testing.assert_close(loaded.feature_fn(x), rand.model.features(x))
    with pytest.raises(RDXInputError, match="needs checkpoint"):
        load_model({"model": "convnet"})
    with pytest.raises(RDXInputError, match="does not exist"):
        load_model({"model": "convnet", "checkpoint": str(tmp_path / "missing.pt")})


# --------------------------------------------------------------------------- offline

def test_offline_timm_weights_error_names_weights_and_cache(monkeypatch):
    import timm.models._hub as hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def offline(*args, **kwargs):
        raise LocalEntryNotFoundError("no network (test)")

    monkeypatch.setattr(hub, "hf_hub_download", offline)
    with pytest.raises(RDXInputError) as err:
        load_model({"model": "vit_base_patch16_224.dino"})
    msg = str(err.value)
    assert "timm/vit_base_patch16_224.dino" in msg and "could not" in msg
    assert "Hugging Face hub cache" in msg and "HF_HOME" in msg and "checkpoint=" in msg
    # hf_hub names timm does not know need their configuration even for random init
    with pytest.raises(RDXInputError, match="model configuration.*vit_large_patch14_clip_336"
                                            r"\.laion2b_ft_in12k_in1k_inat21"):
        load_model({"model": "hf_hub:timm/vit_large_patch14_clip_336.laion2b_ft_in12k_in1k_inat21",
                    "pretrained": False})


def test_offline_torchvision_weights_error(monkeypatch):
    import torchvision.models._api as api

    def offline(url, *args, **kwargs):
        raise urllib.error.URLError("no network (test)")

    monkeypatch.setattr(api, "load_state_dict_from_url", offline)
    with pytest.raises(RDXInputError, match=r"ResNet18_Weights\.IMAGENET1K_V1.*"
                                            r"hub/checkpoints/resnet18-.*TORCH_HOME"):
        load_model({"model": "torchvision:resnet18"})


# --------------------------------------------------------------------------- extraction

def test_extraction_equals_direct_forward_for_any_batch_size(digits):
    loaded = load_model({**TINY_VIT, "layer": "cls_tok_ll"})
    with torch.no_grad():
        direct = loaded.feature_fn(_batch(loaded, digits, IDX)).numpy()
    one = extract_features(loaded, digits, IDX, batch_size=1, device="cpu", cache_dir=None,
                           progress=False)
    seven = extract_features(loaded, digits, IDX, batch_size=7, device="cpu", cache_dir=None,
                             progress=False)
    assert one.dtype == np.float32 and one.shape == (len(IDX), 48)
    np.testing.assert_allclose(one, direct, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(seven, direct, rtol=1e-5, atol=1e-5)
    # the default: a batch size chosen for the device and the transformed image's size
    auto = extract_features(loaded, digits, IDX, device="cpu", cache_dir=None, progress=False)
    np.testing.assert_allclose(auto, direct, rtol=1e-5, atol=1e-5)
    assert digits.transform is None                    # the caller's dataset is untouched


def test_automatic_batch_size_follows_the_device_and_the_image_size():
    from rdx.models.extract import GPU_BATCH, auto_batch_size

    cpu = torch.device("cpu")
    assert auto_batch_size(cpu, (3, 224, 224)) == 4
    assert auto_batch_size(cpu, (3, 260, 260)) == 2
    assert auto_batch_size(cpu, (1, 28, 28)) == 64          # small images: capped
    assert auto_batch_size(cpu, (3, 2000, 2000)) == 1       # never 0
    assert auto_batch_size(torch.device("cuda"), (3, 224, 224)) == GPU_BATCH


def test_cache_miss_then_hit(digits, tmp_path):
    loaded, calls = _stand_in()
    first = extract_features(loaded, digits, IDX, batch_size=4, device="cpu",
                             cache_dir=tmp_path, progress=False)
    assert calls[0] == 3
    (npy,) = tmp_path.glob("*.npy")
    meta = json.loads(npy.with_suffix(".json").read_text())
    assert meta["shape"] == [len(IDX), 6] and meta["ids"] == [digits.ids[i] for i in IDX]
    assert meta["layer"] == "gap" and meta["seconds"] >= 0 and "torch" in meta["versions"]
    second = extract_features(loaded, digits, IDX, batch_size=5, device="cpu",
                              cache_dir=tmp_path, progress=False)
    assert calls[0] == 3                                # served from disk
    np.testing.assert_array_equal(first, second)


def test_cache_invalidated_by_layer_ids_and_weights(digits, tmp_path):
    loaded, calls = _stand_in()
    kw = {"batch_size": 64, "device": "cpu", "cache_dir": tmp_path, "progress": False}
    extract_features(loaded, digits, IDX, **kw)
    extract_features(dataclasses.replace(loaded, layer="other"), digits, IDX, **kw)
    extract_features(loaded, digits, IDX[::-1], **kw)             # same images, new order
    other, other_calls = _stand_in(seed=1)
    f_other = extract_features(other, digits, IDX, **kw)
    assert calls[0] == 3 and other_calls[0] == 1
    assert len(list(tmp_path.glob("*.npy"))) == 4
    with torch.no_grad():
        direct = other.feature_fn(_batch(other, digits, IDX)).numpy()
    np.testing.assert_allclose(f_other, direct, rtol=1e-6, atol=1e-6)


def test_corrupt_or_mismatched_cache_is_recomputed(digits, tmp_path):
    loaded, calls = _stand_in()
    kw = {"batch_size": 64, "device": "cpu", "cache_dir": tmp_path, "progress": False}
    good = extract_features(loaded, digits, IDX, **kw)
    (npy,) = tmp_path.glob("*.npy")
    npy.write_bytes(b"not an array")
    # the bytes are checked before they are parsed: the digest tells first
    with pytest.warns(FeatureCacheWarning, match="SHA-256 is .*the record expects"):
        again = extract_features(loaded, digits, IDX, **kw)
    assert calls[0] == 2
    np.testing.assert_array_equal(again, good)
    np.save(npy, good + 1)                              # loads, but not what was written
    with pytest.warns(FeatureCacheWarning, match="SHA-256"):
        extract_features(loaded, digits, IDX, **kw)
    npy.with_suffix(".json").unlink()                   # interrupted write
    with pytest.warns(FeatureCacheWarning, match="metadata file is missing"):
        extract_features(loaded, digits, IDX, **kw)
    assert calls[0] == 4
    extract_features(loaded, digits, IDX, **kw)         # repaired: a hit again
    assert calls[0] == 4


def test_bad_arguments(digits):
    loaded, _ = _stand_in()
    with pytest.raises(RDXInputError, match="outside"):
        extract_features(loaded, digits, [0, len(digits)], cache_dir=None, progress=False)
    with pytest.raises(RDXInputError, match="batch_size"):
        extract_features(loaded, digits, [0], batch_size=0, cache_dir=None, progress=False)


def test_distributed_ranks_share_the_work(digits, tmp_path):
    """Two gloo ranks under torchrun: same features as one process, one cache entry."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, numpy as np, torch.distributed as dist
        from rdx.data import get_dataset
        from rdx.models.extract import extract_features
        from rdx.models.zoo import load_model
        dist.init_process_group("gloo")
        loaded = load_model({{"model": "convnet_tiny", "pretrained": False}})
        ds = get_dataset("digits")
        kw = dict(batch_size=2, device="cpu", progress=False)
        f = extract_features(loaded, ds, {IDX}, cache_dir=sys.argv[1], **kw)
        hit = extract_features(loaded, ds, {IDX}, cache_dir=sys.argv[1], **kw)
        one = extract_features(loaded, ds, [4], cache_dir=None, **kw)  # one rank idle
        np.save(f"{{sys.argv[1]}}/../rank{{dist.get_rank()}}.npy", f)
        assert np.array_equal(hit, f) and one.shape == (1, f.shape[1])
        dist.barrier()
        dist.destroy_process_group()
        # gloo's threads can abort the interpreter's teardown ("terminate called without an
        # active exception", about 1 run in 4 with torch 2.14); the work is done and saved
        os._exit(0)
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cache = tmp_path / "cache"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", str(script), str(cache)], env=env,
                          capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = extract_features(load_model({"model": "convnet_tiny", "pretrained": False}),
                              digits, IDX, device="cpu", cache_dir=None, progress=False)
    for rank in (0, 1):
        np.testing.assert_allclose(np.load(tmp_path / f"rank{rank}.npy"), single,
                                   rtol=1e-6, atol=1e-6)
    assert len(list(cache.glob("*.npy"))) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_extraction_matches_cpu(digits):
    loaded = load_model({**TINY_VIT, "layer": "cls_post_norm"})
    kw = {"batch_size": 4, "cache_dir": None, "progress": False}
    cpu = extract_features(loaded, digits, IDX, device="cpu", **kw)
    gpu = extract_features(loaded, digits, IDX, device="cuda", num_workers=2, **kw)
    half = extract_features(loaded, digits, IDX, device="cuda", amp=True, **kw)
    np.testing.assert_allclose(gpu, cpu, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(half, cpu, rtol=0.05, atol=0.05)
