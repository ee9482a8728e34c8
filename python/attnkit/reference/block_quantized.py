"""Reference GGML block-quantised matrices: the block formats decoded in NumPy, the product in float64."""

import numpy as np

__all__ = ["block_quantized_matmul", "dequantize_blocks"]

_BLOCK_BYTES = {"q4_1": 20, "q8_0": 34}


def dequantize_blocks(kind, blocks, n_in):
    """The float32 matrix W (n_in, n_out) that ``blocks`` (n_out, n_in / 32 * block_bytes) stand for.

    Row ``j`` of ``blocks`` is column ``j`` of W, blocks of 32 values: q8_0 ``d * q``; q4_1
    ``d * nibble + m`` with the low nibbles of the 16 bytes first, then the high ones (float32, as ggml).
    """
    raw = np.asarray(blocks, dtype=np.uint8)
    n_out = raw.shape[0]
    per_block = raw.reshape(n_out, n_in // 32, _BLOCK_BYTES[kind])
    d = per_block[..., 0:2].copy().view(np.float16).astype(np.float32)
    if kind == "q8_0":
        q = per_block[..., 2:].copy().view(np.int8).astype(np.float32)
        values = d * q
    else:
        m = per_block[..., 2:4].copy().view(np.float16).astype(np.float32)
        qs = per_block[..., 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32)
        values = d * q + m
    return values.reshape(n_out, n_in).T


def block_quantized_matmul(x, w, *, bias=None):
    """``x @ W (+ bias)`` in float64, W = ``dequantize_blocks(w.kind, w.blocks, w.shape[0])``."""
    weight = dequantize_blocks(w.kind, w.blocks, w.shape[0]).astype(np.float64)
    y = np.asarray(x, dtype=np.float64) @ weight
    return y if bias is None else y + np.asarray(bias, dtype=np.float64)
