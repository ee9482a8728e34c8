"""Plain NumPy references of the attnkit ops.

Each function has the signature and the semantics of its twin in :mod:`attnkit.ops` and is
written to be read: it materialises every intermediate (the full ``Nq x Nk`` weight matrix
included) and computes in float64. It is the oracle of the test-suite and a specification for
users, never a hot path. Only the checks needed to compute the right thing live here; argument
validation with helpful messages is the job of :mod:`attnkit.ops`.
"""

from math import comb

import numpy as np

__all__ = [
    "attention_mask",
    "feature_map_features",
    "kernel_attention",
    "linear_attention",
    "random_fourier_features",
    "log_softmax",
    "scaled_dot_product_attention",
    "sinusoidal_positions",
    "softmax",
]


def _result_dtype(**arrays):
    """Output dtype of an op: float32 or float64 (float16 -> float32, mixed -> float64)."""
    for name, a in arrays.items():
        if a.dtype.kind != "f":
            raise TypeError(f"{name} must be a float32 or float64 array, got dtype {a.dtype}")
    return np.promote_types(np.result_type(*arrays.values()), np.float32)


def _softmax_parts(x, axis):
    """Shifted logits ``x - m`` and ``s = sum(exp(x - m))`` with ``m`` the max along ``axis``.

    ``m`` is taken as 0 on an all ``-inf`` row (and on an empty axis), so that row gives
    ``s = 0`` instead of ``-inf - -inf = nan``.
    """
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isneginf(m), 0.0, m)
    shifted = x - m
    return shifted, np.sum(np.exp(shifted), axis=axis, keepdims=True)


def softmax(x, axis=-1):
    r"""Softmax along one axis.

    .. math:: \operatorname{softmax}(x)_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}},
              \qquad m = \max_j x_j

    Parameters
    ----------
    x : array_like of float
        Input.
    axis : int, default=-1
        Axis along which the entries sum to one.

    Returns
    -------
    ndarray
        Same shape as ``x``; float32 for float32 or float16 input, float64 for float64. A slice
        whose entries are all ``-inf`` gives zeros; NaN stays in the slice it is in.
    """
    x = np.asarray(x)
    dtype = _result_dtype(x=x)
    with np.errstate(invalid="ignore"):
        shifted, s = _softmax_parts(x.astype(np.float64), axis)
        out = np.where(s == 0, 0.0, np.exp(shifted) / np.where(s == 0, 1.0, s))
    return out.astype(dtype)


def log_softmax(x, axis=-1):
    r"""Logarithm of :func:`softmax`, computed without forming the softmax.

    .. math:: \log\operatorname{softmax}(x)_i = x_i - m - \log \sum_j e^{x_j - m}

    Parameters
    ----------
    x : array_like of float
        Input.
    axis : int, default=-1
        Axis along which ``exp`` of the result sums to one.

    Returns
    -------
    ndarray
        Same shape and dtype rule as :func:`softmax`. A slice whose entries are all ``-inf``
        gives ``-inf``.
    """
    x = np.asarray(x)
    dtype = _result_dtype(x=x)
    with np.errstate(invalid="ignore", divide="ignore"):
        shifted, s = _softmax_parts(x.astype(np.float64), axis)
        out = np.where(s == 0, -np.inf, shifted - np.log(s))
    return out.astype(dtype)


