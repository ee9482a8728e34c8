"""nn.masked_lm: BERT's token corruption and the output layer tied to the embedding table."""

import doctest

import numpy as np
import pytest

from attnkit import nn
from attnkit.nn import masked_lm
from attnkit.testing import check_grad


def test_docstring_example_runs():
    assert doctest.testmod(masked_lm).failed == 0


def test_tied_output_gradients_reach_the_table():
    rng = np.random.default_rng(0)
    table = nn.Embedding(7, 4, rng=1).astype(np.float64)
    layer = nn.TiedOutput(table).astype(np.float64)
    layer.params["bias"][...] = rng.standard_normal(7)
    h, w = rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 2, 7))
    out, cache = layer.forward(h)
    np.testing.assert_allclose(out, h @ table.params["weight"].T / 2.0 + layer.params["bias"])
    dh = layer.backward(w, cache)
    inputs = {"h": h, "table": table.params["weight"], "bias": layer.params["bias"]}
    analytic = {"h": dh, "table": table.grads["weight"].copy(), "bias": layer.grads["bias"].copy()}
    check_grad(lambda: np.sum(layer.forward(h)[0] * w), inputs, analytic)
    assert [name for name, _, _ in layer.named_parameters()] == ["bias"]  # the table stays the embedding's


def test_tied_output_needs_an_embedding():
    with pytest.raises(TypeError, match="embedding must be an attnkit.nn.Embedding"):
        nn.TiedOutput(nn.Linear(2, 3, rng=0))


def test_mask_tokens_picks_ordinary_real_tokens_in_bert_proportions():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 100, size=(400, 50))
    ids[:, 0] = 2  # <cls>
    lengths = rng.integers(1, 51, size=400)
    corrupted, picked = nn.mask_tokens(ids, lengths, rng, vocab_size=100, mask_id=1, first_ordinary_id=5)
    real = np.arange(50) < lengths[:, None]
    assert not picked[:, 0].any() and not picked[~real].any()
    assert np.array_equal(corrupted[~picked], ids[~picked])
    share = picked.sum() / (real.sum() - 400)
    assert 0.14 < share < 0.16
    masked = corrupted[picked] == 1
    kept = corrupted[picked] == ids[picked]
    assert 0.78 < masked.mean() < 0.82 and 0.09 < kept.mean() < 0.12  # kept includes random draws of itself
    assert corrupted[picked].min() >= 1 and corrupted[picked].max() < 100


def test_mask_tokens_always_picks_one_when_it_can():
    rng = np.random.default_rng(0)
    for _ in range(20):
        _, picked = nn.mask_tokens(np.array([[2, 7]]), np.array([2]), rng, vocab_size=10, mask_id=1,
                                   first_ordinary_id=5, probability=0.01)
        assert picked.tolist() == [[False, True]]
    _, picked = nn.mask_tokens(np.array([[2, 0]]), np.array([1]), rng, vocab_size=10, mask_id=1,
                               first_ordinary_id=5)
    assert not picked.any()
    with pytest.raises(ValueError, match=r"probability must be in \(0, 1\]"):
        nn.mask_tokens(np.array([[5]]), np.array([1]), rng, vocab_size=10, mask_id=1, first_ordinary_id=5,
                       probability=0.0)
