"""Methods the runner can list in a config, behind one small interface.

A method validates its parameters up front (``validate``) and turns two representations
into a :class:`~rdx.results.types.MethodResult` (``run``), unscored: the caller scores it
once (:class:`rdx.evaluation.scoring.Scorer`) and writes it through the run store. The
baselines, ``cka``, ``similarity`` and ``classification`` register here as well; this
registry is the one list of methods (command-line choices, colours and benchmarks read it).

A result's ``arrays`` (small numpy arrays: the n×k codes of the shown concepts, probe
predictions) are saved as ``concepts.npz`` next to ``explanations.json``.
"""
from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .. import validation as V
from ..errors import RDXInputError
from ..io import versions
from ..results.types import DirectionResult, MethodResult


@dataclass
class MethodContext:
    """What the runner hands every method besides A and B."""

    labels: np.ndarray
    seed: int
    device: str = "auto"
    #: (A_mapped, B_mapped, info) — the comparison's CKA alignment, learned once
    #: by the runner for the first method that asks for it and shared with the others.
    alignment: tuple | None = None
    #: show progress bars (training-based baselines)
    progress: bool = False
    #: out-of-fold probe predictions per representation ("a", "b", "a_mapped", "b_mapped"),
    #: computed once per comparison by the runner (:func:`comparison_predictions`) for the
    #: methods whose ``predictions_needed`` asks for them; None when no method needs them.
    predictions: dict | None = None


# --- shared probe predictions (guidance, grid labels, classification) ------------------------
def comparison_predictions(keys: tuple[str, ...], A: np.ndarray, B: np.ndarray,
                           labels: np.ndarray, alignment: tuple | None,
                           have: dict | None = None) -> dict:
    """The 5-fold out-of-fold probe predictions of ``keys`` (``a_mapped``/``b_mapped`` from
    the comparison's alignment), reusing those in ``have``; returns all of them."""
    from ..method.guidance import GUIDANCE_FOLDS, representation_predictions

    reps = {"a": A, "b": B}
    if alignment is not None:
        reps["a_mapped"], reps["b_mapped"] = alignment[0], alignment[1]
    missing = {k: reps[k] for k in keys if k in reps and k not in (have or {})}
    if not missing:
        return dict(have or {})
    labels = V.check_labels(labels, len(A), "labels")
    return representation_predictions(missing, labels, have=have, n_folds=GUIDANCE_FOLDS)
# --- end shared probe predictions ------------------------------------------------------------


class Method(Protocol):
    def validate(self, params: dict[str, Any], path: str) -> None: ...

    def run(self, A: np.ndarray, B: np.ndarray, params: dict[str, Any],
            ctx: MethodContext) -> MethodResult: ...


def check_known_params(params: dict[str, Any], allowed: set[str] | frozenset[str],
                       method_name: str, path: str) -> None:
    """Refuse parameters a method does not take, listing the ones it does."""
    unknown = set(params) - set(allowed)
    if unknown:
        raise RDXInputError(f"{path}: unknown {method_name} parameter(s) {sorted(unknown)}; "
                            f"allowed: {sorted(allowed)}")


def check_flag(params: dict[str, Any], key: str, path: str) -> None:
    """A true/false parameter (absent means false)."""
    if not isinstance(params.get(key, False), bool):
        raise RDXInputError(f"{path}.{key} must be true or false.")


