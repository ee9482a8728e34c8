"""attnkit.estimators._training: batching, splits, and the training loop the estimators share."""

import math
import re
import sys
import types

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from attnkit import nn
from attnkit.estimators._training import (
    History,
    TrainingOptions,
    epoch_checkpointer,
    reseed_dropout,
    train,
    train_validation_split,
)

# ---------------------------------------------------------------------------------- batching


def test_train_validation_split_stratifies():
    y = np.array([0] * 80 + [1] * 20)
    train_idx, val_idx = train_validation_split(100, 0.1, np.random.default_rng(0), stratify=y)
    assert np.bincount(y[val_idx]).tolist() == [8, 2]
    assert np.array_equal(np.sort(np.concatenate([train_idx, val_idx])), np.arange(100))


def test_train_validation_split_keeps_every_class_on_both_sides():
    y = np.array([0] * 50 + [1] * 2)
    train_idx, val_idx = train_validation_split(52, 0.1, np.random.default_rng(0), stratify=y)
    assert set(y[val_idx]) == {0, 1} and set(y[train_idx]) == {0, 1}


def test_train_validation_split_refuses_an_empty_side():
    with pytest.raises(ValueError, match="leaves no samples to validate on"):
        train_validation_split(1, 0.1, np.random.default_rng(0))
    train_idx, val_idx = train_validation_split(2, 0.01, np.random.default_rng(0))
    assert len(train_idx) == len(val_idx) == 1


# --------------------------------------------------------------------------- the loop, on a toy

N_FEATURES, N_CLASSES = 6, 3


def _task(n=240, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, N_FEATURES)).astype(np.float32)
    y = (X @ rng.standard_normal((N_FEATURES, N_CLASSES))).argmax(axis=1)
    return X, y


class _Toy:
    """A linear softmax classifier with the callbacks an estimator would give the loop."""

    def __init__(self, seed=0):
        self.X, self.y = _task()
        self.model = nn.Linear(N_FEATURES, N_CLASSES, rng=seed)
        self.loss = nn.CrossEntropyLoss()
        self.calls = 0

    def batch_loss(self, indices):
        self.calls += 1
        logits, cache = self.model.forward(self.X[indices], training=True)
        loss, grad = self.loss.forward(logits, self.y[indices], training=True)
        self.model.backward(self.loss.backward(1.0, grad), cache)
        return float(loss), 2 * len(indices)

    def validate(self):
        logits, _ = self.model.forward(self.X[:60])
        loss, _ = self.loss.forward(logits, self.y[:60])
        return float(loss), float(np.mean(logits.argmax(axis=1) == self.y[:60]))

    def lengths(self):
        return np.full(len(self.y), 2)


def _options(**kw):
    return TrainingOptions(**{"max_epochs": 8, "batch_size": 32, "learning_rate": 0.05, **kw})


def test_on_epoch_end_sees_each_epoch_with_that_epochs_weights():
    toy, seen = _Toy(), []
    options = _options(max_epochs=3, on_epoch_end=lambda h: seen.append((h.n_epochs, list(h.loss_curve),
                                                                         toy.model.params["weight"].copy())))
    history = train(toy.model, toy.batch_loss, toy.lengths(), options, rng=np.random.default_rng(0))
    assert [epoch for epoch, _, _ in seen] == [1, 2, 3]
    assert [curve for _, curve, _ in seen] == [history.loss_curve[:1], history.loss_curve[:2], history.loss_curve]
    np.testing.assert_array_equal(seen[-1][2], toy.model.params["weight"])
    assert not np.array_equal(seen[0][2], seen[-1][2])


def test_epoch_checkpointer_saves_every_n_epochs_a_copy_of_the_history():
    saves, published = [], []
    estimator = types.SimpleNamespace(checkpoint_path=None, checkpoint_every=2)
    assert epoch_checkpointer(estimator, published.append) is None
    estimator.checkpoint_path = "model.npz"
    estimator.save = saves.append
    callback = epoch_checkpointer(estimator, published.append)
    history = History()
    for epoch in range(1, 6):
        history.n_epochs = epoch
        history.loss_curve.append(float(epoch))
        callback(history)
    assert saves == ["model.npz", "model.npz"] and [h.n_epochs for h in published] == [2, 4]
    assert published[0].loss_curve == [1.0, 2.0] and published[0] is not history


