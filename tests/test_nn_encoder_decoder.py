"""nn.encoder_decoder.EncoderDecoder: shapes, gradients of the whole model against finite differences in
float64 for every attention and positional kind, its pieces (encode, embed_target, project) against
its forward, and the attention weights it exposes."""

import numpy as np
import pytest

from attnkit import nn
from attnkit.nn.encoder_decoder import EncoderDecoder
from attnkit.testing import check_module_grad

SOURCE_VOCAB, TARGET_VOCAB = 11, 9


class _TeacherForcing(nn.Module):
    """``forward(target_in, training)`` for check_module_grad: the model with a fixed source batch."""

    def __init__(self, model, source, source_lengths):
        super().__init__()
        self.add_child("model", model)
        self.source, self.source_lengths = source, source_lengths

    def forward(self, target_in, training=False):
        return self.model.forward(self.source, self.source_lengths, target_in, training)

    def backward(self, grad, cache):
        return self.model.backward(grad, cache)


def _model(rng, **options):
    kw = dict(encoder_d_model=8, decoder_d_model=6, n_heads=2, encoder_layers=2, decoder_layers=2, d_ff=10,
              max_source_len=7, max_target_len=6, relative_window=2)
    return EncoderDecoder(SOURCE_VOCAB, TARGET_VOCAB, rng, **{**kw, **options})


def _batch(rng, m=7, n=5):
    """Padded source ids (3, m) with their lengths, and target inputs (3, n) starting with <bos> = 1."""
    lengths = np.array([m, 4, 1])
    source = np.where(np.arange(m) < lengths[:, None], rng.integers(1, SOURCE_VOCAB, size=(3, m)), 0)
    target_in = np.concatenate([np.ones((3, 1), np.int64), rng.integers(2, TARGET_VOCAB, size=(3, n - 1))], axis=1)
    return source, lengths, target_in


KINDS = [(attention, positional) for attention in ("softmax", "linear", "performer")
         for positional in ("sinusoidal", "learned", "relative", None)
         if positional != "relative" or attention == "softmax"]  # relative positions are logit biases


@pytest.mark.parametrize(("attention", "positional"), KINDS, ids=[f"{a}-{p}" for a, p in KINDS])
def test_gradients_of_every_parameter(attention, positional):
    rng = np.random.default_rng(0)
    model = _model(rng, attention=attention, positional=positional, dropout=0.2).astype(np.float64)
    source, lengths, target_in = _batch(rng)
    check_module_grad(_TeacherForcing(model, source, lengths), target_in, training=True, rtol=1e-5, atol=1e-8,
                      max_entries=3, rng=1)


@pytest.mark.parametrize(("attention", "positional"), KINDS, ids=[f"{a}-{p}" for a, p in KINDS])
def test_shapes_and_pieces_agree_with_forward(attention, positional):
    rng = np.random.default_rng(1)
    model = _model(rng, attention=attention, positional=positional).astype(np.float64)
    source, lengths, target_in = _batch(rng)
    logits, _ = model.forward(source, lengths, target_in)
    assert logits.shape == (3, 5, TARGET_VOCAB) and logits.dtype == np.float64
    memory, _ = model.encode(source, lengths)
    assert memory.shape == (3, 7, 8)  # the encoder's width
    y = model.embed_target(target_in)
    assert y.shape == (3, 5, 6)  # the decoder's width
    h, _ = model.decoder.forward(y, memory=memory, memory_lengths=lengths)
    np.testing.assert_array_equal(model.project(h), logits)
    # A continuation embedded at its offset is the same as the tail of the whole sequence.
    np.testing.assert_array_equal(model.embed_target(target_in[:, 2:], offset=2), y[:, 2:])


def test_padding_of_the_source_does_not_change_the_logits():
    rng = np.random.default_rng(2)
    model = _model(rng, max_source_len=10, positional="learned").astype(np.float64)
    source, lengths, target_in = _batch(rng)
    logits, _ = model.forward(source, lengths, target_in)
    wider = np.concatenate([source, np.zeros((3, 3), source.dtype)], axis=1)
    np.testing.assert_allclose(model.forward(wider, lengths, target_in)[0], logits, rtol=1e-12, atol=1e-12)


def test_logits_of_a_position_do_not_depend_on_later_targets():
    rng = np.random.default_rng(3)
    model = _model(rng).astype(np.float64)
    source, lengths, target_in = _batch(rng)
    logits, _ = model.forward(source, lengths, target_in)
    changed = target_in.copy()
    changed[:, 3:] = (changed[:, 3:] + 1) % TARGET_VOCAB
    np.testing.assert_allclose(model.forward(source, lengths, changed)[0][:, :3], logits[:, :3], rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("positional", ["sinusoidal", "relative"])
def test_attention_weights_are_distributions_over_the_visible_keys(positional):
    rng = np.random.default_rng(4)
    model = _model(rng, positional=positional).astype(np.float64)
    source, lengths, target_in = _batch(rng)
    maps = model.attention_weights(source, lengths, target_in)
    assert sorted(maps) == ["cross", "decoder", "encoder"]
    assert all(len(layers) == 2 for layers in maps.values())
    padded = np.arange(7) >= lengths[:, None, None, None]  # (3, 1, 1, M): keys past each source's length
    for weights in maps["encoder"]:
        assert weights.shape == (3, 2, 7, 7)
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
        assert np.all(weights[np.broadcast_to(padded, weights.shape)] == 0)
    for weights in maps["decoder"]:
        assert weights.shape == (3, 2, 5, 5)
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
        assert np.all(np.triu(weights, k=1) == 0)  # causal: no query sees a later position
    for weights in maps["cross"]:
        assert weights.shape == (3, 2, 5, 7)
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
        assert np.all(weights[np.broadcast_to(padded, weights.shape)] == 0)


def test_attention_weights_need_softmax_attention():
    rng = np.random.default_rng(5)
    model = _model(rng, attention="linear")
    with pytest.raises(ValueError, match="return_weights needs attention='softmax'"):
        model.attention_weights(*_batch(rng))


def test_an_unknown_positional_kind_is_refused():
    with pytest.raises(ValueError, match=r"positional must be one of \('sinusoidal', 'learned', 'relative', None\), "
                                         "got 'rotary'"):
        _model(np.random.default_rng(6), positional="rotary")
