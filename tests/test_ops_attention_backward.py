"""ops.scaled_dot_product_attention_backward: against the NumPy reference on every ISA, and against
central finite differences in float64 for every mask kind."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnkit
from attnkit import ops, reference
from attnkit.testing.gradcheck import check_grad
from attnkit.testing.strategies import attention_problems


def _backward_both(problem, rng):
    out, lse = ops.scaled_dot_product_attention(**problem, return_lse=True)
    dout = rng.standard_normal(out.shape).astype(out.dtype)
    bias_grad = problem["bias"] is not None
    got = ops.scaled_dot_product_attention_backward(dout, out=out, lse=lse, bias_grad=bias_grad, **problem)
    expected = reference.scaled_dot_product_attention_backward(dout, bias_grad=bias_grad, **problem)
    return got, expected


@settings(max_examples=60)
@given(problem=attention_problems(max_n=130, max_d=70, layouts=False), seed=st.integers(0, 2**32 - 1))
def test_matches_reference(isa, problem, seed):
    got, expected = _backward_both(problem, np.random.default_rng(seed))
    for name, g, e in zip(("dq", "dk", "dv", "dbias"), got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, name
        # gradients sum up to Nq (dk, dv) or Nk (dq) terms of size |dout| |v| |q| ...: scale by the
        # reference's largest entry, with a float32 tolerance loose enough for sums of ~300 terms
        size = max(float(np.abs(e).max(initial=0)), 1.0)
        tol = 3e-4 if g.dtype == np.float32 else 1e-9
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol * size, err_msg=name)


def _problem(seed, kind):
    rng = np.random.default_rng(seed)
    nq, nk = {"causal_short_q": (5, 9), "causal_long_q": (9, 5)}.get(kind, (7, 7))
    p = dict(q=rng.standard_normal((2, 2, nq, 4)), k=rng.standard_normal((2, 1, nk, 4)),
             v=rng.standard_normal((2, 2, nk, 3)), mask=None, key_lengths=None, causal=False, window=None,
             bias=None)
    if kind == "mask":
        p["mask"] = rng.random((2, 1, nq, nk)) < 0.6
    elif kind == "padding_mask":
        p["mask"] = np.arange(nk) < np.array([3, 7])[:, None, None, None]
    elif kind == "key_lengths":
        p["key_lengths"] = np.array([0, 5])
    elif kind == "window":
        p["window"] = (2, 1)
    elif kind == "causal_window":
        p.update(causal=True, window=(2, 0), key_lengths=np.array([6, 4]))
    elif kind.startswith("causal"):
        p["causal"] = True
    elif kind == "bias":
        p["bias"] = rng.standard_normal((2, nq, nk))
    elif kind == "all":
        p.update(mask=rng.random((nq, nk)) < 0.8, key_lengths=np.array([6, 4]), causal=True,
                 bias=rng.standard_normal((1, 2, nq, nk)))
    return p, rng.standard_normal((2, 2, nq, 3))


@pytest.mark.parametrize("kind", ["none", "mask", "padding_mask", "key_lengths", "causal_short_q", "causal_long_q",
                                  "window", "causal_window", "bias", "all"])
def test_finite_differences(isa, kind):
    problem, w = _problem(1, kind)
    out, lse = ops.scaled_dot_product_attention(**problem, return_lse=True)
    grads = ops.scaled_dot_product_attention_backward(w, out=out, lse=lse, bias_grad=problem["bias"] is not None,
                                                      **problem)
    names = ["q", "k", "v"] + (["bias"] if problem["bias"] is not None else [])
    fixed = {n: problem[n] for n in ("mask", "key_lengths", "causal", "window")}

    def loss(q, k, v, bias):
        return float(np.sum(ops.scaled_dot_product_attention(q, k, v, bias=bias, **fixed) * w))

    inputs = {n: problem[n] for n in ("q", "k", "v", "bias")}
    check_grad(loss, inputs, dict(zip(names, grads)), rtol=1e-5, atol=1e-8)


def test_rows_and_keys_nobody_uses_get_zero_gradient():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((3, 6, 4)), rng.standard_normal((3, 6, 4)), rng.standard_normal((3, 6, 2))
    lengths = np.array([0, 3, 6])
    out, lse = ops.scaled_dot_product_attention(q, k, v, key_lengths=lengths, return_lse=True)
    dq, dk, dv = ops.scaled_dot_product_attention_backward(np.ones_like(out), q, k, v, out, lse, key_lengths=lengths)
    assert np.all(dq[0] == 0) and np.all(dk[0] == 0) and np.all(dv[0] == 0)  # sees nothing
    assert np.all(dk[1, 3:] == 0) and np.all(dv[1, 3:] == 0)  # padding keys
    assert np.all(np.isfinite(dq)) and np.any(dq[2] != 0)


def test_nan_value_at_a_key_nobody_sees_stays_out_of_the_gradients():
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((4, 3)), rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    v[1] = np.nan
    mask = np.array([[True, False, True, True]])  # key 1 hidden from every query (a non-prefix mask)
    for causal in (False, True):
        out, lse = ops.scaled_dot_product_attention(q, k, v, mask=mask, causal=causal, return_lse=True)
        grads = ops.scaled_dot_product_attention_backward(np.ones_like(out), q, k, v, out, lse, mask=mask,
                                                          causal=causal)
        assert all(np.all(np.isfinite(g)) for g in grads)
        assert np.all(grads[1][1] == 0) and np.all(grads[2][1] == 0)


def test_broadcast_inputs_get_summed_gradients():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 3, 5, 4))
    k, v = rng.standard_normal((5, 4)), rng.standard_normal((1, 3, 5, 2))
    out, lse = ops.scaled_dot_product_attention(q, k, v, return_lse=True)
    dq, dk, dv = ops.scaled_dot_product_attention_backward(np.ones_like(out), q, k, v, out, lse)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    full = ops.scaled_dot_product_attention_backward(np.ones_like(out), q, np.broadcast_to(k, (2, 3, 5, 4)).copy(),
                                                     np.broadcast_to(v, (2, 3, 5, 2)).copy(), out, lse)
    np.testing.assert_allclose(dk, full[1].sum(axis=(0, 1)), rtol=1e-10)
    np.testing.assert_allclose(dv, full[2].sum(axis=0, keepdims=True), rtol=1e-10)


def test_errors():
    q = np.ones((3, 2))
    out, lse = ops.scaled_dot_product_attention(q, q, q, return_lse=True)
    with pytest.raises(ValueError, match="bias_grad=True needs the bias"):
        ops.scaled_dot_product_attention_backward(out, q, q, q, out, lse, bias_grad=True)
    with pytest.raises(ValueError, match=r"dout must have shape \(3, 2\)"):
        ops.scaled_dot_product_attention_backward(np.ones((4, 2)), q, q, q, out, lse)
    with pytest.raises(ValueError, match="lse must have shape"):
        ops.scaled_dot_product_attention_backward(out, q, q, q, out, lse[:2])


# -------------------------------------------------------------- the forward's context, reused by the backward


@settings(max_examples=60)
@given(problem=attention_problems(max_n=70, max_d=40), seed=st.integers(0, 2**32 - 1), weights=st.booleans(),
       fortran_dout=st.booleans())
def test_context_backward_is_the_explicit_backward_bit_for_bit(isa, problem, seed, weights, fortran_dout):
    # Masks of every form, key lengths, causal, bias (with its gradient), broadcast and strided layouts.
    *results, context = ops.scaled_dot_product_attention(**problem, return_weights=weights, return_lse=True,
                                                         return_context=True)
    out, lse = results[0], results[-1]
    np.testing.assert_array_equal(out, ops.scaled_dot_product_attention(**problem))
    dout = np.random.default_rng(seed).standard_normal(out.shape).astype(out.dtype)
    dout = np.asfortranarray(dout) if fortran_dout else dout
    bias_grad = problem["bias"] is not None
    got = context.backward(dout, bias_grad=bias_grad)
    expected = ops.scaled_dot_product_attention_backward(dout, out=out, lse=lse, bias_grad=bias_grad, **problem)
    assert len(got) == len(expected) == 3 + bias_grad
    for name, g, e in zip(("dq", "dk", "dv", "dbias"), got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, name
        np.testing.assert_array_equal(g, e, err_msg=name)


def test_context_comes_last_and_checks_its_arguments():
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 2))
    out, weights, lse, context = ops.scaled_dot_product_attention(q, k, v, return_weights=True, return_lse=True,
                                                                  return_context=True)
    assert isinstance(context, ops.AttentionContext) and weights.shape == (2, 3, 5) and lse.shape == (2, 3)
    out, context = ops.scaled_dot_product_attention(q, k, v, return_context=True)
    with pytest.raises(ValueError, match="bias_grad=True needs the bias"):
        context.backward(np.ones_like(out), bias_grad=True)
    with pytest.raises(ValueError, match=r"dout must have shape \(2, 3, 2\)"):
        context.backward(np.ones((2, 3, 3)))
    with pytest.raises(TypeError, match="return_context must be a bool"):
        ops.scaled_dot_product_attention(q, k, v, return_context="yes")
    with pytest.raises(TypeError, match="bias_grad must be a bool"):
        context.backward(np.ones_like(out), bias_grad=None)


@pytest.mark.parametrize(("batch", "heads", "nq", "nk", "causal"), [(8, 2, 400, 400, True), (4, 4, 300, 500, False),
                                                                    (12, 4, 64, 64, True), (3, 1, 20, 150, False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_items_enough_or_of_one_key_block_get_one_threads_bits(isa, batch, heads, nq, nk, causal, dtype):
    """Each item's key blocks in one task, in order, where an item has one (nk <= 192) or there are 4 items a
    thread: the gradients' bits do not depend on the thread count (its only adder writes an item's dq)."""
    rng = np.random.default_rng(batch * nk)
    q, k, v = (rng.standard_normal((batch, heads, n, 16)).astype(dtype) for n in (nq, nk, nk))
    lengths = rng.integers(0, nk + 1, size=batch)
    out, lse = ops.scaled_dot_product_attention(q, k, v, causal=causal, key_lengths=lengths, return_lse=True)
    dout = rng.standard_normal(out.shape).astype(dtype)
    before = attnkit.get_num_threads()
    try:
        grads = []
        for threads in (1, 2, 3):
            attnkit.set_num_threads(threads)
            grads.append(ops.scaled_dot_product_attention_backward(dout, q, k, v, out, lse, causal=causal,
                                                                   key_lengths=lengths))
    finally:
        attnkit.set_num_threads(before)
    for other in grads[1:]:
        for want, got in zip(grads[0], other):
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@settings(max_examples=40)
@given(problem=attention_problems(max_n=70, max_d=40, broadcast=False), seed=st.integers(0, 2**32 - 1))
def test_context_backward_writes_into_out_with_the_same_bits(isa, problem, seed):
    # A layer's case: dq, dk and dv the heads of one fused (..., N, 3 H, d) gradient when their shapes allow it,
    # else arrays of their own; dout a transposed view of the heads merged.
    out, context = ops.scaled_dot_product_attention(**problem, return_context=True)
    rng = np.random.default_rng(seed)
    dout = np.swapaxes(np.swapaxes(rng.standard_normal(out.shape).astype(out.dtype), -2, -3).copy(), -2, -3) \
        if out.ndim > 2 else rng.standard_normal(out.shape).astype(out.dtype)
    expected = context.backward(dout)
    shapes = [np.shape(problem[name]) for name in ("q", "k", "v")]
    if len(set(shapes)) == 1 and len(shapes[0]) > 2:
        fused = np.full(shapes[0][:-3] + (shapes[0][-2], 3 * shapes[0][-3], shapes[0][-1]), np.nan, out.dtype)
        targets = tuple(np.swapaxes(part, -2, -3) for part in np.split(fused, 3, axis=-2))
    else:
        targets = tuple(np.full(shape, np.nan, out.dtype) for shape in shapes)
    got = context.backward(dout, out=targets)
    for name, g, t, e in zip(("dq", "dk", "dv"), got, targets, expected):
        assert g is t, name
        np.testing.assert_array_equal(g, e, err_msg=name)


def test_context_backward_out_is_checked():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 2))
    out, context = ops.scaled_dot_product_attention(q, k, v, return_context=True)
    dout = np.ones_like(out)
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    with pytest.raises(TypeError, match=r"out must be a tuple \(dq, dk, dv\)"):
        context.backward(dout, out=[dq, dk, dv])
    with pytest.raises(ValueError, match=r"out dk must have shape like k = \(2, 5, 4\)"):
        context.backward(dout, out=(dq, np.empty((2, 5, 3)), dv))
    with pytest.raises(ValueError, match="out dk must not share memory with the inputs or the other outputs"):
        buffer = np.empty(40)
        context.backward(dout, out=(buffer[:24].reshape(q.shape), buffer.reshape(k.shape), dv))
    shared = np.ones(v.shape)  # dout read from the rows dv would be written to
    with pytest.raises(ValueError, match="out dv must not share memory"):
        context.backward(shared[:, :3], out=(dq, dk, shared))
    _, broadcast = ops.scaled_dot_product_attention(q[0], k, v, return_context=True)
    with pytest.raises(ValueError, match="out=.dq, dk, dv. needs q, k and v of the full batch shape"):
        broadcast.backward(dout, out=(np.empty((3, 4)), dk, dv))
