"""Transformer stacks with cross-attention or none: Encoder, Decoder, and their layers EncoderLayer, DecoderLayer.

Every layer is a :class:`~attnkit.nn.block.TransformerBlock` (:mod:`attnkit.nn.block`): pre-LN by default
(``x + Dropout(F(Norm(x)))``, then a final Norm at the end of the stack), post-LN with ``norm_first=False``
(``Norm(x + Dropout(F(x)))``, as BERT). The decoder-only (GPT-style) stack lives in
:mod:`attnkit.nn.causal_decoder`; it shares :class:`Stack` and :class:`DecodingStack` from here.

Every layer and stack takes the same block options (the fields of :class:`~attnkit.nn.block.BlockConfig`):
``dropout``, ``ff_dropout``, ``attention``, ``activation`` ({"gelu_tanh", "gelu", "relu"}: "gelu" is exact),
``relative_positions``, ``n_features``, ``norm_first``, ``norm`` ({"layer", "rms"}), ``norm_eps``; their
defaults are the blocks attnkit always built (pre-LN, LayerNorm with eps 1e-5, tanh GELU).
"""

from typing import Any, NamedTuple

import numpy as np

from attnkit._validation import check_int
from attnkit.nn.block import BlockConfig, TransformerBlock
from attnkit.nn.cache import DecoderCache
from attnkit.nn.module import Module
from attnkit.nn.packed import PackedEncoder
from attnkit.nn.residual import make_norm

# Rows of a block-quantised product up to which each row has the bits it has alone (ops.block_quantized_matmul's
# strips; float32 products have them at any count). Prompts read through a decoding plan stay within it: each row
# then gets a step's own operations; a longer prompt reads faster in one causal attention call per layer.
PLAN_READ_ROWS = 32
# The same where every weight is read with int8 inputs from packed blocks (ops.DecodingPlan.packed), whose rows
# have their bits at any count: 16 prompts of 10 tokens in one step, not six (SmolLM2: 101 -> 57 ms). Bounded so
# that a step's activations stay small.
PACKED_READ_ROWS = 256

__all__ = ["Decoder", "DecoderLayer", "Encoder", "EncoderLayer"]


def plan_read_rows(plan):
    """The most rows one step of ``plan`` (an :class:`attnkit.ops.DecodingPlan`) reads with each row's bits those
    of a step of its own."""
    return PACKED_READ_ROWS if plan.packed else PLAN_READ_ROWS


class EncoderLayer(TransformerBlock):
    """Self-attention and feed-forward blocks, each with a residual connection and a norm: a
    :class:`TransformerBlock` without causal mask nor cross-attention.

    Parameters
    ----------
    d_model, n_heads, d_ff : int
        Width, heads and feed-forward hidden width.
    rng : numpy.random.Generator
        Initial weights and dropout masks.
    dropout, ff_dropout, attention, activation, relative_positions, n_features, norm_first, norm, norm_eps :
        The block's options: the fields of :class:`~attnkit.nn.block.BlockConfig`, with its defaults.
    """

    def __init__(self, d_model, n_heads, d_ff, rng, *, dropout=0.1, ff_dropout=None, attention="softmax",
                 activation="gelu_tanh", relative_positions=None, n_features=128, norm_first=True, norm="layer",
                 norm_eps=None):
        config = BlockConfig(d_model=d_model, n_heads=n_heads, d_ff=d_ff, dropout=dropout, ff_dropout=ff_dropout,
                             attention=attention, activation=activation, relative_positions=relative_positions,
                             n_features=n_features, norm_first=norm_first, norm=norm, norm_eps=norm_eps)
        super().__init__(config, rng)


class DecoderLayer(TransformerBlock):
    """Causal self-attention, cross-attention over the encoder output (``memory``), feed-forward: a causal
    :class:`TransformerBlock` with cross-attention.

    Same parameters as :class:`EncoderLayer`, plus ``d_memory``: the encoder's width (default d_model).
    """

    def __init__(self, d_model, n_heads, d_ff, rng, *, d_memory=None, dropout=0.1, ff_dropout=None,
                 attention="softmax", activation="gelu_tanh", relative_positions=None, n_features=128, norm_first=True,
                 norm="layer", norm_eps=None):
        config = BlockConfig(d_model=d_model, n_heads=n_heads, d_ff=d_ff, dropout=dropout, ff_dropout=ff_dropout,
                             attention=attention, activation=activation, relative_positions=relative_positions,
                             n_features=n_features, norm_first=norm_first, norm=norm, norm_eps=norm_eps)
        super().__init__(config, rng, causal=True, cross_attention=True, d_memory=d_memory)

    # A DecoderLayer's start keeps its own signature (memory first), which the blocks' cannot take.
    def start(self, memory, memory_lengths=None, *, capacity=16):  # type: ignore[override]
        """Caches for decoding one position at a time: an empty self-attention cache and ``memory``'s
        keys and values, projected once. See :meth:`Decoder.start`."""
        memory = np.asarray(memory)
        return super().start(memory.shape[0], capacity=capacity, memory=memory, memory_lengths=memory_lengths)


