"""File datasets (cub_pcbm, inatdl, imagenet) and their download scripts, on tiny fixtures."""
import json
import os
import pickle
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rdx.data import cub as cub_mod
from rdx.data import imagenet as imnet_mod
from rdx.data.cub import cub_dataset, load_plain_pickle
from rdx.data.imagenet import imagenet_dataset
from rdx.data.inat import inat_dataset
from rdx.errors import RDXInputError

REPO = Path(__file__).resolve().parents[1]


def _img(path, v=100, fmt=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), v, np.uint8)).save(path, format=fmt)


def make_cub(base):
    """base/CUB_200_2011 with 3 classes, 2 images each, CBM-style pickles."""
    root = base / "CUB_200_2011"
    names = ["001.Black_footed_Albatross", "002.Laysan_Albatross", "003.Sooty_Albatross"]
    (root).mkdir(parents=True)
    (root / "classes.txt").write_text("".join(f"{i + 1} {n}\n" for i, n in enumerate(names)))
    recs = []
    for c, n in enumerate(names):
        for k in range(2):
            _img(root / "images" / n / f"{n[4:]}_{k}.jpg", 40 * c + k, "JPEG")
            recs.append({"id": len(recs), "img_path": "/juice/scr/u/CUB_200_2011/images/"
                         f"{n}/{n[4:]}_{k}.jpg", "class_label": c,
                         "attribute_label": [0, 1] * 56, "attribute_certainty": [3] * 112})
    (root / "class_attr_data_10").mkdir()
    for split, sl in (("train", slice(0, 4)), ("val", slice(4, 5)), ("test", slice(5, 6))):
        with open(root / "class_attr_data_10" / f"{split}.pkl", "wb") as f:
            pickle.dump(recs[sl], f)
    return root


def make_inat(base):
    root = base / "inat_subset"
    files = [f"images/{c}/{k}.jpg" for c in ("frog", "toad") for k in range(3)]
    for i, f in enumerate(files):
        _img(root / f, 30 * i, "JPEG")
    (root / "data.json").write_text(json.dumps({
        "file_paths": files, "class_labels": [0, 0, 0, 1, 1, 1], "class_names": ["frog", "toad"],
        "train_indices": [0, 1, 3, 4], "test_indices": [5, 2]}))
    return root


WNIDS = ["n01440764", "n01443537", "n04266014"]


def make_imagenet(base, mapping=True):
    root = base / "imagenet"
    for split in ("train", "val"):
        for w in WNIDS:
            for k in range(2):
                _img(root / split / w / f"{w}_{k}.JPEG", 10 * k, "JPEG")
    if mapping:
        (root / "LOC_synset_mapping.txt").write_text(
            "n04266014 space shuttle\nn01440764 tench, Tinca tinca\n"
            "n01443537 goldfish, Carassius auratus\n")
    return root


# --- loaders -----------------------------------------------------------------------------------

def test_cub_pcbm(tmp_path):
    make_cub(tmp_path)
    ds = cub_dataset("train", data_root=tmp_path)
    assert ds.name == "cub_pcbm" and len(ds) == 4
    assert ds.ids[0] == "images/001.Black_footed_Albatross/Black_footed_Albatross_0.jpg"
    assert ds.labels.tolist() == [0, 0, 1, 1]
    assert ds.class_names[2] == "003.Sooty_Albatross"
    img, lab = ds[3]
    assert img.size == (8, 8) and lab == 1
    assert cub_dataset("test", data_root=tmp_path).labels.tolist() == [2]
    with pytest.raises(RDXInputError, match="split"):
        cub_dataset("trainval", data_root=tmp_path)


def test_cub_missing_names_the_script(tmp_path):
    with pytest.raises(RDXInputError, match="download_cub.sh"):
        cub_dataset("train", data_root=tmp_path)
    root = make_cub(tmp_path)
    (root / "images" / "001.Black_footed_Albatross" / "Black_footed_Albatross_0.jpg").unlink()
    with pytest.raises(RDXInputError, match="Black_footed_Albatross_0.jpg.*download_cub.sh"):
        cub_dataset("train", data_root=tmp_path)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_plain_unpickler_refuses_objects(tmp_path):
    p = tmp_path / "x.pkl"
    p.write_bytes(pickle.dumps([{"a": (1, 2.0, "s", b"b", None, True, {3}, frozenset())}]))
    assert load_plain_pickle(p)[0]["a"][0] == 1
    for bad in (Evil(), np.arange(3), [Path("x")]):
        p.write_bytes(pickle.dumps(bad))
        with pytest.raises(RDXInputError, match="plain pickle"):
            load_plain_pickle(p)
    assert cub_mod.relative_image_path("C:\\x\\CUB_200_2011\\images\\a\\b.jpg") == "images/a/b.jpg"
    with pytest.raises(RDXInputError, match="images/"):
        cub_mod.relative_image_path("/x/y.jpg")


