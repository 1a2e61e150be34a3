"""Stored data is verified before it is reused (``rdx.io``, stored data).

For every kind of artefact the project writes and later reuses instead of recomputing it —
the chunks and the finished file of ``rdx features``, the feature cache of
``extract_features``, the embedded example's cache, a run folder's finished method, a
ConvNet checkpoint — a damaged copy (a flipped bit, a truncation, zeros of the same shape,
permuted rows) or a swapped one (another valid artefact of the same shape) is detected,
named, and rebuilt; where nothing can rebuild it (a checkpoint, a features file given to
``rdx explain``) it is refused with exit status 2 and a message. Hypothesis draws where a
bit flips, where a file is cut and how rows are permuted (profiles in
``hypothesis_profiles``); each damage kind is a parameter, so every kind is tried for every
artefact. Artefacts written before digests were recorded are unverified: rebuilt, never a
crash.

Everything is tiny (a random ConvNet on 20 digits, arrays of a few rows) so that the
whole module runs in well under a minute.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import hypothesis_profiles  # noqa: F401  (registers and loads the profile)
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rdx.cli import main
from rdx.errors import RDXInputError

DAMAGES = ("bit flip", "truncation", "zeros", "rows permuted", "swapped")
#: Hypothesis examples per (artefact, damage): the damage kind itself is a parameter, so
#: a few draws of its details suffice; the end-to-end command runs cost ~0.5 s each.
FEW = settings(max_examples=4, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture,
                                      HealthCheck.too_slow])


# --------------------------------------------------------------------------- damage

def _flip(path: Path, data: st.DataObject) -> None:
    raw = bytearray(path.read_bytes())
    at = data.draw(st.integers(0, len(raw) - 1), label="byte")
    raw[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    path.write_bytes(bytes(raw))


def _truncate(path: Path, data: st.DataObject) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[:data.draw(st.integers(0, len(raw) - 1), label="length")])


def _permutation(n: int, data: st.DataObject) -> np.ndarray:
    perm = np.asarray(data.draw(st.permutations(range(n)), label="permutation"))
    assume((perm != np.arange(n)).any())
    return perm


def damage_array_file(path: Path, how: str, data: st.DataObject, other: Path,
                      key: str | None = None) -> None:
    """Damage an ``.npy`` file (``key`` None) or the array ``key`` of an ``.npz`` file.

    ``other``: another valid artefact of the same shape, for ``swapped``. Zeros and
    permuted rows rewrite the file well-formed, as a careless tool would.
    """
    if how == "bit flip":
        return _flip(path, data)
    if how == "truncation":
        return _truncate(path, data)
    if how == "swapped":
        assume(other.read_bytes() != path.read_bytes())
        return shutil.copyfile(other, path)
    if key is None:
        arrays = {None: np.load(path)}
    else:
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
    x = arrays[key]
    if how == "zeros":
        new = np.zeros_like(x)
    else:   # rows permuted
        new = x[_permutation(len(x), data)]
    assume(not np.array_equal(new, x))
    arrays[key] = new
    if key is None:
        np.save(path, new)
    else:
        np.savez(path, **arrays)


def _fresh() -> Path:
    """A folder for one Hypothesis example (function-scoped fixtures are shared by every
    example of a test, so each makes its own)."""
    return Path(tempfile.mkdtemp(prefix="rdx-stored-"))


# --------------------------------------------------------------------------- rdx features

FEATURES = ["--per-class", "2", "--chunk-size", "7", "--batch-size", "7", "--device", "cpu",
            "--quiet"]


def _features(model: Path, out: Path) -> int:
    return main(["features", str(model), "digits", *FEATURES, "--out", str(out)])


def _stopped_before_output(model: Path, out: Path) -> None:
    """Run ``rdx features`` up to the point where every chunk is written, then stop it
    (as a kill would): the parts folder stays for the next run to resume."""
    def stop(*_a, **_k):
        raise RDXInputError("stopped before the output was written")
    with mock.patch("rdx.models.features_file.write_output", stop):
        assert _features(model, out) == 2


@pytest.fixture(scope="module")
def feature_runs(tmp_path_factory):
    """Two random ConvNets (different weights, the same feature shape), each one's finished
    ``rdx features`` output (20 digits, 64-d) and parts folder (chunks of 7, 7, 6)."""
    import torch

    from rdx.models.convnet import ConvNet

    root = tmp_path_factory.mktemp("feature_runs")
    runs = {}
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = root / f"r{seed}.pt"
        torch.save(ConvNet().state_dict(), model)
        done, stopped = root / f"done{seed}" / "f.npz", root / f"stopped{seed}" / "f.npz"
        assert _features(model, done) == 0
        _stopped_before_output(model, stopped)
        with np.load(done) as z:
            runs[seed] = {"model": model, "out": done, "stopped": stopped,
                          "features": z["features"].copy()}
    assert runs[0]["features"].shape == runs[1]["features"].shape == (20, 64)
    return runs


@pytest.mark.parametrize("how", DAMAGES)
@FEW
@given(data=st.data())
def test_a_damaged_or_swapped_features_chunk_is_computed_again(feature_runs, capsys, how,
                                                                data):
    run, other = feature_runs[0], feature_runs[1]
    chunk = data.draw(st.integers(0, 2), label="chunk")
    d = _fresh()
    try:
        out = d / "f.npz"
        shutil.copytree(run["stopped"].parent / "f.npz.parts", d / "f.npz.parts")
        name = f"chunk-{chunk:05d}.npy"
        damage_array_file(d / "f.npz.parts" / name, how, data,
                          other["stopped"].parent / "f.npz.parts" / name)
        capsys.readouterr()
        assert _features(run["model"], out) == 0
        err = capsys.readouterr().err
        assert f"features chunk {d / 'f.npz.parts' / name}" in err, err
        assert "computing it again" in err
        with np.load(out) as z:
            np.testing.assert_array_equal(z["features"], run["features"])
        prov = json.loads((d / "f.npz.json").read_text())
        assert prov["chunks_computed"] == [chunk]
        assert sorted(prov["chunks_resumed"]) == sorted({0, 1, 2} - {chunk})
    finally:
        shutil.rmtree(d)


@pytest.mark.parametrize("how", DAMAGES)
@FEW
@given(data=st.data())
def test_a_damaged_or_swapped_features_file_is_not_up_to_date(feature_runs, capsys, how,
                                                               data):
    run, other = feature_runs[0], feature_runs[1]
    d = _fresh()
    try:
        out = d / "f.npz"
        shutil.copyfile(run["out"], out)
        shutil.copyfile(run["out"].with_name("f.npz.json"), d / "f.npz.json")
        damage_array_file(out, how, data, other["out"], key="features")
        capsys.readouterr()
        assert _features(run["model"], out) == 0
        err = capsys.readouterr().err
        assert "up to date" not in err
        assert f"features file {out} is not the file that was written there" in err, err
        assert "the record expects" in err and "computed again" in err
        with np.load(out) as z:
            np.testing.assert_array_equal(z["features"], run["features"])
        mtime = out.stat().st_mtime_ns
        assert _features(run["model"], out) == 0   # rewritten and verified: reused
        assert out.stat().st_mtime_ns == mtime
    finally:
        shutil.rmtree(d)


@pytest.mark.parametrize("how", DAMAGES)
@FEW
@given(data=st.data())
def test_a_damaged_features_file_is_refused_where_it_is_read(feature_runs, how, data):
    """What reads features cannot rebuild them: a file that differs from the SHA-256 its
    provenance record holds is refused (``rdx explain``/``rdx run`` read it here)."""
    from rdx.input_files import command_scope
    from rdx.io import load_array

    run, other = feature_runs[0], feature_runs[1]
    d = _fresh()
    try:
        out = d / "f.npz"
        shutil.copyfile(run["out"], out)
        shutil.copyfile(run["out"].with_name("f.npz.json"), d / "f.npz.json")
        np.testing.assert_array_equal(load_array(f"{out}:features"), run["features"])
        damage_array_file(out, how, data, other["out"], key="features")
        with command_scope(), pytest.raises(RDXInputError) as exc:
            load_array(f"{out}:features", "A")
        assert "provenance record f.npz.json" in str(exc.value)
        assert "the record expects" in str(exc.value)
    finally:
        shutil.rmtree(d)


def test_rdx_explain_refuses_a_replaced_features_file_with_exit_2(feature_runs, tmp_path,
                                                                  capsys):
    run, other = feature_runs[0], feature_runs[1]
    a = tmp_path / "a.npz"
    shutil.copyfile(other["out"], a)                 # another run's features, same shape
    shutil.copyfile(run["out"].with_name("f.npz.json"), tmp_path / "a.npz.json")
    np.save(tmp_path / "b.npy", run["features"][:, ::-1].copy())
    capsys.readouterr()
    code = main(["explain", f"{a}:features", str(tmp_path / "b.npy"), "--out",
                 str(tmp_path / "ex"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "not the file its provenance record a.npz.json describes" in err
    assert not (tmp_path / "ex" / "explanations.json").exists()


def test_features_parts_and_outputs_of_an_earlier_version_are_computed_again(
        feature_runs, tmp_path, capsys):
    """No digest on record (the layout before digests): unverified, so computed again —
    the same features, no crash."""
    run = feature_runs[0]
    parts = tmp_path / "f.npz.parts"
    shutil.copytree(run["stopped"].parent / "f.npz.parts", parts)
    m = json.loads((parts / "manifest.json").read_text())
    (parts / "manifest.json").write_text(json.dumps(
        {"schema": 1, "key": m["key"], "chunk_size": 7, "n": 20}))
    capsys.readouterr()
    assert _features(run["model"], tmp_path / "f.npz") == 0
    assert "no content digest" in capsys.readouterr().err
    prov = json.loads((tmp_path / "f.npz.json").read_text())
    assert prov["chunks_computed"] == [0, 1, 2]
    side = tmp_path / "f.npz.json"                   # an old sidecar: no digests
    doc = json.loads(side.read_text())
    side.write_text(json.dumps({k: v for k, v in doc.items()
                                if k not in ("content", "record_sha256")}))
    assert _features(run["model"], tmp_path / "f.npz") == 0
    assert "no content digest" in capsys.readouterr().err
    with np.load(tmp_path / "f.npz") as z:
        np.testing.assert_array_equal(z["features"], run["features"])


# --------------------------------------------------------------------------- checkpoints

@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two checkpoints of the project's format (random tiny ConvNets, same shapes)."""
    from rdx.models.checkpoint import grey_transform, save_checkpoint
    from rdx.models.zoo import load_model

    root = tmp_path_factory.mktemp("checkpoints")
    out = []
    for seed in (0, 1):
        rand = load_model({"model": "convnet_tiny", "pretrained": False, "seed": seed})
        meta = {**rand.model.config(), "transform": grey_transform(28).description}
        out.append(save_checkpoint(root / f"s{seed}" / "epoch=0-step=0.pt", rand.model, meta))
    return out


