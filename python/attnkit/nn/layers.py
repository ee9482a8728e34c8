"""Basic layers: Embedding, Linear, LayerNorm, RMSNorm, Dropout and the position-wise FeedForward block.

Every layer follows :class:`attnkit.nn.Module`: ``forward(x, training) -> (out, cache)`` and
``backward(grad, cache) -> grad_x``, adding parameter gradients into ``grads``. Layers that draw
random numbers require ``rng`` (a ``numpy.random.Generator``, or a seed) at construction, as
:class:`attnkit.nn.MultiHeadAttention` does, and are deterministic given it.
"""

import math
from collections.abc import Callable

import numpy as np

from attnkit import ops
from attnkit._validation import check_int, check_real
from attnkit.nn.module import Module

__all__ = ["Dropout", "Embedding", "FeedForward", "LayerNorm", "Linear", "RMSNorm", "add_product", "dense"]


def dense(x, weight, bias=None):
    """``x @ weight + bias`` for a 2-D x (m, in): the product of every linear map of the layers, one GEMM.

    ``weight`` is a float array, or for inference a :class:`attnkit.ops.BlockQuantizedMatrix` (a GGUF model's
    weights, multiplied where they lie)."""
    if isinstance(weight, np.ndarray):
        return ops.matmul(x, weight, bias=bias)
    return ops.block_quantized_matmul(x, weight, bias=bias)


class Embedding(Module):
    """Lookup table of vectors: ``out[..., :] = weight[ids[...]]``.

    Parameters
    ----------
    num_embeddings : int
        Vocabulary size.
    embedding_dim : int
        Width of each vector.
    rng : numpy.random.Generator or int
        Source of the initial weights.
    padding_idx : int, optional
        A row that starts at zero and never gets a gradient, so it stays zero (padding tokens add
        nothing to the sums they enter).
    init_std : float, default=1.0
        Weights are drawn from ``N(0, init_std^2)`` (PyTorch's default is 1).

    Attributes
    ----------
    params : dict
        ``weight`` of shape (num_embeddings, embedding_dim), or for inference a block-quantised table stored
        row by row (:class:`attnkit.ops.BlockQuantizedMatrix` of shape (embedding_dim, num_embeddings)).
    """

    _quantized_as_rows = ("weight",)

    def __init__(self, num_embeddings, embedding_dim, rng, *, padding_idx=None, init_std=1.0):
        super().__init__()
        self.num_embeddings = check_int(num_embeddings, "num_embeddings", minimum=1)
        self.embedding_dim = check_int(embedding_dim, "embedding_dim", minimum=1)
        if padding_idx is not None:
            padding_idx = check_int(padding_idx, "padding_idx")
            if not 0 <= padding_idx < self.num_embeddings:
                raise ValueError(f"padding_idx must be in [0, {self.num_embeddings}), got {padding_idx}")
        self.padding_idx = padding_idx
        init_std = check_real(init_std, "init_std", positive=True)

        def initial(shape):
            weight = init_std * np.random.default_rng(rng).standard_normal(shape)
            if padding_idx is not None:
                weight[padding_idx] = 0.0
            return weight

        self.add_param("weight", initial, shape=(self.num_embeddings, self.embedding_dim))

    def forward(self, ids, training=False):
        """Rows of ``weight`` for integer ``ids`` of any shape: output ``ids.shape + (embedding_dim,)``."""
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"ids must be an integer array, got dtype {ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings):
            bad = ids[(ids < 0) | (ids >= self.num_embeddings)][0]
            raise ValueError(f"ids must be in [0, {self.num_embeddings}) (num_embeddings), got {bad}")
        weight = self.params["weight"]
        if not isinstance(weight, np.ndarray):  # a block-quantised table holds its transpose's columns as rows
            return weight.rows(ids.reshape(-1)).reshape(ids.shape + (self.embedding_dim,)), ids
        return weight[ids], ids

    def backward(self, grad, cache):
        """Adds ``grad`` into the rows of ``weight`` it came from (not the padding row); returns None:
        integer ids have no gradient."""
        ops.embedding_backward(self.grads["weight"], cache, grad, padding_idx=self.padding_idx)
        return None


