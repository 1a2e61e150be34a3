"""Build ``explore.html``: the interactive page of one comparison.

:func:`build_explorer` reads a comparison folder (:func:`rdx.explorer.inputs.load_inputs`),
computes for every representation pair the two aligned 2-D maps
(:mod:`rdx.explorer.embedding`) and the per-image neighbour values of the RDX graph
(:mod:`rdx.explorer.graph`), gathers every method's explanations, and writes one
self-contained HTML file (:mod:`rdx.explorer.page`) with thumbnails sized to a byte budget
(:mod:`rdx.explorer.thumbnails`).

Page data (the ``#rdx-data`` JSON block; numeric arrays are ``{"__t": dtype, "shape",
"b64"}`` little-endian, ``"scale"`` for int16-quantised floats)::

    n, labels, class_names, ids, thumbs (data: URIs or null), thumb_info, notes,
    k, neighborhood_size, anim_duration_ms, build {params, effective, versions, seconds, parts},
    pairs: [{name, a_name, b_name, a_short, b_short, k, graph {GraphSpec},
             embedding {a: n×2, b: n×2, method, params, note, label},
             groups {a | b | rdx_a_over_b | rdx_b_over_a: {idx, ra, rb}: n×k; ranks in
                     A / B, null where implied (the rank of A's j-th nearest in A is j)},
             directions {a_over_b | b_over_a: {label, meaning, tight,
                         diff {a, b, rdx}: n×k, affinity_sum, difference_sum: n,
                         ranking: n (image ids by affinity sum, descending)}},
             methods: [{name, method, bsr, params,
                        directions {d: {assign: n (k ≥ 1 explanation, 0 no-change group,
                                                   -1 none), has_members, has_null,
                                        explanations [{images, bsr, n_members,
                                                       mean_affinity, low_affinity,
                                                       significance, extra}],
                                        chance {bsr_mean, bsr_lo, bsr_hi} or null,
                                        significance {n_significant, n_assessed, alpha,
                                                      null} or null,
                                        named_groups {null, noise, n_draws, n_tests,
                                                      alpha, groups [{name, size, members:
                                                      uint16|32, statistic, p_value,
                                                      p_value_holm, significant}]} or null
                                                      (rdx explain --test-classes /
                                                      --test-group),
                                        codes: n×k (quantised) or null, extra}}}],
             (an explanation's bsr: of its own grid, rank dissimilarity; its significance:
              the record from --significance plus badge {significant, text, p, title};
              null when the run has none)
             probe {a, b: n predictions, source, accuracy} or null,
             matrix {a_over_b, b_over_a: n×n diff_d as int8 × scale (b_over_a null when it
                     is −a_over_b: shared), bytes, shared} or null, matrix_note,
             info: [text]}]

A list of pairs (e.g. the layer pairs of a layer-wise study over the same images) gives the
page a pair selector.
"""
from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..results.store import EXPLORE_HTML
from .. import __version__
from .. import validation as V
from ..errors import RDXInputError
from ..io import atomic_write, jsonable, versions
from ..paths import shown_path, without_machine_paths
from ..results.types import DIRECTIONS
from ..report.html import esc, significance_badge
from ..results.nulls import standing_text
from .embedding import EMBEDDINGS, cached_embed_pair

#: the progress line's words for each ``embedding``
EMBEDDING_WORDS = {"auto": "aligned knn layout, a few seconds",
                   "knn_layout": "aligned knn layout, a few seconds",
                   "aligned_umap": "umap-learn's AlignedUMAP, about a minute",
                   "pca": "PCA"}
from .graph import GraphSpec, MatrixDifference, graph_spec, neighbour_tables, refit_graph
from .inputs import ExplorerInputs, MethodInputs, PairInputs, load_inputs
from .page import MAX_BYTES, index_dtype, quantized, quantized8, render_page, typed
from .thumbnails import make_thumbnails

