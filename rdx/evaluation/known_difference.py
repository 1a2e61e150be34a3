"""Known-difference recovery: do the grids show the difference implanted between A and B?

Experiments that implant a difference declare it in the comparison's config::

    known_difference: {type: merged_classes, classes: [3, 5], model: a}
    known_difference: {type: flip_pairs, model: a, n_classes: 10}
    known_difference: {type: masked_concept, dim: 105, model: a}
    known_difference: [{...}, {...}]        # several differences (e.g. m35 vs m49)

``model`` names the model that *lacks* the distinction (merges the classes, is invariant
to the flip, is blind to the concept). Such a model puts images together that the other
model separates, so the difference should show in that model's explanations — groups
tight in it, split in the other: ``model: a`` → ``a_over_b``, ``model: b`` → ``b_over_a``
(the *expected* direction). The opposite direction serves as a control and should score
low.

Scores per direction (each grid = one explanation's images, the no-change group excluded):

``merged_classes``
    A grid is a *hit* when at least 8 of its 9 images come from the merged classes and each
    merged class has at least 2 of them (so a grid of 3s only is a miss: it does not mix
    the merged classes). Other grid sizes ``g`` scale the thresholds: at least
    ``ceil(8g/9)`` images from the merged classes and ``max(1, floor(2g/9))`` from each.
``flip_pairs``
    Labels ``c`` (``0 ≤ c < n_classes``) are originals and ``c + n_classes`` their flipped
    copies. A grid is a hit when it holds an original and a flipped copy of the same class.
``masked_concept``
    Column ``dim`` of the *full* representation (the model that still sees the concept: B
    when model A is masked) is the concept's value. A model blind to it groups images with
    different values, so the value varies more inside that model's grids. Score of a
    direction = mean within-grid standard deviation of the value over its grids divided by
    the same over the other direction's grids (> 1: the concept varies more inside this
    direction's grids; expected direction ≫ 1, control ≪ 1). Grids of one image are skipped.

For hit types: ``hits`` (number of hit grids), ``total`` (grids), ``rate`` = hits/total.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import RDXInputError

KNOWN_DIFFERENCE_TYPES = ("merged_classes", "flip_pairs", "masked_concept")
_KEYS = {"merged_classes": {"type", "model", "classes"},
         "flip_pairs": {"type", "model", "n_classes"},
         "masked_concept": {"type", "model", "dim"}}
_HIT_TYPES = ("merged_classes", "flip_pairs")
DIRECTIONS = ("a_over_b", "b_over_a")


def _fail(path: str, msg: str) -> RDXInputError:
    return RDXInputError(f"{path}: {msg}")


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _validate_one(spec: Any, path: str) -> dict:
    if not isinstance(spec, Mapping):
        raise _fail(path, "expected a mapping like {type: merged_classes, classes: [3, 5], "
                    f"model: a}}, got {type(spec).__name__}")
    kind = spec.get("type")
    if kind not in KNOWN_DIFFERENCE_TYPES:
        raise _fail(f"{path}.type", f"expected one of {list(KNOWN_DIFFERENCE_TYPES)}, "
                    f"got {kind!r}")
    unknown = set(spec) - _KEYS[kind]
    if unknown:
        raise _fail(path, f"unknown key(s) {sorted(unknown)} for type {kind}; allowed: "
                    f"{sorted(_KEYS[kind])}")
    missing = _KEYS[kind] - set(spec)
    if missing:
        raise _fail(path, f"missing key(s) {sorted(missing)} for type {kind}")
    model = spec["model"]
    if model not in ("a", "b"):
        raise _fail(f"{path}.model", "expected 'a' or 'b' (the model that lacks the "
                    f"distinction), got {model!r}")
    out: dict[str, Any] = {"type": kind, "model": model}
    if kind == "merged_classes":
        classes = spec["classes"]
        if not (isinstance(classes, (list, tuple)) and all(_is_int(c) for c in classes)):
            raise _fail(f"{path}.classes", f"expected a list of class ids (integers), "
                        f"got {classes!r}")
        if len(set(classes)) < 2 or len(set(classes)) != len(classes):
            raise _fail(f"{path}.classes", "expected at least two distinct class ids (the "
                        f"classes the model merges), got {list(classes)!r}")
        out["classes"] = [int(c) for c in classes]
    elif kind == "flip_pairs":
        nc = spec["n_classes"]
        if not _is_int(nc) or nc < 1:
            raise _fail(f"{path}.n_classes", "expected a positive integer (flipped copies of "
                        f"class c have label c + n_classes), got {nc!r}")
        out["n_classes"] = int(nc)
    else:
        dim = spec["dim"]
        if not _is_int(dim) or dim < 0:
            raise _fail(f"{path}.dim", "expected a non-negative column index of the full "
                        f"representation, got {dim!r}")
        out["dim"] = int(dim)
    return out


def validate_known_difference(spec: Any, path: str = "known_difference"
                              ) -> dict | list[dict] | None:
    """Check a ``known_difference`` declaration and return it normalised.

    Parameters
    ----------
    spec : mapping, list of mappings or None
        The declaration (see the module docstring); None means "no known difference".
    path : str
        Key path used in error messages, e.g. ``"comparisons[2].known_difference"``.

    Returns
    -------
    dict, list of dict or None
        Plain dicts with ``type``, ``model`` and the type's key (``classes`` as a list of
        ints, ``n_classes`` or ``dim`` as int); a list stays a list.

    Raises
    ------
    RDXInputError
        Naming the offending key path, e.g. ``known_difference[1].classes: ...``.
    """
    if spec is None:
        return None
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise _fail(path, "expected a mapping or a non-empty list of mappings")
        return [_validate_one(s, f"{path}[{i}]") for i, s in enumerate(spec)]
    return _validate_one(spec, path)


def expected_direction(spec: Mapping[str, Any]) -> str:
    """Direction in which the difference should show: ``a_over_b`` when model A lacks it."""
    return "a_over_b" if spec["model"] == "a" else "b_over_a"


def merged_classes_hit(grid_labels: Sequence[int], classes: Sequence[int]) -> bool:
    """Hit rule for merged classes (see the module docstring for the size scaling)."""
    lab = np.asarray(grid_labels)
    g = len(lab)
    counts = [int((lab == c).sum()) for c in classes]
    need_in = (8 * g + 8) // 9             # ceil(8g/9): 8 of 9
    need_each = max(1, (2 * g) // 9)       # floor(2g/9): 2 of 9
    return g > 0 and sum(counts) >= need_in and min(counts) >= need_each


def flip_pair_hit(grid_labels: Sequence[int], n_classes: int) -> bool:
    """Hit rule for flips: an original of class c and a flipped copy (c + n_classes)."""
    lab = {int(x) for x in grid_labels}
    return any(c in lab and c + n_classes in lab for c in range(n_classes))


def _labels_for(labels: Any, n_needed: int, kind: str) -> np.ndarray:
    if labels is None:
        raise RDXInputError(f"known_difference type {kind} needs the images' labels "
                            "(representations.npz/images.json of the run hold them).")
    lab = np.asarray(labels).reshape(-1)
    if lab.size < n_needed:
        raise RDXInputError(f"grids index image {n_needed - 1} but only {lab.size} labels "
                            "were given.")
    return lab


def _score_hits(spec: dict, grids: Sequence[Sequence[int]], labels: np.ndarray) -> list[bool]:
    out = []
    for g in grids:
        gl = labels[np.asarray(g, dtype=np.int64)]
        out.append(merged_classes_hit(gl, spec["classes"]) if spec["type"] == "merged_classes"
                   else flip_pair_hit(gl, spec["n_classes"]))
    return out


def _within_std(values: np.ndarray, grids: Sequence[Sequence[int]]) -> float:
    stds = [float(values[np.asarray(g, dtype=np.int64)].std()) for g in grids if len(g) >= 2]
    return float(np.mean(stds)) if stds else float("nan")


def _masked_concept(spec: dict, grids_by_direction: Mapping[str, Sequence[Sequence[int]]],
                    A: Any, B: Any) -> dict[str, dict]:
    full = B if spec["model"] == "a" else A
    which = "B" if spec["model"] == "a" else "A"
    if full is None:
        raise RDXInputError(f"known_difference masked_concept with model {spec['model']} "
                            f"needs the full representation {which} (pass A= and B=).")
    full = np.asarray(full)
    if full.ndim != 2 or not 0 <= spec["dim"] < full.shape[1]:
        raise RDXInputError(f"known_difference.dim={spec['dim']} is not a column of the full "
                            f"representation {which} (shape {full.shape}).")
    values = full[:, spec["dim"]].astype(np.float64)
    within = {d: _within_std(values, grids_by_direction.get(d, [])) for d in DIRECTIONS}
    out = {}
    for d in grids_by_direction:
        other = within["b_over_a" if d == "a_over_b" else "a_over_b"]
        ratio = within[d] / other if np.isfinite(other) and other > 0 else float("nan")
        out[d] = {"score": ratio, "within_std": within[d], "other_within_std": other,
                  "population_std": float(values.std())}
    return out


def score_known_difference(spec: Any, grids_by_direction: Mapping[str, Sequence[Sequence[int]]],
                           labels: Any = None, A: Any = None, B: Any = None, *,
                           validated: bool = False) -> dict[str, dict]:
    """Score how well each direction's grids show the declared difference.

    Parameters
    ----------
    spec : mapping or list of mappings
        A ``known_difference`` declaration (validated here unless ``validated``: the
        config layer validates it once and passes ``validated=True``).
    grids_by_direction : {"a_over_b": [[i, ...], ...], "b_over_a": [...]}
        Image indices of each explanation grid (no-change group excluded).
    labels : (n,) array, optional
        Class label of every image (needed by ``merged_classes`` and ``flip_pairs``).
    A, B : (n, d) arrays, optional
        The representations (``masked_concept`` reads the full one).

    Returns
    -------
    dict
        Per direction present in ``grids_by_direction``::

            {"hits": int|None, "total": int|None, "rate": float|None, "hit_grids": [int],
             "expected": bool, "score": float|None, "parts": [per-declaration results]}

        ``hits``/``total``/``rate`` come from the hit types (None without one),
        ``score`` from ``masked_concept`` (None without one; NaN when undefined, e.g. the
        other direction has no grid). ``expected`` is True when some declaration expects
        the difference in this direction. With several declarations, a direction is scored
        against those that expect it (a grid is a hit when it hits any of them; scores are
        averaged); a direction no declaration expects is scored against all of them (the
        control: hits there are the difference showing in the wrong direction).
    """
    specs = spec if validated else validate_known_difference(spec)
    if specs is None:
        raise RDXInputError("known_difference: nothing declared to score.")
    specs = specs if isinstance(specs, list) else [specs]
    for d in grids_by_direction:
        if d not in DIRECTIONS:
            raise RDXInputError(f"unknown direction {d!r}; use 'a_over_b' or 'b_over_a'")
    n_needed = 1 + max((int(np.max(g)) for grids in grids_by_direction.values()
                        for g in grids if len(g)), default=-1)
    lab = None
    if any(s["type"] in _HIT_TYPES for s in specs):
        lab = _labels_for(labels, n_needed, next(s["type"] for s in specs
                                                 if s["type"] in _HIT_TYPES))
    per_spec = []
    for s in specs:
        if s["type"] in _HIT_TYPES:
            per_spec.append({d: _score_hits(s, grids, lab)
                             for d, grids in grids_by_direction.items()})
        else:
            per_spec.append(_masked_concept(s, grids_by_direction, A, B))
    out: dict[str, dict] = {}
    for d, grids in grids_by_direction.items():
        expecting = [i for i, s in enumerate(specs) if expected_direction(s) == d]
        used = expecting or list(range(len(specs)))
        parts = []
        for i, s in enumerate(specs):
            part = {"type": s["type"], "model": s["model"],
                    "expected": expected_direction(s) == d}
            if s["type"] in _HIT_TYPES:
                h = per_spec[i][d]
                part.update(hits=int(sum(h)), total=len(h),
                            rate=sum(h) / len(h) if h else None,
                            hit_grids=[j for j, x in enumerate(h) if x])
            else:
                part.update(per_spec[i][d])
            parts.append(part)
        hit_used = [i for i in used if specs[i]["type"] in _HIT_TYPES]
        res: dict[str, Any] = {"hits": None, "total": None, "rate": None, "hit_grids": [],
                               "expected": bool(expecting), "score": None, "parts": parts}
        if hit_used:
            hit = [any(per_spec[i][d][j] for i in hit_used) for j in range(len(grids))]
            res.update(hits=int(sum(hit)), total=len(hit),
                       rate=sum(hit) / len(hit) if hit else None,
                       hit_grids=[j for j, x in enumerate(hit) if x])
        masked_used = [i for i in used if specs[i]["type"] == "masked_concept"]
        if masked_used:
            res["score"] = float(np.mean([per_spec[i][d]["score"] for i in masked_used]))
        out[d] = res
    return out
