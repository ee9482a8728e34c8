"""nn.positional: values, clipping, parameter counts, and every backward against finite differences."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attnkit import ops
from attnkit.nn import LearnedPositions, RelativePositionBias, SinusoidalPositions
from attnkit.nn.attention import MultiHeadAttention
from attnkit.testing.gradcheck import check_grad

batch_shapes = st.lists(st.integers(1, 3), max_size=2).map(tuple)
lengths = st.integers(1, 6)
seeds = st.integers(0, 2**32 - 1)


def upstream_loss(forward, rng, shape):
    """A scalar ``sum(out * r)`` for a fixed random ``r``: its gradient with respect to out is ``r``."""
    r = rng.standard_normal(shape)
    return r, lambda **_: float(np.sum(forward() * r))


# -- sinusoidal --------------------------------------------------------------------------------


@given(batch=batch_shapes, n=lengths, half=st.integers(1, 4), extra=st.integers(0, 3), offset=st.integers(0, 50),
       mode=st.sampled_from(["add", "concat"]), seed=seeds)
def test_sinusoidal_values_and_backward(batch, n, half, extra, offset, mode, seed):
    rng = np.random.default_rng(seed)
    d = 2 * half
    width = d if mode == "add" else 1 + extra
    layer = SinusoidalPositions(d, mode=mode)
    x = rng.standard_normal(batch + (n, width))
    out, cache = layer.forward(x, offset=offset)
    table = ops.sinusoidal_positions(n, d, start=offset)
    assert out.shape == batch + (n, layer.output_width(width))
    if mode == "add":
        assert_array_equal(out, x + table)
    else:
        assert_array_equal(out[..., :width], x)
        assert_array_equal(out[..., width:], np.broadcast_to(table, batch + (n, d)))
    r, f = upstream_loss(lambda: layer.forward(x, offset=offset)[0], rng, out.shape)
    check_grad(f, {"x": x}, {"x": layer.backward(r, cache)})


def test_sinusoidal_keeps_dtype_and_offsets_match_a_whole_sequence():
    layer = SinusoidalPositions(8)
    x = np.zeros((2, 7, 8), dtype=np.float32)
    whole, _ = layer.forward(x)
    assert whole.dtype == np.float32
    for t in range(7):
        step, _ = layer.forward(x[:, t : t + 1], offset=t)
        assert_array_equal(step, whole[:, t : t + 1])
    assert layer.n_parameters() == 0


def test_sinusoidal_table_is_reused_only_for_the_same_rows_and_never_written():
    layer = SinusoidalPositions(8)
    x = np.zeros((2, 5, 8), np.float32)
    first, _ = layer.forward(x)
    first += 1.0  # the caller owns its output: the kept table is not touched
    assert_array_equal(layer.forward(x)[0], ops.sinusoidal_positions(5, 8, dtype=np.float32)[None].repeat(2, 0))
    assert_array_equal(layer.forward(x, offset=3)[0][0], ops.sinusoidal_positions(5, 8, start=3, dtype=np.float32))
    assert_array_equal(layer.forward(x[:, :4])[0][0], ops.sinusoidal_positions(4, 8, dtype=np.float32))
    wide = layer.forward(x.astype(np.float64))[0]
    assert wide.dtype == np.float64 and np.array_equal(wide[0], ops.sinusoidal_positions(5, 8))


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: SinusoidalPositions(3), ValueError, "even"),
        (lambda: SinusoidalPositions(4, mode="prepend"), ValueError, "mode"),
        (lambda: SinusoidalPositions(4).forward(np.zeros((2, 6))), ValueError, r"\(\.\.\., n, 4\)"),
        (lambda: SinusoidalPositions(4).forward(np.zeros(4)), ValueError, "shape"),
        (lambda: SinusoidalPositions(4).forward(np.zeros((2, 4)), offset=-1), ValueError, "offset"),
        (lambda: SinusoidalPositions(4).forward(np.zeros((2, 4), dtype=int)), TypeError, "x must be"),
    ],
)
def test_sinusoidal_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


# -- learned absolute --------------------------------------------------------------------------


@given(batch=batch_shapes, n=lengths, d=st.integers(1, 5), spare=st.integers(0, 4), offset=st.integers(0, 3),
       seed=seeds)
def test_learned_values_and_backward(batch, n, d, spare, offset, seed):
    rng = np.random.default_rng(seed)
    layer = LearnedPositions(n + offset + spare, d, rng=rng).astype(np.float64)
    x = rng.standard_normal(batch + (n, d))
    out, cache = layer.forward(x, offset=offset)
    assert_array_equal(out, x + layer.params["weight"][offset : offset + n])
    r, f = upstream_loss(lambda: layer.forward(x, offset=offset)[0], rng, out.shape)
    dx = layer.backward(r, cache)
    check_grad(f, {"x": x, "weight": layer.params["weight"]}, {"x": dx, "weight": layer.grads["weight"]})
    untouched = np.ones(layer.max_len, dtype=bool)
    untouched[offset : offset + n] = False
    assert not layer.grads["weight"][untouched].any()


def test_learned_parameters_are_deterministic_float32_and_counted():
    a, b = LearnedPositions(10, 4, rng=np.random.default_rng(3)), LearnedPositions(10, 4, rng=3)
    assert_array_equal(a.params["weight"], b.params["weight"])
    assert a.params["weight"].dtype == np.float32 and a.n_parameters() == 40
    assert abs(a.params["weight"].std() - 0.02) < 0.01


def test_learned_backward_accumulates():
    layer = LearnedPositions(4, 2, rng=0)
    _, cache = layer.forward(np.zeros((3, 2, 2), dtype=np.float32), offset=1)
    for _ in range(2):
        layer.backward(np.ones((3, 2, 2), dtype=np.float32), cache)
    assert_array_equal(layer.grads["weight"], [[0, 0], [6, 6], [6, 6], [0, 0]])


def test_learned_errors():
    layer = LearnedPositions(4, 2, rng=0)
    with pytest.raises(ValueError, match=r"positions 3\.\.4 exceed max_len=4"):
        layer.forward(np.zeros((2, 2)), offset=3)
    with pytest.raises(ValueError, match=r"\(\.\.\., n, 2\)"):
        layer.forward(np.zeros((2, 3)))


# -- relative bias -----------------------------------------------------------------------------


def bias_by_loops(weight, nq, nk, offset, k):
    heads = weight.shape[1]
    bias = np.empty((heads, nq, nk), dtype=weight.dtype)
    for h in range(heads):
        for i in range(nq):
            for j in range(nk):
                bias[h, i, j] = weight[min(max(offset + i - j, -k), k) + k, h]
    return bias


@given(heads=st.integers(1, 4), k=st.integers(0, 4), nq=lengths, nk=lengths, offset=st.none() | st.integers(-3, 8),
       seed=seeds)
def test_relative_bias_values(heads, k, nq, nk, offset, seed):
    layer = RelativePositionBias(heads, k, rng=seed)
    bias, _ = layer.forward(nq, nk, offset=offset)
    expected_offset = nk - nq if offset is None else offset
    assert_array_equal(bias, bias_by_loops(layer.params["weight"], nq, nk, expected_offset, k))
    assert bias.flags.c_contiguous and bias.dtype == np.float32


def test_relative_bias_clips_distances_beyond_k():
    layer = RelativePositionBias(heads=2, max_distance=2, rng=0)
    layer.params["weight"][:] = np.arange(10, dtype=np.float32).reshape(5, 2)
    bias, _ = layer.forward(1, 9, offset=4)  # the query at position 4, keys at 0..8: distances 4..-4
    assert_array_equal(bias[0, 0], [8, 8, 8, 6, 4, 2, 0, 0, 0])
    assert_array_equal(bias[1, 0], [9, 9, 9, 7, 5, 3, 1, 1, 1])
    assert_array_equal(layer.bucket(3, 3), [[2, 1, 0], [3, 2, 1], [4, 3, 2]])
    assert_array_equal(layer.bucket(1, 4), [[4, 4, 3, 2]])  # decoding: the query is the last key


@pytest.mark.parametrize(("heads", "k"), [(1, 0), (4, 1), (8, 16), (3, 127)])
def test_relative_bias_parameter_count(heads, k):
    layer = RelativePositionBias(heads, k, rng=0)
    assert layer.n_parameters() == (2 * k + 1) * heads
    assert layer.params["weight"].shape == (2 * k + 1, heads)


@given(batch=batch_shapes, heads=st.integers(1, 3), k=st.integers(0, 3), nq=lengths, nk=lengths,
       offset=st.none() | st.integers(-3, 8), seed=seeds)
def test_relative_bias_backward(batch, heads, k, nq, nk, offset, seed):
    rng = np.random.default_rng(seed)
    layer = RelativePositionBias(heads, k, rng=rng).astype(np.float64)
    shape = batch + (heads, nq, nk)
    r, f = upstream_loss(lambda: np.broadcast_to(layer.forward(nq, nk, offset=offset)[0], shape), rng, shape)
    _, cache = layer.forward(nq, nk, offset=offset)
    assert layer.backward(r, cache) is None
    check_grad(f, {"weight": layer.params["weight"]}, {"weight": layer.grads["weight"]})


@given(heads=st.integers(1, 3), k=st.integers(0, 3), nq=lengths, nk=lengths, causal=st.booleans(), seed=seeds)
def test_relative_bias_trains_through_attention(heads, k, nq, nk, causal, seed):
    rng = np.random.default_rng(seed)
    layer = RelativePositionBias(heads, k, rng, init_std=1.0).astype(np.float64)
    q, kk, v = rng.standard_normal((2, heads, nq, 3)), *rng.standard_normal((2, 2, heads, nk, 3))
    r = rng.standard_normal((2, heads, nq, 3))

    def loss(**_):
        bias, _ = layer.forward(nq, nk)
        return float(np.sum(ops.scaled_dot_product_attention(q, kk, v, causal=causal, bias=bias) * r))

    bias, cache = layer.forward(nq, nk)
    out, lse = ops.scaled_dot_product_attention(q, kk, v, causal=causal, bias=bias, return_lse=True)
    *_, dbias = ops.scaled_dot_product_attention_backward(r, q, kk, v, out, lse, causal=causal, bias=bias,
                                                          bias_grad=True)
    layer.backward(dbias, cache)
    check_grad(loss, {"weight": layer.params["weight"]}, {"weight": layer.grads["weight"]})


@given(k=st.integers(0, 3), n=lengths, seed=seeds)
def test_relative_bias_inside_multi_head_attention(k, n, seed):
    rng = np.random.default_rng(seed)
    attention = MultiHeadAttention(6, 2, rng, causal=True, position_bias=RelativePositionBias(2, k, rng))
    attention.astype(np.float64)
    x, r = rng.standard_normal((2, 2, n, 6))
    out, cache = attention.forward(x)
    attention.backward(r, cache)
    table = attention.position_bias
    assert attention.n_parameters() == 4 * (6 * 6 + 6) + (2 * k + 1) * 2
    check_grad(lambda **_: float(np.sum(attention.forward(x)[0] * r)), {"weight": table.params["weight"]},
               {"weight": table.grads["weight"]})


def test_relative_bias_errors():
    layer = RelativePositionBias(2, 1, rng=0)
    _, cache = layer.forward(2, 3)
    with pytest.raises(ValueError, match=r"grad must have shape \(\.\.\., heads, nq, nk\)"):
        layer.backward(np.zeros((3, 2, 3)), cache)
    with pytest.raises(ValueError, match="max_distance"):
        RelativePositionBias(2, -1, rng=0)
    with pytest.raises(ValueError, match="heads"):
        RelativePositionBias(0, 1, rng=0)
