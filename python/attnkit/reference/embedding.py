"""Reference gradient of a table lookup, in the summation order the kernel promises."""

import numpy as np

__all__ = ["embedding_backward"]


def embedding_backward(grad_weight, ids, grad, *, padding_idx=None):
    """``grad_weight[v] += sum of grad[t] over ids[t] == v`` (not ``padding_idx``), in place; returns it.

    Unlike the other references this one computes in ``grad_weight``'s dtype, since the op's contract is
    an order of additions: each id's rows, cast to that dtype, summed from its first position to its last,
    then added to the table's row once.
    """
    ids = np.asarray(ids).reshape(-1)
    rows = np.asarray(grad).reshape(ids.size, grad_weight.shape[1]).astype(grad_weight.dtype)
    for v in np.unique(ids):
        if v == padding_idx:
            continue
        positions = np.flatnonzero(ids == v)
        total = rows[positions[0]].copy()
        for t in positions[1:]:
            total += rows[t]
        grad_weight[v] += total
    return grad_weight
