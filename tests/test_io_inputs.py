"""Representation inputs: ``file.npz:key``, the keys in every error, identical-input refusal."""
from pathlib import Path

import numpy as np
import pytest

from rdx.validation import check_not_identical
from rdx.cli import main
from rdx.errors import RDXInputError
from rdx.io import load_array, save_npz_atomic, split_array_key


@pytest.fixture
def reps(tmp_path):
    """A run's representations.npz: a, b, labels (as the experiment runner writes it)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 4)).astype(np.float32)
    b = rng.normal(size=(6, 3))
    labels = np.arange(6) % 2
    path = save_npz_atomic(tmp_path / "representations.npz", a=a, b=b, labels=labels)
    return path, a, b, labels


def test_npz_key_selects_the_array(reps):
    path, a, b, labels = reps
    np.testing.assert_array_equal(load_array(f"{path}:a", "A"), a)
    np.testing.assert_array_equal(load_array(f"{path}:b", "B"), b)
    np.testing.assert_array_equal(load_array(f"{path}:labels"), labels)
    # a folder with ':' in its name still splits at the last one
    odd = path.parent / "run:1"
    odd.mkdir()
    save_npz_atomic(odd / "r.npz", x=a, y=b)
    np.testing.assert_array_equal(load_array(f"{odd / 'r.npz'}:y"), b)


def test_npz_with_several_arrays_and_no_key_is_refused(reps):
    path, *_ = reps
    with pytest.raises(RDXInputError) as err:
        load_array(path, "A")
    msg = str(err.value)
    assert msg.startswith(f"A file '{path}' holds 3 arrays")
    # every array with its shape and dtype, read from the headers
    assert "a: 6×4 float32, b: 6×3 float64, labels: 6 int64" in msg
    assert f"{path}:a" in msg


def test_npz_missing_key_lists_the_keys(reps, tmp_path):
    path, *_ = reps
    with pytest.raises(RDXInputError, match=r"has no array 'c'; it holds a: 6×4 float32, "
                                            r"b: 6×3 float64, labels: 6 int64"):
        load_array(f"{path}:c", "B")
    with pytest.raises(RDXInputError, match="has no array ''"):
        load_array(f"{path}:", "B")
    # compressed files list their arrays the same way
    comp = tmp_path / "c.npz"
    np.savez_compressed(comp, first=np.zeros((2, 5), np.float16), second=np.ones(3))
    with pytest.raises(RDXInputError, match=r"first: 2×5 float16, second: 3 float64"):
        load_array(comp)


def test_single_array_npz_loads_without_key(tmp_path):
    x = np.arange(12.0).reshape(3, 4)
    np.savez(tmp_path / "one.npz", x)
    np.testing.assert_array_equal(load_array(tmp_path / "one.npz"), x)
    np.testing.assert_array_equal(load_array(f"{tmp_path / 'one.npz'}:arr_0"), x)


def test_npy_has_no_keys_and_missing_files(tmp_path):
    x = np.arange(6.0).reshape(2, 3)
    np.save(tmp_path / "x.npy", x)
    with pytest.raises(RDXInputError, match=r"single array \(\.npy\), which has no keys: drop "
                                            r"':a'"):
        load_array(f"{tmp_path / 'x.npy'}:a", "A")
    with pytest.raises(RDXInputError, match=r"A file '.*nothere\.npz' does not exist"):
        load_array(f"{tmp_path / 'nothere.npz'}:a", "A")
    # a file whose name contains ':' is taken as it is
    np.save(tmp_path / "odd:name.npy", x)
    np.testing.assert_array_equal(load_array(str(tmp_path / "odd:name.npy")), x)
    np.testing.assert_array_equal(load_array(Path(tmp_path / "x.npy")), x)


def test_split_array_key():
    assert split_array_key("r.npz:a") == (Path("r.npz"), "a")
    assert split_array_key("R.NPZ:b") == (Path("R.NPZ"), "b")
    assert split_array_key("x.npy") == (Path("x.npy"), None)
    assert split_array_key(r"C:\feats\x.npy") == (Path(r"C:\feats\x.npy"), None)
    assert split_array_key(Path("r.npz")) == (Path("r.npz"), None)


def test_check_not_identical_refuses_the_same_array():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(20, 5)).astype(np.float32)
    for B in (A, A.copy(), A.astype(np.float64), A.tolist()):
        with pytest.raises(RDXInputError) as err:
            check_not_identical(A, B)
    msg = str(err.value)
    assert msg.startswith("A and B are the same array (20×5, equal values)")
    assert "trivial" in msg and "representations.npz:a representations.npz:b" in msg
    with pytest.raises(RDXInputError, match=r"^X and Y are .* Pass --allow-identical\.$"):
        check_not_identical(A, A.copy(), names=("X", "Y"), hint=" Pass --allow-identical.")
    with pytest.raises(RDXInputError, match=r"b\. Pass"):   # one space, however the hint starts
        check_not_identical(A, A, hint="Pass it.")
    torch = pytest.importorskip("torch")
    with pytest.raises(RDXInputError):
        check_not_identical(torch.from_numpy(A), A)


def test_check_not_identical_accepts_different_arrays():
    rng = np.random.default_rng(2)
    A = rng.normal(size=(20, 5))
    check_not_identical(A, A[:, :4])             # other shape
    check_not_identical(A, A.T.copy().T[::-1])   # same values, other row order
    check_not_identical(A, A.astype(np.float32))  # rounded: not equal values
    # a difference in the last row only, past the first row block (2**17 columns: 8 rows)
    big = np.zeros((9, 1 << 17), np.float32)
    other = big.copy()
    other[-1, -1] = 1.0
    check_not_identical(big, other)
    with pytest.raises(RDXInputError, match=r"9×131072"):
        check_not_identical(big, big.copy())


def test_cli_same_npz_twice_is_refused(reps, capsys):
    """`rdx similarity representations.npz representations.npz` used to print CKA 1.0000."""
    path, *_ = reps
    assert main(["similarity", str(path), str(path)]) == 2
    err = capsys.readouterr().err
    assert "holds 3 arrays" in err and f"{path}:a" in err
    # the same key twice: the arrays are identical, which the command refuses
    assert main(["similarity", f"{path}:a", f"{path}:a"]) == 2
    err = capsys.readouterr().err
    assert "A and B are the same array (6×4, equal values)" in err and "--allow-identical" in err
