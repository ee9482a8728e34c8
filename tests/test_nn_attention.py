"""nn.MultiHeadAttention: gradients of every attention kind and mask against finite differences."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import ops
from attnkit.nn.attention import MultiHeadAttention, hard_attention
from attnkit.nn.module import Module
from attnkit.nn.positional import RelativePositionBias
from attnkit.testing.gradcheck import check_grad


class FullBias(Module):
    """A test double for a position-bias module: one learned logit bias per (head, query, key)."""

    def __init__(self, heads, n, rng):
        super().__init__()
        self.add_param("table", rng.standard_normal((heads, n, n)))

    def forward(self, nq, nk):
        return self.params["table"][:, :nq, :nk], (nq, nk)

    def backward(self, dbias, cache):
        nq, nk = cache
        self.grads["table"][:, :nq, :nk] += dbias.reshape((-1,) + dbias.shape[-3:]).sum(axis=0)


def _check_layer(layer, x, context, key_lengths, seed):
    rng = np.random.default_rng(seed)
    kw = dict(key_lengths=key_lengths) | ({"context": context} if context is not None else {})
    out, cache = layer.forward(x, training=True, **kw)
    w = rng.standard_normal(out.shape)
    layer.zero_grad()
    back = layer.backward(w, cache)
    dx, dc = back if context is not None else (back, None)
    inputs = {"x": x} | ({"context": context} if context is not None else {})
    analytic = {"x": dx} | ({"context": dc} if context is not None else {})

    def loss(x, context=None):
        extra = {"context": context} if context is not None else {}
        return float(np.sum(layer.forward(x, key_lengths=key_lengths, **extra)[0] * w))

    check_grad(loss, inputs, analytic, rtol=1e-5, atol=1e-8, max_entries=12, rng=seed)
    params = {name: layer.params[name] for name in ("wq", "wk", "wv", "wo", "bq", "bo")}
    grads = {name: layer.grads[name].copy() for name in params}

    def loss_params(**_):
        return loss(x, context)

    check_grad(loss_params, params, grads, rtol=1e-5, atol=1e-8, max_entries=8, rng=seed)
    return layer


@settings(max_examples=20)
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(["softmax", "linear", "performer"]),
       cross=st.booleans(), causal=st.booleans(), padded=st.booleans(), n=st.integers(1, 12),
       heads=st.integers(1, 3))
def test_gradients(seed, kind, cross, causal, padded, n, heads):
    rng = np.random.default_rng(seed)
    d_model, d_context = 4 * heads, 5
    nk = rng.integers(1, 12) if cross else n
    if kind != "softmax" and causal and cross:
        nk = n  # causal linear attention needs Nq == Nk
    layer = MultiHeadAttention(d_model, heads, rng, d_context=d_context if cross else None, attention=kind,
                               causal=causal, n_features=16).astype(np.float64)
    x = rng.standard_normal((2, n, d_model))
    context = rng.standard_normal((2, nk, d_context)) if cross else None
    lengths = rng.integers(1, nk + 1, size=2) if padded else None
    _check_layer(layer, x, context, lengths, seed)


@pytest.mark.parametrize("kv_heads, rotary, bias", [(4, False, True), (2, True, False), (1, True, True)])
def test_self_attention_projects_once_and_gets_the_same_bits(kv_heads, rotary, bias):
    """Self-attention's q, k and v come from one product with [wq | wk | wv]: the same bits as each projection's
    own product (the matrix product's columns do not depend on their neighbours), and its backward matches the
    three products' to float32 rounding."""
    rng = np.random.default_rng(3)
    layer = MultiHeadAttention(32, 4, rng, n_kv_heads=kv_heads, rotary_base=100.0 if rotary else None, bias=bias,
                               causal=True)
    for name in layer.params:
        layer.params[name][...] = rng.standard_normal(layer.params[name].shape)  # nonzero biases too
    x = rng.standard_normal((3, 70, 32)).astype(np.float32)
    q, k, v, _ = layer._self_heads(x, 0)
    for got, (w, b) in zip((q, k, v), (("wq", "bq"), ("wk", "bk"), ("wv", "bv"))):
        np.testing.assert_array_equal(got, layer._heads(x, w, b, start=None if w == "wv" else 0))
    out, cache = layer.forward(x, training=True)
    grad = rng.standard_normal(out.shape).astype(np.float32)
    layer.zero_grad()
    dx = layer.backward(grad, cache)
    fused_grads = {name: g.copy() for name, g in layer.grads.items()}
    layer.zero_grad()
    *rest, _ = cache
    separate_dx = layer.backward(grad, (*rest, None))  # the same cache without the fused weight: three products
    np.testing.assert_allclose(dx, separate_dx, rtol=1e-4, atol=1e-4)
    for name, g in layer.grads.items():
        np.testing.assert_allclose(fused_grads[name], g, rtol=1e-4, atol=1e-3, err_msg=name)


def test_position_bias_gets_its_gradient():
    rng = np.random.default_rng(0)
    layer = MultiHeadAttention(8, 2, rng, position_bias=FullBias(2, 6, rng), causal=True).astype(np.float64)
    x = rng.standard_normal((3, 6, 8))
    _check_layer(layer, x, None, np.array([6, 4, 1]), 0)
    out, cache = layer.forward(x)
    w = rng.standard_normal(out.shape)
    layer.zero_grad()
    layer.backward(w, cache)
    table = layer.position_bias.params["table"]

    def loss(table):
        return float(np.sum(layer.forward(x)[0] * w))

    check_grad(loss, {"table": table}, {"table": layer.position_bias.grads["table"].copy()}, rtol=1e-5, atol=1e-8)


def test_weights_are_the_softmax_weights_and_padding_is_respected():
    rng = np.random.default_rng(1)
    layer = MultiHeadAttention(8, 2, rng)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    out, _, weights = layer.forward(x, key_lengths=np.array([5, 3]), return_weights=True)
    assert weights.shape == (2, 2, 5, 5) and out.dtype == np.float32
    np.testing.assert_allclose(weights.sum(-1), 1, rtol=1e-5)
    assert np.all(weights[1, :, :, 3:] == 0)
    q = (x @ layer.params["wq"] + layer.params["bq"]).reshape(2, 5, 2, 4).swapaxes(1, 2)
    k = (x @ layer.params["wk"] + layer.params["bk"]).reshape(2, 5, 2, 4).swapaxes(1, 2)
    v = (x @ layer.params["wv"] + layer.params["bv"]).reshape(2, 5, 2, 4).swapaxes(1, 2)
    _, expected = ops.scaled_dot_product_attention(q, k, v, key_lengths=np.array([5, 3]), return_weights=True)
    np.testing.assert_allclose(weights, expected, rtol=1e-6)


def test_deterministic_given_a_generator():
    a = MultiHeadAttention(8, 2, np.random.default_rng(5), attention="performer")
    b = MultiHeadAttention(8, 2, np.random.default_rng(5), attention="performer")
    x = np.random.default_rng(6).standard_normal((1, 4, 8))
    np.testing.assert_array_equal(a.forward(x)[0], b.forward(x)[0])


def test_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        MultiHeadAttention(10, 3, rng)
    with pytest.raises(ValueError, match="attention must be one of"):
        MultiHeadAttention(8, 2, rng, attention="sparse")
    with pytest.raises(ValueError, match="position_bias needs attention='softmax'"):
        MultiHeadAttention(8, 2, rng, attention="linear", position_bias=FullBias(2, 4, rng))
    layer = MultiHeadAttention(8, 2, rng, attention="linear")
    with pytest.raises(ValueError, match="return_weights needs attention='softmax'"):
        layer.forward(np.ones((1, 3, 8)), return_weights=True)


@pytest.mark.parametrize(("kind", "relative"), [("softmax", False), ("softmax", True), ("linear", False),
                                              ("performer", False)])
def test_cached_steps_equal_the_causal_forward(kind, relative):
    rng = np.random.default_rng(7)
    bias = RelativePositionBias(3, 2, rng) if relative else None
    layer = MultiHeadAttention(9, 3, rng, attention=kind, causal=True, position_bias=bias,
                               n_features=16).astype(np.float64)
    x = rng.standard_normal((2, 11, 9))
    full = layer.forward(x)[0]
    cache = layer.start_self(2, capacity=3)  # grows twice on the way
    steps = np.concatenate([layer.step(x[:, t : t + 1], cache)[0] for t in range(11)], axis=1)
    np.testing.assert_allclose(steps, full, rtol=1e-12, atol=1e-13)
    assert cache.length == 11


@pytest.mark.parametrize("kind", ["softmax", "linear", "performer"])
def test_cached_cross_attention_equals_the_forward(kind):
    rng = np.random.default_rng(8)
    layer = MultiHeadAttention(8, 2, rng, d_context=5, attention=kind, n_features=16).astype(np.float64)
    x, context = rng.standard_normal((3, 4, 8)), rng.standard_normal((3, 6, 5))
    lengths = np.array([6, 2, 4])
    full = layer.forward(x, context=context, key_lengths=lengths)[0]
    cache = layer.start_cross(context, key_lengths=lengths)
    steps = np.concatenate([layer.step(x[:, t : t + 1], cache)[0] for t in range(4)], axis=1)
    np.testing.assert_allclose(steps, full, rtol=1e-12, atol=1e-13)


def test_step_errors():
    rng = np.random.default_rng(0)
    causal, cross = MultiHeadAttention(8, 2, rng, causal=True), MultiHeadAttention(8, 2, rng)
    with pytest.raises(ValueError, match="start_self needs causal self-attention"):
        cross.start_self(2)
    with pytest.raises(ValueError, match="start_cross needs causal=False"):
        causal.start_cross(np.ones((2, 3, 8)))
    with pytest.raises(ValueError, match=r"context must have shape \(B, M, d_context=8\)"):
        cross.start_cross(np.ones((2, 3, 4)))
    with pytest.raises(ValueError, match=r"x must have shape \(batch_size=2, T >= 1, d_model=8\)"):
        causal.step(np.ones((3, 2, 8)), causal.start_self(2))
    with pytest.raises(ValueError, match=r"x must have shape \(batch_size=2, T >= 1, d_model=8\)"):
        causal.step(np.ones((2, 0, 8)), causal.start_self(2))
    with pytest.raises(TypeError, match="cache must come from start_self or start_cross"):
        causal.step(np.ones((2, 1, 8)), None)


# ------------------------------------------------------------------------------------- hard (argmax) attention
def test_hard_attention_reads_the_best_keys_value():
    """With ``hard``, each query's head output is the value of its best visible key (attnkit.argmax_attention)."""
    rng = np.random.default_rng(3)
    mha = MultiHeadAttention(8, 2, rng, causal=True).astype(np.float64)
    x = rng.standard_normal((2, 5, 8))
    q, k, v = (mha._heads(x, f"w{c}", f"b{c}") for c in "qkv")
    heads = ops.argmax_attention(q, k, v, causal=True)
    expected = heads.swapaxes(1, 2).reshape(2, 5, 8) @ mha.params["wo"] + mha.params["bo"]
    with hard_attention(mha):
        out, _ = mha.forward(x)
        cache = mha.start_self(2)
        steps = np.concatenate([mha.step(x[:, :2], cache)[0]] + [mha.step(x[:, t : t + 1], cache)[0]
                                                                  for t in range(2, 5)], axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(steps, expected, rtol=1e-12, atol=1e-12)
    assert not mha.hard  # restored on exit
    soft, _ = mha.forward(x)
    assert not np.allclose(soft, expected)


def test_hard_attention_is_for_inference_with_softmax_only():
    rng = np.random.default_rng(0)
    mha = MultiHeadAttention(8, 2, rng, causal=True)
    with hard_attention(mha), pytest.raises(ValueError, match="inference-time option"):
        mha.forward(np.ones((1, 3, 8)), training=True)
    with pytest.raises(ValueError, match="needs softmax attention"):
        with hard_attention(MultiHeadAttention(8, 2, rng, attention="linear")):
            pass


# -- grouped-query attention, rotary positions, no biases (the Llama options) -----------------------------------
def _grouped_by_copies(layer, x):
    """The same layer's output computed the plain way: each key/value head copied for every query head of its
    group, rotary positions applied by the reference (the statement of what the options mean)."""
    from attnkit import reference

    group = layer.n_heads // layer.n_kv_heads
    p = layer.params

    def heads(w, n_heads):
        return (x @ p[w]).reshape(x.shape[0], x.shape[1], n_heads, layer.d_head).swapaxes(1, 2)

    q, k, v = heads("wq", layer.n_heads), heads("wk", layer.n_kv_heads), heads("wv", layer.n_kv_heads)
    if layer.rotary_base is not None:
        q = reference.rotary_positions(q, base=layer.rotary_base)
        k = reference.rotary_positions(k, base=layer.rotary_base)
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    out = reference.scaled_dot_product_attention(q, k, v, causal=layer.causal)
    return out.swapaxes(1, 2).reshape(x.shape[0], x.shape[1], -1) @ p["wo"]


@settings(max_examples=15)
@given(seed=st.integers(0, 2**32 - 1), kv_heads=st.sampled_from([1, 2, 4]), rotary=st.booleans(),
       causal=st.booleans(), n=st.integers(1, 9))
def test_grouped_rotary_attention_matches_its_statement_and_gradients(seed, kv_heads, rotary, causal, n):
    rng = np.random.default_rng(seed)
    layer = MultiHeadAttention(16, 4, rng, n_kv_heads=kv_heads, rotary_base=100.0 if rotary else None, bias=False,
                               causal=causal).astype(np.float64)
    assert set(layer.params) == {"wq", "wk", "wv", "wo"}
    assert layer.params["wk"].shape == (16, kv_heads * 4)
    x = rng.standard_normal((2, n, 16))
    np.testing.assert_allclose(layer.forward(x)[0], _grouped_by_copies(layer, x), rtol=1e-10, atol=1e-12)
    out, cache = layer.forward(x, training=True)
    w = rng.standard_normal(out.shape)
    layer.zero_grad()
    dx = layer.backward(w, cache)

    def loss(x):
        return float(np.sum(layer.forward(x)[0] * w))

    check_grad(loss, {"x": x}, {"x": dx}, rtol=1e-5, atol=1e-8, max_entries=12, rng=seed)
    grads = {name: layer.grads[name].copy() for name in layer.params}
    check_grad(lambda **_: loss(x), dict(layer.params), grads, rtol=1e-5, atol=1e-8, max_entries=8, rng=seed)


@pytest.mark.parametrize("window", [None, 3])
def test_grouped_rotary_steps_equal_the_forward(window):
    rng = np.random.default_rng(3)
    layer = MultiHeadAttention(12, 6, rng, n_kv_heads=2, rotary_base=10000.0, causal=True, window=window,
                               bias=False).astype(np.float64)
    x = rng.standard_normal((2, 10, 12))
    full, weights = layer.forward(x, return_weights=True)[::2]
    assert weights.shape == (2, 6, 10, 10)
    cache = layer.start_self(2, capacity=2)
    prefill = layer.step(x[:, :4], cache)[0]
    steps = [layer.step(x[:, t : t + 1], cache)[0] for t in range(4, 10)]
    np.testing.assert_allclose(np.concatenate([prefill, *steps], axis=1), full, rtol=1e-12, atol=1e-13)
    assert cache.keys_values()[0].shape[1] == 2  # the cache holds the key/value heads only
    with hard_attention(layer):
        hard = layer.forward(x)[0]
        cache = layer.start_self(2)
        hard_steps = np.concatenate([layer.step(x[:, t : t + 1], cache)[0] for t in range(10)], axis=1)
    np.testing.assert_allclose(hard_steps, hard, rtol=1e-12, atol=1e-13)


def test_grouped_and_rotary_refusals():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        MultiHeadAttention(12, 6, rng, n_kv_heads=4)
    with pytest.raises(ValueError, match="needs attention='softmax'"):
        MultiHeadAttention(12, 6, rng, n_kv_heads=2, attention="linear")
    with pytest.raises(ValueError, match="d_head must be even"):
        MultiHeadAttention(9, 3, rng, rotary_base=10000.0)
    with pytest.raises(ValueError, match="rotary_base"):
        MultiHeadAttention(8, 2, rng, rotary_base=-1.0)
    layer = MultiHeadAttention(8, 2, rng, rotary_base=10000.0)
    with pytest.raises(ValueError, match="rotary positions are for self-attention"):
        layer.forward(np.ones((1, 3, 8)), context=np.ones((1, 2, 8)))
