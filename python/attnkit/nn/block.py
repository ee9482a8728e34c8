"""The transformer block of every stack, and its options.

One block serves the three stacks: an encoder's (self-attention over the whole sequence), an encoder-decoder's
decoder (causal self-attention, then cross-attention over the encoder's output, the ``memory``) and a
decoder-only model's (causal self-attention alone). Pre-LN, it computes

    x = x + SelfAttention(Norm(x))
    x = x + CrossAttention(Norm(x), memory)      (with cross-attention)
    x = x + FeedForward(Norm(x))

each line a :class:`Residual` (post-LN, ``norm_first=False``: ``x = Norm(x + F(x))``, as BERT). Its options are
one :class:`BlockConfig`, shared by every layer of a stack.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from attnkit._validation import check_bool, check_int, check_real
from attnkit.nn.attention import ATTENTION_KINDS, MultiHeadAttention
from attnkit.nn.cache import CrossAttentionCache, SelfAttentionCache
from attnkit.nn.layers import ACTIVATIONS, FeedForward
from attnkit.nn.module import Module
from attnkit.nn.positional import RelativePositionBias
from attnkit.nn.residual import NORM_KINDS, Residual

__all__ = ["BlockCache", "BlockConfig", "TransformerBlock"]


@dataclass(frozen=True, kw_only=True)
class BlockConfig:
    """The options of a transformer block; the defaults are the blocks attnkit always built (pre-LN,
    LayerNorm with eps 1e-5, tanh GELU, softmax attention)."""

    d_model: int
    """Width of the block's input and output."""
    n_heads: int
    """Attention heads, each ``d_model // n_heads`` wide."""
    d_ff: int
    """Hidden width of the feed-forward sublayer (typically 4 d_model)."""
    dropout: float = 0.1
    """Dropout of each sublayer's output, and after the feed-forward activation unless ``ff_dropout`` is given."""
    ff_dropout: float | None = None
    """Dropout after the feed-forward activation instead of ``dropout`` (BERT has none there)."""
    attention: str = "softmax"
    """The attention rule, one of ``ATTENTION_KINDS``: exact softmax, linear (elu+1) or Performer (FAVOR+)."""
    activation: str = "gelu_tanh"
    """The feed-forward activation: "gelu_tanh" (GPT-2), "gelu" (exact, erf: BERT), "relu" or "swiglu" (Llama)."""
    relative_positions: int | None = None
    """Learned relative-position biases of the self-attention, clipped at +-k (Shaw et al.); softmax only."""
    n_features: int = 128
    """Random features of Performer attention."""
    norm_first: bool = True
    """Pre-LN ``x + Dropout(F(Norm(x)))`` (then a final norm ends the stack), or post-LN ``Norm(x + Dropout(F(x)))``."""
    norm: str = "layer"
    """The norm: "layer" (:class:`LayerNorm`) or "rms" (:class:`RMSNorm`)."""
    norm_eps: float | None = None
    """The norms' eps (None: 1e-5 for LayerNorm, 1e-6 for RMSNorm; BERT checkpoints say 1e-12)."""
    window: int | None = None
    """Self-attention sees at most ``window`` positions before each query (and, unless causal, after it): the
    sliding window that drops the far past of long generation (softmax attention only; decoding then keeps
    ``window + 1`` positions per layer)."""
    n_kv_heads: int | None = None
    """Key/value heads of grouped-query attention, each shared by ``n_heads / n_kv_heads`` query heads (None:
    ``n_heads``, plain multi-head attention)."""
    rotary_base: float | None = None
    """Rotary positions in the self-attention (:func:`attnkit.ops.rotary_positions`) with this wavelength base."""
    bias: bool = True
    """Biases on the attention projections and the feed-forward maps (Llama has none)."""

    def __post_init__(self):
        d_model, n_heads = check_int(self.d_model, "d_model", minimum=1), check_int(self.n_heads, "n_heads", minimum=1)
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        check_int(self.d_ff, "d_ff", minimum=1)
        for name in ("dropout", "ff_dropout"):
            p = getattr(self, name)
            if p is not None and not 0.0 <= check_real(p, name) < 1.0:
                raise ValueError(f"{name}: the drop probability p must be in [0, 1), got {p}")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {self.attention!r}")
        if not isinstance(self.activation, str) or self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.relative_positions is not None:
            check_int(self.relative_positions, "relative_positions", minimum=0)
        check_int(self.n_features, "n_features", minimum=1)
        check_bool(self.norm_first, "norm_first")
        if not isinstance(self.norm, str) or self.norm not in NORM_KINDS:
            raise ValueError(f"norm must be one of {NORM_KINDS}, got {self.norm!r}")
        if self.norm_eps is not None and check_real(self.norm_eps, "norm_eps") < 0:
            raise ValueError(f"norm_eps must be >= 0, got {self.norm_eps}")
        if self.n_kv_heads is not None and n_heads % check_int(self.n_kv_heads, "n_kv_heads", minimum=1):
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.rotary_base is not None:
            check_real(self.rotary_base, "rotary_base", positive=True)
        check_bool(self.bias, "bias")
        if self.window is not None:
            check_int(self.window, "window", minimum=0)
            if self.attention != "softmax":
                raise ValueError(f"window needs attention='softmax', got {self.attention!r} (linear attention keeps "
                                 "running sums of the whole past, which cannot drop a position)")


