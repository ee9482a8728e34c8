"""The state of incremental (one position at a time) decoding: what attention keeps between steps.

Generating T tokens with a decoder's full forward recomputes every earlier position at every step,
O(T^2) work per layer; with these caches each step only computes the new position:

- :class:`SelfAttentionCache`: causal self-attention's past. Softmax attention keeps the projected
  keys and values of every position so far, in buffers of shape (B, H, capacity, d_head) that double
  when full (amortised O(1) copying per step, never a concatenation per step), or, with a sliding
  window of w, of the last w + 1 positions only (position t in slot t mod (w + 1): memory constant in
  the generated length); linear and Performer attention keep only their running sums (a
  :class:`attnkit.ops.LinearAttentionState`), O(1) per step.
- :class:`CrossAttentionCache`: cross-attention's keys and values, projected from the encoder's output
  once (linear attention: their sums).
- :class:`DecoderCache`: one entry per decoder layer: a (self-attention, cross-attention) pair for an
  encoder-decoder's :class:`attnkit.nn.Decoder`, a self-attention cache alone for a decoder-only
  :class:`attnkit.nn.CausalDecoder`.

Caches are updated in place by the layers' ``step`` methods. ``reorder(indices)`` returns a new cache
whose batch row ``i`` is row ``indices[i]`` of this one (beam search: keep, repeat or drop rows); the
old cache stays valid. ``join(caches)`` stacks the rows of caches of different lengths into one whose rows
are at their own positions (``lengths``): prompts of different lengths, each read on its own, then decoded
together by a decoding plan (:class:`attnkit.ops.DecodingPlan`), the one step that takes a position per row.
"""

import numpy as np

from attnkit.ops import LinearAttentionState

__all__ = ["CrossAttentionCache", "DecoderCache", "SelfAttentionCache"]


def _check_indices(indices, batch_size):
    indices = np.asarray(indices)
    if indices.ndim != 1 or indices.dtype.kind not in "iu":
        raise ValueError(f"indices must be a 1-D integer array, got {indices.dtype} of shape {indices.shape}")
    if indices.size and (indices.min() < 0 or indices.max() >= batch_size):
        raise ValueError(f"indices must lie in [0, {batch_size}) (the cache's batch size), got values from "
                         f"{indices.min()} to {indices.max()}")
    return indices.astype(np.intp, copy=False)


def _select_state(state, indices):
    return LinearAttentionState(state.feature_map, eps=state.eps, s=state.s[indices], z=state.z[indices])


