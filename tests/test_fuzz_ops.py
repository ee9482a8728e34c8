"""Fuzzing the public ops with hostile input (the estimators: test_fuzz_estimators.py).

Wrong ranks and dtypes, zero-size dims, declared sizes beyond the data (key_lengths past Nk, negative
or 2**63), NaN/inf, non-contiguous, reversed, broadcast and read-only arrays, masks whose shape
broadcasts the wrong way, mismatched shapes and non-bool flags. Each call must return the documented
result (checked against :mod:`attnkit.reference` when the input is finite) or raise a ValueError /
TypeError naming an argument (see hostile.outcome); a crash, a hang or a silent wrong answer fails.
"""

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from attnkit import feature_maps, ops, reference
from attnkit.testing import assert_allclose
from hostile import (
    FLAGS,
    NUMBERS,
    REFUSED,
    SIZES,
    arrays,
    finite,
    hostile_arrays,
    no_hang,  # noqa: F401 (an autouse fixture)
    outcome,
    perturbed,
    shape_of,
    valid_arrays,
)

# Scales of moderate size (10**30 overflows float32 logits to inf: a float32 limit, not a bug) and wrong types.
SCALES = st.sampled_from([0, -1, np.nan, np.inf, "1", True, None, [1.0], np.array(1.0), 1 + 0j, np.float32(0.25)])
ATTENTION_ARGS = ("q", "k", "v", "mask", "key_lengths", "bias", "scale", "causal", "return_weights")
sizes = st.integers(0, 5)
batches = st.lists(st.integers(0, 3), max_size=2).map(tuple)


def key_lengths(batch, nk, *, hostile):
    """Lengths in [0, Nk] of a prefix shape of the batch; hostile: negative, past Nk, 2**63 - 1, 2**64 - 1,
    floats, bools, a string, a shape that is no prefix."""
    if not hostile:
        prefix = batch[: len(batch) and 1]
        return st.one_of(st.none(), arrays(prefix, (np.int64,)).map(lambda a: np.clip(a, 0, nk)),
                         st.integers(0, nk))
    return st.one_of(
        st.integers(-(2**63), 2**63 - 1), st.integers(-3, nk + 3).filter(lambda n: not 0 <= n <= nk),
        st.lists(st.integers(-3, nk + 3), min_size=1, max_size=4), st.just(np.array([2**64 - 1], np.uint64)),
        st.just([1.0]), st.just([True]), st.just("2"))


def masks(batch, nq, nk, *, hostile, key_padding=False):
    """Boolean masks that broadcast to (..., Nq, Nk) (for linear attention, to (..., 1, Nk)); hostile:
    traps whose shape broadcasts the wrong way (Nq and Nk swapped, a (Nq,) vector that NumPy reads as
    one row of keys, batch dims that do not match), a full mask for linear attention, int masks."""
    if not hostile:
        shapes = [(1, nk), (nk,), (), batch + (1, nk)] + ([] if key_padding else [(nq, nk), (nq, 1), batch + (nq, nk)])
        return st.one_of(st.none(), st.sampled_from(shapes).flatmap(lambda shape: arrays(shape, (np.bool_,))))
    shapes = [(nk, nq), (nq,), (nq, 1), (2, nq, nk), (3,) + batch + (nq, nk), (nq, nk), (nk + 1,)]
    return st.sampled_from(shapes).flatmap(lambda shape: arrays(shape, (np.bool_,) * 3 + (np.int64, np.float64)))


def flags(hostile):
    return FLAGS if hostile else st.booleans()


