"""Image folders given as an image source (:mod:`rdx.data.sources`) and ``rdx features
--workers``, as properties.

* a class tree (``root/<class>/<image>``) without links is read as torchvision's
  ImageFolder reads it: the same images, in the same order, with the same labels;
* symbolic links back up the tree (to the class folder, a parent, the root) add nothing
  and the reading ends;
* image files directly in the folder beside class folders with images are refused (never
  read as a flat folder of the loose files, nor as a tree without them);
* a folder without image files, or whose images cannot be read, is refused with exit 2
  and a message of rdx's own;
* ``--workers`` above the CPUs this process may run on is refused, naming the flag.

Trees are drawn by Hypothesis (profiles in ``hypothesis_profiles``); the files are empty
(reading a tree looks at names only) except where ``rdx features`` decodes them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import hypothesis_profiles  # noqa: F401  (registers and loads the profile)
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from rdx.budget import check_local_workers
from rdx.data import get_dataset
from rdx.data.sources import class_tree, open_source
from rdx.errors import RDXInputError
from rdx.threads import affinity_cpus

NAME = st.text("abcXY_-0", min_size=1, max_size=3)
#: torchvision's image endings (any case), and files that are not images
EXT = st.sampled_from([".png", ".JPG", ".jpeg", ".tif", ".webp", ".txt", ".csv"])
FILES = st.lists(st.tuples(st.lists(NAME, max_size=2), NAME, EXT), min_size=1, max_size=5)
TREES = st.dictionaries(NAME, FILES, min_size=1, max_size=4)


def build(root: Path, tree: dict) -> Path:
    """``root/<class>/<subfolders>/<file>`` for the drawn tree; every class gets at least
    one image (an empty class is a refusal of its own)."""
    for cls, files in tree.items():
        images = 0
        for dirs, stem, ext in files:
            folder = root.joinpath(cls, *dirs)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{stem}{ext}").touch()
            images += ext.lower() != ".txt" and ext != ".csv"
        if not images:
            (root / cls / "only.png").touch()
    return root


def fresh() -> Path:
    return Path(tempfile.mkdtemp(prefix="rdx-folders-"))


def finishes(func, seconds: float = 60.0):
    """``func()``'s result, or a failure when it has not returned after ``seconds`` (a walk
    that follows a link loop never does)."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = func()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still reading the folder after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@given(tree=TREES)
def test_a_tree_without_links_is_read_as_torchvision_reads_it(tree):
    from torchvision.datasets import ImageFolder

    root = build(fresh(), tree)
    try:
        ids, labels, classes = class_tree(root)
        tv = ImageFolder(str(root), loader=lambda p: p)
        assert classes == tv.classes
        assert ids == [os.path.relpath(p, root) for p, _ in tv.samples]
        assert labels.tolist() == [t for _, t in tv.samples]
        ds = get_dataset("imagefolder", root=root)
        assert ds.ids == ids and ds.class_names == classes
    finally:
        shutil.rmtree(root)


@given(tree=TREES, links=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), NAME),
                                  min_size=1, max_size=4))
def test_links_back_up_the_tree_add_nothing_and_end(tree, links):
    root = build(fresh(), tree)
    try:
        expected = class_tree(root)
        classes = sorted(tree)
        for which, up, name in links:
            cls = classes[which % len(classes)]
            folder = root / cls
            subs = [p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink()]
            if subs:
                folder = subs[which % len(subs)]
            depth = len(folder.relative_to(root).parts)     # ≥ 1: inside a class
            target = os.path.join(*[".."] * min(up, depth)) if up else "."
            link = folder / f"link{name}"
            if not os.path.lexists(link):
                os.symlink(target, link)                    # to itself, a parent, the root
        ids, labels, names = finishes(lambda: class_tree(root))
        assert ids == expected[0] and labels.tolist() == expected[1].tolist()
        assert names == expected[2]
    finally:
        shutil.rmtree(root)


def test_a_class_folder_that_is_the_root_itself_is_refused(tmp_path):
    build(tmp_path, {"cat": [([], "a", ".png")]})
    os.symlink(".", tmp_path / "loop")
    with pytest.raises(RDXInputError, match="'loop' is a symbolic link back to the image "
                                            "folder itself"):
        finishes(lambda: open_source(str(tmp_path)))


@given(tree=TREES, loose=st.lists(st.tuples(NAME, st.sampled_from([".png", ".jpg"])),
                                  min_size=1, max_size=3, unique=True))
