"""Reference softmax and log-softmax, and their backward passes."""

import numpy as np

from attnkit.reference._common import result_dtype

__all__ = ["log_softmax", "log_softmax_backward", "softmax", "softmax_backward"]


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


def softmax_backward(y, dy, axis=-1):
    r"""Gradient of :func:`softmax` given its output ``y`` and the output gradient ``dy``.

    The Jacobian is :math:`\partial y_i / \partial x_j = y_i (\delta_{ij} - y_j)`, so

    .. math:: dx_j = \sum_i dy_i \, y_i (\delta_{ij} - y_j) = y_j \Big(dy_j - \sum_i dy_i y_i\Big)

    Parameters
    ----------
    y : array_like of float
        Output of ``softmax(x, axis)``.
    dy : array_like of float
        Gradient with respect to ``y``, same shape.
    axis : int, default=-1
        Axis of the softmax.

    Returns
    -------
    ndarray
        Gradient with respect to ``x``; dtype rule of :func:`softmax` applied to ``y`` and ``dy``.
    """
    y, dy = np.asarray(y), np.asarray(dy)
    dtype = result_dtype(y=y, dy=dy)
    y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
    return (y64 * (dy64 - np.sum(dy64 * y64, axis=axis, keepdims=True))).astype(dtype)


def log_softmax_backward(y, dy, axis=-1):
    r"""Gradient of :func:`log_softmax` given its output ``y`` and the output gradient ``dy``.

    :math:`\partial y_i / \partial x_j = \delta_{ij} - e^{y_j}`, so

    .. math:: dx_j = dy_j - e^{y_j} \sum_i dy_i

    A slice whose input was all ``-inf`` has a constant output (all ``-inf``) and gets zeros.

    Parameters
    ----------
    y : array_like of float
        Output of ``log_softmax(x, axis)``.
    dy : array_like of float
        Gradient with respect to ``y``, same shape.
    axis : int, default=-1
        Axis of the log-softmax.

    Returns
    -------
    ndarray
        Gradient with respect to ``x``.
    """
    y, dy = np.asarray(y), np.asarray(dy)
    dtype = result_dtype(y=y, dy=dy)
    y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
    dx = dy64 - np.exp(y64) * np.sum(dy64, axis=axis, keepdims=True)
    constant = np.all(np.isneginf(y64), axis=axis, keepdims=True)
    return np.where(constant, 0.0, dx).astype(dtype)
