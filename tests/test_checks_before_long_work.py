"""Checks before long work, in the user's words.

* ``rdx explain --example efficientnet`` builds its example by minutes of feature
  extraction: every file and flag given with it is checked first. The tests replace the
  example's builder by one that records its call, so they fail if a check comes after the
  build (the order of events, not seconds).
* A check deep in the work names the flag the user set (``--n-neighbors``, ``--gamma``,
  ``--significance``), not the parameter of the function it reached
  (``k``, ``gamma``, ``k_neighbors``): :func:`rdx.validation.flag_names`.
"""
from __future__ import annotations

import re

from conftest import rdx_in_process
import numpy as np
import pytest

import rdx.examples
from rdx import validation as V
from rdx.errors import RDXInputError
from rdx.method.options import RDX_OPTIONS

N_EFFICIENTNET = rdx.examples.EXAMPLE_SIZES["efficientnet"]


def run(argv) -> tuple[int, str]:
    """``rdx ARGV`` in this process: exit status and stderr."""
    rc, _, err = rdx_in_process(argv)
    return rc, err


@pytest.fixture
def built(monkeypatch):
    """The efficientnet example's builder replaced by one that records that it ran (and
    stops the command there)."""
    calls = []

    def build(**kwargs):
        calls.append(kwargs)
        raise RDXInputError("the example was built")
    monkeypatch.setitem(rdx.examples.EXAMPLES, "efficientnet", build)
    return calls


@pytest.fixture
def files(tmp_path):
    r = np.random.default_rng(0)
    np.save(tmp_path / "labels5.npy", np.arange(5))
    np.save(tmp_path / "labels_ok.npy", np.arange(N_EFFICIENTNET) % 10)
    np.save(tmp_path / "group_out.npy", np.array([1, 2, N_EFFICIENTNET + 100]))
    np.save(tmp_path / "group_mask.npy", np.zeros(7, dtype=bool))
    np.save(tmp_path / "twin_short.npy", r.standard_normal((50, 8)).astype(np.float32))
    np.save(tmp_path / "images_short.npy", r.random((10, 8, 8)).astype(np.float32))
    (tmp_path / "a_file").write_text("not a folder")
    return tmp_path


BAD_WITH_EXAMPLE = [
    (["--labels", "{f}/labels5.npy"], ["--labels", "5", str(N_EFFICIENTNET)]),
    (["--labels", "{f}/missing.npy"], ["--labels", "does not exist"]),
    (["--test-group", "g={f}/group_out.npy"], ["--test-group", f"0..{N_EFFICIENTNET - 1}"]),
    (["--test-group", "g={f}/group_mask.npy"], ["--test-group", "7 entries"]),
    (["--significance", "--control-a", "{f}/twin_short.npy"], ["--control-a", "50 images"]),
    (["--images", "{f}/images_short.npy"], ["--images"]),
    (["--n-explanations", "0"], ["--n-explanations"]),
]


@pytest.mark.parametrize("flags, words", BAD_WITH_EXAMPLE)
def test_example_inputs_are_checked_before_the_example_is_built(built, files, tmp_path,
                                                                flags, words):
    flags = [f.replace("{f}", str(files)) for f in flags]
    rc, err = run(["explain", "--example", "efficientnet", "--out", tmp_path / "out",
                   "--quiet", *flags])
    assert rc == 2, err
    assert built == [], "the example was built before the bad input was refused"
    assert "Traceback" not in err
    for word in words:
        assert word in err, err


def test_an_output_folder_that_is_a_file_is_refused_before_the_build(built, files):
    rc, err = run(["explain", "--example", "efficientnet", "--out", files / "a_file",
                   "--quiet"])
    assert rc == 2 and built == [], err
    assert "--out" in err