def damage_checkpoint(path: Path, how: str, data: st.DataObject, other: Path) -> None:
    """Damage a checkpoint file; zeros and permuted rows rewrite it as a valid torch file
    (with its recorded metadata), as a tool editing the weights would."""
    import torch

    if how in ("bit flip", "truncation", "swapped"):
        return damage_array_file(path, how, data, other)
    obj = torch.load(path, weights_only=True)
    state = obj["state_dict"]
    name = data.draw(st.sampled_from(sorted(k for k, v in state.items() if v.ndim >= 2)),
                     label="tensor")
    t = state[name]
    new = torch.zeros_like(t) if how == "zeros" else \
        t[torch.from_numpy(_permutation(len(t), data))]
    assume(not torch.equal(new, t))
    state[name] = new
    torch.save(obj, path)


@pytest.mark.parametrize("how", DAMAGES)
@FEW
@given(data=st.data())
def test_a_damaged_or_swapped_checkpoint_is_refused_with_exit_2(checkpoints, capsys, how,
                                                                data):
    d = _fresh()
    try:
        ckpt = d / "epoch=0-step=0.pt"
        shutil.copyfile(checkpoints[0], ckpt)
        shutil.copyfile(checkpoints[0].with_name(ckpt.name + ".json"),
                        d / (ckpt.name + ".json"))
        damage_checkpoint(ckpt, how, data, checkpoints[1])
        capsys.readouterr()
        code = main(["features", str(ckpt), "digits", *FEATURES, "--out", str(d / "f.npz")])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "Traceback" not in err and str(ckpt) in err
        assert not (d / "f.npz").exists()
    finally:
        shutil.rmtree(d)


