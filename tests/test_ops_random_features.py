"""ops.random_features: random_fourier_features (the fused transform) against the NumPy reference on every
ISA; projected_features (its in-kernel projection) against fused_features over a BLAS projection."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit import reference
from attnkit.ops import random_fourier_features
from attnkit.ops.random_features import fused_features, projected_features


@given(seed=st.integers(0, 2**32 - 1), lead=st.sampled_from([(), (5,), (3, 4)]), f=st.integers(1, 40),
       n_freq=st.integers(1, 70), kind=st.sampled_from(["cos", "sincos"]), offsets=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]), spread=st.sampled_from([0.1, 1.0, 30.0]))
def test_matches_reference(isa, seed, lead, f, n_freq, kind, offsets, dtype, spread):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(lead + (f,)).astype(dtype)
    w = (spread * rng.standard_normal((f, n_freq))).astype(dtype)
    b = rng.uniform(0, 2 * np.pi, n_freq).astype(dtype) if offsets else None
    out = random_fourier_features(x, w, b, kind=kind)
    expected = reference.random_fourier_features(x, w, b, kind=kind)
    assert out.shape == lead + ((2 if kind == "sincos" else 1) * n_freq,) and out.dtype == dtype
    # float32 arguments reach |x W| ~ 30 * sqrt(f) * 4: absolute error ~ eps * |argument|
    atol = (2e-5 * spread * np.sqrt(f) + 1e-6) if dtype == np.float32 else 1e-12 * spread * np.sqrt(f)
    np.testing.assert_allclose(out, expected, rtol=0, atol=atol * np.sqrt(2.0 / n_freq) * 4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("f", [1, 96])  # the in-kernel projection (f <= 64) and the BLAS route
def test_huge_arguments_are_reduced_exactly(isa, dtype, f):
    # Past the SIMD reduction's range (1e5 in float32, 1e9 in float64) the lanes go to the C library;
    # before the fix, float32 gave +-inf from 3e9 on and wrong values from 1e7.
    values = np.array([0.5, -3.0, 1e4, 1e6, 1e7, -3e9, 1e12, 1e20, 3e38], dtype=dtype)
    x = np.zeros((values.size, f), dtype=dtype)
    x[:, 0] = values
    weights = np.zeros((f, 3), dtype=dtype)
    weights[0] = 1.0
    out = random_fourier_features(x, weights, kind="sincos") * np.sqrt(3.0)
    np.testing.assert_allclose(out[:, 0], np.sin(values), rtol=0, atol=4 * np.finfo(dtype).eps)
    np.testing.assert_allclose(out[:, 3], np.cos(values), rtol=0, atol=4 * np.finfo(dtype).eps)


def test_non_finite_input_gives_nan_not_garbage():
    x = np.array([[np.nan, 1.0], [np.inf, 0.0], [1.0, 2.0]])
    out = random_fourier_features(x, np.ones((2, 3)), kind="sincos")
    assert np.all(np.isnan(out[:2])) and np.all(np.isfinite(out[2]))


def test_errors():
    x = np.ones((4, 3))
    with pytest.raises(ValueError, match=r"weights must have shape \(f, D\)"):
        random_fourier_features(x, np.ones((2, 5)))
    with pytest.raises(ValueError, match="kind"):
        random_fourier_features(x, np.ones((3, 5)), kind="tan")
    with pytest.raises(ValueError, match="offsets must have shape"):
        random_fourier_features(x, np.ones((3, 5)), np.ones(4))
    with pytest.raises(TypeError, match="x must be a float32 or float64"):
        random_fourier_features(np.ones((4, 3), dtype=complex), np.ones((3, 5)))


@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 5, 6, 13, 700]), f=st.sampled_from([0, 1, 7, 64, 65, 97]),
       D=st.sampled_from([0, 1, 9, 16, 33, 70]), kind=st.sampled_from(["cos", "sincos", "exp"]),
       offset=st.booleans(), row_log=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]))
def test_projected_features_equal_the_sweep_over_a_blas_projection(isa, seed, n, f, D, kind, offset, row_log,
                                                                    dtype):
    # Both routes of projected_features (the kernel's own projection up to f = 64, BLAS beyond),
    # row blocks with and without a tail, panels with and without one, threads from n = 700.
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((n, f)).astype(dtype), rng.standard_normal((f, D)).astype(dtype) / 4
    b = rng.uniform(-1, 1, D).astype(dtype) if offset else None
    rl = rng.uniform(-2, 1, n).astype(dtype) if row_log else None
    out = projected_features(x, w, kind, scale=0.3, offset=b, row_log=rl)
    expected = fused_features(x.astype(np.float64) @ w.astype(np.float64), kind, scale=0.3,
                              offset=None if b is None else b.astype(np.float64),
                              row_log=None if rl is None else rl.astype(np.float64))
    assert out.shape == (n, D * (2 if kind == "sincos" else 1)) and out.dtype == dtype
    tol = 5e-6 * max(1.0, math.sqrt(f)) if dtype == np.float32 else 1e-12 * max(1.0, math.sqrt(f))
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)
