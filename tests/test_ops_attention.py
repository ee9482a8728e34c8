"""ops.scaled_dot_product_attention against the NumPy reference, on every ISA."""

import re

import numpy as np
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import attnkit
from attnkit import ops, reference
from attnkit.testing import assert_allclose
from attnkit.testing.strategies import attention_problems

ARRAYS = ("q", "k", "v", "mask", "key_lengths", "bias")


def finite_abs(a):
    a = np.asarray(a, dtype=np.float64)
    return np.where(np.isfinite(a), np.abs(a), 0.0)


def v_magnitude(problem):
    """Outputs are convex combinations of rows of v: their error scales with max |v|."""
    return float(finite_abs(problem["v"]).max(initial=0.0))


def logit_factor(problem):
    """Size of the logits' rounding error, in units of the dtype's tolerance.

    A logit error e moves the weights by a factor ~(1 + e), and a correct kernel rounds a logit
    by ~eps * (|scale| * sum_c |q_c k_c| + |bias|): large logits carry proportionally larger
    (float32) errors, which no kernel can avoid without accumulating in float64.
    """
    q, k = finite_abs(problem["q"]), finite_abs(problem["k"])
    scale = 1 / np.sqrt(q.shape[-1]) if problem["scale"] is None else abs(problem["scale"])
    logits = scale * (q @ np.swapaxes(k, -1, -2)).max(initial=0.0)
    if problem["bias"] is not None:
        logits += finite_abs(problem["bias"]).max(initial=0.0)
    return max(1.0, logits / 8)


def error_scale(problem):
    """Magnitude for assert_allclose of attention outputs."""
    return v_magnitude(problem) * logit_factor(problem)


def visibility(problem, batch_shape):
    nq, nk = problem["q"].shape[-2], problem["k"].shape[-2]
    return reference.attention_mask(
        nq,
        nk,
        mask=problem["mask"],
        key_lengths=problem["key_lengths"],
        causal=problem["causal"],
        window=problem["window"],
        batch_shape=batch_shape,
    )


def writable_copy(a):
    """A C-ordered copy with the full (broadcast) shape, so rows can be changed one by one."""
    return np.array(np.broadcast_to(a, a.shape))


@given(problem=attention_problems())
def test_matches_reference(isa, problem):
    before = {n: np.copy(problem[n]) for n in ARRAYS if problem[n] is not None}
    got = ops.scaled_dot_product_attention(**problem)
    expected = reference.scaled_dot_product_attention(**problem)
    assert_allclose(got, expected, magnitude=error_scale(problem))
    blind = ~visibility(problem, expected.shape[:-2]).any(axis=-1)
    assert_array_equal(got[blind], 0.0)  # exactly zero, never NaN
    for name, value in before.items():
        assert_array_equal(problem[name], value, err_msg=f"{name} was modified")


@given(problem=attention_problems(max_n=150))
def test_return_weights(isa, problem):
    out, weights = ops.scaled_dot_product_attention(**problem, return_weights=True)
    ref_out, ref_weights = reference.scaled_dot_product_attention(**problem, return_weights=True)
    size = error_scale(problem)
    assert_allclose(out, ref_out, magnitude=size)
    assert_allclose(weights, ref_weights, magnitude=logit_factor(problem))
    assert_array_equal(weights[~visibility(problem, weights.shape[:-2])], 0.0)
    assert_allclose(out, ops.scaled_dot_product_attention(**problem), magnitude=size)


@given(problem=attention_problems(causal=False, windows=False, key_lengths=False), data=st.data())
def test_permuting_keys_and_values_together(isa, problem, data):
    perm = np.array(data.draw(st.permutations(range(problem["k"].shape[-2]))), dtype=np.intp)
    permuted = dict(problem, k=problem["k"][..., perm, :], v=problem["v"][..., perm, :])
    for name in ("mask", "bias"):
        if problem[name] is not None:
            permuted[name] = problem[name][..., perm]
    assert_allclose(
        ops.scaled_dot_product_attention(**permuted),
        ops.scaled_dot_product_attention(**problem),
        magnitude=2 * error_scale(problem),  # both sides carry kernel rounding
    )


