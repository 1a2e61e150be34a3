"""Linear probes on frozen features with the consistency paper's protocol.

Protocol
--------
* A single ``nn.Linear(d, C)`` trained with cross-entropy, AdamW(lr, weight_decay=λ), a
  per-step cosine learning-rate schedule without warm-up
  (``lr_t = ½(1 + cos(π t / T))·lr``), 20 epochs, batches of 1024, the probe's
  initialisation and the batch order seeded by ``torch.manual_seed(seed)``.
* Hyperparameters on a stratified 80/20 split of the training set
  (``random_state=seed``): for every lr in {1e-1, 1e-2, 1e-3, 1e-4}, λ is searched on a grid
  of 64 log-spaced values in [1e-6, 1e1] — first the 8 decade points, then around the current
  best index the neighbours at distance 4, 2 and 1 (coarse to fine). Within one round of
  evaluations a tie goes to the later-evaluated λ; a later round, and a later lr, must
  improve strictly (as the paper's ``RegularizationTuner`` / ``HyperparameterTuner``).
* The best (lr, λ) is retrained on the whole training set and evaluated on the test set:
  top-1, top-5 (only with ≥ 5 classes) and balanced accuracy (mean per-class recall). The
  paper averages 3 seeds (0, 1, 2).

Fixed relative to the paper's code: the head has ``num_classes`` outputs
(the dataset's class count, or the largest label of train *and* test + 1), not "largest
training label + 1", so a class missing from the training split cannot shrink the head and
crash evaluation. Features are used as given; normalise them once beforehand
(:func:`rdx.similarity.matrix.normalize_features`) instead of twice.

Everything runs on torch tensors held in memory (no DataLoader), so a fit on ``n × d``
features costs ``20·⌈n/1024⌉`` small matrix products.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from ..errors import RDXInputError

#: Learning rates searched (the paper's ImageNet grid, used for every dataset).
PROBE_LRS = (1e-1, 1e-2, 1e-3, 1e-4)


def lambda_grid(min_exp: int = -6, max_exp: int = 1, per_decade: int = 8) -> np.ndarray:
    """The λ grid: ``per_decade`` values between consecutive decades, decades included
    (64 values for the defaults); decade ``k`` is at index ``(per_decade + 1)·k``."""
    n_dec = max_exp - min_exp + 1
    return np.logspace(min_exp, max_exp, num=n_dec + (n_dec - 1) * per_decade)


def _check_xy(X, y, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    Xa = np.asarray(X)
    ya = np.asarray(y)
    if Xa.ndim != 2 or Xa.dtype.kind not in "biuf" or Xa.shape[1] == 0:
        raise RDXInputError(f"{name} features must be a 2-D n × d real array, got shape "
                            f"{Xa.shape} dtype {Xa.dtype}.")
    if ya.ndim != 1 or len(ya) != len(Xa) or ya.dtype.kind not in "iu":
        raise RDXInputError(f"{name} labels must be one integer per row ({len(Xa)}), got "
                            f"shape {ya.shape} dtype {ya.dtype}.")
    if len(ya) == 0:
        raise RDXInputError(f"{name} set is empty.")
    if ya.min() < 0:
        raise RDXInputError(f"{name} labels must be ≥ 0 (class ids), found {int(ya.min())}.")
    if not np.isfinite(Xa).all():
        raise RDXInputError(f"{name} features contain NaN/inf.")
    return (torch.from_numpy(np.ascontiguousarray(Xa, dtype=np.float32)),
            torch.from_numpy(ya.astype(np.int64)))


#: Adam's moment decays and ε (torch.optim.AdamW's defaults, as the paper's probes).
_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPS = 1e-8


def train_probes(X: torch.Tensor, y: torch.Tensor, *, num_classes: int,
                 lrs: Sequence[float], weight_decays: Sequence[float], epochs: int = 20,
                 batch_size: int = 1024, seed: int = 0, device: torch.device | str = "cpu"
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Fit P linear probes at once, probe p with learning rate ``lrs[p]`` and weight decay
    ``weight_decays[p]`` (see the module docstring); the caller's RNG is left alone.

    Every probe starts from the same initialisation and sees the same batches (one seed, as
    the paper's search), so the P fits differ only in (lr, λ) and run as one batched
    product per step: the search's 14 fits per learning rate cost about one. Each probe's
    updates are exactly AdamW's (decoupled decay ``θ ← θ(1 − lr_t λ)``, then the Adam step,
    ``torch.optim.AdamW``'s defaults), computed for all probes in one tensor; only the float
    rounding of the batched product differs from fitting the probes one by one.

    Returns
    -------
    W, b : (P, num_classes, d) and (P, num_classes) tensors
        The fitted weights and biases.
    """
    device = torch.device(device)
    X, y = X.to(device), y.to(device)
    n, d = X.shape
    P = len(lrs)
    if P == 0 or len(weight_decays) != P:
        raise ValueError("lrs and weight_decays must have the same, non-zero length")
    steps_per_epoch = math.ceil(n / batch_size)
    total = epochs * steps_per_epoch
    lr0 = torch.tensor([float(v) for v in lrs], dtype=torch.float32, device=device)
    lam = torch.tensor([float(v) for v in weight_decays], dtype=torch.float32, device=device)
    beta1, beta2 = _ADAM_BETAS
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)   # same initialisation for every (lr, λ), as the paper
        init = nn.Linear(d, num_classes)
        W = init.weight.detach().to(device).expand(P, -1, -1).clone().requires_grad_()
        b = init.bias.detach().to(device).expand(P, -1).clone().requires_grad_()
        moments = [(torch.zeros_like(t), torch.zeros_like(t)) for t in (W, b)]
        step = 0
        for _ in range(epochs):
            order = torch.randperm(n).to(device)   # CPU generator: the same on any device
            for s in range(steps_per_epoch):
                idx = order[s * batch_size:(s + 1) * batch_size]
                logits = torch.baddbmm(b[:, None, :], X[idx].expand(P, -1, -1),
                                       W.transpose(1, 2))
                # a sum of the P mean losses: each probe's gradient is its own loss's
                loss = nn.functional.cross_entropy(logits.reshape(-1, num_classes),
                                                   y[idx].repeat(P), reduction="sum")
                gW, gb = torch.autograd.grad(loss / len(idx), (W, b))
                step += 1
                lr_t = 0.5 * (1 + math.cos(math.pi * (step - 1) / total)) * lr0
                c1, c2 = 1 - beta1 ** step, math.sqrt(1 - beta2 ** step)
                with torch.no_grad():
                    for t, g, (m, v) in ((W, gW, moments[0]), (b, gb, moments[1])):
                        shape = (P,) + (1,) * (t.dim() - 1)
                        t.mul_(1 - (lr_t * lam).view(shape))
                        m.mul_(beta1).add_(g, alpha=1 - beta1)
                        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                        t.sub_((lr_t / c1).view(shape) * m / (v.sqrt() / c2 + _ADAM_EPS))
    return W.detach(), b.detach()


