"""attnkit.estimators._base: the fitted-state protocol, fit skeleton and inference batching that
TransformerClassifier and Seq2SeqTransformer share, checked on both."""

import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

import attnkit
from attnkit import Seq2SeqTransformer, TransformerClassifier
from attnkit.datasets import make_case_pairs, make_negation_sentences
from attnkit.estimators._base import NetworkEstimator, Samples
from attnkit.nn import EncoderDecoder, SequenceClassifier

TINY_CLASSIFIER = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, max_iter=3, random_state=0)
TINY_SEQ2SEQ = dict(d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, max_iter=3,
                    max_target_len=40, random_state=0)


def _classifier_task(n=120):
    X, y = make_negation_sentences(n, random_state=0)
    return X, y


def _seq2seq_task(n=100):
    return make_case_pairs(n, random_state=0)


CASES = {
    "classifier": (TransformerClassifier, TINY_CLASSIFIER, _classifier_task, SequenceClassifier),
    "seq2seq": (Seq2SeqTransformer, TINY_SEQ2SEQ, _seq2seq_task, EncoderDecoder),
}


def _outputs(estimator, X):
    """What a user reads off a fitted estimator: probabilities, or generated texts and their scores."""
    if isinstance(estimator, TransformerClassifier):
        return [estimator.predict_proba(X), estimator.transform(X)]
    return [estimator.predict(X, max_length=12), estimator.sequence_log_proba(X, estimator.predict(X, max_length=12))]


def _assert_same_outputs(a, b, X):
    for left, right in zip(_outputs(a, X), _outputs(b, X)):
        np.testing.assert_array_equal(left, right)


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    cls, params, task, network_class = CASES[request.param]
    X, y = task()
    return cls, params, X, y, network_class


@pytest.fixture(scope="module")
def fitted(case):
    cls, params, X, y, _ = case
    return cls(**{**params, "early_stopping": True}).fit(X, y)  # the classifier's default, not Seq2Seq's


def test_both_estimators_use_the_base(case):
    cls, _, _, _, network_class = case
    assert issubclass(cls, NetworkEstimator) and cls._network_class is network_class


def test_fitted_state_is_plain_data_over_the_live_network(case, fitted):
    _, _, X, _, network_class = case
    network = fitted._network()
    assert isinstance(network, network_class)
    for name, param, _ in network.named_parameters():
        assert fitted._weights[name] is param  # the arrays the network trains in place
    assert isinstance(fitted._network_seed, int) and isinstance(fitted._network_config, dict)
    state = fitted.__getstate__()
    assert "_cache" not in state and all(isinstance(v, np.ndarray) for v in state["_weights"].values())


@pytest.mark.parametrize("attention", ["softmax", "performer"])
def test_pickling_keeps_the_predictions_bit_for_bit(case, attention):
    """Performer's random features are not weights: the saved seed rebuilds them (0.1.0 lost them)."""
    cls, params, X, y, _ = case
    model = cls(**{**params, "attention": attention, "max_iter": 1}).fit(X, y)
    restored = pickle.loads(pickle.dumps(model))
    assert "_cache" not in restored.__dict__
    _assert_same_outputs(model, restored, X[:6])


def test_save_and_load_keep_the_predictions_bit_for_bit(case, fitted, tmp_path):
    _, _, X, _, _ = case
    fitted.save(tmp_path / "model.npz")
    restored = attnkit.load(tmp_path / "model.npz")
    _assert_same_outputs(fitted, restored, X[:6])
    assert restored._network_seed == fitted._network_seed and restored._network_config == fitted._network_config
    for name in ("n_iter_", "loss_curve_", "validation_loss_curve_", "validation_scores_", "best_validation_score_",
                 "best_epoch_"):
        assert getattr(restored, name) == getattr(fitted, name), name


