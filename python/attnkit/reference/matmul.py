"""Reference matrix product."""

import numpy as np

from attnkit.reference._common import result_dtype

__all__ = ["matmul"]


def matmul(a, b, *, bias=None, out=None, accumulate=False):
    r"""Matrix product with an optional bias and accumulation into ``out``, in float64.

    .. math:: C = A B \;(+\, C_\text{out} \text{ if accumulate})\; (+\, \mathbf{1}\, \text{bias}^\top)

    Parameters
    ----------
    a : array_like of float, shape (m, k)
    b : array_like of float, shape (k, n)
    bias : array_like of float, shape (n,), optional
        Added to every row.
    out : ndarray of shape (m, n), optional
        Receives the result (cast to its dtype), and is returned.
    accumulate : bool, default=False
        Add the product to ``out`` (required then) instead of overwriting it.

    Returns
    -------
    ndarray of shape (m, n)
        ``out`` when given; else float32 for float32 (or float16) inputs, float64 otherwise.
    """
    a, b = np.asarray(a), np.asarray(b)
    arrays = {"a": a, "b": b, **({} if bias is None else {"bias": np.asarray(bias)})}
    dtype = result_dtype(**arrays)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a must be (m, k) and b (k, n), got a {a.shape} and b {b.shape}")
    if accumulate and out is None:
        raise ValueError("accumulate=True needs out")
    c = a.astype(np.float64) @ b.astype(np.float64)
    if accumulate:
        c = np.asarray(out, dtype=np.float64) + c
    if bias is not None:
        c = c + np.asarray(bias, dtype=np.float64)
    if out is None:
        return c.astype(dtype)
    out[...] = c
    return out