@pytest.mark.parametrize("poison", ["noise", np.nan])
@given(problem=attention_problems(causal=False), data=st.data())
def test_causal_output_ignores_later_positions(isa, poison, problem, data):
    problem = dict(problem, causal=True)
    nq, nk = problem["q"].shape[-2], problem["k"].shape[-2]
    last = data.draw(st.integers(0, nq - 1), label="last unchanged row")
    horizon = max(0, last + 1 + nk - nq)  # keys >= horizon are unseen by rows <= last
    rng = np.random.default_rng(last)
    changed = dict(problem)
    for name, first in (("q", last + 1), ("k", horizon), ("v", horizon)):
        a = writable_copy(problem[name])
        later = a[..., first:, :]
        later[...] = rng.standard_normal(later.shape) if poison == "noise" else poison
        changed[name] = a
    before = ops.scaled_dot_product_attention(**problem)
    after = ops.scaled_dot_product_attention(**changed)
    assert_array_equal(after[..., : last + 1, :], before[..., : last + 1, :])


@pytest.mark.parametrize("poison", [1e3, np.nan, np.inf])
@given(problem=attention_problems(broadcast=False))
def test_keys_nobody_sees_do_not_matter(isa, poison, problem):
    expected = ops.scaled_dot_product_attention(**problem)
    hidden = ~visibility(problem, expected.shape[:-2]).any(axis=-2)  # (..., Nk)
    assume(hidden.any())
    changed = dict(problem)
    for name in ("k", "v"):
        a = writable_copy(problem[name])
        a[hidden] = poison
        changed[name] = a
    assert_array_equal(ops.scaled_dot_product_attention(**changed), expected)


@given(problem=attention_problems(), data=st.data())
def test_non_finite_inputs_stay_in_their_rows(isa, problem, data):
    name = data.draw(st.sampled_from(["q", "k", "v"]), label="poisoned input")
    poison = data.draw(st.sampled_from([np.nan, np.inf, -np.inf] if name == "q" else [np.nan]))
    a = writable_copy(problem[name])
    index = tuple(data.draw(st.integers(0, n - 1)) for n in a.shape)
    note(f"{name}{list(index)} = {poison}")
    a[index] = poison
    problem = dict(problem, **{name: a})
    got = ops.scaled_dot_product_attention(**problem)
    expected, weights = reference.scaled_dot_product_attention(**problem, return_weights=True)
    if name == "v":
        # A key whose weight underflows to 0 in the kernel's dtype may drop out, value and all:
        # there the output may also be the one computed without the poisoned value.
        clean = a.copy()
        clean[index] = 0
        without = reference.scaled_dot_product_attention(**dict(problem, v=clean))
        negligible = weights[..., index[-2]] < 1e3 * np.finfo(a.dtype).tiny
        expected = np.where(negligible[..., None] & np.isfinite(got), without, expected)
    assert_allclose(got, expected, magnitude=error_scale(problem))  # NaN/inf in the same places


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_logits_of_1e4_are_exact(isa, dtype, sign):
    # Logits +-1e4 + m/8 for small integers m are exact in float32, so the reference is exact too.
    rng = np.random.default_rng(0)
    nq, nk = 45, 70
    q = np.stack([np.full(nq, sign * 1e4), rng.integers(-3, 4, nq)], axis=-1).astype(dtype)
    k = np.stack([np.ones(nk), rng.integers(0, 40, nk) / 8], axis=-1).astype(dtype)
    v = rng.standard_normal((nk, 3)).astype(dtype)
    for causal in (False, True):
        got = ops.scaled_dot_product_attention(q, k, v, scale=1.0, causal=causal)
        assert np.isfinite(got).all()
        expected = reference.scaled_dot_product_attention(q, k, v, scale=1.0, causal=causal)
        assert_allclose(got, expected, magnitude=v_magnitude({"v": v}))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("nq", "nk"), [(1, 7), (5, 9), (9, 5), (7, 1), (64, 200), (200, 64), (129, 129)])
