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
    """``x @ W (+ bias)``, W = ``dequantize_blocks(w.kind, w.blocks, w.shape[0])``.

    In float64. With ``w.activations == "int8"``, of ``x`` as the kernel reads it (:func:`quantize_activations`,
    the same codes bit for bit): per block the exact integer sum of weight codes times ``x`` codes, times
    ``d * e``, and for q4_1 ``m * e`` times the codes' sum; the kernel adds these in float32.
    """
    if getattr(w, "activations", "float32") == "float32":
        weight = dequantize_blocks(w.kind, w.blocks, w.shape[0]).astype(np.float64)
        y = np.asarray(x, dtype=np.float64) @ weight
        return y if bias is None else y + np.asarray(bias, dtype=np.float64)
    x = np.asarray(x, dtype=np.float32)
    n_in, n_out = w.shape
    lead = x.shape[:-1]
    codes, scales = quantize_activations(x.reshape(-1, n_in))                  # (m, blocks, 32), (m, blocks)
    raw = np.asarray(w.blocks, dtype=np.uint8).reshape(n_out, n_in // 32, _BLOCK_BYTES[w.kind])
    d = raw[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)     # (n_out, blocks)
    if w.kind == "q8_0":
        q = raw[..., 2:].copy().view(np.int8).astype(np.int64)
        m = np.zeros_like(d)
    else:
        m = raw[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
        q = np.concatenate([raw[..., 4:] & 0x0F, raw[..., 4:] >> 4], axis=-1).astype(np.int64)
    sums = np.einsum("ibt,jbt->ijb", codes.astype(np.int64), q)               # exact integer sums (m, n_out, blocks)
    e = scales.astype(np.float64)[:, None, :]                                # (m, 1, blocks)
    terms = d[None] * e * sums + m[None] * e * codes.astype(np.int64).sum(axis=-1)[:, None, :]
    y = terms.sum(axis=-1)
    return (y if bias is None else y + np.asarray(bias, dtype=np.float64)).reshape(*lead, n_out)


def quantize_activations(x):
    """Rows of ``x`` (m, n_in) as llama.cpp's products read them: per block of 32 values, codes
    ``rint(x * (127 / amax))`` (float32 arithmetic, ties to even) in [-127, 127] and scale ``amax / 127``
    (0 for a block of zeros or of values below 127 / FLT_MAX, NaN for a block holding inf or NaN; codes 0 in
    both)."""
    x = np.asarray(x, dtype=np.float32)
    blocks = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(blocks).max(axis=-1, initial=np.float32(0))
    finite = np.isfinite(blocks).all(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = np.float32(127) / amax
        ok = finite & np.isfinite(inv)  # a block of zeros, or below 127 / FLT_MAX: codes 0, scale 0
        codes = np.where(ok[..., None], np.clip(np.rint(blocks * np.where(ok, inv, 0)[..., None]), -127, 127), 0)
        scales = np.where(finite, np.where(ok, amax / np.float32(127), 0), np.nan).astype(np.float32)
    return codes.astype(np.int8), scales
