"""Random Fourier features: the fused transform, and the unchecked kernels it shares with the feature maps.

:func:`fused_features` and :func:`projected_features` take arrays the caller has validated (the
random feature maps of :mod:`attnkit.feature_maps`, :class:`attnkit.RandomFourierFeatures` and
:func:`random_fourier_features`); they only lay them out for the kernels.
"""

import math

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import check_ndim, float_array
from attnkit.ops.matmul import matmul

__all__ = ["random_fourier_features"]

_KINDS = {"cos": 0, "sincos": 1, "exp": 2}

# Up to this input width the kernel's own projection (z stays in cache, one OpenMP region) beats a
# packed GEMM and then the sweep; from ~96 on the GEMM's blocking wins (measured against OpenBLAS: AVX2,
# f32 and f64). Wider inputs go through ops.matmul, whose result does not depend on the thread count.
_KERNEL_PROJECTION_MAX_WIDTH = 64


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


def fused_features(z, kind, *, scale=1.0, offset=None, row_log=None):
    """Apply the fused SIMD transform to projections ``z`` (..., D) (see cpp random_features.h).

    ``cos``: ``scale e^row_log cos(z + offset)``; ``sincos``: the same with ``[sin, cos]`` (2D wide);
    ``exp``: ``scale e^(z + offset + row_log)``. Works in place for cos/exp when ``z`` is C-contiguous.
    """
    lead, width = z.shape[:-1], z.shape[-1]
    flat = np.ascontiguousarray(z).reshape(math.prod(lead), width)  # not -1: width may be 0
    out = np.empty((flat.shape[0], 2 * width), z.dtype) if kind == "sincos" else flat
    if offset is not None:
        offset = np.ascontiguousarray(offset, dtype=z.dtype)
    if row_log is not None:
        row_log = np.ascontiguousarray(row_log, dtype=z.dtype).reshape(-1)
    _core.random_features(flat, offset, row_log, out, float(scale), _KINDS[kind])
    return out.reshape(lead + (out.shape[-1],))


def projected_features(x, weights, kind, *, scale=1.0, offset=None, row_log=None):
    """``fused_features(x @ weights, ...)`` for x (..., f) and weights (f, D), the fastest way: for
    narrow x the kernel projects a block of rows at a time, so ``z`` never goes through memory."""
    lead, f = x.shape[:-1], x.shape[-1]
    if f > _KERNEL_PROJECTION_MAX_WIDTH:
        z = matmul(x.reshape(math.prod(lead), f), weights.astype(x.dtype, copy=False))
        return fused_features(z.reshape(lead + (z.shape[-1],)), kind, scale=scale, offset=offset, row_log=row_log)
    flat = np.ascontiguousarray(x).reshape(math.prod(lead), f)
    weights = np.ascontiguousarray(weights, dtype=x.dtype)
    width = weights.shape[1] * (2 if kind == "sincos" else 1)
    out = np.empty((flat.shape[0], width), x.dtype)
    if offset is not None:
        offset = np.ascontiguousarray(offset, dtype=x.dtype)
    if row_log is not None:
        row_log = np.ascontiguousarray(row_log, dtype=x.dtype).reshape(-1)
    _core.projected_random_features(flat, weights, offset, row_log, out, float(scale), _KINDS[kind])
    return out.reshape(lead + (width,))
