"""Central finite differences, to check hand-written backward passes in float64.

The arrays to differentiate are perturbed **in place**, one entry at a time, so they may be a
layer's own parameter arrays (``layer.params["weight"]``) as well as its inputs: ``f`` only has to
read them. Each entry is restored exactly afterwards.

Examples
--------
>>> import numpy as np
>>> from attnkit.testing.gradcheck import check_grad
>>> x = np.array([1.0, -2.0, 0.5])
>>> check_grad(lambda x: float(np.sum(x**3)), {"x": x}, {"x": 3 * x**2})
"""

import numpy as np

__all__ = ["check_grad", "numerical_grad"]


def _float64(value, name):
    if not isinstance(value, np.ndarray) or value.dtype != np.float64:
        raise TypeError(f"{name} must be a float64 ndarray (finite differences need the precision), got "
                        f"{getattr(value, 'dtype', type(value).__name__)}")
    if not value.flags.writeable:
        raise ValueError(f"{name} must be writeable: it is perturbed in place")
    return value


def numerical_grad(f, inputs, name, *, eps=1e-6):
    """Central-difference gradient of the scalar ``f(**inputs)`` with respect to ``inputs[name]``.

    ``d f / d x_i ~ (f(x + eps e_i) - f(x - eps e_i)) / (2 eps)``: error O(eps^2) plus rounding
    O(1e-16 |f| / eps), so eps = 1e-6 is right for float64 functions of magnitude ~1.

    Parameters
    ----------
    f : callable
        Called as ``f(**inputs)``; returns a real scalar.
    inputs : dict of str -> ndarray of float64
        Everything ``f`` reads that may be perturbed.
    name : str
        The input to differentiate with respect to.
    eps : float, default=1e-6
        Step.

    Returns
    -------
    ndarray of the shape of ``inputs[name]``
    """
    x = _float64(inputs[name], f"inputs[{name!r}]")
    grad = np.empty_like(x)
    for index in np.ndindex(x.shape):
        saved = x[index]
        x[index] = saved + eps
        plus = float(f(**inputs))
        x[index] = saved - eps
        minus = float(f(**inputs))
        x[index] = saved
        grad[index] = (plus - minus) / (2 * eps)
    return grad


def check_grad(f, inputs, analytic, *, eps=1e-6, rtol=1e-5, atol=1e-8):
    """Assert that analytic gradients match central finite differences.

    Parameters
    ----------
    f : callable
        Called as ``f(**inputs)``; returns a real scalar, typically
        ``sum(layer.forward(x)[0] * upstream)`` for a fixed random ``upstream``.
    inputs : dict of str -> ndarray of float64
        Arrays ``f`` reads; those named in ``analytic`` are perturbed in place and restored.
    analytic : dict of str -> array-like
        Claimed gradient of ``f`` for some (or all) names of ``inputs``, of the same shapes.
    eps : float, default=1e-6
        Finite-difference step.
    rtol, atol : float, default=1e-5, 1e-8
        Entry ``i`` passes if ``|analytic_i - numeric_i| <= atol + rtol * |numeric_i|``.

    Raises
    ------
    AssertionError
        Naming the input, the worst entry, both values and the largest error.
    """
    unknown = sorted(set(analytic) - set(inputs))
    if unknown:
        raise KeyError(f"analytic gradients given for {unknown}, which are not among the inputs {sorted(inputs)}")
    for name, claimed in analytic.items():
        claimed = np.asarray(claimed)
        expected_shape = np.shape(inputs[name])
        if claimed.shape != expected_shape:
            raise AssertionError(f"gradient of {name!r} has shape {claimed.shape}, expected {expected_shape}")
        numeric = numerical_grad(f, inputs, name, eps=eps)
        excess = np.abs(claimed - numeric) - (atol + rtol * np.abs(numeric))
        if excess.size and not (excess <= 0).all():
            worst = np.unravel_index(np.argmax(np.where(np.isnan(excess), np.inf, excess)), excess.shape)
            raise AssertionError(
                f"gradient of {name!r} differs from finite differences at {len(np.flatnonzero(~(excess <= 0)))} of "
                f"{excess.size} entries; worst at {tuple(int(i) for i in worst)}: analytic {float(claimed[worst])!r}, "
                f"numeric {float(numeric[worst])!r}; max |difference| {float(np.max(np.abs(claimed - numeric)))!r} "
                f"(rtol={rtol}, atol={atol})"
            )
