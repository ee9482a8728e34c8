"""GGML block-quantised weights (llama.cpp's Q4_1 and Q8_0), multiplied where they lie: a GGUF file's
tensors are used in place, dequantised in registers, never expanded to float32 in memory."""

import dataclasses
import math

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import as_array, check_out, float_array

__all__ = ["BlockQuantizedMatrix", "block_quantized_matmul", "quantize_blocks"]

BLOCK_VALUES = 32
# Bytes per block of 32 values: q8_0 = half d + 32 int8; q4_1 = half d + half m + 16 bytes of nibbles.
BLOCK_BYTES = {"q4_1": 20, "q8_0": 34}
ACTIVATIONS = ("float32", "int8")


@dataclasses.dataclass(frozen=True, eq=False)
class BlockQuantizedMatrix:
    """A float matrix ``W`` of shape (n_in, n_out), used as ``x @ W``, held as GGML blocks.

    Column ``j`` of ``W`` is stored row ``j`` of ``blocks``: ``n_in / 32`` consecutive blocks of 32
    values (GGUF's layout of a tensor of ggml shape ``[n_in, n_out]``). Little-endian, per block:

    - ``"q8_0"`` (34 bytes): float16 ``d``, 32 int8 ``q``; value ``t`` is ``d * q[t]``.
    - ``"q4_1"`` (20 bytes): float16 ``d``, float16 ``m``, 16 bytes ``qs``; value ``t < 16`` is
      ``d * (qs[t] & 15) + m`` and value ``t + 16`` is ``d * (qs[t] >> 4) + m``.

    Made by :meth:`from_blocks` (for example from a memory-mapped GGUF file) or :func:`quantize_blocks`.

    ``activations`` says how products read ``x`` (:func:`block_quantized_matmul`): ``"float32"`` as it is,
    or ``"int8"`` as llama.cpp reads it, each block of 32 values as int8 codes and one scale; integer sums over
    a packed copy of the blocks (``packed``), 2-4x as fast as float32 inputs on one thread (Zen 5, 1 to 160
    rows of ``x``), with ``x``'s rounding (relative 1/254 of each block's largest value) added to the weights'.
    :meth:`with_activations` gives the same blocks read the other way.

    Attributes
    ----------
    kind : {"q4_1", "q8_0"}
        The block format.
    blocks : ndarray of uint8, shape (n_out, n_in / 32 * block_bytes)
        Read-only and C-contiguous; a view of the caller's array (never a copy).
    shape : tuple of int
        ``(n_in, n_out)``.
    activations : {"float32", "int8"}
        How products with this matrix read ``x``.
    packed : ndarray of uint8 or None
        With int8 activations, the same weights packed in groups of 16 columns, which the products read
        instead of ``blocks`` where the CPU has AVX2 (every row of ``x`` the same arithmetic; 2-4x as fast as
        float32 inputs on one thread); made from ``blocks`` here, never saved. None with float32 ones.
    """

    kind: str
    blocks: np.ndarray
    shape: tuple[int, int]
    activations: str = "float32"
    packed: np.ndarray | None = dataclasses.field(default=None, init=False, repr=False)

    def __post_init__(self):
        # Checked here, not only in from_blocks: a matrix built directly with a wrong shape failed later, inside a
        # product, with a message about an ``out`` its caller never passed.
        kind, blocks, shape = self.kind, self.blocks, self.shape
        if kind not in BLOCK_BYTES:
            raise ValueError(f"kind must be one of {sorted(BLOCK_BYTES)}, got {kind!r}")
        if not isinstance(blocks, np.ndarray):
            raise TypeError(f"blocks must be a numpy array of uint8, got {type(blocks).__name__}")
        if blocks.dtype != np.uint8:
            raise TypeError(f"blocks must have dtype uint8, got {blocks.dtype}")
        if blocks.ndim != 2:
            raise ValueError(f"blocks must be 2-D (n_out, bytes_per_row), got shape {blocks.shape}")
        if not (isinstance(shape, tuple) and len(shape) == 2 and all(
                isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in shape)):
            raise ValueError(f"shape must be (n_in, n_out), two non-negative ints, got {shape!r}")
        n_in = int(shape[0])
        if n_in % BLOCK_VALUES:
            raise ValueError(f"n_in must be a non-negative multiple of {BLOCK_VALUES}, got {n_in!r}")
        row_bytes = n_in // BLOCK_VALUES * BLOCK_BYTES[kind]
        if blocks.shape[1] != row_bytes:
            raise ValueError(f"blocks must have {row_bytes} bytes per row for {kind} with n_in = {n_in} "
                             f"({n_in // BLOCK_VALUES} blocks of {BLOCK_BYTES[kind]} bytes), got {blocks.shape[1]}")
        if blocks.shape[0] != shape[1]:
            raise ValueError(f"blocks must hold one row per output column, n_out = {shape[1]}, got {blocks.shape[0]}")
        if not blocks.flags.c_contiguous:
            raise ValueError("blocks must be C-contiguous (they are used in place, never copied)")
        if self.activations not in ACTIVATIONS:
            raise ValueError(f"activations must be one of {list(ACTIVATIONS)}, got {self.activations!r}")
        if self.activations == "int8":
            object.__setattr__(self, "packed", _pack(kind, blocks, n_in))

    def with_activations(self, activations: str) -> "BlockQuantizedMatrix":
        """The same blocks (shared, not copied), read by products as ``activations`` says ("float32" or "int8")."""
        return dataclasses.replace(self, activations=activations)

    @classmethod
    def from_blocks(cls, kind: str, blocks: np.ndarray, n_in: int) -> "BlockQuantizedMatrix":
        """Wrap stored blocks (a GGUF tensor's ``data``) without copying them.

        Parameters
        ----------
        kind : {"q4_1", "q8_0"}
            The block format.
        blocks : ndarray of uint8, shape (n_out, n_in / 32 * block_bytes)
            C-contiguous; it may be a memory map. The matrix keeps a read-only view of it.
        n_in : int
            Values per stored row (the rows of ``W``), a multiple of 32.

        Returns
        -------
        BlockQuantizedMatrix
        """
        if isinstance(n_in, bool) or not isinstance(n_in, (int, np.integer)) or n_in < 0 or n_in % BLOCK_VALUES:
            raise ValueError(f"n_in must be a non-negative multiple of {BLOCK_VALUES}, got {n_in!r}")
        if not isinstance(blocks, np.ndarray):
            raise TypeError(f"blocks must be a numpy array of uint8, got {type(blocks).__name__}")
        view = blocks.view()
        view.flags.writeable = False
        n_out = blocks.shape[0] if blocks.ndim else 0
        return cls(kind=kind, blocks=view, shape=(int(n_in), n_out))  # the rest is checked by __post_init__

    @property
    def nbytes(self) -> int:
        """Bytes of the stored blocks."""
        return int(self.blocks.nbytes)

    def rows(self, ids: ArrayLike) -> np.ndarray:
        """Stored rows ``ids`` dequantised: ``W[:, ids].T``, float32 of shape ``(*ids.shape, n_in)``.

        The embedding lookup of a table stored as (vocab, d) rows (a tied token embedding).
        """
        idx = as_array(ids, "ids")
        if idx.dtype.kind not in "iu" and idx.size:
            raise TypeError(f"ids must be integers, got dtype {idx.dtype}")
        n_in, n_out = self.shape
        flat = np.ascontiguousarray(idx, dtype=np.int64).reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= n_out):
            raise ValueError(f"ids must be in [0, {n_out}), got values in [{flat.min()}, {flat.max()}]")
        out = np.empty((flat.size, n_in), np.float32)
        _core.block_quantized_rows(self.blocks, self.kind, n_in, flat, out)
        return out.reshape(*idx.shape, n_in)

    def dequantize(self) -> np.ndarray:
        """The float32 matrix ``W``, shape (n_in, n_out) (the transpose of the dequantised rows)."""
        return self.rows(np.arange(self.shape[1])).T


