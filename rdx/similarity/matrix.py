"""Model × model similarity matrices (one per dataset and measure) and their files.

A matrix ``S`` holds ``S[a, b] = measure(F_a, F_b)`` for the features ``F_a`` (n × d_a) of
every model ``a`` on the *same* n images. This is step 3 of the consistency paper's pipeline;
:mod:`rdx.similarity.consistency` compares such matrices across datasets.

Differences from the paper's code
---------------------------------
* **Diagonal computed, not preset.** The paper writes 1 on the diagonal without computing it;
  here ``S[a, a] = measure(F_a, F_a)`` is computed (1 for CKA, 0 for distances), so a
  degenerate representation shows up as NaN instead of a fake 1.
* **Each model's work is done once.** For linear CKA (debiased and biased) each model's
  centred features, row norms and self-HSIC are computed once; a pair then costs one
  ``F_aᵀF_b`` product (the paper rebuilt 6 n×n kernels and re-read model b from disk per
  pair). For RSA each model's RDM is built and ranked once (the paper rebuilt model b's RDM
  for every a) and the matrix is a Gram matrix of the standardised rank vectors.
  For RBF CKA each model's centred kernel and self-HSIC, and for mutual k-NN, Jaccard
  k-NN and CKNNA each model's k-NN table, are built once and shared by every pair (the
  paper's code rebuilt both kernels per pair: M² instead of M kernel builds). Kernels are
  n×n float64, so only as many stay resident as fit in half the free memory; the others
  are streamed past each resident block (``meta["states_built"]`` counts the builds).
  All fast paths equal :func:`rdx.similarity.similarity` pair by pair (tested; RBF CKA and
  the k-NN measures exactly, RSA to ~1e-7, its vectors are held in float32). Procrustes
  and SVCCA are called pair by pair.
* **Normalisation is explicit.** The paper L2-normalised every feature vector at extraction
  without saying so in the results. Here ``normalize`` is an argument
  (``none`` | ``l2`` | ``center`` | ``zscore``) and is written into every matrix file.
* **Errors are local.** A pair whose measure is undefined (e.g. a constant representation)
  gets NaN and its message is kept in :attr:`SimilarityMatrix.errors`; the paper's unbiased
  CKA could silently produce NaN or negative values.

Files
-----
:meth:`SimilarityMatrix.save` writes ``<stem>.npz`` (``matrix``, ``model_ids``) and
``<stem>.json`` (model ids, measure, parameters, normalisation, n, errors, versions, any extra
metadata), each atomically; the JSON is written last and marks the pair complete.
"""
from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tqdm.auto import tqdm

from ..backend import available_memory_bytes, resolve_device
from ..errors import RDXInputError
from ..io import atomic_write, jsonable, versions, write_json_atomic
from .cka_rbf import cka_of_states, rbf_kernel_state
from .names import NORMALIZATIONS
from .neighbors import NeighborPrepared, neighbor_table

#: Linear CKA variants with a per-model fast path in :func:`similarity_matrix`.
FAST_LINEAR_CKA = {"cka_linear": True, "cka_linear_biased": False}   # name → debiased
#: Schema version of the matrix files.
MATRIX_SCHEMA = 1

_SAFE = re.compile(r"[^A-Za-z0-9._=+-]")


# --------------------------------------------------------------------------- measure access

@dataclass(frozen=True)
class MeasureInfo:
    """What the matrix code needs to know about a measure."""

    name: str
    higher_is_more_similar: bool
    symmetric: bool
    defaults: dict
    compute: Callable[..., float]


def available_measures() -> dict[str, MeasureInfo]:
    """Measures by name, from :data:`rdx.similarity.MEASURES`."""
    from .calibration import similarity
    from .registry import MEASURES

    def caller(name: str) -> Callable[..., float]:
        return lambda X, Y, **kw: similarity(name, X, Y, **kw)

    return {name: MeasureInfo(name=name, higher_is_more_similar=m.higher_is_more_similar,
                              symmetric=m.symmetric, defaults=dict(m.params),
                              compute=caller(name))
            for name, m in MEASURES.items()}


def get_measure(name: str) -> MeasureInfo:
    """A measure by name, or an error listing the known ones."""
    measures = available_measures()
    if not isinstance(name, str) or name not in measures:
        raise RDXInputError(f"unknown similarity measure {name!r}; use one of "
                            f"{', '.join(sorted(measures))}.")
    return measures[name]


