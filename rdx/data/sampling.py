"""Per-class seeded image selection, exactly as the original runner's ``image_selection``
with ``image_group_strategy: ground_truth``."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import RDXInputError


def select_per_class(ids: Sequence[str], labels: np.ndarray, target_classes: Sequence[int] | None,
                     num_images: int | None, seed: int = 0) -> np.ndarray:
    """Indices of the selected images, classes concatenated in ``target_classes`` order.

    For each target class: its images sorted by id (string order), shuffled by a fresh
    ``numpy.random.default_rng(seed)``, the first ``num_images`` kept (all if None or if the
    class has fewer). ``target_classes=None`` means every class, ascending.
    """
    labels = np.asarray(labels)
    classes = np.unique(labels) if target_classes is None else list(target_classes)
    ids_arr = np.asarray(ids, dtype=object)
    chosen = []
    for c in classes:
        members = np.flatnonzero(labels == c)
        if len(members) == 0:
            raise RDXInputError(f"class {c!r} has no images in this dataset (classes present: "
                                f"{np.unique(labels).tolist()[:20]}).")
        members = members[np.argsort(ids_arr[members].astype(str), kind="stable")]
        np.random.default_rng(seed).shuffle(members)
        chosen.append(members if num_images is None else members[:num_images])
    return np.concatenate(chosen)
