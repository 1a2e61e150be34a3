"""Items that are not images: reading texts and audio (rdx.data.items), drawing them
(rdx.viz.items), rdx explain --texts/--audio with its report, and the two examples
(rdx.examples_items) with their known answers."""
from __future__ import annotations

import json

from conftest import rdx_in_process
import numpy as np
import pytest
from scipy.io import wavfile

from rdx.data.items import read_audio_folder, read_texts
from rdx.errors import RDXInputError
from rdx.viz.items import SPECTROGRAM_SIZE, TextCards, card_lines, spectrogram


_rdx = rdx_in_process


# ------------------------------------------------------------------ reading
@pytest.mark.parametrize("name, body", [
    ("t.txt", "a cat\nb, \"dog\"\nc\n"),
    ("t.txt", "a cat\r\nb, \"dog\"\r\nc"),
    ("t.csv", 'id,text\n1,a cat\n2,"b, ""dog"""\n3,c\n'),
    ("t.csv", 'snippet\na cat\n"b, ""dog"""\nc\n'),
    ("t.tsv", 'text\tid\na cat\t1\nb, "dog"\t2\nc\t3\n'),
    ("t.json", json.dumps(["a cat", 'b, "dog"', "c"])),
    ("t.json", json.dumps([{"text": "a cat"}, {"text": 'b, "dog"', "x": 1}, {"text": "c"}])),
    ("t.jsonl", '"a cat"\n{"text": "b, \\"dog\\""}\n\n"c"\n'),
])
def test_texts_in_every_format(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(body, encoding="utf-8")
    assert read_texts(p, 3) == ["a cat", 'b, "dog"', "c"]


@pytest.mark.parametrize("name, body, n, needle", [
    ("t.txt", "a\nb\n", 3, "holds 2 lines but A and B have 3 rows"),
    ("t.txt", "a\n\nb\n", 2, "holds 3 lines"),          # an empty line is a snippet
    ("t.csv", "id,name\n1,a\n", 1, "none is called 'text'"),
    ("t.csv", "id,text\n1,a,b\n", 1, "line 2 has 3 fields"),
    ("t.json", '{"text": "a"}', 1, "holds a JSON dict"),
    ("t.json", "[1]", 1, "item 0 is '1', not a string"),
    ("t.json", "[", 1, "not valid JSON"),
    ("t.docx", "a", 1, "unknown format .docx"),
])
def test_texts_that_do_not_fit_are_refused(tmp_path, name, body, n, needle):
    p = tmp_path / name
    p.write_text(body, encoding="utf-8")
    with pytest.raises(RDXInputError, match="--texts") as info:
        read_texts(p, n)
    assert needle in str(info.value)


def test_audio_folder_in_name_order_any_sample_format(tmp_path):
    rate = 8000
    t = np.arange(800) / rate
    x = 0.5 * np.sin(2 * np.pi * 440 * t)
    wavfile.write(tmp_path / "b.wav", rate, (x * 32767).astype(np.int16))
    wavfile.write(tmp_path / "a.wav", rate, ((x + 1) * 127.5).astype(np.uint8))
    wavfile.write(tmp_path / "c.wav", 16000, np.stack([x, x], 1).astype(np.float32))
    (tmp_path / "notes.txt").write_text("not a clip")
    clips = read_audio_folder(tmp_path, 3)
    assert clips.names == ["a.wav", "b.wav", "c.wav"] and clips.rates == [8000, 8000, 16000]
    for w in clips.waves:
        assert w.ndim == 1 and w.dtype == np.float32
        np.testing.assert_allclose(w, x, atol=0.02)   # 8-bit: steps of 1/128
    with pytest.raises(RDXInputError, match="holds 3 .wav files but A and B have 4 rows"):
        read_audio_folder(tmp_path, 4)
    with pytest.raises(RDXInputError, match="is not a folder"):
        read_audio_folder(tmp_path / "a.wav", 1)
    (tmp_path / "d.wav").write_bytes(b"RIFF junk")
    with pytest.raises(RDXInputError, match="d.wav cannot be read as a WAV file"):
        read_audio_folder(tmp_path, 4)


# ------------------------------------------------------------------ drawing
def test_card_lines_wrap_within_the_width_and_cut_with_an_ellipsis():
    lines = card_lines("one two three four five " * 20, 60, len, lines=4)
    assert len(lines) == 4 and all(len(line) <= 60 for line in lines)
    assert lines[-1].endswith("…") and lines[0].startswith("one two three")
    assert card_lines("x" * 25, 10, len) == ["x" * 10, "x" * 10, "x" * 5]
    assert card_lines("  short   text ", 60, len) == ["short text"]


def test_text_cards_draw_the_text_on_demand():
    cards = TextCards(["", "the red cat sleeps in the garden"])
    blank, written = cards[0], cards[1]
    assert blank.shape == written.shape == (TextCards.grid_cell, TextCards.grid_cell, 3)
    assert (written < 128).sum() > (blank < 128).sum() + 100    # the letters are dark


def test_spectrogram_puts_a_tone_at_its_frequency_low_at_the_bottom():
    rate = 8000
    t = np.arange(4000) / rate
    for hz in (500.0, 3000.0):
        img = spectrogram(np.sin(2 * np.pi * hz * t), rate)
        assert img.shape == (SPECTROGRAM_SIZE, SPECTROGRAM_SIZE)
        row = int(np.argmax(img.mean(axis=1)))
        expected = (1 - hz / (rate / 2)) * SPECTROGRAM_SIZE
        assert abs(row - expected) <= 3, (hz, row, expected)


# ------------------------------------------------------------------ the examples, end to end
def _majority_share(values: np.ndarray) -> float:
    return float(np.bincount(values).max() / len(values))


def test_text_example_from_the_command_line(tmp_path):
    from rdx.examples_items import COLOURS, make_text_example

    ex = make_text_example(tmp_path / "tx")
    texts = (ex / "texts.txt").read_text(encoding="utf-8").splitlines()
    colour = np.array([COLOURS.index(t.split()[1]) for t in texts])
    rc, out, err = _rdx(["explain", ex / "A.npy", ex / "B.npy", "--texts", ex / "texts.txt",
                         "--labels", ex / "labels.npy", "--metadata", ex / "metadata.csv",
                         "--out", ex / "result", "--report", "--quiet"])
    assert rc == 0, err
    doc = json.loads((ex / "result" / "rdx" / "explanations.json").read_text())
    a_over_b = doc["directions"]["a_over_b"]["explanations"]
    assert len(a_over_b) == 3
    for e in a_over_b:
        # the planted attribute B cannot see: each explanation is one colour
        assert _majority_share(colour[e["members"]]) == 1.0
        assert "colour=" in e["description"].split(";")[0]
        assert e["grid_texts"] == [texts[i] for i in e["images"]]
    grids = ex / "result" / "rdx" / "grids"
    assert (grids / "a_over_b_1.png").is_file() and (grids / "b_over_a_summary.png").is_file()
    page = (ex / "result" / "report.html").read_text(encoding="utf-8")
    assert page.count('<ol class="small snippets">') == sum(
        len(d["explanations"]) for d in doc["directions"].values())
    assert f"<li>{a_over_b[0]['grid_texts'][0]}</li>" in page


def test_audio_example_from_the_command_line(tmp_path):
    from rdx.examples_items import make_audio_example

    ex = make_audio_example(tmp_path / "au")
    timbre = np.array([["sine", "odd_harmonics", "all_harmonics"].index(line)
                       for line in (ex / "metadata.csv").read_text().splitlines()[1:]])
    pitch = np.load(ex / "labels.npy")
    rc, _, err = _rdx(["explain", ex / "A.npy", ex / "B.npy", "--audio", ex / "clips",
                       "--labels", ex / "labels.npy", "--out", ex / "result", "--report",
                       "--quiet"])
    assert rc == 0, err
    doc = json.loads((ex / "result" / "rdx" / "explanations.json").read_text())
    # A hears the harmonics, B does not: a_over_b gathers timbres (measured: 1.0, 0.76,
    # 1.0), b_over_a pitches (0.90, 0.91, 1.0)
    for e in doc["directions"]["a_over_b"]["explanations"]:
        assert _majority_share(timbre[e["members"]]) >= 0.7
    for e in doc["directions"]["b_over_a"]["explanations"]:
        assert _majority_share(pitch[e["members"]]) >= 0.85
    names = sorted(p.name for p in (ex / "clips").iterdir())
    e = doc["directions"]["a_over_b"]["explanations"][0]
    assert e["grid_audio"] == [names[i] for i in e["images"]]
    players = (ex / "result" / "rdx" / "grids" / "a_over_b_1.html").read_text()
    assert players.count("<audio controls") == len(e["images"])
    assert players.count('src="data:audio/wav;base64,') == len(e["images"])
    assert players.count('src="data:image/png;base64,') == len(e["images"])
    report = (ex / "result" / "report.html").read_text(encoding="utf-8")
    assert 'href="rdx/grids/a_over_b_1.html"' in report


@pytest.mark.parametrize("extra, needle", [
    (["--texts", "T", "--images", "I"], "--images and --texts both say what the items are"),
    (["--texts", "SHORT"], "--texts"),
    (["--audio", "T"], "--audio"),
])
def test_cli_refuses_items_that_do_not_fit(tmp_path, extra, needle):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "A.npy", rng.normal(size=(20, 4)))
    np.save(tmp_path / "B.npy", rng.normal(size=(20, 3)))
    np.save(tmp_path / "I.npy", rng.random((20, 8, 8)))
    (tmp_path / "T.txt").write_text("".join(f"snippet {i}\n" for i in range(20)))
    (tmp_path / "SHORT.txt").write_text("one\ntwo\n")
    files = {"T": tmp_path / "T.txt", "SHORT": tmp_path / "SHORT.txt", "I": tmp_path / "I.npy"}
    rc, _, err = _rdx(["explain", tmp_path / "A.npy", tmp_path / "B.npy", "--out",
                       tmp_path / "o", "--quiet", *[files.get(a, a) for a in extra]])
    assert rc == 2 and needle in err and "Traceback" not in err
    assert not (tmp_path / "o" / "explanations.json").exists()