def parse_measure(text: str) -> tuple[str, dict]:
    """``"cka_rbf:sigma=0.4,sigma_mode=absolute"`` → ``("cka_rbf", {"sigma": 0.4, ...})``.

    Values are read as YAML scalars (numbers, booleans, strings); unknown measures and
    parameters are rejected with the valid choices.
    """
    from ..io import parse_yaml

    if not isinstance(text, str) or not text.strip():
        raise RDXInputError(f"a measure must be a non-empty string like 'cka_linear' or "
                            f"'cka_rbf:sigma=0.4', got {text!r}.")
    name, _, rest = text.strip().partition(":")
    measure = get_measure(name)
    params: dict = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise RDXInputError(f"measure parameter {item!r} in {text!r} must look like "
                                "key=value (e.g. 'cka_rbf:sigma=0.4,sigma_mode=absolute').")
        params[key.strip()] = parse_yaml(value.strip(), f"measure parameter {key.strip()!r}")
    check_params(measure, params)
    return name, params


def check_params(measure: MeasureInfo, params: Mapping) -> None:
    """Reject parameters the measure does not have."""
    unknown = sorted(set(params) - set(measure.defaults))
    if unknown:
        raise RDXInputError(f"measure {measure.name!r} has no parameter(s) {unknown}; its "
                            f"parameters are {sorted(measure.defaults) or 'none'}.")


def measure_slug(name: str, params: Mapping | None = None) -> str:
    """File-safe name of a measure and the parameters given explicitly (sorted)."""
    parts = [name] + [f"{k}={_fmt(v)}" for k, v in sorted((params or {}).items())]
    return _SAFE.sub("_", "__".join(parts))


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    return str(value)


# --------------------------------------------------------------------------- features

def normalize_features(X: np.ndarray, mode: str = "none") -> np.ndarray:
    """Row / column normalisation of an ``n × d`` feature array (float64 result).

    ``l2``: every row divided by its Euclidean norm (rows of norm 0 stay 0), as the paper's
    feature extractor did; ``center``: column means removed; ``zscore``: column means removed
    and columns divided by their standard deviation (constant columns left at 0).
    """
    if mode not in NORMALIZATIONS:
        raise RDXInputError(f"normalize={mode!r} is not one of {NORMALIZATIONS}.")
    Z = np.asarray(X, dtype=np.float64)
    if mode == "l2":
        norms = np.linalg.norm(Z, axis=1, keepdims=True)
        return Z / np.where(norms > 0, norms, 1.0)
    if mode in ("center", "zscore"):
        Z = Z - Z.mean(axis=0, keepdims=True)
        if mode == "zscore":
            sd = Z.std(axis=0, keepdims=True)
            Z = Z / np.where(sd > 0, sd, 1.0)
    return Z


def _check_features(features: Mapping[str, Any] | Sequence[Any],
                    model_ids: Sequence[str] | None) -> tuple[list[str], list[np.ndarray]]:
    if isinstance(features, Mapping):
        ids = [str(k) for k in features]
        arrays = list(features.values())
        if model_ids is not None and list(model_ids) != ids:
            raise RDXInputError("model_ids must not be given together with a dict of features "
                                "(the dict's keys are the model ids).")
    else:
        arrays = list(features)
        ids = [f"model_{i}" for i in range(len(arrays))] if model_ids is None \
            else [str(m) for m in model_ids]
        if len(ids) != len(arrays):
            raise RDXInputError(f"{len(ids)} model ids for {len(arrays)} feature arrays; give "
                                "one id per model.")
    if len(arrays) < 2:
        raise RDXInputError(f"a similarity matrix needs at least 2 models, got {len(arrays)}.")
    if len(set(ids)) != len(ids):
        dup = sorted({m for m in ids if ids.count(m) > 1})
        raise RDXInputError(f"model ids must be unique; repeated: {dup}.")
    out = []
    for mid, A in zip(ids, arrays, strict=True):
        if hasattr(A, "detach"):
            A = A.detach().cpu().numpy()
        A = np.asarray(A)
        if A.ndim != 2 or A.dtype.kind not in "biuf" or A.shape[1] == 0:
            raise RDXInputError(f"features of {mid!r} have shape {A.shape} dtype {A.dtype}; "
                                "expected a 2-D n_images × n_features real array.")
        if not np.isfinite(A).all():
            raise RDXInputError(f"features of {mid!r} contain NaN/inf; fix the extraction.")
        out.append(A)
    n = {A.shape[0] for A in out}
    if len(n) != 1:
        sizes = {m: A.shape[0] for m, A in zip(ids, out, strict=True)}
        raise RDXInputError(f"all models must describe the same images; numbers of rows "
                            f"differ: {sizes}.")
    return ids, out


