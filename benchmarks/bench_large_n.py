"""Large-n mode: ``RDX(graph="knn")`` against the exact (dense) method, and its scale.

Two parts, each fit in a fresh child process (so its time and peak memory are its own):

**validate** — real features, where the exact method still fits. Two comparisons of
ConvNets trained here on Fashion-MNIST (features: global average pool, 64-D, of all-class
images the models were not trained on — the rest of the training split, then the test
split, in a seeded order):

* ``merged`` — same 3000 images per class, seed and schedule; model A is trained with class
  7 "sneaker" labelled 5 "sandal", so A lacks a distinction B has (known difference);
* ``quickstart`` — the quickstart's models (``scripts/train_classifier.py --preset
  fashion_pcs``, what ``bash quickstart.sh`` trains): early checkpoint (A) vs final (B).

For each pair, n (default 5k, 10k, 20k), K and direction the table shows

* ``ARI`` — adjusted Rand index of the knn partition against the dense one with the same
  ``random_state`` (labels: the no-change group 0 and explanations 1..k); ``ARI sig`` the
  same after moving low-affinity clusters (mean affinity < ``null_threshold`` = 1.5, flagged
  ``low_affinity``) into the no-change group, i.e. comparing the explanations a user is
  shown as differences; ``ARI best`` — the knn partition against the closest of the dense
  fits with ``random_state`` 0, 1, … (``--dense-seeds``, default 3); ``ARI seeds`` — the
  yardstick: the smallest ARI between two of those dense fits (how stable the exact
  method's partition is anyway); ``gap`` — ``(λ_{k+1} − λ_{k+2})/λ_{k+1}`` of the dense
  normalised affinity (the partition uses its top k + 1 eigenvectors: a small gap leaves
  them, and the partition, ill-determined); ``strong J`` — for each dense explanation that
  is not low-affinity, the best member Jaccard index with a knn explanation, averaged (1.0:
  every strong dense explanation found with the same members);
* ``grid`` — mean fraction of grid images shared by the dense and knn explanation of the same
  rank (1.0: identical grids);
* ``BSR`` dense / knn — rank BSR of the grids (:func:`rdx.evaluation.bsr.bsr_scores`);
* ``hits`` dense / knn — merged-classes known-difference hits (a grid with ≥ 8 of 9 images
  from classes {5, 7} and ≥ 2 of each): expected in ``a_over_b`` (tight in A, which merges
  them), a control in ``b_over_a``;
* fit seconds and peak RSS (GiB) of each child.

Graph variants (``--k``, default ``auto,auto:0,null``; ``K[:m][/search]``): ``auto`` is the default
of :mod:`rdx.method.knn_fit` (K = 200 with the far-pair sketch of m = 1000 landmarks),
``auto:0`` the same graph without the sketch, ``null`` the null rule (K ≈ 800–940 here) with
the sketch; the K and m used are shown. ``/approx`` (e.g. ``auto/approx``): the same with
``knn_search="approx"`` (:mod:`rdx.method.knn_approx`: faiss IVF lists, ranks estimated from
the landmarks), its recall measured by the fit.

**approx** — the reduced-cost search against the exact one at scale: n = 100 000 and 200 000
(``--approx-sizes``), d = 768 clustered Gaussian features, both with the defaults (K = 200,
m = 1000), each in its own child. Per direction: ARI of the approximate partition against
the exact one, grid overlap, synthetic known-difference hits (``b_over_a``: a grid from one
pair of blobs B merges; ``a_over_b``: from one blob B splits), whole-fit time, the pass's
time, peak RSS and the recall of the lists. Above ``--approx-exact-max`` (default 100 000)
the exact fit is not run: its pass is projected from the measured time of a few of its row
blocks (``--case blocks``: the same per-block function as the pass) times the blocks.

**dask** — the exact pass spread over Dask workers (``rdx explain --executor dask
--scheduler local:W``, ``--dask-workers``, default 2) against the single process, at n =
``--dask-n`` (default 10⁵), d = 768, on :func:`write_representations`' files
(``--dask-dir``; reused), the defaults K = 200, m = 1000: whole-process time, the pass's
time, whether the graphs are identical (their fingerprints, ``info.knn_graph.graph_digest``)
and the explanations too; then a projection of the pass to N one-thread workers from the
measured seconds of its row blocks (``info.knn_graph.search.blocks``): ``T(N) = overhead +
Σ block seconds / N``, the overhead (cluster start, features written for the workers,
collecting) being what the measured pass took beyond ``Σ/W``; at 10⁶ the blocks' sum grows
as n² and the overhead as n.

**scale** — n = 100 000, d = 768 clustered Gaussian features
(:func:`bench_core.make_representations`), ``graph="knn"`` with the first ``--k`` variant
(default: the defaults, K = 200 and m = 1000), in one child process:
whole-process wall time (imports, data, fit), the fit's own steps (``timings_``), peak RSS;
plus smaller n for the scaling exponent of the O(n²d) pass. Also the similarity measures at
that n: mutual k-NN (its k-NN tables are what CKNNA and Jaccard k-NN use too) and the
streamed linear CKA, with their time and peak memory, and RSA's refusal.

**million** — ``rdx explain A.npy B.npy --graph knn`` as a user runs it, at n = 10⁶
(``--million-n``), d = 768, on clustered Gaussian features written block by block to
``.npy`` files (``--million-dir``; the command maps them, it never reads them whole), with
``--million-args`` (default: the approximate search, K = 50, m = 300): whole-process time,
peak RSS, the fit's memory estimate, the recall of the lists and the synthetic
known-difference hits.

Usage (from the repository root; the models are trained once into ``checkpoints/``)::

    .venv/bin/python benchmarks/bench_large_n.py                    # both parts
    .venv/bin/python benchmarks/bench_large_n.py --part validate --sizes 5000,10000 --k auto,auto:0
    .venv/bin/python benchmarks/bench_large_n.py --part scale --scale-sizes 25000,100000
    .venv/bin/python benchmarks/bench_large_n.py --part validate --sizes 20000 --k auto,auto/approx
    .venv/bin/python benchmarks/bench_large_n.py --part approx --approx-sizes 100000,200000
    .venv/bin/python benchmarks/bench_large_n.py --part million --markdown
    .venv/bin/python benchmarks/bench_large_n.py --markdown --out /tmp/large_n.json

The threading is rdx's own choice (rdx/threads.py), as for every user. The machine's
other load is reported per child (other processes' busy CPUs during the run); on a shared
machine the times are upper bounds.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:  # run from a checkout without installing the package
        sys.path.insert(0, str(p))

# first, as users import it: rdx chooses the threading and numpy's SIMD kernels before
# numpy and torch load (rdx.threads, rdx.simd)
import rdx  # noqa: E402,F401
import numpy as np  # noqa: E402

from bench_core import (RESULT_MARKER, header_line, int_list,  # noqa: E402
                        make_representations, run_child)

T_IMPORT = time.perf_counter()
#: Fashion-MNIST classes model A is trained not to tell apart: 7 (sneaker) is labelled 5
#: (sandal). Model B is trained on the true labels, so A lacks a distinction B has.
MERGED_CLASSES = (5, 7)
KNOWN_DIFFERENCE = {"type": "merged_classes", "classes": list(MERGED_CLASSES), "model": "a"}
#: Training images per class (from the training split) and epochs of both ConvNets.
TRAIN_PER_CLASS = 3000
TRAIN_EPOCHS = 4
MODEL_NAMES = {"a": "large_n_merged_5_7", "b": "large_n_full"}
N_EXPLANATIONS = 3
DEFAULT_SIZES = (5000, 10000, 20000)
DEFAULT_SCALE_SIZES = (25000, 50000, 100000)
SCALE_D = 768
DIRECTIONS = ("a_over_b", "b_over_a")
DEFAULT_APPROX_SIZES = (100000, 200000)
#: rdx explain options of the million part: the approximate search, with K and m small
#: enough for the graph and sketch of 10⁶ images to fit a 24 GB machine.
MILLION_ARGS = "--knn-search approx --n-neighbors 50 --n-landmarks 300"
#: A graph variant: (n_neighbors, n_landmarks or None for the default, knn_search).
Variant = tuple[int | str, int | None, str]


# ---------------------------------------------------------------------------- data
def train_models(ckpt_root: Path, *, progress: bool = False) -> dict[str, Path]:
    """Train (once; reused afterwards) the two ConvNets of the validation.

    Both see the same ``TRAIN_PER_CLASS`` images per class of Fashion-MNIST's training split
    (seeded selection), same schedule and seed; A's labels merge ``MERGED_CLASSES``.
    """
    from rdx.data import get_dataset, select_per_class
    from rdx.models.training import train_classifier

    ds = get_dataset("fashion_mnist", split="train")
    idx = select_per_class(ds.ids, ds.labels, None, TRAIN_PER_CLASS, seed=0)
    out: dict[str, Path] = {}
    for m, name in MODEL_NAMES.items():
        last = ckpt_root / name / "last.pt"
        if not last.exists():
            labels = ds.labels[idx].copy()
            if m == "a":
                labels[labels == MERGED_CLASSES[1]] = MERGED_CLASSES[0]
            train_classifier(ds.subset(idx, labels=labels), epochs=TRAIN_EPOCHS,
                             batch_size=64, lr=1e-2, seed=0, save_dir=ckpt_root / name,
                             save_every=None, progress=progress, device="cpu",
                             data_info={"per_class": TRAIN_PER_CLASS, "selection_seed": 0,
                                        "merged": list(MERGED_CLASSES) if m == "a" else None},
                             extra_meta={"benchmark": "bench_large_n"})
        out[m] = last
    return out


def quickstart_models(ckpt_root: Path) -> dict[str, Path]:
    """The quickstart's ConvNets (``scripts/train_classifier.py --preset fashion_pcs``, the
    models ``bash quickstart.sh`` trains): A = its early checkpoint, B = the final one."""
    import subprocess

    folder = ckpt_root / "fashion_pcs"
    ckpts = {"a": folder / "epoch=1-step=142.pt", "b": folder / "last.pt"}
    if not all(p.exists() for p in ckpts.values()):
        subprocess.run([sys.executable, str(ROOT / "scripts" / "train_classifier.py"),
                        "--preset", "fashion_pcs", "--out", str(ckpt_root), "--quiet"],
                       check=True)
    return ckpts


#: The validation's comparisons: (description, models, training selection to hold out,
#: known difference).
PAIRS = {
    "merged": ("ConvNet trained with sneaker labelled sandal (A) vs true labels (B)",
               train_models, (None, TRAIN_PER_CLASS), KNOWN_DIFFERENCE),
    "quickstart": ("quickstart: fashion_pcs early checkpoint (A) vs final (B)",
                   quickstart_models, ((2, 4, 6), 1500), None),
}


def fashion_features(ckpt_root: Path, n_max: int, *, pair: str = "merged",
                     progress: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features (gap layer) of both models of ``pair`` on ``n_max`` Fashion-MNIST images
    they were not trained on (the rest of the training split, then the test split; all ten
    classes), in a seeded random order, so that every smaller n is a prefix. Returns A, B,
    true labels."""
    from rdx.data import get_dataset, select_per_class
    from rdx.models.extract import extract_features
    from rdx.models.zoo import load_model

    _, make_models, (classes, per_class), _ = PAIRS[pair]
    train = get_dataset("fashion_mnist", split="train")
    test = get_dataset("fashion_mnist", split="test")
    used = select_per_class(train.ids, train.labels, classes, per_class, seed=0)
    rest = np.setdiff1d(np.arange(len(train)), used)
    pools = [(train, rest), (test, np.arange(len(test)))]
    total = sum(len(i) for _, i in pools)
    if n_max > total:
        raise SystemExit(f"at most {total} held-out images; asked for n={n_max}")
    ckpts = make_models(ckpt_root) if pair != "merged" else make_models(ckpt_root,
                                                                        progress=progress)
    feats = {}
    for m, path in ckpts.items():
        loaded = load_model({"model": "convnet", "checkpoint": str(path), "layer": "gap"})
        feats[m] = np.concatenate([extract_features(loaded, ds, idx, device="cpu",
                                                    progress=progress)
                                   for ds, idx in pools])
    labels = np.concatenate([ds.labels[idx] for ds, idx in pools])
    order = np.random.default_rng(0).permutation(total)[:n_max]
    return feats["a"][order], feats["b"][order], labels[order]


