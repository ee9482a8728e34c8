"""Random Fourier features: the fused transform."""

import math

import numpy as np
from numpy.typing import ArrayLike

from attnkit._validation import check_ndim, float_array
from attnkit.feature_maps import projected_features

__all__ = ["random_fourier_features"]


def random_fourier_features(x: ArrayLike, weights: ArrayLike, offsets: ArrayLike | None = None,
                            kind: str = "cos") -> np.ndarray:
    """Random Fourier features, fused: projection, offset, cos/sin and scale in one multi-threaded SIMD pass.

    ``cos``:    ``sqrt(2 / D) cos(x W + b)`` (scikit-learn's RBFSampler map), D features;
    ``sincos``: ``sqrt(1 / D) [sin(x W + b), cos(x W + b)]`` (the course notes' map), 2D features.

    Parameters
    ----------
    x : array-like of shape (..., f)
    weights : array-like of shape (f, D)
        Frequencies (columns), e.g. ``N(0, 2 gamma)`` for the kernel ``exp(-gamma |x - y|^2)``.
    offsets : array-like of shape (D,), optional
        Phases b (uniform on [0, 2 pi) for ``cos``).
    kind : {"cos", "sincos"}, default="cos"

    Returns
    -------
    ndarray of shape (..., D) or (..., 2D), dtype of ``x`` and ``weights`` promoted.
    """
    x, weights = float_array(x, "x"), float_array(weights, "weights")
    check_ndim(x, "x", 1, "(..., f)")
    if weights.ndim != 2 or weights.shape[0] != x.shape[-1]:
        raise ValueError(f"weights must have shape (f, D) = ({x.shape[-1]}, D) for x of shape {x.shape}, "
                         f"got {weights.shape}")
    if kind not in ("cos", "sincos"):
        raise ValueError(f"kind must be 'cos' or 'sincos', got {kind!r}")
    dtype = np.result_type(x, weights)
    n_freq = weights.shape[1]
    if offsets is not None:
        offsets = float_array(offsets, "offsets").astype(dtype, copy=False)
        if offsets.shape != (n_freq,):
            raise ValueError(f"offsets must have shape (D,) = ({n_freq},), got {offsets.shape}")
    scale = math.sqrt((2.0 if kind == "cos" else 1.0) / n_freq) if n_freq else 1.0
    return projected_features(x.astype(dtype, copy=False), weights.astype(dtype, copy=False), kind, scale=scale,
                              offset=offsets)