class StackCache(NamedTuple):
    """What :meth:`Stack.backward` needs: each layer's cache, first to last, and the final norm's (or None)."""

    layers: list[Any]
    norm: Any


class Stack(Module):
    """``n_layers`` :class:`TransformerBlock` of one :class:`BlockConfig`, then (pre-LN) a final norm; post-LN
    blocks end in their own norm.

    Parameters
    ----------
    n_layers : int
    config : BlockConfig
    rng : numpy.random.Generator
    causal, cross_attention, d_memory :
        The blocks' kind (:class:`TransformerBlock`).

    Attributes
    ----------
    layer0, layer1, ... : TransformerBlock
        The children, also listed in :attr:`layers`; ``norm`` (pre-LN) the final norm, else None.
    """

    def __init__(self, n_layers, config, rng, *, causal=False, cross_attention=False, d_memory=None):
        super().__init__()
        self.n_layers = check_int(n_layers, "n_layers", minimum=1)
        self.config, self.norm_first = config, config.norm_first
        for i in range(self.n_layers):
            self.add_child(f"layer{i}", TransformerBlock(config, rng, causal=causal, cross_attention=cross_attention,
                                                         d_memory=d_memory))
        self.norm = make_norm(config.norm, config.d_model, config.norm_eps) if config.norm_first else None

    @property
    def layers(self):
        """The layers, first to last: the children ``layer0``, ``layer1``, ..."""
        return [getattr(self, f"layer{i}") for i in range(self.n_layers)]

    def forward(self, x, training=False, *, key_lengths=None, memory=None, memory_lengths=None):
        """The stack's output for embedded tokens ``x`` (B, N, d_model), and the cache for :meth:`backward`;
        the keywords as :meth:`TransformerBlock.forward`'s."""
        caches = []
        for layer in self.layers:
            x, c = layer.forward(x, training, key_lengths=key_lengths, memory=memory, memory_lengths=memory_lengths)
            caches.append(c)
        c_norm = None
        if self.norm is not None:
            x, c_norm = self.norm.forward(x, training)
        return x, StackCache(caches, c_norm)

    def backward(self, grad, cache):
        """Backward through the final norm and the layers, last first: dx, or with cross-attention (dx,
        dmemory), dmemory summed over the layers."""
        if self.norm is not None:
            grad = self.norm.backward(grad, cache.norm)
        dmemory = None
        for layer, layer_cache in zip(self.layers[::-1], cache.layers[::-1]):
            grad = layer.backward(grad, layer_cache)
            if isinstance(grad, tuple):
                grad, d = grad
                dmemory = d if dmemory is None else dmemory + d
        return grad if dmemory is None else (grad, dmemory)

    def infer(self, x, *, key_lengths=None, memory=None, memory_lengths=None):
        """Inference output only, as ``forward(x)[0]``: each layer's cache is dropped before the next layer
        runs, so memory peaks at one layer's intermediates, not the whole stack's."""
        for layer in self.layers:
            x = layer.forward(x, key_lengths=key_lengths, memory=memory, memory_lengths=memory_lengths)[0]
        return self.final_norm(x)

    def final_norm(self, x):
        """Inference: the stack's final norm of the last layer's output x (pre-LN), or x (post-LN)."""
        return x if self.norm is None else self.norm.forward(x)[0]


