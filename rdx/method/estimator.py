"""The :class:`RDX` estimator: two representations in, difference explanations out."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import validation as V
from ..backend import (available_memory_bytes, format_bytes, memory_limit_from_env,
                        resolve_device, resolve_device_name, seed_everything, seeded)
from ..errors import NotFittedError, RDXInputError
from ..io import versions
from ..params import Params
from ..results.store import write_method_result
from ..results.types import DIRECTIONS, DirectionResult, MethodResult
from . import arrays as AR
from .arrays import Array
from .clustering import (block_sums, cluster_rank_labels, eigenvector_centrality,
                         explanations_of, greedy_centrality_clusters, pagerank, union_mean)
from .geometry import PrecomputedDistances, abs_max, centered_on
from .graphs import (SIMILARITY_FUNCTIONS, affinity, apply_guidance_, check_affinity_contrast,
                     difference_matrix_, guidance_null_value, resolve_gamma,
                     similarity_matrix, symmetrize_, symmetrized_affinity)
from .grids import select_grid
from .guidance import (PREDICTION_GUIDANCE, check_predictions, check_probe_labels,
                       group_labels, positive_class, predictions_needed,
                       representation_predictions)
from .knn_options import (DEFAULT_N_LANDMARKS, check_knn_params, resolve_knn_search,
                          resolve_n_neighbors)
from .options import METRICS, VARIANTS, check_options
from .ranks import NEAREST_KEPT
from .spectral import spectral_clustering

if TYPE_CHECKING:
    import torch

#: exp() of float32 overflows above ~88; refuse affinities that would get close.
_MAX_EXPONENT = 80.0
#: Workspace beyond the n×n matrices: sort keys of the row blocks (one 32 MiB block per
#: thread, plus numpy's sort buffer), gathers and k-means.
_WORKSPACE_BYTES = 192 * 2**20
__all__ = ["RDX", "VARIANTS", "overflow_message"]


def overflow_message(peak: float, beta: float, difference: str, normalized: bool) -> str:
    """Why exp(±β·diff) would overflow, and the fix that applies to these settings (the
    Python parameter and the ``rdx explain`` flag)."""
    head = f"the affinities exp(±β·diff) would reach e^{peak:.0f} and overflow float32"
    if normalized:
        # |diff| ≤ 1 already: only beta can be too large
        return (f"{head}: the difference is normalised (|diff| ≤ 1), so beta={beta:g} is too "
                f"large; use beta ≤ {_MAX_EXPONENT:g} (--beta).")
    return (f"{head}: with difference={difference!r} and normalize_diff=False the difference "
            "is not bounded. Normalise it — normalize_diff=True (`--normalize-diff true`; "
            "the default for difference='standard') — or use a smaller beta (--beta).")


class RDX(Params):
    """Representational Difference Explanations.

    Finds groups of images that are close in one representation and far apart in the other,
    in both directions: ``a_over_b`` (close in A, far in B) and ``b_over_a``.

    Every parameter is declared once, in :data:`rdx.method.options.RDX_OPTIONS` (accepted
    values, default, help text, ``rdx explain`` flag); the estimator checks it there, and
    ``rdx explain``'s flags and the configs' ``method: rdx`` keys are made from it.

    Parameters
    ----------
    n_explanations : int, default=3
        Explanations per direction (k). Spectral clustering uses k + 1 clusters; the one with
        the lowest mean affinity is the no-change group.
    similarity : {"neighborhood", "max_normalized_distance", "zp_local_scaling"}
        Per-model matrix compared by the difference function (default: neighbour ranks).
    difference : {"locally_biased", "standard"}
    gamma : float or None
        γ of the locally biased difference; None → ``gamma_scale / n``.
    gamma_scale : float, default=80
    beta : float, default=5
        Affinity ``exp(−β·diff)``.
    normalize_diff : bool or None
        Divide the difference by its max |value|; None → True for ``standard`` (whose rank
        differences would otherwise overflow the exponential), False for ``locally_biased``.
    sigma_neighbor : int, default=7
        Neighbour defining the local scale of ``zp_local_scaling``.
    clustering : {"spectral", "pagerank", "eigenvector_centrality"}
    n_init : int, default=10
        k-means restarts in spectral clustering.
    eigen_solver : {"auto", "dense", "arpack"}
    null_threshold : float, default=1.5
        The threshold of *weak* explanations: an explanation whose mean affinity is below
        it is weak — barely different from the no-change group. Weak is the one name the
        commands, reports and documentation use for it; the results record it as
        ``Explanation.low_affinity`` (``--null-threshold`` on the command line).
    merge_low_affinity : bool, default=False
        Move weak explanations into the no-change group (fewer than k may remain).
    grid_size : int, default=9
    grid_strategy : {"maximize_total_neighborhood_affinity", "centroid", "max_affinity", "random"}
    guidance : {None, "ground_truth", "classifier", "tpfp", "tpnfpn", "true_pos"}
        Group the images per model (classes, out-of-fold probe predictions, or
        (prediction, correct?) groups: :mod:`rdx.method.guidance`) and set every cross-group
        entry of that model's rank matrix to ν, so that no difference links two groups.
    random_state : int, default=42
        Seeds numpy, torch and Python's RNG before fitting and every random step.
    device : {"auto", "cpu", "cuda"}
    graph : {"auto", "dense", "knn"}, default="auto"
        ``auto``: ``dense`` when its n×n matrices fit in the available memory (the exact
        method, and the faster one wherever it fits), else ``knn``; the choice and why are
        recorded in ``graph_``, ``info["graph"]`` and the result's ``graph_resolved``.
        ``dense``: the exact method on two n×n matrices (memory grows with n²; about 13 GB at
        n = 40 000). ``knn``: the large-n mode (:mod:`rdx.method.knn_fit`): pairs that
        either model ranks within its ``n_neighbors`` nearest neighbours keep their exact
        ranks; the rest (the far pairs) enter through a low-rank sketch built from
        ``n_landmarks`` images; memory grows with n·(K + m), nothing n×n. Identical to
        ``dense`` with ``n_neighbors = n − 1``.
    n_neighbors : int, "auto" or "null", default="auto"
        K of ``graph="knn"`` (ignored by ``dense``): an integer 2 ≤ K ≤ n − 1; ``"auto"``:
        ``min(200, n − 1)`` (n = 100 000 in about 6 GB with the sketch); ``"null"``: the
        smallest K at which no far pair can reach ``null_threshold`` on its own (821 at
        n = 5 000, 973 at 100 000; memory ≈ 128·n·K bytes). The K used is recorded as
        ``info["knn_graph"]["n_neighbors"]``. Agreement with the dense method on real
        features: ``benchmarks/bench_large_n.py`` and the README.
    n_landmarks : int, default=1000
        Landmark images m of the far-pair sketch of ``graph="knn"`` (at most n; 0: no
        sketch, far pairs count as neutral, affinity 1). The far part of the affinity is
        modelled as ``F[:, L] W⁺ F[L, :]`` from the exact affinities between every image and
        the landmarks (Nyström), with ``W`` truncated to its ``min(100, m // 10)``
        largest-|λ| eigenpairs. It recovers diffuse clusters made of many weak far pairs,
        which the graph alone drops.
    executor : None, str or dask.distributed.Client, default=None
        Where ``graph="knn"`` runs its blocked neighbour/landmark pass: None, this process;
        ``"local:N"``, a Dask LocalCluster of N worker processes; a Dask scheduler address
        (``"tcp://host:8786"``) or a ``dask.distributed.Client`` — the row blocks become
        tasks that read the features from a memory-mapped file
        (:mod:`rdx.method.knn_dask`; ``pip install "rdx-toolkit[distributed]"``). The graph
        and the fit are the same as in this process on the CPU; the spectral step runs here.
        Used whenever the fit uses ``knn`` (with ``graph="auto"``, when it chooses it).
    knn_search : {"auto", "exact", "approx"}, default="auto"
        How ``graph="knn"`` finds each image's K nearest neighbours and the ranks of the
        other pairs: ``exact`` (the blocked pass over every distance, O(n²·d)); ``approx``
        (:mod:`rdx.method.knn_approx`: inverted-file lists, O(n^1.5·d), and ranks off the
        lists estimated from the landmarks — the reduced-cost mode for ~10⁶ images on one
        machine; the recall of its lists is measured on the landmark rows and recorded in
        ``info["knn_graph"]["search"]``); ``auto``: ``approx`` above 500 000 images on the CPU
        without an executor, else ``exact``. Validation: the large-n guide.
    keep_graphs : bool, default=False
        Keep the n×n rank and difference matrices (``graphs_``) for saving/plots.
    align_representations : bool, default=False
        Aligned mode: learn CKA-maximising linear maps A→B and B→A
        (:func:`rdx.method.alignment.align_pair`, seeded with ``random_state``) and, in each
        direction, replace the model in which pairs must be far apart by its aligned
        transform: ``a_over_b`` compares (A, f_BA(B)), ``b_over_a`` compares (f_AB(A), B).
        Grids and BSR use the original A and B.
    align_params : dict or None
        Keyword arguments of :func:`~rdx.method.alignment.learn_alignment`
        (``train_fraction``, ``num_steps``, ``lr``, ``seed``); ``seed`` defaults to
        ``random_state`` and ``device`` to the fit device.
    verbose : int, default=0
        Show a progress bar over the steps.
    variant : {"paper", "v2"}, default="paper"
        Sets the defaults of the parameters below that are left at ``"auto"``: ``paper`` is
        the published algorithm; ``v2`` the authors' newer one (``symmetrize_ranks="mean"``,
        ``filter_threshold=1.1``, ``guidance_scale=10``). Explicit values override it.
    symmetrize_ranks : {"auto", None, "mean", "min", "max"}, default="auto"
        Make each model's rank matrix symmetric before the difference: ``mean`` is
        ``(R + Rᵀ)/2`` (v2); ``min``/``max`` are element-wise. The difference and affinities
        are then symmetric. None keeps the paper's asymmetric ranks (their affinity is
        symmetrised for clustering instead).
    symmetrize_difference : bool, default=False
        Replace the difference by ``(diff + diffᵀ)/2`` before the affinity (only changes
        anything with asymmetric ranks).
    filter_threshold : "auto", None or float, default="auto"
        With a number τ: every cluster whose mean affinity is below τ joins the no-change
        group, the others are explanations — anywhere from 0 to k + 1 of them; the filtered
        clusters are recorded per direction (``extra["filter"]``). None: the paper's rule
        (the weakest of the k + 1 clusters is the no-change group).
    guidance_scale : "auto" or float >= 1, default="auto"
        ν = ``guidance_scale`` × the largest entry of the two compared matrices (n − 1 for
        ranks), the same for both models so that pairs split by both models' groups stay
        exactly neutral (affinity 1). ``auto``: 5 (paper), 10 (v2).
    guidance_positive : label or None
        Positive class of ``tpnfpn``/``true_pos`` guidance (None: the largest label).
    label_grids : bool, default=False
        Record, for every grid image, its true label and the probe predictions of the two
        representations its direction compares (``Explanation.extra["grid_labels"]``);
        the grid PNGs then carry them as captions. Needs labels.
    metric : {"euclidean", "precomputed"}, default="euclidean"
        What ``fit``'s ``A`` and ``B`` are: features, compared by the Euclidean distance
        between their rows, or (``"precomputed"``, scikit-learn's convention) two n×n
        distance matrices of the same images — finite, non-negative, symmetric and zero on
        the diagonal (within 1e-5 of the largest entry), checked before anything else.
        Every step then reads the given distances where it would compute them from
        features: ``fit(D_A, D_B)`` with ``D = cdist(X, X)`` gives the explanations of
        ``fit(X_A, X_B)``. Steps that need the features themselves are refused:
        ``graph="knn"``, aligned mode, probe-based guidance and ``label_grids`` without
        given ``predictions``, ``grid_strategy="centroid"``; the rows' check
        (``check_rows``) is not made.

    Attributes
    ----------
    directions_ : dict[str, DirectionResult]
    gamma_ : float
    n_images_ : int
    timings_ : dict[str, float]
    graphs_ : dict[str, np.ndarray] or None
    nearest_ : dict[str, np.ndarray]
        Dense fits with neighbour ranks: ``{"a": ..., "b": ...}``, each image's 10 nearest
        other images in rank order (n × 10), a by-product of the rank pass that
        :func:`rdx.evaluation.significance.assess` reuses. Empty otherwise.
    graph_ : {"dense", "knn"}
        The graph the fit used (``graph="auto"`` chooses; ``graph_why_`` says why).
    alignment_ : dict or None
        Aligned mode only: train/test CKA curves and best steps of both maps.
    guidance_ : dict or None
        With guidance: mode, ν per direction, positive class, where the predictions came
        from and their accuracy.

    Examples
    --------
    B holds three tight groups of 20 images; A keeps two and spreads the third (images
    40–59). The strongest explanation of "B over A" is that group:

    >>> import numpy as np
    >>> from rdx import RDX
    >>> rng = np.random.default_rng(0)
    >>> B = np.repeat(np.eye(3) * 8, 20, axis=0) + 0.3 * rng.normal(size=(60, 3))
    >>> A = B.copy()
    >>> A[40:] = B[40:].mean(axis=0) + 4 * rng.normal(size=(20, 3))
    >>> rdx = RDX(n_explanations=2, grid_size=4).fit(A, B)
    >>> sorted(rdx.directions_)
    ['a_over_b', 'b_over_a']
    >>> best = max(rdx.directions_["b_over_a"].explanations, key=lambda e: e.mean_affinity)
    >>> all(i >= 40 for i in best.members), len(best.images)
    (True, 4)

    References
    ----------
    Representational Difference Explanations (NeurIPS 2025): neighbour ranks of each model,
    their locally biased difference, its affinity per direction, spectral clustering and
    grids of the most affine images (the method page of the documentation).
    """

    def __init__(self, n_explanations: int = 3, *, similarity: str = "neighborhood",
                 difference: str = "locally_biased", gamma: float | None = None,
                 gamma_scale: float = 80.0, beta: float = 5.0,
                 normalize_diff: bool | None = None, sigma_neighbor: int = 7,
                 clustering: str = "spectral", n_init: int = 10, eigen_solver: str = "auto",
                 null_threshold: float = 1.5, merge_low_affinity: bool = False,
                 grid_size: int = 9,
                 grid_strategy: str = "maximize_total_neighborhood_affinity",
                 guidance: str | None = None, random_state: int = 42, device: str = "auto",
                 graph: str = "auto", n_neighbors: int | str = "auto",
                 n_landmarks: int = DEFAULT_N_LANDMARKS, executor: Any = None,
                 knn_search: str = "auto", keep_graphs: bool = False, verbose: int = 0,
                 align_representations: bool = False, align_params: dict | None = None,
                 variant: str = "paper", symmetrize_ranks: str | None = "auto",
                 symmetrize_difference: bool = False, filter_threshold: Any = "auto",
                 guidance_scale: Any = "auto", guidance_positive: Any = None,
                 label_grids: bool = False, metric: str = "euclidean"):
        self.n_explanations = n_explanations
        self.similarity = similarity
        self.difference = difference
        self.gamma = gamma
        self.gamma_scale = gamma_scale
        self.beta = beta
        self.normalize_diff = normalize_diff
        self.sigma_neighbor = sigma_neighbor
        self.clustering = clustering
        self.n_init = n_init
        self.eigen_solver = eigen_solver
        self.null_threshold = null_threshold
        self.merge_low_affinity = merge_low_affinity
        self.grid_size = grid_size
        self.grid_strategy = grid_strategy
        self.guidance = guidance
        self.random_state = random_state
        self.device = device
        self.graph = graph
        self.n_neighbors = n_neighbors
        self.n_landmarks = n_landmarks
        self.executor = executor
        self.knn_search = knn_search
        self.keep_graphs = keep_graphs
        self.verbose = verbose
        self.align_representations = align_representations
        self.align_params = align_params
        self.variant = variant
        self.symmetrize_ranks = symmetrize_ranks
        self.symmetrize_difference = symmetrize_difference
        self.filter_threshold = filter_threshold
        self.guidance_scale = guidance_scale
        self.guidance_positive = guidance_positive
        self.label_grids = label_grids
        self.metric = metric

    # ------------------------------------------------------------------ validation
    def _check_params(self, n: int) -> None:
        """Every parameter against its declaration (:data:`rdx.method.options.RDX_OPTIONS`),
        then what needs the image count ``n`` or several parameters at once."""
        params = self.get_params(deep=False)
        check_options(params, skip=frozenset(o for o in params if o != "metric"))
        if self.metric == "precomputed":   # first: the other checks assume features
            self._check_precomputed_params()
        # the large-n mode's own checks first: they know n and say more about K
        if self.graph == "knn":
            check_knn_params(params, n)
        check_options(params)
        V.check_n_explanations(self.n_explanations, n)
        if self.similarity == "zp_local_scaling":
            V.check_int(self.sigma_neighbor, "sigma_neighbor", minimum=1, maximum=n - 1)
        # --- graph="knn" (large-n mode, rdx.method.knn_fit) -----------------------------
        if self.executor is not None:
            from .knn_dask import check_executor

            if self.graph == "dense":
                raise RDXInputError("executor distributes the large-n pass of graph='knn'; "
                                    "the dense method runs in this process: use graph='knn' "
                                    "(or drop executor).")
            check_executor(self.executor)
        # ----------------------------------------------------------------------------------
        settings = self.variant_settings()
        if settings["filter_threshold"] is not None and self.merge_low_affinity:
            raise RDXInputError(
                "merge_low_affinity=True and a filter_threshold both decide which clusters "
                "join the no-change group; use one (filter_threshold=None for the paper's "
                "merge_low_affinity).")
        if self.clustering != "spectral" and self.n_explanations * self.grid_size >= n:
            raise RDXInputError(
                f"clustering={self.clustering!r} selects n_explanations × grid_size = "
                f"{self.n_explanations * self.grid_size} images but there are only {n}; "
                "use fewer explanations or a smaller grid_size.")

    def _check_precomputed_params(self) -> None:
        """What ``metric="precomputed"`` cannot do: the steps that need features."""
        why = ("needs the features themselves, and metric='precomputed' gives distances only; "
               "fit the features instead (metric='euclidean') or ")
        if self.graph == "knn" or self.executor is not None:
            raise RDXInputError("graph='knn' (and its executor) " + why + "use graph='dense' "
                                "(or 'auto'), which takes the n×n distances as they are.")
        if self.align_representations:
            raise RDXInputError("align_representations=True learns linear maps between the "
                                "features: it " + why + "drop align_representations.")
        if self.grid_strategy == "centroid":
            raise RDXInputError("grid_strategy='centroid' takes the mean of a cluster's "
                                "features: it " + why + "use another grid_strategy (the "
                                "default picks grids from the distances).")

    def variant_settings(self) -> dict[str, Any]:
        """The effective ``symmetrize_ranks``, ``filter_threshold`` and ``guidance_scale``:
        explicit values, else the ``variant``'s defaults."""
        base = VARIANTS[self.variant]
        out = {k: base[k] if getattr(self, k) == "auto" else getattr(self, k) for k in base}
        if out["filter_threshold"] is not None:
            out["filter_threshold"] = float(out["filter_threshold"])
        out["guidance_scale"] = float(out["guidance_scale"])
        return out

    def _check_guidance_inputs(self, labels: np.ndarray | None, predictions: Any,
                               n: int) -> dict[str, np.ndarray]:
        """Up-front checks of labels and given predictions; returns the given predictions."""
        keys = predictions_needed(bool(self.align_representations))
        given = {} if predictions is None else check_predictions(predictions, keys, n, labels)
        uses_preds = self.guidance in PREDICTION_GUIDANCE or bool(self.label_grids)
        what = f"guidance={self.guidance!r}" if self.guidance is not None else "label_grids=True"
        if labels is None:
            if self.guidance is not None and not (self.guidance == "classifier"
                                                   and not self.label_grids
                                                   and all(k in given for k in keys)):
                raise RDXInputError(f"{what} needs labels (one class label per image).")
            if self.label_grids:
                raise RDXInputError("label_grids=True needs labels (one class label per image).")
            return given
        if uses_preds and not all(k in given for k in keys):
            check_probe_labels(labels, what)
        if self.guidance is not None and len(np.unique(labels)) < 2:
            raise RDXInputError(f"{what} needs at least 2 classes in the labels (a single class "
                                "puts every pair in one group: guidance would have no effect); "
                                "check the labels, or fit without guidance.")
        if self.guidance in ("tpnfpn", "true_pos"):
            positive_class(labels, self.guidance_positive)
        if self.guidance == "tpnfpn" and len(np.unique(labels)) != 2:
            raise RDXInputError(f"guidance='tpnfpn' needs binary labels; these have "
                                f"{len(np.unique(labels))} classes (use 'tpfp' for more).")
        return given

    def estimate_memory(self, n: int, d: int = 0) -> int:
        """Peak bytes of a fit on n images of total width d (both models): two n×n float32
        buffers (+ 3 with keep_graphs, + 3 more in aligned mode), the centred features (twice
        in aligned mode) and a fixed workspace."""
        aligned = bool(self.align_representations)
        mats = 2 + ((6 if aligned else 3) if self.keep_graphs else 0)
        return int(mats * 4 * n * n + (24 if aligned else 12) * n * d + _WORKSPACE_BYTES)

    def choose_graph(self, n: int, d: int, device: str | None = None) -> tuple[str, str]:
        """The graph a fit on n images of total width d (both models) uses, and why
        (``device``: a device name; default: this estimator's). ``graph`` as given, or for ``"auto"`` the dense
        method when :meth:`estimate_memory` fits in 90 % of the available memory (there it
        is exact and faster than the large-n mode, whose landmark sketch alone costs about
        as much as a dense fit at n ≈ 2 000), the large-n mode otherwise."""
        if self.graph != "auto":
            return str(self.graph), "given"
        if self.metric == "precomputed":
            return "dense", ("auto: metric='precomputed' gives n×n distance matrices, which "
                             "the dense method takes as they are")
        device = resolve_device_name(self.device if device is None else device)
        # (the reason is part of the results: it names the need, not the free memory of the
        # moment, so that two identical fits write identical documents)
        need, avail = self.estimate_memory(n, d), available_memory_bytes(device)
        kind = device.split(":")[0].upper()
        if need <= 0.9 * avail:
            return "dense", (f"auto: the dense method's {format_bytes(need)} fit in the "
                             f"available {kind} memory")
        return "knn", (f"auto: the dense method's {format_bytes(need)} would not fit in the "
                       f"available {kind} memory")

    def _check_memory(self, n: int, d: int, device: str) -> None:
        need = self.estimate_memory(n, d)
        avail = available_memory_bytes(device)
        if need <= 0.9 * avail:
            return
        mats = 2 + ((6 if self.align_representations else 3) if self.keep_graphs else 0)
        kind = device.split(":")[0]
        env = memory_limit_from_env() if kind == "cpu" else None
        limit = (f" (capped by RDX_MEMORY_LIMIT_GB={os.environ['RDX_MEMORY_LIMIT_GB']})"
                 if env is not None and env <= avail else "")
        raise RDXInputError(
            f"n={n} images needs about {format_bytes(need)} of {kind.upper()} memory "
            f"({mats} dense n×n matrices of {format_bytes(4 * n * n)} each, plus "
            f"{format_bytes(need - mats * 4 * n * n)} of features and workspace), but only "
            f"{format_bytes(avail)} is available{limit}. Use the large-n mode graph='knn' "
            f"(rdx explain --graph knn: memory grows with n·n_neighbors, nothing n×n), "
            "subsample the images (memory grows "
            "with n²), or use a machine or GPU with more memory (device='cuda')"
            + (", or drop keep_graphs/--save-graphs" if self.keep_graphs else "") + ".")

    # ------------------------------------------------------------------ fit
    def fit(self, A: Any, B: Any, labels: Any = None, *,
            alignment: tuple[np.ndarray, np.ndarray, dict] | None = None,
            similarity_a: Array | np.ndarray | None = None,
            predictions: dict[str, Any] | None = None, check_rows: bool = True) -> "RDX":
        """Compute the difference explanations of representations A and B.

        Parameters
        ----------
        alignment : (A_mapped, B_mapped, info), optional
            With ``align_representations``: maps already learned by
            :func:`rdx.method.alignment.align_pair` (the runner learns them once per
            comparison and shares them between methods); learned here when None.
        similarity_a : (n_images, n_images) tensor or array, optional
            A's similarity matrix exactly as :meth:`similarity_of` returns it for this ``A``
            and these parameters, to reuse when one model is compared with many others
            (e.g. the final model with every training checkpoint). It is copied, never
            modified; the results are the same as without it.
        A, B : array-like of shape (n_images, d_A), (n_images, d_B)
            Features of the same images, rows aligned.
        labels : array-like of shape (n_images,), optional
            Class labels; needed for ``guidance`` and ``label_grids``.
        predictions : dict, optional
            Predicted class per image of ``"a"``, ``"b"`` (and, aligned, ``"a_mapped"``,
            ``"b_mapped"``) for prediction-based guidance and ``label_grids`` (the runner
            shares one set of out-of-fold probe predictions between methods); missing ones
            are computed with :func:`rdx.method.guidance.probe_predictions`.
        check_rows : bool, default=True
            Refuse A and B whose rows do not look like the same images in the same order
            (:func:`rdx.method.row_check.check_rows_aligned`: B shuffled or shifted by a
            few rows against A, seen from the nearest neighbours the two share; independent
            noise arrays pass). False compares them anyway. The check samples 64 anchor
            images (256 before it calls a pair unrelated): a small fraction of the fit.

        Returns
        -------
        self

        Raises
        ------
        RDXInputError
            Bad inputs or parameters, and with ``check_rows`` rows that do not match.
        """
        seed = V.check_int(self.random_state, "random_state", minimum=0, maximum=2**32 - 1,
                           hint=" RDX is always seeded so that runs are reproducible.")
        # torch/numpy/random are seeded inside and the caller's generators restored after
        with seeded(int(seed)):
            return self._fit(A, B, labels, alignment=alignment, similarity_a=similarity_a,
                             predictions=predictions, check_rows=check_rows)

    def _fit(self, A: Any, B: Any, labels: Any, *, alignment: Any, similarity_a: Any,
             predictions: Any, check_rows: bool = True) -> "RDX":
        V.check_choice(self.metric, "metric", METRICS)
        precomputed = self.metric == "precomputed"
        if precomputed:
            A, B = V.check_distance_pair(A, B, hint="(metric='precomputed': A and B are n×n "
                                                    "distance matrices.)")
        else:
            A = V.as_representation(A, "A")
            B = V.as_representation(B, "B")
            V.check_pair(A, B)
        n = A.shape[0]
        self._check_params(n)
        # γ (with β) so small that every affinity rounds to 1: needs the image count
        check_affinity_contrast(
            float(self.beta), resolve_gamma(self.gamma, self.gamma_scale, n), n,
            difference=self.difference, ranks=self.similarity == "neighborhood",
            normalize=(self.difference == "standard") if self.normalize_diff is None
            else bool(self.normalize_diff))
        if not precomputed:   # (a distance matrix of zeros only is refused by its check)
            V.check_not_constant(A, "A")
            V.check_not_constant(B, "B")
        if labels is not None:
            labels = V.check_labels(labels, n)
        given_predictions = self._check_guidance_inputs(labels, predictions, n)
        if precomputed and (self.guidance in PREDICTION_GUIDANCE or self.label_grids) and \
                not all(k in given_predictions for k in predictions_needed(False)):
            what = f"guidance={self.guidance!r}" if self.guidance in PREDICTION_GUIDANCE \
                else "label_grids=True"
            raise RDXInputError(f"{what} trains probes on the features, and "
                                "metric='precomputed' gives distances only: pass the two "
                                "models' predictions (predictions={'a': ..., 'b': ...}), use "
                                "guidance='ground_truth', or fit the features.")
        settings = self.variant_settings()
        # a name: on the CPU the dense path computes with numpy and never imports torch
        device = resolve_device_name(self.device)
        # --- graph="knn": the large-n mode, nothing n×n (rdx.method.knn_fit) ------------
        self.graph_, self.graph_why_ = self.choose_graph(n, A.shape[1] + B.shape[1], device)
        if self.graph_ == "knn":
            if self.graph != "knn":      # chosen here: its parameters were not checked yet
                try:
                    check_knn_params(self.get_params(), n)
                except RDXInputError as exc:
                    raise RDXInputError(f"graph='auto' chose the large-n mode "
                                        f"({self.graph_why_[6:]}), and there: {exc}") from None
            return self._fit_knn(A, B, resolve_device(device), alignment, similarity_a,
                                 check_rows=check_rows)
        # ----------------------------------------------------------------------------------
        self._check_memory(n, 0 if precomputed else A.shape[1] + B.shape[1], device)
        if check_rows and not precomputed:   # (the check reads features' neighbours)
            self._check_rows(A, B)
        self._seed()

        timings: dict[str, float] = {}
        # steps: 2 ranks, 1 difference, 2 directions; aligned: alignment + 2 × (2 ranks,
        # difference, direction)
        from tqdm.auto import tqdm   # here: tqdm.auto loads asyncio (~20 ms)

        from ..progress import keep_alive

        bar = tqdm(total=9 if self.align_representations else 5, desc="RDX",
                   disable=not self.verbose, leave=False)
        with keep_alive(bar):   # single steps take seconds at n ≈ 10k: keep the clock moving
            try:
                return self._fit_dense_steps(A, B, labels, given_predictions, settings,
                                             device, alignment, similarity_a, bar, timings)
            finally:
                bar.close()

    def _fit_dense_steps(self, A: np.ndarray, B: np.ndarray, labels: np.ndarray | None,
                         given_predictions: dict[str, np.ndarray], settings: dict[str, Any],
                         device: Any, alignment: Any, similarity_a: Any, bar: Any,
                         timings: dict[str, float]) -> "RDX":
        """The steps of the dense :meth:`fit` after the checks, advancing ``bar`` (its
        postfix names the step running now)."""
        n = A.shape[0]
        k = int(self.n_explanations)
        beta = float(self.beta)
        gamma = resolve_gamma(self.gamma, self.gamma_scale, n)
        normalize = (self.difference == "standard") if self.normalize_diff is None \
            else bool(self.normalize_diff)

        def doing(what: str) -> None:
            bar.set_postfix_str(what)

        def tick(name: str, t0: float) -> float:
            timings[name] = time.perf_counter() - t0
            bar.update(1)
            return time.perf_counter()

        t = time.perf_counter()
        aligned = bool(self.align_representations)
        info = None  # the alignment's JSON record (curves, best steps)
        feats = {"a": A, "b": B}
        if aligned and alignment is not None:
            A_m = V.as_representation(alignment[0], "alignment A_mapped")
            B_m = V.as_representation(alignment[1], "alignment B_mapped")
            if A_m.shape != A.shape or B_m.shape != B.shape:
                raise RDXInputError(f"precomputed alignment has shapes {A_m.shape}, {B_m.shape}; "
                                    f"expected those of A {A.shape} and B {B.shape}.")
            feats["a_mapped"], feats["b_mapped"], info = A_m, B_m, alignment[2]
        elif aligned:
            kw = dict(self.align_params or {})
            kw.setdefault("seed", int(self.random_state))
            kw.setdefault("device", str(device))
            from .alignment import align_pair

            doing("alignment")
            feats["a_mapped"], feats["b_mapped"], info = align_pair(A, B, **kw)
            self._seed()  # clustering sees the same RNG state as without alignment
            t = tick("alignment", t)
        preds = None
        if self.guidance in PREDICTION_GUIDANCE or self.label_grids:
            need = predictions_needed(aligned)
            doing("probes for the guidance (" + ", ".join(
                k for k in need if k not in given_predictions) + ")")
            preds = representation_predictions({k: feats[k] for k in need
                                                if k not in given_predictions}, labels,
                                               have=given_predictions) \
                if any(k not in given_predictions for k in need) else given_predictions
        groups = None
        guidance_info: dict[str, Any] | None = None
        if self.guidance is not None:
            positive = positive_class(labels, self.guidance_positive) \
                if self.guidance in ("tpnfpn", "true_pos") else None
            # each representation has its own groups: in aligned mode a mapped model is
            # grouped by the predictions of a probe trained on the mapped features
            groups = {m: group_labels(self.guidance, labels,
                                      None if preds is None else preds[m], positive=positive)
                      for m in feats}
            guidance_info = {"mode": self.guidance, "scale": settings["guidance_scale"],
                             "null_value": {}}
            if positive is not None:
                guidance_info["positive"] = positive.item() if hasattr(positive, "item") \
                    else positive
        if preds is not None:
            src = {k: "given" if k in given_predictions else "probe" for k in preds}
            guidance_info = guidance_info or {}
            guidance_info["predictions"] = src
            if labels is not None:
                guidance_info["prediction_accuracy"] = {
                    k: float(np.mean(p == labels)) for k, p in preds.items()}
        graphs: dict[str, np.ndarray] = {}
        X: dict[str, Array] = {}
        for m, data in feats.items():
            # precomputed: the given distances stand in for the features at every step
            X[m] = PrecomputedDistances(data, str(device)) if self.metric == "precomputed" \
                else centered_on(data, device)

        nearest: dict[str, np.ndarray] = {}

        def rank(m: str) -> Array:
            if m == "a" and similarity_a is not None:
                return self._precomputed_similarity(similarity_a, n, device)
            keep = None
            if m in ("a", "b") and self.similarity == "neighborhood" and n > 1:
                # the sort gives each image's nearest neighbours for free
                keep = nearest[m] = np.empty((n, min(NEAREST_KEPT, n - 1)), dtype=np.int64)
            return similarity_matrix(X[m], self.similarity,
                                     sigma_neighbor=int(self.sigma_neighbor), nearest=keep)

        def guide_and_symmetrize(Ra: Array, Rb: Array, first: str,
                                 second: str, direction: str) -> None:
            # guidance before symmetrisation, with one ν for both matrices: pairs split in
            # both models then hold ν in both, exactly (difference 0, affinity 1)
            if groups is not None:
                nu = guidance_null_value(settings["guidance_scale"], Ra, Rb)
                apply_guidance_(Ra, groups[first], nu)
                apply_guidance_(Rb, groups[second], nu)
                guidance_info["null_value"][direction] = nu
            if settings["symmetrize_ranks"] is not None:
                symmetrize_(Ra, settings["symmetrize_ranks"])
                symmetrize_(Rb, settings["symmetrize_ranks"])
            if self.keep_graphs:
                graphs[f"rank_{first}"] = AR.host(Ra).copy()
                graphs[f"rank_{second}"] = AR.host(Rb).copy()

        def difference(Ra: Array, Rb: Array, key: str) -> Array:
            sym = bool(self.symmetrize_difference)
            diff = difference_matrix_(Ra, Rb, self.difference, gamma=gamma,
                                      normalize=normalize and not sym)
            if sym:  # before normalising, so that a normalised difference still spans ±1
                symmetrize_(diff, "mean")
                m = abs_max(diff) if normalize else 0.0
                if m > 0:
                    diff /= m
            peak = beta * abs_max(diff)
            if peak > _MAX_EXPONENT:
                raise RDXInputError(overflow_message(peak, beta, self.difference, normalize))
            if self.keep_graphs:
                graphs[key] = AR.host(diff).copy()
            return diff

        # Every diff is in the a_over_b convention f(R_first, R_second); direction a_over_b
        # uses exp(−β·diff), b_over_a exp(+β·diff). Aligned mode pairs A with the mapped B for
        # a_over_b and the mapped A with B for b_over_a, so each direction has its own diff.
        pairs = ({"a_over_b": ("a", "b_mapped"), "b_over_a": ("a_mapped", "b")} if aligned
                 else {"a_over_b": ("a", "b"), "b_over_a": ("a", "b")})
        self.directions_ = {}
        diff = work = None
        for direction in DIRECTIONS:
            first, second = pairs[direction]
            if diff is None or aligned:
                del diff, work  # at most two n×n buffers alive
                doing(f"similarity of {first.upper()}")
                Ra = rank(first)
                t = tick(f"representation {first.upper()}", t)
                doing(f"similarity of {second.upper()}")
                work = rank(second)  # reused for the symmetrised affinities
                guide_and_symmetrize(Ra, work, first, second,
                                     direction if aligned else "both")
                t = tick(f"representation {second.upper()}", t)
                doing("difference")
                key = "diff_a_over_b" if direction == "a_over_b" else "diff_b_over_a_graph"
                diff = difference(Ra, work, key)
                del Ra
                t = tick(f"difference {direction}" if aligned else "difference", t)
            tight = X["a"] if direction == "a_over_b" else X["b"]  # grids: original features
            doing(f"{self.clustering} clustering {direction}")
            self.directions_[direction] = self._cluster_direction(
                diff, work, tight, direction, k, beta, settings["filter_threshold"])
            if self.label_grids:
                self._label_grids(self.directions_[direction], labels, preds,
                                  pairs[direction] if direction == "a_over_b"
                                  else pairs[direction][::-1])
            t = tick(direction, t)

        self.gamma_ = gamma
        self.normalize_diff_ = normalize
        self.n_images_ = n
        self.timings_ = timings
        self.graphs_ = graphs or None
        self.nearest_ = nearest
        self.alignment_ = info
        self.guidance_ = guidance_info
        self.variant_settings_ = settings
        self.device_ = str(device)
        self._A, self._B = A, B
        return self

    # --- graph="knn" (large-n mode) -----------------------------------------------------
    @staticmethod
    def _check_rows(A: np.ndarray, B: np.ndarray) -> None:
        """The rows' check of :meth:`fit` (``check_rows``), after the memory checks: it
        reads A and B once more. Its own generator: the fit's seeded draws are untouched."""
        from .row_check import check_rows_aligned

        check_rows_aligned(A, B, hint="Pass check_rows=False to fit() to compare them "
                                      "anyway.")

    def _fit_knn(self, A: np.ndarray, B: np.ndarray, device: "torch.device",
                 alignment: tuple[np.ndarray, np.ndarray, dict] | None,
                 similarity_a: Any, *, check_rows: bool = True) -> "RDX":
        """:meth:`fit` with ``graph="knn"``: :func:`rdx.method.knn_fit.fit_knn` fills the
        same fitted attributes as the dense path (``graphs_`` is None: nothing n×n)."""
        if similarity_a is not None:
            raise RDXInputError("similarity_a is a dense n×n matrix, which graph='knn' never "
                                "uses; drop it or use graph='dense'.")
        from .knn_fit import check_knn_memory, fit_knn

        n = A.shape[0]
        params = self.get_params()
        check_knn_memory(n, A.shape[1] + B.shape[1], resolve_n_neighbors(params, n), device,
                         int(self.n_landmarks),
                         search=resolve_knn_search(params, n, str(device))[0],
                         executor=self.executor is not None)
        if check_rows:
            self._check_rows(A, B)
        self._seed()
        feats = {"a": A, "b": B}
        info = None
        t0 = time.perf_counter()
        if self.align_representations:
            if alignment is not None:
                A_m = V.as_representation(alignment[0], "alignment A_mapped")
                B_m = V.as_representation(alignment[1], "alignment B_mapped")
                if A_m.shape != A.shape or B_m.shape != B.shape:
                    raise RDXInputError(f"precomputed alignment has shapes {A_m.shape}, "
                                        f"{B_m.shape}; expected those of A {A.shape} and B "
                                        f"{B.shape}.")
                feats["a_mapped"], feats["b_mapped"], info = A_m, B_m, alignment[2]
            else:
                kw = dict(self.align_params or {})
                kw.setdefault("seed", int(self.random_state))
                kw.setdefault("device", str(device))
                from .alignment import align_pair

                feats["a_mapped"], feats["b_mapped"], info = align_pair(A, B, **kw)
                self._seed()
        t_align = time.perf_counter() - t0
        fitted = fit_knn(self.get_params(), feats, device=device)
        if self.align_representations and alignment is None:
            fitted["timings_"] = {"alignment": t_align, **fitted["timings_"]}
        for name, value in fitted.items():
            setattr(self, name, value)
        self.graphs_ = None
        self.nearest_ = {}
        self.alignment_ = info
        self.guidance_ = None
        self.variant_settings_ = self.variant_settings()
        self.device_ = str(device)
        self._A, self._B = A, B
        return self
    # ----------------------------------------------------------------------------------

    def similarity_of(self, X: Any) -> Array:
        """The similarity matrix :meth:`fit` computes for a representation (before guidance
        and symmetrisation), on the fit device: pass it as ``fit(A, B, similarity_a=...)`` to
        compare one ``A`` with many ``B`` without recomputing it. Uses ``similarity``, ``sigma_neighbor`` and
        ``device``; recompute it when they change."""
        V.check_choice(self.metric, "metric", METRICS)
        precomputed = self.metric == "precomputed"
        X = V.check_distance_matrix(X, "X") if precomputed else V.as_representation(X, "X")
        V.check_choice(self.similarity, "similarity", SIMILARITY_FUNCTIONS)
        V.check_int(self.sigma_neighbor, "sigma_neighbor", minimum=1,
                    maximum=X.shape[0] - 1 if self.similarity == "zp_local_scaling" else None)
        device = resolve_device_name(self.device)
        if precomputed:
            return similarity_matrix(PrecomputedDistances(X, device), self.similarity,
                                     sigma_neighbor=int(self.sigma_neighbor))
        V.check_not_constant(X, "X")
        return similarity_matrix(centered_on(X, device), self.similarity,
                                 sigma_neighbor=int(self.sigma_neighbor))

    @staticmethod
    def _precomputed_similarity(R: Any, n: int, device: str) -> Array:
        """A private float32 copy of a precomputed similarity matrix, checked, on ``device``
        (numpy on the CPU)."""
        if not (isinstance(R, np.ndarray) or AR.is_tensor(R)) or tuple(R.shape) != (n, n):
            shape = tuple(R.shape) if hasattr(R, "shape") else type(R).__name__
            raise RDXInputError(f"similarity_a must be the {n}×{n} matrix that "
                                f"similarity_of(A) returns for these {n} images, got {shape}.")
        if device == "cpu":
            R = np.array(AR.host(R), dtype=np.float32)
        else:
            import torch

            R = torch.as_tensor(R).to(device=device, dtype=torch.float32, copy=True)
        if not bool(np.isfinite(AR.host(R)).all()):
            raise RDXInputError("similarity_a holds NaN or infinite values.")
        return R

    def _seed(self, offset: int = 0) -> None:
        seed_everything(int(self.random_state) + offset)

    def _cluster_direction(self, diff: Array, work: Array, tight: Array,
                           direction: str, k: int, beta: float,
                           filter_threshold: float | None = None) -> DirectionResult:
        self._seed()  # each direction starts from the same RNG state: order does not matter
        S = symmetrized_affinity(diff, beta, direction, out=work)
        if self.clustering == "spectral":
            raw = spectral_clustering(S, k + 1, random_state=int(self.random_state),
                                      n_init=int(self.n_init), eigen_solver=self.eigen_solver)
        else:
            cent = pagerank(S) if self.clustering == "pagerank" else \
                eigenvector_centrality(S, random_state=int(self.random_state))
            raw = greedy_centrality_clusters(S, diff, centrality=cent, n_clusters=k,
                                             cluster_size=int(self.grid_size), beta=beta,
                                             direction=direction)
        sums = block_sums(S, raw, k + 1)
        sizes = np.bincount(raw, minlength=k + 1)
        means = np.diag(sums) / np.maximum(sizes, 1) ** 2
        if self.clustering == "spectral":
            # label 0 (no-change group) = lowest mean affinity; the rest ascending
            order = np.lexsort((np.arange(k + 1), means))
        else:
            # label 0 is the unselected rest; order the selected clusters (skip empty ones)
            sel = np.flatnonzero(sizes[1:] > 0) + 1
            order = np.concatenate([[0], sel[np.lexsort((sel, means[sel]))]])
        low = means < float(self.null_threshold)
        if filter_threshold is not None:
            return self._filtered_direction(raw, means, sums, sizes, low, order, diff, tight,
                                            direction, beta, filter_threshold)
        explained = [c for c in order[1:] if not (self.merge_low_affinity and low[c])]
        null_group = [c for c in order if c not in explained]
        labels, explanations = explanations_of(raw, explained, means, low,
                                               self._grid_chooser(tight, diff, beta, direction))
        return DirectionResult(explanations=explanations,
                               null_members=np.flatnonzero(labels == 0).tolist(),
                               null_mean_affinity=union_mean(sums, sizes, null_group),
                               labels=labels)

    def _grid_chooser(self, tight: Array, diff: Array, beta: float,
                      direction: str):
        """``members → grid`` with this fit's strategy; one seeded generator per direction."""
        rng = np.random.default_rng(int(self.random_state))
        return lambda members: select_grid(members, tight, diff, beta=beta,
                                           direction=direction, size=int(self.grid_size),
                                           strategy=self.grid_strategy, rng=rng)

    def _filtered_direction(self, raw: np.ndarray, means: np.ndarray, sums: np.ndarray,
                            sizes: np.ndarray, low: np.ndarray, order: np.ndarray,
                            diff: Array, tight: Array, direction: str,
                            beta: float, threshold: float) -> DirectionResult:
        """RDX v2's post-processing: clusters with mean affinity < ``threshold`` join the
        no-change group; the others are explanations, weakest first (labels 1, 2, ...).

        Spectral clustering: every cluster is a candidate (0 to k + 1 explanations). Greedy
        selectors: the selected clusters are (label 0 there is the unselected rest).
        ``cluster_rank`` is a cluster's 1-based position by ascending mean among the
        candidates (the original's label); filtered clusters are listed with their members
        and the reason in ``extra["filter"]`` (no grid: a filtered cluster can hold most of
        the images, and its grid would cost more than the whole clustering).
        """
        candidates = order if self.clustering == "spectral" else order[1:]
        rank_label = cluster_rank_labels(means[candidates], threshold)
        kept = [c for c, r in zip(candidates, rank_label) if r > 0]
        cluster_rank = {c: i + 1 for i, c in enumerate(candidates)}
        null_group = [c for c in order if c not in kept]
        labels, explanations = explanations_of(
            raw, kept, means, low, self._grid_chooser(tight, diff, beta, direction),
            extra_of=lambda c: {"cluster_rank": cluster_rank[c], "passed_filter": True})
        filtered = [{"cluster_rank": cluster_rank[c], "mean_affinity": float(means[c]),
                     "size": int(sizes[c]), "passed_filter": False,
                     "reason": f"mean affinity {means[c]:.4g} < filter_threshold {threshold:g}",
                     "members": np.flatnonzero(raw == c).tolist()}
                    for c in candidates if c not in kept and sizes[c] > 0]
        record = {"threshold": threshold, "n_candidates": int(np.sum(sizes[candidates] > 0)),
                  "n_kept": len(kept), "n_filtered": len(filtered), "filtered": filtered}
        null_mean = union_mean(sums, sizes, null_group) if sizes[null_group].sum() else None
        return DirectionResult(explanations=explanations,
                               null_members=np.flatnonzero(labels == 0).tolist(),
                               null_mean_affinity=null_mean, labels=labels,
                               extra={"filter": record})

    @staticmethod
    def _label_grids(result: DirectionResult, labels: np.ndarray,
                     preds: dict[str, np.ndarray], reps: tuple[str, str]) -> None:
        """True label and the two compared representations' predictions of every grid image
        (the direction's own model first), in ``extra["grid_labels"]``."""
        def record(images: list[int]) -> dict[str, Any]:
            idx = np.asarray(images, dtype=np.int64)
            return {"true": labels[idx].tolist(),
                    "predicted": {r: preds[r][idx].tolist() for r in reps}}

        for e in result.explanations:
            e.extra["grid_labels"] = record(e.images)

    # ------------------------------------------------------------------ results
    def _check_fitted(self) -> None:
        if not hasattr(self, "directions_"):
            raise NotFittedError("this RDX instance is not fitted yet; call fit(A, B) first.")

    def _repr_html_(self) -> str:
        """Jupyter's view: the fit's explanations, or the parameters set when not fitted."""
        from ..results.notebook import estimator_html
        return estimator_html(self)

    def result(self) -> MethodResult:
        """The fit as a :class:`~rdx.results.types.MethodResult` (unscored: score it with
        :func:`rdx.evaluation.scoring.score` on the original representations)."""
        self._check_fitted()
        params = self.get_params()
        if params["executor"] is not None:   # a Dask client is recorded by its address
            from .knn_dask import describe_executor

            params["executor"] = describe_executor(params["executor"])
        params.update(gamma_resolved=self.gamma_, normalize_diff_resolved=self.normalize_diff_,
                      device_used=self.device_)
        settings = getattr(self, "variant_settings_", None) or self.variant_settings()
        params.update({f"{k}_resolved": v for k, v in settings.items()})
        info = {"alignment": self.alignment_} if getattr(self, "alignment_", None) else {}
        graph = getattr(self, "graph_", self.graph)
        params["graph_resolved"] = graph
        if self.graph == "auto":
            info["graph"] = {"used": graph, "why": self.graph_why_}
        if graph == "knn" and getattr(self, "graph_info_", None):  # K, pairs, |diff| bound
            info["knn_graph"] = self.graph_info_
        if getattr(self, "guidance_", None):
            info["guidance"] = self.guidance_
        return MethodResult(method="rdx", params=params, n_images=self.n_images_,
                            directions=dict(self.directions_), info=info,
                            timings=dict(self.timings_), versions=versions(),
                            graphs=self.graph_arrays() if self.graphs_ else {},
                            nearest=dict(getattr(self, "nearest_", None) or {}))

    def to_dict(self) -> dict[str, Any]:
        """The ``explanations.json`` document of the fit (schema version 2, no scores: this
        never recomputes anything)."""
        return self.result().to_json()

    def graph_arrays(self) -> dict[str, np.ndarray]:
        """The arrays of ``graphs.npz``: ranks, difference, affinities and cluster labels."""
        if not self.graphs_:
            raise RDXInputError("graphs were not kept: fit with keep_graphs=True to save them.")
        diff = self.graphs_["diff_a_over_b"]
        # aligned mode: b_over_a has its own graph (same a_over_b sign convention)
        diff_ba = self.graphs_.get("diff_b_over_a_graph", self.graphs_["diff_a_over_b"])
        extra = {k: self.graphs_[k] for k in ("rank_a_mapped", "rank_b_mapped",
                                              "diff_b_over_a_graph") if k in self.graphs_}
        return dict(rank_a=self.graphs_["rank_a"], rank_b=self.graphs_["rank_b"],
                    diff_a_over_b=self.graphs_["diff_a_over_b"],
                    affinity_a_over_b=affinity(diff, self.beta, "a_over_b"),
                    affinity_b_over_a=affinity(diff_ba, self.beta, "b_over_a"),
                    labels_a_over_b=self.directions_["a_over_b"].labels,
                    labels_b_over_a=self.directions_["b_over_a"].labels, **extra)

    def save(self, out_dir: str | Path, *, save_graphs: bool = False,
             result: MethodResult | None = None) -> Path:
        """Write ``explanations.json`` (and ``graphs.npz`` if asked) into ``out_dir``.

        ``result`` is a (scored) :meth:`result` to write instead of the unscored fit.
        """
        res = result if result is not None else self.result()
        if not save_graphs:
            res.graphs = {}
        return write_method_result(out_dir, res)
