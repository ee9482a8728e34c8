"""Transformer layers and stacks with cross-attention or none: EncoderLayer, DecoderLayer, Encoder, Decoder.

Each layer is a chain of residual blocks (:mod:`attnkit.nn.residual`): pre-LN by default
(``x + Dropout(F(Norm(x)))``, then a final Norm at the end of the stack), post-LN with
``norm_first=False`` (``Norm(x + Dropout(F(x)))``, as BERT). The decoder-only (GPT-style) stack lives in
:mod:`attnkit.nn.causal_decoder`; it shares :class:`Stack` and :class:`DecodingStack` from here.

Every layer and stack takes the same block options: ``norm_first``, ``norm`` ({"layer", "rms"}),
``norm_eps``, ``activation`` ({"gelu_tanh", "gelu", "relu"}: "gelu" is exact), and their defaults are
the blocks attnkit always built (pre-LN, LayerNorm with eps 1e-5, tanh GELU).
"""

import numpy as np

from attnkit._validation import check_bool, check_int
from attnkit.nn.attention import MultiHeadAttention
from attnkit.nn.cache import DecoderCache
from attnkit.nn.layers import FeedForward
from attnkit.nn.module import Module
from attnkit.nn.packed import PackedEncoder
from attnkit.nn.positional import RelativePositionBias
from attnkit.nn.residual import Residual, make_norm

__all__ = ["Decoder", "DecoderLayer", "Encoder", "EncoderLayer"]


def make_attention(d_model, n_heads, rng, *, attention, causal, relative_positions, n_features, d_context=None):
    """The attention sublayer of a block: :class:`MultiHeadAttention` with a :class:`RelativePositionBias`
    of its own when ``relative_positions`` (the clipping distance) is given."""
    bias = None
    if relative_positions is not None:
        bias = RelativePositionBias(n_heads, check_int(relative_positions, "relative_positions", minimum=0), rng)
    return MultiHeadAttention(d_model, n_heads, rng, d_context=d_context, attention=attention, causal=causal,
                              position_bias=bias, n_features=n_features)


class EncoderLayer(Module):
    """Self-attention and feed-forward blocks, each with a residual connection and a norm.

    Parameters
    ----------
    d_model, n_heads, d_ff : int
        Width, heads and feed-forward hidden width.
    rng : numpy.random.Generator
        Initial weights and dropout masks.
    dropout : float, default=0.1
        Residual and feed-forward dropout.
    ff_dropout : float, optional
        Dropout after the feed-forward activation instead (default ``dropout``; BERT has none there).
    attention : {"softmax", "linear", "performer"}, default="softmax"
    activation : {"gelu_tanh", "gelu", "relu"}, default="gelu_tanh"
        Of the feed-forward block; ``"gelu"`` is the exact (erf) GELU of BERT, ``"gelu_tanh"`` its tanh
        approximation (GPT-2).
    relative_positions : int, optional
        Learned relative-position biases clipped to +-k (Shaw et al.), per layer.
    n_features : int, default=128
        Random features of Performer attention.
    norm_first : bool, default=True
        Pre-LN ``x + Dropout(F(Norm(x)))``, or post-LN ``Norm(x + Dropout(F(x)))`` (BERT).
    norm : {"layer", "rms"}, default="layer"
        :class:`LayerNorm` or :class:`RMSNorm`.
    norm_eps : float, optional
        The norms' eps (default: 1e-5 for LayerNorm, 1e-6 for RMSNorm; BERT checkpoints say 1e-12).
    """

    def __init__(self, d_model, n_heads, d_ff, rng, *, dropout=0.1, ff_dropout=None, attention="softmax",
                 activation="gelu_tanh", relative_positions=None, n_features=128, norm_first=True, norm="layer",
                 norm_eps=None):
        super().__init__()
        block = dict(norm_first=norm_first, norm=norm, norm_eps=norm_eps)
        attn = make_attention(d_model, n_heads, rng, attention=attention, causal=False,
                          relative_positions=relative_positions, n_features=n_features)
        self.self_attention = Residual(d_model, attn, dropout, rng, **block)
        ff = FeedForward(d_model, d_ff, rng, activation=activation,
                         dropout=dropout if ff_dropout is None else ff_dropout)
        self.feed_forward = Residual(d_model, ff, dropout, rng, **block)

    def forward(self, x, training=False, *, key_lengths=None):
        x, c_att = self.self_attention.forward(x, training, key_lengths=key_lengths)
        x, c_ff = self.feed_forward.forward(x, training)
        return x, (c_att, c_ff)

    def backward(self, grad, cache):
        c_att, c_ff = cache
        grad = self.feed_forward.backward(grad, c_ff)
        return self.self_attention.backward(grad, c_att)

    def attention_weights(self, x, *, key_lengths=None):
        """Inference-mode output and self-attention weights (B, H, N, N), for inspection.

        Softmax attention only (linear attention never forms the weights). The attention is run a
        second time with ``return_weights``, so the training path never pays for the N x N array.
        """
        _, weights = self.self_attention.attend(x, key_lengths=key_lengths)
        return self.forward(x, key_lengths=key_lengths)[0], weights


