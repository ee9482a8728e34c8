"""ops.int8_linear against the NumPy reference on every kernel variant (each ISA, and VNNI where the
CPU has it): the int32 sums bit for bit, the float32 result within its rounding, the float product
within the stated quantisation bound; the extremes of quantisation and the validation."""

import doctest
import importlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import attnkit
from attnkit import _core, ops, reference
from attnkit.ops.int8_linear import _accumulators
from attnkit.testing.strategies import int8_linear_inputs
from int8_variants import int8_variant, int8_variants, variant_name


@pytest.fixture(params=int8_variants(), ids=lambda v: variant_name(*v), scope="module")
def variant(request):
    """The kernel variant (ISA, VNNI on or off) a test runs under; restored afterwards."""
    with int8_variant(*request.param):
        yield variant_name(*request.param)


def _magnitude(x, qweight, bias):
    """|sx| scale |qx - zx| @ |values| (+ |bias|): the size of what each output is made of."""
    qx, sx, zx = reference.quantize_activations(x)
    terms = np.abs(qx.astype(np.float64) - zx[:, None]) @ np.abs(qweight.values.astype(np.float64))
    mag = np.nan_to_num(sx.astype(np.float64))[:, None] * qweight.scale * terms
    return mag + (0.0 if bias is None else np.abs(bias.astype(np.float64)))


@given(inputs=int8_linear_inputs())
def test_accumulators_are_exact(variant, inputs):
    x, weight, _ = inputs
    qweight = ops.quantize_linear_weight(weight)
    qx, _, _ = reference.quantize_activations(x)
    assert_array_equal(_accumulators(x, qweight), qx.astype(np.int64) @ qweight.values.astype(np.int64))


@given(inputs=int8_linear_inputs())
def test_matches_reference(variant, inputs):
    x, weight, bias = inputs
    before = x.copy()
    qweight = ops.quantize_linear_weight(weight)
    y = ops.int8_linear(x, qweight, bias=bias)
    expected = reference.int8_linear(x, qweight.values, qweight.scale, bias=bias)
    assert y.dtype == np.float32 and y.shape == expected.shape
    # float(acc) is exact (|acc| < 2^24 for k <= 200); sx * scale, the product and the bias round once each.
    tolerance = 1e-6 * _magnitude(x, qweight, bias) + 1e-37
    assert np.all(np.abs(y.astype(np.float64) - expected) <= tolerance)
    assert_array_equal(x, before)


@given(inputs=int8_linear_inputs())
def test_error_against_float_product_is_bounded(inputs):
    x, weight, bias = inputs
    qweight = ops.quantize_linear_weight(weight)
    y = ops.int8_linear(x, qweight, bias=bias).astype(np.float64)
    x64 = x.astype(np.float64)
    exact = x64 @ weight + (0.0 if bias is None else bias)
    _, sx, _ = reference.quantize_activations(x)
    k = x.shape[1]
    # Activations within one step sx, weights within scale / 2, and their product term.
    bound = (sx[:, None] * np.abs(weight).sum(axis=0) + np.abs(x64).sum(axis=1)[:, None] * qweight.scale / 2
             + k * sx[:, None] * qweight.scale / 2)
    products = np.abs(x64) @ np.abs(weight)
    # Rows and columns spanning less than 255 (or 127) times the smallest normal float32 count as zero.
    dropped = (sx == 0)[:, None] | (np.abs(weight).max(axis=0, initial=0) / 127 < np.finfo(np.float32).tiny)
    rounding = 1e-5 * (products + (0.0 if bias is None else np.abs(bias))) + 1e-37
    assert np.all(np.abs(y - exact) <= bound + np.where(dropped, products, 0.0) + rounding)


def test_weight_quantisation_matches_reference():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((37, 70)) * rng.choice([1e-3, 1.0, 1e3], 70)
    weight[:, 3] = 0.0
    qweight = ops.quantize_linear_weight(weight)
    values, scale = reference.quantize_linear_weight(weight)
    assert_array_equal(qweight.values, values)
    assert_array_equal(qweight.scale, scale)
    assert_array_equal(qweight.column_sum, values.sum(axis=0))
    assert qweight.values.min() >= -127 and qweight.scale[3] == 1.0
    assert not any(a.flags.writeable for a in (qweight.packed, qweight.scale, qweight.column_sum))
    assert np.all(np.abs(qweight.dequantize() - weight) <= qweight.scale / 2 * (1 + 1e-6))


