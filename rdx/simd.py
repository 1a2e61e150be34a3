"""Which of numpy's SIMD kernels rdx sorts with.

numpy runs, per function, the widest SIMD kernel the CPU supports. On AMD Zen 4 (x86
family 0x19 with AVX-512) that choice is the slow one for sorting: numpy's AVX-512 sort,
argsort and partition kernels (x86-simd-sort) write through masked compress stores
(``vpcompressd``/``vpcompressq`` to memory), which Zen 4 executes in microcode. On this
project's 2-core Zen 4 machine they sort rows of 10 000 int64 keys 3.5× and float32 values
3.6× slower than numpy's AVX2 kernels on the same cores (40 vs 142 and 69 vs 252 million
values per second on one thread: ``benchmarks/bench_cli.py --sort``). Sorting every row is most of RDX's rank pass, so there rdx prefers numpy's
AVX2 kernels: :func:`choose` sets ``NPY_DISABLE_CPU_FEATURES`` to numpy's AVX-512 dispatch
targets before numpy loads. Zen 4 runs 512-bit arithmetic as two 256-bit halves, so the
other kernels lose nothing measurable (whole ``rdx explain`` at n = 10 000: 14.8 → 9.7 s).

The user's choice wins: nothing is set when ``NPY_DISABLE_CPU_FEATURES`` or
``NPY_ENABLE_CPU_FEATURES`` is set, or with ``RDX_NUMPY_AVX512=1``. Like the OpenMP wait
policy (:mod:`rdx.threads`), numpy reads the variable once, when it loads: the ``rdx``
command always comes first; a script that imports numpy before rdx keeps numpy's choice.
Intel CPUs, Zen 5 (family 0x1A, which fixed the compress store), Zen 3 and ARM keep
numpy's own choice. Imports nothing heavy (not numpy itself).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

#: Variables with which a user chooses numpy's SIMD kernels (either set → left alone).
USER_VARIABLES = ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")
#: rdx's own switch: ``1`` keeps numpy's AVX-512 kernels on Zen 4.
KEEP_VARIABLE = "RDX_NUMPY_AVX512"
#: numpy's AVX-512 dispatch targets: numpy ≥ 2.4 groups them as X86_V4 and above;
#: earlier versions name each one.
AVX512_TARGETS = {"grouped": "X86_V4 AVX512_ICL AVX512_SPR",
                  "named": "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX "
                           "AVX512_CNL AVX512_ICL AVX512_SPR"}


def cpu_fields(cpuinfo: str) -> dict[str, str]:
    """``vendor_id``, ``cpu family`` and ``flags`` of the first processor in a
    ``/proc/cpuinfo`` text (empty where absent)."""
    out: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if out:
                break      # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("vendor_id", "cpu family", "flags"):
            out[key] = value.strip()
    return out


def slow_avx512_sort(cpuinfo: str) -> bool:
    """True on AMD Zen 4: family 0x19 (25) with AVX-512 (Zen 3, the same family, has none)."""
    f = cpu_fields(cpuinfo)
    return f.get("vendor_id") == "AuthenticAMD" and f.get("cpu family") == "25" \
        and "avx512f" in f.get("flags", "").split()


def numpy_targets(version: str) -> str:
    """The AVX-512 dispatch targets to disable for numpy ``version`` (e.g. ``"2.4.6"``)."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return AVX512_TARGETS["grouped"]
    return AVX512_TARGETS["grouped" if (major, minor) >= (2, 4) else "named"]


def decide(environ: Mapping[str, str], cpuinfo: str, numpy_version: str | None,
           numpy_loaded: bool) -> str | None:
    """The ``NPY_DISABLE_CPU_FEATURES`` value rdx should set, or None to leave numpy's
    choice (see the module docstring for when)."""
    if numpy_loaded or numpy_version is None:
        return None
    if any(environ.get(v) for v in USER_VARIABLES) or environ.get(KEEP_VARIABLE) == "1":
        return None
    return numpy_targets(numpy_version) if slow_avx512_sort(cpuinfo) else None


def _read_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace")[:65536]
    except OSError:       # not Linux, or no /proc: nothing to decide from
        return ""


def _numpy_version() -> str | None:
    """numpy's version without importing it (importlib.metadata would cost ``rdx --help``
    30 ms); None when numpy is not found."""
    from .package_version import source_version

    return source_version("numpy")


_STATE: dict[str, str | None] = {}


def choose(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Set ``NPY_DISABLE_CPU_FEATURES`` where :func:`decide` says so (once per process);
    returns the value set, or None."""
    if "set" in _STATE:
        return _STATE["set"]
    env = os.environ if environ is None else environ
    value = None
    if sys.platform.startswith("linux") and "numpy" not in sys.modules:
        cpuinfo = _read_cpuinfo()
        # the version lookup only where it matters (cheap, but not free)
        version = _numpy_version() if slow_avx512_sort(cpuinfo) else None
        value = decide(env, cpuinfo, version, numpy_loaded=False)
        if value is not None:
            env["NPY_DISABLE_CPU_FEATURES"] = value
    _STATE["set"] = value
    return value


def numpy_cpu_tables() -> tuple[dict[str, bool], list[str], list[str]]:
    """numpy's CPU feature table (what this process may use), its compiled-in baseline and
    its dispatch targets. Imports numpy."""
    try:
        from numpy._core._multiarray_umath import (__cpu_baseline__ as base,
                                                   __cpu_dispatch__ as disp,
                                                   __cpu_features__ as feats)
    except ImportError:   # numpy < 2
        from numpy.core._multiarray_umath import (__cpu_baseline__ as base,
                                                  __cpu_dispatch__ as disp,
                                                  __cpu_features__ as feats)
    return dict(feats), list(base), list(disp)


def numpy_level() -> str:
    """The highest SIMD target numpy dispatches to in this process (e.g. ``AVX512_ICL``,
    ``X86_V3``, ``ASIMD``): the last enabled entry of its baseline and dispatch lists.
    Imports numpy."""
    feats, base, disp = numpy_cpu_tables()
    on = [t for t in [*base, *disp] if feats.get(t)]
    return on[-1] if on else "baseline"


def describe() -> dict[str, str | None]:
    """numpy's SIMD choice in this process, for the record next to results:
    ``numpy_disabled_cpu_features`` (the variable's value) and ``numpy_simd_from``
    ("rdx" when rdx set it, "user" when the user did, None when neither)."""
    value = os.environ.get("NPY_DISABLE_CPU_FEATURES")
    source = "rdx" if _STATE.get("set") else ("user" if value else None)
    return {"numpy_disabled_cpu_features": value, "numpy_simd_from": source}


__all__ = ["AVX512_TARGETS", "KEEP_VARIABLE", "USER_VARIABLES", "choose", "cpu_fields",
           "decide", "describe", "numpy_cpu_tables", "numpy_level", "numpy_targets",
           "slow_avx512_sort"]
