"""Positions: sinusoidal encodings (added to token vectors) and rotary positions (turning queries and keys)."""

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from attnkit import _core
from attnkit._memory import checked_empty
from attnkit._validation import check_bool, check_dtype_choice, check_int, check_real, float_array

__all__ = ["rotary_positions", "sinusoidal_positions"]


def sinusoidal_positions(n: int, d: int, *, base: float = 10000.0, start: float = 0,
                         dtype: DTypeLike = np.float64) -> np.ndarray:
    """Sinusoidal ("clock") positional encodings.

    ``P[t, 2k] = sin((start + t) w_k)``, ``P[t, 2k + 1] = cos((start + t) w_k)``,
    ``w_k = base ** (-2k / d)``. Each (sin, cos) pair rotates by the angle ``w_k`` from one position
    to the next, so ``P[t + 1] = M P[t]`` for a fixed block-rotation matrix ``M``.

    Parameters
    ----------
    n : int
        Number of positions (rows), >= 0.
    d : int
        Encoding width, even and >= 2.
    base : float, default=10000.0
        Wavelength base, > 0.
    start : int, default=0
        First position (for decoding step by step).
    dtype : {float32, float64}, default=float64
        Output dtype (angles are computed in float64 either way).

    Returns
    -------
    ndarray of shape (n, d)
    """
    n = check_int(n, "n", minimum=0)
    d = check_int(d, "d", minimum=2)
    if d % 2:
        raise ValueError(f"d must be even (sin/cos pairs), got {d}")
    base = check_real(base, "base", positive=True)
    start = check_int(start, "start", minimum=0)
    out = checked_empty((n, d), check_dtype_choice(dtype, "dtype"), "the positions (n, d)")
    _core.positions(out, base, float(start))
    return out


def rotary_positions(x: ArrayLike, *, start: int = 0, base: float = 10000.0, inverse: bool = False) -> np.ndarray:
    """Rotary positions (RoPE, Su et al. 2021) on interleaved pairs: each pair ``(x[2i], x[2i + 1])`` of row t
    turned by the angle ``(start + t) w_i``, ``w_i = base ** (-2i / d)``.

    Applied to queries and keys before attention, a query at position t and a key at position s then score
    ``q R((s - t) w) k``: their product depends on the distance alone. The pairs are neighbours, as in Meta's
    Llama and llama.cpp's GGUF files (Hugging Face's Llama pairs ``x[i]`` with ``x[i + d / 2]``: the same map
    after a permutation of the features, :mod:`attnkit.pretrained.rotary_rows`).

    Parameters
    ----------
    x : array-like of shape (..., n, d)
        Rows at positions ``start, ..., start + n - 1`` (the second-to-last axis); d even. float32 or float64.
    start : int, default=0
        Position of the first row (the number of positions already decoded).
    base : float, default=10000.0
        Wavelength base, > 0 (Llama 2: 10000; SmolLM2: 100000).
    inverse : bool, default=False
        Turn by the opposite angles: the inverse map, which is also the transpose, so the gradient of a
        rotation is the inverse rotation of the output's gradient.

    Returns
    -------
    ndarray of the shape and dtype of x
        A new array (angles are computed in float64, then rounded to x's dtype).
    """
    x = float_array(x, "x")
    if x.ndim < 2 or x.shape[-1] < 2 or x.shape[-1] % 2:
        raise ValueError(f"x must have shape (..., n, d) with an even d >= 2 (pairs of features), got {x.shape}")
    start = check_int(start, "start", minimum=0)
    base = check_real(base, "base", positive=True)
    n, d = x.shape[-2:]
    table = np.empty((n, d), np.float64)  # (sin, cos) of each pair's angle, interleaved
    _core.positions(table, base, float(start))
    sin, cos = table[:, 0::2].astype(x.dtype), table[:, 1::2].astype(x.dtype)
    if check_bool(inverse, "inverse"):
        sin = -sin
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out