def test_the_training_attributes_mean_the_same_in_both(case, fitted):
    """n_iter_ counts epochs, the curves have one entry per epoch, and best_validation_score_ is the score
    of the kept epoch: the best monitored one under early stopping."""
    cls, _, _, _, _ = case
    state = fitted._training_state
    assert fitted.n_iter_ == state["n_epochs"] == len(fitted.loss_curve_) == len(fitted.validation_scores_) \
        == len(fitted.validation_loss_curve_)
    kept = state["kept_epoch"]
    if cls is Seq2SeqTransformer:  # stops on the validation loss
        assert kept == 1 + int(np.argmin(fitted.validation_loss_curve_))
    else:  # early_stopping_metric="score" by default
        assert kept == 1 + int(np.argmax(fitted.validation_scores_))
    assert fitted.best_validation_score_ == fitted.validation_scores_[kept - 1] and fitted.best_epoch_ == kept


def test_the_kept_epoch_is_the_one_whose_weights_are_held(case):
    """The validation score recomputed from the held weights is best_validation_score_."""
    cls, params, X, y, _ = case
    model = cls(**{**params, "max_iter": 4, "early_stopping": True, "n_iter_no_change": 4}).fit(
        X[:40], y[:40], validation_data=(X[40:], y[40:]))
    validation = model._read_validation_data((X[40:], y[40:]))
    assert model._evaluate(model._network(), validation)[1] == model.best_validation_score_


def test_without_validation_there_is_no_validation_score(case):
    cls, params, X, y, _ = case
    model = cls(**{**params, "early_stopping": False, "max_iter": 2}).fit(X, y)
    assert model.validation_scores_ == [] and model.best_validation_score_ is None and model.n_iter_ == 2
    assert model.best_epoch_ == 2  # the weights of the last epoch are kept


def test_warm_start_continues_and_a_refit_starts_over(case):
    cls, params, X, y, _ = case
    model = cls(**{**params, "early_stopping": False, "max_iter": 2}).fit(X, y)
    first = list(model.loss_curve_)
    model.set_params(warm_start=True).fit(X, y)
    assert model.n_iter_ == 4 and model.loss_curve_[:2] == first and len(model.loss_curve_) == 4
    model.set_params(warm_start=False).fit(X, y)
    assert model.n_iter_ == 2 and model.loss_curve_ == first  # the same seed, the same fit


def test_checkpoints_hold_the_epoch_they_were_written_at(case, tmp_path):
    cls, params, X, y, _ = case
    path = tmp_path / "checkpoint.npz"
    model = cls(**{**params, "early_stopping": False, "max_iter": 2, "checkpoint_path": str(path)}).fit(X, y)
    checkpoint = attnkit.load(path)
    assert checkpoint.n_iter_ == 2 and checkpoint._training_state["kept_epoch"] == 2
    _assert_same_outputs(model, checkpoint, X[:4])


def test_ctrl_c_keeps_the_best_weights_and_leaves_a_usable_estimator(case, monkeypatch):
    cls, params, X, y, network_class = case
    original, calls = network_class.backward, []

    def interrupt_in_epoch_3(self, grad, cache):
        calls.append(1)
        if len(calls) > 2 * updates_per_epoch:
            raise KeyboardInterrupt
        return original(self, grad, cache)

    model = cls(**{**params, "max_iter": 5, "batch_size": 16, "validation_fraction": 0.25, "n_iter_no_change": 5,
                  "early_stopping": True})
    updates_per_epoch = int(np.ceil(round(0.75 * len(X)) / 16))
    monkeypatch.setattr(network_class, "backward", interrupt_in_epoch_3)
    with pytest.warns(UserWarning, match=r"training interrupted \(KeyboardInterrupt\) during epoch 3") as caught:
        model.fit(X, y)
    assert caught[0].filename == __file__  # at the caller's line, not attnkit's
    monkeypatch.undo()
    assert model.n_iter_ == 2 and model._training_state["interrupted"]
    assert model.best_epoch_ == model._training_state["kept_epoch"] in (1, 2)
    assert model.best_validation_score_ == model.validation_scores_[model._training_state["kept_epoch"] - 1]
    assert len(_outputs(model, X[:3])[0]) == 3


