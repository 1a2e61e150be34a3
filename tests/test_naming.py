"""One name per thing: the JSON keys, the summary columns, the report, the figures and the
console all spell the dissimilarities and scores from the one table in
``rdx.results.types`` (``DISSIMILARITY_LABELS``, ``SCORE_LABELS``); the command line uses one
spelling per flag (old spellings accepted but hidden)."""
from __future__ import annotations

import argparse
import html
import importlib
import json
import re

import numpy as np
import pytest
from conftest import planted_pairs

from rdx.cli import COMMANDS, main
from rdx.evaluation.bsr import DISSIMILARITIES
from rdx.evaluation.summary import ROW_COLUMNS
from rdx.report.scores import GLOSSARY_KEYS, glossary_items
from rdx.results.types import DISSIMILARITY_LABELS, SCORE_LABELS
from rdx.viz.grids import explanation_title
from rdx.viz import score_figures
from rdx.viz.score_figures import bsr_boxplots, explanation_stats_table

#: Names the project used before the table (figures said SILB/LSED, the report MNED/LS).
RETIRED = ("SILB", "LSED")


@pytest.fixture(scope="module")
def explained(tmp_path_factory):
    d = tmp_path_factory.mktemp("naming")
    A, B, lab = planted_pairs(n_per=10, d=6)
    for name, arr in (("A", A), ("B", B), ("y", lab)):
        np.save(d / f"{name}.npy", arr)
    return d


def test_the_table_names_the_json_keys_and_summary_columns():
    assert tuple(DISSIMILARITY_LABELS) == DISSIMILARITIES            # the JSON's keys
    for key in ("bsr", "tsd", "eq"):
        assert key in SCORE_LABELS and key in ROW_COLUMNS
    shorts = [lab.short for lab in [*DISSIMILARITY_LABELS.values(), *SCORE_LABELS.values()]]
    assert len(shorts) == len(set(shorts))                             # no name used twice
    assert not set(shorts) & set(RETIRED)
    for lab in [*DISSIMILARITY_LABELS.values(), *SCORE_LABELS.values()]:
        assert lab.short and lab.name and lab.meaning.strip()


def test_results_report_and_console_use_the_table(explained, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["explain", str(explained / "A.npy"), str(explained / "B.npy"), "--labels",
                 str(explained / "y.npy"), "--out", str(out), "--n-explanations", "2",
                 "--report"]) == 0
    console = capsys.readouterr().out
    doc = json.loads((out / "rdx" / "explanations.json").read_text())
    # JSON: one score block per dissimilarity key, each with the table's score keys
    assert set(doc["scores"]) >= set(DISSIMILARITY_LABELS)
    for key in DISSIMILARITY_LABELS:
        for d in ("a_over_b", "b_over_a"):
            assert {"bsr", "tsd", "eq"} <= set(doc["scores"][key][d])
    text = html.unescape((out / "report.html").read_text())
    # report: the score table's columns and the glossary, spelled from the table
    header = re.search(r'<table class="scores"><thead><tr>(.*?)</tr>', text).group(1)
    for lab in DISSIMILARITY_LABELS.values():
        assert f"<th>{SCORE_LABELS['bsr'].short} ({lab.short})</th>" in header
        assert f"{SCORE_LABELS['bsr'].short} {lab.short} " in text     # per-direction line
        assert f"{SCORE_LABELS['bsr'].short} ({lab.short}) " in console
    glossary = text.split('id="glossary"', 1)[1].split("</table>", 1)[0]
    for short, name, meaning in glossary_items():
        assert f"<strong>{short}</strong>" in glossary and name in glossary and meaning in glossary
    assert len(glossary_items()) == len(GLOSSARY_KEYS) + len(DISSIMILARITY_LABELS)
    assert SCORE_LABELS["chance"].short in console
    for old in RETIRED:
        assert old not in text and old not in console