class RDXMethod:
    """``method: rdx`` — every :class:`rdx.RDX` parameter except the run-level ones, plus
    ``save_graphs: true`` to keep the n×n matrices in ``graphs.npz`` (for the analysis
    plots of intermediate steps; large).

    The keys, their defaults and their checks come from the estimator's declarations
    (:data:`rdx.method.options.RDX_OPTIONS`, through :func:`rdx.configs.options_model`);
    run-level parameters (seed, device, progress, kept graphs) are set by the run."""

    # the estimator (torch, scikit-learn: ~2 s of imports) is loaded on first use, so that
    # listing the methods (``rdx explain --help``) stays instant
    @functools.cached_property
    def _cls(self) -> type:
        from ..method.estimator import RDX

        return RDX

    @functools.cached_property
    def config_model(self) -> type:
        """The pydantic model of a config's ``method: rdx`` entry (without ``method`` and
        ``name``)."""
        from ..configs import options_model
        from ..method.options import RDX_OPTIONS

        return options_model("RDXMethodParams", RDX_OPTIONS,
                             extra={"save_graphs": (bool, False)})

    @functools.cached_property
    def params(self) -> set[str]:
        return set(self.config_model.model_fields) - {"save_graphs"}

    def validate(self, params: dict[str, Any], path: str) -> None:
        from ..configs import validate_params

        check_known_params(params, self.params | {"save_graphs"}, "RDX", path)
        check_flag(params, "save_graphs", path)
        # the estimator's checks first: the same declarations, plus what needs several
        # parameters at once (and the large-n mode's own, more specific, messages); the image
        # count is only known at run time
        try:
            self._cls(**self._fit_params(params))._check_params(n=2**31)
        except RDXInputError as exc:
            raise RDXInputError(f"{path}: {exc}") from None
        validate_params(self.config_model, params, path)   # the config's types

    def run(self, A: np.ndarray, B: np.ndarray, params: dict[str, Any],
            ctx: MethodContext) -> MethodResult:
        graphs = bool(params.get("save_graphs"))
        # the estimator's bar names its steps (probes, similarities, clustering): seconds
        # each, and more with guidance probes or at large n
        model = self._cls(**self._fit_params(params), random_state=ctx.seed, device=ctx.device,
                          keep_graphs=graphs, verbose=int(ctx.progress))
        labelled = params.get("guidance") or params.get("label_grids")
        model.fit(A, B, labels=ctx.labels if labelled else None,
                  alignment=ctx.alignment if params.get("align_representations") else None,
                  predictions=ctx.predictions if self.predictions_needed(params) else None)
        return model.result()

    def predictions_needed(self, params: dict[str, Any]) -> tuple[str, ...] | None:
        """Probe predictions this entry uses (prediction-based guidance, label_grids)."""
        from ..method.guidance import PREDICTION_GUIDANCE, predictions_needed

        if params.get("guidance") in PREDICTION_GUIDANCE or params.get("label_grids"):
            return predictions_needed(bool(params.get("align_representations")))
        return None

    @staticmethod
    def _fit_params(params: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in params.items() if k != "save_graphs"}

    def alignment_params(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The alignment this method needs (its ``align_params``), or None."""
        return dict(params.get("align_params") or {}) if params.get("align_representations") \
            else None


ALIGN_KEYS = ("align_representations", "align_params")
#: aligned baseline variants: which representation is replaced by its aligned map
ALIGN_VARIANTS = {"0to1": "A is replaced by f_AB(A), its linear map into B's space",
                  "1to0": "B is replaced by f_BA(B), its linear map into A's space"}


def _check_align_params(params: dict[str, Any], path: str) -> None:
    ap = params.get("align_params")
    if ap is not None and not isinstance(ap, dict):
        raise RDXInputError(f"{path}.align_params: expected a mapping (train_fraction, "
                            f"num_steps, lr), got {ap!r}")
    if ap:
        from ..method.alignment import learn_alignment
        allowed = set(inspect.signature(learn_alignment).parameters) - {"X", "Y", "device"}
        unknown = set(ap) - allowed
        if unknown:
            raise RDXInputError(f"{path}.align_params: unknown key(s) {sorted(unknown)}; "
                                f"allowed: {sorted(allowed)}")


class BaselineMethod:
    """``method: kmeans | pca | nmf | cnmf | sae | topk_sae | usae | nlmcd | spec |
    crosscoder | dfc_crosscoder``.

    Per-model baselines are fit on A (→ ``a_over_b``: model A's concepts) and on B
    (→ ``b_over_a``) with the same seed; pairwise ones see both. ``align_representations``
    (``"0to1"`` / ``"1to0"``) swaps one input for its aligned map; the grids are
    always scored on the original representations.
    """

    RUN_LEVEL = frozenset({"random_state", "device", "verbose"})

    def __init__(self, name: str) -> None:
        from ..baselines import PairExplainer, baseline_class

        self.name = name
        self._cls = baseline_class(name)
        sig = set(inspect.signature(self._cls.__init__).parameters) - {"self"}
        self.params = sig - self.RUN_LEVEL
        self._run_level = sig & self.RUN_LEVEL
        self.pairwise = issubclass(self._cls, PairExplainer)

    def _estimator_params(self, params: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in params.items() if k not in ALIGN_KEYS}

    def validate(self, params: dict[str, Any], path: str) -> None:
        check_known_params(params, self.params | set(ALIGN_KEYS), self.name, path)
        align = params.get("align_representations")
        if align not in (None, False, *ALIGN_VARIANTS):
            raise RDXInputError(
                f"{path}.align_representations: {align!r} is not a baseline variant; use "
                + " or ".join(f"'{k}' ({v})" for k, v in ALIGN_VARIANTS.items()) + ".")
        _check_align_params(params, path)
        try:
            self._cls(**self._estimator_params(params))._check_params(None)
        except RDXInputError as exc:
            raise RDXInputError(f"{path}: {exc}") from None
        except TypeError as exc:  # e.g. a positional-only mistake
            raise RDXInputError(f"{path}: {exc}") from None

    def alignment_params(self, params: dict[str, Any]) -> dict[str, Any] | None:
        return dict(params.get("align_params") or {}) \
            if params.get("align_representations") in ALIGN_VARIANTS else None

    def _make(self, params: dict[str, Any], ctx: MethodContext):
        kw = self._estimator_params(params)
        run = {"random_state": ctx.seed, "device": ctx.device, "verbose": int(ctx.progress)}
        kw.update({k: v for k, v in run.items() if k in self._run_level})
        return self._cls(**kw)

    def run(self, A: np.ndarray, B: np.ndarray, params: dict[str, Any],
            ctx: MethodContext) -> MethodResult:
        A0, B0 = V.as_representation(A, "A"), V.as_representation(B, "B")
        V.check_pair(A0, B0)
        A_in, B_in = A0, B0
        align = params.get("align_representations")
        if align in ALIGN_VARIANTS:
            if ctx.alignment is None:
                raise RDXInputError(f"{self.name} with align_representations={align!r} needs "
                                    "the comparison's alignment (the runner learns it).")
            if align == "0to1":
                A_in = ctx.alignment[0]
            else:
                B_in = ctx.alignment[1]
        t0 = time.perf_counter()
        arrays: dict[str, np.ndarray] = {}
        if self.pairwise:
            est = self._make(params, ctx).fit(A_in, B_in)
            directions = est.directions_
            info = {"pair": est.info_}
            arrays.update(getattr(est, "arrays_", {}) or {})
            resolved = est.get_params()
        else:
            directions, info = {}, {}
            for side, X, direction in (("a", A_in, "a_over_b"), ("b", B_in, "b_over_a")):
                est = self._make(params, ctx).fit(X)
                directions[direction] = est.explanations()
                info[side] = est.info_
                cols = list(est.concepts_)
                arrays[f"{side}_codes"] = np.asarray(est.codes_)[:, cols].astype(np.float32)
                arrays[f"{side}_concepts"] = np.asarray(cols, dtype=np.int64)
                if getattr(est, "dictionary_", None) is not None:
                    arrays[f"{side}_dictionary"] = np.asarray(est.dictionary_)[cols].astype(
                        np.float32)
                if getattr(est, "labels_", None) is not None:
                    arrays[f"{side}_labels"] = np.asarray(est.labels_, dtype=np.int64)
            resolved = est.get_params()
        return MethodResult(
            method=self.name,
            params={**resolved, **{k: params[k] for k in ALIGN_KEYS if k in params}},
            n_images=A0.shape[0],
            directions={d: DirectionResult.from_json(v) for d, v in directions.items()},
            info={"estimator": info}, timings={"fit": time.perf_counter() - t0},
            versions=versions(), arrays=arrays)


class CKAMethod:
    """``method: cka`` — debiased (and biased) linear CKA of A and B.

    With ``align_representations: true`` also the CKA of each aligned map with its target
    (how much of the other model a linear map recovers).
    """

    PARAMS = frozenset({"align_representations", "align_params", "verbose"})

    def validate(self, params: dict[str, Any], path: str) -> None:
        check_known_params(params, self.PARAMS, "cka", path)
        check_flag(params, "align_representations", path)
        _check_align_params(params, path)

    def alignment_params(self, params: dict[str, Any]) -> dict[str, Any] | None:
        return dict(params.get("align_params") or {}) if params.get("align_representations") \
            else None

    def run(self, A: np.ndarray, B: np.ndarray, params: dict[str, Any],
            ctx: MethodContext) -> MethodResult:
        from ..similarity import biased_linear_cka, debiased_linear_cka

        A, B = V.as_representation(A, "A"), V.as_representation(B, "B")
        V.check_pair(A, B)
        sims = {"cka_debiased": debiased_linear_cka(A, B), "cka_biased": biased_linear_cka(A, B)}
        if params.get("align_representations") and ctx.alignment is not None:
            sims["cka_debiased_a_mapped_vs_b"] = debiased_linear_cka(ctx.alignment[0], B)
            sims["cka_debiased_a_vs_b_mapped"] = debiased_linear_cka(A, ctx.alignment[1])
        return MethodResult(method="cka", params=dict(params), n_images=A.shape[0],
                            info={"similarity": sims}, versions=versions())


class SimilarityMethod:
    """``method: similarity`` — any of the similarity measures (``rdx.similarity.MEASURES``),
    optionally calibrated: a permutation null (p-value, score minus null mean) and a bootstrap
    95 % interval over images, both seeded with the comparison's seed.

    Parameters: ``measures`` (list of names; default all), ``permutations``, ``bootstrap``,
    ``params`` ({measure: {parameter: value}}, e.g. ``{rsa: {rdm: cosine}}``).
    """

    PARAMS = frozenset({"measures", "permutations", "bootstrap", "params"})

    def _measures(self, params: dict[str, Any]) -> list[str]:
        from ..similarity import MEASURES
        return list(params.get("measures") or MEASURES)

    def validate(self, params: dict[str, Any], path: str) -> None:
        from ..similarity import MEASURES
        check_known_params(params, self.PARAMS, "similarity", path)
        names = self._measures(params)
        if not isinstance(names, list) or not all(isinstance(m, str) for m in names):
            raise RDXInputError(f"{path}.measures: expected a list of measure names.")
        bad = [m for m in names if m not in MEASURES]
        if bad:
            raise RDXInputError(f"{path}.measures: unknown {bad}; known: {sorted(MEASURES)}")
        for key in ("permutations", "bootstrap"):
            V.check_int(params.get(key, 0), f"{path}.{key}", minimum=0)
        extra = params.get("params") or {}
        if not isinstance(extra, dict) or not all(isinstance(v, dict) for v in extra.values()):
            raise RDXInputError(f"{path}.params: expected {{measure: {{parameter: value}}}}.")
        for m, kw in extra.items():
            if m not in names:
                raise RDXInputError(f"{path}.params.{m}: not one of the listed measures {names}")
            unknown = set(kw) - set(MEASURES[m].params)
            if unknown:
                raise RDXInputError(f"{path}.params.{m}: unknown parameter(s) {sorted(unknown)}; "
                                    f"{m} takes {sorted(MEASURES[m].params)}")

    def run(self, A: np.ndarray, B: np.ndarray, params: dict[str, Any],
            ctx: MethodContext) -> MethodResult:
        from ..similarity import calibrate

        t0 = time.perf_counter()
        extra = params.get("params") or {}
        cal = {m: calibrate(m, A, B, permutations=int(params.get("permutations", 0)),
                            bootstrap=int(params.get("bootstrap", 0)), seed=ctx.seed,
                            **extra.get(m, {}))
               for m in self._measures(params)}
        return MethodResult(
            method="similarity", params=dict(params), n_images=len(A),
            info={"similarity": {m: c["value"] for m, c in cal.items()}, "calibration": cal},
            timings={"fit": time.perf_counter() - t0}, versions=versions())


class ClassificationMethod:
    """``method: classification`` — k-fold logistic-regression probes on each representation:
    per-fold accuracy and the agreement of the two probes' out-of-fold
    predictions. Aligned mode adds the probes on the aligned maps, each evaluated on the
    *mapped* inputs it was trained on (the original applied them to unmapped inputs)."""

    PARAMS = frozenset({"folds", "align_representations", "align_params"})

    def validate(self, params: dict[str, Any], path: str) -> None:
        check_known_params(params, self.PARAMS, "classification", path)
        V.check_int(params.get("folds", 5), f"{path}.folds", minimum=2)
        check_flag(params, "align_representations", path)
        _check_align_params(params, path)

    alignment_params = CKAMethod.alignment_params

    def predictions_needed(self, params: dict[str, Any]) -> tuple[str, ...] | None:
        """With the guidance probes' 5 folds, the shared predictions are this method's."""
        from ..method.guidance import GUIDANCE_FOLDS, predictions_needed

        if int(params.get("folds", 5)) != GUIDANCE_FOLDS:
            return None
        return predictions_needed(bool(params.get("align_representations")))

    def run(self, A: np.ndarray, B: np.ndarray, params: dict[str, Any],
            ctx: MethodContext) -> MethodResult:
        from ..method.guidance import fold_accuracies, probe_predictions

        folds = int(params.get("folds", 5))
        labels = V.check_labels(ctx.labels, len(A), "labels")
        reps = {"a": V.as_representation(A, "A"), "b": V.as_representation(B, "B")}
        if params.get("align_representations") and ctx.alignment is not None:
            reps["a_mapped"], reps["b_mapped"] = ctx.alignment[0], ctx.alignment[1]
        preds, accs = {}, {}
        shared = ctx.predictions if self.predictions_needed(params) else None
        for key, X in reps.items():
            if shared is not None and key in shared:  # computed once by the runner
                preds[key] = np.asarray(shared[key])
                accs[key] = fold_accuracies(preds[key], labels, n_folds=folds, random_state=0)
                continue
            preds[key], accs[key] = probe_predictions(X, labels, n_folds=folds,
                                                      random_state=0)
        agree = {"a_b": float(np.mean(preds["a"] == preds["b"]))}
        if "a_mapped" in preds:
            agree["a_mapped_b"] = float(np.mean(preds["a_mapped"] == preds["b"]))
            agree["a_b_mapped"] = float(np.mean(preds["a"] == preds["b_mapped"]))
        summary = {k: {"accuracy": float(np.mean(v)), "fold_accuracies": v}
                   for k, v in accs.items()}
        return MethodResult(
            method="classification", params={"folds": folds, **params}, n_images=len(labels),
            info={"probe": summary, "agreement": agree}, versions=versions(),
            arrays={f"{k}_predictions": np.asarray(p) for k, p in preds.items()})


METHODS: dict[str, Method] = {"rdx": RDXMethod(), "cka": CKAMethod(),
                              "similarity": SimilarityMethod(),
                              "classification": ClassificationMethod()}


def method(name: str) -> Method:
    """The runner's method object for a config name (baselines built on first use)."""
    if name not in METHODS:
        from ..baselines import BASELINE_NAMES
        if name not in BASELINE_NAMES:
            raise RDXInputError(f"unknown method {name!r}; known: "
                                + ", ".join(sorted(set(METHODS) | set(BASELINE_NAMES))))
        METHODS[name] = BaselineMethod(name)
    return METHODS[name]


def method_names() -> list[str]:
    from ..baselines import BASELINE_NAMES
    return sorted(set(METHODS) | set(BASELINE_NAMES))
