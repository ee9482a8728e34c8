"""Softmax and log-softmax along any axis."""

import math

import numpy as np

from attnkit import _core
from attnkit._validation import check_int, check_ndim, float_array

__all__ = ["log_softmax", "softmax"]


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