def attention_mask(nq, nk, *, mask=None, key_lengths=None, causal=False, batch_shape=()):
    """Full boolean visibility matrix of an attention problem.

    Query ``i`` may attend to key ``j`` in batch element ``b`` iff all of::

        mask[b, i, j]                (broadcast to batch_shape + (nq, nk))
        j < key_lengths[b]           (key_lengths aligned with the LEFT of batch_shape)
        j <= i + nk - nq             (only when causal: bottom-right aligned)

    Parameters
    ----------
    nq, nk : int
        Number of queries and keys.
    mask : array_like of bool, optional
        Broadcastable to ``batch_shape + (nq, nk)``; True means "may attend".
    key_lengths : array_like of int, optional
        Its shape is a leading prefix of ``batch_shape`` (a size-1 dim broadcasts); values in
        ``[0, nk]``.
    causal : bool, default=False
        Bottom-right aligned causal mask; when ``nk < nq`` the first ``nq - nk`` rows see nothing.
    batch_shape : tuple of int, default=()
        Leading (batch, head, ...) dims of the result.

    Returns
    -------
    ndarray of bool, shape ``batch_shape + (nq, nk)``
    """
    batch_shape = tuple(batch_shape)
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    visible = (j <= i + (nk - nq)) if causal else np.ones((nq, nk), dtype=bool)
    if mask is not None:
        visible = visible & np.asarray(mask, dtype=bool)
    if key_lengths is not None:
        lengths = np.asarray(key_lengths)
        if lengths.dtype.kind not in "iu":
            raise TypeError(f"key_lengths must be an integer array, got dtype {lengths.dtype}")
        prefix = batch_shape[: lengths.ndim]
        if lengths.ndim > len(batch_shape) or any(
            n not in (1, p) for n, p in zip(lengths.shape, prefix)
        ):
            raise ValueError(
                f"key_lengths must have a shape that is a leading prefix of the batch shape "
                f"{batch_shape} (size-1 dims broadcast), got {lengths.shape}"
            )
        if np.any(lengths < 0) or np.any(lengths > nk):
            raise ValueError(f"key_lengths must lie in [0, {nk}]")
        # Align from the left: trailing batch dims, then the (nq, nk) dims, are size 1.
        lengths = lengths.reshape(lengths.shape + (1,) * (len(batch_shape) - lengths.ndim + 2))
        visible = visible & (np.arange(nk) < lengths)
    return np.broadcast_to(visible, batch_shape + (nq, nk)).copy()


