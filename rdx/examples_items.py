"""Two small examples with items that are not images, made here (offline, seeded, seconds).

* :func:`make_text_example`: short sentences from templates — "the red cat sleeps in the
  garden" — whose colour is the planted attribute. Model A is TF-IDF over every word;
  model B is TF-IDF without the colour words (scikit-learn's ``TfidfVectorizer`` with them
  as stop words), so B cannot see colour: RDX's ``a_over_b`` explanations (close in A, far
  in B) should be sentences of one colour.
* :func:`make_audio_example`: half-second synthesized tones of four pitches and three
  timbres (sine; odd harmonics, square-like; every harmonic, sawtooth-like) with a little
  noise, the planted attribute being the timbre. Both models are MFCC-like features — the
  discrete cosine transform of log band energies of scipy's spectrogram — A over bands up
  to 3.8 kHz, B over bands below 600 Hz only, where the fundamentals are and most
  harmonics are not: ``a_over_b`` should gather tones of one timbre.

Each writes ``A.npy``, ``B.npy``, ``labels.npy`` (the pitch or noun class), a
``metadata.csv`` with the attributes (for ``rdx explain --metadata``), and the items:
``texts.txt`` or a folder ``clips/`` of WAV files. ``scripts/items_example.py`` runs them;
the guide page *Distance matrices and items beyond images* shows the commands.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

ANIMALS = ("cat", "dog", "horse", "owl")
COLOURS = ("red", "green", "blue", "yellow", "purple")
VERBS = ("sleeps", "runs", "waits", "eats", "sings", "hides")
PLACES = ("garden", "kitchen", "forest", "river", "barn")

PITCHES_HZ = (220.0, 277.2, 329.6, 440.0)
TIMBRES = ("sine", "odd_harmonics", "all_harmonics")
AUDIO_RATE = 8000


def _write_table(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def text_example(n: int = 600, seed: int = 0) -> dict:
    """The sentences, both models' features and the attributes (see the module
    docstring): ``{"texts", "A", "B", "animal", "colour", "verb", "place"}``."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    rng = np.random.default_rng(seed)
    parts = {k: rng.integers(0, len(v), n) for k, v in
             (("animal", ANIMALS), ("colour", COLOURS), ("verb", VERBS), ("place", PLACES))}
    texts = [f"the {COLOURS[c]} {ANIMALS[a]} {VERBS[v]} in the {PLACES[p]}"
             for a, c, v, p in zip(parts["animal"], parts["colour"], parts["verb"],
                                   parts["place"])]
    A = TfidfVectorizer().fit_transform(texts).toarray().astype(np.float32)
    # B is blind to the planted attribute: the colour words are not in its vocabulary
    B = TfidfVectorizer(stop_words=list(COLOURS)).fit_transform(texts).toarray() \
        .astype(np.float32)
    return {"texts": texts, "A": A, "B": B, **parts}


def make_text_example(out: str | Path, n: int = 600, seed: int = 0) -> Path:
    """Write the text example into ``out`` (created); returns ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ex = text_example(n, seed)
    np.save(out / "A.npy", ex["A"])
    np.save(out / "B.npy", ex["B"])
    np.save(out / "labels.npy", ex["animal"])
    (out / "texts.txt").write_text("".join(t + "\n" for t in ex["texts"]), encoding="utf-8")
    _write_table(out / "metadata.csv", ["colour", "verb", "place"],
                 [[COLOURS[c], VERBS[v], PLACES[p]]
                  for c, v, p in zip(ex["colour"], ex["verb"], ex["place"])])
    return out


def tone(pitch: float, timbre: str, rng: np.random.Generator, seconds: float = 0.5,
         rate: int = AUDIO_RATE) -> np.ndarray:
    """One tone: harmonics of ``pitch`` below the Nyquist frequency by ``timbre``, a short
    fade in and out, noise at −40 dB; float32 in [−1, 1]."""
    t = np.arange(int(seconds * rate)) / rate
    phase = rng.uniform(0, 2 * np.pi)
    wave = np.zeros_like(t)
    for h in range(1, int(0.5 * rate / pitch)):
        if timbre == "sine" and h > 1 or timbre == "odd_harmonics" and h % 2 == 0:
            continue
        wave += np.sin(2 * np.pi * h * pitch * t + h * phase) / h
    ramp = np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.02)
    wave = wave * ramp / np.abs(wave).max()
    wave += 0.01 * rng.standard_normal(len(t))
    return (0.8 * wave / np.abs(wave).max()).astype(np.float32)


def mfcc_like(wave: np.ndarray, rate: int, low: float, high: float, n_bands: int = 20,
              n_coefficients: int = 12) -> np.ndarray:
    """The DCT of the log energies of ``n_bands`` log-spaced bands from ``low`` to ``high``
    Hz of the time-averaged spectrogram (scipy), its first ``n_coefficients``: MFCC-like."""
    from scipy import fft, signal

    f, _, S = signal.spectrogram(wave.astype(np.float64), fs=rate, nperseg=256,
                                 noverlap=128)
    power = S.mean(axis=1)
    edges = np.geomspace(low, high, n_bands + 1)
    bands = np.array([power[(f >= lo) & (f < hi)].sum() for lo, hi in
                      zip(edges[:-1], edges[1:])])
    return fft.dct(np.log(bands + 1e-10), norm="ortho")[:n_coefficients]


def audio_example(n: int = 120, seed: int = 0) -> dict:
    """The tones, both models' features and the attributes (see the module docstring):
    ``{"waves", "A", "B", "pitch", "timbre"}``."""
    rng = np.random.default_rng(seed)
    pitch = rng.integers(0, len(PITCHES_HZ), n)
    timbre = rng.integers(0, len(TIMBRES), n)
    # a slight detuning per clip (±2 %): no two clips are the same
    waves = [tone(PITCHES_HZ[p] * rng.uniform(0.98, 1.02), TIMBRES[t], rng)
             for p, t in zip(pitch, timbre)]
    A = np.stack([mfcc_like(w, AUDIO_RATE, 100.0, 3800.0) for w in waves]).astype(np.float32)
    # B hears only below 600 Hz: the fundamentals, hardly any harmonic
    B = np.stack([mfcc_like(w, AUDIO_RATE, 100.0, 600.0) for w in waves]).astype(np.float32)
    return {"waves": waves, "A": A, "B": B, "pitch": pitch, "timbre": timbre}


def make_audio_example(out: str | Path, n: int = 120, seed: int = 0) -> Path:
    """Write the audio example into ``out`` (created): ``clips/clip_0000.wav`` ... in the
    rows' order; returns ``out``."""
    from scipy.io import wavfile

    out = Path(out)
    clips = out / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    ex = audio_example(n, seed)
    for i, w in enumerate(ex["waves"]):
        wavfile.write(clips / f"clip_{i:04d}.wav", AUDIO_RATE, (w * 32767).astype(np.int16))
    np.save(out / "A.npy", ex["A"])
    np.save(out / "B.npy", ex["B"])
    np.save(out / "labels.npy", ex["pitch"])
    _write_table(out / "metadata.csv", ["timbre"], [[TIMBRES[t]] for t in ex["timbre"]])
    return out
