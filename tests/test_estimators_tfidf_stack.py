"""The TF-IDF stack of TransformerClassifier: its features equal scikit-learn's TfidfVectorizer's on the same
n-grams, its weights are fitted on held-out texts, and its arrays round-trip."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import TfidfVectorizer

from attnkit.estimators._tfidf_stack import MIN_DF, TfidfStack, _fit_weights, _ngrams, _tfidf, _vocabulary

BASE = 7  # ids 0..6


def ngram_strings(doc):
    return [str(a) for a in doc] + [f"{a} {b}" for a, b in zip(doc[:-1], doc[1:], strict=False)]


def sklearn_tfidf(train, docs):
    vectorizer = TfidfVectorizer(analyzer=ngram_strings, min_df=MIN_DF, sublinear_tf=True).fit(train)
    return vectorizer.transform(docs).toarray(), vectorizer


def attnkit_tfidf(train, docs):
    """The stack's features and the keys of their columns."""
    keys, idf = _vocabulary(_ngrams(train, BASE), len(train))
    return _tfidf(_ngrams(docs, BASE), keys, idf, len(docs)).toarray(), keys


def key_string(key):
    return str(key) if key < BASE else f"{key // BASE - 1} {key % BASE}"


docs_strategy = st.lists(st.lists(st.integers(0, BASE - 1), min_size=0, max_size=12), min_size=4, max_size=20)


@settings(max_examples=40, deadline=None)
@given(docs_strategy, docs_strategy)
def test_features_equal_tfidf_vectorizers_on_the_same_ngrams(train, docs):
    train = train + [[0, 1, 2], [0, 1, 2]]  # some n-gram passes min_df
    theirs, vectorizer = sklearn_tfidf(train, docs)
    ours, keys = attnkit_tfidf(train, docs)
    columns = [vectorizer.vocabulary_[key_string(k)] for k in keys]
    assert sorted(columns) == list(range(theirs.shape[1]))
    np.testing.assert_allclose(ours, theirs[:, columns], atol=1e-12)


def test_texts_of_no_known_ngram_are_zero_rows():
    ours, _ = attnkit_tfidf([[1, 2], [1, 2], [3], [4]], [[], [5, 6], [1, 2]])
    assert not ours[:2].any() and np.isclose(np.linalg.norm(ours[2]), 1.0)


def separable(n, rng):
    """Texts whose class is whether id 1 or id 2 is in them, among noise ids 3..6."""
    codes = np.arange(n) % 2
    docs = [list(rng.integers(3, BASE, size=5)) + [1 + c] for c in codes]
    return docs, codes


def test_the_linear_model_gets_the_weight_where_the_network_knows_nothing():
    rng = np.random.default_rng(0)
    docs, codes = separable(60, rng)
    val_docs, val_codes = separable(20, rng)
    uniform = np.log(np.full((20, 2), 0.5))
    stack = TfidfStack.fit(docs, codes, np.ones(60), 2, BASE, validation=(val_docs, val_codes, np.ones(20), uniform),
                           random_state=0)
    assert stack.weights[1] > 1
    assert np.array_equal(stack.combine(val_docs, uniform).argmax(1), val_codes)
    np.testing.assert_allclose(np.exp(stack.combine(val_docs, uniform)).sum(1), 1.0)


def test_a_linear_model_that_knows_nothing_gets_no_weight():
    rng = np.random.default_rng(1)
    docs = [list(rng.integers(3, BASE, size=5)) for _ in range(60)]  # ids unrelated to the classes
    codes = np.arange(60) % 2
    val_codes = np.arange(40) % 2
    network = np.log(np.where(np.eye(2)[val_codes] > 0, 0.9, 0.1))  # a network right at 90% confidence
    stack = TfidfStack.fit(docs, codes, np.ones(60), 2, BASE, random_state=0,
                           validation=([list(rng.integers(3, BASE, size=5)) for _ in range(40)], val_codes,
                                       np.ones(40), network))
    assert stack.weights[0] > 1 and stack.weights[1] < 0.2


def test_weights_are_the_least_log_loss_ones():
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 3, size=200)
    net = np.log(rng.dirichlet(np.ones(3), size=200))
    linear = np.log(rng.dirichlet(np.ones(3), size=200))
    linear[np.arange(200), codes] += 1.0  # the linear model knows something
    linear -= np.log(np.exp(linear).sum(1, keepdims=True))
    weights = _fit_weights(net, linear, codes, np.ones(200))

    def loss(w):
        z = w[0] * net + w[1] * linear
        return -np.mean(z[np.arange(200), codes] - np.log(np.exp(z).sum(1)))

    assert all(loss(weights) <= loss(weights + step) + 1e-9
               for step in ([1e-3, 0], [-1e-3, 0], [0, 1e-3], [0, -1e-3]))


def test_three_classes_and_sample_weights():
    rng = np.random.default_rng(3)
    codes = np.arange(90) % 3
    docs = [list(rng.integers(4, BASE, size=4)) + [1 + c] for c in codes]
    weights = np.where(codes == 2, 0.0, 1.0)  # class 2 weighs nothing: the stack cannot score it
    validation = (docs[:9], codes[:9], np.ones(9), np.log(np.full((9, 3), 1 / 3)))
    assert TfidfStack.fit(docs, codes, weights, 3, BASE, validation=validation, random_state=0) is None
    stack = TfidfStack.fit(docs, codes, np.ones(90), 3, BASE, validation=validation, random_state=0)
    assert stack.coef.shape[0] == 3 and np.array_equal(stack.linear_log_proba(docs[:9]).argmax(1), codes[:9])


def test_arrays_round_trip():
    rng = np.random.default_rng(4)
    docs, codes = separable(40, rng)
    stack = TfidfStack.fit(docs, codes, np.ones(40), 2, BASE, random_state=0,
                           validation=(docs[:10], codes[:10], np.ones(10), np.log(np.full((10, 2), 0.5))))
    again = TfidfStack.from_arrays(stack.arrays(), BASE)
    net = np.log(np.full((40, 2), 0.5))
    np.testing.assert_array_equal(again.combine(docs, net), stack.combine(docs, net))


def test_too_few_texts_of_a_class_for_cross_validation():
    docs, codes = [[1, 2], [1, 3], [1, 4]], np.array([0, 0, 1])
    assert TfidfStack.fit(docs, codes, np.ones(3), 2, BASE, random_state=0,
                          validation=(docs, codes, np.ones(3), np.log(np.full((3, 2), 0.5)))) is None
