"""Fuzzing the estimators' fit / predict / transform with hostile input (the ops: test_fuzz_ops.py).

Text that is empty, only whitespace, emoji, combining marks, zero-width or control characters, lone
surrogates, right-to-left overrides or 100,000 characters long; collections that are no collection
of strings; token-id arrays with negative, huge, fractional or non-finite ids; mismatched lengths.
A call returns what its docstring promises (checked below) or raises a ValueError / TypeError
naming the argument (hostile.outcome). Models are tiny and fitted once per module.
"""

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import RandomFourierFeatures, Seq2SeqTransformer, TransformerClassifier
from hostile import (
    REFUSED,
    arrays,
    finite,
    no_hang,  # noqa: F401 (an autouse fixture)
    outcome,
    perturbed,
)

# Seq2Seq says when it cuts a source past max_source_len (some edge texts are that long on purpose): a notice, not a
# failure (hostile.outcome lets it pass the same way).
pytestmark = pytest.mark.filterwarnings("ignore:.* sources are longer than max_source_len:UserWarning")

EDGE_TEXTS = ["", " ", "\t\n \r", "😀🎉", "👩‍👩‍👧 family", "e\u0301\u0301\u0301", "a" + "\u0300" * 1000, "x" * 100_000,
              "word " * 20_000, "\u200b\u200d", "\x00\x01", "\ud800 lone surrogate", "ﬁ İ ß Σ", "\u202e abc",
              "\U0010ffff", "don't stop", "١٢٣ ٤٥٦", "日本語のテキスト"]
texts = st.one_of(st.sampled_from(EDGE_TEXTS), st.text(max_size=40))
# What the text estimators refuse as X: a single string, bytes, numbers, missing values, dicts, 2-D.
NOT_TEXTS = st.sampled_from([None, "one string", b"bytes", 5, [None], [float("nan")], [b"x"], [1, "a"], {"a": 1},
                             np.array([["a", "b"]]), [["a", "b"]], [object()]])
# scikit-learn's validate_data (the token-id route, RandomFourierFeatures) words some refusals its own way,
# as for every scikit-learn estimator: they are left as they are.
SKLEARN_WORDS = ("Complex data", "could not convert", "Found array with", "Expected 2D array", "inhomogeneous shape",
                 "float() argument")
SMALL_CLASSIFIER = dict(d_model=8, n_heads=2, n_layers=1, d_ff=8, max_iter=1, early_stopping=False, batch_size=4,
                        random_state=0)
SMALL_SEQ2SEQ = dict(d_model=8, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=8, max_iter=1, dropout=0.0,
                     early_stopping=False, random_state=0, max_source_len=32, max_target_len=8)


def as_list(X):
    """The texts of a collection that :func:`collections` drew, as a list of str."""
    return list(np.asarray(X, dtype=object).reshape(-1))


def collections(items):
    """The collections a text estimator takes: list, tuple, 1-D object array, one-column array."""
    return st.lists(items, max_size=6).flatmap(lambda xs: st.sampled_from([
        xs, tuple(xs), np.array(xs, dtype=object), np.array(xs, dtype=object).reshape(-1, 1)]))


@pytest.fixture(scope="module")
def classifier():
    X = ["a good movie", "a bad movie", "great fun", "awful and dull", "", "😀 good"]
    return TransformerClassifier(**SMALL_CLASSIFIER).fit(X, [1, 0, 1, 0, 0, 1])


@pytest.fixture(scope="module")
def id_classifier():
    ids = np.array([[5, 6, 0], [7, 8, 9], [5, 0, 0], [9, 9, 9]])
    return TransformerClassifier(**SMALL_CLASSIFIER).fit(ids, ["yes", "no", "yes", "no"])


@pytest.fixture(scope="module")
def seq2seq():
    return Seq2SeqTransformer(**SMALL_SEQ2SEQ).fit(["ab", "cd", "e f", ""], ["AB", "CD", "E F", ""])