def add_product(out, a, b, *, bias_grad=None):
    """``out += a @ b`` in place (a parameter's gradient): with no temporary when ``out`` has the product's
    dtype, through :func:`attnkit.ops.matmul`, whose result does not depend on the thread count. With
    ``bias_grad``, also ``bias_grad += b.sum(axis=0)`` (the layer's bias gradient, ``b`` being its output's
    gradient), summed as the product packs ``b`` where the bits are NumPy's (C-contiguous ``b``, ``n > 1``)."""
    sums = column_sums_buffer(a, b) if bias_grad is not None else None
    if out.dtype == np.result_type(a, b):
        ops.matmul(a, b, out=out, accumulate=True, b_column_sums=sums)
    else:  # e.g. float64 inputs through a float32 layer: the product rounds into the parameter's dtype
        out += ops.matmul(a, b, b_column_sums=sums)
    if bias_grad is not None:
        bias_grad += b.sum(axis=0) if sums is None else sums


def column_sums_buffer(a, b):
    """An array for ``ops.matmul(a, b, b_column_sums=...)`` where the sums it gets are NumPy's ``b.sum(axis=0)``
    bits (a C-ordered ``b`` of several columns, not cast for the product); else None, and NumPy sums ``b``."""
    if b.ndim == 2 and b.shape[1] > 1 and b.flags.c_contiguous and b.dtype == np.result_type(a, b):
        return np.empty(b.shape[1], b.dtype)
    return None


class Linear(Module):
    """Affine map of the last axis: ``out = x @ weight + bias`` for x of shape (..., in_features).

    Weights are initialised Xavier/Glorot-uniform, ``U(-a, a)`` with ``a = sqrt(6 / (in + out))``,
    and the bias at zero (as the original Transformer and fairseq do; PyTorch's default
    ``U(-1/sqrt(in), 1/sqrt(in))`` is smaller for wide layers).

    Parameters
    ----------
    in_features, out_features : int
        Input and output widths.
    rng : numpy.random.Generator or int
        Source of the initial weights.
    bias : bool, default=True
        Whether to add a learned bias.

    Attributes
    ----------
    params : dict
        ``weight`` of shape (in_features, out_features) and, with ``bias``, ``bias`` of shape
        (out_features,).
    """

    def __init__(self, in_features, out_features, rng, *, bias=True):
        super().__init__()
        self.in_features = check_int(in_features, "in_features", minimum=1)
        self.out_features = check_int(out_features, "out_features", minimum=1)
        limit = math.sqrt(6.0 / (self.in_features + self.out_features))
        rng = np.random.default_rng(rng)
        self.add_param("weight", lambda shape: rng.uniform(-limit, limit, shape),
                       shape=(self.in_features, self.out_features))
        if bias:
            self.add_param("bias", np.zeros, shape=(self.out_features,))

    def forward(self, x, training=False):
        x = np.asarray(x)
        if x.ndim < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"x must have in_features={self.in_features} as its last dimension, got shape {x.shape}")
        # One GEMM over all leading dims (matmul of a 3-D x would loop over the first one).
        out = dense(x.reshape(-1, self.in_features), self.params["weight"], self.params.get("bias"))
        return out.reshape(x.shape[:-1] + (self.out_features,)), x

    def backward(self, grad, cache):
        x = cache
        grad2 = np.asarray(grad).reshape(-1, self.out_features)
        add_product(self.grads["weight"], x.reshape(-1, self.in_features).T, grad2, bias_grad=self.grads.get("bias"))
        return ops.matmul(grad2, self.params["weight"].T).reshape(x.shape)


