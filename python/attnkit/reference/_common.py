"""Helpers shared by the references."""

import numpy as np


def result_dtype(**arrays):
    """Output dtype of an op: float32 or float64 (float16 -> float32, mixed -> float64)."""
    for name, a in arrays.items():
        if a.dtype.kind != "f":
            raise TypeError(f"{name} must be a float32 or float64 array, got dtype {a.dtype}")
    return np.promote_types(np.result_type(*arrays.values()), np.float32)


def attention_mask(nq, nk, *, mask=None, key_lengths=None, causal=False, window=None, batch_shape=()):
    """Full boolean visibility matrix of an attention problem.

    Query ``i`` may attend to key ``j`` in batch element ``b`` iff ``mask[b, i, j]`` (broadcast to
    ``batch_shape + (nq, nk)``) and ``first_key(i) <= j < end_key(i)``, the rule the kernels state
    once (``Visibility`` in cpp/kernels/visibility.h)::

        i'           = i + nk - nq                    (the query's end-aligned position)
        first_key(i) = max(0, i' - left)
        end_key(i)   = min(key_lengths[b], i' + right + 1)

    with ``(left, right) = window`` (a side of None, or no window, is unbounded), ``right = 0`` if
    causal, and ``key_lengths`` aligned with the LEFT of ``batch_shape`` (``nk`` when not given).

    Parameters
    ----------
    nq, nk : int
        Number of queries and keys.
    mask : array_like of bool, optional
        Broadcastable to ``batch_shape + (nq, nk)``; True means "may attend".
    key_lengths : array_like of int, optional
        Its shape is a leading prefix of ``batch_shape`` (a size-1 dim broadcasts); values in
        ``[0, nk]``.
    causal : bool, default=False
        Bottom-right aligned causal mask; when ``nk < nq`` the first ``nq - nk`` rows see nothing.
    window : (left, right), optional
        A sliding window around each query's end-aligned position (see above).
    batch_shape : tuple of int, default=()
        Leading (batch, head, ...) dims of the result.

    Returns
    -------
    ndarray of bool, shape ``batch_shape + (nq, nk)``
    """
    batch_shape = tuple(batch_shape)
    lengths = nk if key_lengths is None else _aligned_key_lengths(key_lengths, nk, batch_shape)
    first_key, end_key = _visible_keys(nq, nk, lengths, causal, window)
    j = np.arange(nk)
    visible = (first_key <= j) & (j < end_key)
    if mask is not None:
        visible = visible & np.asarray(mask, dtype=bool)
    return np.broadcast_to(visible, batch_shape + (nq, nk)).copy()


def _visible_keys(nq, nk, lengths, causal, window):
    """``first_key(i)`` and ``end_key(i)`` (see :func:`attention_mask`) as arrays of shape ``(..., nq, 1)``."""
    left, right = (None, None) if window is None else window
    right = 0 if causal else right
    position = np.arange(nq)[:, None] + (nk - nq)
    first_key = np.zeros_like(position) if left is None else np.maximum(0, position - left)
    end_key = lengths if right is None else np.minimum(lengths, position + right + 1)
    return first_key, end_key


def _aligned_key_lengths(key_lengths, nk, batch_shape):
    """``key_lengths`` checked and shaped ``(..., 1, 1)`` to broadcast against ``batch_shape + (nq, nk)``."""
    lengths = np.asarray(key_lengths)
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"key_lengths must be an integer array, got dtype {lengths.dtype}")
    prefix = batch_shape[: lengths.ndim]
    if lengths.ndim > len(batch_shape) or any(
        n not in (1, p) for n, p in zip(lengths.shape, prefix)
    ):
        raise ValueError(
            f"key_lengths must have a shape that is a leading prefix of the batch shape "
            f"{batch_shape} (size-1 dims broadcast), got {lengths.shape}"
        )
    if np.any(lengths < 0) or np.any(lengths > nk):
        raise ValueError(f"key_lengths must lie in [0, {nk}]")
    # Align from the left: trailing batch dims, then the (nq, nk) dims, are size 1.
    return lengths.reshape(lengths.shape + (1,) * (len(batch_shape) - lengths.ndim + 2))
