"""Softmax and log-softmax along any axis, and their backward passes."""

import math

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import check_int, check_ndim, float_array

__all__ = ["log_softmax", "log_softmax_backward", "softmax", "softmax_backward"]


def softmax(x: ArrayLike, axis: int = -1, *, out: np.ndarray | None = None,
            argmax: np.ndarray | None = None) -> np.ndarray:
    """Softmax along ``axis``, computed stably (the maximum is subtracted first).

    ``softmax(x)_i = exp(x_i - max(x)) / sum_j exp(x_j - max(x))``.

    Parameters
    ----------
    x : array-like of float32 or float64
        Input; float16 is widened to float32. At least 1-D.
    axis : int, default=-1
        The axis to normalise over.
    out : ndarray, optional
        Written and returned: ``x``'s shape and dtype (or float64 for float32 ``x``: the bits of
        ``softmax(x.astype(np.float64))``), C-contiguous, with ``axis`` the last. It may be ``x`` itself (in
        place: no new array, which for a batch of vocabulary-wide rows saves the pages of one).
    argmax : ndarray of int64, optional
        Filled with each slice's index (along ``axis``) of its largest output, the first of equal ones: what
        ``np.argmax(result, axis)`` gives where no output is NaN (a NaN is never the largest here; a slice of NaN
        gives 0), found while each slice is in cache. A C-contiguous writeable array of the shape of ``x``
        without ``axis``.

    Returns
    -------
    ndarray
        Same shape and dtype as ``x`` (``out``'s, if given). A slice of all ``-inf`` gives zeros (not NaN).

    Examples
    --------
    >>> import attnkit
    >>> attnkit.softmax([0.0, 0.0]).tolist()
    [0.5, 0.5]
    """
    return _softmax(x, axis, log=False, out=out, argmax=argmax)


def log_softmax(x: ArrayLike, axis: int = -1, *, out: np.ndarray | None = None,
                argmax: np.ndarray | None = None) -> np.ndarray:
    """Logarithm of :func:`softmax` along ``axis``: ``x_i - max(x) - log(sum_j exp(x_j - max(x)))``.

    Parameters
    ----------
    x : array-like of float32 or float64
        Input, at least 1-D.
    axis : int, default=-1
        The axis to normalise over.
    out : ndarray, optional
        As for :func:`softmax`: written and returned; may be ``x`` itself.
    argmax : ndarray of int64, optional
        As for :func:`softmax`: each slice's index of its largest output (a decoding step's greedy choice).

    Returns
    -------
    ndarray
        Same shape and dtype as ``x`` (``out``'s, if given). A slice of all ``-inf`` stays ``-inf``.
    """
    return _softmax(x, axis, log=True, out=out, argmax=argmax)


def softmax_backward(y: ArrayLike, dy: ArrayLike, axis: int = -1) -> np.ndarray:
    """Gradient of :func:`softmax` from its output: ``dx = y * (dy - sum(dy * y, axis))``.

    Parameters
    ----------
    y : array-like of float32 or float64
        The output of ``softmax(x, axis)``.
    dy : array-like of float32 or float64
        Gradient of the loss with respect to ``y``; same shape as ``y``.
    axis : int, default=-1
        The axis the softmax normalised over.

    Returns
    -------
    ndarray
        Gradient with respect to ``x``; shape of ``y``, dtype of ``y`` and ``dy`` promoted. A slice
        of ``x`` that was all ``-inf`` (``y`` all zero) gets zeros.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> y = ops.softmax(np.array([0.0, 0.0]))
    >>> ops.softmax_backward(y, np.array([1.0, 0.0])).tolist()
    [0.25, -0.25]
    """
    return _softmax_backward(y, dy, axis, log=False)


