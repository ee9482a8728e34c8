"""The one training loop of attnkit's estimators: epochs of shuffled, length-bucketed minibatches.

An estimator builds its :class:`attnkit.nn.Module`, then hands :func:`train` three things: a
``batch_loss(indices)`` callback that runs forward and backward on those samples (adding the
gradients into the model) and returns the batch's loss and token count; the samples' lengths
(for bucketing and tokens/s); and, optionally, a ``validate()`` callback giving a validation loss
and score. The loop owns everything else, the same for every estimator: AdamW with a warm-up and
decay schedule, gradient clipping, early stopping on the validation loss or score with the best
weights restored, the loss and validation curves, verbose lines and a tqdm bar, and Ctrl-C.

It is the loop of scikit-learn's MLP, boring on purpose. Its whole carried-over state (optimiser
moments, step count, curves) is a dict of NumPy arrays and Python values, so an estimator can keep
it between ``partial_fit`` calls and still pickle, clone and save as plain data.
"""

import dataclasses
import math
import time

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from attnkit._warnings import warn
from attnkit.batching import training_batches
from attnkit.estimators._progress import EpochProgress, epoch_line
from attnkit.nn.layers import Dropout
from attnkit.nn.optim import AdamW, WarmupSchedule, clip_coefficient

__all__ = [
    "History",
    "TrainingOptions",
    "reseed_dropout",
    "train",
    "train_validation_split",
]

# A batch loss this many times the call's first one (or 1, if larger) is divergence, not noise: a
# cross-entropy starts near log(classes) and falls; learning_rate=1e6 drives it to ~1e12 in an epoch.
DIVERGENCE_FACTOR = 100


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """How to train; the estimator maps its parameters onto these.

    Attributes
    ----------
    max_epochs : int
        Epochs to run in this call (unless stopped early).
    batch_size : int
        Samples per update.
    learning_rate : float
        Peak AdamW rate.
    weight_decay : float
        AdamW's decoupled weight decay (matrices only, :func:`attnkit.nn.default_decay`).
    warmup_fraction : float
        Share of this call's updates spent in the linear warm-up.
    decay : {"linear", "cosine", "constant"}
        Shape of the rate after the warm-up, reaching 0 at the last planned update
        (``"constant"``: no decay, for ``partial_fit``).
    max_grad_norm : float
        Clip the global gradient norm to this (``inf``: no clipping).
    early_stopping : bool
        Stop when the monitored validation value has not improved by ``tol`` for
        ``n_iter_no_change`` epochs, and restore the best weights. Needs ``validate``.
    n_iter_no_change : int
        Patience, in epochs. Without early stopping, training stops when the *training* loss has
        not improved by ``tol`` for this many epochs (scikit-learn's MLP convergence rule).
    tol : float
        Smallest change that counts as an improvement.
    monitor : {"loss", "score"}
        Which validation value early stopping follows: the loss (lower is better) or the score
        (higher is better).
    score_name : str
        Name of the validation score in the verbose lines (e.g. "accuracy").
    verbose : int
        0 silent; >= 1 one line per epoch, and a progress bar within the epoch when tqdm is
        installed.
    bucket : bool
        Group samples of similar length into batches.
    label : str
        What the verbose lines and the progress bar call an epoch (e.g. "pre-training epoch").
    epoch_updates : int or None
        An epoch is a pass over the training samples, or, when a pass has more updates than this, an equal
        part of a pass of at most this many updates (the next epoch goes on with the pass): validation,
        early stopping, checkpoints and the verbose line come that often, however long the data.
    on_epoch_end : callable or None
        Called with the :class:`History` after each epoch (the model holds that epoch's weights),
        e.g. to write a checkpoint (:func:`epoch_checkpointer`).
    """

    max_epochs: int
    batch_size: int
    learning_rate: float
    weight_decay: float = 0.0
    warmup_fraction: float = 0.1
    decay: str = "linear"
    max_grad_norm: float = 1.0
    early_stopping: bool = False
    n_iter_no_change: int = 5
    tol: float = 1e-4
    monitor: str = "loss"
    score_name: str = "score"
    verbose: int = 0
    bucket: bool = True
    label: str = "epoch"
    epoch_updates: int | None = None
    on_epoch_end: object = None


