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


def train_probe(X: torch.Tensor, y: torch.Tensor, *, num_classes: int, lr: float,
                weight_decay: float, epochs: int = 20, batch_size: int = 1024, seed: int = 0,
                device: torch.device | str = "cpu") -> nn.Linear:
    """Fit one linear probe (see the module docstring); the caller's RNG is left alone."""
    device = torch.device(device)
    X, y = X.to(device), y.to(device)
    n = len(X)
    steps_per_epoch = math.ceil(n / batch_size)
    total = epochs * steps_per_epoch
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)   # same initialisation for every (lr, λ), as the paper
        model = nn.Linear(X.shape[1], num_classes).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        loss_fn = nn.CrossEntropyLoss()
        step = 0
        for _ in range(epochs):
            order = torch.randperm(n).to(device)   # CPU generator: the same on any device
            for b in range(steps_per_epoch):
                for group in opt.param_groups:
                    group["lr"] = 0.5 * (1 + math.cos(math.pi * step / total)) * lr
                idx = order[b * batch_size:(b + 1) * batch_size]
                opt.zero_grad(set_to_none=True)
                loss_fn(model(X[idx]), y[idx]).backward()
                opt.step()
                step += 1
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


def _val_accuracy(Xtr, ytr, Xval, yval, *, num_classes, lr, wd, epochs, batch_size, seed,
                  device) -> float:
    model = train_probe(Xtr, ytr, num_classes=num_classes, lr=lr, weight_decay=wd,
                        epochs=epochs, batch_size=batch_size, seed=seed, device=device)
    return probe_metrics(model, Xval, yval, num_classes)["top1"]


def tune_weight_decay(Xtr, ytr, Xval, yval, *, lr: float, num_classes: int, epochs: int = 20,
                      batch_size: int = 1024, seed: int = 0, device="cpu",
                      grid: np.ndarray | None = None, per_decade: int = 8
                      ) -> tuple[float, float, list[dict]]:
    """Coarse-to-fine λ search for one lr; returns ``(λ, validation top-1, trace)``."""
    grid = lambda_grid() if grid is None else np.asarray(grid)
    trace: list[dict] = []

    def find_peak(idxs: Sequence[int]) -> tuple[int, float]:
        best_idx, best = 0, 0.0
        for i in idxs:
            acc = _val_accuracy(Xtr, ytr, Xval, yval, num_classes=num_classes, lr=lr,
                                wd=float(grid[i]), epochs=epochs, batch_size=batch_size,
                                seed=seed, device=device)
            trace.append({"lr": lr, "weight_decay": float(grid[i]), "index": int(i),
                          "val_top1": acc})
            if best <= acc:   # ties: the later λ (paper's find_peak)
                best_idx, best = i, acc
        return best_idx, best

    peak, acc = find_peak(list(range(0, len(grid), per_decade + 1)))
    span = (per_decade + 1) // 2   # 4 for the default grid
    while span > 0:
        left, right = max(peak - span, 0), min(peak + span, len(grid) - 1)
        idxs = [i for i in (left, right) if i != peak]
        if not idxs:
            break
        new_peak, new_acc = find_peak(idxs)
        if new_acc > acc:
            peak, acc = new_peak, new_acc
        span //= 2
    return float(grid[peak]), acc, trace


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
    for lr in lrs:
        wd, acc, tr = tune_weight_decay(Xtr[i_fit], ytr[i_fit], Xtr[i_val], ytr[i_val],
                                        lr=float(lr), num_classes=C, epochs=epochs,
                                        batch_size=batch_size, seed=seed, device=dev)
        trace += tr
        if best_acc < acc or not best_lr:   # later lrs must improve strictly
            best_lr, best_wd, best_acc = float(lr), wd, acc
    model = train_probe(Xtr, ytr, num_classes=C, lr=best_lr, weight_decay=best_wd,
                        epochs=epochs, batch_size=batch_size, seed=seed, device=dev)
    return {**probe_metrics(model, Xte, yte, C), "lr": best_lr, "weight_decay": best_wd,
            "val_top1": best_acc, "n_train": len(Xtr), "n_val": len(i_val),
            "n_test": len(Xte), "num_classes": C, "stratified": stratified,
            "seed": seed, "epochs": epochs, "batch_size": batch_size, "trace": trace}


__all__ = ["PROBE_LRS", "lambda_grid", "linear_probe", "probe_metrics", "train_probe",
           "tune_weight_decay"]
