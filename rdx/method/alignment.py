"""CKA-aligned linear maps between two representations (aligned mode).

For one direction ``X_from → X_to`` a ``torch.nn.Linear(d_from, d_from)`` (bias, default
init) is trained to maximise the debiased linear CKA between ``f(X_from)`` and ``X_to``
(CKA allows different widths): loss ``1 − CKA_debiased(f(X_from)[train], X_to[train])``,
Adam, full batch, on a seeded random train/test split of the images. The test CKA is logged
at every step and the weights with the best test CKA are kept (the original code meant to
do this but its "is best" check never fired, so it returned the final-step weights).

``learn_alignment`` does one direction; ``align_pair`` both (``A→B`` and ``B→A``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .. import validation as V
from ..backend import resolve_device
from ..errors import RDXInputError
from ..similarity.cka import debiased_linear_cka


@dataclass
class AlignmentResult:
    """One learned direction.

    ``train_cka[t]`` / ``test_cka[t]`` are the CKAs of the weights after ``t`` Adam steps
    (``t = 0`` is the initialisation), so both lists have ``num_steps + 1`` entries;
    ``best_step = argmax(test_cka)`` (first maximum) and ``weight``/``bias``/``mapped`` are
    the weights of that step: ``mapped = X_from @ weight.T + bias``.
    """

    mapped: np.ndarray = field(repr=False)
    weight: np.ndarray = field(repr=False)
    bias: np.ndarray = field(repr=False)
    train_cka: list[float]
    test_cka: list[float]
    best_step: int
    train_index: np.ndarray = field(repr=False, default=None)
    test_index: np.ndarray = field(repr=False, default=None)

    @property
    def best_test_cka(self) -> float:
        return float(self.test_cka[self.best_step])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready curves and summary (no arrays)."""
        return {"train_cka": [float(c) for c in self.train_cka],
                "test_cka": [float(c) for c in self.test_cka],
                "best_step": int(self.best_step),
                "best_test_cka": self.best_test_cka,
                "initial_test_cka": float(self.test_cka[0]),
                "final_test_cka": float(self.test_cka[-1]),
                "n_train": int(len(self.train_index)), "n_test": int(len(self.test_index))}


def split_indices(n: int, train_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random train/test split of ``n`` images (sorted index arrays)."""
    n_train = int(round(float(train_fraction) * n))
    if n_train < 4 or n - n_train < 4:
        raise RDXInputError(
            f"the alignment split of n={n} images with train_fraction={train_fraction} gives "
            f"{n_train} train / {n - n_train} test images; debiased CKA needs at least 4 in "
            "each (use more images or another train_fraction).")
    perm = np.random.default_rng(int(seed)).permutation(n)
    return np.sort(perm[:n_train]), np.sort(perm[n_train:])


def learn_alignment(X_from: Any, X_to: Any, *, train_fraction: float = 0.7,
                    num_steps: int = 100, lr: float = 1e-3, seed: int = 0,
                    device: str | torch.device = "auto") -> AlignmentResult:
    """Learn ``f: X_from → f(X_from)`` (width ``d_from``) maximising debiased CKA with ``X_to``.

    Deterministic for a given seed on the CPU (the global torch RNG is left untouched).
    """
    A = V.as_representation(X_from, "X_from")
    B = V.as_representation(X_to, "X_to")
    V.check_pair(A, B)
    V.check_not_constant(A, "X_from")
    V.check_not_constant(B, "X_to")
    if not (isinstance(train_fraction, (int, float)) and 0 < float(train_fraction) < 1):
        raise RDXInputError(f"train_fraction must be a number in (0, 1), got {train_fraction!r}.")
    num_steps = V.check_int(num_steps, "num_steps", minimum=0)
    lr = V.check_positive(lr, "lr")
    seed = V.check_int(seed, "seed", minimum=0, maximum=2**32 - 1)
    dev = resolve_device(device)
    n, d = A.shape
    tr, te = split_indices(n, train_fraction, seed)

    # Column-centring the input changes f(X) only by a constant (absorbed in the bias and
    # ignored by CKA), so the weight trajectory is the same; it keeps float32 products
    # accurate for data far from the origin.
    mu = A.astype(np.float64).mean(axis=0)
    Xc = torch.from_numpy((A.astype(np.float64) - mu).astype(np.float32)).to(dev)
    Y = torch.from_numpy(B).to(dev)
    tr_t = torch.from_numpy(tr).to(dev)
    te_t = torch.from_numpy(te).to(dev)
    X_tr, X_te, Y_tr, Y_te = Xc[tr_t], Xc[te_t], Y[tr_t], Y[te_t]

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        f = torch.nn.Linear(d, d, bias=True)
    f = f.to(dev)
    opt = torch.optim.Adam(f.parameters(), lr=lr)

    train_cka: list[float] = []
    test_cka: list[float] = []
    best_state, best_step, best = None, 0, -np.inf
    for step in range(num_steps + 1):
        cka_tr = debiased_linear_cka(f(X_tr), Y_tr)
        with torch.no_grad():
            cka_te = float(debiased_linear_cka(f(X_te), Y_te))
        train_cka.append(float(cka_tr.detach()))
        test_cka.append(cka_te)
        if cka_te > best:  # strict: the first maximum wins
            best, best_step = cka_te, step
            best_state = copy.deepcopy({k: v.detach().clone() for k, v in f.state_dict().items()})
        if step == num_steps:
            break
        opt.zero_grad(set_to_none=True)
        (1.0 - cka_tr).backward()
        opt.step()

    W = best_state["weight"].double().cpu().numpy()
    b = best_state["bias"].double().cpu().numpy()
    # f was applied to X − μ: as a map of the raw X its bias is b − Wμ.
    b_raw = b - W @ mu
    mapped = A.astype(np.float64) @ W.T + b_raw
    return AlignmentResult(mapped=mapped.astype(np.float32), weight=W.astype(np.float32),
                           bias=b_raw.astype(np.float32), train_cka=train_cka,
                           test_cka=test_cka, best_step=int(best_step),
                           train_index=tr, test_index=te)


def align_pair(A: Any, B: Any, **kw: Any) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Both directions: ``A_mapped = f_AB(A)`` (aligned to B), ``B_mapped = f_BA(B)``.

    Keyword arguments go to :func:`learn_alignment` (same seed, hence the same image split,
    for both directions). ``info`` holds the JSON-ready curves per direction
    (``"a_to_b"``, ``"b_to_a"``) and the parameters used.
    """
    ab = learn_alignment(A, B, **kw)
    ba = learn_alignment(B, A, **kw)
    params = {"train_fraction": 0.7, "num_steps": 100, "lr": 1e-3, "seed": 0}
    params.update({k: v for k, v in kw.items() if k != "device"})
    info = {"a_to_b": ab.to_dict(), "b_to_a": ba.to_dict(), "params": params}
    return ab.mapped, ba.mapped, info
