"""Elementwise activations with fused forward and backward kernels."""

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import float_array

__all__ = ["gelu", "gelu_backward"]


def gelu(x: ArrayLike) -> np.ndarray:
    """GELU, tanh form (GPT-2, BERT): ``x / 2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    Computed as ``x sigmoid(2u)`` with one SIMD exponential per element, which keeps full relative
    precision for negative ``x`` (where ``1 + tanh`` would cancel).

    Parameters
    ----------
    x : array-like of float32 or float64
        Input, any shape.

    Returns
    -------
    ndarray
        Same shape and dtype as ``x``.

    Examples
    --------
    >>> from attnkit import ops
    >>> ops.gelu([0.0, 10.0]).tolist()
    [0.0, 10.0]
    """
    x = float_array(x, "x")
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty_like(flat)
    _core.gelu(flat, out)
    return out.reshape(x.shape)


def gelu_backward(x: ArrayLike, dy: ArrayLike) -> np.ndarray:
    """Gradient of :func:`gelu`: ``dx = dy * gelu'(x)``.

    Parameters
    ----------
    x : array-like of float32 or float64
        The forward input.
    dy : array-like of float32 or float64
        Gradient with respect to the output; same shape as ``x``.

    Returns
    -------
    ndarray
        Shape of ``x``, dtype of ``x`` and ``dy`` promoted.
    """
    x, dy = float_array(x, "x"), float_array(dy, "dy")
    if dy.shape != x.shape:
        raise ValueError(f"dy must have the shape of x {x.shape}, got {dy.shape}")
    dtype = np.result_type(x, dy)
    flat_x = np.ascontiguousarray(x, dtype=dtype).reshape(-1)
    flat_dy = np.ascontiguousarray(dy, dtype=dtype).reshape(-1)
    dx = np.empty_like(flat_x)
    _core.gelu_backward(flat_x, flat_dy, dx)
    return dx.reshape(x.shape)
