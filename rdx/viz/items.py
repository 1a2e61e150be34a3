"""Grids of items that are not images: text cards and audio spectrograms.

Each kind is a lazy, indexable stand-in for an image array (:class:`TextCards`,
:class:`Spectrograms`): item ``i`` is drawn when a grid asks for it, never all n at once,
so :func:`rdx.viz.grids.save_result_grids` draws their grids into the same PNG files as
images' (and the report shows them where it shows grids). :func:`save_item_grids` does
that and records what the grids show in each explanation (``extra["grid_texts"]`` or
``extra["grid_audio"]``); for audio it also writes, next to each grid PNG, an HTML page
with a player per clip (``<audio>`` with the WAV inlined as a ``data:`` URI) and its
spectrogram thumbnail.
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ..data.items import AudioClips
from ..io import atomic_write
from ..results.store import grid_directions, grid_path
from ..results.types import MethodResult
from .grids import save_result_grids

#: Pixel size of a text card (and of its grid cell).
CARD_SIZE = 192
#: Lines of text a card shows (the rest cut with an ellipsis).
CARD_LINES = 13
#: Pixel size of a spectrogram thumbnail (and of its grid cell).
SPECTROGRAM_SIZE = 128


def card_lines(text: str, width: float, measure: Any, lines: int = CARD_LINES) -> list[str]:
    """``text`` wrapped into lines of at most ``width`` pixels (``measure(line)``: a line's
    width; a longer word is cut), at most ``lines`` lines (an ellipsis ends a cut one)."""
    out: list[str] = []
    for word in " ".join(str(text).split()).split(" "):
        while measure(word) > width:      # a word wider than the card: cut it
            k = max(1, len(word) - 1)
            while k > 1 and measure(word[:k]) > width:
                k -= 1
            out.append(word[:k])
            word = word[k:]
        if out and measure(out[-1] + " " + word) <= width:
            out[-1] += " " + word
        else:
            out.append(word)
    if len(out) > lines:
        out = out[:lines]
        while out[-1] and measure(out[-1] + "…") > width:
            out[-1] = out[-1][:-1]
        out[-1] += "…"
    return out or [""]


class TextCards:
    """Text snippets as card images: ``cards[i]`` is a ``CARD_SIZE``² RGB array of snippet
    ``i`` (black on white, wrapped), drawn on demand.

    ``grid_cell`` tells the grid drawer the cell size that keeps the text legible.
    """

    grid_cell = CARD_SIZE

    def __init__(self, texts: Sequence[str]):
        self.texts = list(texts)
        self._font = ImageFont.load_default()

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> np.ndarray:
        img = Image.new("RGB", (CARD_SIZE, CARD_SIZE), (255, 255, 255))
        draw = ImageDraw.Draw(img)
        draw.rectangle((0, 0, CARD_SIZE - 1, CARD_SIZE - 1), outline=(170, 170, 170))
        lines = card_lines(self.texts[int(i)], CARD_SIZE - 12,
                           lambda t: draw.textlength(t, font=self._font))
        for k, line in enumerate(lines):
            draw.text((6, 5 + 14 * k), line, fill=(0, 0, 0), font=self._font)
        return np.asarray(img)


def spectrogram(wave: np.ndarray, rate: int, size: int = SPECTROGRAM_SIZE) -> np.ndarray:
    """A ``size``² log-power spectrogram of ``wave`` (scipy's, Hann windows of about 23 ms),
    low frequencies at the bottom, 80 dB of range: an image for grids and thumbnails."""
    from scipy import signal

    nper = int(min(len(wave), max(16, round(0.023 * rate))))
    _, _, S = signal.spectrogram(np.asarray(wave, dtype=np.float64), fs=rate,
                                 nperseg=nper, noverlap=nper // 2)
    db = 10.0 * np.log10(S + 1e-12)
    db = np.clip(db, db.max() - 80.0, None)
    img = Image.fromarray(((db - db.min()) / max(float(np.ptp(db)), 1e-12) * 255)
                          .astype(np.uint8)[::-1])
    return np.asarray(img.resize((size, size), Image.BILINEAR))


class Spectrograms:
    """Audio clips as spectrogram images: ``spectrograms[i]`` is clip ``i``'s
    :func:`spectrogram`, drawn on demand."""

    grid_cell = SPECTROGRAM_SIZE

    def __init__(self, clips: AudioClips):
        self.clips = clips

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, i: int) -> np.ndarray:
        return spectrogram(self.clips.waves[int(i)], self.clips.rates[int(i)])


def as_grid_items(items: Any) -> Any:
    """The drawable stand-in of ``items``: a list of texts or :class:`AudioClips`."""
    return Spectrograms(items) if isinstance(items, AudioClips) else TextCards(items)


def wav_data_uri(wave: np.ndarray, rate: int) -> str:
    """A 16-bit PCM WAV of ``wave`` (floats in [−1, 1]) as a ``data:audio/wav`` URI."""
    from scipy.io import wavfile

    buf = io.BytesIO()
    wavfile.write(buf, int(rate), (np.clip(wave, -1, 1) * 32767).astype(np.int16))
    return "data:audio/wav;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def png_data_uri(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def audio_page(clips: AudioClips, indices: Sequence[int], title: str) -> str:
    """A self-contained HTML page: per clip its name, spectrogram and a player."""
    cells = []
    for i in indices:
        i = int(i)
        cells.append(
            f'<figure><img src="{png_data_uri(spectrogram(clips.waves[i], clips.rates[i]))}" '
            f'alt="spectrogram of {html.escape(clips.names[i])}" width="{SPECTROGRAM_SIZE}">'
            f'<figcaption>{html.escape(clips.names[i])} (item {i})</figcaption>'
            f'<audio controls preload="none" '
            f'src="{wav_data_uri(clips.waves[i], clips.rates[i])}"></audio></figure>')
    return ("<!doctype html><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif}figure{display:inline-block;margin:8px;"
            "text-align:center}audio{width:" + str(SPECTROGRAM_SIZE + 60) + "px}</style>"
            f"<h1>{html.escape(title)}</h1>" + "".join(cells))


def audio_page_path(method_dir: str | Path, direction: str, i: int) -> Path:
    """The players' page of explanation ``i`` of a direction, next to its grid PNG."""
    return grid_path(method_dir, direction, i).with_suffix(".html")


def save_item_grids(result: MethodResult, items: Any, method_dir: Path, *,
                    class_names: Any = None) -> list[Path]:
    """Grids of text or audio items, as :func:`rdx.viz.grids.save_result_grids` draws
    images', with each grid's items recorded in its explanation (``extra["grid_texts"]``:
    the snippets; ``extra["grid_audio"]``: the file names) and, for audio, a players' page
    per grid (:func:`audio_page_path`). Returns the files written."""
    audio = isinstance(items, AudioClips)
    for direction in grid_directions(result):
        for e in result.directions[direction].explanations:
            e.extra["grid_audio" if audio else "grid_texts"] = [
                (items.names if audio else items)[int(i)] for i in e.images]
    paths = save_result_grids(result, as_grid_items(items), method_dir,
                              class_names=class_names)
    if audio:
        for direction in grid_directions(result):
            for k, e in enumerate(result.directions[direction].explanations, start=1):
                p = audio_page_path(method_dir, direction, k)
                page = audio_page(items, e.images, f"{direction} #{k}")
                atomic_write(p, lambda fh, page=page: fh.write(page.encode("utf-8")))
                paths.append(p)
    return paths
