"""nn.TextEncoder: token ids to contextual vectors, attnkit's own encoder and BERT's shape; gradients against
finite differences, truncation, token types and padding."""

import numpy as np
import pytest

from attnkit import nn
from attnkit.testing import check_module_grad

BERT_SHAPE = dict(positional="learned", n_positions=12, n_token_types=2, embedding_norm="layer", norm_first=False,
                  norm_eps=1e-12, activation="gelu")


class _Encoded(nn.Module):
    """``forward(ids, training)`` for check_module_grad: the encoder with fixed lengths and token types."""

    def __init__(self, encoder, lengths, token_types):
        super().__init__()
        self.add_child("encoder", encoder)
        self.lengths, self.token_types = lengths, token_types

    def forward(self, ids, training=False):
        return self.encoder.encode(ids, training, lengths=self.lengths, token_types=self.token_types)

    def backward(self, grad, cache):
        return self.encoder.backward_encode(grad, cache)


@pytest.mark.parametrize("options", [{}, BERT_SHAPE, {**BERT_SHAPE, "norm": "rms", "activation": "gelu_tanh"}],
                         ids=["attnkit", "bert", "bert-rms"])
def test_gradients(options):
    rng = np.random.default_rng(0)
    encoder = nn.TextEncoder(13, rng, d_model=8, n_heads=2, n_layers=2, d_ff=12, max_len=6, **options)
    ids = np.array([[2, 5, 7, 9, 11, 3, 4], [2, 6, 8, 3, 0, 0, 0]])  # the first is cut to max_len=6
    types = np.array([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]]) if options.get("n_token_types") else None
    check_module_grad(_Encoded(encoder.astype(np.float64), np.array([7, 4]), types), ids, training=True, rtol=1e-5,
                      atol=1e-8, max_entries=4, rng=1)


def test_truncation_reads_the_first_max_len_tokens_of_a_longer_position_table():
    encoder = nn.TextEncoder(13, 0, d_model=8, n_heads=2, n_layers=1, d_ff=12, max_len=4, dropout=0.0, **BERT_SHAPE)
    assert encoder.embedding.positions.params["weight"].shape == (12, 8)
    ids, types = np.array([[2, 5, 7, 9, 11, 3]]), np.array([[0, 0, 1, 1, 1, 1]])
    out, _ = encoder.encode(ids, lengths=np.array([6]), token_types=types)
    alone, _ = encoder.encode(ids[:, :4], lengths=np.array([4]), token_types=types[:, :4])
    assert out.shape == (1, 4, 8)
    np.testing.assert_array_equal(out, alone)
    weights = encoder.attention_weights(ids, lengths=np.array([6]), token_types=types)
    assert weights[0].shape == (1, 2, 4, 4)
    np.testing.assert_allclose(weights[0].sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("options", [{}, BERT_SHAPE], ids=["attnkit", "bert"])
def test_infer_equals_the_training_path_without_its_caches(options):
    encoder = nn.TextEncoder(13, 0, d_model=8, n_heads=2, n_layers=3, d_ff=12, max_len=5, **options)
    ids, lengths = np.array([[2, 5, 7, 9, 11, 3], [2, 6, 3, 0, 0, 0]]), np.array([6, 3])
    types = np.array([[0, 0, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0]]) if options else None
    out, _ = encoder.encode(ids, lengths=lengths, token_types=types)
    real = np.arange(5) < np.minimum(lengths, 5)[:, None]
    for runner in (None, encoder.inference_runner()):
        inferred = encoder.infer(ids, lengths=lengths, token_types=types, runner=runner)
        np.testing.assert_array_equal(inferred[real], out[real])  # bit for bit at the real tokens
        assert not inferred[~real].any()  # the packed runner leaves padding positions at zero


def test_ff_dropout_replaces_the_dropout_inside_the_feed_forward_only():
    rng = np.random.default_rng(0)
    plain = nn.TextEncoder(13, 0, d_model=8, n_heads=2, n_layers=1, d_ff=12, dropout=0.1)
    bert = nn.TextEncoder(13, 0, d_model=8, n_heads=2, n_layers=1, d_ff=12, dropout=0.1, ff_dropout=0.0)
    layer = bert.encoder.layer0
    assert layer.feed_forward.sublayer.dropout.p == 0.0
    assert layer.feed_forward.dropout.p == 0.1
    for name, param in plain.state_dict().items():  # the same draws: only a rate differs
        np.testing.assert_array_equal(bert.state_dict()[name], param)
    ids = rng.integers(1, 13, (2, 5))
    with pytest.raises(ValueError, match="p must be in"):
        nn.TextEncoder(13, 0, ff_dropout=1.0)
    assert np.isfinite(bert.encode(ids, training=True, lengths=np.array([5, 3]))[0]).all()


def test_padding_and_token_types():
    encoder = nn.TextEncoder(13, 0, d_model=8, n_heads=2, n_layers=2, d_ff=12, dropout=0.0, **BERT_SHAPE)
    ids = np.array([[2, 5, 7, 3, 0, 0]])
    short, _ = encoder.encode(ids[:, :4], lengths=np.array([4]))
    padded, _ = encoder.encode(ids, lengths=np.array([4]))
    np.testing.assert_allclose(padded[:, :4], short, rtol=1e-6, atol=1e-6)  # padding keys are skipped
    second, _ = encoder.encode(ids, lengths=np.array([4]), token_types=np.ones_like(ids))
    assert not np.allclose(second[:, :4], short)  # the segment embedding counts


def test_errors():
    with pytest.raises(ValueError, match="positional must be one of"):
        nn.TextEncoder(13, 0, positional="rotary")
    with pytest.raises(ValueError, match="n_positions must be >= 1"):
        nn.TextEncoder(13, 0, n_positions=0, positional="learned")