def test_training_lowers_the_loss_and_records_curves():
    toy = _Toy()
    history = train(toy.model, toy.batch_loss, toy.lengths(), _options(), rng=np.random.default_rng(0),
                    validate=toy.validate)
    assert history.n_epochs == 8 and len(history.loss_curve) == 8
    assert len(history.validation_loss_curve) == len(history.validation_scores) == 8
    assert history.loss_curve[-1] < 0.5 * history.loss_curve[0]
    assert history.validation_scores[-1] > 0.9
    assert toy.calls == 8 * math.ceil(240 / 32)
    assert int(history.optimizer_state["step"]) == toy.calls


def test_training_is_reproducible():
    runs = []
    for _ in range(2):
        toy = _Toy()
        train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=2), rng=np.random.default_rng(3))
        runs.append(toy.model.state_dict())
    assert all(np.array_equal(runs[0][k], runs[1][k]) for k in runs[0])


def test_learning_rate_warms_up_then_decays_towards_zero():
    toy = _Toy()
    rates = []
    original = nn.AdamW.step

    def spy(self, **kwargs):
        original(self, **kwargs)
        rates.append(self.last_lr)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nn.optim.AdamW, "step", spy)
        train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=5, warmup_fraction=0.2),
              rng=np.random.default_rng(0))
    total = 5 * 8
    assert rates[0] == pytest.approx(0.05 / 8) and rates[7] == pytest.approx(0.05)  # warm-up: 8 updates
    # the decay ends one update after the last: the last update still moves the weights (at 0 it moved nothing)
    assert rates[-1] == pytest.approx(0.05 / (total - 8 + 1)) and len(rates) == total
    assert all(a >= b for a, b in zip(rates[7:], rates[8:]))


def test_updates_clip_and_zero_the_gradients_in_their_own_pass():
    # The loop's clip_coefficient + step(grad_scale=, zero_grad=True) against the plain sequence (zero_grad,
    # backward, clip_grad_norm, step) replayed on a twin: the same weights bit for bit, no gradient left behind.
    toy, twin, seen, optimizers = _Toy(), _Toy(), [], []
    options = _options(max_epochs=2, max_grad_norm=0.05)  # small enough to clip every update
    original_loss, original_step = toy.batch_loss, nn.AdamW.step

    def recording_loss(indices):
        seen.append(np.array(indices))
        return original_loss(indices)

    def spy(self, **kwargs):
        optimizers.append(self)
        assert kwargs["zero_grad"] and kwargs["grad_scale"] < 1.0
        original_step(self, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nn.optim.AdamW, "step", spy)
        train(toy.model, recording_loss, toy.lengths(), options, rng=np.random.default_rng(0))
    engine = optimizers[0]
    optimizer = nn.AdamW(twin.model, lr=engine.lr, weight_decay=engine.weight_decay, schedule=engine.schedule)
    for indices in seen:
        twin.model.zero_grad()
        twin.batch_loss(indices)
        nn.clip_grad_norm(twin.model, options.max_grad_norm)
        optimizer.step()
    assert len(seen) == 2 * 8
    for (name, a, grad), (_, b, _) in zip(toy.model.named_parameters(), twin.model.named_parameters()):
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert not grad.any(), name


def test_early_stopping_restores_the_best_weights():
    toy = _Toy()
    snapshots, losses = [], iter([0.9, 0.5, 0.6, 0.7, 0.8, 0.2])

    def validate():
        snapshots.append(toy.model.state_dict())
        return next(losses), 0.0

    history = train(toy.model, toy.batch_loss, toy.lengths(), _options(early_stopping=True, n_iter_no_change=3),
                    rng=np.random.default_rng(0), validate=validate)
    assert history.stopped_early and history.n_epochs == 5 and history.best_epoch == 2
    assert history.best_value == 0.5
    assert all(np.array_equal(toy.model.params[k], snapshots[1][k]) for k in toy.model.params)


def test_early_stopping_on_the_score_maximises_it():
    toy = _Toy()
    scores = iter([0.5, 0.7, 0.7, 0.69, 0.95])
    history = train(toy.model, toy.batch_loss, toy.lengths(),
                    _options(early_stopping=True, n_iter_no_change=2, monitor="score"),
                    rng=np.random.default_rng(0), validate=lambda: (1.0, next(scores)))
    assert history.n_epochs == 4 and history.best_epoch == 2 and history.best_value == 0.7


