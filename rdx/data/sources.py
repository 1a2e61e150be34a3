"""Image sources given on the command line: a folder, an ImageFolder tree, a CSV, a name.

:func:`open_source` turns what ``rdx features`` gets as its image source into an
:class:`~rdx.data.base.ImageDataset`:

* an existing **CSV file** (``.csv``): one image per row; the column ``path`` (or ``file``,
  ``filename``, ``image``; without a header: the first column) holds the file, relative to
  the CSV's folder or absolute; an optional ``label`` (or ``class``) column names classes;
* an existing **folder** with image files in it: those images (sorted by name, no labels);
* an existing folder whose images are only in subfolders: an **ImageFolder tree**
  (``root/<class>/<image>``, torchvision's conventions: every subfolder is a class, the
  classes sorted by name, each read with its subfolders), labels from the subfolders
  (:func:`class_tree`);
* otherwise a **built-in dataset** of :func:`rdx.data.get_dataset` (``digits``,
  ``fashion-mnist``, ``mnist``, ...; ``-`` and ``_`` are the same).

An existing path wins over a dataset name (a folder called ``digits`` is that folder).
A folder is read one way or refused, never read half: image files directly in it *and*
class folders with images beside them are refused (read flat, the class folders' images
would be left out; read as a tree, the loose files would), and so is a folder with no
image file in it or below it. Symbolic links to folders are followed, but never into a
folder already being read (a link loop, or a link back up the tree), so a tree with a
loop is read once instead of for ever.
File images are read lazily; :func:`check_readable` opens every selected file's header
up front (cheap) so a non-image is reported before a long extraction, and an image that
fails later is an :class:`~rdx.errors.RDXInputError` naming the file, not a traceback.
"""
from __future__ import annotations

import csv
import os
import stat
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import RDXInputError
from .base import ImageDataset

if TYPE_CHECKING:
    from PIL import Image

#: File name endings taken as images in a folder (what PIL reads; case-insensitive).
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff",
                            ".webp", ".ppm", ".pgm", ".pbm"})
#: CSV column names of the image path and of the class, first match wins.
PATH_COLUMNS = ("path", "file", "filename", "image", "filepath")
LABEL_COLUMNS = ("label", "class", "target")
#: Datasets that need no files from the user (``imagefolder`` and the paper's large sets
#: are reached by giving their folder or through configs).
BUILTIN = ("digits", "fashion_mnist", "mnist", "mnist_m35", "mnist_m49", "mnist_hflip",
           "mnist_hflip_nl", "mnist_vflip", "mnist_vflip_nl", "cub_pcbm", "inatdl",
           "imagenet", "rsna_pneumonia")


class FileImages(ImageDataset):
    """An :class:`ImageDataset` of files whose unreadable images are input errors."""

    def load_image(self, i: int) -> "Image.Image":
        try:
            if self.root is not None:
                check_regular(self.root / self.ids[i])
            return super().load_image(i)
        except RDXInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - PIL raises OSError, ValueError, its own
            raise RDXInputError(unreadable(self.root / self.ids[i], exc)) from None


