"""Reference activations."""

import numpy as np

from attnkit.reference._common import result_dtype

__all__ = ["gelu", "gelu_backward"]

_C = np.sqrt(2.0 / np.pi)
_K = 0.044715


def gelu(x):
    r"""GELU, tanh form.

    .. math:: \mathrm{gelu}(x) = \tfrac{x}{2}\big(1 + \tanh u\big), \qquad
              u = \sqrt{2/\pi}\,(x + 0.044715\,x^3)

    Parameters
    ----------
    x : array_like of float

    Returns
    -------
    ndarray
        Same shape; float32 for float32 or float16 input, float64 for float64.
    """
    x = np.asarray(x)
    dtype = result_dtype(x=x)
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + np.tanh(_C * (x64 + _K * x64**3)))).astype(dtype)


def gelu_backward(x, dy):
    r"""Gradient of :func:`gelu`.

    .. math:: \mathrm{gelu}'(x) = \tfrac12 (1 + \tanh u) + \tfrac{x}{2}\,(1 - \tanh^2 u)\,
              \sqrt{2/\pi}\,(1 + 3 \cdot 0.044715\,x^2)

    Parameters
    ----------
    x : array_like of float
        The forward input.
    dy : array_like of float
        Gradient with respect to the output, same shape.

    Returns
    -------
    ndarray
        ``dy * gelu'(x)``.
    """
    x, dy = np.asarray(x), np.asarray(dy)
    dtype = result_dtype(x=x, dy=dy)
    x64 = x.astype(np.float64)
    t = np.tanh(_C * (x64 + _K * x64**3))
    derivative = 0.5 * (1.0 + t) + 0.5 * x64 * (1.0 - t * t) * _C * (1.0 + 3.0 * _K * x64**2)
    return (dy.astype(np.float64) * derivative).astype(dtype)
