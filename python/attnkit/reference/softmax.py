"""Reference softmax and log-softmax."""

import numpy as np

from attnkit.reference._common import result_dtype

__all__ = ["log_softmax", "softmax"]


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
    dtype = result_dtype(x=x)
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
    dtype = result_dtype(x=x)
    with np.errstate(invalid="ignore", divide="ignore"):
        shifted, s = _softmax_parts(x.astype(np.float64), axis)
        out = np.where(s == 0, -np.inf, shifted - np.log(s))
    return out.astype(dtype)
