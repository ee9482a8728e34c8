"""ops.layer_norm / ops.layer_norm_backward and ops.rms_norm / ops.rms_norm_backward against the NumPy
reference and finite differences, on every ISA."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attnkit import ops, reference
from attnkit._config import num_threads
from attnkit.testing import assert_allclose, check_grad
from attnkit.testing.strategies import arrange, float_arrays, head_dims

widths = head_dims(max_value=300)


@st.composite
def layer_norm_problems(draw, *, layouts=True):
    """x (..., n) around a drawn offset, optional gamma and beta (n,), eps and dy for the backward."""
    x = draw(float_arrays(last=widths, layouts=layouts))
    n = x.shape[-1]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    offset = draw(st.sampled_from((0.0, 0.0, 3.0, -50.0)))
    x = x + x.dtype.type(offset)
    gamma = rng.standard_normal(n).astype(x.dtype) if draw(st.booleans()) else None
    beta = rng.standard_normal(n).astype(x.dtype) if draw(st.booleans()) else None
    dy = rng.standard_normal(x.shape).astype(x.dtype)
    return {
        "x": x,
        "gamma": gamma,
        "beta": beta,
        "eps": draw(st.sampled_from((1e-5, 1e-5, 1e-3, 0.5))),
        "dy": draw(arrange(dy)) if layouts else dy,
    }


def conditioning(x, eps):
    """max |x| / std of the rows: float32 rounds x (hence the mean) relative to |x|, the output
    relative to the standard deviation, so their ratio scales the error."""
    x = x.astype(np.float64)
    std = np.sqrt(x.var(axis=-1) + eps)
    return float((np.abs(x).max(axis=-1, initial=0.0) / std).max(initial=0.0)) + 1.0


@given(problem=layer_norm_problems())
def test_forward_matches_reference(isa, problem):
    x, gamma, beta, eps = (problem[k] for k in ("x", "gamma", "beta", "eps"))
    before = x.copy()
    y, mean, rstd = ops.layer_norm(x, gamma, beta, eps, return_stats=True)
    ref_y, ref_mean, ref_rstd = reference.layer_norm(x, gamma, beta, eps, return_stats=True)
    scale = 1.0 if gamma is None else float(np.abs(gamma).max())
    assert_allclose(y, ref_y, magnitude=scale * conditioning(x, eps) + (0.0 if beta is None else np.abs(beta).max()))
    assert_allclose(mean, ref_mean, magnitude=float(np.abs(x).max()))
    assert_allclose(rstd, ref_rstd, magnitude=float(ref_rstd.max(initial=0.0)) * conditioning(x, eps))
    assert_allclose(ops.layer_norm(x, gamma, beta, eps), y)
    assert_array_equal(x, before)


@given(problem=layer_norm_problems())
def test_backward_matches_reference(isa, problem):
    x, gamma, eps, dy = (problem[k] for k in ("x", "gamma", "eps", "dy"))
    _, mean, rstd = ops.layer_norm(x, gamma, None, eps, return_stats=True)
    dx, dgamma, dbeta = ops.layer_norm_backward(dy, x, gamma, mean, rstd)
    ref_dx, ref_dgamma, ref_dbeta = reference.layer_norm_backward(dy, x, gamma, mean, rstd)
    g = np.abs(dy) if gamma is None else np.abs(dy * gamma)
    cond = conditioning(x, eps)
    rows = np.abs(dy).reshape(-1, x.shape[-1])
    assert_allclose(dx, ref_dx, magnitude=float(rstd.max(initial=0.0)) * cond * float(g.sum(axis=-1).max(initial=0.0)))
    assert_allclose(dgamma, ref_dgamma, magnitude=cond * float(rows.sum(axis=0).max(initial=0.0)))
    assert_allclose(dbeta, ref_dbeta, magnitude=float(rows.sum(axis=0).max(initial=0.0)))


@given(problem=layer_norm_problems(layouts=False), data=st.data())
def test_backward_matches_finite_differences(isa, problem, data):
    x = problem["x"].astype(np.float64).reshape(-1, problem["x"].shape[-1])[:6, :12].copy()
    # Centred rows: layer norm ignores a row's mean, so the gradient is the same there, and finite
    # differences of x - mean at |x| = 50, spread 0.003 would lose ~4 digits to cancellation. The kernels'
    # behaviour on uncentred rows is test_backward_matches_reference's.
    x -= x.mean(axis=-1, keepdims=True)
    n = x.shape[-1]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    gamma, beta, w = rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(x.shape)
    eps = problem["eps"]
    _, mean, rstd = ops.layer_norm(x, gamma, beta, eps, return_stats=True)
    # The step follows the rows' scale: the curvature grows like rstd^2, and a fixed 1e-6 step on rows of
    # standard deviation ~0.01 (rstd ~100) is off by ~4e-4 relative through the third-order term alone.
    step = 1e-6 * min(1.0, 1.0 / float(rstd.max(initial=1.0)))
    dx, dgamma, dbeta = ops.layer_norm_backward(w, x, gamma, mean, rstd)
    check_grad(
        lambda x, gamma, beta: np.sum(ops.layer_norm(x, gamma, beta, eps) * w),
        {"x": x, "gamma": gamma, "beta": beta},
        {"x": dx, "gamma": dgamma, "beta": dbeta}, eps=step,
    )
    # Without gamma and beta: the gradients of an implicit scale 1 and shift 0.
    dx, dgamma, dbeta = ops.layer_norm_backward(w, x, None, mean, rstd)
    ones, zeros = np.ones(n), np.zeros(n)
    check_grad(
        lambda x, ones, zeros: np.sum(ops.layer_norm(x, ones, zeros, eps) * w),
        {"x": x, "ones": ones, "zeros": zeros},
        {"x": dx, "ones": dgamma, "zeros": dbeta}, eps=step,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_many_rows_run_threaded(isa, dtype):
    # 4096 x 96 rows: several chunks of (dgamma, dbeta) partial sums.
    rng = np.random.default_rng(5)
    x, dy = rng.standard_normal((4096, 96)).astype(dtype), rng.standard_normal((4096, 96)).astype(dtype)
    gamma, beta = rng.standard_normal(96).astype(dtype), rng.standard_normal(96).astype(dtype)
    y, mean, rstd = ops.layer_norm(x, gamma, beta, return_stats=True)
    assert_allclose(y, reference.layer_norm(x, gamma, beta), magnitude=10.0)
    got = ops.layer_norm_backward(dy, x, gamma, mean, rstd)
    want = reference.layer_norm_backward(dy, x, gamma, mean, rstd)
    for a, b, magnitude in zip(got, want, (10.0, 4096.0, 4096.0)):
        assert_allclose(a, b, magnitude=magnitude)
    for threads in (1, 2, 3):  # the partial sums' chunks do not depend on the thread count: the same bits
        with num_threads(threads):
            for a, b in zip(got, ops.layer_norm_backward(dy, x, gamma, mean, rstd)):
                assert_array_equal(a, b)


def test_known_values(isa):
    y, mean, rstd = ops.layer_norm(np.array([[1.0, 3.0], [2.0, 2.0]]), eps=1e-12, return_stats=True)
    assert_allclose(y[0], np.array([-1.0, 1.0]))
    assert_array_equal(y[1], 0.0)  # a constant row normalises to zeros (eps keeps rstd finite)
    assert_allclose(mean, np.array([2.0, 2.0]))
    assert_allclose(ops.layer_norm(np.array([1.0, 3.0]), [2.0, 1.0], [0.5, 0.0], eps=0.0), np.array([-1.5, 1.0]))
    dx, dgamma, dbeta = ops.layer_norm_backward(np.ones((3, 4)), np.arange(12.0).reshape(3, 4), None,
                                                np.full(3, 1.5) + [0, 4, 8], np.ones(3))
    np.testing.assert_allclose(dx, 0.0, atol=1e-15)  # a shift of every entry of a row is invisible
    assert_array_equal(dbeta, 3.0)
    assert_allclose(dgamma, np.array([-4.5, -1.5, 1.5, 4.5]))


def test_dtypes_and_shapes(isa):
    x = np.ones((2, 3, 4), np.float32)
    y, mean, rstd = ops.layer_norm(x, return_stats=True)
    assert y.dtype == np.float32 and y.shape == (2, 3, 4) and mean.shape == rstd.shape == (2, 3)
    assert ops.layer_norm(x, np.ones(4)).dtype == np.float64  # gamma's float64 promotes
    assert ops.layer_norm(x.astype(np.float16)).dtype == np.float32
    assert ops.layer_norm(np.zeros((0, 5))).shape == (0, 5)
    dx, dgamma, dbeta = ops.layer_norm_backward(np.zeros((0, 5)), np.zeros((0, 5)), None, np.zeros(0), np.zeros(0))
    assert dx.shape == (0, 5) and not dgamma.any() and not dbeta.any()
    assert ops.layer_norm(np.array([1.0, 2.0])).shape == (2,)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: ops.layer_norm(np.zeros((2, 0))), ValueError, "at least one feature"),
        (lambda: ops.layer_norm(np.zeros((2, 3)), np.ones(4)), ValueError, r"gamma must have shape \(n,\) = \(3,\)"),
        (lambda: ops.layer_norm(np.zeros((2, 3)), None, np.ones((1, 3))), ValueError, "beta"),
        (lambda: ops.layer_norm(np.zeros((2, 3)), eps=-1.0), ValueError, "eps must be >= 0"),
        (lambda: ops.layer_norm(np.zeros((2, 3)), eps=np.nan), ValueError, "eps"),
        (lambda: ops.layer_norm(np.zeros((2, 3), np.int32)), TypeError, "x"),
        (lambda: ops.layer_norm(np.float64(1.0)), ValueError, "x"),
        (lambda: ops.layer_norm_backward(np.zeros((2, 4)), np.zeros((2, 3)), None, np.zeros(2), np.ones(2)),
         ValueError, r"dy must have the shape of x \(2, 3\)"),
        (lambda: ops.layer_norm_backward(np.zeros((2, 3)), np.zeros((2, 3)), None, np.zeros(3), np.ones(2)),
         ValueError, r"mean must have the shape of x without its last axis, \(2,\)"),
        (lambda: ops.layer_norm_backward(np.zeros((2, 3)), np.zeros((2, 3)), None, np.zeros(2), np.ones((2, 1))),
         ValueError, "rstd"),
        (lambda: ops.layer_norm_backward(np.zeros((2, 3)), np.zeros((2, 3)), np.ones(2), np.zeros(2), np.ones(2)),
         ValueError, "gamma"),
    ],
)
def test_rejects_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()


# -- RMS normalisation ---------------------------------------------------------------------------------


def rms_conditioning(x, eps):
    """max |x| / rms of the rows: the output's error is relative to the rms, the inputs' to |x|."""
    x = x.astype(np.float64)
    rms = np.sqrt((x * x).mean(axis=-1) + eps)
    return float((np.abs(x).max(axis=-1, initial=0.0) / rms).max(initial=0.0)) + 1.0


@given(problem=layer_norm_problems())
def test_rms_forward_matches_reference(isa, problem):
    x, gamma, eps = (problem[k] for k in ("x", "gamma", "eps"))
    before = x.copy()
    y, rstd = ops.rms_norm(x, gamma, eps, return_stats=True)
    ref_y, ref_rstd = reference.rms_norm(x, gamma, eps, return_stats=True)
    scale = 1.0 if gamma is None else float(np.abs(gamma).max())
    assert_allclose(y, ref_y, magnitude=scale * rms_conditioning(x, eps))
    assert_allclose(rstd, ref_rstd, magnitude=float(ref_rstd.max(initial=0.0)))
    assert_allclose(ops.rms_norm(x, gamma, eps), y)
    assert_array_equal(x, before)


@given(problem=layer_norm_problems())
def test_rms_backward_matches_reference(isa, problem):
    x, gamma, eps, dy = (problem[k] for k in ("x", "gamma", "eps", "dy"))
    _, rstd = ops.rms_norm(x, gamma, eps, return_stats=True)
    dx, dgamma = ops.rms_norm_backward(dy, x, gamma, rstd)
    ref_dx, ref_dgamma = reference.rms_norm_backward(dy, x, gamma, rstd)
    g = np.abs(dy) if gamma is None else np.abs(dy * gamma)
    cond = rms_conditioning(x, eps)
    rows = np.abs(dy).reshape(-1, x.shape[-1])
    assert_allclose(dx, ref_dx, magnitude=float(rstd.max(initial=0.0)) * cond * float(g.sum(axis=-1).max(initial=0.0)))
    assert_allclose(dgamma, ref_dgamma, magnitude=cond * float(rows.sum(axis=0).max(initial=0.0)))


@given(problem=layer_norm_problems(layouts=False), data=st.data())
def test_rms_backward_matches_finite_differences(isa, problem, data):
    x = problem["x"].astype(np.float64).reshape(-1, problem["x"].shape[-1])[:6, :12].copy()
    # Centred rows: layer norm ignores a row's mean, so the gradient is the same there, and finite
    # differences of x - mean at |x| = 50, spread 0.003 would lose ~4 digits to cancellation. The kernels'
    # behaviour on uncentred rows is test_backward_matches_reference's.
    x -= x.mean(axis=-1, keepdims=True)
    n = x.shape[-1]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    gamma, w = rng.standard_normal(n), rng.standard_normal(x.shape)
    eps = problem["eps"]
    _, rstd = ops.rms_norm(x, gamma, eps, return_stats=True)
    dx, dgamma = ops.rms_norm_backward(w, x, gamma, rstd)
    check_grad(lambda x, gamma: np.sum(ops.rms_norm(x, gamma, eps) * w), {"x": x, "gamma": gamma},
               {"x": dx, "gamma": dgamma})
    dx, dgamma = ops.rms_norm_backward(w, x, None, rstd)  # the gradient of an implicit scale 1
    ones = np.ones(n)
    check_grad(lambda x, ones: np.sum(ops.rms_norm(x, ones, eps) * w), {"x": x, "ones": ones},
               {"x": dx, "ones": dgamma})


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rms_many_rows_run_threaded(isa, dtype):
    rng = np.random.default_rng(6)
    x, dy = rng.standard_normal((4096, 96)).astype(dtype), rng.standard_normal((4096, 96)).astype(dtype)
    gamma = rng.standard_normal(96).astype(dtype)
    y, rstd = ops.rms_norm(x, gamma, return_stats=True)
    assert_allclose(y, reference.rms_norm(x, gamma), magnitude=10.0)
    got = ops.rms_norm_backward(dy, x, gamma, rstd)
    for a, b, magnitude in zip(got, reference.rms_norm_backward(dy, x, gamma, rstd), (10.0, 4096.0)):
        assert_allclose(a, b, magnitude=magnitude)
    for threads in (1, 2, 3):
        with num_threads(threads):
            for a, b in zip(got, ops.rms_norm_backward(dy, x, gamma, rstd)):
                assert_array_equal(a, b)


def test_rms_known_values(isa):
    y, rstd = ops.rms_norm(np.array([[3.0, -4.0], [0.0, 0.0]]), eps=1e-300, return_stats=True)
    assert_allclose(y[0], np.array([3.0, -4.0]) / np.sqrt(12.5))
    assert_array_equal(y[1], 0.0)  # a zero row stays zero
    assert_allclose(rstd[0], np.array(1 / np.sqrt(12.5)))
    # Not centred: a constant row normalises to +-1, not to 0 as in layer normalisation.
    assert_allclose(ops.rms_norm(np.full((1, 4), -2.0), eps=0.0), np.full((1, 4), -1.0))
    assert_allclose(ops.rms_norm(np.array([1.0, 1.0]), [2.0, 0.5], eps=0.0), np.array([2.0, 0.5]))
    # Scaling a row is invisible to the output, so the gradient along x itself is zero.
    x = np.array([[1.0, 2.0, -2.0]])
    _, rstd = ops.rms_norm(x, eps=0.0, return_stats=True)
    dx, dgamma = ops.rms_norm_backward(x, x, None, rstd)
    np.testing.assert_allclose(dx, 0.0, atol=1e-15)
    assert_allclose(dgamma, x[0] ** 2 * rstd[0])


def test_rms_dtypes_and_shapes(isa):
    x = np.ones((2, 3, 4), np.float32)
    y, rstd = ops.rms_norm(x, return_stats=True)
    assert y.dtype == np.float32 and y.shape == (2, 3, 4) and rstd.shape == (2, 3)
    assert ops.rms_norm(x, np.ones(4)).dtype == np.float64
    assert ops.rms_norm(x.astype(np.float16)).dtype == np.float32
    assert ops.rms_norm(np.zeros((0, 5))).shape == (0, 5)
    dx, dgamma = ops.rms_norm_backward(np.zeros((0, 5)), np.zeros((0, 5)), None, np.zeros(0))
    assert dx.shape == (0, 5) and dgamma.shape == (5,) and not dgamma.any()
    assert ops.rms_norm(np.array([1.0, 2.0])).shape == (2,)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: ops.rms_norm(np.zeros((2, 0))), ValueError, "at least one feature"),
        (lambda: ops.rms_norm(np.zeros((2, 3)), np.ones(4)), ValueError, r"gamma must have shape \(n,\) = \(3,\)"),
        (lambda: ops.rms_norm(np.zeros((2, 3)), eps=-1.0), ValueError, "eps must be >= 0"),
        (lambda: ops.rms_norm(np.zeros((2, 3)), eps=np.inf), ValueError, "eps"),
        (lambda: ops.rms_norm(np.zeros((2, 3)), return_stats=1), TypeError, "return_stats must be a bool"),
        (lambda: ops.rms_norm(np.zeros((2, 3), np.int32)), TypeError, "x"),
        (lambda: ops.rms_norm(np.float64(1.0)), ValueError, "x"),
        (lambda: ops.rms_norm_backward(np.zeros((2, 4)), np.zeros((2, 3)), None, np.ones(2)),
         ValueError, r"dy must have the shape of x \(2, 3\)"),
        (lambda: ops.rms_norm_backward(np.zeros((2, 3)), np.zeros((2, 3)), None, np.ones(3)),
         ValueError, r"rstd must have the shape of x without its last axis, \(2,\)"),
        (lambda: ops.rms_norm_backward(np.zeros((2, 3)), np.zeros((2, 3)), np.ones(2), np.ones(2)),
         ValueError, "gamma"),
    ],
)
def test_rms_rejects_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