@given(X=collections(texts))
def test_classifier_predicts_any_text(classifier, X):
    n = len(X)
    proba = classifier.predict_proba(X)
    assert proba.shape == (n, 2) and np.all(np.isfinite(proba)) and np.allclose(proba.sum(axis=1), 1)
    assert set(classifier.predict(X)) <= set(classifier.classes_)
    features = copy.deepcopy(classifier).set_params(features="pooled+scores").transform(X)
    assert features.shape == (n, 8 + 2) and np.all(np.isfinite(features))
    assert [m["weights"].shape[-1] for m in classifier.attention_maps(X)] == \
        [len(m["tokens"]) for m in classifier.attention_maps(X)]
    if n:  # batching never changes an answer: the first text alone gives the same probabilities
        np.testing.assert_allclose(classifier.predict_proba(as_list(X)[:1]), proba[:1], rtol=1e-5, atol=1e-6)


@given(X=NOT_TEXTS, method=st.sampled_from(["predict", "predict_proba", "transform", "attention_maps"]))
def test_classifier_refuses_what_is_not_text(classifier, X, method):
    _, error = outcome(lambda: getattr(classifier, method)(X), ("X",))
    assert error is not None


@settings(max_examples=25)  # each valid example trains a tiny model
@given(X=collections(texts), data=st.data())
def test_classifier_fit(X, data):
    n = len(X)
    y = data.draw(st.one_of(
        st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n), st.lists(st.sampled_from(["a", "é"]), min_size=n,
                                                                            max_size=n),
        st.lists(st.sampled_from([0, 1]), max_size=7),
        st.sampled_from([[1.0, np.nan], [1, None], [[1, 2]], None, "ab", [0.5, 1.5]])), label="y")
    sample_weight = data.draw(st.one_of(st.none(), st.lists(st.floats(0, 2), min_size=n, max_size=n),
                                        st.sampled_from([[1.0, np.inf], [-1.0], "w", [[1.0]]])), label="sample_weight")
    model = TransformerClassifier(**SMALL_CLASSIFIER)
    fitted, error = outcome(lambda: model.fit(X, y, sample_weight=sample_weight), ("X", "y", "sample_weight"),
                            [y, sample_weight])
    if error is None:
        assert len(fitted.classes_) >= 2 and set(fitted.predict(X)) <= set(fitted.classes_)


def unknown_as_one_id(X, vocabulary, padding_id=0):
    """``X`` with every id outside the vocabulary (and not padding) replaced by one such id."""
    X = np.asarray(X).astype(np.int64)
    known = np.isin(X, [t for t in vocabulary if isinstance(t, int)]) | (X == padding_id)
    return np.where(known, X, 10**6)


@given(X=st.one_of(
    arrays((2, 3), (np.int64, np.int32, np.uint8, np.float64, np.float16, np.bool_)),
    st.lists(st.lists(st.sampled_from([-(2**63), -5, 0, 5, 6, 9, 2**40, 2**63 - 1]), min_size=3, max_size=3),
             min_size=1, max_size=3).map(np.array),
    st.sampled_from([np.array([[2**64 - 1, 5, 0]], np.uint64), np.array([[1.5, 5, 0]]), np.array([[np.nan, 5, 0]]),
                     np.array([[1e300, 5, 0]]), np.zeros((0, 3), int), np.zeros((2, 0), int), np.zeros((1, 4), int),
                     np.zeros(3, int), np.zeros((1, 3, 1), int), np.array([[1 + 0j, 5, 0]])]),
    perturbed((2, 3), dtypes=(np.int64,))))
def test_token_ids(id_classifier, X):
    proba, error = outcome(lambda: id_classifier.predict_proba(X), ("X",) + SKLEARN_WORDS, [X])
    if error is None:
        assert proba.shape == (len(X), 2) and np.all(np.isfinite(proba))
        # Any id the vocabulary lacks is <unk>, however large or negative: as if it were one other unknown id.
        same = id_classifier.predict_proba(unknown_as_one_id(X, id_classifier.vocabulary_))
        np.testing.assert_allclose(proba, same, rtol=1e-5, atol=1e-6)