class SelfAttentionCache:
    """Keys and values (softmax) or running sums (linear attention) of the positions decoded so far.

    Made by :meth:`attnkit.nn.MultiHeadAttention.start_self`; read and extended by its ``step``.

    Parameters
    ----------
    batch_size : int
        Rows of the batch being decoded.
    capacity : int
        Positions the key/value buffers hold before they first grow (softmax attention).
    state : LinearAttentionState, optional
        The running sums, for linear and Performer attention (then no buffers are kept).
    window : int, optional
        Keep only the last ``window + 1`` positions (a rolling buffer; softmax attention).

    Attributes
    ----------
    lengths : ndarray of int64, shape (batch_size,)
        Positions decoded so far in each row: all alike, but in a :meth:`join` of caches of different lengths.
    """

    def __init__(self, batch_size, capacity, state=None, *, window=None):
        self.batch_size, self.capacity, self.state, self.window = batch_size, max(int(capacity), 1), state, window
        if window is not None:
            self.capacity = min(self.capacity, window + 1)
        self.lengths = np.zeros(batch_size, dtype=np.int64)
        self._keys: np.ndarray | None = None
        self._values: np.ndarray | None = None

    @property
    def length(self):
        """Positions decoded so far, the same in every row (a ValueError where rows differ: see :meth:`join`)."""
        first = int(self.lengths[0]) if self.batch_size else 0
        if self.batch_size > 1 and not (self.lengths == first).all():
            raise ValueError(f"the rows of this cache are at different positions ({self.lengths.tolist()}): only a "
                             "decoding plan (attnkit.ops.DecodingPlan) steps them; this step needs one length")
        return first

    @classmethod
    def join(cls, caches, order=None):
        """One cache holding the rows of ``caches`` in turn, each row at its own position (``lengths``): softmax
        attention caches without a window, of one layer's shape. Their buffers are copied; they stay valid. An
        empty cache (no positions yet) adds rows at position 0, beside at least one cache that holds positions.
        ``order``, a permutation of those rows: the new cache's row i is their row ``order[i]`` (one copy where
        a join and a :meth:`reorder` would make two)."""
        caches, buffers = list(caches), []
        if not caches:
            raise ValueError("join needs at least one cache")
        for cache in caches:
            if not isinstance(cache, SelfAttentionCache):
                raise TypeError(f"join takes SelfAttentionCache objects, got {type(cache).__name__}")
            if cache.state is not None or cache.window is not None:
                raise ValueError("join takes softmax attention caches without a window (linear attention's sums and "
                                 "a window's rolling slots have no per-row position)")
            buffers.append(None if cache._keys is None or cache._values is None else (cache._keys, cache._values))
        held = [b for b in buffers if b is not None]
        if not held:
            raise ValueError("join needs a cache that holds positions (an empty cache has no buffers yet: its shape)")
        k0, v0 = held[0]
        if any(k.shape[1] != k0.shape[1] or k.shape[3:] != k0.shape[3:] or v.shape[3:] != v0.shape[3:]
               or k.dtype != k0.dtype for k, v in held):
            raise ValueError("join takes caches of one layer's shape (heads, head width, dtype)")
        lengths = np.concatenate([c.lengths for c in caches])
        where = np.arange(lengths.size)  # the new row of each joined row
        if order is not None:
            order = _check_indices(order, lengths.size)
            if order.size != lengths.size or np.unique(order).size != order.size:
                raise ValueError(f"order must be a permutation of the {lengths.size} joined rows, got {order.tolist()}")
            where[order] = np.arange(order.size)
        size = max([k.shape[2] for k, _ in held] + [c.capacity for c, b in zip(caches, buffers) if b is None])
        new = cls(int(lengths.size), size)
        new.lengths = np.empty_like(lengths)
        new.lengths[where] = lengths
        keys, values = (np.empty((int(lengths.size), a.shape[1], size) + a.shape[3:], a.dtype) for a in (k0, v0))
        row = 0
        for cache, buffer in zip(caches, buffers):
            if buffer is not None:
                rows, kept = where[row : row + cache.batch_size], int(cache.lengths.max())
                keys[rows, :, :kept] = buffer[0][:, :, :kept]
                values[rows, :, :kept] = buffer[1][:, :, :kept]
            row += cache.batch_size
        new._keys, new._values = keys, values
        return new

    def append(self, k, v):
        """Add the keys and values of T new positions, each (B, H, T, d_head); grow the buffers by doubling (up
        to ``window + 1`` slots with a window, which then take position t in slot t mod (window + 1))."""
        if k.shape[2] != 1 and self.window is not None:
            for t in range(k.shape[2]):  # ring slots wrap: one position at a time
                self.append(k[:, :, t : t + 1], v[:, :, t : t + 1])
            return
        n, length = k.shape[2], self.length
        keys, values = self.reserve(n, k.shape[:2] + k.shape[3:], v.shape[3:], k.dtype)
        slot = length if self.window is None else length % (self.window + 1)
        keys[:, :, slot : slot + n] = k
        values[:, :, slot : slot + n] = v
        self.lengths += n

    def reserve(self, n, key_shape, value_width, dtype):
        """The key and value buffers, (B, H, capacity, d_head) each, with room for ``n`` more positions: made
        (``key_shape`` (B, H, d_head), ``value_width`` (d_head,), ``dtype``) or grown by doubling when needed.
        :meth:`append` writes through it; a decoding plan (:class:`attnkit.ops.DecodingPlan`) writes the
        buffers itself, then counts the position with :meth:`advance`."""
        keys, values = self._keys, self._values
        limit = None if self.window is None else self.window + 1
        longest = int(self.lengths.max()) if self.batch_size else 0
        if keys is None or values is None:
            shape = tuple(key_shape[:2]) + (max(self.capacity, n),)
            keys, values = np.empty(shape + tuple(key_shape[2:]), dtype), np.empty(shape + tuple(value_width), dtype)
        elif longest + n > keys.shape[2] and keys.shape[2] != limit:
            size = keys.shape[2]
            while size < longest + n:
                size *= 2
            size = size if limit is None else min(size, limit)
            keys, values = (np.concatenate([a, np.empty(a.shape[:2] + (size - a.shape[2],) + a.shape[3:], a.dtype)],
                                           axis=2) for a in (keys, values))
        self._keys, self._values = keys, values
        return keys, values

    def keys_values(self):
        """Views (no copies) of the keys and values kept, each (B, H, kept, d_head): every position so far, in
        order, or with a window the last ``window + 1`` in slot order (:meth:`slot_order`)."""
        if self._keys is None or self._values is None:
            raise ValueError("this cache holds no positions yet: append() first")
        kept = self.kept()
        return self._keys[:, :, :kept], self._values[:, :, :kept]

    def kept(self):
        """Positions held: all of them, or at most ``window + 1``."""
        return self.length if self.window is None else min(self.length, self.window + 1)

    def slot_order(self):
        """For each slot of :meth:`keys_values`, the rank of its position among those kept (0: the oldest)."""
        kept = self.kept()
        positions = np.arange(self.length - kept, self.length)
        order = np.empty(kept, dtype=np.intp)
        order[positions % max(kept, 1) if self.window is not None else np.arange(kept)] = np.arange(kept)
        return order

    def advance(self):
        """Count one more position in every row (linear attention, or a decoding plan, which update the state
        themselves)."""
        self.lengths += 1

    def reorder(self, indices):
        """A new cache whose row i is row ``indices[i]`` of this one (only the filled prefix is copied)."""
        indices = _check_indices(indices, self.batch_size)
        state = self.state
        if state is not None:
            state = (LinearAttentionState(state.feature_map, eps=state.eps) if state.s is None  # nothing yet
                     else _select_state(state, indices))
        new = SelfAttentionCache(indices.size, self.capacity if self._keys is None else self._keys.shape[2], state,
                                 window=self.window)
        new.lengths = self.lengths[indices]
        if self._keys is not None and self._values is not None:
            kept = self.kept() if self.window is not None else int(self.lengths.max(initial=0))
            new._keys, new._values = (np.empty((indices.size,) + a.shape[1:], a.dtype)
                                      for a in (self._keys, self._values))
            new._keys[:, :, :kept] = self._keys[indices, :, :kept]
            new._values[:, :, :kept] = self._values[indices, :, :kept]
        return new