@st.composite
def attention_calls(draw):
    """Keyword arguments of one attention call: all valid, or one of them (the culprit) hostile."""
    batch, nq, nk, d, dv = draw(batches), draw(sizes), draw(sizes), draw(st.integers(1, 5)), draw(sizes)
    culprit = draw(st.sampled_from((None, None) + ATTENTION_ARGS))
    note(f"batch={batch} nq={nq} nk={nk} d={d} dv={dv}, culprit {culprit}")

    def arg(name, valid, hostile):
        return draw(hostile if name == culprit else valid, label=name)

    shapes = dict(q=batch + (nq, d), k=batch + (nk, d), v=batch + (nk, dv))
    # q keeps the whole batch shape, so the inputs broadcast to it (and key_lengths fit it).
    kwargs = {n: arg(n, valid_arrays(shape, broadcast=n != "q"), hostile_arrays(shape)) for n, shape in shapes.items()}
    kwargs["mask"] = arg("mask", masks(batch, nq, nk, hostile=False), masks(batch, nq, nk, hostile=True))
    kwargs["key_lengths"] = arg("key_lengths", key_lengths(batch, nk, hostile=False),
                                key_lengths(batch, nk, hostile=True))
    bias_shapes = st.sampled_from([(nq, nk), (1, nk), (nq, 1), (nk,), batch + (nq, nk)])
    kwargs["bias"] = arg("bias", st.one_of(st.none(), bias_shapes.flatmap(arrays)),
                         st.one_of(st.sampled_from([(nk, nq), (nq,), (nk + 1, nq)]).flatmap(arrays),
                                   bias_shapes.flatmap(lambda shape: arrays(shape, REFUSED))))
    kwargs["scale"] = arg("scale", st.one_of(st.none(), st.floats(-2, 2)), SCALES)
    kwargs["causal"] = arg("causal", flags(False), flags(True))
    kwargs["return_weights"] = arg("return_weights", flags(False), flags(True))
    return culprit, kwargs


@given(call=attention_calls())
def test_scaled_dot_product_attention(call):
    culprit, kwargs = call
    result, error = outcome(lambda: ops.scaled_dot_product_attention(**kwargs), (culprit,) if culprit else (),
                            [kwargs[n] for n in ("q", "k", "v", "bias")])
    if error is not None:
        return
    out, weights = result if kwargs["return_weights"] else (result, None)
    q, k, v = (np.asarray(kwargs[n]) for n in "qkv")
    assert out.dtype in (np.float32, np.float64) and out.shape[-2:] == (q.shape[-2], v.shape[-1])
    if finite(q, k, v, kwargs["bias"]):
        expected = reference.scaled_dot_product_attention(**dict(kwargs, return_weights=True))
        assert_allclose(out, expected[0].astype(out.dtype), magnitude=1 + np.abs(v.astype(float)).max(initial=0))
        if weights is not None:
            assert_allclose(weights, expected[1].astype(weights.dtype), magnitude=1.0)


def test_bad_flags_and_sizes_are_named():
    q = np.ones((2, 3, 4))
    for flag in ("causal", "return_weights", "return_lse"):
        with pytest.raises(TypeError, match=f"{flag} must be a bool, got str 'no'"):
            ops.scaled_dot_product_attention(q, q, q, **{flag: "no"})
    for lengths in ([4, 1], [-1, 1], [2**63 - 1, 0], np.array([2**64 - 1, 0], np.uint64)):
        with pytest.raises(ValueError, match=r"key_lengths must lie in \[0, Nk\] = \[0, 3\]"):
            ops.scaled_dot_product_attention(q, q, q, key_lengths=lengths)
    with pytest.raises(ValueError, match=r"q must be an array \(nested lists of equal lengths\), got list"):
        ops.scaled_dot_product_attention([[1.0, 2.0], [1.0]], q, q)
    with pytest.raises(TypeError, match="q must be a float32 or float64 array, got None"):
        ops.scaled_dot_product_attention(None, q, q)


@given(x=st.one_of(st.lists(sizes, max_size=4).flatmap(lambda s: perturbed(tuple(s))), NUMBERS),
       axis=st.one_of(st.integers(-5, 4), NUMBERS), log=st.booleans())
def test_softmax(x, axis, log):
    op, ref = (ops.log_softmax, reference.log_softmax) if log else (ops.softmax, reference.softmax)
    result, error = outcome(lambda: op(x, axis=axis), ("x", "axis"), [x])
    if error is None:
        x = np.asarray(x)
        assert result.shape == x.shape and result.dtype == (np.float32 if x.dtype == np.float16 else x.dtype)
        if finite(x):
            assert_allclose(result, ref(x.astype(result.dtype), axis=axis).astype(result.dtype), magnitude=1.0)


FEATURE_MAPS = ["elu", "relu", "polynomial", feature_maps.PositiveRandomFeatureMap(4, random_state=0),
                feature_maps.RandomFourierFeatureMap(4, random_state=0, softmax_kernel=True)]
LINEAR_ARGS = ("q", "k", "v", "feature_map", "causal", "mask", "key_lengths", "eps", "return_state")


