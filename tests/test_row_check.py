"""A and B describe the same images, row for row (:mod:`rdx.method.row_check`).

Misaligned rows — B shuffled, shifted by a row or a few, a seed twin in another order, image
ids that differ — are refused by ``RDX().fit``, ``rdx explain`` (plain and ``--report``),
``rdx run`` and ``rdx similarity``; genuinely different representations of the same images
and independent noise arrays are not. ``--test-group`` masks saved as integers and image
CSVs that give one image two labels are refused too.
"""
from __future__ import annotations

import json
import math

from conftest import rdx_in_process
import numpy as np
import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import hypothesis_profiles  # noqa: F401  (registers and loads the profile)
from conftest import planted_pairs
from rdx import RDX
from rdx.errors import RDXInputError
from rdx.method.row_check import (MAX_SHIFT, check_rows_aligned, neighbour_structure,
                                  row_alignment, rows_checked)


# ------------------------------------------------------------------ data
def latent(seed: int, n: int, clusters: int, dim: int, *, sort: bool = False) -> np.ndarray:
    """Images as points of a latent space: ``clusters`` well separated Gaussian clusters,
    in random row order (or sorted by cluster, as datasets often are)."""
    r = np.random.default_rng(seed)
    lab = r.integers(0, clusters, n)
    if sort:
        lab = np.sort(lab)
    return r.standard_normal((clusters, dim))[lab] * 6.0 + r.standard_normal((n, dim))


def network(Z: np.ndarray, seed: int, width: int, kind: int, noise: float) -> np.ndarray:
    """One model's features of the images: a random one-layer network of the latent
    (ReLU, tanh or a linear map), plus independent noise — two calls with other seeds,
    widths or kinds are genuinely different representations of the same images."""
    r = np.random.default_rng(seed)
    H = Z @ (r.standard_normal((Z.shape[1], width)) / math.sqrt(Z.shape[1]))
    H += r.standard_normal(width)
    H = (np.maximum(H, 0), np.tanh(H / 4.0), H)[kind]
    H += noise * H.std() * r.standard_normal(H.shape)
    return H.astype(np.float32)


#: Pairs of models of clearly clustered images (4 to 10 clusters): each has neighbour
#: structure of its own (:func:`rdx.method.row_check.neighbour_structure`).
pairs = st.fixed_dictionaries({
    "seed": st.integers(0, 2**16), "n": st.integers(150, 450), "clusters": st.integers(4, 10),
    "dim": st.integers(2, 6), "widths": st.tuples(st.integers(16, 64), st.integers(16, 64)),
    "kinds": st.tuples(st.integers(0, 2), st.integers(0, 2)),
    "noise": st.floats(0.0, 0.15)})


