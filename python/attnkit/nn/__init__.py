"""Transformer layers with hand-written backward passes, an optimiser and losses (no autograd)."""

from attnkit.nn.layers import Dropout, Embedding, FeedForward, LayerNorm, Linear
from attnkit.nn.losses import CrossEntropyLoss
from attnkit.nn.module import Module

__all__ = ["CrossEntropyLoss", "Dropout", "Embedding", "FeedForward", "LayerNorm", "Linear", "Module"]
