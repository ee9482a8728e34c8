"""One decoding step of a stack of pre-LN transformer blocks, run in C++ from end to end.

A one-token step of a decoder is ~15 small op calls per layer; at batch 1 their Python overhead (validation,
reshapes, the rotary table) costs as much as the weight products. :class:`DecodingPlan` holds a stack's
weights once (float32 arrays or :class:`BlockQuantizedMatrix` blocks, used in place) and runs every layer of a
step in one call without the GIL: norm, q/k/v products, rotary positions, the key/value cache write, grouped
attention of the one query, output product, residual, norm, feed-forward, residual, and the final norm.
"""

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from attnkit import _core
from attnkit.ops.block_quantized import BlockQuantizedMatrix

__all__ = ["DecodingPlan", "DecodingPlanLayer"]

PLAN_ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "swiglu")
Weight = np.ndarray | BlockQuantizedMatrix


class DecodingPlanLayer(NamedTuple):
    """One pre-LN block's parameters: ``x = x + Attn(Norm1(x)) Wo + bo``, ``x = x + Act(Norm2(x) W1 + b1) W2 + b2``.

    Norms are ``(gamma, beta)`` pairs (``beta`` None for RMSNorm); weights (n_in, n_out) are float32 arrays or
    :class:`BlockQuantizedMatrix`; biases (n_out,) or None. With SwiGLU, ``w1`` is ``[W_gate | W_up]``.
    """

    norm1: tuple[np.ndarray, np.ndarray | None]
    norm2: tuple[np.ndarray, np.ndarray | None]
    wq: Weight
    bq: np.ndarray | None
    wk: Weight
    bk: np.ndarray | None
    wv: Weight
    bv: np.ndarray | None
    wo: Weight
    bo: np.ndarray | None
    w1: Weight
    b1: np.ndarray | None
    w2: Weight
    b2: np.ndarray | None


def _weight(w, name):
    if isinstance(w, BlockQuantizedMatrix):
        return (w.blocks, w.kind, w.shape[0], w.activations == "int8", w.packed)
    return _float32(w, name)


def _float32(a, name):
    if a is None:
        return None
    a = np.asarray(a)
    if a.dtype != np.float32:
        raise ValueError(f"{name} must be float32 (the plan computes in float32), got {a.dtype}")
    return np.ascontiguousarray(a)


class DecodingPlan:
    """A stack of pre-LN blocks and its final norm, for one-position decoding steps in C++.

    Parameters
    ----------
    layers : sequence of DecodingPlanLayer
        The blocks, first to last; every width follows from the weights' shapes.
    final_norm : tuple
        ``(gamma, beta)`` of the norm that ends the stack (``beta`` None for RMSNorm).
    n_heads : int
        Query heads; the head width is ``wq.shape[1] // n_heads``.
    n_kv_heads : int, optional
        Key/value heads of grouped-query attention (default ``n_heads``).
    norm : {"layer", "rms"}
    eps : float
        Every norm's eps.
    activation : {"gelu_tanh", "gelu", "relu", "swiglu"}
    rotary_base : float, optional
        Rotary positions on interleaved pairs (:func:`attnkit.ops.rotary_positions`) with this base, or none.

    Notes
    -----
    The plan keeps the arrays it was given (no copy when they are float32 and C-contiguous): it reads a
    parameter updated in place, not one replaced by a new array. Steps equal the op-by-op path to float32
    rounding: the same kernels, in the same order.
    """

    def __init__(self, layers: Sequence[DecodingPlanLayer], final_norm, *, n_heads: int, n_kv_heads: int | None = None,
                 norm: str, eps: float, activation: str, rotary_base: float | None = None):
        layers = list(layers)
        if not layers:
            raise ValueError("layers must hold at least one DecodingPlanLayer, got none")
        if activation not in PLAN_ACTIVATIONS:
            raise ValueError(f"activation must be one of {PLAN_ACTIVATIONS}, got {activation!r}")
        first = layers[0]
        self.d_model, inner = first.wq.shape
        self.n_heads = int(n_heads)
        self.n_kv_heads = self.n_heads if n_kv_heads is None else int(n_kv_heads)
        if inner % self.n_heads:
            raise ValueError(f"wq's width ({inner}) must be a multiple of n_heads ({self.n_heads})")
        self.d_head = inner // self.n_heads
        self.d_ff = first.w2.shape[0]
        entries = []
        for i, layer in enumerate(layers):
            entry = []
            for field, (gamma, beta) in (("norm1", layer.norm1), ("norm2", layer.norm2)):
                entry += [_float32(gamma, f"layers[{i}].{field} gamma"), _float32(beta, f"layers[{i}].{field} beta")]
            for field in DecodingPlanLayer._fields[2:]:
                value, name = getattr(layer, field), f"layers[{i}].{field}"
                entry.append(_weight(value, name) if field.startswith("w") else _float32(value, name))
            entries.append(tuple(entry))
        self._plan = _core.DecodingPlan(self.d_model, self.n_heads, self.n_kv_heads, self.d_head, self.d_ff, norm,
                                        float(eps), activation, 0.0 if rotary_base is None else float(rotary_base),
                                        entries, _float32(final_norm[0], "final_norm gamma"),
                                        _float32(final_norm[1], "final_norm beta"))
        self.n_layers = len(entries)
        # Whether every weight is block-quantised and read with int8 inputs from packed blocks: each product then
        # gives a row the same bits at any row count (block_quantized_matmul), so a step may read many rows.
        self.packed = all(isinstance(w, BlockQuantizedMatrix) and w.packed is not None
                          for layer in layers for w in (layer.wq, layer.wk, layer.wv, layer.wo, layer.w1, layer.w2))

    def step(self, x, position, keys, values, sequences=None):
        """The stack's output (B, d_model) for ``x`` (B, d_model) float32 at ``position``.

        ``position``: an int, every row's, or an integer array (B,) of each row's own (a batch of prompts of
        different lengths decodes together; a row's output and cache entries are those it gets alone).
        ``keys``, ``values``: one buffer per layer, each (S, n_kv_heads, capacity, d_head) float32, C-contiguous,
        holding sequence s's positions before those this step writes; row b's key and value are written at
        ``position[b]`` (< capacity) of sequence ``sequences[b]``.
        ``sequences``: an integer array (B,) of cache rows in ``[0, S)``, or None (row b's is b, S = B). Rows of
        one sequence at consecutive positions read a prompt: every row's key and value are written before any
        row attends, and each row gets the operations it gets in a step of its own (the same bits). No two rows
        may write one (sequence, position).
        """
        x = np.asarray(x)
        if x.dtype != np.float32:
            raise ValueError(f"x must be float32 (B, d_model={self.d_model}), got {x.dtype} {x.shape}")
        rows = x.shape[0] if x.ndim == 2 else 1
        positions = self._per_row(position, rows, "position", "position")
        if sequences is not None:
            sequences = self._per_row(sequences, rows, "sequences", "cache row")
        return self._plan.step(np.ascontiguousarray(x), positions, keys, values, sequences)

    @staticmethod
    def _per_row(value, rows, name, what):
        """An int or integer array (rows,) as a C-ordered int64 array (rows,)."""
        array = np.asarray(value)
        if array.dtype.kind not in "iu" or array.ndim > 1:
            raise ValueError(f"{name} must be an int or a 1-D integer array, got {array.dtype} of shape {array.shape}")
        if array.ndim == 1 and array.shape[0] != rows:
            raise ValueError(f"{name} must hold one {what} per row of x ({rows}), got {array.shape[0]}")
        return np.ascontiguousarray(np.broadcast_to(array, (rows,)), dtype=np.int64)