def test_loose_images_beside_class_folders_are_refused(tree, loose):
    root = build(fresh(), tree)
    try:
        names = sorted({f"{stem}{ext}" for stem, ext in loose})
        for n in names:
            (root / n).touch()
        for read in (lambda: open_source(str(root)), lambda: class_tree(root)):
            with pytest.raises(RDXInputError) as info:
                read()
            text = str(info.value)
            assert f"{len(names)} image file(s) directly in it" in text
            assert repr(names[0]) in text and "class folders with images" in text
            assert "CSV of paths" in text   # how to say exactly which images to read
    finally:
        shutil.rmtree(root)


@given(files=st.lists(st.tuples(st.lists(NAME, max_size=2), NAME,
                                st.sampled_from([".txt", ".csv", ".json", ""])),
                      min_size=1, max_size=5))
def test_a_folder_without_images_is_refused_with_our_message(files):
    root = fresh()
    try:
        for dirs, stem, ext in files:
            try:   # a drawn file may take the name of a drawn folder, or the other way
                folder = root.joinpath(*dirs)
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{stem}{ext}").touch()
            except OSError:
                continue
        with pytest.raises(RDXInputError, match="has no image files in it or in folders "
                                                "below it") as info:
            open_source(str(root))
        assert "Couldn't find" not in str(info.value)   # torchvision's message, before
    finally:
        shutil.rmtree(root)


def test_a_class_folder_without_images_is_named(tmp_path):
    build(tmp_path, {"cat": [([], "a", ".png")]})
    (tmp_path / "dog").mkdir()
    (tmp_path / "dog" / "notes.txt").touch()
    with pytest.raises(RDXInputError, match="class folder\\(s\\) 'dog' hold no image files"):
        open_source(str(tmp_path))


def _pngs(folder: Path, n: int, v: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(np.full((8, 8, 3), v + 20 * i, np.uint8)).save(folder / f"{i}.png")


def _features(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rdx", "features", "convnet", *argv,
                           "--random-init", "--quiet"], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_features_of_folders_as_a_user_runs_them(tmp_path):
    """``rdx features``: a tree with link loops gives its 6 images; one stray image beside
    its class folders, a folder of text files and a folder of images that are not are
    refused with exit 2 and rdx's message."""
    _pngs(tmp_path / "tree" / "cat", 3)
    _pngs(tmp_path / "tree" / "dog", 3, 100)
    os.symlink("..", tmp_path / "tree" / "cat" / "up")
    os.symlink(".", tmp_path / "tree" / "dog" / "self")
    proc = _features("tree", "--out", "f.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "f.npz") as z:
        assert sorted(z["ids"].tolist()) == [f"{c}/{i}.png" for c in ("cat", "dog")
                                             for i in range(3)]
        assert z["labels"].tolist() == [0, 0, 0, 1, 1, 1]
    shutil.copy(tmp_path / "tree" / "cat" / "0.png", tmp_path / "tree" / "stray.png")
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("not an image\n")
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "a.png").write_text("not an image either\n")
    for source, message in (("tree", "1 image file(s) directly in it ('stray.png') beside "
                                     "class folders with images ('cat', 'dog')"),
                            ("text", "has no image files in it or in folders below it"),
                            ("fake", "1 image(s) cannot be read")):
        proc = _features(source, "--out", f"{source}.npz", cwd=tmp_path)
        assert proc.returncode == 2, (source, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert not (tmp_path / f"{source}.npz").exists()


@given(value=st.integers(0, 300), cpus=st.integers(1, 64))
def test_workers_are_bounded_by_the_cpus(value, cpus):
    if value <= cpus:
        check_local_workers(value, "--workers", cpus)
        return
    with pytest.raises(RDXInputError) as info:
        check_local_workers(value, "--workers", cpus)
    assert f"--workers={value}" in str(info.value)
    assert f"between 0 (decode in the main process) and {cpus}" in str(info.value)


@pytest.mark.parametrize("extra", [1, 250])
def test_features_refuses_more_workers_than_cpus(tmp_path, extra):
    """Refused as soon as the command line is parsed (no model, no data loaded)."""
    n = affinity_cpus() + extra
    proc = subprocess.run([sys.executable, "-m", "rdx", "features", "convnet", "digits",
                           "--out", "f.npz", "--workers", str(n)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"--workers={n}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "f.npz").exists()
