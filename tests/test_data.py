"""Datasets: IDX reader, MNIST family + modifications, Fashion-MNIST, digits, ImageFolder,
seeded per-class sampling."""
import gzip

import numpy as np
import pytest
import torch
from PIL import Image

from rdx import RDXInputError
from rdx.data import get_dataset, select_per_class
from rdx.data.idx import read_idx, write_idx
from rdx.data.mnist import DEBIAN_FASHION, apply_modification


@pytest.fixture
def mnist_root(tmp_path):
    """A tiny MNIST in the original layout: 40 train images, 4 per digit, each unique."""
    raw = tmp_path / "mnist_data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    labels = np.repeat(np.arange(10), 4).astype(np.uint8)
    images = np.zeros((40, 28, 28), dtype=np.uint8)
    images[np.arange(40), 0, 0] = 255                 # an asymmetric mark: top-left pixel
    images[np.arange(40), 5, 3] = np.arange(40)       # makes every image distinct
    write_idx(raw / "train-images-idx3-ubyte.gz", images)
    write_idx(raw / "train-labels-idx1-ubyte", labels)
    return tmp_path, images, labels


def test_idx_roundtrip_and_errors(tmp_path, rng):
    arr = rng.integers(0, 256, (3, 4, 5)).astype(np.uint8)
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        np.testing.assert_array_equal(read_idx(write_idx(tmp_path / name, arr)), arr)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(RDXInputError, match="not an IDX file"):
        read_idx(tmp_path / "bad")
    data = gzip.open(tmp_path / "a-idx3-ubyte.gz").read()
    (tmp_path / "short").write_bytes(data[:-7])
    with pytest.raises(RDXInputError, match="truncated"):
        read_idx(tmp_path / "short")


def test_mnist_from_the_original_layout(mnist_root):
    root, images, labels = mnist_root
    ds = get_dataset("mnist", data_root=root)
    assert len(ds) == 40 and ds.class_names == [str(c) for c in range(10)]
    np.testing.assert_array_equal(ds.images, images)
    np.testing.assert_array_equal(ds.labels, labels)
    assert ds.ids[5] == "1/5"


def test_missing_mnist_names_the_download_script(tmp_path):
    with pytest.raises(RDXInputError, match="download_mnist.sh"):
        get_dataset("mnist", data_root=tmp_path)
    with pytest.raises(RDXInputError, match="unknown dataset"):
        get_dataset("mnist_m99", data_root=tmp_path)


@pytest.mark.parametrize("mod", ["m35", "m49"])
def test_merged_labels_are_exact(mnist_root, mod):
    root, images, labels = mnist_root
    ds = get_dataset(f"mnist_{mod}", data_root=root)
    src, dst = (5, 3) if mod == "m35" else (9, 4)
    expected = labels.astype(np.int64).copy()
    expected[labels == src] = dst
    np.testing.assert_array_equal(ds.labels, expected)
    np.testing.assert_array_equal(ds.images, images)
    assert (ds.labels == src).sum() == 0


@pytest.mark.parametrize("mod,corner", [("hflip", (0, 27)), ("hflip_nl", (0, 27)),
                                        ("vflip", (27, 0)), ("vflip_nl", (27, 0))])
def test_flips_are_pixel_and_label_exact(mnist_root, mod, corner):
    root, images, labels = mnist_root
    ds = get_dataset(f"mnist_{mod}", data_root=root)
    assert len(ds) == 80
    np.testing.assert_array_equal(ds.images[:40], images)          # originals first
    flipped = ds.images[40:]
    # the top-left mark moves to the top-right (mirror) or bottom-left (upside down)
    assert (flipped[:, corner[0], corner[1]] == 255).all() and (flipped[:, 0, 0] == 0).all()
    ref = images[:, :, ::-1] if mod.startswith("h") else images[:, ::-1, :]
    np.testing.assert_array_equal(flipped, ref)
    shift = 10 if mod.endswith("_nl") else 0
    np.testing.assert_array_equal(ds.labels, np.concatenate([labels, labels + shift]))
    assert len(ds.class_names) == (20 if shift else 10)


def test_apply_modification_rejects_unknown():
    with pytest.raises(RDXInputError, match="unknown MNIST modification"):
        apply_modification(np.zeros((1, 2, 2), np.uint8), np.zeros(1, np.int64), "rot90")


@pytest.mark.skipif(not DEBIAN_FASHION.is_dir(),
                    reason="Debian's dataset-fashion-mnist is not installed (setup.sh installs it as root)")
