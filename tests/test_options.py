"""One declaration per option: the estimator, ``rdx explain``'s flags and the configs'
``method: rdx`` entries all come from :data:`rdx.method.options.RDX_OPTIONS` — same names,
defaults and choices, and a bad value refused by all three with the same message. The
baselines take their parameters through one path (``--param``/``--n-explanations`` and
configs both reach the estimator's checks): same defaults, same refusals. And every
earlier spelling of a flag still works, hidden, with a one-line notice.

Nothing here fits a model: only parsers, config validation and the estimators' checks.
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import typing

import numpy as np
import pytest

from rdx.errors import RDXInputError
from rdx.experiments.methods import method
from rdx.flags import cli_word, option_flags, option_values
from rdx.method.estimator import RDX
from rdx.method.options import RDX_OPTIONS, Interval, Option
from rdx.validation import flag_names

FLAGGED = [o for o in RDX_OPTIONS if o.flag]
N = 1000   # an image count at which every default is valid


def explain_parser() -> argparse.ArgumentParser:
    from rdx.commands import explain

    parser = argparse.ArgumentParser(prog="rdx explain", exit_on_error=False)
    explain.add_arguments(parser)
    return parser


def parse(*flags: str) -> argparse.Namespace:
    return explain_parser().parse_args(["A.npy", "B.npy", "--out", "o", *flags])


def shown_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings ``--help`` lists."""
    return {s for a in parser._actions if a.help != argparse.SUPPRESS
            for s in a.option_strings}


def run_main(argv: list[str]) -> tuple[int, str]:
    """``rdx ARGV`` in this process: exit status and stderr (argparse's refusals exit)."""
    from rdx.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()


def bad_value(opt: Option):
    """A value of the option's own type that it refuses (no data needed to tell)."""
    if opt.kind == "choice":
        return "bogus"
    if opt.kind == "bool":
        return "yes"
    low = (opt.interval or Interval()).low
    if opt.kind == "int":
        return int(low) - 1 if low is not None else "many"
    return -1.0 if low is not None and low >= 0 else float("nan")


def estimator_refusal(**params) -> str:
    with pytest.raises(RDXInputError) as info:
        RDX(**params)._check_params(N)
    return str(info.value)


@pytest.fixture(scope="module")
def yaml_model():
    return method("rdx").config_model


# ------------------------------------------------------------------ the table itself
def test_table_declares_exactly_the_estimators_parameters():
    sig = inspect.signature(RDX.__init__).parameters
    declared = [o.name for o in RDX_OPTIONS]
    assert len(declared) == len(set(declared))
    assert set(declared) == set(sig) - {"self"}
    for opt in RDX_OPTIONS:
        assert sig[opt.name].default == opt.default or \
            sig[opt.name].default is opt.default, opt.name
        opt.check(opt.default)                          # every default is accepted
    assert RDX()._check_params(N) is None


def test_interval_ends():
    assert 0 not in Interval(0, 1, "right") and 1 in Interval(0, 1, "right")
    assert 0 in Interval(0, 1, "left") and 1 not in Interval(0, 1, "left")
    assert 0.5 in Interval(0, 1, "neither") and 0 not in Interval(0, 1, "neither")
    assert -1e300 in Interval() and 1e300 in Interval(None, None)
    assert Interval(0, 10, "right").text("beta") == "0 < beta ≤ 10"
    with pytest.raises(ValueError):
        Interval(0, 1, "open")


# ------------------------------------------------------------------ CLI = YAML = estimator
def test_same_defaults(yaml_model):
    """No flag given, an empty config entry and ``RDX()`` mean the same parameters."""
    cli = option_values(parse(), RDX_OPTIONS)
    yaml = yaml_model.model_validate({}).model_dump()
    est = RDX().get_params()
    assert set(cli) == {o.name for o in FLAGGED}
    for opt in RDX_OPTIONS:
        if opt.flag:
            assert cli[opt.name] == est[opt.name] or cli[opt.name] is est[opt.name], opt.name
        if opt.config:
            assert yaml[opt.name] == est[opt.name] or yaml[opt.name] is est[opt.name], opt.name
        else:
            assert opt.name not in yaml_model.model_fields
    # the run-level ones: the command's own flags have the estimator's defaults
    args = parse()
    assert args.seed == est["random_state"] and args.device == est["device"]
    assert set(yaml_model.model_fields) == {o.name for o in RDX_OPTIONS if o.config} | \
        {"save_graphs"}
    assert method("rdx").params == {o.name for o in RDX_OPTIONS if o.config}


