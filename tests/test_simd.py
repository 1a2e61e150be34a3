"""rdx's choice of numpy's SIMD kernels (rdx.simd): AVX2 sorts on AMD Zen 4 only, and only
where the user has not chosen."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rdx.simd import AVX512_TARGETS, cpu_fields, decide, numpy_targets, slow_avx512_sort


def cpuinfo(vendor: str, family: int, flags: str) -> str:
    block = (f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: 17\n"
             f"model name\t: test CPU\nflags\t\t: {flags}\n")
    return block + "\n" + block.replace("processor\t: 0", "processor\t: 1")


ZEN4 = cpuinfo("AuthenticAMD", 25, "fpu sse2 avx2 avx512f avx512bw avx512vl")
ZEN3 = cpuinfo("AuthenticAMD", 25, "fpu sse2 avx2 fma")
ZEN5 = cpuinfo("AuthenticAMD", 26, "fpu sse2 avx2 avx512f avx512bw")
ICELAKE = cpuinfo("GenuineIntel", 6, "fpu sse2 avx2 avx512f avx512bw avx512_vbmi2")


def test_cpuinfo_fields_of_the_first_processor():
    f = cpu_fields(ZEN4)
    assert f["vendor_id"] == "AuthenticAMD" and f["cpu family"] == "25"
    assert "avx512f" in f["flags"].split()
    assert cpu_fields("") == {}


@pytest.mark.parametrize("text, slow", [(ZEN4, True), (ZEN3, False), (ZEN5, False),
                                        (ICELAKE, False), ("", False)])
def test_only_zen4_has_the_slow_avx512_sort(text, slow):
    assert slow_avx512_sort(text) is slow


def test_numpy_names_its_avx512_targets_by_version():
    assert numpy_targets("2.4.6") == numpy_targets("3.0.0") == AVX512_TARGETS["grouped"]
    assert numpy_targets("2.3.1") == numpy_targets("1.26.4") == AVX512_TARGETS["named"]
    assert "X86_V4" in AVX512_TARGETS["grouped"] and "AVX512_SKX" in AVX512_TARGETS["named"]


def test_the_users_choice_and_a_loaded_numpy_win():
    assert decide({}, ZEN4, "2.4.6", numpy_loaded=False) == AVX512_TARGETS["grouped"]
    assert decide({}, ICELAKE, "2.4.6", numpy_loaded=False) is None
    assert decide({"NPY_DISABLE_CPU_FEATURES": "AVX512_SPR"}, ZEN4, "2.4.6", False) is None
    assert decide({"NPY_ENABLE_CPU_FEATURES": "X86_V4"}, ZEN4, "2.4.6", False) is None
    assert decide({"RDX_NUMPY_AVX512": "1"}, ZEN4, "2.4.6", False) is None
    assert decide({}, ZEN4, "2.4.6", numpy_loaded=True) is None     # too late to choose
    assert decide({}, ZEN4, None, numpy_loaded=False) is None        # no numpy installed


def _child(extra_env: dict[str, str]) -> dict:
    code = ("import json, rdx, numpy\n"
            "from numpy._core._multiarray_umath import __cpu_features__ as f\n"
            "print(json.dumps({'v4': bool(f.get('X86_V4')), **rdx.simd.describe()}))")
    env = {k: v for k, v in os.environ.items()
           if k not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES",
                        "RDX_NUMPY_AVX512")}
    out = subprocess.run([sys.executable, "-c", code], env={**env, **extra_env},
                         capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_process_that_imports_rdx_first_gets_the_choice_on_this_machine():
    try:
        here = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    plain = _child({})
    if slow_avx512_sort(here):
        assert plain["numpy_simd_from"] == "rdx" and not plain["v4"]
        kept = _child({"RDX_NUMPY_AVX512": "1"})
        assert kept["numpy_simd_from"] is None and kept["v4"]
    else:
        assert plain["numpy_simd_from"] is None
    mine = _child({"NPY_DISABLE_CPU_FEATURES": "AVX512_SPR"})
    assert mine["numpy_simd_from"] == "user"
    assert mine["numpy_disabled_cpu_features"] == "AVX512_SPR"


def test_numpy_version_is_read_without_importing_numpy():
    import numpy

    from rdx.package_version import source_version
    from rdx.simd import _numpy_version

    assert _numpy_version() == numpy.__version__
    assert source_version("rdx_no_such_package") is None
    assert source_version("json") is None          # a module without version.py
