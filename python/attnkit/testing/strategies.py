"""Hypothesis strategies that draw attention problems.

Hypothesis is a test extra, not a runtime dependency: install it with
``pip install "attnkit[test]"``. Array values come from a NumPy generator seeded by Hypothesis,
so examples are cheap to draw and replay exactly; shapes, dtypes, layouts and mask kinds are
drawn by Hypothesis and shrink towards small, contiguous, unmasked problems.

Examples
--------
>>> import numpy as np
>>> from hypothesis import given
>>> from attnkit import ops, reference
>>> from attnkit.testing import assert_allclose
>>> from attnkit.testing.strategies import attention_problems
>>> @given(attention_problems())
... def test_attention(problem):
...     assert_allclose(ops.scaled_dot_product_attention(**problem),
...                     reference.scaled_dot_product_attention(**problem))
"""

import numpy as np

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("attnkit.testing.strategies needs Hypothesis: pip install 'attnkit[test]'") from exc

__all__ = [
    "LAYOUTS",
    "arrange",
    "attention_problems",
    "float_arrays",
    "head_dims",
    "int8_linear_inputs",
    "sequence_lengths",
    "softmax_inputs",
]

#: The memory layouts :func:`arrange` draws from: C order, Fortran order, a strided view, reversed strides.
LAYOUTS = ("C", "F", "strided", "reversed")

# Sizes next to SIMD widths (4, 8, 16 lanes) and tile sizes (32, 64, 128), plus primes.
_SEQUENCE_EDGES = (1, 2, 3, 5, 7, 8, 9, 13, 16, 17, 31, 32, 33, 61, 64, 65, 127, 128, 129, 257, 293)
_HEAD_EDGES = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 130)
# Gaps of strided views hold a poison value, so a kernel that ignores strides reads it.
_POISON = {"f": np.nan, "b": True, "i": -1, "u": 0}


def _sized(edges, min_value, max_value, small):
    """Mostly small; sometimes an edge size; now and then anything up to ``max_value``."""
    edges = [n for n in edges if min_value <= n <= max_value] or [min_value]
    return st.sampled_from(("small", "small", "small", "edge", "any")).flatmap(
        lambda kind: {
            "small": st.integers(min_value, max(min_value, min(small, max_value))),
            "edge": st.sampled_from(edges),
            "any": st.integers(min_value, max_value),
        }[kind]
    )


def sequence_lengths(min_value=1, max_value=300):
    """Strategy for Nq or Nk: typically <= 12, sometimes a tile edge or a prime, rarely large."""
    return _sized(_SEQUENCE_EDGES, min_value, max_value, small=12)


def head_dims(min_value=1, max_value=130):
    """Strategy for d or dv: typically <= 16, sometimes next to a SIMD width, rarely large."""
    return _sized(_HEAD_EDGES, min_value, max_value, small=16)


@st.composite
def arrange(draw, a, layouts=LAYOUTS):
    """Strategy for an array equal to ``a`` in a drawn memory layout.

    ``"C"`` and ``"F"`` are contiguous copies, ``"strided"`` a view that skips every other
    element of one axis (the skipped ones hold NaN, True or -1), ``"reversed"`` a view with a
    negative stride along one axis.
    """
    layout = draw(st.sampled_from(layouts)) if a.ndim else "C"
    if layout == "C":
        return np.ascontiguousarray(a)
    if layout == "F":
        return np.asfortranarray(a)
    axis = draw(st.integers(0, a.ndim - 1))
    if layout == "reversed":
        return np.flip(np.flip(a, axis).copy(), axis)
    shape = list(a.shape)
    shape[axis] *= 2
    big = np.full(shape, _POISON[a.dtype.kind], dtype=a.dtype)
    view = big[(slice(None),) * axis + (slice(None, None, 2),)]
    view[...] = a
    return view


@st.composite
def _leading(draw, batch, broadcast):
    """Leading dims of one operand: a suffix of ``batch`` with some dims set to 1."""
    if not broadcast or not batch:
        return batch
    drop = draw(st.sampled_from((0, 0, 0) + tuple(range(1, len(batch) + 1))))
    return tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in batch[drop:])


@st.composite
def _operand(draw, make, batch, tail, *, broadcast, layouts):
    """``make(shape)`` for drawn leading dims, in a drawn layout; a broadcast (size-1) leading
    dim is sometimes given as a read-only zero-stride view of the full size instead."""
    lead = draw(_leading(batch, broadcast))
    a = make(lead + tail)
    if layouts:
        a = draw(arrange(a))
    if broadcast and lead != batch[len(batch) - len(lead) :] and draw(st.integers(0, 2)) == 0:
        a = np.broadcast_to(a, batch[len(batch) - len(lead) :] + tail)
    return a


