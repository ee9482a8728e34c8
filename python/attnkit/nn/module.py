"""The base of every attnkit.nn layer: named parameters with gradients, nested layers, state dicts.

A layer computes ``forward(x, training) -> (out, cache)`` and ``backward(grad_out, cache) -> grad_x``;
``backward`` *adds* parameter gradients into ``grads`` (so several backward calls accumulate, as over
the time steps of a shared layer) and returns the input gradient. Parameters are float32 NumPy arrays
by default; ``astype(np.float64)`` converts a whole model (gradient checks run in float64).

Child layers are attributes, as in PyTorch and nanoGPT: ``self.attn = MultiHeadAttention(...)`` registers
the layer as the child ``attn``, whose parameters are ``attn.*`` in the state dict, in assignment order.

A layer gives each parameter's initial values as a function of its shape (``add_param(name, init,
shape=...)``), so that a model about to receive saved weights is built without drawing or allocating
them: inside :func:`to_be_loaded`, parameters are zero-stride placeholders until
:meth:`Module.load_state_dict` puts the saved arrays in their place. A file that lies about a model's
sizes is then refused by the shape check, before anything of those sizes exists.
"""

import contextlib
import threading
from typing import Any

import numpy as np

from attnkit.ops import BlockQuantizedMatrix

__all__ = ["Module", "to_be_loaded"]

_BUILDING = threading.local()


@contextlib.contextmanager
def to_be_loaded():
    """Build modules whose parameters a later :meth:`Module.load_state_dict` fills: initial values given
    as functions are not drawn (no random numbers, no memory), and each such parameter is a read-only
    zero-stride placeholder of its shape until loaded. Per thread."""
    before = getattr(_BUILDING, "placeholders", False)
    _BUILDING.placeholders = True
    try:
        yield
    finally:
        _BUILDING.placeholders = before


