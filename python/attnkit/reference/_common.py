"""Helpers shared by the references."""

import numpy as np


def result_dtype(**arrays):
    """Output dtype of an op: float32 or float64 (float16 -> float32, mixed -> float64)."""
    for name, a in arrays.items():
        if a.dtype.kind != "f":
            raise TypeError(f"{name} must be a float32 or float64 array, got dtype {a.dtype}")
    return np.promote_types(np.result_type(*arrays.values()), np.float32)


def attention_mask(nq, nk, *, mask=None, key_lengths=None, causal=False, batch_shape=()):
    """Full boolean visibility matrix of an attention problem.

    Query ``i`` may attend to key ``j`` in batch element ``b`` iff all of::

        mask[b, i, j]                (broadcast to batch_shape + (nq, nk))
        j < key_lengths[b]           (key_lengths aligned with the LEFT of batch_shape)
        j <= i + nk - nq             (only when causal: bottom-right aligned)

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
    batch_shape : tuple of int, default=()
        Leading (batch, head, ...) dims of the result.

    Returns
    -------
    ndarray of bool, shape ``batch_shape + (nq, nk)``
    """
    batch_shape = tuple(batch_shape)
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    visible = (j <= i + (nk - nq)) if causal else np.ones((nq, nk), dtype=bool)
    if mask is not None:
        visible = visible & np.asarray(mask, dtype=bool)
    if key_lengths is not None:
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
        lengths = lengths.reshape(lengths.shape + (1,) * (len(batch_shape) - lengths.ndim + 2))
        visible = visible & (np.arange(nk) < lengths)
    return np.broadcast_to(visible, batch_shape + (nq, nk)).copy()
