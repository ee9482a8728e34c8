"""ops.gelu / ops.gelu_backward against the NumPy reference and finite differences, on every ISA."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attnkit import ops, reference
from attnkit.testing import assert_allclose, check_grad
from attnkit.testing.strategies import arrange, float_arrays, sequence_lengths

# Sizes around the SIMD widths and past the 4096-element blocks the kernel splits work into.
sizes = st.one_of(sequence_lengths(min_value=0), st.sampled_from((4095, 4096, 4097, 40000)))


@given(x=float_arrays(last=sizes, scales=(1.0, 3.0, 10.0, 0.01, 1e3)), data=st.data())
def test_matches_reference(isa, x, data):
    before = x.copy()
    y = ops.gelu(x)
    assert_allclose(y, reference.gelu(x), magnitude=max(1.0, float(np.abs(x).max(initial=0.0))))
    dy = data.draw(arrange(np.random.default_rng(x.size).standard_normal(x.shape).astype(x.dtype)))
    dx = ops.gelu_backward(x, dy)
    # gelu' peaks at ~1.13 and its slope at ~0.8 |x| e^(-x^2/2): the error scales with |dy| |x|.
    magnitude = float(np.abs(dy).max(initial=0.0)) * max(1.0, float(np.abs(x).max(initial=0.0)))
    assert_allclose(dx, reference.gelu_backward(x, dy), magnitude=magnitude)
    assert_array_equal(x, before)


@given(shape=st.lists(st.integers(1, 6), max_size=3), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from((1.0, 3.0)))
def test_backward_matches_finite_differences(isa, shape, seed, scale):
    rng = np.random.default_rng(seed)
    x, w = np.array(scale * rng.standard_normal(shape)), rng.standard_normal(shape)
    check_grad(lambda x: np.sum(ops.gelu(x) * w), {"x": x}, {"x": ops.gelu_backward(x, w)})


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_known_values_and_extremes(isa, dtype):
    x = np.array([0.0, 1.0, -1.0, 10.0, -10.0, 1e4, -1e4, 1e30, -1e30, np.nan], dtype=dtype)
    y = ops.gelu(x)
    assert_allclose(y[:3], np.array([0.0, 0.8411919906082768, -0.15880800939172324]).astype(dtype))
    assert_array_equal(y[[3, 5, 7]], x[[3, 5, 7]])  # gelu(x) = x for large x
    assert np.all(np.abs(y[[4, 6, 8]]) < 1e-36) and np.all(y[[4, 6, 8]] <= 0)  # and -> 0 for very negative x
    assert np.isnan(y[9])
    dx = ops.gelu_backward(x, np.ones_like(x))
    assert dx[0] == 0.5
    assert_array_equal(dx[[3, 5, 7]], 1.0)  # finite for huge x: no inf * 0
    assert np.all(np.abs(dx[[4, 6, 8]]) < 1e-35)
    assert np.isnan(dx[9])


def test_dtypes_and_shapes(isa):
    assert ops.gelu(np.float32(1.0)).shape == () and ops.gelu(np.float32(1.0)).dtype == np.float32
    assert ops.gelu(np.ones(3, np.float16)).dtype == np.float32
    assert ops.gelu(np.zeros((2, 0, 3))).shape == (2, 0, 3)
    assert ops.gelu_backward(np.ones(3, np.float32), np.ones(3)).dtype == np.float64
    assert ops.gelu_backward(np.ones((2, 3)), np.ones((2, 3))).shape == (2, 3)
    assert_allclose(ops.gelu([[0.5, -2.0]]), reference.gelu(np.array([[0.5, -2.0]])))


def test_rejects_bad_arguments():
    with pytest.raises(TypeError, match="x"):
        ops.gelu(np.arange(3))
    with pytest.raises(TypeError, match="dy"):
        ops.gelu_backward(np.ones(3), np.ones(3, np.int64))
    with pytest.raises(ValueError, match=r"dy must have the shape of x \(3,\), got \(1, 3\)"):
        ops.gelu_backward(np.ones(3), np.ones((1, 3)))