class BlockCache(NamedTuple):
    """What :meth:`TransformerBlock.backward` needs: each residual sublayer's cache."""

    self_attention: Any
    cross_attention: Any  # None without cross-attention
    feed_forward: Any


class TransformerBlock(Module):
    """Self-attention (causal or not), cross-attention over a ``memory`` (optional) and feed-forward, each a
    :class:`Residual` (see the module docstring for the equations).

    Parameters
    ----------
    config : BlockConfig
        Widths, attention rule, norms, activation, dropout.
    rng : numpy.random.Generator
        Initial weights, dropout generators and Performer features, drawn child by child.
    causal : bool, default=False
        The self-attention's query i sees keys j <= i only (a decoder's).
    cross_attention : bool, default=False
        Attend over a ``memory`` after the self-attention (an encoder-decoder's decoder). Cross-attention is
        never causal and takes no relative positions (queries and keys come from different sequences).
    d_memory : int, optional
        Width of the memory (default: d_model), with ``cross_attention`` only.

    Attributes
    ----------
    self_attention, cross_attention, feed_forward : Residual
        The children (``cross_attention`` is None in a block without it).
    """

    def __init__(self, config, rng, *, causal=False, cross_attention=False, d_memory=None):
        super().__init__()
        if not isinstance(config, BlockConfig):
            raise TypeError(f"config must be a BlockConfig, got {type(config).__name__}")
        if d_memory is not None and not cross_attention:
            raise ValueError("d_memory is the width of the memory that cross-attention reads: it needs "
                             "cross_attention=True")
        self.config, self.causal = config, check_bool(causal, "causal")
        self.self_attention = self._residual(_attention(config, rng, causal=self.causal,
                                                        relative_positions=config.relative_positions,
                                                        window=config.window, rotary_base=config.rotary_base), rng)
        self.cross_attention = None
        if check_bool(cross_attention, "cross_attention"):
            self.cross_attention = self._residual(_attention(config, rng, causal=False, relative_positions=None,
                                                             d_context=d_memory), rng)
        ff_dropout = config.dropout if config.ff_dropout is None else config.ff_dropout
        ff = FeedForward(config.d_model, config.d_ff, rng, activation=config.activation, dropout=ff_dropout,
                         bias=config.bias)
        self.feed_forward = self._residual(ff, rng)

    def _residual(self, sublayer, rng):
        config = self.config
        return Residual(config.d_model, sublayer, config.dropout, rng, norm_first=config.norm_first, norm=config.norm,
                        norm_eps=config.norm_eps)

    def forward(self, x, training=False, *, key_lengths=None, memory=None, memory_lengths=None):
        """The block's output (B, N, d_model) for ``x`` (B, N, d_model), and the cache for :meth:`backward`.

        ``key_lengths`` (B,): real lengths of right-padded rows of x (padding keys are skipped; outputs at
        padding positions are not meaningful). ``memory`` (B, M, d_memory) and its ``memory_lengths``: what the
        cross-attention reads (required with it, refused without).
        """
        self._check_memory(memory)
        x, c_self = self.self_attention.forward(x, training, key_lengths=key_lengths)
        c_cross = None
        if self.cross_attention is not None:
            x, c_cross = self.cross_attention.forward(x, training, context=memory, key_lengths=memory_lengths)
        x, c_ff = self.feed_forward.forward(x, training)
        return x, BlockCache(c_self, c_cross, c_ff)

    def backward(self, grad, cache):
        """Accumulate the parameters' gradients; returns dx, or (dx, dmemory) with cross-attention."""
        grad = self.feed_forward.backward(grad, cache.feed_forward)
        dmemory = None
        if self.cross_attention is not None:
            grad, dmemory = self.cross_attention.backward(grad, cache.cross_attention)
        grad = self.self_attention.backward(grad, cache.self_attention)
        return grad if dmemory is None else (grad, dmemory)

    def attention_weights(self, x, *, key_lengths=None, memory=None, memory_lengths=None):
        """Inference-mode output and attention weights, for inspection (softmax attention only): the
        self-attention's (B, H, N, N), or with cross-attention the pair (self-attention's, cross-attention's
        (B, H, N, M))."""
        self._check_memory(memory)
        x, weights = self.self_attention.attend(x, key_lengths=key_lengths)
        if self.cross_attention is not None:
            x, cross_weights = self.cross_attention.attend(x, context=memory, key_lengths=memory_lengths)
            weights = (weights, cross_weights)
        return self.feed_forward.forward(x)[0], weights

    # -- incremental decoding (inference only) ------------------------------------------------------------
    def start(self, batch_size, *, capacity=16, memory=None, memory_lengths=None):
        """Caches for decoding one position at a time (a causal block): an empty self-attention cache, and with
        cross-attention the pair (that cache, ``memory``'s keys and values projected once)."""
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        self._check_memory(memory)
        self_cache: SelfAttentionCache = self.self_attention.sublayer.start_self(batch_size, capacity=capacity)
        if self.cross_attention is None:
            return self_cache
        memory = np.asarray(memory)
        if memory.ndim != 3 or memory.shape[0] != batch_size:
            raise ValueError(f"memory must have shape (batch_size={batch_size}, M, d_memory), got {memory.shape}")
        cross_cache: CrossAttentionCache = self.cross_attention.sublayer.start_cross(memory, key_lengths=memory_lengths)
        return self_cache, cross_cache

    def step(self, x, cache):
        """The block's output for T new positions ``x`` (B, T, d_model); ``cache`` (from :meth:`start`) is
        updated in place. Equals rows t..t+T-1 of :meth:`forward` (inference mode) when x holds positions
        t..t+T-1 and the cache positions 0..t-1. Returns ``(out, cache)``."""
        self_cache, cross_cache = cache if self.cross_attention is not None else (cache, None)
        x = self.self_attention.step(x, self_cache)
        if self.cross_attention is not None:
            x = self.cross_attention.step(x, cross_cache)
        return self.feed_forward.step(x), cache

    def _check_memory(self, memory):
        if self.cross_attention is not None and memory is None:
            raise ValueError("memory is required: this block attends over it (cross_attention=True)")
        if self.cross_attention is None and memory is not None:
            raise ValueError("memory needs a block with cross-attention (cross_attention=True)")


def _attention(config, rng, *, causal, relative_positions, d_context=None, window=None, rotary_base=None):
    """A :class:`MultiHeadAttention` by ``config``, with a :class:`RelativePositionBias` of its own when
    ``relative_positions`` (the clipping distance) is given."""
    bias = None if relative_positions is None else RelativePositionBias(config.n_heads, relative_positions, rng)
    return MultiHeadAttention(config.d_model, config.n_heads, rng, d_context=d_context, attention=config.attention,
                              causal=causal, position_bias=bias, n_features=config.n_features, window=window,
                              n_kv_heads=config.n_kv_heads, rotary_base=rotary_base, bias=config.bias)
