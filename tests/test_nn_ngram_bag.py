"""nn.NgramBag: the n-grams it counts, padding and position independence, gradients."""

import doctest
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit import nn
from attnkit.nn import ngram_bag
from attnkit.testing import check_module_grad


class _WithLengths(nn.Module):
    """``forward(ids, training)`` for check_module_grad: the bag with fixed lengths."""

    def __init__(self, bag, lengths):
        super().__init__()
        self.add_child("bag", bag)
        self.lengths = lengths

    def forward(self, ids, training=False):
        return self.bag.forward(ids, training, lengths=self.lengths)

    def backward(self, grad, cache):
        return self.bag.backward(grad, cache)


def _ngrams(tokens, order):
    return Counter(tuple(tokens[i:i + n]) for n in range(1, order + 1) for i in range(len(tokens) - n + 1))


def _bucket_of(bag, ngram):
    """The bucket NgramBag gives one n-gram: the last feature of a sequence holding just it."""
    buckets, _, _ = bag.features(np.array([ngram]), np.array([len(ngram)]))
    return buckets[-1]


def _random_bag(rng, n_outputs, order, buckets):
    bag = nn.NgramBag(n_outputs, order=order, buckets=buckets).astype(np.float64)
    bag.params["table"][...] = rng.standard_normal(bag.params["table"].shape)
    return bag


def test_docstring_example_runs():
    assert doctest.testmod(ngram_bag).failed == 0


@given(seed=st.integers(0, 2**32 - 1), order=st.integers(1, 3), n=st.integers(1, 7))
def test_output_is_the_normalised_sum_over_the_real_ngrams(seed, order, n):
    rng = np.random.default_rng(seed)
    bag = _random_bag(rng, 2, order, 97)
    ids = rng.integers(1, 6, size=(3, n))
    lengths = rng.integers(0, n + 1, size=3)
    out, _ = bag.forward(ids, lengths=lengths)
    for b in range(3):
        counts = _ngrams(ids[b, :lengths[b]].tolist(), order)
        expected = sum((c * bag.params["table"][_bucket_of(bag, list(g))] for g, c in counts.items()),
                       np.zeros(2))
        np.testing.assert_allclose(out[b], expected / np.sqrt(max(sum(counts.values()), 1)), atol=1e-12)


def test_padding_is_ignored_and_word_order_counts():
    bag = nn.NgramBag(1, order=2, buckets=2**18)
    bag.params["table"][...] = np.random.default_rng(0).standard_normal(bag.params["table"].shape)
    a, _ = bag.forward(np.array([[4, 5, 0, 0], [4, 5, 9, 9]]), lengths=np.array([2, 2]))
    np.testing.assert_array_equal(a[0], a[1])
    # "not good" and "good not" share their words but not their word pair.
    b, _ = bag.forward(np.array([[4, 5], [5, 4]]), lengths=np.array([2, 2]))
    assert b[0, 0] != b[1, 0]
    unigrams = nn.NgramBag(1, order=1, buckets=2**18)
    unigrams.params["table"][...] = bag.params["table"]
    c, _ = unigrams.forward(np.array([[4, 5], [5, 4]]), lengths=np.array([2, 2]))
    np.testing.assert_allclose(c[0], c[1], rtol=1e-6)


def test_distinct_words_get_distinct_buckets():
    # A word's row is its id modulo buckets: no collisions below the table size.
    bag = nn.NgramBag(1, order=1, buckets=1000)
    buckets, _, _ = bag.features(np.arange(1000)[None, :], np.array([1000]))
    assert np.unique(buckets).size == 1000


@given(seed=st.integers(0, 2**32 - 1), order=st.integers(1, 3), n=st.integers(1, 5))
def test_gradients(seed, order, n):
    rng = np.random.default_rng(seed)
    bag = _random_bag(rng, 3, order, 11)
    lengths = rng.integers(0, n + 1, size=4)
    check_module_grad(_WithLengths(bag, lengths), rng.integers(1, 8, size=(4, n)), rng=seed)


def test_errors():
    with pytest.raises(ValueError, match="order"):
        nn.NgramBag(2, order=0)
    with pytest.raises(ValueError, match="buckets"):
        nn.NgramBag(2, buckets=0)
    with pytest.raises(ValueError, match="2-D integer array"):
        nn.NgramBag(2).forward(np.zeros((2, 3)), lengths=np.array([1, 1]))
    with pytest.raises(ValueError, match=r"lengths must have shape \(2,\)"):
        nn.NgramBag(2).forward(np.zeros((2, 3), dtype=int), lengths=np.array([1]))
