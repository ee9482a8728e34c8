"""Reference int8 linear map: the quantisation rules spelled out in NumPy, exact integer products."""

import numpy as np

__all__ = ["int8_linear", "quantize_activations", "quantize_linear_weight"]


def quantize_linear_weight(weight):
    """Per-column symmetric int8 quantisation of a (k, n) weight.

    ``scale = max|weight[:, j]| / 127`` in float32 (1 for a column whose scale would be below the
    smallest normal float32), ``values = clip(rint(weight / scale), -127, 127)``.

    Returns
    -------
    values : ndarray of int8, shape (k, n)
    scale : ndarray of float32, shape (n,)
    """
    w = np.asarray(weight, dtype=np.float64)
    scale = (np.abs(w).max(axis=0, initial=0.0) / 127.0).astype(np.float32)
    scale[~(scale >= np.finfo(np.float32).tiny)] = 1.0
    return np.clip(np.rint(w / scale.astype(np.float64)), -127, 127).astype(np.int8), scale


def quantize_activations(x):
    """Per-row asymmetric uint8 quantisation, with the roundings of the kernel (float32 throughout).

    ``lo = min(x_i, 0)``, ``hi = max(x_i, 0)``, ``sx = float32((hi - lo) / 255)`` (the difference in
    float64), ``inv = 1 / sx``, ``zx = clip(rint(-lo * inv), 0, 255)``,
    ``qx = clip(rint(x * inv) + zx, 0, 255)``. A row with NaN or inf gets ``sx = NaN``, one with
    ``sx`` below the smallest normal float32 ``sx = 0``; both get ``qx = zx = 0``.

    Parameters
    ----------
    x : array_like of float32, shape (m, k)

    Returns
    -------
    qx : ndarray of uint8, shape (m, k)
    sx : ndarray of float32, shape (m,)
    zx : ndarray of int32, shape (m,)
    """
    x = np.asarray(x, dtype=np.float32)
    bad = ~np.isfinite(x).all(axis=1)
    safe = np.where(bad[:, None], np.float32(0), x)
    lo = np.minimum(safe.min(axis=1, initial=0), 0).astype(np.float32)
    hi = np.maximum(safe.max(axis=1, initial=0), 0).astype(np.float32)
    sx = ((hi.astype(np.float64) - lo.astype(np.float64)) / 255.0).astype(np.float32)
    zero = ~(sx >= np.finfo(np.float32).tiny) | bad
    inv = np.float32(1) / np.where(zero, np.float32(1), sx)
    zx = np.clip(np.rint(-lo * inv), 0, 255)
    qx = np.clip(np.rint(safe * inv[:, None]) + zx[:, None], 0, 255)
    qx[zero], zx[zero] = 0, 0
    sx = np.where(bad, np.float32(np.nan), np.where(zero, np.float32(0), sx))
    return qx.astype(np.uint8), sx.astype(np.float32), zx.astype(np.int32)


def int8_linear(x, values, scale, *, bias=None):
    r"""Dynamically quantised ``x @ weight (+ bias)`` from the unpacked int8 weight, in float64.

    .. math:: y_{ij} = s^x_i s^w_j \Big(\sum_p q^x_{ip} v_{pj} - z_i \sum_p v_{pj}\Big) + b_j

    with :math:`q^x, s^x, z` from :func:`quantize_activations` (the sums are exact int64).

    Parameters
    ----------
    x : array_like of float32, shape (..., k)
    values : array_like of int8, shape (k, n)
    scale : array_like of float32, shape (n,)
    bias : array_like of float, shape (n,), optional

    Returns
    -------
    ndarray of float32, shape (..., n)
    """
    x = np.asarray(x, dtype=np.float32)
    values = np.asarray(values).astype(np.int64)
    k, n = values.shape
    qx, sx, zx = quantize_activations(x.reshape(-1, k))
    acc = qx.astype(np.int64) @ values - zx.astype(np.int64)[:, None] * values.sum(axis=0)
    y = sx.astype(np.float64)[:, None] * np.asarray(scale, dtype=np.float64) * acc
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return y.astype(np.float32).reshape(*x.shape[:-1], n)
