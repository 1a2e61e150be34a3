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
  and SVCCA are called pair by pair. The fast paths: :mod:`rdx.similarity.matrix_fast`.
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
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tqdm.auto import tqdm

from ..backend import resolve_device
from ..errors import RDXInputError
from ..io import atomic_write, jsonable, versions, write_json_atomic
from .matrix_fast import PER_MODEL, linear_cka_matrix, per_model_matrix, rsa_matrix
from .names import NORMALIZATIONS

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
        S, bad = linear_cka_matrix(arrays, FAST_LINEAR_CKA[measure], dev)
    elif fast and measure == "rsa":
        out = rsa_matrix(arrays, ids, resolved["rdm"], resolved["compare"], dev)
        if out is not None:
            S, bad = out
    if S is None and dev.type == "cuda":
        # the registry's measures compute CUDA tensors on the GPU; float32 halves the
        # memory of M resident representations (the measures accumulate in float64)
        arrays = [torch.from_numpy(np.ascontiguousarray(A, dtype=np.float32)).to(dev)
                  for A in arrays]
    if S is None and fast and measure in PER_MODEL:
        S, bad, pair_errors, built = per_model_matrix(arrays, ids, measure, resolved, dev,
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
