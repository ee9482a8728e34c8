"""Elementwise activations with fused forward and backward kernels."""

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import check_out, float_array

__all__ = ["gelu", "gelu_backward", "swiglu"]

GELU_FORMS = ("tanh", "none")


def gelu(x: ArrayLike, *, approximate: str = "tanh", out: np.ndarray | None = None) -> np.ndarray:
    """GELU, in its tanh form (GPT-2) or exact (BERT): torch's ``gelu(x, approximate=...)``.

    - ``approximate="tanh"``: ``x / 2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``, computed as
      ``x sigmoid(2u)`` with one SIMD exponential per element, which keeps full relative precision
      for negative ``x`` (where ``1 + tanh`` would cancel).
    - ``approximate="none"``: ``x Phi(x) = x / 2 (1 + erf(x / sqrt 2))``, with Phi the standard normal
      distribution function, computed in an erfc form (``Phi(x) = exp(-x^2/2) m(x)`` for x < 0) that
      keeps relative precision where Phi is tiny: within a few ulps of the exact value wherever that is
      a normal number (down to x = -13.1 in float32, -37.5 in float64); smaller results are subnormal,
      then 0.

    The two forms differ by less than 5e-4 (most at ``|x| = 2.7``).

    Parameters
    ----------
    x : array-like of float32 or float64
        Input, any shape.
    approximate : {"tanh", "none"}, default="tanh"
        The form, as torch names it.
    out : ndarray, optional
        Written and returned: C-contiguous, of the shape and dtype of ``x``; ``out=x`` works in place.

    Returns
    -------
    ndarray
        Same shape and dtype as ``x`` (``out`` when given). NaN stays NaN; ``gelu(+inf) = +inf``,
        ``gelu(-inf) = 0``.

    Examples
    --------
    >>> from attnkit import ops
    >>> ops.gelu([0.0, 10.0]).tolist()
    [0.0, 10.0]
    >>> round(float(ops.gelu(1.0, approximate="none")), 6)
    0.841345
    """
    x = float_array(x, "x")
    exact = _is_exact(approximate)
    flat = np.ascontiguousarray(x).reshape(-1)
    if out is None:
        result = np.empty_like(flat)
        _core.gelu(flat, result, exact)
        return result.reshape(x.shape)
    check_out(out, x.shape, x.dtype, "of x")
    # Elementwise, so out may be x itself; a partial overlap would be read after it was written.
    if np.may_share_memory(flat, out) and flat.ctypes.data != out.ctypes.data:
        flat = flat.copy()
    _core.gelu(flat, out.reshape(-1), exact)
    return out


def gelu_backward(x: ArrayLike, dy: ArrayLike, *, approximate: str = "tanh") -> np.ndarray:
    """Gradient of :func:`gelu`: ``dx = dy * gelu'(x)``; exact form: ``gelu'(x) = Phi(x) + x phi(x)``.

    Parameters
    ----------
    x : array-like of float32 or float64
        The forward input.
    dy : array-like of float32 or float64
        Gradient with respect to the output; same shape as ``x``.
    approximate : {"tanh", "none"}, default="tanh"
        The form of the forward.

    Returns
    -------
    ndarray
        Shape of ``x``, dtype of ``x`` and ``dy`` promoted.
    """
    x, dy = float_array(x, "x"), float_array(dy, "dy")
    exact = _is_exact(approximate)
    if dy.shape != x.shape:
        raise ValueError(f"dy must have the shape of x {x.shape}, got {dy.shape}")
    dtype = np.result_type(x, dy)
    flat_x = np.ascontiguousarray(x, dtype=dtype).reshape(-1)
    flat_dy = np.ascontiguousarray(dy, dtype=dtype).reshape(-1)
    dx = np.empty_like(flat_x)
    _core.gelu_backward(flat_x, flat_dy, dx, exact)
    return dx.reshape(x.shape)


def swiglu(gate: ArrayLike, up: ArrayLike, *, out: np.ndarray | None = None) -> np.ndarray:
    """SwiGLU's gate (Llama's feed-forward): ``silu(gate) * up = gate / (1 + exp(-gate)) * up``.

    One SIMD exponential per element; nothing cancels, so the result keeps full relative precision. Where
    ``gate`` is below exp's range (-88.3 in float32, -709 in float64) silu is 0: its true value there is
    below 4e-37 (float32) or 3e-305 (float64) in magnitude.

    Parameters
    ----------
    gate, up : array-like of float32 or float64
        The two halves of the feed-forward's first product; same shape.
    out : ndarray, optional
        Written and returned: C-contiguous, of the shape of ``gate`` and the promoted dtype; ``out=gate`` or
        ``out=up`` works in place.

    Returns
    -------
    ndarray
        Shape of ``gate``, dtype of ``gate`` and ``up`` promoted (``out`` when given). NaN stays NaN;
        ``silu(+inf) = +inf``, ``silu(-inf) = 0``.

    Examples
    --------
    >>> from attnkit import ops
    >>> ops.swiglu([0.0, 30.0], [5.0, 2.0]).tolist()
    [0.0, 60.0]
    """
    gate, up = float_array(gate, "gate"), float_array(up, "up")
    if up.shape != gate.shape:
        raise ValueError(f"up must have the shape of gate {gate.shape}, got {up.shape}")
    dtype = np.result_type(gate, up)
    flat_gate = np.ascontiguousarray(gate, dtype=dtype).reshape(-1)
    flat_up = np.ascontiguousarray(up, dtype=dtype).reshape(-1)
    if out is None:
        result = np.empty_like(flat_gate)
        _core.swiglu(flat_gate, flat_up, result)
        return result.reshape(gate.shape)
    check_out(out, gate.shape, dtype, "of gate and up")
    # Elementwise, so out may be an input itself; a partial overlap would be read after it was written.
    flat_gate, flat_up = (a.copy() if np.may_share_memory(a, out) and a.ctypes.data != out.ctypes.data else a
                          for a in (flat_gate, flat_up))
    _core.swiglu(flat_gate, flat_up, out.reshape(-1))
    return out


def _is_exact(approximate):
    if not isinstance(approximate, str) or approximate not in GELU_FORMS:
        raise ValueError(f"approximate must be one of {GELU_FORMS}, got {approximate!r}")
    return approximate == "none"
