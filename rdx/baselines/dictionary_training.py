"""Training plumbing shared by the package's dictionary learners (the SAEs of :mod:`.sae`,
:mod:`.usae`, the crosscoders of :mod:`.crosscoder`): seeded batch order, learning-rate
schedules, the epoch loop with its progress bar and time budget, chunked encoding, R²,
Top-k activation and parameter checks — so that every SAE-style trainer runs the same
loop — and :func:`reproducible_fit`, which gives their fits the same result on every
machine."""
from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
from tqdm.auto import tqdm

from .. import validation as V
from ..backend import check_device, reproducible_training, resolve_device
from ..budget import check_duration
from ..errors import RDXInputError


#: At most this many points of the per-epoch loss curve go into ``info_``.
LOSS_CURVE_POINTS = 50


def check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise RDXInputError(f"{name} must be True or False, got {value!r}.")
    return bool(value)


def check_training_params(est: Any, n: int | None, *, min_batch: int = 1) -> None:
    """Checks shared by the torch-trained baselines: epochs, lr, batch size, device, verbose."""
    V.check_int(est.n_epochs, "n_epochs", minimum=1)
    V.check_positive(est.lr, "lr")
    V.check_int(est.batch_size, "batch_size", minimum=min_batch)
    if not isinstance(est.verbose, (bool, np.bool_)):
        V.check_int(est.verbose, "verbose", minimum=0)
    # with data, fail before training when the device is unusable
    check_device(est.device, usable=n is not None)


_Fit = TypeVar("_Fit", bound=Callable[..., None])


def reproducible_fit(fit: _Fit) -> _Fit:
    """Decorate a baseline's ``_fit(self, ...)``: the whole fit (training, then the codes
    and statistics computed from the trained weights) runs inside
    :func:`rdx.backend.reproducible_training` on ``self.device``, so the same
    ``random_state`` gives bit-identical dictionaries and codes whatever the machine's core
    count or ``RDX_NUM_THREADS``."""
    @functools.wraps(fit)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        with reproducible_training(resolve_device(self.device)):
            return fit(self, *args, **kwargs)
    return wrapper  # type: ignore[return-value]


def make_generator(seed: int) -> torch.Generator:
    """CPU generator for initialisation and batch order: the same on CPU and GPU runs."""
    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed))
    return g


def uniform_init(shape: tuple[int, ...], bound: float, generator: torch.Generator) -> torch.Tensor:
    """U(−bound, bound) from ``generator`` (CPU, float32)."""
    return (torch.rand(shape, generator=generator) * 2.0 - 1.0) * bound


def kaiming_bound(fan_in: int) -> float:
    """Bound of Kaiming-uniform for a ReLU layer: √2 · √(3 / fan_in)."""
    return math.sqrt(2.0) * math.sqrt(3.0 / fan_in)