@given(X=collections(texts))
def test_seq2seq_generates_for_any_text(seq2seq, X):
    out = seq2seq.predict(X)
    assert out.shape == (len(X),) and all(isinstance(t, str) for t in out)
    beams = seq2seq.predict(X, strategy="beam", num_beams=2, num_return_sequences=2)
    assert len(beams) == len(X) and all(len(b) == 2 for b in beams)
    if len(X):
        targets = as_list(X)[::-1]
        log_proba = seq2seq.sequence_log_proba(X, targets)
        assert log_proba.shape == (len(X),) and np.all(log_proba <= 0) and np.all(np.isfinite(log_proba))
        alone = seq2seq.sequence_log_proba(as_list(X)[:1], targets[:1])
        np.testing.assert_allclose(alone, log_proba[:1], rtol=1e-4)


@given(X=st.one_of(NOT_TEXTS, collections(texts)), y=st.one_of(NOT_TEXTS, collections(texts)),
       method=st.sampled_from(["sequence_log_proba", "score", "attention_maps"]))
def test_seq2seq_pairs(seq2seq, X, y, method):
    result, error = outcome(lambda: getattr(seq2seq, method)(X, y), ("X", "y"))
    if error is None:  # attention_maps takes y=None: the model's own predictions
        assert (y is None and method == "attention_maps") or len(X) == len(y)
        assert method == "score" or len(result) == len(X)


@settings(max_examples=25)  # each valid example trains a tiny model
@given(X=st.one_of(NOT_TEXTS, collections(texts)), y=st.one_of(NOT_TEXTS, collections(texts)))
def test_seq2seq_fit(X, y):
    model, error = outcome(lambda: Seq2SeqTransformer(**SMALL_SEQ2SEQ).fit(X, y), ("X", "y"))
    if error is None:
        assert model.predict(X).shape == (len(X),)


@given(X=st.one_of(perturbed((4, 3), dtypes=(np.float64, np.float32, np.int64, np.bool_)),
                   perturbed((4, 3), dtypes=REFUSED), perturbed((0, 3)), perturbed((4, 0)),
                   st.sampled_from([[[1.0, 2.0, 3.0], [1.0]], "abc", None])),
       kind=st.sampled_from(["cos", "sincos", "positive"]))
def test_random_fourier_features(X, kind):
    rff = RandomFourierFeatures(6, kind=kind, random_state=0).fit(np.ones((2, 3)))
    features, error = outcome(lambda: rff.transform(X), ("X",) + SKLEARN_WORDS, [X])
    if error is None:
        X = np.asarray(X)
        assert features.shape == (X.shape[0], 6) and finite(X) and np.all(np.isfinite(features))
    fitted, error = outcome(lambda: RandomFourierFeatures(6, kind=kind, random_state=0).fit(X),
                            ("X",) + SKLEARN_WORDS, [X])
    assert error is not None or fitted.random_weights_.shape == (np.shape(X)[1], 6 // (2 if kind == "sincos" else 1))


@pytest.mark.parametrize("params", [dict(gamma=np.inf), dict(gamma=np.nan), dict(sigma=np.inf), dict(gamma=-1.0),
                                    dict(n_components=0), dict(n_components=2.5), dict(orthogonal="no")])
def test_random_fourier_features_parameters(params):
    # gamma=inf used to fit and then give NaN features: unbounded intervals now exclude infinity.
    _, error = outcome(lambda: RandomFourierFeatures(**params).fit(np.ones((2, 3))), tuple(params))
    assert error is not None


@given(X=collections(texts), strategy=st.sampled_from(["greedy", "beam", "sample", "nucleus", 3, None]),
       max_length=st.one_of(st.none(), st.integers(-2, 40), st.just(2.5)),
       top_p=st.one_of(st.floats(allow_nan=True), st.just("0.5")),
       temperature=st.floats(allow_nan=True, allow_infinity=True),
       top_k=st.one_of(st.none(), st.integers(-1, 50)))
def test_seq2seq_decoding_options(seq2seq, X, strategy, max_length, top_p, temperature, top_k):
    names = ("strategy", "max_length", "top_p", "temperature", "top_k")
    out, error = outcome(lambda: seq2seq.predict(X, strategy=strategy, max_length=max_length, top_p=top_p,
                                                 temperature=temperature, top_k=top_k, num_beams=2, random_state=0),
                         names)
    if error is None:
        assert out.shape == (len(X),) and all(isinstance(t, str) for t in out)
