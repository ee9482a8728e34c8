"""attnkit.estimators._trainable: the fit skeleton (validation split, early stopping, warm start, checkpoints,
interruption, divergence) that TransformerClassifier and Seq2SeqTransformer share, checked on both."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import attnkit
from attnkit import Seq2SeqTransformer
from attnkit.estimators._trainable import Samples
from estimator_cases import CASES, assert_same_outputs, fit_case, make_case, outputs


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    return make_case(request.param)


@pytest.fixture(scope="module")
def fitted(case):
    return fit_case(case)


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


def test_after_training_receives_the_kept_epochs_evaluation(case, monkeypatch):
    """What _evaluate returns beyond (loss, score) for the held weights (the classifier's validation logits)
    reaches _after_training as kept_evaluation, in a fit and in a warm-started one, whose epochs count on from the
    first fit's."""
    cls, params, X, y, _ = case
    seen, original = [], cls._after_training

    def recording(self, *args, kept_evaluation, **kwargs):
        seen.append(kept_evaluation)
        return original(self, *args, kept_evaluation=kept_evaluation, **kwargs)

    monkeypatch.setattr(cls, "_after_training", recording)
    model = cls(**{**params, "max_iter": 3, "early_stopping": True, "n_iter_no_change": 3})
    validation_data = (X[40:], y[40:])
    for warm_start in (False, True):
        model.set_params(warm_start=warm_start).fit(X[:40], y[:40], validation_data=validation_data)
        fresh = model._evaluate(model._network(), model._read_validation_data(validation_data))[2:]
        if fresh:
            np.testing.assert_array_equal(seen[-1], fresh[0])
        else:
            assert seen[-1] is None
    assert model.n_iter_ == 6 and len(seen) == 2


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


def test_continuing_refuses_parameters_that_shape_another_network(case):
    # warm_start trained the old network while get_params() (and a saved file) gave the new shape
    cls, params, X, y, _ = case
    model = cls(**{**params, "early_stopping": False, "max_iter": 1}).fit(X, y)
    heads = model._network_config["n_heads"]
    model.set_params(warm_start=True, n_heads=1 if heads != 1 else 2)
    with pytest.raises(ValueError, match=rf"warm_start=True continues the fitted network, which these parameters no "
                                         rf"longer describe: n_heads=\d \(the network's: {heads}\)"):
        model.fit(X, y)
    model.set_params(n_heads=heads, learning_rate=1e-4).fit(X, y)  # training parameters may change
    assert model.n_iter_ == 2


def test_checkpoints_hold_the_epoch_they_were_written_at(case, tmp_path):
    cls, params, X, y, _ = case
    path = tmp_path / "checkpoint.npz"
    model = cls(**{**params, "early_stopping": False, "max_iter": 2, "checkpoint_path": str(path)}).fit(X, y)
    checkpoint = attnkit.load(path)
    assert checkpoint.n_iter_ == 2 and checkpoint._training_state["kept_epoch"] == 2
    assert_same_outputs(model, checkpoint, X[:4])


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
    assert len(outputs(model, X[:3])[0]) == 3


def test_a_first_fit_that_diverges_leaves_no_fitted_estimator(case):
    cls, params, X, y, _ = case
    model = cls(**{**params, "learning_rate": 1e30, "early_stopping": False})
    with pytest.raises(ValueError, match="diverged .* try a lower learning_rate"):
        model.fit(X, y)
    with pytest.raises(NotFittedError):
        outputs(model, X[:2])



def test_samples_subset():
    samples = Samples([[1], [2, 3], [4]], np.array([1, 2, 1]), np.array([0, 1, 0]), np.ones(3), np.array([0, 1, 0]))
    part = samples.subset(np.array([2, 0]))
    assert part.inputs == [[4], [1]] and part.lengths.tolist() == [1, 1] and part.targets.tolist() == [0, 0]
    assert len(part) == 2 and Samples([[1]], np.array([1])).subset(np.array([0])).targets is None


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


def test_a_fit_of_one_update_moves_the_weights(case):
    # The schedule decayed to 0 at the last planned update: a fit of one update (one batch, max_iter=1) changed
    # nothing, whatever the learning rate, and every fit's last update was wasted.
    cls, params, X, y, _ = case
    one = {**params, "max_iter": 1, "batch_size": len(X), "early_stopping": False}
    slow, fast = (outputs(cls(**one, learning_rate=lr).fit(X, y), X[:4]) for lr in (1e-4, 1e-1))
    assert not np.array_equal(slow[0], fast[0])
