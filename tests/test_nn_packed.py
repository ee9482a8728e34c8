"""nn.PackedEncoder: the encoder's inference over packed real tokens equals the padded layers bit for bit."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import nn, ops
from attnkit.nn import packed
from attnkit.nn.transformer import Stack


def _padded_infer(encoder, x, lengths):
    """The layers' own inference over the padded batch (what PackedEncoder replaces)."""
    return Stack.infer(encoder, x, key_lengths=lengths)


@st.composite
def encoders_and_batches(draw):
    n_heads = draw(st.integers(1, 3))
    d_model = n_heads * draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    encoder = nn.Encoder(draw(st.integers(1, 3)), d_model, n_heads, draw(st.integers(1, 20)), rng, dropout=0.0,
                         norm_first=draw(st.booleans()),
                         norm=draw(st.sampled_from(["layer", "rms"])),
                         activation=draw(st.sampled_from(["gelu", "gelu_tanh", "relu"])))
    if draw(st.booleans()):
        encoder.astype(np.float64)
    batch, n = draw(st.integers(1, 5)), draw(st.integers(1, 9))
    lengths = np.array(draw(st.lists(st.integers(0, n), min_size=batch, max_size=batch)))
    x = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal((batch, n, d_model))
    return encoder, x.astype(encoder.dtype), lengths


@settings(deadline=None)
@given(case=encoders_and_batches())
def test_packed_equals_the_padded_layers_at_real_tokens_and_zeros_the_padding(case, isa):
    encoder, x, lengths = case
    real = np.arange(x.shape[1]) < lengths[:, None]
    x_with_nan_padding = np.where(real[..., None], x, np.nan)  # padding is never read
    out = nn.PackedEncoder(encoder)(x_with_nan_padding, key_lengths=lengths)
    assert out.dtype == encoder.dtype and out.shape == x.shape
    np.testing.assert_array_equal(out[real], _padded_infer(encoder, x, lengths)[real])
    assert not out[~real].any()


def test_a_runner_serves_batches_of_any_shape_with_its_reused_buffers():
    encoder = nn.Encoder(2, 8, 2, 16, np.random.default_rng(0), dropout=0.0)
    runner = nn.PackedEncoder(encoder)
    rng = np.random.default_rng(1)
    for batch, n in [(4, 7), (2, 3), (6, 11), (4, 7)]:
        x = rng.standard_normal((batch, n, 8)).astype(np.float32)
        lengths = rng.integers(1, n + 1, batch)
        real = np.arange(n) < lengths[:, None]
        np.testing.assert_array_equal(runner(x, key_lengths=lengths)[real], _padded_infer(encoder, x, lengths)[real])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("dtype", [None, "int8"])
def test_the_feed_forward_in_row_steps_changes_no_bit(monkeypatch, norm_first, dtype):
    """FF_ROWS tokens at a time (here 5 of 31, so 7 steps, the last short) give the one-step result exactly."""
    encoder = nn.Encoder(2, 8, 2, 16, np.random.default_rng(0), dropout=0.0, norm_first=norm_first,
                         activation="gelu").astype(np.float32)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 9, 8)).astype(np.float32)
    lengths = np.array([9, 7, 8, 7])
    whole = nn.PackedEncoder(encoder, dtype=dtype)(x, key_lengths=lengths)
    monkeypatch.setattr(packed, "FF_ROWS", 5)
    np.testing.assert_array_equal(nn.PackedEncoder(encoder, dtype=dtype)(x, key_lengths=lengths), whole)


def test_without_key_lengths_every_token_is_real():
    encoder = nn.Encoder(1, 8, 2, 16, np.random.default_rng(0), dropout=0.0)
    x = np.random.default_rng(2).standard_normal((3, 5, 8)).astype(np.float32)
    np.testing.assert_array_equal(nn.PackedEncoder(encoder)(x), _padded_infer(encoder, x, None))


