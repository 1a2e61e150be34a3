"""Mean-ablation patching of attention heads: which blocks and heads to patch, the patched
block outputs, and the metrics of each patched output against the unpatched one."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import RDXInputError
from ...io import array_digest, json_digest, read_json, save_npz_atomic, write_json_atomic
from ...models.study_model import StudyModel
from .analysis import LayerProbes, single_blas_thread
from .config import DIRECTIONS, FORMAT_VERSION, HEAD_METRICS, LayersConfig


def resolve_patching(cfg: LayersConfig, model: torch.nn.Module, specs: list, pairs: list
                      ) -> list[dict]:
    """The blocks to patch: block index, module name, its attention, target layer, pair."""
    from ...models.layers import find_blocks, get_module
    from ...models.patching import attention_of

    p = cfg.patching
    container = p.blocks_module or find_blocks(model)
    if container is None:
        raise RDXInputError("patching: no transformer blocks found; set "
                            "patching.blocks_module or patching.enabled: false.")
    blocks = get_module(model, container)
    n_blocks = len(blocks)
    by_key = {s.key: i for i, s in enumerate(specs)}
    candidates = []
    for b in range(n_blocks):
        target = next((s for s in specs if s.module == f"{container}.{b}"
                       and s.point == "output"), None)
        candidates.append(target)
    if p.blocks == "auto":
        chosen = [b for b, t in enumerate(candidates) if t is not None]
    else:
        bad = [b for b in p.blocks if b >= n_blocks]
        if bad:
            raise RDXInputError(f"patching.blocks: {bad} do not exist ({container} has "
                                f"{n_blocks} blocks).")
        missing = [b for b in p.blocks if candidates[b] is None]
        if missing:
            raise RDXInputError(f"patching.blocks: the outputs of blocks {missing} are not "
                                f"among the layers ({container}.<b>); add them or drop "
                                "those blocks.")
        chosen = list(p.blocks)
    if not chosen:
        raise RDXInputError(f"patching: none of the layers is the output of a block of "
                            f"{container}; list {container}.<b> layers or disable patching.")
    out = []
    for b in chosen:
        name = f"{container}.{b}"
        attn = attention_of(get_module(model, name), name)
        heads = list(range(attn.num_heads)) if p.heads == "auto" else list(p.heads)
        bad = [h for h in heads if h >= attn.num_heads]
        if bad:
            raise RDXInputError(f"patching.heads: {bad} do not exist ({name}.attn has "
                                f"{attn.num_heads} heads).")
        target = candidates[b]
        pair = next((i for i, (_, bb) in enumerate(pairs) if bb == by_key[target.key]), None)
        out.append({"block": b, "module": name, "attn": attn, "heads": heads,
                    "target": target, "pair": pair})
    return out


@torch.no_grad()
def patched_outputs(model: torch.nn.Module, run: Callable, loader: Any, block_name: str,
                    attn: torch.nn.Module, means: np.ndarray, heads: Sequence[int], *,
                    pool: str, n_prefix: int, device: torch.device, progress: Any = None
                    ) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """Block ``block_name`` re-run on its unpatched input with each head mean-ablated.

    Returns ``({head: n × d patched output, pooled}, n × d unpatched re-run)``; the input of
    the block comes from a forward pass stopped at the block.
    """
    from ...models.layers import LayerSpec, capture_batch, get_module, reduce_tensor
    from ...models.patching import mean_ablation

    block = get_module(model, block_name)
    spec_in = LayerSpec(block_name, "input")
    outs: dict[int, list] = {h: [] for h in heads}
    plain = []
    for images, _ in loader:
        x = images.to(device)
        x_in = capture_batch(model, x, [spec_in], run=run, reduce=False)[spec_in.key]
        plain.append(reduce_tensor(block(x_in), pool, n_prefix).float().cpu())
        for h in heads:
            with mean_ablation(attn, means, h):
                y = block(x_in)
            outs[h].append(reduce_tensor(y, pool, n_prefix).float().cpu())
        if progress is not None:
            progress.update(len(images))
    return ({h: torch.cat(v).numpy() for h, v in outs.items()}, torch.cat(plain).numpy())


def head_metrics(P: np.ndarray, T: np.ndarray, R_T: torch.Tensor, S_T: torch.Tensor | None,
                 est: Any, *, k: int, labels: dict[str, np.ndarray] | None,
                 probes: LayerProbes, y: np.ndarray) -> tuple[dict, dict]:
    """Metrics of one patched output ``P`` against the unpatched target ``T``.

    ``R_T``: neighbour ranks of T; ``S_T``: RDX's similarity matrix of T (``est.
    similarity_of(T)``; None when it is the rank matrix); ``labels``: the RDX clusters of
    the pair ending at this block, per direction. Returns (record, arrays).
    """
    from ...method.geometry import to_device_centered
    from ...method.ranks import rank_matrix
    from ...models.patching import cluster_neighbourhood_delta, topk_neighbourhood_change
    from ...similarity.cka import debiased_linear_cka

    dev = R_T.device
    R_P = rank_matrix(to_device_centered(P, dev))
    # similarity_of gives numpy on the CPU; the patching metrics work on tensors
    S_P = R_P if S_T is None else torch.as_tensor(est.similarity_of(P), device=dev)
    S_T = R_T if S_T is None else S_T
    rec: dict[str, Any] = {"topk_change": topk_neighbourhood_change(R_P, R_T, k),
                           "one_minus_cka": 1.0 - float(debiased_linear_cka(P, T))}
    deltas: dict[str, dict] = {}
    if labels is not None:
        for d in DIRECTIONS:
            deltas[d] = cluster_neighbourhood_delta(S_P, S_T, labels[d], d)
        flat = [x for d in DIRECTIONS for x in deltas[d]["delta"] if x is not None]
        rec["cluster_delta_mean"] = float(np.mean(flat)) if flat else None
        rec["cluster_delta_sum_abs"] = float(np.sum(np.abs(flat))) if flat else None
        rec["cluster_delta_max"] = float(np.max(flat)) if flat else None
    else:
        rec.update(cluster_delta_mean=None, cluster_delta_sum_abs=None, cluster_delta_max=None)
    rec["cluster_delta"] = deltas
    with single_blas_thread():
        kp, lp = probes.knn.predict(P), probes.linear.predict(P)
    rec["knn_acc"] = float(np.mean(kp == y))
    rec["linear_acc"] = float(np.mean(lp == y))
    rec["knn_acc_change"] = rec["knn_acc"] - probes.knn_accuracy
    rec["linear_acc_change"] = rec["linear_acc"] - probes.linear_accuracy
    rec["knn_flip_rate"] = float(np.mean(kp != probes.knn_pred))
    rec["linear_flip_rate"] = float(np.mean(lp != probes.linear_pred))
    return rec, {"knn_pred": kp.astype(np.int32), "linear_pred": lp.astype(np.int32)}


def est_device(est: Any) -> torch.device:
    from ...backend import resolve_device

    return resolve_device(est.device)


def _read_record(path: Path, fingerprint: str) -> dict | None:
    if not path.is_file():
        return None
    try:
        rec = read_json(path)
    except (RDXInputError, OSError, UnicodeDecodeError):
        return None
    return rec if rec.get("fingerprint") == fingerprint else None


def run_patching(cfg: LayersConfig, sm: StudyModel, ds: Any, idx_a: np.ndarray,
                  y: np.ndarray, X: dict, probes: dict, plan: list[dict], pair_labels: dict,
                  pair_docs: list[dict], params: dict, dev: torch.device, out: Path, *,
                  force: bool, progress: bool, say: Callable, n_prefix: int) -> dict:
    from tqdm.auto import tqdm

    from ...models.layers import image_loader
    from ...method.estimator import RDX
    from ...method.geometry import to_device_centered
    from ...method.ranks import rank_matrix
    from ...models.patching import head_output_means

    model = sm.loaded.model.to(dev).eval()
    pdir = out / "patching"
    k = cfg.patching.k
    n = len(idx_a)
    if not 1 <= k < n:
        raise RDXInputError(f"patching.k={k} must be below the {n} analysis images.")

    def loader():
        return image_loader(ds, idx_a, sm.loaded.transform, batch_size=cfg.batch_size,
                            num_workers=cfg.num_workers, pin_memory=dev.type == "cuda")

    # the head means: cached next to the results, keyed by the model and the images
    means_key = json_digest({"weights": sm.loaded.weights_id, "model": sm.loaded.model_id,
                             "ids": [ds.ids[i] for i in idx_a],
                             "transform": repr(sm.loaded.transform),
                             "blocks": [p["module"] for p in plan]})
    means_path = pdir / "head_means.npz"
    means = None
    if means_path.is_file() and not force:
        try:
            with np.load(means_path, allow_pickle=False) as z:
                if str(z["key"]) == means_key:
                    means = {p["module"]: z[f"b{p['block']}"] for p in plan}
        except (OSError, ValueError, KeyError, EOFError):
            means = None
    if means is None:
        with tqdm(total=n, desc="head means", unit="img", disable=not progress,
                  leave=False) as bar:
            means = head_output_means((x for x, _ in loader()), sm.run,
                                      {p["module"]: p["attn"] for p in plan}, device=dev,
                                      progress=bar)
        save_npz_atomic(means_path, key=np.array(means_key),
                        **{f"b{p['block']}": means[p["module"]] for p in plan})
    means_digest = json_digest({k_: array_digest(v) for k_, v in means.items()})

    est = RDX(**{**params, "device": cfg.device})
    heads_total = sum(len(p["heads"]) for p in plan)
    records: dict[tuple[int, int], dict] = {}
    checks = {}
    bar = tqdm(total=heads_total, desc="patching heads", disable=not progress)
    for p in plan:
        b, target = p["block"], p["target"]
        T = X[target.key]
        pair = p["pair"]
        labels = pair_labels.get(pair) if pair is not None else None
        pair_fp = None if pair is None else json_digest(pair_docs[pair]["directions"])
        fps = {h: json_digest({"format": FORMAT_VERSION, "weights": sm.loaded.weights_id,
                               "target": array_digest(T), "pair": pair_fp, "block": b,
                               "head": h, "k": k, "means": means_digest,
                               "probes": cfg.probes.model_dump(), "rdx": params})
               for h in p["heads"]}
        pending = []
        for h in p["heads"]:
            rec = None if force else _read_record(pdir / f"b{b}_h{h}.json", fps[h])
            if rec is not None and (pdir / f"b{b}_h{h}.npz").is_file():
                records[(b, h)] = rec
                bar.update(1)
            else:
                pending.append(h)
        if not pending:
            continue
        with tqdm(total=n, desc=f"block {b}: {len(pending)} heads", unit="img",
                  disable=not progress, leave=False) as ibar:
            P, plain = patched_outputs(model, sm.run, loader(), p["module"], p["attn"],
                                       means[p["module"]], pending, pool=target.pool,
                                       n_prefix=n_prefix, device=dev, progress=ibar)
        # the block re-run on its captured input must give the captured output
        checks[b] = float(np.abs(plain - T).max())
        R_T = rank_matrix(to_device_centered(T, est_device(est)))
        S_T = None if est.similarity == "neighborhood" else torch.as_tensor(
            est.similarity_of(T), device=R_T.device)
        for h in pending:
            rec, arrays = head_metrics(P[h], T, R_T, S_T, est, k=k, labels=labels,
                                       probes=probes[target.key], y=y)
            rec.update(block=b, head=h, module=p["module"], target=target.key, pair=pair,
                       rerun_max_abs_diff=checks[b], fingerprint=fps[h])
            save_npz_atomic(pdir / f"b{b}_h{h}.npz", **arrays)
            write_json_atomic(pdir / f"b{b}_h{h}.json", rec)   # last: marks the head done
            records[(b, h)] = rec
            bar.update(1)
        del P
    bar.close()
    blocks = [p["block"] for p in plan]
    heads = sorted({h for p in plan for h in p["heads"]})
    matrices = {}
    for m in HEAD_METRICS:
        M = np.full((len(blocks), len(heads)), np.nan)
        for i, b in enumerate(blocks):
            for j, h in enumerate(heads):
                v = (records.get((b, h)) or {}).get(m)
                if v is not None:
                    M[i, j] = v
        matrices[m] = M
    save_npz_atomic(out / "patching.npz", blocks=np.array(blocks), heads=np.array(heads),
                    **matrices)
    top = {}
    for m in ("topk_change", "one_minus_cka", "cluster_delta_mean", "knn_acc_change"):
        items = [r for r in records.values() if r.get(m) is not None]
        # accuracy changes: the most harmful heads (most negative) first
        items.sort(key=lambda r: r[m], reverse=m != "knn_acc_change")
        top[m] = [{"block": r["block"], "head": r["head"], "value": r[m]} for r in items[:5]]
    for m, rows in top.items():
        if rows:
            say(f"  top heads by {m}: " + ", ".join(f"b{r['block']}h{r['head']} "
                                                     f"({r['value']:.3f})" for r in rows[:3]))
    return {"blocks": blocks, "heads": heads, "k": k,
            "metrics": {m: matrices[m].tolist() for m in HEAD_METRICS},
            "target_layers": {str(p["block"]): p["target"].key for p in plan},
            "pairs": {str(p["block"]): p["pair"] for p in plan},
            "rerun_max_abs_diff": {str(b_): v for b_, v in checks.items()},
            "top_heads": top,
            "records": [records[key] for key in sorted(records)]}