class CrossAttentionCache:
    """Cross-attention's keys and values (softmax) or their sums (linear attention), fixed while decoding.

    Made by :meth:`attnkit.nn.MultiHeadAttention.start_cross`.

    Parameters
    ----------
    keys, values : ndarray of shape (B, H, M, d_head), optional
        The projected context (softmax attention).
    key_lengths : ndarray of int (B,), optional
        Real length of each context row.
    state : LinearAttentionState, optional
        The context's sums (linear and Performer attention).
    """

    def __init__(self, keys=None, values=None, key_lengths=None, state=None):
        self.keys, self.values, self.key_lengths, self.state = keys, values, key_lengths, state
        self.batch_size = (state.z if state is not None else keys).shape[0]
        # Which context row each batch row holds: beam search's reorders keep each beam within its
        # input, so when this map is unchanged no data needs to move.
        self._rows = np.arange(self.batch_size)

    def reorder(self, indices):
        """A new cache whose row i is row ``indices[i]`` of this one (arrays shared when nothing moves)."""
        indices = _check_indices(indices, self.batch_size)
        rows = self._rows[indices]
        if np.array_equal(rows, self._rows):
            new = CrossAttentionCache(self.keys, self.values, self.key_lengths, self.state)
        else:
            new = CrossAttentionCache(
                None if self.keys is None else self.keys[indices],
                None if self.values is None else self.values[indices],
                None if self.key_lengths is None else self.key_lengths[indices],
                None if self.state is None else _select_state(self.state, indices))
        new._rows = rows
        return new


