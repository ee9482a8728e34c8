"""Layer and RMS normalisation over the last axis, forward and backward (one kernel: RMS normalisation
is layer normalisation with the mean fixed at 0)."""

import math

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import check_bool, check_ndim, check_real, float_array

__all__ = ["layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward"]


def layer_norm(x: ArrayLike, gamma: ArrayLike | None = None, beta: ArrayLike | None = None, eps: float = 1e-5,
               return_stats: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layer normalisation over the last axis: ``(x - mean) / sqrt(var + eps) * gamma + beta``.

    The variance is the biased one (divided by n), as in PyTorch's ``layer_norm``.

    Parameters
    ----------
    x : array-like of float32 or float64, shape (..., n)
        Input, normalised along its last axis (n >= 1).
    gamma : array-like of float, shape (n,), optional
        Scale; 1 when omitted.
    beta : array-like of float, shape (n,), optional
        Shift; 0 when omitted.
    eps : float, default=1e-5
        Added to the variance, >= 0.
    return_stats : bool, default=False
        Also return ``mean`` and ``rstd = 1 / sqrt(var + eps)``, which :func:`layer_norm_backward`
        needs.

    Returns
    -------
    y : ndarray of shape (..., n)
        Dtype of ``x``, ``gamma`` and ``beta`` promoted.
    mean, rstd : ndarray of shape (...)
        Only with ``return_stats``.

    Examples
    --------
    >>> from attnkit import ops
    >>> ops.layer_norm([[1.0, 3.0]], eps=0.0).tolist()
    [[-1.0, 1.0]]
    """
    x = float_array(x, "x")
    check_ndim(x, "x", 1, "(..., n)")
    n = x.shape[-1]
    if n == 0:
        raise ValueError(f"x must have at least one feature along its last axis, got shape {x.shape}")
    gamma, beta = (_check_vector(a, name, n) for a, name in ((gamma, "gamma"), (beta, "beta")))
    eps = _check_eps(eps)
    return_stats = check_bool(return_stats, "return_stats")
    dtype = np.result_type(x, *(a for a in (gamma, beta) if a is not None))
    rows = math.prod(x.shape[:-1])
    flat = np.ascontiguousarray(x, dtype=dtype).reshape(rows, n)
    y = np.empty_like(flat)
    mean = np.empty(rows, dtype) if return_stats else None
    rstd = np.empty(rows, dtype) if return_stats else None
    _core.layer_norm(flat, _as(gamma, dtype), _as(beta, dtype), y, mean, rstd, eps)
    y = y.reshape(x.shape)
    if mean is None or rstd is None:
        return y
    return y, mean.reshape(x.shape[:-1]), rstd.reshape(x.shape[:-1])


def layer_norm_backward(dy: ArrayLike, x: ArrayLike, gamma: ArrayLike | None, mean: ArrayLike,
                        rstd: ArrayLike) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Gradients of :func:`layer_norm` with respect to ``x``, ``gamma`` and ``beta``.

    With ``xhat = (x - mean) rstd`` and ``g = dy gamma``::

        dx = rstd (g - mean(g) - xhat mean(g xhat))     (means over the last axis)
        dgamma = sum(dy xhat),  dbeta = sum(dy)         (sums over every leading axis)

    Parameters
    ----------
    dy : array-like of float, shape (..., n)
        Gradient with respect to the output.
    x : array-like of float, shape (..., n)
        The forward input.
    gamma : array-like of float, shape (n,), or None
        The forward scale (None for 1).
    mean, rstd : array-like of float, shape (...)
        The statistics ``layer_norm(..., return_stats=True)`` returned.

    Returns
    -------
    dx : ndarray of shape (..., n)
    dgamma, dbeta : ndarray of shape (n,)
        Also when ``gamma`` is None (the gradients of an implicit scale 1 and shift 0).
    """
    dy, x = float_array(dy, "dy"), float_array(x, "x")
    check_ndim(x, "x", 1, "(..., n)")
    if dy.shape != x.shape:
        raise ValueError(f"dy must have the shape of x {x.shape}, got {dy.shape}")
    n = x.shape[-1]
    gamma = _check_vector(gamma, "gamma", n)
    mean, rstd = float_array(mean, "mean"), float_array(rstd, "rstd")
    for a, name in ((mean, "mean"), (rstd, "rstd")):
        if a.shape != x.shape[:-1]:
            raise ValueError(f"{name} must have the shape of x without its last axis, {x.shape[:-1]}, got {a.shape}")
    dtype = np.result_type(dy, x, mean, rstd, *(() if gamma is None else (gamma,)))
    rows = math.prod(x.shape[:-1])
    flat = {name: np.ascontiguousarray(a, dtype=dtype).reshape(rows, n) for name, a in (("dy", dy), ("x", x))}
    dx = np.empty((rows, n), dtype)
    dgamma, dbeta = np.empty(n, dtype), np.empty(n, dtype)
    _core.layer_norm_backward(flat["dy"], flat["x"], _as(gamma, dtype), _as(mean, dtype).reshape(rows),
                              _as(rstd, dtype).reshape(rows), dx, dgamma, dbeta)
    return dx.reshape(x.shape), dgamma, dbeta


def rms_norm(x: ArrayLike, gamma: ArrayLike | None = None, eps: float = 1e-6,
             return_stats: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """RMS normalisation over the last axis (Zhang & Sennrich, 2019): ``x / sqrt(mean(x^2) + eps) * gamma``.

    Scale only: no mean is subtracted and there is no shift (T5, LLaMA).

    Parameters
    ----------
    x : array-like of float32 or float64, shape (..., n)
        Input, normalised along its last axis (n >= 1).
    gamma : array-like of float, shape (n,), optional
        Scale; 1 when omitted.
    eps : float, default=1e-6
        Added to the mean square, >= 0.
    return_stats : bool, default=False
        Also return ``rstd = 1 / sqrt(mean(x^2) + eps)``, which :func:`rms_norm_backward` needs.

    Returns
    -------
    y : ndarray of shape (..., n)
        Dtype of ``x`` and ``gamma`` promoted.
    rstd : ndarray of shape (...)
        Only with ``return_stats``.

    Examples
    --------
    >>> from attnkit import ops
    >>> ops.rms_norm([[3.0, -4.0]], eps=0.0).round(6).tolist()
    [[0.848528, -1.131371]]
    """
    x = float_array(x, "x")
    check_ndim(x, "x", 1, "(..., n)")
    n = x.shape[-1]
    if n == 0:
        raise ValueError(f"x must have at least one feature along its last axis, got shape {x.shape}")
    gamma = _check_vector(gamma, "gamma", n)
    eps = _check_eps(eps)
    return_stats = check_bool(return_stats, "return_stats")
    dtype = np.result_type(x, *(() if gamma is None else (gamma,)))
    rows = math.prod(x.shape[:-1])
    flat = np.ascontiguousarray(x, dtype=dtype).reshape(rows, n)
    y = np.empty_like(flat)
    rstd = np.empty(rows, dtype) if return_stats else None
    _core.rms_norm(flat, _as(gamma, dtype), y, rstd, eps)
    y = y.reshape(x.shape)
    return y if rstd is None else (y, rstd.reshape(x.shape[:-1]))


def rms_norm_backward(dy: ArrayLike, x: ArrayLike, gamma: ArrayLike | None,
                      rstd: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of :func:`rms_norm` with respect to ``x`` and ``gamma``.

    With ``xhat = x rstd`` and ``g = dy gamma``::

        dx = rstd (g - xhat mean(g xhat))     (mean over the last axis)
        dgamma = sum(dy xhat)                 (sum over every leading axis)

    Parameters
    ----------
    dy : array-like of float, shape (..., n)
        Gradient with respect to the output.
    x : array-like of float, shape (..., n)
        The forward input.
    gamma : array-like of float, shape (n,), or None
        The forward scale (None for 1).
    rstd : array-like of float, shape (...)
        The statistic ``rms_norm(..., return_stats=True)`` returned.

    Returns
    -------
    dx : ndarray of shape (..., n)
    dgamma : ndarray of shape (n,)
        Also when ``gamma`` is None (the gradient of an implicit scale 1).
    """
    dy, x = float_array(dy, "dy"), float_array(x, "x")
    check_ndim(x, "x", 1, "(..., n)")
    if dy.shape != x.shape:
        raise ValueError(f"dy must have the shape of x {x.shape}, got {dy.shape}")
    n = x.shape[-1]
    gamma = _check_vector(gamma, "gamma", n)
    rstd = float_array(rstd, "rstd")
    if rstd.shape != x.shape[:-1]:
        raise ValueError(f"rstd must have the shape of x without its last axis, {x.shape[:-1]}, got {rstd.shape}")
    dtype = np.result_type(dy, x, rstd, *(() if gamma is None else (gamma,)))
    rows = math.prod(x.shape[:-1])
    flat_dy, flat_x = (np.ascontiguousarray(a, dtype=dtype).reshape(rows, n) for a in (dy, x))
    dx, dgamma = np.empty((rows, n), dtype), np.empty(n, dtype)
    _core.rms_norm_backward(flat_dy, flat_x, _as(gamma, dtype), _as(rstd, dtype).reshape(rows), dx, dgamma)
    return dx.reshape(x.shape), dgamma


def _check_eps(eps):
    eps = check_real(eps, "eps")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    return eps


def _check_vector(a, name, n):
    if a is None:
        return None
    a = float_array(a, name)
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape (n,) = ({n},) to match the last axis of x, got {a.shape}")
    return a


def _as(a, dtype):
    """``a`` as a C-contiguous array of ``dtype`` (None stays None)."""
    return None if a is None else np.ascontiguousarray(a, dtype=dtype)
