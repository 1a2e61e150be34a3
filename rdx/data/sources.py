"""Image sources given on the command line: a folder, an ImageFolder tree, a CSV, a name.

:func:`open_source` turns what ``rdx features`` gets as its image source into an
:class:`~rdx.data.base.ImageDataset`:

* an existing **CSV file** (``.csv``): one image per row; the column ``path`` (or ``file``,
  ``filename``, ``image``; without a header: the first column) holds the file, relative to
  the CSV's folder or absolute; an optional ``label`` (or ``class``) column names classes;
* an existing **folder** with image files in it: those images (sorted by name, no labels);
* an existing folder whose images are only in subfolders: an **ImageFolder tree**
  (``root/<class>/<image>``, torchvision's conventions), labels from the subfolders;
* otherwise a **built-in dataset** of :func:`rdx.data.get_dataset` (``digits``,
  ``fashion-mnist``, ``mnist``, ...; ``-`` and ``_`` are the same).

An existing path wins over a dataset name (a folder called ``digits`` is that folder).
File images are read lazily; :func:`check_readable` opens every selected file's header
up front (cheap) so a non-image is reported before a long extraction, and an image that
fails later is an :class:`~rdx.errors.RDXInputError` naming the file, not a traceback.
"""
from __future__ import annotations

import csv
import os
import stat
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


def folder_dataset(root: Path) -> FileImages:
    """The image files directly in ``root``, sorted by name, all with label 0."""
    files = sorted(p.name for p in root.iterdir()
                   if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise RDXInputError(f"folder {str(root)!r} has no image files "
                            f"({', '.join(sorted(IMAGE_SUFFIXES))}).")
    return FileImages(name="folder", labels=np.zeros(len(files), dtype=np.int64),
                      class_names=[root.name or "images"], ids=files, root=root,
                      info={"source": str(root.resolve()), "layout": "folder"})


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
        labels, names = _encode([r[label_col].strip() for r in body])
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
        Nothing at that path and no such dataset (the message lists both kinds), an empty
        folder, an unreadable CSV.
    """
    path = Path(text)
    if path.is_file():
        if path.suffix.lower() != ".csv":
            raise RDXInputError(f"image source {text!r} is a file but not a .csv list of "
                                "images; give a folder, an ImageFolder tree, a CSV of paths "
                                f"or a dataset name ({', '.join(BUILTIN)}).")
        return csv_dataset(path)
    if path.is_dir():
        if any(p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES for p in path.iterdir()):
            return folder_dataset(path)
        from . import imagefolder_dataset

        return _as_file_images(imagefolder_dataset(path))
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
           "check_regular", "csv_dataset", "folder_dataset", "open_source"]