def test_same_choices(yaml_model):
    """Each choice reads the same from the flag, a config and the estimator; the flag
    offers exactly the estimator's choices and the config's type is exactly them."""
    parser = explain_parser()
    actions = {a.dest: a for a in parser._actions if a.help != argparse.SUPPRESS}
    for opt in RDX_OPTIONS:
        if opt.kind != "choice":
            continue
        if not opt.config:   # run-level (metric): the estimator takes every choice
            assert opt.name not in yaml_model.model_fields and not opt.flag, opt.name
            for choice in opt.choices:
                RDX(**{opt.name: choice})._check_params(N)
            continue
        field = yaml_model.model_fields[opt.name].annotation
        if typing.get_origin(field) is typing.Annotated:
            field = typing.get_args(field)[0]
        assert typing.get_origin(field) is typing.Literal, opt.name
        assert set(typing.get_args(field)) == set(opt.choices), opt.name
        if opt.flag:
            assert actions[opt.name].choices == [str(cli_word(opt, c)) for c in opt.choices]
        for choice in opt.choices:
            RDX(**{opt.name: choice})._check_params(N)
            yaml = yaml_model.model_validate({opt.name: choice}).model_dump()
            assert yaml[opt.name] == choice or yaml[opt.name] is choice
            if opt.flag:
                value = option_values(parse(opt.flag, str(cli_word(opt, choice))),
                                      RDX_OPTIONS)[opt.name]
                assert value == choice or value is choice, (opt.name, choice)


@pytest.mark.parametrize("opt", RDX_OPTIONS, ids=[o.name for o in RDX_OPTIONS])
def test_invalid_value_refused_by_all_three(opt, tmp_path):
    """The estimator refuses it; a config refuses it with the estimator's message; the
    flag (where there is one) exits 2 before any output, with that message when argparse
    itself let the value through."""
    if not opt.types and opt.kind != "choice":
        pytest.skip(f"{opt.name} is checked where it is used (no declared type)")
    bad = bad_value(opt)
    message = estimator_refusal(**{opt.name: bad})
    assert message.startswith(opt.name), message
    if opt.config:
        with pytest.raises(RDXInputError) as info:
            method("rdx").validate({opt.name: bad}, "methods[0]")
        assert str(info.value) == f"methods[0]: {message}"
    if opt.flag and not (opt.kind == "bool" and not opt.special):   # a switch takes none
        A = np.random.default_rng(0).normal(size=(30, 4))
        np.save(tmp_path / "A.npy", A)
        np.save(tmp_path / "B.npy", A[:, ::-1] ** 2)
        code, err = run_main(["explain", tmp_path / "A.npy", tmp_path / "B.npy", "--out",
                              tmp_path / "out", "--quiet", opt.flag, str(bad)])
        assert code == 2, err
        assert "Traceback" not in err
        # the same refusal, naming the flag the user typed (rdx.validation.flag_names)
        with flag_names(option_flags(RDX_OPTIONS)):
            flagged = estimator_refusal(**{opt.name: bad})
        assert flagged.startswith(opt.flag), flagged
        assert flagged in err or "invalid choice" in err or "expected" in err, err
        assert not (tmp_path / "out").exists()


def test_flag_help_and_types_come_from_the_table():
    parser = explain_parser()
    actions = {a.dest: a for a in parser._actions if a.help != argparse.SUPPRESS}
    for opt in FLAGGED:
        action = actions[opt.name]
        assert opt.flag in action.option_strings
        assert action.help.startswith(opt.help.replace("%", "%%"))
        if opt.kind in ("int", "float") and not opt.special:
            assert action.type is (int if opt.kind == "int" else float)
    shown = shown_flags(parser)
    assert "--n-landmarks" in shown and "--n-explanations" in shown
    assert not shown & {"--landmarks", "--k"}


# ------------------------------------------------------------------ the baselines
def test_baselines_same_defaults_and_refusals(tmp_path):
    """``rdx explain --method NAME`` gives a baseline the flags' n_explanations and
    grid_size: they equal the baseline's own defaults (what a config entry gets), and a
    bad value is refused the same way on both paths."""
    from rdx.baselines import BASELINE_NAMES, baseline_class

    from rdx.commands.explain import _method_params

    A = np.random.default_rng(0).normal(size=(30, 4))
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", A[:, ::-1] ** 2)
    for name in BASELINE_NAMES:
        sig = inspect.signature(baseline_class(name).__init__).parameters
        args = parse("--method", name)
        for key, value in _method_params(args).items():
            assert sig[key].default == value, (name, key)
        with pytest.raises(RDXInputError) as yaml_err:
            method(name).validate({"n_explanations": 0}, "methods[0]")
        code, err = run_main(["explain", tmp_path / "A.npy", tmp_path / "B.npy", "--out",
                              tmp_path / "out", "--quiet", "--method", name,
                              "--param", "n_explanations=0"])
        assert code == 2 and str(yaml_err.value).split(": ", 1)[1] in err, (name, err)
        assert not (tmp_path / "out").exists()


#: The registry's other methods take their parameters only as ``--param KEY=VALUE`` and
#: config keys; each with one value its own check refuses.
OTHER_METHODS = {"cka": ("align_representations", "x"), "classification": ("folds", 1),
                 "similarity": ("permutations", -1)}