# --------------------------------------------------------------------------- result type

@dataclass
class SimilarityMatrix:
    """A model × model similarity matrix with what produced it.

    Attributes
    ----------
    values : (M, M) float64 array
        ``values[a, b] = measure(features[a], features[b])``; NaN where undefined.
    model_ids : list of str
        Row/column order.
    measure : str
        Measure name (see :func:`available_measures`).
    params : dict
        Parameters given explicitly (defaults are in ``meta["resolved_params"]``).
    higher_is_more_similar, symmetric : bool
        From the measure's metadata.
    n_images : int
        Rows of every feature array.
    normalize : str
        Normalisation applied to the features first.
    errors : dict
        ``"a|b"`` → message, for entries that are NaN because the measure raised.
    meta : dict
        Anything else (dataset, subset hash, shard signatures, timing, versions).
    """

    values: np.ndarray
    model_ids: list[str]
    measure: str
    params: dict = field(default_factory=dict)
    higher_is_more_similar: bool = True
    symmetric: bool = True
    n_images: int = 0
    normalize: str = "none"
    errors: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def metadata(self) -> dict:
        """The JSON document written next to the array."""
        return {"schema": MATRIX_SCHEMA, "model_ids": list(self.model_ids),
                "measure": self.measure, "params": self.params,
                "slug": measure_slug(self.measure, self.params),
                "higher_is_more_similar": self.higher_is_more_similar,
                "symmetric": self.symmetric, "n_images": self.n_images,
                "normalize": self.normalize, "errors": self.errors, **self.meta}

    def save(self, stem: str | Path) -> Path:
        """Write ``<stem>.npz`` then ``<stem>.json`` (each atomically); returns the JSON path."""
        stem = Path(stem)
        stem.parent.mkdir(parents=True, exist_ok=True)
        npz = stem.with_name(stem.name + ".npz")
        atomic_write(npz, lambda fh: np.savez(fh, matrix=self.values,
                                              model_ids=np.array(self.model_ids, dtype=str)))
        return write_json_atomic(stem.with_name(stem.name + ".json"), self.metadata())

    @classmethod
    def load(cls, path: str | Path) -> SimilarityMatrix:
        """Read a matrix written by :meth:`save` (``path`` = the stem, ``.npz`` or ``.json``)."""
        p = Path(path)
        stem = p.with_suffix("") if p.suffix in (".npz", ".json") else p
        npz, js = stem.with_name(stem.name + ".npz"), stem.with_name(stem.name + ".json")
        if not js.exists() or not npz.exists():
            raise RDXInputError(f"similarity matrix {stem} is incomplete or missing (need "
                                f"{npz.name} and {js.name}); re-run scripts/similarity_matrix.py.")
        try:
            meta = json.loads(js.read_text())
            with np.load(npz, allow_pickle=False) as data:
                values = np.asarray(data["matrix"], dtype=np.float64)
                ids = [str(m) for m in data["model_ids"]]
        except (OSError, ValueError, KeyError) as exc:
            raise RDXInputError(f"similarity matrix {stem} does not load ({exc}); delete it and "
                                "re-run scripts/similarity_matrix.py.") from None
        if ids != meta.get("model_ids") or values.shape != (len(ids), len(ids)):
            raise RDXInputError(f"similarity matrix {stem}: the array ({values.shape}, "
                                f"{len(ids)} ids) and its JSON disagree; delete both files and "
                                "re-run scripts/similarity_matrix.py.")
        known = {"schema", "model_ids", "measure", "params", "slug", "higher_is_more_similar",
                 "symmetric", "n_images", "normalize", "errors"}
        return cls(values=values, model_ids=ids, measure=meta["measure"],
                   params=meta.get("params", {}),
                   higher_is_more_similar=bool(meta.get("higher_is_more_similar", True)),
                   symmetric=bool(meta.get("symmetric", True)),
                   n_images=int(meta.get("n_images", 0)), normalize=meta.get("normalize", "none"),
                   errors=meta.get("errors", {}),
                   meta={k: v for k, v in meta.items() if k not in known})