def test_inatdl(tmp_path):
    root = make_inat(tmp_path)
    tr, te = inat_dataset("train", data_root=tmp_path), inat_dataset("test", data_root=tmp_path)
    assert tr.ids == ["images/frog/0.jpg", "images/frog/1.jpg", "images/toad/0.jpg",
                      "images/toad/1.jpg"] and tr.labels.tolist() == [0, 0, 1, 1]
    assert te.labels.tolist() == [1, 0] and te.class_names == ["frog", "toad"]
    assert tr[2][0].size == (8, 8)
    (root / "images/frog/2.jpg").unlink()
    with pytest.raises(RDXInputError, match="frog/2.jpg.*download_inaturalist.sh"):
        inat_dataset("test", data_root=tmp_path)
    with pytest.raises(RDXInputError, match="download_inaturalist.sh"):
        inat_dataset("train", data_root=tmp_path / "nothing")


def test_imagenet_labels_and_only_requested_folders(tmp_path, monkeypatch):
    make_imagenet(tmp_path)
    (tmp_path / "imagenet/train/n04266014/n04266014_10835.JPEG").write_bytes(b"corrupt")
    listed = []
    real = imnet_mod.list_class_folder
    monkeypatch.setattr(imnet_mod, "list_class_folder",
                        lambda folder: listed.append(folder.name) or real(folder))
    ds = imagenet_dataset("train", data_root=tmp_path, classes=[2, 0])
    assert listed == ["n04266014", "n01440764"]
    assert ds.labels.tolist() == [2, 2, 0, 0]
    assert ds.ids[0] == "n04266014/n04266014_0.JPEG" and ds[0][0].size == (8, 8)
    assert ds.class_names == ["tench", "goldfish", "space shuttle"]
    listed.clear()
    full = imagenet_dataset("val", data_root=tmp_path)
    assert len(listed) == 3 and len(full) == 6 and full.labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert "n04266014_10835.JPEG" not in " ".join(
        imagenet_dataset("train", data_root=tmp_path).ids)
    with pytest.raises(RDXInputError, match="outside"):
        imagenet_dataset("train", data_root=tmp_path, classes=[3])


def test_imagenet_without_mapping_and_missing(tmp_path):
    with pytest.raises(RDXInputError, match="download_imagenet.sh"):
        imagenet_dataset("train", data_root=tmp_path)
    make_imagenet(tmp_path, mapping=False)
    ds = imagenet_dataset("val", data_root=tmp_path, classes=[1])
    assert ds.class_names == WNIDS and ds.labels.tolist() == [1, 1]
    import shutil
    shutil.rmtree(tmp_path / "imagenet/val/n01443537")
    (tmp_path / "imagenet/LOC_synset_mapping.txt").write_text("".join(w + " x\n" for w in WNIDS))
    with pytest.raises(RDXInputError, match="n01443537"):
        imagenet_dataset("val", data_root=tmp_path, classes=[1])


# --- download scripts against a file:// mirror -----------------------------------------------

def _run(script, env, *args):
    return subprocess.run(["bash", str(REPO / script), *args], env=env, capture_output=True,
                          text=True, check=False)


def _env(tmp_path, **kw):
    return {**os.environ, "RDX_DATA_ROOT": str(tmp_path / "data"), "RDX_PYTHON": sys.executable,
            **kw}


def _zip(path, folder, arcroot):
    with zipfile.ZipFile(path, "w") as z:
        for p in sorted(folder.rglob("*")):
            z.write(p, str(Path(arcroot) / p.relative_to(folder)))


def test_download_cub_script(tmp_path):
    src = make_cub(tmp_path / "src")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with tarfile.open(mirror / "CUB_200_2011.tgz", "w:gz") as t:
        t.add(src / "images", "CUB_200_2011/images")
        t.add(src / "classes.txt", "CUB_200_2011/classes.txt")
        t.add(src / "classes.txt", "attributes.txt")
    _zip(mirror / "class_attr_data_10.zip", src / "class_attr_data_10", "class_attr_data_10")
    env = _env(tmp_path, RDX_CUB_URL=(mirror / "CUB_200_2011.tgz").as_uri(),
               RDX_CUB_SPLIT_URL=(mirror / "class_attr_data_10.zip").as_uri())
    first = _run("download_cub.sh", env)
    assert first.returncode == 0, first.stderr
    assert "[cub] train: 4 images, 2 classes" in first.stdout and "fetching" in first.stdout
    assert len(cub_dataset("val", data_root=tmp_path / "data")) == 1
    assert not list((tmp_path / "data").glob("*.tgz")) and not list((tmp_path / "data").glob("*.zip"))
    second = _run("download_cub.sh", env)
    assert second.returncode == 0 and "fetching" not in second.stdout
    assert second.stdout.count("present") == 2
    # a broken archive is refused
    (tmp_path / "data/CUB_200_2011/class_attr_data_10/test.pkl").unlink()
    (mirror / "class_attr_data_10.zip").write_bytes(b"not a zip")
    bad = _run("download_cub.sh", env)
    assert bad.returncode == 1 and "not a complete zip" in bad.stderr