def test_causal_offsets(isa, dtype, nq, nk):
    rng = np.random.default_rng(nq * nk)
    q, k, v = (rng.standard_normal((2, n, 16)).astype(dtype) for n in (nq, nk, nk))
    got = ops.scaled_dot_product_attention(q, k, v, causal=True)
    assert_allclose(got, reference.scaled_dot_product_attention(q, k, v, causal=True), magnitude=v_magnitude({"v": v}))
    assert_array_equal(got[:, : max(0, nq - nk)], 0.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_multi_head_problem(isa, dtype):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 257, 64)).astype(dtype)
    k = rng.standard_normal((2, 3, 300, 64)).astype(dtype)
    v = rng.standard_normal((2, 1, 300, 72)).astype(dtype)
    bias = rng.standard_normal((3, 257, 300)).astype(dtype)
    kwargs = dict(key_lengths=np.array([300, 123]), causal=True, bias=bias)
    got = ops.scaled_dot_product_attention(q, k, v, **kwargs)
    assert got.shape == (2, 3, 257, 72)
    assert_allclose(got, reference.scaled_dot_product_attention(q, k, v, **kwargs), magnitude=v_magnitude({"v": v}))


def test_leading_dims_broadcast(isa):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 1, 3, 4))
    k = rng.standard_normal((5, 6, 4))
    v = rng.standard_normal((1, 6, 7))
    mask = rng.random((4, 1, 1, 1, 6)) < 0.5
    got = ops.scaled_dot_product_attention(q, k, v, mask=mask)
    assert got.shape == (4, 2, 5, 3, 7)
    assert_allclose(got, reference.scaled_dot_product_attention(q, k, v, mask=mask))


def test_layouts_of_one_batch_shape_back_to_back(isa):
    # The batch offsets of small layouts are cached: each layout must get its own.
    rng = np.random.default_rng(5)
    base = rng.standard_normal((2, 3, 5, 4))
    swapped = np.ascontiguousarray(base.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)  # batch dims' strides swapped
    layouts = [base, base[:, ::-1], np.broadcast_to(base[:1], base.shape), swapped]
    for q in layouts:
        for v in layouts:
            got = ops.scaled_dot_product_attention(q, base, v)
            assert_allclose(got, reference.scaled_dot_product_attention(q, base, v))


def test_results_do_not_depend_on_the_thread_count(isa):
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((3, 2, 150, 24)).astype(np.float32) for _ in range(3))
    previous = attnkit.get_num_threads()
    try:
        attnkit.set_num_threads(1)
        one = ops.scaled_dot_product_attention(q, k, v, causal=True)
        attnkit.set_num_threads(2)
        two = ops.scaled_dot_product_attention(q, k, v, causal=True)
    finally:
        attnkit.set_num_threads(previous)
    assert_array_equal(one, two)


def test_dtype_rules(isa):
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((3, 4)) for _ in range(3))
    f16 = [a.astype(np.float16) for a in (q, k, v)]
    assert_allclose(ops.scaled_dot_product_attention(*f16), reference.scaled_dot_product_attention(*f16))
    mixed = (q.astype(np.float32), k, v.astype(np.float32))
    got = ops.scaled_dot_product_attention(*mixed)
    assert got.dtype == np.float64
    assert_allclose(got, reference.scaled_dot_product_attention(*mixed))
    lists = ops.scaled_dot_product_attention(q.tolist(), k.tolist(), v.tolist())
    assert_allclose(lists, reference.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape", "out_shape"),
    [
        ((0, 4), (3, 4), (3, 2), (0, 2)),
        ((2, 0, 3, 4), (3, 4), (3, 2), (2, 0, 3, 2)),
        ((3, 4), (0, 4), (0, 2), (3, 2)),
        ((3, 4), (3, 4), (3, 0), (3, 0)),
    ],
)
def test_empty_problems(isa, q_shape, k_shape, v_shape, out_shape):
    q, k, v = (np.ones(s, np.float32) for s in (q_shape, k_shape, v_shape))
    out, weights = ops.scaled_dot_product_attention(q, k, v, return_weights=True)
    assert out.shape == out_shape and out.dtype == np.float32
    assert weights.shape == out_shape[:-1] + k_shape[-2:-1]
    assert_array_equal(out, 0.0 if k_shape[0] == 0 else 1.0)


