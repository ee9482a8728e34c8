"""Transformer layers with hand-written backward passes, an optimiser and losses (no autograd)."""

from attnkit.nn import serialize
from attnkit.nn.layers import Dropout, Embedding, FeedForward, LayerNorm, Linear
from attnkit.nn.losses import CrossEntropyLoss
from attnkit.nn.module import Module
from attnkit.nn.optim import AdamW, WarmupSchedule, clip_grad_norm, default_decay
from attnkit.nn.positional import LearnedPositions, RelativePositionBias, SinusoidalPositions

__all__ = [
    "AdamW",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "FeedForward",
    "LayerNorm",
    "LearnedPositions",
    "Linear",
    "Module",
    "RelativePositionBias",
    "SinusoidalPositions",
    "WarmupSchedule",
    "clip_grad_norm",
    "default_decay",
    "serialize",
]