def check_regular(path: Path) -> None:
    """Raise ``ValueError`` when ``path`` is not a regular file, before anything opens it.

    A folder or CSV of images may name a named pipe (reading it waits for a writer, for
    ever), a device (``/dev/zero`` never ends) or a socket; the image reader would block on
    them, so they are refused by what they are, like the command line's own inputs.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "a special file")
        raise ValueError(f"it is {kind}, not a regular file")


def unreadable(path: Path, exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return (f"image {str(path)!r} cannot be read ({type(exc).__name__}"
            + (f": {text}" if text else "") + "); remove it from the image source or "
            "replace it with a readable image.")


def _as_file_images(ds: ImageDataset) -> FileImages:
    return FileImages(**{f.name: getattr(ds, f.name) for f in fields(ImageDataset)})


def _encode(values: list[str]) -> tuple[np.ndarray, list[str]]:
    """Class names → codes 0..C−1 (integers sorted as numbers, other names as text)."""
    names = sorted(set(values), key=lambda v: (0, int(v), "") if v.lstrip("-").isdigit()
                   else (1, 0, v))
    code = {v: i for i, v in enumerate(names)}
    return np.array([code[v] for v in values], dtype=np.int64), names


def _is_image(entry: os.DirEntry) -> bool:
    """A regular file (or a link to one) with an image ending: a named pipe or device
    called ``x.png`` is passed over like any file that is not an image."""
    try:
        return entry.name.lower().endswith(tuple(IMAGE_SUFFIXES)) and entry.is_file()
    except OSError:   # a link that cannot be followed
        return False


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()   # follows symbolic links, as torchvision's ImageFolder does
    except OSError:
        return False


def _identity(path: str | os.PathLike) -> tuple[int, int]:
    """(device, inode) of the folder ``path`` leads to: the same for every link to it."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _scan(folder: str) -> list[os.DirEntry]:
    """The entries of ``folder``, sorted by name; an unreadable folder is refused (a walk
    that passed over it would silently read fewer images)."""
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise RDXInputError(f"folder {folder!r} of the image source cannot be read "
                            f"({exc.strerror or exc}); make it readable or remove it from "
                            "the image folder.") from None


def _walk_images(top: str, seen: set[tuple[int, int]]) -> Iterator[str]:
    """Paths of the image files in ``top`` and every folder below it, in torchvision's
    order (folders by path, the files of each by name).

    Symbolic links to folders are followed, except into a folder whose (device, inode) is
    in ``seen`` — an ancestor (a link loop) or a folder already read — so the walk ends on
    every tree; ``seen`` gains the folders walked.
    """
    folders: list[tuple[str, list[str]]] = []
    stack = [top]
    seen.add(_identity(top))
    while stack:
        folder = stack.pop()
        entries = _scan(folder)
        folders.append((folder, [e.name for e in entries if _is_image(e)]))
        for e in entries:
            if not _is_folder(e):
                continue
            ident = _identity(e.path)
            if ident not in seen:
                seen.add(ident)
                stack.append(e.path)
    for folder, names in sorted(folders):
        for name in names:
            yield os.path.join(folder, name)


