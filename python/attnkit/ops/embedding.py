"""The gradient of a table lookup (an embedding), summed into the table's gradient in place."""

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import as_array, check_int, float_array

__all__ = ["embedding_backward"]


def embedding_backward(
    grad_weight: np.ndarray, ids: ArrayLike, grad: ArrayLike, *, padding_idx: int | None = None
) -> np.ndarray:
    """Add the gradient of ``out = weight[ids]`` into ``grad_weight``, in place.

    Row ``v`` of ``grad_weight`` gets the sum of ``grad[t]`` over the positions ``t`` with ``ids[t] == v``
    (``ids`` and ``grad`` flattened over their leading axes), except ``v == padding_idx``. Each id's rows
    are summed in the order of their positions, from the first, and the sum is added once, so the result is
    the same bits on every ISA and thread count (:func:`attnkit.reference.embedding_backward` writes the
    same order out in NumPy). It is what ``numpy.add.at(grad_weight, ids, grad)`` computes up to rounding,
    in C++ and threaded: for 4,096 tokens of width 128, ~0.1 ms instead of NumPy's sort-and-sum's ~1 ms.

    Parameters
    ----------
    grad_weight : ndarray of shape (vocab, width), float32 or float64
        The table's gradient, writable, any layout; updated in place.
    ids : array-like of int
        Row of the table each position read, any shape, each in ``[0, vocab)``.
    grad : array-like of float, shape ``ids.shape + (width,)``
        Gradient of the lookup's output; cast to ``grad_weight``'s dtype first.
    padding_idx : int, optional
        A row in ``[0, vocab)`` that gets no gradient (its positions are skipped).

    Returns
    -------
    ndarray
        ``grad_weight``.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> g = np.zeros((4, 2))
    >>> ops.embedding_backward(g, [[1, 3, 1]], np.ones((1, 3, 2)), padding_idx=3).tolist()
    [[0.0, 0.0], [2.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    """
    if not isinstance(grad_weight, np.ndarray) or grad_weight.dtype not in (np.float32, np.float64):
        kind = grad_weight.dtype if isinstance(grad_weight, np.ndarray) else type(grad_weight).__name__
        raise TypeError(f"grad_weight must be a float32 or float64 ndarray, got {kind}")
    if grad_weight.ndim != 2 or not grad_weight.flags.writeable:
        raise ValueError(f"grad_weight must be a writable 2-D array, got shape {grad_weight.shape} "
                         f"(writable: {grad_weight.flags.writeable})")
    vocab, width = grad_weight.shape
    ids = as_array(ids, "ids")
    if ids.dtype.kind not in "iu":
        raise TypeError(f"ids must be an integer array, got dtype {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        bad = ids[(ids < 0) | (ids >= vocab)].flat[0]
        raise ValueError(f"ids must be in [0, {vocab}) (grad_weight's rows), got {bad}")
    grad = float_array(grad, "grad")
    if grad.shape != ids.shape + (width,):
        raise ValueError(f"grad must have shape ids.shape + (width,) = {ids.shape + (width,)}, got {grad.shape}")
    if padding_idx is not None:
        padding_idx = check_int(padding_idx, "padding_idx", minimum=0, maximum=vocab - 1)
    rows = np.ascontiguousarray(grad.reshape(ids.size, width), dtype=grad_weight.dtype)
    if np.may_share_memory(rows, grad_weight):  # read while the table is written
        rows = rows.copy()
    flat_ids = np.ascontiguousarray(ids.reshape(-1), dtype=np.int64)
    if grad_weight.flags.c_contiguous:
        _core.embedding_backward(grad_weight, flat_ids, rows, -1 if padding_idx is None else padding_idx)
        return grad_weight
    # Another layout (a transposed table): the same sums into a compact C-ordered block of the ids present, each
    # added to its row once (0 + sum is the sum), so the bits are those of the C-ordered case.
    kept = flat_ids != padding_idx if padding_idx is not None else slice(None)
    present, slots = np.unique(flat_ids[kept], return_inverse=True)
    compact = np.zeros((present.size, width), grad_weight.dtype)
    _core.embedding_backward(compact, np.ascontiguousarray(slots, dtype=np.int64), np.ascontiguousarray(rows[kept]), -1)
    grad_weight[present] += compact
    return grad_weight
