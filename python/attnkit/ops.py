"""Public array operations backed by the compiled kernels.

This layer validates, broadcasts and lays out arrays; the kernels assume valid input. Each function
has a NumPy twin of the same name in :mod:`attnkit.reference`.
"""

import math

import numpy as np

from attnkit import _core
from attnkit._validation import (
    check_dtype_choice,
    check_int,
    check_ndim,
    check_real,
    float_array,
)
from attnkit.masking import check_key_lengths, check_mask, padding_lengths

__all__ = ["log_softmax", "scaled_dot_product_attention", "sinusoidal_positions", "softmax"]


def softmax(x, axis=-1):
    """Softmax along ``axis``, computed stably (the maximum is subtracted first).

    ``softmax(x)_i = exp(x_i - max(x)) / sum_j exp(x_j - max(x))``.

    Parameters
    ----------
    x : array-like of float32 or float64
        Input; float16 is widened to float32. At least 1-D.
    axis : int, default=-1
        The axis to normalise over.

    Returns
    -------
    ndarray
        Same shape and dtype as ``x``. A slice of all ``-inf`` gives zeros (not NaN).

    Examples
    --------
    >>> import attnkit
    >>> attnkit.softmax([0.0, 0.0]).tolist()
    [0.5, 0.5]
    """
    return _softmax(x, axis, log=False)


def log_softmax(x, axis=-1):
    """Logarithm of :func:`softmax` along ``axis``: ``x_i - max(x) - log(sum_j exp(x_j - max(x)))``.

    Parameters
    ----------
    x : array-like of float32 or float64
        Input, at least 1-D.
    axis : int, default=-1
        The axis to normalise over.

    Returns
    -------
    ndarray
        Same shape and dtype as ``x``. A slice of all ``-inf`` stays ``-inf``.
    """
    return _softmax(x, axis, log=True)


def _softmax(x, axis, *, log):
    x = float_array(x, "x")
    check_ndim(x, "x", 1, "")
    axis = check_int(axis, "axis")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis must be in [{-x.ndim}, {x.ndim}) for x of shape {x.shape}, got {axis}")
    moved = np.moveaxis(x, axis, -1)
    n = moved.shape[-1]
    rows = np.ascontiguousarray(moved).reshape(math.prod(moved.shape[:-1]), n)
    out = np.empty_like(rows)
    _core.softmax(rows, out, log)
    return np.moveaxis(out.reshape(moved.shape), -1, axis)


def scaled_dot_product_attention(q, k, v, *, mask=None, key_lengths=None, causal=False, bias=None,
                                 scale=None, return_weights=False):
    """Exact scaled dot-product attention, tiled with an online softmax (O(N) extra memory).

    ``out[..., i, :] = sum_j w_ij v[..., j, :]`` with
    ``w_ij = softmax_j(scale * q_i . k_j + bias_ij)`` over the keys ``j`` that query ``i`` may see.

    Parameters
    ----------
    q : array-like of shape (..., Nq, d)
        Queries. float32 or float64 (float16 widens to float32; mixing float32 and float64 computes in
        float64). Any memory layout; leading (batch, head) dims broadcast like NumPy with those of
        ``k``, ``v``, ``mask`` and ``bias``.
    k : array-like of shape (..., Nk, d)
        Keys. Nk may differ from Nq (cross-attention).
    v : array-like of shape (..., Nk, dv)
        Values; dv may differ from d.
    mask : array-like of bool, broadcastable to (..., Nq, Nk), optional
        True where query i may attend to key j (as in PyTorch). A mask that is the same for every
        query and True-then-False along the keys is run as ``key_lengths`` (padded keys skipped).
    key_lengths : array-like of int, optional
        Per batch item, the number of real keys; keys ``j >= length`` are padding and are skipped, not
        computed. Its shape is a leading prefix of the batch dims, aligned from the left: ``(B,)``
        serves inputs of shape ``(B, H, N, d)``, ``(B, H)`` gives per-head lengths. Values in [0, Nk].
    causal : bool, default=False
        Query i sees key j only if ``j <= i + (Nk - Nq)`` (aligned at the end, as when decoding with a
        key/value cache; when Nk < Nq the first Nq - Nk queries see nothing).
    bias : array-like of float, broadcastable to (..., Nq, Nk), optional
        Added to the scaled logits (relative-position bias, ALiBi). Cast to the computation dtype.
    scale : float, optional
        Logit scale; default ``1 / sqrt(d)``.
    return_weights : bool, default=False
        Also return the attention weights. This is the only path that allocates an Nq x Nk array.

    Returns
    -------
    out : ndarray of shape (..., Nq, dv)
        A query that may see no key gets zeros (never NaN).
    weights : ndarray of shape (..., Nq, Nk)
        Only with ``return_weights=True``; zero at keys a query may not see.

    Notes
    -----
    NaN or inf in q, k or v reach only the outputs of the queries that see them.

    Examples
    --------
    >>> import numpy as np, attnkit
    >>> q = k = v = np.eye(2)
    >>> attnkit.scaled_dot_product_attention(q, k, v, causal=True).round(3).tolist()
    [[1.0, 0.0], [0.33, 0.67]]
    """
    q, k, v = (float_array(a, name) for a, name in ((q, "q"), (k, "k"), (v, "v")))
    for a, name, what in ((q, "q", "(..., Nq, d)"), (k, "k", "(..., Nk, d)"), (v, "v", "(..., Nk, dv)")):
        check_ndim(a, name, 2, what)
    dtype = np.result_type(q, k, v)
    (nq, d), (nk, dk), (nkv, dv) = q.shape[-2:], k.shape[-2:], v.shape[-2:]
    if d != dk:
        raise ValueError(f"q and k must have the same last dimension d, got q {q.shape} and k {k.shape}")
    if nk != nkv:
        raise ValueError(f"k and v must have the same number of keys Nk, got k {k.shape} and v {v.shape}")
    if d == 0:
        raise ValueError(f"q and k need at least one feature (d >= 1), got q {q.shape} and k {k.shape}")
    scale = 1.0 / math.sqrt(d) if scale is None else check_real(scale, "scale")
    if mask is not None:
        mask = check_mask(mask, nq, nk)
    if bias is not None:
        bias = float_array(bias, "bias").astype(dtype, copy=False)
        if bias.ndim < 2:
            bias = bias.reshape((1,) * (2 - bias.ndim) + bias.shape)
        if bias.shape[-2] not in (1, nq) or bias.shape[-1] not in (1, nk):
            raise ValueError(f"bias must broadcast to (..., Nq, Nk) = (..., {nq}, {nk}), got shape {bias.shape}")
        if bias.shape[-1] != nk:  # kernels read contiguous rows of keys
            bias = np.ascontiguousarray(np.broadcast_to(bias, bias.shape[:-1] + (nk,)))
    named = {"q": q, "k": k, "v": v, "mask": mask, "bias": bias}
    try:
        batch = np.broadcast_shapes(*(a.shape[:-2] for a in named.values() if a is not None))
    except ValueError:
        shapes = ", ".join(f"{n} {a.shape}" for n, a in named.items() if a is not None)
        raise ValueError(f"the leading (batch) dims of the inputs do not broadcast: {shapes}") from None
    lengths = None if key_lengths is None else check_key_lengths(key_lengths, batch, nk)
    if mask is not None:
        if mask.shape[-1] != nk:
            mask = np.ascontiguousarray(np.broadcast_to(mask, mask.shape[:-1] + (nk,)))
        padding = padding_lengths(mask, batch, nk)
        if padding is not None:
            lengths = padding if lengths is None else np.minimum(lengths, padding)
            mask = None
    flat = math.prod(batch)
    out = np.empty(batch + (nq, dv), dtype=dtype)
    operands = dict(
        q=_operand(q, batch, dtype),
        k=_operand(k, batch, dtype),
        mask=None if mask is None else _operand(mask.view(np.uint8), batch, np.uint8),
        bias=None if bias is None else _operand(bias, batch, dtype),
        key_lengths=lengths,
        causal=bool(causal),
        scale=scale,
    )
    need_lse = bool(return_weights)
    lse = np.empty((flat, nq), dtype=dtype) if need_lse else None
    _core.attention(v=_operand(v, batch, dtype), out=out.reshape(flat, nq, dv), lse=lse, **operands)
    if not need_lse:
        return out
    weights = np.empty(batch + (nq, nk), dtype=dtype)
    _core.attention_weights(lse=lse, weights=weights.reshape(flat, nq, nk), **operands)
    return out, weights


