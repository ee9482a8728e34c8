"""Token ids to vectors: an embedding table plus token types, positions, a norm and dropout, the input
of every text model (BERT's embeddings layer with ``n_token_types=2, positional="learned", norm="layer"``)."""

from typing import Any, NamedTuple

import numpy as np

from attnkit._validation import check_int
from attnkit.nn.layers import Dropout, Embedding
from attnkit.nn.module import Module
from attnkit.nn.positional import LearnedPositions, SinusoidalPositions
from attnkit.nn.residual import make_norm

__all__ = ["TokenEmbedding"]

POSITIONAL_KINDS = ("sinusoidal", "learned", None)
NORM_KINDS = ("layer", "rms", None)


class EmbeddingCache(NamedTuple):
    """What :meth:`TokenEmbedding.backward` needs: each part's cache (None for a part the layer lacks)."""

    tokens: Any
    token_types: Any
    positions: Any
    norm: Any
    dropout: Any


class TokenEmbedding(Module):
    """``Dropout(Norm(Embedding(ids) + TokenTypes(token_types) + positions))`` for token ids of shape (B, N).

    The token-type table and the norm are optional (none by default): BERT adds a learned segment vector
    (sentence A or B) to each token and layer-normalises the sum.

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
    n_token_types : int, default=0
        Size of a learned token-type (segment) table, ``N(0, 0.02^2)`` as in BERT (which has 2); 0 adds
        none.
    norm : {None, "layer", "rms"}, default=None
        A :class:`LayerNorm` or :class:`RMSNorm` of the summed vectors, before the dropout.
    norm_eps : float, optional
        The norm's eps (default: 1e-5 for LayerNorm, 1e-6 for RMSNorm; BERT checkpoints say 1e-12).

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import TokenEmbedding
    >>> layer = TokenEmbedding(10, 8, rng=0, positional="learned", max_len=4)
    >>> x, cache = layer.forward(np.array([[5, 6, 0], [7, 0, 0]]))
    >>> x.shape
    (2, 3, 8)
    >>> bert = TokenEmbedding(10, 8, rng=0, positional="learned", max_len=4, n_token_types=2, norm="layer",
    ...                       norm_eps=1e-12)
    >>> x, cache = bert.forward(np.array([[5, 6, 7]]), token_types=np.array([[0, 0, 1]]))
    >>> x.shape
    (1, 3, 8)
    """

    def __init__(self, vocab_size, d_model, rng, *, positional="sinusoidal", max_len=None, dropout=0.0,
                 padding_idx=0, init_std=1.0, n_token_types=0, norm=None, norm_eps=None):
        super().__init__()
        if positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {positional!r}")
        if not (norm is None or isinstance(norm, str)) or norm not in NORM_KINDS:
            raise ValueError(f"norm must be one of {NORM_KINDS}, got {norm!r}")
        self.n_token_types = check_int(n_token_types, "n_token_types", minimum=0)
        rng = np.random.default_rng(rng)
        self.tokens = Embedding(vocab_size, d_model, rng, padding_idx=padding_idx, init_std=init_std)
        self.positions: Module | None = None
        if positional == "sinusoidal":
            self.positions = SinusoidalPositions(d_model)
        elif positional == "learned":
            if max_len is None:
                raise ValueError('positional="learned" needs max_len (the number of position vectors)')
            self.positions = LearnedPositions(check_int(max_len, "max_len", minimum=1), d_model, rng)
        self.dropout = Dropout(dropout, rng)
        # Drawn after the layers above, so that without them the same seed gives the same weights as before.
        self.token_types = Embedding(self.n_token_types, d_model, rng, init_std=0.02) if self.n_token_types else None
        self.norm = None if norm is None else make_norm(norm, d_model, norm_eps)

    def forward(self, ids, training=False, *, token_types=None, offset=0):
        """Vectors of shape ``ids.shape + (d_model,)``.

        Parameters
        ----------
        ids : array of int, shape (B, N)
            Token ids.
        training : bool, default=False
            Dropout is active in training.
        token_types : array of int, shape (B, N), optional
            Token type (segment) of each id, in ``[0, n_token_types)``; None: every token is of type 0.
            Only for a layer with ``n_token_types > 0``.
        offset : int, default=0
            Position of the first column.
        """
        x, c_tokens = self.tokens.forward(ids, training)
        c_types = None
        if self.token_types is not None:
            types, c_types = self.token_types.forward(self._check_token_types(token_types, ids), training)
            x = x + types
        elif token_types is not None:
            raise ValueError("token_types needs a token-type table: build the layer with n_token_types > 0")
        c_positions = c_norm = None
        if self.positions is not None:
            x, c_positions = self.positions.forward(x, training, offset=offset)
        if self.norm is not None:
            x, c_norm = self.norm.forward(x, training)
        x, c_drop = self.dropout.forward(x, training)
        return x, EmbeddingCache(c_tokens, c_types, c_positions, c_norm, c_drop)

    def backward(self, grad, cache):
        """Accumulates the table gradients; returns None (ids have no gradient)."""
        grad = self.dropout.backward(grad, cache.dropout)
        if self.norm is not None:
            grad = self.norm.backward(grad, cache.norm)
        if self.positions is not None:
            grad = self.positions.backward(grad, cache.positions)
        if self.token_types is not None:
            self.token_types.backward(grad, cache.token_types)
        return self.tokens.backward(grad, cache.tokens)

    def _check_token_types(self, token_types, ids):
        ids = np.asarray(ids)
        if token_types is None:
            return np.zeros(ids.shape, dtype=np.intp)
        token_types = np.asarray(token_types)
        if token_types.dtype.kind not in "iu":
            raise TypeError(f"token_types must be an integer array, got dtype {token_types.dtype}")
        if token_types.shape != ids.shape:
            raise ValueError(f"token_types must have the shape of ids {ids.shape}, got {token_types.shape}")
        if token_types.size and (token_types.min() < 0 or token_types.max() >= self.n_token_types):
            bad = token_types[(token_types < 0) | (token_types >= self.n_token_types)][0]
            raise ValueError(f"token_types must be in [0, {self.n_token_types}) (n_token_types), got {bad}")
        return token_types