def train_probe(X: torch.Tensor, y: torch.Tensor, *, num_classes: int, lr: float,
                weight_decay: float, epochs: int = 20, batch_size: int = 1024, seed: int = 0,
                device: torch.device | str = "cpu") -> nn.Linear:
    """Fit one linear probe (:func:`train_probes` with one (lr, λ))."""
    W, b = train_probes(X, y, num_classes=num_classes, lrs=[lr], weight_decays=[weight_decay],
                        epochs=epochs, batch_size=batch_size, seed=seed, device=device)
    model = nn.Linear(W.shape[2], num_classes).to(W.device)
    with torch.no_grad():
        model.weight.copy_(W[0])
        model.bias.copy_(b[0])
    return model.eval()


@torch.no_grad()
def probe_metrics(model: nn.Linear, X: torch.Tensor, y: torch.Tensor, num_classes: int) -> dict:
    """Top-1, top-5 (≥ 5 classes, else None) and balanced accuracy (classes present in y)."""
    dev = model.weight.device
    logits = torch.cat([model(X[i:i + 8192].to(dev)).cpu() for i in range(0, len(X), 8192)])
    pred = logits.argmax(1)
    top1 = float((pred == y).double().mean())
    top5 = None
    if num_classes >= 5:
        top5 = float((logits.topk(5, dim=1).indices == y[:, None]).any(1).double().mean())
    recalls = [float((pred[y == c] == c).double().mean()) for c in torch.unique(y)]
    return {"top1": top1, "top5": top5, "balanced_accuracy": float(np.mean(recalls))}


@torch.no_grad()
def _val_accuracies(Xtr, ytr, Xval, yval, *, num_classes, candidates, epochs, batch_size,
                    seed, device) -> list[float]:
    """Validation top-1 of a probe per ``(lr, λ)`` candidate, all fitted at once."""
    with torch.enable_grad():
        W, b = train_probes(Xtr, ytr, num_classes=num_classes,
                            lrs=[c[0] for c in candidates], weight_decays=[c[1] for c in candidates],
                            epochs=epochs, batch_size=batch_size, seed=seed, device=device)
    Xv, yv = Xval.to(W.device), yval.to(W.device)
    out = torch.zeros(len(candidates), dtype=torch.float64)
    for i in range(0, len(Xv), 8192):
        pred = torch.baddbmm(b[:, None, :], Xv[i:i + 8192].expand(len(candidates), -1, -1),
                             W.transpose(1, 2)).argmax(2)
        out += (pred == yv[i:i + 8192]).sum(1).double().cpu()
    return (out / len(yv)).tolist()


