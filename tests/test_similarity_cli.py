"""``rdx similarity`` and the runner's ``similarity`` method."""
import json

import numpy as np
import pytest

from rdx import RDXInputError
from rdx.cli import main
from rdx.experiments.methods import MethodContext, method
from rdx.similarity import MEASURES, calibrate, similarity


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    r = np.random.default_rng(0)
    A = r.normal(size=(120, 8))
    B = A @ r.normal(size=(8, 12)) + 0.3 * r.normal(size=(120, 12))
    np.save(d / "A.npy", A)
    np.save(d / "B.npy", B)
    return d, A, B


def test_cli_writes_every_measure_with_calibration(pair, tmp_path, capsys):
    d, A, B = pair
    out = tmp_path / "s.json"
    assert main(["similarity", str(d / "A.npy"), str(d / "B.npy"), "--permutations", "9",
                 "--bootstrap", "9", "--seed", "1", "--rdm", "cosine", "--knn", "5",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["n_images"] == 120 and set(doc["scores"]) == set(MEASURES)
    rsa = doc["scores"]["rsa"]
    assert rsa["params"]["rdm"] == "cosine"
    assert rsa["value"] == pytest.approx(similarity("rsa", A, B, rdm="cosine"))
    assert doc["scores"]["mutual_knn"]["params"]["k"] == 5
    assert rsa == calibrate("rsa", A, B, permutations=9, bootstrap=9, seed=1, rdm="cosine")
    # B is a noisy linear map of A: the permutation null is far below the observed CKA
    assert doc["scores"]["cka_linear"]["p_value"] == pytest.approx(0.1)   # (0 + 1) / (9 + 1)
    assert "cka_linear" in capsys.readouterr().out


def test_cli_bad_input_exits_2(pair, tmp_path, capsys):
    d, A, _ = pair
    np.save(tmp_path / "short.npy", A[:50])
    assert main(["similarity", str(d / "A.npy"), str(tmp_path / "short.npy"),
                 "--measure", "cka_linear"]) == 2
    assert "120" in capsys.readouterr().err


def test_runner_similarity_method(pair):
    _, A, B = pair
    m = method("similarity")
    params = {"measures": ["cka_linear", "rsa"], "bootstrap": 5, "params": {"rsa": {"rdm": "euclidean"}}}
    m.validate(params, "m")
    doc = m.run(A, B, params, MethodContext(labels=np.zeros(len(A)), seed=3)).to_json()["info"]
    doc["directions"] = {}
    assert doc["similarity"]["rsa"] == pytest.approx(similarity("rsa", A, B, rdm="euclidean"))
    assert len(doc["calibration"]["cka_linear"]["ci95"]) == 2 and doc["directions"] == {}
    for bad, match in (({"measures": ["cka2"]}, r"m\.measures: unknown \['cka2'\]"),
                       ({"measures": ["cka_linear"], "params": {"rsa": {}}},
                        r"m\.params\.rsa: not one of the listed"),
                       ({"measures": ["rsa"], "params": {"rsa": {"x": 1}}},
                        r"m\.params\.rsa: unknown parameter"),
                       ({"bootstrap": -1}, r"m\.bootstrap")):
        with pytest.raises(RDXInputError, match=match):
            m.validate(bad, "m")


def test_cli_help_states_every_measures_convention(capsys):
    from rdx.similarity.names import CONVENTIONS

    with pytest.raises(SystemExit) as exc:
        main(["similarity", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert set(CONVENTIONS) == set(MEASURES)
    for name, convention in CONVENTIONS.items():
        assert f"{name}: {' '.join(convention.split())}" in text
    assert "kendall_tau_a" in text and "mean_squared_euclidean" in text


def test_cli_new_conventions_and_their_bad_values(pair, tmp_path, capsys):
    d, A, B = pair
    out = tmp_path / "c.json"
    assert main(["similarity", str(d / "A.npy"), str(d / "B.npy"), "--measure", "rsa",
                 "--measure", "svcca", "--rdm", "mean_squared_euclidean", "--compare",
                 "kendall_tau_a", "--svcca-average", "geometric", "--quiet",
                 "--out", str(out)]) == 0
    scores = json.loads(out.read_text())["scores"]
    assert scores["rsa"]["params"] == {"rdm": "mean_squared_euclidean",
                                       "compare": "kendall_tau_a"}
    assert scores["rsa"]["value"] == pytest.approx(
        similarity("rsa", A, B, rdm="mean_squared_euclidean", compare="kendall_tau_a"))
    assert scores["svcca"]["params"]["average"] == "geometric"
    for flag, bad in (("--compare", "tau"), ("--svcca-average", "mean"), ("--rdm", "sq")):
        with pytest.raises(SystemExit) as exc:
            main(["similarity", str(d / "A.npy"), str(d / "B.npy"), flag, bad])
        assert exc.value.code == 2
        assert "invalid choice" in capsys.readouterr().err