def _operand(a, batch, dtype):
    """(array, batch offsets, row stride) for the kernels: matrix b of the flattened broadcast batch
    starts offsets[b] elements into ``a``. Broadcast and strided batch dims are read in place; only a
    dtype change or non-contiguous rows cost a copy."""
    a = a.astype(dtype, copy=False)
    item = a.itemsize
    if (a.shape[-1] > 1 and a.strides[-1] != item) or any(s % item for s in a.strides):
        a = np.ascontiguousarray(a)
    lead = (1,) * (len(batch) - (a.ndim - 2)) + a.shape[:-2]
    strides = (0,) * (len(batch) - (a.ndim - 2)) + tuple(s // item for s in a.strides[:-2])
    offsets = np.zeros(batch, dtype=np.int64)
    for axis, (size, stride) in enumerate(zip(lead, strides)):
        if size > 1 and stride:
            shape = [1] * len(batch)
            shape[axis] = size
            offsets = offsets + np.arange(size, dtype=np.int64).reshape(shape) * stride
    row_stride = a.strides[-2] // item if a.shape[-2] > 1 else 0
    return a, np.ascontiguousarray(np.broadcast_to(offsets, batch).reshape(-1)), row_stride


def sinusoidal_positions(n, d, *, base=10000.0, start=0, dtype=np.float64):
    """Sinusoidal ("clock") positional encodings.

    ``P[t, 2k] = sin((start + t) w_k)``, ``P[t, 2k + 1] = cos((start + t) w_k)``,
    ``w_k = base ** (-2k / d)``. Each (sin, cos) pair rotates by the angle ``w_k`` from one position
    to the next, so ``P[t + 1] = M P[t]`` for a fixed block-rotation matrix ``M``.

    Parameters
    ----------
    n : int
        Number of positions (rows), >= 0.
    d : int
        Encoding width, even and >= 2.
    base : float, default=10000.0
        Wavelength base, > 0.
    start : int, default=0
        First position (for decoding step by step).
    dtype : {float32, float64}, default=float64
        Output dtype (angles are computed in float64 either way).

    Returns
    -------
    ndarray of shape (n, d)
    """
    n = check_int(n, "n", minimum=0)
    d = check_int(d, "d", minimum=2)
    if d % 2:
        raise ValueError(f"d must be even (sin/cos pairs), got {d}")
    base = check_real(base, "base", positive=True)
    start = check_int(start, "start", minimum=0)
    out = np.empty((n, d), dtype=check_dtype_choice(dtype, "dtype"))
    _core.positions(out, base, float(start))
    return out