@st.composite
def linear_attention_calls(draw):
    """Keyword arguments of one linear attention call: all valid, or one of them hostile."""
    culprit = draw(st.sampled_from((None, None) + LINEAR_ARGS))
    batch, nq, nk, d, dv = draw(batches), draw(sizes), draw(sizes), draw(st.integers(1, 5)), draw(sizes)
    causal = True if culprit == "return_state" else draw(st.booleans())
    nq = nk if causal and culprit != "causal" else nq
    note(f"batch={batch} nq={nq} nk={nk} d={d} dv={dv}, culprit {culprit}")

    def arg(name, valid, hostile):
        return draw(hostile if name == culprit else valid, label=name)

    shapes = dict(q=batch + (nq, d), k=batch + (nk, d), v=batch + (nk, dv))
    # q keeps the whole batch shape, so the inputs broadcast to it (and key_lengths fit it).
    kwargs = {n: arg(n, valid_arrays(shape, broadcast=n != "q"), hostile_arrays(shape)) for n, shape in shapes.items()}
    kwargs["feature_map"] = arg("feature_map", st.sampled_from(FEATURE_MAPS),
                                st.sampled_from(["softmax", None, feature_maps.EluFeatureMap, 1]))
    kwargs["causal"] = causal if culprit != "causal" else draw(st.one_of(FLAGS, st.just(True)))
    kwargs["mask"] = arg("mask", masks(batch, nq, nk, hostile=False, key_padding=True),
                         masks(batch, nq, nk, hostile=True))
    kwargs["key_lengths"] = arg("key_lengths", key_lengths(batch, nk, hostile=False),
                                key_lengths(batch, nk, hostile=True))
    kwargs["eps"] = arg("eps", st.floats(0, 0.5), st.one_of(st.floats(-1, -1e-9), st.floats(1, 2), NUMBERS))
    kwargs["return_state"] = arg("return_state", st.just(causal) if causal else st.just(False), FLAGS)
    return culprit, kwargs


