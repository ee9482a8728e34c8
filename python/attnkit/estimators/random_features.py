"""RandomFourierFeatures: random features of the Gaussian (RBF) kernel as a scikit-learn transformer.

A faster drop-in for :class:`sklearn.kernel_approximation.RBFSampler`: projection, offset,
cos/sin/exp and scale are one fused, multi-threaded SIMD pass for inputs of up to 64 features (one
BLAS matmul and then that pass for wider ones; :func:`attnkit.ops.random_fourier_features`), where
RBFSampler makes a matmul and three single-threaded NumPy passes.
"""

import math
import numbers

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from attnkit._random import gaussian_rows, generator
from attnkit._validation import Interval, Options
from attnkit.estimators._jobs import fit_context, threaded
from attnkit.ops.random_features import fused_features, projected_features, random_fourier_features

__all__ = ["RandomFourierFeatures"]

_FLOAT_DTYPES = (np.float64, np.float32)  # the first is what other dtypes (int, float16) become


def _requested_dtype(dtype):
    """The ``dtype`` parameter as a numpy dtype, None when unset or invalid (fit reports the latter)."""
    try:
        return None if dtype is None else np.dtype(dtype)
    except (TypeError, ValueError):
        return None


def _squared_row_norms(X):
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1), dtype=X.dtype).reshape(-1)
    return np.einsum("ij,ij->i", X, X)


