"""attnkit.nn layers: backward passes against finite differences (float64), determinism, contracts."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attnkit import ops
from attnkit.nn import Dropout, Embedding, FeedForward, LayerNorm, Linear, RMSNorm
from attnkit.testing import check_grad, check_module_grad

seeds = st.integers(0, 2**32 - 1)
leading = st.lists(st.integers(1, 3), max_size=2).map(tuple)
widths = st.integers(1, 6)


def inputs(seed, shape, scale=1.0):
    return scale * np.random.default_rng(seed).standard_normal(shape)


# -- gradients ---------------------------------------------------------------------------------------


@given(seed=seeds, lead=leading, n_in=widths, n_out=widths, bias=st.booleans())
def test_linear_gradients(seed, lead, n_in, n_out, bias):
    layer = Linear(n_in, n_out, seed, bias=bias).astype(np.float64)
    if bias:
        layer.params["bias"][...] = inputs(seed + 1, n_out)  # a non-zero bias, so it matters
    check_module_grad(layer, inputs(seed, lead + (n_in,)), rng=seed)


@given(seed=seeds, lead=leading, n=st.integers(1, 8), scale=st.sampled_from((1.0, 10.0)))
def test_layer_norm_gradients(isa, seed, lead, n, scale):
    layer = LayerNorm(n).astype(np.float64)
    layer.params["gamma"][...] = inputs(seed + 1, n)
    layer.params["beta"][...] = inputs(seed + 2, n)
    check_module_grad(layer, inputs(seed, lead + (n,), scale), rng=seed)


@given(seed=seeds, lead=leading, n=st.integers(1, 8), scale=st.sampled_from((1.0, 10.0)))
def test_rms_norm_gradients(isa, seed, lead, n, scale):
    layer = RMSNorm(n, eps=1e-3).astype(np.float64)
    layer.params["gamma"][...] = inputs(seed + 1, n)
    check_module_grad(layer, inputs(seed, lead + (n,), scale), rng=seed)


@given(seed=seeds, lead=leading, n=widths, p=st.sampled_from((0.0, 0.3, 0.9)), training=st.booleans())
def test_dropout_gradients(seed, lead, n, p, training):
    check_module_grad(Dropout(p, seed).astype(np.float64), inputs(seed, lead + (n,)), training=training)


@given(seed=seeds, lead=leading, d_model=widths, d_ff=widths, activation=st.sampled_from(("gelu", "gelu_tanh", "relu")),
       dropout=st.sampled_from((0.0, 0.5)), training=st.booleans())
def test_feed_forward_gradients(isa, seed, lead, d_model, d_ff, activation, dropout, training):
    layer = FeedForward(d_model, d_ff, seed, activation=activation, dropout=dropout).astype(np.float64)
    for name in ("linear1", "linear2"):
        bias = layer.children[name].params["bias"]
        bias[...] = inputs(seed + len(name), bias.shape)
    check_module_grad(layer, inputs(seed, lead + (d_model,)), training=training, rng=seed)


@given(seed=seeds, lead=leading, vocab=st.integers(1, 7), dim=widths, padding=st.booleans())
def test_embedding_gradients(seed, lead, vocab, dim, padding):
    padding_idx = seed % vocab if padding else None
    layer = Embedding(vocab, dim, seed, padding_idx=padding_idx).astype(np.float64)
    ids = np.random.default_rng(seed).integers(0, vocab, lead)
    out, cache = layer.forward(ids)
    # The padding row is read but gets no gradient by design: the objective ignores padding positions,
    # so that the finite differences agree (a gradient arriving there is tested below).
    w = inputs(seed, out.shape)
    if padding:
        w[ids == padding_idx] = 0.0
    layer.zero_grad()
    assert layer.backward(w, cache) is None
    check_grad(lambda weight: np.sum(layer.forward(ids)[0] * w), {"weight": layer.params["weight"]},
               {"weight": layer.grads["weight"]}, max_entries=None)


def test_backward_accumulates_parameter_gradients():
    layer = Linear(3, 2, 0)
    x, g = inputs(0, (4, 3)).astype(np.float32), inputs(1, (4, 2)).astype(np.float32)
    _, cache = layer.forward(x)
    layer.backward(g, cache)
    once = layer.grads["weight"].copy()
    layer.backward(g, cache)
    np.testing.assert_allclose(layer.grads["weight"], 2 * once, rtol=1e-6)


# -- Embedding ---------------------------------------------------------------------------------------


def test_embedding_padding_row_stays_zero_and_gets_no_gradient():
    layer = Embedding(5, 3, 0, padding_idx=2)
    assert_array_equal(layer.params["weight"][2], 0.0)
    ids = np.array([[2, 1, 2], [4, 2, 1]])
    out, cache = layer.forward(ids)
    assert out.shape == (2, 3, 3) and out.dtype == np.float32
    assert_array_equal(out[0, 0], 0.0)
    layer.backward(np.ones((2, 3, 3)), cache)
    assert_array_equal(layer.grads["weight"][2], 0.0)
    assert_array_equal(layer.grads["weight"][1], 2.0)  # id 1 appears twice: contributions add up
    assert_array_equal(layer.grads["weight"][[0, 3]], 0.0)
    grad = np.ones((2, 3, 3))
    grad[ids == 2] = np.nan  # not even a NaN at a padding position reaches the padding row
    layer.backward(grad, cache)
    assert_array_equal(layer.grads["weight"][2], 0.0)


def test_embedding_rejects_bad_ids_and_arguments():
    layer = Embedding(5, 3, 0)
    with pytest.raises(ValueError, match=r"ids must be in \[0, 5\).*got 5"):
        layer.forward(np.array([0, 5]))
    with pytest.raises(ValueError, match="got -1"):
        layer.forward(np.array([-1, 0]))
    with pytest.raises(TypeError, match="ids"):
        layer.forward(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="padding_idx"):
        Embedding(5, 3, 0, padding_idx=5)
    with pytest.raises(ValueError, match="num_embeddings"):
        Embedding(0, 3, 0)
    assert layer.forward(np.zeros((2, 0), np.int64))[0].shape == (2, 0, 3)


def test_embedding_init_std():
    weight = Embedding(2000, 50, 0, init_std=0.02).params["weight"]
    assert abs(weight.std() - 0.02) < 1e-3


# -- Linear ------------------------------------------------------------------------------------------


def test_linear_xavier_init_and_shapes():
    layer = Linear(300, 100, 0)
    limit = math.sqrt(6 / 400)
    weight = layer.params["weight"]
    assert weight.shape == (300, 100) and weight.dtype == np.float32
    assert np.abs(weight).max() <= limit
    assert abs(weight.var() - limit**2 / 3) < 0.05 * limit**2 / 3  # the variance of U(-a, a)
    assert_array_equal(layer.params["bias"], 0.0)
    assert "bias" not in Linear(3, 2, 0, bias=False).params
    out, _ = layer.forward(np.ones((2, 5, 300), np.float32))
    assert out.shape == (2, 5, 100) and out.dtype == np.float32
    with pytest.raises(ValueError, match=r"in_features=300 .* got shape \(2, 299\)"):
        layer.forward(np.ones((2, 299)))


def test_linear_matches_matmul():
    layer = Linear(4, 3, 1).astype(np.float64)
    layer.params["bias"][...] = [1.0, 2.0, 3.0]
    x = inputs(0, (2, 5, 4))
    out, _ = layer.forward(x)
    np.testing.assert_allclose(out, x @ layer.params["weight"] + layer.params["bias"], rtol=1e-14)


# -- LayerNorm ---------------------------------------------------------------------------------------


def test_layer_norm_uses_the_op():
    layer = LayerNorm(6, eps=1e-3)
    layer.params["gamma"][...] = 2.0
    x = inputs(0, (3, 6)).astype(np.float32)
    out, _ = layer.forward(x)
    np.testing.assert_array_equal(out, ops.layer_norm(x, layer.params["gamma"], layer.params["beta"], 1e-3))
    with pytest.raises(ValueError, match="dim=6"):
        layer.forward(np.ones((3, 5)))


def test_rms_norm_uses_the_op():
    layer = RMSNorm(6)
    assert layer.eps == 1e-6 and sorted(layer.params) == ["gamma"]
    layer.params["gamma"][...] = 2.0
    x = inputs(0, (3, 6)).astype(np.float32)
    out, _ = layer.forward(x)
    np.testing.assert_array_equal(out, ops.rms_norm(x, layer.params["gamma"], 1e-6))
    with pytest.raises(ValueError, match="dim=6"):
        layer.forward(np.ones((3, 5)))
    with pytest.raises(ValueError, match="eps must be >= 0, got -1.0"):
        RMSNorm(4, eps=-1.0)
    with pytest.raises(TypeError, match="eps must be a real number"):
        RMSNorm(4, eps="small")


# -- Dropout -----------------------------------------------------------------------------------------


def test_dropout_is_the_identity_at_inference():
    x = inputs(0, (4, 5))
    out, cache = Dropout(0.5, 0).forward(x, training=False)
    assert out is x and cache is None


def test_dropout_masks_and_scales_in_training():
    x = np.ones((200, 500), np.float32)
    out, mask = Dropout(0.25, 0).forward(x, training=True)
    assert out.dtype == np.float32
    assert set(np.unique(out).tolist()) == {0.0, np.float32(1 / 0.75)}
    assert abs((out == 0).mean() - 0.25) < 0.01
    assert abs(out.mean() - 1.0) < 0.01  # inverted dropout keeps the expectation


def test_dropout_is_deterministic_given_the_generator():
    x = np.ones((50, 40))
    a, b = Dropout(0.5, np.random.default_rng(7)), Dropout(0.5, np.random.default_rng(7))
    first = [a.forward(x, training=True)[0] for _ in range(3)]
    second = [b.forward(x, training=True)[0] for _ in range(3)]
    for u, v in zip(first, second):
        assert_array_equal(u, v)
    assert not np.array_equal(first[0], first[1])  # a new mask at every step
    # float32 uniforms whatever the dtype: a float64 copy draws the same masks.
    c = Dropout(0.5, np.random.default_rng(7)).astype(np.float64)
    assert_array_equal(c.forward(x.astype(np.float32), training=True)[0], first[0])


@pytest.mark.parametrize("p", [-0.1, 1.0, np.nan])
def test_dropout_rejects_bad_p(p):
    with pytest.raises(ValueError, match="p"):
        Dropout(p, 0)


# -- FeedForward -------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "relu", None])
def test_feed_forward_composes_its_parts(activation):
    layer = FeedForward(4, 16, 0) if activation is None else FeedForward(4, 16, 0, activation=activation)
    x = inputs(0, (2, 3, 4)).astype(np.float32)
    out, _ = layer.forward(x)
    hidden = x @ layer.linear1.params["weight"]
    # The default is the tanh GELU (what "gelu" meant before the exact form existed); "gelu" is exact.
    hidden = {"gelu": ops.gelu(hidden, approximate="none"), "gelu_tanh": ops.gelu(hidden), None: ops.gelu(hidden),
              "relu": np.maximum(hidden, 0)}[activation]
    np.testing.assert_allclose(out, hidden @ layer.linear2.params["weight"], rtol=1e-5, atol=1e-6)
    assert out.dtype == np.float32 and out.shape == x.shape


def test_feed_forward_is_deterministic_given_the_generator():
    def run():
        layer = FeedForward(8, 32, np.random.default_rng(11), dropout=0.3)
        x = inputs(1, (3, 8)).astype(np.float32)
        return layer.state_dict(), [layer.forward(x, training=True)[0] for _ in range(2)]

    (state_a, outs_a), (state_b, outs_b) = run(), run()
    for name in state_a:
        assert_array_equal(state_a[name], state_b[name])
    for u, v in zip(outs_a, outs_b):
        assert_array_equal(u, v)
    assert sorted(state_a) == ["linear1.bias", "linear1.weight", "linear2.bias", "linear2.weight"]


@pytest.mark.parametrize("activation", ["tanh", "GELU", None, ["relu"]])
def test_feed_forward_rejects_an_unknown_activation(activation):
    with pytest.raises(ValueError, match=r"activation must be one of \('gelu', 'gelu_tanh', 'relu', 'swiglu'\), got"):
        FeedForward(4, 8, 0, activation=activation)


@given(seed=st.integers(0, 2**32 - 1), bias=st.booleans())
def test_swiglu_feed_forward_gradients_and_statement(seed, bias):
    rng = np.random.default_rng(seed)
    layer = FeedForward(6, 5, rng, activation="swiglu", bias=bias).astype(np.float64)
    assert layer.linear1.params["weight"].shape == (6, 10) and ("bias" in layer.linear1.params) == bias
    x = rng.standard_normal((2, 3, 6)) * 3
    h = x @ layer.linear1.params["weight"] + layer.linear1.params.get("bias", 0.0)
    gate, up = h[..., :5], h[..., 5:]
    expected = (gate / (1 + np.exp(-gate)) * up) @ layer.linear2.params["weight"] + layer.linear2.params.get("bias", 0)
    np.testing.assert_allclose(layer.forward(x)[0], expected, rtol=1e-12, atol=1e-12)
    check_module_grad(layer, x, rng=seed)


def test_swiglu_has_no_overflow_on_large_gates():
    layer = FeedForward(2, 2, 0, activation="swiglu")
    out = layer.forward(np.array([[1e4, -1e4]], np.float32))[0]
    assert np.isfinite(out).all()