@given(call=linear_attention_calls())
def test_linear_attention(call):
    culprit, kwargs = call
    result, error = outcome(lambda: ops.linear_attention(**kwargs), (culprit,) if culprit else (),
                            [kwargs[n] for n in "qkv"])
    if error is not None:
        return
    out, state = result if kwargs["return_state"] else (result, None)
    q, k, v = (np.asarray(kwargs[n]) for n in "qkv")
    assert out.shape[-2:] == (q.shape[-2], v.shape[-1]) and out.dtype in (np.float32, np.float64)
    if finite(q, k, v) and not isinstance(kwargs["feature_map"], feature_maps.RandomFourierFeatureMap):
        expected = reference.linear_attention(**{n: a for n, a in kwargs.items() if n != "return_state"})
        tolerance = dict(rtol=5e-3, atol=5e-4) if out.dtype == np.float32 else dict(rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(out, expected.astype(out.dtype), **tolerance)
    if state is not None:
        assert state.s.shape[:-2] == out.shape[:-2] and state.z.shape == state.s.shape[:-1]


@given(q=st.one_of(perturbed((2, 3)), perturbed((3,)), NUMBERS), k=st.one_of(perturbed((2, 3)), perturbed((3,))),
       v=st.one_of(perturbed((2, 4)), perturbed((4,))), feature_map=st.sampled_from(FEATURE_MAPS))
def test_linear_attention_state_steps(q, k, v, feature_map):
    state = ops.LinearAttentionState(feature_map)
    first, error = outcome(lambda: state.step(q, k, v), ("q", "k", "v"), [q, k, v])
    if error is None:
        batch = np.broadcast_shapes(*(shape_of(a)[:-1] for a in (q, k, v)))
        assert first.shape == batch + (shape_of(v)[-1],)
        # A step of another width or batch must be refused, not broadcast into the sums.
        sums = state.s.shape  # (..., D, dv)
        _, error = outcome(lambda: state.step(np.ones(5), np.ones(5), np.ones(7)), ("k", "v"), [q, k, v])
        assert error is not None or (sums[:-2] == () and sums[-1] == 7)
        _, error = outcome(lambda: state.attend(np.ones(5)), ("q",), [q, k, v])
        assert error is not None or sums[:-2] == ()


@given(s=st.one_of(perturbed((3, 2)), NUMBERS), z=st.one_of(perturbed((3,)), NUMBERS), q=perturbed((3,)))
def test_linear_attention_state_from_sums(s, z, q):
    state, error = outcome(lambda: ops.LinearAttentionState("elu", s=s, z=z), ("s", "z"), [s, z])
    if error is None:
        out, error = outcome(lambda: state.attend(q), ("q", "state"), [s, z, q])  # a state without keys says so
        assert error is not None or out.shape == shape_of(q)[:-1] + (shape_of(s)[-1],)


MAPS = [feature_maps.EluFeatureMap(), feature_maps.ReluFeatureMap(), feature_maps.PolynomialFeatureMap(2),
        feature_maps.PositiveRandomFeatureMap(3, random_state=1),
        feature_maps.RandomFourierFeatureMap(3, random_state=1)]


@given(x=st.lists(sizes, max_size=3).flatmap(lambda s: perturbed(tuple(s))), grad=st.data(), fm=st.sampled_from(MAPS))
def test_feature_maps(x, grad, fm):
    for method in (fm.transform, fm.queries, fm.keys):
        features, error = outcome(lambda method=method: method(x), ("x",), [x])
        if error is not None:
            return
        assert features.shape == shape_of(x)[:-1] + (fm.n_features_out(shape_of(x)[-1]),)
    x = np.asarray(x)
    g = grad.draw(st.one_of(perturbed(features.shape), NUMBERS))
    for method in (fm.transform_backward, fm.queries_backward, fm.keys_backward):
        dx, error = outcome(lambda method=method: method(x, g), ("x", "grad"), [x, g])
        assert error is not None or (dx.shape == x.shape and dx.dtype.kind == "f")


@given(n=st.one_of(sizes, SIZES), d=st.one_of(st.sampled_from([2, 4, 6]), SIZES),
       base=st.one_of(st.just(10000.0), NUMBERS), start=st.one_of(st.just(0), NUMBERS),
       dtype=st.sampled_from([np.float32, np.float64, np.float16, int, "float64", "bogus", None, object]))
def test_sinusoidal_positions(n, d, base, start, dtype):
    kwargs = dict(base=base, start=start, dtype=dtype)
    result, error = outcome(lambda: ops.sinusoidal_positions(n, d, **kwargs), ("n", "d", "base", "start", "dtype"))
    if error is None:
        assert result.shape == (n, d) and result.dtype == np.dtype(dtype)
        if abs(start) < 2**40:
            assert_allclose(result, reference.sinusoidal_positions(n, d, **kwargs).astype(result.dtype), magnitude=1.0)


def test_huge_declared_sizes_raise_memory_error_at_once():
    with pytest.raises(MemoryError, match=r"the positions \(n, d\) of shape \(1000000000000, 4\)"):
        ops.sinusoidal_positions(10**12, 4)
    x = np.broadcast_to(np.ones(2), (10**6, 10**6, 2))  # 16 bytes of data, declared as 16 TB
    with pytest.raises(MemoryError, match="the output of shape"):
        ops.scaled_dot_product_attention(x, np.ones((1, 2)), np.ones((1, 2)))
    for orthogonal in (False, True):  # orthogonal: 3 * 10**11 QR blocks, hours, before the fix
        with pytest.raises(MemoryError, match="random directions of width 3"):
            feature_maps.PositiveRandomFeatureMap(10**12, random_state=0, orthogonal=orthogonal).transform(np.ones(3))


@given(x=st.lists(sizes, min_size=1, max_size=3).flatmap(lambda s: perturbed(tuple(s))), data=st.data(),
       kind=st.sampled_from(["cos", "sincos", "exp", None, 0]))
def test_random_fourier_features(x, data, kind):
    f = shape_of(x)[-1] if shape_of(x) else 2
    weights = data.draw(perturbed((f, data.draw(sizes))), label="weights")
    offsets = data.draw(st.one_of(st.none(), perturbed((shape_of(weights)[-1] if shape_of(weights) else 1,))))
    args = dict(offsets=offsets, kind=kind)
    result, error = outcome(lambda: ops.random_fourier_features(x, weights, **args),
                            ("x", "weights", "offsets", "kind"), [x, weights, offsets])
    if error is None:
        assert result.shape == shape_of(x)[:-1] + ((1 if kind == "cos" else 2) * shape_of(weights)[1],)
        if finite(x, weights, offsets):
            expected = reference.random_fourier_features(x, weights, **args).astype(result.dtype)
            np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-5)


