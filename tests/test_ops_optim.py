"""ops.adamw_update and ops.sum_of_squares against the NumPy reference, bit for bit, on every ISA and
at 1 and 2 threads; their many-tensor forms against one call per tensor; input checks."""

import doctest
import importlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import attnkit
from attnkit import _core, ops, reference

# 0-d, empty, small shapes around the SIMD widths, and sizes past the 4096-element blocks and the
# 2^18-element threshold of the parallel loop.
shapes = st.one_of(
    st.lists(st.integers(0, 7), max_size=3).map(tuple),
    st.sampled_from(((4095,), (4097,), (3, 4096), (40000,), (270000,), (2, 131073))),
)
dtypes = st.sampled_from((np.float32, np.float64))


@st.composite
def adamw_problems(draw):
    """(param, grad, exp_avg, exp_avg_sq, hyperparameters) as AdamW.step would pass them."""
    shape, dtype = draw(shapes), draw(dtypes)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from((1.0, 1e-3, 1e3)))
    # np.array: for shape () rng returns a scalar, and the update needs arrays.
    param = np.array(rng.standard_normal(shape), dtype=dtype)
    grad = np.array(scale * rng.standard_normal(shape), dtype=dtype)
    exp_avg = np.array(0.1 * scale * rng.standard_normal(shape), dtype=dtype)
    exp_avg_sq = np.array(scale**2 * rng.random(shape), dtype=dtype)
    beta1 = draw(st.sampled_from((0.0, 0.5, 0.9)))
    beta2 = draw(st.sampled_from((0.0, 0.99, 0.999)))
    t = draw(st.integers(1, 10_000))
    lr = draw(st.sampled_from((1e-5, 1e-3, 0.1)))
    weight_decay = draw(st.sampled_from((0.0, 0.01, 0.1)))
    hyper = {"step_size": lr / (1.0 - beta1**t), "beta1": beta1, "beta2": beta2,
             "denom_scale": 1.0 / np.sqrt(1.0 - beta2**t).item(), "eps": draw(st.sampled_from((1e-8, 1e-6))),
             "shrink": 1.0 - lr * weight_decay}
    return (param, grad, exp_avg, exp_avg_sq), hyper


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


@given(problem=adamw_problems())
def test_adamw_update_equals_numpy_bit_for_bit(isa, kernel_threads, problem):
    arrays, hyper = problem
    mine, want = [a.copy() for a in arrays], [a.copy() for a in arrays]
    ops.adamw_update(*mine, **hyper)
    reference.adamw_update(*want, **hyper)
    for name, got, expected in zip(("param", "grad", "exp_avg", "exp_avg_sq"), mine, want):
        assert_array_equal(bits(got), bits(expected), err_msg=name)


@given(problem=adamw_problems(), grad_scale=st.sampled_from((1.0, 0.5, 0.123456789, 1e-7)), zero_grad=st.booleans())
def test_adamw_update_with_a_scaled_gradient_equals_scaling_then_updating(isa, kernel_threads, problem, grad_scale,
                                                                         zero_grad):
    # What clip_grad_norm then step() do: grad *= scale in place, then the update; and zero_grad() after.
    arrays, hyper = problem
    mine, want = [a.copy() for a in arrays], [a.copy() for a in arrays]
    ops.adamw_update(*mine, **hyper, grad_scale=grad_scale, zero_grad=zero_grad)
    reference.adamw_update(*want, **hyper, grad_scale=grad_scale, zero_grad=zero_grad)
    by_hand = [a.copy() for a in arrays]
    by_hand[1] *= grad_scale
    reference.adamw_update(*by_hand, **hyper)
    for name, got, expected, two_passes in zip(("param", "grad", "exp_avg", "exp_avg_sq"), mine, want, by_hand):
        assert_array_equal(bits(got), bits(expected), err_msg=name)
        if name != "grad":
            assert_array_equal(bits(got), bits(two_passes), err_msg=name)
    assert_array_equal(mine[1], np.zeros_like(arrays[1]) if zero_grad else arrays[1])


