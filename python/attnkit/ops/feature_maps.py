"""Feature maps for kernelized (linear) attention.

A feature map ``phi`` sends vectors of width d to D features so that ``phi(q) . phi(k)`` equals, or
estimates, a similarity ``sim(q, k)``; attention with that similarity then costs O(N) instead of
O(N^2) (see :func:`attnkit.ops.linear_attention`). Every map has one small interface:

- ``transform(x)``: the map itself, ``(..., n, d) -> (..., n, D)``;
- ``queries(x)`` / ``keys(x)``: the forms linear attention uses. They may differ from ``transform``
  by a factor that is the same for every key of a query (so it cancels in the attention average)
  and keeps the numbers in range;
- ``n_features_out(d)``; random maps also have ``redraw(random_state)`` and draw their weights from
  ``numpy.random.default_rng(random_state)`` when first used for a width d, so a seed gives the same
  features on every machine and ISA.
"""

import math

import numpy as np

from attnkit._random import gaussian_rows
from attnkit._validation import check_bool, check_int, check_ndim, check_real, float_array
from attnkit.ops.random_features import fused_features, projected_features

__all__ = [
    "EluFeatureMap",
    "FeatureMap",
    "PolynomialFeatureMap",
    "PositiveRandomFeatureMap",
    "RandomFourierFeatureMap",
    "ReluFeatureMap",
    "resolve_feature_map",
]

class FeatureMap:
    """Base class: ``queries`` and ``keys`` default to ``transform``."""

    #: True for maps whose inner product is a random estimate (drawn weights).
    random = False

    def n_features_out(self, d):
        raise NotImplementedError

    def transform(self, x):
        raise NotImplementedError

    def queries(self, x):
        return self.transform(x)

    def keys(self, x):
        return self.transform(x)

    def transform_backward(self, x, grad):
        """Gradient with respect to ``x`` of ``sum(transform(x) * grad)``."""
        raise NotImplementedError

    def queries_backward(self, x, grad):
        return self.transform_backward(x, grad)

    def keys_backward(self, x, grad):
        return self.transform_backward(x, grad)

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({params})"

    def _params(self):
        return {}

    @staticmethod
    def _checked(x):
        """``x`` as a float array of shape (..., d)."""
        x = float_array(x, "x")
        check_ndim(x, "x", 1, "(..., d)")
        return x

    def _checked_grad(self, x, grad):
        """``x`` (..., d) and ``grad`` of the shape of its features, (..., D), as float arrays."""
        x, grad = self._checked(x), float_array(grad, "grad")
        width = self.n_features_out(x.shape[-1])
        if grad.shape != x.shape[:-1] + (width,):
            raise ValueError(f"grad must have the shape of the features of x {x.shape}, "
                             f"{x.shape[:-1] + (width,)}, got {grad.shape}")
        return x, grad


class EluFeatureMap(FeatureMap):
    """``phi(x) = elu(x) + 1`` (Katharopoulos et al., 2020): positive, D = d."""

    def n_features_out(self, d):
        return d

    def transform(self, x):
        x = self._checked(x)
        # exp(min(x, 0)) + max(x, 0): the same values (NaN and +-inf included) as where(x > 0, x + 1,
        # exp(x)) in two fewer passes over memory.
        return np.exp(np.minimum(x, 0)) + np.maximum(x, 0)

    def transform_backward(self, x, grad):
        x, grad = self._checked_grad(x, grad)
        return grad * np.where(x > 0, 1, np.exp(np.minimum(x, 0)))


class ReluFeatureMap(FeatureMap):
    """``phi(x) = max(x, 0)``: non-negative, D = d. A query whose features are all zero sees nothing
    and gets zeros (see the ``eps`` guard of :func:`attnkit.ops.linear_attention`)."""

    def n_features_out(self, d):
        return d

    def transform(self, x):
        return np.maximum(self._checked(x), 0)

    def transform_backward(self, x, grad):
        x, grad = self._checked_grad(x, grad)
        return grad * (x > 0)


