"""Experiment configs: one YAML file per experiment, a base plus comparisons overriding it.

```yaml
experiment: mnist_835            # output folder name: outputs/<experiment>/<comparison>/
seed: 42                         # re-seeds numpy/torch/random before every method
base:                            # everything a comparison needs; comparisons override parts
  image_selection: {dataset: mnist, split: train, target_classes: [8, 3, 5],
                    num_images: 500, seed: 0}
  representations:
    a: {model: convnet, checkpoint: checkpoints/mnist_835/epoch=1-step=184.pt, layer: gap}
    b: {features: path/to/B.npy}            # or precomputed features (rows = selected images)
  methods:
    - {method: rdx, name: rdx_nb_lb_spectral, n_explanations: 3, gamma: 0.05}
comparisons:
  - name: strong_vs_expert                  # deep-merged over base
    representations: {a: {checkpoint: checkpoints/mnist_835/epoch=0-step=136.pt}}
```

Relative paths are relative to the repository root (the current directory); configs hold
no absolute paths and nothing is generated from them. Everything is validated before any
work starts, and errors name the key path (``comparisons[1].methods[0].gamma: ...``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RDXInputError
from ..evaluation.known_difference import validate_known_difference
from ..io import read_yaml

TOP_KEYS = {"experiment", "seed", "base", "comparisons", "description"}
COMPARISON_KEYS = {"name", "description", "image_selection", "representations", "methods",
                   "known_difference"}
SELECTION_KEYS = {"dataset", "split", "root", "data_root", "target_classes", "num_images",
                  "seed", "strategy"}
#: ``per_class``: seeded sampling per target class (the original's ``ground_truth``);
#: ``full_dataset``: every image of the split in dataset order (rows of precomputed features).
SELECTION_STRATEGIES = ("per_class", "full_dataset")
MODEL_KEYS = {"model", "checkpoint", "layer", "pretrained", "model_kwargs", "batch_size"}
FEATURE_KEYS = {"features", "exclude_dims"}


@dataclass
class Comparison:
    """One fully merged, validated comparison of an experiment."""

    experiment: str
    name: str
    seed: int
    image_selection: dict
    representations: dict      # {"a": {...}, "b": {...}}
    methods: list[dict]
    known_difference: dict | None
    raw: dict                  # the merged dict, recorded next to the results


def deep_merge(base: dict, override: dict) -> dict:
    """``override`` merged into a copy of ``base`` (dicts merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _fail(path: str, msg: str) -> RDXInputError:
    return RDXInputError(f"{path}: {msg}")


def _check_keys(d: Any, allowed: set[str], path: str, required: set[str] = frozenset()) -> None:
    if not isinstance(d, dict):
        raise _fail(path, f"expected a mapping, got {type(d).__name__}")
    unknown = set(d) - allowed
    if unknown:
        raise _fail(path, f"unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    missing = required - set(d)
    if missing:
        raise _fail(path, f"missing key(s) {sorted(missing)}")


def _check_selection(sel: dict, path: str) -> None:
    _check_keys(sel, SELECTION_KEYS, path, {"dataset"})
    if sel.get("strategy", "per_class") not in SELECTION_STRATEGIES:
        raise _fail(f"{path}.strategy", f"expected one of {SELECTION_STRATEGIES}, got "
                    f"{sel['strategy']!r}")
    tc = sel.get("target_classes")
    if tc is not None and not (isinstance(tc, list) and all(isinstance(c, int) for c in tc)):
        raise _fail(f"{path}.target_classes", "expected a list of class ids (integers) or null")
    n = sel.get("num_images")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n <= 0):
        raise _fail(f"{path}.num_images", f"expected a positive integer or null, got {n!r}")
    if not isinstance(sel.get("seed", 0), int):
        raise _fail(f"{path}.seed", "expected an integer")


def _check_representation(rep: Any, path: str) -> None:
    if not isinstance(rep, dict):
        raise _fail(path, "expected a mapping with either 'model' or 'features'")
    if "features" in rep:
        _check_keys(rep, FEATURE_KEYS, path, {"features"})
        ex = rep.get("exclude_dims", [])
        if not (isinstance(ex, list) and all(isinstance(i, int) for i in ex)):
            raise _fail(f"{path}.exclude_dims", "expected a list of column indices")
    elif "model" in rep:
        _check_keys(rep, MODEL_KEYS, path, {"model"})
    else:
        raise _fail(path, "needs 'model' (+ checkpoint/layer) or 'features' (a .npy file)")


def _check_methods(methods: Any, path: str) -> None:
    from .methods import method, method_names

    known = method_names()
    if not isinstance(methods, list) or not methods:
        raise _fail(path, "expected a non-empty list of method entries")
    names = set()
    for i, m in enumerate(methods):
        p = f"{path}[{i}]"
        if not isinstance(m, dict) or "method" not in m:
            raise _fail(p, "each entry needs 'method' (one of " + ", ".join(sorted(known)) + ")")
        if m["method"] not in known:
            raise _fail(f"{p}.method", f"unknown method {m['method']!r}; known: "
                        + ", ".join(sorted(known)))
        name = m.get("name", m["method"])
        if name in names:
            raise _fail(f"{p}.name", f"duplicate method name {name!r} (outputs would collide)")
        names.add(name)
        params = {k: v for k, v in m.items() if k not in ("method", "name")}
        method(m["method"]).validate(params, p)


def load_experiment(path: str | Path) -> list[Comparison]:
    """Read, merge and validate an experiment config; returns its comparisons in order."""

    p = Path(path)
    doc = read_yaml(p)
    _check_keys(doc, TOP_KEYS, str(p), {"experiment", "base", "comparisons"})
    exp = doc["experiment"]
    if not isinstance(exp, str) or not exp or "/" in exp:
        raise _fail("experiment", "expected a folder name (no '/')")
    seed = doc.get("seed", 42)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise _fail("seed", f"expected a non-negative integer, got {seed!r}")
    comps = doc["comparisons"]
    if not isinstance(comps, list) or not comps:
        raise _fail("comparisons", "expected a non-empty list")
    out, seen = [], set()
    for i, c in enumerate(comps):
        cp = f"comparisons[{i}]"
        _check_keys(c, COMPARISON_KEYS, cp, {"name"})
        if c["name"] in seen or not isinstance(c["name"], str) or "/" in c["name"]:
            raise _fail(f"{cp}.name", f"expected a unique folder name, got {c['name']!r}")
        seen.add(c["name"])
        merged = deep_merge(doc["base"], c)
        _check_keys(merged, COMPARISON_KEYS, cp, {"image_selection", "representations", "methods"})
        _check_selection(merged["image_selection"], f"{cp}.image_selection")
        reps = merged["representations"]
        _check_keys(reps, {"a", "b"}, f"{cp}.representations", {"a", "b"})
        for m in ("a", "b"):
            _check_representation(reps[m], f"{cp}.representations.{m}")
        _check_methods(merged["methods"], f"{cp}.methods")
        known = validate_known_difference(merged.get("known_difference"),
                                          f"{cp}.known_difference")
        out.append(Comparison(experiment=exp, name=c["name"], seed=seed,
                              image_selection=merged["image_selection"],
                              representations=reps, methods=merged["methods"],
                              known_difference=known, raw=merged))
    return out
