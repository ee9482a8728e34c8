"""nn.causal_decoder: the decoder-only stack's gradients against finite differences for every attention
kind and block option, causality, padding, cached decoding (pre- and post-LN, with reorder), and a tiny
language model that learns."""

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import nn
from attnkit.nn import causal_decoder
from attnkit.testing import check_grad

KINDS = [("softmax", None), ("softmax", 2), ("linear", None), ("performer", None)]


def test_docstring_example_runs():
    assert doctest.testmod(causal_decoder).failed == 0


def _generators(module):
    found = [v for v in vars(module).values() if isinstance(v, np.random.Generator)]
    for child in module.children.values():
        found += _generators(child)
    return found


@settings(max_examples=16)
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(KINDS), norm_first=st.booleans(),
       norm=st.sampled_from(["layer", "rms"]), activation=st.sampled_from(["gelu", "gelu_tanh", "relu"]),
       n=st.integers(1, 6), padded=st.booleans())
def test_gradients(seed, kind, norm_first, norm, activation, n, padded):
    rng = np.random.default_rng(seed)
    attention, relative = kind
    decoder = nn.CausalDecoder(2, 8, 2, 16, rng, dropout=0.2, attention=attention, relative_positions=relative,
                               n_features=8, norm_first=norm_first, norm=norm, activation=activation)
    decoder.astype(np.float64)
    x = rng.standard_normal((2, n, 8))
    lengths = rng.integers(1, n + 1, size=2) if padded else None
    generators = _generators(decoder)
    states = [g.bit_generator.state for g in generators]

    def forward():
        for g, state in zip(generators, states):
            g.bit_generator.state = state
        return decoder.forward(x, True, key_lengths=lengths)

    out, cache = forward()
    w = rng.standard_normal(out.shape)
    decoder.zero_grad()
    dx = decoder.backward(w, cache)
    params = dict(list((name, p) for name, p, _ in decoder.named_parameters())[::3])
    analytic = {"x": dx} | {name: g.copy() for name, _, g in decoder.named_parameters() if name in params}
    check_grad(lambda **_: float(np.sum(forward()[0] * w)), {"x": x} | params, analytic, rtol=1e-5, atol=1e-8,
               max_entries=6, rng=seed)


