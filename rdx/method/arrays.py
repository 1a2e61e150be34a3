"""Dense arrays of either library: numpy arrays on the CPU, torch tensors on a GPU.

The dense method runs on numpy arrays when it computes on the CPU, so that a CPU run never
imports torch (about 0.8 s, a third of a whole ``rdx explain`` at the paper's sizes), and on
torch tensors on CUDA. Its code is written once: arithmetic with Python's operators, which
both libraries share (``a *= 2``, ``a += b[:, None]``, ``a @ b``, slicing, ``a.T``), and the
few operations the two libraries spell differently through the functions below, which take
either kind of array and return the same kind (on the same device).

A torch tensor on the CPU is also accepted (the tests compare both kinds); whether an array
is a tensor is checked without importing torch.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

Array = Any  # np.ndarray | torch.Tensor


def is_tensor(a: object) -> bool:
    """Whether ``a`` is a torch tensor (False without importing torch when it is not loaded:
    then no tensor can exist)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


def on_gpu(a: object) -> bool:
    """Whether ``a`` is a tensor on a GPU (where the torch-only kernels run)."""
    return is_tensor(a) and a.device.type != "cpu"


def host(a: Array) -> np.ndarray:
    """``a`` as a numpy array in host memory (a view of CPU arrays and CPU tensors)."""
    return a.detach().cpu().numpy() if is_tensor(a) else np.asarray(a)


def like(values: Any, ref: Array, dtype: str | None = None) -> Array:
    """``values`` (numpy) as an array of ``ref``'s kind and device, optionally cast
    (``dtype``: "float32", "float64", "int64")."""
    if is_tensor(ref):
        import torch

        t = torch.as_tensor(np.asarray(values), device=ref.device)
        return t if dtype is None else t.to(getattr(torch, dtype))
    v = np.asarray(values)
    return v if dtype is None else v.astype(dtype, copy=False)


def empty(shape: tuple[int, ...], ref: Array, dtype: str = "float32") -> Array:
    """An uninitialised array of ``ref``'s kind and device."""
    if is_tensor(ref):
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=ref.device)
    return np.empty(shape, dtype=dtype)


def zeros(shape: tuple[int, ...], ref: Array, dtype: str = "float32") -> Array:
    """A zero array of ``ref``'s kind and device."""
    if is_tensor(ref):
        import torch

        return torch.zeros(shape, dtype=getattr(torch, dtype), device=ref.device)
    return np.zeros(shape, dtype=dtype)


def astype(a: Array, dtype: str) -> Array:
    """``a`` cast to ``dtype`` ("float32", "float64", "int64"); a copy unless it already is."""
    if is_tensor(a):
        import torch

        return a.to(getattr(torch, dtype))
    return a.astype(dtype, copy=False)


def copy(a: Array) -> Array:
    """A private copy."""
    return a.clone() if is_tensor(a) else a.copy()


def exp_(a: Array) -> Array:
    """``a ← exp(a)`` in place."""
    return a.exp_() if is_tensor(a) else np.exp(a, out=a)


def tanh_(a: Array) -> Array:
    """``a ← tanh(a)`` in place."""
    return a.tanh_() if is_tensor(a) else np.tanh(a, out=a)


def sqrt_(a: Array) -> Array:
    """``a ← √a`` in place."""
    return a.sqrt_() if is_tensor(a) else np.sqrt(a, out=a)


def clamp_nonnegative_(a: Array) -> Array:
    """``a ← max(a, +0.0)`` in place; never ``-0.0`` (sort keys read the sign bit)."""
    if is_tensor(a):
        return a.clamp_(min=0.0).abs_()
    np.maximum(a, 0.0, out=a)
    return np.abs(a, out=a)


def minimum(a: Array, b: Array, out: Array | None = None) -> Array:
    """Element-wise minimum (into ``out`` when given)."""
    if is_tensor(a):
        import torch

        return torch.minimum(a, b) if out is None else torch.minimum(a, b, out=out)
    return np.minimum(a, b, out=out)


def maximum(a: Array, b: Array, out: Array | None = None) -> Array:
    """Element-wise maximum (into ``out`` when given)."""
    if is_tensor(a):
        import torch

        return torch.maximum(a, b) if out is None else torch.maximum(a, b, out=out)
    return np.maximum(a, b, out=out)


def fill_diagonal_(a: Array, value: float) -> Array:
    """Set the main diagonal of a square matrix, in place."""
    if is_tensor(a):
        return a.fill_diagonal_(value)
    np.fill_diagonal(a, value)
    return a


def where_(a: Array, mask: Array, value: float) -> Array:
    """``a[mask] = value`` in place (``mask`` broadcast to ``a``'s shape)."""
    if is_tensor(a):
        return a.masked_fill_(mask, value)
    np.copyto(a, value, where=mask)
    return a


def take(a: Array, idx: Any, axis: int = 0) -> Array:
    """Rows (``axis=0``) or columns of ``a`` at the integer indices ``idx`` (a copy)."""
    if is_tensor(a):
        import torch

        return a.index_select(axis, torch.as_tensor(np.asarray(idx), device=a.device))
    return np.take(a, np.asarray(idx), axis=axis)


def row_sums64(a: Array) -> Array:
    """Sums over the last axis accumulated in float64 (no float64 copy of ``a`` on the CPU:
    numpy casts in small buffers)."""
    if is_tensor(a):
        return a.double().sum(dim=-1)
    return a.sum(axis=-1, dtype=np.float64)


#: Float64 elements of :func:`squared_norms`'s work buffer (2 MiB: stays in the CPU cache).
_NORM_BLOCK = 2**18


def squared_norms(X: Array) -> Array:
    """Row norms ``|x|²`` summed in float64, returned as float32.

    On the CPU the rows go through one small float64 buffer, a block at a time: each row's
    sum is the same to the last bit as over a float64 copy of all of ``X`` (einsum reduces
    every row on its own), without allocating and first-touching that copy (8·n·d bytes,
    most of the time this took inside a fit).
    """
    if is_tensor(X):
        return (X.double() ** 2).sum(1).float()
    n, d = X.shape
    out = np.empty(n, dtype=np.float32)
    step = max(1, _NORM_BLOCK // max(d, 1))
    buf = np.empty((min(step, n), d), dtype=np.float64)
    for s in range(0, n, step):
        block = buf[:min(step, n - s)]
        np.copyto(block, X[s:s + step])
        out[s:s + step] = np.einsum("ij,ij->i", block, block)
    return out
