"""Bad values the argument parsers accept, by class: each is refused where it arises, in the
one place every command goes through, with exit status 2 and a message naming the option
or value — never a traceback, an endless run or an empty result reported as a success.

=== ===========================================================================================
A   work is budgeted before it starts: counts above their ceilings or whose time estimate
    exceeds the limit (``rdx.budget``); labels are remapped to 0..C−1 before anything is
    sized by their values (``rdx.validation.encode_labels``)
B   no exit 0 with an empty or NaN result: parameters whose effect overflows are refused with
    their working range; a result with an empty explanation or a NaN score is refused
C   messages describe the data: values beyond float32's range or subnormal, ``exclude_dims``
    that removes every column, an ``image_selection`` option the dataset ignores
D   no traceback from a parsed value: YAML that is not UTF-8 or nests deeply, 7-channel
    images, string labels with ``--report``, an RBF σ that overflows
E   ``rdx explore`` on an ``rdx explain --report`` folder made without labels
=== ===========================================================================================

Commands run in this process through ``rdx.cli.main``; Hypothesis draws the values where a
generator covers the class (profiles: tests/hypothesis_profiles.py).
"""
from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import hypothesis_profiles  # noqa: F401  (registers and loads the profile)
from rdx.cli import main
from rdx.errors import RDXInputError

N = 60          # images of the small inputs
FAST_S = 10.0   # a refusal takes well under a second; this bounds a loaded machine


