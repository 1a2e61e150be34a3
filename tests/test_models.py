"""The ConvNet, its training (determinism, checkpoints, metadata), checkpoint loading, and
``scripts/train_classifier.py``.

Training runs use scikit-learn's digits (always available) at their native 8×8 size with a
narrow network, so each run takes well under a second; the CLI test trains the real
``digits`` preset for one epoch.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rdx import RDXInputError, threads
from rdx.data import get_dataset
from rdx.data.base import ImageDataset
from rdx.io import file_sha256
from rdx.models.convnet import FEATURE_LAYERS, ConvNet, ConvNetTiny, build_model
from rdx.models.checkpoint import (
    grey_transform,
    load_checkpoint,
    save_checkpoint,
    sidecar_path,
    transform_from_description,
)
from rdx.models.training import accuracy, materialize, train_classifier

#: A training thread count other than rdx's (checks that the count matters).
OTHER_COUNT = 4 if threads.TRAINING_THREADS != 4 else 1
REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "train_classifier.py"
SUBSET = [7, 0, 4]          # deliberately not sorted: labels become 7→0, 0→1, 4→2
N_TRAIN = 1200              # digits[:1200] train, digits[1200:] test
BATCH = 32


def load_script():
    spec = importlib.util.spec_from_file_location("train_classifier_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module       # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def digits() -> ImageDataset:
    return get_dataset("digits")


def train_small(digits: ImageDataset, save_dir: Path, save_every=("epoch", 0, 5), **kw):
    args = {"test_ds": digits.subset(range(N_TRAIN, len(digits))), "epochs": 2,
            "batch_size": BATCH, "lr": 1e-2, "width": 8, "seed": 3, "save_dir": save_dir,
            "save_every": list(save_every) if save_every else None, "class_subset": SUBSET,
            "device": "cpu", "progress": False, "transform": grey_transform(None)}
    args.update(kw)
    return train_classifier(digits.subset(range(N_TRAIN)), **args)


@pytest.fixture(scope="module")
def runs(digits, tmp_path_factory):
    """The same training twice (determinism) and once saving only ``last.pt``."""
    root = tmp_path_factory.mktemp("train")
    rng_before = torch.get_rng_state()
    first = train_small(digits, root / "a")
    rng_after = torch.get_rng_state()
    second = train_small(digits, root / "b")
    only_last = train_small(digits, root / "c", save_every=None)
    return {"a": first, "b": second, "c": only_last,
            "rng_untouched": torch.equal(rng_before, rng_after)}


def ckpt(path: Path) -> dict:
    return torch.load(path, weights_only=True)


# --------------------------------------------------------------------------- model

def test_convnet_shapes_and_layers():
    x = torch.randn(5, 1, 28, 28)
    net = ConvNet().eval()
    assert net.features(x).shape == (5, 64)
    assert net(x).shape == (5, 10)
    assert torch.equal(net.layer_output(x, "gap"), net.features(x))
    assert torch.equal(net.layer_output(x, "v0"), net.features(x))
    assert torch.equal(net.layer_output(x, "logits"), net(x))
    # the head sees exactly the "gap" feature
    assert torch.allclose(net.fc(net.features(x)), net(x))
    tiny = ConvNetTiny(num_classes=20).eval()
    assert tiny.features(x).shape == (5, 8) and tiny(x).shape == (5, 20)
    assert ConvNet(width=4).features(torch.randn(2, 1, 8, 8)).shape == (2, 8)
    assert set(FEATURE_LAYERS) == {"gap", "logits"}
    with pytest.raises(RDXInputError, match="unknown ConvNet layer"):
        net.layer_output(x, "layer3")
    with pytest.raises(RDXInputError, match="positive integer"):
        ConvNet(width=0)


def test_parameter_names_match_the_authors_checkpoints():
    keys = set(ConvNet().state_dict())
    for k in ("layer1.0.weight", "layer1.1.running_mean", "layer2.0.weight",
              "layer2.1.num_batches_tracked", "fc.weight", "fc.bias"):
        assert k in keys
    assert ConvNet().layer2[0].weight.shape == (64, 32, 5, 5)
    assert ConvNetTiny().layer1[0].weight.shape == (8, 1, 5, 5)
    for net in (ConvNet(in_channels=3, num_classes=20, width=16), ConvNetTiny(num_classes=3)):
        rebuilt = build_model(net.config())
        assert type(rebuilt) is type(net) and rebuilt.config() == net.config()
    with pytest.raises(RDXInputError, match="unknown model"):
        build_model({"model": "resnet", "num_classes": 3})


def test_grey_transform_batch_path_is_bit_identical(digits):
    images = np.random.default_rng(0).integers(0, 256, (6, 28, 28)).astype(np.uint8)
    ds = ImageDataset(name="rand", labels=np.zeros(6, dtype=np.int64), class_names=["a"],
                      ids=[str(i) for i in range(6)], images=images)
    t = grey_transform(28)
    fast, _ = materialize(ds, t)
    slow = torch.stack([t(ds.load_image(i)) for i in range(6)])
    assert torch.equal(fast, slow)
    assert fast.min() >= -1 and fast.max() <= 1 and fast.shape == (6, 1, 28, 28)
    # digits are 8×8: resized by PIL (bilinear) to 28×28
    x, y = materialize(digits.subset(range(4)), grey_transform(28))
    assert x.shape == (4, 1, 28, 28) and y.tolist() == digits.labels[:4].tolist()
    assert transform_from_description(t.description).description == t.description
    with pytest.raises(RDXInputError, match="unknown transform"):
        transform_from_description({"name": "imagenet"})


# --------------------------------------------------------------------------- training

def test_training_is_deterministic(runs):
    for pa, pb in zip(runs["a"], runs["b"], strict=True):
        a, b = ckpt(pa), ckpt(pb)
        assert a["state_dict"].keys() == b["state_dict"].keys()
        for k in a["state_dict"]:
            assert torch.equal(a["state_dict"][k], b["state_dict"][k]), (pa.name, k)
        for key in ("train_accuracy", "test_accuracy", "step", "epoch"):
            assert a["meta"][key] == b["meta"][key]
    assert runs["rng_untouched"], "training must not move the caller's global torch RNG"


def test_saving_checkpoints_does_not_change_the_trajectory(runs):
    assert [p.name for p in runs["c"]] == ["last.pt"]
    a, c = ckpt(runs["a"][-1])["state_dict"], ckpt(runs["c"][0])["state_dict"]
    assert all(torch.equal(a[k], c[k]) for k in a)


def _train_on_threads(digits: ImageDataset, save_dir: Path, threads: int) -> dict:
    """One epoch of the tiny ConvNet on 256 digits at 8×8, started from a process whose
    torch uses ``threads`` threads (a machine with that many cores, or RDX_NUM_THREADS)."""
    was = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        [last] = train_classifier(digits.subset(range(256)), epochs=1, batch_size=BATCH,
                                  lr=1e-2, seed=0, save_dir=save_dir, save_every=None,
                                  device="cpu", progress=False, tiny=True,
                                  transform=grey_transform(None))
        assert torch.get_num_threads() == threads, "the caller's thread count is restored"
    finally:
        torch.set_num_threads(was)
    return ckpt(last)


def test_training_is_bit_identical_on_any_thread_count(digits, tmp_path, monkeypatch):
    runs = {n: _train_on_threads(digits, tmp_path / f"t{n}", n) for n in (1, 2, 4)}
    ref = runs[1]
    for n in (2, 4):
        assert ref["state_dict"].keys() == runs[n]["state_dict"].keys()
        for k in ref["state_dict"]:
            assert torch.equal(ref["state_dict"][k], runs[n]["state_dict"][k]), (n, k)
        assert ref["meta"]["train_accuracy"] == runs[n]["meta"]["train_accuracy"]
    assert ref["meta"]["training"]["torch_threads"] == threads.TRAINING_THREADS
    assert not torch.are_deterministic_algorithms_enabled(), "restored after training"
    # the check is not vacuous: this training on another fixed count gives other weights
    monkeypatch.setattr(threads, "TRAINING_THREADS", OTHER_COUNT)
    other = _train_on_threads(digits, tmp_path / "other", 1)["state_dict"]
    assert not all(torch.equal(ref["state_dict"][k], other[k]) for k in other)


def test_checkpoints_and_meta(runs, digits):
    n = int(np.isin(digits.labels[:N_TRAIN], SUBSET).sum())
    spe = -(-n // BATCH)
    names = [p.name for p in runs["a"]]
    assert names == ["epoch=0-step=0.pt", "epoch=0-step=5.pt", f"epoch=0-step={spe}.pt",
                     f"epoch=1-step={2 * spe}.pt", "last.pt"]
    expected = [(0, 0), (0, 5), (0, spe), (1, 2 * spe), (1, 2 * spe)]
    for path, (epoch, step) in zip(runs["a"], expected):
        meta = ckpt(path)["meta"]
        assert (meta["epoch"], meta["step"]) == (epoch, step)
        assert meta["seed"] == 3 and meta["model"] == "convnet" and meta["width"] == 8
        assert meta["num_classes"] == 3 and meta["in_channels"] == 1
        assert meta["data"]["label_map"] == {"7": 0, "0": 1, "4": 2}
        assert meta["data"]["class_subset"] == SUBSET
        assert meta["data"]["class_names"] == ["7", "0", "4"]
        assert meta["data"]["n_images"] == n and meta["data"]["dataset"] == "digits"
        assert meta["training"]["steps_per_epoch"] == spe
        assert meta["training"]["optimizer"] == "Adam"
        assert meta["training"]["scheduler"] == "OneCycleLR"
        assert meta["transform"]["name"] == "grey" and meta["versions"]["torch"]
        assert 0 <= meta["train_accuracy"] <= 1 and 0 <= meta["test_accuracy"] <= 1
        # the JSON sidecar holds exactly the same metadata, and the digests of the file's
        # bytes and of its own content (rdx.io, stored data)
        side = json.loads(sidecar_path(path).read_text())
        assert {k: v for k, v in side.items()
                if k not in ("file_sha256", "record_sha256")} == meta
        assert side["file_sha256"] == file_sha256(path)
    history = ckpt(runs["a"][-1])["meta"]["history"]
    assert [h["step"] for h in history] == [0, 5, spe, 2 * spe]


def test_accuracy_improves_and_is_reproducible_from_the_file(runs, digits):
    first, last = ckpt(runs["a"][0])["meta"], ckpt(runs["a"][-1])["meta"]
    assert first["train_accuracy"] < 0.6 and last["train_accuracy"] > 0.9
    assert last["test_accuracy"] > 0.85
    model, meta = load_checkpoint(runs["a"][-1])
    keep = np.isin(digits.labels[:N_TRAIN], SUBSET)
    x, _ = materialize(digits.subset(np.flatnonzero(keep)), transform_from_description(
        meta["transform"]))
    remapped = torch.tensor([SUBSET.index(c) for c in digits.labels[:N_TRAIN][keep]])
    assert accuracy(model, x, remapped, torch.device("cpu")) == meta["train_accuracy"]
    # class 7 → output 0, class 0 → output 1, class 4 → output 2
    pred = model(x).argmax(1)
    for new, old in enumerate(SUBSET):
        assert (pred[remapped == new] == new).float().mean() > 0.8, old


def test_training_input_errors(digits, tmp_path):
    small = digits.subset(range(200))
    kw = {"epochs": 1, "save_dir": tmp_path, "progress": False, "width": 4,
          "transform": grey_transform(None), "device": "cpu"}
    with pytest.raises(RDXInputError, match="save_every"):
        train_classifier(small, save_every=[0, 999], **kw)
    with pytest.raises(RDXInputError, match="epochs must be a positive"):
        train_classifier(small, **{**kw, "epochs": 0})
    with pytest.raises(RDXInputError, match=r"classes \[11\] have no images"):
        train_classifier(small, class_subset=[1, 11], **kw)
    with pytest.raises(RDXInputError, match="distinct"):
        train_classifier(small, class_subset=[1, 1], **kw)
    with pytest.raises(RDXInputError, match="ImageDataset"):
        train_classifier(np.zeros((3, 8, 8)), **kw)


# --------------------------------------------------------------------------- loading

def test_load_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    net = ConvNet(num_classes=3, width=8)
    net.train()
    net(torch.randn(16, 1, 28, 28))          # move the BatchNorm running statistics
    net.eval()
    x = torch.randn(4, 1, 28, 28)
    path = save_checkpoint(tmp_path / "m.pt", net, {**net.config(), "note": "hi"})
    model, meta = load_checkpoint(path)
    assert not model.training and meta["note"] == "hi"
    with torch.no_grad():
        assert torch.equal(model(x), net(x))
        assert torch.equal(model.layer_output(x, "gap"), net.features(x))
    # a Lightning-style checkpoint ("model." prefix, no meta): architecture from the shapes
    tiny = ConvNetTiny(num_classes=20).eval()
    foreign = {"epoch": 4, "global_step": 680,
               "state_dict": {f"model.{k}": v for k, v in tiny.state_dict().items()}}
    torch.save(foreign, tmp_path / "last.ckpt")
    model, meta = load_checkpoint(tmp_path / "last.ckpt")
    assert isinstance(model, ConvNetTiny) and meta["num_classes"] == 20
    assert (meta["epoch"], meta["step"]) == (4, 680)
    with torch.no_grad():
        assert torch.equal(model(x), tiny(x))


def test_load_checkpoint_errors(tmp_path):
    with pytest.raises(RDXInputError, match=r"does not exist.*rdx train --preset"
                                            r".*download_checkpoints\.sh"):
        load_checkpoint(tmp_path / "checkpoints" / "mnist_835" / "last.pt")
    (tmp_path / "notes.pt").write_text("not a checkpoint\n")
    with pytest.raises(RDXInputError, match="not a readable model checkpoint"):
        load_checkpoint(tmp_path / "notes.pt")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(RDXInputError, match="not a checkpoint dict"):
        load_checkpoint(tmp_path / "list.pt")
    torch.save({"state_dict": {"w": torch.zeros(2)}}, tmp_path / "other.pt")
    with pytest.raises(RDXInputError, match="not a ConvNet checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    torch.save({"meta": {"x": 1}, "blob": argparse.Namespace(a=1)}, tmp_path / "pickle.pt")
    with pytest.raises(RDXInputError, match="not loaded for safety"):
        load_checkpoint(tmp_path / "pickle.pt")
    net = ConvNet(num_classes=3, width=8)
    save_checkpoint(tmp_path / "wrong.pt", net, {**net.config(), "num_classes": 10})
    with pytest.raises(RDXInputError, match="do not fit"):
        load_checkpoint(tmp_path / "wrong.pt")


# --------------------------------------------------------------------------- CLI

def test_cli_list_and_bad_preset(capsys):
    script = load_script()
    assert script.main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in ("mnist_835", "mnist_expert", "mnist_m35", "mnist_m49", "mnist_hflip",
                 "mnist_hflip_nl", "mnist_vflip", "mnist_vflip_nl", "fashion_pcs",
                 "fashion_expert", "digits", "mnist_all"):
        assert name in out
    assert script.main(["--preset", "mnist_999"]) == 2
    assert "unknown preset" in capsys.readouterr().err
    assert script.PRESETS["mnist_835"].save_every == ("epoch", 0, 32, 56, 136, 160, 184, 272)
    assert script.PRESETS["mnist_835"].class_subset == (8, 3, 5)


def test_cli_trains_the_digits_preset(tmp_path, capsys):
    script = load_script()
    assert script.main(["--preset", "digits", "--epochs", "1", "--out", str(tmp_path),
                        "--quiet", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    names = sorted(p.name for p in (tmp_path / "digits").glob("*.pt"))
    assert names == ["epoch=0-step=0.pt", "epoch=0-step=29.pt", "last.pt"], names
    model, meta = load_checkpoint(tmp_path / "digits" / "last.pt")
    assert meta["preset"] == "digits" and meta["transform"]["resize"] == 28
    assert meta["data"]["n_images"] == 1797 and meta["num_classes"] == 10
    assert model.features(torch.zeros(2, 1, 28, 28)).shape == (2, 64)
    assert "last.pt" in out and "train acc" in out


def test_cli_missing_dataset_exits_2_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--preset", "mnist_835", "--data-root",
                           str(tmp_path), "--out", str(tmp_path / "ck")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "download_mnist.sh" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "ck").exists()
