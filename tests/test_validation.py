"""Bad input gets a clear :class:`rdx.RDXInputError` (API) or exit status 2 (CLI).

Also: the memory check refuses impossible sizes before allocating, and duplicate images are
not an error (ties are broken by index, deterministically).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

from rdx import RDX, RDXInputError
from rdx.method import arrays as AR
from rdx.method.geometry import squared_distances
from rdx.method.ranks import ranks_from_squared_distances_, rank_matrix
from conftest import planted_pairs

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, MPLBACKEND="Agg")
N = 40


@pytest.fixture
def AB(rng):
    A = rng.standard_normal((N, 6)).astype(np.float32)
    B = rng.standard_normal((N, 5)).astype(np.float32)
    return A, B


# ---------------------------------------------------------------------------- shapes and values
def test_different_number_of_images(AB):
    A, B = AB
    with pytest.raises(RDXInputError, match=r"A has 40 images but B has 30.*same images"):
        RDX().fit(A, B[:30])


def test_too_few_images_for_k(AB):
    A, B = AB
    with pytest.raises(RDXInputError,
                       match=r"n_explanations=3 needs at least 5 images.*only 4.*at most 2"):
        RDX(n_explanations=3).fit(A[:4], B[:4])


def test_k_plus_two_images_is_enough(AB):
    A, B = AB
    model = RDX(n_explanations=3).fit(A[:5], B[:5])
    assert model.n_images_ == 5


@pytest.mark.parametrize("which", ["A", "B"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_values_name_rows(AB, which, bad):
    A, B = (x.copy() for x in AB)
    X = A if which == "A" else B
    X[3, 1] = bad
    X[17, 0] = bad
    X[17, 2] = bad
    with pytest.raises(RDXInputError,
                       match=rf"^{which} contains 3 NaN/inf values in 2 rows.*rows: \[3, 17\]"):
        RDX().fit(A, B)


def test_one_dimensional_array(AB):
    A, B = AB
    with pytest.raises(RDXInputError, match=r"A has shape \(40,\); expected a 2-D.*reshape\(-1, 1\)"):
        RDX().fit(A[:, 0], B)


def test_three_dimensional_array(AB):
    A, B = AB
    with pytest.raises(RDXInputError, match=r"B has shape \(40, 1, 5\); expected a 2-D.*Flatten"):
        RDX().fit(A, B.reshape(N, 1, 5))


@pytest.mark.parametrize("shape", [(0, 4), (N, 0)], ids=["no_rows", "no_columns"])
def test_empty_array(AB, shape):
    A, B = AB
    with pytest.raises(RDXInputError, match=r"A is empty \(shape"):
        RDX().fit(np.zeros(shape, dtype=np.float32), B)


@pytest.mark.parametrize("convert", [
    lambda X: X.astype(str),
    lambda X: X.astype(object),
    lambda X: X.astype(np.complex64),
    lambda X: X.astype(np.complex128),
    lambda X: np.array([["a", "b"], ["c", "d"]] * (N // 2)),
], ids=["str", "object", "complex64", "complex128", "letters"])
def test_non_numeric_dtype(AB, convert):
    A, B = AB
    with pytest.raises(RDXInputError, match=r"A has dtype .*must be real numbers"):
        RDX().fit(convert(A), B)


def test_ragged_list(AB):
    _, B = AB
    with pytest.raises(RDXInputError, match=r"A could not be read as an array"):
        RDX().fit([[1.0, 2.0], [3.0]], B)


@pytest.mark.parametrize("which", ["A", "B"])
def test_constant_representation(AB, which):
    A, B = AB
    const = np.full((N, 3), 2.5, dtype=np.float32)
    args = (const, B) if which == "A" else (A, const)
    with pytest.raises(RDXInputError, match=rf"{which} is constant: all 40 images"):
        RDX().fit(*args)


def test_torch_tensor_input_is_accepted(AB):
    A, B = AB
    model = RDX(n_explanations=2).fit(torch.from_numpy(A).requires_grad_(), torch.from_numpy(B))
    assert model.n_images_ == N


# ---------------------------------------------------------------------------- labels / guidance
def test_labels_of_wrong_length_with_guidance(AB):
    A, B = AB
    with pytest.raises(RDXInputError, match=r"labels has 10 entries but there are 40 images"):
        RDX(guidance="ground_truth").fit(A, B, labels=np.arange(10))


def test_labels_not_one_dimensional(AB):
    A, B = AB
    with pytest.raises(RDXInputError, match=r"labels has shape \(40, 2\).*1-D"):
        RDX(guidance="ground_truth").fit(A, B, labels=np.zeros((N, 2)))


@pytest.mark.parametrize("guidance", ["ground_truth", "classifier"])
def test_guidance_without_labels(AB, guidance):
    A, B = AB
    with pytest.raises(RDXInputError, match=rf"guidance='{guidance}' needs labels"):
        RDX(guidance=guidance).fit(A, B)


def test_classifier_guidance_with_too_few_images_per_class(AB):
    A, B = AB
    labels = np.zeros(N, dtype=int)
    labels[:3] = 1
    with pytest.raises(RDXInputError, match=r"at least 2 classes with 5 images"):
        RDX(guidance="classifier").fit(A, B, labels=labels)


# ---------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("k", [0, -1, 2.5, 3.0, True, "3", None])
def test_bad_n_explanations(AB, k):
    A, B = AB
    with pytest.raises(RDXInputError, match=r"n_explanations must be a positive integer"):
        RDX(n_explanations=k).fit(A, B)


def test_numpy_integer_k_is_accepted(AB):
    A, B = AB
    model = RDX(n_explanations=np.int64(2)).fit(A, B)
    assert len(model.directions_["a_over_b"].explanations) == 2


@pytest.mark.parametrize("param", ["similarity", "difference", "clustering", "grid_strategy",
                                   "eigen_solver", "guidance"])
def test_unknown_choice(AB, param):
    A, B = AB
    with pytest.raises(RDXInputError, match=rf"^{param}='bogus' is not one of"):
        RDX(**{param: "bogus"}).fit(A, B)


@pytest.mark.parametrize("param", ["beta", "gamma", "gamma_scale"])
@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5, float("nan"), float("inf"), "x"])
def test_non_positive_beta_gamma(AB, param, value):
    A, B = AB
    with pytest.raises(RDXInputError, match=rf"^{param} must be a positive"):
        RDX(**{param: value}).fit(A, B)


@pytest.mark.parametrize("param, value", [("n_init", 0), ("n_init", -3)])
def test_bad_n_init(AB, param, value):
    A, B = AB
    with pytest.raises(RDXInputError, match=rf"{param} must be a positive integer"):
        RDX(**{param: value}).fit(A, B)


@pytest.mark.parametrize("value, why", [(0, ">= 2"), (1, ">= 2"), (2.5, "an integer")])
def test_bad_grid_size(AB, value, why):
    """A grid needs two images: BSR scores its pairs (one image gave a null score, exit 0)."""
    from rdx.baselines.base import check_grid_size

    A, B = AB
    with pytest.raises(RDXInputError, match=rf"grid_size must be {why}"):
        RDX(grid_size=value).fit(A, B)
    with pytest.raises(RDXInputError, match=rf"grid_size must be {why}"):
        check_grid_size(value, len(A))


def test_sigma_neighbor_out_of_range_for_zp(AB):
    A, B = AB
    with pytest.raises(RDXInputError, match=r"sigma_neighbor=40 must be in 1\.\.39"):
        RDX(similarity="zp_local_scaling", sigma_neighbor=N).fit(A, B)


def test_unbounded_standard_difference_would_overflow(AB):
    A, B = AB
    with pytest.raises(RDXInputError, match=r"overflow float32.*normalize_diff=True"):
        RDX(difference="standard", normalize_diff=False).fit(A, B)


def test_cuda_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    A, B, _ = planted_pairs(n_per=5, d=4)
    with pytest.raises(RDXInputError, match=r"device='cuda'.*no CUDA GPU"):
        RDX(device="cuda").fit(A, B)


@pytest.mark.parametrize("params", [
    {"random_state": None},                       # sklearn's usual default: TypeError
    {"random_state": -1},                         # ValueError from np.random.seed
    {"random_state": np.random.RandomState(0)},   # TypeError
    {"sigma_neighbor": None},                     # TypeError even with similarity='neighborhood'
    {"similarity": "zp_local_scaling", "sigma_neighbor": "x"},  # ValueError from int()
    {"null_threshold": "x"},                      # ValueError from float(), after the whole fit
    {"device": "gpu"},                            # RuntimeError from torch.device
], ids=["random_state_None", "random_state_negative", "random_state_RandomState",
        "sigma_neighbor_None", "sigma_neighbor_str", "null_threshold_str", "device_gpu"])
def test_unvalidated_parameters_raise_input_error(AB, params):
    A, B = AB
    with pytest.raises(RDXInputError):
        RDX(**params).fit(A, B)


def test_labels_with_missing_values(AB):
    A, B = AB
    labels = np.array([0, 1] * (N // 2), dtype=object)
    labels[5] = None
    with pytest.raises(RDXInputError):
        RDX(guidance="ground_truth").fit(A, B, labels=labels)


def test_grid_size_message_and_large_grids(AB):
    A, B = AB
    with pytest.raises(RDXInputError) as info:
        RDX(grid_size=0).fit(A, B)
    msg = str(info.value)
    assert "grid_size must be >= 2" in msg, msg
    assert "explanations" not in msg, msg
    # a grid larger than a cluster simply shows all of its members
    model = RDX(grid_size=100).fit(A, B)
    for r in model.directions_.values():
        assert all(sorted(e.images) == e.members for e in r.explanations)


def test_huge_feature_values_are_refused_or_exact(AB):
    A, B = AB
    ref = RDX(keep_graphs=True).fit(A, B)
    try:
        with np.errstate(all="ignore"):
            big = RDX(keep_graphs=True).fit(A * np.float32(1e20), B)
    except RDXInputError:
        return
    # neighbour ranks are scale invariant
    np.testing.assert_array_equal(big.graphs_["rank_a"], ref.graphs_["rank_a"])


# ---------------------------------------------------------------------------- memory
def test_too_large_n_refused_before_allocating(rng):
    A = rng.random((1_000_000, 1), dtype=np.float32)
    tracemalloc.start()
    try:
        with pytest.raises(RDXInputError, match=r"n=1000000 images needs about [\d.]+ GiB") as info:
            RDX(graph="dense").fit(A, A)   # the n×n method (auto would take the k-NN graph)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "subsample" in str(info.value).lower()
    assert "n²" in str(info.value)
    # refused before its n×n matrices are allocated (the check, not the clock, is the point)
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB allocated before refusing"


def test_estimate_memory_grows_like_n_squared():
    model = RDX()
    for n in (100_000, 1_000_000):
        ratio = model.estimate_memory(2 * n) / model.estimate_memory(n)
        assert 3.9 < ratio <= 4.0, (n, ratio)
    assert model.estimate_memory(10_000) >= 2 * 4 * 10_000**2
    sizes = [model.estimate_memory(n) for n in (10, 100, 1000, 10_000)]
    assert sizes == sorted(sizes)
    assert RDX(keep_graphs=True).estimate_memory(10_000) > model.estimate_memory(10_000)


def test_memory_limit_env_var(monkeypatch, rng):
    A = rng.standard_normal((50, 4)).astype(np.float32)
    B = rng.standard_normal((50, 3)).astype(np.float32)
    monkeypatch.delenv("RDX_MEMORY_LIMIT_GB", raising=False)
    RDX(n_explanations=2, device="cpu").fit(A, B)  # fine without the limit
    monkeypatch.setenv("RDX_MEMORY_LIMIT_GB", "0.0001")  # caps host memory (CPU fits)
    with pytest.raises(RDXInputError, match=r"n=50 images needs about .* available.*(?i:subsample)"):
        RDX(n_explanations=2, device="cpu", graph="dense").fit(A, B)


def test_memory_limit_keep_graphs_hint(monkeypatch, AB):
    A, B = AB
    monkeypatch.setenv("RDX_MEMORY_LIMIT_GB", "0.0001")
    with pytest.raises(RDXInputError, match=r"drop keep_graphs"):
        RDX(keep_graphs=True, device="cpu").fit(A, B)


# ---------------------------------------------------------------------------- duplicates
@pytest.mark.parametrize("use_torch_kernel", [False, True], ids=["numpy", "torch"])
def test_rank_matrix_ties_broken_by_index(use_torch_kernel):
    X = torch.tensor([[0.0], [1.0], [1.0], [2.0]], dtype=torch.float32)
    # Row i: position of j in the row sorted by (distance, index), self always first.
    # row 0 (x=0): d=[0,1,1,2] -> 0 | 1, 2 (tie, by index) | 3
    # row 1 (x=1): d=[1,0,0,1] -> 1 | 2 (dup) | 0, 3 (tie, by index)
    # row 2 (x=1): d=[1,0,0,1] -> 2 | 1 (dup) | 0, 3
    # row 3 (x=2): d=[2,1,1,0] -> 3 | 1, 2 | 0
    expected = torch.tensor([[0, 1, 2, 3],
                             [2, 0, 1, 3],
                             [2, 1, 0, 3],
                             [3, 1, 2, 0]], dtype=torch.float32)
    if use_torch_kernel:
        R = ranks_from_squared_distances_(squared_distances(X), use_torch_kernel=True)
    else:
        R = rank_matrix(X)
    assert torch.equal(R, expected), R


def test_rank_matrix_all_duplicates_of_one_point():
    X = torch.tensor([[5.0, 5.0]] * 3 + [[0.0, 0.0]], dtype=torch.float32)
    expected = torch.tensor([[0, 1, 2, 3],
                             [1, 0, 2, 3],
                             [1, 2, 0, 3],
                             [1, 2, 3, 0]], dtype=torch.float32)
    assert torch.equal(rank_matrix(X), expected)


def _with_duplicates():
    A, B, y = planted_pairs(n_per=20, d=8)
    # 60 extra rows: exact copies of 12 images, 5 copies each (in A and B alike)
    idx = np.concatenate([np.arange(len(A)), np.repeat(np.arange(0, 120, 10), 5)])
    return A[idx], B[idx]


def test_duplicate_rows_fit_deterministically():
    A, B = _with_duplicates()
    assert len(np.unique(A, axis=0)) < len(A)
    m1 = RDX(keep_graphs=True).fit(A, B)
    m2 = RDX(keep_graphs=True).fit(A.copy(), B.copy())
    for d in ("a_over_b", "b_over_a"):
        r1, r2 = m1.directions_[d], m2.directions_[d]
        np.testing.assert_array_equal(r1.labels, r2.labels)
        assert r1.grids == r2.grids
        assert [e.mean_affinity for e in r1.explanations] == \
            [e.mean_affinity for e in r2.explanations]
        assert r1.null_members == r2.null_members
    for key in ("rank_a", "rank_b", "diff_a_over_b"):
        np.testing.assert_array_equal(m1.graphs_[key], m2.graphs_[key])


def test_many_duplicates_can_be_saved(tmp_path):
    A, B, _ = planted_pairs(n_per=20, d=8)
    A = A.copy()
    A[:20] = A[0]  # 20 identical images in A only
    model = RDX().fit(A, B)
    model.save(tmp_path)
    assert (tmp_path / "explanations.json").is_file()


@pytest.mark.parametrize("which", ["A", "B"])
def test_zp_local_scaling_with_many_duplicates(which):
    A, B, _ = planted_pairs(n_per=10, d=8)
    A, B = A.copy(), B.copy()
    X = A if which == "A" else B
    X[10:18] = X[10]  # 8 identical rows: 7th neighbour at distance 0
    with pytest.raises(RDXInputError,
                       match=r"zp_local_scaling is undefined: image 10 has at least 7 exact "
                             r"duplicates.*similarity='neighborhood'"):
        RDX(similarity="zp_local_scaling").fit(A, B)


def test_zp_local_scaling_with_few_duplicates_is_fine():
    A, B, _ = planted_pairs(n_per=10, d=8)
    A = A.copy()
    A[10:17] = A[10]  # 7 identical rows: 7th neighbour is another image
    model = RDX(similarity="zp_local_scaling").fit(A, B)
    # every local scale is positive: the scaled distances are finite, zero exactly between
    # the copies and positive to every other image
    S = AR.host(model.similarity_of(A))   # on the fit device: a tensor on a GPU
    assert np.isfinite(S).all()
    copies = np.arange(10, 17)
    others = np.setdiff1d(np.arange(len(A)), copies)
    assert (S[np.ix_(copies, copies)] == 0).all()
    assert (S[np.ix_(copies, others)] > 0).all()
    for r in model.directions_.values():
        assert len(r.explanations) == model.n_explanations
        assert all(np.isfinite(e.mean_affinity) for e in r.explanations)


# ---------------------------------------------------------------------------- CLI
CLI_CASES = {
    # name: (argv builder, expected words in the message)
    "mismatched_n": (lambda d: [d / "A.npy", d / "B20.npy"], r"A has 40 images but B has 20"),
    "missing_file": (lambda d: [d / "nope.npy", d / "B.npy"], r"A file .*nope\.npy.* does not exist"),
    "empty_npz": (lambda d: [d / "A.npy", d / "empty.npz"], r"B file .*empty\.npz.* holds no arrays"),
    "not_an_array": (lambda d: [d / "notes.txt", d / "B.npy"], r"A file .*notes\.txt.* is not a numeric .npy/.npz array file.*not in .npy/.npz format"),
    "guidance_without_labels": (lambda d: [d / "A.npy", d / "B.npy", "--guidance", "ground_truth"],
                                r"--guidance ground_truth needs --labels"),
    "k_zero": (lambda d: [d / "A.npy", d / "B.npy", "--n-explanations", "0"],
               r"--n-explanations must be a positive integer, got 0"),
}


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_cli")
    r = np.random.default_rng(0)
    np.save(d / "A.npy", r.standard_normal((40, 6)).astype(np.float32))
    np.save(d / "B.npy", r.standard_normal((40, 5)).astype(np.float32))
    np.save(d / "B20.npy", r.standard_normal((20, 5)).astype(np.float32))
    np.savez(d / "empty.npz")
    (d / "notes.txt").write_text("these are not features\n1 2 3\n")
    return d


@pytest.fixture(scope="module")
def cli_results(cli_files):
    """Run all bad-input commands: in this process through ``rdx.cli.main``, except the
    first, which is a real subprocess (what a user's shell sees: exit status, stderr)."""
    import contextlib
    import io

    from rdx.cli import main

    def argv(name):
        return ["explain", *[str(a) for a in CLI_CASES[name][0](cli_files)],
                "--out", str(cli_files / f"out_{name}")]

    def here(name):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv(name))
        return subprocess.CompletedProcess(argv(name), code, out.getvalue(), err.getvalue())

    first, *rest = CLI_CASES
    results = {first: subprocess.run([sys.executable, "-m", "rdx", *argv(first)], cwd=REPO,
                                      env=ENV, capture_output=True, text=True, timeout=300)}
    results.update({name: here(name) for name in rest})
    return results


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_bad_input_exits_2_with_one_paragraph(cli_results, cli_files, case):
    proc = cli_results[case]
    err = proc.stderr.strip()
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    assert err.startswith("rdx explain: error: "), err
    assert "\n" not in err, f"not a one-paragraph message:\n{err}"
    assert re.search(CLI_CASES[case][1], err), err
    assert not (cli_files / f"out_{case}" / "explanations.json").exists()


def _write_cli_inputs(tmp_path):
    A, B, y = planted_pairs(n_per=10, d=8)
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    return tmp_path / "A.npy", tmp_path / "B.npy"


def test_cli_empty_file(tmp_path, capsys):
    from rdx.cli import main
    a, b = _write_cli_inputs(tmp_path)
    (tmp_path / "empty.npy").write_bytes(b"")
    assert main(["explain", str(tmp_path / "empty.npy"), str(b), "--out", str(tmp_path / "o")]) == 2


def test_cli_npz_with_object_array(tmp_path, capsys):
    from rdx.cli import main
    a, b = _write_cli_inputs(tmp_path)
    np.savez(tmp_path / "obj.npz", np.array([{"x": 1}, None], dtype=object))
    assert main(["explain", str(tmp_path / "obj.npz"), str(b), "--out", str(tmp_path / "o")]) == 2


def test_cli_labels_of_wrong_length_without_guidance(tmp_path, capsys):
    from rdx.cli import main
    a, b = _write_cli_inputs(tmp_path)
    np.save(tmp_path / "y.npy", np.arange(5))
    rc = main(["explain", str(a), str(b), "--labels", str(tmp_path / "y.npy"),
               "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "labels" in capsys.readouterr().err
