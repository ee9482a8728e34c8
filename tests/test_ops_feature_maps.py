"""Feature maps: exact kernels where they are exact, unbiased estimates where they are random."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit.ops.feature_maps import (
    EluFeatureMap,
    PolynomialFeatureMap,
    PositiveRandomFeatureMap,
    RandomFourierFeatureMap,
    ReluFeatureMap,
    resolve_feature_map,
)


def _pairs(seed, n, d, scale=1.0):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((n, d)), scale * rng.standard_normal((n, d))


@given(degree=st.integers(1, 3), c=st.floats(0, 3), d=st.integers(1, 9), seed=st.integers(0, 2**32 - 1))
def test_polynomial_inner_product_is_the_kernel_exactly(degree, c, d, seed):
    q, k = _pairs(seed, 5, d)
    fm = PolynomialFeatureMap(degree=degree, c=c)
    phi_q, phi_k = fm.transform(q), fm.transform(k)
    assert phi_q.shape == (5, fm.n_features_out(d))
    np.testing.assert_allclose(phi_q @ phi_k.T, (q @ k.T + c) ** degree, rtol=1e-10, atol=1e-10)


def test_polynomial_keeps_float32():
    x = np.ones((2, 3), np.float32)
    assert PolynomialFeatureMap().transform(x).dtype == np.float32


@given(seed=st.integers(0, 2**32 - 1))
def test_elu_and_relu_maps(seed):
    x = np.random.default_rng(seed).standard_normal((4, 7)) * 3
    elu = EluFeatureMap().transform(x)
    np.testing.assert_allclose(elu, np.where(x > 0, x + 1, np.exp(x)))
    assert np.all(elu > 0)
    np.testing.assert_array_equal(ReluFeatureMap().transform(x), np.maximum(x, 0))


def _kernel_error(fm, q, k, exact):
    est = np.sum(fm.transform(q) * fm.transform(k), axis=-1)
    return np.sqrt(np.mean((est - exact) ** 2)), est


@pytest.mark.parametrize("orthogonal", [False, True])
def test_rff_estimates_the_gaussian_kernel_with_error_falling_like_one_over_sqrt_d(orthogonal):
    q, k = _pairs(0, 400, 8, scale=0.5)
    sigma = 1.5
    exact = np.exp(-np.sum((q - k) ** 2, axis=-1) / (2 * sigma**2))
    scaled = []
    for n in (64, 256, 1024, 4096):
        errors = [_kernel_error(RandomFourierFeatureMap(n, sigma=sigma, random_state=s, orthogonal=orthogonal),
                                q, k, exact)[0] for s in range(3)]
        scaled.append(np.mean(errors) * math.sqrt(n))
    # error * sqrt(D) stays of the same size while D grows 64-fold (a fixed error would grow 8x)
    assert max(scaled) < 2.0 * min(scaled), scaled
    mean_est = np.mean([_kernel_error(RandomFourierFeatureMap(256, sigma=sigma, random_state=s), q, k, exact)[1]
                        for s in range(40)], axis=0)
    assert np.abs(mean_est - exact).mean() < 0.02  # unbiased: the average over draws converges


def test_rff_softmax_kernel_estimates_exp_of_scaled_dot_product():
    d = 16
    q, k = _pairs(1, 300, d, scale=0.4)
    exact = np.exp(np.sum(q * k, axis=-1) / math.sqrt(d))  # sigma^2 = sqrt(d) by default
    fm = RandomFourierFeatureMap(8192, random_state=0, softmax_kernel=True)
    err, _ = _kernel_error(fm, q, k, exact)
    assert err / exact.mean() < 0.05


def test_positive_features_are_positive_and_estimate_the_softmax_kernel():
    d = 16
    q, k = _pairs(2, 300, d, scale=0.5)
    exact = np.exp(np.sum(q * k, axis=-1) / math.sqrt(d))
    fm = PositiveRandomFeatureMap(4096, random_state=0)
    phi = fm.transform(q)
    assert phi.shape == (300, 4096) and np.all(phi > 0)
    # FAVOR+ estimates are heavy-tailed (a few pairs far off), so judge the typical pair
    _, est = _kernel_error(fm, q, k, exact)
    assert np.median(np.abs(est - exact) / exact) < 0.05
    assert np.all(fm.queries(q * 30) > 0) and np.all(np.isfinite(fm.queries(q * 30)))


@pytest.mark.parametrize("fm", [PositiveRandomFeatureMap(64, random_state=3),
                                RandomFourierFeatureMap(32, random_state=3, softmax_kernel=True)])
def test_queries_differ_from_transform_by_one_factor_per_row(fm):
    x = np.random.default_rng(4).standard_normal((5, 8))
    ratio = fm.transform(x) / fm.queries(x)
    np.testing.assert_allclose(ratio, ratio[:, :1] * np.ones_like(ratio), rtol=1e-9)
    np.testing.assert_allclose(fm.keys(x), fm.transform(x))


def test_random_maps_are_seeded_and_redrawable():
    x = np.random.default_rng(5).standard_normal((3, 6))
    a, b = PositiveRandomFeatureMap(32, random_state=7), PositiveRandomFeatureMap(32, random_state=7)
    np.testing.assert_array_equal(a.transform(x), b.transform(x))
    before = a.transform(x)
    a.redraw(8)
    assert not np.allclose(a.transform(x), before)
    a.redraw(7)
    np.testing.assert_array_equal(a.transform(x), before)


def test_orthogonal_rows_are_orthogonal_within_a_block():
    w = PositiveRandomFeatureMap(16, random_state=0, orthogonal=True).weights(8)
    gram = w[:8] @ w[:8].T
    np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_seed_same_features_on_every_isa(isa, dtype):
    x = np.random.default_rng(6).standard_normal((20, 12)).astype(dtype)
    # The weights come from NumPy's generator and the features match a float64 evaluation to float
    # rounding, whichever kernel variant runs.
    rff = RandomFourierFeatureMap(16, random_state=1)
    z = x.astype(np.float64) @ rff.weights(12).T
    atol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(rff.transform(x), np.hstack([np.sin(z), np.cos(z)]) / 4, rtol=0, atol=atol)
    favor = PositiveRandomFeatureMap(16, random_state=1)
    u = x.astype(np.float64) * 12**-0.25
    z = u @ favor.weights(12).T
    exact = np.exp(z - 0.5 * np.sum(u * u, axis=-1, keepdims=True)) / 4
    np.testing.assert_allclose(favor.transform(x), exact, rtol=2e-6 if dtype == np.float32 else 1e-13)


def test_resolve_and_errors():
    assert isinstance(resolve_feature_map("elu"), EluFeatureMap)
    fm = PositiveRandomFeatureMap(4)
    assert resolve_feature_map(fm) is fm
    with pytest.raises(ValueError, match="feature_map"):
        resolve_feature_map("softmax")
    with pytest.raises(ValueError, match="c must be >= 0"):
        PolynomialFeatureMap(c=-1)
    with pytest.raises(ValueError, match="degree"):
        PolynomialFeatureMap(degree=0)
    with pytest.raises(ValueError, match="n_features"):
        RandomFourierFeatureMap(0)
    with pytest.raises(ValueError, match="sigma"):
        RandomFourierFeatureMap(4, sigma=-1.0)
    with pytest.raises(TypeError, match="x must be a float32 or float64"):
        EluFeatureMap().transform(np.ones((2, 2), dtype=int))
    assert "n_features=4" in repr(fm)


@pytest.mark.parametrize("fm", [EluFeatureMap(), ReluFeatureMap(), PolynomialFeatureMap(2, 0.7),
                                PolynomialFeatureMap(3, 0.5), RandomFourierFeatureMap(7, random_state=0),
                                RandomFourierFeatureMap(7, random_state=0, softmax_kernel=True),
                                PositiveRandomFeatureMap(6, random_state=0)], ids=repr)
@pytest.mark.parametrize("role", ["transform", "keys"])
def test_backward_matches_finite_differences(fm, role):
    from attnkit.testing.gradcheck import check_grad

    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 5))
    g = rng.standard_normal(getattr(fm, role)(x).shape)
    analytic = getattr(fm, role + "_backward")(x, g)
    check_grad(lambda x: float(np.sum(getattr(fm, role)(x) * g)), {"x": x}, {"x": analytic}, atol=1e-7)