def test_adamw_update_zero_grad_needs_a_writeable_gradient():
    p, g, m, v = (np.ones(3) for _ in range(4))
    g.flags.writeable = False
    hyper = {"step_size": 0.1, "beta1": 0.9, "beta2": 0.999, "denom_scale": 1.0, "eps": 1e-8}
    ops.adamw_update(p, g, m, v, **hyper)  # read only: fine
    with pytest.raises(ValueError, match="grad must be writeable"):
        ops.adamw_update(p, g, m, v, **hyper, zero_grad=True)
    with pytest.raises(TypeError, match="zero_grad must be a bool"):
        ops.adamw_update(p, np.ones(3), m, v, **hyper, zero_grad="yes")


def test_adamw_update_without_decay_leaves_the_shrink_out():
    p, g, m, v = np.array([1.0]), np.array([0.0]), np.zeros(1), np.zeros(1)
    ops.adamw_update(p, g, m, v, step_size=0.1, beta1=0.9, beta2=0.999, denom_scale=1.0, eps=1e-8)
    assert_array_equal(p, [1.0])
    ops.adamw_update(p, g, m, v, step_size=0.1, beta1=0.9, beta2=0.999, denom_scale=1.0, eps=1e-8, shrink=0.5)
    assert_array_equal(p, [0.5])


def test_adamw_update_propagates_non_finite_values():
    p, g = np.array([1.0, 1.0], dtype=np.float32), np.array([np.nan, np.inf], dtype=np.float32)
    m, v = np.zeros(2, np.float32), np.zeros(2, np.float32)
    want = [a.copy() for a in (p, g, m, v)]
    with np.errstate(invalid="ignore"):
        ops.adamw_update(p, g, m, v, step_size=0.1, beta1=0.9, beta2=0.999, denom_scale=1.0, eps=1e-8)
        reference.adamw_update(*want, step_size=0.1, beta1=0.9, beta2=0.999, denom_scale=1.0, eps=1e-8)
    for got, expected in zip((p, g, m, v), want):
        assert_array_equal(got, expected)


HYPER = {"step_size": 0.1, "beta1": 0.9, "beta2": 0.999, "denom_scale": 1.0, "eps": 1e-8}


def four(shape=(3, 4), dtype=np.float32):
    return {name: np.zeros(shape, dtype) for name in ("param", "grad", "exp_avg", "exp_avg_sq")}


@pytest.mark.parametrize("name", ["param", "grad", "exp_avg", "exp_avg_sq"])
def test_adamw_update_refuses_what_it_cannot_update_in_place(name):
    arrays = four()
    for bad, error, match in [
        (np.zeros((3, 4), np.float64), TypeError, f"{name} must have the dtype of param"),
        (np.zeros((3, 4), np.int32), TypeError, f"{name} must be a float32 or float64 ndarray, got dtype int32"),
        (np.zeros((3, 4), np.float32).tolist(), TypeError, f"{name} must be a float32 or float64 ndarray"),
        (np.zeros((4, 3), np.float32), ValueError, rf"{name} must have the shape of param \(3, 4\), got \(4, 3\)"),
        (np.zeros((4, 3), np.float32).T, ValueError, f"{name} must be C-contiguous"),
        (np.zeros((3, 8), np.float32)[:, ::2], ValueError, f"{name} must be C-contiguous"),
    ]:
        if name == "param" and "of param" in match:  # param sets the dtype and shape the others must have
            continue
        with pytest.raises(error, match=match):
            ops.adamw_update(**{**arrays, name: bad}, **HYPER)
    read_only = np.zeros((3, 4), np.float32)
    read_only.flags.writeable = False
    if name == "grad":
        ops.adamw_update(**{**arrays, name: read_only}, **HYPER)
    else:
        with pytest.raises(ValueError, match=f"{name} must be writeable"):
            ops.adamw_update(**{**arrays, name: read_only}, **HYPER)


@pytest.mark.parametrize("name", list(HYPER) + ["shrink"])
def test_adamw_update_refuses_bad_scalars(name):
    with pytest.raises(ValueError, match=name):
        ops.adamw_update(**four(), **{**HYPER, name: np.nan})
    with pytest.raises(TypeError, match=name):
        ops.adamw_update(**four(), **{**HYPER, name: "0.1"})


