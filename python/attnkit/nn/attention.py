"""Multi-head attention with a hand-written backward: projections and heads here, the attention rule
(exact softmax, linear, Performer) delegated to the ops, so a new rule never repeats projection code."""

import contextlib
import math

import numpy as np

from attnkit import ops
from attnkit._validation import check_bool, check_int, check_real
from attnkit.nn.cache import CrossAttentionCache, SelfAttentionCache
from attnkit.nn.layers import add_product, column_sums_buffer, dense
from attnkit.nn.module import Module
from attnkit.ops.feature_maps import EluFeatureMap, FeatureMap, PositiveRandomFeatureMap
from attnkit.ops.masking import check_key_lengths

__all__ = ["MultiHeadAttention", "hard_attention", "set_hard_attention"]

ATTENTION_KINDS = ("softmax", "linear", "performer")


class MultiHeadAttention(Module):
    """Multi-head attention for self- and cross-attention.

    ``out = concat_h(attention(x Wq_h, c Wk_h, c Wv_h)) Wo + bo`` with ``c = x`` (self-attention) or the
    ``context`` passed to :meth:`forward` (cross-attention, e.g. over an encoder's output).

    Parameters
    ----------
    d_model : int
        Width of the queries' input x and of the output.
    n_heads : int
        Number of heads; each has width ``d_head`` (default ``d_model // n_heads``).
    rng : numpy.random.Generator
        Draws the initial weights (Xavier-uniform projections, zero biases) and, for Performer
        attention, the random features.
    d_context : int, optional
        Width of the context for cross-attention (default: d_model). Encoder and decoder widths may
        differ.
    d_head : int, optional
        Head width.
    attention : {"softmax", "linear", "performer"}, default="softmax"
        The attention rule: exact softmax attention, linear attention with the elu+1 feature map, or
        Performer's FAVOR+ positive random features (``n_features`` of them).
    causal : bool, default=False
        Query i sees keys j <= i (+ Nk - Nq), for decoder self-attention.
    position_bias : Module, optional
        A module whose ``forward(nq, nk)`` returns an additive (n_heads, nq, nk) logit bias and whose
        ``backward(dbias, cache)`` accumulates its parameters' gradients (relative positions,
        :class:`attnkit.nn.positional.RelativePositionBias`); :meth:`step` calls
        ``forward(1, nk, offset=nk - 1)``, the bias of one query at position nk - 1. Softmax attention only.
    n_features : int, default=128
        Random features of Performer attention.
    window : int, optional
        A sliding window: query i sees at most ``window`` keys before its position (and, unless ``causal``,
        after it); :meth:`step` then keeps ``window + 1`` positions in a rolling cache. Softmax attention only.
    n_kv_heads : int, optional
        Grouped-query attention (Ainslie et al. 2023; Llama 2 70B, SmolLM2): ``n_kv_heads`` key/value heads,
        each shared by ``n_heads / n_kv_heads`` query heads. The attention kernels read each shared head in
        place (a broadcast, never a copy per query head), and the decoding cache holds ``n_kv_heads`` heads.
        Default: ``n_heads`` (multi-head attention). Softmax attention only.
    rotary_base : float, optional
        Rotary positions (:func:`attnkit.ops.rotary_positions`, interleaved pairs, this wavelength base)
        turn the queries and keys of self-attention by their positions, counted from 0 in :meth:`forward`
        and from the cache's length in :meth:`step`. None: no rotation.
    bias : bool, default=True
        Biases on the four projections (Llama has none).

    Attributes
    ----------
    hard : bool
        An inference-time switch (not a parameter), off by default: softmax attention then reads, for each
        query, the value of its best-scoring visible key (:func:`attnkit.argmax_attention`), in :meth:`forward`
        (inference mode) and :meth:`step`. :func:`hard_attention` sets it on every attention of a network.
    """

    def __init__(self, d_model, n_heads, rng, *, d_context=None, d_head=None, attention="softmax", causal=False,
                 position_bias=None, n_features=128, window=None, n_kv_heads=None, rotary_base=None, bias=True):
        super().__init__()
        d_model = check_int(d_model, "d_model", minimum=1)
        n_heads = check_int(n_heads, "n_heads", minimum=1)
        d_context = d_model if d_context is None else check_int(d_context, "d_context", minimum=1)
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads}), or give d_head")
            d_head = d_model // n_heads
        d_head = check_int(d_head, "d_head", minimum=1)
        if attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {attention!r}")
        if position_bias is not None and attention != "softmax":
            raise ValueError(f"position_bias needs attention='softmax' (a logit bias has no meaning for "
                             f"{attention!r} attention)")
        if window is not None:
            window = check_int(window, "window", minimum=0)
            if attention != "softmax":
                raise ValueError(f"window needs attention='softmax', got {attention!r}")
        n_kv_heads = n_heads if n_kv_heads is None else check_int(n_kv_heads, "n_kv_heads", minimum=1)
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads}): each key/value "
                             "head serves an equal group of query heads")
        if n_kv_heads != n_heads and attention != "softmax":
            raise ValueError(f"n_kv_heads (grouped-query attention) needs attention='softmax', got {attention!r}")
        if rotary_base is not None:
            rotary_base = check_real(rotary_base, "rotary_base", positive=True)
            if d_head % 2:
                raise ValueError(f"rotary positions turn pairs of features: d_head must be even, got {d_head}")
        self.d_model, self.n_heads, self.d_head, self.d_context = d_model, n_heads, d_head, d_context
        self.n_kv_heads, self.rotary_base = n_kv_heads, rotary_base
        self.attention, self.causal, self.window = attention, bool(causal), window
        self.hard = False
        inner, kv_inner = n_heads * d_head, n_kv_heads * d_head
        for name, fan_in, fan_out in (("wq", d_model, inner), ("wk", d_context, kv_inner),
                                      ("wv", d_context, kv_inner), ("wo", inner, d_model)):
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            self.add_param(name, lambda shape, limit=limit: rng.uniform(-limit, limit, size=shape),
                           shape=(fan_in, fan_out))
            if check_bool(bias, "bias"):
                self.add_param("b" + name[1], np.zeros, shape=(fan_out,))
        self.feature_map: FeatureMap | None
        if attention == "linear":
            self.feature_map = EluFeatureMap()
        elif attention == "performer":
            self.feature_map = PositiveRandomFeatureMap(n_features, random_state=rng.integers(2**63))
            self.draws_beyond_weights = True
        else:
            self.feature_map = None
        self.position_bias = position_bias  # a child when given

    def redraw_features(self, rng):
        """Draw new Performer random features (the usual periodic redraw during training)."""
        if isinstance(self.feature_map, PositiveRandomFeatureMap):  # the only random map a layer holds
            self.feature_map.redraw(rng.integers(2**63))

    # -- forward / backward -----------------------------------------------------------------------------------
    def _heads(self, x, w, b, *, start=None):
        """(B, N, d_in) @ (d_in, H dh) -> (B, H, N, dh) (H: the query or the key/value heads); queries and keys
        of self-attention are turned by rotary positions from ``start``."""
        y = dense(_flat(x), self.params[w], self.params.get(b))  # one 2-D GEMM: a 3-D @ loops over small ones
        y = y.reshape(x.shape[:-1] + (-1, self.d_head)).swapaxes(-2, -3)
        if start is not None and self.rotary_base is not None and w != "wv":
            y = ops.rotary_positions(y, start=start, base=self.rotary_base)
        return y

    def _self_heads(self, x, start):
        """q, k, v of self-attention as :meth:`_heads` makes them, from one product with ``[wq | wk | wv]``: three
        thin products of a small model (768 x 128 @ 128 x 128) each ran on one thread below the matrix product's
        threading threshold, where the fused one takes both. Each column's arithmetic is that of its own product, so
        q, k and v are the same bits. Returns (q, k, v, the fused weight for :meth:`backward`), or None when the
        weights are not float arrays (block-quantised inference weights)."""
        weights = [self.params[w] for w in ("wq", "wk", "wv")]
        if not all(isinstance(w, np.ndarray) for w in weights):
            return None
        fused = np.concatenate(weights, axis=1)
        bias = np.concatenate([self.params[b] for b in ("bq", "bk", "bv")]) if "bq" in self.params else None
        y = dense(_flat(x), fused, bias).reshape(x.shape[:-1] + (-1, self.d_head))  # (B, N, H + 2 Hkv, dh)
        q, k, v = np.split(y, self._qkv_bounds, axis=-2)
        q, k, v = q.swapaxes(-2, -3), k.swapaxes(-2, -3), v.swapaxes(-2, -3)
        if self.rotary_base is not None:
            q = ops.rotary_positions(q, start=start, base=self.rotary_base)
            k = ops.rotary_positions(k, start=start, base=self.rotary_base)
        return q, k, v, fused

    @property
    def _qkv_bounds(self):
        """Where k's and v's heads start among the fused projection's H + 2 Hkv heads."""
        return [self.n_heads, self.n_heads + self.n_kv_heads]

    def _grouped(self, q, k, v):
        """Grouped-query layout: q (B, H, N, dh) -> (B, Hkv, G, N, dh) and k, v (B, Hkv, N, dh) -> (B, Hkv, 1, N, dh),
        so that the kernels broadcast each key/value head over its group (views, no copies)."""
        if self.n_kv_heads == self.n_heads:
            return q, k, v
        b, n = q.shape[0], q.shape[2]
        return q.reshape(b, self.n_kv_heads, -1, n, self.d_head), k[:, :, None], v[:, :, None]

    def _grouped_bias(self, bias):
        """A per-head (H, nq, nk) logit bias in the grouped layout (Hkv, G, nq, nk)."""
        if bias is None or self.n_kv_heads == self.n_heads:
            return bias
        return bias.reshape((self.n_kv_heads, -1) + bias.shape[-2:])

    def _per_head(self, a):
        """(B, Hkv, G, ...) -> (B, H, ...): the grouped layout's results, by query head."""
        return a if self.n_kv_heads == self.n_heads else a.reshape((a.shape[0], self.n_heads) + a.shape[3:])

    def forward(self, x, training=False, *, context=None, key_lengths=None, return_weights=False):
        """Attend from ``x`` (B, Nq, d_model) over ``context`` (B, Nk, d_context; default x).

        Parameters
        ----------
        key_lengths : array of int (B,), optional
            Real (non-padding) length of each context sequence; padded keys are skipped.
        return_weights : bool, default=False
            Softmax attention only: also return the (B, H, Nq, Nk) weights (for inspection).

        Returns
        -------
        out : ndarray (B, Nq, d_model)
        cache : tuple, for :meth:`backward`
        weights : ndarray, only with ``return_weights=True``
        """
        cross = context is not None
        if cross and self.rotary_base is not None:
            raise ValueError("rotary positions are for self-attention: a query and a key of different sequences "
                             "have no distance between them (give no context, or no rotary_base)")
        c = context if cross else x
        start = None if cross else 0
        heads = None if cross else self._self_heads(x, start)
        if heads is None:
            q, k, v = self._heads(x, "wq", "bq", start=start), self._heads(c, "wk", "bk", start=start), \
                self._heads(c, "wv", "bv")
            fused = None
        else:
            q, k, v, fused = heads
        q, k, v = self._grouped(q, k, v)
        bias, bias_cache = (None, None)
        if self.position_bias is not None:
            bias, bias_cache = self.position_bias.forward(q.shape[-2], k.shape[-2])
            bias = self._grouped_bias(bias)
        kw = dict(key_lengths=key_lengths, causal=self.causal, return_context=True)
        if self.window is not None:
            kw["window"] = (self.window, 0 if self.causal else self.window)
        weights = merged = None
        if self.hard:
            if training or return_weights or self.attention != "softmax":
                raise ValueError("hard (argmax) attention is an inference-time option of softmax attention: it has "
                                 "no gradient and forms no weights")
            kw.pop("return_context")
            heads, context = ops.argmax_attention(q, k, v, bias=bias, **kw), None
        elif self.attention == "softmax":
            if return_weights:
                heads, weights, context = ops.scaled_dot_product_attention(q, k, v, bias=bias, return_weights=True,
                                                                           **kw)
            else:
                if self.n_kv_heads == self.n_heads:  # the heads written straight into the rows wo's product reads
                    merged = np.empty(x.shape[:-1] + (self.n_heads * self.d_head,), np.result_type(q, k, v, np.float32))
                    kw["out"] = merged.reshape(x.shape[:-1] + (self.n_heads, self.d_head)).swapaxes(-2, -3)
                heads, context = ops.scaled_dot_product_attention(q, k, v, bias=bias, **kw)
        else:
            if return_weights:
                raise ValueError(f"return_weights needs attention='softmax' ({self.attention!r} attention "
                                 "never forms the weights)")
            assert self.feature_map is not None  # set for every attention but softmax
            heads, context = ops.linear_attention(q, k, v, feature_map=self.feature_map, **kw)
        if weights is not None:
            weights = self._per_head(weights)
        if merged is None:
            merged = self._per_head(heads).swapaxes(-2, -3).reshape(x.shape[:-1] + (self.n_heads * self.d_head,))
        out = dense(_flat(merged), self.params["wo"], self.params.get("bo")).reshape(x.shape[:-1] + (self.d_model,))
        # The ops' context keeps the checked q, k, v (and what the backward reuses): no second validation.
        cache = (x, c, cross, merged, context, bias_cache, fused)
        return (out, cache, weights) if return_weights else (out, cache)

    def backward(self, grad, cache):
        """Accumulate parameter gradients; return dx, or (dx, dcontext) for cross-attention."""
        x, c, cross, merged, context, bias_cache, fused = cache
        add_product(self.grads["wo"], _flat(merged).T, _flat(grad), bias_grad=self.grads.get("bo"))
        dheads = ops.matmul(_flat(grad), self.params["wo"].T).reshape(x.shape[:-1] + (self.n_heads, self.d_head))
        dheads = dheads.swapaxes(-2, -3)
        if self.n_kv_heads != self.n_heads:
            dheads = dheads.reshape(dheads.shape[0], self.n_kv_heads, -1, *dheads.shape[2:])
        # Softmax attention writes dq, dk, dv straight into the fused projection's gradient where nothing comes
        # between (grouped heads are summed, rotary ones turned back).
        dy = self._fused_gradient(x, merged.dtype) if fused is not None and self.n_kv_heads == self.n_heads \
            and self.rotary_base is None and isinstance(context, ops.AttentionContext) else None
        into = {} if dy is None else {"out": tuple(self._fused_parts(dy))}
        if self.position_bias is not None:  # softmax attention only
            dq, dk, dv, dbias = context.backward(dheads, bias_grad=True, **into)
            self.position_bias.backward(dbias.reshape((self.n_heads,) + dbias.shape[-2:]), bias_cache)
        else:
            dq, dk, dv = context.backward(dheads, **into)
        if self.n_kv_heads != self.n_heads:  # the shared heads' gradients, summed over their groups by the op
            dq, dk, dv = self._per_head(dq), dk[:, :, 0], dv[:, :, 0]
        if self.rotary_base is not None and not cross:  # a rotation's transpose is its inverse
            dq = ops.rotary_positions(dq, base=self.rotary_base, inverse=True)
            dk = ops.rotary_positions(dk, base=self.rotary_base, inverse=True)
        if fused is not None:
            if dy is None:
                dy = self._fused_gradient(x, np.result_type(dq, dk, dv))  # dq, dk, dv's dtype (not the weights')
                for part, d in zip(self._fused_parts(dy), (dq, dk, dv)):
                    np.copyto(part, d)
            return self._project_back_fused(x, dy, fused)
        dx = self._project_back(x, dq, "wq", "bq")
        dc = self._project_back(c, dk, "wk", "bk") + self._project_back(c, dv, "wv", "bv")
        return (dx, dc) if cross else dx + dc

    # -- incremental decoding (inference only) ------------------------------------------------------------
    def start_self(self, batch_size, *, capacity=16):
        """An empty cache for decoding causal self-attention one position at a time with :meth:`step`.

        Parameters
        ----------
        batch_size : int
            Rows of the batch to decode.
        capacity : int, default=16
            Positions the key/value buffers hold before they first double (softmax attention; give the
            maximum length to avoid any regrowth).

        Returns
        -------
        SelfAttentionCache
        """
        if not self.causal:
            raise ValueError("start_self needs causal self-attention (causal=True): without the causal mask an "
                             "earlier position would see later ones, which step-by-step decoding cannot give")
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        capacity = check_int(capacity, "capacity", minimum=1)
        state = None if self.feature_map is None else ops.LinearAttentionState(self.feature_map)
        return SelfAttentionCache(batch_size, capacity, state, window=self.window)

    def start_cross(self, context, *, key_lengths=None):
        """A cache of the keys and values of ``context`` (B, M, d_context), projected once, for :meth:`step`.

        Parameters
        ----------
        context : ndarray of shape (B, M, d_context)
            What the queries attend over (an encoder's output).
        key_lengths : array of int (B,), optional
            Real length of each context row; padded positions are skipped.

        Returns
        -------
        CrossAttentionCache
        """
        if self.causal:
            raise ValueError("start_cross needs causal=False (cross-attention sees the whole context)")
        context = np.asarray(context)
        if context.ndim != 3 or context.shape[-1] != self.d_context:
            raise ValueError(f"context must have shape (B, M, d_context={self.d_context}), got {context.shape}")
        k, v = self._heads(context, "wk", "bk"), self._heads(context, "wv", "bv")
        if key_lengths is not None:
            key_lengths = check_key_lengths(key_lengths, context.shape[:1], context.shape[1])
        if self.feature_map is None:
            return CrossAttentionCache(k, v, key_lengths)
        return CrossAttentionCache(state=ops.LinearAttentionState.from_keys(
            k, v, feature_map=self.feature_map, key_lengths=key_lengths))

    def step(self, x, cache):
        """Attention output for T new positions ``x`` (B, T, d_model), given the cache of the earlier ones.

        Self-attention (a :class:`SelfAttentionCache`): the positions' keys and values join the cache, updated
        in place, and each query attends over every position up to its own: rows t..t+T-1 of the causal
        :meth:`forward`, relative-position bias included. T > 1 is a prompt's prefill: one causal attention
        call with softmax attention, position by position with a window or linear attention (their states
        advance one position at a time). Cross-attention (a :class:`CrossAttentionCache`): the queries attend
        over the cached context, as :meth:`forward` with ``context``. Inference only (no backward).

        Returns
        -------
        out : ndarray of shape (B, T, d_model)
        cache : the same cache
        """
        if not isinstance(cache, (SelfAttentionCache, CrossAttentionCache)):
            raise TypeError(f"cache must come from start_self or start_cross, got {type(cache).__name__}")
        x = np.asarray(x)
        if x.ndim != 3 or x.shape[1] < 1 or x.shape[2] != self.d_model or x.shape[0] != cache.batch_size:
            raise ValueError(f"x must have shape (batch_size={cache.batch_size}, T >= 1, d_model={self.d_model}), "
                             f"got {x.shape}")
        n = x.shape[1]
        if n > 1 and isinstance(cache, SelfAttentionCache) and (cache.state is not None or cache.window is not None):
            return np.concatenate([self.step(x[:, t : t + 1], cache)[0] for t in range(n)], axis=1), cache
        start = None if isinstance(cache, CrossAttentionCache) else cache.length
        q = self._heads(x, "wq", "bq", start=start)
        if isinstance(cache, CrossAttentionCache):
            if cache.state is not None:
                heads = np.stack([cache.state.attend(q[:, :, t]) for t in range(n)], axis=2)
            else:
                q, keys, values = self._grouped(q, cache.keys, cache.values)
                heads = self._per_head(np.asarray(ops.scaled_dot_product_attention(q, keys, values,
                                                                                   key_lengths=cache.key_lengths)))
        else:
            k, v = self._heads(x, "wk", "bk", start=start), self._heads(x, "wv", "bv")
            if cache.state is not None:
                heads = cache.state.step(q[:, :, 0], k[:, :, 0], v[:, :, 0])[:, :, None]
                cache.advance()
            else:
                cache.append(k, v)
                keys, values = cache.keys_values()
                bias = None
                if self.position_bias is not None:  # a bias by distance, for the keys in the cache's slot order
                    kept = keys.shape[2]
                    bias = self.position_bias.forward(n, kept, offset=kept - n)[0][..., cache.slot_order()]
                # The new queries come last (causal end-aligned); one query sees every cached key, window or not.
                attend = ops.argmax_attention if self.hard else ops.scaled_dot_product_attention
                q, keys, values = self._grouped(q, keys, values)
                heads = self._per_head(np.asarray(attend(q, keys, values, bias=self._grouped_bias(bias),
                                                         causal=n > 1)))
        merged = heads.swapaxes(1, 2).reshape(x.shape[0], n, self.n_heads * self.d_head)
        out = dense(merged.reshape(-1, merged.shape[-1]), self.params["wo"], self.params.get("bo"))
        return out.reshape(x.shape[0], n, -1), cache

    def _fused_gradient(self, x, dtype):
        """An empty gradient of the fused projection's output, (B, N, H + 2 Hkv, dh): see :meth:`_fused_parts`."""
        return np.empty(x.shape[:-1] + (self.n_heads + 2 * self.n_kv_heads, self.d_head), dtype)

    def _fused_parts(self, dy):
        """dq, dk, dv's places in the fused gradient ``dy``: (B, H or Hkv, N, dh) views."""
        return [part.swapaxes(-2, -3) for part in np.split(dy, self._qkv_bounds, axis=-2)]

    def _project_back_fused(self, x, dy, fused):
        """dx of self-attention's fused projection (:meth:`_self_heads`) from the gradient ``dy`` of its output
        (:meth:`_fused_gradient`, filled): one product for the three weights' gradients and one for dx."""
        dy = _flat(dy.reshape(x.shape[:-1] + (-1,)))
        columns = [bound * self.d_head for bound in self._qkv_bounds]
        # The biases' gradient is dy's column sums, added up as the product packs dy (see add_product).
        sums = column_sums_buffer(_flat(x).T, dy) if "bq" in self.grads else None
        products = ops.matmul(_flat(x).T, dy, b_column_sums=sums)
        for w, grad in zip(("wq", "wk", "wv"), np.split(products, columns, axis=1)):
            self.grads[w] += grad
        if "bq" in self.grads:
            for b, grad in zip(("bq", "bk", "bv"), np.split(dy.sum(axis=0) if sums is None else sums, columns)):
                self.grads[b] += grad
        return ops.matmul(dy, fused.T).reshape(x.shape)

    def _project_back(self, inp, dheads, w, b):
        dy = dheads.swapaxes(-2, -3).reshape(inp.shape[:-1] + (-1,))
        add_product(self.grads[w], _flat(inp).T, _flat(dy), bias_grad=self.grads.get(b))
        return ops.matmul(_flat(dy), self.params[w].T).reshape(inp.shape)