def test_a_checkpoint_with_an_earlier_sidecar_still_loads(checkpoints, tmp_path):
    """Sidecars written before file digests: the weights' own SHA-256 still verifies."""
    from rdx.models.checkpoint import load_checkpoint

    ckpt = tmp_path / "a.pt"
    shutil.copyfile(checkpoints[0], ckpt)
    doc = json.loads(checkpoints[0].with_name(checkpoints[0].name + ".json").read_text())
    (tmp_path / "a.pt.json").write_text(json.dumps(
        {k: v for k, v in doc.items() if k not in ("file_sha256", "record_sha256")}))
    model, meta = load_checkpoint(ckpt)
    assert meta["weights_sha256"] == doc["weights_sha256"]


def _training_state(seed: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    return {"fingerprint": "same settings", "step": 5, "history": [],
            "model": {"fc.weight": torch.randn(6, 4, generator=g)}, "written": [],
            "written_sha256": {}}


@pytest.mark.parametrize("how", DAMAGES)
@FEW
@given(data=st.data())
def test_a_damaged_or_swapped_training_state_is_not_resumed_from(capsys, how, data):
    """``rdx train`` resumes from ``training-state.resume``: a state whose bytes its record
    does not vouch for starts the run again from step 0 (it retrains: the rebuild)."""
    import torch

    from rdx.models.training import read_training_state, write_training_state

    d = _fresh()
    try:
        path = d / "training-state.resume"
        write_training_state(d / "other" / path.name, _training_state(1))
        write_training_state(path, _training_state(0))
        assert read_training_state(path, "same settings", d)["step"] == 5
        if how in ("zeros", "rows permuted"):   # rewritten well-formed, record kept
            state = torch.load(path, weights_only=True)
            w = state["model"]["fc.weight"]
            state["model"]["fc.weight"] = torch.zeros_like(w) if how == "zeros" else \
                w[torch.from_numpy(_permutation(len(w), data))]
            torch.save(state, path)
        else:
            damage_array_file(path, how, data, d / "other" / path.name)
        capsys.readouterr()
        assert read_training_state(path, "same settings", d) is None
        err = capsys.readouterr().err
        assert "the saved training state" in err and "starting from step 0" in err
    finally:
        shutil.rmtree(d)


def test_a_training_state_killed_before_its_replacement_is_resumed_from(tmp_path, capsys):
    """The record is written before the state it vouches for; killed in between, the
    previous state (still vouched for as ``previous``) is resumed from. A state without a
    record (an earlier version) is not."""
    from unittest import mock

    from rdx.models import training

    path = tmp_path / "training-state.resume"
    training.write_training_state(path, _training_state(0))
    with mock.patch.object(training, "atomic_write", side_effect=KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            training.write_training_state(path, {**_training_state(0), "step": 9})
    assert training.read_training_state(path, "same settings", tmp_path)["step"] == 5
    path.with_name(path.name + ".json").unlink()
    assert training.read_training_state(path, "same settings", tmp_path) is None
    assert "no content digest" in capsys.readouterr().err


# --------------------------------------------------------------------------- feature cache

@pytest.fixture(scope="module")
def cache_entries(tmp_path_factory):
    """Two entries of ``extract_features``' cache of the same shape (10 × 16: a random
    tiny ConvNet on two selections of digits)."""
    from rdx.data import get_dataset
    from rdx.models.extract import extract_features
    from rdx.models.zoo import load_model

    root = tmp_path_factory.mktemp("feature_cache")
    loaded = load_model({"model": "convnet_tiny", "pretrained": False})
    ds = get_dataset("digits")
    out = {}
    for name, idx in (("first", list(range(10))), ("second", list(range(10, 20)))):
        cache = root / name
        feats = extract_features(loaded, ds, idx, batch_size=10, device="cpu",
                                 cache_dir=cache, progress=False)
        (npy,) = cache.glob("*.npy")
        out[name] = {"cache": cache, "npy": npy, "idx": idx, "features": feats}
    out.update(loaded=loaded, dataset=ds)
    return out


@pytest.mark.parametrize("how", DAMAGES)
@FEW
@given(data=st.data())
def test_a_damaged_or_swapped_feature_cache_entry_is_recomputed(cache_entries, how, data):
    from rdx.models.extract import FeatureCacheWarning, extract_features

    first, second = cache_entries["first"], cache_entries["second"]
    d = _fresh()
    try:
        cache = d / "cache"
        shutil.copytree(first["cache"], cache)
        npy = cache / first["npy"].name
        damage_array_file(npy, how, data, second["npy"])
        with pytest.warns(FeatureCacheWarning, match=r"is unusable \(.*(SHA-256|does not "
                                                     r"load|array is)"):
            again = extract_features(cache_entries["loaded"], cache_entries["dataset"],
                                     first["idx"], batch_size=10, device="cpu",
                                     cache_dir=cache, progress=False)
        np.testing.assert_array_equal(again, first["features"])
        with warnings.catch_warnings():
            warnings.simplefilter("error", FeatureCacheWarning)   # rewritten: a clean hit
            extract_features(cache_entries["loaded"], cache_entries["dataset"], first["idx"],
                             batch_size=10, device="cpu", cache_dir=cache, progress=False)
    finally:
        shutil.rmtree(d)


def test_an_altered_cache_record_is_recomputed_and_an_old_one_verified(cache_entries,
                                                                       tmp_path):
    from rdx.models.extract import FeatureCacheWarning, extract_features

    first = cache_entries["first"]
    cache = tmp_path / "cache"
    shutil.copytree(first["cache"], cache)
    meta_path = cache / first["npy"].with_suffix(".json").name
    meta = json.loads(meta_path.read_text())
    kw = dict(batch_size=10, device="cpu", cache_dir=cache, progress=False)
    # an entry of an earlier version (no seal): its array's SHA-256 still verifies it
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "record_sha256"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureCacheWarning)
        extract_features(cache_entries["loaded"], cache_entries["dataset"], first["idx"], **kw)
    # a sealed record with an altered field (the array digest): recomputed
    meta_path.write_text(json.dumps({**meta, "npy_sha256": "0" * 64}))
    with pytest.warns(FeatureCacheWarning, match="altered"):
        extract_features(cache_entries["loaded"], cache_entries["dataset"], first["idx"], **kw)


# --------------------------------------------------------------------------- example cache

SMALL = {"random_state": 3, "early_steps": 5, "final_epochs": 2}


def _fake_training(calls: list) -> Callable:
    """The digits example's trainer replaced by a tiny deterministic one (the cache is
    what is tested, not the MLP)."""
    def train(random_state: int, early_steps: int, final_epochs: int, progress: bool = False):
        calls.append(random_state)
        r = np.random.default_rng(random_state)
        return {"A": r.standard_normal((12, 4)).astype(np.float32),
                "B": r.standard_normal((12, 4)).astype(np.float32),
                "labels": np.arange(12) % 3, "images": r.integers(0, 16, (12, 8, 8)),
                "info": {"description": f"fake {random_state}"}}
    return train


@pytest.mark.parametrize("how", DAMAGES)
@FEW
@given(data=st.data())
def test_a_damaged_or_swapped_example_cache_is_built_again(capsys, how, data):
    from rdx import examples

    d = _fresh()
    calls: list = []
    try:
        with mock.patch.dict(os.environ, {"RDX_CACHE": str(d)}), \
                mock.patch.object(examples, "_train_digits", _fake_training(calls)):
            first = examples.digits_example(**SMALL, progress=False)
            other = {**SMALL, "random_state": 4}
            examples.digits_example(**other, progress=False)
            path = examples.digits_cache_path(**SMALL)
            other_path = examples.digits_cache_path(**other)
            moved_record = how == "swapped" and data.draw(st.booleans(), label="with record")
            if moved_record:   # another recipe's file together with its own record
                shutil.copyfile(other_path, path)
                shutil.copyfile(other_path.with_name(other_path.name + ".json"),
                                path.with_name(path.name + ".json"))
            else:
                damage_array_file(path, how, data, other_path, key="A")
            capsys.readouterr()
            calls.clear()
            again = examples.digits_example(**SMALL, progress=False)
            err = capsys.readouterr().err
            assert calls == [SMALL["random_state"]], "the damaged cache was served"
            assert str(path) in err and ("is not reused" in err or "cannot be read" in err)
            np.testing.assert_array_equal(again.A, first.A)
            calls.clear()
            examples.digits_example(**SMALL, progress=False)   # rebuilt: served again
            assert calls == []
    finally:
        shutil.rmtree(d)


def test_an_example_cache_of_an_earlier_version_is_built_again(capsys, tmp_path):
    from rdx import examples

    calls: list = []
    with mock.patch.dict(os.environ, {"RDX_CACHE": str(tmp_path)}), \
            mock.patch.object(examples, "_train_digits", _fake_training(calls)):
        examples.digits_example(**SMALL, progress=False)
        path = examples.digits_cache_path(**SMALL)
        path.with_name(path.name + ".json").unlink()     # no record: as before digests
        capsys.readouterr()
        examples.digits_example(**SMALL, progress=False)
        assert "no content digest" in capsys.readouterr().err and len(calls) == 2


# --------------------------------------------------------------------------- run folder

def _method_result(seed: int):
    from rdx.results.types import DirectionResult, Explanation, MethodResult

    r = np.random.default_rng(seed)
    grids = [list(map(int, r.permutation(12)[:4])) for _ in range(3)]
    return MethodResult(
        method="kmeans", params={"n_explanations": 3}, n_images=12,
        directions={"a_over_b": DirectionResult([Explanation(images=g) for g in grids]),
                    "b_over_a": DirectionResult([Explanation(images=g[::-1]) for g in grids])},
        scores={"rank": {"mean": {"bsr": float(r.random())}}},
        run={"fingerprint": f"fp{seed}"},
        arrays={"codes": r.standard_normal((12, 3)).astype(np.float32)})


def _explanations_damage(path: Path, how: str, data: st.DataObject, other: Path) -> None:
    """Damage a method's explanations.json: bytes (flip, cut), or rewritten well-formed
    (scores zeroed, explanations reordered), or another comparison's result."""
    if how in ("bit flip", "truncation"):
        return damage_array_file(path, how, data, other)
    if how == "swapped":
        return shutil.copyfile(other, path)
    doc = json.loads(path.read_text())
    if how == "zeros":
        doc["scores"]["rank"]["mean"]["bsr"] = 0.0
        doc["bsr"]["mean"] = 0.0
    else:
        ex = doc["directions"]["a_over_b"]["explanations"]
        doc["directions"]["a_over_b"]["explanations"] = [ex[i] for i in
                                                         _permutation(len(ex), data)]
    path.write_text(json.dumps(doc, indent=2))


@pytest.mark.parametrize("what", ["concepts.npz", "explanations.json"])
@pytest.mark.parametrize("how", DAMAGES)
@FEW
@given(data=st.data())
def test_a_damaged_or_swapped_finished_method_is_done_again(how, what, data):
    """A finished method whose files fail their digests is not finished (``rdx run`` does
    it again: the runner's resume tests) and is not shown by the readers."""
    from rdx.results.store import ComparisonRun, write_method_result

    d = _fresh()
    try:
        for name, seed in (("m", 0), ("other", 1)):
            write_method_result(d / "cmp" / name, _method_result(seed))
        (d / "cmp" / "run.json").write_text("{}")
        store = ComparisonRun(d / "cmp")
        assert store.is_finished("m", "fp0")
        target, other = d / "cmp" / "m" / what, d / "cmp" / "other" / what
        if what == "concepts.npz":
            damage_array_file(target, how, data, other, key="codes")
        else:
            _explanations_damage(target, how, data, other)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert not ComparisonRun(d / "cmp").is_finished("m", "fp0")
            fresh = ComparisonRun(d / "cmp")
            shown = fresh.concepts("m") if what == "concepts.npz" else fresh.result("m")
        if how != "swapped" or what == "concepts.npz":
            # a swapped result is another one's (its fingerprint tells): no damage to name
            assert any(f"m/{what}" in str(w.message) for w in seen), \
                [str(w.message) for w in seen]
        if shown is not None:   # a swapped result reads as what it is: the other method's
            assert what == "explanations.json" and how == "swapped"
            assert shown.run["fingerprint"] == "fp1"
    finally:
        shutil.rmtree(d)


def test_a_result_of_an_earlier_version_is_shown_but_done_again(tmp_path):
    from rdx.results.store import ComparisonRun, write_method_result

    path = write_method_result(tmp_path / "cmp" / "m", _method_result(0))
    (tmp_path / "cmp" / "run.json").write_text("{}")
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in doc.items() if k != "record_sha256"}))
    store = ComparisonRun(tmp_path / "cmp")
    with pytest.warns(UserWarning, match="no content digest"):
        assert not store.is_finished("m", "fp0")
    assert store.result("m") is not None and store.concepts("m") is not None


