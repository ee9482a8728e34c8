"""Losses: a scalar of the model's output and the targets, with the gradient for the backward pass."""

import numpy as np

from attnkit import ops

__all__ = ["CrossEntropyLoss"]


class CrossEntropyLoss:
    """Softmax cross-entropy over the last axis of the logits, fused with its gradient
    (:func:`attnkit.ops.cross_entropy`).

    Parameters
    ----------
    ignore_index : int, default=-100
        Target value of positions that add nothing (padding).
    label_smoothing : float in [0, 1), default=0.0
        Probability mass spread uniformly over the classes.
    reduction : {"mean", "sum", "none"}, default="mean"
        ``"mean"`` averages over the counted (not ignored) positions.
    class_weight : array-like of shape (C,), optional
        Weight of each target class.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import CrossEntropyLoss
    >>> loss_fn = CrossEntropyLoss(ignore_index=0)
    >>> logits, targets = np.zeros((2, 3, 5)), np.array([[1, 2, 0], [4, 0, 0]])
    >>> loss, cache = loss_fn.forward(logits, targets, training=True)
    >>> round(float(loss), 4)  # log 5: uniform predictions, 3 counted positions
    1.6094
    >>> loss_fn.backward(1.0, cache).shape
    (2, 3, 5)
    """

    def __init__(self, *, ignore_index=-100, label_smoothing=0.0, reduction="mean", class_weight=None):
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.class_weight = class_weight

    def forward(self, logits, targets, training=False):
        """Loss of ``logits`` (..., C) against integer ``targets`` (...).

        Returns
        -------
        loss : scalar, or ndarray of shape (...) for ``reduction="none"``
        cache : ndarray or None
            With ``training``, the gradient of the loss with respect to the logits (computed in the
            same pass); None otherwise, which saves a (..., C) array at evaluation.
        """
        result = ops.cross_entropy(
            logits,
            targets,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
            reduction=self.reduction,
            class_weight=self.class_weight,
            return_grad=training,
        )
        return result if training else (result, None)

    def backward(self, grad, cache):
        """Gradient with respect to the logits, given ``grad`` = d(objective)/d(loss): a scalar, or an
        array of the loss's shape for ``reduction="none"``."""
        if cache is None:
            raise ValueError("backward needs the cache of forward(..., training=True)")
        grad = np.asarray(grad, dtype=cache.dtype)
        if grad.ndim:
            return cache * grad[..., None]
        return cache if grad == 1 else cache * grad  # the usual grad = 1 costs no copy of the logits
