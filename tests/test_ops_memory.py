"""Nq x Nk outputs too large for the machine are refused before any allocation or work."""

import time

import numpy as np
import pytest

from attnkit import _memory, scaled_dot_product_attention
from attnkit.ops.attention import scaled_dot_product_attention_backward


def test_available_bytes_is_positive():
    assert _memory.available_bytes() > 2**20


def test_return_weights_at_a_million_positions_raises_at_once():
    q = np.zeros((1, 10**6, 1), np.float32)  # 4 MB of input; its weights would take 4 TB
    start = time.perf_counter()
    with pytest.raises(MemoryError, match=r"return_weights=True: the weights of shape \(1, 1000000, 1000000\) "
                                          r"\(float32\) needs 3,725.3 GiB, more than the"):
        scaled_dot_product_attention(q, q, q, return_weights=True)
    assert time.perf_counter() - start < 5  # refused before the O(N^2) forward ran


def test_the_limit_is_the_memory_available(monkeypatch):
    monkeypatch.setattr(_memory, "available_bytes", lambda: 1000)
    q = np.zeros((2, 16, 4))
    out = scaled_dot_product_attention(q, q, q)  # without weights nothing grows as N^2: no limit
    with pytest.raises(MemoryError, match="the weights of shape"):
        scaled_dot_product_attention(q, q, q, return_weights=True)
    _, lse = scaled_dot_product_attention(q, q, q, return_lse=True)
    with pytest.raises(MemoryError, match=r"bias_grad=True: dbias of shape \(2, 16, 16\)"):
        scaled_dot_product_attention_backward(out, q, q, q, out, lse, bias=np.zeros((16, 16)), bias_grad=True)
    monkeypatch.setattr(_memory, "available_bytes", lambda: 16 * 16 * 2 * 8)
    assert scaled_dot_product_attention(q, q, q, return_weights=True)[1].shape == (2, 16, 16)
