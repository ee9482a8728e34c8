"""Positional information: fixed sinusoidal and learned absolute positions, learned relative biases.

Attention is blind to order; these layers tell it where each token is, in the three ways the
course covers:

- :class:`SinusoidalPositions` (Vaswani et al., 2017): fixed ``sin``/``cos`` encodings, added to
  the token embeddings or concatenated with them;
- :class:`LearnedPositions` (BERT, GPT): a learned vector per absolute position, added;
- :class:`RelativePositionBias` (Shaw et al., 2018, in the scalar-per-head form of T5): a learned
  logit bias ``pi_{i-j}`` per head for the distance ``i - j`` clipped to ``[-k, k]``, passed to
  :func:`attnkit.ops.scaled_dot_product_attention` as ``bias``.

Absolute layers take ``offset``, the position of the first row, so that decoding one token at a
time sees the same encodings as a whole sequence.
"""

import numpy as np

from attnkit import ops
from attnkit._validation import check_int, check_real, float_array
from attnkit.nn.module import Module

__all__ = ["MAX_POSITIONS", "LearnedPositions", "RelativePositionBias", "SinusoidalPositions"]

# The longest sequence a model may be configured for (2^20 tokens): a bound on sizes no array backs (a sinusoidal
# model's max_len), so that a number from an untrusted file cannot ask generation for 10^12 positions.
MAX_POSITIONS = 2**20


def _check_rows(x, width, offset, max_len=None):
    """``x`` as an array of shape (..., n, width); returns it and n, checking ``offset``."""
    x = float_array(x, "x")
    if x.ndim < 2 or (width is not None and x.shape[-1] != width):
        raise ValueError(f"x must have shape (..., n, {width if width is not None else 'd'}), got {x.shape}")
    offset = check_int(offset, "offset", minimum=0)
    n = x.shape[-2]
    if max_len is not None and offset + n > max_len:
        raise ValueError(f"positions {offset}..{offset + n - 1} exceed max_len={max_len}")
    return x, n, offset


class SinusoidalPositions(Module):
    """Fixed sinusoidal positional encodings, added to or concatenated with the input.

    ``P[t, 2i] = sin(t w_i)``, ``P[t, 2i + 1] = cos(t w_i)``, ``w_i = base ** (-2i / d)``
    (see :func:`attnkit.ops.sinusoidal_positions`). No parameters.

    Parameters
    ----------
    d : int
        Width of the encodings, even and >= 2. With ``mode="add"`` it must equal the input width.
    mode : {"add", "concat"}, default="add"
        ``"add"``: ``out = x + P`` (the original Transformer). ``"concat"``: ``out = [x, P]`` along
        the last axis, so the output is ``d`` wider than the input (see :meth:`output_width`);
        content and position then stay in separate coordinates.
    base : float, default=10000.0
        Wavelength base.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import SinusoidalPositions
    >>> layer = SinusoidalPositions(4, mode="concat")
    >>> out, cache = layer.forward(np.zeros((2, 3, 6), dtype=np.float32))
    >>> out.shape, layer.output_width(6)
    ((2, 3, 10), 10)
    """

    _MODES = ("add", "concat")

    def __init__(self, d, *, mode="add", base=10000.0):
        super().__init__()
        self.d = check_int(d, "d", minimum=2)
        if self.d % 2:
            raise ValueError(f"d must be even (sin/cos pairs), got {self.d}")
        if mode not in self._MODES:
            raise ValueError(f"mode must be one of {self._MODES}, got {mode!r}")
        self.mode = mode
        self.base = check_real(base, "base", positive=True)

    def output_width(self, input_width):
        """Width of the output for inputs of width ``input_width``."""
        return input_width + self.d if self.mode == "concat" else input_width

    def forward(self, x, training=False, *, offset=0):
        """Add or append the encodings of positions ``offset, ..., offset + n - 1``.

        Parameters
        ----------
        x : ndarray of shape (..., n, width), float32 or float64
            Token embeddings; ``width == d`` when ``mode="add"``.
        training : bool, default=False
            Unused (the layer behaves the same in training).
        offset : int, default=0
            Position of the first row.

        Returns
        -------
        out : ndarray of shape (..., n, output_width(width)), the dtype of ``x``
        cache : int
            The input width, for :meth:`backward`.
        """
        x, n, offset = _check_rows(x, self.d if self.mode == "add" else None, offset)
        table = self._table(n, offset, x.dtype)
        if self.mode == "add":
            return x + table, x.shape[-1]
        table = np.broadcast_to(table, x.shape[:-1] + (self.d,))
        return np.concatenate([x, table], axis=-1), x.shape[-1]

    def _table(self, n, offset, dtype):
        # The last table, kept read-only: a training loop asks for the same rows every step (0.2 ms for 128 x 128).
        key = (n, offset, np.dtype(dtype), self.d, self.base)
        cached = getattr(self, "_last_table", None)
        if cached is None or cached[0] != key:
            table = ops.sinusoidal_positions(n, self.d, base=self.base, start=offset, dtype=dtype)
            table.flags.writeable = False
            cached = self._last_table = (key, table)
        return cached[1]

    def backward(self, grad, cache):
        """Gradient with respect to ``x``: ``grad`` itself (add) or its first ``width`` columns (concat)."""
        return grad if self.mode == "add" else np.ascontiguousarray(grad[..., :cache])