def test_largest_products_do_not_saturate(variant):
    # Every product 255 x 127: a saturating 16-bit pair sum would give 32767 instead of 64770.
    k, n = 199, 33
    qweight = ops.quantize_linear_weight(np.ones((k, n)))
    acc = _accumulators(np.full((13, k), 2.0, np.float32), qweight)
    assert_array_equal(acc, np.full((13, n), 255 * 127 * k))
    y = ops.int8_linear(np.full((13, k), 2.0, np.float32), qweight)
    np.testing.assert_allclose(y, 2.0 * k, rtol=1e-5)


def test_extreme_rows(variant):
    k, n = 70, 40
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((k, n))
    qweight = ops.quantize_linear_weight(weight)
    x = rng.standard_normal((5, k)).astype(np.float32)
    x[0] = 0.0                               # zero row: bias only
    x[1] = 3.0                               # constant row
    x[2] = 1e-40                             # subnormal: below the smallest scale, treated as zero
    x[3, 5] = np.nan                         # NaN: its row only
    x[4, 7] = -np.inf
    bias = rng.standard_normal(n).astype(np.float32)
    y = ops.int8_linear(x, qweight, bias=bias)
    assert_array_equal(y[0], bias)
    assert_array_equal(y[2], bias)
    assert np.all(np.isnan(y[3:]))
    expected = reference.int8_linear(x[:3], qweight.values, qweight.scale, bias=bias)
    assert np.all(np.abs(y[:3] - expected) <= 1e-6 * _magnitude(x[:3], qweight, bias))
    np.testing.assert_allclose(y[1], 3.0 * weight.sum(axis=0) + bias, atol=0.03 * np.abs(weight).sum(axis=0).max())


def test_range_wider_than_float32(variant):
    # max - min = 6e38 overflows float32; the kernel takes the difference in float64.
    rng = np.random.default_rng(5)
    x = np.where(rng.random((3, 50)) < 0.5, -3e38, 3e38).astype(np.float32)
    weight = 1e-30 * rng.standard_normal((50, 9))
    qweight = ops.quantize_linear_weight(weight)
    y = ops.int8_linear(x, qweight)
    assert np.all(np.isfinite(y))
    expected = reference.int8_linear(x, qweight.values, qweight.scale)
    assert np.all(np.abs(y - expected) <= 1e-6 * _magnitude(x, qweight, None))
    np.testing.assert_allclose(y, x.astype(np.float64) @ weight, rtol=0.05, atol=0.05 * np.abs(y).max())


def test_variants_agree_bit_for_bit():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((77, 130)).astype(np.float32)
    qweight = ops.quantize_linear_weight(rng.standard_normal((130, 95)))
    results = {}
    for isa, vnni in int8_variants():
        with int8_variant(isa, vnni):
            results[_core.get_int8_variant()] = (_accumulators(x, qweight), ops.int8_linear(x, qweight))
    first = next(iter(results.values()))
    for acc, y in results.values():
        assert_array_equal(acc, first[0])
        assert_array_equal(y, first[1])


def test_threads_do_not_change_the_result():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((515, 520)).astype(np.float32)  # 2^27 multiply-adds: past the parallel threshold
    qweight = ops.quantize_linear_weight(rng.standard_normal((520, 260)))
    before = attnkit.get_num_threads()
    try:
        attnkit.set_num_threads(1)
        one = ops.int8_linear(x, qweight)
        attnkit.set_num_threads(2)
        two = ops.int8_linear(x, qweight)
    finally:
        attnkit.set_num_threads(before)
    assert_array_equal(one, two)


@given(layout=st.sampled_from(["F", "strided", "batched", "transposed"]))
def test_layouts_and_batch_dims(layout):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 45)).astype(np.float32)
    qweight = ops.quantize_linear_weight(rng.standard_normal((45, 21)))
    expected = ops.int8_linear(np.ascontiguousarray(x), qweight)
    assert expected.shape == (2, 3, 21)
    if layout == "F":
        view = np.asfortranarray(x)
    elif layout == "strided":
        big = np.full((2, 3, 90), np.nan, np.float32)
        big[..., ::2] = x
        view = big[..., ::2]
    elif layout == "transposed":
        view = np.ascontiguousarray(x.transpose(2, 0, 1)).transpose(1, 2, 0)
    else:
        view = x
    assert_array_equal(ops.int8_linear(view, qweight), expected)