def search_hyperparameters(Xtr, ytr, Xval, yval, *, lrs: Sequence[float], num_classes: int,
                           epochs: int = 20, batch_size: int = 1024, seed: int = 0,
                           device="cpu", grid: np.ndarray | None = None, per_decade: int = 8
                           ) -> list[tuple[float, float, list[dict]]]:
    """The coarse-to-fine λ search of every lr, the lrs' searches in lockstep: each round's
    candidates of all lrs are one batched fit (:func:`train_probes`). Returns per lr
    ``(λ, validation top-1, trace)``, each exactly as :func:`tune_weight_decay` defines it."""
    grid = lambda_grid() if grid is None else np.asarray(grid)
    traces: list[list[dict]] = [[] for _ in lrs]

    def evaluate(idxs_per_lr: list[list[int]]) -> list[list[float]]:
        cands = [(float(lr), float(grid[i])) for lr, idxs in zip(lrs, idxs_per_lr)
                 for i in idxs]
        accs = iter(_val_accuracies(Xtr, ytr, Xval, yval, num_classes=num_classes,
                                    candidates=cands, epochs=epochs, batch_size=batch_size,
                                    seed=seed, device=device) if cands else [])
        out = []
        for j, idxs in enumerate(idxs_per_lr):
            out.append([next(accs) for _ in idxs])
            traces[j] += [{"lr": float(lrs[j]), "weight_decay": float(grid[i]),
                           "index": int(i), "val_top1": a} for i, a in zip(idxs, out[-1])]
        return out

    def peak_of(idxs: Sequence[int], accs: Sequence[float]) -> tuple[int, float]:
        best_idx, best = 0, 0.0
        for i, acc in zip(idxs, accs):
            if best <= acc:   # ties: the later λ (paper's find_peak)
                best_idx, best = i, acc
        return best_idx, best

    decades = list(range(0, len(grid), per_decade + 1))
    state = [peak_of(decades, accs) for accs in evaluate([decades] * len(lrs))]
    span = (per_decade + 1) // 2   # 4 for the default grid
    while span > 0:
        rounds = []
        for peak, _ in state:
            left, right = max(peak - span, 0), min(peak + span, len(grid) - 1)
            rounds.append([i for i in (left, right) if i != peak])
        if not any(rounds):
            break
        for j, (idxs, accs) in enumerate(zip(rounds, evaluate(rounds))):
            if idxs:
                new_peak, new_acc = peak_of(idxs, accs)
                if new_acc > state[j][1]:   # a later round must improve strictly
                    state[j] = (new_peak, new_acc)
        span //= 2
    return [(float(grid[peak]), acc, traces[j]) for j, (peak, acc) in enumerate(state)]


def tune_weight_decay(Xtr, ytr, Xval, yval, *, lr: float, num_classes: int, epochs: int = 20,
                      batch_size: int = 1024, seed: int = 0, device="cpu",
                      grid: np.ndarray | None = None, per_decade: int = 8
                      ) -> tuple[float, float, list[dict]]:
    """Coarse-to-fine λ search for one lr; returns ``(λ, validation top-1, trace)``: the 8
    decade points, then around the current best index the neighbours at distance 4, 2 and 1
    (a round's tie goes to the later λ; a later round must improve strictly)."""
    return search_hyperparameters(Xtr, ytr, Xval, yval, lrs=[lr], num_classes=num_classes,
                                  epochs=epochs, batch_size=batch_size, seed=seed,
                                  device=device, grid=grid, per_decade=per_decade)[0]


#: Largest class id that sizes the probe's head directly (its outputs are 0..id); labels
#: beyond it are remapped to 0..C−1 first (:func:`linear_probe`).
MAX_DIRECT_CLASS_ID = 65_535


