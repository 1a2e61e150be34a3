"""The RSNA Pneumonia loader on a tiny fake copy of the Kaggle layout."""
from __future__ import annotations

import numpy as np
import pytest

from rdx.errors import RDXInputError

pydicom = pytest.importorskip("pydicom")


def write_dicom(path, pixels: np.ndarray, photometric: str = "MONOCHROME2") -> None:
    from pydicom.dataset import FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.Rows, ds.Columns = pixels.shape
    bits = pixels.dtype.itemsize * 8
    ds.BitsAllocated, ds.BitsStored, ds.HighBit = bits, bits, bits - 1
    ds.SamplesPerPixel, ds.PixelRepresentation = 1, 0
    ds.PhotometricInterpretation = photometric
    ds.PixelData = pixels.tobytes()
    ds.save_as(path, enforce_file_format=True)


@pytest.fixture()
def kaggle(tmp_path):
    root = tmp_path / "rsna_pneumonia"
    (root / "stage_2_train_images").mkdir(parents=True)
    rows = ["patientId,x,y,width,height,Target",
            "p2,,,,,0", "p1,10,10,5,5,1", "p1,20,20,5,5,1", "p3,,,,,0"]
    (root / "stage_2_train_labels.csv").write_text("\n".join(rows) + "\n")
    (root / "stage_2_detailed_class_info.csv").write_text(
        "patientId,class\np1,Lung Opacity\np1,Lung Opacity\np2,Normal\n"
        "p3,No Lung Opacity / Not Normal\n")
    rng = np.random.default_rng(0)
    for pid in ("p1", "p2"):
        write_dicom(root / "stage_2_train_images" / f"{pid}.dcm",
                    rng.integers(0, 256, (16, 12), dtype=np.uint8))
    write_dicom(root / "stage_2_train_images" / "p3.dcm",
                np.arange(16 * 12, dtype=np.uint16).reshape(16, 12) * 100, "MONOCHROME1")
    return root


def test_rsna_labels_ids_and_images(kaggle):
    from rdx.data.rsna import rsna_dataset

    ds = rsna_dataset(data_root=kaggle.parent)
    assert ds.ids == [f"stage_2_train_images/{p}.dcm" for p in ("p1", "p2", "p3")]
    assert ds.labels.tolist() == [1, 0, 0]            # any box → pneumonia
    assert ds.class_names == ["no pneumonia", "pneumonia"]
    img = ds.load_image(0)
    assert img.mode == "RGB" and img.size == (12, 16)
    grey = np.asarray(ds.load_image(2))[..., 0]
    # 16-bit MONOCHROME1: scaled to 0..255 and inverted (first pixel brightest)
    assert grey[0, 0] == 255 and grey[-1, -1] == 0
    sub = ds.subset([2, 0])
    assert sub.labels.tolist() == [0, 1] and np.asarray(sub.load_image(1)).shape == (16, 12, 3)
    assert sub.image_array([0]).shape == (1, 224, 224, 3)
    detailed = rsna_dataset(root=kaggle, classes="detailed")
    assert detailed.labels.tolist() == [2, 0, 1]


def test_rsna_checks_up_front(kaggle, monkeypatch):
    import builtins

    from rdx.data.rsna import rsna_dataset

    with pytest.raises(RDXInputError, match="does not exist.*kaggle competitions download"):
        rsna_dataset(data_root=kaggle.parent / "nowhere")
    with pytest.raises(RDXInputError, match="train"):
        rsna_dataset(root=kaggle, split="test")
    (kaggle / "stage_2_train_images" / "p2.dcm").unlink()
    with pytest.raises(RDXInputError, match="1 of 3 images"):
        rsna_dataset(root=kaggle)
    real_import = builtins.__import__

    def no_pydicom(name, *a, **k):
        if name == "pydicom":
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pydicom)
    with pytest.raises(RDXInputError, match="pip install pydicom"):
        rsna_dataset(root=kaggle)
