"""Reference exact attention (the full weight matrix) and kernel attention."""

import numpy as np

from attnkit.reference._common import attention_mask, result_dtype
from attnkit.reference.softmax import softmax

__all__ = [
    "argmax_attention",
    "kernel_attention",
    "packed_attention",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
]


def scaled_dot_product_attention(
    q,
    k,
    v,
    *,
    mask=None,
    key_lengths=None,
    causal=False,
    window=None,
    bias=None,
    scale=None,
    return_weights=False,
):
    r"""Exact softmax attention, materialising the full weight matrix.

    .. math::
        L = \text{scale}\; q k^T + \text{bias}, \qquad
        W = \operatorname{softmax}_j(L \text{ where visible, else } -\infty), \qquad
        \text{out} = W v

    with visibility from :func:`attention_mask`. A query row with no visible key has a zero
    row in ``W`` and hence a zero output.

    Parameters
    ----------
    q : array_like of float, shape (..., Nq, d)
        Queries.
    k : array_like of float, shape (..., Nk, d)
        Keys.
    v : array_like of float, shape (..., Nk, dv)
        Values.
    mask : array_like of bool, optional
        Broadcastable to ``(..., Nq, Nk)``; True means "may attend".
    key_lengths : array_like of int, optional
        Key ``j`` is visible iff ``j < key_lengths[b...]``; its shape is a leading prefix of the
        broadcast batch dims, aligned from the left. Values in ``[0, Nk]``.
    causal : bool, default=False
        Query ``i`` sees key ``j`` iff ``j <= i + Nk - Nq``.
    window : (left, right), optional
        Query ``i`` sees key ``j`` iff ``i' - left <= j <= i' + right``, ``i' = i + Nk - Nq``; a side of
        None is unbounded.
    bias : array_like of float, optional
        Broadcastable to ``(..., Nq, Nk)``; added to the scaled logits.
    scale : float, optional
        Logit scale; defaults to ``1 / sqrt(d)``.
    return_weights : bool, default=False
        Also return ``W``.

    Returns
    -------
    out : ndarray, shape (..., Nq, dv)
        The leading dims are those of q, k, v, mask and bias broadcast together. float32 if all
        of q, k, v are float32 (or float16), float64 otherwise.
    weights : ndarray, shape (..., Nq, Nk)
        Only when ``return_weights`` is True.
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dtype = result_dtype(q=q, k=k, v=v)
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    if d == 0:
        raise ValueError("q and k must have a last dimension d >= 1, got d == 0")
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)

    extras = [np.asarray(a) for a in (mask, bias) if a is not None]
    batch_shape = np.broadcast_shapes(
        *(a.shape[:-2] for a in (q, k, v)), *(a.shape[:-2] for a in extras)
    )
    visible = attention_mask(
        nq, nk, mask=mask, key_lengths=key_lengths, causal=causal, window=window, batch_shape=batch_shape
    )

    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    with np.errstate(invalid="ignore", over="ignore"):
        logits = scale * (q64 @ np.swapaxes(k64, -1, -2))
        if bias is not None:
            logits = logits + np.asarray(bias, dtype=np.float64)
        weights = softmax(np.where(visible, logits, -np.inf))
        if np.all(np.isfinite(v64)):
            out = weights @ v64
        else:
            # 0 * inf = nan: a key a row cannot see must not reach it even through its value.
            terms = weights[..., :, :, None] * v64[..., None, :, :]
            out = np.where(visible[..., None], terms, 0.0).sum(axis=-2)
    out = out.astype(dtype)
    if return_weights:
        return out, weights.astype(dtype)
    return out


def packed_attention(q, k, v, lengths, *, n_heads, causal=False, scale=None):
    """Self-attention of sequences packed end to end: each sequence's rows of ``q``, ``k``, ``v``
    (shape ``(T, n_heads * width)``, sequence ``s`` owning the ``lengths[s]`` rows after those of the
    sequences before it) split into heads and attended on their own, the heads merged back.

    Returns
    -------
    out : ndarray, shape (T, n_heads * dv)
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dtype = result_dtype(q=q, k=k, v=v)
    dv = v.shape[1] // n_heads
    out = np.zeros((q.shape[0], n_heads * dv), dtype=dtype)
    start = 0
    for n in np.asarray(lengths, dtype=np.int64):
        rows = slice(start, start + n)
        if n:
            heads = [a[rows].reshape(n, n_heads, -1).swapaxes(0, 1) for a in (q, k, v)]  # (H, n, width)
            o = scaled_dot_product_attention(*heads, causal=causal, scale=scale)
            out[rows] = o.swapaxes(0, 1).reshape(n, n_heads * dv)
        start += n
    return out


