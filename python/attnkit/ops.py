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
from attnkit.feature_maps import fused_features, resolve_feature_map
from attnkit.masking import check_key_lengths, check_mask, padding_lengths

__all__ = [
    "LinearAttentionState",
    "linear_attention",
    "log_softmax",
    "random_fourier_features",
    "scaled_dot_product_attention",
    "sinusoidal_positions",
    "softmax",
]


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
    q, k, v, dtype = _check_qkv(q, k, v)
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
    batch = _batch_shape(q=q, k=k, v=v, mask=mask, bias=bias)
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


def linear_attention(q, k, v, *, feature_map="elu", causal=False, mask=None, key_lengths=None, eps=1e-6,
                     return_state=False):
    """Kernelized linear attention: O(N) time and memory in the sequence length.

    ``out_i = phi(q_i)^T S / (phi(q_i)^T Z)`` with ``S = sum_j phi(k_j) v_j^T`` and
    ``Z = sum_j phi(k_j)`` over the keys query i may see (Katharopoulos et al., 2020). With
    ``causal=True`` the sums run over ``j <= i`` (prefix sums ``S_i``, ``Z_i``, computed by chunks in
    C++ with the running state in float64, so the error does not grow with N).

    Parameters
    ----------
    q, k, v : array-like of shape (..., Nq, d), (..., Nk, d), (..., Nk, dv)
        As in :func:`scaled_dot_product_attention` (leading dims broadcast).
    feature_map : {"elu", "relu", "polynomial"} or FeatureMap, default="elu"
        The map phi (see :mod:`attnkit.feature_maps`), e.g. ``PositiveRandomFeatureMap(...)`` for
        Performer attention.
    causal : bool, default=False
        Query i sees keys j <= i. Needs Nq == Nk (decode step by step with
        :class:`LinearAttentionState`).
    mask : array-like of bool, broadcastable to (..., 1, Nk), optional
        Key-padding mask, True = may attend. A mask that differs between queries cannot be expressed
        through the shared sums and is refused.
    key_lengths : array-like of int, optional
        Keys ``j >= length`` are padding (shape: a leading prefix of the batch dims).
    eps : float, default=1e-6
        Denominator guard: a query whose normaliser ``phi(q_i)^T Z`` is <= eps (it sees no key, or a
        random-feature estimate came out non-positive) gets zeros instead of a division by ~0. A NaN
        normaliser stays NaN.
    return_state : bool, default=False
        With ``causal=True``, also return the :class:`LinearAttentionState` after the last row, to
        continue step by step.

    Returns
    -------
    out : ndarray of shape (..., Nq, dv)
    state : LinearAttentionState
        Only with ``return_state=True``.
    """
    q, k, v, dtype = _check_qkv(q, k, v)
    (nq, d), (nk, dv) = q.shape[-2:], v.shape[-2:]
    fm = resolve_feature_map(feature_map)
    eps = check_real(eps, "eps")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if mask is not None:
        mask = check_mask(mask, nq, nk)
        if mask.shape[-2] != 1 and nq != 1:
            raise ValueError(
                "linear attention takes key-padding masks only, broadcastable to (..., 1, Nk): "
                f"got mask shape {mask.shape}; use scaled_dot_product_attention for other masks"
            )
    if causal and nq != nk:
        raise ValueError(f"causal linear attention needs Nq == Nk, got q {q.shape} and k {k.shape}; "
                         "decode step by step with LinearAttentionState")
    if return_state and not causal:
        raise ValueError("return_state=True needs causal=True")
    batch = _batch_shape(q=q, k=k, v=v, mask=mask)
    keep = None
    if key_lengths is not None:
        lengths = check_key_lengths(key_lengths, batch, nk).reshape(batch + (1,))
        keep = np.arange(nk) < lengths
    if mask is not None:
        per_key = np.broadcast_to(mask[..., 0, :], batch + (nk,))
        keep = per_key if keep is None else keep & per_key
    phi_q = fm.queries(np.broadcast_to(q, batch + q.shape[-2:]).astype(dtype, copy=False))
    phi_k = fm.keys(np.broadcast_to(k, batch + k.shape[-2:]).astype(dtype, copy=False))
    v = np.broadcast_to(v, batch + v.shape[-2:]).astype(dtype, copy=False)
    if keep is not None:  # where, not multiply: a NaN at a padded key must not leak as 0 * NaN
        phi_k = np.where(keep[..., None], phi_k, 0)
        v = np.where(keep[..., None], v, 0)
    if causal:
        return _causal_linear(phi_q, phi_k, v, fm, eps, return_state)
    s = np.swapaxes(phi_k, -1, -2) @ v
    z = phi_k.sum(axis=-2)
    return _normalise(phi_q @ s, phi_q @ z[..., None], eps)


def _normalise(num, den, eps):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den <= eps, 0, num / den).astype(num.dtype, copy=False)


def _causal_linear(phi_q, phi_k, v, fm, eps, return_state):
    batch, (n, big_d), dv = phi_q.shape[:-2], phi_q.shape[-2:], v.shape[-1]
    flat = math.prod(batch)
    out = np.empty((flat, n, dv), phi_q.dtype)
    s = np.empty((flat, big_d, dv)) if return_state else None
    z = np.empty((flat, big_d)) if return_state else None
    _core.causal_linear_attention(
        *(np.ascontiguousarray(a).reshape(flat, n, -1) for a in (phi_q, phi_k, v)), out, eps, s, z)
    out = out.reshape(batch + (n, dv))
    if not return_state:
        return out
    return out, LinearAttentionState(fm, eps=eps, s=s.reshape(batch + (big_d, dv)), z=z.reshape(batch + (big_d,)))


