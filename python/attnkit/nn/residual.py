"""The residual block of every transformer layer, and the choice of its normalisation.

A transformer layer is a chain of residual blocks around its sublayers (attention, feed-forward), in
one of two arrangements:

- pre-LN, ``norm_first=True``: ``x + Dropout(F(Norm(x)))``, and the stack ends with a final Norm.
  It trains stably without the careful warm-up post-LN needs (Xiong et al., 2020), which matters for
  short CPU training runs; GPT-2 and most recent models use it.
- post-LN, ``norm_first=False``: ``Norm(x + Dropout(F(x)))``, no final Norm: the original Transformer
  and BERT, so pretrained BERT-family weights load into it.

``Norm`` is a :class:`LayerNorm` (``norm="layer"``, eps 1e-5 unless ``norm_eps`` says otherwise, as a
checkpoint's config may) or an :class:`RMSNorm` (``norm="rms"``, eps 1e-6).
"""

from typing import Any, NamedTuple

import numpy as np

from attnkit._validation import check_bool, check_real
from attnkit.nn.attention import MultiHeadAttention
from attnkit.nn.layers import Dropout, LayerNorm, RMSNorm
from attnkit.nn.module import Module

__all__ = ["NORM_KINDS", "Residual", "ResidualCache", "make_norm"]

NORM_KINDS = ("layer", "rms")


def make_norm(norm, dim, eps=None):
    """A :class:`LayerNorm` (``norm="layer"``) or :class:`RMSNorm` (``"rms"``) of width ``dim``.

    ``eps=None`` keeps the layer's own default (1e-5 and 1e-6); errors name the transformer options
    ``norm`` and ``norm_eps``.
    """
    if not isinstance(norm, str) or norm not in NORM_KINDS:
        raise ValueError(f"norm must be one of {NORM_KINDS}, got {norm!r}")
    kind = LayerNorm if norm == "layer" else RMSNorm
    if eps is None:
        return kind(dim)
    eps = check_real(eps, "norm_eps")
    if eps < 0:
        raise ValueError(f"norm_eps must be >= 0, got {eps}")
    return kind(dim, eps=eps)


class ResidualCache(NamedTuple):
    """What :meth:`Residual.backward` needs: the caches of the norm, the sublayer and the dropout."""

    norm: Any
    sublayer: Any
    dropout: Any


class Residual(Module):
    """A sublayer F with its residual connection, dropout and normalisation, pre-LN or post-LN.

    Parameters
    ----------
    d_model : int
        Width of x.
    sublayer : Module
        F: a :class:`MultiHeadAttention` (which takes ``context`` and ``key_lengths``) or a feed-forward block.
    dropout : float
        Drop probability of F's output.
    rng : numpy.random.Generator
        Seeds the dropout generator.
    norm_first : bool, default=True
        Pre-LN ``x + Dropout(F(Norm(x)))`` or post-LN ``Norm(x + Dropout(F(x)))``.
    norm : {"layer", "rms"}, default="layer"
    norm_eps : float, optional
        The norm's eps (default: 1e-5 for LayerNorm, 1e-6 for RMSNorm).

    Attributes
    ----------
    norm, sublayer, dropout : Module
        The children (the same names either way, so checkpoints map onto both).
    """

    def __init__(self, d_model, sublayer, dropout, rng, *, norm_first=True, norm="layer", norm_eps=None):
        super().__init__()
        self.norm_first = check_bool(norm_first, "norm_first")
        self.norm = make_norm(norm, d_model, norm_eps)
        self.sublayer = sublayer
        self.dropout = Dropout(dropout, rng=rng)

    def forward(self, x, training=False, *, context=None, key_lengths=None):
        """``x + Dropout(F(Norm(x)))`` (pre-LN) or ``Norm(x + Dropout(F(x)))`` (post-LN); ``context`` and
        ``key_lengths`` go to an attention F."""
        if self.norm_first:
            h, c_norm = self.norm.forward(x, training)
            y, c_sub = self._sublayer_forward(h, training, context=context, key_lengths=key_lengths)
            y, c_drop = self.dropout.forward(y, training)
            return _add(x, y, owned=c_drop is not None), ResidualCache(c_norm, c_sub, c_drop)
        y, c_sub = self._sublayer_forward(x, training, context=context, key_lengths=key_lengths)
        y, c_drop = self.dropout.forward(y, training)
        out, c_norm = self.norm.forward(_add(x, y, owned=c_drop is not None), training)
        return out, ResidualCache(c_norm, c_sub, c_drop)

    def backward(self, grad, cache):
        """Returns dx, or (dx, dcontext) when the sublayer is a cross-attention."""
        if self.norm_first:
            dh = self.sublayer.backward(self.dropout.backward(grad, cache.dropout), cache.sublayer)
            dh, dcontext = dh if isinstance(dh, tuple) else (dh, None)
            dx = _add(grad, self.norm.backward(dh, cache.norm), owned=True)
        else:
            dz = self.norm.backward(grad, cache.norm)
            dx = self.sublayer.backward(self.dropout.backward(dz, cache.dropout), cache.sublayer)
            dx, dcontext = dx if isinstance(dx, tuple) else (dx, None)
            dx = _add(dx, dz, owned=True)
        return dx if dcontext is None else (dx, dcontext)

    def _sublayer_forward(self, h, training, *, context, key_lengths):
        if isinstance(self.sublayer, MultiHeadAttention):
            return self.sublayer.forward(h, training, context=context, key_lengths=key_lengths)
        if context is not None or key_lengths is not None:
            raise ValueError(f"context and key_lengths are for an attention sublayer, not a "
                             f"{type(self.sublayer).__name__}")
        return self.sublayer.forward(h, training)

    # -- inference ----------------------------------------------------------------------------------
    def step(self, x, cache=None):
        """Inference on one position: ``sublayer.step(h, cache)`` for attention, ``forward`` otherwise."""
        h = self._sublayer_input(x)
        return self._close(x, self.sublayer.forward(h)[0] if cache is None else self.sublayer.step(h, cache)[0])

    def attend(self, x, *, context=None, key_lengths=None):
        """Inference-mode output of the block and its attention sublayer's weights, both from one
        ``return_weights=True`` call (softmax attention only)."""
        out, _, weights = self.sublayer.forward(self._sublayer_input(x), context=context, key_lengths=key_lengths,
                                                return_weights=True)
        return self._close(x, out), weights

    def _sublayer_input(self, x):
        return self.norm.forward(x)[0] if self.norm_first else x

    def _close(self, x, y):
        """The block's output (inference) from its input x and the sublayer's output y."""
        return x + y if self.norm_first else self.norm.forward(x + y)[0]


def _add(x, y, *, owned):
    """``x + y``, written into ``y`` when ``owned`` (a fresh array nothing else holds: a training dropout's output,
    a norm's or sublayer's gradient) and it has the sum's shape and dtype: no new array each layer. The sum's bits
    are the same either way (addition commutes)."""
    if owned and isinstance(y, np.ndarray) and y.shape == np.broadcast_shapes(x.shape, y.shape) \
            and y.dtype == np.result_type(x, y) and y.flags.writeable:
        return np.add(x, y, out=y)
    return x + y
