"""RSNA Pneumonia Detection Challenge (Kaggle) chest X-rays behind the ImageDataset interface.

Expected layout (the Kaggle download, unzipped)::

    <root>/stage_2_train_labels.csv          patientId,x,y,width,height,Target (one row per box)
    <root>/stage_2_train_images/<patientId>.dcm
    <root>/stage_2_detailed_class_info.csv   patientId,class (only for classes="detailed")

``root`` defaults to ``<data_root>/rsna_pneumonia``. Only the training split has labels.
Labels: ``classes="binary"`` (default) → 1 if any row of the patient has ``Target == 1``
(pneumonia, i.e. lung opacity), else 0; ``classes="detailed"`` → the three classes of
``stage_2_detailed_class_info.csv`` (Normal, No Lung Opacity / Not Normal, Lung Opacity).
Images are read with pydicom, mapped to 8 bits (MONOCHROME1 inverted) and returned as RGB
PIL images (the models' own transforms resize them). Image ids are the file paths relative
to ``root``, sorted by patient id.

Everything (folder, label file, image folder, every listed image, pydicom) is checked when
the dataset is built, so a missing piece is reported before any model runs.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from ..errors import RDXInputError
from .base import ImageDataset

LABELS_CSV = "stage_2_train_labels.csv"
DETAILED_CSV = "stage_2_detailed_class_info.csv"
IMAGES_DIR = "stage_2_train_images"
BINARY_CLASSES = ["no pneumonia", "pneumonia"]
DETAILED_CLASSES = ["Normal", "No Lung Opacity / Not Normal", "Lung Opacity"]
_HOW = ("download the Kaggle competition data (kaggle competitions download -c "
        "rsna-pneumonia-detection-challenge) and unzip it into {root}")


def _require_pydicom():
    try:
        import pydicom
    except ImportError:
        raise RDXInputError("reading the RSNA DICOM images needs pydicom: pip install "
                            "pydicom") from None
    return pydicom


def dicom_to_image(path: str | os.PathLike) -> Image.Image:
    """A DICOM file as an 8-bit RGB PIL image (min–max scaled unless already 8-bit)."""
    pydicom = _require_pydicom()
    try:
        ds = pydicom.dcmread(str(path))
        arr = ds.pixel_array
    except FileNotFoundError:
        raise RDXInputError(f"DICOM image {str(path)!r} is missing.") from None
    except Exception as exc:  # noqa: BLE001 - pydicom raises many types on bad files
        raise RDXInputError(f"{str(path)!r} is not a readable DICOM image ({exc}).") from None
    if arr.ndim == 3 and arr.shape[-1] in (3, 4):
        return Image.fromarray(np.asarray(arr[..., :3], dtype=np.uint8)).convert("RGB")
    if arr.ndim != 2:
        raise RDXInputError(f"{str(path)!r}: expected a 2-D grey image, got shape {arr.shape}.")
    if arr.dtype != np.uint8:
        a = arr.astype(np.float64)
        lo, hi = float(a.min()), float(a.max())
        arr = np.zeros(a.shape, np.uint8) if hi <= lo else \
            np.round((a - lo) * (255.0 / (hi - lo))).astype(np.uint8)
    if str(getattr(ds, "PhotometricInterpretation", "")) == "MONOCHROME1":
        arr = 255 - arr
    return Image.fromarray(arr).convert("RGB")


@dataclass
class RSNAPneumoniaDataset(ImageDataset):
    """:class:`ImageDataset` whose images are DICOM files (read with pydicom)."""

    def load_image(self, i: int) -> Image.Image:
        return dicom_to_image(self.root / self.ids[i])

    def subset(self, indices: Sequence[int], labels: np.ndarray | None = None
               ) -> "RSNAPneumoniaDataset":
        idx = np.asarray(indices, dtype=np.int64)
        return RSNAPneumoniaDataset(
            name=self.name, labels=self.labels[idx] if labels is None else np.asarray(labels),
            class_names=self.class_names, ids=[self.ids[i] for i in idx],
            info={**self.info, "subset_of": len(self)}, transform=self.transform,
            root=self.root)


def _read_csv(path: Path, columns: Sequence[str]) -> list[dict]:
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise RDXInputError(f"{path} lacks the columns {missing} (has "
                                    f"{reader.fieldnames}); is it the Kaggle file?")
            return list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RDXInputError(f"{path} could not be read ({exc}).") from None


def rsna_dataset(split: str = "train", data_root: str | Path = "data",
                 root: str | Path | None = None, classes: str = "binary"
                 ) -> RSNAPneumoniaDataset:
    """The labelled RSNA Pneumonia images (see the module docstring)."""
    root = Path(root) if root is not None else Path(data_root) / "rsna_pneumonia"
    how = _HOW.format(root=root)
    if split != "train":
        raise RDXInputError(f"RSNA Pneumonia has labels for the 'train' split only (stage 2 "
                            f"test images are unlabelled), got split {split!r}.")
    if classes not in ("binary", "detailed"):
        raise RDXInputError(f"classes must be 'binary' or 'detailed', got {classes!r}.")
    if not root.is_dir():
        raise RDXInputError(f"RSNA Pneumonia folder {str(root)!r} does not exist; {how}.")
    labels_csv = root / LABELS_CSV
    if not labels_csv.is_file():
        raise RDXInputError(f"{labels_csv} is missing; {how}.")
    image_dir = root / IMAGES_DIR
    if not image_dir.is_dir():
        raise RDXInputError(f"image folder {image_dir} is missing; {how}.")
    _require_pydicom()
    target: dict[str, int] = {}
    for row in _read_csv(labels_csv, ("patientId", "Target")):
        try:
            t = int(row["Target"])
        except ValueError:
            raise RDXInputError(f"{labels_csv}: Target {row['Target']!r} of patient "
                                f"{row['patientId']} is not 0 or 1.") from None
        target[row["patientId"]] = max(t, target.get(row["patientId"], 0))
    if not target:
        raise RDXInputError(f"{labels_csv} lists no patients.")
    pids = sorted(target)
    if classes == "binary":
        labels = np.array([target[p] for p in pids], dtype=np.int64)
        names = list(BINARY_CLASSES)
    else:
        detailed_csv = root / DETAILED_CSV
        if not detailed_csv.is_file():
            raise RDXInputError(f"{detailed_csv} is missing (needed for classes='detailed'); "
                                f"{how}.")
        cls = {r["patientId"]: r["class"] for r in _read_csv(detailed_csv,
                                                             ("patientId", "class"))}
        unknown = sorted({c for c in cls.values() if c not in DETAILED_CLASSES})
        if unknown:
            raise RDXInputError(f"{detailed_csv}: unknown classes {unknown}.")
        missing = [p for p in pids if p not in cls]
        if missing:
            raise RDXInputError(f"{detailed_csv} has no class for {len(missing)} patients "
                                f"(e.g. {missing[:3]}).")
        labels = np.array([DETAILED_CLASSES.index(cls[p]) for p in pids], dtype=np.int64)
        names = list(DETAILED_CLASSES)
    present = set(os.listdir(image_dir))
    absent = [p for p in pids if f"{p}.dcm" not in present]
    if absent:
        raise RDXInputError(f"{len(absent)} of {len(pids)} images listed in {LABELS_CSV} are "
                            f"missing from {image_dir} (e.g. {absent[:3]}); {how}.")
    return RSNAPneumoniaDataset(
        name="rsna_pneumonia", labels=labels, class_names=names,
        ids=[f"{IMAGES_DIR}/{p}.dcm" for p in pids], root=root,
        info={"source": str(root), "split": split, "classes": classes,
              "labels_file": LABELS_CSV})


__all__ = ["BINARY_CLASSES", "DETAILED_CLASSES", "RSNAPneumoniaDataset", "dicom_to_image",
           "rsna_dataset"]