class LearnedPositions(Module):
    """A learned vector per absolute position, added to the input.

    Parameters
    ----------
    max_len : int
        Number of positions the table holds, >= 1; longer inputs are refused.
    d : int
        Width of the vectors (and of the input), >= 1.
    rng : numpy.random.Generator or int
        Source of the initial values, ``N(0, init_std^2)`` as in BERT and GPT-2.
    init_std : float, default=0.02
        Standard deviation of the initial values.

    Attributes
    ----------
    params["weight"] : ndarray of shape (max_len, d)
        The position table.
    """

    def __init__(self, max_len, d, rng, *, init_std=0.02):
        super().__init__()
        self.max_len = check_int(max_len, "max_len", minimum=1, maximum=MAX_POSITIONS)
        self.d = check_int(d, "d", minimum=1)
        init_std = check_real(init_std, "init_std")
        self.add_param("weight", lambda shape: init_std * np.random.default_rng(rng).standard_normal(shape),
                       shape=(self.max_len, self.d))

    def forward(self, x, training=False, *, offset=0):
        """``out[..., t, :] = x[..., t, :] + weight[offset + t]``.

        Parameters
        ----------
        x : ndarray of shape (..., n, d)
            Token embeddings, with ``offset + n <= max_len``.
        training : bool, default=False
            Unused (the layer behaves the same in training).
        offset : int, default=0
            Position of the first row.

        Returns
        -------
        out : ndarray of shape (..., n, d)
        cache : (int, int)
            ``(offset, n)``, for :meth:`backward`.
        """
        x, n, offset = _check_rows(x, self.d, offset, self.max_len)
        return x + self.params["weight"][offset : offset + n], (offset, n)

    def backward(self, grad, cache):
        """Add ``grad`` summed over the batch dims into the rows used; return ``grad`` (the input gradient)."""
        offset, n = cache
        self.grads["weight"][offset : offset + n] += grad.sum(axis=tuple(range(grad.ndim - 2)))
        return grad


