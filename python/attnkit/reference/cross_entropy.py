"""Reference softmax cross-entropy."""

import numpy as np

from attnkit.reference._common import result_dtype
from attnkit.reference.softmax import log_softmax, softmax

__all__ = ["cross_entropy"]


def cross_entropy(
    logits,
    targets,
    *,
    ignore_index=-100,
    label_smoothing=0.0,
    reduction="mean",
    class_weight=None,
    return_grad=False,
):
    r"""Cross-entropy of ``softmax(logits)`` (classes on the last axis) against integer targets.

    With :math:`s` the label smoothing, :math:`C` the number of classes and :math:`t` a row's target,

    .. math:: q = (1 - s)\,\mathrm{onehot}(t) + s / C, \qquad
              \ell = -\sum_c q_c \log \mathrm{softmax}(x)_c, \qquad
              \partial \ell / \partial x = \mathrm{softmax}(x) - q

    Rows with target ``ignore_index`` count for nothing. A row's loss (and gradient) is scaled by
    ``class_weight[t]``; ``"mean"`` divides by the sum of those weights (the number of counted rows
    without ``class_weight``), and is 0 when nothing is counted. An all ``-inf`` row has an infinite
    loss and a zero gradient.

    Parameters
    ----------
    logits : array_like of float, shape (..., C)
    targets : array_like of int, shape (...)
    ignore_index : int, default=-100
    label_smoothing : float, default=0.0
    reduction : {"mean", "sum", "none"}, default="mean"
    class_weight : array_like of float, shape (C,), optional
    return_grad : bool, default=False
        Also return the gradient of the reduced loss (of the sum for ``"none"``).

    Returns
    -------
    loss : scalar of the result dtype, or ndarray of shape (...) for ``"none"``
    dlogits : ndarray of shape (..., C), only with ``return_grad``
    """
    logits = np.asarray(logits)
    dtype = result_dtype(logits=logits)
    x = logits.astype(np.float64)
    targets = np.asarray(targets)
    n_classes = x.shape[-1]
    s = float(label_smoothing)

    counted = targets != ignore_index
    safe_targets = np.where(counted, targets, 0)[..., None]
    logp = log_softmax(x)
    with np.errstate(invalid="ignore"):
        nll = -np.take_along_axis(logp, safe_targets, axis=-1)[..., 0]
        # s = 0 skips the smoothing term, so -inf logits of other classes do not give 0 * inf.
        smooth = -np.mean(logp, axis=-1) if s > 0 else 0.0
    row_loss = (1 - s) * nll + s * smooth

    weight = counted.astype(np.float64)
    if class_weight is not None:
        weight = weight * np.asarray(class_weight, dtype=np.float64)[safe_targets[..., 0]]
    with np.errstate(invalid="ignore"):  # a row of weight 0 adds 0, even when its loss is infinite
        row_loss = np.where(weight > 0, weight * row_loss, 0.0)
    total = weight.sum()
    if reduction == "none":
        loss, grad_scale = row_loss.astype(dtype), weight
    elif reduction == "sum":
        loss, grad_scale = dtype.type(row_loss.sum()), weight
    else:
        loss = dtype.type(row_loss.sum() / total if total > 0 else 0.0)
        grad_scale = weight / total if total > 0 else np.zeros_like(weight)
    if not return_grad:
        return loss

    q = np.full(x.shape, s / n_classes)
    np.put_along_axis(q, safe_targets, (1 - s) + s / n_classes, axis=-1)
    dlogits = grad_scale[..., None] * (softmax(x) - q)
    impossible = np.all(np.isneginf(x), axis=-1, keepdims=True)
    return loss, np.where(impossible, 0.0, dlogits).astype(dtype)