def scaled_dot_product_attention(
    q,
    k,
    v,
    *,
    mask=None,
    key_lengths=None,
    causal=False,
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
    dtype = _result_dtype(q=q, k=k, v=v)
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
        nq, nk, mask=mask, key_lengths=key_lengths, causal=causal, batch_shape=batch_shape
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


def sinusoidal_positions(n, d, *, base=10000.0, start=0, dtype=np.float64):
    r"""Sinusoidal position encodings of Vaswani et al. (2017).

    .. math:: P_{t, 2k} = \sin((s + t)\,\omega_k), \quad P_{t, 2k+1} = \cos((s + t)\,\omega_k),
              \quad \omega_k = \text{base}^{-2k/d}

    Parameters
    ----------
    n : int
        Number of positions, ``n >= 0``.
    d : int
        Encoding size, even and ``>= 2``.
    base : float, default=10000.0
        Wavelength base, ``> 0``.
    start : int, default=0
        Position ``s`` of the first row.
    dtype : dtype, default=np.float64
        Output dtype.

    Returns
    -------
    ndarray, shape (n, d)
    """
    if d < 2 or d % 2:
        raise ValueError(f"d must be even and >= 2, got {d}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not base > 0:
        raise ValueError(f"base must be > 0, got {base}")
    omega = float(base) ** (-2.0 * np.arange(d // 2) / d)
    angles = (start + np.arange(n, dtype=np.float64))[:, None] * omega[None, :]
    out = np.empty((n, d), dtype=np.float64)
    out[:, 0::2] = np.sin(angles)
    out[:, 1::2] = np.cos(angles)
    return out.astype(dtype)


def kernel_attention(q, k, v, similarity, *, mask=None, key_lengths=None, causal=False, eps=1e-6):
    r"""Attention with an arbitrary non-negative similarity, materialising the Nq x Nk matrix.

    .. math:: \text{out}_i = \frac{\sum_j A_{ij} v_j}{\sum_j A_{ij}}, \qquad
              A_{ij} = \text{sim}(q_i, k_j) \text{ where visible, else } 0

    and zeros where the denominator is ``<= eps`` (as :func:`attnkit.ops.linear_attention`).

    Parameters
    ----------
    q, k, v : array_like, shapes (..., Nq, d), (..., Nk, d), (..., Nk, dv)
    similarity : callable
        ``similarity(q, k)`` -> (..., Nq, Nk) matrix, e.g. ``(q @ k^T + c) ** 2``.
    mask, key_lengths, causal :
        Visibility, as in :func:`attention_mask`.
    eps : float, default=1e-6
        Denominator guard.
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    dtype = _result_dtype(q=q, k=k, v=v)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    sim = np.asarray(similarity(q64, k64), dtype=np.float64)
    batch_shape = np.broadcast_shapes(sim.shape[:-2], v.shape[:-2])
    visible = attention_mask(q.shape[-2], k.shape[-2], mask=mask, key_lengths=key_lengths, causal=causal,
                             batch_shape=batch_shape)
    a = np.where(visible, sim, 0.0)
    v64 = np.where(visible.any(axis=-2)[..., None], v64, 0.0)  # invisible keys: no 0 * NaN
    num, den = a @ v64, a.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den <= eps, 0.0, num / den)
    return out.astype(dtype)


def feature_map_features(feature_map, x, role="transform"):
    """Features of an :mod:`attnkit.feature_maps` map, computed here in NumPy (float64).

    ``role`` is "transform", "queries" or "keys", the map's three methods. String names ("elu",
    "relu", "polynomial") stand for the default maps. Random maps' weights come from
    ``feature_map.weights(d)`` (drawn by NumPy).
    """
    x = np.asarray(x, dtype=np.float64)
    kind = feature_map if isinstance(feature_map, str) else type(feature_map).__name__
    if kind in ("elu", "EluFeatureMap"):
        return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))
    if kind in ("relu", "ReluFeatureMap"):
        return np.maximum(x, 0)
    if kind in ("polynomial", "PolynomialFeatureMap"):
        p, c = (2, 1.0) if isinstance(feature_map, str) else (feature_map.degree, feature_map.c)
        parts, power = [], np.ones(x.shape[:-1] + (1,))
        for i in range(p + 1):
            parts.append(np.sqrt(comb(p, i) * c ** (p - i)) * power)
            power = (power[..., :, None] * x[..., None, :]).reshape(x.shape[:-1] + (-1,))
        return np.concatenate(parts, axis=-1)
    d = x.shape[-1]
    w = feature_map.weights(d)
    if kind == "RandomFourierFeatureMap":
        z = x @ w.T
        phi = np.concatenate([np.sin(z), np.cos(z)], axis=-1) / np.sqrt(feature_map.n_features)
        if feature_map.softmax_kernel and role != "queries":
            phi = phi * np.exp(np.sum(x * x, axis=-1, keepdims=True) / (2 * feature_map.bandwidth(d) ** 2))
        return phi
    if kind == "PositiveRandomFeatureMap":
        u = x * (feature_map.scale if feature_map.scale is not None else d**-0.25)
        z = u @ w.T
        shift = z.max(axis=-1, keepdims=True) if role == "queries" else 0.5 * np.sum(u * u, axis=-1, keepdims=True)
        return np.exp(z - shift) / np.sqrt(feature_map.n_features)
    raise ValueError(f"no reference for feature map {feature_map!r}")


def linear_attention(q, k, v, *, feature_map="elu", causal=False, mask=None, key_lengths=None, eps=1e-6):
    r"""Linear attention as kernel attention with ``sim(q, k) = phi(q) . phi(k)``.

    Materialises the Nq x Nk similarity (the point of the fast op is not to). ``phi`` is the map's
    ``queries`` form for queries and ``keys`` form for keys, as in :func:`attnkit.ops.linear_attention`.
    """
    def similarity(a, b):
        return (feature_map_features(feature_map, a, "queries")
                @ np.swapaxes(feature_map_features(feature_map, b, "keys"), -1, -2))

    return kernel_attention(q, k, v, similarity, mask=mask, key_lengths=key_lengths, causal=causal, eps=eps)


def random_fourier_features(x, weights, offsets=None, kind="cos"):
    r"""Random Fourier features: ``cos``: :math:`\sqrt{2/D} \cos(x W + b)`;
    ``sincos``: :math:`\sqrt{1/D} [\sin(x W + b), \cos(x W + b)]`."""
    x, weights = np.asarray(x), np.asarray(weights)
    dtype = _result_dtype(x=x, weights=weights)
    z = x.astype(np.float64) @ weights.astype(np.float64)
    if offsets is not None:
        z = z + np.asarray(offsets, dtype=np.float64)
    n = weights.shape[1]
    if kind == "cos":
        out = np.sqrt(2.0 / n) * np.cos(z)
    else:
        out = np.sqrt(1.0 / n) * np.concatenate([np.sin(z), np.cos(z)], axis=-1)
    return out.astype(dtype)