@dataclasses.dataclass
class History:
    """What a training run leaves behind, carried across ``warm_start`` fits and ``partial_fit`` calls.

    Every field is a Python value or a dict of NumPy arrays.

    Attributes
    ----------
    n_epochs : int
        Epochs completed over all calls.
    loss_curve : list of float
        Mean training loss of each epoch.
    validation_loss_curve, validation_scores : list of float
        Validation loss and score after each epoch (empty without validation).
    best_epoch : int or None
        Epoch (1-based, over all calls) of the best monitored value of the latest call.
    best_value : float or None
        That value (validation loss or score with validation, training loss without).
    best_validation : (float, float) or None
        Validation loss and score of that epoch (None without validation).
    kept_epoch : int or None
        Epoch (1-based, over all calls) whose weights the model holds after the latest call: the best
        one when early stopping (or an interruption) restored it, else the last one; None when the
        call was interrupted before its first epoch ended.
    optimizer_state : dict of str to ndarray or None
        AdamW's moments and step count, to resume (``partial_fit``).
    warmup_steps : int
        Warm-up length of the optimiser that ``optimizer_state`` belongs to.
    stopped_early, interrupted, diverged : bool
        How the latest call ended.
    """

    n_epochs: int = 0
    loss_curve: list = dataclasses.field(default_factory=list)
    validation_loss_curve: list = dataclasses.field(default_factory=list)
    validation_scores: list = dataclasses.field(default_factory=list)
    best_epoch: int | None = None
    best_value: float | None = None
    best_validation: tuple | None = None
    kept_epoch: int | None = None
    optimizer_state: dict | None = None
    warmup_steps: int = 0
    stopped_early: bool = False
    interrupted: bool = False
    diverged: bool = False

    def to_dict(self):
        """The history as a dict of Python values, the optimiser state (a dict of arrays) included;
        :meth:`from_dict` undoes it. Estimators keep this form, so their fitted state stays plain."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, state):
        state = dict(state)
        if state.get("best_validation") is not None:
            state["best_validation"] = tuple(state["best_validation"])
        return cls(**state)


def epoch_checkpointer(estimator, publish):
    """An ``on_epoch_end`` callback that saves ``estimator`` to its ``checkpoint_path`` every
    ``checkpoint_every`` epochs (None when ``checkpoint_path`` is None).

    ``publish(history)`` must make the estimator's fitted state that of a copy of the running
    history (its weights are the live arrays the network trains), so the file is exactly what a
    fit that ended at that epoch would save; :func:`attnkit.io.save` writes it atomically, so an
    interrupted run always leaves the last complete checkpoint.
    """
    if estimator.checkpoint_path is None:
        return None

    def on_epoch_end(history):
        if history.n_epochs % estimator.checkpoint_every == 0:
            snapshot = History.from_dict(history.to_dict())
            snapshot.kept_epoch = snapshot.n_epochs  # the model holds this epoch's weights
            publish(snapshot)
            estimator.save(estimator.checkpoint_path)

    return on_epoch_end


def train_validation_split(n_samples, fraction, rng, *, stratify=None):
    """Indices of a random train / validation split.

    Parameters
    ----------
    n_samples : int
    fraction : float in (0, 1)
        Share of the samples held out for validation (at least one sample, and at least one of
        each class when stratifying, as far as the classes allow).
    rng : numpy.random.Generator
    stratify : array of shape (n_samples,), optional
        Class labels: each class is split in the same proportion.

    Returns
    -------
    train, validation : ndarray of int
        Sorted indices.

    Raises
    ------
    ValueError
        When the split would leave the training or validation part empty.
    """
    groups = [np.arange(n_samples)] if stratify is None else [np.flatnonzero(stratify == c)
                                                              for c in np.unique(stratify)]
    held = []
    for members in groups:
        n_val = min(len(members) - 1, max(1, round(fraction * len(members)))) if len(members) > 1 else 0
        held.append(rng.permutation(members)[:n_val])
    validation = np.sort(np.concatenate(held))
    if validation.size == 0 or validation.size == n_samples:
        raise ValueError(f"validation_fraction={fraction} of {n_samples} samples leaves no samples to "
                         f"{'validate on' if validation.size == 0 else 'train on'}; give more samples or "
                         "turn early_stopping off")
    train = np.setdiff1d(np.arange(n_samples), validation, assume_unique=True)
    return train, validation


def reseed_dropout(model, rng):
    """Give every Dropout layer of ``model`` a generator drawn from ``rng``.

    Called at the start of each training call, so that the masks depend only on the call's seed,
    not on how many masks the model drew before: a model loaded from a file (whose layers start
    with fresh generators) then trains exactly as the one that was saved.
    """
    if isinstance(model, Dropout):
        model.rng = np.random.default_rng(rng.integers(2**63))
    for child in model.children.values():
        reseed_dropout(child, rng)


def _improved(value, best, options, higher_is_better):
    if best is None:
        return True
    return value > best + options.tol if higher_is_better else value < best - options.tol


def train(model, batch_loss, lengths, options, *, rng, validate=None, history=None):
    """Train ``model`` in place for up to ``options.max_epochs`` epochs.

    Parameters
    ----------
    model : attnkit.nn.Module
        Its parameters are updated in place.
    batch_loss : callable (indices) -> (loss, n_tokens)
        Runs forward and backward (training mode) on the samples ``indices`` of the training set,
        adding the gradients of the batch's mean loss into ``model``'s gradients (which the loop
        zeroes before each call); returns that loss (a float) and the number of real tokens.
    lengths : array of int, shape (n_train,)
        Length of each training sample (bucketing, and what a ``batch_loss`` index refers to).
    options : TrainingOptions
    rng : numpy.random.Generator
        Shuffling.
    validate : callable () -> (loss, score), optional
        Evaluates the model (inference mode) on held-out data after each epoch.
    history : History, optional
        From an earlier call, to continue (``warm_start``, ``partial_fit``): its curves are
        extended; its optimiser state is resumed when ``options.decay == "constant"`` (a
        ``partial_fit`` run; a fit plans a new schedule and starts a new optimiser).

    Returns
    -------
    History
        ``history`` updated (or a new one).

    Raises
    ------
    ValueError
        If the loss diverges (becomes NaN or infinite, or ``DIVERGENCE_FACTOR`` times the call's first
        batch loss) or the gradients become NaN or infinite before the call's first epoch ends; the
        weights the call started from are restored.

    Warns
    -----
    sklearn.exceptions.ConvergenceWarning
        When the loss diverges after an epoch of the call ended: training stops, and the weights of the
        best epoch are restored.
    UserWarning
        When interrupted (KeyboardInterrupt, e.g. Ctrl-C): training stops at once, the best
        weights seen so far are restored, and the estimator stays usable.
    """
    if options.early_stopping and validate is None:
        raise ValueError("early_stopping needs a validate callback")
    history = History() if history is None else history
    lengths = np.asarray(lengths)
    epochs = _EpochPlan(lengths, options, rng)
    optimizer = AdamW(model, lr=options.learning_rate, weight_decay=options.weight_decay,
                      schedule=_schedule(options, history, epochs.total_updates))
    if options.decay == "constant" and history.optimizer_state is not None:
        optimizer.load_state_dict(history.optimizer_state)

    with_validation = validate is not None
    higher_is_better = with_validation and options.monitor == "score"
    history.best_epoch = history.best_value = history.best_validation = None
    history.stopped_early = history.interrupted = history.diverged = False
    start_weights, best_weights, no_improvement = model.state_dict(), None, 0
    divergence_limit, diverged = None, None
    start = time.perf_counter()
    epoch, last_epoch = history.n_epochs, history.n_epochs + options.max_epochs
    # Each update leaves the gradients at zero (AdamW.step(zero_grad=True), in the pass that reads them), so only
    # the first needs zero_grad; the clipping factor is applied in that pass too. Bit for bit the zero_grad,
    # backward, clip_grad_norm, step sequence, with two passes fewer over every gradient (a fifth of a short-text
    # fine-tuning step: the 30,522-word table alone is 47 MB of gradient).
    model.zero_grad()
    try:
        for batches in epochs:
            epoch = history.n_epochs + 1
            loss_sum, n_seen = 0.0, 0
            progress = EpochProgress(options.verbose, options.label, epoch, len(batches))
            for indices in batches:
                # A diverging run overflows on its way to a non-finite loss; the check below reports it.
                with np.errstate(over="ignore", invalid="ignore"):
                    loss, tokens = batch_loss(indices)
                where = f"epoch {epoch}, update {optimizer.step_count + 1}"
                if divergence_limit is None and math.isfinite(loss):
                    divergence_limit = DIVERGENCE_FACTOR * max(loss, 1.0)
                if not (math.isfinite(loss) and loss <= divergence_limit):
                    raise _Diverged(f"the training loss diverged to {loss:.4g} at {where}")
                try:
                    _, factor = clip_coefficient(model, options.max_grad_norm)
                except FloatingPointError as exc:
                    raise _Diverged(f"the gradients became non-finite at {where} ({exc})") from None
                optimizer.step(grad_scale=factor, zero_grad=True)
                loss_sum += loss * len(indices)
                n_seen += len(indices)
                progress.update(loss, tokens)
            _, speed = progress.close()
            history.loss_curve.append(loss_sum / n_seen)
            history.n_epochs = epoch
            validation = None
            if with_validation:
                with np.errstate(over="ignore", invalid="ignore"):
                    validation = tuple(float(v) for v in validate())
                history.validation_loss_curve.append(validation[0])
                history.validation_scores.append(validation[1])
                value = validation[1] if options.monitor == "score" else validation[0]
            else:
                value = history.loss_curve[-1]
            improved = _improved(value, history.best_value, options, higher_is_better)
            if improved:
                history.best_value, history.best_epoch, no_improvement = float(value), epoch, 0
                history.best_validation = validation
                best_weights = model.state_dict()
            else:
                no_improvement += 1
            if options.verbose:
                print(epoch_line(history, options.label, epoch, last_epoch, speed, time.perf_counter() - start,
                                 improved, options.score_name, with_validation), flush=True)
            if options.on_epoch_end is not None:
                options.on_epoch_end(history)
            stop_rule = options.early_stopping or not with_validation
            if stop_rule and no_improvement >= options.n_iter_no_change:
                history.stopped_early = True
                if options.verbose:
                    what = "validation " + ("score" if higher_is_better else "loss") if with_validation else \
                        "training loss"
                    print(f"stopping: the {what} did not improve by more than tol={options.tol} for "
                          f"{options.n_iter_no_change} epochs (best {history.best_value:.4f} at epoch "
                          f"{history.best_epoch})", flush=True)
                break
    except KeyboardInterrupt:
        history.interrupted = True
    except _Diverged as error:
        diverged = str(error)
    if diverged is not None and best_weights is not None:
        # The best epoch's last updates may already have blown its weights up (finite, but 1e9 and more: a loss
        # of NaN at the next batch); weights that cannot read the batch that diverged are no model to keep.
        model.load_state_dict(best_weights)
        with np.errstate(over="ignore", invalid="ignore"):
            loss, _ = batch_loss(indices)
        model.zero_grad()
        if not math.isfinite(loss):
            model.load_state_dict(start_weights)
            raise ValueError(f"{diverged}, and the weights of epoch {history.best_epoch} (the best seen) give a loss "
                             f"of {loss:.4g} on that batch: the model is left as it was before the call; try a lower "
                             "learning_rate")
    if diverged is not None and best_weights is None:
        model.load_state_dict(start_weights)
        raise ValueError(f"{diverged}, before the first epoch of this call ended (the model is left as it was "
                         "before the call); try a lower learning_rate")
    history.diverged = diverged is not None
    if best_weights is not None and (options.early_stopping or history.interrupted or history.diverged):
        model.load_state_dict(best_weights)
        history.kept_epoch = history.best_epoch
    else:
        history.kept_epoch = None if history.interrupted else history.n_epochs
    if history.interrupted:
        if best_weights is None:
            kept = "no epoch was completed: the weights are those of the last update"
        else:
            kept = f"the weights of epoch {history.best_epoch} (the best seen) were restored"
        warn(f"training interrupted (KeyboardInterrupt) during epoch {epoch}; {kept}")
    if history.diverged:
        warn(f"{diverged}: training stopped and the weights of epoch {history.best_epoch} (the best seen) were "
             "restored; try a lower learning_rate", ConvergenceWarning)
    history.optimizer_state = optimizer.state_dict()
    return history


def _schedule(options, history, total_updates):
    """The learning-rate schedule of a call of ``total_updates`` updates: warm-up then decay to 0, or, for
    ``partial_fit`` (``decay="constant"``), a warm-up planned once and resumed with the optimiser."""
    if options.decay == "constant":
        if history.optimizer_state is None:
            history.warmup_steps = round(options.warmup_fraction * total_updates)
        return WarmupSchedule(warmup_steps=history.warmup_steps, decay="constant")
    history.warmup_steps = min(round(options.warmup_fraction * total_updates), total_updates - 1)
    # The decay reaches 0 one update after the last: at total_updates itself the last update had a rate of 0, and a
    # fit of one update (max_iter=1 on one batch) changed nothing.
    return WarmupSchedule(warmup_steps=history.warmup_steps, total_steps=total_updates + 1, decay=options.decay)


class _EpochPlan:
    """The batches of each epoch of a call, as lists of index arrays: ``options.max_epochs`` passes over the
    samples (shuffled, length-bucketed anew for each: :func:`attnkit.batching.training_batches`), each cut
    into equal parts of at most ``options.epoch_updates`` updates when it has more; iterating yields one
    epoch's batches at a time."""

    def __init__(self, lengths, options, rng):
        self.lengths, self.options, self.rng = lengths, options, rng
        per_pass = math.ceil(lengths.size / options.batch_size)
        self.parts = 1 if options.epoch_updates is None else max(1, math.ceil(per_pass / options.epoch_updates))
        self.sizes = [len(part) for part in np.array_split(np.arange(per_pass), self.parts)]
        self.total_updates = sum(self.sizes[e % self.parts] for e in range(options.max_epochs))

    def __iter__(self):
        bounds = np.cumsum([0, *self.sizes])
        parts: list[list[np.ndarray]] = []
        for _ in range(self.options.max_epochs):
            if not parts:
                batches = training_batches(self.lengths, self.options.batch_size, self.rng, bucket=self.options.bucket)
                parts = [batches[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
            yield parts.pop(0)


class _Diverged(Exception):
    """The loss or the gradients diverged: how and where (caught by :func:`train`)."""
