"""Token ids to contextual vectors: the encoder of every text model (a trained-from-scratch classifier's, and
BERT's shape for pretrained checkpoints)."""

import numpy as np

from attnkit._validation import check_int
from attnkit.nn.module import Module
from attnkit.nn.packed import PackedEncoder
from attnkit.nn.positional import MAX_POSITIONS
from attnkit.nn.token_embedding import TokenEmbedding
from attnkit.nn.transformer import Encoder
from attnkit.nn.windows import LONG_TEXT_KINDS, long_text_view

__all__ = ["TextEncoder"]

POSITIONAL_KINDS = ("sinusoidal", "learned", "relative", None)


class TextEncoder(Module):
    """``Encoder(TokenEmbedding(ids))``: contextual vectors (B, N, d_model) of token ids (B, N).

    The defaults build attnkit's own encoder (pre-LN, sinusoidal positions, tanh GELU); BERT-family
    checkpoints are ``positional="learned"``, ``n_positions=max_position_embeddings``, ``n_token_types=2``,
    ``embedding_norm="layer"``, ``norm_first=False``, ``activation="gelu"`` and their ``layer_norm_eps``
    (see :mod:`attnkit.pretrained`).

    Parameters
    ----------
    vocab_size : int
        Number of token ids (``padding_idx`` is padding).
    rng : numpy.random.Generator or int
        Initial weights and dropout masks.
    d_model, n_heads, n_layers, d_ff : int, default=64, 4, 2, 128
        Width, heads, layers and feed-forward width.
    dropout : float, default=0.1
        Embedding, residual and feed-forward dropout.
    ff_dropout : float, optional
        Dropout after the feed-forward activation instead (default ``dropout``; BERT: 0).
    attention : {"softmax", "linear", "performer"}, default="softmax"
    positional : {"sinusoidal", "learned", "relative", None}, default="sinusoidal"
        Absolute positions added to the embeddings, learned relative-position biases in every attention
        layer (clipped to +-``relative_distance``), or none.
    max_len : int, default=512
        Longest sequence the encoder reads; a longer text is read as ``long_texts`` says.
    long_texts : {"truncate", "head_tail", "chunks"}, default="truncate"
        The encoder's view of a text longer than ``max_len`` (:func:`attnkit.nn.windows.long_text_view`): its
        first ``max_len`` ids, its head and tail, or every id once, in windows of at most ``max_len`` (the
        encoder's outputs are then per window).
    specials : (int, int), default=(0, 0)
        Special tokens at the start and end of every text (BERT: 1, 1), repeated around each window.
    n_positions : int, optional
        Rows of the learned position table (default ``max_len``; a checkpoint's may be longer than what
        is read).
    relative_distance : int, default=16
        Clipping distance of relative positions.
    n_token_types : int, default=0
        Token-type (segment) embeddings (BERT: 2).
    embedding_norm : {None, "layer", "rms"}, default=None
        Normalisation of the summed embeddings (BERT: "layer").
    norm_first, norm, norm_eps, activation :
        The transformer blocks' options (:class:`attnkit.nn.Encoder`).
    padding_idx : int, default=0
        The padding id, whose vector never trains.
    """

    def __init__(self, vocab_size, rng, *, d_model=64, n_heads=4, n_layers=2, d_ff=128, dropout=0.1, ff_dropout=None,
                 attention="softmax", positional="sinusoidal", max_len=512, long_texts="truncate", specials=(0, 0),
                 n_positions=None, relative_distance=16, n_token_types=0, embedding_norm=None, norm_first=True,
                 norm="layer", norm_eps=None, activation="gelu_tanh", padding_idx=0):
        super().__init__()
        if positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {positional!r}")
        if long_texts not in LONG_TEXT_KINDS:
            raise ValueError(f"long_texts must be one of {LONG_TEXT_KINDS}, got {long_texts!r}")
        rng = np.random.default_rng(rng)
        self.max_len = check_int(max_len, "max_len", minimum=1, maximum=MAX_POSITIONS)
        self.long_texts, self.specials = long_texts, tuple(check_int(n, "specials", minimum=0) for n in specials)
        n_positions = self.max_len if n_positions is None else check_int(n_positions, "n_positions", minimum=1,
                                                                          maximum=MAX_POSITIONS)
        absolute = positional if positional in ("sinusoidal", "learned") else None
        self.embedding = TokenEmbedding(vocab_size, d_model, rng, positional=absolute, max_len=n_positions,
                                        dropout=dropout, padding_idx=padding_idx, n_token_types=n_token_types,
                                        norm=embedding_norm, norm_eps=norm_eps)
        relative = check_int(relative_distance, "relative_distance", minimum=1) if positional == "relative" else None
        self.encoder = Encoder(n_layers, d_model, n_heads, d_ff, rng, dropout=dropout, ff_dropout=ff_dropout,
                               attention=attention, relative_positions=relative, norm_first=norm_first, norm=norm,
                               norm_eps=norm_eps, activation=activation)

    def view(self, ids, lengths, token_types=None):
        """The encoder's view of a batch of whole texts, by ``long_texts``: ids (W, n <= max_len), lengths (W,),
        token types, and the windows of each text (B,) with ``"chunks"`` (else None; W = B)."""
        ids = np.asarray(ids)
        if ids.ndim != 2:
            return ids, lengths, token_types, None
        if token_types is None or self.long_texts == "truncate" or ids.shape[1] <= self.max_len:
            view, view_lengths, counts = long_text_view(ids, lengths, how=self.long_texts, max_len=self.max_len,
                                                        specials=self.specials)
            return view, view_lengths, None if token_types is None else token_types[:, :self.max_len], counts
        raise ValueError(f"token_types cannot follow long_texts={self.long_texts!r}: give texts of at most "
                         f"max_len={self.max_len} ids")

    def first_view(self, ids, lengths, token_types=None):
        """:meth:`view` with one sequence per text (the first window of each, with "chunks"): ids, lengths,
        token types."""
        ids, lengths, token_types, counts = self.view(ids, lengths, token_types)
        if counts is not None:
            first = np.concatenate([[0], np.cumsum(counts)[:-1]])
            ids, lengths = ids[first], lengths[first]
        return ids, lengths, token_types

    def encode(self, ids, training=False, *, lengths, token_types=None):
        """The encoder's output for its view of the texts (:meth:`view`; one row per window with "chunks"), (W,
        n, d_model), and the cache for :meth:`backward_encode`. Padding keys (past ``lengths``) are skipped;
        the outputs at padding positions are not meaningful."""
        ids, lengths, token_types, _ = self.view(ids, lengths, token_types)
        x, c_embed = self.embedding.forward(ids, training, token_types=token_types)
        x, c_enc = self.encoder.forward(x, training, key_lengths=lengths)
        return x, (c_embed, c_enc)

    def infer(self, ids, *, lengths, token_types=None, runner=None):
        """Inference output only, as ``encode(ids)[0]`` at the real tokens but without keeping any layer's
        backward cache; ``runner`` (from :meth:`inference_runner`) serves many batches of one model."""
        ids, lengths, token_types, _ = self.view(ids, lengths, token_types)
        x, _ = self.embedding.forward(ids, token_types=token_types)
        if runner is not None:
            return runner(x, key_lengths=lengths)
        return self.encoder.infer(x, key_lengths=lengths)

    def inference_runner(self, dtype=None):
        """A :class:`PackedEncoder` of this model's encoder for :meth:`infer`'s ``runner`` (None when its
        layers cannot run packed): built once, it serves every batch until the weights change. ``dtype``:
        as :class:`PackedEncoder`'s (``"int8"``: int8 linear maps)."""
        encoder = self.encoder
        return PackedEncoder(encoder, dtype=dtype) if PackedEncoder.supports(encoder) else None

    def backward_encode(self, grad, cache):
        """Accumulates the embedding and encoder gradients from d loss / d :meth:`encode`'s output."""
        c_embed, c_enc = cache
        return self.embedding.backward(self.encoder.backward(grad, c_enc), c_embed)

    def forward(self, ids, training=False, *, lengths, token_types=None):
        """As :meth:`encode`."""
        return self.encode(ids, training, lengths=lengths, token_types=token_types)

    def backward(self, grad, cache):
        """As :meth:`backward_encode`."""
        return self.backward_encode(grad, cache)

    def attention_weights(self, ids, *, lengths, token_types=None):
        """Each layer's self-attention weights, a list of (B, n_heads, N, N) arrays (inference mode), N at
        most ``max_len``: over the encoder's view of each text (its first window with "chunks")."""
        ids, lengths, token_types = self.first_view(ids, lengths, token_types)
        x, _ = self.embedding.forward(ids, token_types=token_types)
        return self.encoder.attention_weights(x, key_lengths=lengths)[1]
