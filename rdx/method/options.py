"""The parameters of :class:`rdx.RDX`, declared once.

:data:`RDX_OPTIONS` is the one table of the estimator's parameters, in the spirit of
scikit-learn's ``_parameter_constraints``: per parameter its name, default, accepted values
(Python types with a numeric :class:`Interval`, or a list of choices, plus special values
such as ``"auto"`` or None), a help text and the ``rdx explain`` flag that sets it. Every
surface reads it:

* the estimator validates its parameters with :func:`check_options` (its constructor's
  defaults are checked against the table by the tests);
* ``rdx explain`` builds its method flags from it (:func:`rdx.flags.add_option_flags`:
  type, default, choices and help);
* ``rdx run`` validates a config's ``method: rdx`` entries with a pydantic model derived
  from it (:func:`rdx.configs.options_model`).

Checks that need the data (the image count bounds ``n_explanations``, ``sigma_neighbor``
and ``n_neighbors``) or several parameters at once stay in the estimator. This module
imports only numpy and the method's light modules (no torch), so that ``--help`` stays
instant.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import validation as V
from ..errors import RDXInputError
from .clustering import CLUSTERING_METHODS
from .graphs import DIFFERENCE_FUNCTIONS, MAX_SCALE, SCALE_WHY, SIMILARITY_FUNCTIONS, \
    SYMMETRIZE_MODES
from .grids import GRID_STRATEGIES
from .guidance import GUIDANCE
from .knn_options import DEFAULT_N_LANDMARKS, GRAPHS, KNN_SEARCHES, N_NEIGHBORS_RULES
from .spectral import EIGEN_SOLVERS

#: What ``variant`` sets for the parameters left at "auto": the paper's algorithm, or RDX v2
#: (ranks symmetrised per model before the difference, clusters filtered by mean affinity,
#: guidance constant 10·(n − 1) instead of the paper's 5·(n − 1)).
VARIANTS = {"paper": {"symmetrize_ranks": None, "filter_threshold": None, "guidance_scale": 5.0},
            "v2": {"symmetrize_ranks": "mean", "filter_threshold": 1.1, "guidance_scale": 10.0}}

_CLOSED = ("both", "left", "right", "neither")
#: What the estimator's inputs are: features (Euclidean distances between their rows) or
#: precomputed n×n distance matrices (scikit-learn's ``metric="precomputed"``).
METRICS = ("euclidean", "precomputed")


@dataclass(frozen=True)
class Interval:
    """The numbers from ``low`` to ``high`` (None: unbounded; both finite either way);
    ``closed`` says which ends belong to it: "both", "left", "right" or "neither"."""

    low: float | None = None
    high: float | None = None
    closed: str = "both"

    def __post_init__(self) -> None:
        if self.closed not in _CLOSED:
            raise ValueError(f"closed must be one of {_CLOSED}, got {self.closed!r}")

    def above_low(self, v: float) -> bool:
        return self.low is None or (v >= self.low if self.closed in ("both", "left")
                                    else v > self.low)

    def below_high(self, v: float) -> bool:
        return self.high is None or (v <= self.high if self.closed in ("both", "right")
                                     else v < self.high)

    def __contains__(self, v: float) -> bool:
        return self.above_low(v) and self.below_high(v)

    def text(self, name: str) -> str:
        """The interval as a range of ``name``: ``0 < beta``, ``1 ≤ grid_size``."""
        lo = "" if self.low is None else \
            f"{self.low:g} {'≤' if self.closed in ('both', 'left') else '<'} "
        hi = "" if self.high is None else \
            f" {'≤' if self.closed in ('both', 'right') else '<'} {self.high:g}"
        return f"{lo}{name}{hi}"


@dataclass(frozen=True)
class Option:
    """One parameter of the estimator: what it accepts and how each surface spells it.

    Parameters
    ----------
    name : str
        The parameter (constructor argument, config key).
    default : Any
        Its default.
    help : str
        One line for ``--help`` and the docs (the default is added by the flag).
    types : tuple of types
        Accepted Python types: ``(bool,)``, ``(int,)`` (numpy integers too, never bool),
        ``(float,)`` (any real number, finite), ``(dict,)``, ``(int, str)``; empty: checked
        where the value is used (e.g. ``device``).
    choices : tuple, optional
        The accepted values (instead of ``types``).
    interval : Interval, optional
        Numeric range of ``types`` ``(int,)`` or ``(float,)``.
    special : tuple
        Values accepted besides ``types``/``interval`` (``"auto"``, None).
    what : str, optional
        The accepted values in words, for refusals (default: made from the above).
    why, low_why : str
        Why the upper (lower) end of ``interval``, said when a value passes it.
    hint : str
        Appended to every refusal (how to fix it).
    flag : str or None
        The ``rdx explain`` flag; None: set another way there (the command's own flags
        ``--seed``, ``--device``, ``--save-graphs``, ``--executor``) or not at all.
    aliases : tuple of str
        Earlier spellings of ``flag``, still accepted (hidden, with a notice).
    metavar : str, optional
        The flag's value in ``--help``.
    none_word : str
        How None is written on the command line (``"none"``; ``"auto"`` where None means
        "decided from the other parameters").
    config : bool
        Whether configs set it per method (False: run-level, set by the run).
    """

    name: str
    default: Any
    help: str
    types: tuple[type, ...] = ()
    choices: tuple[Any, ...] | None = None
    interval: Interval | None = None
    special: tuple[Any, ...] = ()
    what: str | None = None
    why: str = ""
    low_why: str = ""
    hint: str = ""
    flag: str | None = None
    aliases: tuple[str, ...] = ()
    metavar: str | None = None
    none_word: str = "none"
    config: bool = True

    @property
    def kind(self) -> str:
        """``choice``, ``bool``, ``int``, ``float`` or ``other`` (several types, or none)."""
        if self.choices is not None:
            return "choice"
        return {(bool,): "bool", (int,): "int", (float,): "float"}.get(self.types, "other")

    def is_special(self, value: Any) -> bool:
        """Whether ``value`` is one of :attr:`special` (by identity for None and bools, by
        equality for strings: ``1 == True`` must not make 1 special)."""
        return any(value is s or (isinstance(s, str) and isinstance(value, str) and value == s)
                   for s in self.special)

    def accepted(self) -> str:
        """The accepted values in words (what refusals say)."""
        if self.what:
            return self.what
        words = [repr(s) if isinstance(s, str) else str(s) for s in self.special]
        if self.kind == "bool":
            base = "True or False"
        elif self.kind == "int":
            low = self.interval.low if self.interval else None
            base = "a positive integer" if low == 1 else (
                f"an integer >= {low:g}" if low is not None else "an integer")
        elif self.kind == "float":
            iv = self.interval or Interval()
            base = ("a positive finite number" if iv.low == 0 and iv.closed in ("right",
                                                                                "neither")
                    else "a finite number")
        else:
            base = " or ".join(t.__name__ for t in self.types) or "a value"
        return ", ".join(words) + " or " + base if words else base

    def check(self, value: Any) -> Any:
        """``value`` if this option accepts it (whatever needs no data to tell).

        Raises
        ------
        RDXInputError
            Naming the parameter, the value, what is accepted and how to fix it.
        """
        if self.is_special(value):
            return value
        # within a command, the flag the user typed (rdx.validation.flag_names)
        name, hint = V.shown_name(self.name), self.hint
        if name != self.name:   # the hint's settings (n_neighbors='auto') as flags too
            hint = re.sub(rf"(?<![-\w]){re.escape(self.name)}='([^']*)'",
                          lambda m: V.shown_setting(self.name, m.group(1)), hint)
        if self.kind == "choice":
            try:
                return V.check_choice(value, self.name, self.choices)
            except RDXInputError as exc:
                raise RDXInputError(f"{exc}{hint}") from None
        if self.kind == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise RDXInputError(f"{name} must be {self.accepted()}, got "
                                    f"{value!r}.{hint}")
            return value
        if self.kind == "int":
            if self.what and not _is_int(value):   # the message lists the special values
                raise RDXInputError(f"{name} must be {self.what}, got "
                                    f"{value!r}.{hint}")
            iv = self.interval or Interval()
            low = None if iv.low is None else int(iv.low if iv.closed in ("both", "left")
                                                  else iv.low + 1)
            high = None if iv.high is None else int(iv.high if iv.closed in ("both", "right")
                                                    else iv.high - 1)
            return V.check_int(value, self.name, minimum=-(2**63) if low is None else low,
                               maximum=high, hint=hint)
        if self.kind == "float":
            iv = self.interval or Interval()
            v = V.check_number(value, self.name, what=self.accepted())
            if not iv.above_low(v):
                positive = iv.low == 0 and iv.closed in ("right", "neither")
                bound = "a positive finite number" if positive else \
                    f"{'>=' if iv.closed in ('both', 'left') else '>'} {iv.low:g}" + \
                    (f" ({self.low_why})" if self.low_why else "")
                raise RDXInputError(f"{name} must be {bound}, got {value!r}.{hint}")
            if not iv.below_high(v):
                raise RDXInputError(f"{name}={v:g} is out of the range that works, "
                                    f"{iv.text(name)}{': ' + self.why if self.why else ''}."
                                    f"{hint}")
            return value
        if self.types and not _instance(value, self.types):
            raise RDXInputError(f"{name} must be {self.accepted()}, got "
                                f"{value!r}.{hint}")
        return value


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _instance(value: Any, types: tuple[type, ...]) -> bool:
    """``isinstance`` where bool is not an int (unless listed) and numpy scalars count as
    the Python types they stand for."""
    if isinstance(value, (bool, np.bool_)):
        return bool in types
    if int in types and isinstance(value, np.integer):
        return True
    return isinstance(value, types)


RDX_OPTIONS: tuple[Option, ...] = (
    Option("n_explanations", 3, "explanations per direction (k); the clustering finds k + 1 "
           "groups, one of them the no-change group", types=(int,),
           interval=Interval(1, None), flag="--n-explanations", aliases=("--k",),
           metavar="K"),
    Option("similarity", "neighborhood", "how each model's image-to-image similarity is "
           "measured (neighborhood: neighbour ranks)", choices=SIMILARITY_FUNCTIONS,
           flag="--similarity"),
    Option("difference", "locally_biased", "how the two models' similarities are compared",
           choices=DIFFERENCE_FUNCTIONS, flag="--difference"),
    Option("gamma", None, "γ of the locally biased difference (none: gamma_scale / n)",
           types=(float,), interval=Interval(0, MAX_SCALE, "right"), special=(None,),
           what="a positive finite number", why=SCALE_WHY, flag="--gamma", metavar="G"),
    Option("gamma_scale", 80.0, "γ = gamma_scale / n when gamma is not given",
           types=(float,), interval=Interval(0, MAX_SCALE, "right"), why=SCALE_WHY,
           flag="--gamma-scale", metavar="S"),
    Option("beta", 5.0, "β of the affinity exp(−β·difference)", types=(float,),
           interval=Interval(0, None, "neither"), flag="--beta", metavar="B"),
    Option("normalize_diff", None, "divide the difference by its largest |value| (auto: "
           "only for the standard difference)", types=(bool,), special=(None,),
           what="None, True or False", flag="--normalize-diff", none_word="auto"),
    Option("sigma_neighbor", 7, "the neighbour whose distance sets each image's local "
           "scale in zp_local_scaling", types=(int,), interval=Interval(1, None),
           flag="--sigma-neighbor", metavar="J"),
    Option("clustering", "spectral", "how explanations are found in the affinity graph",
           choices=CLUSTERING_METHODS, flag="--clustering"),
    Option("n_init", 10, "k-means restarts of the spectral clustering", types=(int,),
           interval=Interval(1, None), flag="--n-init", metavar="N"),
    Option("eigen_solver", "auto", "eigensolver of the spectral clustering (auto: dense up "
           "to 500 images, else Lanczos)", choices=EIGEN_SOLVERS, flag="--eigen-solver"),
    Option("null_threshold", 1.5, "an explanation whose mean affinity is below it is weak "
           "(flagged low_affinity in the results)", types=(float,),
           flag="--null-threshold", metavar="X"),
    Option("merge_low_affinity", False, "move weak explanations into the no-change group "
           "(fewer than k may remain)", types=(bool,), flag="--merge-low-affinity"),
    # at least 2: BSR scores the pairs of a grid, and one image has none
    Option("grid_size", 9, "images per explanation grid (at least 2)", types=(int,),
           interval=Interval(2, None), flag="--grid-size", metavar="G"),
    Option("grid_strategy", "maximize_total_neighborhood_affinity", "how the grid images "
           "of an explanation are picked", choices=GRID_STRATEGIES, flag="--grid-strategy"),
    Option("guidance", None, "group the images by their labels or by probe predictions and "
           "neutralise every pair across groups (needs labels)", choices=GUIDANCE,
           flag="--guidance"),
    Option("random_state", 42, "seed of every random step", types=(int,),
           interval=Interval(0, 2**32 - 1),
           hint=" RDX is always seeded so that runs are reproducible.", config=False),
    Option("device", "auto", "where the fit runs: auto, cpu, cuda", config=False),
    Option("graph", "auto", "dense (exact, two n×n matrices), knn (the large-n mode: nothing "
           "n×n) or auto: dense where its matrices fit in memory, else knn", choices=GRAPHS,
           flag="--graph"),
    Option("n_neighbors", "auto", "K of graph=knn: an integer from 2 to n − 1, auto "
           "(min(200, n − 1)) or null (the K at which no far pair can reach null_threshold "
           "on its own, ≈ 800–1000; more memory)", types=(int,), interval=Interval(2, None),
           special=N_NEIGHBORS_RULES, what="an integer, 'auto' or 'null'",
           hint=" To fix it, use n_neighbors='auto' (the documented rule) or an integer "
                "from 2 to n_images − 1.", flag="--n-neighbors", metavar="K|auto|null"),
    Option("n_landmarks", DEFAULT_N_LANDMARKS, "landmark images of graph=knn's far-pair "
           "sketch (0: none, far pairs count as neutral)", types=(int,),
           interval=Interval(0, None), flag="--n-landmarks", aliases=("--landmarks",),
           metavar="M"),
    Option("executor", None, "where graph=knn's neighbour pass runs: None (here), "
           "'local:N', a Dask scheduler address or a dask.distributed.Client"),
    Option("knn_search", "auto", "how graph=knn finds neighbours and ranks: exact (every "
           "distance, O(n²·d)), approx (inverted-file lists and ranks estimated from the "
           "landmarks: for 10⁶ images on one machine; recall recorded) or auto (approx above "
           "500 000 images on the CPU)", choices=KNN_SEARCHES, flag="--knn-search"),
    Option("keep_graphs", False, "keep the n×n matrices for saving", types=(bool,),
           config=False),
    Option("verbose", 0, "show a progress bar over the steps", types=(int, bool),
           what="an integer or a bool", config=False),
    Option("align_representations", False, "aligned mode: compare each model with the "
           "other's CKA-aligned linear map", types=(bool,)),
    Option("align_params", None, "keyword arguments of the alignment (train_fraction, "
           "num_steps, lr, seed)", types=(dict,), special=(None,),
           what="None or a dict"),
    Option("variant", "paper", "paper (the published algorithm) or v2 (ranks symmetrised "
           "before the difference, weak clusters filtered into the no-change group); sets "
           "the parameters left at auto", choices=tuple(VARIANTS), flag="--variant"),
    Option("symmetrize_ranks", "auto", "how each model's ranks are symmetrised (auto: the "
           "variant's; v2: mean)", choices=("auto", None) + SYMMETRIZE_MODES,
           flag="--symmetrize-ranks"),
    Option("symmetrize_difference", False, "replace the difference by (diff + diffᵀ)/2 "
           "before the affinity", types=(bool,), flag="--symmetrize-difference"),
    Option("filter_threshold", "auto", "clusters with mean affinity below X join the "
           "no-change group (auto: the variant's, 1.1 for v2, none for paper)",
           types=(float,), special=("auto", None),
           what='"auto", None or a finite number', flag="--filter-threshold",
           metavar="X|auto|none"),
    Option("guidance_scale", "auto", "cross-group entries of guided graphs become S·(n−1) "
           "(auto: 5 paper, 10 v2)", types=(float,), interval=Interval(1, MAX_SCALE),
           special=("auto",), what='"auto" or a number >= 1',
           low_why="ν must exceed every real rank", why="ν = guidance_scale·(n − 1) must exceed every real rank, and γ multiplies it "
               "in float32, which overflows beyond 3.4e38 (every explanation would come out "
               "empty)", flag="--guidance-scale", metavar="S|auto"),
    Option("guidance_positive", None, "positive class of tpnfpn/true_pos guidance (None: the "
           "largest label)", types=(int, str), special=(None,),
           what="None or a class label (integer or string)"),
    Option("label_grids", False, "caption grid images with both models' predictions and the "
           "true class (needs labels)", types=(bool,), flag="--label-grids"),
    # run-level: rdx run always extracts features; rdx explain sets it with --distances
    Option("metric", "euclidean", "what A and B are: euclidean (features, compared by "
           "Euclidean distance) or precomputed (n×n distance matrices)", choices=METRICS,
           config=False),
)
#: The table by parameter name.
RDX_OPTION = {o.name: o for o in RDX_OPTIONS}


def check_options(params: dict[str, Any], options: tuple[Option, ...] = RDX_OPTIONS, *,
                  skip: frozenset[str] = frozenset()) -> None:
    """Check every parameter of ``params`` that ``options`` declares (not those in
    ``skip``), in the table's order; the first refusal is raised."""
    for opt in options:
        if opt.name in params and opt.name not in skip:
            opt.check(params[opt.name])


def defaults(options: tuple[Option, ...] = RDX_OPTIONS) -> dict[str, Any]:
    """Every option's default, by name."""
    return {o.name: o.default for o in options}


