"""nn.SequenceClassifier and Encoder.attention_weights: gradients of the whole network against finite
differences for every variant, padding invariance, and the attention weights it exposes."""

import doctest

import numpy as np
import pytest

from attnkit import nn
from attnkit.nn import sequence_classifier
from attnkit.testing import check_module_grad


class _WithLengths(nn.Module):
    """``forward(ids, training)`` for check_module_grad: the network with fixed lengths."""

    def __init__(self, network, lengths):
        super().__init__()
        self.add_child("network", network)
        self.lengths = lengths

    def forward(self, ids, training=False):
        return self.network.forward(ids, training, lengths=self.lengths)

    def backward(self, grad, cache):
        return self.network.backward(grad, cache)


def _batch(rng, n=5, vocab=11):
    lengths = np.array([n, 3, 1])
    ids = np.where(np.arange(n) < lengths[:, None], rng.integers(1, vocab, size=(3, n)), 0)
    return ids, lengths


def test_docstring_example_runs():
    assert doctest.testmod(sequence_classifier).failed == 0


@pytest.mark.parametrize(
    "options",
    [{}, {"pooling": "mean"}, {"pooling": "max"}, {"positional": "learned"}, {"positional": "relative"},
     {"positional": None}, {"attention": "linear"}, {"attention": "performer"}],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) or "default",
)
def test_gradients_of_every_parameter(options):
    rng = np.random.default_rng(0)
    network = nn.SequenceClassifier(11, 3, rng, d_model=8, n_heads=2, n_layers=2, d_ff=12, dropout=0.2, max_len=5,
                                    relative_distance=2, **options).astype(np.float64)
    ids, lengths = _batch(rng)
    check_module_grad(_WithLengths(network, lengths), ids, training=True, rtol=1e-5, atol=1e-8, max_entries=4, rng=1)


@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_padding_does_not_change_the_logits(pooling):
    rng = np.random.default_rng(1)
    network = nn.SequenceClassifier(11, 2, rng, d_model=8, n_heads=2, d_ff=12, pooling=pooling)
    ids, lengths = _batch(rng)
    logits, _ = network.forward(ids, lengths=lengths)
    wider = np.concatenate([ids, np.zeros((3, 4), dtype=ids.dtype)], axis=1)
    np.testing.assert_allclose(network.forward(wider, lengths=lengths)[0], logits, rtol=1e-5, atol=1e-6)
    for row in range(3):
        alone, _ = network.forward(ids[row : row + 1, : lengths[row]], lengths=lengths[row : row + 1])
        np.testing.assert_allclose(alone[0], logits[row], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bag", [0, 2])
def test_inference_logits_equal_the_forward_pass(bag):
    net = nn.SequenceClassifier(11, 3, 0, d_model=8, n_heads=2, d_ff=12, bag_ngrams=bag, pooling="mean")
    ids, lengths = np.array([[1, 4, 6, 2], [1, 5, 0, 0]]), np.array([4, 2])
    np.testing.assert_array_equal(net.logits(ids, lengths=lengths), net.forward(ids, lengths=lengths)[0])


def test_features_feed_the_head():
    rng = np.random.default_rng(2)
    network = nn.SequenceClassifier(11, 2, rng, d_model=8, n_heads=2, d_ff=12)
    ids, lengths = _batch(rng)
    pooled, _ = network.features(ids, lengths=lengths)
    logits, _ = network.forward(ids, lengths=lengths)
    head = network.head
    np.testing.assert_allclose(logits, pooled @ head.params["weight"] + head.params["bias"], rtol=1e-5, atol=1e-6)


def test_attention_weights_match_the_forward_pass():
    rng = np.random.default_rng(3)
    encoder = nn.Encoder(2, 8, 2, 12, rng)
    x, lengths = rng.standard_normal((3, 5, 8)), np.array([5, 3, 1])
    out, weights = encoder.attention_weights(x, key_lengths=lengths)
    np.testing.assert_allclose(out, encoder.forward(x, key_lengths=lengths)[0], rtol=1e-12)
    assert [w.shape for w in weights] == [(3, 2, 5, 5)] * 2
    for w in weights:
        np.testing.assert_allclose(w[1, :, :, :3].sum(axis=-1), 1.0, rtol=1e-12)
        assert not w[1, :, :, 3:].any()  # padded keys get no weight


def test_attention_weights_of_the_network():
    rng = np.random.default_rng(4)
    network = nn.SequenceClassifier(11, 2, rng, d_model=8, n_heads=2, n_layers=3, d_ff=12)
    ids, lengths = _batch(rng)
    weights = network.attention_weights(ids, lengths=lengths)
    assert len(weights) == 3 and weights[0].shape == (3, 2, 5, 5)
    linear = nn.SequenceClassifier(11, 2, rng, d_model=8, n_heads=2, d_ff=12, attention="linear")
    with pytest.raises(ValueError, match="return_weights needs attention='softmax'"):
        linear.attention_weights(ids, lengths=lengths)


def test_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="positional must be one of"):
        nn.SequenceClassifier(5, 2, rng, d_model=8, n_heads=2, positional="rotary")
    with pytest.raises(ValueError, match="n_classes must be >= 1"):
        nn.SequenceClassifier(5, 0, rng, d_model=8, n_heads=2)
