"""RandomFourierFeatures: the scikit-learn contract, the kernel it estimates, RBFSampler parity.

scikit-learn's ``check_array_api_input`` skips itself unless SCIPY_ARRAY_API=1 is set (it passes with it):
that skip is scikit-learn's own, not one of ours. With pandas installed, scikit-learn's pandas checks
and ``test_set_output_pandas`` run too (they pass with pandas 3.1).
"""

import doctest
import math
import numbers
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.exceptions import NotFittedError
from sklearn.kernel_approximation import RBFSampler
from sklearn.linear_model import RidgeClassifier
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

import attnkit
from attnkit import _core
from attnkit._validation import Interval, InvalidParameterError, Options, validate_params
from attnkit.estimators import random_features
from attnkit.estimators.random_features import RandomFourierFeatures

KINDS = ("cos", "sincos", "positive")

# scikit-learn's checks set n_components=1 before these; "sincos" needs an even n_components (one
# sin and one cos per frequency) and says so in fit. The same checks pass for "cos", which shares
# the code path (ops.random_fourier_features) apart from the output layout.
_SINCOS_ODD_N_COMPONENTS = {
    name: "sklearn sets n_components=1; kind='sincos' rejects an odd n_components by design"
    for name in (
        "check_dont_overwrite_parameters",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_fit2d_1sample",
        "check_fit2d_1feature",
        "check_fit2d_predict1d",
    )
}


def _expected_failed_checks(estimator):
    return _SINCOS_ODD_N_COMPONENTS if estimator.kind == "sincos" else {}


