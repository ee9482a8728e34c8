"""Softmax cross-entropy with integer targets, fused with its gradient."""

import math

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import as_array, check_bool, check_int, check_ndim, check_real, float_array

__all__ = ["cross_entropy"]

_REDUCTIONS = ("mean", "sum", "none")
_INT64 = np.iinfo(np.int64)


def cross_entropy(
    logits: ArrayLike,
    targets: ArrayLike,
    *,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    class_weight: ArrayLike | None = None,
    return_grad: bool = False,
) -> np.ndarray | float | tuple[np.ndarray | float, np.ndarray]:
    """Cross-entropy between ``softmax(logits)`` and integer targets, optionally with its gradient.

    With ``s = label_smoothing`` and ``C`` classes, the target distribution of a row is
    ``q = (1 - s) onehot(target) + s / C`` and its loss is ``-sum_c q_c log softmax(logits)_c``.
    Rows whose target is ``ignore_index`` (padding) have loss 0, gradient 0 and do not count in the
    mean. One pass over the logits computes the loss and, with ``return_grad``, the gradient
    ``weight * (softmax(logits) - q)``; no ``log softmax`` array is formed.

    Parameters
    ----------
    logits : array-like of float32 or float64, shape (..., C)
        Unnormalised scores; the classes are the last axis (as for ``(batch, seq, vocab)`` outputs).
    targets : array-like of int, shape (...)
        Class indices in ``[0, C)``, or ``ignore_index``.
    ignore_index : int, default=-100
        Target value marking rows to ignore.
    label_smoothing : float in [0, 1), default=0.0
        Probability mass spread uniformly over all classes.
    reduction : {"mean", "sum", "none"}, default="mean"
        ``"mean"`` divides the (weighted) sum by the number of counted rows (the sum of their class
        weights); it is 0 when every row is ignored. ``"none"`` returns one loss per row.
    class_weight : array-like of float, shape (C,), optional
        Non-negative weight of each class; a row's loss is scaled by the weight of its target class
        (PyTorch's ``weight`` without label smoothing; with smoothing PyTorch weights each smoothed
        class term instead). A row of weight 0 counts like an ignored one.
    return_grad : bool, default=False
        Also return the gradient of the reduced loss with respect to ``logits`` (for ``"none"``,
        of the sum of the row losses).

    Returns
    -------
    loss : scalar of the logits' dtype, or ndarray of shape (...) for ``reduction="none"``
        A row whose logits are all ``-inf`` has an infinite loss and zero gradient.
    dlogits : ndarray of shape (..., C)
        Only with ``return_grad``.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> logits = np.log(np.array([[0.25, 0.75], [0.5, 0.5]]))
    >>> round(float(ops.cross_entropy(logits, [1, -100])), 4)  # -log(0.75): the second row is ignored
    0.2877
    """
    logits = float_array(logits, "logits")
    check_ndim(logits, "logits", 1, "(..., C)")
    lead, n_classes = logits.shape[:-1], logits.shape[-1]
    if n_classes == 0:
        raise ValueError(f"logits must have at least one class (last axis), got shape {logits.shape}")
    ignore_index = check_int(ignore_index, "ignore_index")
    if not _INT64.min <= ignore_index <= _INT64.max:  # the kernel compares it with int64 targets
        raise ValueError(f"ignore_index must fit in int64, got {ignore_index}")
    return_grad = check_bool(return_grad, "return_grad")
    targets = _check_targets(targets, lead, n_classes, ignore_index)
    label_smoothing = check_real(label_smoothing, "label_smoothing")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    dtype = logits.dtype
    counted = targets != ignore_index
    if class_weight is None:
        row_weight = None
        total = float(np.count_nonzero(counted))
    else:
        weights = _check_class_weight(class_weight, n_classes)
        row_weight = np.where(counted, weights[np.where(counted, targets, 0)], 0.0)
        total = float(row_weight.sum())

    rows = math.prod(lead)
    flat = np.ascontiguousarray(logits).reshape(rows, n_classes)
    loss = np.empty(rows, dtype)
    dlogits = np.empty_like(flat) if return_grad else None
    grad_weight = _gradient_weight(row_weight, reduction, total, rows, dtype)
    _core.cross_entropy(flat, targets.reshape(rows), grad_weight, loss, dlogits, ignore_index, label_smoothing)

    if row_weight is not None:  # a row of weight 0 adds 0, even when its loss is infinite
        w = row_weight.reshape(rows)
        loss = np.multiply(loss, w, out=np.zeros_like(loss), where=w > 0, casting="same_kind")
    result: np.ndarray | float
    if reduction == "none":
        result = loss.reshape(lead)
    else:
        summed = float(np.sum(loss, dtype=np.float64))
        if reduction == "mean":
            summed = summed / total if total > 0 else 0.0
        result = dtype.type(summed)
    return result if dlogits is None else (result, dlogits.reshape(logits.shape))


def _check_targets(targets: ArrayLike, lead: tuple[int, ...], n_classes: int, ignore_index: int) -> np.ndarray:
    """``targets`` as a C-contiguous int64 array of shape ``lead``, every entry a class or ignored."""
    targets = as_array(targets, "targets")
    if targets.dtype.kind not in "iu":
        raise TypeError(f"targets must be an integer array of class indices, got dtype {targets.dtype}")
    if targets.shape != lead:
        raise ValueError(f"targets must have the shape of logits without its last (class) axis, {lead}, "
                         f"got {targets.shape}")
    bad = (targets != ignore_index) & ((targets < 0) | (targets >= n_classes))
    if bad.any():
        where = tuple(int(i) for i in np.unravel_index(np.flatnonzero(bad)[0], bad.shape))
        index = ", ".join(map(str, where)) or "()"
        raise ValueError(f"targets must be class indices in [0, {n_classes}) or ignore_index={ignore_index}; "
                         f"targets[{index}] = {targets[where]}")
    return np.ascontiguousarray(targets, dtype=np.int64)


def _check_class_weight(class_weight: ArrayLike, n_classes: int) -> np.ndarray:
    class_weight = float_array(class_weight, "class_weight").astype(np.float64)
    if class_weight.shape != (n_classes,):
        raise ValueError(f"class_weight must have shape (C,) = ({n_classes},), got {class_weight.shape}")
    if not np.all(np.isfinite(class_weight) & (class_weight >= 0)):
        raise ValueError("class_weight must be finite and non-negative")
    return class_weight


def _gradient_weight(row_weight, reduction, total, rows, dtype):
    """Per-row factor of the gradient for the kernel (None means 1 for every row)."""
    if reduction == "mean":
        scale = 1.0 / total if total > 0 else 0.0
        weight = np.full(rows, scale) if row_weight is None else row_weight.reshape(rows) * scale
    elif row_weight is None:
        return None
    else:
        weight = row_weight.reshape(rows)
    return np.ascontiguousarray(weight, dtype=dtype)
