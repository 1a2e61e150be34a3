"""Run an experiment: image selection → features (cached) → each method → scored results,
grids and JSON in the comparison's folder.

The folder layout belongs to the run store (:mod:`rdx.results.store`); all writes are atomic
and a method counts as done once its ``explanations.json`` exists and every file it lists
still has its checksum, so an interrupted run loses nothing already finished. Features are
cached in ``<output root>/cache/features/``, keyed by (model, weights, layer, transform,
images).
"""
from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..backend import seeded
from ..data import ImageDataset
from ..data.selection import LazyImages, loader_options, select_images
from ..validation import check_not_identical
from ..errors import RDXInputError
from ..evaluation.scoring import Scorer
from ..io import (array_digest, folder_lock, json_digest, load_array, split_array_key,
                  versions)
from ..paths import check_no_overlap
from ..progress import working
from ..results.store import RUN_JSON
from ..results.writer import (RUN_LOCK, ComparisonWriter, dataset_source, images_record,
                              utc_now)
from ..viz.grids import save_result_grids
from .config import Comparison, load_experiment
from .methods import MethodContext, comparison_predictions, method


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
            removed = len({c % X.shape[1] for c in drop})   # -1 and d-1 are one column
            if removed == X.shape[1]:
                raise RDXInputError(
                    f"representations.{which}.exclude_dims removes all {X.shape[1]} columns "
                    f"of {spec['features']}, leaving no features to compare; exclude fewer "
                    "dimensions (at least one must remain) or drop exclude_dims.")
            X = np.delete(X, drop, axis=1)
        return X
    from ..models.extract import extract_features
    from ..models.zoo import load_model

    loaded = load_model({k: v for k, v in spec.items() if k != "batch_size"})
    size = spec.get("batch_size")                 # None: automatic for the device
    return extract_features(loaded, dataset, indices,
                            batch_size=None if size is None else int(size),
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
        specs = [(f"representations.{which}", spec)
                 for which, spec in comp.representations.items()]
        specs += [(key, spec) for _, key, spec in comp.twin_specs()]
        for which, spec in specs:
            ckpt = spec.get("checkpoint")
            if ckpt and not Path(ckpt).is_file():
                folder = Path(ckpt).parent.name
                train = (f"rdx train --preset {folder.rsplit('_seed', 1)[0]} --twins 1"
                         if "_seed" in folder else f"rdx train --preset {folder}")
                add(f"{where}: checkpoint {ckpt} ({which}) is missing; train it "
                    f"with `{train}` "
                    "(see --list) or fetch the authors' checkpoints with "
                    "`bash download_checkpoints.sh`.")
            feats = spec.get("features")
            if feats and split_array_key(feats)[0].is_dir():
                add(f"{where}: features file {feats} ({which}) is a folder; "
                    "give the .npy/.npz file (FILE.npz:KEY for one array of an .npz).")
            elif feats and not split_array_key(feats)[0].is_file():
                fetch = (" Fetch it with `bash download_checkpoints.sh pcbm`."
                         if "post-hoc-cbm" in str(feats) else "")
                add(f"{where}: features file {feats} ({which}) is missing."
                    + fetch)
    return problems


def run_inputs(config: str | Path, comps: list[Comparison]) -> list[str]:
    """The files a run reads besides datasets: the config, features and checkpoints."""
    files = [str(config)]
    for comp in comps:
        for spec in comp.representations.values():
            files += [str(spec[k]) for k in ("features", "checkpoint") if spec.get(k)]
    return files


def run_writes(comps: list[Comparison]) -> list[str]:
    """The paths, relative to the output root, that running ``comps`` may replace: each
    comparison folder's files (see :func:`rdx.results.store.comparison_writes`), the
    experiment's report and analysis, the feature cache and submitit's logs."""
    from ..results.store import ANALYSIS_DIR, INDEX_HTML, ROOT_FOLDERS, comparison_writes

    out = [f"{folder}/**" for folder in ROOT_FOLDERS]
    for comp in comps:
        top = comp.experiment
        names = [m.get("name") or m["method"] for m in comp.methods]
        out += [f"{top}/{INDEX_HTML}", f"{top}/{ANALYSIS_DIR}/**",
                *(f"{top}/{comp.name}/{rel}" for rel in [LOCK_FILE, *comparison_writes(names)])]
    return out


def method_fingerprint(m: dict, seed: int, data_digest: str,
                       significance: dict | None = None) -> str:
    """What a method's result depends on: its entry, the seed, the data (with the seed
    twins) and, where it is assessed, the significance settings."""
    params = {k: v for k, v in m.items() if k not in ("method", "name")}
    doc = {"method": m["method"], "params": params, "seed": seed, "data": data_digest}
    if significance is not None:
        doc["significance"] = significance
    return json_digest(doc)


def _assessed(comp: Comparison, m: dict) -> bool:
    """Whether ``significance:`` assesses this method: the ones it names, else every RDX
    method."""
    sig = comp.significance
    if sig is None:
        return False
    names = sig.get("methods")
    return m.get("name", m["method"]) in names if names is not None else m["method"] == "rdx"


def _assess(comp: Comparison, m: dict, params: dict, result: Any, A: np.ndarray,
            B: np.ndarray, labels: np.ndarray, twins: dict[str, list[np.ndarray]],
            device: str, progress: bool) -> None:
    """``rdx explain --significance`` on a run's method: each null draw a refit of it with
    the comparison's seed; the twin null where seed twins are configured."""
    from ..evaluation.significance import assess

    sig = comp.significance or {}

    def refit(X: np.ndarray, Y: np.ndarray) -> Any:
        with seeded(comp.seed):
            return method(m["method"]).run(X, Y, params, MethodContext(
                labels=labels, seed=comp.seed, device=device))

    from ..evaluation.null_calibration import family_of

    # the family named in the block, else the one the models' names say (convnet, a timm
    # or open_clip id); unknown for features files
    family = sig.get("family") or tuple(family_of(comp.representations[w].get("model"))
                                        for w in ("a", "b"))
    assess(result, A, B, n_null=int(sig.get("n_null", 6)), random_state=comp.seed,
           refit=None if m["method"] == "rdx" else refit, labels=labels,
           control_a=twins["a"] or None, control_b=twins["b"] or None,
           family=family, progress=progress)


def significance_line(sig: dict) -> str:
    """``min p_FWER 0.012, 1 significant (twin null)`` — or no verdict, where the null is
    not calibrated for the pair."""
    from ..results.nulls import null_name

    n = sum((sig.get("n_significant") or {}).values())
    verdict = (f"{n} significant" if sig.get("calibrated") else
               "no verdict (not calibrated for this pair)")
    return (f"min p_FWER {sig.get('min_p_value_fwer', float('nan')):.3f}, {verdict} "
            f"({null_name(sig.get('null'), sig.get('noise'))})")


# --- one run per comparison: a lock file in the comparison's folder ------------------------
#: Held (fcntl.flock, exclusive) by the run working on a comparison.
LOCK_FILE = RUN_LOCK


@contextlib.contextmanager
def comparison_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder/.rdx-run.lock`` while a run works on the
    comparison (:func:`rdx.io.folder_lock`). A second run of the same comparison (another
    terminal, a re-submitted job, another config writing the same comparison) waits until
    the first is done, then finds its finished methods and skips them, so nothing is
    computed twice; the run record (``run.json``) keeps the methods of both
    (:meth:`rdx.results.writer.ComparisonWriter.write_run`). The lock goes with the process
    (a killed run frees it). On systems without ``fcntl`` (Windows) there is no lock: do
    not start two runs of one output root there."""
    def waiting() -> None:
        print(f"{folder}: another rdx run is working on this comparison; waiting for it to "
              "finish (its finished methods will then be skipped) ...", file=sys.stderr,
              flush=True)

    with folder_lock(folder, LOCK_FILE, on_wait=waiting):
        yield


def run_comparison(comp: Comparison, *, output_root: str | Path = "outputs",
                   device: str = "auto", progress: bool = True, force: bool = False,
                   allow_unaligned: bool = False) -> Path:
    """Run (or resume) one comparison; returns its output folder.

    One run at a time per comparison (:func:`comparison_lock`): a concurrent run of the
    same comparison waits, then skips what this one finished. Features read from files are
    checked to describe the selected images row for row
    (:func:`rdx.method.row_check.check_same_rows`) unless ``allow_unaligned``.
    """
    from ..method.row_check import rows_scope

    with comparison_lock(Path(output_root) / comp.experiment / comp.name), rows_scope():
        return _run_comparison(comp, output_root=output_root, device=device,
                               progress=progress, force=force,
                               allow_unaligned=allow_unaligned)
# --- end of the lock ---------------------------------------------------------------------


def _run_comparison(comp: Comparison, *, output_root: str | Path, device: str,
                    progress: bool, force: bool, allow_unaligned: bool = False) -> Path:
    writer = ComparisonWriter(Path(output_root) / comp.experiment / comp.name, run={
        "experiment": comp.experiment, "comparison": comp.name, "seed": comp.seed,
        "config": comp.raw, "versions": versions(),
        "started": utc_now(),
        "known_difference": comp.known_difference, "device": device, "timings_s": {},
        "methods": {}})
    store, meta = writer.store, writer.run
    previous = store.read(RUN_JSON) if store.exists else None
    say = print if progress else (lambda *a, **k: None)
    t = time.perf_counter()
    ds, idx = select_images(comp.image_selection)
    sel = comp.image_selection
    labels = ds.labels[idx]
    images_doc = images_record(dataset=ds.name, split=sel.get("split", "train"),
                               n_images=len(idx), class_names=ds.class_names, indices=idx,
                               ids=[ds.ids[i] for i in idx], labels=labels,
                               source=dataset_source(writer.path, loader_options(sel)))
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
    # the same array twice explains nothing (a config naming one features file twice)
    check_not_identical(A, B, ("representations.a", "representations.b"),
                        hint=f" ({comp.experiment}/{comp.name}: give two different "
                             "representations.)")
    # features read from files may list other images, or the selected ones in another
    # order; features the run extracts are the selection's by construction
    files = {w: comp.representations[w].get("features") for w in ("a", "b")}
    if any(files.values()):
        from ..method.row_check import check_same_rows

        check_same_rows([((f"representations.a ({comp.experiment}/{comp.name})", A,
                           files["a"]), ("representations.b", B, files["b"]))],
                        allow_unaligned=allow_unaligned,
                        hint="Pass --allow-unaligned (rdx run) to compare them anyway.")
    twins: dict[str, list[np.ndarray]] = {"a": [], "b": []}
    for side, key, spec in comp.twin_specs():
        t = time.perf_counter()
        twin = _representation(spec, key.removeprefix("representations."), ds, idx,
                               device=device, cache_dir=cache_dir, progress=progress)
        check_not_identical(reps[side], twin, (f"representations.{side}", key),
                            hint=" (a seed twin is the same recipe trained with another seed)")
        twins[side].append(twin)
        meta["timings_s"][f"features_{key}"] = time.perf_counter() - t
    data_digest = array_digest(A, B, labels, *twins["a"], *twins["b"])
    # the analysis (PCA overlays, the explorer, re-scoring old runs) reads them
    writer.write_inputs(images_doc, A, B, labels)
    say(f"  features: A {A.shape[1]}-d, B {B.shape[1]}-d")
    scorer = Scorer(A, B, labels=labels, known_difference=comp.known_difference)

    alignment = None
    predictions = None  # shared probe predictions, computed when a method first needs them
    images = LazyImages(ds, idx)
    for m in comp.methods:
        name = m.get("name", m["method"])
        params = {k: v for k, v in m.items() if k not in ("method", "name")}
        fingerprint = method_fingerprint(m, comp.seed, data_digest,
                                         comp.significance if _assessed(comp, m) else None)
        if not force and store.is_finished(name, fingerprint):
            say(f"  {name}: done already (skipped)")
            meta["methods"][name] = "skipped (done)"
            # keep the time it took when it was run
            old = ((previous or {}).get("timings_s") or {}).get(name)
            if old is not None:
                meta["timings_s"][name] = old
            continue
        wanted = getattr(method(m["method"]), "alignment_params", lambda p: None)(params)
        if wanted is not None and alignment is None:
            # learned once per comparison (the first method that asks) and shared
            from ..method.alignment import align_pair
            t = time.perf_counter()
            with working("  alignment: learning the linear maps A→B and B→A", show=progress,
                         keep=False):
                alignment = align_pair(A, B, seed=comp.seed, device=device, **wanted)
            writer.write_alignment(alignment)
            meta["timings_s"]["alignment"] = time.perf_counter() - t
            say(f"  alignment: test CKA A→B {alignment[2]['a_to_b']['best_test_cka']:.3f}, "
                f"B→A {alignment[2]['b_to_a']['best_test_cka']:.3f}")
        # --- shared probe predictions (guidance, grid labels, classification) -----------
        keys = getattr(method(m["method"]), "predictions_needed", lambda p: None)(params)
        if keys and any(k not in (predictions or {}) for k in keys):
            with working(f"  probes ({', '.join(keys)}): 5-fold logistic regression for "
                         f"{name}", show=progress):
                predictions = comparison_predictions(keys, A, B, labels, alignment,
                                                     predictions)
        # --- end shared probe predictions ------------------------------------------------
        t = time.perf_counter()
        # the line below reports the time: the live line is erased at the end (keep=False)
        with working(f"  {name}: fit, scoring, grids", show=progress, keep=False):
            with seeded(comp.seed):
                result = method(m["method"]).run(A, B, params, MethodContext(
                    labels=labels, seed=comp.seed, device=device, alignment=alignment,
                    progress=progress, predictions=predictions))
            scorer.score(result)
            if _assessed(comp, m):
                _assess(comp, m, params, result, A, B, labels, twins, device, progress)
            grids = save_result_grids(result, images, writer.method_dir(name),
                                      class_names=ds.class_names)
            writer.write_method(name, result, files=grids, seconds=time.perf_counter() - t,
                                provenance={"experiment": comp.experiment,
                                            "comparison": comp.name, "method": m["method"],
                                            "name": name, "seed": comp.seed,
                                            "fingerprint": fingerprint})
        bsr = result.bsr or {}
        weak = sum(bool(e.low_affinity) for d in result.directions.values()
                   for e in d.explanations)
        sig = result.info.get("significance") or {}
        say(f"  {name}: {meta['timings_s'][name]:.1f} s"
            + (f", BSR {bsr['mean']:.3f}" if bsr.get("mean") is not None else "")
            + (f"; {significance_line(sig)}" if sig else "")
            + (f", {weak} weak explanation(s) (mean affinity below null_threshold)"
               if weak else ""))
    writer.write_run(finished=utc_now())
    return store.path


def run_comparison_task(task: tuple) -> Path:
    """One comparison as a job (picklable: submitit runs it in another process)."""
    comp, kw = task
    return run_comparison(comp, **kw)


def run_experiment(config: str | Path, *, only: str | None = None,
                   output_root: str | Path = "outputs", device: str = "auto",
                   progress: bool = True, force: bool = False,
                   check_only: bool = False, executor: str = "local",
                   allow_unaligned: bool = False) -> list[Path]:
    """Run every comparison of an experiment config (or just ``only``).

    All inputs are checked first; ``check_only`` stops after that check. ``executor``
    ``local`` runs the comparisons here, one after another; ``submitit-local`` and
    ``slurm`` submit one job per comparison through submitit (logs in
    ``<output root>/submitit/``) and wait for them: the outputs are the same, and as every
    method's result is written atomically a re-submitted run resumes where it stopped.
    ``allow_unaligned``: compare features files whose rows do not look like the same images
    (:func:`run_comparison`).
    """
    from .executors import EXECUTORS, run_tasks

    if executor not in EXECUTORS:
        raise RDXInputError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}.")
    comps = load_experiment(config)
    if only is not None:
        names = [c.name for c in comps]
        comps = [c for c in comps if c.name == only]
        if not comps:
            raise RDXInputError(f"--only {only!r}: no such comparison; the config has {names}")
    problems = check_inputs(comps)
    if problems:
        raise RDXInputError("missing inputs — nothing was run:\n  " + "\n  ".join(problems))
    # no result may replace an input (features or checkpoints kept in the output root)
    check_no_overlap(output_root, run_inputs(config, comps), flag="--output-root",
                     writes=run_writes(comps))
    if check_only:
        return []
    kw = {"output_root": output_root, "device": device, "progress": progress, "force": force,
          "allow_unaligned": allow_unaligned}
    results = run_tasks(run_comparison_task, [(c, kw) for c in comps], executor=executor,
                        folder=Path(output_root) / "submitit", name="rdx-run")
    failed = [r for r in results if isinstance(r, dict)]
    if failed:
        raise RDXInputError("some comparison jobs failed (finished methods are kept; run "
                            "again to resume): " + "; ".join(str(f.get("error")) for f in failed))
    return [Path(r) for r in results]