@pytest.mark.parametrize(("attention", "relative"), KINDS)
def test_output_at_t_ignores_inputs_after_t(attention, relative):
    rng = np.random.default_rng(3)
    decoder = nn.CausalDecoder(2, 8, 2, 16, rng, attention=attention, relative_positions=relative,
                               norm_first=False)
    x = rng.standard_normal((2, 7, 8))
    out = decoder.forward(x)[0]
    for t in range(6):
        changed = x.copy()
        changed[:, t + 1:] = 5 * rng.standard_normal(changed[:, t + 1:].shape)
        np.testing.assert_allclose(decoder.forward(changed)[0][:, : t + 1], out[:, : t + 1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("attention", "relative"), KINDS)
def test_padding_leaves_the_real_positions_alone(attention, relative):
    rng = np.random.default_rng(4)
    decoder = nn.CausalDecoder(2, 8, 2, 16, rng, attention=attention, relative_positions=relative).astype(np.float64)
    x = rng.standard_normal((2, 6, 8))
    out = decoder.forward(x, key_lengths=np.array([6, 3]))[0]
    np.testing.assert_allclose(out[1, :3], decoder.forward(x[1:, :3])[0][0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out[0], decoder.forward(x[:1])[0][0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("options", [{}, {"norm_first": False}, {"norm": "rms", "activation": "gelu"},
                                     {"norm_first": False, "norm": "rms", "norm_eps": 1e-12}])
@pytest.mark.parametrize(("attention", "relative"), KINDS)
def test_cached_decoding_equals_the_full_forward(attention, relative, options):
    rng = np.random.default_rng(5)
    decoder = nn.CausalDecoder(2, 8, 2, 16, rng, attention=attention, relative_positions=relative, n_features=16,
                               **options).astype(np.float64)
    x = rng.standard_normal((3, 9, 8))
    full = decoder.forward(x)[0]
    cache = decoder.start(3, capacity=2)  # the key/value buffers grow twice
    steps = []
    for t in range(9):
        assert cache.length == t
        out, cache = decoder.step(x[:, t : t + 1], cache)
        steps.append(out)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize(("attention", "relative"), KINDS)
def test_reordered_cache_continues_the_selected_rows(attention, relative, norm_first):
    rng = np.random.default_rng(6)
    decoder = nn.CausalDecoder(2, 8, 2, 16, rng, attention=attention, relative_positions=relative, n_features=16,
                               norm_first=norm_first).astype(np.float64)
    x = rng.standard_normal((3, 8, 8))
    cache = decoder.start(3)
    for t in range(3):
        decoder.step(x[:, t : t + 1], cache)
    for indices in (np.array([2, 0, 0, 1, 2]), np.array([1, 3])):  # repeat and permute, then drop rows
        before = cache
        cache = decoder.reorder(cache, indices)
        x = x[indices]
        assert cache.batch_size == indices.size and cache.length == before.length == 3
    steps = [decoder.step(x[:, t : t + 1], cache)[0] for t in range(3, 8)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), decoder.forward(x)[0][:, 3:], rtol=1e-12, atol=1e-13)


def test_layer_steps_over_its_own_cache():
    rng = np.random.default_rng(7)
    layer = nn.CausalDecoderLayer(8, 2, 16, rng, norm_first=False).astype(np.float64)
    x = rng.standard_normal((2, 4, 8))
    cache = layer.start(2)
    assert isinstance(cache, nn.SelfAttentionCache)
    steps = [layer.step(x[:, t : t + 1], cache)[0] for t in range(4)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), layer.forward(x)[0], rtol=1e-12, atol=1e-13)


def test_errors():
    rng = np.random.default_rng(8)
    decoder = nn.CausalDecoder(1, 8, 2, 16, rng)
    with pytest.raises(ValueError, match="batch_size must be"):
        decoder.start(0)
    with pytest.raises(ValueError, match="capacity"):
        decoder.start(2, capacity=0)
    with pytest.raises(ValueError, match=r"x must have shape \(batch_size=2, T >= 1, d_model=8\)"):
        decoder.step(np.zeros((3, 2, 8)), decoder.start(2))
    with pytest.raises(ValueError, match="n_layers"):
        nn.CausalDecoder(0, 8, 2, 16, rng)
    with pytest.raises(ValueError, match="position_bias needs attention='softmax'"):
        nn.CausalDecoder(1, 8, 2, 16, rng, attention="performer", relative_positions=2)


def _train_counting(seed, norm_first, steps=150):
    """A GPT-style model (token embedding with learned positions, causal stack, output layer) on sequences
    that count up from a random start modulo the vocabulary: every next token is predictable."""
    rng = np.random.default_rng(seed)
    vocab, length = 11, 8
    embedding = nn.TokenEmbedding(vocab, 32, rng, positional="learned", max_len=length, padding_idx=None,
                                  norm=None if norm_first else "layer")
    body = nn.CausalDecoder(1, 32, 2, 64, rng, dropout=0.0, norm_first=norm_first, activation="gelu")
    head = nn.Linear(32, vocab, rng)
    model = nn.Module()
    for name, child in (("embedding", embedding), ("body", body), ("head", head)):
        model.add_child(name, child)
    optimiser = nn.AdamW(model, lr=3e-3, weight_decay=0.0)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(steps):
        ids = (rng.integers(0, vocab, size=(32, 1)) + np.arange(length + 1)) % vocab
        x, c_embed = embedding.forward(ids[:, :-1], True)
        h, c_body = body.forward(x, True)
        logits, c_head = head.forward(h, True)
        _, c_loss = loss_fn.forward(logits, ids[:, 1:], training=True)
        model.zero_grad()
        embedding.backward(body.backward(head.backward(loss_fn.backward(1.0, c_loss), c_head), c_body), c_embed)
        optimiser.step()
    ids = (rng.integers(0, vocab, size=(64, 1)) + np.arange(length + 1)) % vocab
    logits = head.forward(body.forward(embedding.forward(ids[:, :-1])[0])[0])[0]
    return float(np.mean(logits.argmax(-1) == ids[:, 1:]))


@pytest.mark.parametrize("norm_first", [True, False])
def test_tiny_language_model_learns_to_count(norm_first):
    assert _train_counting(0, norm_first) > 0.95


@pytest.mark.parametrize("window", [0, 1, 3, 20])
@pytest.mark.parametrize("relative", [None, 2])
def test_a_window_drops_the_far_past_in_training_and_in_cached_decoding(window, relative):
    rng = np.random.default_rng(11)
    decoder = nn.CausalDecoder(2, 8, 2, 16, rng, relative_positions=relative, window=window).astype(np.float64)
    x = rng.standard_normal((2, 12, 8))
    full = decoder.forward(x)[0]
    # Position t reads positions t - window .. t in every layer: with 2 layers, nothing before t - 2 window.
    changed = x.copy()
    changed[:, :4] = rng.standard_normal((2, 4, 8))
    first_blind = 4 + 2 * window
    np.testing.assert_array_equal(decoder.forward(changed)[0][:, first_blind:], full[:, first_blind:])
    cache = decoder.start(2, capacity=1)
    steps = [decoder.step(x[:, t : t + 1], cache)[0] for t in range(12)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-12, atol=1e-13)
    for layer_cache in cache.layers:  # the rolling buffers hold window + 1 positions, however long the decoding
        keys, _ = layer_cache.keys_values()
        assert keys.shape[2] == min(window + 1, 12) and keys.base.shape[2] <= window + 1
    cache = decoder.reorder(cache, np.array([1, 1, 0]))
    more = decoder.step(x[[1, 1, 0], 0:1], cache)[0]
    reference = decoder.forward(np.concatenate([x[[1, 1, 0]], x[[1, 1, 0], 0:1]], axis=1))[0][:, -1:]
    np.testing.assert_allclose(more, reference, rtol=1e-12, atol=1e-13)


def test_window_gradients_and_errors():
    rng = np.random.default_rng(12)
    decoder = nn.CausalDecoder(1, 8, 2, 16, rng, dropout=0.0, window=2).astype(np.float64)
    x = rng.standard_normal((2, 7, 8))
    out, cache = decoder.forward(x, True)
    w = rng.standard_normal(out.shape)
    decoder.zero_grad()
    dx = decoder.backward(w, cache)
    check_grad(lambda x: float(np.sum(decoder.forward(x, True)[0] * w)), {"x": x}, {"x": dx}, rtol=1e-5, atol=1e-8)
    with pytest.raises(ValueError, match="window needs attention='softmax'"):
        nn.CausalDecoder(1, 8, 2, 16, rng, attention="linear", window=2)
    with pytest.raises(ValueError, match="window"):
        nn.CausalDecoder(1, 8, 2, 16, rng, window=-1)
    with pytest.raises(TypeError, match="window"):
        nn.CausalDecoder(1, 8, 2, 16, rng, window=2.5)
