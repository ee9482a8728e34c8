"""Reference feature maps and linear attention (as kernel attention)."""

from math import comb

import numpy as np

from attnkit.reference.attention import kernel_attention

__all__ = ["feature_map_features", "linear_attention"]


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
            power = (power[..., :, None] * x[..., None, :]).reshape(x.shape[:-1] + (power.shape[-1] * x.shape[-1],))
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
    r"""Linear attention as kernel attention with ``sim(q, k) = dot(phi(q), phi(k))``.

    Materialises the Nq x Nk similarity (the point of the fast op is not to). ``phi`` is the map's
    ``queries`` form for queries and ``keys`` form for keys, as in :func:`attnkit.ops.linear_attention`.
    The guard is the op's: zeros where ``phi(q_i)^T Z_i <= eps * |phi(q_i)|^T |Z_i|``, with ``Z_i`` the
    sum of the features of the keys query i sees (the sum of ``|A_ij|`` would differ for features of both signs).
    """
    def similarity(a, b):
        return (feature_map_features(feature_map, a, "queries")
                @ np.swapaxes(feature_map_features(feature_map, b, "keys"), -1, -2))

    def magnitude(a, b, visible):
        phi_k = np.where(visible.any(axis=-2)[..., None], feature_map_features(feature_map, b, "keys"), 0.0)
        z = visible.astype(np.float64) @ phi_k  # Z_i, (..., Nq, D); keys no query sees: no 0 * NaN
        return np.sum(np.abs(feature_map_features(feature_map, a, "queries")) * np.abs(z), axis=-1, keepdims=True)

    return kernel_attention(q, k, v, similarity, mask=mask, key_lengths=key_lengths, causal=causal, eps=eps,
                            magnitude=magnitude)