def test_real_fashion_mnist_from_debian(tmp_path):
    train = get_dataset("fashion_mnist", data_root=tmp_path)   # falls back to Debian's copy
    test = get_dataset("fashion_mnist", split="test", data_root=tmp_path)
    assert train.images.shape == (60000, 28, 28) and test.images.shape == (10000, 28, 28)
    np.testing.assert_array_equal(np.bincount(train.labels), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(test.labels), [1000] * 10)
    assert train.class_names[2] == "Pullover" and train.info["source"] == str(DEBIAN_FASHION)
    assert 60 < train.images.mean() < 90   # real clothing images, not blanks


def test_digits():
    ds = get_dataset("digits")
    assert ds.images.shape == (1797, 8, 8) and ds.images.dtype == np.uint8
    assert ds.images.max() == 255 and set(np.unique(ds.labels)) == set(range(10))


def test_imagefolder(tmp_path):
    for cls, color in (("cat", (255, 0, 0)), ("ant", (0, 255, 0))):
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.new("RGB", (10 + i, 12), color).save(tmp_path / cls / f"{i}.png")
    ds = get_dataset("imagefolder", root=tmp_path)
    assert ds.class_names == ["ant", "cat"] and np.bincount(ds.labels).tolist() == [3, 3]
    assert ds.ids[0] == "ant/0.png"
    img, label = ds[4]
    assert img.mode == "RGB" and img.getpixel((0, 0)) == (255, 0, 0) and label == 1
    with pytest.raises(RDXInputError, match="does not exist"):
        get_dataset("imagefolder", root=tmp_path / "nope")


def test_dataset_works_with_a_dataloader(mnist_root):
    root, images, _ = mnist_root
    ds = get_dataset("mnist", data_root=root)
    ds.transform = lambda im: torch.from_numpy(np.asarray(im, dtype=np.float32))
    x, y = next(iter(torch.utils.data.DataLoader(ds, batch_size=8)))
    assert x.shape == (8, 28, 28) and y.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    np.testing.assert_array_equal(x.numpy(), images[:8])


def test_select_per_class_follows_the_original_rule():
    labels = np.array([3, 8, 5, 3, 5, 8, 3, 5, 8, 3] * 3)
    ids = [f"{lab}/{i}" for i, lab in enumerate(labels)]
    sel = select_per_class(ids, labels, [8, 3, 5], num_images=4, seed=0)
    # independent re-computation of the rule: per class, sort ids as strings, shuffle with a
    # fresh default_rng(seed), keep the first 4; classes in target order
    expected = []
    for c in (8, 3, 5):
        members = sorted(np.flatnonzero(labels == c), key=lambda i: ids[i])
        arr = np.array(members)
        np.random.default_rng(0).shuffle(arr)
        expected.extend(arr[:4])
    np.testing.assert_array_equal(sel, expected)
    assert labels[sel].tolist() == [8] * 4 + [3] * 4 + [5] * 4
    np.testing.assert_array_equal(sel, select_per_class(ids, labels, [8, 3, 5], 4, seed=0))
    assert not np.array_equal(sel, select_per_class(ids, labels, [8, 3, 5], 4, seed=1))
    assert len(select_per_class(ids, labels, None, None)) == len(labels)
    with pytest.raises(RDXInputError, match="class 7 has no images"):
        select_per_class(ids, labels, [7], 2)


def test_download_mnist_script_is_resumable_and_verifies(tmp_path):
    """The script against a local file:// mirror (no network here)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for split, n in (("train", 20), ("t10k", 10)):
        write_idx(mirror / f"{split}-images-idx3-ubyte.gz", np.full((n, 28, 28), 7, np.uint8))
        write_idx(mirror / f"{split}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "RDX_DATA_ROOT": str(tmp_path / "data"), "RDX_SKIP_MD5": "1",
           "RDX_MNIST_URL": mirror.as_uri(), "RDX_PYTHON": sys.executable}
    first = subprocess.run(["bash", str(repo / "download_mnist.sh")], env=env,
                           capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "train: 20 images of 28x28, 10 classes" in first.stdout
    second = subprocess.run(["bash", str(repo / "download_mnist.sh")], env=env,
                            capture_output=True, text=True)
    assert second.stdout.count("present and verified") == 4 and "fetching" not in second.stdout
    ds = get_dataset("mnist", split="test", data_root=tmp_path / "data")
    assert len(ds) == 10
    # with MD5 checking on, the fixture files do not match the published sums: refused
    env["RDX_SKIP_MD5"] = "0"
    (tmp_path / "data" / "mnist_data" / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz").unlink()
    bad = subprocess.run(["bash", str(repo / "download_mnist.sh")], env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "MD5 is not the published one" in bad.stderr
