"""Hostile input for every public op and estimator method: wrong ranks and dtypes, zero-size and
huge declared sizes, NaN/inf, non-contiguous and read-only arrays, masks that broadcast wrongly,
unicode edge cases, mismatched lengths.

The contract checked here: each call either returns a result of the documented shape and dtype, or
raises ValueError, TypeError or MemoryError with a message. Never another exception, a crash or a
hang (a crash would take the test process down; the kernels also run under AddressSanitizer in
test_sanitizers.py). Correctness on valid input is the other test modules' job.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnkit
from attnkit import RandomFourierFeatures, Seq2SeqTransformer, TransformerClassifier, ops
from attnkit.feature_maps import PolynomialFeatureMap, PositiveRandomFeatureMap, RandomFourierFeatureMap

CLEAR_ERRORS = (ValueError, TypeError, MemoryError)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_, np.complex64, object, np.str_]
VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.sampled_from([0.0, -0.0, 1e30, -1e30]))


@st.composite
def hostile_arrays(draw, min_ndim=0, max_ndim=4, max_side=5, dtypes=DTYPES):
    """An array of any listed dtype, rank and (possibly zero) sizes, holding NaN, inf and extremes,
    sometimes a strided view or read-only."""
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=min_ndim, max_size=max_ndim)))
    dtype = draw(st.sampled_from(dtypes))
    size = int(np.prod(shape))
    values = draw(st.lists(VALUES, min_size=size, max_size=size))
    base = np.array(values, dtype=np.float64).reshape(shape)
    if dtype is np.str_:
        arr = base.astype(str)
    elif dtype is object:
        arr = base.astype(object)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            arr = np.nan_to_num(base).astype(dtype) if np.dtype(dtype).kind in "iub" else base.astype(dtype)
    if draw(st.booleans()) and arr.ndim and arr.shape[-1]:  # a strided view of a wider array
        wide = np.repeat(arr, 2, axis=-1)
        arr = wide[..., ::2]
    if draw(st.booleans()) and isinstance(arr, np.ndarray):
        arr.flags.writeable = False
    return arr


def float_arrays(min_ndim, max_ndim=4):
    return hostile_arrays(min_ndim=min_ndim, max_ndim=max_ndim, dtypes=[np.float32, np.float64])


def _outcome(call):
    """Run ``call``; return its result, or None after a clear error. Any other exception fails."""
    try:
        with np.errstate(all="ignore"):
            return call()
    except CLEAR_ERRORS as error:
        assert str(error), f"{type(error).__name__} without a message"
        return None


def _lengths():
    return st.one_of(st.none(), st.lists(st.integers(-3, 2**62), min_size=0, max_size=4).map(np.array),
                     st.just(np.array([1.5])), st.just(np.array([True, False])))


def _masks():
    return st.one_of(st.none(), hostile_arrays(max_ndim=4, dtypes=[np.bool_, np.int32, np.float32]))


@FUZZ
@given(q=hostile_arrays(), k=hostile_arrays(), v=hostile_arrays(), mask=_masks(), key_lengths=_lengths(),
       causal=st.booleans(), bias=st.one_of(st.none(), float_arrays(0)),
       scale=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
       return_weights=st.booleans())
def test_scaled_dot_product_attention(q, k, v, mask, key_lengths, causal, bias, scale, return_weights):
    out = _outcome(lambda: attnkit.scaled_dot_product_attention(
        q, k, v, mask=mask, key_lengths=key_lengths, causal=causal, bias=bias, scale=scale,
        return_weights=return_weights))
    if out is not None:
        out = out[0] if return_weights else out
        assert out.shape[-2] == q.shape[-2] and out.shape[-1] == v.shape[-1] and out.dtype.kind == "f"


@st.composite
def compatible_qkv(draw):
    """q, k, v whose shapes fit together (zero sizes allowed), in any float dtype and layout, with
    finite values or, sometimes, NaN and inf."""
    batch, nq, nk = draw(st.integers(0, 3)), draw(st.integers(0, 5)), draw(st.integers(0, 5))
    d, dv = draw(st.integers(1, 6)), draw(st.integers(0, 4))
    finite = draw(st.booleans())
    values = st.floats(-8, 8, width=32) if finite else VALUES
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))

    def array(shape):
        data = np.array(draw(st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                        dtype=np.float64).reshape(shape)
        with np.errstate(over="ignore"):  # 1e30 in float16 is inf, as the user's cast would make it
            cast = data.astype(dtype)
        out = np.asfortranarray(cast) if draw(st.booleans()) else cast
        out.flags.writeable = draw(st.booleans())
        return out

    lengths = draw(st.lists(st.integers(0, nk), min_size=batch, max_size=batch)) if draw(st.booleans()) else None
    return (array((batch, nq, d)), array((batch, nk, d)), array((batch, nk, dv)),
            None if lengths is None else np.array(lengths, dtype=np.int64), finite)


@FUZZ
@given(qkv=compatible_qkv(), causal=st.booleans())
def test_attention_on_odd_layouts_matches_the_reference_or_refuses(qkv, causal):
    q, k, v, lengths, finite = qkv
    if causal and q.shape[1] != k.shape[1]:
        causal = False
    out = _outcome(lambda: attnkit.scaled_dot_product_attention(q, k, v, key_lengths=lengths, causal=causal))
    if out is None or not finite:
        return
    expected = attnkit.reference.scaled_dot_product_attention(q.astype(np.float64), k.astype(np.float64),
                                                              v.astype(np.float64), key_lengths=lengths, causal=causal)
    assert np.all(np.isfinite(out)), "finite input gave a non-finite output"
    np.testing.assert_allclose(out, expected, rtol=2e-3, atol=2e-3)  # float16 input computes in float32


@FUZZ
@given(q=hostile_arrays(), k=hostile_arrays(), v=hostile_arrays(), key_lengths=_lengths(), mask=_masks(),
       causal=st.booleans(), eps=st.floats(allow_nan=True, allow_infinity=True),
       feature_map=st.sampled_from(["elu", "relu", "polynomial", "favor", "rff", "nope", 3]))
def test_linear_attention(q, k, v, key_lengths, mask, causal, eps, feature_map):
    fm = {"favor": PositiveRandomFeatureMap(8, random_state=0),
          "rff": RandomFourierFeatureMap(8, random_state=0, softmax_kernel=True),
          "polynomial": PolynomialFeatureMap(2, 1.0)}.get(feature_map, feature_map)
    out = _outcome(lambda: attnkit.linear_attention(q, k, v, feature_map=fm, causal=causal, mask=mask,
                                                    key_lengths=key_lengths, eps=eps))
    if out is not None:
        assert out.shape[-1] == v.shape[-1] and out.dtype.kind == "f"


@FUZZ
@given(q=hostile_arrays(), k=hostile_arrays(), v=hostile_arrays())
def test_linear_attention_state(q, k, v):
    state = attnkit.LinearAttentionState()
    _outcome(lambda: state.attend(q))  # no keys yet: a clear error
    if _outcome(lambda: state.step(q, k, v)) is not None:
        _outcome(lambda: state.step(q, k, v))
        _outcome(lambda: state.attend(q))


@FUZZ
@given(x=hostile_arrays(), axis=st.one_of(st.integers(-6, 6), st.just(1.5), st.just("0")))
def test_softmax_and_log_softmax(x, axis):
    for fn in (attnkit.softmax, attnkit.log_softmax):
        out = _outcome(lambda fn=fn: fn(x, axis=axis))
        if out is not None:
            assert out.shape == np.shape(x)


@FUZZ
@given(x=hostile_arrays(), w=hostile_arrays(), offsets=st.one_of(st.none(), hostile_arrays(max_ndim=2)),
       kind=st.sampled_from(["cos", "sincos", "exp", None]))
def test_random_fourier_features(x, w, offsets, kind):
    out = _outcome(lambda: attnkit.random_fourier_features(x, w, offsets=offsets, kind=kind))
    if out is not None:
        assert out.shape[:-1] == np.shape(x)[:-1]


@FUZZ
@given(n=st.one_of(st.integers(-2, 10**13), st.floats(), st.just("4")),
       d=st.one_of(st.integers(-2, 10**13), st.just(3.0)),
       base=st.floats(allow_nan=True, allow_infinity=True), start=st.integers(-5, 5))
def test_sinusoidal_positions(n, d, base, start):
    out = _outcome(lambda: attnkit.sinusoidal_positions(n, d, base=base, start=start))
    if out is not None:
        assert out.shape == (n, d) and np.all(np.isfinite(out))


@FUZZ
@given(x=hostile_arrays(), gamma=st.one_of(st.none(), hostile_arrays(max_ndim=2)),
       logits=hostile_arrays(), targets=hostile_arrays(dtypes=[np.int64, np.float32, np.bool_]),
       smoothing=st.floats(allow_nan=True, allow_infinity=True))
def test_training_ops(x, gamma, logits, targets, smoothing):
    _outcome(lambda: ops.layer_norm(x, gamma, gamma))
    _outcome(lambda: ops.gelu(x))
    _outcome(lambda: ops.cross_entropy(logits, targets, label_smoothing=smoothing))


# ------------------------------------------------------------------------------- estimators

TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "\t\n", "😀😀 not good 👍", "e\u0301", "\u200b", "\x00", "ﬁne", "İ", "a" * 3000,
                     "not " * 400, "\ud7ff", "RTL \u202e text"]),
)
HOSTILE_ITEMS = st.one_of(TEXT, st.none(), st.just(float("nan")), st.integers(), st.just(b"bytes"),
                          st.just(["nested"]))


@pytest.fixture(scope="module")
def classifier():
    texts = ["good film", "bad film", "not good", "not bad", "great", "awful"] * 5
    return TransformerClassifier(d_model=8, n_heads=2, d_ff=16, n_layers=1, max_iter=1, early_stopping=False,
                                 max_len=16, random_state=0).fit(texts, [1, 0, 0, 1, 1, 0] * 5)


@pytest.fixture(scope="module")
def seq2seq():
    sources, targets = ["<U> ab", "<L> CD", "<U> ef", "<L> GH"] * 4, ["AB", "cd", "EF", "gh"] * 4
    return Seq2SeqTransformer(d_model=8, n_heads=2, d_ff=16, encoder_layers=1, decoder_layers=1, max_iter=1,
                              early_stopping=False, random_state=0).fit(sources, targets)


@FUZZ
@given(texts=st.lists(HOSTILE_ITEMS, max_size=6))
def test_classifier_predict_and_maps(classifier, texts):
    out = _outcome(lambda: classifier.predict_proba(texts))
    if out is not None:
        assert out.shape == (len(texts), 2) and np.allclose(out.sum(axis=1), 1.0)
        assert all(isinstance(t, str) for t in texts)
    _outcome(lambda: classifier.attention_maps(texts))
    _outcome(lambda: classifier.transform(texts))


@FUZZ
@given(texts=st.lists(HOSTILE_ITEMS, min_size=0, max_size=8),
       labels=st.lists(st.one_of(st.integers(0, 2), st.text(max_size=2), st.none()), min_size=0, max_size=8))
def test_classifier_fit(texts, labels):
    model = TransformerClassifier(d_model=8, n_heads=2, d_ff=16, n_layers=1, max_iter=1, early_stopping=False,
                                  random_state=0)
    if _outcome(lambda: model.fit(texts, labels)) is not None:
        assert len(texts) == len(labels) and model.predict(["x"]).shape == (1,)


@FUZZ
@given(ids=hostile_arrays(min_ndim=0, max_ndim=3, dtypes=[np.int64, np.int32, np.float64, np.bool_, object]))
def test_classifier_token_id_input(ids):
    model = TransformerClassifier(d_model=8, n_heads=2, d_ff=16, n_layers=1, max_iter=1, early_stopping=False,
                                  random_state=0)
    y = np.arange(len(ids)) % 2 if np.ndim(ids) else np.array([0, 1])
    if _outcome(lambda: model.fit(ids, y)) is not None:
        assert model.predict(ids).shape == (len(ids),)


@FUZZ
@given(texts=st.lists(HOSTILE_ITEMS, max_size=4), strategy=st.sampled_from(["greedy", "beam", "sample", "x"]),
       max_length=st.one_of(st.none(), st.integers(-2, 40)), top_p=st.floats(allow_nan=True),
       temperature=st.floats(allow_nan=True, allow_infinity=True))
def test_seq2seq_predict(seq2seq, texts, strategy, max_length, top_p, temperature):
    out = _outcome(lambda: seq2seq.predict(texts, strategy=strategy, max_length=max_length, top_p=top_p,
                                           temperature=temperature, num_beams=2, random_state=0))
    if out is not None:
        assert len(out) == len(texts)
    _outcome(lambda: seq2seq.predict_log_proba(texts, texts))


@FUZZ
@given(X=hostile_arrays(min_ndim=0, max_ndim=3), n_components=st.integers(-1, 40),
       gamma=st.floats(allow_nan=True, allow_infinity=True), kind=st.sampled_from(["cos", "sincos", "positive", "x"]))
def test_random_fourier_features_estimator(X, n_components, gamma, kind):
    model = RandomFourierFeatures(n_components, gamma=gamma, kind=kind, random_state=0)
    if _outcome(lambda: model.fit(X)) is not None:
        out = _outcome(lambda: model.transform(X))
        if out is not None:
            assert out.shape == (len(X), n_components) and np.all(np.isfinite(out))