class DecoderLayer(Module):
    """Causal self-attention, cross-attention over the encoder output (``memory``), feed-forward.

    Same parameters as :class:`EncoderLayer`, plus ``d_memory``: the encoder's width (may differ).
    """

    def __init__(self, d_model, n_heads, d_ff, rng, *, d_memory=None, dropout=0.1, attention="softmax",
                 activation="gelu_tanh", relative_positions=None, n_features=128, norm_first=True, norm="layer",
                 norm_eps=None):
        super().__init__()
        block = dict(norm_first=norm_first, norm=norm, norm_eps=norm_eps)
        self_attn = make_attention(d_model, n_heads, rng, attention=attention, causal=True,
                               relative_positions=relative_positions, n_features=n_features)
        self.self_attention = Residual(d_model, self_attn, dropout, rng, **block)
        # Cross-attention is never causal and takes no relative positions (queries and keys come
        # from different sequences); it uses the same attention rule as the rest of the layer.
        cross = make_attention(d_model, n_heads, rng, attention=attention, causal=False, relative_positions=None,
                           n_features=n_features, d_context=d_memory)
        self.cross_attention = Residual(d_model, cross, dropout, rng, **block)
        ff = FeedForward(d_model, d_ff, rng, activation=activation, dropout=dropout)
        self.feed_forward = Residual(d_model, ff, dropout, rng, **block)

    def forward(self, x, training=False, *, memory, memory_lengths=None):
        x, c_self = self.self_attention.forward(x, training)
        x, c_cross = self.cross_attention.forward(x, training, context=memory,
                                                              key_lengths=memory_lengths)
        x, c_ff = self.feed_forward.forward(x, training)
        return x, (c_self, c_cross, c_ff)

    def start(self, memory, memory_lengths=None, *, capacity=16):
        """Caches for decoding one position at a time: an empty self-attention cache and ``memory``'s
        keys and values, projected once. See :meth:`Decoder.start`."""
        memory = np.asarray(memory)
        self_attention = self.self_attention.sublayer
        cross_attention = self.cross_attention.sublayer
        return (self_attention.start_self(memory.shape[0], capacity=capacity),
                cross_attention.start_cross(memory, key_lengths=memory_lengths))

    def step(self, x, cache):
        """The layer's output for one new position ``x`` (B, 1, d_model); ``cache`` is updated in place.

        Equals row t of :meth:`forward` (inference mode) when x is position t and the cache holds
        positions 0..t-1. Returns ``(out, cache)``.
        """
        self_cache, cross_cache = cache
        x = self.self_attention.step(x, self_cache)
        x = self.cross_attention.step(x, cross_cache)
        return self.feed_forward.step(x), cache

    def backward(self, grad, cache):
        """Returns (dx, dmemory)."""
        c_self, c_cross, c_ff = cache
        grad = self.feed_forward.backward(grad, c_ff)
        grad, dmemory = self.cross_attention.backward(grad, c_cross)
        return self.self_attention.backward(grad, c_self), dmemory


class Stack(Module):
    """``n_layers`` layers of one kind, then (pre-LN) a final norm; post-LN layers end in their own norm.

    The block options ``norm_first``, ``norm`` and ``norm_eps`` go to every layer and to the final norm;
    the other ``layer_options`` to the layers only.
    """

    def __init__(self, layer_class, n_layers, d_model, n_heads, d_ff, rng, *, norm_first=True, norm="layer",
                 norm_eps=None, **layer_options):
        super().__init__()
        self.n_layers = check_int(n_layers, "n_layers", minimum=1)
        self.norm_first = check_bool(norm_first, "norm_first")
        for i in range(self.n_layers):
            self.add_child(f"layer{i}", layer_class(d_model, n_heads, d_ff, rng, norm_first=norm_first, norm=norm,
                                                    norm_eps=norm_eps, **layer_options))
        self.norm = make_norm(norm, d_model, norm_eps) if self.norm_first else None

    @property
    def layers(self):
        """The layers, first to last: the children ``layer0``, ``layer1``, ..."""
        return [getattr(self, f"layer{i}") for i in range(self.n_layers)]

    def forward(self, x, training=False, **kwargs):
        caches = []
        for layer in self.layers:
            x, c = layer.forward(x, training, **kwargs)
            caches.append(c)
        c_norm = None
        if self.norm is not None:
            x, c_norm = self.norm.forward(x, training)
        return x, (caches, c_norm)

    def infer(self, x, **kwargs):
        """Inference output only, as ``forward(x)[0]``: each layer's cache is dropped before the next layer
        runs, so memory peaks at one layer's intermediates, not the whole stack's."""
        for layer in self.layers:
            x = layer.forward(x, **kwargs)[0]
        return self.final_norm(x)

    def final_norm(self, x):
        """Inference: the stack's final norm of the last layer's output x (pre-LN), or x (post-LN)."""
        return x if self.norm is None else self.norm.forward(x)[0]

    def _backward_layers(self, grad, cache):
        """Backward through the norm and the layers, last first: dx and each layer's extra gradient
        (a decoder layer's dmemory), in that order."""
        caches, c_norm = cache
        if self.norm is not None:
            grad = self.norm.backward(grad, c_norm)
        extras = []
        for layer, c in zip(self.layers[::-1], caches[::-1]):
            result = layer.backward(grad, c)
            if isinstance(result, tuple):
                grad, extra = result
                extras.append(extra)
            else:
                grad = result
        return grad, extras