class LayerNorm(Module):
    """Layer normalisation of the last axis with a learned scale and shift (:func:`attnkit.ops.layer_norm`).

    Parameters
    ----------
    dim : int
        Width of the normalised axis.
    eps : float, default=1e-5
        Added to the variance.

    Attributes
    ----------
    params : dict
        ``gamma`` (ones) and ``beta`` (zeros), each of shape (dim,).
    """

    def __init__(self, dim, *, eps=1e-5):
        super().__init__()
        self.dim = check_int(dim, "dim", minimum=1)
        self.eps = check_real(eps, "eps")
        self.add_param("gamma", np.ones, shape=(self.dim,))
        self.add_param("beta", np.zeros, shape=(self.dim,))

    def forward(self, x, training=False):
        x = np.asarray(x)
        if x.ndim < 1 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have dim={self.dim} as its last dimension, got shape {x.shape}")
        y, mean, rstd = ops.layer_norm(x, self.params["gamma"], self.params["beta"], self.eps, return_stats=True)
        return y, (x, mean, rstd)

    def backward(self, grad, cache):
        x, mean, rstd = cache
        dx, dgamma, dbeta = ops.layer_norm_backward(grad, x, self.params["gamma"], mean, rstd)
        self.grads["gamma"] += dgamma
        self.grads["beta"] += dbeta
        return dx


class RMSNorm(Module):
    """RMS normalisation of the last axis with a learned scale (:func:`attnkit.ops.rms_norm`):
    ``x / sqrt(mean(x^2) + eps) * gamma``, no centring and no shift (T5, LLaMA).

    Parameters
    ----------
    dim : int
        Width of the normalised axis.
    eps : float, default=1e-6
        Added to the mean square, >= 0.

    Attributes
    ----------
    params : dict
        ``gamma`` (ones) of shape (dim,).
    """

    def __init__(self, dim, *, eps=1e-6):
        super().__init__()
        self.dim = check_int(dim, "dim", minimum=1)
        self.eps = check_real(eps, "eps")
        if self.eps < 0:
            raise ValueError(f"eps must be >= 0, got {self.eps}")
        self.add_param("gamma", np.ones, shape=(self.dim,))

    def forward(self, x, training=False):
        x = np.asarray(x)
        if x.ndim < 1 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have dim={self.dim} as its last dimension, got shape {x.shape}")
        y, rstd = ops.rms_norm(x, self.params["gamma"], self.eps, return_stats=True)
        return y, (x, rstd)

    def backward(self, grad, cache):
        x, rstd = cache
        dx, dgamma = ops.rms_norm_backward(grad, x, self.params["gamma"], rstd)
        self.grads["gamma"] += dgamma
        return dx


class Dropout(Module):
    """Inverted dropout: in training, each entry is zeroed with probability ``p`` and the others are
    scaled by ``1 / (1 - p)``, so no rescaling is needed at inference, where it is the identity.

    Parameters
    ----------
    p : float in [0, 1)
        Drop probability.
    rng : numpy.random.Generator or int
        The layer's own generator is seeded from one draw of it, so masks are reproducible and do
        not depend on what else uses ``rng`` later.

    Attributes
    ----------
    rng : numpy.random.Generator
        The generator of the masks' keys: one 64-bit key per training forward, from which
        :func:`attnkit.ops.dropout` draws the mask (the same for float32 and float64 inputs).
    """

    def __init__(self, p, rng):
        super().__init__()
        self.p = check_real(p, "p")
        if not 0.0 <= self.p < 1.0:
            raise ValueError(f"p must be in [0, 1), got {self.p}")
        self.rng = np.random.default_rng(np.random.default_rng(rng).integers(2**63))

    def forward(self, x, training=False):
        x = np.asarray(x)
        if not training or self.p == 0.0:
            return x, None
        # The mask is a function of the key and each element's position (ops.dropout): the cache is the
        # key alone, and the backward redraws the same mask. It does not depend on x's dtype.
        key = int(self.rng.integers(2**64, dtype=np.uint64))
        return ops.dropout(x, self.p, key), key

    def backward(self, grad, cache):
        return grad if cache is None else ops.dropout(grad, self.p, cache)


def _relu(h, out=None):
    return np.maximum(h, 0, out=out)


def _relu_backward(h, grad):
    return np.where(h > 0, grad, 0)


def _gelu(h, out=None):
    return ops.gelu(h, approximate="none", out=out)


