"""ops.matmul against the NumPy reference on every ISA, and its determinism contract: bit-identical
results whatever the thread count and the memory layout of the operands."""

import doctest
import importlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import attnkit
from attnkit import ops, reference
from attnkit.testing import assert_allclose
from attnkit.testing.strategies import arrange

# Edges of the register tiles (MR = 6 or 12 rows, NR = 4 to 32 columns on the x86 ISAs) and primes.
_EDGES = (1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 63, 64, 65)
# k across the KC blocks (512 in float32, 256 in float64): block edges and several blocks.
_K_EDGES = (0, 1, 3, 255, 256, 257, 511, 512, 513, 769, 1025, 1300)
dims = st.one_of(st.integers(0, 12), st.sampled_from(_EDGES), st.integers(0, 70))
depths = st.one_of(st.integers(0, 20), st.sampled_from(_K_EDGES), st.integers(0, 1300))


def _normal(seed, shape, dtype, scale=1.0):
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(dtype)


def _magnitude(a, b, *extra):
    """Largest |a| @ |b| (+ |extra|): the size of the sums the result is made of."""
    products = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    for x in extra:
        products = products + np.abs(np.asarray(x, dtype=np.float64))
    return max(1e-30, float(products.max(initial=0.0)))


@pytest.fixture
def threads():
    """Set attnkit's thread count inside a test; the previous count is restored afterwards."""
    previous = attnkit.get_num_threads()
    yield attnkit.set_num_threads
    attnkit.set_num_threads(previous)


@given(m=dims, k=depths, n=dims, dtype=st.sampled_from((np.float32, np.float64)),
       mode=st.sampled_from(("plain", "bias", "out", "accumulate", "accumulate+bias")),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_matches_reference(isa, m, k, n, dtype, mode, seed, data):
    a = data.draw(arrange(_normal(seed, (m, k), dtype)), label="a")
    b = data.draw(arrange(_normal(seed + 1, (k, n), dtype)), label="b")
    before = a.copy(), b.copy()
    bias = _normal(seed + 2, n, dtype) if "bias" in mode else None
    start = _normal(seed + 3, (m, n), dtype)
    accumulate = mode.startswith("accumulate")
    out = start.copy() if mode != "plain" and mode != "bias" else None
    c = ops.matmul(a, b, bias=bias, out=out, accumulate=accumulate)
    expected = reference.matmul(a, b, bias=bias, out=start.copy() if out is not None else None, accumulate=accumulate)
    assert c.dtype == dtype and c.shape == (m, n)
    assert out is None or c is out
    extra = [x for x in (bias, start if accumulate else None) if x is not None]
    assert_allclose(c, expected, magnitude=_magnitude(a, b, *extra))
    assert_array_equal(a, before[0])
    assert_array_equal(b, before[1])


def _layouts(x):
    """``x`` in the layouts the contract covers: C order, Fortran order, the transposed view of a
    C array, a strided slice (NaN in the gaps), negative strides."""
    big = np.full((2 * x.shape[0], 3 * x.shape[1]), np.nan, x.dtype)
    big[::2, ::3] = x
    return {
        "C": np.ascontiguousarray(x),
        "F": np.asfortranarray(x),
        "T view": np.ascontiguousarray(x.T).T,
        "strided": big[::2, ::3],
        "reversed": np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1],
    }


