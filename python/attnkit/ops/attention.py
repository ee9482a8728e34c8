"""Exact scaled dot-product attention (tiled, online softmax)."""

import math

import numpy as np

from attnkit import _core
from attnkit._validation import check_real, float_array
from attnkit.masking import check_key_lengths, check_mask, padding_lengths
from attnkit.ops._layout import batch_shape, check_qkv, operand

__all__ = ["scaled_dot_product_attention"]


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
    q, k, v, dtype = check_qkv(q, k, v)
    (nq, d), (nk, dv) = q.shape[-2:], v.shape[-2:]
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
    batch = batch_shape(q=q, k=k, v=v, mask=mask, bias=bias)
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
        q=operand(q, batch, dtype),
        k=operand(k, batch, dtype),
        mask=None if mask is None else operand(mask.view(np.uint8), batch, np.uint8),
        bias=None if bias is None else operand(bias, batch, dtype),
        key_lengths=lengths,
        causal=bool(causal),
        scale=scale,
    )
    need_lse = bool(return_weights)
    lse = np.empty((flat, nq), dtype=dtype) if need_lse else None
    _core.attention(v=operand(v, batch, dtype), out=out.reshape(flat, nq, dv), lse=lse, **operands)
    if not need_lse:
        return out
    weights = np.empty(batch + (nq, nk), dtype=dtype)
    _core.attention_weights(lse=lse, weights=weights.reshape(flat, nq, nk), **operands)
    return out, weights
