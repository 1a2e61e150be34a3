"""The :class:`RDX` estimator: two representations in, difference explanations out."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator
from tqdm.auto import tqdm

from .. import _validation as V
from .._backend import (available_memory_bytes, format_bytes, memory_limit_from_env,
                        resolve_device, seed_everything, seeded)
from ..errors import NotFittedError, RDXInputError
from ..io import versions
from ..results.store import write_method_result
from ..results.types import DIRECTIONS, DirectionResult, Explanation, MethodResult
from .alignment import align_pair
from .clustering import (CLUSTERING_METHODS, block_sums, eigenvector_centrality,
                         greedy_centrality_clusters, pagerank, union_mean)
from .geometry import abs_max, to_device_centered
from .graphs import (DIFFERENCE_FUNCTIONS, SIMILARITY_FUNCTIONS, affinity,
                     apply_guidance_, difference_matrix_, resolve_gamma, similarity_matrix,
                     symmetrized_affinity)
from .grids import GRID_STRATEGIES, select_grid
from .guidance import GUIDANCE, guidance_groups
from .spectral import EIGEN_SOLVERS, spectral_clustering

#: exp() of float32 overflows above ~88; refuse affinities that would get close.
_MAX_EXPONENT = 80.0
#: Workspace beyond the n×n matrices: sort keys of the row blocks (one 32 MiB block per
#: thread, plus numpy's sort buffer), gathers and k-means.
_WORKSPACE_BYTES = 192 * 2**20


class RDX(BaseEstimator):
    """Representational Difference Explanations.

    Finds groups of images that are close in one representation and far apart in the other,
    in both directions: ``a_over_b`` (close in A, far in B) and ``b_over_a``.

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
        Explanations whose mean affinity is below it are flagged ``low_affinity``.
    merge_low_affinity : bool, default=False
        Move flagged explanations into the no-change group (fewer than k may remain).
    grid_size : int, default=9
    grid_strategy : {"maximize_total_neighborhood_affinity", "centroid", "max_affinity", "random"}
    guidance : {None, "ground_truth", "classifier"}
        Use labels (or linear-probe predictions) to neutralise cross-class pairs (spec §1.6).
    random_state : int, default=42
        Seeds numpy, torch and Python's RNG before fitting and every random step.
    device : {"auto", "cpu", "cuda"}
    keep_graphs : bool, default=False
        Keep the n×n rank and difference matrices (``graphs_``) for saving/plots.
    align_representations : bool, default=False
        Aligned mode (spec §1.9): learn CKA-maximising linear maps A→B and B→A
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

    Attributes
    ----------
    directions_ : dict[str, DirectionResult]
    gamma_ : float
    n_images_ : int
    timings_ : dict[str, float]
    graphs_ : dict[str, np.ndarray] or None
    alignment_ : dict or None
        Aligned mode only: train/test CKA curves and best steps of both maps.
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
                 keep_graphs: bool = False, verbose: int = 0,
                 align_representations: bool = False, align_params: dict | None = None):
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
        self.keep_graphs = keep_graphs
        self.verbose = verbose
        self.align_representations = align_representations
        self.align_params = align_params

    # ------------------------------------------------------------------ validation
    def _check_params(self, n: int) -> None:
        V.check_choice(self.similarity, "similarity", SIMILARITY_FUNCTIONS)
        V.check_choice(self.difference, "difference", DIFFERENCE_FUNCTIONS)
        V.check_choice(self.clustering, "clustering", CLUSTERING_METHODS)
        V.check_choice(self.eigen_solver, "eigen_solver", EIGEN_SOLVERS)
        V.check_choice(self.grid_strategy, "grid_strategy", GRID_STRATEGIES)
        V.check_choice(self.guidance, "guidance", GUIDANCE)
        V.check_n_explanations(self.n_explanations, n)
        V.check_positive(self.beta, "beta")
        V.check_positive(self.gamma, "gamma", allow_none=True)
        if self.gamma is None:
            V.check_positive(self.gamma_scale, "gamma_scale")
        V.check_int(self.grid_size, "grid_size", minimum=1)
        V.check_int(self.n_init, "n_init", minimum=1)
        V.check_int(self.sigma_neighbor, "sigma_neighbor", minimum=1,
                    maximum=n - 1 if self.similarity == "zp_local_scaling" else None)
        V.check_int(self.random_state, "random_state", minimum=0, maximum=2**32 - 1,
                    hint=" RDX is always seeded so that runs are reproducible.")
        V.check_number(self.null_threshold, "null_threshold")
        if self.align_params is not None and not isinstance(self.align_params, dict):
            raise RDXInputError(f"align_params must be None or a dict, got {self.align_params!r}.")
        for flag in ("merge_low_affinity", "keep_graphs", "align_representations"):
            if not isinstance(getattr(self, flag), (bool, np.bool_)):
                raise RDXInputError(f"{flag} must be True or False, got {getattr(self, flag)!r}.")
        if self.normalize_diff is not None and not isinstance(self.normalize_diff, (bool, np.bool_)):
            raise RDXInputError(f"normalize_diff must be None, True or False, got "
                                f"{self.normalize_diff!r}.")
        if self.clustering != "spectral" and self.n_explanations * self.grid_size >= n:
            raise RDXInputError(
                f"clustering={self.clustering!r} selects n_explanations × grid_size = "
                f"{self.n_explanations * self.grid_size} images but there are only {n}; "
                "use fewer explanations or a smaller grid_size.")

    def estimate_memory(self, n: int, d: int = 0) -> int:
        """Peak bytes of a fit on n images of total width d (both models): two n×n float32
        buffers (+ 3 with keep_graphs, + 3 more in aligned mode), the centred features (twice
        in aligned mode) and a fixed workspace."""
        aligned = bool(self.align_representations)
        mats = 2 + ((6 if aligned else 3) if self.keep_graphs else 0)
        return int(mats * 4 * n * n + (24 if aligned else 12) * n * d + _WORKSPACE_BYTES)

    def _check_memory(self, n: int, d: int, device: torch.device) -> None:
        need = self.estimate_memory(n, d)
        avail = available_memory_bytes(device)
        if need <= 0.9 * avail:
            return
        mats = 2 + ((6 if self.align_representations else 3) if self.keep_graphs else 0)
        env = memory_limit_from_env() if device.type == "cpu" else None
        limit = (f" (capped by RDX_MEMORY_LIMIT_GB={os.environ['RDX_MEMORY_LIMIT_GB']})"
                 if env is not None and env <= avail else "")
        raise RDXInputError(
            f"n={n} images needs about {format_bytes(need)} of {device.type.upper()} memory "
            f"({mats} dense n×n matrices of {format_bytes(4 * n * n)} each, plus "
            f"{format_bytes(need - mats * 4 * n * n)} of features and workspace), but only "
            f"{format_bytes(avail)} is available{limit}. Subsample the images (memory grows "
            "with n²), use a machine or GPU with more memory (device='cuda')"
            + (", or drop keep_graphs/--save-graphs" if self.keep_graphs else "") + ".")

    # ------------------------------------------------------------------ fit
    def fit(self, A: Any, B: Any, labels: Any = None, *,
            alignment: tuple[np.ndarray, np.ndarray, dict] | None = None,
            similarity_a: torch.Tensor | np.ndarray | None = None) -> "RDX":
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
            Class labels; needed for ``guidance``.

        Returns
        -------
        self
        """
        A = V.as_representation(A, "A")
        B = V.as_representation(B, "B")
        V.check_pair(A, B)
        n = A.shape[0]
        self._check_params(n)
        V.check_not_constant(A, "A")
        V.check_not_constant(B, "B")
        if labels is not None:
            labels = V.check_labels(labels, n)
        device = resolve_device(self.device)
        self._check_memory(n, A.shape[1] + B.shape[1], device)
        self._seed()

        k = int(self.n_explanations)
        beta = float(self.beta)
        gamma = resolve_gamma(self.gamma, self.gamma_scale, n)
        normalize = (self.difference == "standard") if self.normalize_diff is None \
            else bool(self.normalize_diff)
        timings: dict[str, float] = {}
        # steps: 2 ranks, 1 difference, 2 directions; aligned: alignment + 2 × (2 ranks,
        # difference, direction)
        bar = tqdm(total=9 if self.align_representations else 5, desc="RDX",
                   disable=not self.verbose, leave=False)

        def tick(name: str, t0: float) -> float:
            timings[name] = time.perf_counter() - t0
            bar.set_postfix_str(name)
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
            feats["a_mapped"], feats["b_mapped"], info = align_pair(A, B, **kw)
            self._seed()  # clustering sees the same RNG state as without alignment
            t = tick("alignment", t)
        groups = guidance_groups(self.guidance, labels, A, B)
        graphs: dict[str, np.ndarray] = {}
        X: dict[str, torch.Tensor] = {}
        for m, data in feats.items():
            X[m] = to_device_centered(data, device)

        def rank(m: str) -> torch.Tensor:
            if m == "a" and similarity_a is not None:
                R = self._precomputed_similarity(similarity_a, n, device)
            else:
                R = similarity_matrix(X[m], self.similarity,
                                      sigma_neighbor=int(self.sigma_neighbor))
            if groups is not None:  # a mapped model keeps its source model's groups
                apply_guidance_(R, groups[0 if m.startswith("a") else 1])
            if self.keep_graphs:
                graphs[f"rank_{m}"] = R.cpu().numpy().copy()
            return R

        def difference(Ra: torch.Tensor, Rb: torch.Tensor, key: str) -> torch.Tensor:
            diff = difference_matrix_(Ra, Rb, self.difference, gamma=gamma, normalize=normalize)
            peak = beta * abs_max(diff)
            if peak > _MAX_EXPONENT:
                raise RDXInputError(
                    f"the affinities exp(±β·diff) would reach e^{peak:.0f} and overflow float32: "
                    f"with difference={self.difference!r} and normalize_diff={normalize} the "
                    "difference is not bounded. Set normalize_diff=True or use a smaller beta.")
            if self.keep_graphs:
                graphs[key] = diff.cpu().numpy().copy()
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
                Ra = rank(first)
                t = tick(f"representation {first.upper()}", t)
                work = rank(second)  # reused for the symmetrised affinities
                t = tick(f"representation {second.upper()}", t)
                key = "diff_a_over_b" if direction == "a_over_b" else "diff_b_over_a_graph"
                diff = difference(Ra, work, key)
                del Ra
                t = tick(f"difference {direction}" if aligned else "difference", t)
            tight = X["a"] if direction == "a_over_b" else X["b"]  # grids: original features
            self.directions_[direction] = self._cluster_direction(diff, work, tight, direction,
                                                                  k, beta)
            t = tick(direction, t)
        bar.close()

        self.gamma_ = gamma
        self.normalize_diff_ = normalize
        self.n_images_ = n
        self.timings_ = timings
        self.graphs_ = graphs or None
        self.alignment_ = info
        self.device_ = str(device)
        self._A, self._B = A, B
        return self

    def similarity_of(self, X: Any) -> torch.Tensor:
        """The similarity matrix :meth:`fit` computes for a representation (before guidance),
        on the fit device: pass it as ``fit(A, B, similarity_a=...)`` to compare one ``A``
        with many ``B`` without recomputing it. Uses ``similarity``, ``sigma_neighbor`` and
        ``device``; recompute it when they change."""
        X = V.as_representation(X, "X")
        V.check_choice(self.similarity, "similarity", SIMILARITY_FUNCTIONS)
        V.check_int(self.sigma_neighbor, "sigma_neighbor", minimum=1,
                    maximum=X.shape[0] - 1 if self.similarity == "zp_local_scaling" else None)
        V.check_not_constant(X, "X")
        device = resolve_device(self.device)
        return similarity_matrix(to_device_centered(X, device), self.similarity,
                                 sigma_neighbor=int(self.sigma_neighbor))

    @staticmethod
    def _precomputed_similarity(R: Any, n: int, device: torch.device) -> torch.Tensor:
        """A private float32 copy of a precomputed similarity matrix, checked, on ``device``."""
        if not isinstance(R, (torch.Tensor, np.ndarray)) or tuple(R.shape) != (n, n):
            shape = tuple(R.shape) if hasattr(R, "shape") else type(R).__name__
            raise RDXInputError(f"similarity_a must be the {n}×{n} matrix that "
                                f"similarity_of(A) returns for these {n} images, got {shape}.")
        R = torch.as_tensor(R).to(device=device, dtype=torch.float32, copy=True)
        if not bool(torch.isfinite(R).all()):
            raise RDXInputError("similarity_a holds NaN or infinite values.")
        return R

    def _seed(self, offset: int = 0) -> None:
        seed_everything(int(self.random_state) + offset)

    def _cluster_direction(self, diff: torch.Tensor, work: torch.Tensor, tight: torch.Tensor,
                           direction: str, k: int, beta: float) -> DirectionResult:
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
        explained = [c for c in order[1:] if not (self.merge_low_affinity and low[c])]
        null_group = [c for c in order if c not in explained]
        new_label = np.zeros(k + 1, dtype=np.int64)
        new_label[explained] = np.arange(1, len(explained) + 1)
        labels = new_label[raw]
        rng = np.random.default_rng(int(self.random_state))
        explanations = []
        for j, c in enumerate(explained, start=1):
            members = np.flatnonzero(labels == j)
            grid = select_grid(members, tight, diff, beta=beta, direction=direction,
                               size=int(self.grid_size), strategy=self.grid_strategy, rng=rng)
            explanations.append(Explanation(images=[int(i) for i in grid],
                                            members=members.tolist(),
                                            mean_affinity=float(means[c]),
                                            low_affinity=bool(low[c])))
        return DirectionResult(explanations=explanations,
                               null_members=np.flatnonzero(labels == 0).tolist(),
                               null_mean_affinity=union_mean(sums, sizes, null_group),
                               labels=labels)

    # ------------------------------------------------------------------ results
    def _check_fitted(self) -> None:
        if not hasattr(self, "directions_"):
            raise NotFittedError("this RDX instance is not fitted yet; call fit(A, B) first.")

    def result(self) -> MethodResult:
        """The fit as a :class:`~rdx.results.types.MethodResult` (unscored: score it with
        :func:`rdx.evaluation.scoring.score` on the original representations)."""
        self._check_fitted()
        params = self.get_params()
        params.update(gamma_resolved=self.gamma_, normalize_diff_resolved=self.normalize_diff_,
                      device_used=self.device_)
        info = {"alignment": self.alignment_} if getattr(self, "alignment_", None) else {}
        return MethodResult(method="rdx", params=params, n_images=self.n_images_,
                            directions=dict(self.directions_), info=info,
                            timings=dict(self.timings_), versions=versions(),
                            graphs=self.graph_arrays() if self.graphs_ else {})

    def to_dict(self) -> dict[str, Any]:
        """The ``explanations.json`` document of the fit (schema version 2, no scores: this
        never recomputes anything)."""
        return self.result().to_json()

    def graph_arrays(self) -> dict[str, np.ndarray]:
        """The arrays of ``graphs.npz``: ranks, difference, affinities and cluster labels."""
        if not self.graphs_:
            raise RDXInputError("graphs were not kept: fit with keep_graphs=True to save them.")
        diff = torch.from_numpy(self.graphs_["diff_a_over_b"])
        # aligned mode: b_over_a has its own graph (same a_over_b sign convention)
        diff_ba = torch.from_numpy(self.graphs_.get("diff_b_over_a_graph",
                                                    self.graphs_["diff_a_over_b"]))
        extra = {k: self.graphs_[k] for k in ("rank_a_mapped", "rank_b_mapped",
                                              "diff_b_over_a_graph") if k in self.graphs_}
        return dict(rank_a=self.graphs_["rank_a"], rank_b=self.graphs_["rank_b"],
                    diff_a_over_b=self.graphs_["diff_a_over_b"],
                    affinity_a_over_b=affinity(diff, self.beta, "a_over_b").numpy(),
                    affinity_b_over_a=affinity(diff_ba, self.beta, "b_over_a").numpy(),
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
