"""MaskedLanguageModel: BERT's corruption and objective on raw text, fill_mask, embeddings, masked-token accuracy,
bidirectional attention maps, saving, and a TransformerClassifier that starts from it."""

import pickle

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.utils import estimator_checks

import attnkit
from attnkit import MaskedLanguageModel, TransformerClassifier
from attnkit._validation import InvalidParameterError
from attnkit.datasets import make_negation_sentences
from attnkit.estimators._classifier_start import FromMaskedLM, start_of
from estimator_cases import DATA_INDEPENDENT_CHECKS

CORPUS = ["the cat sat on the mat", "the dog sat on the log", "a cat sat on a mat", "a dog lay on a log"] * 25
TINY = dict(d_model=32, n_heads=2, d_ff=64, max_iter=60, learning_rate=3e-3, random_state=0)


@pytest.fixture(scope="module")
def mlm():
    return MaskedLanguageModel(**TINY).fit(CORPUS)


def test_fit_learns_to_fill_in_words(mlm):
    assert mlm.n_iter_ == 60 and mlm.loss_curve_[-1] < mlm.loss_curve_[0]
    assert mlm.score(CORPUS) > 0.7
    fillers = mlm.fill_mask(["the dog sat on the [MASK]", "the [MASK] sat on the mat", "[MASK] cat [MASK] on"], top_k=3)
    assert [len(f) for f in fillers] == [1, 1, 2]
    assert fillers[0][0][0][0] in ("log", "mat") and fillers[1][0][0][0] in ("cat", "dog")
    for per_text in fillers:
        for candidates in per_text:
            probs = [p for _, p in candidates]
            assert len(candidates) == 3 and probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-9
            assert all(not token.startswith("<") for token, _ in candidates)  # special tokens never proposed
    words = mlm.fill_mask(["the [MASK]"], top_k=10_000)[0][0]  # more than the vocabulary: every word, no special
    assert len(words) == len(mlm.vocabulary_) - sum(t.startswith("<") for t in mlm.vocabulary_)
    assert all(not token.startswith("<") for token, _ in words) and abs(sum(p for _, p in words) - 1) < 1e-9


def test_score_hides_the_same_tokens_every_time(mlm):
    assert mlm.score(CORPUS[:20]) == mlm.score(CORPUS[:20])
    assert 0.0 <= mlm.score(["the cat sat"]) <= 1.0


def test_validation_and_early_stopping():
    model = MaskedLanguageModel(**{**TINY, "max_iter": 40, "early_stopping": True, "n_iter_no_change": 2})
    model.fit(CORPUS)
    assert len(model.validation_scores_) == model.n_iter_ and model.best_validation_score_ is not None
    held = MaskedLanguageModel(**{**TINY, "max_iter": 3}).fit(CORPUS, validation_data=CORPUS[:8])
    assert len(held.validation_loss_curve_) == 3


def test_transform_gives_one_embedding_per_text(mlm):
    emb = mlm.transform(["the cat sat on the mat", "a dog", "the cat sat on the mat"])
    assert emb.shape == (3, 32) and emb.dtype == np.float32 and np.all(np.isfinite(emb))
    np.testing.assert_array_equal(emb[0], emb[2])
    assert not np.allclose(emb[0], emb[1])


def test_attention_maps_are_bidirectional(mlm):
    maps = mlm.attention_maps(["the cat sat on the mat"])[0]
    assert maps["tokens"] == ["<cls>", "the", "cat", "sat", "on", "the", "mat"] and len(maps["layers"]) == 2
    for weights in maps["layers"]:
        assert weights.shape == (2, 7, 7)
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-5)
        assert np.triu(weights, k=1).sum() > 0.1  # positions attend to later ones too (unlike a GPT's)


def test_partial_fit_keeps_the_first_vocabulary():
    model = MaskedLanguageModel(**{**TINY, "max_iter": 1})
    model.partial_fit(CORPUS[:10])
    vocabulary = dict(model.vocabulary_)
    model.partial_fit(["zebras graze"])
    assert model.vocabulary_ == vocabulary and model.n_iter_ == 2


def test_save_load_and_pickle(mlm, tmp_path):
    mlm.save(tmp_path / "mlm.npz")
    for other in (attnkit.load(tmp_path / "mlm.npz"), pickle.loads(pickle.dumps(mlm))):
        assert other.fill_mask(["the [MASK] sat"]) == mlm.fill_mask(["the [MASK] sat"])
        np.testing.assert_array_equal(other.transform(CORPUS[:3]), mlm.transform(CORPUS[:3]))


