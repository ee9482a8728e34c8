"""Masked-language-model pieces: BERT's corruption of token ids, an output layer tied to the input embedding
table, and :class:`MaskedLM`, an encoder with that output (the network of :class:`attnkit.MaskedLanguageModel`)."""

import numpy as np

from attnkit import ops
from attnkit._validation import check_real
from attnkit.nn.layers import Embedding, add_product
from attnkit.nn.module import Module
from attnkit.nn.text_encoder import TextEncoder

__all__ = ["MaskedLM", "TiedOutput", "mask_tokens"]


class TiedOutput(Module):
    """Logits over the vocabulary from hidden vectors, with the embedding table as weights:
    ``logits = h @ E.T / sqrt(d) + bias`` (Press & Wolf 2017; BERT's MLM head without its extra
    transform).

    The ``1 / sqrt(d)`` keeps the initial logits near unit scale: attnkit's tables start at unit
    variance and the encoder's output is layer-normalised, so ``h . e`` has variance d (at
    d = 128, a first masked-token loss of ~40 instead of ~log(vocab_size)).

    The table stays a parameter of the embedding layer, which receives its gradient
    ``dlogits.T @ h`` here; this layer owns only the bias.

    Parameters
    ----------
    embedding : Embedding
        The input table E, of shape (vocab_size, d).

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import Embedding, TiedOutput
    >>> table = Embedding(5, 3, rng=0)
    >>> logits, _ = TiedOutput(table).forward(np.ones((2, 3), dtype=np.float32))
    >>> logits.shape
    (2, 5)
    """

    def __init__(self, embedding):
        super().__init__()
        if not isinstance(embedding, Embedding):
            raise TypeError(f"embedding must be an attnkit.nn.Embedding, got {type(embedding).__name__}")
        self._embedding = embedding  # a reference, not a child: the table stays the embedding layer's parameter
        self.add_param("bias", np.zeros, dtype=embedding.params["weight"].dtype, shape=(embedding.num_embeddings,))

    @property
    def embedding(self):
        """The input table (an :class:`Embedding`)."""
        return self._embedding

    def forward(self, h, training=False):
        """Logits (..., vocab_size) of hidden vectors h (..., d)."""
        h = np.asarray(h)
        table = self.embedding.params["weight"]
        flat = h.reshape(-1, table.shape[1])
        scale = np.asarray(table.shape[1] ** -0.5, dtype=table.dtype)
        logits = ops.matmul(flat, table.T) * scale + self.params["bias"]
        return logits.reshape(h.shape[:-1] + (table.shape[0],)), h

    def backward(self, grad, cache):
        h = cache
        table = self.embedding.params["weight"]
        scale = np.asarray(table.shape[1] ** -0.5, dtype=table.dtype)
        flat_grad = grad.reshape(-1, table.shape[0])
        self.grads["bias"] += flat_grad.sum(axis=0)
        scaled = flat_grad * scale
        add_product(self.embedding.grads["weight"], scaled.T, h.reshape(-1, table.shape[1]))
        return ops.matmul(scaled, table).reshape(h.shape)


def mask_tokens(ids, lengths, rng, *, vocab_size, mask_id, first_ordinary_id, probability=0.15):
    """BERT's corruption: pick ``probability`` of the ordinary tokens, replace 80% of them by
    ``mask_id``, 10% by a random ordinary token, leave 10%.

    Parameters
    ----------
    ids : ndarray of int, shape (B, N)
        Padded token ids; only the first ``lengths[b]`` of row b are tokens.
    lengths : ndarray of int, shape (B,)
    rng : numpy.random.Generator
    vocab_size : int
    mask_id : int
        The id put in place of a hidden token.
    first_ordinary_id : int
        Ids below this are special tokens (padding, <cls>, ...), never picked nor drawn.
    probability : float, default=0.15

    Returns
    -------
    corrupted : ndarray of int, shape (B, N)
    picked : ndarray of bool, shape (B, N)
        The positions to predict (their targets are ``ids[picked]``). At least one when the batch
        has any ordinary token, so that every batch has a loss.
    """
    probability = check_real(probability, "probability")
    if not 0.0 < probability <= 1.0:
        raise ValueError(f"probability must be in (0, 1], got {probability}")
    ids = np.asarray(ids)
    eligible = (np.arange(ids.shape[1]) < np.asarray(lengths)[:, None]) & (ids >= first_ordinary_id)
    picked = eligible & (rng.random(ids.shape) < probability)
    if not picked.any() and eligible.any():
        candidates = np.flatnonzero(eligible)
        picked.flat[candidates[rng.integers(candidates.size)]] = True
    action = rng.random(ids.shape)
    corrupted = ids.copy()
    corrupted[picked & (action < 0.8)] = mask_id
    shuffled = picked & (action >= 0.8) & (action < 0.9)
    corrupted[shuffled] = rng.integers(first_ordinary_id, vocab_size, size=int(shuffled.sum()))
    return corrupted, picked


class MaskedLM(TextEncoder):
    """BERT's masked-language model: a :class:`TextEncoder` whose outputs at chosen positions are scored against
    every token of the vocabulary through the (tied) token table, ``logits = h @ E.T / sqrt(d) + bias``.

    Its ``embedding`` and ``encoder`` carry the names of a :class:`SequenceClassifier`'s, so a classifier can start
    from them (:class:`attnkit.TransformerClassifier` with ``pretrained=`` a fitted
    :class:`attnkit.MaskedLanguageModel`).

    Parameters
    ----------
    vocab_size : int
    rng : numpy.random.Generator or int
    **options
        :class:`TextEncoder`'s.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import MaskedLM
    >>> net = MaskedLM(20, rng=0, d_model=16, n_heads=2, d_ff=32)
    >>> ids, lengths = np.array([[2, 7, 1, 0], [2, 5, 6, 1]]), np.array([3, 4])
    >>> picked = ids == 1  # where the mask token stands
    >>> logits, cache = net.masked_logits(ids, picked, lengths=lengths)
    >>> logits.shape  # one row per masked position
    (2, 20)
    """

    def __init__(self, vocab_size, rng, **options):
        super().__init__(vocab_size, rng, **options)
        self.output = TiedOutput(self.embedding.tokens)

    def masked_logits(self, ids, picked, training=False, *, lengths):
        """Vocabulary logits (P, vocab_size) at the P positions where ``picked`` (B, N) is True, and the cache
        for :meth:`backward_masked`. The texts must fit ``max_len`` (no windows)."""
        hidden, c_encode = self.encode(ids, training, lengths=lengths)
        logits, c_out = self.output.forward(hidden[picked], training)
        return logits, (c_encode, c_out, picked, hidden.shape)

    def backward_masked(self, grad, cache):
        """Accumulates every parameter's gradient from d loss / d :meth:`masked_logits`'s logits."""
        c_encode, c_out, picked, shape = cache
        grad_hidden = np.zeros(shape, dtype=grad.dtype)
        grad_hidden[picked] = self.output.backward(grad, c_out)
        self.backward_encode(grad_hidden, c_encode)