def test_tol_decides_what_counts_as_better():
    toy = _Toy()
    losses = iter([1.0, 0.99, 0.98, 0.97])
    history = train(toy.model, toy.batch_loss, toy.lengths(),
                    _options(early_stopping=True, n_iter_no_change=2, tol=0.05),
                    rng=np.random.default_rng(0), validate=lambda: (next(losses), 0.0))
    assert history.n_epochs == 3 and history.best_epoch == 1


def test_without_early_stopping_the_last_weights_are_kept():
    toy = _Toy()
    losses = iter([0.1, 0.5, 0.6])
    train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=3), rng=np.random.default_rng(0),
          validate=lambda: (next(losses), 0.0))
    last = toy.model.state_dict()
    toy2 = _Toy()
    train(toy2.model, toy2.batch_loss, toy2.lengths(), _options(max_epochs=3), rng=np.random.default_rng(0))
    assert all(np.array_equal(last[k], toy2.model.params[k]) for k in last)


def test_training_loss_plateau_stops_without_validation():
    toy = _Toy()
    history = train(toy.model, toy.batch_loss, toy.lengths(),
                    _options(max_epochs=50, n_iter_no_change=2, tol=10.0), rng=np.random.default_rng(0))
    assert history.stopped_early and history.n_epochs == 3


def test_early_stopping_needs_validation():
    toy = _Toy()
    with pytest.raises(ValueError, match="early_stopping needs a validate callback"):
        train(toy.model, toy.batch_loss, toy.lengths(), _options(early_stopping=True), rng=np.random.default_rng(0))


def test_keyboard_interrupt_keeps_the_best_weights_and_warns():
    toy = _Toy()
    snapshots, epoch = [], [0]
    losses = [0.5, 0.3, 0.4]

    def validate():
        snapshots.append(toy.model.state_dict())
        epoch[0] += 1
        return losses[epoch[0] - 1], 0.0

    def batch_loss(indices):
        if epoch[0] == 3 and toy.calls == 3 * 8 + 2:  # mid-way through epoch 4
            raise KeyboardInterrupt
        return toy.batch_loss(indices)

    with pytest.warns(UserWarning, match=r"interrupted \(KeyboardInterrupt\) during epoch 4; the weights of epoch 2"):
        history = train(toy.model, batch_loss, toy.lengths(), _options(), rng=np.random.default_rng(0),
                        validate=validate)
    assert history.interrupted and history.n_epochs == 3 and history.best_epoch == 2
    assert all(np.array_equal(toy.model.params[k], snapshots[1][k]) for k in toy.model.params)


def test_keyboard_interrupt_in_the_first_epoch_keeps_the_current_weights():
    toy = _Toy()

    def batch_loss(indices):
        if toy.calls == 2:
            raise KeyboardInterrupt
        return toy.batch_loss(indices)

    with pytest.warns(UserWarning, match="no epoch was completed"):
        history = train(toy.model, batch_loss, toy.lengths(), _options(), rng=np.random.default_rng(0))
    assert history.interrupted and history.n_epochs == 0 and history.loss_curve == []
    assert all(np.isfinite(v).all() for v in toy.model.params.values())


@pytest.mark.parametrize("blow_up", ["exploding", "nan"])
def test_a_diverging_loss_stops_with_a_warning_and_the_best_weights(blow_up):
    # learning_rate=1e6 left a classifier with loss_curve_ [1.47, 1.98e12] and no word: now training stops at the
    # first batch that explodes (finite or not) and restores the best epoch's weights.
    toy, snapshots = _Toy(), []

    def validate():
        snapshots.append(toy.model.state_dict())
        return toy.validate()

    def batch_loss(indices):
        loss, tokens = toy.batch_loss(indices)
        if toy.calls == 2 * 8 + 4:  # 8 updates an epoch: epoch 3's fourth diverges
            return (1e12 if blow_up == "exploding" else float("nan")), tokens
        return loss, tokens

    with pytest.warns(ConvergenceWarning, match=r"the training loss diverged to (1e\+12|nan) at epoch 3, update 20: "
                                                r"training stopped and the weights of epoch 2 \(the best seen\) were "
                                                r"restored; try a lower learning_rate") as caught:
        history = train(toy.model, batch_loss, toy.lengths(), _options(early_stopping=True),
                        rng=np.random.default_rng(0), validate=validate)
    assert caught[0].filename == __file__  # the warning points at the caller's line, not attnkit's
    assert history.diverged and history.n_epochs == 2 and len(history.loss_curve) == 2 and history.kept_epoch == 2
    assert all(np.array_equal(toy.model.params[k], snapshots[1][k]) for k in toy.model.params)