@pytest.mark.parametrize(("name", "value", "match"), [
    ("beta1", 1.0, r"beta1 must be in \[0, 1\), got 1.0"), ("beta1", -0.1, "beta1 must be in"),
    ("beta2", 1.5, r"beta2 must be in \[0, 1\), got 1.5"), ("eps", -1e-8, "eps must be >= 0"),
    ("denom_scale", 0.0, "denom_scale must be a finite positive number"),
])
def test_adamw_update_refuses_scalars_out_of_range(name, value, match):
    arrays = four()
    with pytest.raises(ValueError, match=match):
        ops.adamw_update(**arrays, **{**HYPER, name: value})
    assert all(not a.any() for a in arrays.values())  # refused before anything was written


@pytest.mark.parametrize(("first", "second"), [("param", "grad"), ("exp_avg", "exp_avg_sq"), ("grad", "exp_avg")])
def test_adamw_update_refuses_arrays_that_share_memory(first, second):
    # One pass reads and writes each element of all four arrays, so a shared one would mix an update into a read.
    arrays = four()
    arrays[second] = arrays[first]
    with pytest.raises(ValueError, match=f"{first} and {second} must not share memory"):
        ops.adamw_update(**arrays, **HYPER)
    overlapping = np.zeros(24, np.float32)
    arrays = {**four(), first: overlapping[:12].reshape(3, 4), second: overlapping[6:18].reshape(3, 4)}
    with pytest.raises(ValueError, match="must not share memory"):
        ops.adamw_update(**arrays, **HYPER)


@given(shape=shapes, dtype=dtypes, scale=st.sampled_from((1.0, 1e-20, 1e20)), seed=st.integers(0, 2**32 - 1))
def test_sum_of_squares_matches_numpy_and_ignores_the_thread_count(isa, shape, dtype, scale, seed):
    x = np.array(scale * np.random.default_rng(seed).standard_normal(shape), dtype=dtype)
    total = ops.sum_of_squares(x)
    assert isinstance(total, float)
    # Both sums round n times in float64, in different orders.
    assert total == pytest.approx(reference.sum_of_squares(x), rel=1e-13, abs=0.0)
    before = attnkit.get_num_threads()
    try:
        attnkit.set_num_threads(1)
        one = ops.sum_of_squares(x)
        attnkit.set_num_threads(2)
        two = ops.sum_of_squares(x)
    finally:
        attnkit.set_num_threads(before)
    assert one == two == total


def test_sum_of_squares_does_not_overflow_in_float32_and_takes_any_layout():
    x = np.full((4, 6), 1e20, dtype=np.float32)[:, ::2].T
    assert ops.sum_of_squares(x) == pytest.approx(12 * 1e40, rel=1e-6)
    assert ops.sum_of_squares(np.array(3.0, np.float16)) == 9.0
    assert ops.sum_of_squares(np.zeros((0, 3))) == 0.0
    assert np.isnan(ops.sum_of_squares([1.0, np.nan]))
    assert ops.sum_of_squares([1.0, np.inf]) == np.inf


@given(problems=st.lists(adamw_problems(), min_size=1, max_size=6), dtype=dtypes,
       grad_scale=st.sampled_from((1.0, 0.37)), zero_grad=st.booleans())
def test_adamw_update_many_equals_one_call_per_tensor(isa, kernel_threads, problems, dtype, grad_scale, zero_grad):
    # Tensors of several sizes (blocks of several tensors share the parallel loop), each with its own decay.
    tensors = [tuple(a.astype(dtype) for a in arrays) for arrays, _ in problems]
    hyper = {k: v for k, v in problems[0][1].items() if k != "shrink"}
    shrinks = [h["shrink"] for _, h in problems]
    mine, want = [[a.copy() for a in t] for t in tensors], [[a.copy() for a in t] for t in tensors]
    ops.adamw_update_many(*zip(*mine), **hyper, shrinks=shrinks, grad_scale=grad_scale, zero_grad=zero_grad)
    for arrays, shrink in zip(want, shrinks):
        ops.adamw_update(*arrays, **hyper, shrink=shrink, grad_scale=grad_scale, zero_grad=zero_grad)
    for got, expected in zip(mine, want):
        for name, a, b in zip(("param", "grad", "exp_avg", "exp_avg_sq"), got, expected):
            assert_array_equal(bits(a), bits(b), err_msg=name)


