"""Run an experiment: image selection → features (cached) → each method → JSON + grids.

Layout of the results (all writes atomic; a method counts as done once its
``explanations.json`` exists, so an interrupted run loses nothing already finished):

```
outputs/<experiment>/<comparison>/
  run.json                 config (merged), seed, versions, git commit, timings, status
  images.json              the selected images: dataset, split, indices, ids, labels
  representations.npz      a, b (n×d float32 features of the selected images), labels
  alignment.json           aligned runs: CKA curves and best steps of the maps A→B, B→A
  alignment.npz            aligned runs: a_mapped = f_AB(A), b_mapped = f_BA(B)
  <method name>/explanations.json       schema of `rdx explain` + a "run" record
  <method name>/concepts.npz            baselines/probe: n×k codes of the shown concepts, ...
  <method name>/graphs.npz              rdx with save_graphs: true — the n×n matrices
  <method name>/grids/<direction>_<k>.png, <direction>_summary.png
outputs/cache/features/    features keyed by (model, weights, layer, transform, images)
```
"""
from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .._backend import seed_everything
from ..data import ImageDataset
from ..data.selection import LazyImages, select_images
from ..errors import RDXInputError
from ..io import load_array, save_npz_atomic, versions, write_json_atomic
from .config import Comparison, load_experiment
from .methods import MethodContext, method, save_method_outputs


def _array_digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _representation(spec: dict, which: str, dataset: ImageDataset, indices: np.ndarray,
                    *, device: str, cache_dir: Path, progress: bool) -> np.ndarray:
    """Features of the selected images for one side of the comparison."""
    n = len(indices)
    if "features" in spec:
        X = load_array(spec["features"], f"representations.{which}.features")
        if X.ndim != 2 or X.shape[0] != n:
            raise RDXInputError(
                f"representations.{which}.features: {spec['features']} has shape {X.shape}, "
                f"but the image selection has {n} images (rows must be the selected images, "
                "in selection order).")
        drop = spec.get("exclude_dims") or []
        if drop:
            bad = [c for c in drop if not -X.shape[1] <= c < X.shape[1]]
            if bad:
                raise RDXInputError(f"representations.{which}.exclude_dims: {bad} out of range "
                                    f"for {X.shape[1]} columns.")
            X = np.delete(X, drop, axis=1)
        return X
    from ..models.extract import extract_features
    from ..models.zoo import load_model

    loaded = load_model({k: v for k, v in spec.items() if k != "batch_size"})
    return extract_features(loaded, dataset, indices, batch_size=int(spec.get("batch_size", 256)),
                            device=device, cache_dir=cache_dir, progress=progress)


def check_inputs(comps: list[Comparison]) -> list[str]:
    """Problems that would stop the comparisons, each with the command that fixes it.

    Checks every dataset, checkpoint and features file before any work starts, so that a
    long run does not fail half-way on something missing. (Hub weights are checked when the
    model loads; the error then says where they are expected.)
    """
    problems: list[str] = []
    seen: set[str] = set()

    def add(msg: str) -> None:
        if msg not in seen:
            seen.add(msg)
            problems.append(msg)

    for comp in comps:
        where = f"{comp.experiment}/{comp.name}"
        try:
            select_images(comp.image_selection)
        except RDXInputError as exc:
            add(f"{where}: {exc}")
        for which, spec in comp.representations.items():
            ckpt = spec.get("checkpoint")
            if ckpt and not Path(ckpt).is_file():
                add(f"{where}: checkpoint {ckpt} (representations.{which}) is missing; train it "
                    f"with `python scripts/train_classifier.py --preset {Path(ckpt).parent.name}` "
                    "(see --list) or fetch the authors' checkpoints with "
                    "`bash download_checkpoints.sh`.")
            feats = spec.get("features")
            if feats and not Path(feats).is_file():
                add(f"{where}: features file {feats} (representations.{which}) is missing.")
    return problems