@given(m=sizes, k=sizes, n=sizes, data=st.data())
def test_matmul(m, k, n, data):
    a, b = data.draw(perturbed((m, k)), label="a"), data.draw(perturbed((k, n)), label="b")
    bias = data.draw(st.one_of(st.none(), perturbed((n,))), label="bias")
    out = data.draw(st.one_of(st.none(), perturbed((m, n))), label="out")
    accumulate = data.draw(FLAGS, label="accumulate")
    start = np.array(out) if isinstance(out, np.ndarray) else None
    result, error = outcome(lambda: ops.matmul(a, b, bias=bias, out=out, accumulate=accumulate),
                            ("a", "b", "bias", "out", "accumulate"), [a, b, bias, out])
    if error is None:
        # a perturbed a or b may have another (valid) shape than the (m, k) x (k, n) drawn
        assert result.shape == (np.shape(a)[0], np.shape(b)[1]) and (out is None or result is out)
        if finite(a, b, bias, start if accumulate else None):
            expected = reference.matmul(a, b, bias=bias, out=start, accumulate=bool(accumulate))
            scale = np.abs(np.asarray(a, np.float64)) @ np.abs(np.asarray(b, np.float64)) + 1.0
            np.testing.assert_allclose(result, np.asarray(expected, result.dtype), rtol=1e-4,
                                       atol=1e-5 * scale.max(initial=1.0))


@given(m=sizes, k=sizes, n=sizes, data=st.data())
def test_matmul_column_sums(m, k, n, data):
    a, b = np.ones((m, k)), data.draw(perturbed((k, n)), label="b")
    sums = data.draw(st.one_of(st.just(np.full(n, np.nan)), perturbed((n,)), NUMBERS), label="b_column_sums")
    result, error = outcome(lambda: ops.matmul(a, b, b_column_sums=sums), ("a", "b", "b_column_sums"), [a, b, sums])
    if error is None and sums is not None and finite(b):  # None: no sums asked for, a plain product
        column = np.asarray(b, result.dtype)
        np.testing.assert_allclose(sums, column.sum(axis=0), rtol=1e-5, atol=1e-5 * np.abs(column).sum(initial=1.0))


@given(vocab=sizes, width=sizes, data=st.data())
def test_embedding_backward(vocab, width, data):
    table = data.draw(st.one_of(st.just(np.zeros((vocab, width))), perturbed((vocab, width))), label="grad_weight")
    ids = data.draw(st.one_of(valid_arrays((3,), dtypes=(np.int64, np.int32, np.uint8)), perturbed((3,)),
                              st.lists(st.integers(-(2**64), 2**64), max_size=3)), label="ids")
    grad = data.draw(perturbed((3, width)), label="grad")
    padding_idx = data.draw(st.one_of(st.none(), NUMBERS), label="padding_idx")
    before = np.array(table) if isinstance(table, np.ndarray) else None
    result, error = outcome(lambda: ops.embedding_backward(table, ids, grad, padding_idx=padding_idx),
                            ("grad_weight", "ids", "grad", "padding_idx"), [table, grad])
    if error is None:
        assert result is table
        if finite(grad, before):
            expected = reference.embedding_backward(before, ids, grad, padding_idx=padding_idx)
            np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-6)


@given(shape=st.lists(sizes, max_size=2).map(tuple), data=st.data())
def test_adamw_update_scale_and_zero_grad(shape, data):
    param, exp_avg, exp_avg_sq = np.ones(shape), np.zeros(shape), np.ones(shape)
    grad = data.draw(perturbed(shape), label="grad")
    grad_scale = data.draw(st.one_of(st.just(0.5), NUMBERS), label="grad_scale")
    zero_grad = data.draw(FLAGS, label="zero_grad")
    hyper = {"step_size": 0.1, "beta1": 0.9, "beta2": 0.999, "denom_scale": 1.0, "eps": 1e-8}
    _, error = outcome(lambda: ops.adamw_update(param, grad, exp_avg, exp_avg_sq, **hyper, grad_scale=grad_scale,
                                                zero_grad=zero_grad),
                       ("param", "grad", "exp_avg", "exp_avg_sq", "grad_scale", "zero_grad"), [grad])
    if error is None and zero_grad:
        assert not np.asarray(grad).any()


