"""Shared input checks and small numerical helpers of the similarity measures.

Every measure takes two representations of the same ``n`` images (rows), possibly of
different widths, as numpy arrays or torch tensors. They are validated once here and turned
into float64 torch tensors on a common device: numpy inputs are computed on the CPU, torch
inputs stay on their device (so passing CUDA tensors runs a measure on the GPU).

Bad input raises :class:`~rdx.errors.RDXInputError` saying what is wrong and how to fix it.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import validation as V
from ..errors import RDXInputError

#: Bytes of float64 temporaries one row block may hold (bounds the memory of block loops).
BLOCK_BYTES = 64 * 2**20

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def as_tensor_pair(X: Any, Y: Any, *, what: str, min_n: int = 4
                   ) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Validate two representations and return them as float64 tensors on one device.

    Parameters
    ----------
    X, Y : array-like or torch.Tensor of shape (n, p) and (n, q)
        Rows are the same images in both.
    what : str
        Name of the measure, used in error messages.
    min_n : int, default=4
        Fewest images the measure accepts.

    Returns
    -------
    X, Y : torch.Tensor, float64
        On the device of the first CUDA input, else on the CPU. Torch inputs keep their
        autograd graph (the cast is differentiable).
    numpy_in : bool
        True when neither input was a torch tensor.

    Raises
    ------
    RDXInputError
        Not 2-D, not real, different numbers of rows, fewer than ``min_n`` rows, NaN/inf
        values, magnitudes outside :data:`rdx.validation.SAFE_MAGNITUDE` (float64), no
        features, or a constant representation (all rows equal).
    """
    numpy_in = not (isinstance(X, torch.Tensor) or isinstance(Y, torch.Tensor))
    out = []
    for name, Z in (("X", X), ("Y", Y)):
        if not isinstance(Z, torch.Tensor):
            try:
                arr = np.asarray(Z)
            except (ValueError, TypeError) as exc:  # ragged lists and the like
                raise RDXInputError(f"{what} input {name} could not be read as an array: "
                                    f"{exc}") from None
            if arr.dtype.kind not in "biuf":
                raise RDXInputError(f"{what} input {name} has dtype {arr.dtype}; expected "
                                    "real numbers (an n_images × n_features array).")
            Z = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float64))
        if Z.ndim != 2:
            raise RDXInputError(
                f"{what} input {name} has shape {tuple(Z.shape)}; expected a 2-D "
                "n_images × n_features array"
                + (" (reshape a single feature with Z.reshape(-1, 1))." if Z.ndim == 1
                   else " (flatten per-image features with Z.reshape(len(Z), -1))."))
        if Z.is_complex() or not (Z.is_floating_point() or Z.dtype in _INT_DTYPES):
            raise RDXInputError(f"{what} input {name} has dtype {Z.dtype}; expected real "
                                "numbers.")
        out.append(Z)
    X, Y = out
    if X.shape[0] != Y.shape[0]:
        raise RDXInputError(
            f"{what} inputs have different numbers of images ({X.shape[0]} vs {Y.shape[0]}); "
            "rows must be the same images, in the same order, in both.")
    n = X.shape[0]
    if n < min_n:
        raise RDXInputError(
            f"{what} needs at least {min_n} images, got n={n}"
            + (" (the debiased HSIC estimator divides by n(n−3))." if min_n == 4
               and what.startswith("CKA") else "; use more images."))
    device = X.device if X.device.type != "cpu" else Y.device
    X = X.to(device=device, dtype=torch.float64)
    Y = Y.to(device=device, dtype=torch.float64)
    with torch.no_grad():
        for name, Z in (("X", X), ("Y", Y)):
            if Z.shape[1] == 0:
                raise RDXInputError(f"{what} input {name} has no features (shape "
                                    f"{tuple(Z.shape)}).")
            if not bool(torch.isfinite(Z).all()):
                bad = torch.nonzero(~torch.isfinite(Z).all(dim=1)).flatten()[:5].tolist()
                raise RDXInputError(
                    f"{what} input {name} contains NaN/inf values (first rows: {bad}); "
                    "remove those images from both representations or fix the features.")
            # values whose squares or fourth powers overflow (or underflow) float64 would
            # otherwise end as NaN scores or as "undefined"/"constant" messages
            V.check_magnitude(max(float(Z.max()), -float(Z.min())), f"{what} input {name}",
                              "float64")   # max and min: no n×d temporary
            if bool((Z == Z[:1]).all()):
                raise RDXInputError(
                    f"{what} input {name} is constant (all {n} images have the same "
                    "features), so it carries no similarity structure and the measure is "
                    "undefined. Check the layer choice or the feature extraction.")
    return X, Y, numpy_in