# (m, k, n): above the one-thread threshold (2^24 multiply-adds), edges that are not whole tiles, k over
# several KC blocks (512 in float32, 256 in float64); the rows split (m > n), the columns split (n > m),
# a single row; rows split over several column blocks (n > NC = 512) and K blocks; rows split with k in one KC
# block, where the threads claim rows as they come (two column blocks, row chunks not whole tiles at the end).
CONTRACT_SHAPES = [(203, 1400, 61), (37, 1700, 290), (1, 18000, 1000), (130, 1000, 130), (1200, 768, 600),
                   (1501, 200, 700)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", CONTRACT_SHAPES)
def test_bit_identical_across_thread_counts_and_layouts(isa, threads, dtype, m, k, n):
    a, b = _normal(0, (m, k), dtype), _normal(1, (k, n), dtype, scale=3.0)
    bias, start = _normal(2, n, dtype), _normal(3, (m, n), dtype)
    threads(1)
    expected = ops.matmul(a, b)
    expected_acc = ops.matmul(a, b, bias=bias, out=start.copy(), accumulate=True)
    for count in (1, 2, 3):
        threads(count)
        for (a_name, a_view), (b_name, b_view) in zip(_layouts(a).items(), reversed(_layouts(b).items())):
            assert_array_equal(ops.matmul(a_view, b_view), expected, err_msg=f"{count} threads, a {a_name}, b {b_name}")
        sums = np.full(n, np.nan, dtype)
        acc = ops.matmul(_layouts(a)["T view"], b, bias=bias, out=start.copy(), accumulate=True, b_column_sums=sums)
        assert_array_equal(acc, expected_acc, err_msg=f"{count} threads, accumulate + bias")
        assert_array_equal(sums, _column_sums_in_row_order(b), err_msg=f"{count} threads, column sums")


def test_bit_identical_across_thread_counts_for_the_estimator_shapes(threads):
    """The shapes the layers run, and the splits of rows, of columns (n > m, and 11 x 4 tiles of 128 x 128),
    and of both (300 x 300 on 4 threads) that the grid makes for 1 to 4 threads."""
    rng = np.random.default_rng(4)
    for m, k, n in [(2304, 128, 256), (256, 128, 3000), (128, 2304, 128), (300, 200, 300)]:
        a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
        threads(1)
        expected = ops.matmul(a, b)
        for count in (2, 3, 4):
            threads(count)
            assert_array_equal(ops.matmul(a, b), expected, err_msg=f"({m}, {k}) @ ({k}, {n}), {count} threads")


def test_bit_identical_across_thread_counts_for_decoding_steps(threads):
    """A decoding step's thin products (up to 4 rows) split B's columns over the threads from 2^18 elements of B,
    far below the packed path's threshold: the same bits whatever the count, B's rows contiguous or strided."""
    rng = np.random.default_rng(5)
    for m, k, n in [(1, 256, 8192), (3, 257, 1030), (4, 1024, 300)]:
        a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
        for name, b_view in (("contiguous", b), ("transposed", np.ascontiguousarray(b.T).T)):
            threads(1)
            expected = ops.matmul(a, b_view)
            for count in (2, 3):
                threads(count)
                assert_array_equal(ops.matmul(a, b_view), expected, err_msg=f"({m}, {k}) @ {name} ({k}, {n}), "
                                                                             f"{count} threads")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_and_inf_stay_in_their_row_or_column(isa, threads, dtype):
    m, k, n = 37, 1700, 290  # above the one-thread threshold; two threads split the columns
    a, b = _normal(0, (m, k), dtype), _normal(1, (k, n), dtype)
    a[3, 17], a[20, 1099], a[36, 0] = np.nan, np.inf, -np.inf
    b[700, 289], b[0, 5] = np.nan, np.inf
    bias = np.zeros(n, dtype)
    bias[130] = np.nan
    rows, cols = [3, 20, 36], [5, 130, 289]
    for count in (1, 2):
        threads(count)
        c = ops.matmul(a, b, bias=bias)
        bad = np.zeros((m, n), bool)
        bad[rows] = True
        bad[:, cols] = True
        assert_array_equal(~np.isfinite(c), bad)
        clean_a, clean_b = np.delete(a, rows, axis=0), np.delete(b, cols, axis=1)
        expected = reference.matmul(clean_a, clean_b)
        assert_allclose(np.delete(np.delete(c, rows, axis=0), cols, axis=1), expected,
                        magnitude=_magnitude(clean_a, clean_b))


def test_inf_times_zero_is_nan_as_in_blas():
    a = np.array([[np.inf, 1.0], [1.0, 1.0]])
    b = np.array([[0.0, 1.0], [1.0, 1.0]])
    c = ops.matmul(a, b)
    assert np.isnan(c[0, 0]) and c[0, 1] == np.inf
    assert_array_equal(c[1], [1.0, 2.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bias_out_and_accumulate(isa, dtype):
    a, b, bias = _normal(0, (19, 40), dtype), _normal(1, (40, 33), dtype), _normal(2, 33, dtype)
    product = reference.matmul(a, b)
    magnitude = _magnitude(a, b, bias) + 2.0
    assert_allclose(ops.matmul(a, b, bias=bias), product + bias, magnitude=magnitude)
    # out: a window of a wider array, rows 3 apart; what lies around it is untouched.
    big = np.full((19, 99), -7.0, dtype)
    out = big[:, 10:43]
    assert ops.matmul(a, b, out=out) is out
    assert_allclose(out, product, magnitude=magnitude)
    assert np.all(big[:, :10] == -7.0) and np.all(big[:, 43:] == -7.0)
    ops.matmul(a, b, bias=bias, out=out, accumulate=True)
    assert_allclose(out, reference.matmul(a, b, bias=bias, out=product.copy(), accumulate=True),
                    magnitude=2 * magnitude)
    # Rows in reverse order (a negative row stride) are rows too.
    flipped = np.zeros((19, 33), dtype)[::-1]
    assert_allclose(ops.matmul(a, b, out=flipped), product, magnitude=magnitude)


def test_accumulate_is_a_weight_gradient_without_a_temporary():
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((50, 16)), rng.standard_normal((50, 8))
    grad = rng.standard_normal((16, 8))
    expected = grad + x.T @ g
    assert ops.matmul(x.T, g, out=grad, accumulate=True) is grad
    assert_allclose(grad, expected, magnitude=_magnitude(x.T, g, expected))


def test_out_overlapping_an_input_is_read_before_it_is_written():
    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float64):
        a, b = rng.standard_normal((300, 300)).astype(dtype), rng.standard_normal((300, 300)).astype(dtype)
        expected = reference.matmul(a, b, out=a.copy(), accumulate=True)
        magnitude = _magnitude(a, b, a)
        ops.matmul(a, b, out=a, accumulate=True)
        assert_allclose(a, expected, magnitude=magnitude)
        expected = reference.matmul(b, b)
        ops.matmul(b, b, out=b)
        assert_allclose(b, expected, magnitude=float(np.abs(expected).max()) + 300.0)
    c = np.ones((2, 3))
    ops.matmul(np.eye(2), np.ones((2, 3)), bias=c[1], out=c)
    assert_array_equal(c, 2.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_zero_sizes(isa, dtype):
    bias, start = np.arange(3, dtype=dtype), np.full((2, 3), 5.0, dtype)
    assert_array_equal(ops.matmul(np.ones((2, 0), dtype), np.ones((0, 3), dtype)), np.zeros((2, 3)))
    assert_array_equal(ops.matmul(np.ones((2, 0), dtype), np.ones((0, 3), dtype), bias=bias), [bias, bias])
    out = ops.matmul(np.ones((2, 0), dtype), np.ones((0, 3), dtype), bias=bias, out=start.copy(), accumulate=True)
    assert_array_equal(out, start + bias)
    assert ops.matmul(np.ones((0, 4), dtype), np.ones((4, 3), dtype)).shape == (0, 3)
    assert ops.matmul(np.ones((2, 4), dtype), np.ones((4, 0), dtype), bias=np.ones(0, dtype)).shape == (2, 0)
    assert ops.matmul(np.ones((0, 0), dtype), np.ones((0, 0), dtype)).dtype == dtype


def test_dtype_promotion():
    f16, f32, f64 = (np.ones((2, 2), dt) for dt in (np.float16, np.float32, np.float64))
    assert ops.matmul(f32, f32).dtype == np.float32
    assert ops.matmul(f16, f16).dtype == np.float32
    assert ops.matmul(f16, f32).dtype == np.float32
    assert ops.matmul(f32, f64).dtype == np.float64
    assert ops.matmul(f32, f32, bias=np.ones(2)).dtype == np.float64
    assert_array_equal(ops.matmul([[1.0, 2.0]], [[3.0], [4.0]]), [[11.0]])
    # Mixed inputs compute in float64: a float32 product of these would lose the 1.
    a = np.array([[1e8, 1.0, -1e8]], np.float32)
    assert ops.matmul(a, np.ones((3, 1)))[0, 0] == 1.0


def test_reads_in_place_what_it_can_and_copies_what_it_must():
    rng = np.random.default_rng(6)
    b = rng.standard_normal((5, 4))
    rows = np.broadcast_to(rng.standard_normal(5), (3, 5))  # zero stride, read-only
    assert_allclose(ops.matmul(rows, b), reference.matmul(rows, b))
    raw = np.zeros(8 * 20 + 1, np.uint8)[1:]  # an address off the 8-byte grid
    unaligned = np.ndarray((5, 4), np.float64, buffer=raw)
    unaligned[...] = b
    assert not unaligned.flags.aligned
    assert_allclose(ops.matmul(rows, unaligned), reference.matmul(rows, b))


def test_errors_name_the_argument_and_what_was_seen():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    with pytest.raises(TypeError, match="a must be a float32 or float64 array, got dtype int64"):
        ops.matmul(np.ones((2, 3), np.int64), b)
    with pytest.raises(TypeError, match="b must be a float32 or float64 array, got dtype complex128"):
        ops.matmul(a, b + 0j)
    with pytest.raises(TypeError, match="b must be a float32 or float64 array, got dtype object"):
        ops.matmul(a, np.ones((3, 4), object))
    with pytest.raises(TypeError, match="a must be a float32 or float64 array, got None"):
        ops.matmul(None, b)
    with pytest.raises(ValueError, match=r"a must be 2-D \(m, k\), got shape \(3,\)"):
        ops.matmul(np.ones(3), b)
    with pytest.raises(ValueError, match=r"b must be 2-D \(k, n\), got shape \(1, 3, 4\)"):
        ops.matmul(a, np.ones((1, 3, 4)))
    with pytest.raises(ValueError, match=r"must have the same k, got a \(2, 3\) and b \(4, 3\)"):
        ops.matmul(a, b.T)
    with pytest.raises(ValueError, match=r"bias must have shape \(n,\) = \(4,\) to match b \(3, 4\), got \(3,\)"):
        ops.matmul(a, b, bias=np.ones(3))
    with pytest.raises(TypeError, match="bias must be a float32 or float64 array, got dtype bool"):
        ops.matmul(a, b, bias=np.ones(4, bool))
    with pytest.raises(TypeError, match="accumulate must be a bool, got str 'yes'"):
        ops.matmul(a, b, out=np.ones((2, 4)), accumulate="yes")
    with pytest.raises(ValueError, match="accumulate=True adds into out, so out is required; got out=None"):
        ops.matmul(a, b, accumulate=True)
    with pytest.raises(TypeError, match="out must be a numpy array, got list"):
        ops.matmul(a, b, out=[[0.0] * 4] * 2)
    with pytest.raises(TypeError, match="out must have the result dtype float64, got float32"):
        ops.matmul(a, b, out=np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"out must have shape \(m, n\) = \(2, 4\), got \(4, 2\)"):
        ops.matmul(a, b, out=np.ones((4, 2)))
    readonly = np.ones((2, 4))
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="out must be writeable, got a read-only array"):
        ops.matmul(a, b, out=readonly)
    with pytest.raises(ValueError, match=r"out must have contiguous rows \(strides\[-1\] == itemsize 8\), "
                                         r"got strides \(8, 16\)"):
        ops.matmul(a, b, out=np.ones((4, 2)).T)
    raw = np.zeros(8 * 8 + 1, np.uint8)[1:]
    with pytest.raises(ValueError, match="out must be aligned to its 8-byte elements, got strides"):
        ops.matmul(a, b, out=np.ndarray((2, 4), np.float64, buffer=raw))


def test_docstring_examples_run():
    # (attnkit.ops.matmul is the function; the module is reached by its full name)
    assert doctest.testmod(importlib.import_module("attnkit.ops.matmul")).failed == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 300, 1100])