def quantize_blocks(weight: ArrayLike, kind: str) -> BlockQuantizedMatrix:
    """Quantise a (n_in, n_out) weight to GGML blocks with ggml's reference rounding.

    Each column is cut into blocks of 32 values ``x`` and quantised in float32 as
    ``quantize_row_q8_0_ref`` / ``quantize_row_q4_1_ref`` do:

    - ``"q8_0"``: ``d = max|x| / 127``, ``q = round(x / d)`` (half away from zero);
    - ``"q4_1"``: ``d = (max x - min x) / 15``, ``m = min x``, ``q = min(15, floor((x - m) / d + 0.5))``;

    ``d`` and ``m`` are stored as float16 (``q`` is computed with the unrounded ``d``, as ggml does), and
    the dequantised values use the stored float16 ``d`` and ``m``. A block of equal values gets ``d = 0``.

    Parameters
    ----------
    weight : array-like of float, shape (n_in, n_out)
        ``n_in`` a multiple of 32; finite.
    kind : {"q4_1", "q8_0"}

    Returns
    -------
    BlockQuantizedMatrix

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> w = ops.quantize_blocks(np.linspace(-1, 1, 64).reshape(32, 2), "q8_0")
    >>> w.blocks.shape, float(np.abs(w.dequantize() - np.linspace(-1, 1, 64).reshape(32, 2)).max()) < 4e-3
    ((2, 34), True)
    """
    if kind not in BLOCK_BYTES:
        raise ValueError(f"kind must be one of {sorted(BLOCK_BYTES)}, got {kind!r}")
    w = float_array(weight, "weight")
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D (n_in, n_out), got shape {w.shape}")
    n_in, n_out = w.shape
    if n_in % BLOCK_VALUES:
        raise ValueError(f"weight must have a multiple of {BLOCK_VALUES} rows (n_in), got {n_in}")
    if not np.all(np.isfinite(w)):
        raise ValueError("weight must be finite, got NaN or inf")
    x = np.ascontiguousarray(w.T, dtype=np.float32).reshape(n_out, n_in // BLOCK_VALUES, BLOCK_VALUES)
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "q8_0":
            d = np.abs(x).max(axis=-1, keepdims=True) / np.float32(127)
            inv = np.where(d != 0, np.float32(1) / d, np.float32(0))
            v = x * inv
            q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)
            head = d.astype(np.float16).view(np.uint8)
            body = q.view(np.uint8)
        else:
            lo, hi = x.min(axis=-1, keepdims=True), x.max(axis=-1, keepdims=True)
            d = (hi - lo) / np.float32(15)
            inv = np.where(d != 0, np.float32(1) / d, np.float32(0))
            q = np.minimum(np.floor((x - lo) * inv + np.float32(0.5)), 15).astype(np.uint8)
            head = np.concatenate([d.astype(np.float16).view(np.uint8), lo.astype(np.float16).view(np.uint8)], axis=-1)
            body = q[..., :16] | (q[..., 16:] << 4)
    blocks = np.concatenate([head, body], axis=-1).reshape(n_out, n_in // BLOCK_VALUES * BLOCK_BYTES[kind])
    return BlockQuantizedMatrix.from_blocks(kind, np.ascontiguousarray(blocks), n_in)


def block_quantized_matmul(x: ArrayLike, w: BlockQuantizedMatrix, *, bias: ArrayLike | None = None,
                           out: np.ndarray | None = None) -> np.ndarray:
    """``x @ W (+ bias)`` for a block-quantised ``W``, dequantised in registers.

    With ``w.activations == "float32"``: up to 32 rows of ``x`` (decoding, batched or not) stream the blocks,
    in strips of 4-8 rows that share each pass: per block, the weights ``d * q`` (exact in float32) times
    ``x`` accumulated lane by lane, ``+ m * sum(x)`` with the sums of ``x`` over each block computed once per
    call; each row gets the same bits as it would alone. More rows
    (a prompt) dequantise panels of 512 stored rows into a scratch buffer and run the packed GEMM of
    :func:`attnkit.ops.matmul`. Accumulation is float32 (error about ``n_in`` float32 roundings of
    ``sum |x| |W|``); a row's result does not depend on the thread count.

    With ``w.activations == "int8"`` (llama.cpp's arithmetic): each block of 32 values of a row of ``x``
    becomes codes ``c = rint(x * 127 / amax)`` (the same codes on every ISA) and scale ``e = amax / 127``; per
    block the exact integer sums of ``q * c`` (8 lanes of 4 values) times ``d * e`` are added to 8 float32
    lanes (+ ``m * e * sum(c)`` for q4_1 to a ninth sum), the lanes added in one fixed order at the end: the
    same bits for any thread count and on AVX2 and AVX-512 (baseline rounds ``a * b + c`` twice), within
    float32 accumulation of the exact product of the codes (:func:`attnkit.reference.block_quantized_matmul`).
    A block of ``x`` holding inf or NaN makes the row's results NaN.

    Parameters
    ----------
    x : array-like of float32, shape (..., n_in)
        float16 widens to float32; float64 is refused (the product is float32 arithmetic): cast it first.
        Any memory layout (copied to C order when needed). NaN or inf in a row reaches that row only.
    w : BlockQuantizedMatrix
        Shape (n_in, n_out).
    bias : array-like of float, shape (n_out,), optional
        Added in float32.
    out : ndarray of float32, shape (..., n_out), optional
        C-contiguous, written in place and returned.

    Returns
    -------
    ndarray of float32, shape (..., n_out)

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> w = ops.quantize_blocks(15 * np.eye(32)[:, :3], "q4_1")  # d = 1, m = 0: exact
    >>> ops.block_quantized_matmul(np.arange(32, dtype=np.float32), w, bias=[0.5, 0, 0]).tolist()
    [0.5, 15.0, 30.0]
    """
    if not isinstance(w, BlockQuantizedMatrix):
        raise TypeError(f"w must be a BlockQuantizedMatrix (from_blocks or quantize_blocks), got {type(w).__name__}")
    # Decoding's call (a C-ordered float32 (m, n_in) array, no bias) skips the general checks below, which it
    # passes unchanged: they cost ~5 us a call, ~1 ms over the 181 weight products of a SmolLM2 token.
    if (type(x) is np.ndarray and x.dtype == np.float32 and x.ndim == 2 and x.flags.c_contiguous and bias is None
            and x.shape[1] == w.shape[0]):
        fast_shape = (x.shape[0], w.shape[1])
        fresh = out is None
        if fresh:
            out = np.empty(fast_shape, np.float32)
        if (type(out) is np.ndarray and out.dtype == np.float32 and out.shape == fast_shape and out.flags.c_contiguous
                and out.flags.aligned and out.flags.writeable and (fresh or not np.may_share_memory(x, out))):
            _core.block_quantized_matmul(w.blocks, w.kind, w.shape[0], x, None, out, w.activations == "int8",
                                         w.packed)
            return out
    arr = float_array(x, "x")
    if arr.dtype != np.float32:
        raise TypeError(f"x must be float32 (block_quantized_matmul computes in float32; cast with "
                        f"x.astype(np.float32)), got dtype {arr.dtype}")
    n_in, n_out = w.shape
    if arr.ndim < 1 or arr.shape[-1] != n_in:
        raise ValueError(f"x must have shape (..., n_in) with n_in = {n_in} to match w {w.shape}, got {arr.shape}")
    bias_row = None
    if bias is not None:
        b = float_array(bias, "bias")
        if b.shape != (n_out,):
            raise ValueError(f"bias must have shape (n_out,) = ({n_out},) to match w {w.shape}, got {b.shape}")
        bias_row = np.ascontiguousarray(b, dtype=np.float32)
    shape = (*arr.shape[:-1], n_out)
    if out is None:
        out = np.empty(shape, np.float32)
    else:
        check_out(out, shape, np.float32, "(..., n_out)")
    m = math.prod(arr.shape[:-1])
    rows = np.ascontiguousarray(arr).reshape(m, n_in)
    # Rows are read while out is written, by other threads too: x or bias in out's memory is read from a copy.
    rows = rows.copy() if np.may_share_memory(rows, out) else rows
    if bias_row is not None and np.may_share_memory(bias_row, out):
        bias_row = bias_row.copy()
    _core.block_quantized_matmul(w.blocks, w.kind, n_in, rows, bias_row, out.reshape(m, n_out), w.activations == "int8",
                                 w.packed)
    return out


# Columns per group of packed blocks (attnkit/block_quantized.h's kPackedColumns and packed_bytes).
PACKED_COLUMNS = 16


def _pack(kind, blocks, n_in):
    """``blocks`` (n_out, n_in / 32 * block_bytes) packed for the int8-activation kernels, a flat read-only uint8
    array: per group of 16 columns (the last padded with zero columns) and per block, each quad of the block's
    weight bytes for the 16 columns in turn (a vector lane is one column's quad: q4_1's 4 quads of nibble
    bytes, q8_0's 8 quads of values), then the 16 columns' float16 ``d``, then q4_1's 16 float16 ``m`` or
    q8_0's 16 int32 ``-128 * sum(q)`` (VNNI's products read x's codes + 128 as unsigned bytes)."""
    n_out, n_blocks, size = blocks.shape[0], n_in // BLOCK_VALUES, BLOCK_BYTES[kind]
    groups = -(-n_out // PACKED_COLUMNS)
    raw = np.zeros((groups * PACKED_COLUMNS, n_blocks, size), np.uint8)
    raw[:n_out] = blocks.reshape(n_out, n_blocks, size)
    raw = raw.reshape(groups, PACKED_COLUMNS, n_blocks, size).transpose(0, 2, 1, 3)  # (group, block, column, bytes)
    first = 4 if kind == "q4_1" else 2  # where the weight bytes start
    quads = raw[..., first:].reshape(groups, n_blocks, PACKED_COLUMNS, -1, 4).swapaxes(2, 3)  # (g, b, quad, col, 4)
    parts = [quads.reshape(groups, n_blocks, -1), raw[..., 0:2].reshape(groups, n_blocks, -1)]
    if kind == "q4_1":
        parts.append(raw[..., 2:4].reshape(groups, n_blocks, -1))
    else:
        sums = raw[..., 2:].view(np.int8).sum(axis=-1, dtype=np.int32) * np.int32(-128)
        parts.append(np.ascontiguousarray(sums, dtype="<i4").view(np.uint8).reshape(groups, n_blocks, -1))
    packed = np.ascontiguousarray(np.concatenate(parts, axis=-1)).reshape(-1)
    packed.flags.writeable = False
    return packed