EXPLORER_NAME = EXPLORE_HTML
#: default share of the page for the pairs' n×n difference matrices (selection statistics)
SELECTION_BYTES = 6_000_000
#: Characters of a text item the page carries (a longer snippet is cut with an ellipsis).
ITEM_CHARS = 400
#: share of max_bytes kept for the thumbnails before the selection matrices are left out
THUMB_SHARE = 0.3
#: keys of an explanation dict the page shows in its own way; any other scalar is listed
_SHOWN_KEYS = {"images", "members", "values", "mean_affinity", "low_affinity", "significance"}


def _meaning(tight: str, loose: str) -> str:
    return (f"groups of images that {tight} holds tightly together and {loose} spreads "
            f"apart: what {tight} represents that {loose} does not")


def _scalars(d: Mapping[str, Any], skip: set[str], *, max_chars: int = 300) -> dict[str, Any]:
    """The plain values (numbers, strings, booleans) of a dict for display; small nested
    values (e.g. a v2 run's filter record) as compact JSON text."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if k in skip or v is None:
            continue
        if isinstance(v, (bool, int, float, str)):
            if not (isinstance(v, float) and not np.isfinite(v)):
                out[str(k)] = v
        elif isinstance(v, (Mapping, list, tuple)):
            text = json.dumps(jsonable(v), separators=(",", ":"))
            if len(text) <= max_chars:
                out[str(k)] = text
    return out


def _indices(values: Any, n: int, where: str) -> np.ndarray:
    a = np.asarray(values if values is not None else [], dtype=np.int64).reshape(-1)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise RDXInputError(f"{where}: image indices outside 0..{n - 1}; the results do not "
                            "belong to these images — re-run the comparison with --force.")
    return a


def _significance(record: Any, summary: Any) -> dict[str, Any] | None:
    """An explanation's significance record for the page, with the badge's wording from the
    report's helper (the page does not format p itself); None where it was not assessed."""
    badge = significance_badge(record, summary)
    # "significant" is None where the null gives no verdict: kept, so the page says so
    return None if badge is None else {**_scalars(record, set()),
                                       "significant": record.get("significant"),
                                       "badge": badge}


def _named_groups(tests: Any, direction: str, n: int, where: str) -> dict[str, Any] | None:
    """The named groups tested in ``direction`` (``info.group_tests``) with their images, and
    the null they were tested against; None where the run tested none (or, written before
    their images were stored, none with images)."""
    if not isinstance(tests, Mapping):
        return None
    out = []
    for g in tests.get("groups") or []:
        if not isinstance(g, Mapping) or g.get("direction") != direction \
                or g.get("members") is None:
            continue
        out.append({"name": str(g.get("name")), "size": g.get("size"),
                    "members": typed(_indices(g["members"], n, where).astype(index_dtype(n))),
                    **{k: g.get(k) for k in ("statistic", "p_value", "p_value_holm",
                                             "significant")}})
    if not out:
        return None
    from ..results.nulls import null_name

    stand = tests.get("standing") or {}
    return {**{k: tests.get(k) for k in ("null", "noise", "n_draws", "n_tests", "alpha")},
            # the page names the null as the console and the report do
            "null_name": null_name(tests.get("null"), tests.get("noise")),
            "no_verdict": (f"{stand.get('basis', '')}; {stand.get('advice', '')}"
                           if stand.get("calibrated") is False else None),
            "groups": out}


def _grid_bsr(prepared: Any, direction: str, grid: list[int]) -> float | None:
    """The BSR (rank dissimilarity) of one explanation's grid alone: the share of its image
    pairs closer in the explained model; None for a grid of fewer than two images."""
    from ..evaluation.bsr import bsr_scores

    if prepared is None or len(grid) < 2:
        return None
    v = bsr_scores(*prepared, {direction: [grid]}, dissimilarity="rank")[direction]["bsr"]
    return float(v) if np.isfinite(v) else None


def _chance(doc: Mapping[str, Any], direction: str) -> dict[str, Any] | None:
    """The chance level of the direction's BSR (rank) from the method's scores, if scored."""
    c = (((doc.get("scores") or {}).get("chance") or {}).get(direction) or {}).get("rank")
    if not isinstance(c, Mapping) or c.get("bsr_mean") is None:
        return None
    return {k: c.get(k) for k in ("bsr_mean", "bsr_lo", "bsr_hi")}


