"""Exact self-attention over sequences packed end to end (no padding rows)."""

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import as_array, check_bool, check_int, check_out, check_real, float_array
from attnkit.ops._layout import with_contiguous_rows

__all__ = ["packed_attention"]


def packed_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, lengths: ArrayLike, *, n_heads: int,
                     causal: bool = False, scale: float | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """Multi-head self-attention of sequences stored one after the other, with no padding.

    The rows of ``q``, ``k`` and ``v`` are the tokens of every sequence, sequence by sequence:
    sequence ``s`` owns the ``lengths[s]`` rows that follow those of sequences ``0 .. s-1``. Each
    token attends to the tokens of its own sequence only (and, if ``causal``, to those at or before
    its position). This is the layout an encoder runs its projections in when it computes over real
    tokens only: no padded row is stored, computed or written, and the heads are read and written in
    place, in the projections' ``(tokens, heads * width)`` layout.

    The result equals :func:`scaled_dot_product_attention` on the padded ``(S, n_heads, N, d)``
    layout with ``key_lengths=lengths``, at the real tokens, bit for bit (same kernel, same order of
    roundings). Forward only: there is no backward.

    Parameters
    ----------
    q, k : array-like of float32 or float64, shape (T, n_heads * d)
        Queries and keys of the ``T = sum(lengths)`` tokens; head ``h`` in columns ``h*d:(h+1)*d``.
        Each may be a column slice of a wider array, e.g. of one fused Q/K/V projection
        ``qkv[:, :H*d]``: rows are read in place whatever their distance apart, negative included
        (copied only when a row is not contiguous). float16 widens to float32; mixed dtypes compute in the wider one.
    v : array-like of float, shape (T, n_heads * dv)
        Values; dv may differ from d.
    lengths : array-like of int, shape (S,)
        Tokens of each sequence, >= 0, summing to T.
    n_heads : int
        Heads the columns are split into (>= 1; it must divide the widths of q, k and v).
    causal : bool, default=False
        Token ``i`` of a sequence sees token ``j`` of it only if ``j <= i``.
    scale : float, optional
        Logit scale; default ``1 / sqrt(d)``.
    out : ndarray, shape (T, n_heads * dv), optional
        C-contiguous array of the computation dtype to write the result into (reused between calls).

    Returns
    -------
    out : ndarray of shape (T, n_heads * dv)
        Head ``h`` of token ``t`` in columns ``h*dv:(h+1)*dv``: the heads merged, ready for the output
        projection.

    Examples
    --------
    >>> import numpy as np, attnkit
    >>> x = np.eye(3)  # a sequence of 2 tokens, then one of 1
    >>> attnkit.ops.packed_attention(x, x, x, [2, 1], n_heads=1).round(3).tolist()
    [[0.64, 0.36, 0.0], [0.36, 0.64, 0.0], [0.0, 0.0, 1.0]]
    """
    n_heads = check_int(n_heads, "n_heads", minimum=1)
    causal = check_bool(causal, "causal")
    arrays = [float_array(a, name) for a, name in ((q, "q"), (k, "k"), (v, "v"))]
    for a, name in zip(arrays, "qkv"):
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D (tokens, n_heads * width), got shape {a.shape}")
        if a.shape[1] % n_heads:
            raise ValueError(f"the width of {name} ({a.shape[1]}) must be a multiple of n_heads={n_heads}")
    tokens = arrays[0].shape[0]
    if any(a.shape[0] != tokens for a in arrays):
        raise ValueError("q, k and v must have one row per token, got shapes "
                         + ", ".join(f"{n} {a.shape}" for n, a in zip("qkv", arrays)))
    d, dv = arrays[0].shape[1] // n_heads, arrays[2].shape[1] // n_heads
    if arrays[1].shape[1] // n_heads != d:
        raise ValueError(f"q and k must have the same width, got q {arrays[0].shape} and k {arrays[1].shape}")
    if d == 0:
        raise ValueError(f"q and k need at least one feature per head, got q {arrays[0].shape}")
    lengths = _check_lengths(lengths, tokens)
    dtype = np.result_type(*arrays)
    scale = 1.0 / math.sqrt(d) if scale is None else check_real(scale, "scale")
    shape = (tokens, n_heads * dv)
    out = np.empty(shape, dtype) if out is None else check_out(out, shape, dtype, "(T, n_heads * dv)")
    if any(np.may_share_memory(out, a) for a in arrays):
        raise ValueError("out must not share memory with q, k or v: later queries would read what was written")
    if tokens == 0 or dv == 0:
        return out
    # Item (s, h) of the flat batch: head h of sequence s, starting starts[s] rows into each array.
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    operands = dict(zip("qkv", (_operand(a.astype(dtype, copy=False), starts, n_heads) for a in arrays)))
    out_offsets = np.ascontiguousarray((starts[:, None] * out.shape[1] + np.arange(n_heads) * dv).reshape(-1))
    _core.packed_attention(lengths=np.repeat(lengths, n_heads), causal=causal, window_left=-1, window_right=-1,
                           scale=scale, d=d, dv=dv, out=out,
                           out_offsets=out_offsets, **operands)
    return out


def _check_lengths(lengths: Any, tokens: int) -> np.ndarray:
    lengths = as_array(lengths, "lengths")
    if lengths.size == 0 and lengths.dtype.kind == "f":  # np.asarray([]) is float64
        lengths = lengths.astype(np.int64)
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"lengths must be an integer array, got dtype {lengths.dtype}")
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D (one length per sequence), got shape {lengths.shape}")
    if lengths.size and lengths.min() < 0:
        raise ValueError(f"lengths must be >= 0, got {lengths.min()}")
    if lengths.sum() != tokens:
        raise ValueError(f"lengths must sum to the number of rows of q, k and v ({tokens}), got {lengths.sum()}")
    return lengths.astype(np.int64)


def _operand(a: np.ndarray, starts: np.ndarray, n_heads: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(array, offset of each (sequence, head) item, row stride) for the kernel, reading ``a`` in place."""
    a = with_contiguous_rows(a)
    row_stride = a.strides[0] // a.itemsize
    width = a.shape[1] // n_heads
    offsets = (starts[:, None] * row_stride + np.arange(n_heads) * width).reshape(-1)
    return a, np.ascontiguousarray(offsets, dtype=np.int64), row_stride