def batch_indices(n: int, batch_size: int, generator: torch.Generator,
                  shuffle: bool = True) -> list[torch.Tensor]:
    """Row indices of one epoch's batches (every image once).

    A last batch of a single row is merged into the previous one: BatchNorm cannot
    normalise one sample, and a one-row step is mostly noise anyway.
    """
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    bs = min(int(batch_size), n)
    batches = list(torch.split(order, bs))
    if len(batches) > 1 and len(batches[-1]) < 2:
        batches[-2] = torch.cat([batches[-2], batches.pop()])
    return batches


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Number of batches :func:`batch_indices` yields per epoch."""
    bs = min(int(batch_size), n)
    steps = -(-n // bs)
    return steps - 1 if steps > 1 and n - (steps - 1) * bs < 2 else steps


def lr_schedule(lr: float, *, warmup_steps: int = 0, warmup_start: float = 0.0,
                total_steps: int | None = None, final_lr: float | None = None
                ) -> Callable[[int], float]:
    """Learning rate of step ``t`` (1-based).

    Linear warm-up from ``warmup_start`` (used on step 1) to ``lr`` over ``warmup_steps``
    steps, then constant, or — with ``total_steps`` and ``final_lr`` — a cosine decay that
    reaches ``final_lr`` on the last step.
    """
    def at(t: int) -> float:
        if t <= warmup_steps:
            return warmup_start + (lr - warmup_start) * (t - 1) / warmup_steps
        if total_steps is None or final_lr is None:
            return lr
        span = max(total_steps - warmup_steps - 1, 1)
        progress = min((t - warmup_steps - 1) / span, 1.0)
        return final_lr + (lr - final_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return at


#: Optimisation steps timed before a training run is checked against the time budget.
_TIMED_STEPS = 5


def train_epochs(step: Callable[[torch.Tensor], torch.Tensor], *, n: int, n_epochs: int,
                 batch_size: int, generator: torch.Generator, optimizer: torch.optim.Optimizer,
                 schedule: Callable[[int], float], verbose: Any, desc: str) -> list[float]:
    """The epoch loop: seeded shuffled batches, LR per step, mean loss per epoch.

    ``step(idx)`` does one optimisation step on the rows ``idx`` (a CPU index tensor) and
    returns the detached loss. Losses are summed on the device and read once per epoch,
    so a GPU run synchronises only at epoch ends.

    The first steps are timed: when ``n_epochs`` at that pace would exceed the time budget
    (:func:`rdx.budget.check_duration`), training stops at once with an
    :class:`~rdx.errors.RDXInputError` naming ``n_epochs`` and a value that fits; a long
    run is announced on stderr (with ``verbose``).
    """
    losses: list[float] = []
    t = 0
    per_epoch = steps_per_epoch(n, batch_size)
    started, timed = time.perf_counter(), False
    bar = tqdm(range(int(n_epochs)), desc=desc, unit="epoch", disable=not verbose, leave=False)
    for _epoch in bar:
        total = None
        for idx in batch_indices(n, batch_size, generator):
            t += 1
            rate = schedule(t)
            for group in optimizer.param_groups:
                group["lr"] = rate
            loss = step(idx) * len(idx)
            total = loss if total is None else total + loss
            if not timed and (t >= _TIMED_STEPS or time.perf_counter() - started > 0.5):
                timed = True
                if loss.device.type == "cuda":   # the steps queued so far, really done
                    torch.cuda.synchronize(loss.device)
                each = (time.perf_counter() - started) / t * per_epoch
                check_duration("n_epochs", int(n_epochs), seconds=each * int(n_epochs),
                               seconds_each=each, what=f"{desc} on n = {n} images",
                               announce=bool(verbose))
        losses.append(float(total) / n)
        if verbose:
            bar.set_postfix(loss=f"{losses[-1]:.4g}")
    bar.close()
    return losses


def map_rows(fn: Callable[[torch.Tensor], torch.Tensor], X: torch.Tensor,
             chunk: int) -> torch.Tensor:
    """``fn`` applied to every row of ``X`` in chunks (no row left out), without gradients."""
    with torch.no_grad():
        return torch.cat([fn(X[i:i + chunk]) for i in range(0, X.shape[0], max(int(chunk), 1))])


def r2_score(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Fraction of the total variance explained: 1 − Σ‖x − x̂‖² / Σ‖x − x̄‖²."""
    x = x.double()
    sse = (x - x_hat.double()).square().sum()
    sst = (x - x.mean(0)).square().sum()
    return float(1.0 - sse / sst) if float(sst) > 0 else float("nan")


def downsample(values: list[float], max_points: int = LOSS_CURVE_POINTS) -> list[float]:
    """At most ``max_points`` evenly spaced values, always including the first and last."""
    if len(values) <= max_points:
        return [float(v) for v in values]
    idx = np.unique(np.linspace(0, len(values) - 1, max_points).round().astype(int))
    return [float(values[i]) for i in idx]


def topk_relu(pre: torch.Tensor, k: int) -> torch.Tensor:
    """ReLU, then keep the ``k`` largest entries of every row (others set to 0)."""
    act = torch.relu(pre)
    if k >= act.shape[1]:
        return act
    top = torch.topk(act, k, dim=1)
    return torch.zeros_like(act).scatter(1, top.indices, top.values)


def unit_rows(W: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit L2 norm (a zero row stays zero)."""
    return W / W.norm(dim=1, keepdim=True).clamp_min(1e-12)


def global_scale(X: np.ndarray) -> float:
    """Root mean square of all entries: one number that brings features to unit scale."""
    return float(np.sqrt(np.mean(np.square(X, dtype=np.float64))))


def dead_fraction(codes: np.ndarray) -> float:
    """Fraction of latents that are zero on every image."""
    return float(np.mean(~(codes > 0).any(axis=0)))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32, copy=False)