class Module:
    """Base class: holds ``params`` / ``grads`` (same keys and shapes) and child modules.

    A Module assigned to an attribute is a child (``self.norm = LayerNorm(d)``): it is kept in ``children``
    (name -> module, in assignment order: the order of the state dict), read back as ``self.norm``.
    Attributes whose names start with ``_`` are never children: a layer refers there to a module that
    belongs to another (:class:`attnkit.nn.TiedOutput`'s embedding table).
    """

    # True for a module whose construction draws random state that is not a parameter (Performer's features):
    # a model of such modules built for loading is redrawn in full, so that it holds what the original drew.
    draws_beyond_weights = False
    # Parameters read by rows (a token table): block-quantised, they are stored row by row (see load_state_dict).
    _quantized_as_rows: tuple[str, ...] = ()

    def __init__(self):
        self.children: dict[str, Module] = {}
        self.params = {}
        self.grads = {}
        self._placeholders = set()

    def __setattr__(self, name: str, value: Any) -> None:
        children = self.__dict__.get("children")
        if isinstance(value, Module) and not name.startswith("_"):
            if children is None:
                raise AttributeError(f"cannot assign child {name!r} before Module.__init__() has run")
            if hasattr(type(self), name):
                raise AttributeError(f"child {name!r} would be hidden by {type(self).__name__}.{name}: choose "
                                     f"another name, or add_child({name!r}, module) and read it from children")
            self.__dict__.pop(name, None)  # a plain attribute (None) of that name gives way to the child
            children[name] = value
        elif children is not None and name in children:
            raise TypeError(f"{name!r} is a child module: only a Module replaces it, got {type(value).__name__}")
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Called only when ordinary lookup fails; reads __dict__ directly (no recursion while unpickling).
        children = self.__dict__.get("children", {})
        if name in children:
            return children[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute or child {name!r}")

    def __delattr__(self, name: str) -> None:
        if name in self.__dict__.get("children", {}):
            del self.children[name]
        else:
            object.__delattr__(self, name)

    # -- building -------------------------------------------------------------------------------
    def add_param(self, name, value, dtype=np.float32, *, shape=None):
        """Register parameter ``name`` (and its zero gradient); returns the array.

        ``value`` is the initial array, or, with ``shape``, a function ``value(shape) -> array`` that
        draws it (``np.zeros``, ``lambda s: rng.uniform(-a, a, s)``). Inside :func:`to_be_loaded` that
        function is not called and the parameter is a placeholder until :meth:`load_state_dict`.
        """
        if shape is not None and getattr(_BUILDING, "placeholders", False):
            placeholder = np.broadcast_to(np.zeros((), dtype), tuple(shape))
            self.params[name] = self.grads[name] = placeholder
            self._placeholders.add(name)
            return placeholder
        value = np.array(value(tuple(shape)) if shape is not None else value, dtype=dtype)
        self.params[name] = value
        self.grads[name] = np.zeros_like(value)
        return value

    def add_child(self, name, module):
        """Register ``module`` as the child ``name`` (``self.name = module`` does the same): for names computed
        at run time, such as a stack's ``layer0``, ``layer1``, .... Returns the module."""
        if not isinstance(module, Module):
            raise TypeError(f"child {name!r} must be a Module, got {type(module).__name__}")
        self.__dict__.pop(name, None)
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
        triples: list[tuple[str, Any, Any]] = []
        _gather_parameters(self, prefix, triples)
        return iter(triples)

    def _slots(self, prefix=""):
        """``(module, local name, dotted name)`` of every parameter, depth first."""
        for name in self.params:
            yield self, name, prefix + name
        for child_name, child in self.children.items():
            yield from child._slots(f"{prefix}{child_name}.")

    def modules(self):
        """This module and every module below it, depth first."""
        yield self
        for child in self.children.values():
            yield from child.modules()

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
        """Copy arrays into the parameters; names and shapes must match exactly, and are all checked
        before any parameter changes. A placeholder (see :func:`to_be_loaded`) takes the given array
        itself when it already has the parameter's dtype and is C-contiguous, writeable and its own
        memory (no copy), else a copy.

        A value may also be an :class:`attnkit.ops.BlockQuantizedMatrix` (a GGUF model's weights), taken as is
        by a placeholder: an inference-only parameter, with no gradient (its grad is None). A layer whose
        parameter is used as ``x @ W`` takes a matrix of its shape; a table read by rows (an embedding, in
        ``_quantized_as_rows``) takes the matrix whose stored rows are its rows: of the transposed shape."""
        slots = list(self._slots())
        own = {dotted for _, _, dotted in slots}
        missing, extra = sorted(own - set(state)), sorted(set(state) - own)
        if missing or extra:
            raise ValueError(f"state dict does not match the model: missing {missing[:8]}"
                             f"{' ...' if len(missing) > 8 else ''}, unexpected {extra[:8]}"
                             f"{' ...' if len(extra) > 8 else ''}")
        for module, name, dotted in slots:
            value = module.params[name]
            if isinstance(state[dotted], BlockQuantizedMatrix):
                shape = value.shape[::-1] if name in module._quantized_as_rows else value.shape
                if state[dotted].shape != shape or name not in module._placeholders:
                    raise ValueError(f"parameter {dotted!r}: a block-quantised matrix of shape {shape} replaces a "
                                     f"parameter of a network built for loading, got shape {state[dotted].shape}")
                continue
            new = np.asarray(state[dotted])
            if new.shape != value.shape or new.dtype.kind != "f":
                raise ValueError(f"parameter {dotted!r}: expected a float array of shape {value.shape}, "
                                 f"got {new.dtype} {new.shape}")
        for module, name, dotted in slots:
            if isinstance(state[dotted], BlockQuantizedMatrix):
                module.params[name], module.grads[name] = state[dotted], None
                module._placeholders.discard(name)
            elif name in module._placeholders:
                adopted = np.require(state[dotted], module.params[name].dtype, ("C", "W", "O"))
                module.params[name], module.grads[name] = adopted, np.zeros_like(adopted)
                module._placeholders.discard(name)
            else:
                module.params[name][...] = state[dotted]
        return self

    def n_parameters(self):
        return sum(value.size for _, value, _ in self.named_parameters())


def _gather_parameters(module, prefix, triples):
    """Append ``(dotted_name, param, grad)`` of ``module`` and its children to ``triples``, depth first: one list,
    not a generator a level (half the time; a training update walks its model twice)."""
    params, grads = module.params, module.grads
    for name in params:
        triples.append((prefix + name, params[name], grads[name]))
    for child_name, child in module.children.items():
        _gather_parameters(child, f"{prefix}{child_name}.", triples)