def test_a_missing_gpu_is_refused_before_the_build(built, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: --device cuda is valid here")
    rc, err = run(["explain", "--example", "efficientnet", "--out", tmp_path / "out",
                   "--quiet", "--device", "cuda"])
    assert rc == 2 and built == [], err
    assert "--device cuda" in err and "--device cpu" in err


def test_good_inputs_reach_the_build(built, files, tmp_path):
    """The control: with valid files the example is built (so the refusals above are the
    checks, not a command that never reaches the build)."""
    rc, err = run(["explain", "--example", "efficientnet", "--out", tmp_path / "out",
                   "--quiet", "--labels", files / "labels_ok.npy"])
    assert len(built) == 1 and "the example was built" in err, err


# ---------------------------------------------------------------- the flag, not the param
@pytest.fixture
def pair(tmp_path):
    r = np.random.default_rng(1)
    for name, n in (("a", 60), ("b", 60), ("a6", 6), ("b6", 6)):
        np.save(tmp_path / f"{name}.npy", r.standard_normal((n, 4)).astype(np.float32))
    return tmp_path


def test_explore_names_n_neighbors(tmp_path):
    rc, err = run(["explore", tmp_path, "--n-neighbors", "0"])
    assert rc == 2
    assert "--n-neighbors must be a positive integer" in err and "k must" not in err


def test_significance_on_too_few_images_names_the_flag(pair):
    rc, err = run(["explain", pair / "a6.npy", pair / "b6.npy", "--out", pair / "o",
                   "--quiet", "--significance", "3"])
    assert rc == 2
    assert "--significance needs at least 12 images" in err and "have 6" in err, err
    assert "k_neighbors" not in err


def test_knn_neighbours_name_the_flag_and_the_range_for_this_data(pair):
    rc, err = run(["explain", pair / "a.npy", pair / "b.npy", "--out", pair / "o",
                   "--quiet", "--graph", "knn", "--n-neighbors", "500"])
    assert rc == 2
    assert "--n-neighbors 500" in err and "use --n-neighbors 59" in err, err
    assert "n_neighbors=" not in err


#: Every numeric RDX option with a flag and a lower bound, with a value below it.
BELOW = [(o.flag, o.interval.low - 1 if o.kind == "int" else -1.0) for o in RDX_OPTIONS
         if o.flag and o.kind in ("int", "float") and o.interval is not None
         and o.interval.low is not None]


@pytest.mark.parametrize("flag, value", BELOW, ids=[f for f, _ in BELOW])
def test_every_rdx_flag_is_named_in_its_refusal(pair, flag, value):
    """Each RDX option's refusal, reached through rdx explain, names its flag."""
    name = next(o.name for o in RDX_OPTIONS if o.flag == flag)
    rc, err = run(["explain", pair / "a.npy", pair / "b.npy", "--out", pair / "o",
                   "--quiet", flag, value])
    assert rc == 2, err
    assert flag in err, err
    # the parameter's own name, not as part of its flag (--gamma holds 'gamma')
    assert not re.search(rf"(?<![-\w]){name}( must|=)", err), err


def test_flag_names_only_within_the_block():
    with pytest.raises(RDXInputError, match="^--n-neighbors must"):
        with V.flag_names({"k": "--n-neighbors"}):
            V.check_int(0, "k", minimum=1)
    with pytest.raises(RDXInputError, match="^k must"):   # Python callers: the parameter
        V.check_int(0, "k", minimum=1)


@pytest.mark.parametrize("flags, words", [
    (["--measure", "mutual_knn", "--n-neighbors", "0"], ["--n-neighbors must be"]),
    (["--measure", "mutual_knn", "--n-neighbors", "500"], ["--n-neighbors 500",
                                                           "use --n-neighbors <= 59"]),
    (["--measure", "cka_rbf", "--sigma", "-1"], ["--sigma must be"]),
])
def test_similarity_names_its_flags(pair, flags, words):
    """rdx similarity's measures check k and sigma under their own names: the command
    names its flags (was 'k must be a positive integer')."""
    rc, err = run(["similarity", pair / "a.npy", pair / "b.npy", *flags])
    assert rc == 2, err
    for word in words:
        assert word in err, err
    assert not re.search(r"(?<![-\w])(k|sigma)( must|=)", err), err