def method_payload(m: MethodInputs, n: int, prepared: Any = None) -> dict[str, Any] | None:
    """A method's explanations for the page, or None for methods without any (CKA, probes).

    ``prepared``: the pair's (A, B) prepared for scoring (:func:`rdx.evaluation.bsr.
    prepare_representation`); then each explanation carries the BSR of its own grid."""
    dirs = m.doc.get("directions") or {}
    sig_summary = (m.doc.get("info") or {}).get("significance")
    if not isinstance(dirs, Mapping) or not any(isinstance(dirs.get(d), Mapping)
                                                for d in DIRECTIONS):
        return None
    out: dict[str, Any] = {}
    for side, d in (("a", "a_over_b"), ("b", "b_over_a")):
        q = dirs.get(d)
        if not isinstance(q, Mapping):
            continue
        exps = list(q.get("explanations") or [])
        where = f"{m.name}/explanations.json ({d})"
        assign = np.full(n, -1, dtype=np.int16)
        has_null = q.get("null_members") is not None
        if has_null:
            assign[_indices(q["null_members"], n, where)] = 0
        has_members = any(e.get("members") is not None for e in exps)
        shown = []
        sig_summary_d = sig_summary if isinstance(sig_summary, Mapping) else {}
        for k, e in enumerate(exps, start=1):
            members = e.get("members")
            if members is not None:
                mem = _indices(members, n, where)
                assign[mem[assign[mem] < 1]] = k        # overlapping concepts: first wins
            grid = _indices(e.get("images"), n, where).tolist()
            shown.append({
                "images": grid, "bsr": _grid_bsr(prepared, d, grid),
                "n_members": None if members is None else len(members),
                "mean_affinity": e.get("mean_affinity"),
                "low_affinity": bool(e.get("low_affinity", False)),
                "significance": _significance(e.get("significance"), sig_summary),
                "extra": _scalars(e, _SHOWN_KEYS)})
        codes = m.arrays.get(f"{side}_codes")
        codes_ok = codes is not None and codes.ndim == 2 and codes.shape == (n, len(exps))
        n_sig = sum(bool((e["significance"] or {}).get("badge", {}).get("significant"))
                    for e in shown)
        assessed = sum(e["significance"] is not None for e in shown)
        out[d] = {"assign": typed(assign), "has_members": has_members, "has_null": has_null,
                  "explanations": shown, "chance": _chance(m.doc, d),
                  "significance": None if not assessed else {
                      "n_significant": n_sig, "n_assessed": assessed,
                      "alpha": sig_summary_d.get("alpha"), "null": sig_summary_d.get("null"),
                      # what the null is and is calibrated on, in the console's words
                      "calibrated": (sig_summary_d.get("standing") or {}).get("calibrated",
                                                                               True),
                      "standing": standing_text(sig_summary_d.get("null"),
                                                sig_summary_d.get("noise"),
                                                sig_summary_d.get("standing"))},
                  "named_groups": _named_groups((m.doc.get("info") or {}).get("group_tests"),
                                                d, n, where),
                  "codes": quantized(codes) if codes_ok else None,
                  "extra": _scalars(q, {"explanations", "null_members"})}
    return {"name": m.name, "method": m.method, "bsr": m.doc.get("bsr"),
            "params": _scalars(m.doc.get("params") or {}, set()), "directions": out}


def _probe(pair: PairInputs, n: int) -> dict[str, Any] | None:
    for m in pair.methods:
        a, b = m.arrays.get("a_predictions"), m.arrays.get("b_predictions")
        if m.method == "classification" and a is not None and b is not None \
                and len(a) == n and len(b) == n:
            acc = {k: v.get("accuracy") for k, v in (m.doc.get("probe") or {}).items()
                   if isinstance(v, Mapping)}
            return {"a": typed(np.asarray(a, np.int32)), "b": typed(np.asarray(b, np.int32)),
                    "source": m.name, "accuracy": acc}
    return None


