"""Transformer layers with hand-written backward passes, an optimiser and losses (no autograd)."""

from attnkit.nn.module import Module
from attnkit.nn.optim import AdamW, WarmupSchedule, clip_grad_norm, default_decay

__all__ = ["AdamW", "Module", "WarmupSchedule", "clip_grad_norm", "default_decay"]