# --------------------------------------------------------------------------- inputs mid-run

def test_an_input_edited_while_a_command_runs_stops_its_results(tmp_path):
    """DVC-style: the features a command reads are hashed when read, and checked again
    before each result is written."""
    from rdx.input_files import command_scope
    from rdx.io import load_array, write_json_atomic

    a = tmp_path / "A.npy"
    np.save(a, np.arange(12, dtype=np.float32).reshape(4, 3))
    with command_scope():
        load_array(a, "A", mmap=True)
        write_json_atomic(tmp_path / "ok.json", {})          # unchanged: written
        os.utime(a)                                          # touched, same bytes: fine
        write_json_atomic(tmp_path / "ok2.json", {})
        np.save(a, np.zeros((4, 3), np.float32))             # edited mid-run
        with pytest.raises(RDXInputError, match="changed while this command ran"):
            write_json_atomic(tmp_path / "result.json", {})
    assert not (tmp_path / "result.json").exists()
    write_json_atomic(tmp_path / "later.json", {})           # outside the command: free



def test_rdx_explain_stops_before_its_result_when_an_input_changed(tmp_path, capsys):
    """End to end: A is rewritten after ``rdx explain`` read it and before it writes its
    result; the command exits 2 naming A, and writes no explanations."""
    from conftest import planted_pairs

    from rdx.results import store

    A, B, _ = planted_pairs(n_per=8, d=6)
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    original = store.write_method_result

    def edited_first(*args, **kwargs):
        np.save(tmp_path / "A.npy", A[::-1].copy())      # another process edits A
        return original(*args, **kwargs)

    capsys.readouterr()
    with mock.patch.object(store, "write_method_result", edited_first):
        code = main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--out",
                     str(tmp_path / "ex"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert "changed while this command ran" in err and "A.npy" in err
    assert not (tmp_path / "ex" / "explanations.json").exists()