def argmax_attention(q, k, v, *, mask=None, key_lengths=None, causal=False, window=None, bias=None, scale=None):
    """Argmax attention from the full logit matrix: each query takes the value row of its visible key of the
    largest logit (``np.argmax``: the first among equals); zeros where no visible logit exceeds -inf, NaN where
    a visible logit is NaN."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dtype = result_dtype(q=q, k=k, v=v)
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    extras = [np.asarray(a) for a in (mask, bias) if a is not None]
    batch_shape = np.broadcast_shapes(*(a.shape[:-2] for a in (q, k, v)), *(a.shape[:-2] for a in extras))
    visible = attention_mask(nq, nk, mask=mask, key_lengths=key_lengths, causal=causal, window=window,
                             batch_shape=batch_shape)
    with np.errstate(invalid="ignore", over="ignore"):
        logits = scale * (q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), -1, -2))
        if bias is not None:
            logits = logits + np.asarray(bias, dtype=np.float64)
    if nk == 0:
        return np.zeros(batch_shape + (nq, v.shape[-1]), dtype)
    logits = np.broadcast_to(logits, batch_shape + (nq, nk))
    poisoned = np.any(visible & np.isnan(logits), axis=-1)
    candidates = np.where(visible & ~np.isnan(logits), logits, -np.inf)
    best = np.argmax(candidates, axis=-1)[..., None]
    found = np.take_along_axis(candidates, best, axis=-1) > -np.inf
    values = np.broadcast_to(v, batch_shape + v.shape[-2:]).astype(np.float64)
    out = np.where(found, np.take_along_axis(values, best, axis=-2), 0.0)
    out = np.where(poisoned[..., None], np.nan, out)
    return out.astype(dtype)


def scaled_dot_product_attention_backward(dout, q, k, v, out=None, lse=None, *, mask=None, key_lengths=None,
                                          causal=False, window=None, bias=None, scale=None, bias_grad=False):
    r"""Gradients of exact attention, from the full weight matrix (``out`` and ``lse`` are unused).

    .. math::
        dV = W^T dO, \quad dW = dO\, V^T, \quad dL = W \odot (dW - \operatorname{rowsum}(dW \odot W)),
        \quad dQ = \text{scale}\; dL\, K, \quad dK = \text{scale}\; dL^T Q, \quad d\text{bias} = dL

    Each gradient is summed over the dims along which its input was broadcast.
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dtype = result_dtype(q=q, k=k, v=v)
    d = q.shape[-1]
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    _, w = scaled_dot_product_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), mask=mask,
                                        key_lengths=key_lengths, causal=causal, window=window, bias=bias,
                                        scale=scale, return_weights=True)
    dout = np.asarray(dout, dtype=np.float64)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    dv = np.swapaxes(w, -1, -2) @ dout
    dw = dout @ np.swapaxes(v64, -1, -2)
    dl = w * (dw - np.sum(dw * w, axis=-1, keepdims=True))
    dq = scale * dl @ k64
    dk = scale * np.swapaxes(dl, -1, -2) @ q64
    grads = [_sum_to(g, np.shape(a)).astype(dtype) for g, a in ((dq, q), (dk, k), (dv, v))]
    if bias_grad:
        grads.append(_sum_to(dl, np.shape(bias)).astype(dtype))
    return tuple(grads)


def _sum_to(grad, shape):
    lead = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(lead))) if lead else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad


def kernel_attention(q, k, v, similarity, *, mask=None, key_lengths=None, causal=False, eps=1e-6,
                     magnitude=None):
    r"""Attention with an arbitrary similarity, materialising the Nq x Nk matrix.

    .. math:: \text{out}_i = \frac{\sum_j A_{ij} v_j}{\sum_j A_{ij}}, \qquad
              A_{ij} = \text{sim}(q_i, k_j) \text{ where visible, else } 0

    and zeros where the denominator is ``<= eps * mag_i`` (a relative guard, as
    :func:`attnkit.ops.linear_attention`); by default ``mag_i = sum_j |A_ij|``, so a non-negative
    similarity gives zeros only where the denominator is 0.

    Parameters
    ----------
    q, k, v : array_like, shapes (..., Nq, d), (..., Nk, d), (..., Nk, dv)
    similarity : callable
        ``similarity(q, k)`` -> (..., Nq, Nk) matrix, e.g. ``(q @ k^T + c) ** 2``.
    mask, key_lengths, causal :
        Visibility, as in :func:`attention_mask`.
    eps : float, default=1e-6
        Relative denominator guard.
    magnitude : callable, optional
        ``magnitude(q, k, visible)`` -> (..., Nq, 1), ``mag_i`` (float64 q and k, ``visible`` the
        (..., Nq, Nk) boolean mask), for a guard that is not ``sum_j |A_ij|``.
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dtype = result_dtype(q=q, k=k, v=v)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    sim = np.asarray(similarity(q64, k64), dtype=np.float64)
    extras = [np.asarray(mask).shape[:-2]] if mask is not None else []  # a mask may add batch dims (NumPy rules)
    batch_shape = np.broadcast_shapes(sim.shape[:-2], v.shape[:-2], *extras)
    visible = attention_mask(q.shape[-2], k.shape[-2], mask=mask, key_lengths=key_lengths, causal=causal,
                             batch_shape=batch_shape)
    a = np.where(visible, sim, 0.0)
    v64 = np.where(visible.any(axis=-2)[..., None], v64, 0.0)  # invisible keys: no 0 * NaN
    num, den = a @ v64, a.sum(axis=-1, keepdims=True)
    mag = np.abs(a).sum(axis=-1, keepdims=True) if magnitude is None else magnitude(q64, k64, visible)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den <= eps * mag, 0.0, num / den)
    return out.astype(dtype)
