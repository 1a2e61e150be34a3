"""File datasets (cub_pcbm, inatdl, imagenet) and their download scripts, on tiny fixtures."""
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tarfile
import time
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

SCRIPTS = ["download_cub.sh", "download_imagenet.sh", "download_inaturalist.sh",
           "download_mnist.sh", "download_checkpoints.sh"]
PROXY_VARS = {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"}


def _run(script, env, *args):
    return subprocess.run(["bash", str(REPO / script), *args], env=env, capture_output=True,
                          text=True, check=False, timeout=120)


def _env(tmp_path, **kw):
    # no proxy: the tests' URLs are file:// or the loopback and must never leave the machine
    base = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    return {**base, "RDX_DATA_ROOT": str(tmp_path / "data"), "RDX_PYTHON": sys.executable,
            "RDX_CHECKPOINT_ROOT": str(tmp_path / "ck"), **kw}


FAKE_CURL = """#!/usr/bin/env bash
# stands in for curl: logs its call, appends $FAKE_CURL_BYTES to the -o file, exits $FAKE_CURL_RC
echo "$@" >> "$FAKE_CURL_LOG"
out=""
while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done
[ -n "${FAKE_CURL_BYTES:-}" ] && printf '%s' "$FAKE_CURL_BYTES" >> "$out"
printf 000
exit "${FAKE_CURL_RC:-6}"
"""


def _fake_curl_env(tmp_path, rc=6, partial="", **kw):
    """An environment whose `curl` fails like curl does offline (6: no DNS), touching nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "curl").write_text(FAKE_CURL)
    (bin_dir / "curl").chmod(0o755)
    env = _env(tmp_path, FAKE_CURL_LOG=str(tmp_path / "curl.log"), FAKE_CURL_RC=str(rc),
               FAKE_CURL_BYTES=partial, **kw)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def _zip(path, folder, arcroot):
    with zipfile.ZipFile(path, "w") as z:
        for p in sorted(folder.rglob("*")):
            z.write(p, str(Path(arcroot) / p.relative_to(folder)))


def _big_cub_tgz(path, src, n_padding=3000):
    """A CUB archive whose classes.txt comes first, followed by thousands of entries: a listing
    far larger than a pipe buffer, so a `tar -t | grep -q` check dies of SIGPIPE every time."""
    with tarfile.open(path, "w:gz") as t:
        t.add(src / "classes.txt", "CUB_200_2011/classes.txt")
        for i in range(n_padding):
            info = tarfile.TarInfo(f"CUB_200_2011/attributes/padding/{'x' * 60}_{i:05d}.txt")
            t.addfile(info)   # empty member: size 0
        t.add(src / "images", "CUB_200_2011/images")


def test_download_cub_script(tmp_path):
    src = make_cub(tmp_path / "src")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    # classes.txt first, then thousands of entries: the SIGPIPE case of a check that stops
    # reading the listing early (see the next test)
    _big_cub_tgz(mirror / "CUB_200_2011.tgz", src)
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
    assert bad.returncode == 1 and "not a valid zip archive" in bad.stderr
    assert "resume" not in bad.stderr and not list((tmp_path / "data").glob("*.part"))


def test_download_cub_keeps_a_correct_archive_under_sigpipe(tmp_path):
    src = make_cub(tmp_path / "src")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    tgz = mirror / "CUB_200_2011.tgz"
    _big_cub_tgz(tgz, src)
    # the fixture does reproduce the failure of a check that stops reading early
    naive = subprocess.run(["bash", "-o", "pipefail", "-c",
                            f"tar -tzf '{tgz}' | grep -q '^CUB_200_2011/classes.txt$'"],
                           check=False)
    assert naive.returncode != 0
    # the library's check, many times over: always "complete and holds the member" (0)
    driver = tmp_path / "check.sh"
    driver.write_text(f"set -euo pipefail\nsource '{REPO}/scripts/download_lib.sh'\n"
                      f"for i in 1 2 3 4 5 6 7 8; do tgz_holds '{tgz}' CUB_200_2011/classes.txt; "
                      "done\ntgz_holds \"$1\" CUB_200_2011/classes.txt || echo \"rc=$?\"\n")
    other = tmp_path / "other.tgz"
    with tarfile.open(other, "w:gz") as t:
        t.add(src / "classes.txt", "classes.txt")
    checks = subprocess.run(["bash", str(driver), str(other)], capture_output=True, text=True,
                            check=False)
    assert checks.returncode == 0 and checks.stdout == "rc=2\n", checks.stderr
    truncated = tmp_path / "truncated.tgz"
    truncated.write_bytes(tgz.read_bytes()[: tgz.stat().st_size // 2])
    checks = subprocess.run(["bash", str(driver), str(truncated)], capture_output=True,
                            text=True, check=False)
    assert checks.returncode == 0 and checks.stdout == "rc=1\n", checks.stderr
    # the script with that archive already downloaded: checked, kept and unpacked, not fetched
    # again (the split's download then fails offline, which stops the script before the loader)
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(tgz, data / "CUB_200_2011.tgz")
    run = _run("download_cub.sh", _fake_curl_env(tmp_path, rc=7))
    assert run.returncode == 1
    assert "unpacking" in run.stdout and "fetching http" not in run.stdout.split("unpacking")[0]
    assert "not the CUB archive" not in run.stderr and "class_attr_data_10.zip" in run.stderr
    assert "CUB_200_2011.tgz" not in (tmp_path / "curl.log").read_text()   # only the split
    assert (data / "CUB_200_2011" / "classes.txt").is_file()
    assert len(list((data / "CUB_200_2011" / "attributes" / "padding").iterdir())) == 3000


def test_download_cub_refuses_a_foreign_tgz(tmp_path):
    src = make_cub(tmp_path / "src")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with tarfile.open(mirror / "CUB_200_2011.tgz", "w:gz") as t:
        t.add(src / "classes.txt", "something/else.txt")
    env = _env(tmp_path, RDX_CUB_URL=(mirror / "CUB_200_2011.tgz").as_uri())
    bad = _run("download_cub.sh", env)
    assert bad.returncode == 1
    assert "finished, but it is a .tgz without CUB_200_2011/classes.txt" in bad.stderr
    assert not list((tmp_path / "data").glob("CUB_200_2011.tgz*"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_download_scripts_help_and_bad_flags(tmp_path, script):
    env = _fake_curl_env(tmp_path)
    for flag in ("--help", "-h"):
        run = _run(script, env, flag)
        assert run.returncode == 0, run.stderr
        assert f"usage: bash {script}" in run.stdout and "RDX_" in run.stdout
        assert run.stderr == ""
    bad = _run(script, env, "--no-such-flag")
    assert bad.returncode == 2
    assert "'--no-such-flag'" in bad.stderr and f"bash {script} --help" in bad.stderr
    # neither downloaded nor created anything
    assert not (tmp_path / "curl.log").exists()
    assert not (tmp_path / "data").exists() and not (tmp_path / "ck").exists()


def test_download_argument_errors_exit_2(tmp_path):
    env = _fake_curl_env(tmp_path)
    for script, args in (("download_cub.sh", ["extra"]), ("download_checkpoints.sh", ["cub"]),
                         ("download_imagenet.sh", ["--link"]),
                         ("download_imagenet.sh", ["--link", str(tmp_path / "nowhere")])):
        run = _run(script, env, *args)
        assert run.returncode == 2, (script, args, run.stderr)
        assert run.stderr.strip() and "Traceback" not in run.stderr
    assert not (tmp_path / "curl.log").exists()


OFFLINE = [("download_cub.sh", "RDX_CUB_URL"), ("download_inaturalist.sh", "RDX_INAT_URL"),
           ("download_mnist.sh", "RDX_MNIST_URL"),
           ("download_checkpoints.sh", "RDX_CHECKPOINTS_URL")]


@pytest.mark.parametrize("script,var", OFFLINE)
def test_download_offline_says_why_without_claiming_a_part(tmp_path, script, var):
    run = _run(script, _fake_curl_env(tmp_path, rc=6))
    assert run.returncode == 1
    err = " ".join(run.stderr.split())
    assert "could not resolve the host name" in err and "no internet connection" in err
    assert "Nothing was downloaded." in err and var in err and f"bash {script}" in err
    assert ".part" not in err and "resume" not in err and "curl:" not in err
    assert not list(tmp_path.rglob("*.part"))


def test_download_interrupted_keeps_and_names_the_part(tmp_path):
    env = _fake_curl_env(tmp_path, rc=18, partial="x" * 1000)
    run = _run("download_cub.sh", env)
    assert run.returncode == 1
    err = " ".join(run.stderr.split())
    part = tmp_path / "data" / "CUB_200_2011.tgz.part"
    assert part.read_text() == "x" * 1000
    assert "the connection broke during the transfer" in err
    assert f"1000 bytes of it are kept in {part}; `bash download_cub.sh` continues" in err


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_download_connection_refused_with_real_curl(tmp_path):
    # port 1 of the loopback: refused at once, nothing leaves the machine
    env = _env(tmp_path, RDX_INAT_URL="http://127.0.0.1:1/inat_subset.zip")
    run = _run("download_inaturalist.sh", env)
    assert run.returncode == 1
    err = " ".join(run.stderr.split())
    assert "could not connect to 127.0.0.1:1" in err and "Nothing was downloaded." in err
    assert ".part" not in err and not list(tmp_path.rglob("*.part"))


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


PCBM = "post-hoc-cbm/output/cub_resnet18/train-proj_cub__resnet18_cub__cub_resnet18_cub_0.npy"


def _checkpoint_tree(src, pcbm=True):
    for d in ("mnist_hflip", "mnist_835"):
        (src / d).mkdir(parents=True)
    (src / "mnist_hflip" / "last.ckpt").write_bytes(b"x")
    (src / "mnist_835" / "epoch=1.ckpt").write_bytes(b"y")
    if pcbm:
        (src / PCBM).parent.mkdir(parents=True)
        np.save(src / PCBM, np.arange(6 * 112, dtype=np.float32).reshape(6, 112))


def test_download_checkpoints_pcbm(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    _checkpoint_tree(tmp_path / "src")
    _zip(mirror / "checkpoints.zip", tmp_path / "src", "checkpoints")
    _checkpoint_tree(tmp_path / "src_nopcbm", pcbm=False)
    _zip(mirror / "nopcbm.zip", tmp_path / "src_nopcbm", "checkpoints")
    dest = tmp_path / "ck"
    # the archive holds it: the default run installs it, `pcbm` then finds it verified
    env = _env(tmp_path, RDX_CHECKPOINTS_URL=(mirror / "checkpoints.zip").as_uri())
    first = _run("download_checkpoints.sh", env)
    assert first.returncode == 0, first.stderr
    assert f"CUB PCBM projection: {dest / PCBM} (6 images x 112 concepts (float32))" \
        in first.stdout
    assert np.load(dest / PCBM).shape == (6, 112)
    again = _run("download_checkpoints.sh", env, "pcbm")
    assert again.returncode == 0 and "fetching" not in again.stdout
    # the archive lacks it: `pcbm` fails and says how to make it; the default run only notes it
    shutil.rmtree(dest)
    env = _env(tmp_path, RDX_CHECKPOINTS_URL=(mirror / "nopcbm.zip").as_uri())
    missing = _run("download_checkpoints.sh", env, "pcbm")
    err = " ".join(missing.stderr.split())
    assert missing.returncode == 1
    assert "RDX_PCBM_URL" in err and "train_pcbm.py" in err
    assert "class_attr_data_10/train.pkl" in err
    shutil.rmtree(dest)
    plain = _run("download_checkpoints.sh", env)
    assert plain.returncode == 0, plain.stderr
    assert "no CUB PCBM projection" in plain.stdout
    assert "download_checkpoints.sh pcbm" in plain.stdout
    # RDX_PCBM_URL: the .npy itself; a file that is not a 2-D array is refused and removed
    bad = mirror / "bad.npy"
    np.save(bad, np.zeros(3))
    env_bad = _env(tmp_path, RDX_PCBM_URL=bad.as_uri())
    refused = _run("download_checkpoints.sh", env_bad, "pcbm")
    assert refused.returncode == 1 and "not a 2-D numeric .npy array" in refused.stderr
    assert not (dest / PCBM).exists() and not (dest / (PCBM + ".part")).exists()
    env_url = _env(tmp_path, RDX_PCBM_URL=(tmp_path / "src" / PCBM).as_uri(),
                   RDX_CHECKPOINTS_URL="http://127.0.0.1:1/never-used.zip")
    direct = _run("download_checkpoints.sh", env_url, "pcbm")
    assert direct.returncode == 0, direct.stderr
    assert "fetching file://" in direct.stdout and "6 images x 112 concepts" in direct.stdout


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


SLOW_CURL = """#!/usr/bin/env bash
# stands in for curl: appends a few bytes to the -o file, then waits (a transfer under way)
out=""
while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done
[ -n "${SLOW_CURL_BYTES:-}" ] && printf '%s' "$SLOW_CURL_BYTES" >> "$out"
touch "$SLOW_CURL_STARTED"
sleep 60
"""


@pytest.mark.parametrize("sig,status,name,got", [
    (signal.SIGINT, 130, "SIGINT", "partial"), (signal.SIGTERM, 143, "SIGTERM", "partial"),
    (signal.SIGHUP, 129, "SIGHUP", "")])
def test_an_interrupted_download_says_what_it_keeps(tmp_path, sig, status, name, got):
    """Ctrl-C (or a kill, a hang-up) during a transfer: the partial ``.part`` file is kept on
    purpose — the next run continues it (``curl -C -``) — and one paragraph says so, with
    128 + the signal; an empty one is removed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text(SLOW_CURL)
    (bin_dir / "curl").chmod(0o755)
    started = tmp_path / "started"
    env = _env(tmp_path, SLOW_CURL_BYTES=got, SLOW_CURL_STARTED=str(started))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    run = subprocess.Popen(["bash", str(REPO / "download_mnist.sh")], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    for _ in range(600):
        if started.exists() or run.poll() is not None:
            break
        time.sleep(0.05)
    os.killpg(run.pid, sig)          # as a terminal sends Ctrl-C: to the whole job
    _, err = run.communicate(timeout=60)
    parts = list((tmp_path / "data").rglob("*.part"))
    assert run.returncode == status, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"interrupted ({name})" in err
    if got:
        assert len(parts) == 1 and parts[0].read_text() == got
        assert f"are kept in {parts[0]}" in err and "continues the download" in err
    else:
        assert not parts and "nothing of" in err
