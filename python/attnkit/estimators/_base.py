"""The base of attnkit's network estimators: one fitted-state protocol, one fit skeleton, batched
inference, save and load.

An estimator supplies its network, its inputs and its scoring (the hooks of :class:`NetworkEstimator`);
the base owns the rest, the same for every estimator, as scikit-learn's ``BaseMultilayerPerceptron``
does for its two MLPs.

Fitted state is plain data, so an estimator pickles, clones, saves (:mod:`attnkit.io`) and loads as
NumPy arrays and Python values only:

- ``_network_config``: the JSON-able keyword arguments of ``_network_class``;
- ``_network_seed``: the seed the network is built from. A rebuilt network draws exactly what the
  trained one drew, which matters for what is random but not a weight (Performer's features);
- ``_weights``: dotted name -> array, the very arrays the live network trains in place;
- ``_training_state``: :meth:`History.to_dict` (curves, the kept epoch, optimiser moments after
  ``partial_fit``);
- ``_input``: how inputs are read (text or token ids, tokenizer settings; :mod:`._token_input`),
  recorded by the first fit so that ``set_params`` without a refit changes nothing.

The live network and what else derives from that state (vocabularies) sit in ``_cache``, which
pickling drops and :meth:`NetworkEstimator._cached` rebuilds on first use.
"""

import dataclasses
import threading
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import validate_data

from attnkit._random import generator
from attnkit._warnings import warn
from attnkit.batching import inference_batches
from attnkit.estimators._token_input import TEXT, input_kind, read_target_tokens, read_tokens
from attnkit.estimators._training import (
    History,
    TrainingOptions,
    epoch_checkpointer,
    reseed_dropout,
    train,
    train_validation_split,
)
from attnkit.io import from_json, save, to_json
from attnkit.nn.module import to_be_loaded

__all__ = ["NetworkEstimator", "Samples", "validation_pair"]

# Building a cached network takes a lock, so that threads predicting at once with a freshly loaded or
# unpickled estimator share one network instead of each building and rebinding its own.
_CACHE_LOCK = threading.RLock()
INFERENCE_DTYPES = ("float32", "int8")
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