def test_a_row_gets_the_same_bits_alone_as_among_many(isa, threads, dtype, k):
    """Up to four rows take the unpacked (thin) path, many the packed GEMM: every element is the same sequence of
    roundings in both, whatever B's layout (a decoding step's logits equal that row of the full forward)."""
    a, b = _normal(5, (9, k), dtype), _normal(6, (k, 77), dtype)
    bias, start = _normal(7, 77, dtype), _normal(8, (9, 77), dtype)
    threads(2)
    many = ops.matmul(a, b, bias=bias)
    many_acc = ops.matmul(a, b, bias=bias, out=start.copy(), accumulate=True)
    for rows in (1, 2, 4):
        for name, b_view in _layouts(b).items():
            assert_array_equal(ops.matmul(a[:rows], b_view, bias=bias), many[:rows], err_msg=f"{rows} rows, b {name}")
        acc = ops.matmul(a[:rows], b, bias=bias, out=start[:rows].copy(), accumulate=True)
        assert_array_equal(acc, many_acc[:rows], err_msg=f"{rows} rows, accumulate")


def _column_sums_in_row_order(b):
    """0 + b[0] + b[1] + ... one row at a time: the order b_column_sums promises (NumPy's sum(axis=0) for a C-ordered
    b of several columns)."""
    total = np.zeros(b.shape[1], b.dtype)
    for row in b:
        total += row
    return total


