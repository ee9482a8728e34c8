"""Dynamically quantised int8 linear map: int8 weights quantised once, float32 activations quantised
per call, an exact int32 product and a float32 result."""

import dataclasses
import math

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import check_out, float_array

__all__ = ["QuantizedLinearWeight", "int8_linear", "quantize_linear_weight"]

# The kernel's packed layout (cpp/include/attnkit/int8_linear.h): panels of 16 columns, columns padded
# to 64, k padded to 4; byte (j, r) of group g of panel q is values[4 g + r, 16 q + j].
_PANEL, _COLUMN_PADDING, _GROUP = 16, 64, 4
# The int32 sum of k products (qx - zx) qw, each at most 255 * 127 in magnitude, must not overflow.
MAX_IN_FEATURES = 65536


@dataclasses.dataclass(frozen=True, eq=False)
class QuantizedLinearWeight:
    """A (k, n) weight quantised per output column to int8, packed for :func:`int8_linear`.

    Made by :func:`quantize_linear_weight`; the packed layout is the same on every CPU and ISA, and
    the arrays are read-only.

    Attributes
    ----------
    packed : ndarray of int8, 1-D
        ``values`` in the kernel's layout (zero-padded).
    scale : ndarray of float32, shape (n,)
        Per-column scale: the weight is ``values * scale``.
    column_sum : ndarray of int32, shape (n,)
        ``values.sum(axis=0)``, which compensates the activations' zero point.
    shape : tuple of int
        ``(k, n)`` = (in_features, out_features).
    """

    packed: np.ndarray
    scale: np.ndarray
    column_sum: np.ndarray
    shape: tuple[int, int]

    def __post_init__(self):
        # Checked when built, not at the first product (whose message named an ``out`` never passed).
        shape = self.shape
        if not (isinstance(shape, tuple) and len(shape) == 2 and all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in shape)):
            raise ValueError(f"shape must be (k, n), two non-negative ints, got {shape!r}")
        k, n = (int(v) for v in shape)
        size = -(-k // _GROUP) * _GROUP * -(-n // _COLUMN_PADDING) * _COLUMN_PADDING
        for name, dtype, want in (("packed", np.int8, (size,)), ("scale", np.float32, (n,)),
                                  ("column_sum", np.int32, (n,))):
            value = getattr(self, name)
            if not isinstance(value, np.ndarray) or value.dtype != dtype or value.shape != want:
                raise ValueError(f"{name} must be a {np.dtype(dtype).name} array of shape {want} for shape {shape}, "
                                 f"got {getattr(value, 'dtype', type(value).__name__)} "
                                 f"{getattr(value, 'shape', '')}; make one with quantize_linear_weight")
            if not value.flags.c_contiguous:
                raise ValueError(f"{name} must be C-contiguous")

    @property
    def values(self) -> np.ndarray:
        """The int8 weights, shape (k, n), unpacked."""
        k, n = self.shape
        k4, n64 = -(-k // _GROUP) * _GROUP, -(-n // _COLUMN_PADDING) * _COLUMN_PADDING
        blocks = self.packed.reshape(n64 // _PANEL, k4 // _GROUP, _PANEL, _GROUP)
        return np.ascontiguousarray(blocks.transpose(1, 3, 0, 2).reshape(k4, n64)[:k, :n])

    def dequantize(self) -> np.ndarray:
        """The float32 weight these int8 values stand for, ``values * scale``, shape (k, n)."""
        return self.values.astype(np.float32) * self.scale


def quantize_linear_weight(weight: ArrayLike) -> QuantizedLinearWeight:
    """Quantise a linear layer's weight to int8, symmetric per output column, and pack it.

    ``scale[j] = max_p |weight[p, j]| / 127`` (float32) and ``values[p, j] = rint(weight[p, j] /
    scale[j])`` in [-127, 127]: the zero point is 0 and -128 is never used, so each weight is off by
    at most ``scale[j] / 2``. A column of zeros (or one whose scale would be below the smallest normal
    float32) gets ``scale = 1`` and zeros.

    Parameters
    ----------
    weight : array-like of float32 or float64, shape (k, n)
        The weight of ``x @ weight`` (``nn.Linear``'s layout: in_features x out_features), finite.

    Returns
    -------
    QuantizedLinearWeight
        Packed values, scales and column sums, for :func:`int8_linear`.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> q = ops.quantize_linear_weight(np.array([[1.0, -0.5], [-2.0, 0.25]]))
    >>> q.values.tolist(), q.scale.tolist()
    ([[64, -127], [-127, 64]], [0.015748031437397003, 0.003937007859349251])
    """
    w = float_array(weight, "weight")
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D (k, n) = (in_features, out_features), got shape {w.shape}")
    k, n = w.shape
    if k > MAX_IN_FEATURES:
        raise ValueError(f"weight must have at most {MAX_IN_FEATURES} rows (in_features), got {k}")
    if not np.all(np.isfinite(w)):
        raise ValueError("weight must be finite, got NaN or inf")
    w = w.astype(np.float64)
    scale = (np.abs(w).max(axis=0, initial=0.0) / 127.0).astype(np.float32)
    scale[~(scale >= np.finfo(np.float32).tiny)] = 1.0
    values = np.clip(np.rint(w / scale.astype(np.float64)), -127, 127).astype(np.int8)
    k4, n64 = -(-k // _GROUP) * _GROUP, -(-n // _COLUMN_PADDING) * _COLUMN_PADDING
    padded = np.zeros((k4, n64), np.int8)
    padded[:k, :n] = values
    packed = np.ascontiguousarray(padded.reshape(k4 // _GROUP, _GROUP, n64 // _PANEL, _PANEL).transpose(2, 0, 3, 1))
    arrays = packed.ravel(), scale, values.sum(axis=0, dtype=np.int32)
    for array in arrays:  # read-only: the three must stay consistent with each other
        array.flags.writeable = False
    return QuantizedLinearWeight(packed=arrays[0], scale=arrays[1], column_sum=arrays[2], shape=(k, n))


def int8_linear(x: ArrayLike, qweight: QuantizedLinearWeight, *, bias: ArrayLike | None = None,
                out: np.ndarray | None = None) -> np.ndarray:
    """``x @ weight (+ bias)`` with int8 arithmetic: dynamic per-row quantisation of ``x``.

    Each row of ``x`` is quantised on the fly to uint8, asymmetric over its range including 0:
    ``lo = min(x_i, 0)``, ``hi = max(x_i, 0)``, ``sx = (hi - lo) / 255``, zero point
    ``zx = rint(-lo / sx)``, ``qx = clip(rint(x / sx) + zx, 0, 255)``. The products ``qx @ values``
    are summed exactly in int32 (with VNNI where the CPU has it; elsewhere with an exact 16-bit
    product that never saturates, so every ISA gives the same sums), then
    ``y = sx * scale * (qx @ values - zx * column_sum) (+ bias)`` in float32.

    A row spanning less than 255 times the smallest normal float32 (~3e-36) counts as zeros.

    Error: each activation is off by at most ``sx`` (``sx / 2`` except at the top of the range, where
    the zero point's rounding may cost one step) and each weight by ``scale / 2``, so
    ``|y[i, j] - (x @ weight)[i, j]| <= sx_i ||weight[:, j]||_1 + scale_j / 2 ||x_i||_1 +
    k sx_i scale_j / 2``, plus float32 rounding. Typical relative errors are around 1e-2.

    Parameters
    ----------
    x : array-like of float32, shape (..., k)
        Input; float16 widens to float32. float64 is refused (the product is float32 arithmetic, and
        a silent downcast would hide that): cast it first. Any memory layout (copied to C order when
        its rows are not contiguous). A row with NaN or inf gives a row of NaN.
    qweight : QuantizedLinearWeight
        From :func:`quantize_linear_weight`, shape (k, n).
    bias : array-like of float, shape (n,), optional
        Added in float32.
    out : ndarray of float32, shape (..., n), optional
        C-contiguous, written in place and returned (a layer reuses its buffer across calls).

    Returns
    -------
    ndarray of float32, shape (..., n)
        ``out`` when given.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> q = ops.quantize_linear_weight(np.eye(2))
    >>> ops.int8_linear(np.array([[1.0, -1.0]], np.float32), q, bias=[0.5, 0.0]).round(2).tolist()
    [[1.5, -1.0]]
    """
    rows, bias_row = _check(x, qweight, bias)
    (k, n), m = qweight.shape, math.prod(rows.shape[:-1])
    shape = (*rows.shape[:-1], n)
    if out is None:
        out = np.empty(shape, np.float32)
    else:
        check_out(out, shape, np.float32, "(..., n)")
    _core.int8_linear(rows.reshape(m, k), qweight.packed, qweight.scale, qweight.column_sum, bias_row,
                      out.reshape(m, n), None)
    return out


def _accumulators(x: ArrayLike, qweight: QuantizedLinearWeight) -> np.ndarray:
    """The kernel's int32 sums ``qx @ values`` of :func:`int8_linear` (no zero point), for tests."""
    rows, _ = _check(x, qweight, None)
    (k, n), m = qweight.shape, math.prod(rows.shape[:-1])
    acc = np.empty((*rows.shape[:-1], n), np.int32)
    _core.int8_linear(rows.reshape(m, k), qweight.packed, qweight.scale, qweight.column_sum, None, None,
                      acc.reshape(m, n))
    return acc


def _check(x: ArrayLike, qweight: QuantizedLinearWeight,
           bias: ArrayLike | None) -> tuple[np.ndarray, np.ndarray | None]:
    """``x`` as C-ordered float32 rows and ``bias`` as contiguous float32, after the checks."""
    if not isinstance(qweight, QuantizedLinearWeight):
        raise TypeError(f"qweight must be a QuantizedLinearWeight (from quantize_linear_weight), "
                        f"got {type(qweight).__name__}")
    arr = float_array(x, "x")
    if arr.dtype != np.float32:
        raise TypeError(f"x must be float32 (int8_linear computes in float32; cast with x.astype(np.float32)), "
                        f"got dtype {arr.dtype}")
    k, n = qweight.shape
    if arr.ndim < 1 or arr.shape[-1] != k:
        raise ValueError(f"x must have shape (..., k) with k = {k} to match qweight {qweight.shape}, got {arr.shape}")
    if bias is None:
        return np.ascontiguousarray(arr), None
    b = float_array(bias, "bias")
    if b.shape != (n,):
        raise ValueError(f"bias must have shape (n,) = ({n},) to match qweight {qweight.shape}, got {b.shape}")
    return np.ascontiguousarray(arr), np.ascontiguousarray(b, dtype=np.float32)