def test_encoder_infer_runs_packed_when_it_can_and_padded_otherwise():
    x = np.random.default_rng(3).standard_normal((2, 4, 8)).astype(np.float32)
    lengths = np.array([4, 2])
    softmax = nn.Encoder(1, 8, 2, 16, np.random.default_rng(0), dropout=0.0)
    assert nn.PackedEncoder.supports(softmax)
    assert not softmax.infer(x, key_lengths=lengths)[1, 2:].any()  # packed: zeros at padding
    for options in ({"attention": "linear"}, {"relative_positions": 4}):
        other = nn.Encoder(1, 8, 2, 16, np.random.default_rng(0), dropout=0.0, **options)
        assert not nn.PackedEncoder.supports(other)
        np.testing.assert_array_equal(other.infer(x, key_lengths=lengths), _padded_infer(other, x, lengths))
        with pytest.raises(ValueError, match="softmax attention without relative positions"):
            nn.PackedEncoder(other)


def test_a_runner_keeps_the_qkv_weights_it_was_built_with():
    encoder = nn.Encoder(1, 8, 2, 16, np.random.default_rng(0), dropout=0.0)
    x = np.random.default_rng(4).standard_normal((1, 3, 8)).astype(np.float32)
    runner = nn.PackedEncoder(encoder)
    before = runner(x)
    encoder.layer0.self_attention.sublayer.params["wq"] *= 2
    np.testing.assert_array_equal(runner(x), before)  # documented: build a new runner after training
    assert not np.array_equal(nn.PackedEncoder(encoder)(x), before)


def test_bad_input_is_refused_with_its_shape():
    runner = nn.PackedEncoder(nn.Encoder(1, 8, 2, 16, np.random.default_rng(0)))
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, d_model\), got \(3, 8\)"):
        runner(np.zeros((3, 8), np.float32))


def test_one_runner_serves_concurrent_threads_with_their_own_buffers():
    encoder = nn.Encoder(2, 16, 2, 32, np.random.default_rng(0), dropout=0.0)
    runner = nn.PackedEncoder(encoder)
    rng = np.random.default_rng(5)
    cases = []
    for n in (3, 9, 17, 30):
        x = rng.standard_normal((5, n, 16)).astype(np.float32)
        lengths = rng.integers(1, n + 1, 5)
        cases.append((x, lengths, _padded_infer(encoder, x, lengths)))

    def check(case):
        x, lengths, expected = case
        real = np.arange(x.shape[1]) < lengths[:, None]
        for _ in range(20):
            np.testing.assert_array_equal(runner(x, key_lengths=lengths)[real], expected[real])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(check, cases))


def test_int8_runs_every_linear_map_in_int8_and_stays_close_to_float32():
    rng = np.random.default_rng(6)
    encoder = nn.Encoder(2, 32, 4, 64, rng, dropout=0.0, norm_first=False, activation="gelu")
    x = rng.standard_normal((4, 10, 32)).astype(np.float32)
    lengths = np.array([10, 7, 1, 4])
    real = np.arange(10) < lengths[:, None]
    exact = nn.PackedEncoder(encoder)(x, key_lengths=lengths)
    runner = nn.PackedEncoder(encoder, dtype="int8")
    quantised = runner(x, key_lengths=lengths)
    assert quantised.dtype == np.float32 and not quantised[~real].any()
    assert all(isinstance(linear.weight, ops.QuantizedLinearWeight)
               for layer in runner.layers for linear in (layer.qkv, layer.out, layer.ff1, layer.ff2))
    a, b = quantised[real], exact[real]
    cosine = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() > 0.99 and not np.array_equal(a, b)


def test_int8_needs_a_float32_encoder_and_dtypes_are_named():
    encoder = nn.Encoder(1, 8, 2, 16, np.random.default_rng(0))
    with pytest.raises(ValueError, match="dtype='int8' needs a float32 encoder.*got float64"):
        nn.PackedEncoder(encoder.astype(np.float64), dtype="int8")
    with pytest.raises(ValueError, match=r"dtype must be one of \(None, 'int8'\), got 'int4'"):
        nn.PackedEncoder(encoder, dtype="int4")