def test_best_weights_that_cannot_read_the_diverging_batch_are_not_kept():
    # learning_rate=1e10: epoch 1 ended on weights of ~5e9, which predicted NaN; restored as "the best seen", they
    # left a fitted model that answered NaN. Now the restored weights read the batch that diverged once more: a
    # non-finite loss there fails the call, and the model is left as it was.
    toy = _Toy()
    before = toy.model.state_dict()

    def batch_loss(indices):
        loss, tokens = toy.batch_loss(indices)
        return (float("nan") if toy.calls > 8 + 2 else loss), tokens  # epoch 2 and everything after it

    with pytest.raises(ValueError, match=r"diverged to nan at epoch 2, update 11, and the weights of epoch 1 \(the "
                                         r"best seen\) give a loss of nan on that batch: the model is left as it was "
                                         r"before the call; try a lower learning_rate"):
        train(toy.model, batch_loss, toy.lengths(), _options(), rng=np.random.default_rng(0))
    assert all(np.array_equal(toy.model.params[k], before[k]) for k in toy.model.params)


def test_a_loss_that_merely_rises_is_not_divergence():
    toy = _Toy()

    def batch_loss(indices):
        loss, tokens = toy.batch_loss(indices)
        return loss * (1 + toy.calls), tokens  # noisy and rising 20x over the run, far from 100x its start

    history = train(toy.model, batch_loss, toy.lengths(), _options(max_epochs=2), rng=np.random.default_rng(0))
    assert not history.diverged and history.n_epochs == 2


@pytest.mark.parametrize("where", ["loss", "gradient"])
def test_non_finite_values_stop_with_a_clear_error(where):
    toy = _Toy()

    def batch_loss(indices):
        loss, tokens = toy.batch_loss(indices)
        if toy.calls == 3:
            if where == "loss":
                return float("nan"), tokens
            toy.model.grads["weight"][0, 0] = np.inf
        return loss, tokens

    before = toy.model.state_dict()
    with pytest.raises(ValueError, match=r"epoch 1, update 3( \(.*\))?, before the first epoch of this call ended "
                                         r"\(the model is left as it was before the call\); try a lower "
                                         r"learning_rate"):
        train(toy.model, batch_loss, toy.lengths(), _options(), rng=np.random.default_rng(0))
    assert all(np.array_equal(toy.model.params[k], before[k]) for k in before)


def test_histories_continue_across_calls():
    toy = _Toy()
    history = train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=2), rng=np.random.default_rng(0))
    history = train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=3), rng=np.random.default_rng(1),
                    history=history)
    assert history.n_epochs == 5 and len(history.loss_curve) == 5
    # a fit plans a new schedule and a new optimiser: its step count restarts
    assert int(history.optimizer_state["step"]) == 3 * 8


def test_constant_schedule_resumes_the_optimiser():
    toy = _Toy()
    options = _options(max_epochs=1, decay="constant", warmup_fraction=0.5)
    history = train(toy.model, toy.batch_loss, toy.lengths(), options, rng=np.random.default_rng(0))
    assert history.warmup_steps == 4
    history = train(toy.model, toy.batch_loss, toy.lengths(), options, rng=np.random.default_rng(1),
                    history=history)
    assert int(history.optimizer_state["step"]) == 16 and history.warmup_steps == 4 and history.n_epochs == 2


def test_verbose_prints_one_line_per_epoch(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # no bar, whatever is installed
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    toy = _Toy()
    train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=3, verbose=1, score_name="accuracy"),
          rng=np.random.default_rng(0), validate=toy.validate)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    pattern = (r"epoch +\d/3  loss \d\.\d{4}  val loss \d\.\d{4}  val accuracy \d\.\d{4}  [\d,]+ tokens/s  "
               r"elapsed \d+\.\d s( \*)?")
    assert all(re.fullmatch(pattern, line) for line in lines), lines
    assert lines[0].endswith("*")


