"""The run of a layer-wise study (:func:`run_layers`): checks, features, probes, RDX on every
consecutive layer pair with its cluster statistics, patching, then ``layers.json`` and the
figures. Finished layer pairs and heads are skipped when the run is repeated."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import RDXInputError
from ...io import array_digest, json_digest, read_json, save_npz_atomic, versions, write_json_atomic
from ...models.study_model import load_study_model
from ...progress import keep_alive, working
from ...results.store import IMAGES_JSON
from ...results.writer import ComparisonWriter, dataset_source, images_record, utc_now
from .analysis import (LayerProbes, direction_stats, fit_layer_probes, select_study_images,
                       significance_summary)
from .config import DIRECTIONS, FORMAT, FORMAT_VERSION, LayersConfig, METHOD_NAME
from .patching import resolve_patching, run_patching


def _pair_folder(i: int, a: Any, b: Any) -> str:
    return f"{i:02d}_{a.label}__{b.label}"


def _images_doc(ds: Any, idx: np.ndarray, data: Any, folder: Any) -> dict:
    """``images.json`` of the images ``idx`` of the study's dataset (config ``data``), its
    ``source`` relative to ``folder`` (where the document is written)."""
    from ...data.selection import loader_options

    source = dataset_source(folder, loader_options(
        {"dataset": data.dataset, "split": data.split, "root": data.root,
         "data_root": data.data_root}))
    return images_record(dataset=ds.name, split=data.split, n_images=len(idx),
                         class_names=ds.class_names, indices=idx,
                         ids=[ds.ids[i] for i in idx], labels=np.asarray(ds.labels)[idx],
                         source=source)


def run_layers(cfg: LayersConfig, *, force: bool = False, progress: bool = True,
               log: Callable[[str], None] | None = None) -> dict:
    """Run (or resume) a layer-wise study; returns the ``layers.json`` document.

    Everything is checked before the first forward pass (dataset and sizes, model and
    weights, layers, RDX parameters, patchable blocks). ``force`` recomputes finished layer
    pairs and heads (features still come from the cache).
    """
    from tqdm.auto import tqdm

    from ...backend import resolve_device
    from ...data import get_dataset
    from ...data.selection import LazyImages
    from ...evaluation.scoring import Scorer
    from ...method.estimator import RDX
    from ...models.layers import (as_layer_specs, auto_layers, check_layers, extract_layers,
                                 prefix_tokens)
    from ...similarity.cka import debiased_linear_cka
    from ...viz.grids import save_result_grids

    say = log or (print if progress else (lambda _m: None))
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    out = cfg.output_dir
    started = utc_now()

    # ---------------------------------------------------------------- checks, up front
    d = cfg.data
    with working(f"layers: loading {d.dataset}/{d.split}", show=progress, keep=False):
        ds = get_dataset(d.dataset, split=d.split, root=d.root, data_root=d.data_root)
    idx_a, idx_p = select_study_images(len(ds), d.n_images, d.n_probe, d.seed)
    y_all = np.asarray(ds.labels, dtype=np.int64)
    y, y_probe = y_all[idx_a], y_all[idx_p]
    t = time.perf_counter()
    sm = load_study_model(cfg.model, train=cfg.train, device=cfg.device,
                          progress=progress, say=say)
    timings["model"] = time.perf_counter() - t
    model = sm.loaded.model
    specs = auto_layers(model) if cfg.layers == "auto" else as_layer_specs(cfg.layers)
    if len(specs) < 2:
        raise RDXInputError("the study needs at least two layers.")
    check_layers(model, specs)
    pairs = [(i, i + 1) for i in range(len(specs) - 1)]
    params = cfg.rdx_params
    plan = resolve_patching(cfg, model, specs, pairs) if cfg.patching.enabled else []
    dev = resolve_device(cfg.device)
    say(f"layer-wise study {cfg.name}: {sm.info['model_id']}, {len(specs)} layers "
        f"({', '.join(s.label for s in specs)}), {d.n_images} analysis + {d.n_probe} probe "
        f"images of {ds.name}/{d.split}"
        + (f", patching {len(plan)} blocks × {len(plan[0]['heads'])} heads" if plan else ""))

    # ---------------------------------------------------------------- features
    t = time.perf_counter()
    both = np.concatenate([idx_a, idx_p])
    feats = extract_layers(sm.loaded, ds, specs, both, batch_size=cfg.batch_size, device=dev,
                           num_workers=cfg.num_workers, amp=cfg.amp, cache_dir=cfg.cache_dir,
                           progress=progress, run=sm.run)
    n = len(idx_a)
    X = {s.key: feats[s.key][:n] for s in specs}
    Xp = {s.key: feats[s.key][n:] for s in specs}
    for s in specs:
        if np.ptp(X[s.key], axis=0).max() == 0:
            raise RDXInputError(
                f"layer {s.key!r} gives the same features for every image (e.g. the CLS token "
                "entering the first block is a learned constant); use its patch tokens "
                f"('{s.key.split('/')[0]}/mean') or another layer.")
    timings["features"] = time.perf_counter() - t
    write_json_atomic(out / IMAGES_JSON, {"analysis": _images_doc(ds, idx_a, d, out),
                                          "probe": _images_doc(ds, idx_p, d, out),
                                          "selection": d.model_dump()})

    # ---------------------------------------------------------------- probes
    t = time.perf_counter()
    probes: dict[str, LayerProbes] = {}
    # one layer's probes (k-NN, logistic regression on wide features) take seconds: the
    # bars are redrawn meanwhile (keep_alive), so their clocks move
    bar = tqdm(specs, desc="probes", disable=not progress, leave=False)
    with keep_alive(bar):
        for s in bar:
            probes[s.key] = fit_layer_probes(Xp[s.key], y_probe, X[s.key], y,
                                             k=cfg.probes.knn_k,
                                             max_iter=cfg.probes.linear_max_iter,
                                             seed=cfg.probes.seed)
    layer_docs = [{"index": i, "key": s.key, "label": s.label, "module": s.module,
                   "point": s.point, "pool": s.pool, "dim": int(X[s.key].shape[1]),
                   "knn_accuracy": probes[s.key].knn_accuracy,
                   "linear_accuracy": probes[s.key].linear_accuracy}
                  for i, s in enumerate(specs)]
    write_json_atomic(out / "probes.json", {"layers": layer_docs, "params": cfg.probes.model_dump(),
                                            "n_train": len(idx_p), "n_test": n})
    save_npz_atomic(out / "probes.npz", labels=y,
                    **{f"knn_{i}": probes[s.key].knn_pred for i, s in enumerate(specs)},
                    **{f"linear_{i}": probes[s.key].linear_pred for i, s in enumerate(specs)})
    timings["probes"] = time.perf_counter() - t
    for ld in layer_docs:
        say(f"  {ld['label']:>10s} {ld['dim']:5d}-d  k-NN {ld['knn_accuracy']:.3f}  linear "
            f"{ld['linear_accuracy']:.3f}")

    # ---------------------------------------------------------------- pairs
    t_pairs = time.perf_counter()
    images = LazyImages(ds, idx_a)
    pair_docs, pair_labels = [], {}
    change = cfg.probes.change_probe
    st = cfg.stats
    pair_bar = tqdm(pairs, desc="RDX layer pairs", disable=not progress)
    with keep_alive(pair_bar):   # one pair (an RDX fit, scores, grids) takes seconds
        for pi, (ia, ib) in enumerate(pair_bar):
            sa, sb = specs[ia], specs[ib]
            A, B = X[sa.key], X[sb.key]
            pa = getattr(probes[sa.key], f"{change}_pred")
            pb = getattr(probes[sb.key], f"{change}_pred")
            flags = pa != pb
            fingerprint = json_digest({"format": FORMAT_VERSION, "data": array_digest(A, B, y),
                                       "flags": array_digest(flags), "rdx": params,
                                       "stats": st.model_dump(), "change_probe": change,
                                       "score": cfg.score, "chance_draws": cfg.chance_draws})
            folder = _pair_folder(pi, sa, sb)
            seed = int(params.get("random_state", 42))
            writer = ComparisonWriter(out / "pairs" / folder, run={
                "experiment": f"layers/{cfg.name}", "comparison": folder, "seed": seed,
                # where the images are read from, so that the pair folder alone finds them
                "config": {"image_selection": {"dataset": d.dataset, "split": d.split,
                                               "root": d.root, "data_root": d.data_root,
                                               "indices": "images.json"},
                           "representations": {"a": {"model": sm.info["model_id"],
                                                     "layer": sa.key},
                                               "b": {"model": sm.info["model_id"],
                                                     "layer": sb.key}},
                           "methods": [{"method": "rdx", "name": METHOD_NAME, **params}]},
                "versions": versions(), "started": utc_now(), "device": cfg.device,
                "layers": {"a": sa.key, "b": sb.key}})
            store = writer.store
            mdir = writer.method_dir(METHOD_NAME)
            tp = time.perf_counter()
            if not force and store.is_finished(METHOD_NAME, fingerprint):
                stats_doc = read_json(mdir / "cluster_stats.json")
                with np.load(mdir / "clusters.npz", allow_pickle=False) as z:
                    labels = {dd: z[f"labels_{dd}"] for dd in DIRECTIONS}
                state = "reused"
            else:
                writer.write_inputs(_images_doc(ds, idx_a, d, writer.path), A, B, y)
                est = RDX(**{**params, "device": cfg.device})
                est.fit(A, B, labels=y)
                result = est.result()
                if cfg.score:
                    Scorer(A, B, labels=y, chance_draws=cfg.chance_draws).score(result)
                labels = {dd: np.asarray(result.directions[dd].labels, dtype=np.int64)
                          for dd in DIRECTIONS}
                stats_doc = {"pair": pi, "a": sa.key, "b": sb.key, "change_probe": change,
                             "directions": {}}
                for di, dd in enumerate(DIRECTIONS):
                    stats_doc["directions"][dd] = direction_stats(
                        result.directions[dd], flags, y, n_permutations=st.n_permutations,
                        seed=[st.seed, pi, di], alpha=st.alpha)
                extra = [save_npz_atomic(mdir / "clusters.npz", flags=flags,
                                         **{f"labels_{dd}": labels[dd] for dd in DIRECTIONS}),
                         write_json_atomic(mdir / "cluster_stats.json", stats_doc)]
                extra += save_result_grids(result, images, mdir)
                writer.write_method(METHOD_NAME, result, files=extra,
                                    seconds=time.perf_counter() - tp,
                                    provenance={"experiment": f"layers/{cfg.name}",
                                                "comparison": folder, "method": "rdx",
                                                "name": METHOD_NAME, "seed": seed,
                                                "fingerprint": fingerprint,
                                                "layers": [sa.key, sb.key]})
                state = "computed"
            pair_labels[pi] = labels
            res = store.result(METHOD_NAME)
            bsr = res.bsr if res is not None else None
            pair_docs.append({"index": pi, "a": sa.key, "b": sb.key, "a_label": sa.label,
                              "b_label": sb.label, "folder": f"pairs/{folder}",
                              "cka": float(debiased_linear_cka(A, B)),
                              "bsr": bsr, "directions": stats_doc["directions"], "state": state,
                              "seconds": time.perf_counter() - tp})
            dirs = stats_doc["directions"]
            say(f"  {sa.label}→{sb.label}: "
                + "; ".join(f"{dd}: {dirs[dd]['n_clusters']} clusters, "
                            f"{dirs[dd]['n_significant_change']} change- / "
                            f"{dirs[dd]['n_significant_homogeneity']} class-enriched"
                            for dd in DIRECTIONS) + f"  [{state}]")
    timings["pairs"] = time.perf_counter() - t_pairs

    # ---------------------------------------------------------------- patching
    patch_doc = None
    if plan:
        t = time.perf_counter()
        patch_doc = run_patching(cfg, sm, ds, idx_a, y, X, probes, plan, pair_labels,
                                  pair_docs, params, dev, out, force=force, progress=progress,
                                  say=say, n_prefix=prefix_tokens(model))
        timings["patching"] = time.perf_counter() - t

    # ---------------------------------------------------------------- summary
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": cfg.name,
           "description": cfg.description, "config": cfg.model_dump(),
           "rdx": params, "model": sm.info, "n_prefix_tokens": prefix_tokens(model),
           "data": {"dataset": ds.name, "split": d.split, "n_images": n,
                    "n_probe": len(idx_p), "seed": d.seed, "class_names": list(ds.class_names),
                    "class_counts": np.bincount(y, minlength=len(ds.class_names)).tolist()},
           "layers": layer_docs, "pairs": pair_docs,
           "significance": significance_summary(pair_docs, cfg.stats.alpha),
           "patching": patch_doc, "started": started, "finished": utc_now(),
           "timings_s": {**timings, "total": time.perf_counter() - t_start},
           "versions": versions()}
    write_json_atomic(out / "layers.json", doc)
    t = time.perf_counter()
    from ...viz.layers import layer_figures
    layer_figures(doc, out / "figures")
    doc["timings_s"]["figures"] = time.perf_counter() - t
    write_json_atomic(out / "layers.json", doc)
    return doc
