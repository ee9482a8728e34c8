"""Matrix product on attnkit's own threads, with a result that does not depend on the thread count."""

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import check_bool, check_out, check_out_rows, float_array

__all__ = ["matmul"]


def matmul(a: ArrayLike, b: ArrayLike, *, bias: ArrayLike | None = None, out: np.ndarray | None = None,
           accumulate: bool = False, b_column_sums: np.ndarray | None = None) -> np.ndarray:
    """Matrix product ``a @ b (+ out if accumulate) (+ bias)``, deterministic whatever the thread count.

    Runs attnkit's packed GEMM kernel on attnkit's OpenMP threads (:func:`attnkit.set_num_threads`),
    not on NumPy's BLAS, so NumPy's own thread settings are left alone.

    For a given ISA (:func:`attnkit.show_config`), the result is bit-identical whatever the number of
    threads and whatever the memory layout of ``a`` and ``b``: each output element is always the same
    sequence of roundings (fused multiply-adds in ``k`` order, in blocks of fixed length summed in
    order onto the output, then the bias). It can differ from NumPy's in the last bits, as two BLAS
    libraries differ from each other. NaN and inf behave as in BLAS: a NaN in row ``i`` of ``a``
    reaches only row ``i`` of the result, one in column ``j`` of ``b`` only column ``j``.

    Parameters
    ----------
    a : array-like of float32 or float64, shape (m, k)
        Left operand, read in place whatever its strides (a transposed view ``x.T``, Fortran order,
        slices, negative strides); copied only when a stride is not a whole number of elements, or
        when ``a`` overlaps ``out``. float16 widens to float32.
    b : array-like of float32 or float64, shape (k, n)
        Right operand, read like ``a``.
    bias : array-like of float, shape (n,), optional
        Added to every row of the result.
    out : ndarray, shape (m, n), optional
        Written in place and returned. Its dtype must be the result dtype and its rows contiguous
        (``out.strides[1] == out.itemsize``); the rows themselves may be any distance apart.
    accumulate : bool, default=False
        Add the product into ``out`` (which is then required) instead of overwriting it: a layer's
        ``grads["weight"] += x.T @ g`` without a temporary.
    b_column_sums : ndarray, shape (n,), optional
        Also written with the column sums of ``b`` (in the result dtype): ``0 + b[0, j] + b[1, j] + ...`` in row
        order (NumPy's ``b.sum(axis=0)`` adds the same way when ``b``'s rows are contiguous and ``n > 1``), read
        while ``b`` is packed for the product: a layer's bias gradient then costs no pass of its own over ``g``
        in ``x.T @ g``. C-contiguous, writable, the result dtype, sharing no memory with ``a``, ``b``, ``bias``
        or ``out``.

    Returns
    -------
    ndarray of shape (m, n)
        ``out`` when given. float32 when every input is float32 (or float16), else float64.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> ops.matmul(np.array([[1.0, 2.0]]), np.array([[3.0], [4.0]]), bias=[0.5]).tolist()
    [[11.5]]
    >>> grad = np.zeros((2, 1))
    >>> _ = ops.matmul(np.ones((3, 2)).T, np.ones((3, 1)), out=grad, accumulate=True)
    >>> grad.tolist()
    [[3.0], [3.0]]
    """
    a, b = float_array(a, "a"), float_array(b, "b")
    if a.ndim != 2:
        raise ValueError(f"a must be 2-D (m, k), got shape {a.shape}")
    if b.ndim != 2:
        raise ValueError(f"b must be 2-D (k, n), got shape {b.shape}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a (m, k) and b (k, n) must have the same k, got a {a.shape} and b {b.shape}")
    (m, _), n = a.shape, b.shape[1]
    accumulate = check_bool(accumulate, "accumulate")
    if bias is not None:
        bias = float_array(bias, "bias")
        if bias.shape != (n,):
            raise ValueError(f"bias must have shape (n,) = ({n},) to match b {b.shape}, got {bias.shape}")
    dtype = np.result_type(a, b, *(() if bias is None else (bias,)))
    if out is None:
        if accumulate:
            raise ValueError("accumulate=True adds into out, so out is required; got out=None")
        out, given = np.empty((m, n), dtype), None
    else:
        _check_out(out, (m, n), dtype)
        given = out
    a, b = _operand(a, dtype, given), _operand(b, dtype, given)
    if bias is not None:
        bias = np.ascontiguousarray(bias, dtype=dtype)
        bias = bias.copy() if given is not None and np.may_share_memory(bias, given) else bias
    if b_column_sums is not None:
        _check_sums(b_column_sums, n, dtype, (a, b, out) + (() if bias is None else (bias,)))
    _core.matmul(a, b, bias, out, accumulate, b_column_sums)
    return out


def _check_sums(sums, n, dtype, others):
    """b_column_sums is written by the kernel while a, b, bias and out are read or written: its own memory."""
    check_out(sums, (n,), dtype, "(n,)", name="b_column_sums")
    if any(np.may_share_memory(sums, other) for other in others):
        raise ValueError("b_column_sums must not share memory with a, b, bias or out")


def _check_out(out, shape, dtype):
    """Rows contiguous, but they may lie apart (:func:`check_out_rows`)."""
    check_out_rows(out, shape, dtype, "(m, n)")


def _operand(x: np.ndarray, dtype: np.dtype, out: np.ndarray | None) -> np.ndarray:
    """``x`` as ``dtype``, read in place unless it is not aligned to whole elements (a stride or its
    address) or it overlaps the caller's ``out`` (which the kernel writes while other threads still
    read it)."""
    if x.dtype != dtype:
        return x.astype(dtype, order="C")
    if not x.flags.aligned or (out is not None and np.may_share_memory(x, out)):
        return np.array(x, order="C")
    return x