class DecoderCache:
    """Per-layer caches of a :class:`attnkit.nn.Decoder` or a :class:`attnkit.nn.CausalDecoder`.

    Made by their ``start``, advanced by their ``step``.

    Parameters
    ----------
    layers : iterable
        One entry per layer: a ``(SelfAttentionCache, CrossAttentionCache)`` pair (encoder-decoder) or a
        :class:`SelfAttentionCache` alone (decoder-only), at least one.
    output_weight, plan, plan_attentions : optional
        The attributes of those names.

    Attributes
    ----------
    layers : list of (SelfAttentionCache, CrossAttentionCache) or of SelfAttentionCache
    batch_size : int
    length : int
        Positions decoded so far: the position (``offset``) of the next one, for positional encodings.
    output_weight : ndarray or None
        A tied language model's output weights, its token table transposed into rows (d_model, vocab_size):
        :meth:`attnkit.nn.CausalLM.start` takes this snapshot, since a one-row product reads a row-major matrix
        4x faster than the table's transpose; None otherwise. Kept by :meth:`reorder`.
    plan : DecodingPlan or None
        The decoder's one-position steps in C++ (:meth:`attnkit.nn.CausalDecoder.start` builds it when every
        block is one it runs); the layers' buffers stay the state, so :meth:`reorder` keeps it.
    plan_attentions : tuple of MultiHeadAttention
        The plan's attention layers: while any of them is switched to hard attention
        (:func:`attnkit.nn.attention.set_hard_attention`, which the plan does not run), steps go op by op.
    """

    def __init__(self, layers, output_weight=None, plan=None, plan_attentions=()):
        self.output_weight, self.plan, self.plan_attentions = output_weight, plan, tuple(plan_attentions)
        self.layers = list(layers)
        if not self.layers:
            raise ValueError("layers must hold one cache per decoder layer, got none")
        for entry in self.layers:
            if not (isinstance(entry, SelfAttentionCache) or (
                    isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], SelfAttentionCache)
                    and isinstance(entry[1], CrossAttentionCache))):
                raise TypeError(f"each entry of layers must be a SelfAttentionCache or a (SelfAttentionCache, "
                                f"CrossAttentionCache) pair, got {type(entry).__name__}")
        self.batch_size = self._self_attention(0).batch_size

    def _self_attention(self, i):
        entry = self.layers[i]
        return entry if isinstance(entry, SelfAttentionCache) else entry[0]

    @property
    def length(self):
        """Positions decoded so far, the same in every row (the layers' :attr:`SelfAttentionCache.length`)."""
        return self._self_attention(0).length

    @property
    def lengths(self):
        """Positions decoded so far in each row, (batch_size,) int64 (rows differ after :meth:`join`)."""
        return self._self_attention(0).lengths

    @classmethod
    def join(cls, caches, order=None):
        """One cache holding the rows of ``caches`` (decoder-only caches of one network) in turn, each row at its own
        position: :meth:`SelfAttentionCache.join`, layer by layer (``order``: its permutation of the rows). The
        first cache's ``output_weight`` and ``plan`` are kept (a network's caches share them); only a plan steps
        rows at different positions."""
        caches = list(caches)
        if not caches:
            raise ValueError("join needs at least one cache")
        if any(not isinstance(c, DecoderCache) or len(c.layers) != len(caches[0].layers) for c in caches):
            raise ValueError("join takes DecoderCache objects of one network (as many layers each)")
        if any(not isinstance(entry, SelfAttentionCache) for c in caches for entry in c.layers):
            raise ValueError("join takes decoder-only caches (an encoder-decoder's rows each read their own context)")
        first = caches[0]
        return cls((SelfAttentionCache.join(layer, order) for layer in zip(*(c.layers for c in caches))),
                   first.output_weight, first.plan, first.plan_attentions)

    def reorder(self, indices):
        """A new cache whose row i is row ``indices[i]`` of this one."""
        return DecoderCache((entry.reorder(indices) if isinstance(entry, SelfAttentionCache)
                             else tuple(cache.reorder(indices) for cache in entry) for entry in self.layers),
                            self.output_weight, self.plan, self.plan_attentions)