class PolynomialFeatureMap(FeatureMap):
    """Exact features of the polynomial kernel ``(dot(q, k) + c) ** degree``.

    ``phi(x) = [sqrt(C(p, i) c^(p-i)) x^(tensor i)]_{i=0..p}``, so ``phi(q) . phi(k)`` equals the
    kernel exactly (binomial expansion). D = sum_i d^i: 1 + d + d^2 for degree 2.

    Parameters
    ----------
    degree : int, default=2
        Polynomial degree p >= 1.
    c : float, default=1.0
        Offset, >= 0.
    """

    def __init__(self, degree=2, c=1.0):
        self.degree = check_int(degree, "degree", minimum=1)
        self.c = check_real(c, "c")
        if self.c < 0:
            raise ValueError(f"c must be >= 0 (the features take sqrt(c)), got {c}")

    def _params(self):
        return {"degree": self.degree, "c": self.c}

    def n_features_out(self, d):
        return sum(d**i for i in range(self.degree + 1))

    def _weight(self, i):
        return math.sqrt(math.comb(self.degree, i) * self.c ** (self.degree - i))

    def _row_map(self, d, dtype):
        """The map as the linear-attention kernels apply it, degree <= 2 (PolynomialMap in
        attnkit/linear_attention.h): (degree, c0, c1, c2)."""
        return (self.degree,) + tuple(self._weight(i) if i <= self.degree else 0.0 for i in range(3))

    def transform(self, x):
        x = self._checked(x)
        p, parts, power = self.degree, [], np.ones(x.shape[:-1] + (1,), x.dtype)
        for i in range(p + 1):
            weight = self._weight(i)
            parts.append(weight * power)
            if i < p:
                width = power.shape[-1] * x.shape[-1]  # spelled out: -1 cannot be inferred when there are no rows
                power = (power[..., :, None] * x[..., None, :]).reshape(x.shape[:-1] + (width,))
        return np.concatenate(parts, axis=-1).astype(x.dtype, copy=False)

    def transform_backward(self, x, grad):
        x, grad = self._checked_grad(x, grad)
        d, p = x.shape[-1], self.degree
        rows = x.reshape(math.prod(x.shape[:-1]), d)  # not -1: there may be no rows
        grad = grad.reshape(rows.shape[0], grad.shape[-1])
        dx, start = np.zeros_like(rows, dtype=np.result_type(rows, grad)), 1
        if dx.size == 0:  # no rows or no features: nothing to differentiate (and no -1 to infer)
            return dx.reshape(x.shape)
        for i in range(1, p + 1):
            weight = self._weight(i)
            g = grad[:, start:start + d**i].reshape((rows.shape[0],) + (d,) * i)
            start += d**i
            for m in range(i):  # d/dx of <g, x (x) ... (x) x>: x everywhere but slot m
                t = np.moveaxis(g, 1 + m, -1).reshape(rows.shape[0], d ** (i - 1), d)
                for _ in range(i - 1):
                    t = (t.reshape(rows.shape[0], d, -1) * rows[:, :, None]).sum(axis=1)
                dx += weight * t.reshape(rows.shape[0], d)
        return dx.reshape(x.shape)


class _RandomFeatureMap(FeatureMap):
    random = True

    def __init__(self, n_features, random_state, orthogonal):
        self.n_features = check_int(n_features, "n_features", minimum=1)
        self.random_state = random_state
        self.orthogonal = check_bool(orthogonal, "orthogonal")
        self._rng = np.random.default_rng(random_state)
        self._weights = {}

    def _draw(self, d):
        """(n_features, d) projection rows, from ``self._rng``."""
        raise NotImplementedError

    def redraw(self, random_state=None):
        """Draw new random weights (from ``random_state``, or from the map's generator)."""
        if random_state is not None:
            self._rng = np.random.default_rng(random_state)
        self._weights = {}
        return self

    def weights(self, d):
        """The (n_features, d) projection rows for inputs of width ``d`` (drawn on first use)."""
        d = check_int(d, "d", minimum=1)
        if d not in self._weights:
            self._weights[d] = self._draw(d)
        return self._weights[d]

    @staticmethod
    def _checked(x):
        x = FeatureMap._checked(x)
        if x.shape[-1] == 0:  # a projection of nothing: the random directions need a width
            raise ValueError(f"x must have at least one feature (d >= 1) for random features, got shape {x.shape}")
        return x

    def _project(self, x):
        x = self._checked(x)
        return x, x @ self.weights(x.shape[-1]).T.astype(x.dtype)


