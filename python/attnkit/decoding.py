"""Generation from any autoregressive model, under its public name; it lives in :mod:`attnkit.nn.decoding`, beside
the decoder caches it drives."""

from attnkit.nn.decoding import *  # noqa: F403
from attnkit.nn.decoding import __all__  # noqa: F401