# --------------------------------------------------------------------------- computation

def _linear_cka_matrix(arrays: list[np.ndarray], debiased: bool, device: torch.device
                       ) -> tuple[np.ndarray, dict[int, str]]:
    """All-pairs linear CKA with per-model precomputation (float64).

    Debiased: ``HSIC_u(K, L)·n(n−3) = tr(K̃L̃) + (1ᵀK̃1)(1ᵀL̃1)/((n−1)(n−2))
    − 2/(n−2)·(K̃1)ᵀ(L̃1)`` with ``tr(K̃L̃) = ‖XᵀY‖²_F − Σᵢ|xᵢ|²|yᵢ|²``, ``1ᵀK̃1 =
    |Xᵀ1|² − Σ|xᵢ|²``, ``K̃1 = X(Xᵀ1) − (|xᵢ|²)ᵢ`` (the feature-space form of
    :mod:`rdx.similarity.cka`). Only ``‖XᵀY‖²_F`` depends on the pair.
    Biased: ``‖XcᵀYc‖²_F / (‖XcᵀXc‖_F ‖YcᵀYc‖_F)``.
    """
    M, n = len(arrays), arrays[0].shape[0]
    if n < (4 if debiased else 2):
        raise RDXInputError(f"{'debiased' if debiased else 'biased'} linear CKA needs at least "
                            f"{4 if debiased else 2} images, got n={n}.")
    prep = []
    for A in arrays:
        X = torch.from_numpy(np.ascontiguousarray(A, dtype=np.float64)).to(device)
        X = X - X.mean(dim=0, keepdim=True)   # translation invariant; centring helps accuracy
        nx, sx = (X * X).sum(dim=1), X.sum(dim=0)
        prep.append((X, nx, sx, X @ sx - nx, (sx * sx).sum() - nx.sum()))

    def cross(i: int, j: int) -> float:
        X, nx, _, kone, one_k = prep[i]
        Y, ny, _, lone, one_l = prep[j]
        frob = float(((X.T @ Y) ** 2).sum())
        if not debiased:
            return frob
        tr = frob - float((nx * ny).sum())
        return tr + float(one_k * one_l) / ((n - 1) * (n - 2)) \
            - 2.0 / (n - 2) * float((kone * lone).sum())

    self_h = [cross(i, i) for i in range(M)]
    errors: dict[int, str] = {}
    for i, h in enumerate(self_h):
        if not h > 0:
            errors[i] = ("the representation is constant or its debiased self-HSIC is not "
                         f"positive ({h:.3g}); CKA is undefined (use more images)")
    S = np.full((M, M), np.nan)
    for i in range(M):
        if i in errors:
            continue
        S[i, i] = 1.0   # h/sqrt(h·h), written exactly
        for j in range(i + 1, M):
            if j not in errors:
                S[i, j] = S[j, i] = cross(i, j) / math.sqrt(self_h[i] * self_h[j])
    return S, errors