# ----------------------------------------------------------------------------------------- classifier
def test_a_classifier_starts_from_the_encoder(mlm):
    X, y = make_negation_sentences(120, random_state=0)
    clf = TransformerClassifier(pretrained=mlm, d_model=32, n_heads=2, d_ff=64, max_iter=2, random_state=0)
    start = start_of(clf)
    assert isinstance(start, FromMaskedLM)
    weights = start.initial_weights()
    assert weights and all(name.startswith(("embedding.", "encoder.")) for name in weights)
    assert "output.bias" in mlm._weights and "output.bias" not in weights
    clf.fit(X, y)
    assert clf.vocabulary_ == mlm.vocabulary_  # the masked-language model's vocabulary, not one learnt from X
    assert 0.0 <= clf.score(X, y) <= 1.0


def test_the_start_copies_the_weights_before_training(mlm):
    X, y = make_negation_sentences(60, random_state=1)
    clf = TransformerClassifier(pretrained=mlm, d_model=32, n_heads=2, d_ff=64, max_iter=1, learning_rate=1e-12,
                                early_stopping=False, random_state=0).fit(X, y)
    for name, value in start_of(clf).initial_weights().items():
        np.testing.assert_allclose(clf._weights[name], value, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("params, match", [
    (dict(d_model=64, n_heads=2, d_ff=64), "d_model=64"),
    (dict(d_model=32, n_heads=2, d_ff=64, tokenizer="char"), "tokenizer='char'"),
    (dict(d_model=32, n_heads=2, d_ff=64, mlm_epochs=1), "mlm_epochs=1"),
])
def test_a_classifier_that_does_not_match_the_encoder_is_refused(mlm, params, match):
    X, y = make_negation_sentences(40, random_state=0)
    with pytest.raises(ValueError, match=match):
        TransformerClassifier(pretrained=mlm, max_iter=1, **params).fit(X, y)


def test_an_unfitted_masked_language_model_is_refused():
    X, y = make_negation_sentences(40, random_state=0)
    with pytest.raises(ValueError, match="is not fitted"):
        TransformerClassifier(pretrained=MaskedLanguageModel(), max_iter=1).fit(X, y)


def test_a_classifier_started_from_it_saves_without_it(mlm, tmp_path):
    X, y = make_negation_sentences(60, random_state=0)
    clf = TransformerClassifier(pretrained=mlm, d_model=32, n_heads=2, d_ff=64, max_iter=1, early_stopping=False,
                                random_state=0).fit(X, y)
    clf.save(tmp_path / "clf.npz")
    loaded = attnkit.load(tmp_path / "clf.npz")
    assert loaded.pretrained is None
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("call, error, match", [
    (lambda m: m.fill_mask(["no mask here"]), ValueError, r"holds no \[MASK\]"),
    (lambda m: m.fill_mask(["the [MASK]"], top_k=0), ValueError, "top_k must be >= 1"),
    (lambda m: m.fill_mask(["the [MASK] " + "cat " * 200]), ValueError, "more than max_len"),
    (lambda m: m.fill_mask("the [MASK]"), TypeError, "single str"),
    (lambda m: m.score([""]), ValueError, "no word seen in training to hide"),
])
def test_bad_arguments(mlm, call, error, match):
    with pytest.raises(error, match=match):
        call(mlm)


@pytest.mark.parametrize("params, error, match", [
    (dict(mask_probability=0), InvalidParameterError, "'mask_probability'"),
    (dict(tokenizer="bpe"), InvalidParameterError, "'tokenizer'"),
    (dict(d_model=30, n_heads=4), ValueError, "multiple of n_heads"),
])
def test_bad_parameters(params, error, match):
    with pytest.raises(error, match=match):
        MaskedLanguageModel(**params).fit(CORPUS)


def test_empty_text_is_refused():
    with pytest.raises(ValueError, match="no token"):
        MaskedLanguageModel(max_iter=1).fit(["", " "])


def test_unfitted():
    for call in (lambda m: m.fill_mask(["[MASK]"]), lambda m: m.transform(["a"]), lambda m: m.score(["a"])):
        with pytest.raises(NotFittedError):
            call(MaskedLanguageModel())


@pytest.mark.parametrize("check", DATA_INDEPENDENT_CHECKS)
def test_sklearn_data_independent_checks(check):
    getattr(estimator_checks, check)("MaskedLanguageModel", MaskedLanguageModel())


def test_validation_or_scoring_with_no_word_to_hide_is_refused(mlm):
    # the validation loss was NaN every epoch, and early stopping chose an epoch on NaN
    for texts in ([], [""], ["zebra quokka"]):
        with pytest.raises(ValueError, match="validation_data holds no word seen in training to hide"):
            MaskedLanguageModel(d_model=16, n_heads=2, d_ff=32, max_iter=2, early_stopping=True,
                                random_state=0).fit(CORPUS, validation_data=texts)
    with pytest.raises(ValueError, match="X holds no word seen in training to hide"):
        mlm.score(["zebra quokka"])