def many(count=2, shape=(3, 4), dtype=np.float32):
    """Tensors whose update would change every parameter (ones, gradients of one)."""
    return {name: [np.full(shape, name in ("params", "grads"), dtype) for _ in range(count)]
            for name in ("params", "grads", "exp_avgs", "exp_avg_sqs")}


def test_adamw_update_many_takes_tuples_defaults_to_no_decay_and_accepts_no_tensors():
    arrays = many(1)
    arrays["grads"][0][...] = 0.0
    ops.adamw_update_many(**{k: tuple(v) for k, v in arrays.items()}, **HYPER)
    assert_array_equal(arrays["params"][0], 1.0)  # zero gradient, no decay: unchanged
    ops.adamw_update_many([], [], [], [], **HYPER)
    with pytest.raises(ValueError, match="beta1 must be in"):
        ops.adamw_update_many([], [], [], [], **{**HYPER, "beta1": 1.0})


@pytest.mark.parametrize("name", ["params", "grads", "exp_avgs", "exp_avg_sqs"])
def test_adamw_update_many_refuses_what_it_cannot_update_in_place(name):
    for bad, error, match in [
        (np.zeros((3, 4), np.float64), TypeError, rf"{name}\[1\] must have the dtype of params\[0\]"),
        (np.zeros((3, 4), np.int32), TypeError, rf"{name}\[1\] must have the dtype of params\[0\]"),
        (np.zeros((3, 4), np.float32).tolist(), TypeError, rf"{name}\[1\] must be a float32 or float64 ndarray"),
        (np.zeros((4, 3), np.float32), ValueError, rf"{name}\[1\] must have the shape of params\[1\]"),
        (np.zeros(12, np.float32), ValueError, rf"{name}\[1\] must have the shape of params\[1\]"),
        (np.zeros((4, 3), np.float32).T, ValueError, rf"{name}\[1\] must be C-contiguous"),
    ]:
        if name == "params" and "of params" in match:  # params[i] sets the shape the others must have
            continue
        arrays = many()
        arrays[name][1] = bad
        with pytest.raises(error, match=match):
            ops.adamw_update_many(**arrays, **HYPER, shrinks=[0.5, 0.5])
        assert_array_equal(arrays["params"][0], 1.0)  # refused before anything was written
    arrays = many()
    arrays[name][1].flags.writeable = False
    if name == "grads":
        ops.adamw_update_many(**arrays, **HYPER)
        with pytest.raises(ValueError, match=r"grads\[1\] must be writeable"):
            ops.adamw_update_many(**arrays, **HYPER, zero_grad=True)
    else:
        with pytest.raises(ValueError, match=rf"{name}\[1\] must be writeable"):
            ops.adamw_update_many(**arrays, **HYPER)


def test_adamw_update_many_refuses_arrays_that_share_memory_across_tensors():
    # The tensors' blocks run at once: a shared array would make the result depend on the threads' timing.
    arrays = many(3)
    arrays["grads"][2] = arrays["params"][0]
    with pytest.raises(ValueError, match=r"params\[0\] and grads\[2\] must not share memory|"
                                         r"grads\[2\] and params\[0\] must not share memory"):
        ops.adamw_update_many(**arrays, **HYPER)
    buffer = np.zeros(30, np.float32)
    arrays = many(2)
    arrays["exp_avgs"][0], arrays["exp_avg_sqs"][1] = buffer[:12].reshape(3, 4), buffer[11:23].reshape(3, 4)
    with pytest.raises(ValueError, match="must not share memory"):
        ops.adamw_update_many(**arrays, **HYPER)
    arrays["exp_avg_sqs"][1] = buffer[12:24].reshape(3, 4)  # adjacent, not overlapping: fine
    ops.adamw_update_many(**arrays, **HYPER)
    empty = np.zeros((0, 4), np.float32)  # empty arrays hold no element to share
    ops.adamw_update_many([empty, empty], [empty, empty], [empty, empty], [empty, empty], **HYPER)


