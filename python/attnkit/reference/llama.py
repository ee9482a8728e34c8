"""Reference Llama-family decoder: the plain forward of a GGUF checkpoint, every tensor dequantised, in float64."""

import numpy as np

from attnkit.reference.block_quantized import dequantize_blocks
from attnkit.reference.positions import rotary_positions

__all__ = ["llama_forward", "llama_weights"]


def llama_weights(tensors):
    """Every tensor of a GGUF file as a float64 array of ggml's stored layout, ``(n_out, n_in)`` for a weight.

    Parameters
    ----------
    tensors : mapping of str to GGUFTensor
        :attr:`attnkit.pretrained.gguf_file.GGUFFile.tensors`.

    Returns
    -------
    dict of str to ndarray
    """
    out = {}
    for name, t in tensors.items():
        if t.kind in ("q4_1", "q8_0"):
            value = dequantize_blocks(t.kind, np.asarray(t.data), t.shape[0]).T  # (n_in, n_out) -> stored rows
        else:
            value = np.asarray(t.data)
        out[name] = value.astype(np.float64)
    return out


def _rms_norm(x, gamma, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gamma


def llama_forward(ids, weights, *, n_layers, n_heads, n_kv_heads, rope_base, rms_eps):
    r"""Next-token logits of a Llama decoder (Touvron et al. 2023) over ``ids``, as llama.cpp computes them.

    For each block: :math:`h = x + W_o\,\mathrm{attn}(\mathrm{rope}(W_q n), \mathrm{rope}(W_k n), W_v n)` with
    :math:`n = \mathrm{RMSNorm}(x)`, causal softmax attention, each key/value head shared by ``n_heads /
    n_kv_heads`` query heads, rotary positions on interleaved pairs (GGUF's layout); then
    :math:`x = h + W_{down}(\mathrm{silu}(W_{gate} m) \odot W_{up} m)` with :math:`m = \mathrm{RMSNorm}(h)`.
    Logits: :math:`\mathrm{RMSNorm}(x) E^T` with the token table E (or ``output.weight``).

    Parameters
    ----------
    ids : array of int, shape (N,)
    weights : dict of str to ndarray
        GGUF names -> float arrays in the stored layout (:func:`llama_weights`).
    n_layers, n_heads, n_kv_heads : int
    rope_base, rms_eps : float

    Returns
    -------
    ndarray of shape (N, vocab_size), float64
    """
    table = weights["token_embd.weight"]  # (vocab, d)
    x = table[np.asarray(ids)]
    n, d = x.shape
    head = d // n_heads
    for i in range(n_layers):
        w = {key[len(f"blk.{i}."):]: value for key, value in weights.items() if key.startswith(f"blk.{i}.")}
        a = _rms_norm(x, w["attn_norm.weight"], rms_eps)
        q = (a @ w["attn_q.weight"].T).reshape(n, n_heads, head).transpose(1, 0, 2)
        k = (a @ w["attn_k.weight"].T).reshape(n, n_kv_heads, head).transpose(1, 0, 2)
        v = (a @ w["attn_v.weight"].T).reshape(n, n_kv_heads, head).transpose(1, 0, 2)
        q, k = rotary_positions(q, base=rope_base), rotary_positions(k, base=rope_base)
        k, v = np.repeat(k, n_heads // n_kv_heads, axis=0), np.repeat(v, n_heads // n_kv_heads, axis=0)
        logits = q @ k.transpose(0, 2, 1) / np.sqrt(head)
        logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        x = x + (p @ v).transpose(1, 0, 2).reshape(n, d) @ w["attn_output.weight"].T
        m = _rms_norm(x, w["ffn_norm.weight"], rms_eps)
        gate, up = m @ w["ffn_gate.weight"].T, m @ w["ffn_up.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w["ffn_down.weight"].T
    out = _rms_norm(x, weights["output_norm.weight"], rms_eps)
    return out @ weights.get("output.weight", table).T