def _info(pair: PairInputs) -> list[str]:
    """One line per non-explanation result (similarities, probes) of the pair."""
    lines = []
    for m in pair.methods:
        sims = m.doc.get("similarity")
        if isinstance(sims, Mapping):
            lines.append(f"{m.name}: " + ", ".join(
                f"{k} = {v:.3f}" if isinstance(v, (int, float)) else f"{k} = {v}"
                for k, v in sims.items()))
        probe = m.doc.get("probe")
        if isinstance(probe, Mapping):
            accs = ", ".join(f"{k} {v['accuracy']:.3f}" for k, v in probe.items()
                             if isinstance(v, Mapping) and "accuracy" in v)
            agree = m.doc.get("agreement", {})
            lines.append(f"{m.name}: probe accuracy {accs}"
                         + (f"; agreement {agree['a_b']:.3f}" if "a_b" in agree else ""))
    return lines


def describe(spec: Mapping[str, Any], base: Path | None = None) -> str:
    """One line saying what a representation is; a features file given by an absolute path
    is shown relative to ``base``, the page's folder (the page names no folder of the
    machine that wrote it)."""
    if not spec:
        return "unknown representation"
    if "features" in spec:
        shown = spec["features"] if base is None else shown_path(str(spec["features"]), base)
        return f"features {shown}"
    parts = [str(spec.get("model", "model"))]
    if spec.get("checkpoint"):
        parts.append(Path(str(spec["checkpoint"])).name)
    elif spec.get("pretrained") not in (None, False):
        parts.append(str(spec["pretrained"]))
    if spec.get("layer"):
        parts.append(f"layer {spec['layer']}")
    return ", ".join(parts)


def _graph_method(pair: PairInputs, wanted: str | None) -> MethodInputs | None:
    rdx = [m for m in pair.methods if m.method == "rdx"]
    if wanted is None:
        return rdx[0] if rdx else None
    for m in rdx:
        if m.name == wanted:
            return m
    raise RDXInputError(f"graph_method={wanted!r}: no RDX method of that name in {pair.name}; "
                        f"RDX methods there: {[m.name for m in rdx] or 'none'}.")