def _prefixed(check, *args: Any, what: str, **kw: Any) -> Any:
    """A check of :mod:`rdx.validation`, its message prefixed with the measure's name."""
    try:
        return check(*args, **kw)
    except RDXInputError as exc:
        raise RDXInputError(f"{what}: {exc}") from None


def check_k(k: Any, n: int, *, what: str) -> int:
    """Neighbourhood size: an integer with ``1 <= k <= n - 1`` (the image itself is excluded)."""
    k = _prefixed(V.check_int, k, "k", minimum=1, what=what)
    if k >= n:
        # k as the user set it (rdx similarity: --n-neighbors; rdx.validation.flag_names)
        raise RDXInputError(
            f"{what}: {V.shown_setting('k', k)} neighbours need at least {k + 1} images "
            f"(each image's own row is excluded), but there are n={n}; use "
            f"{V.shown_name('k')} <= {n - 1} or more images.")
    return k


def check_choice(value: Any, name: str, choices: tuple[str, ...], *, what: str) -> str:
    return _prefixed(V.check_choice, value, name, choices, what=what)


def check_positive(value: Any, name: str, *, what: str) -> float:
    return _prefixed(V.check_positive, value, name, what=what)


def block_rows(n_cols: int, bytes_per_entry: int = 8, budget: int = BLOCK_BYTES) -> int:
    """Rows per block so that a ``rows × n_cols`` temporary stays within ``budget`` bytes."""
    return int(max(1, budget // max(1, n_cols * bytes_per_entry)))


def center_columns(Z: torch.Tensor) -> torch.Tensor:
    """Column-centred copy (removes the mean image; differentiable)."""
    return Z - Z.mean(dim=0, keepdim=True)


def symmetric_gram(Z: torch.Tensor) -> torch.Tensor:
    """``Z Zᵀ`` (float64, n×n) from its upper-triangle row strips, mirrored.

    Only the blocks on and above the diagonal are multiplied (about half of a full GEMM);
    the lower triangle is copied from their transposes. The result is exactly symmetric.
    """
    n = Z.shape[0]
    G = torch.empty((n, n), dtype=Z.dtype, device=Z.device)
    step = max(256, block_rows(n))
    for s in range(0, n, step):
        e = min(n, s + step)
        G[s:e, s:] = Z[s:e] @ Z[s:].T
        blk = G[s:e, s:e]   # a GEMM need not round (i, j) and (j, i) identically
        blk.copy_(blk.triu() + blk.triu(1).T)
        if s > 0:
            G[s:e, :s] = G[:s, s:e].T
    return G


#: Multiply-adds below which :func:`serial_blas` keeps the BLAS on one thread.
SERIAL_BLAS_WORK = 5e7
_CONTROLLER: list[Any] = []


def serial_blas(work: float) -> Any:
    """A context in which the BLAS runs on one thread when ``work`` (multiply-adds) is
    below :data:`SERIAL_BLAS_WORK` (about 10 ms on one core), else a no-op.

    A small product gains nothing from a second thread, but on a loaded machine each
    threaded call waits until both threads get a core: a call of RSA at n = 200 took
    tens of milliseconds instead of one. The limit is restored on exit (threadpoolctl;
    the controller is built once per process).
    """
    from contextlib import nullcontext

    if work >= SERIAL_BLAS_WORK:
        return nullcontext()
    if not _CONTROLLER:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0].limit(limits=1, user_api="blas")