class RelativePositionBias(Module):
    """Learned attention-logit biases ``pi_{i-j}`` per head, for distances clipped to ``[-k, k]``.

    ``bias[h, i, j] = weight[clip(pos_i - pos_j, -k, k) + k, h]`` where query ``i`` sits at
    position ``offset + i`` and key ``j`` at position ``j``. Distances beyond ``k`` share the edge
    value (Shaw et al., 2018: precise relative position is not useful beyond a certain distance).
    The layer holds ``(2k + 1) * heads`` parameters and is shared by every attention call in a
    layer; its output goes to ``ops.scaled_dot_product_attention(..., bias=bias)``.

    Parameters
    ----------
    heads : int
        Number of attention heads, >= 1.
    max_distance : int
        The clipping distance ``k``, >= 0.
    rng : numpy.random.Generator or int
        Source of the initial values, ``N(0, init_std^2)``.
    init_std : float, default=0.02
        Standard deviation of the initial values.

    Attributes
    ----------
    params["weight"] : ndarray of shape (2 * max_distance + 1, heads)
        Row ``r`` is the bias for the distance ``r - k``; positive distances point to past keys.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import RelativePositionBias
    >>> layer = RelativePositionBias(heads=1, max_distance=1, rng=0)
    >>> layer.params["weight"][:, 0] = [-1.0, 0.0, 1.0]  # distances -1, 0, 1
    >>> bias, _ = layer.forward(3, 3)
    >>> bias[0].tolist()
    [[0.0, -1.0, -1.0], [1.0, 0.0, -1.0], [1.0, 1.0, 0.0]]
    """

    def __init__(self, heads, max_distance, rng, *, init_std=0.02):
        super().__init__()
        self.heads = check_int(heads, "heads", minimum=1)
        self.max_distance = check_int(max_distance, "max_distance", minimum=0)
        init_std = check_real(init_std, "init_std")
        shape = (2 * self.max_distance + 1, self.heads)
        self.add_param("weight", lambda shape: init_std * np.random.default_rng(rng).standard_normal(shape),
                       shape=shape)

    def bucket(self, nq, nk, offset=None):
        """Row of ``weight`` used by each (query, key) pair, an int array of shape (nq, nk).

        ``offset`` is the position of the first query (keys start at 0); by default
        ``nk - nq``, so the last query and the last key share a position as in causal decoding
        with a key/value cache (and queries and keys coincide when ``nq == nk``).
        """
        nq = check_int(nq, "nq", minimum=0)
        nk = check_int(nk, "nk", minimum=0)
        offset = nk - nq if offset is None else check_int(offset, "offset")
        distance = (offset + np.arange(nq))[:, None] - np.arange(nk)[None, :]
        k = self.max_distance
        return np.clip(distance, -k, k) + k

    def forward(self, nq, nk, training=False, *, offset=None):
        """The bias for ``nq`` queries and ``nk`` keys.

        Parameters
        ----------
        nq, nk : int
            Numbers of queries and keys.
        training : bool, default=False
            Unused (the layer behaves the same in training).
        offset : int, optional
            Position of the first query; see :meth:`bucket`.

        Returns
        -------
        bias : ndarray of shape (heads, nq, nk)
            Broadcasts against attention inputs of shape (batch, heads, n, d).
        cache : ndarray of int, shape (nq, nk)
            The buckets, for :meth:`backward`.
        """
        buckets = self.bucket(nq, nk, offset)
        bias = np.ascontiguousarray(np.moveaxis(self.params["weight"][buckets], -1, 0))
        return bias, buckets

    def backward(self, grad, cache):
        """Scatter-add ``grad`` of shape (..., heads, nq, nk), summed over leading dims, into ``weight``.

        Returns
        -------
        None
            The bias depends on no input array.
        """
        buckets = cache
        expected = (self.heads,) + buckets.shape
        if grad.shape[-3:] != expected:
            raise ValueError(f"grad must have shape (..., heads, nq, nk) = (..., {expected}), got {grad.shape}")
        per_pair = grad.sum(axis=tuple(range(grad.ndim - 3)))
        # One bincount over (bucket, head) pairs: flat index bucket * heads + head.
        index = buckets[None, :, :] * self.heads + np.arange(self.heads)[:, None, None]
        table = self.grads["weight"]
        table += np.bincount(index.ravel(), weights=per_pair.ravel(), minlength=table.size).reshape(table.shape)
        return None
