"""ops.packed_attention against the NumPy reference and against the padded op, on every ISA."""

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import attnkit
from attnkit import ops, reference
from attnkit.testing import assert_allclose


@st.composite
def packed_problems(draw):
    """Sequences of unequal lengths (0 included) packed end to end; q, k, v as column slices of one
    fused array (as a Q/K/V projection leaves them) or as three arrays."""
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    lengths = np.array(draw(st.lists(st.integers(0, 40), min_size=1, max_size=5)), dtype=np.int64)
    heads, d, dv = draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    tokens, widths = int(lengths.sum()), (heads * d, heads * d, heads * dv)
    if draw(st.booleans()):
        fused = (rng.standard_normal((tokens, sum(widths))) * 2).astype(dtype)
        q, k, v = fused[:, :widths[0]], fused[:, widths[0]:widths[0] + widths[1]], fused[:, widths[0] + widths[1]:]
    else:
        q, k, v = ((rng.standard_normal((tokens, w)) * 2).astype(dtype) for w in widths)
    return dict(q=q, k=k, v=v, lengths=lengths, n_heads=heads, causal=draw(st.booleans()))


def padded(problem):
    """The same problem in the padded (S, H, N, width) layout, and the rows of its real tokens."""
    lengths, heads = problem["lengths"], problem["n_heads"]
    s, n = len(lengths), max(int(lengths.max()), 1)
    rows = (np.arange(n) < lengths[:, None]).reshape(-1).nonzero()[0]
    arrays = []
    for a in (problem["q"], problem["k"], problem["v"]):
        full = np.zeros((s * n, a.shape[1]), dtype=a.dtype)
        full[rows] = a
        arrays.append(full.reshape(s, n, heads, -1).swapaxes(1, 2))
    return arrays, rows


@given(problem=packed_problems())
def test_matches_reference(isa, problem):
    note(f"lengths {problem['lengths'].tolist()}")
    got = ops.packed_attention(**problem)
    assert_allclose(got, reference.packed_attention(**problem), magnitude=float(np.abs(problem["v"]).max(initial=1)))


@given(problem=packed_problems())
def test_equals_the_padded_op_bit_for_bit(isa, problem):
    (q, k, v), rows = padded(problem)
    heads = ops.scaled_dot_product_attention(q, k, v, key_lengths=problem["lengths"], causal=problem["causal"])
    expected = heads.swapaxes(1, 2).reshape(-1, problem["v"].shape[1])[rows]
    assert_array_equal(ops.packed_attention(**problem), expected)


@pytest.mark.parametrize("causal", [False, True])
def test_sequences_longer_than_one_block(isa, causal):
    # 300 > the kernel's 96-query and 192-key blocks; the short neighbours must stay untouched.
    rng = np.random.default_rng(1)
    lengths = np.array([7, 300, 1, 130])
    q, k, v = (rng.standard_normal((lengths.sum(), 2 * 16)) for _ in range(3))
    got = ops.packed_attention(q, k, v, lengths, n_heads=2, causal=causal)
    assert_allclose(got, reference.packed_attention(q, k, v, lengths, n_heads=2, causal=causal))


def test_a_sequence_sees_only_itself(isa):
    rng = np.random.default_rng(2)
    lengths = np.array([3, 4, 2])
    q, k, v = (rng.standard_normal((9, 8)) for _ in range(3))
    poisoned = v.copy()
    poisoned[3:7] = np.nan  # the whole middle sequence
    got = ops.packed_attention(q, k, poisoned, lengths, n_heads=2)
    assert np.isnan(got[3:7]).all()
    assert_array_equal(got[[0, 1, 2, 7, 8]], ops.packed_attention(q, k, v, lengths, n_heads=2)[[0, 1, 2, 7, 8]])


def test_scale_and_dtypes(isa):
    rng = np.random.default_rng(3)
    lengths = [2, 3]
    q, k, v = (rng.standard_normal((5, 6)) for _ in range(3))
    got = ops.packed_attention(q.astype(np.float16), k.astype(np.float32), v.astype(np.float32), lengths,
                               n_heads=3, scale=0.3)
    assert got.dtype == np.float32
    widened = q.astype(np.float16).astype(np.float32)
    assert_allclose(got, reference.packed_attention(widened, k.astype(np.float32), v.astype(np.float32), lengths,
                                                    n_heads=3, scale=0.3))
    assert ops.packed_attention(q.astype(np.float32), k, v, lengths, n_heads=3).dtype == np.float64