def _rsa_matrix(arrays: list[np.ndarray], ids: list[str], rdm: str, compare: str,
                device: torch.device) -> tuple[np.ndarray, dict[int, str]] | None:
    """All-pairs RSA from one standardised (rank) RDM vector per model.

    ``rsa(X, Y)`` is the dot product of the two standardised upper-triangle vectors
    (:func:`rdx.similarity.rsa`), so each model's RDM is built and ranked once and the
    M × M matrix is a Gram matrix of M vectors of length n(n−1)/2 — M RDM builds and sorts
    instead of M(M−1). The vectors are stored in float32 (half the memory; the dot products
    are accumulated in float64 block by block, |error| ≲ 1e-6). Returns None when the
    vectors would not fit in half the free memory (the caller then goes pair by pair).
    """
    from .rdm import standardized_rdm

    M, n = len(arrays), arrays[0].shape[0]
    if n < 4:
        raise RDXInputError(f"RSA needs at least 4 images, got n={n}.")
    N = n * (n - 1) // 2
    if M * N * 4 > 0.5 * available_memory_bytes(device):
        return None
    V = torch.zeros((M, N), dtype=torch.float32, device=device)
    errors: dict[int, str] = {}
    with torch.no_grad():
        for i, A in enumerate(arrays):
            Z = torch.from_numpy(np.ascontiguousarray(A, dtype=np.float64)).to(device)
            try:
                V[i] = standardized_rdm(Z, rdm, compare, ids[i]).to(torch.float32)
            except RDXInputError as exc:
                errors[i] = str(exc)
            del Z
        G = torch.zeros((M, M), dtype=torch.float64, device=device)
        step = max(1, (64 << 20) // (8 * M))    # ~64 MB of float64 per block
        for s in range(0, N, step):
            B = V[:, s:s + step].double()
            G += B @ B.T
    S = G.clamp_(-1.0, 1.0).cpu().numpy()
    for i in errors:
        S[i, :] = S[:, i] = np.nan
    return S, errors


@dataclass(frozen=True)
class _PerModel:
    """How a measure's per-model work is shared by every pair of a matrix."""

    #: ``(Z, resolved params, model id) -> state``; raises RDXInputError for a bad model
    prepare: Callable[[Any, dict, str], Any]
    #: ``(state_a, state_b, resolved params) -> value``
    pair: Callable[[Any, Any, dict], float]
    #: ``(n, d, resolved params) -> bytes`` of one state
    nbytes: Callable[[int, int, dict], int]


def _knn_per_model(measure: str) -> _PerModel:
    return _PerModel(
        prepare=lambda Z, p, mid: neighbor_table(Z, p["k"], measure, name=mid),
        pair=lambda a, b, p: NeighborPrepared.from_tables(a, b, measure).value,
        nbytes=lambda n, d, p: n * (int(p["k"]) * 16 + 8))


_PER_MODEL: dict[str, _PerModel] = {
    "cka_rbf": _PerModel(
        prepare=lambda Z, p, mid: rbf_kernel_state(Z, sigma=p["sigma"],
                                                   sigma_mode=p["sigma_mode"],
                                                   debiased=p["debiased"], name=mid),
        pair=lambda a, b, p: cka_of_states(a, b),
        nbytes=lambda n, d, p: 8 * n * n),
    **{m: _knn_per_model(m) for m in ("mutual_knn", "jaccard_knn", "cknna")},
}


def _per_model_matrix(arrays: list[Any], ids: list[str], measure: str, params: dict,
                      device: torch.device, progress: bool
                      ) -> tuple[np.ndarray, dict[int, str], dict[str, str], int]:
    """All pairs of a symmetric measure from per-model states (see the module docstring).

    As many states as fit in half the free memory stay resident (a block); every later
    model is built once per block and streamed past it. With all states resident each is
    built once (M builds instead of the M(M+1) of pair-by-pair calls).

    Returns the matrix, model errors (index → message), pair errors ("a|b" → message) and
    the number of states built. Raises the error when every model fails (a bad parameter,
    e.g. k ≥ n, rather than bad models).
    """
    spec = _PER_MODEL[measure]
    M, n = len(arrays), arrays[0].shape[0]
    d = max(int(A.shape[1]) for A in arrays)
    per_state = max(1, spec.nbytes(n, d, params))
    resident = int(max(1, min(M, 0.5 * available_memory_bytes(device) // per_state - 1)))
    S = np.full((M, M), np.nan)
    bad: dict[int, str] = {}
    pair_errors: dict[str, str] = {}
    built = 0

    def build(i: int) -> Any:
        nonlocal built
        if i in bad:
            return None
        built += 1
        try:
            return spec.prepare(arrays[i], params, ids[i])
        except RDXInputError as exc:
            bad[i] = str(exc)
            return None

    def fill(i: int, j: int, si: Any, sj: Any) -> None:
        if si is None or sj is None:
            return
        try:
            S[i, j] = S[j, i] = float(spec.pair(si, sj, params))
        except RDXInputError as exc:
            pair_errors[f"{ids[i]}|{ids[j]}"] = str(exc)

    with tqdm(total=M * (M + 1) // 2, desc=f"{measure} pairs", disable=not progress) as bar:
        for s0 in range(0, M, resident):
            block = {i: build(i) for i in range(s0, min(M, s0 + resident))}
            for i, si in block.items():
                for j in range(i, s0 + len(block)):
                    fill(i, j, si, block[j])
                    bar.update(1)
            for j in range(s0 + len(block), M):
                sj = build(j)
                for i, si in block.items():
                    fill(i, j, si, sj)
                    bar.update(1)
                del sj
            del block
    if len(bad) == M:
        raise RDXInputError(bad[0])
    return S, bad, pair_errors, built


def similarity_matrix(features: Mapping[str, Any] | Sequence[Any], measure: str = "cka_linear",
                      *, params: Mapping | None = None, model_ids: Sequence[str] | None = None,
                      normalize: str = "none", device: str | torch.device = "cpu",
                      fast: bool = True, progress: bool = False) -> SimilarityMatrix:
    """Similarity of every pair of models on the same images.

    Parameters
    ----------
    features : dict id → (n, d_id) array, or a sequence of arrays
        One representation per model, rows = the same images in the same order.
    measure : str
        A name from :func:`available_measures` (``cka_linear`` = debiased linear CKA).
    params : dict, optional
        Measure parameters (e.g. ``{"sigma": 0.4, "sigma_mode": "absolute"}``).
    model_ids : sequence of str, optional
        Names for a sequence of arrays (default ``model_0``, ...).
    normalize : {"none", "l2", "center", "zscore"}
        Applied to every model's features first (:func:`normalize_features`).
    device : str or torch.device
        Where to compute: the linear-CKA fast path in float64 on that device; the other
        measures get float32 CUDA tensors when it is a GPU (the registry computes them
        there), numpy float64 arrays on the CPU.
    fast : bool
        Use the per-model paths of linear CKA, RSA, RBF CKA and the k-NN measures (False
        forces one :func:`rdx.similarity.similarity` call per pair).
    progress : bool
        tqdm bar over pairs.

    Returns
    -------
    SimilarityMatrix
        Symmetric measures fill ``i < j`` and mirror it; asymmetric ones compute every
        ordered pair. The diagonal is computed.
    """
    ids, arrays = _check_features(features, model_ids)
    info = get_measure(measure)
    params = dict(params or {})
    check_params(info, params)
    arrays = [normalize_features(A, normalize) for A in arrays]
    n, M = arrays[0].shape[0], len(arrays)
    t0 = time.perf_counter()
    errors: dict[str, str] = {}
    resolved = {**info.defaults, **params}
    S, built = None, None
    dev = resolve_device(device)
    if fast and measure in FAST_LINEAR_CKA:
        S, bad = _linear_cka_matrix(arrays, FAST_LINEAR_CKA[measure], dev)
    elif fast and measure == "rsa":
        out = _rsa_matrix(arrays, ids, resolved["rdm"], resolved["compare"], dev)
        if out is not None:
            S, bad = out
    if S is None and dev.type == "cuda":
        # the registry's measures compute CUDA tensors on the GPU; float32 halves the
        # memory of M resident representations (the measures accumulate in float64)
        arrays = [torch.from_numpy(np.ascontiguousarray(A, dtype=np.float32)).to(dev)
                  for A in arrays]
    if S is None and fast and measure in _PER_MODEL:
        S, bad, pair_errors, built = _per_model_matrix(arrays, ids, measure, resolved, dev,
                                                       progress)
        errors.update(pair_errors)
    fast_path = S is not None
    if S is not None:
        for i, msg in bad.items():
            errors[f"{ids[i]}|*"] = msg
    else:
        S = np.full((M, M), np.nan)
        todo = [(i, j) for i in range(M) for j in range(M)
                if i == j or i < j or not info.symmetric]
        for i, j in tqdm(todo, desc=f"{measure} pairs", disable=not progress):
            try:
                v = float(info.compute(arrays[i], arrays[j], **params))
            except RDXInputError as exc:
                errors[f"{ids[i]}|{ids[j]}"] = str(exc)
                continue
            S[i, j] = v
            if info.symmetric:
                S[j, i] = v
    return SimilarityMatrix(
        values=S, model_ids=ids, measure=measure, params=params,
        higher_is_more_similar=info.higher_is_more_similar, symmetric=info.symmetric,
        n_images=n, normalize=normalize, errors=errors,
        meta={"resolved_params": jsonable(resolved), "seconds": time.perf_counter() - t0,
              "fast_path": fast_path,
              **({} if built is None else {"states_built": built}),
              "versions": versions()})


__all__ = ["FAST_LINEAR_CKA", "MATRIX_SCHEMA", "MeasureInfo", "NORMALIZATIONS",
           "SimilarityMatrix", "available_measures", "check_params", "get_measure",
           "measure_slug", "normalize_features", "parse_measure", "similarity_matrix"]