@st.composite
def attention_problems(
    draw,
    *,
    dtypes=(np.float32, np.float64),
    max_batch_dims=2,
    max_n=300,
    max_d=130,
    masks=True,
    key_lengths=True,
    causal=True,
    windows=True,
    bias=True,
    scales=True,
    broadcast=True,
    layouts=True,
):
    """Strategy for the keyword arguments of ``scaled_dot_product_attention``.

    Parameters
    ----------
    dtypes : sequence of dtype, default=(np.float32, np.float64)
        Dtype of q, k, v and bias (one per problem).
    max_batch_dims : int, default=2
        Number of leading (batch, head) dims, each of size 1 to 3.
    max_n, max_d : int, default=300, 130
        Largest Nq / Nk and d / dv.
    masks, key_lengths, causal, windows, bias, scales : bool, default=True
        Whether the problem may use each option. A window's sides are drawn from None (unbounded), 0, 1,
        small and problem-sized values. Masks are drawn as a full ``(..., Nq, Nk)``
        array, per key ``(..., 1, Nk)``, a vector ``(Nk,)``, a matrix ``(Nq, Nk)`` or a prefix
        (padding) mask; key_lengths has a prefix of the batch dims as its shape.
    broadcast : bool, default=True
        Whether operands may have fewer or size-1 leading dims (sometimes as zero-stride views).
    layouts : bool, default=True
        Whether arrays may be Fortran-ordered, strided or have negative strides.

    Returns
    -------
    dict
        Keys ``q, k, v, mask, key_lengths, causal, window, bias, scale`` (unused ones are None/False),
        ready for ``scaled_dot_product_attention(**problem)``.
    """
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=max_batch_dims)))
    nq = draw(sequence_lengths(max_value=max_n))
    nk = draw(sequence_lengths(max_value=max_n))
    d = draw(head_dims(max_value=max_d))
    dv = draw(st.one_of(st.just(d), head_dims(max_value=max_d)))
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    # spread sets the logit scale (std ~ spread**2), i.e. how peaked the weights are.
    spread = draw(st.sampled_from((1.0, 0.3, 3.0)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def floats(shape, sigma=1.0):
        return (sigma * rng.standard_normal(shape)).astype(dtype)

    def operand(make, tail):
        return draw(_operand(make, batch, tail, broadcast=broadcast, layouts=layouts))

    problem = {
        "q": operand(lambda s: floats(s, spread), (nq, d)),
        "k": operand(lambda s: floats(s, spread), (nk, d)),
        "v": operand(floats, (nk, dv)),
        "mask": None,
        "key_lengths": None,
        "causal": draw(st.booleans()) if causal else False,
        "window": None,
        "bias": None,
        "scale": draw(st.sampled_from((None, None, None, 0.5, 0.125, -0.3))) if scales else None,
    }

    if windows and draw(st.booleans()):
        side = st.sampled_from((None, 0, 1, 3, 17, 64, max(nq, nk)))
        problem["window"] = (draw(side), draw(side))

    mask_kind = draw(st.sampled_from(("none", "full", "per-key", "keys", "matrix", "padding")))
    if masks and mask_kind != "none":
        density = draw(st.sampled_from((0.8, 0.5, 0.1)))
        tail = {"full": (nq, nk), "matrix": (nq, nk), "keys": (nk,)}.get(mask_kind, (1, nk))
        if mask_kind in ("matrix", "keys"):
            mask = rng.random(tail) < density
            problem["mask"] = draw(arrange(mask)) if layouts else mask
        elif mask_kind == "padding":
            problem["mask"] = operand(lambda s: np.arange(nk) < rng.integers(0, nk + 1, size=s[:-2] + (1, 1)), tail)
        else:
            problem["mask"] = operand(lambda s: rng.random(s) < density, tail)

    bias_kind = draw(st.sampled_from(("none", "full", "per-key", "matrix")))
    if bias and bias_kind != "none":
        if bias_kind == "matrix":
            problem["bias"] = draw(arrange(floats((nq, nk)))) if layouts else floats((nq, nk))
        else:
            problem["bias"] = operand(floats, (nq if bias_kind == "full" else 1, nk))

    if key_lengths and draw(st.booleans()):
        shapes = [a.shape[:-2] for a in (problem["q"], problem["k"], problem["v"])]
        shapes += [np.shape(problem[n])[:-2] for n in ("mask", "bias") if problem[n] is not None]
        full = np.broadcast_shapes(*shapes)
        prefix = tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in full[: draw(st.integers(0, len(full)))])
        if draw(st.booleans()):
            lengths = rng.integers(0, nk + 1, size=prefix)
        else:
            lengths = rng.choice([0, 1, nk - 1, nk], size=prefix)
        lengths = lengths.astype(draw(st.sampled_from((np.int64, np.int32, np.intp))))
        problem["key_lengths"] = int(lengths) if not prefix and draw(st.booleans()) else lengths
    return problem


@st.composite
def softmax_inputs(
    draw,
    *,
    dtypes=(np.float32, np.float64),
    max_dims=3,
    max_n=300,
    special=True,
    layouts=True,
):
    """Strategy for the arguments ``x, axis`` of ``softmax`` and ``log_softmax``.

    The softmax axis has a :func:`sequence_lengths` size, the other axes 1 to 4. With
    ``special``, some examples hold ``-inf`` entries, whole ``-inf`` slices and large logits.

    Returns
    -------
    dict
        Keys ``x`` and ``axis``.
    """
    ndim = draw(st.integers(1, max_dims))
    axis = draw(st.integers(-ndim, ndim - 1))
    shape = [draw(st.integers(1, 4)) for _ in range(ndim)]
    shape[axis] = draw(sequence_lengths(max_value=max_n))
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    sigma = draw(st.sampled_from((1.0, 1.0, 10.0, 1e-3, 1e3) if special else (1.0, 10.0)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = sigma * rng.standard_normal(shape)
    if special and draw(st.booleans()):
        x[rng.random(shape) < draw(st.sampled_from((0.1, 0.5, 0.95)))] = -np.inf
        if draw(st.booleans()):
            index = [rng.integers(0, n) for n in shape]
            index[axis] = slice(None)
            x[tuple(index)] = -np.inf
    x = x.astype(dtype)
    return {"x": draw(arrange(x)) if layouts else x, "axis": axis}


@st.composite
def float_arrays(
    draw,
    *,
    max_lead_dims=2,
    last=None,
    dtypes=(np.float32, np.float64),
    scales=(1.0, 1.0, 3.0, 0.01, 100.0),
    layouts=True,
):
    """Strategy for a float array of shape ``lead + (n,)``: 0 to ``max_lead_dims`` leading dims of size
    1 to 4 and ``n`` drawn from ``last`` (default :func:`head_dims`), normal values times a drawn scale.

    For the inputs of row-wise and elementwise ops (layer norm, GELU, cross-entropy logits).
    """
    lead = tuple(draw(st.lists(st.integers(1, 4), max_size=max_lead_dims)))
    n = draw(last if last is not None else head_dims())
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    scale = draw(st.sampled_from(scales))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = (scale * rng.standard_normal(lead + (n,))).astype(dtype)
    return draw(arrange(x)) if layouts else x


# Rows of x and columns of a weight that stress int8 quantisation: a zero row (scale 0), a constant
# row (one end of the range is 0, every value quantises to 0 or 255), large magnitudes (whose products
# stay finite in float32), subnormal values, and the largest products (u8 255 x s8 127), which a pmaddubsw pair
# (2 x 255 x 127 > 32767) would saturate.
_INT8_KINDS = ("normal", "normal", "zero", "constant", "huge", "tiny", "one-sided", "saturating")


def _int8_operand(rng, kind, shape):
    if kind == "zero":
        return np.zeros(shape)
    if kind == "constant":
        return np.full(shape, rng.choice([-3.5, 0.25, 7.0]))
    if kind == "huge":
        return 1e15 * rng.standard_normal(shape)
    if kind == "tiny":
        return 1e-39 * rng.standard_normal(shape)
    if kind == "one-sided":
        return np.abs(rng.standard_normal(shape)) + 5.0
    if kind == "saturating":
        return np.full(shape, 1e3)
    return rng.standard_normal(shape) * rng.choice([1.0, 0.01, 100.0])


@st.composite
def int8_linear_inputs(draw, max_dim=200, layouts=True):
    """Strategy for ``(x, weight, bias)`` of an int8 linear map: x float32 (m, k) in a drawn layout,
    weight float64 (k, n), bias float32 (n,) or None; m, n, k in 1 .. max_dim with tile edges likely.

    Each row of x and each column of the weight is drawn from ``normal``, ``zero``, ``constant``,
    ``huge`` (1e15), ``tiny`` (subnormal float32), ``one-sided`` (all positive) and ``saturating``
    (the largest u8 x s8 products).
    """
    edges = (1, 2, 3, 4, 5, 7, 8, 11, 12, 13, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97, 127, 128, 129, 199, 200)
    dims = st.one_of(st.integers(1, max_dim), st.sampled_from([e for e in edges if e <= max_dim]))
    m, k, n = draw(dims), draw(dims), draw(dims)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kinds = st.sampled_from(_INT8_KINDS)
    row_kinds = draw(st.lists(kinds, min_size=1, max_size=3))
    col_kinds = draw(st.lists(kinds, min_size=1, max_size=3))
    x = np.stack([_int8_operand(rng, row_kinds[i % len(row_kinds)], k) for i in range(m)]).astype(np.float32)
    weight = np.stack([_int8_operand(rng, col_kinds[j % len(col_kinds)], k) for j in range(n)], axis=1)
    bias = rng.standard_normal(n).astype(np.float32) if draw(st.booleans()) else None
    return (draw(arrange(x)) if layouts else x), weight, bias