def test_adamw_update_many_refuses_bad_lists_and_scalars():
    arrays = many()
    with pytest.raises(ValueError, match=r"grads must have one entry per parameter \(2\), got 1"):
        ops.adamw_update_many(**{**arrays, "grads": arrays["grads"][:1]}, **HYPER)
    with pytest.raises(ValueError, match=r"shrinks must have one entry per parameter \(2\), got 3"):
        ops.adamw_update_many(**arrays, **HYPER, shrinks=[1.0, 1.0, 1.0])
    with pytest.raises(TypeError, match="params must be a list or tuple of ndarrays, got ndarray"):
        ops.adamw_update_many(**{**arrays, "params": np.zeros((2, 3, 4), np.float32)}, **HYPER)
    with pytest.raises(TypeError, match="shrinks must be a sequence of real numbers"):
        ops.adamw_update_many(**arrays, **HYPER, shrinks=[1.0, "a"])
    with pytest.raises(ValueError, match="shrinks must be finite"):
        ops.adamw_update_many(**arrays, **HYPER, shrinks=[1.0, np.nan])
    with pytest.raises(TypeError, match=r"params\[0\] must be a float32 or float64 ndarray"):
        ops.adamw_update_many(**{**arrays, "params": [np.zeros((3, 4), np.int64)] * 2}, **HYPER)
    for name in ["step_size", "denom_scale", "eps"]:
        with pytest.raises(ValueError, match=name):
            ops.adamw_update_many(**arrays, **{**HYPER, name: np.inf})
    with pytest.raises(TypeError, match="zero_grad must be a bool"):
        ops.adamw_update_many(**arrays, **HYPER, zero_grad=1)


@given(shapes=st.lists(shapes, max_size=5), dtype=dtypes, seed=st.integers(0, 2**32 - 1))
def test_sum_of_squares_many_equals_one_call_per_array(isa, kernel_threads, shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    xs = [np.array(rng.standard_normal(shape), dtype=dtype) for shape in shapes]
    assert ops.sum_of_squares_many(xs) == [ops.sum_of_squares(x) for x in xs]


def test_sum_of_squares_many_takes_any_layout_and_refuses_mixed_dtypes():
    x = np.arange(12.0).reshape(3, 4)
    assert ops.sum_of_squares_many((x.T, x[:, ::2])) == [float((x**2).sum()), float((x[:, ::2] ** 2).sum())]
    assert ops.sum_of_squares_many([]) == []
    with pytest.raises(TypeError, match=r"xs\[1\] must have the dtype of xs\[0\]"):
        ops.sum_of_squares_many([x, x.astype(np.float32)])
    with pytest.raises(TypeError, match=r"xs\[0\] must be a float32 or float64 ndarray"):
        ops.sum_of_squares_many([np.arange(3)])
    with pytest.raises(TypeError, match=r"xs\[1\] must be a float32 or float64 ndarray, got list"):
        ops.sum_of_squares_many([x, [1.0]])
    with pytest.raises(TypeError, match="xs must be a list or tuple of ndarrays"):
        ops.sum_of_squares_many(x)


@pytest.mark.parametrize("x", [np.arange(3), np.ones(2, complex), None, "abc"])
def test_sum_of_squares_refuses_non_floats(x):
    with pytest.raises(TypeError, match="x must be a float32 or float64 array"):
        ops.sum_of_squares(x)


def test_docstring_examples_run():
    # (attnkit.ops.adamw_update is the function; the module is reached by its full name)
    assert doctest.testmod(importlib.import_module("attnkit.ops.optim")).failed == 0


def test_sum_of_squares_has_the_same_bits_on_every_isa():
    x = np.random.default_rng(0).standard_normal(50_001).astype(np.float32)
    previous = _core.get_isa()
    try:
        sums = set()
        for isa in _core.available_isas():
            _core.set_isa(isa)
            sums.add(ops.sum_of_squares(x))
    finally:
        _core.set_isa(previous)
    assert len(sums) == 1
