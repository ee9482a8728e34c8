"""Reference random Fourier features."""

import numpy as np

from attnkit.reference._common import result_dtype

__all__ = ["random_fourier_features"]


def random_fourier_features(x, weights, offsets=None, kind="cos"):
    r"""Random Fourier features: ``cos``: :math:`\sqrt{2/D} \cos(x W + b)`;
    ``sincos``: :math:`\sqrt{1/D} [\sin(x W + b), \cos(x W + b)]`."""
    x, weights = np.asarray(x), np.asarray(weights)
    dtype = result_dtype(x=x, weights=weights)
    z = x.astype(np.float64) @ weights.astype(np.float64)
    if offsets is not None:
        z = z + np.asarray(offsets, dtype=np.float64)
    n = weights.shape[1]
    if kind == "cos":
        out = np.sqrt(2.0 / max(n, 1)) * np.cos(z)  # D = 0: an empty output, not a division by zero
    else:
        out = np.sqrt(1.0 / max(n, 1)) * np.concatenate([np.sin(z), np.cos(z)], axis=-1)
    return out.astype(dtype)