def test_download_inaturalist_script(tmp_path):
    src = make_inat(tmp_path / "src")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    _zip(mirror / "inat_subset.zip", src, "inat_subset")
    env = _env(tmp_path, RDX_INAT_URL=(mirror / "inat_subset.zip").as_uri())
    first = _run("download_inaturalist.sh", env)
    assert first.returncode == 0, first.stderr
    assert "[inat] train: 4 images, 2 classes" in first.stdout
    second = _run("download_inaturalist.sh", env)
    assert second.returncode == 0 and "present and verified" in second.stdout
    assert "fetching" not in second.stdout
    (tmp_path / "data/inat_subset/images/toad/2.jpg").unlink()   # middle file: only the script sees it
    (tmp_path / "data/inat_subset/images/toad/1.jpg").unlink()
    (mirror / "inat_subset.zip").unlink()
    bad = _run("download_inaturalist.sh", env)
    assert bad.returncode != 0


def test_download_checkpoints_script(tmp_path):
    src = tmp_path / "src"
    for d in ("mnist_hflip", "mnist_m35"):
        (src / d).mkdir(parents=True)
        (src / d / "last.ckpt").write_bytes(b"x")
    (src / "mnist_835").mkdir()
    (src / "mnist_835" / "epoch=1.ckpt").write_bytes(b"y")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    _zip(mirror / "checkpoints.zip", src, "checkpoints")
    dest = tmp_path / "ck"
    (dest / "mine").mkdir(parents=True)
    env = _env(tmp_path, RDX_CHECKPOINT_ROOT=str(dest),
               RDX_CHECKPOINTS_URL=(mirror / "checkpoints.zip").as_uri())
    first = _run("download_checkpoints.sh", env)
    assert first.returncode == 0, first.stderr
    assert (dest / "mnist_m35/last.ckpt").is_file() and (dest / "mnist_835/epoch=1.ckpt").is_file()
    assert (dest / "mine").is_dir()
    second = _run("download_checkpoints.sh", env)
    assert "present and verified" in second.stdout and "fetching" not in second.stdout


def _tar(path, members):
    with tarfile.open(path, "w") as t:
        for name, p in members:
            t.add(p, name)


def test_download_imagenet_script(tmp_path):
    src = make_imagenet(tmp_path / "src")
    dl = tmp_path / "dl"
    dl.mkdir()
    # train: a tar of per-class tars, incl. the corrupt file
    (src / "train/n04266014/n04266014_10835.JPEG").write_bytes(b"corrupt")
    for w in WNIDS:
        _tar(dl / f"{w}.tar", [(p.name, p) for p in sorted((src / "train" / w).iterdir())])
    _tar(dl / "ILSVRC2012_img_train.tar", [(f"{w}.tar", dl / f"{w}.tar") for w in WNIDS])
    # val: flat JPEGs + Kaggle ground truth
    rows, members = [], []
    for i, w in enumerate(WNIDS * 2):
        name = f"ILSVRC2012_val_{i + 1:08d}"
        _img(dl / "valflat" / f"{name}.JPEG", i, "JPEG")
        members.append((f"{name}.JPEG", dl / "valflat" / f"{name}.JPEG"))
        rows.append(f"{name},{w} 1 2 3 4\n")
    _tar(dl / "ILSVRC2012_img_val.tar", members)
    (dl / "LOC_val_solution.csv").write_text("ImageId,PredictionString\n" + "".join(rows))
    env = _env(tmp_path)
    none = _run("download_imagenet.sh", env)
    assert none.returncode == 1 and "train: missing" in none.stdout
    args = [str(dl / n) for n in ("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar",
                                  "LOC_val_solution.csv")] + [str(src / "LOC_synset_mapping.txt")]
    first = _run("download_imagenet.sh", env, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "unpacked 3 class folders" in first.stdout and "deleted the known-corrupt" in first.stdout
    assert "sorted 6 images" in first.stdout
    data = tmp_path / "data"
    assert not (data / "imagenet/train/n04266014/n04266014_10835.JPEG").exists()
    val = imagenet_dataset("val", data_root=data)
    assert val.labels.tolist() == [0, 0, 1, 1, 2, 2] and val.ids[0].startswith("n01440764/")
    assert len(imagenet_dataset("train", data_root=data, classes=[2])) == 2
    second = _run("download_imagenet.sh", env, *args)
    assert second.returncode == 0 and "(3 already there)" in second.stdout
    assert "sorted 0 images" in second.stdout
    # --link an existing copy
    env2 = _env(tmp_path, RDX_DATA_ROOT=str(tmp_path / "data2"))
    linked = _run("download_imagenet.sh", env2, "--link", str(src))
    assert linked.returncode == 0, linked.stdout + linked.stderr
    assert (tmp_path / "data2/imagenet").is_symlink()
    assert "train: 3 class folders" in linked.stdout
    again = _run("download_imagenet.sh", env2, "--link", str(src))
    assert again.returncode == 0 and "already links" in again.stdout
