"""attnkit.estimators._base: the fitted-state protocol and inference batching that the network estimators
share, checked on TransformerClassifier and Seq2SeqTransformer."""

import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.base import clone

import attnkit
from attnkit import TransformerClassifier
from attnkit.estimators._base import NetworkEstimator
from attnkit.estimators._trainable import TrainableEstimator
from estimator_cases import CASES, assert_same_outputs, fit_case, make_case, outputs


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    return make_case(request.param)


@pytest.fixture(scope="module")
def fitted(case):
    return fit_case(case)


def test_both_estimators_use_the_base(case):
    cls, _, _, _, network_class = case
    assert issubclass(cls, TrainableEstimator) and cls._network_class is network_class


def test_the_embedder_holds_a_network_without_a_training_skeleton():
    assert issubclass(attnkit.TransformerEmbedder, NetworkEstimator)
    assert not issubclass(attnkit.TransformerEmbedder, TrainableEstimator)
    assert not hasattr(attnkit.TransformerEmbedder, "_fit") and not hasattr(attnkit.TransformerEmbedder, "_batch_loss")


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
    assert_same_outputs(model, restored, X[:6])


def test_save_and_load_keep_the_predictions_bit_for_bit(case, fitted, tmp_path):
    _, _, X, _, _ = case
    fitted.save(tmp_path / "model.npz")
    restored = attnkit.load(tmp_path / "model.npz")
    assert_same_outputs(fitted, restored, X[:6])
    assert restored._network_seed == fitted._network_seed and restored._network_config == fitted._network_config
    for name in ("n_iter_", "loss_curve_", "validation_loss_curve_", "validation_scores_", "best_validation_score_",
                 "best_epoch_"):
        assert getattr(restored, name) == getattr(fitted, name), name


def test_set_params_after_fit_changes_nothing_until_a_refit(case, fitted):
    _, _, X, _, _ = case
    before = outputs(fitted, X[:6])
    changed = clone(fitted)  # unfitted copy with the same params, to restore later
    fitted.set_params(lowercase=not fitted.lowercase, tokenizer="char" if fitted.tokenizer == "word" else "word")
    try:
        for left, right in zip(before, outputs(fitted, X[:6])):
            np.testing.assert_array_equal(left, right)
    finally:
        fitted.set_params(**changed.get_params())


def test_predictions_do_not_depend_on_the_batching(case, fitted, monkeypatch):
    _, _, X, _, _ = case
    before = outputs(fitted, X[:24])
    monkeypatch.setattr(fitted, "_batch_tokens", 40)  # one or a few samples per batch
    for left, right in zip(before, outputs(fitted, X[:24])):
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


def test_a_class_registered_twice_under_one_name_is_refused():
    class TransformerClassifier(NetworkEstimator):  # noqa: F811 -- same name, another class
        pass

    with pytest.raises(ValueError, match="an estimator named 'TransformerClassifier' is already registered"):
        attnkit.io.register_estimator(TransformerClassifier)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert attnkit.io.register_estimator(attnkit.TransformerClassifier) is attnkit.TransformerClassifier