def pair_payload(pair: PairInputs, labels: np.ndarray, *, k: int, neighborhood_size: int | None,
                 embedding: str, seed: int | None, graph_method: str | None,
                 progress: bool, cache_dir: Path | None = None,
                 matrix_bytes: int = 0, page_dir: Path | None = None
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Everything the page shows for one pair, and the effective parameters used.

    ``page_dir``: the page's folder, from which the paths it shows are relative.
    ``matrix_bytes``: what the pair's whole difference matrix may take in the page (for the
    mean affinities of a box or lasso selection); it is left out when it needs more."""
    n = len(labels)
    gm = _graph_method(pair, graph_method)
    spec: GraphSpec = graph_spec(gm.doc.get("params") if gm else None, n,
                                 gm.name if gm else "defaults")
    run_seed = seed if seed is not None else int(pair.run.get("seed", 42) or 42)
    matrices = None
    if gm is not None and gm.load_graphs is not None:
        saved = gm.load_graphs(("diff_a_over_b", "diff_b_over_a_graph"))
        if saved.get("diff_a_over_b") is not None and saved["diff_a_over_b"].shape == (n, n):
            matrices = MatrixDifference(saved["diff_a_over_b"], saved.get("diff_b_over_a_graph"))
            spec = replace(spec, values="graphs.npz")
    if matrices is None and not spec.row_computable:
        # guidance / symmetrised graphs: each row needs the whole matrix — refit the method
        if progress:
            print(f"explorer: {pair.name}: refitting {spec.source} for its graph", flush=True)
        matrices = refit_graph(pair.a, pair.b, gm.doc.get("params") or {}, labels=labels,
                               alignment=pair.alignment, seed=run_seed)
        spec = replace(spec, values="refit")
    hood = neighborhood_size if neighborhood_size is not None else \
        int((gm.doc.get("params") or {}).get("grid_size", 9) if gm else 9)
    def announce() -> None:
        if progress:
            from ..progress import status

            status(f"explorer: {pair.name}: 2-D maps of {n} images "
                   f"({EMBEDDING_WORDS.get(embedding, embedding)})")

    t_maps = time.perf_counter()
    emb, cached = cached_embed_pair(pair.a, pair.b, cache_dir, method=embedding,
                                    seed=run_seed, on_compute=announce, progress=progress)
    if progress and cached:
        print(f"explorer: {pair.name}: maps of {n} images reused from {cache_dir}", flush=True)
    t_maps = time.perf_counter() - t_maps
    n_mat = 2 if spec.aligned else 1    # as neighbour_tables: else b_over_a = −a_over_b
    need = matrix_need(n, n_mat)
    T = neighbour_tables(pair.a, pair.b, spec, k=k, neighborhood_size=hood,
                         alignment=pair.alignment, matrices=matrices, progress=progress,
                         keep_matrix=need <= matrix_bytes)
    if T.matrix is not None:
        mats = {d: quantized8(T.matrix[d]) if d in T.matrix else None for d in DIRECTIONS}
        matrix = {**mats, "bytes": need, "shared": mats["b_over_a"] is None}
        matrix_note = None
    else:
        matrix = None
        matrix_note = (f"the mean affinities of a selection need this pair's {n}×{n} "
                       f"difference matrix ({need / 1e6:.1f} MB), more than the page's "
                       f"--selection-mb allows ({matrix_bytes / 1e6:.1f} MB left)")
    idt = index_dtype(n)
    a_short, b_short = "A", "B"
    groups = {"a": T.nearest["a"], "b": T.nearest["b"],
              "rdx_a_over_b": T.rdx["a_over_b"], "rdx_b_over_a": T.rdx["b_over_a"]}
    directions = {}
    for d, tight, loose in (("a_over_b", a_short, b_short), ("b_over_a", b_short, a_short)):
        # ties by image index: a stable sort of the negated sums
        ranking = np.argsort(-T.affinity_sum[d], kind="stable")
        directions[d] = {"label": f"{tight} over {loose}", "meaning": _meaning(tight, loose),
                         "tight": tight,
                         "diff": {g: quantized(T.diff[d][g]) for g in ("a", "b", "rdx")},
                         "affinity_sum": typed(T.affinity_sum[d].astype(np.float32)),
                         "difference_sum": typed(T.difference_sum[d].astype(np.float32)),
                         "ranking": typed(ranking.astype(np.uint32))}
    from ..evaluation.bsr import prepare_representation

    prepared = (prepare_representation(pair.a, name="A"),
                prepare_representation(pair.b, name="B"))
    methods = [p for p in (method_payload(m, n, prepared) for m in pair.methods)
               if p is not None]
    payload = {
        "name": pair.name, "a_name": describe(pair.a_spec, page_dir),
        "b_name": describe(pair.b_spec, page_dir),
        "a_short": a_short, "b_short": b_short, "k": T.k, "graph": spec.to_dict(),
        "embedding": {"a": typed(emb.a), "b": typed(emb.b), "method": emb.method,
                      "params": emb.params, "note": emb.note, "label": emb.label},
        # a group's rank in its own model is its position (1..k): not stored (null)
        "groups": {g: {"idx": typed(idx.astype(idt)),
                       "ra": None if g == "a" else typed(T.ranks[g][0].astype(idt)),
                       "rb": None if g == "b" else typed(T.ranks[g][1].astype(idt))}
                   for g, idx in groups.items()},
        "directions": directions, "methods": methods, "probe": _probe(pair, n),
        "matrix": matrix, "matrix_note": matrix_note, "info": _info(pair)}
    effective = {"pair": pair.name, "graph": spec.to_dict(), "k": T.k,
                 "neighborhood_size": T.neighborhood_size, "embedding": emb.method,
                 "embedding_params": emb.params, "seed": run_seed,
                 "matrix_bytes": need if matrix is not None else 0,
                 "maps_seconds": round(t_maps, 2), "maps_cached": cached}
    return payload, effective


def matrix_need(n: int, n_matrices: int) -> int:
    """Bytes of ``n_matrices`` n×n int8 matrices in the page (base64)."""
    return int(n_matrices * 4 * ((n * n + 2) // 3) + 200)


def build_explorer(comp_dir: str | Path, out_path: str | Path | None = None, *,
                   embedding: str = "auto", k: int = 12, neighborhood_size: int | None = None,
                   thumb_size: int | str = "auto", max_bytes: int = MAX_BYTES,
                   seed: int | None = None, graph_method: str | None = None,
                   anim_duration_ms: int = 2000, progress: bool = True,
                   inputs: ExplorerInputs | None = None,
                   selection_bytes: int = SELECTION_BYTES) -> Path:
    """Write the interactive explorer of a comparison folder; returns the page's path.

    Parameters
    ----------
    comp_dir : a comparison folder ``outputs/<experiment>/<comparison>`` (or a folder of
        such pair folders over the same images).
    out_path : where to write; default ``<comp_dir>/explore.html``.
    embedding : ``"auto"`` / ``"knn_layout"`` (rdx's aligned UMAP-style layout, a few
        seconds; PCA below 20 images), ``"aligned_umap"`` (umap-learn's AlignedUMAP, about
        a minute) or ``"pca"`` (see :mod:`rdx.explorer.embedding`).
    k : neighbours shown per group (nearest in A, nearest in B, RDX neighbours).
    neighborhood_size : images per neighbourhood of the ranking (the image and its nearest
        in the tight model); default the RDX method's ``grid_size`` (9).
    thumb_size : ``"auto"`` (largest of 96…32 px fitting ``max_bytes``) or pixels.
    max_bytes : size budget of the page; the thumbnails are shrunk to fit it.
    seed : seed of the embedding; default the run's seed.
    graph_method : name of the RDX method whose graph parameters give the neighbour values
        and the ranking; default the first RDX method (RDX's defaults without one).
    inputs : already loaded inputs (skips reading ``comp_dir``).
    selection_bytes : what the pairs' whole difference matrices may take of the page, for
        the mean affinities of a box/lasso selection (pairs in order, each while it fits;
        a pair left out says so on the page).
    """
    t0 = time.perf_counter()
    V.check_choice(embedding, "embedding", EMBEDDINGS)
    k = V.check_int(k, "k", minimum=1)
    if neighborhood_size is not None:
        neighborhood_size = V.check_int(neighborhood_size, "neighborhood_size", minimum=1)
    max_bytes = V.check_int(max_bytes, "max_bytes", minimum=1)
    selection_bytes = V.check_int(selection_bytes, "selection_bytes", minimum=0)
    anim_duration_ms = V.check_int(anim_duration_ms, "anim_duration_ms", minimum=1)
    if seed is not None:
        seed = V.check_int(seed, "seed", minimum=0, maximum=2**32 - 1)
    if thumb_size != "auto":
        V.check_int(thumb_size, "thumb_size", minimum=8)
    comp_dir = Path(comp_dir)
    out = Path(out_path) if out_path is not None else comp_dir / EXPLORER_NAME
    if out.is_dir():
        raise RDXInputError(f"{out} is a folder; pass the page's file name, e.g. "
                            f"{out / EXPLORER_NAME}.")
    inp = inputs if inputs is not None else load_inputs(comp_dir)
    # where the build's time goes (page data build.parts; benchmarks/bench_explorer.py)
    parts = {"inputs": time.perf_counter() - t0}
    n = inp.n
    pairs, effective = [], []
    left = selection_bytes
    for pair in inp.pairs:
        t_pair = time.perf_counter()
        payload, eff = pair_payload(pair, inp.labels, k=k, neighborhood_size=neighborhood_size,
                                    embedding=embedding, seed=seed, graph_method=graph_method,
                                    progress=progress, cache_dir=out.parent, matrix_bytes=left,
                                    page_dir=out.parent)
        left -= eff["matrix_bytes"]
        parts["maps"] = parts.get("maps", 0.0) + eff["maps_seconds"]
        parts["pairs_other"] = parts.get("pairs_other", 0.0) + \
            time.perf_counter() - t_pair - eff["maps_seconds"]
        pairs.append(payload)
        effective.append(eff)
    # a note may quote an exception naming a file: as seen from the page, not this machine
    notes = [without_machine_paths(t, out.parent) for t in inp.notes]
    params = {"embedding": embedding, "k": k, "neighborhood_size": neighborhood_size,
              "thumb_size": thumb_size, "max_bytes": max_bytes, "seed": seed,
              "graph_method": graph_method, "anim_duration_ms": anim_duration_ms,
              "selection_bytes": selection_bytes}
    data: dict[str, Any] = {
        "schema_version": 1, "title": inp.title, "version": __version__,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "dataset": {"name": without_machine_paths(inp.dataset, out.parent), "split": inp.split,
                    "n": n}, "n": n,
        "labels": inp.labels.tolist(), "class_names": inp.class_names, "ids": inp.ids,
        # texts or audio file names (rdx explain --texts/--audio), shown with a selection
        "items": None if inp.items is None else {
            "kind": inp.items["kind"],
            "values": [v if len(v) <= ITEM_CHARS else v[:ITEM_CHARS - 1] + "…"
                       for v in inp.items["values"]]},
        "thumbs": None, "thumb_info": None, "notes": notes, "k": pairs[0]["k"],
        "neighborhood_size": effective[0]["neighborhood_size"],
        "anim_duration_ms": anim_duration_ms, "pairs": pairs,
        "build": {"params": params, "effective": effective, "versions": versions()}}
    footer = (f"RDX explorer · rdx {esc(__version__)} · {esc(inp.title)} · "
              f"written {esc(data['generated'])}")

    def render() -> str:
        data["build"]["seconds"] = round(time.perf_counter() - t0, 2)
        data["build"]["parts"] = {k: round(v, 2) for k, v in parts.items()}
        return render_page(jsonable(data), title=f"RDX explorer · {inp.title}", footer=footer)

    # the selections' matrices give way to the images: while the page without images leaves
    # them less than THUMB_SHARE of max_bytes, the last pair's matrix is left out
    reserve = int(THUMB_SHARE * max_bytes) if inp.load_image is not None else 0
    kept = [j for j, pl in enumerate(pairs) if pl["matrix"] is not None]
    if kept:
        base = len(render().encode("utf-8"))
        while kept and base > max_bytes - reserve:
            j = kept.pop()
            base -= pairs[j]["matrix"]["bytes"]
            effective[j]["matrix_bytes"] = 0
            pairs[j]["matrix"] = None
            pairs[j]["matrix_note"] = (f"this pair's {n}×{n} difference matrix, which gives "
                                       "the mean affinities of a selection, was left out so "
                                       "that the images fit the page's --max-mb; raise "
                                       "--max-mb to keep it")
    if inp.load_image is not None:
        # whatever the rest of the page leaves of the budget goes to the thumbnails
        base = len(render().encode("utf-8"))
        budget = max_bytes - base - 3 * n - 2048
        if budget <= 0:
            raise RDXInputError(f"max_bytes={max_bytes}: the page without images already takes "
                                f"{base} bytes; raise max_bytes.")
        t_th = time.perf_counter()
        th = make_thumbnails(inp.load_image, n, size=thumb_size, budget_bytes=budget,
                             progress=progress)
        parts["thumbnails"] = time.perf_counter() - t_th
        data["thumbs"], data["thumb_info"] = th.uris, th.info
        if not th.info["within_budget"]:
            notes.append(f"The thumbnails ({th.info['bytes']} bytes at {th.info['box']} px) "
                         f"exceed the page's budget of {max_bytes} bytes.")
    html = render()
    atomic_write(out, lambda fh: fh.write(html.encode("utf-8")))
    return out
