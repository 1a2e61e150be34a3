"""rdx chooses its own threading (rdx/threads.py): the thread count from the CPUs the process
may use (affinity, cgroup quota, SLURM) with RDX_NUM_THREADS as the override, and a passive
OpenMP wait policy unless the user chose one — set when rdx is imported, before torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rdx import cli, threads
from rdx.threads import ThreadChoice, cgroup_cpu_limit, choose_threads

REPO = Path(__file__).resolve().parent.parent
#: what the user may have set about threads; removed for the "clean environment" children
THREAD_VARIABLES = (*threads.WAIT_VARIABLES, *threads.BLAS_WAIT_VARIABLES,
                    *threads.BLAS_VARIABLES, "RDX_NUM_THREADS",
                    "OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK")


def _choose(tmp_path: Path, env: dict[str, str] | None = None, affinity: int = 8,
            proc_cgroup: str | None = None) -> ThreadChoice:
    """choose_threads on a fake machine: ``affinity`` CPUs, cgroup files under tmp_path."""
    return choose_threads(env or {}, affinity=affinity, cgroup_root=tmp_path,
                          proc_cgroup=proc_cgroup or tmp_path / "no-proc-cgroup")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    return {**env, **extra}


def _python(code: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


# ----------------------------------------------------------------------------- the count

def test_the_affinity_is_the_count_without_other_limits(tmp_path):
    assert _choose(tmp_path, affinity=3) == ThreadChoice(3, "CPU affinity", 3)
    assert not _choose(tmp_path, affinity=3).tells_runtimes  # the runtimes pick 3 themselves
    assert threads.affinity_cpus() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("text, expected", [("150000 100000", 2), ("100000 100000", 1),
                                            ("50000 100000", 1), ("max 100000", 8)])
def test_a_cgroup_v2_quota_caps_the_count(tmp_path, text, expected):
    (tmp_path / "cpu.max").write_text(text + "\n")
    choice = _choose(tmp_path)
    assert choice.n == expected
    assert choice.source == ("CPU affinity" if expected == 8 else "cgroup CPU quota")
    assert choice.tells_runtimes == (expected != 8)


def test_the_quota_of_the_process_cgroup_and_its_parents_is_read(tmp_path):
    # /proc/self/cgroup names a nested cgroup; its parent holds the tighter quota
    (tmp_path / "proc-cgroup").write_text("0::/jobs/job7\n")
    (tmp_path / "jobs" / "job7").mkdir(parents=True)
    (tmp_path / "jobs" / "job7" / "cpu.max").write_text("max 100000\n")
    (tmp_path / "jobs" / "cpu.max").write_text("300000 100000\n")
    assert cgroup_cpu_limit(tmp_path, tmp_path / "proc-cgroup") == 3.0
    assert _choose(tmp_path, proc_cgroup=str(tmp_path / "proc-cgroup")).n == 3


def test_a_cgroup_v1_quota_caps_the_count(tmp_path):
    folder = tmp_path / "cpu,cpuacct"
    folder.mkdir()
    (folder / "cpu.cfs_quota_us").write_text("250000\n")
    (folder / "cpu.cfs_period_us").write_text("100000\n")
    assert _choose(tmp_path) == ThreadChoice(3, "cgroup CPU quota", 8)
    (folder / "cpu.cfs_quota_us").write_text("-1\n")   # no quota
    assert cgroup_cpu_limit(tmp_path, tmp_path / "none") is None


def test_slurm_cpus_per_task_caps_the_count(tmp_path):
    assert _choose(tmp_path, {"SLURM_CPUS_PER_TASK": "2"}) == \
        ThreadChoice(2, "SLURM_CPUS_PER_TASK", 8)
    # more than the affinity allows: the affinity wins
    assert _choose(tmp_path, {"SLURM_CPUS_PER_TASK": "16"}).n == 8


def test_rdx_num_threads_overrides_everything(tmp_path):
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    env = {"RDX_NUM_THREADS": "12", "OMP_NUM_THREADS": "2", "SLURM_CPUS_PER_TASK": "1"}
    choice = _choose(tmp_path, env)
    assert choice == ThreadChoice(12, "RDX_NUM_THREADS", 8) and choice.tells_runtimes


def test_the_users_omp_num_threads_is_followed_and_not_retold(tmp_path):
    choice = _choose(tmp_path, {"OMP_NUM_THREADS": "3,1"})   # one count per nesting level
    assert choice == ThreadChoice(3, "OMP_NUM_THREADS", 8)
    assert not choice.tells_runtimes   # torch and the BLAS libraries read it themselves


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5"])
def test_a_bad_value_is_ignored_with_a_warning(tmp_path, bad):
    with pytest.warns(RuntimeWarning, match=r"RDX_NUM_THREADS=.* not a positive integer; "
                                            r"rdx ignores it and uses 8 threads"):
        assert _choose(tmp_path, {"RDX_NUM_THREADS": bad}) == ThreadChoice(8, "CPU affinity", 8)
    with pytest.warns(RuntimeWarning, match="SLURM_CPUS_PER_TASK"):
        assert _choose(tmp_path, {"SLURM_CPUS_PER_TASK": bad}).n == 8


def test_the_cli_flag_sets_the_override(monkeypatch, capsys):
    monkeypatch.setenv("RDX_NUM_THREADS", "5")   # restored after the test
    assert cli._take_threads(["--threads", "3", "explain", "--help"]) == ["explain", "--help"]
    assert os.environ["RDX_NUM_THREADS"] == "3" and threads.num_threads() == 3
    assert cli._take_threads(["--threads=1", "run"]) == ["run"]
    assert threads.thread_choice() == (1, "RDX_NUM_THREADS", threads.affinity_cpus())
    assert cli._take_threads(["explain", "--threads", "2"]) == ["explain", "--threads", "2"]
    for bad in (["--threads", "zero"], ["--threads"], ["--threads=0", "run"]):
        with pytest.raises(SystemExit) as exc:
            cli._take_threads(bad)
        assert exc.value.code == 2
    assert "--threads needs a positive integer" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the process

def test_import_rdx_sets_a_passive_wait_policy_and_imports_no_torch():
    code = ("import json, os, sys, rdx; print(json.dumps([os.environ.get('OMP_WAIT_POLICY'), "
            "'torch' in sys.modules, rdx.threads.describe()]))")
    policy, torch_loaded, described = json.loads(_python(code, _clean_env()))
    assert policy == "PASSIVE" and torch_loaded is False
    assert described["wait_policy_from"] == "rdx" and described["omp_wait_policy"] == "PASSIVE"
    assert described["threads"] >= 1 and described["threads_from"] in threads.SOURCES


@pytest.mark.parametrize("user", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "1000"},
                                  {"KMP_BLOCKTIME": "5"}])
def test_a_wait_policy_the_user_chose_is_left_alone(user):
    code = ("import json, os, rdx; print(json.dumps([os.environ.get('OMP_WAIT_POLICY'), "
            "rdx.threads.describe()['wait_policy_from']]))")
    policy, source = json.loads(_python(code, _clean_env(**user)))
    assert policy == user.get("OMP_WAIT_POLICY") and source == "user"


def test_openblas_spins_briefly_unless_the_user_chose():
    code = ("import json, os, rdx; print(json.dumps([os.environ.get('OPENBLAS_THREAD_TIMEOUT'),"
            " rdx.threads.describe()['openblas_thread_timeout']]))")
    assert json.loads(_python(code, _clean_env())) == ["4", "4"]
    for user in ({"OPENBLAS_THREAD_TIMEOUT": "20"}, {"GOTO_THREAD_TIMEOUT": "12"}):
        got = json.loads(_python(code, _clean_env(**user)))[0]
        assert got == user.get("OPENBLAS_THREAD_TIMEOUT"), user
    # the OpenMP choice and the OpenBLAS one are independent
    policy = _python("import os, rdx; print(os.environ.get('OMP_WAIT_POLICY'), "
                     "os.environ.get('OPENBLAS_THREAD_TIMEOUT'))",
                     _clean_env(OMP_WAIT_POLICY="ACTIVE"))
    assert policy == "ACTIVE 4"


def test_the_command_line_sets_the_wait_policy_too():
    code = ("import os, sys; sys.argv = ['rdx', '--version']\n"
            "from rdx.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(os.environ.get('OMP_WAIT_POLICY'))")
    assert _python(code, _clean_env()) == "PASSIVE"


def test_torch_gets_the_count_when_it_is_imported_and_keeps_its_seed():
    # rdx's hook and backend.seeded's hook both wrap torch's import: both must take effect
    code = ("import json, rdx\nfrom rdx.backend import seeded, n_cpu_threads\n"
            "with seeded(7):\n    import torch\n    a = torch.rand(3).tolist()\n"
            "torch.manual_seed(7)\n"
            "print(json.dumps([torch.get_num_threads(), n_cpu_threads(), "
            "a == torch.rand(3).tolist()]))")
    assert json.loads(_python(code, _clean_env(RDX_NUM_THREADS="1"))) == [1, 1, True]


def test_torch_loaded_before_rdx_gets_the_count_unless_the_user_set_one():
    code = ("import json, torch; {user}import rdx; print(json.dumps(torch.get_num_threads()))")
    env = _clean_env(SLURM_CPUS_PER_TASK="1")
    assert json.loads(_python(code.format(user=""), env)) == 1
    assert json.loads(_python(code.format(user="torch.set_num_threads(3); "), env)) == 3


def test_the_blas_pools_get_the_override_and_numpy_work_does_not_load_torch():
    code = ("import json, sys, rdx, numpy as np\nfrom rdx.backend import n_cpu_threads\n"
            "n = n_cpu_threads()\nfrom threadpoolctl import threadpool_info\n"
            "blas = sorted({i['num_threads'] for i in threadpool_info() "
            "if i['user_api'] == 'blas'})\n"
            "print(json.dumps([n, blas, 'torch' in sys.modules]))")
    assert json.loads(_python(code, _clean_env(RDX_NUM_THREADS="1"))) == [1, [1], False]