def test_every_registered_method_is_covered():
    from rdx.baselines import BASELINE_NAMES
    from rdx.experiments.methods import method_names

    assert set(method_names()) == {"rdx", *BASELINE_NAMES, *OTHER_METHODS}


@pytest.mark.parametrize("name", sorted(OTHER_METHODS))
def test_other_methods_refuse_the_same_value_on_both_paths(name, tmp_path):
    """``--param`` and a config entry reach the same check: the same refusal, named by the
    flag on the command line and by the key path in a config."""
    key, bad = OTHER_METHODS[name]
    with pytest.raises(RDXInputError) as yaml_err:
        method(name).validate({key: bad}, "methods[0]")
    message = str(yaml_err.value).removeprefix("methods[0]")
    A = np.random.default_rng(0).normal(size=(30, 4))
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", A[:, ::-1] ** 2)
    np.save(tmp_path / "y.npy", np.arange(30) % 2)
    code, err = run_main(["explain", tmp_path / "A.npy", tmp_path / "B.npy", "--out",
                          tmp_path / "out", "--quiet", "--method", name, "--labels",
                          tmp_path / "y.npy", "--param", f"{key}={bad}"])
    assert code == 2 and f"--method {name}{message}" in err, err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ one spelling per flag
@pytest.mark.parametrize("command, old, new, argv, dest", [
    ("rdx.commands.explain", "--k", "--n-explanations", ["A", "B", "--out", "o", "--k", "2"],
     ("n_explanations", 2)),
    ("rdx.commands.explain", "--landmarks", "--n-landmarks",
     ["A", "B", "--out", "o", "--landmarks", "30"], ("n_landmarks", 30)),
    ("rdx.explorer.command", "--k", "--n-neighbors", ["C", "--k", "5"], ("n_neighbors", 5)),
    ("rdx.commands.layers", "--output", "--out", ["--config", "c", "--output", "d"],
     ("output", "d")),
    ("rdx.commands.dynamics", "--output", "--out", ["--config", "c", "--output", "d"],
     ("output", "d")),
    ("rdx.commands.matrix", "--measures", "--measure",
     ["--models", "m", "--datasets", "d", "--measures", "cka_linear"],
     ("measures", ["cka_linear"])),
    ("rdx.commands.matrix", "--output-root", "--out",
     ["--models", "m", "--datasets", "d", "--output-root", "r"], ("output_root", "r")),
    ("rdx.commands.probe", "--output-root", "--out",
     ["--models", "m", "--datasets", "d", "--output-root", "r"], ("output_root", "r")),
    ("rdx.commands.consistency", "--method", "--correlation", ["--method", "spearman"],
     ("method", "spearman")),
])
def test_earlier_spellings_still_work_with_a_notice(command, old, new, argv, dest):
    import importlib

    parser = argparse.ArgumentParser(prog="rdx x")
    importlib.import_module(command).add_arguments(parser)
    shown = shown_flags(parser)
    assert new in shown and old not in shown
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        args = parser.parse_args(argv)
    value = getattr(args, dest[0])
    assert (str(value) if dest[0] in ("output", "output_root") else value) == dest[1]
    assert err.getvalue() == f"rdx x: {old} is deprecated, use {new} (same meaning).\n"
    # the current spelling: the same value, no notice
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        args = parser.parse_args([new if a == old else a for a in argv])
    value = getattr(args, dest[0])
    assert (str(value) if dest[0] in ("output", "output_root") else value) == dest[1]
    assert err.getvalue() == ""


def test_one_spelling_per_concept_across_commands():
    """The spellings that were unified stay unified: no command shows --k, --output,
    --output-root (except rdx run's root of experiments), --measures or --landmarks."""
    import importlib

    from rdx.cli import COMMANDS

    for name, cmd in COMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"rdx {name}")
        importlib.import_module(cmd.module).add_arguments(parser)
        shown = shown_flags(parser)
        retired = {"--k", "--output", "--measures", "--landmarks"}
        if name != "run":
            retired.add("--output-root")
        assert not shown & retired, (name, shown & retired)


def test_every_device_flag_is_the_one_declaration():
    """--device is declared once (rdx.flags.add_device_flag): every command that has it takes
    the same names and refuses the same wrong one at parse time."""
    import importlib

    from rdx.cli import COMMANDS
    from rdx.flags import device_name

    found = []
    for name, cmd in COMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"rdx {name}", exit_on_error=False)
        importlib.import_module(cmd.module).add_arguments(parser)
        (action,) = [a for a in parser._actions if "--device" in a.option_strings] or [None]
        if action is None:
            continue
        found.append(name)
        assert action.type is device_name and action.choices is None, name
    assert {"explain", "run", "features", "train", "dynamics", "layers", "matrix",
            "probe"} <= set(found)
    for good in ("auto", "cpu", "cuda", "cuda:1"):
        assert device_name(good) == good
    for bad in ("tpu", "gpu", "cuda:", "CPU", "cuda:x"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a device"):
            device_name(bad)