class RandomFourierFeatures(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Approximate the Gaussian (RBF) kernel's feature map with random features.

    ``transform(X) @ transform(Y).T`` estimates the kernel ``exp(-gamma |x - y|^2)`` without bias;
    its error shrinks like ``1 / sqrt(n_components)``. A linear model on these features
    approximates the kernel machine at linear cost. With ``kind="cos"`` this is
    :class:`sklearn.kernel_approximation.RBFSampler`'s map, computed faster (fused and
    multi-threaded); the features differ for the same seed (another random generator) but follow
    the same distribution.

    Parameters
    ----------
    n_components : int, default=100
        Number of output features D (for ``kind="sincos"`` it must be even: D/2 frequencies).

    gamma : float or "scale", default=1.0
        Kernel parameter, ``k(x, y) = exp(-gamma |x - y|^2)``, > 0. ``"scale"`` uses
        ``1 / (n_features * X.var())`` of the data seen in ``fit`` (as RBFSampler does).

    sigma : float, default=None
        Kernel bandwidth instead of ``gamma``: ``gamma = 1 / (2 sigma^2)``. Give one of the two: a
        ``sigma`` with a ``gamma`` other than its default 1.0 is an error in ``fit``.

    kind : {"cos", "sincos", "positive"}, default="cos"
        The map, with ``W ~ N(0, 2 gamma)`` of shape (n_features, n_freq):

        - ``"cos"``: ``sqrt(2 / D) cos(X W + b)``, ``b ~ U[0, 2 pi)``, D frequencies
          (RBFSampler's map, Rahimi & Recht 2007);
        - ``"sincos"``: ``sqrt(2 / D) [sin(X W), cos(X W)]``, D/2 frequencies; no random phase,
          hence a lower variance per feature;
        - ``"positive"``: ``exp(u W - 2 gamma |u|^2) / sqrt(D)`` with ``u = x - center_`` (the
          training mean), D frequencies; every feature is > 0 (positive random features, as in
          Performer's FAVOR+, Choromanski et al. 2021), so kernel estimates are never negative.
          A feature underflows to 0 only when ``2 gamma |u|^2`` passes ~700 (float64) or ~85
          (float32), far outside the training data in units of the bandwidth.

    orthogonal : bool, default=False
        Draw the frequencies in blocks of n_features mutually orthogonal directions with Gaussian
        norms (orthogonal random features, Yu et al. 2016): same expectation, lower variance.

    random_state : int, numpy.random.Generator, numpy.random.RandomState or None, default=None
        Seed of the frequencies and phases, drawn from ``numpy.random.default_rng(random_state)``
        (a RandomState instance gives that generator its seed). Pass an int for reproducible
        output; the same seed gives the same features on every machine and ISA.

    dtype : {None, numpy.float32, numpy.float64}, default=None
        Precision of the weights and the output. None: float32 when the data seen in ``fit`` is
        float32, float64 otherwise (as RBFSampler), and ``transform`` computes in the wider of the
        weights' and the data's dtypes. Given: weights, computation and output in that dtype.

    n_jobs : int or None, default=None
        Threads of attnkit's kernels during this estimator's calls (fit, transform, fit_transform): None leaves the
        current count (:func:`attnkit.set_num_threads`, ``OMP_NUM_THREADS``), -1 takes every CPU, -2 all
        but one; the count of before is restored when the call returns. The count is the calling thread's
        own: threads calling at once with different ``n_jobs`` each get theirs, and the process's count
        (:func:`attnkit.set_num_threads`) and other libraries' threads (NumPy's BLAS) are left alone.

    Attributes
    ----------
    random_weights_ : ndarray of shape (`n_features_in_`, n_freq)
        The frequencies W (n_freq = n_components, or n_components / 2 for ``"sincos"``).

    random_offset_ : ndarray of shape (n_components,)
        The phases b; only for ``kind="cos"``.

    center_ : ndarray of shape (`n_features_in_`,)
        The mean of the training data, subtracted before the map; only for ``kind="positive"``.

    gamma_ : float
        The kernel parameter in use (from ``gamma``, ``"scale"`` or ``sigma``).

    n_features_in_ : int
        Number of features seen during `fit`.

    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during `fit`. Defined only when `X` has feature names that
        are all strings.

    See Also
    --------
    sklearn.kernel_approximation.RBFSampler : The same ``"cos"`` map, in NumPy.
    sklearn.kernel_approximation.Nystroem : A data-dependent kernel approximation.
    attnkit.ops.random_fourier_features : The fused transform this estimator calls.
    attnkit.feature_maps.RandomFourierFeatureMap : Random features for linear attention.

    Notes
    -----
    All three maps are unbiased: ``E[phi(x) . phi(y)] = exp(-gamma |x - y|^2)``. For ``"cos"`` and
    ``"sincos"`` this is Bochner's theorem (W is drawn from the kernel's Fourier transform); for
    ``"positive"``, ``E[exp(w . (x + y))] = exp(gamma |x + y|^2)`` for ``w ~ N(0, 2 gamma I)``.
    The variance of one positive feature product is ``exp(8 gamma u . v) - k(x, y)^2``: it grows
    with the distance from the origin, which is why ``"positive"`` centers the data first (the
    kernel depends on ``x - y`` only, so centering leaves the estimate unbiased). Even so it is
    the noisiest of the three for large ``gamma |u|^2``; its use is features that must be > 0.
    Sparse input (CSR, or any format converted to CSR) is projected without densifying it.

    References
    ----------
    A. Rahimi and B. Recht, "Random Features for Large-Scale Kernel Machines", NIPS 2007.

    F. X. Yu et al., "Orthogonal Random Features", NIPS 2016.

    K. Choromanski et al., "Rethinking Attention with Performers", ICLR 2021.

    Examples
    --------
    >>> from sklearn.linear_model import RidgeClassifier
    >>> from attnkit import RandomFourierFeatures
    >>> X = [[0, 0], [1, 1], [1, 0], [0, 1]]
    >>> y = [0, 0, 1, 1]
    >>> rff = RandomFourierFeatures(n_components=100, gamma=1.0, random_state=1)
    >>> X_features = rff.fit_transform(X)
    >>> X_features.shape
    (4, 100)
    >>> clf = RidgeClassifier(alpha=1e-3).fit(X_features, y)
    >>> clf.score(X_features, y)
    1.0
    >>> rff.get_feature_names_out()[:3].tolist()
    ['randomfourierfeatures0', 'randomfourierfeatures1', 'randomfourierfeatures2']
    """

    _parameter_constraints = {
        "n_components": [Interval(numbers.Integral, 1, None, closed="left")],
        "gamma": [Interval(numbers.Real, 0, None, closed="neither"), Options(str, {"scale"})],
        "sigma": [None, Interval(numbers.Real, 0, None, closed="neither")],
        "kind": [Options(str, {"cos", "sincos", "positive"})],
        "orthogonal": ["boolean"],
        "random_state": ["random_state"],
        "dtype": [None, "float dtype"],
    }

    def __init__(self, n_components=100, *, gamma=1.0, sigma=None, kind="cos", orthogonal=False,
                 random_state=None, dtype=None, n_jobs=None):
        self.n_components = n_components
        self.gamma = gamma
        self.sigma = sigma
        self.kind = kind
        self.orthogonal = orthogonal
        self.random_state = random_state
        self.dtype = dtype
        self.n_jobs = n_jobs

    @fit_context
    def fit(self, X: ArrayLike, y: object = None) -> "RandomFourierFeatures":
        """Draw the random frequencies (and phases) for the features of X.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; only its number of features (and its variance for ``gamma="scale"``,
            its dtype for ``dtype=None``) is used.

        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted transformer.
        """
        return self._fit(X)

    @threaded
    def transform(self, X: ArrayLike) -> np.ndarray:
        """Map X to the random features.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Data to transform.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components)
            The features; float32 or float64 (see ``dtype``).
        """
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=_FLOAT_DTYPES, reset=False)
        return self._transform(X)

    def _fit(self, X):
        if self.sigma is not None and self.gamma != 1.0:
            raise ValueError(f"give gamma or sigma, not both: got gamma={self.gamma!r} and sigma={self.sigma!r}")
        if self.kind == "sincos" and self.n_components % 2:
            raise ValueError(f"kind='sincos' needs an even n_components (sin and cos of n_components / 2 "
                             f"frequencies), got {self.n_components}")
        X = validate_data(self, X, accept_sparse="csr", dtype=_FLOAT_DTYPES)
        requested = _requested_dtype(self.dtype)
        dtype = X.dtype if requested is None else requested
        self.gamma_ = self._gamma(X)
        n_freq = self.n_components // 2 if self.kind == "sincos" else self.n_components
        rng = generator(self.random_state)
        directions = gaussian_rows(rng, n_freq, X.shape[1], self.orthogonal)
        self.random_weights_ = np.ascontiguousarray(math.sqrt(2.0 * self.gamma_) * directions.T, dtype=dtype)
        if self.kind == "cos":
            self.random_offset_ = rng.uniform(0.0, 2.0 * np.pi, n_freq).astype(dtype)
        elif hasattr(self, "random_offset_"):
            del self.random_offset_  # from an earlier fit with kind="cos"
        if self.kind == "positive":
            self.center_ = np.asarray(X.mean(axis=0, dtype=np.float64)).reshape(-1).astype(dtype)
        elif hasattr(self, "center_"):
            del self.center_
        # Fitted state read by transform, so that set_params without a refit changes nothing.
        self._kind, self._n_features_out, self._dtype = self.kind, self.n_components, requested
        return self

    def _gamma(self, X):
        if self.sigma is not None:
            return 1.0 / (2.0 * float(self.sigma) ** 2)
        if self.gamma != "scale":
            return float(self.gamma)
        if sp.issparse(X):
            variance = X.multiply(X).mean(dtype=np.float64) - X.mean(dtype=np.float64) ** 2
        else:
            variance = X.var(dtype=np.float64)
        return 1.0 / (X.shape[1] * variance) if variance > 0 else 1.0

    def _transform(self, X):
        dtype = np.result_type(X.dtype, self.random_weights_.dtype) if self._dtype is None else self._dtype
        X = X.astype(dtype, copy=False)
        weights = self.random_weights_.astype(dtype, copy=False)
        kind, n_out = self._kind, self._n_features_out
        offsets = self.random_offset_ if kind == "cos" else None
        if kind != "positive" and not sp.issparse(X):
            return random_fourier_features(X, weights, offsets, kind=kind)
        if kind == "positive":
            return self._positive_features(X, weights)
        # The fused pass works in place on the projections; sparse @ dense is a dense array.
        return fused_features(np.asarray(X @ weights), kind, scale=math.sqrt(2.0 / n_out), offset=offsets)

    def _positive_features(self, X, weights):
        center = self.center_.astype(X.dtype, copy=False)
        if sp.issparse(X):  # u W = x W - c W and |u|^2 = |x|^2 - 2 x.c + |c|^2, keeping X sparse
            z = np.asarray(X @ weights)
            offset = -(center @ weights)
            squared_norms = np.maximum(_squared_row_norms(X) - 2 * (X @ center) + center @ center, 0)
            return fused_features(z, "exp", scale=1.0 / math.sqrt(self._n_features_out), offset=offset,
                                  row_log=-2.0 * self.gamma_ * squared_norms)
        u = X - center
        return projected_features(u, weights, "exp", scale=1.0 / math.sqrt(self._n_features_out),
                                  row_log=-2.0 * self.gamma_ * _squared_row_norms(u))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        requested = _requested_dtype(self.dtype)
        tags.transformer_tags.preserves_dtype = ["float64", "float32"] if requested is None else [requested.name]
        return tags
