"""The base of every attnkit.nn layer: named parameters with gradients, nested layers, state dicts.

A layer computes ``forward(x, training) -> (out, cache)`` and ``backward(grad_out, cache) -> grad_x``;
``backward`` *adds* parameter gradients into ``grads`` (so several backward calls accumulate, as over
the time steps of a shared layer) and returns the input gradient. Parameters are float32 NumPy arrays
by default; ``astype(np.float64)`` converts a whole model (gradient checks run in float64).
"""

from typing import Any

import numpy as np

__all__ = ["Module"]


class Module:
    """Base class: holds ``params`` / ``grads`` (same keys and shapes) and child modules."""

    def __init__(self):
        self.params = {}
        self.grads = {}
        self.children = {}

    # -- building -------------------------------------------------------------------------------
    def add_param(self, name, value, dtype=np.float32):
        value = np.array(value, dtype=dtype)
        self.params[name] = value
        self.grads[name] = np.zeros_like(value)
        return value

    def add_child(self, name, module):
        if not isinstance(module, Module):
            raise TypeError(f"child {name!r} must be a Module, got {type(module).__name__}")
        self.children[name] = module
        return module

    # -- the layer contract ---------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """(output, cache) for the layer's inputs; each layer names its own (x, training=False, ...)."""
        raise NotImplementedError

    def backward(self, grad: Any, cache: Any) -> Any:
        """Accumulate parameter gradients; return the gradients of the inputs."""
        raise NotImplementedError

    # -- traversal ------------------------------------------------------------------------------
    def named_parameters(self, prefix=""):
        """Yield ``(dotted_name, param, grad)`` for this module and its children, depth first."""
        for name, value in self.params.items():
            yield prefix + name, value, self.grads[name]
        for child_name, child in self.children.items():
            yield from child.named_parameters(f"{prefix}{child_name}.")

    def zero_grad(self):
        for _, _, grad in self.named_parameters():
            grad.fill(0)

    def astype(self, dtype):
        """Convert every parameter (and gradient) to ``dtype``, in place; returns self."""
        for name in self.params:
            self.params[name] = self.params[name].astype(dtype)
            self.grads[name] = np.zeros_like(self.params[name])
        for child in self.children.values():
            child.astype(dtype)
        return self

    @property
    def dtype(self):
        for _, value, _ in self.named_parameters():
            return value.dtype
        return np.dtype(np.float32)

    # -- (de)serialisation ----------------------------------------------------------------------
    def state_dict(self):
        """A dict of dotted name -> copy of the parameter array."""
        return {name: value.copy() for name, value, _ in self.named_parameters()}

    def load_state_dict(self, state):
        """Copy arrays into the parameters; names and shapes must match exactly."""
        own = {name: value for name, value, _ in self.named_parameters()}
        missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        if missing or extra:
            raise ValueError(f"state dict does not match the model: missing {missing}, unexpected {extra}")
        for name, value in own.items():
            new = np.asarray(state[name])
            if new.shape != value.shape or new.dtype.kind != "f":
                raise ValueError(f"parameter {name!r}: expected a float array of shape {value.shape}, "
                                 f"got {new.dtype} {new.shape}")
            value[...] = new
        return self

    def n_parameters(self):
        return sum(value.size for _, value, _ in self.named_parameters())