@pytest.fixture(scope="module")
def w(tmp_path_factory) -> Path:
    """A folder with small valid inputs: A, B (60 × 8), labels of 3 classes, RGB images."""
    w = tmp_path_factory.mktemp("bad_inputs")
    r = np.random.default_rng(0)
    A = r.standard_normal((N, 8))
    B = A + r.standard_normal((N, 8))
    np.save(w / "A.npy", A.astype(np.float32))
    np.save(w / "B.npy", B.astype(np.float32))
    np.save(w / "A64.npy", A)                      # float64, for the magnitude properties
    np.save(w / "A3.npy", r.standard_normal((N, 3)).astype(np.float32))
    np.save(w / "y.npy", np.repeat(np.arange(3), N // 3))
    np.save(w / "rgb.npy", r.random((N, 8, 8, 3)).astype(np.float32))
    return w


def run(argv: list[str]) -> tuple[int, str, str, float]:
    """``rdx ARGV`` in this process: exit status, stdout, stderr and seconds taken (argparse's
    usage errors exit through SystemExit)."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def refused(argv: list[str], *needles: str) -> str:
    """Run ``argv``; it must exit 2, fast, without a traceback, naming every needle."""
    rc, _out, err, seconds = run(argv)
    assert rc == 2, (argv, rc, err)
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert seconds < FAST_S, (argv, seconds)
    return err


# ============================================================== A: work budgeted up front

#: (command line with {v} for the value, the option's name in the message)
HUGE_COUNTS = [
    (["similarity", "{w}/A.npy", "{w}/B.npy", "--measure", "cka_linear",
      "--permutations", "{v}"], "--permutations"),
    (["similarity", "{w}/A.npy", "{w}/B.npy", "--measure", "rsa", "--bootstrap", "{v}"],
     "--bootstrap"),
    (["explain", "{w}/A.npy", "{w}/B.npy", "--out", "{o}", "--method", "sae",
      "--param", "n_epochs={v}"], "n_epochs"),
    (["explain", "{w}/A.npy", "{w}/B.npy", "--out", "{o}", "--method", "usae",
      "--param", "n_epochs={v}"], "n_epochs"),
    (["explain", "{w}/A.npy", "{w}/B.npy", "--out", "{o}", "--method", "kmeans",
      "--param", "n_init={v}"], "n_init"),
    (["explain", "{w}/A.npy", "{w}/B.npy", "--out", "{o}", "--method", "spec",
      "--param", "n_features={v}"], "n_features"),
    (["explain", "{w}/A.npy", "{w}/B.npy", "--out", "{o}", "--method", "cnmf",
      "--param", "max_iter={v}"], "max_iter"),
    (["explain", "{w}/A.npy", "{w}/B.npy", "--out", "{o}", "--method", "topk_sae",
      "--param", "n_latents={v}"], "n_latents"),
    (["explain", "{w}/A.npy", "{w}/B.npy", "--out", "{o}", "--significance", "{v}"],
     "--significance"),
    (["train", "--preset", "digits", "--out", "{o}", "--epochs", "{v}"], "--epochs"),
    (["benchmark", "--quick", "--out", "{o}", "--n-null", "{v}"], "--n-null"),
    (["probe", "--models", "m", "--datasets", "d", "--out", "{o}", "--epochs", "{v}"],
     "--epochs"),
]


@given(case=st.sampled_from(HUGE_COUNTS), value=st.integers(10**7, 2**63 - 1))
def test_huge_counts_are_refused_fast_naming_the_option(w, tmp_path_factory, case,
                                                        value):
    argv, option = case
    out = tmp_path_factory.mktemp("out")
    refused([a.format(w=w, o=out / "o", v=value) for a in argv], option)


def test_counts_in_configs_are_bounded_by_key_path(w, tmp_path):
    doc = {"experiment": "t", "base": {"methods": [{"method": "sae",
                                                    "n_epochs": 10**12}]},
           "comparisons": [{"name": "c"}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    refused(["run", "--config", tmp_path / "c.yaml"], "base.methods[0].n_epochs",
            "at most 100,000")


def test_the_null_draw_ceiling_is_the_significance_maximum():
    from rdx.budget import CEILINGS
    from rdx.evaluation.significance import MAX_N_NULL

    assert CEILINGS["n_null"][0] == MAX_N_NULL


def test_bootstrap_refusal_gives_the_estimate_and_a_value_that_fits(w):
    err = refused(["similarity", w / "A.npy", w / "B.npy", "--measure", "cka_linear",
                   "--bootstrap", 1_000_000_000], "--bootstrap", "would take about")
    assert "use --bootstrap ≤ " in err


def test_training_beyond_the_time_limit_stops_after_its_first_steps(w, tmp_path,
                                                                    monkeypatch):
    # 50 000 epochs of a small SAE take minutes; a limit of 0.36 s refuses them once the
    # first steps are timed, naming a count that fits
    monkeypatch.setenv("RDX_MAX_HOURS", "0.0001")
    err = refused(["explain", w / "A.npy", w / "B.npy", "--out", tmp_path / "o", "--quiet",
                   "--method", "sae", "--param", "n_epochs=50000"],
                  "n_epochs 50,000 would take about", "use n_epochs ≤ ")
    assert "RDX_MAX_HOURS" in err
    assert not (tmp_path / "o").exists()


def test_a_bad_time_limit_is_refused(w, tmp_path, monkeypatch):
    monkeypatch.setenv("RDX_MAX_HOURS", "soon")
    refused(["similarity", w / "A.npy", w / "B.npy", "--measure", "cka_linear",
             "--permutations", 10], "RDX_MAX_HOURS")


_REFERENCE: dict[str, object] = {}


def _explanations(folder: Path) -> dict:
    doc = json.loads((folder / "explanations.json").read_text())
    return {"grids": {d: [e["images"] for e in v["explanations"]]
                      for d, v in doc["directions"].items()}, "bsr": doc["bsr"]}


@settings(max_examples=max(4, settings.default.max_examples // 5))
@given(values=st.lists(st.integers(-2**63, 2**63 - 1), min_size=3, max_size=3, unique=True))
def test_any_int64_label_values_give_the_result_of_their_codes(w, tmp_path_factory,
                                                               values):
    # class j of y gets the j-th smallest value, so its codes (np.unique's inverse) are y
    y = np.load(w / "y.npy")
    folder = tmp_path_factory.mktemp("labels")
    common = [w / "A.npy", w / "B.npy", "--guidance", "ground_truth", "--quiet"]
    if "codes" not in _REFERENCE:
        assert run(["explain", *common, "--labels", w / "y.npy", "--out",
                    folder / "ref"])[0] == 0
        _REFERENCE["codes"] = _explanations(folder / "ref")
    np.save(folder / "y.npy", np.asarray(sorted(values), dtype=np.int64)[y])
    rc, _, err, _ = run(["explain", *common, "--labels", folder / "y.npy", "--out",
                         folder / "out"])
    assert rc == 0, err
    assert _explanations(folder / "out") == _REFERENCE["codes"]


def test_huge_and_string_labels_name_their_classes_in_the_report(w, tmp_path):
    y = np.load(w / "y.npy")
    for name, labels in (("big", np.array([0, 2**40, 5])[y]),
                         ("str", np.array(["cat", "dog", "eel"])[y])):
        np.save(tmp_path / f"{name}.npy", labels)
        out = tmp_path / name
        rc, _, err, _ = run(["explain", w / "A.npy", w / "B.npy", "--labels",
                             tmp_path / f"{name}.npy", "--report", "--quiet", "--out", out,
                             "--guidance", "ground_truth"])
        assert rc == 0, err
        images = json.loads((out / "images.json").read_text())
        assert images["class_names"] == [str(c) for c in np.unique(labels)]
        assert sorted(set(images["labels"])) == [0, 1, 2]
        assert (out / "report.html").is_file()


def test_encode_labels_and_the_probe_head(rng):
    from rdx.similarity.probe import linear_probe
    from rdx.validation import encode_labels

    codes, classes = encode_labels(np.array([2**40, -3, 2**40, 7]), 4)
    assert codes.tolist() == [2, 0, 2, 1] and classes.tolist() == [-3, 7, 2**40]
    # a probe on labels up to 2**40 sizes its head by the 2 classes, not by 2**40
    X = rng.standard_normal((80, 4)).astype(np.float32)
    y = np.repeat([0, 1], 40)
    X[y == 1] += 3
    far = np.where(y == 1, 2**40, 7)
    kw = {"epochs": 2, "lrs": [0.1]}
    a = linear_probe(X[:60], y[:60], X[60:], y[60:], **kw)
    b = linear_probe(X[:60], far[:60], X[60:], far[60:], **kw)
    assert b["num_classes"] == 2 and a["top1"] == b["top1"]


# ====================================================== B: no empty or NaN result as success

@given(flag=st.sampled_from(["--gamma", "--gamma-scale", "--guidance-scale"]),
       value=st.floats(1.01e10, 1e308))
def test_parameters_that_overflow_are_refused_with_their_range(w, tmp_path_factory,
                                                               flag, value):
    out = tmp_path_factory.mktemp("out") / "o"
    extra = ["--labels", w / "y.npy", "--guidance", "ground_truth"] \
        if flag == "--guidance-scale" else []
    refused(["explain", w / "A.npy", w / "B.npy", "--out", out, flag, repr(value), *extra],
            flag, "range that works")
    assert not out.exists()


@pytest.mark.parametrize("argv, needle", [
    (["--gamma", "1e308"], "--gamma"),
    (["--guidance-scale", "1e300", "--guidance", "ground_truth"], "--guidance-scale"),
    (["--gamma", "1e-300"], "float32 resolves"),
    (["--beta", "1e-12"], "beta ≥ 1e-06"),
])
def test_rdx_parameters_outside_their_range_exit_2_without_writing(w, tmp_path, argv,
                                                                   needle):
    refused(["explain", w / "A.npy", w / "B.npy", "--labels", w / "y.npy", "--out",
             tmp_path / "o", *argv], needle)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flag, argv", [
    ("--max-mb", ["explore", "{w}", "--max-mb", "inf"]),          # int(inf) used to raise
    ("--selection-mb", ["explore", "{w}", "--selection-mb", "nan"]),
    ("--lrs", ["probe", "--lrs", "0.1", "nan"]),
    ("--holdout", ["probe", "--holdout=-inf"]),
    ("--sigma", ["similarity", "{w}/A.npy", "{w}/B.npy", "--sigma", "nan"]),
])
def test_non_finite_numbers_are_refused_where_a_flag_is_read(w, flag, argv):
    """Every real-valued flag outside the estimator's declarations reads a finite number
    (those inside are checked by the declaration, with the estimator's own message)."""
    refused([a.format(w=w) for a in argv], flag, "finite number")


@pytest.mark.parametrize("params", [["kernel=linear", "solver=kernel"],
                                    ["kernel=linear", "solver=covariance"]])
def test_spec_with_more_explanations_than_feature_directions(w, tmp_path, params):
    refused(["explain", w / "A3.npy", w / "B.npy", "--out", tmp_path / "o", "--method",
             "spec", "--n-explanations", 12,
             *[x for p in params for x in ("--param", p)]],
            "n_explanations=12 is larger than the number of directions", "use at most")


def test_a_result_with_empty_explanations_or_nan_scores_is_refused(w):
    from rdx.evaluation.scoring import Scorer, check_finite_scores
    from rdx.results.types import DirectionResult, Explanation, MethodResult

    A, B = np.load(w / "A.npy"), np.load(w / "B.npy")
    full = Explanation(images=[0, 1, 2])
    result = MethodResult(method="m", params={}, n_images=N, directions={
        "a_over_b": DirectionResult([full, Explanation(images=[])]),
        "b_over_a": DirectionResult([full])})
    with pytest.raises(RDXInputError, match=r"explanations without images \(a_over_b: 1 of "
                                            r"2 \(#2\)\)"):
        Scorer(A, B, chance_draws=0).score(result)
    with pytest.raises(RDXInputError, match="BSR of a_over_b under rank is nan"):
        check_finite_scores("m", {"rank": {"a_over_b": {"bsr": float("nan"), "n_pairs": 8}}})
    # not failures: a recorded reason, and a direction without pairs (nothing to compare)
    check_finite_scores("m", {"rank": {"undefined": "duplicates"}})
    check_finite_scores("m", {"rank": {"a_over_b": {"bsr": float("nan"), "n_pairs": 0},
                                       "mean": {"bsr": float("nan")}}})


def test_a_nan_similarity_is_never_printed_as_a_score(monkeypatch):
    import dataclasses

    from rdx.similarity import calibration, registry

    nan = dataclasses.replace(registry.MEASURES["cka_linear"], fn=lambda X, Y, **k: np.nan)
    monkeypatch.setitem(registry.MEASURES, "cka_linear", nan)
    r = np.random.default_rng(0)
    with pytest.raises(RDXInputError, match="came out nan"):
        calibration.similarity("cka_linear", r.standard_normal((20, 3)),
                               r.standard_normal((20, 3)))


# ================================================================ C: truthful messages

@given(command=st.sampled_from(["explain", "similarity"]),
       exponent=st.one_of(st.floats(-320, -61), st.floats(61, 307)))
def test_magnitudes_outside_the_working_range_are_named(w, tmp_path_factory, command,
                                                        exponent):
    folder = tmp_path_factory.mktemp("scaled")
    base = np.load(w / "A64.npy")
    A = base / np.abs(base).max() * 10.0**exponent   # largest |value| exactly 10**exponent
    np.save(folder / "A.npy", A)
    argv = [command, folder / "A.npy", w / "B.npy"] + (
        ["--out", folder / "o"] if command == "explain" else ["--measure", "cka_linear"])
    err = refused(argv, "Rescale the features")
    tiny = exponent < 0
    assert ("tiny values only" if tiny else "finite values up to") in err, err
    if tiny and exponent < -308:
        assert "subnormal float64" in err, err
    if command == "explain" and not tiny and exponent > 38.6:
        assert "beyond float32's range" in err, err
    assert "constant" not in err and "NaN/inf" not in err, err


def test_values_beyond_float32_and_subnormals_are_named_as_such(w, tmp_path):
    A = np.load(w / "A64.npy")
    np.save(tmp_path / "sub.npy", A * 1e-310)
    np.save(tmp_path / "big.npy", A * 1e300)
    np.save(tmp_path / "offset.npy", 1.0 + 1e-10 * A)
    refused(["explain", tmp_path / "sub.npy", w / "B.npy", "--out", tmp_path / "o"],
            "subnormal float64", "0 in float32")
    refused(["explain", tmp_path / "big.npy", w / "B.npy", "--out", tmp_path / "o"],
            "finite values up to", "beyond float32's range (largest 3.4e+38)")
    refused(["explain", tmp_path / "offset.npy", w / "B.npy", "--out", tmp_path / "o"],
            "below float32's precision", "Subtract the mean image")
    # the float64 path of the similarity measures keeps working well beyond float32
    rc, out, err, _ = run(["similarity", tmp_path / "offset.npy", w / "B.npy", "--measure",
                           "cka_linear"])
    assert rc == 0 and "nan" not in out, err


def _config(w: Path, tmp: Path, *, selection: dict | None = None, a: dict | None = None
            ) -> Path:
    from rdx.data import get_dataset, select_per_class

    sel = {"dataset": "digits", "target_classes": [3, 5, 8], "num_images": 20, "seed": 0}
    ds = get_dataset("digits")
    idx = select_per_class(ds.ids, ds.labels, sel["target_classes"], 20, seed=0)
    X = ds.images[idx].reshape(len(idx), -1).astype(np.float32)
    np.save(tmp / "dA.npy", X)
    np.save(tmp / "dB.npy", X + np.random.default_rng(0).normal(0, 3, X.shape).astype(
        np.float32))
    doc = {"experiment": "t", "seed": 0, "comparisons": [{"name": "c1"}],
           "base": {"image_selection": {**sel, **(selection or {})},
                    "representations": {"a": {"features": str(tmp / "dA.npy"), **(a or {})},
                                        "b": {"features": str(tmp / "dB.npy")}},
                    "methods": [{"method": "rdx", "n_explanations": 2}]}}
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_exclude_dims_removing_every_column_says_so(w, tmp_path):
    config = _config(w, tmp_path, a={"exclude_dims": list(range(64))})
    err = refused(["run", "--config", config, "--output-root", tmp_path / "out"],
                  "exclude_dims removes all 64 columns")
    assert "is empty" not in err


def test_an_image_selection_option_the_dataset_ignores_is_refused(w, tmp_path):
    config = _config(w, tmp_path, selection={"split": "test"})
    refused(["run", "--config", config, "--output-root", tmp_path / "out"],
            "image_selection", "dataset 'digits' does not use split")
    assert not (tmp_path / "out").exists()


# ==================================================== D: no traceback from a parsed value

def test_significance_of_one_draw_is_refused_up_front(w, tmp_path):
    refused(["explain", w / "A.npy", w / "B.npy", "--out", tmp_path / "o",
             "--significance", 1], "--significance")


@pytest.mark.parametrize("shape, ok", [((N, 8, 8, 7), False), ((N, 7, 8, 8), False),
                                       ((N, 8, 8, 2), False), ((N, 4, 8, 8), True),
                                       ((N, 8, 8), True)])
def test_images_need_1_3_or_4_channels(w, tmp_path, shape, ok):
    np.save(tmp_path / "img.npy", np.random.default_rng(0).random(shape).astype(np.float32))
    argv = ["explain", w / "A.npy", w / "B.npy", "--out", tmp_path / "o", "--quiet",
            "--images", tmp_path / "img.npy"]
    if ok:
        rc, _, err, _ = run(argv)
        assert rc == 0, err
        assert list((tmp_path / "o").rglob("*.png"))
    else:
        refused(argv, "--images has shape", "channels")


def test_a_deeply_nested_param_value_is_refused(w, tmp_path):
    deep = "[" * 5000 + "]" * 5000
    refused(["explain", w / "A.npy", w / "B.npy", "--out", tmp_path / "o", "--method",
             "kmeans", "--param", f"x={deep}"], "--param", "nested")
    deep = "[" * 100 + "]" * 100   # within the reader's recursion, beyond the depth limit
    refused(["explain", w / "A.npy", w / "B.npy", "--out", tmp_path / "o", "--method",
             "kmeans", "--param", f"x={deep}"], "nested more than 64 levels")


@pytest.mark.parametrize("sigma, mode, word", [("1e-300", "median_fraction", "overflows"),
                                               ("1e300", "median_fraction", "underflows"),
                                               ("1e-200", "absolute", "overflows")])
def test_an_rbf_bandwidth_that_overflows_gives_the_range(w, sigma, mode, word):
    refused(["similarity", w / "A.npy", w / "B.npy", "--measure", "cka_rbf", "--sigma", sigma,
             "--sigma-mode", mode], "RBF CKA: sigma=", word, "use sigma between")


def test_configs_that_are_not_utf8_or_nest_deeply_are_refused(tmp_path):
    (tmp_path / "latin1.yaml").write_bytes("experiment: café\n".encode("latin-1"))
    refused(["run", "--config", tmp_path / "latin1.yaml"],
            "not UTF-8 text", "byte 0xe9", "line 1")
    (tmp_path / "flow.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    refused(["run", "--config", tmp_path / "flow.yaml"], "nested")
    (tmp_path / "block.yaml").write_text(
        "a:\n" + "".join("  " * (i + 1) + "b:\n" for i in range(3000)))
    refused(["run", "--config", tmp_path / "block.yaml"], "nested")


def test_parse_yaml_accepts_bom_encodings_and_ordinary_nesting():
    from rdx.io import parse_yaml

    assert parse_yaml("a: [1, {b: 2}]".encode("utf-16"), "x") == {"a": [1, {"b": 2}]}
    assert parse_yaml(b"\xef\xbb\xbfa: 1", "x") == {"a": 1}
    assert parse_yaml("[" * 60 + "]" * 60, "x") is not None


# ============================================ E: explore an explain --report without labels

def test_explorer_reads_a_report_folder_made_without_labels(w, tmp_path):
    from rdx.explorer.inputs import NO_LABELS_CLASS, load_inputs

    out = tmp_path / "nolabels"
    rc, _, err, _ = run(["explain", w / "A.npy", w / "B.npy", "--report", "--quiet", "--out",
                         out])
    assert rc == 0, err
    inputs = load_inputs(out, load_images=False)   # was: TypeError (len of None)
    assert len(inputs.labels) == N and set(inputs.labels.tolist()) == {0}
    assert inputs.class_names == [NO_LABELS_CLASS]
    assert any("No class labels" in note for note in inputs.notes)


def _config_models():
    """Every config section model (StrictModel subclass) of the package's config modules."""
    import importlib
    import pkgutil

    import rdx
    from rdx.configs import StrictModel

    for m in pkgutil.walk_packages(rdx.__path__, "rdx."):
        if "config" in m.name.rsplit(".", 1)[-1]:
            importlib.import_module(m.name)

    def subs(c):
        for s in c.__subclasses__():
            yield s
            yield from subs(s)
    return sorted(set(subs(StrictModel)), key=lambda c: (c.__module__, c.__name__))


def test_every_config_count_that_multiplies_work_is_bounded():
    """Each int key of every config section named like a ceilinged count (rdx.budget) is
    refused past its ceiling, with the key and a value that fits — the one model-level
    check, so a section or key added later is bounded too."""
    from pydantic import ValidationError

    from rdx.budget import ceiling

    checked = []
    for cls in _config_models():
        if any(f.is_required() for f in cls.model_fields.values()):
            continue
        for name in cls.model_fields:
            found = ceiling(name)
            if found is None:
                continue
            with pytest.raises(ValidationError, match="far beyond any useful value") as exc:
                cls.model_validate({name: found[0] + 1})
            assert f"{name}={found[0] + 1}" in str(exc.value)
            assert f"use ≤ {found[0]:,}" in str(exc.value)
            cls.model_validate({name: found[0]})          # the ceiling itself is accepted
            checked.append(f"{cls.__name__}.{name}")
    assert "StatsSection.n_permutations" in checked and "TrainSection.epochs" in checked


def test_a_hold_out_that_leaves_a_class_out_is_refused_with_the_range():
    from types import SimpleNamespace

    from rdx.studies.similarity import check_holdout

    labels = np.repeat(np.arange(10), 20)                     # 200 images, 10 classes
    entry = SimpleNamespace(id="toy", test=None, target_classes=None,
                            load=lambda: SimpleNamespace(labels=labels))
    check_holdout(entry, 0.2)
    check_holdout(entry, 0.05)                                # 10 test images: one per class
    for bad in (5e-324, 0.04, 0.96, 0.9999):
        with pytest.raises(RDXInputError, match=r"use --holdout between 0.05 and 0.95"):
            check_holdout(entry, bad)
    # a dataset with its own test split is not split
    check_holdout(SimpleNamespace(id="t", test={"split": "test"}, target_classes=None,
                                  load=None), 5e-324)


def test_every_seed_flag_of_every_command_takes_only_a_seed():
    """Every --seed/--seeds flag of every command is read by rdx.flags.seed_int: a value
    outside 0..2³²−1 is refused when the command line is parsed (exit 2, the range named),
    not by the first generator that meets it after work has started."""
    import argparse
    import importlib

    from rdx.cli import COMMANDS
    from rdx.flags import SEED_MAX, seed_int

    seen = []
    for name, cmd in COMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"rdx {name}")
        importlib.import_module(cmd.module).add_arguments(parser)
        for action in parser._actions:
            if any(o.lstrip("-") in ("seed", "seeds") for o in action.option_strings):
                assert action.type is seed_int, (name, action.option_strings)
                seen.append(name)
    assert {"explain", "probe", "train", "similarity", "explore"} <= set(seen)
    for bad in ("-1", str(SEED_MAX + 1), "-9223372036854775808", "1.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            seed_int(bad)
    assert seed_int("0") == 0 and seed_int(str(SEED_MAX)) == SEED_MAX
    err = refused(["probe", "--seeds", "-9223372036854775808", "--out", "o"], "--seeds",
                  "is not a seed")
    assert "4294967295" in err


def test_every_config_seed_is_a_seed():
    """Every int key named seed/random_state/*_seed of every config section without required
    keys refuses -1 and 2³² (the one model-level check), and takes 0 and 2³²−1."""
    from pydantic import ValidationError

    from rdx.flags import SEED_MAX

    checked = []
    for cls in _config_models():
        if any(f.is_required() for f in cls.model_fields.values()):
            continue
        for name, field in cls.model_fields.items():
            if not (name in ("seed", "random_state") or name.endswith("_seed")) or \
                    "int" not in str(field.annotation):
                continue
            for bad in (-1, SEED_MAX + 1):
                with pytest.raises(ValidationError, match=f"{name}={bad} is not a seed"):
                    cls.model_validate({name: bad})
            for good in (0, SEED_MAX):
                cls.model_validate({name: good})
            checked.append(f"{cls.__name__}.{name}")
    assert "StatsSection.seed" in checked, checked
