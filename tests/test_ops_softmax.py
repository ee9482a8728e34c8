"""ops.softmax / ops.log_softmax and their backward passes against the NumPy reference and finite
differences, on every ISA."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import attnkit
from attnkit import ops, reference
from attnkit.testing import TOLERANCES, assert_allclose, check_grad
from attnkit.testing.strategies import arrange, softmax_inputs

FUNCTIONS = ["softmax", "log_softmax"]
BACKWARDS = {"softmax": "softmax_backward", "log_softmax": "log_softmax_backward"}
# long double is float64 on some platforms, where it is accepted.
BAD_DTYPES = [np.int64, np.int32, bool, np.complex128, object] + (
    [np.longdouble] if np.dtype(np.longdouble).itemsize > 8 else []
)


@pytest.mark.parametrize("name", FUNCTIONS)
@given(problem=softmax_inputs())
def test_matches_reference(isa, name, problem):
    x = problem["x"]
    before = x.copy()
    got = getattr(ops, name)(**problem)
    assert_allclose(got, getattr(reference, name)(**problem))
    assert_array_equal(x, before)  # the input is never written to


@given(problem=softmax_inputs())
def test_slices_sum_to_one_and_ignore_a_shift(isa, problem):
    x, axis = problem["x"], problem["axis"]
    rtol, _ = TOLERANCES[x.dtype]
    p = ops.softmax(x, axis=axis)
    empty = np.all(np.isneginf(x), axis=axis)  # all -inf slices give zeros
    sums = p.sum(axis=axis, dtype=np.float64)
    np.testing.assert_allclose(sums[~empty], 1.0, rtol=4 * rtol)
    assert_array_equal(sums[empty], 0.0)
    # On a grid of 1/64, x + 8 is exact in float32 too, so only the kernel's rounding can show.
    x = np.round(x * 64) / 64
    assert_allclose(ops.softmax(x + x.dtype.type(8), axis=axis), ops.softmax(x, axis=axis))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_and_infinite_entries(isa, dtype):
    x = np.array(
        [
            [1e4, -1e4, 1e4 - 1, 0.0],
            [-1e4, -1e4 + 2, -1e4, -1e4],
            [-np.inf, 3.0, -np.inf, 2.0],
            [-np.inf] * 4,
            [np.inf, 0.0, 0.0, 0.0],
        ],
        dtype=dtype,
    )
    p, logp = ops.softmax(x), ops.log_softmax(x)
    assert_allclose(p[:4], reference.softmax(x[:4]), magnitude=1.0)
    assert_allclose(logp[:4], reference.log_softmax(x[:4]), magnitude=1e4)
    assert_array_equal(p[3], 0.0)
    assert_array_equal(logp[3], -np.inf)
    assert_array_equal(p[2, [0, 2]], 0.0)
    assert_array_equal(logp[2, [0, 2]], -np.inf)
    assert np.isnan(p[4]).all() and np.isnan(logp[4]).all()


@pytest.mark.parametrize("name", FUNCTIONS)
@given(rows=st.integers(2, 9), n=st.integers(1, 70), data=st.data())
def test_nan_stays_in_its_row(isa, name, rows, n, data):
    row = data.draw(st.integers(0, rows - 1))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    x = np.random.default_rng(rows * n).standard_normal((rows, n)).astype(dtype)
    x[row, data.draw(st.integers(0, n - 1))] = np.nan
    got = getattr(ops, name)(x)
    assert np.isnan(got[row]).all()
    others = np.arange(rows) != row
    assert_allclose(got[others], getattr(reference, name)(x[others]))


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_any_axis_is_the_last_axis_moved(isa, name, axis):
    x = np.random.default_rng(7).standard_normal((3, 17, 5))
    fn = getattr(ops, name)
    expected = np.moveaxis(fn(np.moveaxis(x, axis, -1)), -1, axis)
    assert_allclose(fn(x, axis=axis), expected)


@pytest.mark.parametrize("shape", [(0,), (0, 4), (4, 0), (2, 0, 3)])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_empty_arrays(isa, name, shape):
    got = getattr(ops, name)(np.zeros(shape, np.float32))
    assert got.shape == shape and got.dtype == np.float32


@pytest.mark.parametrize("name", FUNCTIONS)
def test_dtypes(isa, name):
    fn = getattr(ops, name)
    x = np.array([[0.5, -1.0, 2.0]])
    assert fn(x.astype(np.float16)).dtype == np.float32
    assert fn(x.astype(np.float32)).dtype == np.float32
    assert fn(x).dtype == np.float64
    assert_allclose(fn([[0.5, -1.0, 2.0]]), getattr(reference, name)(x))


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("dtype", BAD_DTYPES)
def test_rejects_non_float_dtypes(name, dtype):
    with pytest.raises(TypeError, match="x"):
        getattr(ops, name)(np.zeros(3, dtype=dtype))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_rejects_bad_axis_and_rank(name):
    fn = getattr(ops, name)
    with pytest.raises(ValueError, match="axis"):
        fn(np.zeros((2, 3)), axis=2)
    with pytest.raises(ValueError, match="axis"):
        fn(np.zeros((2, 3)), axis=-3)
    with pytest.raises(TypeError, match="axis"):
        fn(np.zeros((2, 3)), axis=1.0)
    with pytest.raises(ValueError, match="x"):
        fn(np.float64(1.0))


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_out_in_place_or_apart_gives_the_same_bits(isa, name, dtype):
    fn = getattr(ops, name)
    x = (np.random.default_rng(8).standard_normal((4, 3, 70)) * 6).astype(dtype)
    x[1, 2] = -np.inf
    want = fn(x)
    apart = np.empty_like(x)
    assert fn(x, out=apart) is apart
    assert_array_equal(apart, want)
    in_place = x.copy()
    assert fn(in_place, axis=2, out=in_place) is in_place
    assert_array_equal(in_place, want)
    strided = np.asfortranarray(x)  # a copy of x's rows is read, the result written to out
    assert_array_equal(fn(strided, out=np.empty_like(x)), want)
    rows = np.concatenate([x.reshape(-1, 70), np.zeros((1, 70), dtype)])  # out one row after x, in x's memory
    assert_array_equal(fn(rows[:-1], out=rows[1:]).reshape(x.shape), want)


@pytest.mark.parametrize("name", FUNCTIONS)
@given(problem=softmax_inputs(dtypes=(np.float32,)))
def test_float32_into_float64_out_gives_the_bits_of_float64_x(isa, name, problem):
    # The rows widened in the kernel, as a decoding step's float32 scores become float64 log-probabilities.
    x, axis = problem["x"], problem["axis"]
    fn, rows = getattr(ops, name), np.moveaxis(x, axis, -1)
    out = np.empty(rows.shape)
    assert fn(rows, out=out) is out
    assert_array_equal(out, fn(rows.astype(np.float64)))


@pytest.mark.parametrize("name", FUNCTIONS)
@given(problem=softmax_inputs(), widened=st.booleans())
def test_argmax_is_numpys_argmax_of_the_result(isa, name, problem, widened):
    x, axis = problem["x"], problem["axis"]
    fn = getattr(ops, name)
    widened = widened and x.dtype == np.float32
    out = np.empty(x.shape, np.float64 if widened else x.dtype) if axis % x.ndim == x.ndim - 1 else None
    best = np.full(np.delete(x.shape, axis % x.ndim), -1, np.int64)
    result = fn(x, axis=axis, out=out, argmax=best)
    assert_array_equal(best, np.argmax(result, axis=axis))


def test_argmax_takes_the_first_of_equals_and_passes_over_nan():
    x = np.array([[1.0, 3.0, 3.0, 0.0], [-np.inf] * 4, [np.nan, 2.0, np.nan, 5.0], [np.nan] * 4], np.float32)
    best = np.empty(4, np.int64)
    ops.log_softmax(x, argmax=best)
    assert best.tolist() == [1, 0, 0, 0]  # row 2: NaN everywhere once normalised, so 0
    ops.softmax(x[:2], argmax=best[:2])
    assert best[:2].tolist() == [1, 0]


@pytest.mark.parametrize("argmax", [np.empty(3, np.int32), np.empty(2, np.int64), np.empty((3, 1), np.int64),
                                    np.empty(6, np.int64)[::2], [0, 0, 0]])
def test_argmax_errors(argmax):
    with pytest.raises(ValueError, match=r"argmax must be a writeable C-contiguous int64 array of shape \(3,\)"):
        ops.log_softmax(np.zeros((3, 5)), argmax=argmax)


def test_float32_into_float64_out_sharing_its_memory():
    x = (np.random.default_rng(3).standard_normal((5, 40)) * 4).astype(np.float32)
    want = ops.log_softmax(x.astype(np.float64))
    memory = np.zeros(5 * 40)
    narrow = memory.view(np.float32)[: x.size].reshape(x.shape)  # x in the first half of out's own memory
    narrow[...] = x
    assert_array_equal(ops.log_softmax(narrow, out=memory.reshape(x.shape)), want)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_out_errors(name):
    fn, x = getattr(ops, name), np.zeros((2, 3), np.float32)
    for out in (np.zeros((2, 3), np.float16), np.zeros((3, 2), np.float32), np.zeros((3, 2), np.float32).T,
                [[0.0] * 3] * 2):
        with pytest.raises(ValueError, match="out must be a writeable C-contiguous float32 array of x's shape"):
            fn(x, out=out)
    with pytest.raises(ValueError, match="float64 array of x's shape"):  # never narrowed
        fn(np.zeros((2, 3)), out=np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="axis the last"):
        fn(x, axis=0, out=np.zeros((2, 3), np.float32))


# -- backward --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FUNCTIONS)
@given(problem=softmax_inputs(), data=st.data())
def test_backward_matches_reference(isa, name, problem, data):
    x, axis = problem["x"], problem["axis"]
    y = getattr(ops, name)(x, axis=axis)
    seed = data.draw(st.integers(0, 2**32 - 1))
    dy = data.draw(arrange(np.random.default_rng(seed).standard_normal(x.shape).astype(x.dtype)))
    before = dy.copy()
    backward = BACKWARDS[name]
    got = getattr(ops, backward)(y, dy, axis=axis)
    # Rounding scales with |dy| (softmax: y <= 1), and with sum |dy| on a slice for log_softmax.
    magnitude = float((np.abs(dy).sum(axis=axis) if name == "log_softmax" else np.abs(dy)).max(initial=0.0))
    assert_allclose(got, getattr(reference, backward)(y, dy, axis=axis), magnitude=magnitude)
    assert_array_equal(dy, before)


@pytest.mark.parametrize("name", FUNCTIONS)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_backward_matches_finite_differences(isa, name, shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x, w = 2 * rng.standard_normal(shape), rng.standard_normal(shape)
    forward = getattr(ops, name)
    dx = getattr(ops, BACKWARDS[name])(forward(x, axis=axis), w, axis=axis)
    check_grad(lambda x: np.sum(forward(x, axis=axis) * w), {"x": x}, {"x": dx}, atol=1e-8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backward_of_infinite_entries(isa, dtype):
    x = np.array([[-np.inf, 1.0, -np.inf, 2.0], [-np.inf] * 4, [0.0, 0.0, 0.0, 0.0]], dtype=dtype)
    dy = np.array([[1.0, -2.0, 3.0, 0.5]] * 3, dtype=dtype)
    dx = ops.softmax_backward(ops.softmax(x), dy)
    assert_array_equal(dx[0, [0, 2]], 0.0)  # impossible classes get no gradient
    assert_array_equal(dx[1], 0.0)  # an all -inf slice gives zeros
    assert_allclose(dx, reference.softmax_backward(reference.softmax(x), dy))
    dx = ops.log_softmax_backward(ops.log_softmax(x), dy)
    assert_array_equal(dx[0, [0, 2]], dy[0, [0, 2]])  # d(x_j - lse)/dx_j = 1 where p_j = 0
    assert_array_equal(dx[1], 0.0)  # the output is constant (-inf)
    assert_allclose(dx, reference.log_softmax_backward(reference.log_softmax(x), dy))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_backward_gradients_sum_to_zero_along_the_axis(isa, name):
    # softmax(x + c) = softmax(x): a shift of every entry is invisible, so dx sums to 0 on a slice.
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((4, 33, 6)), rng.standard_normal((4, 33, 6))
    y = getattr(ops, name)(x, axis=1)
    np.testing.assert_allclose(getattr(ops, BACKWARDS[name])(y, dy, axis=1).sum(axis=1), 0.0, atol=1e-12)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_backward_dtypes_and_empty_arrays(isa, name):
    backward = getattr(ops, BACKWARDS[name])
    y = np.full((2, 3), 1 / 3)
    assert backward(y.astype(np.float32), y.astype(np.float32)).dtype == np.float32
    assert backward(y.astype(np.float32), y).dtype == np.float64
    assert backward(y.astype(np.float16), y.astype(np.float16)).dtype == np.float32
    assert backward(np.zeros((0, 4)), np.zeros((0, 4))).shape == (0, 4)
    assert backward(np.zeros((4, 0)), np.zeros((4, 0)), axis=0).shape == (4, 0)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_backward_rejects_bad_arguments(name):
    backward = getattr(ops, BACKWARDS[name])
    y = np.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match=r"dy must have the shape of y \(2, 3\), got \(3, 2\)"):
        backward(y, y.T)
    with pytest.raises(TypeError, match="dy"):
        backward(y, y.astype(np.int64))
    with pytest.raises(TypeError, match="y"):
        backward(y.astype(np.int64), y)
    with pytest.raises(ValueError, match="axis"):
        backward(y, y, axis=2)
    with pytest.raises(ValueError, match="y"):
        backward(np.float64(1.0), np.float64(1.0))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_rows_on_several_threads(isa, name):
    # 2^18 elements and more run on every kernel thread, rows split between them: the same rows.
    rng = np.random.default_rng(7)
    x, dy = rng.standard_normal((2, 600, 512)).astype(np.float32)
    before = attnkit.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            attnkit.set_num_threads(threads)
            y = getattr(ops, name)(x)
            results.append((y, getattr(ops, BACKWARDS[name])(y, dy)))
    finally:
        attnkit.set_num_threads(before)
    for got, first in zip(results[1], results[0]):
        assert_array_equal(got, first)
    assert_allclose(results[0][0], getattr(reference, name)(x))
