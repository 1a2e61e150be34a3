"""Memory checks of the similarity measures that hold n×n matrices (RBF CKA, HSIC, RSA):
refused before computing when they would not fit."""
from __future__ import annotations

import numpy as np
import torch

from ..backend import available_memory_bytes, format_bytes, memory_limit_from_env
from ..errors import RDXInputError


def check_pairwise_memory(what: str, n: int, bytes_per_n2: float, device: torch.device, *,
                          matrices: str) -> None:
    """Refuse a measure that needs ``bytes_per_n2 · n²`` bytes when that exceeds 90 % of the
    available memory (``RDX_MEMORY_LIMIT_GB`` caps it), naming the figure, the largest n that
    fits and the measures that scale."""
    need = bytes_per_n2 * float(n) * n
    avail = available_memory_bytes(device)
    if need <= 0.9 * avail:
        return
    fit = int(np.sqrt(0.9 * avail / bytes_per_n2))
    env = memory_limit_from_env() if device.type == "cpu" else None
    capped = " (capped by RDX_MEMORY_LIMIT_GB)" if env is not None and env <= avail else ""
    raise RDXInputError(
        f"{what} at n={n} images needs about {format_bytes(need)} of {device.type.upper()} "
        f"memory ({matrices}; memory grows with n²), but only {format_bytes(avail)} is "
        f"available{capped}. Compute it on a random subsample of at most {fit} images (the "
        "same rows of both representations), or use a measure that scales to this n: "
        "cka_linear (feature space, O(n·d²) time, O(d²) memory) or mutual_knn / cknna / "
        "jaccard_knn (k-NN, O(n·k) memory).")