class RandomFourierFeatureMap(_RandomFeatureMap):
    """Random Fourier features (Rahimi & Recht, 2007) of the Gaussian kernel.

    ``phi(x) = sqrt(1/D) [sin(w_i . x), cos(w_i . x)]_{i<D}`` with ``w_i ~ N(0, sigma^-2 I)``, so that
    ``E[phi(q) . phi(k)] = exp(-|q - k|^2 / (2 sigma^2))``; 2D output features.

    With ``softmax_kernel=True`` each side is also multiplied by ``exp(|x|^2 / (2 sigma^2))``, so that
    ``phi(q) . phi(k)`` estimates ``exp(q . k / sigma^2)``: softmax attention's kernel when
    ``sigma^2 = sqrt(d)`` (the default sigma). The estimate can be negative; linear attention guards
    its denominator (see ``eps`` there). ``queries`` omits the query-side factor (it cancels).

    Parameters
    ----------
    n_features : int, default=128
        Number of frequencies D (the map outputs 2D features).
    sigma : float, optional
        Kernel bandwidth; default ``d ** 0.25`` (so ``sigma^2 = sqrt(d)``).
    random_state : int, numpy Generator or None
        Seed of the frequencies.
    orthogonal : bool, default=False
        Orthogonal random features (Yu et al., 2016): lower variance.
    softmax_kernel : bool, default=False
        Estimate ``exp(q . k / sigma^2)`` instead of the Gaussian kernel.
    """

    def __init__(self, n_features=128, sigma=None, random_state=None, orthogonal=False, softmax_kernel=False):
        super().__init__(n_features, random_state, orthogonal)
        self.sigma = None if sigma is None else check_real(sigma, "sigma", positive=True)
        self.softmax_kernel = check_bool(softmax_kernel, "softmax_kernel")

    def _params(self):
        return {"n_features": self.n_features, "sigma": self.sigma, "random_state": self.random_state,
                "orthogonal": self.orthogonal, "softmax_kernel": self.softmax_kernel}

    def n_features_out(self, d):
        return 2 * self.n_features

    def bandwidth(self, d):
        return self.sigma if self.sigma is not None else d**0.25

    def _draw(self, d):
        return gaussian_rows(self._rng, self.n_features, d, self.orthogonal) / self.bandwidth(d)

    def _features(self, x, with_norm_factor):
        x = self._checked(x)
        row_log = None
        if self.softmax_kernel and with_norm_factor:
            row_log = np.sum(x * x, axis=-1) / (2 * self.bandwidth(x.shape[-1]) ** 2)
        return projected_features(x, self.weights(x.shape[-1]).T, "sincos", scale=math.sqrt(1.0 / self.n_features),
                                  row_log=row_log)

    def transform(self, x):
        return self._features(x, True)

    def queries(self, x):
        return self._features(x, False)

    def _row_map(self, d, dtype):
        """The map as the linear-attention kernels apply it (ProjectedMap in attnkit/linear_attention.h):
        (w (d, m), sincos, scale, key_norm, query_norm, query_max)."""
        key_norm = 1 / (2 * self.bandwidth(d) ** 2) if self.softmax_kernel else 0.0
        w = np.ascontiguousarray(self.weights(d).T, dtype=dtype)
        return w, True, math.sqrt(1.0 / self.n_features), key_norm, 0.0, False

    def _backward(self, x, grad, with_norm_factor):
        x, grad = self._checked_grad(x, grad)
        phi = self._features(x, with_norm_factor)
        n = self.n_features
        sin, cos, g_sin, g_cos = phi[..., :n], phi[..., n:], grad[..., :n], grad[..., n:]
        dx = (g_sin * cos - g_cos * sin) @ self.weights(x.shape[-1]).astype(x.dtype)  # through z = x W^T
        if self.softmax_kernel and with_norm_factor:  # through exp(|x|^2 / 2 sigma^2)
            dx = dx + np.sum(grad * phi, axis=-1, keepdims=True) * x / self.bandwidth(x.shape[-1]) ** 2
        return dx

    def transform_backward(self, x, grad):
        return self._backward(x, grad, True)

    def queries_backward(self, x, grad):
        return self._backward(x, grad, False)