def test_verbose_reports_the_stop(capsys):
    toy = _Toy()
    train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=9, n_iter_no_change=1, tol=10.0, verbose=1),
          rng=np.random.default_rng(0))
    out = capsys.readouterr().out
    assert "stopping: the training loss did not improve by more than tol=10.0 for 1 epochs" in out


def test_progress_bar_when_tqdm_is_installed(monkeypatch, capsys):
    bars = []

    class FakeBar:
        def __init__(self, **kwargs):
            self.kwargs, self.postfix, self.n, self.closed = kwargs, [], 0, False
            bars.append(self)

        def update(self, n):
            self.n += n

        def close(self):
            self.closed = True

        def set_postfix(self, **kwargs):
            self.postfix.append(kwargs)

    fake = types.ModuleType("tqdm.auto")
    fake.tqdm = FakeBar
    monkeypatch.setitem(sys.modules, "tqdm.auto", fake)
    toy = _Toy()
    train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=2, verbose=1), rng=np.random.default_rng(0))
    assert bars == []  # stdout is captured, not a terminal: a bar would only litter a log
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=2, verbose=1), rng=np.random.default_rng(0))
    assert [bar.kwargs["desc"] for bar in bars] == ["epoch 1", "epoch 2"]
    assert all(len(bar.postfix) == 8 and "loss" in bar.postfix[0] and "tokens_per_s" in bar.postfix[0] for bar in bars)
    assert all(bar.kwargs["leave"] is False and bar.kwargs["total"] == bar.n == 8 and bar.closed for bar in bars)


def test_history_defaults():
    history = History()
    assert history.n_epochs == 0 and history.loss_curve == [] and history.optimizer_state is None


def test_reseeding_dropout_makes_masks_depend_on_the_seed_only():
    def masks(model, seed):
        reseed_dropout(model, np.random.default_rng(seed))
        return [model.forward(np.ones((4, 8)), training=True)[0] for _ in range(2)]

    used = nn.FeedForward(8, 16, rng=0, dropout=0.5)
    used.forward(np.ones((4, 8)), training=True)  # advance its generator
    fresh = nn.FeedForward(8, 16, rng=0, dropout=0.5)
    assert all(np.array_equal(a, b) for a, b in zip(masks(used, 7), masks(fresh, 7)))
    assert not np.array_equal(masks(fresh, 7)[0], masks(fresh, 8)[0])



def test_long_passes_are_cut_into_epochs_of_at_most_epoch_updates():
    # 240 samples / 32 = 8 updates a pass: epochs of at most 3 updates cut each pass in 3 (3, 3, 2 updates)
    toy, sizes = _Toy(), []

    def batch_loss(indices):
        sizes.append(len(indices))
        return toy.batch_loss(indices)

    validated = []
    history = train(toy.model, batch_loss, toy.lengths(), _options(max_epochs=5, epoch_updates=3),
                    rng=np.random.default_rng(0), validate=lambda: validated.append(1) or toy.validate())
    assert history.n_epochs == 5 and len(history.loss_curve) == len(validated) == 5
    assert len(sizes) == 3 + 3 + 2 + 3 + 3 and history.optimizer_state["step"] == 14
    assert sum(sizes[:8]) == 240  # the first three epochs are one whole pass


def test_the_schedule_ends_at_the_last_planned_update_of_cut_epochs():
    toy = _Toy()
    history = train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=3, epoch_updates=3),
                    rng=np.random.default_rng(0))
    assert history.warmup_steps == 1  # 10% of 3 + 3 + 2 updates, rounded


def test_progress_lines_within_an_epoch_when_no_bar(monkeypatch, capsys):
    from attnkit.estimators import _progress

    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    monkeypatch.setattr(_progress, "PROGRESS_SECONDS", 0.0)
    toy = _Toy()
    train(toy.model, toy.batch_loss, toy.lengths(), _options(max_epochs=1, verbose=1), rng=np.random.default_rng(0))
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert len(lines) == 8  # 7 progress lines (not after the last update) and the epoch's line
    assert all(re.fullmatch(r"  epoch 1: \d/8 updates  loss \d\.\d{4}  [\d,]+ tokens/s  \d+ s left in the epoch", line)
               for line in lines[:7]), lines
