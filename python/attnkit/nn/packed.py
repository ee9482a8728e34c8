"""Inference of an :class:`~attnkit.nn.Encoder` over the real tokens of a padded batch.

A padded batch (B, N, d) holds ``sum(lengths)`` real tokens. Every projection, feed-forward product,
activation, norm and residual add is per token, so :class:`PackedEncoder` runs them over the real tokens
only, packed into (T, d) rows: no padding FLOPs however unequal the lengths. Only the attention needs the
sequences apart: :func:`attnkit.ops.packed_attention` reads each head of the packed Q/K/V in place and
writes the merged heads back into packed rows.

The Q/K/V projections are one product with the three weight matrices side by side, the feed-forward
runs FF_ROWS tokens at a time, and the layers' intermediate arrays are reused from one layer and one
batch to the next. Each output element is the same sequence of roundings as in :meth:`Encoder.forward`
(attnkit's GEMM rounds each element alike whatever the matrix sizes), so the real tokens' vectors equal
the training forward's bit for bit.
"""

import threading

import numpy as np

from attnkit import ops
from attnkit.nn.attention import MultiHeadAttention

__all__ = ["PackedEncoder"]

DTYPES = (None, "int8")
# Tokens per feed-forward step: the hidden activations, d_ff / d_model times the width of the rest, stay a
# buffer of FF_ROWS rows per thread instead of the batch's, which matters when batches run on threads at
# once. A product rounds each element alike whatever its rows, and int8 quantises per token, so the
# result does not change. 256 rows cost 3-7% (MiniLM, 1,000-token batches) and left the classifier's
# small products under the two-thread threshold; 1024 is as fast as one step.
FF_ROWS = 1024


class PackedEncoder:
    """Inference-only runner of an encoder stack over packed real tokens.

    Parameters
    ----------
    encoder : Encoder
        A stack of :class:`~attnkit.nn.EncoderLayer` with softmax attention and no relative positions
        (:meth:`supports`); the others run through :meth:`Encoder.infer`'s padded path.
    dtype : {None, "int8"}, default=None
        None: the encoder's own float dtype throughout. "int8" (a float32 encoder): the four linear maps
        of every layer (Q/K/V, attention output, both feed-forward ones) run as
        :func:`attnkit.ops.int8_linear` over weights quantised per output channel here; attention, norms,
        activations and residuals stay float32.

    Notes
    -----
    The runner keeps the weights it builds here (Q/K/V side by side; int8: every linear map's) and reads
    the others from the layers when called: build a new one after the weights change (training,
    ``load_state_dict``). One runner may serve several threads at once.
    """

    def __init__(self, encoder, *, dtype=None):
        if not self.supports(encoder):
            raise ValueError("PackedEncoder needs an Encoder whose layers use softmax attention without relative "
                             "positions; run Encoder.infer instead")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        if dtype == "int8" and encoder.dtype != np.float32:
            raise ValueError(f"dtype='int8' needs a float32 encoder (its activations stay float32), got "
                             f"{encoder.dtype}; convert it with encoder.astype(np.float32)")
        self.dtype = encoder.dtype
        self.layers = [_LayerPlan(layer, dtype) for layer in encoder.layers]
        self.final_norm = encoder.norm
        self._local = threading.local()  # buffers per thread: one runner may serve concurrent calls

    @staticmethod
    def supports(encoder):
        """Whether every layer of ``encoder`` can run packed (softmax attention, no position bias)."""
        for layer in encoder.layers:
            attention = layer.self_attention.sublayer
            if attention.attention != "softmax" or attention.position_bias is not None:
                return False
        return True

    def __call__(self, x, *, key_lengths=None):
        """The encoder's inference output for embedded tokens ``x`` (B, N, d_model).

        Parameters
        ----------
        x : ndarray of shape (B, N, d_model)
            Embedded tokens; rows past ``key_lengths`` are padding and never read.
        key_lengths : array of int (B,), optional
            Real length of each sequence (default: N).

        Returns
        -------
        ndarray of shape (B, N, d_model)
            The vectors of the real tokens, zeros at the padding positions.
        """
        x = np.asarray(x)
        if x.ndim != 3:
            raise ValueError(f"x must have shape (B, N, d_model), got {x.shape}")
        batch, n, width = x.shape
        lengths = np.full(batch, n, dtype=np.int64) if key_lengths is None else \
            np.minimum(np.asarray(key_lengths, dtype=np.int64), n)
        # Row of the padded (B * N) layout of each real token, sequence by sequence.
        rows = (np.arange(n) < lengths[:, None]).reshape(-1).nonzero()[0]
        h = np.ascontiguousarray(x.reshape(batch * n, width)[rows], dtype=self.dtype)
        for layer in self.layers:
            h = layer(h, lengths, self._buffer)
        if self.final_norm is not None:
            h = self.final_norm.forward(h)[0]
        out = np.zeros((batch * n, width), dtype=h.dtype)
        out[rows] = h
        return out.reshape(batch, n, width)

    def _buffer(self, name, shape):
        """A reused array of ``shape`` (its leading rows may vary per call): grown, never shrunk."""
        buffers = self._local.__dict__
        buffer = buffers.get(name)
        size = int(np.prod(shape))
        if buffer is None or buffer.size < size:
            buffer = buffers[name] = np.empty(size, dtype=self.dtype)
        return buffer[:size].reshape(shape)


