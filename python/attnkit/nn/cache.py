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
old cache stays valid.
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
    length : int
        Positions decoded so far.
    """

    def __init__(self, batch_size, capacity, state=None, *, window=None):
        self.batch_size, self.capacity, self.state, self.window = batch_size, max(int(capacity), 1), state, window
        if window is not None:
            self.capacity = min(self.capacity, window + 1)
        self.length = 0
        self._keys: np.ndarray | None = None
        self._values: np.ndarray | None = None

    def append(self, k, v):
        """Add the keys and values of T new positions, each (B, H, T, d_head); grow the buffers by doubling (up
        to ``window + 1`` slots with a window, which then take position t in slot t mod (window + 1))."""
        if k.shape[2] != 1 and self.window is not None:
            for t in range(k.shape[2]):  # ring slots wrap: one position at a time
                self.append(k[:, :, t : t + 1], v[:, :, t : t + 1])
            return
        n = k.shape[2]
        keys, values = self.reserve(n, k.shape[:2] + k.shape[3:], v.shape[3:], k.dtype)
        slot = self.length if self.window is None else self.length % (self.window + 1)
        keys[:, :, slot : slot + n] = k
        values[:, :, slot : slot + n] = v
        self.length += n

    def reserve(self, n, key_shape, value_width, dtype):
        """The key and value buffers, (B, H, capacity, d_head) each, with room for ``n`` more positions: made
        (``key_shape`` (B, H, d_head), ``value_width`` (d_head,), ``dtype``) or grown by doubling when needed.
        :meth:`append` writes through it; a decoding plan (:class:`attnkit.ops.DecodingPlan`) writes the
        buffers itself, then counts the position with :meth:`advance`."""
        keys, values = self._keys, self._values
        limit = None if self.window is None else self.window + 1
        if keys is None or values is None:
            shape = tuple(key_shape[:2]) + (max(self.capacity, n),)
            keys, values = np.empty(shape + tuple(key_shape[2:]), dtype), np.empty(shape + tuple(value_width), dtype)
        elif self.length + n > keys.shape[2] and keys.shape[2] != limit:
            size = keys.shape[2]
            while size < self.length + n:
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
        """Count one more position (linear attention, or a decoding plan, which update the state themselves)."""
        self.length += 1

    def reorder(self, indices):
        """A new cache whose row i is row ``indices[i]`` of this one (only the filled prefix is copied)."""
        indices = _check_indices(indices, self.batch_size)
        state = self.state
        if state is not None:
            state = (LinearAttentionState(state.feature_map, eps=state.eps) if state.s is None  # nothing yet
                     else _select_state(state, indices))
        new = SelfAttentionCache(indices.size, self.capacity if self._keys is None else self._keys.shape[2], state,
                                 window=self.window)
        new.length = self.length
        if self._keys is not None and self._values is not None:
            kept = self.kept()
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
        return self._self_attention(0).length

    def reorder(self, indices):
        """A new cache whose row i is row ``indices[i]`` of this one."""
        return DecoderCache((entry.reorder(indices) if isinstance(entry, SelfAttentionCache)
                             else tuple(cache.reorder(indices) for cache in entry) for entry in self.layers),
                            self.output_weight, self.plan, self.plan_attentions)
