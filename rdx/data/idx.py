"""Reader for the IDX files of (Fashion-)MNIST (plain or gzip-compressed)."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from ..errors import RDXInputError

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Array stored in an IDX file (magic: two zero bytes, a type code, the number of dims)."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rb") as fh:
            data = fh.read()
    except (OSError, EOFError) as exc:
        raise RDXInputError(f"could not read IDX file {str(p)!r}: {exc}") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
        raise RDXInputError(f"{str(p)!r} is not an IDX file (bad magic number).")
    ndim = data[3]
    header = 4 + 4 * ndim
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_DTYPES[data[2]])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(data) - header != expected:
        raise RDXInputError(f"{str(p)!r} is truncated or corrupt: {len(data) - header} data "
                            f"bytes for shape {shape} (expected {expected}).")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray) -> Path:
    """Write ``array`` (uint8) as an IDX file (gzip if the name ends in .gz). For fixtures."""
    arr = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "wb") as fh:
        fh.write(header + arr.tobytes())
    return p
