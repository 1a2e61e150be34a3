"""Cost of the rows' check (:mod:`rdx.method.row_check`) against a plain RDX fit.

    .venv/bin/python benchmarks/bench_row_check.py --n 1500,10000 --repeat 3

For each n: two models of clearly clustered images (768 and 512 features, the widths of
ViT-B and ResNet-18 embeddings), and the seconds of the check on the aligned pair (the
path every fit takes), on B shuffled (the refusal: the structure of both is measured too),
and of a plain dense CPU fit (``check_rows=False``). Best of ``--repeat``.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np


def features(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(seed)
    lab = r.integers(0, 20, n)
    Z = r.standard_normal((20, 8))[lab] * 6.0 + r.standard_normal((n, 8))

    def model(width: int, act) -> np.ndarray:
        H = act(Z @ (r.standard_normal((8, width)) / math.sqrt(8)) + r.standard_normal(width))
        return (H + 0.1 * H.std() * r.standard_normal(H.shape)).astype(np.float32)
    return model(768, lambda h: np.maximum(h, 0)), model(512, np.tanh)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", default="1500,10000")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--fit-repeat", type=int, default=1)
    args = p.parse_args()

    import rdx  # noqa: F401  (threads first)
    from rdx import RDX
    from rdx.errors import RDXInputError
    from rdx.method.row_check import check_rows_aligned, row_alignment

    for n in (int(x) for x in args.n.split(",")):
        A, B = features(n)
        shuffled = B[np.random.default_rng(1).permutation(n)]
        assert row_alignment(A, B).verdict == "aligned"

        def refused() -> None:
            try:
                check_rows_aligned(A, shuffled)
            except RDXInputError:
                return
            raise AssertionError("a shuffled B passed")
        aligned = best(lambda: row_alignment(A, B), args.repeat)
        refusal = best(refused, args.repeat)
        fit = best(lambda: RDX(device="cpu", graph="dense").fit(A, B, check_rows=False),
                   args.fit_repeat)
        print(f"n={n}: check {aligned:.3f} s (aligned), {refusal:.3f} s (shuffled, refused); "
              f"plain fit {fit:.2f} s; check / fit = {aligned / fit:.1%}", flush=True)


if __name__ == "__main__":
    main()
