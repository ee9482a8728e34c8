"""Inverted dropout whose mask is a function of a key and each element's position."""

import math

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import check_int, check_out, check_real, float_array

__all__ = ["dropout"]


def dropout(x: ArrayLike, p: float, key: int, *, out: np.ndarray | None = None) -> np.ndarray:
    """Inverted dropout: each element of ``x`` is zeroed with probability ``p``, the others scaled by ``1 / (1 - p)``.

    The mask is drawn from ``key`` and each element's index in C order (a counter-based generator, as
    JAX and torch's CUDA dropout use): the same ``key`` gives the same mask on every ISA and thread
    count, for float32 and float64 alike, and the backward of a dropout is the same call on the gradient,
    ``dropout(dy, p, key)``, so no mask is kept between them. Element ``i`` is kept when a 32-bit hash of
    ``(key, i)`` is at least ``ceil(p 2^32)`` (see :func:`attnkit.reference.dropout`); the result is
    ``x * (1 / (1 - p))`` or ``x * 0``, so NaN and infinities stay what they are, as in ``x * mask``.

    Parameters
    ----------
    x : array-like of float32 or float64
        Input, any shape.
    p : float in [0, 1)
        Drop probability; ``p = 0`` returns a copy of ``x``.
    key : int in [0, 2**64)
        The mask's key; draw a new one for every forward pass (``rng.integers(2**64, dtype=np.uint64)``).
    out : ndarray, optional
        Written and returned: C-contiguous, of the shape and dtype of ``x``; ``out=x`` works in place.

    Returns
    -------
    ndarray
        Same shape and dtype as ``x`` (``out`` when given).

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> y = ops.dropout(np.ones(10_000, np.float32), 0.25, key=7)
    >>> sorted(set(y.tolist())), round(float((y == 0).mean()), 2)
    ([0.0, 1.3333333730697632], 0.25)
    """
    x = float_array(x, "x")
    p = check_real(p, "p")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p}")
    key = check_int(key, "key", minimum=0, maximum=2**64 - 1)
    # p 2^32 is exact (a power-of-two scaling); p < 1 can still round up to 2^32: keep 1 in 2^32 there.
    threshold = min(math.ceil(p * 2.0**32), 2**32 - 1)
    scale = x.dtype.type(1.0 / (1.0 - p))
    flat = np.ascontiguousarray(x).reshape(-1)
    if out is None:
        result = np.empty_like(flat)
        _core.dropout(flat, result, key, threshold, scale)
        return result.reshape(x.shape)
    check_out(out, x.shape, x.dtype, "of x")
    # Elementwise, so out may be x itself; a partial overlap would be read after it was written.
    if np.may_share_memory(flat, out) and flat.ctypes.data != out.ctypes.data:
        flat = flat.copy()
    _core.dropout(flat, out.reshape(-1), key, threshold, scale)
    return out
