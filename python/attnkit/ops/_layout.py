"""Shared validation and memory layout of attention inputs (for the C++ operands)."""

import functools
import math
from typing import Any

import numpy as np

from attnkit._validation import check_ndim, check_out_rows, float_array


def check_qkv(q: Any, k: Any, v: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.dtype]:
    """Validate attention inputs; return them as float arrays and the computation dtype."""
    q, k, v = (float_array(a, name) for a, name in ((q, "q"), (k, "k"), (v, "v")))
    for a, name, what in ((q, "q", "(..., Nq, d)"), (k, "k", "(..., Nk, d)"), (v, "v", "(..., Nk, dv)")):
        check_ndim(a, name, 2, what)
    (d, dk), (nk, nkv) = (q.shape[-1], k.shape[-1]), (k.shape[-2], v.shape[-2])
    if d != dk:
        raise ValueError(f"q and k must have the same last dimension d, got q {q.shape} and k {k.shape}")
    if nk != nkv:
        raise ValueError(f"k and v must have the same number of keys Nk, got k {k.shape} and v {v.shape}")
    if d == 0:
        raise ValueError(f"q and k need at least one feature (d >= 1), got q {q.shape} and k {k.shape}")
    return q, k, v, np.result_type(q, k, v)


def describe_shapes(**named: np.ndarray | None) -> str:
    """"q (2, 3, 4), k (2, 5, 4)" for the named arrays (None entries are skipped), for messages."""
    return ", ".join(f"{n} {a.shape}" for n, a in named.items() if a is not None)


def batch_shape(**named: np.ndarray) -> tuple[int, ...]:
    """Broadcast of the leading (batch) dims of the named arrays (None entries are skipped)."""
    try:
        return np.broadcast_shapes(*(a.shape[:-2] for a in named.values() if a is not None))
    except ValueError:
        raise ValueError(f"the leading (batch) dims of the inputs do not broadcast: {describe_shapes(**named)}") \
            from None


def with_contiguous_rows(a: np.ndarray) -> np.ndarray:
    """``a``, or a C-contiguous copy when its rows are not contiguous or a stride is not a whole number
    of elements: the kernels read rows in place through element strides (negative ones included)."""
    item = a.itemsize
    if (a.shape[-1] > 1 and a.strides[-1] != item) or any(s % item for s in a.strides):
        return np.ascontiguousarray(a)
    return a


def operand(a: np.ndarray, batch: tuple[int, ...], dtype: Any) -> Any:
    """(array, batch offsets, row stride) for the kernels: matrix b of the flattened broadcast batch
    starts offsets[b] elements into ``a``. Broadcast and strided batch dims are read in place; only a
    dtype change or non-contiguous rows cost a copy."""
    a = with_contiguous_rows(a.astype(dtype, copy=False))
    item = a.itemsize
    lead = (1,) * (len(batch) - (a.ndim - 2)) + a.shape[:-2]
    strides = (0,) * (len(batch) - (a.ndim - 2)) + tuple(s // item for s in a.strides[:-2])
    row_stride = a.strides[-2] // item if a.shape[-2] > 1 else 0
    if math.prod(batch) <= _CACHED_OFFSETS_MAX:
        return a, _cached_offsets(lead, strides, batch), row_stride
    return a, _batch_offsets(lead, strides, batch), row_stride


def output_operand(out: Any, shape: tuple[int, ...], dtype: Any, what: str, name: str,
                   inputs: tuple[np.ndarray | None, ...]) -> Any:
    """The operand of an array a kernel writes in place: ``out`` exactly of ``shape`` (``what`` describes it) and
    ``dtype``, writeable, aligned, with contiguous rows that lie anywhere (a transposed view of a layer's heads),
    none of its elements written twice and none of ``inputs`` (read meanwhile) sharing its memory."""
    out = check_out_rows(out, shape, dtype, what, name=name)
    if out.size and not _disjoint(out):
        raise ValueError(f"{name} must not overlap itself (a broadcast or as_strided view), got strides {out.strides}")
    if any(a is not None and _overlap(out, a) for a in inputs):
        raise ValueError(f"{name} must not share memory with the inputs or the other outputs")
    return operand(out, shape[:-2], dtype)


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` share an element: exactly (the heads of one fused buffer interleave without sharing),
    and True where that is too hard to tell quickly."""
    try:
        return bool(np.shares_memory(a, b, max_work=10_000))  # type: ignore[arg-type]  # NumPy's stubs: -1 or 0
    except np.exceptions.TooHardError:
        return True


def _disjoint(a: np.ndarray) -> bool:
    """True when the strides of ``a`` nest (each, in absolute value, at least the span of the smaller ones), so that
    no two of its elements share memory."""
    span = a.itemsize
    for stride, size in sorted((abs(s), n) for s, n in zip(a.strides, a.shape) if n > 1):
        if stride < span:
            return False
        span += stride * (size - 1)
    return True


def _batch_offsets(lead: tuple[int, ...], strides: tuple[int, ...], batch: tuple[int, ...]) -> np.ndarray:
    """Flat offsets (elements) of the matrices of a batch ``batch`` read from leading dims ``lead`` with
    element ``strides`` (size-1 and stride-0 dims broadcast)."""
    offsets = np.zeros(batch, dtype=np.int64)
    for axis, (size, stride) in enumerate(zip(lead, strides)):
        if size > 1 and stride:
            shape = [1] * len(batch)
            shape[axis] = size
            offsets = offsets + np.arange(size, dtype=np.int64).reshape(shape) * stride
    return np.ascontiguousarray(np.broadcast_to(offsets, batch).reshape(-1))


# Computing the offsets is most of an operand's cost (~5 of 7 us warm, more right after a kernel has
# flushed the caches) and a model repeats the same few layouts, so small ones are kept, read-only.
_CACHED_OFFSETS_MAX = 4096


@functools.lru_cache(maxsize=256)
def _cached_offsets(lead: tuple[int, ...], strides: tuple[int, ...], batch: tuple[int, ...]) -> np.ndarray:
    offsets = _batch_offsets(lead, strides, batch)
    offsets.flags.writeable = False
    return offsets


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the dims along which an input of ``shape`` was broadcast."""
    lead = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(lead))) if lead else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad
