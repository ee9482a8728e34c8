"""ops.dropout against its NumPy reference (the counter-based mask bit for bit), on every ISA and thread
count; its statistics, its use as its own backward, and its errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attnkit import ops, reference
from attnkit.testing import assert_allclose, check_grad
from attnkit.testing.strategies import float_arrays, sequence_lengths

# Sizes around the SIMD widths, past the 4096-element blocks the kernel splits work into and past the
# 2^18 elements from which they run on several threads.
sizes = st.one_of(sequence_lengths(min_value=0), st.sampled_from((4095, 4096, 4097, 40000, 270000)))
keys = st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 16))
probabilities = st.one_of(st.sampled_from((0.0, 0.1, 0.5, 0.9, 1 - 2**-53)), st.floats(0, 1, exclude_max=True))


@given(x=float_arrays(last=sizes), p=probabilities, key=keys)
def test_matches_reference(isa, x, p, key):
    before = x.copy()
    y = ops.dropout(x, p, key)
    want = reference.dropout(x, p, key)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_array_equal(y == 0, want == 0)  # the same mask, bit for bit
    assert_allclose(y, want, magnitude=max(1.0, float(np.abs(x).max(initial=0.0))) / (1 - p))
    assert_array_equal(x, before)


def test_mask_is_the_same_for_every_thread_count_isa_and_dtype(isa, kernel_threads):
    # 300 000 elements: past the 2^18 from which blocks run on several threads.
    x = np.random.default_rng(0).standard_normal((300, 1000)).astype(np.float32)
    keep = reference.dropout_keep(12345, x.size, 0.3).reshape(x.shape)
    assert_array_equal(ops.dropout(x, 0.3, 12345) != 0, keep)
    assert_array_equal(ops.dropout(x.astype(np.float64), 0.3, 12345) != 0, keep)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drop_rate_and_expectation(p):
    n = 1_000_000
    y = ops.dropout(np.ones(n), p, 99)
    dropped = (y == 0).mean()
    assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / n)
    assert set(np.unique(y).tolist()) == {0.0, 1 / (1 - p)}
    assert abs(y.mean() - 1.0) < 5 * np.sqrt(p / (1 - p) / n)  # inverted dropout keeps the expectation


def test_masks_of_nearby_keys_and_positions_are_independent():
    # A step counter as key must not give related masks: neighbouring keys, neighbouring elements and
    # rows of a (rows, 128) array are uncorrelated, and per-row drop counts do not repeat from key to key.
    n = 1 << 20
    masks = np.stack([reference.dropout_keep(key, n, 0.5) for key in range(4)]).astype(np.float64)
    bound = 5 / np.sqrt(n)
    for a in range(4):
        for b in range(a + 1, 4):
            assert abs(np.corrcoef(masks[a], masks[b])[0, 1]) < bound
    for lag in (1, 2, 7, 8, 128, 4096):
        assert abs(np.corrcoef(masks[0, :-lag], masks[0, lag:])[0, 1]) < bound * 1.01
    counts = masks.reshape(4, -1, 128).sum(axis=2)
    assert abs(np.corrcoef(counts[0], counts[1])[0, 1]) < 5 / np.sqrt(counts.shape[1])


def test_is_its_own_backward():
    # y = x * m with m fixed by the key, so dx = dy * m: the same call on dy.
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((7, 33)), rng.standard_normal((7, 33))
    check_grad(lambda x: float((ops.dropout(x, 0.4, 8) * dy).sum()), {"x": x}, {"x": ops.dropout(dy, 0.4, 8)})


def test_nan_and_infinity_stay_where_they_are_dropped():
    x = np.array([np.nan, np.inf, -np.inf, 1.0] * 64)
    y = ops.dropout(x, 0.5, 1)
    keep = reference.dropout_keep(1, x.size, 0.5)
    assert np.isnan(y[0::4]).all()  # NaN * 0 is NaN, as in x * mask
    assert np.isnan(y[1::4][~keep[1::4]]).all() and (y[1::4][keep[1::4]] == np.inf).all()


def test_p_zero_is_a_copy_and_out_works_in_place():
    x = np.arange(10.0)
    y = ops.dropout(x, 0.0, 5)
    assert_array_equal(y, x) and y is not x
    z = x.copy()
    assert ops.dropout(z, 0.5, 5, out=z) is z
    assert_array_equal(z, ops.dropout(x, 0.5, 5))
    strided = np.arange(20.0)[::2]
    assert_array_equal(ops.dropout(strided, 0.5, 5), ops.dropout(np.ascontiguousarray(strided), 0.5, 5))


@pytest.mark.parametrize("p", [-0.1, 1.0, 2.0, np.nan, np.inf])
def test_rejects_bad_p(p):
    with pytest.raises(ValueError, match="p"):
        ops.dropout(np.ones(3), p, 0)


@pytest.mark.parametrize("key, error", [(-1, ValueError), (2**64, ValueError), (1.5, TypeError), (True, TypeError)])
def test_rejects_bad_key(key, error):
    with pytest.raises(error, match="key"):
        ops.dropout(np.ones(3), 0.5, key)


def test_rejects_bad_x_and_out():
    with pytest.raises(TypeError, match="x must be a float32 or float64 array"):
        ops.dropout(np.ones(3, dtype=int), 0.5, 0)
    with pytest.raises(ValueError, match="out must have shape"):
        ops.dropout(np.ones(3), 0.5, 0, out=np.empty(4))
    with pytest.raises(TypeError, match="out must have the result dtype"):
        ops.dropout(np.ones(3), 0.5, 0, out=np.empty(3, np.float32))