@given(shape=st.lists(sizes, max_size=2).map(tuple), count=st.integers(1, 3), data=st.data())
def test_adamw_update_many_and_sum_of_squares_many(shape, count, data):
    # Any of the four lists may hold a hostile array, or be a hostile list; shrinks may be anything.
    params = [np.ones(shape) for _ in range(count)]
    grads = [data.draw(perturbed(shape), label=f"grads[{i}]") for i in range(count)]
    moments = [[np.zeros(shape) for _ in range(count)] for _ in range(2)]
    which = data.draw(st.sampled_from(("params", "exp_avgs", "exp_avg_sqs")), label="hostile list")
    lists = {"params": params, "grads": grads, "exp_avgs": moments[0], "exp_avg_sqs": moments[1]}
    lists[which] = data.draw(st.one_of(st.just(lists[which]), st.just(lists[which][:-1]), st.just(np.ones(shape)),
                                       st.just([*lists[which], 1.0]),
                                       st.just(params if which != "params" else grads)), label=which)
    shrinks = data.draw(st.one_of(st.none(), st.just([0.5] * count), st.lists(NUMBERS, max_size=3), NUMBERS),
                        label="shrinks")
    hyper = {"step_size": 0.1, "beta1": 0.9, "beta2": 0.999, "denom_scale": 1.0, "eps": 1e-8}
    grad_scale = data.draw(st.one_of(st.just(0.5), NUMBERS), label="grad_scale")
    zero_grad = data.draw(FLAGS, label="zero_grad")
    outcome(lambda: ops.adamw_update_many(*lists.values(), **hyper, shrinks=shrinks, grad_scale=grad_scale,
                                          zero_grad=zero_grad),
            (*lists, "shrinks", "grad_scale", "zero_grad"), grads)
    sums, error = outcome(lambda: ops.sum_of_squares_many(grads), ("xs",), grads)
    if error is None:
        np.testing.assert_array_equal(sums, [ops.sum_of_squares(g) for g in grads])  # NaN where one is NaN


@given(x=st.lists(sizes, max_size=3).flatmap(lambda s: perturbed(tuple(s))), data=st.data())
def test_normalization_activations_and_cross_entropy(x, data):
    approximate = data.draw(st.one_of(st.sampled_from(("tanh", "none")), st.sampled_from(("exact", None, 1, ["none"]))),
                            label="approximate")
    gelu, error = outcome(lambda: ops.gelu(x, approximate=approximate), ("x", "approximate"), [x])
    if error is None and finite(x):
        expected = reference.gelu(np.asarray(x, gelu.dtype), approximate=approximate)
        assert_allclose(gelu, expected.astype(gelu.dtype))
    n = shape_of(x)[-1] if shape_of(x) else 1
    gamma = data.draw(st.one_of(st.none(), perturbed((n,))), label="gamma")
    eps = data.draw(st.one_of(st.just(1e-5), NUMBERS), label="eps")
    stats = data.draw(FLAGS, label="return_stats")
    y, error = outcome(lambda: ops.layer_norm(x, gamma, eps=eps, return_stats=stats),
                       ("x", "gamma", "eps", "return_stats"), [x, gamma])
    if error is None and finite(x, gamma) and eps > 0:
        expected = reference.layer_norm(x, gamma, eps=eps)
        assert_allclose(y[0] if stats else y, expected.astype(y[0].dtype if stats else y.dtype), magnitude=10.0)
    y, error = outcome(lambda: ops.rms_norm(x, gamma, eps=eps, return_stats=stats),
                       ("x", "gamma", "eps", "return_stats"), [x, gamma])
    if error is None and finite(x, gamma) and eps > 0:
        expected = reference.rms_norm(x, gamma, eps=eps)
        assert_allclose(y[0] if stats else y, expected.astype(y[0].dtype if stats else y.dtype), magnitude=10.0)
    targets = data.draw(st.one_of(perturbed(shape_of(x)[:-1], dtypes=(np.int64,) * 3 + REFUSED),
                                  st.integers(-(2**64), 2**64)), label="targets")
    ignore_index = data.draw(st.one_of(st.just(-100), NUMBERS), label="ignore_index")
    loss, error = outcome(lambda: ops.cross_entropy(x, targets, ignore_index=ignore_index),
                          ("logits", "targets", "ignore_index"), [x])
    assert error is not None or np.ndim(loss) == 0
