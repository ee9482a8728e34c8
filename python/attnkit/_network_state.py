"""How an estimator keeps a trained :mod:`attnkit.nn` network as plain data.

The fitted state is ``_weights`` (dotted name -> array: the very arrays the live network trains in
place), ``_network_config`` (JSON-able keyword arguments of ``_network_class``) and
``_training_state`` (:meth:`attnkit._training.History.to_dict`). The live network and anything
else derived from that state (a vocabulary object) sit in ``_cache``, which pickling drops and
:meth:`NetworkStateMixin._cached` rebuilds on first use. So the estimator pickles, clones, saves
(:mod:`attnkit.io`) and loads as NumPy arrays and Python values only.
"""

from typing import Any

import numpy as np

from attnkit._training import History
from attnkit.io import from_json, to_json

__all__ = ["NetworkStateMixin"]


class NetworkStateMixin:
    """Fitted-network plumbing for an estimator; put it before ``BaseEstimator`` in the bases.

    The estimator sets ``_network_class`` (an :class:`attnkit.nn.Module` subclass taking ``rng``
    and keyword arguments).
    """

    _network_class: Any = None  # set by the estimator: an attnkit.nn.Module subclass

    def _cached(self, key, build):
        """``_cache[key]``, built by ``build()`` when missing (after unpickling or loading)."""
        cache = self.__dict__.setdefault("_cache", {})
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def _start_network(self, config, rng):
        """A freshly initialised network (a first fit) and an empty training history."""
        self._network_config = dict(config)
        network = self._network_class(rng=np.random.default_rng(rng.integers(2**63)), **config)
        self.__dict__.setdefault("_cache", {})["network"] = network
        self._weights = {name: value for name, value, _ in network.named_parameters()}
        self._training_state = History().to_dict()
        return network

    def _network(self):
        """The live network over ``_weights``."""

        def rebuild():
            network = self._network_class(rng=0, **self._network_config).load_state_dict(self._weights)
            self._weights = {name: value for name, value, _ in network.named_parameters()}
            return network

        return self._cached("network", rebuild)

    def _network_state(self):
        """For :func:`attnkit.io.save`: the arrays (weights, optimiser moments when kept) and the
        JSON-able network config and training history."""
        training = dict(self._training_state)
        optimizer = training.pop("optimizer_state")
        groups = {"weights": dict(self._weights)}
        if optimizer is not None:
            groups["optimizer"] = optimizer
        return groups, {"network": self._network_config, "training": to_json(training)}

    def _set_network_state(self, groups, config):
        """Undo :meth:`_network_state`; checks the arrays against the network they describe."""
        self._network_config = config["network"]
        training = {**from_json(config["training"]), "optimizer_state": groups.get("optimizer")}
        self._training_state = History.from_dict(training).to_dict()
        self._weights = groups["weights"]
        self.__dict__.pop("_cache", None)
        self._network()

    def __sklearn_is_fitted__(self):
        return hasattr(self, "_weights")

    def __getstate__(self):
        state = super().__getstate__()  # type: ignore[misc]  # BaseEstimator's, next in the estimators' MRO
        state.pop("_cache", None)
        return state