def test_empty_shapes():
    qweight = ops.quantize_linear_weight(np.zeros((0, 5)))
    assert_array_equal(ops.int8_linear(np.zeros((3, 0), np.float32), qweight, bias=np.arange(5.0)),
                       np.tile(np.arange(5.0, dtype=np.float32), (3, 1)))
    qweight = ops.quantize_linear_weight(np.ones((4, 3)))
    assert ops.int8_linear(np.zeros((0, 4), np.float32), qweight).shape == (0, 3)
    assert ops.int8_linear(np.ones(4, np.float32), qweight).shape == (3,)


def test_float16_widens():
    qweight = ops.quantize_linear_weight(np.eye(3))
    x = np.array([[1.0, 2.0, -1.0]], np.float16)
    assert_array_equal(ops.int8_linear(x, qweight), ops.int8_linear(x.astype(np.float32), qweight))


@pytest.mark.parametrize(("x", "kwargs", "error", "match"), [
    (np.ones((2, 4)), {}, TypeError, "x must be float32"),
    (np.ones((2, 4), np.int32), {}, TypeError, "x must be a float32 or float64 array"),
    (np.ones((2, 5), np.float32), {}, ValueError, r"x must have shape \(\.\.\., k\) with k = 4"),
    (np.float32(1.0), {}, ValueError, "x must have shape"),
    (np.ones((2, 4), np.float32), {"bias": np.ones(2)}, ValueError, r"bias must have shape \(n,\) = \(3,\)"),
    (np.ones((2, 4), np.float32), {"bias": np.ones(3, np.int64)}, TypeError, "bias must be a float32"),
])
def test_rejects_bad_arguments(x, kwargs, error, match):
    qweight = ops.quantize_linear_weight(np.ones((4, 3)))
    with pytest.raises(error, match=match):
        ops.int8_linear(x, qweight, **kwargs)


def test_out_is_written_in_place():
    qweight = ops.quantize_linear_weight(np.eye(3))
    x = np.array([[[1.0, 2.0, -1.0]], [[0.5, 0.0, 4.0]]], np.float32)
    out = np.full((2, 1, 3), np.nan, np.float32)
    assert ops.int8_linear(x, qweight, out=out) is out
    assert_array_equal(out, ops.int8_linear(x, qweight))
    with pytest.raises(ValueError, match=r"out must have shape \(\.\.\., n\) = \(2, 1, 3\)"):
        ops.int8_linear(x, qweight, out=np.empty((2, 3), np.float32))
    with pytest.raises(TypeError, match="out must have the result dtype float32, got"):
        ops.int8_linear(x, qweight, out=np.empty((2, 1, 3)))
    with pytest.raises(ValueError, match="out must be a C-contiguous"):
        ops.int8_linear(x, qweight, out=np.empty((2, 1, 6), np.float32)[..., ::2])


def test_rejects_bad_weights():
    with pytest.raises(TypeError, match="qweight must be a QuantizedLinearWeight"):
        ops.int8_linear(np.ones((2, 4), np.float32), np.ones((4, 3)))
    with pytest.raises(ValueError, match="weight must be 2-D"):
        ops.quantize_linear_weight(np.ones(4))
    with pytest.raises(ValueError, match="weight must be finite"):
        ops.quantize_linear_weight(np.array([[1.0, np.nan]]))
    with pytest.raises(TypeError, match="weight must be a float32 or float64 array"):
        ops.quantize_linear_weight(np.ones((2, 2), np.int8))
    with pytest.raises(ValueError, match="at most 65536 rows"):
        ops.quantize_linear_weight(np.zeros((65537, 1), np.float32))


def test_docstring_examples():
    module = importlib.import_module("attnkit.ops.int8_linear")
    assert doctest.testmod(module).failed == 0


def test_a_weight_built_directly_is_checked_when_built():
    import dataclasses

    q = ops.quantize_linear_weight(np.ones((10, 5), np.float32))
    with pytest.raises(ValueError, match=r"scale must be a float32 array of shape \(5,\)"):
        dataclasses.replace(q, scale=q.scale.astype(np.float64))
    with pytest.raises(ValueError, match=r"packed must be a int8 array of shape"):
        dataclasses.replace(q, shape=(10, 70))
    with pytest.raises(ValueError, match=r"shape must be \(k, n\)"):
        dataclasses.replace(q, shape=(10, -5))
