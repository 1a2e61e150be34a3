"""Up-front memory estimate of a large-n fit (``graph="knn"``): the driver process and, with
a Dask executor, each worker, by what holds the bytes.

The fit prints it before the pass starts (:func:`knn_memory_plan` → ``describe()``) and
refuses a fit whose driver would not fit (:func:`rdx.method.knn_fit.check_knn_memory`).
Every term is an upper bound of an array the fit allocates; measured peaks are in the
large-n guide.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..backend import format_bytes
from .knn_search import block_rows
from .knn_sketch import SKETCH_MAX_RANK

#: Bytes per union pair: cols, two ranks, diff (16), the direction's correction matrix (12),
#: the symmetrised one (≤ 2 entries per pair, 24) and its transposed temporary (12).
BYTES_PER_PAIR = 64
#: Fixed workspace: k-means, Lanczos vectors, grid chunks.
FIXED_BYTES = 64 * 2**20
#: Working arrays of the approximate search (rdx.method.knn_approx): a cell's candidates'
#: features and distance block, the other model's gathered listed rows, the whole reference
#: rows with their sort keys and ranks.
APPROX_WORKSPACE = 1024 * 2**20


@dataclass
class MemoryPlan:
    """Estimated bytes of the driver (``driver``) and of each Dask worker (``worker``, empty
    without an executor), by part."""

    driver: dict[str, int] = field(default_factory=dict)
    worker: dict[str, int] = field(default_factory=dict)

    @property
    def driver_total(self) -> int:
        return int(sum(self.driver.values()))

    @property
    def worker_total(self) -> int:
        return int(sum(self.worker.values()))

    def describe(self) -> str:
        """One line: totals and their parts, e.g. ``memory estimate: this process ≈ 6.1 GiB
        (features 0.6 GiB, graph 4.8 GiB, …)``."""
        def parts(d: dict[str, int]) -> str:
            return ", ".join(f"{k} {format_bytes(v)}" for k, v in d.items() if v)

        text = (f"memory estimate: this process ≈ {format_bytes(self.driver_total)} "
                f"({parts(self.driver)})")
        if self.worker:
            text += (f"; each Dask worker ≈ {format_bytes(self.worker_total)} "
                     f"({parts(self.worker)})")
        return text


def knn_memory_plan(n: int, d: int, n_neighbors: int, n_landmarks: int = 0, *,
                    search: str = "exact", executor: bool = False) -> MemoryPlan:
    """The :class:`MemoryPlan` of a large-n fit.

    Parameters
    ----------
    n : images.
    d : total feature width of the models the fit holds (both, and the mapped copies in
        aligned mode).
    n_neighbors, n_landmarks : K and m.
    search : ``"exact"`` (the blocked pass: two n-wide distance blocks and their sort keys)
        or ``"approx"`` (each listed pair's distance in the other model, the cells, and
        :data:`APPROX_WORKSPACE`).
    executor : the exact pass runs on Dask workers: the driver holds no distance block,
        each worker maps both feature files and holds its own blocks.
    """
    K = int(n_neighbors)
    m = int(min(n_landmarks, n))
    b = block_rows(n)
    blocks = 2 * 12 * n * b               # per model: float32 block + int64 sorted keys
    plan = MemoryPlan()
    # centred float32 copies (the rows are centred in blocks: no float64 copy)
    plan.driver["features"] = 4 * n * d
    plan.driver["graph"] = 2 * n * K * BYTES_PER_PAIR + 2 * 4 * n * K
    plan.driver["sketch"] = 12 * n * m + 8 * n * min(m, SKETCH_MAX_RANK)
    if search == "approx":
        plan.driver["search"] = 2 * 4 * n * K + 16 * n + APPROX_WORKSPACE
    elif not executor:
        plan.driver["distance blocks"] = blocks
    plan.driver["workspace"] = FIXED_BYTES
    if executor and search != "approx":
        # the features are mapped from the driver's files: page cache, shared by the
        # workers of one machine
        plan.worker["mapped features"] = 4 * n * d
        plan.worker["norms"] = 16 * n
        plan.worker["distance blocks"] = blocks
        plan.worker["block result"] = b * 2 * K * 12 + 2 * 4 * b * m
    return plan
