"""Reference optimiser arithmetic: the AdamW update and a float64 sum of squares."""

import numpy as np

__all__ = ["adamw_update", "sum_of_squares"]


def adamw_update(param, grad, exp_avg, exp_avg_sq, *, step_size, beta1, beta2, denom_scale, eps, shrink=1.0,
                 grad_scale=1.0, zero_grad=False):
    r"""One AdamW update of one parameter, in place, as a sequence of NumPy in-place operations.

    .. math:: p \leftarrow p\,s, \quad m \leftarrow \beta_1 m + (1 - \beta_1) g, \quad
              v \leftarrow \beta_2 v + (1 - \beta_2) g^2, \quad
              p \leftarrow p - \eta \, \frac{m}{\sqrt{v}\,c + \epsilon}

    with :math:`s` = ``shrink``, :math:`\eta` = ``step_size``, :math:`c` = ``denom_scale``. Unlike the other
    references this one computes in the arrays' own dtype, one rounding per operation in this order:
    it is the specification :func:`attnkit.ops.adamw_update` matches bit for bit.

    Parameters
    ----------
    param, exp_avg, exp_avg_sq : ndarray of float
        Parameter and moment estimates, updated in place.
    grad : ndarray of float
        Gradient, same shape.
    step_size, beta1, beta2, denom_scale, eps : float
    shrink : float, default=1.0
        Weight-decay factor; 1 skips the multiply.
    grad_scale : float, default=1.0
        The update uses ``grad * grad_scale`` (one rounding; 1 skips it); ``grad`` is not scaled.
    zero_grad : bool, default=False
        Set ``grad`` to zero afterwards.
    """
    # Python floats, which NumPy rounds to the arrays' dtype (a float64 NumPy scalar would promote instead).
    step_size, beta1, beta2, denom_scale, eps, shrink = map(float, (step_size, beta1, beta2, denom_scale, eps, shrink))
    given = grad
    if float(grad_scale) != 1.0:
        grad = np.multiply(grad, float(grad_scale), out=np.empty_like(grad))  # clip_grad_norm's grad *= scale
    if shrink != 1.0:
        param *= shrink
    # One scratch array, then in-place updates: no other temporaries. out= keeps it an array for a
    # 0-d parameter too (NumPy returns a scalar there, which out= cannot take).
    scratch = np.multiply(grad, 1.0 - beta1, out=np.empty_like(grad))
    exp_avg *= beta1
    exp_avg += scratch
    np.multiply(grad, grad, out=scratch)
    scratch *= 1.0 - beta2
    exp_avg_sq *= beta2
    exp_avg_sq += scratch
    np.sqrt(exp_avg_sq, out=scratch)
    scratch *= denom_scale
    scratch += eps
    np.divide(exp_avg, scratch, out=scratch)
    scratch *= step_size
    param -= scratch
    if zero_grad:
        given[...] = 0


def sum_of_squares(x):
    """``sum(x**2)`` accumulated in float64, as a float.

    Parameters
    ----------
    x : array_like of float

    Returns
    -------
    float
    """
    return float(np.square(np.asarray(x), dtype=np.float64).sum())
