"""Argmax ("hard") attention: each query takes the value of its best-scoring visible key."""

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._memory import UNCHECKED_BYTES, checked_empty
from attnkit.ops.attention import _Problem

__all__ = ["argmax_attention"]


def argmax_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, mask: ArrayLike | None = None,
                     key_lengths: ArrayLike | None = None, causal: bool = False,
                     window: tuple[int | None, int | None] | None = None, bias: ArrayLike | None = None,
                     scale: float | None = None) -> np.ndarray:
    """Argmax attention: ``out[..., i, :] = v[..., j*, :]`` with ``j*`` the visible key of query ``i`` whose
    logit ``scale * dot(q_i, k_j) + bias_ij`` is largest.

    The limit of softmax attention as the logits are scaled up (a temperature going to 0): each query reads
    exactly one key. Stacked n layers deep with h heads and residual connections, a position's output depends
    on at most ``(h + 1)^n`` positions (its receptive field: itself and one key per head, per layer); a window
    of k keys caps that at ``n k + 1``, however many routes lead there. Same arguments and visibility rules as
    :func:`attnkit.scaled_dot_product_attention` (masks, key lengths, ``causal``, ``window``, bias); it has no
    gradient (the choice is piecewise constant).

    Parameters
    ----------
    q, k, v, mask, key_lengths, causal, window, bias, scale :
        As for :func:`attnkit.scaled_dot_product_attention`. Only the sign of ``scale`` and its size relative
        to ``bias`` matter.

    Returns
    -------
    out : ndarray of shape (..., Nq, dv)
        Each row a row of ``v``. Ties go to the lowest key index; a query that sees no key (or only logits of
        -inf) gets zeros; a query with a NaN logit among its visible keys gets NaN.

    Examples
    --------
    >>> import numpy as np, attnkit
    >>> q = np.array([[1.0, 0.0], [0.0, 1.0]]); k = np.array([[2.0, 0.0], [0.0, 3.0]])
    >>> attnkit.argmax_attention(q, k, v=np.array([[10.0], [20.0]])).tolist()
    [[10.0], [20.0]]
    """
    p = _Problem(q, k, v, mask, key_lengths, causal, window, bias, scale)
    out = checked_empty(p.batch + (p.nq, p.dv), p.dtype, "the output", unchecked_bytes=UNCHECKED_BYTES)
    _core.argmax_attention(v=p.v, out=out.reshape(p.flat, p.nq, p.dv), **p.operands)
    return out
