"""Sinusoidal positional encodings."""

import numpy as np
from numpy.typing import DTypeLike

from attnkit import _core
from attnkit._memory import checked_empty
from attnkit._validation import check_dtype_choice, check_int, check_real

__all__ = ["sinusoidal_positions"]


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