@parametrize_with_checks(
    [
        RandomFourierFeatures(),
        RandomFourierFeatures(kind="sincos", orthogonal=True),
        RandomFourierFeatures(kind="positive"),
        RandomFourierFeatures(kind="positive", orthogonal=True, sigma=2.0),
        RandomFourierFeatures(orthogonal=True, gamma="scale", dtype=np.float32),
    ],
    expected_failed_checks=_expected_failed_checks,
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_docstring_example_runs():
    result = doctest.testmod(random_features, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_exported_from_the_package():
    assert attnkit.RandomFourierFeatures is RandomFourierFeatures
    assert "RandomFourierFeatures" in attnkit.__all__


# ------------------------------------------------------------------------- the kernel estimate


def _data(n=50, f=8, scale=0.5, seed=0):
    return scale * np.random.default_rng(seed).standard_normal((n, f))


def _gaussian_kernel(X, gamma):
    sq = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    return np.exp(-gamma * sq)


def _estimate(X, n_components, gamma, kind, orthogonal, seed):
    """The kernel matrix estimated by one draw of the features."""
    F = RandomFourierFeatures(n_components, gamma=gamma, kind=kind, orthogonal=orthogonal,
                              random_state=seed).fit_transform(X)
    return F @ F.T


def _single_feature_error(kind, X, gamma):
    """RMS over pairs of the standard deviation of one i.i.d. feature's kernel estimate (times sqrt(D)).

    cos: Var[2 cos(w.x + b) cos(w.y + b)] = 1 - k^2 + k^4 / 2; sincos (a pair per frequency, D/2 of
    them): 2 ((1 + k^4) / 2 - k^2) = (1 - k^2)^2; positive: exp(8 gamma u.v) - k^2 with u, v centered.
    """
    k = _gaussian_kernel(X, gamma)
    u = X - X.mean(axis=0)
    variance = {
        "cos": 1 - k**2 + k**4 / 2,
        "sincos": (1 - k**2) ** 2,
        "positive": np.exp(8 * gamma * u @ u.T) - k**2,
    }[kind]
    return math.sqrt(np.mean(variance))


@pytest.mark.parametrize("orthogonal", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_kernel_error_shrinks_like_one_over_sqrt_d(kind, orthogonal):
    X, gamma, seeds = _data(), 0.1, range(8)
    exact = _gaussian_kernel(X, gamma)
    scaled = []
    for n_components in (64, 256, 1024, 4096):
        mse = np.mean([np.mean((_estimate(X, n_components, gamma, kind, orthogonal, seed) - exact) ** 2)
                       for seed in seeds])
        scaled.append(math.sqrt(mse * n_components) / _single_feature_error(kind, X, gamma))
    # error * sqrt(D) relative to i.i.d. theory: ~1 for i.i.d., lower for orthogonal. Sweeping 10
    # seed sets, the worst spread (max / min over D) was 2.4 (positive, whose estimate is
    # heavy-tailed) and the extremes 0.43 and 2.3.
    assert max(scaled) / min(scaled) < 3.0, scaled
    assert 0.3 < min(scaled) and max(scaled) < 3.0, scaled


def test_orthogonal_features_lower_the_error():
    X, gamma = _data(), 0.1
    exact = _gaussian_kernel(X, gamma)

    def rms(orthogonal):
        return math.sqrt(np.mean([np.mean((_estimate(X, 256, gamma, "sincos", orthogonal, seed) - exact) ** 2)
                                  for seed in range(8)]))

    assert rms(True) < 0.8 * rms(False)


@pytest.mark.parametrize("orthogonal", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_kernel_estimate_is_unbiased(kind, orthogonal):
    X, gamma, n_seeds = _data(n=12), 0.1, 400
    estimates = np.array([_estimate(X, 64, gamma, kind, orthogonal, seed) for seed in range(n_seeds)])
    standard_error = estimates.std(axis=0) / math.sqrt(n_seeds)
    bias = np.abs(estimates.mean(axis=0) - _gaussian_kernel(X, gamma))
    assert np.all(bias <= 5 * standard_error + 1e-12)
    assert np.max(bias) < 0.05  # and the standard errors are small: the test has power


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spread", [0.5, 2.0, 8.0])  # gamma |x - y|^2 between two typical points
@pytest.mark.parametrize("scale", [1e-2, 1.0, 1e2])
def test_positive_features_are_positive(dtype, spread, scale):
    f = 16
    X = (_data(n=300, f=f, scale=scale, seed=1) + 5 * scale).astype(dtype)
    gamma = spread / (2 * f * scale**2)
    rff = RandomFourierFeatures(512, gamma=gamma, kind="positive", random_state=0).fit(X)
    features = rff.transform(X)
    assert features.dtype == dtype and np.all(features > 0) and np.all(np.isfinite(features))
    # and on new points, half as far again from the training mean
    assert np.all(rff.transform(1.5 * X - 0.5 * X.mean(axis=0)) > 0)


def _numpy_features(rff, X):
    """The documented maps, in float64 NumPy, from the fitted attributes."""
    W = rff.random_weights_.astype(np.float64)
    D = rff.n_components
    if rff.kind == "cos":
        return math.sqrt(2 / D) * np.cos(X @ W + rff.random_offset_.astype(np.float64))
    if rff.kind == "sincos":
        return math.sqrt(2 / D) * np.hstack([np.sin(X @ W), np.cos(X @ W)])
    u = X - rff.center_.astype(np.float64)
    return np.exp(u @ W - 2 * rff.gamma_ * np.sum(u * u, axis=1, keepdims=True)) / math.sqrt(D)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_features_on_every_isa(isa, kind, dtype):
    X = _data(n=200, f=16, scale=1.0, seed=3)
    rff = RandomFourierFeatures(300, gamma=0.2, kind=kind, random_state=42, dtype=dtype).fit(X)
    weights = np.random.default_rng(42).standard_normal((rff.random_weights_.shape[1], 16)).T
    np.testing.assert_allclose(rff.random_weights_, math.sqrt(0.4) * weights, rtol=1e-6)
    features = rff.transform(X)
    np.testing.assert_allclose(features, _on_baseline_isa(lambda: rff.transform(X)), rtol=1e-6, atol=1e-6)
    # and the documented map: float32 rounds the projections x W (|x W| up to ~10), so e^(x W) is
    # exact to ~1e-6 relative and cos(x W) to ~1e-6 absolute
    tolerance = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(features, _numpy_features(rff, X), rtol=4 * tolerance, atol=tolerance)


def _on_baseline_isa(fn):
    previous = _core.get_isa()
    _core.set_isa("baseline")
    try:
        return fn()
    finally:
        _core.set_isa(previous)


def test_cos_is_rbfsamplers_map():
    X = _data(n=40, f=6, scale=1.0)
    ours = RandomFourierFeatures(128, gamma=0.3, random_state=0).fit(X)
    theirs = RBFSampler(n_components=128, gamma=0.3, random_state=0).fit(X)
    theirs.random_weights_, theirs.random_offset_ = ours.random_weights_, ours.random_offset_
    np.testing.assert_allclose(ours.transform(X), theirs.transform(X), rtol=0, atol=1e-12)


# --------------------------------------------------------------------- RBFSampler's accuracy


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return train_test_split(X / 16, y, test_size=0.3, random_state=0, stratify=y)


@pytest.mark.parametrize("kind", KINDS)
def test_linear_model_on_digits_matches_rbfsampler(digits, kind):
    X_train, X_test, y_train, y_test = digits

    def accuracy(make):
        scores = []
        for seed in range(3):
            model = make_pipeline(make(seed), RidgeClassifier(alpha=1e-3)).fit(X_train, y_train)
            scores.append(model.score(X_test, y_test))
        return np.mean(scores)

    baseline = accuracy(lambda s: RBFSampler(n_components=1000, gamma=0.05, random_state=s))
    ours = accuracy(lambda s: RandomFourierFeatures(1000, gamma=0.05, kind=kind, random_state=s))
    assert baseline > 0.97
    assert ours >= baseline - 0.01, (ours, baseline)


# --------------------------------------------------------------------------- sklearn plumbing


@pytest.mark.parametrize("kind", KINDS)
def test_pickle_round_trip(kind):
    X = _data()
    rff = RandomFourierFeatures(64, kind=kind, random_state=0).fit(X)
    restored = pickle.loads(pickle.dumps(rff))
    np.testing.assert_array_equal(restored.transform(X), rff.transform(X))


def test_clone_and_params():
    rff = RandomFourierFeatures(32, sigma=1.5, kind="positive", orthogonal=True, random_state=3,
                                dtype=np.float32, n_jobs=2)
    params = rff.get_params()
    assert params == {"n_components": 32, "gamma": 1.0, "sigma": 1.5, "kind": "positive",
                      "orthogonal": True, "random_state": 3, "dtype": np.float32, "n_jobs": 2}
    rff.fit(_data())
    copy = clone(rff)
    assert copy.get_params() == params and not hasattr(copy, "random_weights_")
    assert copy.set_params(n_components=8, kind="cos") is copy
    assert copy.fit(_data()).transform(_data()).shape == (50, 8)


def test_fit_is_reproducible_and_seeds_matter():
    X = _data()
    a = RandomFourierFeatures(16, random_state=np.random.default_rng(5)).fit_transform(X)
    b = RandomFourierFeatures(16, random_state=5).fit_transform(X)
    np.testing.assert_array_equal(a, b)
    c = RandomFourierFeatures(16, random_state=np.random.RandomState(5)).fit_transform(X)
    d = RandomFourierFeatures(16, random_state=np.random.RandomState(5)).fit_transform(X)
    np.testing.assert_array_equal(c, d)
    assert not np.allclose(RandomFourierFeatures(16).fit_transform(X), RandomFourierFeatures(16).fit_transform(X))


def test_refit_with_another_kind_drops_the_old_attributes():
    X = _data()
    rff = RandomFourierFeatures(16, random_state=0).fit(X)
    assert hasattr(rff, "random_offset_") and not hasattr(rff, "center_")
    rff.set_params(kind="positive").fit(X)
    assert hasattr(rff, "center_") and not hasattr(rff, "random_offset_")
    rff.set_params(kind="sincos").fit(X)
    assert not hasattr(rff, "center_") and not hasattr(rff, "random_offset_")
    assert rff.random_weights_.shape == (8, 8)


def test_transform_uses_the_fitted_state_not_later_params():
    X = _data()
    rff = RandomFourierFeatures(16, random_state=0).fit(X)
    before = rff.transform(X)
    rff.set_params(n_components=4, kind="positive", dtype=np.float32, gamma=9.0)
    np.testing.assert_array_equal(rff.transform(X), before)


def test_pipeline_and_grid_search(digits):
    X_train, X_test, y_train, y_test = digits
    pipe = make_pipeline(RandomFourierFeatures(300, random_state=0), RidgeClassifier(alpha=1e-3))
    search = GridSearchCV(pipe, {"randomfourierfeatures__gamma": [0.02, 0.05],
                                 "randomfourierfeatures__kind": ["cos", "sincos"]}, cv=3, n_jobs=1)
    search.fit(X_train[:600], y_train[:600])
    assert search.best_score_ > 0.9 and search.score(X_test, y_test) > 0.9


def test_feature_names_out():
    rff = RandomFourierFeatures(4, random_state=0).fit(_data())
    assert rff.get_feature_names_out().tolist() == [f"randomfourierfeatures{i}" for i in range(4)]


def test_set_output_pandas():
    try:
        import pandas as pd
    except ImportError:
        pytest.skip("pandas is not installed (it is optional); set_output(transform='pandas') needs it")
    X = pd.DataFrame(_data(n=10, f=3), columns=["a", "b", "c"])
    rff = RandomFourierFeatures(6, random_state=0).set_output(transform="pandas").fit(X)
    out = rff.transform(X)
    assert isinstance(out, pd.DataFrame) and out.shape == (10, 6)
    assert list(out.columns) == [f"randomfourierfeatures{i}" for i in range(6)]
    assert list(rff.feature_names_in_) == ["a", "b", "c"]


# ------------------------------------------------------------------------------ dtypes, sparse


@pytest.mark.parametrize(
    ("param", "fit_dtype", "transform_dtype", "expected"),
    [
        (None, np.float32, np.float32, np.float32),
        (None, np.float64, np.float64, np.float64),
        (None, np.int64, np.int64, np.float64),
        (None, np.float16, np.float16, np.float64),
        (None, np.float32, np.float64, np.float64),  # like RBFSampler: the wider of weights and X
        (np.float32, np.float64, np.float64, np.float32),
        ("float64", np.float32, np.float32, np.float64),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_output_dtype(kind, param, fit_dtype, transform_dtype, expected):
    X = _data(f=4) * 4
    rff = RandomFourierFeatures(8, kind=kind, dtype=param, random_state=0).fit(X.astype(fit_dtype))
    out = rff.transform(X.astype(transform_dtype))
    assert out.dtype == expected
    assert rff.random_weights_.dtype == (np.float32 if (param or fit_dtype) in (np.float32, "float32")
                                         else np.float64)


@pytest.mark.parametrize("container", [sp.csr_matrix, sp.csc_array, sp.coo_matrix])
@pytest.mark.parametrize("kind", KINDS)
def test_sparse_input_matches_dense(kind, container):
    X = _data(n=30, f=10, scale=1.0)
    X[np.abs(X) < 0.8] = 0
    dense_fit = RandomFourierFeatures(32, gamma=0.2, kind=kind, random_state=0).fit(X)
    sparse_fit = RandomFourierFeatures(32, gamma=0.2, kind=kind, random_state=0).fit(container(X))
    expected = dense_fit.transform(X)
    np.testing.assert_allclose(dense_fit.transform(container(X)), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sparse_fit.transform(X), expected, rtol=1e-12, atol=1e-12)


def test_gamma_scale_and_sigma():
    X = _data(f=5)
    assert RandomFourierFeatures(gamma="scale").fit(X).gamma_ == pytest.approx(1 / (5 * X.var()))
    assert RandomFourierFeatures(gamma="scale").fit(sp.csr_matrix(X)).gamma_ == pytest.approx(1 / (5 * X.var()))
    assert RandomFourierFeatures(gamma="scale").fit(np.ones((4, 2))).gamma_ == 1.0
    assert RandomFourierFeatures(sigma=2.0).fit(X).gamma_ == pytest.approx(1 / 8)
    assert RandomFourierFeatures(gamma=0.3).fit(X).gamma_ == 0.3


# ------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"n_components": 0}, r"'n_components' parameter of RandomFourierFeatures must be an int in the range "
                              r"\[1, inf\)\. Got 0 instead"),
        ({"n_components": 10.0}, "'n_components' parameter"),
        ({"gamma": 0.0}, r"'gamma' parameter .* must be a float in the range \(0, inf\) or a str among "
                         r"\{'scale'\}\. Got 0.0"),
        ({"gamma": float("nan")}, "'gamma' parameter"),
        ({"gamma": "auto"}, "'gamma' parameter"),
        ({"sigma": -1}, "'sigma' parameter .* must be None or a float"),
        ({"kind": "sin"}, r"'kind' parameter .* must be a str among \{'cos', 'positive', 'sincos'\}"),
        ({"orthogonal": 1}, "'orthogonal' parameter .* must be a bool"),
        ({"random_state": "seed"}, "'random_state' parameter"),
        ({"dtype": np.int32}, "'dtype' parameter .* must be None or a float32 or float64 dtype"),
        ({"dtype": "helloworld"}, "'dtype' parameter"),
    ],
)
def test_invalid_parameters(params, match):
    rff = RandomFourierFeatures(**params)  # the constructor only stores
    with pytest.raises(InvalidParameterError, match=match):
        rff.fit(_data())


def test_invalid_parameter_error_is_a_value_and_a_type_error():
    assert issubclass(InvalidParameterError, ValueError) and issubclass(InvalidParameterError, TypeError)


def test_gamma_and_sigma_together():
    with pytest.raises(ValueError, match="give gamma or sigma, not both"):
        RandomFourierFeatures(gamma=0.5, sigma=1.0).fit(_data())


def test_sincos_needs_an_even_n_components():
    with pytest.raises(ValueError, match="kind='sincos' needs an even n_components"):
        RandomFourierFeatures(7, kind="sincos").fit(_data())


def test_bad_input():
    X = _data(f=5)
    with pytest.raises(NotFittedError):
        RandomFourierFeatures().transform(X)
    rff = RandomFourierFeatures(8).fit(X)
    with pytest.raises(ValueError, match="X has 3 features, but RandomFourierFeatures is expecting 5"):
        rff.transform(X[:, :3])
    bad = X.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        RandomFourierFeatures().fit(bad)
    with pytest.raises(ValueError, match="Input X contains NaN"):
        rff.transform(bad)
    with pytest.raises(ValueError, match="Expected 2D array"):
        rff.transform(X[0])


# -------------------------------------------------------------- the declarative validator itself


def test_interval_and_options():
    at_least_one = Interval(numbers.Integral, 1, None, closed="left")
    assert 1 in at_least_one and np.int64(5) in at_least_one
    assert 0 not in at_least_one and 2.0 not in at_least_one and True not in at_least_one
    unit = Interval(numbers.Real, 0, 1, closed="right")
    assert 1 in unit and 0.5 in unit and 0 not in unit and float("nan") not in unit
    assert str(unit) == "a float in the range (0, 1]"
    kinds = Options(str, {"a", "b"})
    assert "a" in kinds and "c" not in kinds and np.array([1.0]) not in kinds and [] not in kinds
    assert str(kinds) == "a str among {'a', 'b'}"
    with pytest.raises(ValueError, match="closed"):
        Interval(numbers.Real, 0, 1, closed="open")


def test_validate_params_accepts_any_listed_constraint():
    constraints = {"x": [None, "boolean", Interval(numbers.Real, 0, None, closed="left")]}
    for value in (None, True, np.bool_(False), 0, 2.5):
        validate_params({"x": value}, constraints, caller="f")
    with pytest.raises(InvalidParameterError, match=r"The 'x' parameter of f must be None, a bool or a float in "
                                                   r"the range \[0, inf\)\. Got -1 instead\."):
        validate_params({"x": -1}, constraints, caller="f")