class NetworkEstimator(BaseEstimator):
    """Base class of the estimators that train an :mod:`attnkit.nn` network.

    A subclass sets ``_network_class`` and ``_parameter_constraints``, has the parameters the fit
    skeleton reads (``max_iter``, ``batch_size``, ``learning_rate``, ``weight_decay``, ``early_stopping``,
    ``validation_fraction``, ``n_iter_no_change``, ``tol``, ``warm_start``, ``random_state``, ``verbose``,
    ``checkpoint_path``, ``checkpoint_every``, ``n_jobs``) and implements the hooks:

    - ``_read_training_data(X, y, sample_weight, *, reset, classes, incremental) -> Samples``: check and
      encode the training data; with ``reset`` (a fresh start) also learn what the network's shape
      depends on (vocabularies, classes);
    - ``_new_network_config(samples) -> dict``: the network's keyword arguments, for a fresh start;
    - ``_read_validation_data(validation_data) -> Samples``;
    - ``_batch_loss(network, samples, rng) -> callable``: ``batch_loss(indices) -> (loss, n_tokens)``
      for the training loop (:func:`attnkit.estimators._training.train`);
    - ``_evaluate(network, samples) -> (loss, score)``: the validation loss and score;

    and optionally ``_check_params``, ``_before_training`` (e.g. pre-training), ``_fitted_extras`` /
    ``_set_fitted_extras`` (more state to save) and ``_upgrade_fitted_state`` (read older files).
    """

    _network_class: Any = None
    _score_name = "score"  # what the verbose lines call the validation score
    _warmup_fraction = 0.1  # share of the planned updates spent warming the learning rate up
    _max_grad_norm = 1.0
    _batch_tokens = 8192  # padded tokens per inference batch

    # ------------------------------------------------------------------------------ the hooks
    def _check_params(self):
        """Checks across parameters, after each one passed its constraints."""

    def _read_training_data(self, X, y, sample_weight, *, reset, classes, incremental):
        raise NotImplementedError

    def _new_network_config(self, samples):
        raise NotImplementedError

    def _read_validation_data(self, validation_data):
        raise NotImplementedError

    def _batch_loss(self, network, samples, rng):
        raise NotImplementedError

    def _evaluate(self, network, samples):
        raise NotImplementedError

    def _before_training(self, network, samples, rng):
        """Called on a fresh start, before the first epoch (e.g. masked-language-model pre-training)."""

    def _monitor(self):
        """What early stopping follows: "loss" or "score"."""
        return "loss"

    def _learning_rate(self):
        """The peak learning rate (``learning_rate``, resolved when it may be "auto")."""
        return float(self.learning_rate)

    def _max_epochs(self, n_samples=None):
        """Epochs of a fit (``max_iter``, resolved when it may be "auto", possibly from the number of
        training samples)."""
        return int(self.max_iter)

    def _plan_epochs(self, samples):
        """(epochs, updates per epoch or None) of a fit on ``samples`` (``TrainingOptions.max_epochs`` and
        ``epoch_updates``): ``_max_epochs`` passes by default."""
        return self._max_epochs(len(samples)), None

    def _text_tokenizer(self):
        """A function from texts to token lists for the text route, or None for attnkit's own Tokenizer
        (:mod:`._token_input`)."""
        return None

    def _fitted_extras(self):
        """More fitted state to save: (groups of arrays, JSON-able config)."""
        return {}, {}

    def _set_fitted_extras(self, groups, config):
        """Restore what :meth:`_fitted_extras` gave."""

    def _upgrade_fitted_state(self, groups, config, version):
        """``(groups, config)`` of a file of an older format ``version``, in today's layout."""
        raise ValueError(f"{type(self).__name__} cannot read estimator files of format version {version}")

    # ------------------------------------------------------------------------- fit skeleton
    def _fit(self, X, y, sample_weight=None, *, validation_data=None, classes=None, incremental=False):
        """Validate, read the data, start or continue the network, train, and publish the results."""
        self._check_params()
        continuing = (incremental or self.warm_start) and self.__sklearn_is_fitted__()
        # One stream per (seed, epochs done): a fit is reproducible, consecutive partial_fit and warm_start
        # calls shuffle differently, and a model loaded from a file continues as the saved one would.
        rng = generator(self.random_state, self._training_state["n_epochs"] if continuing else 0)
        if not continuing:
            self.__dict__.pop("_cache", None)
        samples = self._read_training_data(X, y, sample_weight, reset=not continuing, classes=classes,
                                           incremental=incremental)
        if not continuing:
            self._start_network(self._new_network_config(samples), rng)
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
        validate = None if validation is None else (lambda: self._evaluate(network, validation))
        max_epochs, epoch_updates = (1, None) if incremental else self._plan_epochs(samples)
        options = TrainingOptions(
            max_epochs=max_epochs, epoch_updates=epoch_updates, batch_size=self.batch_size,
            learning_rate=self._learning_rate(), weight_decay=float(self.weight_decay),
            warmup_fraction=self._warmup_fraction, decay="constant" if incremental else "linear",
            max_grad_norm=self._max_grad_norm, early_stopping=bool(self.early_stopping and validate is not None),
            n_iter_no_change=self.n_iter_no_change, tol=float(self.tol), monitor=self._monitor(),
            score_name=self._score_name, verbose=int(self.verbose),
            on_epoch_end=epoch_checkpointer(self, lambda history: self._record(history, incremental)),
        )
        try:
            history = train(network, batch_loss, samples.lengths, options, rng=rng, validate=validate,
                            history=History.from_dict(self._training_state))
        except ValueError:
            if not continuing:  # a first fit that failed leaves no half-fitted estimator behind
                self.__dict__.pop("_weights", None)
                self.__dict__.pop("_cache", None)
            raise
        self._record(history, incremental)
        return self

    def _training_options(self, **fields):
        """TrainingOptions for an extra training phase (pre-training) from the estimator's parameters."""
        options = TrainingOptions(
            max_epochs=self._max_epochs(), batch_size=self.batch_size, learning_rate=self._learning_rate(),
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
        """The public fitted attributes, from the training state."""
        state = self._training_state
        self.n_iter_ = state["n_epochs"]
        self.loss_curve_ = list(state["loss_curve"])
        self.validation_loss_curve_ = list(state["validation_loss_curve"])
        self.validation_scores_ = list(state["validation_scores"])
        kept = state["kept_epoch"]
        self.best_epoch_ = kept
        scores = self.validation_scores_
        self.best_validation_score_ = scores[kept - 1] if kept is not None and 0 < kept <= len(scores) else None

    # ------------------------------------------------------------------------ fitted state
    def _cached(self, key, build):
        """``_cache[key]``, built by ``build()`` when missing (after unpickling or loading)."""
        cache = self.__dict__.get("_cache")
        if cache is None or key not in cache:
            with _CACHE_LOCK:
                cache = self.__dict__.setdefault("_cache", {})
                if key not in cache:
                    cache[key] = build()
        return cache[key]

    def _inference_runner(self):
        """The network's packed inference runner (:meth:`attnkit.nn.TextEncoder.inference_runner`) in
        ``inference_dtype``, built on first use and kept until training changes the weights; None when the
        layers cannot run packed (float32 then runs the padded layers)."""
        dtype = self.inference_dtype
        if not isinstance(dtype, str) or dtype not in INFERENCE_DTYPES:
            raise ValueError(f"inference_dtype must be one of {INFERENCE_DTYPES}, got {dtype!r}")
        runner = self._cached(("runner", dtype), lambda: self._network().inference_runner(
            None if dtype == "float32" else dtype))
        if runner is None and dtype == "int8":
            config = self._network_config
            raise ValueError(f"inference_dtype='int8' needs softmax attention without relative positions; this "
                             f"{type(self).__name__} was fitted with attention={config.get('attention', 'softmax')!r}, "
                             f"positional={config.get('positional')!r}")
        return runner

    def _forget_inference_runners(self):
        cache = self.__dict__.get("_cache", {})
        for key in [key for key in cache if isinstance(key, tuple) and key[0] == "runner"]:
            del cache[key]

    def _build_network(self, weights=None):
        """The network of ``_network_config``, drawn from ``_network_seed``; with ``weights`` (dotted name ->
        array, e.g. read from a file), built around those arrays instead of random initial ones.

        Built for loading, a network draws and allocates no parameter (:func:`attnkit.nn.module.to_be_loaded`),
        so sizes that a file's config claims but its arrays do not back are refused by the shape check first;
        layer counts are checked before anything is built, since each layer is an object.

        Raises
        ------
        ValueError
            When the weights do not match the network the config describes.
        """
        def build():
            return self._network_class(rng=np.random.default_rng(self._network_seed), **self._network_config)

        if weights is None:
            return build()
        for key, value in self._network_config.items():
            if key.endswith("layers") and isinstance(value, int) and value > len(weights):
                raise ValueError(f"the network config says {key}={value}, but there are only {len(weights)} "
                                 "weight arrays (a layer has several)")
        with to_be_loaded():
            network = build()
        try:
            network.load_state_dict(weights)
        except ValueError as error:
            raise ValueError(f"the weights do not match the network config: {error}") from None
        if any(module.draws_beyond_weights for module in network.modules()):
            # Random state that is not a weight (Performer's features) comes from the stream the initial weights
            # advance: redraw it all, now that the sizes are known to be those of the arrays.
            network = build().load_state_dict(weights)
        return network

    def _start_network(self, config, rng, weights=None):
        """The network of a first fit, freshly initialised or built around ``weights`` (a pretrained model's
        arrays, every parameter), and an empty training history."""
        self._network_config = dict(config)
        self._network_seed = int(rng.integers(2**63))
        network = self._build_network(weights)
        self.__dict__.setdefault("_cache", {})["network"] = network
        self._weights = {name: value for name, value, _ in network.named_parameters()}
        self._training_state = History().to_dict()

    def _network(self):
        """The live network over ``_weights``."""

        def rebuild():
            network = self._build_network(self._weights)
            self._weights = {name: value for name, value, _ in network.named_parameters()}
            return network

        return self._cached("network", rebuild)

    def _read_tokens(self, X, *, reset, name="X"):
        """Token lists of inputs ``X`` by the route the first fit recorded (see :mod:`._token_input`).

        On ``reset`` (a first fit) the route is recorded as ``_input``: the kind of ``X`` (text or token ids)
        and ``_input_settings()`` (tokenizer settings, ``padding_id``, lengths), which later calls read, so
        that ``set_params`` without a refit changes nothing. Token-id rows keep the width seen in fit
        (``n_features_in_``), as scikit-learn requires; text has no columns, so a refit on text drops it.
        """
        if reset:
            self._input = {"kind": input_kind(X), **self._input_settings()}
            if self._input["kind"] == TEXT:
                for attribute in ("n_features_in_", "feature_names_in_"):
                    self.__dict__.pop(attribute, None)
        return read_tokens(X, self._input, name=name, owner=type(self).__name__, tokenize=self._text_tokenizer(),
                           validate=lambda ids: validate_data(self, ids, reset=reset, dtype="numeric"))

    def _read_target_tokens(self, y, *, name="y"):
        """Token lists of target sequences ``y``, by the route of the inputs (see :mod:`._token_input`)."""
        return read_target_tokens(y, self._input, name=name)

    def _inference_batches(self, lengths, *, max_samples=None):
        """Index arrays of inference batches (:func:`attnkit.batching.inference_batches`): samples sorted by
        length, each batch at most ``_batch_tokens`` padded tokens and ``max_samples`` samples."""
        return inference_batches(lengths, max_tokens=self._batch_tokens, max_samples=max_samples)

    # --------------------------------------------------------------------------- save / load
    def save(self, path, *, compress=False):
        """Write the fitted estimator to ``path`` (arrays + JSON, no pickle); read it with :func:`attnkit.load`.

        Parameters
        ----------
        path : str or os.PathLike
            The file to write, exactly (no suffix is added), atomically.
        compress : bool, default=False
            Compress the arrays (smaller file, slower save and load).
        """
        save(self, path, compress=compress)

    def __attnkit_state__(self):
        """Arrays and JSON-able config of the fitted state, for :func:`attnkit.io.save`."""
        training = dict(self._training_state)
        optimizer = training.pop("optimizer_state")
        groups = {"weights": dict(self._weights)}
        if optimizer is not None:
            groups["optimizer"] = optimizer
        config = {"network": self._network_config, "network_seed": self._network_seed,
                  "training": to_json(training), "input": self._input,
                  "n_features_in": getattr(self, "n_features_in_", None),
                  "feature_names_in": to_json(getattr(self, "feature_names_in_", None))}
        extra_groups, extras = self._fitted_extras()
        groups.update(extra_groups)
        config.update(extras)
        return groups, config

    def __attnkit_set_state__(self, groups, config, version):
        """Restore what :meth:`__attnkit_state__` gave (from :func:`attnkit.io.load`); the arrays must match the
        network they describe. Files of older format versions are upgraded first."""
        if version < 2:
            groups, config = self._upgrade_fitted_state(groups, config, version)
        self._network_config, self._network_seed = config["network"], int(config["network_seed"])
        training = {**from_json(config["training"]), "optimizer_state": groups.get("optimizer")}
        self._training_state = History.from_dict(training).to_dict()
        self._input = config["input"]
        for name in ("n_features_in", "feature_names_in"):
            if config.get(name) is not None:
                setattr(self, name + "_", from_json(config[name]))
        self._weights = groups["weights"]
        self.__dict__.pop("_cache", None)
        self._network()
        self._set_fitted_extras(groups, config)
        self._publish()

    def __sklearn_is_fitted__(self):
        return hasattr(self, "_weights")

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_cache", None)
        return state
