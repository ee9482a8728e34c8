"""One vector per sequence from a padded batch of token vectors: the first (<cls>) token, or the mean."""

import numpy as np

from attnkit.nn.module import Module

__all__ = ["SequencePooling"]

POOLING_KINDS = ("cls", "mean")


class SequencePooling(Module):
    """Pool (B, N, d) token vectors into (B, d), ignoring padding. No parameters.

    Parameters
    ----------
    mode : {"cls", "mean"}, default="cls"
        ``"cls"``: the vector at position 0, where a ``<cls>`` token was put (BERT); attention lets
        it gather the whole sequence. ``"mean"``: the average over the first ``lengths[b]``
        positions; a sequence of length 0 gives a zero vector.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import SequencePooling
    >>> x = np.arange(12.0).reshape(2, 3, 2)
    >>> SequencePooling("mean").forward(x, lengths=np.array([3, 1]))[0].tolist()
    [[2.0, 3.0], [6.0, 7.0]]
    """

    def __init__(self, mode="cls"):
        super().__init__()
        if mode not in POOLING_KINDS:
            raise ValueError(f"mode must be one of {POOLING_KINDS}, got {mode!r}")
        self.mode = mode

    def forward(self, x, training=False, *, lengths):
        """Pooled vectors (B, d); ``lengths`` (B,) are the real lengths (used by "mean")."""
        x = np.asarray(x)
        if x.ndim != 3:
            raise ValueError(f"x must have shape (batch, n, d), got {x.shape}")
        if self.mode == "cls":
            return x[:, 0, :].copy(), x.shape
        lengths = np.asarray(lengths)
        if lengths.shape != x.shape[:1]:
            raise ValueError(f"lengths must have shape ({x.shape[0]},), got {lengths.shape}")
        weights = (np.arange(x.shape[1]) < lengths[:, None]) / np.maximum(lengths, 1)[:, None]
        weights = weights.astype(x.dtype)
        return np.einsum("bn,bnd->bd", weights, x), (x.shape, weights)

    def backward(self, grad, cache):
        """Gradient with respect to x, (B, N, d)."""
        if self.mode == "cls":
            shape = cache
            dx = np.zeros(shape, dtype=grad.dtype)
            dx[:, 0, :] = grad
            return dx
        _, weights = cache
        return weights[:, :, None] * grad[:, None, :]
