"""Transformer layers with hand-written backward passes, an optimiser and losses (no autograd)."""

from attnkit.nn.module import Module

__all__ = ["Module"]
