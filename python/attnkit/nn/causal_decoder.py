"""Decoder-only (GPT-style) transformer blocks: causal self-attention and feed-forward, no memory.

:class:`CausalDecoderLayer` is a causal :class:`~attnkit.nn.block.TransformerBlock` without cross-attention;
:class:`CausalDecoder` stacks such blocks and decodes one position at a time over a :class:`DecoderCache`
whose layers hold only a self-attention cache. Options are the fields of :class:`~attnkit.nn.block.BlockConfig`,
as for the encoder-decoder stacks (:mod:`attnkit.nn.transformer`).
"""

import numpy as np

from attnkit import ops
from attnkit._validation import check_int
from attnkit.nn.block import BlockConfig, TransformerBlock
from attnkit.nn.cache import DecoderCache
from attnkit.nn.transformer import DecodingStack

__all__ = ["CausalDecoder", "CausalDecoderLayer"]


class CausalDecoderLayer(TransformerBlock):
    """Causal self-attention and feed-forward blocks, each with a residual connection and a norm: a causal
    :class:`TransformerBlock` without cross-attention.

    Parameters
    ----------
    d_model, n_heads, d_ff : int
        Width, heads and feed-forward hidden width.
    rng : numpy.random.Generator
        Initial weights and dropout masks.
    dropout, ff_dropout, attention, activation, relative_positions, n_features, norm_first, norm, norm_eps, window, \
n_kv_heads, rotary_base, bias :
        The block's options: the fields of :class:`~attnkit.nn.block.BlockConfig`, with its defaults. Linear and
        Performer attention run causally in their prefix-sum form; post-LN is the original Transformer's
        decoder, pre-LN GPT-2's.
    """

    def __init__(self, d_model, n_heads, d_ff, rng, *, dropout=0.1, ff_dropout=None, attention="softmax",
                 activation="gelu_tanh", relative_positions=None, n_features=128, norm_first=True, norm="layer",
                 norm_eps=None, window=None, n_kv_heads=None, rotary_base=None, bias=True):
        config = BlockConfig(d_model=d_model, n_heads=n_heads, d_ff=d_ff, dropout=dropout, ff_dropout=ff_dropout,
                             attention=attention, activation=activation, relative_positions=relative_positions,
                             n_features=n_features, norm_first=norm_first, norm=norm, norm_eps=norm_eps,
                             window=window, n_kv_heads=n_kv_heads, rotary_base=rotary_base, bias=bias)
        super().__init__(config, rng, causal=True)


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

    def __init__(self, n_layers, d_model, n_heads, d_ff, rng, *, dropout=0.1, ff_dropout=None, attention="softmax",
                 activation="gelu_tanh", relative_positions=None, n_features=128, norm_first=True, norm="layer",
                 norm_eps=None, window=None, n_kv_heads=None, rotary_base=None, bias=True):
        config = BlockConfig(d_model=d_model, n_heads=n_heads, d_ff=d_ff, dropout=dropout, ff_dropout=ff_dropout,
                             attention=attention, activation=activation, relative_positions=relative_positions,
                             n_features=n_features, norm_first=norm_first, norm=norm, norm_eps=norm_eps,
                             window=window, n_kv_heads=n_kv_heads, rotary_base=rotary_base, bias=bias)
        super().__init__(n_layers, config, rng, causal=True)

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
        plan = self.decoding_plan()
        return DecoderCache((layer.start(batch_size, capacity=capacity) for layer in self.layers), plan=plan,
                            plan_attentions=[] if plan is None else [layer.self_attention.sublayer
                                                                     for layer in self.layers])

    def decoding_plan(self):
        """The stack as an :class:`attnkit.ops.DecodingPlan` (one-position steps in C++, no per-op Python), or
        None when a block needs the op-by-op path: post-LN, attention other than softmax, relative positions,
        a window, hard attention, or parameters that are not float32 (nor block-quantised).

        :meth:`start` builds it once per generation; it reads the parameters in place (train no further while
        decoding)."""
        config = self.config
        if (not config.norm_first or config.attention != "softmax" or config.relative_positions is not None
                or config.window is not None or self.norm is None):
            return None
        layers, eps = [], {self.norm.eps}
        for layer in self.layers:
            attention, ff = layer.self_attention.sublayer, layer.feed_forward.sublayer
            if layer.cross_attention is not None or attention.hard or attention.position_bias is not None:
                return None
            norm1, norm2 = layer.self_attention.norm, layer.feed_forward.norm
            eps.update((norm1.eps, norm2.eps))
            p = attention.params
            layers.append(ops.DecodingPlanLayer(
                _norm_params(norm1), _norm_params(norm2), p["wq"], p.get("bq"), p["wk"], p.get("bk"), p["wv"],
                p.get("bv"), p["wo"], p.get("bo"), ff.linear1.params["weight"], ff.linear1.params.get("bias"),
                ff.linear2.params["weight"], ff.linear2.params.get("bias")))
        arrays = [a for layer in layers for a in (*layer.norm1, *layer.norm2, *layer[2:])] + [*_norm_params(self.norm)]
        if len(eps) != 1 or not all(a is None or isinstance(a, ops.BlockQuantizedMatrix)
                                    or (isinstance(a, np.ndarray) and a.dtype == np.float32) for a in arrays):
            return None
        attention = self.layers[0].self_attention.sublayer
        return ops.DecodingPlan(layers, _norm_params(self.norm), n_heads=attention.n_heads,
                                n_kv_heads=attention.n_kv_heads, norm=config.norm, eps=eps.pop(),
                                activation=config.activation, rotary_base=attention.rotary_base)


def _norm_params(norm):
    """(gamma, beta) of a LayerNorm, (gamma, None) of an RMSNorm."""
    return norm.params["gamma"], norm.params.get("beta")