def _kwargs(q=(3, 4), k=(5, 4), v=(5, 2), **extra):
    arrays = {name: np.zeros(shape) for name, shape in (("q", q), ("k", k), ("v", v))}
    return {**arrays, **extra}


def _names(argument, shape=None):
    """Regex: the message names ``argument`` (as a word) and, if given, the shape it saw."""
    pattern = rf"\b{argument}\b"
    return pattern + (rf"(.|\n)*{re.escape(str(shape))}" if shape is not None else "")


@pytest.mark.parametrize(
    ("kwargs", "argument", "shape"),
    [
        (_kwargs(q=(4,)), "q", (4,)),
        (_kwargs(k=(4,)), "k", (4,)),
        (_kwargs(v=(2,)), "v", (2,)),
        (_kwargs(k=(5, 3)), "k", (5, 3)),
        (_kwargs(v=(6, 2)), "v", (6, 2)),
        (_kwargs(q=(2, 3, 4), k=(3, 5, 4), v=(3, 5, 2)), "k", (3, 5, 4)),
        (_kwargs(q=(3, 0), k=(5, 0)), "d", None),
        (_kwargs(mask=np.ones((3, 4), bool)), "mask", (3, 4)),
        (_kwargs(mask=np.ones((2, 3, 5), bool), q=(4, 3, 4)), "mask", (2, 3, 5)),
        (_kwargs(bias=np.zeros((2, 5))), "bias", (2, 5)),
        (_kwargs(bias=np.zeros((3, 3, 5)), q=(2, 3, 4)), "bias", (3, 3, 5)),
        (_kwargs(q=(2, 3, 3, 4), key_lengths=np.array([1, 2, 3])), "key_lengths", (3,)),
        (_kwargs(q=(2, 3, 4), key_lengths=np.ones((2, 1), int)), "key_lengths", (2, 1)),
        (_kwargs(q=(2, 3, 4), key_lengths=np.array([-1, 2])), "key_lengths", None),
        (_kwargs(q=(2, 3, 4), key_lengths=np.array([6, 2])), "key_lengths", None),
        (_kwargs(key_lengths=6), "key_lengths", None),
        (_kwargs(window=(-1, 2)), "window", None),
        (_kwargs(window=(0, -3)), "window", None),
        (_kwargs(scale=np.nan), "scale", None),
        (_kwargs(scale=np.inf), "scale", None),
    ],
)
def test_rejects_bad_shapes_and_values(kwargs, argument, shape):
    with pytest.raises(ValueError, match=_names(argument, shape)):
        ops.scaled_dot_product_attention(**kwargs)


@pytest.mark.parametrize("argument", ["q", "k", "v"])
@pytest.mark.parametrize("dtype", [object, np.complex128, np.int64, np.int32, bool])
def test_rejects_non_float_inputs(argument, dtype):
    kwargs = _kwargs()
    kwargs[argument] = kwargs[argument].astype(dtype)
    with pytest.raises(TypeError, match=_names(argument)):
        ops.scaled_dot_product_attention(**kwargs)


@pytest.mark.parametrize(
    ("extra", "argument"),
    [
        ({"mask": np.ones((3, 5), dtype=np.int64)}, "mask"),
        ({"mask": np.ones((3, 5))}, "mask"),
        ({"bias": np.ones((3, 5), dtype=np.int64)}, "bias"),
        ({"bias": np.ones((3, 5), dtype=np.complex128)}, "bias"),
        ({"key_lengths": np.array([2.0])}, "key_lengths"),
        ({"key_lengths": np.array([True])}, "key_lengths"),
        ({"scale": "0.5"}, "scale"),
        ({"window": 3}, "window"),
        ({"window": (1, 2, 3)}, "window"),
        ({"window": (1.5, 2)}, "window"),
        ({"window": (True, 0)}, "window"),
    ],
)
def test_rejects_bad_option_types(extra, argument):
    with pytest.raises(TypeError, match=_names(argument)):
        ops.scaled_dot_product_attention(**_kwargs(**extra))


