"""The benchmarks' competing load (benchmarks/bench_core.py): it must never outlive its
block, whatever ends the block, and the command cases must be selectable by name."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_cli
        import bench_core
        yield bench_core, bench_cli
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("kind", ["python", "numpy"])
def test_load_processes_spin_during_the_block_and_end_with_it(bench, kind):
    core, _ = bench
    with core.competing_load(2, kind) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
    assert all(p.returncode is not None for p in procs)


def test_load_processes_end_on_ctrl_c(bench):
    core, _ = bench
    with pytest.raises(KeyboardInterrupt):
        with core.competing_load(1) as procs:
            raise KeyboardInterrupt
    assert procs[0].returncode is not None
    with core.competing_load(0) as none:
        assert none == []


def test_no_avx512_env_names_only_dispatch_targets(bench):
    core, _ = bench
    env = core.no_avx512_env()
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"
    _, base, dispatch = core._numpy_cpu_tables()
    for target in env.get("NPY_DISABLE_CPU_FEATURES", "").split():
        assert target in dispatch and target not in base   # numpy refuses anything else


def test_command_cases_are_picked_by_name(bench):
    _, cli = bench
    args = cli.parse_args(["--commands", "--only", "explain_1.5k,similarity"])
    assert args.commands and args.only == ["explain_1.5k", "similarity"] and args.load is None
    with pytest.raises(SystemExit):
        cli.parse_args(["--commands", "--only", "explain,nothing"])
    assert {"explain_10k", "explain_example", "explain_guidance", "explain_knn_1.8k",
            "explain_significance", "probe", "similarity", "train_digits", "benchmark_quick",
            "quickstart"} <= set(cli.COMMAND_NAMES)
