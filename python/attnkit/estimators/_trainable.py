"""Training an estimator's network: the fit skeleton every trainable estimator shares, as scikit-learn's
``BaseMultilayerPerceptron`` has one for its two MLPs.

An estimator supplies its network, its inputs and its scoring (the hooks of :class:`TrainableEstimator`);
the skeleton owns the rest: the validation split, the start or continuation of the network, the training
loop (:func:`._training.train`) and the published curves.
"""

import dataclasses
from typing import Any

import numpy as np

from attnkit._random import generator
from attnkit._warnings import warn
from attnkit.estimators._base import NetworkEstimator
from attnkit.estimators._training import (
    History,
    TrainingOptions,
    epoch_checkpointer,
    reseed_dropout,
    train,
    train_validation_split,
)

__all__ = ["Samples", "TrainableEstimator", "validation_pair"]

# Early stopping on fewer validation samples than this picks an epoch by noise: say so.
MIN_VALIDATION_SAMPLES = 10


@dataclasses.dataclass
class Samples:
    """An estimator's training (or validation) samples, encoded, as the training loop consumes them.

    Attributes
    ----------
    inputs : list
        One encoded sample each (a list of ids, or a (source ids, target ids) pair).
    lengths : ndarray of int, shape (n_samples,)
        Tokens per sample: the loop batches samples of similar lengths and counts tokens/s.
    targets : ndarray or None
        Per-sample targets (class codes) when the inputs do not carry them.
    weights : ndarray of float or None
        Per-sample weights in the loss.
    stratify : ndarray or None
        Labels to stratify the validation split by (classification).
    """

    inputs: list
    lengths: np.ndarray
    targets: Any = None
    weights: Any = None
    stratify: Any = None

    def __len__(self):
        return len(self.inputs)

    def subset(self, indices):
        """The samples at ``indices``, in that order."""
        targets, weights, stratify = (None if a is None else a[indices]
                                      for a in (self.targets, self.weights, self.stratify))
        return Samples([self.inputs[i] for i in indices], self.lengths[indices], targets, weights, stratify)


def validation_pair(validation_data):
    """``(X_val, y_val)`` of a ``validation_data`` argument, or a TypeError saying what it was instead."""
    if isinstance(validation_data, tuple) and len(validation_data) == 2:
        return validation_data
    seen = f"a tuple of {len(validation_data)} item(s)" if isinstance(validation_data, tuple) else \
        type(validation_data).__name__
    raise TypeError(f"validation_data must be a tuple of two items (X_val, y_val), got {seen}")


# Parameters that shape the network (compared with its config by _check_same_architecture).
ARCHITECTURE = ("d_model", "n_heads", "n_layers", "d_ff", "attention", "positional", "norm")