@given(m=dims, k=depths, n=dims, dtype=st.sampled_from((np.float32, np.float64)), seed=st.integers(0, 2**32 - 1),
       data=st.data())
def test_b_column_sums_are_row_order_sums_beside_an_unchanged_product(isa, m, k, n, dtype, seed, data):
    a = data.draw(arrange(_normal(seed, (m, k), dtype)), label="a")
    b = data.draw(arrange(_normal(seed + 1, (k, n), dtype)), label="b")
    sums = np.full(n, np.nan, dtype)  # every element written, whatever was there
    c = ops.matmul(a, b, b_column_sums=sums)
    assert_array_equal(c, ops.matmul(a, b))
    assert_array_equal(sums, _column_sums_in_row_order(np.asarray(b)))


@pytest.mark.parametrize("m, k, n", [(128, 4096, 128), (512, 4096, 130), (3, 700, 40), (203, 1400, 61)])
def test_b_column_sums_equal_numpy_for_any_thread_count(isa, threads, m, k, n):
    # The layers' bias gradients: x.T @ dy with dy C-ordered, where NumPy's dy.sum(axis=0) adds row by row.
    x, dy = _normal(0, (k, m), np.float32), _normal(1, (k, n), np.float32)
    for count in (1, 2, 3):
        threads(count)
        sums = np.empty(n, np.float32)
        grad = np.ones((m, n), np.float32)
        ops.matmul(x.T, dy, out=grad, accumulate=True, b_column_sums=sums)
        assert_array_equal(sums, dy.sum(axis=0), err_msg=f"{count} threads")
        assert_array_equal(grad, ops.matmul(x.T, dy, out=np.ones((m, n), np.float32), accumulate=True))


def test_b_column_sums_errors():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    with pytest.raises(TypeError, match="b_column_sums must be a numpy array, got list"):
        ops.matmul(a, b, b_column_sums=[0.0] * 4)
    with pytest.raises(ValueError, match=r"b_column_sums must have shape \(n,\) = \(4,\), got \(3,\)"):
        ops.matmul(a, b, b_column_sums=np.empty(3))
    with pytest.raises(TypeError, match="b_column_sums must have the result dtype float64, got float32"):
        ops.matmul(a, b, b_column_sums=np.empty(4, np.float32))
    with pytest.raises(ValueError, match="b_column_sums must be a C-contiguous, aligned, writeable array"):
        ops.matmul(a, b, b_column_sums=np.empty(8)[::2])
    with pytest.raises(ValueError, match="must not share memory with a, b, bias or out"):
        out = np.empty((3, 4))
        ops.matmul(a, b, out=out[:2], b_column_sums=out[1])
