"""Decoder-only (GPT-style) transformer blocks: causal self-attention and feed-forward, no memory.

:class:`CausalDecoderLayer` is a :class:`DecoderLayer` without its cross-attention; :class:`CausalDecoder`
stacks them and decodes one position at a time over a :class:`DecoderCache` whose layers hold only a
self-attention cache. Options are those of the encoder-decoder layers (:mod:`attnkit.nn.transformer`):
attention kind, relative positions, ``norm_first``, ``norm``, ``norm_eps``, ``activation``.
"""

from attnkit._validation import check_int
from attnkit.nn.cache import DecoderCache
from attnkit.nn.layers import FeedForward
from attnkit.nn.module import Module
from attnkit.nn.residual import Residual
from attnkit.nn.transformer import DecodingStack, make_attention

__all__ = ["CausalDecoder", "CausalDecoderLayer"]


class CausalDecoderLayer(Module):
    """Causal self-attention and feed-forward blocks, each with a residual connection and a norm.

    Parameters
    ----------
    d_model, n_heads, d_ff : int
        Width, heads and feed-forward hidden width.
    rng : numpy.random.Generator
        Initial weights and dropout masks.
    dropout : float, default=0.1
        Residual and feed-forward dropout.
    attention : {"softmax", "linear", "performer"}, default="softmax"
        Linear and Performer attention run causally in their prefix-sum form.
    activation : {"gelu_tanh", "gelu", "relu"}, default="gelu_tanh"
        Of the feed-forward block (``"gelu"`` is exact; GPT-2 uses the tanh form).
    relative_positions : int, optional
        Learned relative-position biases clipped to +-k, per layer (softmax attention).
    n_features : int, default=128
        Random features of Performer attention.
    norm_first : bool, default=True
        Pre-LN (GPT-2) or post-LN (the original Transformer's decoder).
    norm : {"layer", "rms"}, default="layer"
    norm_eps : float, optional
        Default: 1e-5 for LayerNorm, 1e-6 for RMSNorm.
    """

    def __init__(self, d_model, n_heads, d_ff, rng, *, dropout=0.1, attention="softmax", activation="gelu_tanh",
                 relative_positions=None, n_features=128, norm_first=True, norm="layer", norm_eps=None):
        super().__init__()
        block = dict(norm_first=norm_first, norm=norm, norm_eps=norm_eps)
        self_attn = make_attention(d_model, n_heads, rng, attention=attention, causal=True,
                               relative_positions=relative_positions, n_features=n_features)
        self.self_attention = Residual(d_model, self_attn, dropout, rng, **block)
        ff = FeedForward(d_model, d_ff, rng, activation=activation, dropout=dropout)
        self.feed_forward = Residual(d_model, ff, dropout, rng, **block)

    def forward(self, x, training=False, *, key_lengths=None):
        """``x`` (B, N, d_model); ``key_lengths`` (B,) the real lengths of right-padded rows (padding keys
        are skipped; the outputs at padding positions are not meaningful)."""
        x, c_att = self.self_attention.forward(x, training, key_lengths=key_lengths)
        x, c_ff = self.feed_forward.forward(x, training)
        return x, (c_att, c_ff)

    def backward(self, grad, cache):
        c_att, c_ff = cache
        grad = self.feed_forward.backward(grad, c_ff)
        return self.self_attention.backward(grad, c_att)

    def start(self, batch_size, *, capacity=16):
        """An empty self-attention cache for decoding one position at a time (see :meth:`CausalDecoder.start`)."""
        attention = self.self_attention.sublayer
        return attention.start_self(batch_size, capacity=capacity)

    def step(self, x, cache):
        """The layer's output for one new position ``x`` (B, 1, d_model); ``cache`` (a
        :class:`SelfAttentionCache`) is updated in place. Equals row t of :meth:`forward` (inference mode)
        when x is position t and the cache holds positions 0..t-1. Returns ``(out, cache)``."""
        x = self.self_attention.step(x, cache)
        return self.feed_forward.step(x), cache


class CausalDecoder(DecodingStack):
    """``n_layers`` CausalDecoderLayers and (pre-LN) a final norm: a GPT-style language model's body.

    Input: embedded tokens (B, N, d_model); ``forward(x, training, key_lengths=None)``; :meth:`backward`
    returns dx. Options: those of :class:`CausalDecoderLayer`.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import CausalDecoder
    >>> decoder = CausalDecoder(2, 8, 2, 16, np.random.default_rng(0), norm_first=False, activation="gelu")
    >>> x = np.random.default_rng(1).standard_normal((1, 3, 8))
    >>> full, _ = decoder.forward(x)
    >>> cache = decoder.start(1)
    >>> steps = [decoder.step(x[:, t:t + 1], cache)[0] for t in range(3)]
    >>> bool(np.allclose(np.concatenate(steps, axis=1), full))
    True
    """

    def __init__(self, n_layers, d_model, n_heads, d_ff, rng, **layer_options):
        super().__init__(CausalDecoderLayer, n_layers, d_model, n_heads, d_ff, rng, **layer_options)

    def backward(self, grad, cache):
        return self._backward_layers(grad, cache)[0]

    def start(self, batch_size, *, capacity=16):
        """Start decoding one position at a time: an empty self-attention cache per layer.

        :meth:`step` then costs O(t) per position with softmax attention (the new query against t cached
        keys) and O(1) with linear attention, instead of a forward over the whole prefix.

        Parameters
        ----------
        batch_size : int
            Rows of the batch to decode.
        capacity : int, default=16
            Positions the key/value buffers hold before they first double; the maximum decoding length
            avoids any regrowth.

        Returns
        -------
        DecoderCache
            ``cache.length`` is the position of the next input (the ``offset`` of positional encodings).
        """
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        return DecoderCache(layer.start(batch_size, capacity=capacity) for layer in self.layers)