def run_comparison(comp: Comparison, *, output_root: str | Path = "outputs",
                   device: str = "auto", progress: bool = True, force: bool = False) -> Path:
    """Run (or resume) one comparison; returns its output folder."""
    out = Path(output_root) / comp.experiment / comp.name
    run_path = out / "run.json"
    meta: dict[str, Any] = {"experiment": comp.experiment, "comparison": comp.name,
                            "seed": comp.seed, "config": comp.raw, "versions": versions(),
                            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            "device": device, "timings_s": {}, "methods": {}}
    say = print if progress else (lambda *a, **k: None)
    t = time.perf_counter()
    ds, idx = select_images(comp.image_selection)
    sel = comp.image_selection
    labels = ds.labels[idx]
    write_json_atomic(out / "images.json", {
        "dataset": ds.name, "split": sel.get("split", "train"), "n_images": len(idx),
        "class_names": ds.class_names, "indices": idx, "ids": [ds.ids[i] for i in idx],
        "labels": labels})
    meta["timings_s"]["images"] = time.perf_counter() - t
    say(f"[{comp.experiment}/{comp.name}] {len(idx)} images of {ds.name}")

    cache_dir = Path(output_root) / "cache" / "features"
    reps = {}
    for which in ("a", "b"):
        t = time.perf_counter()
        reps[which] = _representation(comp.representations[which], which, ds, idx,
                                      device=device, cache_dir=cache_dir, progress=progress)
        meta["timings_s"][f"features_{which}"] = time.perf_counter() - t
    A, B = reps["a"], reps["b"]
    data_digest = _array_digest(A, B, labels)
    # the analysis (BSR under every dissimilarity, chance levels, PCA overlays) needs them
    save_npz_atomic(out / "representations.npz", a=A, b=B, labels=labels)
    say(f"  features: A {A.shape[1]}-d, B {B.shape[1]}-d")

    alignment = None
    for m in comp.methods:
        name = m.get("name", m["method"])
        params = {k: v for k, v in m.items() if k not in ("method", "name")}
        fingerprint = hashlib.sha256(json.dumps(
            {"method": m["method"], "params": params, "seed": comp.seed, "data": data_digest},
            sort_keys=True, default=str).encode()).hexdigest()
        done = out / name / "explanations.json"
        if done.exists() and not force:
            try:
                previous = json.loads(done.read_text()).get("run", {}).get("fingerprint")
            except (OSError, json.JSONDecodeError):
                previous = None
            if previous == fingerprint:
                say(f"  {name}: done already (skipped)")
                meta["methods"][name] = "skipped (done)"
                continue
        wanted = getattr(method(m["method"]), "alignment_params", lambda p: None)(params)
        if wanted is not None and alignment is None:
            # learned once per comparison (first method that asks) and shared (spec §1.9)
            from ..method.alignment import align_pair
            t = time.perf_counter()
            alignment = align_pair(A, B, seed=comp.seed, device=device, **wanted)
            write_json_atomic(out / "alignment.json", alignment[2])
            save_npz_atomic(out / "alignment.npz", a_mapped=alignment[0], b_mapped=alignment[1])
            meta["timings_s"]["alignment"] = time.perf_counter() - t
            say(f"  alignment: test CKA A→B {alignment[2]['a_to_b']['best_test_cka']:.3f}, "
                f"B→A {alignment[2]['b_to_a']['best_test_cka']:.3f}")
        t = time.perf_counter()
        seed_everything(comp.seed)
        doc = method(m["method"]).run(A, B, params, MethodContext(
            labels=labels, seed=comp.seed, device=device, alignment=alignment,
            progress=progress))
        doc["run"] = {"experiment": comp.experiment, "comparison": comp.name, "method": m["method"],
                      "name": name, "seed": comp.seed, "fingerprint": fingerprint}
        _save_grids(doc, LazyImages(ds, idx), out / name / "grids")
        save_method_outputs(doc, out / name)   # explanations.json last: marks it finished
        meta["timings_s"][name] = time.perf_counter() - t
        meta["methods"][name] = "done"
        write_json_atomic(run_path, meta)
        bsr = doc.get("bsr", {})
        say(f"  {name}: {meta['timings_s'][name]:.1f} s"
            + (f", BSR {bsr['mean']:.3f}" if bsr.get("mean") is not None else ""))
    meta["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json_atomic(run_path, meta)
    return out


def _save_grids(doc: dict, images: LazyImages, grid_dir: Path) -> None:
    from ..viz.grids import save_direction_grids

    for direction, res in doc.get("directions", {}).items():
        save_direction_grids(images, res["explanations"], grid_dir, direction)


def run_experiment(config: str | Path, *, only: str | None = None,
                   output_root: str | Path = "outputs", device: str = "auto",
                   progress: bool = True, force: bool = False,
                   check_only: bool = False) -> list[Path]:
    """Run every comparison of an experiment config (or just ``only``).

    All inputs are checked first; ``check_only`` stops after that check.
    """
    comps = load_experiment(config)
    if only is not None:
        names = [c.name for c in comps]
        comps = [c for c in comps if c.name == only]
        if not comps:
            raise RDXInputError(f"--only {only!r}: no such comparison; the config has {names}")
    problems = check_inputs(comps)
    if problems:
        raise RDXInputError("missing inputs — nothing was run:\n  " + "\n  ".join(problems))
    if check_only:
        return []
    return [run_comparison(c, output_root=output_root, device=device, progress=progress,
                           force=force) for c in comps]
