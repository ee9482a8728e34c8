"""Reference positions: sinusoidal encodings and rotary positions."""

import numpy as np

__all__ = ["rotary_positions", "sinusoidal_positions"]


def sinusoidal_positions(n, d, *, base=10000.0, start=0, dtype=np.float64):
    r"""Sinusoidal position encodings of Vaswani et al. (2017).

    .. math:: P_{t, 2k} = \sin((s + t)\,\omega_k), \quad P_{t, 2k+1} = \cos((s + t)\,\omega_k),
              \quad \omega_k = \text{base}^{-2k/d}

    Parameters
    ----------
    n : int
        Number of positions, ``n >= 0``.
    d : int
        Encoding size, even and ``>= 2``.
    base : float, default=10000.0
        Wavelength base, ``> 0``.
    start : int, default=0
        Position ``s`` of the first row.
    dtype : dtype, default=np.float64
        Output dtype.

    Returns
    -------
    ndarray, shape (n, d)
    """
    if d < 2 or d % 2:
        raise ValueError(f"d must be even and >= 2, got {d}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not base > 0:
        raise ValueError(f"base must be > 0, got {base}")
    omega = float(base) ** (-2.0 * np.arange(d // 2) / d)
    angles = (start + np.arange(n, dtype=np.float64))[:, None] * omega[None, :]
    out = np.empty((n, d), dtype=np.float64)
    out[:, 0::2] = np.sin(angles)
    out[:, 1::2] = np.cos(angles)
    return out.astype(dtype)


def rotary_positions(x, *, start=0, base=10000.0, inverse=False):
    r"""Rotary positions on interleaved pairs (Su et al. 2021; Meta's Llama, GGUF files).

    .. math:: \begin{pmatrix} y_{t,2i} \\ y_{t,2i+1} \end{pmatrix} =
              \begin{pmatrix} \cos\theta & -\sin\theta \\ \sin\theta & \cos\theta \end{pmatrix}
              \begin{pmatrix} x_{t,2i} \\ x_{t,2i+1} \end{pmatrix}, \quad
              \theta = \pm (s + t)\,\text{base}^{-2i/d}

    (minus with ``inverse``), t counting rows along the second-to-last axis from ``start`` = s. Computed
    in float64; returns x's dtype.
    """
    x = np.asarray(x)
    n, d = x.shape[-2:]
    if d < 2 or d % 2:
        raise ValueError(f"the last axis must be even and >= 2, got {d}")
    theta = (start + np.arange(n, dtype=np.float64))[:, None] * float(base) ** (-2.0 * np.arange(d // 2) / d)
    if inverse:
        theta = -theta
    x64 = x.astype(np.float64)
    even, odd = x64[..., 0::2], x64[..., 1::2]
    out = np.empty_like(x64)
    out[..., 0::2] = even * np.cos(theta) - odd * np.sin(theta)
    out[..., 1::2] = even * np.sin(theta) + odd * np.cos(theta)
    return out.astype(x.dtype)
