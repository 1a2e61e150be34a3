"""The embedded digits example trains its MLP once and reads it from the cache afterwards."""
from __future__ import annotations

import numpy as np
import pytest

from rdx import examples

#: a shortened recipe (the cache key holds it): seconds instead of the example's 20 epochs
SMALL = {"random_state": 3, "early_steps": 5, "final_epochs": 2}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RDX_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_second_call_reads_the_cache_and_gives_the_same_example(cache, monkeypatch,
                                                                     capsys):
    first = examples.digits_example(**SMALL)
    assert "training the digits example MLP (once; cached in" in capsys.readouterr().err
    path = examples.digits_cache_path(**SMALL)
    assert path.parent == cache and path.is_file()
    assert not list(cache.glob("*.tmp"))   # written through a temporary file, renamed

    def no_training(*args, **kwargs):
        raise AssertionError("the cached example was trained again")
    monkeypatch.setattr(examples, "_train_digits", no_training)
    second = examples.digits_example(**SMALL)
    assert capsys.readouterr().err == ""
    for name in ("A", "B", "labels", "images"):
        a, b = getattr(first, name), getattr(second, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert first.A.shape == (1797, 64) and first.A.dtype == np.float32
    assert second.info == first.info and second.description == first.description
    assert "step 5" in second.description and second.info["seed"] == 3


def test_a_changed_recipe_or_cache_location_is_a_different_file(cache, monkeypatch, tmp_path):
    path = examples.digits_cache_path(**SMALL)
    assert examples.digits_cache_path(**{**SMALL, "final_epochs": 3}) != path
    monkeypatch.delenv("RDX_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert examples.cache_dir() == tmp_path / "xdg" / "rdx"


def test_a_damaged_cache_is_trained_again(cache, capsys):
    path = examples.digits_cache_path(**SMALL)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an npz file")
    ex = examples.digits_example(**SMALL, progress=False)
    assert "cannot be read" in capsys.readouterr().err
    assert ex.A.shape == (1797, 64)
    again = examples.digits_example(**SMALL, progress=False)   # now from the rewritten file
    assert np.array_equal(again.B, ex.B)
