"""Token ids to vectors: an embedding table plus positions and dropout, the input of every text model."""

import numpy as np

from attnkit._validation import check_int
from attnkit.nn.layers import Dropout, Embedding
from attnkit.nn.module import Module
from attnkit.nn.positional import LearnedPositions, SinusoidalPositions

__all__ = ["TokenEmbedding"]

POSITIONAL_KINDS = ("sinusoidal", "learned", None)


class TokenEmbedding(Module):
    """``Dropout(Embedding(ids) + positions)`` for token ids of shape (B, N).

    Parameters
    ----------
    vocab_size : int
        Number of ids.
    d_model : int
        Width of the vectors.
    rng : numpy.random.Generator or int
        Initial weights and dropout masks.
    positional : {"sinusoidal", "learned", None}, default="sinusoidal"
        Absolute positions added to the token vectors (:class:`SinusoidalPositions`, or a learned
        table of ``max_len`` rows, :class:`LearnedPositions`); None adds none (for a model whose
        attention carries relative positions, or for a bag-of-words ablation).
    max_len : int, optional
        Longest sequence; required for ``positional="learned"``.
    dropout : float, default=0.0
        Drop probability of the summed vectors.
    padding_idx : int, optional, default=0
        An id whose vector is zero and stays zero (see :class:`Embedding`).
    init_std : float, default=1.0
        Standard deviation of the initial token vectors: 1 matches the unit amplitude of the
        sinusoidal encodings, so neither drowns the other at the start.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import TokenEmbedding
    >>> layer = TokenEmbedding(10, 8, rng=0, positional="learned", max_len=4)
    >>> x, cache = layer.forward(np.array([[5, 6, 0], [7, 0, 0]]))
    >>> x.shape
    (2, 3, 8)
    """

    def __init__(self, vocab_size, d_model, rng, *, positional="sinusoidal", max_len=None, dropout=0.0,
                 padding_idx=0, init_std=1.0):
        super().__init__()
        if positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {positional!r}")
        rng = np.random.default_rng(rng)
        self.add_child("tokens", Embedding(vocab_size, d_model, rng, padding_idx=padding_idx, init_std=init_std))
        if positional == "sinusoidal":
            self.add_child("positions", SinusoidalPositions(d_model))
        elif positional == "learned":
            if max_len is None:
                raise ValueError('positional="learned" needs max_len (the number of position vectors)')
            self.add_child("positions", LearnedPositions(check_int(max_len, "max_len", minimum=1), d_model, rng))
        self.add_child("dropout", Dropout(dropout, rng))

    def forward(self, ids, training=False, *, offset=0):
        """Vectors of shape ``ids.shape + (d_model,)``; ``offset`` is the position of the first column."""
        x, c_tokens = self.children["tokens"].forward(ids, training)
        c_positions = None
        if "positions" in self.children:
            x, c_positions = self.children["positions"].forward(x, training, offset=offset)
        x, c_drop = self.children["dropout"].forward(x, training)
        return x, (c_tokens, c_positions, c_drop)

    def backward(self, grad, cache):
        """Accumulates the table gradients; returns None (ids have no gradient)."""
        c_tokens, c_positions, c_drop = cache
        grad = self.children["dropout"].backward(grad, c_drop)
        if "positions" in self.children:
            grad = self.children["positions"].backward(grad, c_positions)
        return self.children["tokens"].backward(grad, c_tokens)