# ------------------------------------------------------------------ built-in attributes
def test_item_statistics_by_hand():
    from rdx.data.items import AudioClips, item_statistics

    s = item_statistics(["a bb  ccc", "", "one"])
    assert s["characters"].tolist() == [9, 0, 3] and s["words"].tolist() == [3, 0, 1]
    rate = 8000
    t = np.arange(rate // 2) / rate
    sine = 0.5 * np.sin(2 * np.pi * 1000 * t)          # 1000 Hz, RMS 0.5/√2
    clips = AudioClips(["s.wav", "q.wav"], [sine, np.sign(sine) * 0.5], [rate, rate])
    a = item_statistics(clips)
    assert a["duration_s"].tolist() == [0.5, 0.5]
    assert a["loudness_db"][0] == pytest.approx(20 * np.log10(0.5 / np.sqrt(2)), abs=1e-6)
    assert a["spectral_centroid_hz"][0] == pytest.approx(1000.0, rel=1e-3)
    # a square wave's odd harmonics raise its centroid above its fundamental (1293 Hz)
    assert a["spectral_centroid_hz"][1] > 1200


def test_audio_explanations_are_described_by_the_built_in_attributes(tmp_path):
    """Without any table, the sine explanation of the audio example is named by its low
    spectral centroid (measured: 0.57x the rest's mean)."""
    from rdx.examples_items import make_audio_example

    ex = make_audio_example(tmp_path / "au")
    timbre = np.array([line for line in (ex / "metadata.csv").read_text().splitlines()[1:]])
    rc, _, err = _rdx(["explain", ex / "A.npy", ex / "B.npy", "--audio", ex / "clips",
                       "--out", ex / "result", "--quiet"])
    assert rc == 0, err
    doc = json.loads((ex / "result" / "explanations.json").read_text())
    sine = [e for e in doc["directions"]["a_over_b"]["explanations"]
            if (timbre[e["members"]] == "sine").all()]
    assert len(sine) == 1
    found = {t["attribute"]: t for t in sine[0]["enrichment"]["tests"] if t["significant"]}
    assert found["spectral_centroid_hz"]["direction"] == "lower"
    assert found["spectral_centroid_hz"]["source"] == "item"
    assert sine[0]["description"].startswith("spectral_centroid_hz 0.")
    # every clip lasts 0.5 s: nothing to test
    assert doc["info"]["enrichment"]["skipped"]["item duration_s"] == "one value only"
