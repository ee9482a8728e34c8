"""Attention visibility in one internal form.

Users say which keys a query may see with a boolean ``mask`` (True = may attend), ``key_lengths``
(keys ``j < length`` are real, the rest padding), ``causal`` and a sliding ``window``. The kernels want padding as
lengths, because padded keys are then skipped instead of computed and masked: a mask that is really
a key-padding mask (the same for every query, True then False along the keys) is turned into
lengths here.
"""

import math
import numbers

import numpy as np

from attnkit._validation import as_array


def check_mask(mask, nq, nk, inputs=None):
    """Validate a boolean mask broadcastable to (..., nq, nk); return it as an array (>= 2-D). ``inputs``
    (e.g. "q (2, 3, 4), k (2, 5, 4)") says where nq and nk come from, for the message."""
    m = as_array(mask, "mask")
    if m.dtype != np.bool_:
        raise TypeError(
            f"mask must be a boolean array (True = may attend), got dtype {m.dtype}; "
            "use bias= for additive float masks, or mask.astype(bool)"
        )
    given = m.shape
    if m.ndim < 2:
        m = m.reshape((1,) * (2 - m.ndim) + m.shape)
    mq, mk = m.shape[-2:]
    if mq not in (1, nq) or mk not in (1, nk):
        source = f" of {inputs}" if inputs else ""
        raise ValueError(f"mask must broadcast to (..., Nq, Nk) = (..., {nq}, {nk}){source}, got shape {given}")
    return m


def check_window(window):
    """``(left, right)`` of a ``window`` argument as the kernels take it: -1 for an unbounded side.

    ``window`` is None (no window) or a pair ``(left, right)``: query i sees keys j with
    ``i' - left <= j <= i' + right``, ``i' = i + Nk - Nq``; each side a non-negative int, or None for
    unbounded.
    """
    if window is None:
        return -1, -1
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise TypeError(f"window must be None or a pair (left, right) of non-negative ints (None: unbounded), "
                        f"got {window!r}")
    sides = []
    for name, side in zip(("left", "right"), window):
        if side is None:
            sides.append(-1)
            continue
        if isinstance(side, bool) or not isinstance(side, numbers.Integral):
            raise TypeError(f"window's {name} side must be a non-negative int or None, got {side!r}")
        if side < 0:
            raise ValueError(f"window's {name} side must be >= 0 (keys before/after a query's position), got {side}")
        sides.append(int(side))
    return sides[0], sides[1]


def check_key_lengths(key_lengths, batch_shape, nk, inputs=None):
    """Validate key lengths (shape: a leading prefix of the batch dims, aligned from the left; values
    in [0, nk]); return one int64 length per flattened batch item. ``inputs`` (e.g. "q (2, 3, 4), k
    ...") says where the batch dims come from, for the message."""
    kl = as_array(key_lengths, "key_lengths")
    if kl.dtype.kind not in "iu":
        raise TypeError(f"key_lengths must be an integer array, got dtype {kl.dtype}")
    prefix = batch_shape[: kl.ndim]
    if kl.ndim > len(batch_shape) or any(s not in (1, p) for s, p in zip(kl.shape, prefix)):
        raise ValueError(
            f"key_lengths must have a shape that is a leading prefix of the batch dims {batch_shape} "
            f"{'of ' + inputs + ' ' if inputs else ''}(e.g. {batch_shape[:1]}), got shape {kl.shape}"
        )
    if kl.size and (kl.min() < 0 or kl.max() > nk):
        raise ValueError(
            f"key_lengths must lie in [0, Nk] = [0, {nk}], got values from {kl.min()} to {kl.max()}"
        )
    kl = kl.reshape(kl.shape + (1,) * (len(batch_shape) - kl.ndim))
    return np.ascontiguousarray(np.broadcast_to(kl, batch_shape).reshape(-1), dtype=np.int64)


def padding_lengths(mask, batch_shape, nk):
    """If ``mask`` is a key-padding mask (one row per batch item, True then False), return its lengths
    per flattened batch item; otherwise None."""
    if mask.shape[-2] != 1 or mask.shape[-1] != nk:
        return None
    rows = np.broadcast_to(mask, batch_shape + (1, nk)).reshape(math.prod(batch_shape), nk)  # nk may be 0
    lengths = rows.sum(axis=1)
    if not np.array_equal(rows, np.arange(nk) < lengths[:, None]):
        return None
    return lengths.astype(np.int64)