class PositiveRandomFeatureMap(_RandomFeatureMap):
    """Positive random features of the softmax kernel (Performer's FAVOR+, Choromanski et al., 2021).

    With ``u = scale * x`` and ``w_i ~ N(0, I)``: ``phi(x) = exp(w_i . u - |u|^2 / 2) / sqrt(m)``, so
    ``E[phi(q) . phi(k)] = exp(scale^2 q . k)``: softmax attention's kernel for the default
    ``scale = d ** -0.25``. Every feature is > 0, so attention weights are never negative.
    ``queries`` subtracts each row's largest exponent (Performer's stabiliser; the factor cancels);
    ``keys`` never exceed ``exp(|w|^2 / 2)`` and need none.

    Parameters
    ----------
    n_features : int, default=128
        Number of random features m.
    random_state : int, numpy Generator or None
        Seed of the projections; ``redraw`` draws new ones.
    orthogonal : bool, default=True
        Orthogonal random projections (lower variance).
    scale : float, optional
        Input scale; default ``d ** -0.25``.
    """

    def __init__(self, n_features=128, random_state=None, orthogonal=True, scale=None):
        super().__init__(n_features, random_state, orthogonal)
        self.scale = None if scale is None else check_real(scale, "scale", positive=True)

    def _params(self):
        return {"n_features": self.n_features, "random_state": self.random_state,
                "orthogonal": self.orthogonal, "scale": self.scale}

    def n_features_out(self, d):
        return self.n_features

    def _draw(self, d):
        return gaussian_rows(self._rng, self.n_features, d, self.orthogonal)

    def _input_scale(self, d):
        return self.scale if self.scale is not None else d**-0.25

    def _scaled(self, x):
        x = self._checked(x)
        return x * x.dtype.type(self._input_scale(x.shape[-1]))

    def _exponents(self, x):
        return self._project(self._scaled(x))

    def transform(self, x):
        u = self._scaled(x)
        return projected_features(u, self.weights(u.shape[-1]).T, "exp", scale=self.n_features**-0.5,
                                  row_log=-0.5 * np.sum(u * u, axis=-1))

    def queries(self, x):
        _, z = self._exponents(x)
        row_max = np.max(z, axis=-1) if z.shape[-1] else np.zeros(z.shape[:-1], z.dtype)
        return fused_features(z, "exp", scale=self.n_features**-0.5, row_log=-row_max)

    def keys(self, x):
        return self.transform(x)

    def _row_map(self, d, dtype):
        """The map as the linear-attention kernels apply it (ProjectedMap in attnkit/linear_attention.h):
        (w (d, m), sincos, scale, key_norm, query_norm, query_max), the input scale folded into w."""
        scale = self._input_scale(d)
        w = np.ascontiguousarray((self.weights(d) * scale).T, dtype=dtype)
        return w, False, self.n_features**-0.5, -0.5 * scale**2, 0.0, True

    def transform_backward(self, x, grad):
        x, grad = self._checked_grad(x, grad)
        u = self._scaled(x)
        gp = grad * self.transform(x)  # d phi / d u = phi (w - u)
        du = gp @ self.weights(u.shape[-1]).astype(u.dtype) - u * np.sum(gp, axis=-1, keepdims=True)
        return du * u.dtype.type(self._input_scale(u.shape[-1]))

    def queries_backward(self, x, grad):
        # The per-row stabiliser is held constant: the attention output does not depend on a
        # per-query factor, so this is the exact gradient of the attention output.
        x, grad = self._checked_grad(x, grad)
        u = self._scaled(x)
        du = (grad * self.queries(x)) @ self.weights(u.shape[-1]).astype(u.dtype)
        return du * u.dtype.type(self._input_scale(u.shape[-1]))


_NAMED = {"elu": EluFeatureMap, "relu": ReluFeatureMap, "polynomial": PolynomialFeatureMap}


def resolve_feature_map(feature_map):
    """A FeatureMap from a name ("elu", "relu", "polynomial") or an instance."""
    if isinstance(feature_map, FeatureMap):
        return feature_map
    if isinstance(feature_map, str) and feature_map in _NAMED:
        return _NAMED[feature_map]()
    raise ValueError(
        f"feature_map must be one of {sorted(_NAMED)} or a FeatureMap instance "
        f"(e.g. PositiveRandomFeatureMap(...)), got {feature_map!r}"
    )
