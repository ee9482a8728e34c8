"""Reference activations."""

import math

import numpy as np

from attnkit.reference._common import result_dtype

__all__ = ["gelu", "gelu_backward", "swiglu"]

_C = np.sqrt(2.0 / np.pi)
_K = 0.044715
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _normal_cdf(x64):
    """Phi(x) = erfc(-x / sqrt 2) / 2 (erfc keeps relative precision where Phi is tiny)."""
    return 0.5 * _erfc(-x64 / np.sqrt(2.0))


def gelu(x, *, approximate="tanh"):
    r"""GELU, tanh form (``approximate="tanh"``) or exact (``"none"``).

    .. math:: \mathrm{gelu}(x) = \tfrac{x}{2}\big(1 + \tanh u\big), \qquad
              u = \sqrt{2/\pi}\,(x + 0.044715\,x^3)

    .. math:: \mathrm{gelu}_{\text{exact}}(x) = x\,\Phi(x) = \tfrac{x}{2}\big(1 + \mathrm{erf}(x/\sqrt2)\big)

    Parameters
    ----------
    x : array_like of float
    approximate : {"tanh", "none"}, default="tanh"

    Returns
    -------
    ndarray
        Same shape; float32 for float32 or float16 input, float64 for float64. The exact form takes its
        limits at infinity: ``gelu(+inf) = +inf``, ``gelu(-inf) = 0``.
    """
    x = np.asarray(x)
    dtype = result_dtype(x=x)
    x64 = x.astype(np.float64)
    if approximate == "none":
        with np.errstate(invalid="ignore"):
            y = np.where(np.isinf(x64), np.maximum(x64, 0.0), x64 * _normal_cdf(x64))
        return y.astype(dtype)
    return (0.5 * x64 * (1.0 + np.tanh(_C * (x64 + _K * x64**3)))).astype(dtype)


def gelu_backward(x, dy, *, approximate="tanh"):
    r"""Gradient of :func:`gelu`.

    .. math:: \mathrm{gelu}'(x) = \tfrac12 (1 + \tanh u) + \tfrac{x}{2}\,(1 - \tanh^2 u)\,
              \sqrt{2/\pi}\,(1 + 3 \cdot 0.044715\,x^2)

    .. math:: \mathrm{gelu}_{\text{exact}}'(x) = \Phi(x) + x\,\varphi(x), \qquad
              \varphi(x) = e^{-x^2/2} / \sqrt{2\pi}

    Parameters
    ----------
    x : array_like of float
        The forward input.
    dy : array_like of float
        Gradient with respect to the output, same shape.
    approximate : {"tanh", "none"}, default="tanh"

    Returns
    -------
    ndarray
        ``dy * gelu'(x)`` (exact form: ``gelu'(+inf) = 1``, ``gelu'(-inf) = 0``).
    """
    x, dy = np.asarray(x), np.asarray(dy)
    dtype = result_dtype(x=x, dy=dy)
    x64 = x.astype(np.float64)
    if approximate == "none":
        with np.errstate(invalid="ignore", over="ignore"):
            density = x64 * np.exp(-0.5 * x64 * x64) / np.sqrt(2.0 * np.pi)
            derivative = np.where(np.isinf(x64), x64 > 0, _normal_cdf(x64) + density)
    else:
        t = np.tanh(_C * (x64 + _K * x64**3))
        derivative = 0.5 * (1.0 + t) + 0.5 * x64 * (1.0 - t * t) * _C * (1.0 + 3.0 * _K * x64**2)
    return (dy.astype(np.float64) * derivative).astype(dtype)


def swiglu(gate, up):
    r"""SwiGLU's gate (Llama's feed-forward), in float64.

    .. math:: \mathrm{swiglu}(g, u) = \mathrm{silu}(g)\,u = \frac{g}{1 + e^{-g}}\,u

    Parameters
    ----------
    gate, up : array_like of float
        Same shape.

    Returns
    -------
    ndarray
        Same shape; float32 for float32 or float16 input, float64 for float64 (NumPy's promotion of the two).
        ``silu(-inf) = 0``, ``silu(+inf) = +inf``.
    """
    gate, up = np.asarray(gate), np.asarray(up)
    dtype = result_dtype(gate=gate, up=up)
    g64 = gate.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # exp(-g) = inf for g < -709: g / inf = -0
        silu = np.where(g64 == -np.inf, 0.0, g64 / (1.0 + np.exp(-g64)))
    return (silu * up.astype(np.float64)).astype(dtype)
