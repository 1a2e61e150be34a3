"""The nulls' names and what each null may claim: a verdict where the null is calibrated for
the pair (the twin null; the field null of a calibrated family, its maxima rescaled by the
family's shift), none elsewhere."""
import json
import math

import numpy as np
import pytest

from rdx import RDX, RDXInputError
from rdx.evaluation import null_calibration as nc
from rdx.evaluation.excess_affinity import predictive_p
from rdx.evaluation.significance import assess
from rdx.results.nulls import null_id, null_name, standing_text
from rdx.results.types import MethodResult

TABLE = {"families": {
    "mlp": {"calibrated": True, "log_shift": -0.5, "basis": "mlp twins: 1 of 48 flagged"},
    "vit": {"calibrated": False, "log_shift": 0.7, "basis": "vit twins: 3 of 24 flagged"}}}


@pytest.fixture
def table(monkeypatch):
    nc.calibration_table.cache_clear()
    monkeypatch.setattr(nc, "calibration_table", lambda: TABLE)
    yield TABLE


def test_one_name_per_null_and_the_old_name_reads_as_the_field_null():
    assert null_name("twin") == "twin null" and null_name("field") == "field null"
    assert null_id("perturbation") == "field" and null_id("perturbation", "local") == "local"
    assert null_name("perturbation", "field") == "field null"
    assert standing_text("field", None, None).startswith("null = field null (")


@pytest.mark.parametrize("name, family", [
    ("vit_base_patch16_224", "vit"), ("ViT-B-32", "vit"), ("dinov2_vits14", "vit"),
    ("hf-hub:timm/eva02_small_patch14_224", "vit"), ("efficientnet_lite0", "convnet"),
    ("resnet50", "convnet"), ("convnext_tiny", "convnet"), ("convnet", "convnet"),
    ("mlp", "mlp"), ("my_model", None), (None, None), ("", None)])
def test_family_of_a_model_name(name, family):
    assert nc.family_of(name) == family


def test_check_family():
    assert nc.check_family("vit") == ("vit", "vit")
    assert nc.check_family("vit,convnet") == ("vit", "convnet")
    assert nc.check_family(None) == (None, None)
    assert nc.check_family(("mlp", None)) == ("mlp", None)
    for bad in ("transformer", "vit,cnn", "mlp,mlp,mlp"):
        with pytest.raises(RDXInputError, match="--model-family"):
            nc.check_family(bad)


def test_standing_gives_a_verdict_only_where_the_null_is_calibrated(table):
    assert nc.standing("twin", (None, None))["calibrated"]          # any pair
    ok = nc.standing("field", ("mlp", "mlp"))
    assert ok["calibrated"] and ok["log_shift"] == -0.5 and ok["basis"].startswith("mlp")
    vit = nc.standing("field", ("vit", "vit"))
    assert not vit["calibrated"] and vit["log_shift"] == 0.0 and "seed twin" in vit["advice"]
    unknown = nc.standing("field", (None, None))
    assert not unknown["calibrated"] and "--model-family" in unknown["advice"]
    assert "calibrated for mlp pairs only" in unknown["basis"]
    mixed = nc.standing("field", ("mlp", "vit"))
    assert not mixed["calibrated"] and "a mlp against a vit" in mixed["basis"]
    assert not nc.standing("local", ("mlp", "mlp"))["calibrated"]
    assert not nc.group_standing("field")["calibrated"] and nc.group_standing("twin")["calibrated"]


def test_a_calibrated_family_rescales_the_field_nulls_maxima(table):
    """The same draws (same seed) with and without the family: every null maximum times
    e^shift, and each p recomputed from them with scipy's t tail equals the one assessed."""
    r = np.random.default_rng(0)
    A = r.standard_normal((60, 8)).astype(np.float32)
    B = (A + 0.4 * r.standard_normal(A.shape)).astype(np.float32)
    res = RDX(2, n_init=2).fit(A, B).result()
    raw = assess(MethodResult.from_json(res.to_json()), A, B, n_null=4, random_state=1)
    fam = assess(MethodResult.from_json(res.to_json()), A, B, n_null=4, random_state=1,
                 family="mlp")
    assert raw["null"] == fam["null"] == "field"
    assert not raw["calibrated"] and raw["any_significant"] is None
    assert fam["calibrated"] and fam["standing"]["families"] == ["mlp", "mlp"]
    M0 = np.asarray(raw["null_max"]["values"])
    np.testing.assert_allclose(fam["null_max"]["values"], M0 * math.exp(-0.5), rtol=1e-12)
    sd = raw["null_max"]["log_sd_used"]
    for d in ("a_over_b", "b_over_a"):
        for x, y in zip(raw["explanations"][d], fam["explanations"][d]):
            assert x["statistic"] == y["statistic"] and x["significant"] is None
            want = predictive_p(M0 * math.exp(-0.5), y["statistic"], sd)
            assert y["p_value_fwer"] == pytest.approx(want, rel=1e-12)
            assert y["significant"] == (want <= 0.05) == y["below_alpha"]
    # an uncalibrated family: no rescaling, no verdict
    vit = assess(MethodResult.from_json(res.to_json()), A, B, n_null=4, random_state=1,
                 family="vit")
    assert vit["null_max"]["values"] == raw["null_max"]["values"] and not vit["calibrated"]


def test_explain_reads_the_family_from_rdx_features_records(tmp_path, table, capsys):
    """A features file's provenance record names its model: rdx explain takes the family
    from it; --model-family overrides; a bad family exits 2 before any work."""
    from rdx.cli import main

    r = np.random.default_rng(1)
    A = r.standard_normal((40, 6)).astype(np.float32)
    B = (A + 0.5 * r.standard_normal(A.shape)).astype(np.float32)
    for name, X, model in (("A.npy", A, "mlp_small"), ("B.npy", B, "mlp_large")):
        np.save(tmp_path / name, X)
        (tmp_path / (name + ".json")).write_text(json.dumps({"model": model}))
    out = tmp_path / "o"
    assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--k", "2",
                 "--significance", "3", "--quiet", "--out", str(out)]) == 0
    info = json.loads((out / "explanations.json").read_text())["info"]["significance"]
    assert info["standing"]["families"] == ["mlp", "mlp"] and info["calibrated"]
    assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--k", "2",
                 "--significance", "3", "--model-family", "vit", "--out",
                 str(tmp_path / "v")]) == 0
    printed = capsys.readouterr().out
    assert "no verdict (not calibrated)" in printed and "vit twins: 3 of 24 flagged" in printed
    assert main(["explain", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"),
                 "--significance", "--model-family", "cnn", "--out", str(tmp_path / "x")]) == 2
    assert "--model-family: 'cnn' is not a model family" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
