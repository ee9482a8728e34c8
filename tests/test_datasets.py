"""attnkit.datasets: the negation task is balanced, reproducible, and defeats bag-of-words models."""

import doctest
import re

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from attnkit import datasets
from attnkit.datasets import CASE_WORDS, NEGATIVE_WORDS, POSITIVE_WORDS, make_case_pairs, make_negation_sentences


def test_docstring_example_runs():
    assert doctest.testmod(datasets).failed == 0


def test_reproducible_and_balanced():
    texts, labels = make_negation_sentences(2000, random_state=0)
    again, same = make_negation_sentences(2000, random_state=0)
    assert texts == again and np.array_equal(labels, same)
    assert make_negation_sentences(50, random_state=1)[0] != texts[:50]
    assert 0.45 < labels.mean() < 0.55 and labels.dtype == np.int64


def _polarity(word):
    return 1 if word in POSITIVE_WORDS else 0 if word in NEGATIVE_WORDS else None


def test_label_is_the_polarity_of_the_adjective_that_is_not_negated():
    texts, labels = make_negation_sentences(500, random_state=2)
    for text, label in zip(texts, labels):
        clauses = re.split(r" and | , ", text)
        for clause in clauses:
            adjective = [w for w in clause.split() if _polarity(w) is not None]
            assert len(adjective) == 1
            polarity = _polarity(adjective[0])
            assert (polarity if "not" not in clause.split() else 1 - polarity) == label, text


def test_bag_of_words_and_bigrams_fail():
    texts, labels = make_negation_sentences(4000, random_state=0)
    model = make_pipeline(CountVectorizer(ngram_range=(1, 2), token_pattern=r"\S+"), LogisticRegression(C=1.0))
    assert model.fit(texts[:3000], labels[:3000]).score(texts[3000:], labels[3000:]) < 0.6


def test_case_pairs():
    X, y = make_case_pairs(200, random_state=0)
    assert len(X) == len(y) == 200
    assert (X, y) == make_case_pairs(200, random_state=0)
    for source, target in zip(X, y):
        tag, sentence = source[:4], source[4:]
        assert tag in ("<U> ", "<L> ")
        assert target == (sentence.upper() if tag == "<U> " else sentence.lower())
        assert 3 <= len(sentence.split()) <= 6 and all(w.lower() in CASE_WORDS for w in sentence.split())
    assert {x[:3] for x in X} == {"<U>", "<L>"}


def test_bad_arguments_are_named():
    import pytest

    cases = [(lambda: make_negation_sentences(-1), ValueError, "n_samples must be >= 0"),
             (lambda: make_negation_sentences(2.5), TypeError, "n_samples must be an integer"),
             (lambda: make_case_pairs(-1), ValueError, "n_samples must be >= 0"),  # it returned [] silently
             (lambda: make_case_pairs(5, min_words=5, max_words=2), ValueError, "max_words must be >= 5"),
             (lambda: make_case_pairs(5, min_words=0), ValueError, "min_words must be >= 1"),
             (lambda: make_case_pairs(5, min_words=1.5), TypeError, "min_words must be an integer"),
             (lambda: make_negation_sentences(3, random_state=-1), ValueError, "'random_state' parameter of "
                                                                               "make_negation_sentences")]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
    assert make_negation_sentences(0)[0] == [] and make_case_pairs(0) == ([], [])