# ---------------------------------------------------------------------------- children
def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _busy_s() -> float | None:
    try:
        with open("/proc/stat") as fh:
            f = [int(v) for v in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _other_cpus(busy0: float | None, own0: float, wall: float) -> float | None:
    busy1 = _busy_s()
    if busy0 is None or busy1 is None or wall <= 0:
        return None
    return max(0.0, (busy1 - busy0) - (_own_cpu_s() - own0)) / wall


def child_fit(features: Path | None, n: int, graph: str, variant: Variant, seed: int,
              out: Path, d: int = SCALE_D) -> dict[str, Any]:
    """One RDX fit on the first n rows of the features file (None: the synthetic features
    of the scale part, n × d); writes explanations.json.
    ``variant``: (n_neighbors, n_landmarks or None for the default, knn_search)."""
    from rdx.method.estimator import RDX

    if features is None:
        A, B, _ = make_representations(n, d, seed=0)
    else:
        data = np.load(features)
        A, B = data["A"][:n], data["B"][:n]
    k, m, search = variant
    row: dict[str, Any] = {"n": n, "graph": graph, "k": k, "m": m, "search": search,
                           "seed": seed, "error": None}
    busy0, own0 = _busy_s(), _own_cpu_s()
    t0 = time.perf_counter()
    try:
        kw = {} if m is None else {"n_landmarks": m}
        if graph == "knn":
            kw["knn_search"] = search
        model = RDX(n_explanations=N_EXPLANATIONS, random_state=seed, graph=graph,
                    n_neighbors=k, **kw).fit(A, B)
        row["fit_s"] = time.perf_counter() - t0
        row["timings_s"] = dict(model.timings_)
        row["search_info"] = (model.graph_info_ or {}).get("search") \
            if graph == "knn" else None
        res = model.result()
        doc = res.to_json()
        doc["labels"] = {d: model.directions_[d].labels.tolist() for d in DIRECTIONS}
        out.write_text(json.dumps(doc))
    except Exception as exc:  # noqa: BLE001 - a failed case becomes a table row
        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    row["other_cpus"] = _other_cpus(busy0, own0, time.perf_counter() - t0)
    row["peak_rss_gib"] = _peak_rss_gib()
    return row


def child_spectrum(features: Path, n: int, n_eig: int) -> dict[str, Any]:
    """Top ``n_eig`` eigenvalues of each direction's normalised dense affinity
    ``D^{-1/2} S D^{-1/2}`` (the dense fit's matrices, solved to 1e-10): how well separated
    the eigenvectors the partition is built from are."""
    import scipy.sparse.linalg
    import torch

    from rdx.method.geometry import to_device_centered
    from rdx.method.ranks import rank_matrix
    from rdx.method.graphs import difference_matrix_, resolve_gamma, symmetrized_affinity
    from rdx.method.spectral import degree_scaling

    data = np.load(features)
    cpu = torch.device("cpu")
    XA, XB = (to_device_centered(data[m][:n], cpu) for m in ("A", "B"))
    row: dict[str, Any] = {"n": n, "error": None}
    diff = difference_matrix_(rank_matrix(XA), rank_matrix(XB), "locally_biased",
                              gamma=resolve_gamma(None, 80.0, n))
    work = torch.empty_like(diff)
    for d in DIRECTIONS:
        S = symmetrized_affinity(diff, 5.0, d, out=work)
        isd = degree_scaling(S).numpy()
        M = S.numpy()

        def product(v: np.ndarray, M: np.ndarray = M, isd: np.ndarray = isd) -> np.ndarray:
            v = np.asarray(v, dtype=np.float64).reshape(n, -1) * isd[:, None]
            return (M @ v.astype(np.float32)).astype(np.float64) * isd[:, None]

        op = scipy.sparse.linalg.LinearOperator((n, n), matvec=product, matmat=product,
                                                dtype=np.float64)
        vals = scipy.sparse.linalg.eigsh(op, k=n_eig, which="LA", tol=1e-10,
                                         return_eigenvectors=False)
        row[d] = sorted(vals.tolist(), reverse=True)
    row["peak_rss_gib"] = _peak_rss_gib()
    return row


def child_scale(n: int, d: int, variant: Variant) -> dict[str, Any]:
    """The large-n fit on synthetic clustered features: whole-process figures."""
    from rdx.method.estimator import RDX

    k, m, search = variant
    row: dict[str, Any] = {"n": n, "d": d, "k": k, "m": m, "error": None}
    busy0, own0 = _busy_s(), _own_cpu_s()
    t0 = time.perf_counter()
    A, B, _ = make_representations(n, d, seed=0)
    row["data_s"] = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        kw = {} if m is None else {"n_landmarks": m}
        model = RDX(n_explanations=5, random_state=0, graph="knn", n_neighbors=k,
                    knn_search=search, **kw).fit(A, B)
        row["fit_s"] = time.perf_counter() - t1
        row["timings_s"] = dict(model.timings_)
        row["graph"] = model.graph_info_
        row["cluster_sizes"] = {dr: [len(e.members) for e in model.directions_[dr].explanations]
                                for dr in DIRECTIONS}
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    # whole process: interpreter start to now (imports included)
    row["process_s"] = time.perf_counter() - T_IMPORT + _startup_s()
    row["other_cpus"] = _other_cpus(busy0, own0, time.perf_counter() - t0)
    row["peak_rss_gib"] = _peak_rss_gib()
    return row


def _startup_s() -> float:
    """Seconds between the process start and this module's import (interpreter start-up)."""
    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().split(")")[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        return max(0.0, age - (time.perf_counter() - T_IMPORT))
    except (OSError, ValueError, IndexError):
        return 0.0


def child_similarity(n: int, d: int, measure: str) -> dict[str, Any]:
    """One similarity measure at scale on the same synthetic features."""
    from rdx.similarity import cka, neighbors
    from rdx.similarity import rsa     # the package exports the function

    A, B, _ = make_representations(n, d, seed=0)
    row: dict[str, Any] = {"n": n, "d": d, "measure": measure, "error": None}
    busy0, own0 = _busy_s(), _own_cpu_s()
    t0 = time.perf_counter()
    try:
        fn = {"mutual_knn": lambda: neighbors.mutual_knn(A, B, k=10),
              "cka_linear": lambda: cka.debiased_linear_cka(A, B),
              "rsa": lambda: rsa(A, B)}[measure]
        row["value"] = float(fn())
    except Exception as exc:  # noqa: BLE001 - RSA is expected to refuse
        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    row["time_s"] = time.perf_counter() - t0
    row["other_cpus"] = _other_cpus(busy0, own0, row["time_s"])
    row["peak_rss_gib"] = _peak_rss_gib()
    return row


# ---------------------------------------------------------------------------- metrics
def _labels_significant(doc: dict, direction: str, labels: np.ndarray) -> np.ndarray:
    """Labels with low-affinity explanations moved into the no-change group (0)."""
    out = labels.copy()
    for j, e in enumerate(doc["directions"][direction]["explanations"], start=1):
        if e.get("low_affinity"):
            out[out == j] = 0
    return out


def compare(dense: dict, knn: dict, dense_seeds: list[dict], A: np.ndarray, B: np.ndarray,
            y: np.ndarray, known: dict | None) -> dict[str, dict[str, Any]]:
    """Per direction: ARIs, grid overlap, BSR and known-difference hits of both fits.

    ``dense`` is the dense fit with the knn fit's seed, ``dense_seeds`` the dense fits with
    other seeds: the spread of the exact method itself (``ari_seed``: the smallest ARI of two
    dense fits) and the best agreement of the knn partition with any dense one
    (``ari_best``)."""
    from sklearn.metrics import adjusted_rand_score

    from rdx.evaluation.bsr import bsr_scores
    from rdx.evaluation.known_difference import score_known_difference

    def grids(doc: dict) -> dict[str, list[list[int]]]:
        return {d: [e["images"] for e in doc["directions"][d]["explanations"]]
                for d in DIRECTIONS}

    g_dense, g_knn = grids(dense), grids(knn)
    bsr = {name: bsr_scores(A, B, g, dissimilarity="rank") for name, g in
           (("dense", g_dense), ("knn", g_knn))}
    hits = {name: score_known_difference(known, g, y) if known else None
            for name, g in (("dense", g_dense), ("knn", g_knn))}
    out = {}
    for d in DIRECTIONS:
        ld, lk = np.asarray(dense["labels"][d]), np.asarray(knn["labels"][d])
        overlaps = [len(set(a) & set(b)) / max(1, len(a))
                    for a, b in zip(g_dense[d], g_knn[d])]
        # each strong dense explanation (not low_affinity): best member Jaccard with a knn one
        knn_sets = [set(e["members"]) for e in knn["directions"][d]["explanations"]]
        strong = [max((len(set(e["members"]) & m) / len(set(e["members"]) | m)
                       for m in knn_sets), default=0.0)
                  for e in dense["directions"][d]["explanations"] if not e.get("low_affinity")]
        row = {"ari": adjusted_rand_score(ld, lk),
               "ari_sig": adjusted_rand_score(_labels_significant(dense, d, ld),
                                              _labels_significant(knn, d, lk)),
               "grid_overlap": float(np.mean(overlaps)) if overlaps else float("nan"),
               "strong_jaccard": float(np.mean(strong)) if strong else float("nan"),
               "bsr_dense": bsr["dense"][d]["bsr"], "bsr_knn": bsr["knn"][d]["bsr"],
               "sizes_dense": [len(e["members"]) for e in dense["directions"][d]["explanations"]],
               "sizes_knn": [len(e["members"]) for e in knn["directions"][d]["explanations"]]}
        for name in ("dense", "knn"):
            row[f"hits_{name}"] = _hits(hits[name], d) if hits[name] else "-"
        others = [np.asarray(doc["labels"][d]) for doc in dense_seeds]
        fits = [ld] + others
        row["ari_seed"] = min((adjusted_rand_score(a, b) for i, a in enumerate(fits)
                               for b in fits[i + 1:]), default=None)
        row["ari_best"] = max(adjusted_rand_score(f, lk) for f in fits)
        row["k_used"] = knn["info"]["knn_graph"]["n_neighbors"]
        row["m_used"] = knn["info"]["knn_graph"].get("far_sketch", {}).get("n_landmarks", 0)
        out[d] = row
    return out


def _relative_gap(eigenvalues: list[float] | None) -> float | None:
    """``(λ_{k+1} − λ_{k+2}) / λ_{k+1}`` with k = ``N_EXPLANATIONS``: the partition is built
    from the top k + 1 eigenvectors, which are ill-determined when this is small."""
    if not eigenvalues or len(eigenvalues) < N_EXPLANATIONS + 2:
        return None
    a, b = eigenvalues[N_EXPLANATIONS], eigenvalues[N_EXPLANATIONS + 1]
    return (a - b) / a


def _hits(scored: dict, direction: str) -> str:
    """'hits/total' of a direction from :func:`score_known_difference`'s record."""
    per = scored[direction]
    return f"{per['hits']}/{per['total']}"


# ---------------------------------------------------------------------------- parent
def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "nan" if x != x else f"{x:.{digits}f}"
    return str(x)


def table(header: list[str], cells: list[list[str]], markdown: bool) -> str:
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
        return "\n".join(out + ["| " + " | ".join(c) + " |" for c in cells])
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    return "\n".join(lines + ["  ".join(v.rjust(w) for v, w in zip(c, widths)) for c in cells])


def run_validate(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    rows = []
    for pair in args.pairs:
        rows += _validate_pair(args, tmp, pair)
    return rows


def _validate_pair(args: argparse.Namespace, tmp: Path, pair: str) -> list[dict[str, Any]]:
    n_max = max(args.sizes)
    A, B, y = fashion_features(args.checkpoints, n_max, pair=pair, progress=False)
    feats = tmp / f"features_{pair}.npz"
    np.savez(feats, A=A, B=B, y=y)
    known = PAIRS[pair][3]
    rows = []
    for n in args.sizes:
        docs, fits = {}, {}
        cases = [("dense", "dense", 0, 0)] + [
            (f"dense_seed{s}", "dense", 0, s) for s in range(1, args.dense_seeds)] + [
            (f"knn_{variant_name(v)}", "knn", v, 0) for v in args.k]
        spectrum = run_child(__file__, ["--case", "spectrum", "--features", str(feats),
                                        "--n", str(n)], {"n": n}, args.timeout)
        for name, graph, k, seed in cases:
            out = tmp / f"{pair}_{name.replace('/', '-')}_{n}.json"
            fits[name] = run_child(__file__, ["--case", "fit", "--features", str(feats),
                                              "--n", str(n), "--graph", graph, "--k",
                                              variant_name(k) if k else "2", "--seed",
                                              str(seed),
                                              "--result", str(out)],
                                   {"n": n, "graph": graph}, args.timeout)
            docs[name] = json.loads(out.read_text()) if out.exists() and \
                not fits[name].get("error") else None
            print(f"  validate {pair} n={n} {name}: "
                  f"{fits[name].get('error') or '%.1f s' % fits[name]['fit_s']}",
                  file=sys.stderr, flush=True)
        for k in args.k:
            name = f"knn_{variant_name(k)}"
            if docs["dense"] is None or docs[name] is None:
                rows.append({"pair": pair, "n": n, "k": variant_name(k),
                             "error": fits["dense"].get("error") or fits[name]["error"]})
                continue
            cmp = compare(docs["dense"], docs[name],
                          [docs[f"dense_seed{s}"] for s in range(1, args.dense_seeds)
                           if docs[f"dense_seed{s}"] is not None], A[:n], B[:n], y[:n], known)
            for d in DIRECTIONS:
                rows.append({"pair": pair, "n": n, "k": variant_name(k), "direction": d,
                             **cmp[d],
                             "gap": _relative_gap(spectrum.get(d)),
                             "fit_s_dense": fits["dense"]["fit_s"],
                             "fit_s_knn": fits[name]["fit_s"],
                             "peak_dense": fits["dense"]["peak_rss_gib"],
                             "peak_knn": fits[name]["peak_rss_gib"],
                             "recall": _recall(fits[name]),
                             "other_cpus": max(fits["dense"].get("other_cpus") or 0,
                                               fits[name].get("other_cpus") or 0)})
    return rows


def validate_table(rows: list[dict[str, Any]], markdown: bool) -> str:
    header = ["pair", "n", "K", "direction", "ARI", "ARI sig", "ARI best", "ARI seeds", "gap",
              "strong J", "grid", "BSR dense", "BSR knn", "hits dense", "hits knn",
              "fit s dense", "fit s knn", "GiB dense", "GiB knn", "other CPUs", "recall"]
    cells = []
    for r in rows:
        if r.get("error"):
            cells.append([r["pair"], str(r["n"]), str(r["k"]), r["error"][:60]]
                         + [""] * (len(header) - 4))
            continue
        k = f"{r['k']} (K={r['k_used']}, m={r.get('m_used', 0)})"
        cells.append([r["pair"], str(r["n"]), k, r["direction"], _fmt(r["ari"], 3),
                      _fmt(r["ari_sig"], 3), _fmt(r["ari_best"], 3),
                      _fmt(r.get("ari_seed"), 3), _fmt(r.get("gap"), 3),
                      _fmt(r["strong_jaccard"]), _fmt(r["grid_overlap"]),
                      _fmt(r["bsr_dense"], 3), _fmt(r["bsr_knn"], 3), r["hits_dense"],
                      r["hits_knn"], _fmt(r["fit_s_dense"], 1), _fmt(r["fit_s_knn"], 1),
                      _fmt(r["peak_dense"]), _fmt(r["peak_knn"]), _fmt(r["other_cpus"], 1),
                      r.get("recall") or "-"])
    return table(header, cells, markdown)


def _recall(fit: dict[str, Any]) -> str | None:
    """'A/B' recall of an approximate fit's lists (measured on its reference rows)."""
    search = fit.get("search_info") or {}
    if search.get("kind") != "approx":
        return None
    return f"{search['recall']['a']:.3f}/{search['recall']['b']:.3f}"


# ---------------------------------------------------------------------------- approx part
def synthetic_hits(grids: dict[str, list[list[int]]], blob: np.ndarray, n_blobs: int = 20
                   ) -> dict[str, str]:
    """Known differences of :func:`bench_core.make_representations` found per direction:
    ``b_over_a`` grids whose images all come from one pair of blobs that B merges (0–1,
    2–3, 4–5, 6–7) with both blobs present; ``a_over_b`` grids whose images all come from
    one of the two blobs B splits. 'hits/grids'."""
    out = {}
    for d, gs in grids.items():
        hits = 0
        for g in gs:
            b = set(blob[np.asarray(g, dtype=np.int64)].tolist())
            if d == "b_over_a":
                pairs = {x // 2 for x in b}
                hits += int(len(pairs) == 1 and max(b) < 8 and len(b) == 2)
            else:
                hits += int(len(b) == 1 and min(b) >= n_blobs - 2)
        out[d] = f"{hits}/{len(gs)}"
    return out


def child_blocks(n: int, d: int, n_blocks: int, device: str = "cpu") -> dict[str, Any]:
    """Seconds per row block of the exact pass (both models' distances, sorts, ranks and the
    landmark columns: :func:`rdx.method.knn_graph.graph_block`) at n × d, from ``n_blocks``
    blocks after one warm-up block, and the pass projected as blocks × that time.
    ``device``: where the blocks are computed (``"cuda"``: the GPU's block size, timed to
    the end of its kernels)."""
    import torch

    from rdx.method.geometry import to_device_centered
    from rdx.method.graphs import resolve_gamma
    from rdx.method.knn_graph import graph_block
    from rdx.method.knn_options import DEFAULT_N_LANDMARKS, DEFAULT_N_NEIGHBORS
    from rdx.method.knn_search import Features, device_block_rows
    from rdx.method.knn_sketch import choose_landmarks

    A, B, _ = make_representations(n, d, seed=0)
    dev = torch.device(device)
    FA, FB = (Features(to_device_centered(X, dev)) for X in (A, B))
    del A, B
    landmarks = choose_landmarks(n, DEFAULT_N_LANDMARKS, 0)
    gamma = resolve_gamma(None, 80.0, n)
    step = device_block_rows(n, dev)     # the pass's own block size on this device
    times = []
    for i in range(n_blocks + 1):
        s = (i * 7919 * step) % max(n - step, 1)     # spread over the rows
        t0 = time.perf_counter()
        graph_block(FA, FB, s, s + step, DEFAULT_N_NEIGHBORS, landmarks=landmarks,
                    gamma=gamma)
        if dev.type == "cuda":   # kernels run asynchronously: time them to their end
            torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t0)
    per_block = float(np.median(times[1:]))
    blocks = -(-n // step)
    return {"n": n, "d": d, "device": str(dev), "rows_per_block": step, "blocks": blocks,
            "s_per_block": per_block, "projected_pass_s": per_block * blocks,
            "peak_rss_gib": _peak_rss_gib(), "error": None}


def run_approx(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """The approx part (see the module docstring): per n, the exact fit (or its projected
    pass) and the approximate one, compared."""
    rows = []
    for n in args.approx_sizes:
        fits, docs = {}, {}
        searches = ["approx"] + (["exact"] if n <= args.approx_exact_max else [])
        for search in searches:
            out = tmp / f"approx_part_{search}_{n}.json"
            fits[search] = run_child(__file__, ["--case", "fit", "--n", str(n), "--d",
                                                str(args.scale_d), "--graph", "knn", "--k",
                                                f"auto/{search}", "--result", str(out)],
                                     {"n": n, "search": search}, args.timeout)
            docs[search] = json.loads(out.read_text()) if out.exists() and \
                not fits[search].get("error") else None
            print(f"  approx part n={n} {search}: "
                  f"{fits[search].get('error') or '%.1f s' % fits[search]['fit_s']}",
                  file=sys.stderr, flush=True)
        row: dict[str, Any] = {"n": n, "d": args.scale_d, "fits": fits}
        if "exact" not in searches:
            row["exact_blocks"] = run_child(__file__, ["--case", "blocks", "--n", str(n),
                                                       "--d", str(args.scale_d)],
                                            {"n": n}, args.timeout)
        if docs.get("approx") is not None:
            _, _, blob = make_representations(n, 2, seed=0)   # the labels only (same draws)
            grids = {d: [e["images"] for e in docs["approx"]["directions"][d]["explanations"]]
                     for d in DIRECTIONS}
            row["hits_approx"] = synthetic_hits(grids, blob)
            if docs.get("exact") is not None:
                from sklearn.metrics import adjusted_rand_score

                ex = {d: [e["images"] for e in docs["exact"]["directions"][d]["explanations"]]
                      for d in DIRECTIONS}
                row["hits_exact"] = synthetic_hits(ex, blob)
                for d in DIRECTIONS:
                    le = np.asarray(docs["exact"]["labels"][d])
                    la = np.asarray(docs["approx"]["labels"][d])
                    row.setdefault("ari", {})[d] = adjusted_rand_score(le, la)
                    row.setdefault("ari_sig", {})[d] = adjusted_rand_score(
                        _labels_significant(docs["exact"], d, le),
                        _labels_significant(docs["approx"], d, la))
                    row.setdefault("grid", {})[d] = float(np.mean(
                        [len(set(a) & set(b)) / max(1, len(a))
                         for a, b in zip(ex[d], grids[d])])) if grids[d] else float("nan")
        rows.append(row)
    return rows


def write_representations(folder: Path, n: int, d: int, seed: int = 0, n_blobs: int = 20,
                          rows: int = 50_000) -> dict[str, Path]:
    """:func:`bench_core.make_representations`' two clustered representations, written block
    by block to ``folder/A.npy``, ``B.npy`` and ``blob.npy`` — for n × d larger than fits in
    memory next to the fit (10⁶ × 768 float32: 3 GB per model).

    The same model (blob centres and spreads, the pairs B merges, the blobs B splits); each
    block of ``rows`` images draws from its own generator seeded ``(seed, block)``. Files are
    written under temporary names and renamed; ``meta.json``, written last, records the
    arguments, and files with the same arguments are reused.
    """
    from numpy.lib.format import open_memmap

    from rdx.io import write_json_atomic

    if n_blobs < 12:
        raise ValueError("n_blobs must be at least 12")
    meta = {"n": n, "d": d, "seed": seed, "n_blobs": n_blobs, "rows": rows}
    files = {k: folder / f"{k}.npy" for k in ("A", "B", "blob")}
    done = folder / "meta.json"
    if done.is_file() and json.loads(done.read_text()) == meta and \
            all(f.is_file() for f in files.values()):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    centres_a = rng.standard_normal((n_blobs, d), dtype=np.float32) * 0.6
    width = rng.uniform(0.7, 1.3, size=n_blobs).astype(np.float32)
    centres_b = centres_a.copy()
    centres_b[1:8:2] = centres_b[0:8:2]
    shift = rng.standard_normal((2, d), dtype=np.float32) * 0.6
    tmp = {k: f.with_name(f".{f.name}.part") for k, f in files.items()}
    A = open_memmap(tmp["A"], mode="w+", dtype=np.float32, shape=(n, d))
    B = open_memmap(tmp["B"], mode="w+", dtype=np.float32, shape=(n, d))
    blob = open_memmap(tmp["blob"], mode="w+", dtype=np.int64, shape=(n,))
    for i, s in enumerate(range(0, n, rows)):
        e = min(n, s + rows)
        r = np.random.default_rng([seed, i])
        b = r.integers(0, n_blobs, size=e - s)
        split = np.isin(b, [n_blobs - 2, n_blobs - 1]) & (r.random(e - s) < 0.5)
        offset = r.standard_normal((e - s, d), dtype=np.float32)
        offset *= (0.6 * width[b])[:, None]
        A[s:e] = centres_a[b] + offset
        A[s:e] += r.standard_normal((e - s, d), dtype=np.float32) * (0.8 * width[b])[:, None]
        B[s:e] = centres_b[b] + offset
        B[s:e] += r.standard_normal((e - s, d), dtype=np.float32) * (0.8 * width[b])[:, None]
        B[s:e][split] += shift[b[split] - (n_blobs - 2)]
        blob[s:e] = b
    for arr in (A, B, blob):
        arr.flush()
    del A, B, blob
    for k in files:
        os.replace(tmp[k], files[k])
    write_json_atomic(done, meta)
    return files


def run_million(args: argparse.Namespace) -> dict[str, Any]:
    """The million part: ``rdx explain A.npy B.npy --graph knn ARGS`` as users run it, on
    :func:`write_representations`' files (memory-mapped by the command, never read whole),
    in one child process: whole-process wall time, peak RSS, the fit's memory estimate and
    steps, the recall of the lists and the synthetic known-difference hits."""
    import shlex
    import subprocess

    files = write_representations(args.million_dir, args.million_n, args.scale_d)
    out = args.million_dir / "explain"
    extra = shlex.split(args.million_args)
    cmd = [sys.executable, "-m", "rdx", "explain", str(files["A"]), str(files["B"]),
           "--graph", "knn", *extra, "--out", str(out)]
    log = args.million_dir / "explain.log"
    print("  " + " ".join(cmd), file=sys.stderr, flush=True)
    busy0 = _busy_s()
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False,
                                  timeout=args.timeout)
        except subprocess.TimeoutExpired:
            # the log says how far it got (the pass's progress, the memory estimate)
            return {"n": args.million_n, "d": args.scale_d, "args": extra, "exit": None,
                    "wall_s": time.perf_counter() - t0, "peak_rss_gib": None,
                    "error": f"timed out after {args.timeout:g} s (see {log})"}
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1 = _busy_s()
    row: dict[str, Any] = {
        "n": args.million_n, "d": args.scale_d, "args": extra, "exit": proc.returncode,
        "wall_s": wall, "peak_rss_gib": ru.ru_maxrss / 2**20,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "other_cpus": None if busy0 is None or busy1 is None else
        max(0.0, (busy1 - busy0) - (ru.ru_utime + ru.ru_stime)) / wall,
        "estimate": next((ln.strip() for ln in log.read_text(errors="replace").splitlines()
                          if ln.startswith("memory estimate")), None)}
    result = out / "explanations.json"
    if proc.returncode != 0 or not result.is_file():
        row["error"] = log.read_text(errors="replace").strip().splitlines()[-1:]
        return row
    doc = json.loads(result.read_text())
    blob = np.load(files["blob"], mmap_mode="r")
    grids = {d: [e["images"] for e in doc["directions"][d]["explanations"]]
             for d in DIRECTIONS}
    row["hits"] = synthetic_hits(grids, np.asarray(blob))
    row["timings_s"] = doc.get("timings_s")
    row["knn_graph"] = doc["info"].get("knn_graph")
    row["bsr"] = doc.get("bsr")
    return row


def _timed_explain(files: dict[str, Path], extra: list[str], out: Path, timeout: float
                   ) -> dict[str, Any]:
    """``rdx explain A.npy B.npy --graph knn EXTRA --out OUT`` in a child process: wall time
    and the result document (None with the log's last line if it failed)."""
    import subprocess

    cmd = [sys.executable, "-m", "rdx", "explain", str(files["A"]), str(files["B"]),
           "--graph", "knn", *extra, "--out", str(out)]
    print("  " + " ".join(cmd), file=sys.stderr, flush=True)
    log = out.with_suffix(".log")
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"wall_s": time.perf_counter() - t0, "doc": None,
                    "error": f"timed out after {timeout:g} s (see {log})"}
    wall = time.perf_counter() - t0
    result = out / "explanations.json"
    if proc.returncode != 0 or not result.is_file():
        return {"wall_s": wall, "doc": None,
                "error": log.read_text(errors="replace").strip().splitlines()[-1:]}
    return {"wall_s": wall, "doc": json.loads(result.read_text())}


def run_dask(args: argparse.Namespace) -> dict[str, Any]:
    """The dask part (module docstring): single process against ``local:W`` workers."""
    files = write_representations(args.dask_dir, args.dask_n, args.scale_d)
    base = ["--knn-search", "exact"]
    runs: dict[str, dict[str, Any]] = {}
    runs["single"] = _timed_explain(files, base, args.dask_dir / "single", args.timeout)
    for w in args.dask_workers:
        runs[f"local:{w}"] = _timed_explain(
            files, base + ["--executor", "dask", "--scheduler", f"local:{w}"],
            args.dask_dir / f"dask{w}", args.timeout)
    rows = []
    ref = runs["single"]["doc"]
    for name, r in runs.items():
        doc = r["doc"]
        row: dict[str, Any] = {"run": name, "wall_s": r["wall_s"], "error": r.get("error")}
        if doc is not None:
            g = doc["info"]["knn_graph"]
            row["pass_s"] = doc["timings_s"].get("knn graph")
            row["digest"] = g.get("graph_digest", {}).get("both")
            row["blocks"] = g["search"].get("blocks", {}).get("both")
            if ref is not None:
                row["same_graph"] = row["digest"] == ref["info"]["knn_graph"]["graph_digest"]["both"]
                row["same_explanations"] = all(
                    [e["members"] for e in doc["directions"][d]["explanations"]]
                    == [e["members"] for e in ref["directions"][d]["explanations"]]
                    for d in DIRECTIONS)
        rows.append(row)
    projection = []
    measured = [r for r in rows if r["run"] != "single" and r.get("blocks") and r.get("pass_s")]
    if measured:
        r = measured[-1]                      # the most workers
        w = int(r["run"].split(":")[1])
        total = r["blocks"]["seconds_total"]
        overhead = max(0.0, r["pass_s"] - total / w)
        grow = 1_000_000 / args.dask_n
        for N in (1, 2, 4, 8, 16, 32, 64, 128):
            projection.append({"workers": N, "pass_s": overhead + total / N,
                               "pass_s_1e6": overhead * grow + total * grow**2 / N})
        projection_from = {"run": r["run"], "blocks": r["blocks"]["count"],
                           "block_seconds_total": total, "overhead_s": overhead}
    else:
        projection_from = None
    return {"n": args.dask_n, "d": args.scale_d, "rows": rows, "projection": projection,
            "projection_from": projection_from}


def dask_table(record: dict[str, Any], markdown: bool) -> str:
    header = ["run", "whole process s", "pass s", "blocks", "block s (median)",
              "Σ block s", "same graph", "same explanations"]
    cells = []
    for r in record["rows"]:
        b = r.get("blocks") or {}
        cells.append([r["run"], _fmt(r["wall_s"], 0),
                      _fmt(r.get("pass_s"), 0) if not r.get("error") else str(r["error"])[:40],
                      str(b.get("count", "-")), _fmt(b.get("seconds_median")),
                      _fmt(b.get("seconds_total"), 0),
                      {True: "yes", False: "NO", None: "-"}[r.get("same_graph")],
                      {True: "yes", False: "NO", None: "-"}[r.get("same_explanations")]])
    out = table(header, cells, markdown)
    src = record.get("projection_from")
    if src:
        out += (f"\n\nProjection of the pass to N one-thread workers, from {src['run']}: "
                f"{src['blocks']} blocks, Σ {src['block_seconds_total']:.0f} s, overhead "
                f"{src['overhead_s']:.0f} s (n² for the blocks, n for the overhead at 10⁶)\n\n")
        out += table(["workers", f"pass s at n = {record['n']}", "pass at 10⁶, min"],
                     [[str(p["workers"]), _fmt(p["pass_s"], 0), _fmt(p["pass_s_1e6"] / 60, 0)]
                      for p in record["projection"]], markdown)
    return out


def million_table(row: dict[str, Any], markdown: bool) -> str:
    header = ["n", "d", "options", "exit", "whole process s", "peak RSS GiB", "recall A/B",
              "hits a_over_b", "hits b_over_a", "other CPUs"]
    search = ((row.get("knn_graph") or {}).get("search") or {}).get("recall") or {}
    recall = f"{search['a']:.3f}/{search['b']:.3f}" if search else "-"
    hits = row.get("hits") or {}
    cells = [[str(row["n"]), str(row["d"]), " ".join(row["args"]),
              str(row["exit"]) if not row.get("error") else str(row["error"])[:60],
              _fmt(row["wall_s"], 0), _fmt(row["peak_rss_gib"]), recall,
              hits.get("a_over_b", "-"), hits.get("b_over_a", "-"),
              _fmt(row.get("other_cpus"), 1)]]
    return table(header, cells, markdown)


def approx_table(rows: list[dict[str, Any]], markdown: bool) -> str:
    header = ["n", "d", "search", "fit s", "pass s", "peak GiB", "recall A/B", "ARI vs exact",
              "ARI sig", "grid", "hits a_over_b", "hits b_over_a", "other CPUs"]
    cells = []
    for r in rows:
        for search in ("exact", "approx"):
            f = r["fits"].get(search)
            if f is None:
                blk = r.get("exact_blocks") or {}
                if search == "exact" and not blk.get("error") and blk:
                    cells.append([str(r["n"]), str(r["d"]), "exact (projected)", "-",
                                  f"≈ {blk['projected_pass_s']:.0f}", "-", "1", "-", "-",
                                  "-", "-", "-",
                                  f"{blk['blocks']} blocks × {blk['s_per_block']:.2f} s"])
                continue
            if f.get("error"):
                cells.append([str(r["n"]), str(r["d"]), search, f["error"][:60]]
                             + [""] * (len(header) - 4))
                continue
            t = f.get("timings_s") or {}
            hits = r.get(f"hits_{search}") or {}
            both = search == "approx" and "ari" in r
            ari = (lambda key: f"{r[key]['a_over_b']:.3f}/{r[key]['b_over_a']:.3f}"
                   if both else "-")
            cells.append([str(r["n"]), str(r["d"]), search, _fmt(f["fit_s"], 1),
                          _fmt(t.get("knn graph"), 1), _fmt(f["peak_rss_gib"]),
                          _recall(f) or "1", ari("ari"), ari("ari_sig"), ari("grid"),
                          hits.get("a_over_b", "-"), hits.get("b_over_a", "-"),
                          _fmt(f.get("other_cpus"), 1)])
    return table(header, cells, markdown)


def run_scale(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = []
    for n in args.scale_sizes:
        row = run_child(__file__, ["--case", "scale", "--n", str(n), "--d", str(args.scale_d),
                                   "--k", variant_name(args.k[0])],
                        {"n": n, "d": args.scale_d},
                        args.timeout)
        rows.append(row)
        print(f"  scale n={n}: {row.get('error') or '%.1f s' % row['process_s']}",
              file=sys.stderr, flush=True)
    sims = []
    if not args.skip_similarity:
        n = args.similarity_n or max(args.scale_sizes)
        for measure in ("mutual_knn", "cka_linear", "rsa"):
            row = run_child(__file__, ["--case", "similarity", "--n", str(n), "--d",
                                       str(args.scale_d), "--measure", measure],
                            {"n": n, "measure": measure}, args.timeout)
            sims.append(row)
            print(f"  similarity {measure} n={n}: {row.get('error') or row.get('time_s')}",
                  file=sys.stderr, flush=True)
    return rows, sims


def scale_table(rows: list[dict[str, Any]], markdown: bool) -> str:
    header = ["n", "d", "K", "process s", "fit s", "knn graph s", "a_over_b s", "b_over_a s",
              "pairs/image", "peak GiB", "other CPUs", "note"]
    cells = []
    for r in rows:
        t = r.get("timings_s") or {}
        g = r.get("graph") or {}
        sketch = g.get("far_sketch", {}).get("n_landmarks", 0)
        cells.append([str(r["n"]), str(r.get("d")),
                      f"{r.get('k', '')} (K={g.get('n_neighbors', '?')}, m={sketch})",
                      _fmt(r.get("process_s"), 1), _fmt(r.get("fit_s"), 1),
                      _fmt(t.get("knn graph"), 1), _fmt(t.get("a_over_b"), 1),
                      _fmt(t.get("b_over_a"), 1), _fmt(g.get("mean_pairs_per_image"), 0),
                      _fmt(r.get("peak_rss_gib")), _fmt(r.get("other_cpus"), 1),
                      (r.get("error") or "")[:80]])
    return table(header, cells, markdown)


def similarity_table(rows: list[dict[str, Any]], markdown: bool) -> str:
    header = ["measure", "n", "d", "value", "time s", "peak GiB", "other CPUs", "note"]
    cells = [[r["measure"], str(r["n"]), str(r.get("d")), _fmt(r.get("value"), 4),
              _fmt(r.get("time_s"), 1), _fmt(r.get("peak_rss_gib")),
              _fmt(r.get("other_cpus"), 1), (r.get("error") or "")[:160]] for r in rows]
    return table(header, cells, markdown)


def scaling_note(rows: list[dict[str, Any]]) -> str:
    """Fitted exponent of the pass time in n, and the n = 10⁶ projection."""
    ok = [r for r in rows if not r.get("error") and r.get("timings_s")]
    if len(ok) < 2:
        return ""
    n = np.array([r["n"] for r in ok], dtype=float)
    t = np.array([r["timings_s"]["knn graph"] for r in ok])
    slope = float(np.polyfit(np.log(n), np.log(t), 1)[0])
    big = ok[-1]
    proj = big["timings_s"]["knn graph"] * (1e6 / big["n"]) ** 2
    rest = big["fit_s"] - big["timings_s"]["knn graph"]
    return (f"K-NN graph pass ~ n^{slope:.2f} (O(n²d) expected). Projection to n = 10⁶ on "
            f"this CPU: pass ≈ {proj / 3600:.1f} h (×(10⁶/{big['n']})²), clustering and grids "
            f"≈ {rest * 1e6 / big['n'] / 60:.1f} min (×10, O(nK) work), memory ≈ "
            f"{big['peak_rss_gib'] * 1e6 / big['n']:.0f} GiB (×10).")


def variant_name(variant: Variant) -> str:
    """``K``, ``K:m``, with ``/approx`` for the approximate search (the --k syntax)."""
    k, m, search = variant
    return (str(k) if m is None else f"{k}:{m}") + ("" if search == "exact" else f"/{search}")


def k_list(text: str) -> list[Variant]:
    """Comma-separated graph variants ``K[:m][/search]``: K an integer ≥ 2, ``auto`` or
    ``null``; m the landmarks of the far-pair sketch (≥ 0; omitted: the default); search
    ``exact`` (default) or ``approx`` — argparse type."""
    out: list[Variant] = []
    bad = argparse.ArgumentTypeError(
        f"expected comma-separated K[:m][/search] (K: an integer ≥ 2, auto or null; m: an "
        f"integer ≥ 0; search: exact or approx), got {text!r}")
    for v in (t.strip() for t in text.split(",")):
        if not v:
            continue
        v, _, search = v.partition("/")
        search = search or "exact"
        if search not in ("exact", "approx"):
            raise bad
        k_text, _, m_text = v.partition(":")
        try:
            k: int | str = k_text if k_text in ("auto", "null") else int(k_text)
            m = int(m_text) if m_text else None
        except ValueError:
            raise bad from None
        if (isinstance(k, int) and k < 2) or (m is not None and m < 0):
            raise bad
        out.append((k, m, search))
    if not out:
        raise bad
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("all", "validate", "scale", "approx", "million", "dask"),
                   default="all",
                   help="all: validate and scale; approx (not in all): the approximate search "
                        "against the exact one at --approx-sizes")
    p.add_argument("--sizes", type=int_list, default=list(DEFAULT_SIZES),
                   help="n of the validation against dense (default %(default)s)")
    p.add_argument("--pairs", type=lambda t: [x for x in t.split(",") if x],
                   default=list(PAIRS), help="validation comparisons: merged, quickstart "
                                             "(default both)")
    p.add_argument("--scale-sizes", type=int_list, default=list(DEFAULT_SCALE_SIZES),
                   help="n of the scale part (default %(default)s)")
    p.add_argument("--scale-d", type=int, default=SCALE_D)
    p.add_argument("--k", type=k_list, default=k_list("auto,auto:0,null"),
                   help="graph variants K[:m][/search] of the validation: n_neighbors (an "
                        "integer, auto or null), landmarks of the far-pair sketch (omitted: "
                        "the default, 0: none) and /approx for knn_search='approx'; default "
                        "auto,auto:0,null; the scale part uses the first")
    p.add_argument("--approx-sizes", type=int_list, default=list(DEFAULT_APPROX_SIZES),
                   help="n of the approx part (default %(default)s)")
    p.add_argument("--approx-exact-max", type=int, default=100000,
                   help="largest n at which the approx part also runs the exact fit (above: "
                        "its pass projected from timed blocks; default %(default)s)")
    p.add_argument("--million-n", type=int, default=1_000_000,
                   help="images of the million part (default 10⁶)")
    p.add_argument("--million-args", default=MILLION_ARGS,
                   help=f"rdx explain options of the million part (default {MILLION_ARGS!r})")
    p.add_argument("--million-dir", type=Path, default=ROOT / "outputs" / "million",
                   help="where the million part writes its features (reused) and result")
    p.add_argument("--dask-n", type=int, default=100_000,
                   help="images of the dask part (default 10⁵)")
    p.add_argument("--dask-workers", type=int_list, default=[2],
                   help="LocalCluster sizes of the dask part (default 2)")
    p.add_argument("--dask-dir", type=Path, default=ROOT / "outputs" / "dask",
                   help="where the dask part writes its features (reused) and results")
    p.add_argument("--dense-seeds", type=int, default=3,
                   help="dense fits per n with random_state 0, 1, …: the exact method's own "
                        "seed-to-seed spread (default %(default)s)")
    p.add_argument("--checkpoints", type=Path, default=ROOT / "checkpoints",
                   help="where the two ConvNets are (trained there if missing)")
    p.add_argument("--skip-similarity", action="store_true",
                   help="scale part without the similarity measures")
    p.add_argument("--similarity-n", type=int,
                   help="n of the similarity measures (default: the largest --scale-sizes)")
    p.add_argument("--timeout", type=float, default=3600.0)
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--out", type=Path, help="also write all rows as JSON here")
    # internal: one child case
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--case", choices=("fit", "scale", "similarity", "spectrum", "blocks"),
                   help=argparse.SUPPRESS)
    p.add_argument("--features", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--d", type=int, help=argparse.SUPPRESS)
    p.add_argument("--graph", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--measure", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        if args.case == "fit":
            row = child_fit(args.features, args.n, args.graph, args.k[0], args.seed,
                            args.result, d=args.d or SCALE_D)
        elif args.case == "blocks":
            row = child_blocks(args.n, args.d, 3)
        elif args.case == "spectrum":
            row = child_spectrum(args.features, args.n, N_EXPLANATIONS + 2)
        elif args.case == "scale":
            row = child_scale(args.n, args.d, args.k[0])
        else:
            row = child_similarity(args.n, args.d, args.measure)
        print(RESULT_MARKER + json.dumps(row), flush=True)
        return 0

    head = header_line("auto")
    print(head, flush=True)
    t0 = time.perf_counter()
    record: dict[str, Any] = {"header": head, "k": [variant_name(v) for v in args.k]}
    with tempfile.TemporaryDirectory(prefix="bench_large_n_") as tmp:
        if args.part in ("all", "validate"):
            record["validate"] = run_validate(args, Path(tmp))
        if args.part == "approx":
            record["approx"] = run_approx(args, Path(tmp))
    if args.part == "million":
        record["million"] = run_million(args)
    if args.part == "dask":
        record["dask"] = run_dask(args)
    if args.part in ("all", "scale"):
        record["scale"], record["similarity"] = run_scale(args)
    record["total_s"] = time.perf_counter() - t0
    if "validate" in record:
        print(f"\nValidation against the dense method (Fashion-MNIST ConvNets, "
              f"{N_EXPLANATIONS} explanations per direction)")
        print(validate_table(record["validate"], args.markdown))
    if "approx" in record:
        print("\nknn_search='approx' against the exact pass (clustered Gaussian features, "
              "K = 200, m = 1000)")
        print(approx_table(record["approx"], args.markdown))
    if "million" in record:
        print("\nrdx explain on memory-mapped .npy features (clustered Gaussian, whole "
              "process: interpreter start to results written)")
        print(million_table(record["million"], args.markdown))
        if record["million"].get("estimate"):
            print(record["million"]["estimate"])
    if "dask" in record:
        print(f"\nThe exact pass on Dask workers against one process (rdx explain, n = "
              f"{record['dask']['n']}, d = {record['dask']['d']}, K = 200, m = 1000)")
        print(dask_table(record["dask"], args.markdown))
    if "scale" in record:
        print(f"\nScale (clustered Gaussian features, graph='knn', "
              f"{variant_name(args.k[0])}); whole "
              "process = interpreter start to end of the fit")
        print(scale_table(record["scale"], args.markdown))
        note = scaling_note(record["scale"])
        if note:
            print(note)
        if record["similarity"]:
            print("\nSimilarity measures at scale (same synthetic features)")
            print(similarity_table(record["similarity"], args.markdown))
    print(f"\nTotal benchmark time {record['total_s']:.1f} s.")
    if args.out:
        from rdx.io import write_json_atomic

        write_json_atomic(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