@pytest.mark.parametrize("layout", ["reversed rows", "strided columns"])
def test_reads_any_row_layout(isa, layout):
    # Rows a negative stride apart are read in place; rows that are not contiguous are copied first.
    rng = np.random.default_rng(6)
    lengths = np.array([4, 7, 2])
    q, k, v = (rng.standard_normal((13, 6)) for _ in range(3))
    if layout == "reversed rows":
        views = [a[::-1].copy()[::-1] for a in (q, k, v)]
        assert all(x.strides[0] < 0 for x in views)
    else:
        views = [np.repeat(a, 2, axis=1)[:, ::2] for a in (q, k, v)]
    assert_array_equal(ops.packed_attention(*views, lengths, n_heads=3, causal=True),
                       ops.packed_attention(q, k, v, lengths, n_heads=3, causal=True))


def test_writes_into_out_and_returns_it(isa):
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((6, 4)).astype(np.float32) for _ in range(3))
    out = np.full((6, 4), np.nan, dtype=np.float32)
    assert ops.packed_attention(q, k, v, [6], n_heads=2, out=out) is out
    assert_array_equal(out, ops.packed_attention(q, k, v, [6], n_heads=2))


def test_results_do_not_depend_on_the_thread_count(isa):
    rng = np.random.default_rng(5)
    lengths = np.array([150, 40, 90, 3])
    q, k, v = (rng.standard_normal((lengths.sum(), 48)).astype(np.float32) for _ in range(3))
    previous = attnkit.get_num_threads()
    try:
        attnkit.set_num_threads(1)
        one = ops.packed_attention(q, k, v, lengths, n_heads=3, causal=True)
        attnkit.set_num_threads(2)
        two = ops.packed_attention(q, k, v, lengths, n_heads=3, causal=True)
    finally:
        attnkit.set_num_threads(previous)
    assert_array_equal(one, two)


@pytest.mark.parametrize("lengths", [[], [0], [0, 0]])
def test_no_tokens(isa, lengths):
    empty = np.zeros((0, 4))
    assert ops.packed_attention(empty, empty, np.zeros((0, 6)), lengths, n_heads=2).shape == (0, 6)


def _args(**change):
    x = np.ones((5, 4))
    args = dict(q=x, k=x, v=x, lengths=[2, 3], n_heads=2)
    args.update(change)
    return args


@pytest.mark.parametrize("change, error, words", [
    (dict(n_heads=0), ValueError, "n_heads must be >= 1"),
    (dict(n_heads=2.0), TypeError, "n_heads must be an integer"),
    (dict(n_heads=True), TypeError, "n_heads must be an integer"),
    (dict(n_heads=3), ValueError, "multiple of n_heads=3"),
    (dict(q=np.ones((5, 2, 2))), ValueError, "q must be 2-D"),
    (dict(k=np.ones((4, 4))), ValueError, "one row per token"),
    (dict(k=np.ones((5, 6))), ValueError, "same width"),
    (dict(v=np.ones((5, 4), dtype=np.int64)), TypeError, "v must be a float32 or float64 array"),
    (dict(q=np.ones((5, 0)), k=np.ones((5, 0))), ValueError, "at least one feature"),
    (dict(lengths=[2, 2]), ValueError, "sum to the number of rows"),
    (dict(lengths=[6, -1]), ValueError, "lengths must be >= 0"),
    (dict(lengths=[2.0, 3.0]), TypeError, "lengths must be an integer array"),
    (dict(lengths=[[2, 3]]), ValueError, "lengths must be 1-D"),
    (dict(causal="yes"), TypeError, "causal must be a bool"),
    (dict(scale=float("nan")), ValueError, "scale must be a finite"),
    (dict(out=np.empty((5, 4), dtype=np.float32)), TypeError, "out must have the result dtype float64, got float32"),
    (dict(out=np.empty((5, 3))), ValueError, "dv) = (5, 4), got (5, 3)"),
    (dict(out=np.empty((5, 8))[:, ::2]), ValueError, "C-contiguous"),
    (dict(out=[[0.0] * 4] * 5), TypeError, "out must be a numpy array, got list"),
])
def test_rejects_bad_input(change, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        ops.packed_attention(**_args(**change))


def test_rejects_out_overlapping_an_input():
    q = np.ones((5, 4))
    with pytest.raises(ValueError, match="out must not share memory"):
        ops.packed_attention(q, q.copy(), q.copy(), [5], n_heads=2, out=q)
