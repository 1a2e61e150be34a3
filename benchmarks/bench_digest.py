"""Cost of verifying stored data: the content digest of a features file against reading it.

Writes an ``n × d`` float32 array as ``.npy`` and ``.npz`` in a temporary folder and times
(best and median of ``--repeat`` runs, the file in the page cache, as on a reuse):
``rdx.io.file_sha256`` (the digest every stored-data check computes), hashlib's BLAKE2b
over the same bytes (the alternative), ``numpy.load`` of each file, and
``rdx.io.load_array`` of the ``.npz`` inside a command (which hashes the file it reads, for
the mid-run check of inputs).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_digest.py                  # 10^4 x 768
    .venv/bin/python benchmarks/bench_digest.py --n 100000 --repeat 5
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def timed(f: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(best, median) seconds of ``repeat`` calls after one warm-up call."""
    f()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main() -> None:
    from rdx.input_files import command_scope
    from rdx.io import file_sha256, load_array

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    x = np.random.default_rng(0).standard_normal((args.n, args.d)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        npy, npz = Path(tmp) / "f.npy", Path(tmp) / "f.npz"
        np.save(npy, x)
        np.savez(npz, features=x)
        data = npy.read_bytes()

        def in_command() -> None:
            with command_scope():
                load_array(f"{npz}:features")

        cases = {"file_sha256 (.npy)": lambda: file_sha256(npy),
                 "BLAKE2b of the bytes": lambda: hashlib.blake2b(data).hexdigest(),
                 "numpy.load (.npy)": lambda: np.load(npy),
                 "numpy.load (.npz)": lambda: np.load(npz)["features"],
                 "load_array (.npz, in a command: + digest)": in_command}
        print(f"{args.n} x {args.d} float32, {npy.stat().st_size / 1e6:.1f} MB, best / median "
              f"of {args.repeat}:")
        for name, f in cases.items():
            best, median = timed(f, args.repeat)
            print(f"  {name:<44} {best * 1000:8.1f} ms  {median * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
