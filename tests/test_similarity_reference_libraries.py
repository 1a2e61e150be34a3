"""Golden values of the similarity measures computed by the reference libraries
themselves, for the two that are not on PyPI: netrep and the platonic-representation
metrics (Huh et al. 2024). The values were written by the scripts in
``tests/data/similarity_reference/`` (``make_netrep_reference.py``,
``make_platonic_reference.py``) with each library's code at a recorded commit; their
docstrings say where the code comes from and how to rerun them. Where the library is
importable (``PYTHONPATH`` set to its checkout) the values are recomputed live.

Identical definitions are asserted to ~1e-10; where a library adds a convention of its own
(an epsilon in a denominator, float32 masks, an iterative CCA), the test undoes or bounds
exactly that convention; CKNNA, whose code computes another quantity than rdx's (the
paper's formula), is checked to differ.
"""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from rdx.similarity.calibration import similarity

REF_DIR = Path(__file__).parent / "data" / "similarity_reference"
NETREP = json.loads((REF_DIR / "netrep_reference.json").read_text())
PLATONIC = json.loads((REF_DIR / "platonic_reference.json").read_text())


def _pair(case: dict) -> tuple[np.ndarray, np.ndarray]:
    return np.array(case["X"]), np.array(case["Y"])


def _live_module(doc: dict, library: str):
    """The script that wrote ``doc``, imported, where ``library`` is importable."""
    if importlib.util.find_spec(library) is None:
        pytest.skip(f"{doc['library']} is not importable (not on PyPI; set PYTHONPATH to a "
                    f"checkout of {doc['repository']} at {doc['version']}); the stored "
                    "values are checked by the other tests")
    spec = importlib.util.spec_from_file_location(f"make_{library}_ref",
                                                  REF_DIR / doc["script"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("doc", [NETREP, PLATONIC], ids=["netrep", "platonic"])
def test_reference_files_name_their_library_commit_and_script(doc):
    assert doc["library"] and doc["version"].startswith("git ")
    assert len(doc["version"].split()[1]) == 40 and doc["repository"].startswith("https://")
    assert (REF_DIR / doc["script"]).is_file() and doc["calls"]


# ============================================================ netrep
@pytest.mark.parametrize("case", list(NETREP["cases"]))
def test_procrustes_equals_netrep_linear_metric_alpha_1(case):
    """rdx's ``kind='angular'`` is netrep's angular score; ``kind='euclidean'`` is netrep's
    Euclidean score of the inputs centred and scaled to unit Frobenius norm. netrep takes
    arccos of a cosine near 1 on the near-rotation pair, which loses digits (≈ 1e-16 / θ):
    2.4e-13 there, within the 1e-10."""
    c = NETREP["cases"][case]
    X, Y = _pair(c)
    assert similarity("procrustes", X, Y, kind="angular") == pytest.approx(
        c["procrustes_angular"], abs=1e-10)
    assert similarity("procrustes", X, Y, kind="euclidean") == pytest.approx(
        c["procrustes_euclidean_unit"], abs=1e-10)
    assert similarity("procrustes", X, Y) == pytest.approx(
        c["procrustes_euclidean_unit"] ** 2, abs=1e-10)


@pytest.mark.parametrize("case", [k for k, c in NETREP["cases"].items() if "cca_angular" in c])
def test_svcca_geometric_keep_1_is_cos_of_netrep_cca_angle(case):
    """netrep's LinearMetric(alpha=0) whitens both inputs and reports the angle θ with
    cos θ = Σρᵢ / √(p·q): rdx's svcca with keep=1 (no directions dropped) and
    average='geometric'."""
    c = NETREP["cases"][case]
    X, Y = _pair(c)
    assert similarity("svcca", X, Y, keep=1.0, average="geometric") == pytest.approx(
        math.cos(c["cca_angular"]), abs=1e-10)


@pytest.mark.parametrize("case", list(NETREP["cases"]))
def test_biased_cka_is_cos_of_netrep_linear_cka(case):
    c = NETREP["cases"][case]
    X, Y = _pair(c)
    assert similarity("cka_linear_biased", X, Y) == pytest.approx(
        math.cos(c["linear_cka_angular"]), abs=1e-10)


def test_netrep_live_equals_the_stored_values():
    mod = _live_module(NETREP, "netrep")
    for case, c in NETREP["cases"].items():
        live = mod.reference(*_pair(c))
        for key, value in live.items():
            assert value == pytest.approx(c[key], abs=1e-12), (case, key)


# ============================================================ platonic-rep metrics
PLATONIC_CASES = list(PLATONIC["cases"])
KS = ["5", "10"]


@pytest.mark.parametrize("case", PLATONIC_CASES)
@pytest.mark.parametrize("k", KS)
def test_mutual_knn_counts_the_same_neighbours_as_platonic(case, k):
    """platonic's mutual_knn on L2-normalised features finds the same neighbour sets: the
    same total Σᵢ|N_X(i) ∩ N_Y(i)|. Its value is a float32 mean (its masks are
    ``torch.zeros`` float32), so it equals rdx's float64 value to float32 rounding."""
    c = PLATONIC["cases"][case]
    X, Y = _pair(c)
    n, kk = len(X), int(k)
    ours = similarity("mutual_knn", X, Y, k=kk)
    theirs = c["mutual_knn"][k]
    assert ours * n * kk == pytest.approx(round(ours * n * kk), abs=1e-9)
    assert round(ours * n * kk) == round(theirs * n * kk)
    assert ours == pytest.approx(theirs, abs=1e-6)


@pytest.mark.parametrize("case", PLATONIC_CASES)
@pytest.mark.parametrize("ours,theirs,hsic", [("cka_linear_biased", "cka", "hsic_biased"),
                                              ("cka_linear", "unbiased_cka", "hsic_unbiased")])
def test_linear_cka_equals_platonic_once_its_epsilon_is_undone(case, ours, theirs, hsic):
    """platonic's cka divides by √(HSIC_KK·HSIC_LL) + 1e-6 (biased HSIC: tr(KHLH), without
    the 1/(n−1)²; unbiased: Song's U-statistic). Undoing the 1e-6 with its
    own stored HSICs gives rdx's value to 1e-10; with the epsilon the gap is up to ~5e-8
    here (it grows as the HSICs shrink)."""
    c = PLATONIC["cases"][case]
    X, Y = _pair(c)
    root = math.sqrt(c[f"{hsic}_kk"] * c[f"{hsic}_ll"])
    value = similarity(ours, X, Y)
    assert value == pytest.approx(c[theirs] * (root + 1e-6) / root, abs=1e-10)
    assert value == pytest.approx(c[theirs], abs=1e-6)


@pytest.mark.parametrize("case", [k for k, c in PLATONIC["cases"].items() if "svcca" in c])
def test_svcca_keep_1_equals_platonic_svcca_on_ten_features(case):
    """On inputs of exactly 10 columns, platonic's svcca(cca_dim=10) keeps the whole
    column space (z-scoring and its randomised SVD do not change it) and averages the 10
    canonical correlations: rdx's svcca with keep=1. Its scikit-learn CCA is iterative
    (NIPALS, tol=1e-6) and it adds 1e-10 noise: agreement 1.0e-7 here (1.5e-8 with
    tol=1e-14). On wider inputs they differ by definition: a fixed 10 directions of the
    z-scored features against rdx's 99 % of the variance."""
    c = PLATONIC["cases"][case]
    X, Y = _pair(c)
    assert similarity("svcca", X, Y, keep=1.0) == pytest.approx(c["svcca"], abs=1e-6)
    assert abs(similarity("svcca", X, Y) - c["svcca"]) > 1e-2    # default keep=0.99


@pytest.mark.parametrize("case", PLATONIC_CASES)
@pytest.mark.parametrize("k", KS)
def test_cknna_is_not_platonic_codes_cknna(case, k):
    """rdx's cknna is the paper's formula (row-centred kernels on the mutual k-NN pairs);
    platonic's code applies the unbiased-HSIC formula to the masked kernels: another
    number (0.006 to 0.033 apart on these inputs), recorded so the difference is known."""
    c = PLATONIC["cases"][case]
    X, Y = _pair(c)
    gap = abs(similarity("cknna", X, Y, k=int(k)) - c["cknna"][k])
    assert 1e-3 < gap < 0.1


def test_platonic_live_equals_the_stored_values():
    mod = _live_module(PLATONIC, "metrics")
    for case, c in PLATONIC["cases"].items():
        live = mod.reference(*_pair(c))
        for key, value in live.items():
            np.testing.assert_allclose(np.array(list(value.values()) if isinstance(value, dict)
                                                else value),
                                       np.array(list(c[key].values()) if isinstance(value, dict)
                                                else c[key]), rtol=1e-12, atol=1e-12,
                                       err_msg=f"{case} {key}")