def _gelu_backward(h, grad):
    return ops.gelu_backward(h, grad, approximate="none")


def _sigmoid(g):
    return 0.5 * (1.0 + np.tanh(0.5 * g))  # the logistic function without exp's overflow


def _swiglu(h, out=None):
    """SwiGLU of the hidden pre-activations h = [gate | up] (..., 2 f): ``silu(gate) * up`` (..., f)."""
    gate, up = np.split(h, 2, axis=-1)
    return ops.swiglu(gate, up, out=None if out is None or out.shape != gate.shape else out)


def _swiglu_backward(h, grad):
    gate, up = np.split(h, 2, axis=-1)
    s = _sigmoid(gate)
    silu = gate * s
    return np.concatenate([grad * up * (s + silu * (1.0 - s)), grad * silu], axis=-1)


# "gelu" is exact (erf), as in BERT and torch's default; "gelu_tanh" the tanh form (GPT-2); "swiglu" the gated
# unit of PaLM and Llama (Shazeer 2020), whose first linear map is twice as wide (gate and up, side by side).
_Activation = Callable[..., np.ndarray]
_ACTIVATIONS: dict[str, tuple[_Activation, _Activation]] = {
    "gelu": (_gelu, _gelu_backward), "gelu_tanh": (ops.gelu, ops.gelu_backward), "relu": (_relu, _relu_backward),
    "swiglu": (_swiglu, _swiglu_backward)}
ACTIVATIONS = tuple(_ACTIVATIONS)


class FeedForward(Module):
    """Position-wise feed-forward block: ``Linear(d_model, d_ff) -> activation -> Dropout -> Linear(d_ff, d_model)``;
    with SwiGLU, ``Linear(d_model, 2 d_ff) -> silu(gate) * up -> Dropout -> Linear(d_ff, d_model)``.

    Parameters
    ----------
    d_model : int
        Input and output width.
    d_ff : int
        Hidden width (typically 4 d_model).
    rng : numpy.random.Generator or int
        Source of the initial weights and of the dropout generator.
    activation : {"gelu_tanh", "gelu", "relu", "swiglu"}, default="gelu_tanh"
        ``"gelu"`` is the exact GELU ``x Phi(x)`` (BERT; torch's ``approximate="none"``), ``"gelu_tanh"``
        its tanh approximation (GPT-2; :func:`attnkit.ops.gelu`), ``"swiglu"`` the gated unit
        ``silu(x W_gate) * (x W_up)`` of Llama: ``linear1``'s weight is then ``[W_gate | W_up]`` (d_model, 2 d_ff).
    dropout : float, default=0.0
        Drop probability after the activation.
    bias : bool, default=True
        Biases on both linear maps (Llama has none).

    Attributes
    ----------
    linear1, dropout, linear2 : Module
        The children.
    """

    def __init__(self, d_model, d_ff, rng, *, activation="gelu_tanh", dropout=0.0, bias=True):
        super().__init__()
        if not isinstance(activation, str) or activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.activation = activation
        rng = np.random.default_rng(rng)
        self.linear1 = Linear(d_model, 2 * d_ff if activation == "swiglu" else d_ff, rng, bias=bias)
        self.dropout = Dropout(dropout, rng)
        self.linear2 = Linear(d_ff, d_model, rng, bias=bias)

    def activate(self, h, out=None):
        """The block's activation of the hidden pre-activations ``h`` (into ``out``, which may be ``h``)."""
        return _ACTIVATIONS[self.activation][0](h, out=out)

    def forward(self, x, training=False):
        h, cache1 = self.linear1.forward(x, training)
        a, cache_drop = self.dropout.forward(self.activate(h), training)
        out, cache2 = self.linear2.forward(a, training)
        return out, (cache1, h, cache_drop, cache2)

    def backward(self, grad, cache):
        _, act_backward = _ACTIVATIONS[self.activation]
        cache1, h, cache_drop, cache2 = cache
        grad = self.linear2.backward(grad, cache2)
        grad = self.dropout.backward(grad, cache_drop)
        return self.linear1.backward(act_backward(h, grad), cache1)