@pytest.mark.parametrize("poisoned", [10, 150, 200, 260])
def test_a_windows_key_blocks_start_anywhere_and_keep_a_nan_value_in_the_rows_that_see_it(isa, poisoned):
    # Under a window, a block of keys starts at a query block's first visible key, not at a multiple of the block
    # size, so it may span two of the blocks whose values are checked for NaN: a NaN value must still reach only
    # the rows that see its key (and P = 0 elsewhere must not turn it into NaN).
    rng = np.random.default_rng(poisoned)
    q, k, v = (rng.standard_normal((1, 400, 8)) for _ in range(3))
    v[0, poisoned, 2] = np.nan
    for window in [(17, 0), (64, 0), (100, 30)]:
        got = ops.scaled_dot_product_attention(q, k, v, causal=window[1] == 0, window=window)
        expected = reference.scaled_dot_product_attention(q, k, v, causal=window[1] == 0, window=window)
        rows = np.arange(400)
        sees = (rows - window[0] <= poisoned) & (poisoned <= rows + window[1])
        assert np.isnan(got[0, sees, 2]).all() and not np.isnan(got[0, ~sees]).any()
        assert_allclose(got, expected, magnitude=v_magnitude({"v": np.nan_to_num(v)}))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("nq", "nk", "w"), [(1, 1, 0), (40, 40, 5), (7, 300, 64), (300, 300, 0), (200, 200, 199)])
def test_a_causal_window_reads_the_last_w_plus_one_keys(isa, dtype, nq, nk, w):
    # "Dropping the far past": query i sees keys i' - w .. i' (i' = i + nk - nq), computed here one query at
    # a time on exactly those keys.
    rng = np.random.default_rng(nq + nk + w)
    q, k, v = (rng.standard_normal((2, n, 16)).astype(dtype) for n in (nq, nk, nk))
    got = ops.scaled_dot_product_attention(q, k, v, causal=True, window=(w, 0))
    for i in range(nq):
        position = i + nk - nq
        keys = slice(max(0, position - w), position + 1)
        one = ops.scaled_dot_product_attention(q[:, i:i + 1], k[:, keys], v[:, keys])
        np.testing.assert_allclose(got[:, i:i + 1], one, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)



@given(problem=attention_problems(max_n=70, max_d=40), data=st.data())
def test_out_is_written_in_place_with_the_same_bits(isa, problem, data):
    # The heads' rows anywhere: inside a (..., Nq, H, dv) buffer, or the Nq rows of each matrix reversed.
    expected = ops.scaled_dot_product_attention(**problem)
    shape, dtype = expected.shape, expected.dtype
    if data.draw(st.booleans(), label="heads merged"):
        buffer = np.full(shape[:-3] + (shape[-2], shape[-3] if len(shape) > 2 else 1, shape[-1]), np.nan, dtype)
        out = np.swapaxes(buffer, -2, -3) if len(shape) > 2 else buffer[..., 0, :]
    else:
        out = np.full(shape, np.nan, dtype)[..., ::-1, :]
    result = ops.scaled_dot_product_attention(**problem, out=out)
    assert result is out
    assert_array_equal(out, expected)


def test_out_must_be_a_writeable_array_of_its_own():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 4)) for _ in range(3))
    good = np.empty((2, 3, 4))
    for out, error, message in [
        (np.empty((2, 3, 5)), ValueError, r"out must have shape \(\.\.\., Nq, dv\) = \(2, 3, 4\)"),
        (np.empty((2, 3, 4), np.float32), TypeError, "out must have the result dtype float64"),
        ([[0.0]], TypeError, "out must be a numpy array, got list"),
        (np.empty((2, 4, 3)).swapaxes(1, 2), ValueError, r"out must have contiguous rows"),
        (np.broadcast_to(np.empty((3, 4)), (2, 3, 4)), ValueError, "out must be writeable, got a read-only array"),
        (np.lib.stride_tricks.as_strided(good, (2, 3, 4), (0, 32, 8)), ValueError, "out must not overlap itself"),
        (q, ValueError, "out must not share memory with the inputs"),
    ]:
        with pytest.raises(error, match=message):
            ops.scaled_dot_product_attention(q, k, v, out=out)