def set_hard_attention(network, on):
    """Make every :class:`MultiHeadAttention` of ``network`` attend by argmax (``on``) or by softmax, until set
    again; returns their previous settings. :func:`hard_attention` does it for a block of code."""
    layers = [m for m in network.modules() if isinstance(m, MultiHeadAttention)]
    if on and any(m.attention != "softmax" for m in layers):
        kinds = sorted({m.attention for m in layers} - {"softmax"})
        raise ValueError(f"argmax attention needs softmax attention layers; this network has {kinds}")
    before = [m.hard for m in layers]
    for m in layers:
        m.hard = bool(on)
    return before


@contextlib.contextmanager
def hard_attention(network, on=True):
    """Within the block, every :class:`MultiHeadAttention` of ``network`` attends by argmax (``on``) or by
    softmax: an inference-time switch, restored on exit.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import CausalLM
    >>> model = CausalLM(10, 0, d_model=8, n_heads=2, n_layers=2, max_len=6)
    >>> with hard_attention(model):
    ...     logits, _ = model.forward(np.array([[1, 4, 2]]))
    >>> logits.shape
    (1, 3, 10)
    """
    before = set_hard_attention(network, on)
    try:
        yield network
    finally:
        for m, was in zip([m for m in network.modules() if isinstance(m, MultiHeadAttention)], before):
            m.hard = was


def _flat(a):
    return a.reshape(-1, a.shape[-1])