def test_set_params_after_fit_changes_nothing_until_a_refit(case, fitted):
    _, _, X, _, _ = case
    before = _outputs(fitted, X[:6])
    changed = clone(fitted)  # unfitted copy with the same params, to restore later
    fitted.set_params(lowercase=not fitted.lowercase, tokenizer="char" if fitted.tokenizer == "word" else "word")
    try:
        for left, right in zip(before, _outputs(fitted, X[:6])):
            np.testing.assert_array_equal(left, right)
    finally:
        fitted.set_params(**changed.get_params())


def test_predictions_do_not_depend_on_the_batching(case, fitted, monkeypatch):
    _, _, X, _, _ = case
    before = _outputs(fitted, X[:24])
    monkeypatch.setattr(fitted, "_batch_tokens", 40)  # one or a few samples per batch
    for left, right in zip(before, _outputs(fitted, X[:24])):
        np.testing.assert_array_equal(left, right)


@given(st.lists(st.integers(0, 300), max_size=60), st.integers(1, 2000), st.none() | st.integers(1, 8))
def test_inference_batches_cover_every_sample_once_within_the_budget(lengths, budget, max_samples):
    estimator = TransformerClassifier()
    estimator._batch_tokens = budget
    batches = list(estimator._inference_batches(lengths, max_samples=max_samples))
    seen = np.concatenate(batches) if batches else np.zeros(0, int)
    assert sorted(seen.tolist()) == list(range(len(lengths)))
    for rows in batches:
        widths = np.maximum(np.asarray(lengths)[rows], 1)
        assert np.all(np.diff(widths) >= 0)  # sorted: little padding
        assert len(rows) == 1 or len(rows) * widths.max() <= budget
        assert max_samples is None or len(rows) <= max_samples


def test_samples_subset():
    samples = Samples([[1], [2, 3], [4]], np.array([1, 2, 1]), np.array([0, 1, 0]), np.ones(3), np.array([0, 1, 0]))
    part = samples.subset(np.array([2, 0]))
    assert part.inputs == [[4], [1]] and part.lengths.tolist() == [1, 1] and part.targets.tolist() == [0, 0]
    assert len(part) == 2 and Samples([[1]], np.array([1])).subset(np.array([0])).targets is None


def test_a_class_registered_twice_under_one_name_is_refused():
    class TransformerClassifier(NetworkEstimator):  # noqa: F811 -- same name, another class
        pass

    with pytest.raises(ValueError, match="an estimator named 'TransformerClassifier' is already registered"):
        attnkit.io.register_estimator(TransformerClassifier)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert attnkit.io.register_estimator(attnkit.TransformerClassifier) is attnkit.TransformerClassifier


def test_early_stopping_on_a_handful_of_samples_warns_at_the_callers_line(case):
    # The README's 8-sentence fine-tuning example held out 1 sentence and kept epoch 1: a coin flip.
    cls, params, X, y, _ = case
    model = cls(**{**params, "early_stopping": True, "max_iter": 1})
    with pytest.warns(UserWarning, match=r"early stopping chooses the epoch to keep on 2 validation sample\(s\) "
                                         r"\(validation_fraction=0.1 of 20 samples\): too few") as caught:
        model.fit(X[:20], y[:20])
    assert caught[0].filename == __file__
    with pytest.warns(UserWarning, match=r"on 3 validation sample\(s\) \(validation_data\)"):
        model.fit(X[:20], y[:20], validation_data=(X[20:23], y[20:23]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(X[:20], y[:20], validation_data=(X[20:30], y[20:30]))  # 10 samples: no warning
        model.set_params(early_stopping=False).fit(X[:8], y[:8])


def test_a_first_fit_that_diverges_leaves_no_fitted_estimator(case):
    cls, params, X, y, _ = case
    model = cls(**{**params, "learning_rate": 1e30, "early_stopping": False})
    with pytest.raises(ValueError, match="diverged .* try a lower learning_rate"):
        model.fit(X, y)
    with pytest.raises(NotFittedError):
        _outputs(model, X[:2])
