"""Items that are not images: text snippets and audio clips, read and checked up front.

``rdx explain --texts FILE`` and ``--audio FOLDER`` give the items that rows of A and B
describe, in the rows' order, so that grids show them (:mod:`rdx.viz.items` draws them).

* **texts**: a ``.txt`` file of one snippet per line; a ``.csv``/``.tsv`` table with a
  header and a ``text`` column (or a single column); a ``.json`` list of strings or of
  objects with a ``"text"`` key; ``.jsonl`` with one string or object per line.
* **audio**: a folder of ``.wav`` files, the rows in the files' name order (PCM 8/16/32-bit
  or float, any rate; stereo is averaged to mono), read with :func:`scipy.io.wavfile.read`.

Every reader refuses, with the flag and how to fix it, anything that does not give exactly
one item per row.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
import numpy as np

from ..errors import RDXInputError

TEXT_SUFFIXES = (".txt", ".csv", ".tsv", ".json", ".jsonl")
#: The column / key read from tables and JSON objects.
TEXT_KEY = "text"


def _count_error(flag: str, path: Path, got: int, n: int, what: str) -> RDXInputError:
    return RDXInputError(
        f"{flag} {str(path)!r} holds {got} {what} but A and B have {n} rows; give exactly "
        f"one item per row of A/B, in the rows' order.")


def read_texts(path: str | Path, n: int, *, flag: str = "--texts") -> list[str]:
    """The ``n`` text snippets of ``path`` (see the module docstring for the formats).

    Raises
    ------
    RDXInputError
        A missing or unreadable file, another suffix, a table without a ``text`` column,
        JSON of another shape, or a count other than ``n``.
    """
    p = Path(path)
    if not p.is_file():
        raise RDXInputError(f"{flag} {str(path)!r} does not exist or is not a file.")
    suffix = p.suffix.lower()
    if suffix not in TEXT_SUFFIXES:
        raise RDXInputError(f"{flag} {str(path)!r}: unknown format {suffix or '(none)'}; "
                            f"give one of {', '.join(TEXT_SUFFIXES)} (one snippet per line, "
                            f"a table with a {TEXT_KEY!r} column, or a JSON list).")
    try:
        raw = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise RDXInputError(f"{flag} {str(path)!r} cannot be read as UTF-8 text "
                            f"({exc}).") from None
    if suffix == ".txt":
        # one snippet per line; a final newline ends the last line, it adds no snippet
        texts = raw.split("\n")
        if texts and texts[-1] == "":
            texts.pop()
        texts = [t.rstrip("\r") for t in texts]
        what = "lines"
    elif suffix in (".csv", ".tsv"):
        texts, what = _table_texts(raw, "\t" if suffix == ".tsv" else ",", flag, p), "rows"
    else:
        texts, what = _json_texts(raw, suffix == ".jsonl", flag, p), "items"
    if len(texts) != n:
        raise _count_error(flag, p, len(texts), n, what)
    return texts


def _table_texts(raw: str, delimiter: str, flag: str, p: Path) -> list[str]:
    try:
        rows = list(csv.reader(raw.splitlines(), delimiter=delimiter))
    except csv.Error as exc:
        raise RDXInputError(f"{flag} {str(p)!r} cannot be read as a table ({exc}).") from None
    if not rows:
        raise RDXInputError(f"{flag} {str(p)!r} is empty; give a header row with a "
                            f"{TEXT_KEY!r} column and one row per item.")
    header = [h.strip() for h in rows[0]]
    if TEXT_KEY in header:
        col = header.index(TEXT_KEY)
    elif len(header) == 1:
        col = 0
    else:
        raise RDXInputError(f"{flag} {str(p)!r} has columns {header} but none is called "
                            f"{TEXT_KEY!r}; name the column of the snippets {TEXT_KEY!r}.")
    out = []
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise RDXInputError(f"{flag} {str(p)!r} line {i} has {len(row)} fields but the "
                                f"header has {len(header)}; quote snippets that hold the "
                                f"delimiter.")
        out.append(row[col])
    return out


def _json_texts(raw: str, lines: bool, flag: str, p: Path) -> list[str]:
    try:
        items = [json.loads(line) for line in raw.splitlines() if line.strip()] if lines \
            else json.loads(raw)
    except ValueError as exc:
        raise RDXInputError(f"{flag} {str(p)!r} is not valid JSON ({exc}).") from None
    if not isinstance(items, list):
        raise RDXInputError(f"{flag} {str(p)!r} holds a JSON {type(items).__name__}; give a "
                            f"list of strings or of objects with a {TEXT_KEY!r} key.")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, dict) and isinstance(item.get(TEXT_KEY), str):
            item = item[TEXT_KEY]
        if not isinstance(item, str):
            raise RDXInputError(f"{flag} {str(p)!r}: item {i} is {str(item)[:60]!r}, not a "
                                f"string or an object with a string {TEXT_KEY!r}.")
        out.append(item)
    return out


@dataclass
class AudioClips:
    """Audio clips, one per row of A/B: mono float waveforms in [−1, 1] and their rates.

    Attributes
    ----------
    names : file name of each clip
    waves : list of 1-D float32 arrays
    rates : sampling rate of each clip (Hz)
    """

    names: list[str]
    waves: list[np.ndarray]
    rates: list[int]

    def __len__(self) -> int:
        return len(self.waves)


def _as_float(data: np.ndarray) -> np.ndarray:
    """A wav's samples as float32 in [−1, 1] (PCM scaled by its full range), mono."""
    if data.dtype.kind == "f":
        x = data.astype(np.float32)
    elif data.dtype == np.uint8:        # 8-bit PCM is unsigned, centred on 128
        x = (data.astype(np.float32) - 128.0) / 128.0
    else:
        x = data.astype(np.float32) / float(np.iinfo(data.dtype).max)
    return x.mean(axis=1) if x.ndim == 2 else x


