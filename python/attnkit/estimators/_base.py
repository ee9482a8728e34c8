"""The base of attnkit's network estimators: one fitted-state protocol, the network rebuilt from it,
batched inference, save and load. Training one is :mod:`._trainable`'s.

Fitted state is plain data, so an estimator pickles, clones, saves (:mod:`attnkit.io`) and loads as
NumPy arrays and Python values only:

- ``_network_config``: the JSON-able keyword arguments of ``_network_class``;
- ``_network_seed``: the seed the network is built from. A rebuilt network draws exactly what the
  trained one drew, which matters for what is random but not a weight (Performer's features);
- ``_weights``: dotted name -> array, the very arrays the live network trains in place;
- ``_training_state``: :meth:`History.to_dict` (curves, the kept epoch, optimiser moments after
  ``partial_fit``; empty for an estimator that does not train);
- ``_input``: how inputs are read (text or token ids, tokenizer settings; :mod:`._token_input`),
  recorded by the first fit so that ``set_params`` without a refit changes nothing.

The live network and what else derives from that state (vocabularies) sit in ``_cache``, which
pickling drops and :meth:`NetworkEstimator._cached` rebuilds on first use.
"""

import threading
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import validate_data

from attnkit.batching import inference_batches
from attnkit.estimators._token_input import TEXT, input_kind, read_target_tokens, read_tokens
from attnkit.estimators._training import History
from attnkit.io import from_json, save, to_json
from attnkit.nn.module import to_be_loaded

__all__ = ["NetworkEstimator"]

# Building a cached network takes a lock, so that threads predicting at once with a freshly loaded or
# unpickled estimator share one network instead of each building and rebinding its own.
_CACHE_LOCK = threading.RLock()
INFERENCE_DTYPES = ("float32", "int8")


class NetworkEstimator(BaseEstimator):
    """Base class of the estimators that hold an :mod:`attnkit.nn` network: its fitted state, the network
    rebuilt from it, batched inference, save and load (:class:`._trainable.TrainableEstimator` adds training).

    A subclass sets ``_network_class`` and ``_parameter_constraints``, starts its network with
    :meth:`_start_network`, and may implement ``_text_tokenizer`` (texts -> tokens for the text route),
    ``_fitted_extras`` / ``_set_fitted_extras`` (more state to save), ``_upgrade_fitted_state`` (read older
    files) and ``_publish`` (public fitted attributes derived from the state).
    """

    _network_class: Any = None
    _batch_tokens = 8192  # padded tokens per inference batch

    # ------------------------------------------------------------------------------ the hooks
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

    def _publish(self):
        """Set the public fitted attributes from the fitted state (after a fit or a load); none by default."""

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