class _Linear:
    """``x @ weight + bias`` of packed rows into a reused buffer: float (the layer's own arrays) or int8
    (:func:`attnkit.ops.int8_linear` over the weight quantised here, once)."""

    def __init__(self, weight, bias, dtype):
        self.weight = ops.quantize_linear_weight(weight) if dtype == "int8" else weight
        self.bias, self.width = bias, weight.shape[1]

    def __call__(self, x, out):
        if isinstance(self.weight, ops.QuantizedLinearWeight):
            return ops.int8_linear(x, self.weight, bias=self.bias, out=out)
        return ops.matmul(x, self.weight, bias=self.bias, out=out)


class _LayerPlan:
    """One EncoderLayer over packed rows: its norms and its four linear maps, Q/K/V as one."""

    def __init__(self, layer, dtype):
        attention_block, ff_block = layer.self_attention, layer.feed_forward
        self.norm_first = attention_block.norm_first
        self.attention_norm, self.ff_norm = attention_block.norm, ff_block.norm
        attention: MultiHeadAttention = attention_block.sublayer
        self.heads, self.d_head = attention.n_heads, attention.d_head
        p = attention.params
        self.qkv = _Linear(np.concatenate([p["wq"], p["wk"], p["wv"]], axis=1),
                           np.concatenate([p["bq"], p["bk"], p["bv"]]), dtype)
        self.out = _Linear(p["wo"], p["bo"], dtype)
        ff = ff_block.sublayer
        self.activate = ff.activate
        self.ff1, self.ff2 = (_Linear(linear.params["weight"], linear.params["bias"], dtype)
                              for linear in (ff.linear1, ff.linear2))

    def __call__(self, x, lengths, buffer):
        x = self._block(x, self.attention_norm, lambda h: self._attend(h, lengths, buffer))
        return self._block(x, self.ff_norm, lambda h: self._feed_forward(h, buffer))

    def _block(self, x, norm, sublayer):
        """Pre-LN ``x + F(Norm(x))`` or post-LN ``Norm(x + F(x))``, as :class:`Residual` in inference; the
        residual is added in place into F's buffer (``y + x`` rounds as ``x + y``)."""
        if self.norm_first:
            y = sublayer(norm.forward(x)[0])
            return np.add(y, x, out=y)
        y = sublayer(x)
        return norm.forward(np.add(y, x, out=y))[0]

    def _attend(self, h, lengths, buffer):
        tokens, inner = h.shape[0], self.heads * self.d_head
        qkv = self.qkv(h, buffer("qkv", (tokens, self.qkv.width)))
        # The kernel reads each head of q, k, v in place in the fused rows and writes the merged heads
        # straight into packed rows: no padded copy, no gather.
        heads = ops.packed_attention(qkv[:, :inner], qkv[:, inner:2 * inner], qkv[:, 2 * inner:], lengths,
                                     n_heads=self.heads, out=buffer("heads", (tokens, inner)))
        return self.out(heads, buffer("attention_out", (tokens, self.out.width)))

    def _feed_forward(self, h, buffer):
        rows = h.shape[0]
        out = buffer("ff_out", (rows, self.ff2.width))
        hidden = buffer("ff_hidden", (min(rows, FF_ROWS), self.ff1.width))
        for r0 in range(0, rows, FF_ROWS):
            part = hidden[:min(rows - r0, FF_ROWS)]
            self.activate(self.ff1(h[r0:r0 + len(part)], part), out=part)
            self.ff2(part, out[r0:r0 + len(part)])
        return out
