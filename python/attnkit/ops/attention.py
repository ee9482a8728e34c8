"""Exact scaled dot-product attention (tiled, online softmax)."""

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._memory import UNCHECKED_BYTES, checked_empty
from attnkit._validation import check_bool, check_real, float_array
from attnkit.ops._layout import batch_shape, check_qkv, describe_shapes, operand, output_operand, unbroadcast
from attnkit.ops.masking import check_key_lengths, check_mask, check_window, padding_lengths

__all__ = ["AttentionContext", "scaled_dot_product_attention", "scaled_dot_product_attention_backward"]


def scaled_dot_product_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, mask: ArrayLike | None = None,
                                 key_lengths: ArrayLike | None = None, causal: bool = False,
                                 window: tuple[int | None, int | None] | None = None,
                                 bias: ArrayLike | None = None, scale: float | None = None,
                                 return_weights: bool = False, return_lse: bool = False,
                                 return_context: bool = False,
                                 out: np.ndarray | None = None) -> np.ndarray | tuple[Any, ...]:
    """Exact scaled dot-product attention, tiled with an online softmax (O(N) extra memory).

    ``out[..., i, :] = sum_j w_ij v[..., j, :]`` with
    ``w_ij = softmax_j(scale * dot(q_i, k_j) + bias_ij)`` over the keys ``j`` that query ``i`` may see.

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
    window : (left, right), optional
        A sliding window: query i sees key j only if ``i' - left <= j <= i' + right``, with
        ``i' = i + (Nk - Nq)`` its end-aligned position as for ``causal``; a side of None is unbounded.
        With ``causal=True``, ``window=(w, 0)`` (or ``(w, None)``) is "the last w + 1 keys". Key blocks
        outside every query's band are skipped, so time is O(N w), forward and backward.
    bias : array-like of float, broadcastable to (..., Nq, Nk), optional
        Added to the scaled logits (relative-position bias, ALiBi). Cast to the computation dtype.
    scale : float, optional
        Logit scale; default ``1 / sqrt(d)``.
    return_weights : bool, default=False
        Also return the attention weights. This is the only path that allocates an Nq x Nk array.
    return_lse : bool, default=False
        Also return the log-sum-exp of each query's visible logits (``-inf`` where it sees nothing):
        what :func:`scaled_dot_product_attention_backward` needs.
    return_context : bool, default=False
        Also return an :class:`AttentionContext`, whose ``backward(dout)`` gives the gradients without
        checking and laying out the inputs a second time (a training step's backward).
    out : ndarray of shape (..., Nq, dv), optional
        Written in place and returned: exactly the broadcast batch shape and the computation dtype,
        writeable, with contiguous rows that may lie anywhere (``heads.swapaxes(-2, -3)`` of a
        (B, N, H, dv) buffer, so that the heads come out merged for the output projection), sharing no
        memory with the inputs.

    Returns
    -------
    out : ndarray of shape (..., Nq, dv)
        A query that may see no key gets zeros (never NaN).
    weights : ndarray of shape (..., Nq, Nk)
        Only with ``return_weights=True``; zero at keys a query may not see.
    lse : ndarray of shape (..., Nq)
        Only with ``return_lse=True`` (after ``weights`` when both are asked for).
    context : AttentionContext
        Only with ``return_context=True`` (last).

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
    return_weights, return_lse = check_bool(return_weights, "return_weights"), check_bool(return_lse, "return_lse")
    return_context = check_bool(return_context, "return_context")
    p = _Problem(q, k, v, mask, key_lengths, causal, window, bias, scale)
    # Checked before any work: the weights are the one output that grows as Nq x Nk.
    weights = checked_empty(p.batch + (p.nq, p.nk), p.dtype, "return_weights=True: the weights") \
        if return_weights else None
    if out is None:
        out = checked_empty(p.batch + (p.nq, p.dv), p.dtype, "the output", unchecked_bytes=UNCHECKED_BYTES)
        target = operand(out, p.batch, p.dtype)
    else:
        target = output_operand(out, p.batch + (p.nq, p.dv), p.dtype, "(..., Nq, dv)", "out", p.inputs)
    lse = np.empty((p.flat, p.nq), dtype=p.dtype) if (return_weights or return_lse or return_context) else None
    _core.attention(v=p.v, out=target[0], out_offsets=target[1], out_row_stride=target[2], nq=p.nq, dv=p.dv, lse=lse,
                    **p.operands)
    result: tuple[Any, ...] = (out,)
    if weights is not None and lse is not None:
        _core.attention_weights(lse=lse, weights=weights.reshape(p.flat, p.nq, p.nk), **p.operands)
        result += (weights,)
    if return_lse and lse is not None:
        result += (lse.reshape(p.batch + (p.nq,)),)
    if return_context and lse is not None:
        result += (AttentionContext(p, target, lse),)
    return result if len(result) > 1 else out


def scaled_dot_product_attention_backward(dout: ArrayLike, q: ArrayLike, k: ArrayLike, v: ArrayLike, out: ArrayLike,
                                          lse: ArrayLike, *, mask: ArrayLike | None = None,
                                          key_lengths: ArrayLike | None = None, causal: bool = False,
                                          window: tuple[int | None, int | None] | None = None,
                                          bias: ArrayLike | None = None, scale: float | None = None,
                                          bias_grad: bool = False) -> tuple[np.ndarray, ...]:
    """Gradients of :func:`scaled_dot_product_attention` with respect to q, k, v (and bias).

    Flash-style: the logits are recomputed block by block from ``lse`` (returned by the forward with
    ``return_lse=True``), so no Nq x Nk buffer is kept unless ``bias_grad=True`` (whose result is one).

    Parameters
    ----------
    dout : array-like of shape (..., Nq, dv)
        Gradient of the loss with respect to the forward output.
    q, k, v, mask, key_lengths, causal, window, bias, scale :
        The forward's arguments, unchanged.
    out : ndarray of shape (..., Nq, dv)
        The forward's output.
    lse : ndarray of shape (..., Nq)
        The forward's log-sum-exp per query (``return_lse=True``).
    bias_grad : bool, default=False
        Also return the gradient with respect to ``bias``.

    Returns
    -------
    dq, dk, dv : ndarrays shaped like q, k, v
        Summed over the dims along which an input was broadcast. Keys a query cannot see and queries
        that see nothing get zero gradient.
    dbias : ndarray shaped like bias
        Only with ``bias_grad=True`` (requires ``bias``).
    """
    bias_grad = check_bool(bias_grad, "bias_grad")
    p = _Problem(q, k, v, mask, key_lengths, causal, window, bias, scale)
    _check_bias_grad(bias_grad, p)
    dout = _checked_dout(dout, p)
    out = _read_operand(out, p.batch + (p.nq, p.dv), p, "out")
    lse = _exact_layout(float_array(lse, "lse"), p.batch + (p.nq,), p.dtype, "lse").reshape(p.flat, p.nq)
    return _backward(p, dout, out, lse, bias_grad)


class AttentionContext:
    """What :func:`scaled_dot_product_attention` checked and computed, kept for the backward.

    Returned by ``scaled_dot_product_attention(..., return_context=True)``. It holds the validated
    problem (q, k, v, mask and bias as laid out for the kernels, the key lengths merged with a
    padding mask, causal, window, scale), the output and each query's log-sum-exp, so that :meth:`backward`
    runs the backward kernel at once: a training step checks its inputs once, not twice.

    It refers to the forward's arrays (copies only where a layout needed one), the output included:
    do not use it after any of them was modified in place.
    """

    def __init__(self, problem: "_Problem", out: Any, lse: np.ndarray) -> None:
        self._problem, self._out, self._lse = problem, out, lse  # out: the kernel's operand of the output

    def backward(self, dout: ArrayLike, *, bias_grad: bool = False,
                 out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
        """Gradients with respect to q, k, v (and bias): those of
        :func:`scaled_dot_product_attention_backward` with the forward's arguments, bit for bit.

        Parameters
        ----------
        dout : array-like of shape (..., Nq, dv)
            Gradient of the loss with respect to the forward's output.
        bias_grad : bool, default=False
            Also return the gradient with respect to ``bias`` (the forward must have had one).
        out : (dq, dk, dv) ndarrays, optional
            Written in place and returned: each exactly the shape of q, k, v (which must not have been
            broadcast: such an input's gradient is a sum) and of the computation dtype, writeable, with
            contiguous rows that may lie anywhere (a layer writes them into its fused projection's
            gradient), sharing no memory with each other or the problem's arrays.

        Returns
        -------
        dq, dk, dv : ndarrays shaped like q, k, v
            Summed over the dims along which an input was broadcast.
        dbias : ndarray shaped like bias
            Only with ``bias_grad=True``.
        """
        bias_grad = check_bool(bias_grad, "bias_grad")
        p = self._problem
        _check_bias_grad(bias_grad, p)
        read = _checked_dout(dout, p)
        targets = None if out is None else _gradient_targets(out, p, (read[0], self._out[0]))
        return _backward(p, read, self._out, self._lse, bias_grad, targets)


def _check_bias_grad(bias_grad, p):
    if bias_grad and p.bias_shape is None:
        raise ValueError("bias_grad=True needs the bias the forward was given")


def _checked_dout(dout, p):
    """``dout`` as the kernel's operand, read in place (a copy only for another dtype or non-contiguous rows)."""
    return _read_operand(dout, p.batch + (p.nq, p.dv), p, "dout")


def _read_operand(a, shape, p, name):
    """``a`` broadcast to ``shape`` as an operand of the problem's dtype, read in place where its layout allows."""
    try:
        a = np.broadcast_to(float_array(a, name), shape)
    except ValueError:
        raise ValueError(f"{name} must have shape {shape}, got {np.shape(a)}") from None
    return operand(a, p.batch, p.dtype)


def _gradient_targets(out, p, reads):
    """The operands of the caller's (dq, dk, dv) for the kernel to write while it reads the problem's arrays and
    ``reads``."""
    if not (isinstance(out, tuple) and len(out) == 3):
        raise TypeError(f"out must be a tuple (dq, dk, dv) of numpy arrays, got {type(out).__name__}")
    full = {"q": p.batch + (p.nq, p.d), "k": p.batch + (p.nk, p.d), "v": p.batch + (p.nk, p.dv)}
    if any(p.shapes[name] != shape for name, shape in full.items()):
        raise ValueError(f"out=(dq, dk, dv) needs q, k and v of the full batch shape {p.batch} (a broadcast input's "
                         f"gradient is a sum), got " + ", ".join(f"{n} {shape}" for n, shape in p.shapes.items()))
    targets, written = [], []  # type: list[Any], list[np.ndarray]
    for a, name in zip(out, ("q", "k", "v")):
        targets.append(output_operand(a, full[name], p.dtype, f"like {name}", f"out d{name}",
                                      p.inputs + reads + tuple(written)))
        written.append(a)
    return targets


def _backward(p, dout, out, lse, bias_grad, targets=None):
    """The backward kernel on a checked problem: dout and out as operands, lse flat and C-contiguous, and
    the operands of (dq, dk, dv) to write (None: new arrays, summed over broadcast dims)."""
    if targets is None:
        fresh = [np.empty(p.batch + shape, p.dtype) for shape in ((p.nq, p.d), (p.nk, p.d), (p.nk, p.dv))]
        targets = [operand(g, p.batch, p.dtype) for g in fresh]
    dbias = checked_empty((p.flat, p.nq, p.nk), p.dtype, "bias_grad=True: dbias") if bias_grad else None
    dq, dk, dv = targets
    _core.attention_backward(v=p.v, lse=lse, dout=dout, out=out, dq=dq, dk=dk, dv=dv, batch=p.flat, nq=p.nq,
                             dv_width=p.dv, dbias=dbias, **p.operands)
    grads = [unbroadcast(g[0], shape) for g, shape in zip(targets, (p.shapes["q"], p.shapes["k"], p.shapes["v"]))]
    if dbias is not None:
        grads.append(unbroadcast(dbias.reshape(p.batch + (p.nq, p.nk)), p.bias_shape))
    return tuple(grads)


class _Problem:
    """A validated attention problem: shapes, dtype, broadcast batch and the kernels' operands."""

    def __init__(self, q, k, v, mask, key_lengths, causal, window, bias, scale):
        q, k, v, dtype = check_qkv(q, k, v)
        window_left, window_right = check_window(window)
        self.shapes = {"q": q.shape, "k": k.shape, "v": v.shape}
        self.bias_shape = None
        (nq, d), (nk, dv) = q.shape[-2:], v.shape[-2:]
        scale = 1.0 / math.sqrt(d) if scale is None else check_real(scale, "scale")
        sizes_from = describe_shapes(q=q, k=k)  # where Nq and Nk come from, for the messages
        if mask is not None:
            mask = check_mask(mask, nq, nk, sizes_from)
        if bias is not None:
            bias = float_array(bias, "bias").astype(dtype, copy=False)
            self.bias_shape = bias.shape
            if bias.ndim < 2:
                bias = bias.reshape((1,) * (2 - bias.ndim) + bias.shape)
            if bias.shape[-2] not in (1, nq) or bias.shape[-1] not in (1, nk):
                raise ValueError(f"bias must broadcast to (..., Nq, Nk) = (..., {nq}, {nk}) of {sizes_from}, "
                                 f"got shape {bias.shape}")
            if bias.shape[-1] != nk:  # kernels read contiguous rows of keys
                bias = np.ascontiguousarray(np.broadcast_to(bias, bias.shape[:-1] + (nk,)))
        batch = batch_shape(q=q, k=k, v=v, mask=mask, bias=bias)
        lengths = None if key_lengths is None else check_key_lengths(
            key_lengths, batch, nk, describe_shapes(q=q, k=k, v=v, mask=mask, bias=bias))
        if mask is not None:
            if mask.shape[-1] != nk:
                mask = np.ascontiguousarray(np.broadcast_to(mask, mask.shape[:-1] + (nk,)))
            padding = padding_lengths(mask, batch, nk)
            if padding is not None:
                lengths = padding if lengths is None else np.minimum(lengths, padding)
                mask = None
        self.dtype, self.batch, self.flat = dtype, batch, math.prod(batch)
        self.nq, self.nk, self.d, self.dv = nq, nk, d, dv
        self.v = operand(v, batch, dtype)
        self.inputs = (q, k, v, mask, bias)  # what an output written in place must not overlap
        self.operands = dict(
            q=operand(q, batch, dtype),
            k=operand(k, batch, dtype),
            mask=None if mask is None else operand(mask.view(np.uint8), batch, np.uint8),
            bias=None if bias is None else operand(bias, batch, dtype),
            key_lengths=lengths,
            causal=check_bool(causal, "causal"),
            window_left=window_left,
            window_right=window_right,
            scale=scale,
        )


def _exact_layout(a: np.ndarray, shape: tuple[int, ...], dtype: Any, name: str) -> np.ndarray:
    """``a`` with exactly ``shape`` (broadcast), C-contiguous and of ``dtype``."""
    try:
        a = np.broadcast_to(a, shape)
    except ValueError:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}") from None
    return np.ascontiguousarray(a, dtype=dtype)