class TrainableEstimator(NetworkEstimator):
    """Base class of the network estimators that train their network: the fit skeleton (``_fit``).

    A subclass has the parameters the skeleton reads (``max_iter``, ``batch_size``, ``learning_rate``,
    ``weight_decay``, ``early_stopping``, ``validation_fraction``, ``n_iter_no_change``, ``tol``,
    ``warm_start``, ``random_state``, ``verbose``, ``checkpoint_path``, ``checkpoint_every``, ``n_jobs``) and
    implements the hooks:

    - ``_read_training_data(X, y, sample_weight, *, start, reset, classes, incremental) -> Samples``: check and
      encode the training data; with ``reset`` (a fresh start) also learn what the network's shape
      depends on (vocabularies, classes);
    - ``_new_network_config(samples, start) -> dict``: the network's keyword arguments, for a fresh start;
    - ``_read_validation_data(validation_data) -> Samples``;
    - ``_batch_loss(network, samples, rng) -> callable``: ``batch_loss(indices) -> (loss, n_tokens)``
      for the training loop (:func:`attnkit.estimators._training.train`);
    - ``_evaluate(network, samples) -> (loss, score)``: the validation loss and score, optionally followed by
      a by-product of the evaluation (the classifier's logits) that ``_after_training`` receives for the
      epoch whose weights the model keeps;

    and optionally ``_check_params``, ``_fresh_start`` and ``_initial_weights`` (start from a checkpoint),
    ``_before_training`` (e.g. pre-training), ``_after_training`` and those of :class:`NetworkEstimator`.
    """

    _score_name = "score"  # what the verbose lines call the validation score
    # Without early stopping, stop when the training loss stops improving (scikit-learn's MLP rule); False for a
    # noisy objective (masked or sampled tokens) that runs its planned epochs.
    _plateau_stops = True
    _warmup_fraction = 0.1  # share of the planned updates spent warming the learning rate up
    _max_grad_norm = 1.0

    # ------------------------------------------------------------------------------ the hooks
    def _check_params(self):
        """Checks across parameters, after each one passed its constraints."""

    def _fresh_start(self):
        """What a fresh fit starts from (e.g. a pretrained checkpoint), read once per fresh fit and handed to
        ``_read_training_data``, ``_new_network_config`` and ``_initial_weights``; None by default."""
        return None

    def _read_training_data(self, X, y, sample_weight, *, start, reset, classes, incremental):
        raise NotImplementedError

    def _new_network_config(self, samples, start):
        raise NotImplementedError

    def _initial_weights(self, start):
        """Arrays (dotted name -> array) that replace a fresh network's random initial ones: a pretrained
        encoder's; none by default."""
        return {}

    def _read_validation_data(self, validation_data):
        raise NotImplementedError

    def _batch_loss(self, network, samples, rng):
        raise NotImplementedError

    def _evaluate(self, network, samples):
        raise NotImplementedError

    def _before_training(self, network, samples, rng):
        """Called on a fresh start, before the first epoch (e.g. masked-language-model pre-training)."""

    def _after_training(self, network, samples, validation, rng, *, interrupted, kept_evaluation):
        """Called at the end of ``fit`` (not ``partial_fit``), with its training and validation samples
        (e.g. to fit a model beside the network on the same split). ``kept_evaluation``: what ``_evaluate``
        returned beyond (loss, score) for the weights the model holds, or None when they were not evaluated."""

    def _monitor(self):
        """What early stopping follows: "loss" or "score"."""
        return "loss"

    def _decay(self):
        """The learning rate's decay after the warm-up (``TrainingOptions.decay``) in a fit."""
        return "linear"

    def _learning_rate(self):
        """The peak learning rate (``learning_rate``, resolved when it may be "auto")."""
        return float(self.learning_rate)

    def _max_epochs(self, n_samples=None):
        """Epochs of a fit (``max_iter``, resolved when it may be "auto", possibly from the number of
        training samples)."""
        return int(self.max_iter)

    def _batch_size(self, samples=None):
        """Samples per update (``batch_size``, resolved when it may be "auto", possibly from the training
        ``samples``)."""
        return int(self.batch_size)

    def _plan_epochs(self, samples):
        """(epochs, updates per epoch or None) of a fit on ``samples`` (``TrainingOptions.max_epochs`` and
        ``epoch_updates``): ``_max_epochs`` passes by default."""
        return self._max_epochs(len(samples)), None

    def _check_same_architecture(self, how):
        """A fit that continues the fitted network (``how``: warm_start or partial_fit) refuses parameters that
        would shape another network: it would train the old one while get_params() (and a saved file) said
        otherwise. A pretrained start's shape is the checkpoint's, whatever the parameters say."""
        if getattr(self, "pretrained", None) is not None:
            return
        params, config = self.get_params(deep=False), self._network_config
        changed = [f"{name}={params[name]!r} (the network's: {config[name]!r})" for name in ARCHITECTURE
                   if name in params and name in config and params[name] not in (None, "auto")
                   and params[name] != config[name]]
        if changed:
            raise ValueError(f"{how} continues the fitted network, which these parameters no longer describe: "
                             f"{', '.join(changed)}; set them back, or fit anew with warm_start=False")

    # ------------------------------------------------------------------------- fit skeleton
    def _fit(self, X, y, sample_weight=None, *, validation_data=None, classes=None, incremental=False):
        """Validate, read the data, start or continue the network, train, and publish the results."""
        self._check_params()
        continuing = (incremental or self.warm_start) and self.__sklearn_is_fitted__()
        if continuing:
            self._check_same_architecture("partial_fit" if incremental else "warm_start=True")
        # One stream per (seed, epochs done): a fit is reproducible, consecutive partial_fit and warm_start
        # calls shuffle differently, and a model loaded from a file continues as the saved one would.
        rng = generator(self.random_state, self._training_state["n_epochs"] if continuing else 0)
        start = None
        if not continuing:
            self.__dict__.pop("_cache", None)
            start = self._fresh_start()
        samples = self._read_training_data(X, y, sample_weight, start=start, reset=not continuing, classes=classes,
                                           incremental=incremental)
        if not continuing:
            self._start_network(self._new_network_config(samples, start), rng)
            for name, value in self._initial_weights(start).items():
                self._weights[name][...] = value
        del start  # what it holds (a checkpoint's arrays) is copied: let it go before training
        validation = None
        if validation_data is not None:
            validation = self._read_validation_data(validation_data)
        elif self.early_stopping and not incremental:
            train_idx, val_idx = train_validation_split(len(samples), self.validation_fraction, rng,
                                                        stratify=samples.stratify)
            samples, validation = samples.subset(train_idx), samples.subset(val_idx)
        if self.early_stopping and validation is not None and len(validation) < MIN_VALIDATION_SAMPLES:
            source = "validation_data" if validation_data is not None else \
                f"validation_fraction={self.validation_fraction} of {len(samples) + len(validation)} samples"
            warn(f"early stopping chooses the epoch to keep on {len(validation)} validation sample(s) "
                 f"({source}): too few for the choice to mean more than chance. Give more samples or a larger "
                 "validation set, or set early_stopping=False", UserWarning)
        network = self._network()
        if not continuing:
            self._before_training(network, samples, rng)
        reseed_dropout(network, rng)
        batch_loss = self._batch_loss(network, samples, rng)
        evaluations = []  # the by-products of this call's validations, one per epoch (see _evaluate)

        def evaluate():
            loss, score, *extra = self._evaluate(network, validation)
            evaluations.append(extra[0] if extra else None)
            return loss, score

        validate = None if validation is None else evaluate
        max_epochs, epoch_updates = (1, None) if incremental else self._plan_epochs(samples)
        options = TrainingOptions(
            max_epochs=max_epochs, epoch_updates=epoch_updates, batch_size=self._batch_size(samples),
            learning_rate=self._learning_rate(), weight_decay=float(self.weight_decay),
            warmup_fraction=self._warmup_fraction, decay="constant" if incremental else self._decay(),
            max_grad_norm=self._max_grad_norm, early_stopping=bool(self.early_stopping and validate is not None),
            n_iter_no_change=self.n_iter_no_change if self._plateau_stops or self.early_stopping else max_epochs + 1,
            tol=float(self.tol), monitor=self._monitor(),
            score_name=self._score_name, verbose=int(self.verbose),
            on_epoch_end=epoch_checkpointer(self, lambda history: self._record(history, incremental)),
        )
        history = History.from_dict(self._training_state)
        epochs_before = history.n_epochs
        try:
            history = train(network, batch_loss, samples.lengths, options, rng=rng, validate=validate, history=history)
        except ValueError:
            if not continuing:  # a first fit that failed leaves no half-fitted estimator behind
                self.__dict__.pop("_weights", None)
                self.__dict__.pop("_cache", None)
            raise
        self._record(history, incremental)
        if not incremental:
            kept = None if history.kept_epoch is None else history.kept_epoch - epochs_before - 1
            self._after_training(network, samples, validation, rng, interrupted=history.interrupted,
                                 kept_evaluation=evaluations[kept] if kept is not None and
                                 0 <= kept < len(evaluations) else None)
        return self

    def _training_options(self, **fields):
        """TrainingOptions for an extra training phase (pre-training) from the estimator's parameters."""
        options = TrainingOptions(
            max_epochs=self._max_epochs(), batch_size=self._batch_size(), learning_rate=self._learning_rate(),
            weight_decay=float(self.weight_decay), warmup_fraction=self._warmup_fraction,
            max_grad_norm=self._max_grad_norm, n_iter_no_change=self.n_iter_no_change, tol=float(self.tol),
            verbose=int(self.verbose))
        return dataclasses.replace(options, **fields)

    def _record(self, history, incremental):
        self._forget_inference_runners()  # they hold weights from before this training
        if not incremental:
            history.optimizer_state = None  # a fit plans its own schedule and optimiser; only partial_fit resumes
        self._training_state = history.to_dict()
        self._publish()

    def _publish(self):
        """The public fitted attributes: the training curves and the kept epoch."""
        state = self._training_state
        self.n_iter_ = state["n_epochs"]
        self.loss_curve_ = list(state["loss_curve"])
        self.validation_loss_curve_ = list(state["validation_loss_curve"])
        self.validation_scores_ = list(state["validation_scores"])
        kept = state["kept_epoch"]
        self.best_epoch_ = kept
        scores = self.validation_scores_
        self.best_validation_score_ = scores[kept - 1] if kept is not None and 0 < kept <= len(scores) else None