def _some(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _no_images(root: Path) -> RDXInputError:
    """The message for a folder without one image file in it or below it."""
    others = sorted(p.name for p in root.iterdir() if not p.is_dir())
    holds = (f"it holds {len(others)} other file(s), e.g. {_some(others)}" if others
             else "it holds no files")
    return RDXInputError(
        f"image folder {str(root)!r} has no image files in it or in folders below it "
        f"({holds}; image files end in {', '.join(sorted(IMAGE_SUFFIXES))}). Give a folder "
        "of images, an ImageFolder tree (root/<class>/<image>), a CSV of paths (columns "
        "path[,label]) or a dataset name.")


def _mixed(root: Path, loose: list[str], classes: list[str]) -> RDXInputError:
    return RDXInputError(
        f"image folder {str(root)!r} has {len(loose)} image file(s) directly in it "
        f"({_some(loose)}) beside class folders with images ({_some(classes)}): read as a "
        f"flat folder, the class folders' images would be left out; read as an ImageFolder "
        f"tree (root/<class>/<image>), the {len(loose)} loose file(s) would. Move the loose "
        "images into a class folder (or out of the folder), or give a CSV of paths "
        "(columns path[,label]) that lists exactly the images to read.")


def class_tree(root: str | os.PathLike) -> tuple[list[str], np.ndarray, list[str]]:
    """The images of an ImageFolder tree ``root/<class>/<image>``: (ids relative to
    ``root``, labels, class names).

    torchvision's conventions: every subfolder of ``root`` is a class (sorted by name,
    labels 0..C−1), read with its own subfolders; symbolic links to folders are followed,
    but never into a folder already read (:func:`_walk_images`), so a link loop ends.

    Raises
    ------
    RDXInputError
        ``root`` is not a folder; it holds image files besides class folders (they would
        be left out); it has no image file; a class folder has none (every subfolder is a
        class) or is a link back to ``root``; a folder of it cannot be read.
    """
    root = Path(root)
    if not root.is_dir():
        raise RDXInputError(f"image folder {str(root)!r} does not exist; expected "
                            "root/<class name>/<image files>.")
    entries = _scan(str(root))
    loose = [e.name for e in entries if _is_image(e)]
    class_dirs = [e for e in entries if _is_folder(e)]
    top = _identity(root)
    ids: list[str] = []
    labels: list[int] = []
    empty: list[str] = []
    for label, entry in enumerate(class_dirs):
        if _identity(entry.path) == top:
            raise RDXInputError(
                f"image folder {str(root)!r}: class folder {entry.name!r} is a symbolic "
                "link back to the image folder itself (a link loop); remove the link.")
        # per class, so that a link from one class into another reads those images (as
        # torchvision does) while a link back up the tree is not followed
        found = [os.path.relpath(p, root) for p in _walk_images(entry.path, {top})]
        if not found:
            empty.append(entry.name)
        ids += found
        labels += [label] * len(found)
    with_images = [e.name for e in class_dirs if e.name not in empty]
    if loose and with_images:
        raise _mixed(root, loose, with_images)
    if loose:
        raise RDXInputError(
            f"image folder {str(root)!r} holds image files but no class folders with "
            f"images ({_some(loose)}): an ImageFolder tree is root/<class>/<image>; put "
            "the images in one folder per class (rdx features also reads a flat folder of "
            "images).")
    if not ids:
        raise _no_images(root)
    if empty:
        raise RDXInputError(
            f"image folder {str(root)!r}: class folder(s) {_some(empty, 5)} hold no image "
            f"files ({', '.join(sorted(IMAGE_SUFFIXES))}), and every subfolder of an "
            "ImageFolder tree is a class; put images in them or move them out of the "
            "image folder.")
    return ids, np.asarray(labels, dtype=np.int64), [e.name for e in class_dirs]


def image_folder(root: Path) -> FileImages:
    """The images of the folder ``root``: flat (image files directly in it) or an
    ImageFolder tree (images only in subfolders), refused when it is both or neither
    (module docstring)."""
    entries = _scan(str(root))
    if not any(_is_image(e) for e in entries):
        from . import imagefolder_dataset

        return _as_file_images(imagefolder_dataset(root))
    top = _identity(root)
    below = [e.name for e in entries if _is_folder(e) and _identity(e.path) != top
             and next(_walk_images(e.path, {top}), None) is not None]
    if below:
        raise _mixed(root, [e.name for e in entries if _is_image(e)], below)
    return folder_dataset(root)


def folder_dataset(root: Path) -> FileImages:
    """The image files directly in ``root``, sorted by name, all with label 0."""
    files = [e.name for e in _scan(str(root)) if _is_image(e)]
    if not files:
        raise _no_images(root)
    return FileImages(name="folder", labels=np.zeros(len(files), dtype=np.int64),
                      class_names=[root.name or "images"], ids=files, root=root,
                      info={"source": str(root.resolve()), "layout": "folder"})


def _check_one_label(path: Path, ids: list[str], labels: list[str], first_row: int) -> None:
    """Refuse a CSV that lists one image (the same file, however its path is written) in
    two rows with two labels: which class it is cannot be told, and its features would be
    one image under two classes. The same image twice with one label stays accepted (two
    rows of features). ``first_row``: the CSV row of the first listed image (1-based)."""
    seen: dict[str, tuple[int, str]] = {}
    for i, (image, label) in enumerate(zip(ids, labels)):
        key = os.path.normpath(os.path.join(str(path.parent), image))
        j, first = seen.setdefault(key, (i, label))
        if first != label:
            raise RDXInputError(
                f"CSV file {str(path)!r} lists image {ids[j]!r} twice with two labels: "
                f"{first!r} (row {j + first_row}) and {label!r} (row {i + first_row}"
                + (f", as {image!r}" if image != ids[j] else "") + "). An image has one "
                "class: keep the row with the right label and remove the other.")


def csv_dataset(path: Path) -> FileImages:
    """Images listed in a CSV file (module docstring)."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RDXInputError(f"CSV file {str(path)!r} cannot be read: {exc}") from None
    if not rows:
        raise RDXInputError(f"CSV file {str(path)!r} lists no images.")
    header = [c.strip().lower() for c in rows[0]]
    path_col = next((header.index(c) for c in PATH_COLUMNS if c in header), None)
    label_col = next((header.index(c) for c in LABEL_COLUMNS if c in header), None)
    if path_col is None:   # no header: the first column is the path
        path_col, body = 0, rows
    else:
        body = rows[1:]
    if not body:
        raise RDXInputError(f"CSV file {str(path)!r} has a header but no rows.")
    short = [i + 2 for i, r in enumerate(body) if len(r) <= max(path_col, label_col or 0)]
    if short:
        raise RDXInputError(f"CSV file {str(path)!r}: rows {short[:5]} have too few columns.")
    ids = [r[path_col].strip() for r in body]
    if label_col is None:
        labels, names = np.zeros(len(ids), dtype=np.int64), ["images"]
    else:
        values = [r[label_col].strip() for r in body]
        _check_one_label(path, ids, values, first_row=1 if body is rows else 2)
        labels, names = _encode(values)
    return FileImages(name=path.stem, labels=labels, class_names=names, ids=ids,
                      root=path.parent,
                      info={"source": str(path.resolve()), "layout": "csv",
                            "labels": label_col is not None})


def builtin_name(text: str) -> str | None:
    """The :func:`rdx.data.get_dataset` name of ``text`` (``fashion-mnist`` →
    ``fashion_mnist``), or None."""
    name = text.strip().lower().replace("-", "_")
    return name if name in BUILTIN else None


def open_source(text: str, *, split: str = "train", data_root: str | Path = "data"
                ) -> ImageDataset:
    """The images of ``text`` (module docstring); ``split`` and ``data_root`` are for the
    built-in datasets.

    Raises
    ------
    RDXInputError
        Nothing at that path and no such dataset (the message lists both kinds), a folder
        without images or with images both in it and in class folders, an unreadable CSV.
    """
    path = Path(text)
    if path.is_file():
        if path.suffix.lower() != ".csv":
            raise RDXInputError(f"image source {text!r} is a file but not a .csv list of "
                                "images; give a folder, an ImageFolder tree, a CSV of paths "
                                f"or a dataset name ({', '.join(BUILTIN)}).")
        return csv_dataset(path)
    if path.is_dir():
        return image_folder(path)
    if path.exists():   # neither a file nor a folder: a pipe, device or socket
        try:
            check_regular(path)
        except ValueError as exc:
            raise RDXInputError(f"image source {text!r}: {exc}; give a folder of images, an "
                                "ImageFolder tree, a CSV of paths or a dataset name.") from None
    name = builtin_name(text)
    if name is None:
        raise RDXInputError(
            f"image source {text!r}: no such file or folder, and not a built-in dataset; "
            "give a folder of images, an ImageFolder tree (root/<class>/<image>), a CSV of "
            f"paths or one of {', '.join(n.replace('_', '-') for n in BUILTIN)}.")
    from . import get_dataset

    ds = get_dataset(name, split=split, data_root=data_root)
    return ds if ds.images is not None else _as_file_images(ds)


def check_readable(ds: ImageDataset, indices: np.ndarray, limit: int = 5) -> None:
    """Open the header of every selected file (no decoding); refuse missing or non-image
    files, naming up to ``limit`` of them. Array datasets pass at once."""
    if ds.images is not None or ds.root is None:
        return
    from PIL import Image

    bad: list[str] = []
    for i in indices:
        p = ds.root / ds.ids[int(i)]
        try:
            check_regular(p)
            with Image.open(p) as img:
                img.size  # noqa: B018 - the header is parsed on open; size proves it
        except Exception as exc:  # noqa: BLE001 - any failure is the file's
            bad.append(unreadable(p, exc))
            if len(bad) >= limit:
                break
    if bad:
        more = " (first few)" if len(bad) >= limit else ""
        raise RDXInputError(f"{len(bad)} image(s) cannot be read{more}: " + " ".join(bad))


__all__ = ["BUILTIN", "FileImages", "IMAGE_SUFFIXES", "builtin_name", "check_readable",
           "check_regular", "class_tree", "csv_dataset", "folder_dataset", "image_folder",
           "open_source"]