#: The same for the tests of misaligned pairs, where the check measures both models'
#: structure as well (about twice the work): fewer, smaller examples.
small_pairs = pairs.map(lambda p: {**p, "n": 120 + p["n"] % 120})
fewer = settings(max_examples=max(8, settings.default.max_examples // 2))


def model_pair(p: dict, *, sort: bool = False) -> tuple[np.ndarray, np.ndarray]:
    Z = latent(p["seed"], p["n"], p["clusters"], p["dim"], sort=sort)
    return (network(Z, p["seed"] + 1, p["widths"][0], p["kinds"][0], p["noise"]),
            network(Z, p["seed"] + 2, p["widths"][1], p["kinds"][1], p["noise"]))


@pytest.fixture(scope="module")
def digits():
    """scikit-learn's digits: pixels, their 10 principal components and the hidden layer of
    an MLP trained on them — three genuinely different representations of 1797 images."""
    import warnings

    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = MLPClassifier((64,), max_iter=60, random_state=0).fit(X, y)
    hidden = np.maximum(X @ mlp.coefs_[0] + mlp.intercepts_[0], 0).astype(np.float32)
    return {"pixels": X, "pca": PCA(10, random_state=0).fit_transform(X).astype(np.float32),
            "mlp": hidden, "labels": y}


# ------------------------------------------------------------------ the statistic
@pytest.mark.parametrize("a, b", [("pixels", "pca"), ("pixels", "mlp"), ("pca", "mlp")])
def test_different_models_of_the_same_images_are_aligned(digits, a, b):
    check = row_alignment(digits[a], digits[b])
    assert check.verdict == "aligned", check
    # far above rows paired at random, which share about k/(n - 1) of the neighbours
    assert check.overlap > 0.3 > 10 * check.reference
    assert check.reference == pytest.approx(10 / 1796, rel=0.5)


@pytest.mark.parametrize("b", ["pca", "mlp"])
def test_shuffled_or_shifted_digits_are_refused(digits, b):
    X, Y = digits["pixels"], digits[b]
    perm = np.random.default_rng(0).permutation(len(X))
    with pytest.raises(RDXInputError, match="do not look like features of the same images"):
        check_rows_aligned(X, Y[perm])
    for s in (1, -1, 3):
        with pytest.raises(RDXInputError, match="shifted") as info:
            check_rows_aligned(X, np.roll(Y, s, axis=0))
        assert f"row i{s:+d}" in str(info.value)
    # sorted by class, a shifted row is mostly still of the same class: the shift test
    # finds it all the same
    order = np.argsort(digits["labels"], kind="stable")
    check = row_alignment(X[order], np.roll(Y[order], 1, axis=0))
    assert check.verdict == "shifted" and check.shift == 1, check


@given(pairs)
def test_genuinely_different_representations_pass(p):
    A, B = model_pair(p)
    check = row_alignment(A, B)
    assert check.verdict == "aligned", (check, p)


@fewer
@given(small_pairs, st.integers(0, 2**32 - 1))
def test_a_random_permutation_of_b_is_refused(p, seed):
    A, B = model_pair(p)
    perm = np.random.default_rng(seed).permutation(len(B))
    assume(np.mean(perm == np.arange(len(B))) <= 0.02)   # not close to the identity
    with pytest.raises(RDXInputError, match="same images"):
        check_rows_aligned(A, B[perm])


@fewer
@given(small_pairs, st.integers(1, 10**6))
def test_any_shift_of_b_is_refused(p, s):
    """Rows in random order: any cyclic shift pairs each image with an unrelated one."""
    A, B = model_pair(p)
    s = s % len(B) or 1
    with pytest.raises(RDXInputError, match="same images|shifted"):
        check_rows_aligned(A, np.roll(B, s, axis=0))


@given(pairs, st.sampled_from([s for t in range(1, MAX_SHIFT + 1) for s in (t, -t)]))
def test_small_shifts_of_rows_sorted_by_class_are_found(p, s):
    """Rows sorted by cluster: a shift of a few rows keeps most images in their cluster,
    so A and B still share more neighbours than random rows; the shift itself is found."""
    A, B = model_pair(p, sort=True)
    check = row_alignment(A, np.roll(B, s, axis=0))
    assert check.verdict == "shifted" and check.shift == s, (check, p)


NOISE = {"gaussian": lambda r, n, d: r.standard_normal((n, d)),
         "uniform": lambda r, n, d: r.random((n, d)),
         "exponential": lambda r, n, d: r.exponential(size=(n, d)),
         "integers": lambda r, n, d: r.integers(0, 3, (n, d)).astype(np.float32),
         "low rank": lambda r, n, d: r.standard_normal((n, 2)) @ r.standard_normal((2, d)),
         "correlated": lambda r, n, d: r.standard_normal((n, d)) @ r.standard_normal((d, d))}


@given(st.sampled_from(sorted(NOISE)), st.sampled_from(sorted(NOISE)),
       st.integers(20, 400), st.integers(1, 64), st.integers(0, 2**16))
def test_independent_noise_arrays_are_not_refused(kind_a, kind_b, n, d, seed):
    """Random test inputs share no neighbours either, legitimately: noise has no neighbour
    structure, so a pair with noise in it is never refused as unaligned."""
    r = np.random.default_rng(seed)
    A, B = NOISE[kind_a](r, n, d), NOISE[kind_b](r, n, max(1, d // 2))
    assume(len(np.unique(A, axis=0)) > 1 and len(np.unique(B, axis=0)) > 1)
    check = check_rows_aligned(A, B)
    assert check is not None and not check.misaligned, check


def test_structure_separates_features_from_noise(digits):
    effect, z = neighbour_structure(digits["pixels"])
    assert effect > 0.15 and z > 20
    effect, z = neighbour_structure(np.random.default_rng(0).standard_normal((500, 64)))
    assert abs(effect) < 0.05 and z < 4


def test_too_few_images_or_bad_inputs_are_skipped():
    r = np.random.default_rng(0)
    assert row_alignment(r.random((10, 3)), r.random((10, 3))).verdict == "skipped"
    assert row_alignment(r.random((30, 3)), r.random((31, 3))).verdict == "skipped"
    bad = r.random((30, 3))
    bad[0, 0] = np.nan
    assert row_alignment(bad, r.random((30, 3))).verdict == "skipped"


# ------------------------------------------------------------------ RDX().fit
def test_fit_refuses_shuffled_rows_unless_told_and_results_do_not_change():
    A, B, _ = planted_pairs(n_per=30, d=8)
    perm = np.random.default_rng(1).permutation(len(B))
    with pytest.raises(RDXInputError, match="check_rows=False"):
        RDX(n_explanations=2).fit(A, B[perm])
    RDX(n_explanations=2).fit(A, B[perm], check_rows=False)
    with rows_checked():          # a caller that checked the rows already
        RDX(n_explanations=2).fit(A, B[perm])
    # the check draws from its own generator: the fit's results are the same with it
    on = RDX(n_explanations=2).fit(A, B).result().to_json()
    off = RDX(n_explanations=2).fit(A, B, check_rows=False).result().to_json()
    for doc in (on, off):
        doc.pop("timings_s", None)
        doc.pop("info", None)
    assert on == off


# ------------------------------------------------------------------ the commands
def run(argv) -> tuple[int, str]:
    """``rdx ARGV`` in this process: exit status and stderr."""
    rc, _, err = rdx_in_process(argv)
    return rc, err


def refused(argv: list, *needles: str) -> str:
    rc, err = run(argv)
    assert rc == 2, (argv, rc, err)
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory, digits):
    """120 digits (3, 5 and 8): pixels as A, principal components as B, B shuffled and
    shifted, a seed twin of B and the same twin shuffled, rdx-features-like files with ids."""
    w = tmp_path_factory.mktemp("row_check")
    y = digits["labels"]
    sel = np.concatenate([np.flatnonzero(y == c)[:40] for c in (3, 5, 8)])
    A, B = digits["pixels"][sel], digits["pca"][sel]
    r = np.random.default_rng(0)
    twin = B + 0.3 * B.std() * r.standard_normal(B.shape).astype(np.float32)
    perm = r.permutation(len(B))
    for name, X in {"A": A, "B": B, "B_shuffled": B[perm], "B_shifted": np.roll(B, 1, 0),
                    "twin": twin, "twin_shuffled": twin[perm], "y": y[sel]}.items():
        np.save(w / f"{name}.npy", X)
    ids = np.array([f"img{i:03d}.png" for i in range(len(A))])
    np.savez(w / "A_ids.npz", features=A, ids=ids)
    swapped = ids.copy()
    swapped[[7, 8]] = swapped[[8, 7]]
    np.savez(w / "B_ids.npz", features=B, ids=swapped)
    # an .npy with its provenance record (as rdx features writes it): ids of other images
    np.save(w / "B_other.npy", B)
    (w / "B_other.npy.json").write_text(json.dumps({
        "ids": [f"other{i}.png" for i in range(len(B))],
        "content": {"bytes": (w / "B_other.npy").stat().st_size}}))
    mask = np.zeros(len(A), dtype=np.int64)
    mask[:30] = 1
    np.save(w / "mask_int.npy", mask)
    np.save(w / "mask_uint8.npy", mask.astype(np.uint8))
    return w


@pytest.mark.parametrize("extra", [[], ["--report"]], ids=["plain", "report"])
def test_explain_refuses_shuffled_or_shifted_b(files, tmp_path, extra):
    w = files
    refused(["explain", w / "A.npy", w / "B_shuffled.npy", "--out", tmp_path / "o", *extra],
            "do not look like features of the same images", "--allow-unaligned")
    refused(["explain", w / "A.npy", w / "B_shifted.npy", "--out", tmp_path / "o", *extra],
            "shifted against each other by 1 row", "--allow-unaligned")
    assert not (tmp_path / "o" / "explanations.json").exists()


def test_explain_goes_on_with_allow_unaligned(files, tmp_path):
    rc, err = run(["explain", files / "A.npy", files / "B_shuffled.npy", "--quiet",
                   "--n-explanations", "2", "--allow-unaligned", "--out", tmp_path / "o"])
    assert rc == 0, err
    assert (tmp_path / "o" / "explanations.json").is_file()


def test_explain_refuses_image_ids_that_differ(files, tmp_path):
    w = files
    refused(["explain", f"{w / 'A_ids.npz'}:features", f"{w / 'B_ids.npz'}:features",
             "--out", tmp_path / "o"], "row 7", "'img007.png'", "'img008.png'",
            "same images in another order")
    refused(["explain", f"{w / 'A_ids.npz'}:features", w / "B_other.npy",
             "--out", tmp_path / "o"], "row 0", "'other0.png'", "--allow-unaligned")


def test_seed_twins_are_checked_against_their_model(files, tmp_path):
    w = files
    base = ["explain", w / "A.npy", w / "B.npy", "--significance", "3", "--out", tmp_path / "o"]
    refused([*base, "--control-b", w / "twin_shuffled.npy"],
            "--control-b", "do not look like features of the same images")
    refused([*base, "--control-b", w / "B.npy"], "are the same array", "seed twin")


def test_similarity_refuses_shuffled_rows(files, tmp_path):
    w = files
    refused(["similarity", w / "A.npy", w / "B_shuffled.npy", "--measure", "cka_linear"],
            "do not look like features of the same images", "--allow-unaligned")
    rc, err = run(["similarity", w / "A.npy", w / "B_shuffled.npy", "--measure",
                   "cka_linear", "--allow-unaligned", "--quiet"])
    assert rc == 0, err
    rc, err = run(["similarity", w / "A.npy", w / "B.npy", "--measure", "cka_linear",
                   "--quiet"])
    assert rc == 0, err


def test_run_refuses_features_files_whose_rows_differ(files, tmp_path):
    w = files
    doc = {"experiment": "rows", "seed": 0,
           "base": {"image_selection": {"dataset": "digits", "target_classes": [3, 5, 8],
                                        "num_images": 40, "seed": 0},
                    "representations": {"a": {"features": str(w / "A.npy")},
                                        "b": {"features": str(w / "B_shuffled.npy")}},
                    "methods": [{"method": "kmeans", "n_explanations": 2}]},
           "comparisons": [{"name": "shuffled"}]}
    config = tmp_path / "rows.yaml"
    config.write_text(yaml.safe_dump(doc))
    refused(["run", "--config", config, "--output-root", tmp_path / "out", "--no-report",
             "--quiet"], "representations.a", "do not look like features of the same images",
            "--allow-unaligned")


def test_test_group_masks_saved_as_integers_are_refused(files, tmp_path):
    w = files
    for mask in ("mask_int.npy", "mask_uint8.npy"):
        refused(["explain", w / "A.npy", w / "B.npy", "--labels", w / "y.npy",
                 "--test-group", f"g={w / mask}", "--out", tmp_path / "o"],
                "all 0 or 1", "mask.astype(bool)", "np.flatnonzero(mask)")


def test_a_boolean_mask_or_indices_stay_accepted(files):
    from rdx.commands.explain import _index_group

    mask = np.load(files / "mask_int.npy")
    np.save(files / "mask_bool.npy", mask.astype(bool))
    np.save(files / "indices.npy", np.flatnonzero(mask))
    assert np.array_equal(_index_group(f"g={files / 'mask_bool.npy'}", len(mask))[1],
                          np.flatnonzero(mask))
    assert np.array_equal(_index_group(f"g={files / 'indices.npy'}", len(mask))[1],
                          np.flatnonzero(mask))
    # the Python API refuses an integer 0/1 mask too
    from rdx.evaluation.group_test import check_groups

    with pytest.raises(RDXInputError, match="np.flatnonzero"):
        check_groups([mask], len(mask))


def test_an_image_csv_with_one_image_under_two_labels_is_refused(tmp_path):
    from PIL import Image

    from rdx.data.sources import csv_dataset

    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 8)).save(tmp_path / name)
    (tmp_path / "ok.csv").write_text("path,label\na.png,cat\nb.png,dog\n./a.png,cat\n")
    assert csv_dataset(tmp_path / "ok.csv").ids == ["a.png", "b.png", "./a.png"]
    (tmp_path / "two.csv").write_text("path,label\na.png,cat\nb.png,dog\n./a.png,dog\n")
    with pytest.raises(RDXInputError) as info:
        csv_dataset(tmp_path / "two.csv")
    for needle in ("'a.png'", "'cat' (row 2)", "'dog' (row 4", "twice"):
        assert needle in str(info.value)
    refused(["features", "torchvision:resnet18", tmp_path / "two.csv", "--out",
             tmp_path / "f.npz"], "'a.png'", "'cat'", "'dog'")
