"""ops.gelu / ops.gelu_backward, tanh and exact forms, against the NumPy reference, high-precision values
and finite differences, and ops.swiglu against its reference, on every ISA."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attnkit import ops, reference
from attnkit.testing import assert_allclose, check_grad
from attnkit.testing.strategies import arrange, float_arrays, sequence_lengths

# Sizes around the SIMD widths, past the 4096-element blocks the kernel splits work into and past the
# 2^18 elements from which they run on several threads.
sizes = st.one_of(sequence_lengths(min_value=0), st.sampled_from((4095, 4096, 4097, 40000, 270000)))
forms = st.sampled_from(("tanh", "none"))

# x, x Phi(x) and Phi(x) + x phi(x) to 17 digits (mpmath at 40 digits): the exact form deep in its tail,
# where Phi is tiny and a 1 - erf form would have lost every digit.
EXACT = np.array([
    (-37.5625, -1.6541286847966726e-307, -6.2133146520995764e-306),  # Phi(x) subnormal, y normal
    (-37.0, -2.1184613523340934e-298, -7.8382986694185162e-297),
    (-30.0, -1.4720141781444561e-196, -4.4160316907084944e-195),
    (-20.0, -5.5072482372124674e-88, -1.1014360483133464e-86),
    (-13.125, -1.5538868531181438e-38, -2.0393428696567699e-37),  # the same in float32
    (-12.0, -2.1317785344932148e-32, -2.5578956616748956e-31),
    (-5.0, -1.4332578593959696e-6, -7.1469460017922946e-6),
    (-1.0, -0.15865525393145705, -0.083315470587686298),
    (-0.5, -0.15426876936299345, 0.13250487534383716),
    (0.5, 0.34573123063700655, 0.86749512465616284),
    (3.0, 2.9959503059051097, 1.0119456472041839),
])


@given(x=float_arrays(last=sizes, scales=(1.0, 3.0, 10.0, 0.01, 1e3)), approximate=forms, data=st.data())
def test_matches_reference(isa, x, approximate, data):
    before = x.copy()
    y = ops.gelu(x, approximate=approximate)
    magnitude = max(1.0, float(np.abs(x).max(initial=0.0)))
    assert_allclose(y, reference.gelu(x, approximate=approximate), magnitude=magnitude)
    dy = data.draw(arrange(np.random.default_rng(x.size).standard_normal(x.shape).astype(x.dtype)))
    dx = ops.gelu_backward(x, dy, approximate=approximate)
    # gelu' peaks at ~1.13 and its slope at ~0.8 |x| e^(-x^2/2): the error scales with |dy| |x|.
    magnitude = float(np.abs(dy).max(initial=0.0)) * max(1.0, float(np.abs(x).max(initial=0.0)))
    assert_allclose(dx, reference.gelu_backward(x, dy, approximate=approximate), magnitude=magnitude)
    assert_array_equal(x, before)


@given(x=st.lists(st.one_of(st.floats(-40, 40), st.floats(allow_nan=True, allow_infinity=True)), max_size=40),
       dtype=st.sampled_from((np.float32, np.float64)))
def test_exact_form_keeps_relative_precision_everywhere(isa, x, dtype):
    # Huge, tiny, negative and non-finite values, relative error, except where the result is subnormal.
    with np.errstate(over="ignore"):
        x = np.array(x, dtype=dtype)
    y, dx = ops.gelu(x, approximate="none"), ops.gelu_backward(x, np.ones_like(x), approximate="none")
    want_y = reference.gelu(x.astype(np.float64), approximate="none")
    want_dx = reference.gelu_backward(x.astype(np.float64), np.ones(x.shape), approximate="none")
    # The float64 reference rounds x^2 (in exp) and -x / sqrt 2 (in erfc): up to x^2 ulps of its own
    # while |x| < 40 (beyond, every result is 0, x or 1 exactly); test_exact_form_matches_high_precision_values
    # checks the kernel there to 4 ulps.
    with np.errstate(over="ignore"):
        rtol = 8 * np.finfo(dtype).eps + np.minimum(x.astype(np.float64) ** 2, 40.0**2) * 2.0**-52
    tiny = float(np.finfo(dtype).tiny)
    assert_close_elementwise(y, want_y, rtol, tiny)
    # gelu' crosses zero at x = -0.75: there its error is absolute, below eps.
    assert_close_elementwise(dx, want_dx, rtol, max(tiny, float(np.finfo(dtype).eps)))


def assert_close_elementwise(actual, desired, rtol, atol):
    """|actual - desired| <= atol + rtol |desired| entry by entry (rtol an array); NaN and inf where desired
    has them."""
    desired = desired.astype(actual.dtype)
    assert_array_equal(np.isnan(actual), np.isnan(desired))
    finite = np.isfinite(desired)
    assert_array_equal(actual[~finite], desired[~finite])
    error = np.abs(actual[finite].astype(np.float64) - desired[finite])
    bound = atol + rtol[finite] * np.abs(desired[finite].astype(np.float64))
    assert np.all(error <= bound), f"worst at x index {np.argmax(error - bound)}: {error.max()} > {bound}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_form_matches_high_precision_values(isa, dtype):
    x, want_y, want_dx = EXACT.T
    normal = (np.abs(want_y) >= np.finfo(dtype).tiny) & (np.abs(want_dx) >= np.finfo(dtype).tiny)
    x, want_y, want_dx = x[normal].astype(dtype), want_y[normal].astype(dtype), want_dx[normal].astype(dtype)
    ulp = np.finfo(dtype).eps
    np.testing.assert_allclose(ops.gelu(x, approximate="none"), want_y, rtol=4 * ulp, atol=0)
    np.testing.assert_allclose(ops.gelu_backward(x, np.ones_like(x), approximate="none"), want_dx, rtol=4 * ulp, atol=0)


@given(shape=st.lists(st.integers(1, 6), max_size=3), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from((1.0, 3.0)), approximate=forms)
def test_backward_matches_finite_differences(isa, shape, seed, scale, approximate):
    rng = np.random.default_rng(seed)
    x, w = np.array(scale * rng.standard_normal(shape)), rng.standard_normal(shape)
    check_grad(lambda x: np.sum(ops.gelu(x, approximate=approximate) * w), {"x": x},
               {"x": ops.gelu_backward(x, w, approximate=approximate)})


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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_form_extremes(isa, dtype):
    x = np.array([0.0, -0.0, 1e4, -1e4, 1e30, -1e30, np.inf, -np.inf, np.nan], dtype=dtype)
    y = ops.gelu(x, approximate="none")
    assert_array_equal(y[[0, 2, 4, 6]], x[[0, 2, 4, 6]])  # gelu(x) = x for large x, +inf included
    assert_array_equal(y[[3, 5, 7]], 0.0)  # -> 0 for very negative x, -inf included (no -inf * 0)
    assert y[1] == 0.0 and np.isnan(y[8])
    dx = ops.gelu_backward(x, np.ones_like(x), approximate="none")
    assert_array_equal(dx, [0.5, 0.5, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, np.nan])
    # The two forms differ by less than 5e-4.
    grid = np.linspace(-8, 8, 4001, dtype=dtype)
    assert np.abs(ops.gelu(grid, approximate="none") - ops.gelu(grid)).max() < 5e-4


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
    for bad in ("exact", None, True, ["none"]):
        with pytest.raises(ValueError, match=r"approximate must be one of \('tanh', 'none'\), got"):
            ops.gelu(np.ones(3), approximate=bad)
        with pytest.raises(ValueError, match="approximate must be one of"):
            ops.gelu_backward(np.ones(3), np.ones(3), approximate=bad)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_writes_into_out_also_in_place(approximate):
    x = np.random.default_rng(0).standard_normal((7, 300)).astype(np.float32)
    expected = ops.gelu(x, approximate=approximate)
    out = np.empty_like(x)
    assert ops.gelu(x, approximate=approximate, out=out) is out
    assert_array_equal(out, expected)
    y = x.copy()
    assert ops.gelu(y, approximate=approximate, out=y) is y
    assert_array_equal(y, expected)
    z = x.copy().reshape(-1)  # out overlapping x shifted by one element: x is read before it is written
    assert_array_equal(ops.gelu(z[1:], approximate=approximate, out=z[:-1]),
                       ops.gelu(x.reshape(-1)[1:], approximate=approximate))


@pytest.mark.parametrize(("out", "error", "match"), [
    ([0.0] * 4, TypeError, "out must be a numpy array, got list"),
    (np.empty(4, np.float64), TypeError, "out must have the result dtype float32, got float64"),
    (np.empty(5, np.float32), ValueError, r"out must have shape of x = \(4,\), got \(5,\)"),
    (np.empty(8, np.float32)[::2], ValueError, "C-contiguous"),
])
def test_gelu_refuses_a_bad_out(out, error, match):
    with pytest.raises(error, match=match):
        ops.gelu(np.zeros(4, np.float32), out=out)


@given(gate=float_arrays(last=sizes, scales=(1.0, 3.0, 10.0, 0.01, 100.0)), data=st.data())
def test_swiglu_matches_reference(isa, gate, data):
    up = np.random.default_rng(gate.size).standard_normal(gate.shape).astype(gate.dtype)
    up = data.draw(arrange(up))
    before = gate.copy(), up.copy()
    y = ops.swiglu(gate, up)
    magnitude = float(np.abs(up).max(initial=0.0)) * max(1.0, float(np.abs(gate).max(initial=0.0)))
    assert_allclose(y, reference.swiglu(gate, up), magnitude=magnitude)
    assert_array_equal(gate, before[0])
    assert_array_equal(up, before[1])


@given(gate=st.lists(st.one_of(st.floats(-120, 120), st.floats(allow_nan=True, allow_infinity=True)), max_size=40),
       dtype=st.sampled_from((np.float32, np.float64)))
def test_swiglu_keeps_relative_precision_everywhere(isa, gate, dtype):
    # silu(g) = g / (1 + e^-g): no cancellation, so a few ulps relative wherever the result is a normal number
    # (exp's own error, the division and the product), down to exp's range; below it the result is 0, the
    # true value below 4e-37 (float32) or 3e-305 (float64).
    with np.errstate(over="ignore"):
        gate = np.array(gate, dtype=dtype)
    y = ops.swiglu(gate, np.ones_like(gate))
    want = reference.swiglu(gate.astype(np.float64), np.ones(gate.shape))
    assert_array_equal(np.isnan(y), np.isnan(want))
    in_range = gate >= (-88.3 if dtype == np.float32 else -709.0)
    normal = in_range & np.isfinite(want) & (np.abs(want) >= np.finfo(dtype).tiny)
    rel = np.abs(y[normal].astype(np.float64) - want[normal]) / np.abs(want[normal])
    assert np.all(rel <= 8 * np.finfo(dtype).eps), (gate[normal][np.argmax(rel)], rel.max())
    assert np.all(np.abs(y[np.isfinite(want) & ~normal]) < (4e-37 if dtype == np.float32 else 3e-305))
    assert_array_equal(y[np.isinf(want)], want[np.isinf(want)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_swiglu_known_values_and_extremes(isa, dtype):
    gate = np.array([0.0, 1.0, -1.0, 30.0, 800.0, -800.0, -1e30, np.inf, -np.inf, np.nan, 2.0], dtype=dtype)
    up = np.array([5.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 3.0, 3.0, 1.0, np.nan], dtype=dtype)
    y = ops.swiglu(gate, up)
    assert_allclose(y[:3], np.array([0.0, 0.7310585786300049, -0.2689414213699951]).astype(dtype))
    assert_allclose(y[3], dtype(60.0))
    assert y[4] == 800.0 and y[7] == np.inf  # silu(g) = g for large g, +inf included
    assert_array_equal(y[[5, 6, 8]], 0.0)  # -> 0 for very negative g, -inf included (no -inf / inf)
    assert np.isnan(y[9]) and np.isnan(y[10])  # NaN in either input


def test_swiglu_dtypes_shapes_and_threads(isa):
    assert ops.swiglu(np.float32(1.0), np.float32(2.0)).shape == ()
    assert ops.swiglu(np.ones(3, np.float16), np.ones(3, np.float16)).dtype == np.float32
    assert ops.swiglu(np.ones(3, np.float32), np.ones(3)).dtype == np.float64
    assert ops.swiglu(np.zeros((2, 0, 3)), np.zeros((2, 0, 3))).shape == (2, 0, 3)
    assert_allclose(ops.swiglu([[0.5, -2.0]], [[1.0, 3.0]]), reference.swiglu(np.array([[0.5, -2.0]]),
                                                                                np.array([[1.0, 3.0]])))
    # Elementwise: past 2^18 values the blocks run on several threads, each value the same operations.
    rng = np.random.default_rng(1)
    gate, up = rng.standard_normal((2, 300000)).astype(np.float32)
    import attnkit

    before = attnkit.get_num_threads()
    try:
        attnkit.set_num_threads(1)
        one = ops.swiglu(gate, up)
        attnkit.set_num_threads(2)
        assert_array_equal(ops.swiglu(gate, up), one)
    finally:
        attnkit.set_num_threads(before)


def test_swiglu_rejects_bad_arguments():
    with pytest.raises(TypeError, match="gate"):
        ops.swiglu(np.arange(3), np.ones(3))
    with pytest.raises(TypeError, match="up"):
        ops.swiglu(np.ones(3), np.ones(3, np.int64))
    with pytest.raises(ValueError, match=r"up must have the shape of gate \(3,\), got \(1, 3\)"):
        ops.swiglu(np.ones(3), np.ones((1, 3)))


def test_swiglu_writes_into_out_also_in_place():
    rng = np.random.default_rng(0)
    gate, up = rng.standard_normal((2, 7, 300)).astype(np.float32)
    expected = ops.swiglu(gate, up)
    out = np.empty_like(gate)
    assert ops.swiglu(gate, up, out=out) is out
    assert_array_equal(out, expected)
    for which in (0, 1):  # out=gate and out=up
        args = [gate.copy(), up.copy()]
        assert ops.swiglu(*args, out=args[which]) is args[which]
        assert_array_equal(args[which], expected)
    z = gate.copy().reshape(-1)  # out overlapping gate shifted by one element: gate is read before it is written
    assert_array_equal(ops.swiglu(z[1:], up.reshape(-1)[1:], out=z[:-1]),
                       ops.swiglu(gate.reshape(-1)[1:], up.reshape(-1)[1:]))


@pytest.mark.parametrize(("out", "error", "match"), [
    ([0.0] * 4, TypeError, "out must be a numpy array, got list"),
    (np.empty(4, np.float64), TypeError, "out must have the result dtype float32, got float64"),
    (np.empty(5, np.float32), ValueError, r"out must have shape of gate and up = \(4,\), got \(5,\)"),
    (np.empty(8, np.float32)[::2], ValueError, "C-contiguous"),
])
def test_swiglu_refuses_a_bad_out(out, error, match):
    with pytest.raises(error, match=match):
        ops.swiglu(np.zeros(4, np.float32), np.zeros(4, np.float32), out=out)
