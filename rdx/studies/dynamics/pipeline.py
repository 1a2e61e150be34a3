"""The run of the training-dynamics analysis (:func:`run_dynamics`): the probe images, each
checkpoint's features (cached), RDX of the final model against it, the records written as
soon as each checkpoint is done (a repeated run reuses them), then the tables."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import RDXInputError
from ...io import file_sha256, json_digest, read_json, save_npz_atomic, versions, write_json_atomic
from ...models.checkpoint import CheckpointInfo, list_checkpoints
from ...models.classifier import forward_features, load_network
from ...progress import working
from ...results.store import load_labels
from .analysis import DIRECTION, MIN_TRACK_JACCARD, add_tracks, analyse_checkpoint, rdx_estimator
from .tables import write_outputs


FORMAT = "rdx-training-dynamics"


FORMAT_VERSION = 1


@dataclass
class Probe:
    """The probe images: dataset, indices, labels in the model's label space, the input
    tensor (per transform) and the raw images for grids."""

    dataset: Any
    indices: np.ndarray
    classes: np.ndarray                 # model labels 0..n_classes-1
    class_names: list[str]
    ids_digest: str
    tensors: dict = field(default_factory=dict, repr=False)

    def tensor(self, transform: Any) -> torch.Tensor:
        """The probe images through ``transform`` (computed once per transform)."""
        from ...models.extract import transform_repr
        from ...models.training import materialize

        key = transform_repr(transform)
        if key not in self.tensors:
            self.tensors[key] = materialize(self.dataset.subset(self.indices), transform)[0]
        return self.tensors[key]

    def images(self, which: Sequence[int]) -> np.ndarray:
        """Raw images (uint8) of probe images ``which`` for drawing grids."""
        return self.dataset.image_array(self.indices[np.asarray(which, dtype=np.int64)])


def make_probe(selection: dict, final_meta: dict) -> Probe:
    """Select the probe images and map their labels to the model's outputs (the training
    run's ``label_map``, recorded in the checkpoint)."""
    from ...data.selection import select_images

    ds, idx = select_images(selection)
    data = final_meta.get("data") or {}
    label_map = data.get("label_map")
    raw = np.asarray(ds.labels)[idx]
    if label_map:
        missing = sorted({int(c) for c in raw} - {int(k) for k in label_map})
        if missing:
            raise RDXInputError(f"probe classes {missing} were not trained on (the final "
                                f"checkpoint's classes: {sorted(int(k) for k in label_map)}); "
                                "set probe.target_classes to the training classes.")
        classes = np.array([label_map[str(int(c))] for c in raw], dtype=np.int64)
    else:
        classes = raw.astype(np.int64)
    n_classes = int(final_meta.get("num_classes") or classes.max() + 1)
    names = list(data.get("class_names") or [])
    if len(names) != n_classes:
        names = [ds.class_names[c] if label_map is None and c < len(ds.class_names) else str(c)
                 for c in range(n_classes)]
    ids = [ds.ids[i] for i in idx]
    return Probe(ds, np.asarray(idx, dtype=np.int64), classes, names,
                 json_digest({"dataset": ds.name, "ids": ids, "classes": classes}))


def checkpoint_outputs(info: CheckpointInfo, probe: Probe, cache_dir: Path, *,
                       model_spec: dict, device: str, batch_size: int,
                       sha256: str | None = None) -> dict:
    """Features, logits and per-image correctness of one checkpoint on the probe set,
    cached in ``cache_dir/<name>.npz`` (keyed by the checkpoint's bytes and the probe)."""
    sha = sha256 or file_sha256(info.path)
    key = json_digest({"checkpoint_sha256": sha, "probe": probe.ids_digest,
                   "model": model_spec, "features": "head input"})
    path = cache_dir / f"{info.name}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["key"]) == key:
                    out = {"features": z["features"], "logits": z["logits"], "key": key,
                           "sha256": sha, "cached": True, "seconds": 0.0}
                    out["correct"] = out["logits"].argmax(1) == probe.classes
                    return out
        except (OSError, ValueError, KeyError, EOFError):
            pass   # unreadable cache entry: recompute
    from ...backend import resolve_device

    t0 = time.perf_counter()
    model, transform, _meta = load_network(info.path, model_spec)
    x = probe.tensor(transform)
    feats, logits = forward_features(model, x, batch_size=batch_size,
                                     device=resolve_device(device))
    if not (np.isfinite(feats).all() and np.isfinite(logits).all()):
        raise RDXInputError(f"{info.path}: NaN/inf features or logits on the probe set.")
    save_npz_atomic(path, features=feats, logits=logits, key=np.array(key))
    return {"features": feats, "logits": logits, "key": key, "sha256": sha, "cached": False,
            "correct": logits.argmax(1) == probe.classes, "seconds": time.perf_counter() - t0}