def test_figures_use_the_table(tmp_path, monkeypatch):
    figures = {}

    def capture(fig, path, **kw):
        figures[path.name] = fig
        return path

    monkeypatch.setattr(score_figures, "save_figure", capture)
    rows = []
    for dis in DISSIMILARITIES:
        for d, b in (("a_over_b", 0.8), ("b_over_a", 0.6)):
            rows.append({"experiment": "e", "comparison": "c", "method": "rdx",
                         "method_type": "rdx", "direction": d, "dissimilarity": dis,
                         "bsr": b, "tsd": 0.1, "eq": 0.0, "chance_bsr_mean": 0.5,
                         "chance_bsr_lo": 0.4, "chance_bsr_hi": 0.6, "n_explanations": 2})
    summaries = [{"experiment": "e", "comparison": "c", "rows": rows}]
    bsr_boxplots(summaries, tmp_path)
    bsr = SCORE_LABELS["bsr"]
    for key, lab in DISSIMILARITY_LABELS.items():
        fig = figures[f"{bsr.short}_{lab.short}_boxplot.png"]
        (ax,) = fig.axes
        assert ax.get_ylabel() == f"{bsr.short} ({lab.short})"
        assert lab.name in ax.get_title() and bsr.name.capitalize() in ax.get_title()
    explanation_stats_table(summaries, tmp_path / "stats.png")
    (ax,) = figures["stats.png"].axes
    cells = {c.get_text().get_text() for c in ax.tables[0].get_celld().values()}
    for key in ("tsd", "eq"):
        assert any(t.endswith(SCORE_LABELS[key].short) for t in cells)
    assert {lab.short for lab in DISSIMILARITY_LABELS.values()} <= cells
    # grid titles (summary strips, report captions): the table's abbreviations
    title = explanation_title(1, {"members": [1, 2, 3], "mean_affinity": 2.5})
    assert title == (f"#1  {SCORE_LABELS['n_members'].short}=3  "
                     f"{SCORE_LABELS['mean_affinity'].short}=2.50")


def _parser(name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    importlib.import_module(COMMANDS[name].module).add_arguments(p)
    return p


def _visible(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions if a.help != argparse.SUPPRESS for s in a.option_strings}


def _accepted(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions for s in a.option_strings}


def test_one_spelling_per_flag_old_ones_hidden():
    # the output folder is --out everywhere it names one folder or file
    for name in ("explain", "similarity", "explore", "matrix", "probe", "consistency"):
        assert "--out" in _visible(_parser(name)), name
    # measures: --measure, repeatable
    for name in ("similarity", "matrix", "consistency"):
        assert "--measure" in _visible(_parser(name)), name
    assert "--measures" in _accepted(_parser("matrix")) - _visible(_parser("matrix"))
    assert "--measures" in _accepted(_parser("consistency")) - _visible(_parser("consistency"))
    # explanations per direction: --n-explanations, as the configs' n_explanations
    p = _parser("explain")
    assert "--n-explanations" in _visible(p) and "--k" in _accepted(p) - _visible(p)
    assert p.parse_args(["--out", "x", "--k", "4"]).n_explanations == 4
    assert p.parse_args(["--out", "x", "--n-explanations", "5"]).n_explanations == 5
    # --measure and the old --measures land in the same list
    p = _parser("matrix")
    args = p.parse_args(["--models", "m", "--datasets", "d", "--measure", "cka_linear",
                         "--measures", "rsa", "svcca"])
    assert args.measures == ["cka_linear", "rsa", "svcca"]


def test_dynamics_out_and_its_old_spelling(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["dynamics", "--help"])
    text = capsys.readouterr().out
    assert "--out DIR" in text and "--output" not in text
    # the old spelling still parses (the missing config is the error, not the flag)
    assert main(["dynamics", "--config", str(tmp_path / "none.yaml"), "--output",
                 str(tmp_path / "o")]) == 2
    assert "unrecognized arguments" not in capsys.readouterr().err
