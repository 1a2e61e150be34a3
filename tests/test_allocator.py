"""reuse_freed_memory: freed memory is reused instead of being mapped and zeroed again, and
given back on leaving. Each case runs in a fresh interpreter (malloc's state is per process).
"""
import json
import subprocess
import sys

import pytest

from rdx.allocator import supported

pytestmark = pytest.mark.skipif(not supported(), reason="glibc's malloc only")

# four 24 MiB arrays touched and freed, three times; page faults and resident memory after
PROBE = """
import json, resource, sys
import numpy as np
from rdx.allocator import reuse_freed_memory

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def resident_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20

def churn():
    before = faults()
    arrays = [np.ones(3 * 2**20) for _ in range(4)]
    del arrays
    return faults() - before

def run():
    return [churn() for _ in range(3)]

out = {}
mode = sys.argv[1]
if mode == "default":
    out["faults"] = run()
elif mode == "scoped":
    from rdx.allocator import kept_free_bytes
    from rdx.backend import available_memory_bytes
    import psutil
    with reuse_freed_memory():
        out["faults"] = run()
        out["kept_mib"] = resident_mib()
        out["kept_free_mib"] = kept_free_bytes() / 2**20
        out["available_over_os_mib"] = (available_memory_bytes("cpu")
                                        - psutil.virtual_memory().available) / 2**20
    out["kept_free_after_mib"] = kept_free_bytes() / 2**20
    out["after_mib"] = resident_mib()
    big = np.ones(2**24)          # 128 MiB: mapped on its own again, unmapped when freed
    del big
    out["after_big_mib"] = resident_mib()
elif mode == "nested":
    with reuse_freed_memory():
        with reuse_freed_memory():
            run()
        out["faults"] = run()      # the inner exit leaves the outer setting in place
print(json.dumps(out))
"""


def probe(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          check=True, timeout=120)
    return json.loads(done.stdout)


def test_freed_memory_is_reused_inside_and_given_back_on_leaving():
    default, scoped = probe("default"), probe("scoped")
    pages = 4 * 24 * 2**20 // 4096
    # glibc's default gives the freed arrays back and the kernel faults them in again on
    # every round (4 KiB pages, or 2 MiB ones where transparent huge pages are used)
    assert default["faults"][2] > 40
    # kept in the heap: the later rounds touch pages already there
    assert scoped["faults"][2] * 10 < default["faults"][2]
    assert scoped["faults"][2] < pages // 100
    # on leaving, malloc_trim gives the ~96 MiB kept back to the kernel, and a large array
    # is mapped on its own again: freeing it gives its memory back at once
    assert scoped["kept_mib"] - scoped["after_mib"] > 64
    assert scoped["after_big_mib"] - scoped["after_mib"] < 16


def test_memory_kept_for_reuse_counts_as_available():
    """A re-fit's memory check must not refuse what the previous re-fit left for it."""
    scoped = probe("scoped")
    assert scoped["kept_free_mib"] > 90                 # the four freed 24 MiB arrays
    # the operating system's figure plus what malloc keeps (both read a moment apart)
    assert abs(scoped["available_over_os_mib"] - scoped["kept_free_mib"]) < 48
    assert scoped["kept_free_after_mib"] == 0


def test_nested_uses_keep_the_setting_until_the_last_one_leaves():
    default, nested = probe("default"), probe("nested")
    assert nested["faults"][2] * 10 < default["faults"][2]