def read_audio_folder(folder: str | Path, n: int, *, flag: str = "--audio") -> AudioClips:
    """The ``n`` ``.wav`` files of ``folder``, in name order.

    Raises
    ------
    RDXInputError
        A missing folder, a count other than ``n``, a file scipy cannot read, an empty or
        non-finite clip.
    """
    from scipy.io import wavfile

    d = Path(folder)
    if not d.is_dir():
        raise RDXInputError(f"{flag} {str(folder)!r} is not a folder; give a folder of .wav "
                            "files, one per row of A/B (rows in the files' name order).")
    files = sorted(f for f in d.iterdir() if f.is_file() and f.suffix.lower() == ".wav")
    if len(files) != n:
        raise _count_error(flag, d, len(files), n, ".wav files")
    names, waves, rates = [], [], []
    for f in files:
        try:
            rate, data = wavfile.read(f)
        except (OSError, ValueError) as exc:
            raise RDXInputError(f"{flag}: {f.name} cannot be read as a WAV file ({exc}); "
                                "give PCM or float .wav files.") from None
        x = _as_float(np.asarray(data))
        if x.size == 0 or not np.isfinite(x).all():
            raise RDXInputError(f"{flag}: {f.name} is empty or holds NaN/inf samples.")
        names.append(f.name)
        waves.append(x)
        rates.append(int(rate))
    return AudioClips(names, waves, rates)



def item_statistics(items: list[str] | AudioClips) -> dict[str, np.ndarray]:
    """Built-in attributes of items that are not images, one value per item (what
    :mod:`rdx.evaluation.image_stats` is for images), for the enrichment of explanations.

    * texts: ``characters`` and ``words`` (whitespace-separated tokens);
    * audio: ``duration_s``, ``loudness_db`` (RMS level, dB full scale) and
      ``spectral_centroid_hz`` (the power-weighted mean frequency of the whole clip: low
      for pure tones, higher with more or stronger harmonics, noise or hiss).
    """
    if isinstance(items, AudioClips):
        dur, loud, centroid = [], [], []
        for w, r in zip(items.waves, items.rates):
            x = np.asarray(w, dtype=np.float64)
            dur.append(len(x) / r)
            loud.append(20.0 * np.log10(max(float(np.sqrt(np.mean(x * x))), 1e-10)))
            power = np.abs(np.fft.rfft(x)) ** 2
            freqs = np.fft.rfftfreq(len(x), 1.0 / r)
            centroid.append(float((freqs * power).sum() / max(float(power.sum()), 1e-300)))
        return {"duration_s": np.asarray(dur), "loudness_db": np.asarray(loud),
                "spectral_centroid_hz": np.asarray(centroid)}
    texts = [str(t) for t in items]
    return {"characters": np.asarray([len(t) for t in texts], dtype=np.float64),
            "words": np.asarray([len(t.split()) for t in texts], dtype=np.float64)}
