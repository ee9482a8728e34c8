"""Reference dropout: the counter-based mask, written out in NumPy's uint32 arithmetic."""

import math

import numpy as np

from attnkit.reference._common import result_dtype

__all__ = ["dropout", "dropout_keep"]


def _lowbias32(h):
    """C. Wellons' "lowbias32" integer hash, a bijection of uint32 (products wrap modulo 2^32)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x7FEB352D)
    h = h ^ (h >> np.uint32(15))
    h = h * np.uint32(0x846CA68B)
    return h ^ (h >> np.uint32(16))


def _round_keys(key):
    """The two 32-bit round keys of a 64-bit key (a bijection), so that nearby keys give unrelated masks."""
    with np.errstate(over="ignore"):
        k1 = _lowbias32(np.uint32(key >> 32) ^ np.uint32(0x9E3779B9))
        return _lowbias32(np.uint32(key & 0xFFFFFFFF) ^ k1), k1


def dropout_keep(key, n, p):
    """Which of ``n`` elements (in C order) :func:`dropout` keeps under ``key``: a bool array of length ``n``.

    With ``h`` the "lowbias32" hash, ``k1 = h(hi(key) ^ 0x9E3779B9)`` and ``k0 = h(lo(key) ^ k1)``,
    element ``i`` is kept when ``h(h(lo(i) ^ k0) ^ k1 ^ hi(i) * 0x9E3779B9)`` is at least ``ceil(p 2^32)``
    (clipped to ``2^32 - 1``); ``lo``/``hi`` are the low and high 32 bits, products wrap modulo 2^32.
    """
    i = np.arange(n, dtype=np.uint64)
    lo, hi = (i & np.uint64(0xFFFFFFFF)).astype(np.uint32), (i >> np.uint64(32)).astype(np.uint32)
    k0, k1 = _round_keys(int(key))
    with np.errstate(over="ignore"):
        bits = _lowbias32(_lowbias32(lo ^ k0) ^ k1 ^ (hi * np.uint32(0x9E3779B9)))
    return bits >= np.uint32(min(math.ceil(p * 2.0**32), 2**32 - 1))


def dropout(x, p, key):
    """Inverted dropout: ``x / (1 - p)`` where :func:`dropout_keep` keeps, ``x * 0`` elsewhere.

    Parameters
    ----------
    x : array-like of float
        Input, any shape; the mask follows its elements in C order.
    p : float in [0, 1)
        Drop probability.
    key : int in [0, 2**64)
        The mask's key.

    Returns
    -------
    ndarray
        Same shape as ``x``, computed in float64 and returned in ``x``'s float dtype.
    """
    x = np.asarray(x)
    keep = dropout_keep(int(key), x.size, float(p)).reshape(x.shape)
    out = x.astype(np.float64) * np.where(keep, 1.0 / (1.0 - p), 0.0)
    return out.astype(result_dtype(x=x))