class DecodingStack(Stack):
    """A stack of causal layers that decodes one position at a time: :meth:`step` and :meth:`reorder`
    over the :class:`DecoderCache` the subclass's ``start`` makes."""

    def step(self, x, cache):
        """Decode T positions (one while generating, a prompt's T at once): ``x`` (B, T, d_model) is the embedded
        input at positions ``cache.length, ...``.

        Returns ``(out, cache)``: out (B, T, d_model) equals those rows of :meth:`forward` over
        the whole prefix (inference mode); the cache is updated in place and returned.
        """
        plan = cache.plan
        if (plan is not None and isinstance(x, np.ndarray) and x.dtype == np.float32
                and x.shape == (cache.batch_size, 1, plan.d_model) and not any(a.hard for a in cache.plan_attentions)):
            return self._plan_step(plan, x, cache), cache
        for layer, layer_cache in zip(self.layers, cache.layers):
            x, _ = layer.step(x, layer_cache)
        return self.final_norm(x), cache

    @staticmethod
    def _plan_step(plan, x, cache):
        """One position through the cache's :class:`attnkit.ops.DecodingPlan`, each row at its own (``cache.lengths``:
        rows differ in a joined cache): the layers' key/value buffers get room for it here (made or doubled as
        :meth:`SelfAttentionCache.append` would), the plan fills it."""
        positions, shape, width = cache.lengths, (x.shape[0], plan.n_kv_heads, plan.d_head), (plan.d_head,)
        buffers = [c.reserve(1, shape, width, np.float32) for c in cache.layers]
        out = plan.step(x.reshape(x.shape[0], -1), positions, [k for k, _ in buffers], [v for _, v in buffers])
        for c in cache.layers:
            c.advance()
        return out.reshape(x.shape)

    @staticmethod
    def plan_reads(cache, rows):
        """Whether :meth:`read_rows` can read ``rows`` tokens at once: a decoding plan without hard attention, and
        at most its :func:`plan_read_rows`."""
        return (cache.plan is not None and rows <= plan_read_rows(cache.plan)
                and not any(a.hard for a in cache.plan_attentions))

    @staticmethod
    def read_rows(x, sequences, positions, cache):
        """Prompts' tokens through the cache's plan in one step (:meth:`plan_reads`): row i of ``x`` (R, d_model)
        float32 is at ``positions[i]`` of cache row ``sequences[i]``; each cache row's tokens are consecutive from
        its length on, and its length grows by their count. Returns the stack's output (R, d_model): each row
        that of stepping its sequence's tokens one by one (the same bits)."""
        plan, counts = cache.plan, np.bincount(sequences, minlength=cache.batch_size)
        shape, width = (cache.batch_size, plan.n_kv_heads, plan.d_head), (plan.d_head,)
        buffers = [c.reserve(int(counts.max()), shape, width, np.float32) for c in cache.layers]
        out = plan.step(x, positions, [k for k, _ in buffers], [v for _, v in buffers], sequences=sequences)
        for c in cache.layers:
            c.lengths = c.lengths + counts
        return out

    @staticmethod
    def reorder(cache, indices):
        """A new cache whose batch row i is row ``indices[i]`` of ``cache`` (repeat, permute or drop rows,
        as beam search and finished sequences need); ``cache`` stays valid."""
        return cache.reorder(indices)


class Encoder(Stack):
    """``n_layers`` encoder layers (:class:`EncoderLayer`'s blocks) and (pre-LN) a final norm. Input: embedded
    tokens (B, N, d_model); ``forward(x, training, key_lengths=None)``; :meth:`backward` returns dx.
    Options: those of :class:`EncoderLayer`."""

    def __init__(self, n_layers, d_model, n_heads, d_ff, rng, *, dropout=0.1, ff_dropout=None, attention="softmax",
                 activation="gelu_tanh", relative_positions=None, n_features=128, norm_first=True, norm="layer",
                 norm_eps=None):
        config = BlockConfig(d_model=d_model, n_heads=n_heads, d_ff=d_ff, dropout=dropout, ff_dropout=ff_dropout,
                             attention=attention, activation=activation, relative_positions=relative_positions,
                             n_features=n_features, norm_first=norm_first, norm=norm, norm_eps=norm_eps)
        super().__init__(n_layers, config, rng)

    def infer(self, x, *, key_lengths=None, memory=None, memory_lengths=None):
        """Inference output only, as ``forward(x)[0]`` at the real tokens (outputs at padding positions are
        not meaningful). Softmax layers without relative positions run over the real tokens only
        (:class:`PackedEncoder`), the others through the padded layers (which refuse a ``memory``)."""
        if memory is None and PackedEncoder.supports(self):
            return PackedEncoder(self)(x, key_lengths=key_lengths)
        return super().infer(x, key_lengths=key_lengths, memory=memory, memory_lengths=memory_lengths)

    def attention_weights(self, x, *, key_lengths=None):
        """Inference-mode output and each layer's self-attention weights: a list of (B, H, N, N)."""
        weights = []
        for layer in self.layers:
            x, w = layer.attention_weights(x, key_lengths=key_lengths)
            weights.append(w)
        return self.final_norm(x), weights


class Decoder(DecodingStack):
    """``n_layers`` decoder layers (:class:`DecoderLayer`'s blocks) and (pre-LN) a final norm, attending over an
    encoder's ``memory``: ``forward(x, training, memory=..., memory_lengths=None)``; :meth:`backward` returns
    (dx, dmemory). Options: those of :class:`DecoderLayer`."""

    def __init__(self, n_layers, d_model, n_heads, d_ff, rng, *, d_memory=None, dropout=0.1, ff_dropout=None,
                 attention="softmax", activation="gelu_tanh", relative_positions=None, n_features=128, norm_first=True,
                 norm="layer", norm_eps=None):
        config = BlockConfig(d_model=d_model, n_heads=n_heads, d_ff=d_ff, dropout=dropout, ff_dropout=ff_dropout,
                             attention=attention, activation=activation, relative_positions=relative_positions,
                             n_features=n_features, norm_first=norm_first, norm=norm, norm_eps=norm_eps)
        super().__init__(n_layers, config, rng, causal=True, cross_attention=True, d_memory=d_memory)

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
        memory = np.asarray(memory)
        return DecoderCache(layer.start(memory.shape[0], capacity=capacity, memory=memory,
                                        memory_lengths=memory_lengths) for layer in self.layers)