class LinearAttentionState:
    """The running sums of causal linear attention, for decoding one position at a time.

    ``step(q_t, k_t, v_t)`` adds ``phi(k_t) v_t^T`` to ``S`` and ``phi(k_t)`` to ``Z`` (in float64) and
    returns ``phi(q_t)^T S / (phi(q_t)^T Z)``: row t of ``linear_attention(..., causal=True)`` with the
    same feature map. O(D * dv) per step, whatever the length so far.

    Parameters
    ----------
    feature_map : str or FeatureMap, default="elu"
        Must be the map (the same instance, for random maps) used for the earlier positions.
    eps : float, default=1e-6
        Denominator guard, as in :func:`linear_attention`.
    s, z : ndarray, optional
        Initial sums (..., D, dv) and (..., D), e.g. from ``linear_attention(..., return_state=True)``.
    """

    def __init__(self, feature_map="elu", *, eps=1e-6, s=None, z=None):
        self.feature_map = resolve_feature_map(feature_map)
        self.eps = check_real(eps, "eps")
        if (s is None) != (z is None):
            raise ValueError("s and z must be given together")
        self.s = None if s is None else np.array(s, dtype=np.float64)
        self.z = None if z is None else np.array(z, dtype=np.float64)

    def step(self, q, k, v):
        """Attend with query ``q`` (..., d) over every position so far plus (``k`` (..., d), ``v`` (..., dv)).

        Returns an array of shape (..., dv) in the inputs' dtype.
        """
        q, k, v, dtype = _check_qkv(*(np.asarray(a)[..., None, :] for a in (q, k, v)))
        fm = self.feature_map
        phi_q = fm.queries(q).astype(np.float64)[..., 0, :]
        phi_k = fm.keys(k).astype(np.float64)[..., 0, :]
        v = v.astype(np.float64)[..., 0, :]
        update = phi_k[..., :, None] * v[..., None, :]
        if self.s is None:
            self.s, self.z = np.zeros_like(update), np.zeros_like(phi_k)
        if self.s.shape != update.shape:
            raise ValueError(f"this state holds sums of shape {self.s.shape}; the step's phi(k) v^T has "
                             f"shape {update.shape} (batch shape or widths changed)")
        self.s += update
        self.z += phi_k
        num = np.einsum("...D,...Dv->...v", phi_q, self.s)
        den = np.einsum("...D,...D->...", phi_q, self.z)[..., None]
        return _normalise(num, den, self.eps).astype(dtype)


def random_fourier_features(x, weights, offsets=None, kind="cos"):
    """Random Fourier features, fused: one BLAS projection, then one SIMD pass for offset, cos/sin, scale.

    ``cos``:    ``sqrt(2 / D) cos(x W + b)`` (scikit-learn's RBFSampler map), D features;
    ``sincos``: ``sqrt(1 / D) [sin(x W + b), cos(x W + b)]`` (the course notes' map), 2D features.

    Parameters
    ----------
    x : array-like of shape (..., f)
    weights : array-like of shape (f, D)
        Frequencies (columns), e.g. ``N(0, 2 gamma)`` for the kernel ``exp(-gamma |x - y|^2)``.
    offsets : array-like of shape (D,), optional
        Phases b (uniform on [0, 2 pi) for ``cos``).
    kind : {"cos", "sincos"}, default="cos"

    Returns
    -------
    ndarray of shape (..., D) or (..., 2D), dtype of ``x`` and ``weights`` promoted.
    """
    x, weights = float_array(x, "x"), float_array(weights, "weights")
    check_ndim(x, "x", 1, "(..., f)")
    if weights.ndim != 2 or weights.shape[0] != x.shape[-1]:
        raise ValueError(f"weights must have shape (f, D) = ({x.shape[-1]}, D) for x of shape {x.shape}, "
                         f"got {weights.shape}")
    if kind not in ("cos", "sincos"):
        raise ValueError(f"kind must be 'cos' or 'sincos', got {kind!r}")
    dtype = np.result_type(x, weights)
    n_freq = weights.shape[1]
    if offsets is not None:
        offsets = float_array(offsets, "offsets").astype(dtype, copy=False)
        if offsets.shape != (n_freq,):
            raise ValueError(f"offsets must have shape (D,) = ({n_freq},), got {offsets.shape}")
    z = x.astype(dtype, copy=False) @ weights.astype(dtype, copy=False)
    scale = math.sqrt((2.0 if kind == "cos" else 1.0) / n_freq) if n_freq else 1.0
    return fused_features(z, kind, scale=scale, offset=offsets)


def _check_qkv(q, k, v):
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


def _batch_shape(**named):
    """Broadcast of the leading (batch) dims of the named arrays (None entries are skipped)."""
    present = {n: a for n, a in named.items() if a is not None}
    try:
        return np.broadcast_shapes(*(a.shape[:-2] for a in present.values()))
    except ValueError:
        shapes = ", ".join(f"{n} {a.shape}" for n, a in present.items())
        raise ValueError(f"the leading (batch) dims of the inputs do not broadcast: {shapes}") from None


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