def log_softmax_backward(y: ArrayLike, dy: ArrayLike, axis: int = -1) -> np.ndarray:
    """Gradient of :func:`log_softmax` from its output: ``dx = dy - exp(y) * sum(dy, axis)``.

    Parameters
    ----------
    y : array-like of float32 or float64
        The output of ``log_softmax(x, axis)``.
    dy : array-like of float32 or float64
        Gradient of the loss with respect to ``y``; same shape as ``y``.
    axis : int, default=-1
        The axis the log-softmax normalised over.

    Returns
    -------
    ndarray
        Gradient with respect to ``x``; shape of ``y``, dtype of ``y`` and ``dy`` promoted. A slice
        of ``x`` that was all ``-inf`` (``y`` all ``-inf``, a constant output) gets zeros.
    """
    return _softmax_backward(y, dy, axis, log=True)


def _check_axis(axis, x, name):
    axis = check_int(axis, "axis")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis must be in [{-x.ndim}, {x.ndim}) for {name} of shape {x.shape}, got {axis}")
    return axis


def _rows(a, axis, dtype):
    """``a`` with ``axis`` moved last, as a C-contiguous (rows, n) array, and the moved shape."""
    moved = np.moveaxis(a, axis, -1)
    rows = np.ascontiguousarray(moved, dtype=dtype).reshape(math.prod(moved.shape[:-1]), moved.shape[-1])
    return rows, moved.shape


def _softmax(x, axis, *, log, out=None, argmax=None):
    x = float_array(x, "x")
    check_ndim(x, "x", 1)
    axis = _check_axis(axis, x, "x")
    rows, shape = _rows(x, axis, x.dtype)
    if out is None:
        result = np.empty_like(rows)
    else:
        # float32 rows into float64 out are widened row by row in the kernel: one pass over the batch in memory
        # where widening it first took two (a decoding step's 16 rows of 49,152 log-probabilities: 6 MB).
        widened = x.dtype == np.float32 and getattr(out, "dtype", None) == np.float64
        if not (isinstance(out, np.ndarray) and (out.dtype == x.dtype or widened) and out.shape == x.shape
                and out.flags.c_contiguous and out.flags.writeable and axis % x.ndim == x.ndim - 1):
            got = f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}"
            raise ValueError(f"out must be a writeable C-contiguous {x.dtype} array of x's shape {x.shape} (or "
                             f"float64 for float32 x), with axis the last; got {got} (axis {axis})")
        result = out.reshape(rows.shape)
        # Row by row, so out may be x itself (of x's dtype); a partial overlap would be read after it was written.
        if np.may_share_memory(rows, result) and (widened or rows.ctypes.data != result.ctypes.data):
            rows = rows.copy()
    if argmax is not None:
        want = shape[:-1]
        if not (isinstance(argmax, np.ndarray) and argmax.dtype == np.int64 and argmax.shape == want
                and argmax.flags.c_contiguous and argmax.flags.writeable):
            got = f"{getattr(argmax, 'dtype', type(argmax).__name__)} {getattr(argmax, 'shape', '')}"
            raise ValueError(f"argmax must be a writeable C-contiguous int64 array of shape {want}, got {got}")
        argmax = argmax.reshape(-1)
    _core.softmax(rows, result, log, argmax)
    return out if out is not None else np.moveaxis(result.reshape(shape), -1, axis)


def _softmax_backward(y, dy, axis, *, log):
    y, dy = float_array(y, "y"), float_array(dy, "dy")
    check_ndim(y, "y", 1)
    if dy.shape != y.shape:
        raise ValueError(f"dy must have the shape of y {y.shape}, got {dy.shape}")
    axis = _check_axis(axis, y, "y")
    dtype = np.result_type(y, dy)
    y_rows, shape = _rows(y, axis, dtype)
    dy_rows, _ = _rows(dy, axis, dtype)
    dx = np.empty_like(y_rows)
    _core.softmax_backward(y_rows, dy_rows, dx, log)
    return np.moveaxis(dx.reshape(shape), -1, axis)