def class_accuracy(correct: np.ndarray, classes: np.ndarray, n_classes: int) -> list:
    """Accuracy per class (None for a class without images)."""
    return [float(correct[classes == c].mean()) if np.any(classes == c) else None
            for c in range(n_classes)]


def _record_path(out: Path, info: CheckpointInfo) -> tuple[Path, Path]:
    return out / "checkpoints" / f"{info.name}.json", out / "checkpoints" / f"{info.name}.npz"


def run_dynamics(cfg: dict, *, force: bool = False, progress: bool = True,
                 log: Callable[[str], None] | None = None) -> dict:
    """Analyse every checkpoint of a validated config (:func:`validate_config`); writes the
    outputs listed in the module docstring (not the figures) and returns ``dynamics.json``.

    A checkpoint whose result exists with the same fingerprint (its bytes, the final
    model's, the probe images, the RDX parameters) is loaded instead of recomputed;
    ``force`` recomputes everything.
    """
    say = log or (print if progress else (lambda _m: None))
    t_start = time.perf_counter()
    out = Path(cfg["output"])
    ck = cfg["checkpoints"]
    infos, final = list_checkpoints(ck["dir"], pattern=ck["pattern"], final=ck["final"],
                                    every=ck["every"], include_final_step=ck["include_final_step"])
    probe = make_probe(cfg["probe"], final.meta)
    n, n_classes = len(probe.indices), len(probe.class_names)
    say(f"training dynamics {cfg['name']}: {len(infos)} checkpoints vs {final.path}, probe "
        f"set of {n} images ({', '.join(probe.class_names)})")
    kw = {"model_spec": cfg["model"], "device": cfg["device"], "batch_size": cfg["batch_size"]}
    cache = out / "features"
    # the final model's cache file is features/final.npz whatever its file name
    with working(f"  final model {final.name}: features of the {n} probe images",
                 show=progress, keep=False):
        fo = _final_outputs(final, probe, cache, kw)
    rdx_params = dict(cfg["rdx"])
    est = rdx_estimator(rdx_params, cfg["device"])
    similarity_final = None
    records = []
    timings = {"features": fo["seconds"], "rdx": 0.0, "similarity_final": 0.0}
    for i, info in enumerate(infos):
        rec_json, rec_npz = _record_path(out, info)
        sha = file_sha256(info.path)
        # fingerprint without running the checkpoint: its bytes, the probe, the parameters
        finger = json_digest({"checkpoint_sha256": sha, "final": fo["key"],
                          "probe": probe.ids_digest, "rdx": rdx_params, "model": cfg["model"],
                          "format": FORMAT_VERSION})
        rec = None
        if not force and rec_json.is_file() and rec_npz.is_file():
            try:
                old = read_json(rec_json)
                rec = old if old.get("fingerprint") == finger else None
            except RDXInputError:
                rec = None
        if rec is None:
            # features and an RDX fit per checkpoint: seconds each; the line below reports
            # it, the live line says what runs meanwhile
            with working(f"  C{i:<3d} {info.name}: features and RDX against the final model",
                         show=progress, keep=False):
                if sha == fo["sha256"]:   # the final model saved under another name too
                    co = {**fo, "seconds": 0.0}
                    save_npz_atomic(cache / f"{info.name}.npz", features=fo["features"],
                                    logits=fo["logits"], key=np.array(fo["key"]))
                else:
                    co = checkpoint_outputs(info, probe, cache, sha256=sha, **kw)
                timings["features"] += co["seconds"]
                if similarity_final is None:
                    t0 = time.perf_counter()
                    similarity_final = est.similarity_of(fo["features"])
                    timings["similarity_final"] = time.perf_counter() - t0
                summary, labels = analyse_checkpoint(
                    fo["features"], co["features"], correct_t=co["correct"],
                    correct_final=fo["correct"], classes=probe.classes, n_classes=n_classes,
                    rdx_params=rdx_params, device=cfg["device"],
                    similarity_final=similarity_final)
            timings["rdx"] += summary["rdx_seconds"]
            rec = {"index": i, "checkpoint": info.name, "path": str(info.path),
                   "step": info.step, "epoch": info.epoch,
                   "epochs_completed": info.epochs_completed, **info.accuracies(),
                   "probe_accuracy": float(co["correct"].mean()),
                   "probe_accuracy_final": float(fo["correct"].mean()),
                   "class_accuracy": class_accuracy(co["correct"], probe.classes, n_classes),
                   **summary, "fingerprint": finger}
            save_npz_atomic(rec_npz, labels=labels)
            write_json_atomic(rec_json, rec)
            state = "computed"
        else:
            state = "reused"
        rec["index"] = i
        records.append(rec)
        c0 = rec["cluster0"]
        say(f"  C{i:<3d} {info.name:24s} acc {rec['probe_accuracy']:.3f}  cluster 0: "
            f"n={c0['size']:5d} aff={c0['mean_affinity']:.3f}"
            f"{' (no-change)' if rec['no_change'] else ''}  "
            f"{rec['n_difference_clusters']} difference clusters  [{state}]")
    first = next((r["index"] for r in records if r["no_change"]), None)
    n_tracks = add_tracks(records, [load_labels(out, r["checkpoint"]) for r in records])
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": cfg["name"],
           "description": cfg.get("description", ""), "config": cfg,
           "direction": DIRECTION,
           "question": "which groups of probe images does the final model hold together "
                       "that checkpoint C_t still spreads apart?",
           "final": {"checkpoint": final.name, "path": str(final.path), "step": final.step,
                     "epoch": final.epoch, **final.accuracies(),
                     "probe_accuracy": float(fo["correct"].mean()),
                     "class_accuracy": class_accuracy(fo["correct"], probe.classes, n_classes)},
           "probe": {"n_images": n, "selection": cfg["probe"], "class_names": probe.class_names,
                     "class_counts": np.bincount(probe.classes, minlength=n_classes).tolist(),
                     "indices": probe.indices.tolist(), "classes": probe.classes.tolist(),
                     "ids_sha256": probe.ids_digest,
                     "is_training_set": _is_training_set(cfg["probe"], final.meta)},
           "rdx": {**rdx_params, "direction": DIRECTION, "clustering": "spectral",
                   "merge_low_affinity": True},
           "no_change_from": first,
           "tracks": {"n_tracks": n_tracks, "min_jaccard": MIN_TRACK_JACCARD,
                      "how": "difference clusters of consecutive checkpoints paired by the "
                             "Hungarian method on the Jaccard overlap of their members; "
                             "track 0 is the no-change group"},
           "checkpoints": records,
           "timings": {**timings, "total": time.perf_counter() - t_start},
           "versions": versions()}
    write_outputs(out, doc)
    return doc


def _final_outputs(final: CheckpointInfo, probe: Probe, cache: Path, kw: dict) -> dict:
    alias = CheckpointInfo("final", final.path, final.step, final.epoch,
                           final.epochs_completed, final.meta)
    return checkpoint_outputs(alias, probe, cache, **kw)


def _is_training_set(sel: dict, meta: dict) -> bool | None:
    """Whether the probe selection reproduces the final model's training images."""
    data = meta.get("data") or {}
    if not data:
        return None
    same = (sel.get("dataset") == data.get("dataset")
            and sel.get("split", "train") == data.get("split", "train")
            and (sel.get("target_classes") or None) == (data.get("class_subset") or None)
            and sel.get("num_images") == data.get("per_class")
            and sel.get("seed", 0) == data.get("selection_seed", 0))
    return bool(same)