class DecodingStack(Stack):
    """A stack of causal layers that decodes one position at a time: :meth:`step` and :meth:`reorder`
    over the :class:`DecoderCache` the subclass's ``start`` makes."""

    def step(self, x, cache):
        """Decode one position: ``x`` (B, 1, d_model) is the embedded input at position ``cache.length``.

        Returns ``(out, cache)``: out (B, 1, d_model) equals row ``cache.length`` of :meth:`forward` over
        the whole prefix (inference mode); the cache is updated in place and returned.
        """
        for layer, layer_cache in zip(self.layers, cache.layers):
            x, _ = layer.step(x, layer_cache)
        return self.final_norm(x), cache

    @staticmethod
    def reorder(cache, indices):
        """A new cache whose batch row i is row ``indices[i]`` of ``cache`` (repeat, permute or drop rows,
        as beam search and finished sequences need); ``cache`` stays valid."""
        return cache.reorder(indices)


class Encoder(Stack):
    """``n_layers`` EncoderLayers and (pre-LN) a final norm. Input: embedded tokens (B, N, d_model);
    ``forward(x, training, key_lengths=None)``. Options: those of :class:`EncoderLayer`."""

    def __init__(self, n_layers, d_model, n_heads, d_ff, rng, **layer_options):
        super().__init__(EncoderLayer, n_layers, d_model, n_heads, d_ff, rng, **layer_options)

    def backward(self, grad, cache):
        return self._backward_layers(grad, cache)[0]

    def infer(self, x, **kwargs):
        """Inference output only, as ``forward(x)[0]`` at the real tokens (outputs at padding positions are
        not meaningful). Softmax layers without relative positions run over the real tokens only
        (:class:`PackedEncoder`), the others through the padded layers."""
        if PackedEncoder.supports(self):
            return PackedEncoder(self)(x, key_lengths=kwargs.get("key_lengths"))
        return super().infer(x, **kwargs)

    def attention_weights(self, x, *, key_lengths=None):
        """Inference-mode output and each layer's self-attention weights: a list of (B, H, N, N)."""
        weights = []
        for layer in self.layers:
            x, w = layer.attention_weights(x, key_lengths=key_lengths)
            weights.append(w)
        return self.final_norm(x), weights


class Decoder(DecodingStack):
    """``n_layers`` DecoderLayers and (pre-LN) a final norm, attending over an encoder's ``memory``:
    ``forward(x, training, memory=..., memory_lengths=None)``. Options: those of :class:`DecoderLayer`."""

    def __init__(self, n_layers, d_model, n_heads, d_ff, rng, **layer_options):
        super().__init__(DecoderLayer, n_layers, d_model, n_heads, d_ff, rng, **layer_options)

    def backward(self, grad, cache):
        """Returns (dx, dmemory), dmemory summed over the layers."""
        dx, dmemories = self._backward_layers(grad, cache)
        return dx, sum(dmemories[1:], dmemories[0])

    # -- incremental decoding (inference only) ------------------------------------------------------------
    def start(self, memory, memory_lengths=None, *, capacity=16):
        """Start decoding one position at a time over ``memory``.

        Every layer projects ``memory`` to its cross-attention keys and values once (linear attention:
        their sums) and gets an empty self-attention cache; :meth:`step` then costs O(t) per position
        with softmax attention (the new query against t cached keys) and O(1) with linear attention,
        instead of a forward over the whole prefix.

        Parameters
        ----------
        memory : ndarray of shape (B, M, d_memory)
            The encoder's output.
        memory_lengths : array of int (B,), optional
            Real length of each memory row, as in :meth:`forward`.
        capacity : int, default=16
            Positions the key/value buffers hold before they first double; the maximum decoding length
            avoids any regrowth.

        Returns
        -------
        DecoderCache
            ``cache.length`` is the position of the next input (the ``offset`` of positional encodings).
        """
        return DecoderCache(layer.start(memory, memory_lengths, capacity=capacity) for layer in self.layers)
