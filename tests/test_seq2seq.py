"""Seq2SeqTransformer: learning, decoding options, sklearn conventions and bad input."""

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

import attnkit
from attnkit import Seq2SeqTransformer
from attnkit.datasets import make_case_pairs
from attnkit.nn.encoder_decoder import EncoderDecoder

WORDS = ["cat", "dog", "bird", "fish", "cow", "hen", "owl", "bee", "ant", "elk"]
PAIRS = [f"{a} {b}" for a in WORDS for b in WORDS]
TINY = dict(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64, dropout=0.0, label_smoothing=0.0,
            learning_rate=3e-3, batch_size=16, early_stopping=False, random_state=0)


def _upper_task():
    return PAIRS, [text.upper() for text in PAIRS]


@pytest.fixture(scope="module")
def upper():
    """A model that learnt to upper-case two-word phrases (fits in a few seconds)."""
    X, y = _upper_task()
    return Seq2SeqTransformer(max_iter=40, **TINY).fit(X, y)


# ------------------------------------------------------------------ scikit-learn's common checks

# The checks reach the estimator through its token-id route (2-D integer X, 1-D integer y: one target
# token per sample), as they reach TransformerClassifier; every check passes, none is silenced.
@parametrize_with_checks([Seq2SeqTransformer(d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1, max_iter=5,
                                             early_stopping=False, max_target_len=8, random_state=0)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# ------------------------------------------------------------------------------- token-id route

IDS_X = np.array([[5, 6, 7, 0], [8, 9, 0, 0], [5, 9, 7, 6]] * 20)
IDS_Y = np.array([[7, 6, 5, 0], [9, 8, 0, 0], [6, 7, 9, 5]] * 20)


@pytest.fixture(scope="module")
def reverser():
    """Reverses rows of token ids (padding 0), learnt from a 2-D y."""
    return Seq2SeqTransformer(max_iter=30, **TINY).fit(IDS_X, IDS_Y)


def test_token_ids_in_token_ids_out(reverser):
    out = reverser.predict(IDS_X[:3], max_length=6)
    assert out.dtype == np.int64 and out.shape == (3, 6)
    np.testing.assert_array_equal(out, [[7, 6, 5, 0, 0, 0], [9, 8, 0, 0, 0, 0], [6, 7, 9, 5, 0, 0]])
    assert reverser.predict(IDS_X[:3]).shape == (3, reverser.max_target_len)  # a fixed width, padded
    assert reverser.score(IDS_X, IDS_Y) == 1.0 and reverser.n_features_in_ == 4 and reverser.tokenizer_ is None
    assert reverser.source_vocabulary_.tokens[5:] == [5, 9, 7, 6, 8] or set(reverser.source_vocabulary_.tokens[5:]) \
        == {5, 6, 7, 8, 9}
    beams = reverser.predict(IDS_X[:2], strategy="beam", num_return_sequences=2)
    assert beams[0][0] == [7, 6, 5] and beams[1][0] == [9, 8]
    assert reverser.sequence_log_proba(IDS_X[:3], IDS_Y[:3]).shape == (3,)
    maps = reverser.attention_maps(IDS_X[:1])
    assert maps[0]["source_tokens"] == [5, 6, 7, "<eos>"] and maps[0]["target_tokens"] == [7, 6, 5, "<eos>"]


def test_a_1d_y_gives_one_token_per_sample():
    model = Seq2SeqTransformer(max_iter=30, **TINY).fit(IDS_X, IDS_Y[:, 0])
    out = model.predict(IDS_X[:3])
    assert out.shape == (3,) and out.tolist() == [7, 9, 6] and model.score(IDS_X, IDS_Y[:, 0]) == 1.0


def test_text_and_token_ids_cannot_be_mixed(reverser, upper):
    with pytest.raises(ValueError, match="X is text, but this Seq2SeqTransformer was fitted on a 2-D array of token "
                                         "ids"):
        reverser.predict(["cat dog"])
    with pytest.raises(ValueError, match=r"X is a 2-D array of int64 \(numbers, read as token ids\), but this "
                                         "Seq2SeqTransformer was fitted on text"):
        upper.predict(IDS_X[:2])
    with pytest.raises(ValueError, match=r"X is a 1-D array of float64 \(numbers, read as token ids\)"):
        upper.predict(np.array([1.5, 2.5]))
    with pytest.raises(ValueError, match=r"y must hold token ids \(numbers\), as the inputs do"):
        Seq2SeqTransformer(**TINY).fit(IDS_X, ["a", "b", "c"] * 20)
    with pytest.raises(ValueError, match="y must hold integer token ids; got 3.5"):
        Seq2SeqTransformer(**TINY).fit(IDS_X, IDS_Y * 0.5)
    with pytest.raises(ValueError, match="requires y to be passed, but the target y is None"):
        Seq2SeqTransformer(**TINY).fit(IDS_X, None)


def test_validation_data_is_monitored():
    X, y = _upper_task()
    model = Seq2SeqTransformer(max_iter=3, **{**TINY, "early_stopping": True}).fit(
        X[:60], y[:60], validation_data=(X[60:], y[60:]))
    assert len(model.validation_scores_) == 3
    best = int(np.argmin(model.validation_loss_curve_))  # early stopping follows the loss
    assert model.best_validation_score_ == model.validation_scores_[best]
    with pytest.raises(TypeError, match=r"validation_data must be a tuple of two items \(X_val, y_val\), got list"):
        Seq2SeqTransformer(**TINY).fit(X, y, validation_data=[X, y])


def test_learns_a_rewriting_task(upper):
    X, y = _upper_task()
    assert upper.score(X, y) >= 0.95
    assert list(upper.predict(["owl cat", "bee ant"])) == ["OWL CAT", "BEE ANT"]
    assert upper.n_iter_ == 40 and len(upper.loss_curve_) == 40
    assert upper.loss_curve_[-1] < 0.2 * upper.loss_curve_[0]


def test_predict_returns_an_array_of_str_and_lists_for_several_sequences(upper):
    out = upper.predict(["cat dog", "hen owl", ""])
    assert isinstance(out, np.ndarray) and out.dtype == object and out.shape == (3,)
    assert all(isinstance(t, str) for t in out)
    beams = upper.predict(["cat dog", "hen owl"], strategy="beam", num_beams=3, num_return_sequences=2)
    assert len(beams) == 2 and all(len(b) == 2 and all(isinstance(t, str) for t in b) for b in beams)
    assert beams[0][0] == "CAT DOG"
    assert len(upper.predict([])) == 0


def test_greedy_equals_beam_of_width_one_and_temperature_zero(upper):
    X = PAIRS[::7]
    greedy = upper.predict(X)
    np.testing.assert_array_equal(upper.predict(X, strategy="beam", num_beams=1), greedy)
    np.testing.assert_array_equal(upper.predict(X, strategy="sample", temperature=0, random_state=3), greedy)
    np.testing.assert_array_equal(upper.predict(X, strategy="sample", top_k=1, random_state=3), greedy)


def test_sampling_is_reproducible_and_independent_of_the_batching(upper, monkeypatch):
    X = PAIRS[:20]
    kw = dict(strategy="sample", temperature=1.5, num_return_sequences=2, random_state=11)
    first = upper.predict(X, **kw)
    assert upper.predict(X, **kw) == first
    monkeypatch.setattr(upper, "_batch_tokens", 8)  # one or two inputs per batch instead of all of them
    assert upper.predict(X, **kw) == first
    assert upper.predict(X, **{**kw, "random_state": 12}) != first


def test_max_and_min_length(upper):
    short = upper.predict(["cat dog"], max_length=3)[0]
    assert len(short) <= 3
    longer = upper.predict(["cat dog"], min_length=12)[0]
    assert len(longer) >= 11  # 12 tokens before the end token may be generated, none of them the end


def test_sequence_log_proba(upper):
    # Not predict_log_proba: scikit-learn means per-class probabilities of X alone by that name.
    assert not hasattr(upper, "predict_log_proba") and not hasattr(upper, "predict_proba")
    X, y = _upper_task()
    logp = upper.sequence_log_proba(X[:10], y[:10])
    assert logp.shape == (10,) and np.all(logp <= 0)
    wrong = upper.sequence_log_proba(X[:10], [t.lower() for t in y[:10]])
    assert np.all(wrong < logp)
    # The sum over the tokens of the greedy path: log-probabilities of a one-token target.
    one = upper.sequence_log_proba(["cat dog"], ["C"])
    assert one.shape == (1,) and one[0] < 0
    # Characters outside the target vocabulary are all <unk>: scored alike, and far below the right one.
    right, euro, yen = upper.sequence_log_proba(["cat dog"] * 3, ["CAT DOG", "CAT DO\u20ac", "CAT DO\u00a5"])
    assert euro == yen < right - 3.0


@pytest.mark.parametrize("options", [
    dict(attention="linear"),
    dict(attention="performer"),
    dict(positional="relative"),
    dict(positional="learned"),
    dict(positional=None),
    dict(encoder_d_model=24, decoder_d_model=40),
    dict(tokenizer="word"),
])
def test_model_variants_fit_and_generate(options):
    X, y = _upper_task()
    model = Seq2SeqTransformer(max_iter=2, **{**TINY, **options}).fit(X[:40], y[:40])
    out = model.predict(X[:5])
    beams = model.predict(X[:5], strategy="beam", num_beams=2)
    assert out.shape == (5,) and beams.shape == (5,)
    assert np.all(np.isfinite(model.sequence_log_proba(X[:5], y[:5])))


def test_fit_is_reproducible_and_warm_start_continues():
    X, y = _upper_task()
    a = Seq2SeqTransformer(max_iter=2, **TINY).fit(X, y)
    b = Seq2SeqTransformer(max_iter=2, **TINY).fit(X, y)
    assert a.loss_curve_ == b.loss_curve_
    np.testing.assert_array_equal(a.predict(X[:10]), b.predict(X[:10]))
    b.set_params(warm_start=True, max_iter=1).fit(X, y)
    assert b.n_iter_ == 3 and len(b.loss_curve_) == 3 and b.loss_curve_[:2] == a.loss_curve_


def test_partial_fit_trains_one_epoch_per_call_and_resumes_the_optimiser():
    X, y = _upper_task()
    model = Seq2SeqTransformer(**TINY)
    for calls in range(1, 6):
        assert model.partial_fit(X, y) is model
        assert model.n_iter_ == calls and len(model.loss_curve_) == calls
    assert int(model._training_state["optimizer_state"]["step"]) == 5 * int(np.ceil(len(X) / TINY["batch_size"]))
    assert model.loss_curve_[-1] < 0.5 * model.loss_curve_[0]
    assert model.validation_scores_ == []  # early stopping does not apply: every pair trains


def test_partial_fit_continues_a_fit():
    X, y = _upper_task()
    fitted = Seq2SeqTransformer(max_iter=2, **TINY).fit(X, y)
    model = clone(fitted).fit(X, y).partial_fit(X, y)
    assert model.n_iter_ == 3 and model.loss_curve_[:2] == fitted.loss_curve_
    assert model.loss_curve_[2] < fitted.loss_curve_[0]
    assert model.source_vocabulary_.tokens == fitted.source_vocabulary_.tokens


def test_partial_fit_keeps_the_vocabularies_of_its_first_call():
    X, y = _upper_task()
    model = Seq2SeqTransformer(**TINY).partial_fit(X[:10], y[:10])
    sources, targets = list(model.source_vocabulary_.tokens), list(model.target_vocabulary_.tokens)
    assert "q" not in sources
    model.partial_fit(["quiz"], ["QUIZ"])  # tokens no earlier call showed: <unk>, on both sides
    assert model.source_vocabulary_.tokens == sources and model.target_vocabulary_.tokens == targets
    assert model.n_iter_ == 2 and np.isfinite(model.loss_curve_[-1])


def test_checkpoints_and_resumes(tmp_path):
    X, y = _upper_task()
    path = tmp_path / "checkpoint.npz"
    model = Seq2SeqTransformer(max_iter=2, **TINY, checkpoint_path=path).fit(X, y)
    saved = attnkit.load(path)
    assert saved.n_iter_ == 2 and saved.loss_curve_ == model.loss_curve_
    np.testing.assert_array_equal(saved.predict(X[:5]), model.predict(X[:5]))
    assert saved.checkpoint_path is None  # a file never chooses where a later fit writes
    saved.set_params(warm_start=True, max_iter=1, checkpoint_path=path).fit(X, y)
    assert saved.n_iter_ == 3 and attnkit.load(path).n_iter_ == 3


def test_early_stopping_records_validation_curves():
    X, y = _upper_task()
    model = Seq2SeqTransformer(max_iter=3, **{**TINY, "early_stopping": True, "validation_fraction": 0.2}).fit(X, y)
    assert len(model.validation_loss_curve_) == model.n_iter_ == len(model.validation_scores_)
    assert 0 <= model.best_validation_score_ <= 1


def test_clone_pickle_and_params(upper):
    assert clone(upper).get_params() == upper.get_params()
    assert not hasattr(clone(upper), "model_")
    restored = pickle.loads(pickle.dumps(upper))
    np.testing.assert_array_equal(restored.predict(PAIRS[:10]), upper.predict(PAIRS[:10]))


def test_unknown_characters():
    X, y = _upper_task()
    model = Seq2SeqTransformer(max_iter=1, **TINY).fit(X[:20], y[:20])
    assert model.predict(["cat zzq"]).shape == (1,)  # unknown characters become <unk>
    model.set_params(handle_unknown="error")
    with pytest.raises(ValueError, match=r"X\[1\] has tokens that are not in the source vocabulary: \['q', 'z'\]"):
        model.predict(["cat", "zzq"])


@pytest.mark.parametrize("X, y, error, match", [
    (["a", 3], ["A", "B"], TypeError, r"X must contain only strings; item 1 is int"),
    (["a", None], ["A", "B"], ValueError, r"X has a missing value"),
    (["a", "b"], ["A"], ValueError, r"X and y must have the same length, got 2 and 1"),
    ([], [], ValueError, r"X and y are empty"),
    ("abc", ["A"], TypeError, r"X must be a sequence of strings"),
    (["a", "b"], ["A", np.nan], ValueError, r"y has a missing value"),
])
@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_bad_training_input(X, y, error, match, method):
    with pytest.raises(error, match=match):
        getattr(Seq2SeqTransformer(max_iter=1, **TINY), method)(X, y)


@pytest.mark.parametrize("param, value", [
    ("tokenizer", "sentencepiece"), ("d_model", 0), ("dropout", 1.0), ("attention", "sparse"), ("positional", "rotary"),
    ("label_smoothing", -0.1), ("max_source_len", 1), ("validation_fraction", 0.0), ("handle_unknown", "ignore"),
])
def test_bad_parameters(param, value):
    with pytest.raises(ValueError, match=f"'{param}' parameter of Seq2SeqTransformer"):
        Seq2SeqTransformer(**{**TINY, param: value}).fit(["a"], ["A"])


@pytest.mark.parametrize("options, match", [
    (dict(strategy="sample", top_p=0.0), "top_p"),
    (dict(strategy="sample", top_p=1.5), "top_p"),
    (dict(strategy="beam", num_beams=0), "num_beams"),
    (dict(strategy="sample", temperature=-1.0), "temperature"),
    (dict(strategy="nucleus"), "strategy"),
    (dict(strategy="beam", num_beams=2, num_return_sequences=3), "num_return_sequences"),
    (dict(max_length=0), "max_length"),
])
def test_bad_decoding_parameters(upper, options, match):
    with pytest.raises(ValueError, match=match):
        upper.predict(["cat dog"], **options)


def test_relative_positions_need_softmax_attention():
    with pytest.raises(ValueError, match="positional='relative' needs attention='softmax'"):
        Seq2SeqTransformer(**{**TINY, "positional": "relative", "attention": "linear"}).fit(["a"], ["A"])


def test_predict_before_fit():
    with pytest.raises(NotFittedError):
        Seq2SeqTransformer().predict(["a"])


def test_attention_maps(upper):
    maps = upper.attention_maps(["cat dog", "owl"], ["CAT DOG", "OWL"])
    first = maps[0]
    assert first["source_tokens"] == list("cat dog") + ["<eos>"]
    assert first["target_tokens"] == list("CAT DOG") + ["<eos>"]
    s, t, heads = len(first["source_tokens"]), len(first["target_tokens"]), upper.n_heads
    assert [w.shape for w in first["encoder"]] == [(heads, s, s)] * upper.encoder_layers
    assert [w.shape for w in first["decoder"]] == [(heads, t, t)] * upper.decoder_layers
    assert [w.shape for w in first["cross"]] == [(heads, t, s)] * upper.decoder_layers
    for part in ("encoder", "decoder", "cross"):
        for w in first[part]:
            np.testing.assert_allclose(w.sum(axis=-1), 1, rtol=1e-5)
    assert np.all(np.triu(first["decoder"][0], 1) == 0)  # causal: no weight on later positions
    assert len(maps[1]["source_tokens"]) == 4
    default = upper.attention_maps(["cat dog"])[0]  # targets default to the greedy predictions
    assert default["target_tokens"] == first["target_tokens"]


def test_attention_maps_need_softmax_attention():
    X, y = _upper_task()
    model = Seq2SeqTransformer(max_iter=1, **{**TINY, "attention": "linear"}).fit(X[:10], y[:10])
    with pytest.raises(ValueError, match="attention_maps needs attention='softmax'"):
        model.attention_maps(X[:1])


def test_ctrl_c_stops_cleanly_with_the_best_weights(monkeypatch):
    X, y = _upper_task()
    model = Seq2SeqTransformer(max_iter=5, **{**TINY, "early_stopping": True})
    calls = {"n": 0}
    forward = EncoderDecoder.forward

    def interrupted(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 30:  # in the second epoch
            raise KeyboardInterrupt
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(EncoderDecoder, "forward", interrupted)
    with pytest.warns(UserWarning, match="interrupt"):
        model.fit(X, y)
    assert model.n_iter_ >= 1 and model.predict(X[:2]).shape == (2,)


def test_the_course_case_task_reaches_99_percent_exact_match_on_new_sentences():
    # "<U> I am a student" -> "I AM A STUDENT", "<L> ..." -> lower case; a short fit (~20 s on 2 cores).
    X, y = make_case_pairs(2000, random_state=0, max_words=4)
    X_test, y_test = make_case_pairs(500, random_state=1, max_words=4)
    model = Seq2SeqTransformer(encoder_layers=1, decoder_layers=1, max_iter=35, learning_rate=5e-3,
                               label_smoothing=0.0, early_stopping=False, random_state=0).fit(X, y)
    assert model.score(X_test, y_test) >= 0.99


def test_save_and_load_round_trip_bit_exactly(upper, tmp_path):
    path = tmp_path / "upper.npz"
    upper.save(path)
    restored = attnkit.load(path)
    assert isinstance(restored, Seq2SeqTransformer) and restored.get_params() == upper.get_params()
    X = PAIRS[:20]
    np.testing.assert_array_equal(restored.predict(X), upper.predict(X))
    np.testing.assert_array_equal(restored.sequence_log_proba(X, upper.predict(X)),
                                  upper.sequence_log_proba(X, upper.predict(X)))
    assert restored.loss_curve_ == upper.loss_curve_ and restored.n_iter_ == upper.n_iter_
    restored.set_params(warm_start=True, max_iter=1).fit(*_upper_task())  # the optimiser state came back too
    assert restored.n_iter_ == upper.n_iter_ + 1


def test_save_and_load_performer_and_relative_models(tmp_path):
    X, y = _upper_task()
    for options in (dict(attention="performer"), dict(attention="linear"), dict(positional="relative")):
        model = Seq2SeqTransformer(max_iter=1, **{**TINY, **options}).fit(X[:30], y[:30])
        model.save(tmp_path / "m.npz")
        restored = attnkit.load(tmp_path / "m.npz")
        np.testing.assert_array_equal(restored.sequence_log_proba(X[:5], y[:5]), model.sequence_log_proba(X[:5], y[:5]))


_EN_FR = [("I am here.", "Je suis ici."), ("It's hot!", "Il fait chaud !"), ("Who is it?", "Qui est-ce ?"),
          ("I don't know.", "Je ne sais pas."), ("He's a man.", "C'est un homme."), ("Go!", "Va !")]


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_subword_tokenizer_fit_predict_save_load(kind, tmp_path):
    X, y = [s for s, _ in _EN_FR] * 4, [t for _, t in _EN_FR] * 4
    model = Seq2SeqTransformer(tokenizer=kind, max_source_features=300, max_target_features=300, d_model=32,
                               n_heads=2, encoder_layers=1, decoder_layers=1, max_iter=40, learning_rate=1e-2,
                               early_stopping=False, random_state=0).fit(X, y)
    predicted = model.predict(X[:6])
    # Proper French spacing comes back from the pieces ("chaud !", "est-ce ?").
    assert model.score(X[:6], y[:6]) >= 0.5 and sum(p == t for p, t in zip(predicted, y)) >= 3
    assert model.tokenizer_.kind == kind and model.tokenizer_.detokenize(model.tokenizer_("Va  !")) == "Va !"
    model.save(tmp_path / "model")
    loaded = attnkit.load(next(tmp_path.iterdir()))
    assert list(loaded.predict(X[:6])) == list(predicted)
    assert list(pickle.loads(pickle.dumps(model)).predict(X[:6])) == list(predicted)
    again = clone(model).fit(X, y)
    assert clone(model).get_params() == model.get_params() and list(again.predict(X[:6])) == list(predicted)


def test_bad_tokenizer_names_the_allowed_values():
    with pytest.raises(ValueError, match="tokenizer.*(bpe|unigram)"):
        Seq2SeqTransformer(tokenizer="sentencepiece").fit(["a"], ["b"])


def test_a_model_never_writes_unk_unless_a_target_held_it():
    # Fitted on empty targets, one epoch: it used to write the literal text "<unk><unk><unk>..."
    model = Seq2SeqTransformer(**{**TINY, "max_iter": 1}).fit(["ab", "cd", "ef"], ["", "", ""])
    assert list(model.predict(["ab", "zz"])) == ["", ""]
    assert list(model.predict(["ab"], strategy="sample", random_state=0)) == [""]
    cut = Seq2SeqTransformer(**{**TINY, "max_iter": 1, "max_target_features": 3}).fit(PAIRS[:40], PAIRS[:40])
    assert cut._writes_unk  # targets lost characters to <unk>: writing it is what the model learnt


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_subword_targets_keep_every_piece(kind):
    # min_df=2 used to turn a target's rare pieces into <unk>: the exact decoding of subword pieces was lost
    with pytest.raises(ValueError, match=f"min_df=2 with tokenizer='{kind}' would turn rare pieces into <unk>"):
        Seq2SeqTransformer(**TINY, tokenizer=kind, min_df=2, max_iter=1).fit(["ab", "cd"], ["AB", "CD"])


def test_a_source_past_max_source_len_is_cut_with_a_warning():
    # predict(long) answered as predict(its first max_source_len - 1 tokens), without a word (the embedder warns)
    model = Seq2SeqTransformer(**{**TINY, "max_iter": 1}, max_source_len=8).fit(["abc", "de"], ["ABC", "DE"])
    with pytest.warns(UserWarning, match=r"1 of 2 sources are longer than max_source_len=8 tokens \(the end token "
                                         r"included\) and were truncated to their first 7") as caught:
        cut = model.predict(["abcdefghijklmnop", "ab"])
    assert caught[0].filename == __file__  # at the caller's line
    assert cut[0] == model.predict(["abcdefg"])[0]