def linear_probe(X_train, y_train, X_test, y_test, *, seed: int = 0,
                 lrs: Sequence[float] = PROBE_LRS, epochs: int = 20, batch_size: int = 1024,
                 val_proportion: float = 0.2, num_classes: int | None = None,
                 device: str | torch.device = "cpu") -> dict:
    """Hyperparameter search, refit on the whole training set, test metrics (one seed).

    Parameters
    ----------
    X_train, y_train : (n, d) array, (n,) int array
        Training features and class ids.
    X_test, y_test : (m, d) array, (m,) int array
        Test features and class ids.
    seed : int
        Seeds the validation split, the probe initialisation and the batch order.
    lrs : sequence of float
        Learning rates to search.
    epochs, batch_size : int
        Per fit (20 and 1024 in the paper).
    val_proportion : float
        Validation share of the training set for the search.
    num_classes : int, optional
        Outputs of the probe; default: largest label of train and test + 1 — or, when
        that exceeds :data:`MAX_DIRECT_CLASS_ID` + 1, the number of distinct labels, which
        are then remapped to ``0..C−1`` in sorted order (same result as remapped labels).
    device : str or torch.device
        Where the probes are trained.

    Returns
    -------
    dict
        ``top1``, ``top5``, ``balanced_accuracy`` (test), ``lr``, ``weight_decay``,
        ``val_top1``, ``n_train``, ``n_val``, ``n_test``, ``num_classes``, ``stratified``
        and the search ``trace``.
    """
    from sklearn.model_selection import train_test_split

    Xtr, ytr = _check_xy(X_train, y_train, "training")
    Xte, yte = _check_xy(X_test, y_test, "test")
    if Xtr.shape[1] != Xte.shape[1]:
        raise RDXInputError(f"training features have {Xtr.shape[1]} dimensions, test features "
                            f"{Xte.shape[1]}; they must come from the same layer.")
    top = int(max(int(ytr.max()), int(yte.max()))) + 1
    if num_classes is None and top > MAX_DIRECT_CLASS_ID + 1:
        # class ids as large as 2**40 would size the probe's head (and the bincounts) by
        # their value: such labels are remapped to 0..C−1, sorted, first
        codes = np.unique(np.concatenate([ytr.numpy(), yte.numpy()]),
                          return_inverse=True)[1].reshape(-1)
        ytr = torch.from_numpy(codes[:len(ytr)].astype(np.int64))
        yte = torch.from_numpy(codes[len(ytr):].astype(np.int64))
        top = int(codes.max()) + 1
    C = top if num_classes is None else int(num_classes)
    if C < top or C < 2:
        raise RDXInputError(f"num_classes={num_classes} but labels go up to {top - 1} (and a "
                            "probe needs at least 2 classes).")
    if not 0 < val_proportion < 1:
        raise RDXInputError(f"val_proportion must be in (0, 1), got {val_proportion!r}.")
    if len(lrs) == 0 or any(not (isinstance(v, (int, float)) and v > 0) for v in lrs):
        raise RDXInputError(f"lrs must be positive numbers, got {list(lrs)!r}.")
    counts = np.bincount(ytr.numpy())
    stratified = bool(counts[counts > 0].min() >= 2)
    idx = np.arange(len(ytr))
    try:
        i_fit, i_val = train_test_split(idx, test_size=val_proportion, random_state=seed,
                                        stratify=ytr.numpy() if stratified else None)
    except ValueError as exc:   # e.g. fewer validation images than classes
        raise RDXInputError(f"cannot split {len(idx)} training images into a "
                            f"{val_proportion:.0%} validation set: {exc}") from None
    dev = torch.device(device)
    best_lr, best_wd, best_acc, trace = 0.0, 0.0, 0.0, []
    searched = search_hyperparameters(Xtr[i_fit], ytr[i_fit], Xtr[i_val], ytr[i_val],
                                      lrs=[float(v) for v in lrs], num_classes=C,
                                      epochs=epochs, batch_size=batch_size, seed=seed,
                                      device=dev)
    for lr, (wd, acc, tr) in zip(lrs, searched):
        trace += tr
        if best_acc < acc or not best_lr:   # later lrs must improve strictly
            best_lr, best_wd, best_acc = float(lr), wd, acc
    model = train_probe(Xtr, ytr, num_classes=C, lr=best_lr, weight_decay=best_wd,
                        epochs=epochs, batch_size=batch_size, seed=seed, device=dev)
    return {**probe_metrics(model, Xte, yte, C), "lr": best_lr, "weight_decay": best_wd,
            "val_top1": best_acc, "n_train": len(Xtr), "n_val": len(i_val),
            "n_test": len(Xte), "num_classes": C, "stratified": stratified,
            "seed": seed, "epochs": epochs, "batch_size": batch_size, "trace": trace}


__all__ = ["PROBE_LRS", "lambda_grid", "linear_probe", "probe_metrics", "search_hyperparameters",
           "train_probe", "train_probes", "tune_weight_decay"]
