"""Optimiser arithmetic as fused kernels: the AdamW update in place and a float64 sum of squares, of one
tensor or of a model's tensors in one call (one parallel pass instead of a call per parameter)."""

import itertools
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import check_bool, check_real, float_array

__all__ = ["adamw_update", "adamw_update_many", "sum_of_squares", "sum_of_squares_many"]


def adamw_update(param: np.ndarray, grad: np.ndarray, exp_avg: np.ndarray, exp_avg_sq: np.ndarray, *,
                 step_size: float, beta1: float, beta2: float, denom_scale: float, eps: float,
                 shrink: float = 1.0, grad_scale: float = 1.0, zero_grad: bool = False) -> None:
    """One AdamW update of one parameter, in place, in a single pass over its elements::

        g <- grad * grad_scale                            (skipped when grad_scale == 1)
        p <- p * shrink                                   (skipped when shrink == 1)
        m <- m * beta1 + g * (1 - beta1)
        v <- v * beta2 + (g * g) * (1 - beta2)
        p <- p - (m / (sqrt(v) * denom_scale + eps)) * step_size

    Each operation is rounded to the arrays' dtype in this order, with no fused multiply-add and each
    scalar rounded to that dtype first: the result is bit for bit that of the NumPy in-place sequence
    in :func:`attnkit.reference.adamw_update`, on every ISA and for any number of threads.
    :class:`attnkit.nn.AdamW` calls it with ``step_size = lr / (1 - beta1^t)``,
    ``denom_scale = 1 / sqrt(1 - beta2^t)`` and ``shrink = 1 - lr * weight_decay``.

    Parameters
    ----------
    param : ndarray of float32 or float64
        The parameter, updated in place; C-contiguous and writeable.
    grad : ndarray
        Its gradient: same shape and dtype, C-contiguous. Read only.
    exp_avg, exp_avg_sq : ndarray
        First and second moment estimates, updated in place: same shape and dtype, C-contiguous.
    step_size, beta1, beta2, denom_scale, eps : float
        As in the formula.
    shrink : float, default=1.0
        Decoupled weight-decay factor.
    grad_scale : float, default=1.0
        A factor on the gradient, as :func:`attnkit.nn.clip_grad_norm` applies it (``grad *= grad_scale``, the
        same bits) but without a pass of its own; ``grad`` itself is not scaled.
    zero_grad : bool, default=False
        Set ``grad`` to zero once it is read (it must then be writeable): the next backward's ``zero_grad``,
        done in this pass.

    Raises
    ------
    TypeError
        If an array is not a float32 or float64 ndarray, or its dtype differs from ``param``'s.
    ValueError
        If a shape differs from ``param``'s, an array is not C-contiguous or (when updated) not
        writeable, or two arrays share memory: the update is in place, so nothing is converted or copied.
        If ``beta1`` or ``beta2`` is outside [0, 1), ``eps`` is negative or ``denom_scale`` is not positive.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> p, g, m, v = np.array([1.0, -1.0]), np.array([0.5, -2.0]), np.zeros(2), np.zeros(2)
    >>> ops.adamw_update(p, g, m, v, step_size=0.1 / (1 - 0.9), beta1=0.9, beta2=0.999,
    ...                  denom_scale=1 / np.sqrt(0.001), eps=1e-8)
    >>> p.round(6).tolist()  # the first step of Adam moves each entry by lr * sign(g)
    [0.9, -0.9]
    """
    zero_grad = check_bool(zero_grad, "zero_grad")  # before it decides below whether grad is written
    arrays = {"param": param, "grad": grad, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
    for name, arr in arrays.items():
        if not isinstance(arr, np.ndarray) or arr.dtype not in (np.float32, np.float64):
            what = f"dtype {arr.dtype}" if isinstance(arr, np.ndarray) else type(arr).__name__
            raise TypeError(f"{name} must be a float32 or float64 ndarray, got {what}")
        if arr.dtype != param.dtype:
            raise TypeError(f"{name} must have the dtype of param ({param.dtype}), got {arr.dtype}")
        if arr.shape != param.shape:
            raise ValueError(f"{name} must have the shape of param {param.shape}, got {arr.shape}")
        if not arr.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (it is used in place, never copied), got strides "
                             f"{arr.strides}")
        if (name != "grad" or zero_grad) and not arr.flags.writeable:
            raise ValueError(f"{name} must be writeable: it is updated in place")
    for first, second in itertools.combinations(arrays, 2):
        # One pass reads and writes each element of all four: a shared element would be read after a write.
        if np.may_share_memory(arrays[first], arrays[second]):
            raise ValueError(f"{first} and {second} must not share memory: each is read or updated in place")
    hyper = _hyperparameters(step_size, beta1, beta2, denom_scale, eps, grad_scale)
    _core.adamw_update([param], [grad], [exp_avg], [exp_avg_sq], **hyper, shrinks=[check_real(shrink, "shrink")],
                       zero_grad=zero_grad)


def adamw_update_many(params: Sequence[np.ndarray], grads: Sequence[np.ndarray], exp_avgs: Sequence[np.ndarray],
                      exp_avg_sqs: Sequence[np.ndarray], *, step_size: float, beta1: float, beta2: float,
                      denom_scale: float, eps: float, shrinks: Sequence[float] | None = None, grad_scale: float = 1.0,
                      zero_grad: bool = False) -> None:
    """:func:`adamw_update` of many parameters in one call: ``params[i]`` with ``grads[i]``, ``exp_avgs[i]``,
    ``exp_avg_sqs[i]`` and ``shrinks[i]``, the same bits as one call each, in one parallel pass over all of them.

    :class:`attnkit.nn.AdamW` updates a model this way: one call per parameter cost more than the arithmetic
    for small models (~1 ms a step for 68 parameters of 128-wide layers, against ~0.2 ms for this call).

    Parameters
    ----------
    params, grads, exp_avgs, exp_avg_sqs : sequences of ndarray, all of one length
        As :func:`adamw_update`'s arrays, tensor by tensor: float32 or float64 (the dtype of ``params[0]``, for
        all), C-contiguous, ``grads[i]``, ``exp_avgs[i]`` and ``exp_avg_sqs[i]`` of ``params[i]``'s shape; no
        two arrays anywhere in the four lists may share memory.
    step_size, beta1, beta2, denom_scale, eps, grad_scale, zero_grad
        As in :func:`adamw_update`, for every tensor.
    shrinks : sequence of float, optional
        Each tensor's weight-decay factor (default 1: no decay).

    Raises
    ------
    TypeError
        If an entry is not a float32 or float64 ndarray of ``params[0]``'s dtype.
    ValueError
        If the lengths differ, a shape differs from its parameter's, an array is not C-contiguous or (when
        updated) not writeable, two arrays share memory, or a scalar is out of range (as :func:`adamw_update`).
        Nothing is written then.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> p, q = np.array([1.0, -1.0]), np.array([2.0])
    >>> ops.adamw_update_many([p, q], [np.array([0.5, -2.0]), np.array([3.0])], [np.zeros(2), np.zeros(1)],
    ...                       [np.zeros(2), np.zeros(1)], step_size=0.1 / (1 - 0.9), beta1=0.9, beta2=0.999,
    ...                       denom_scale=1 / np.sqrt(0.001), eps=1e-8, shrinks=[1.0, 0.5])
    >>> p.round(6).tolist(), q.round(6).tolist()  # q decays to 1.0, then moves by lr
    ([0.9, -0.9], [0.9])
    """
    zero_grad = check_bool(zero_grad, "zero_grad")
    lists = [_array_list(value, name) for name, value in
             (("params", params), ("grads", grads), ("exp_avgs", exp_avgs), ("exp_avg_sqs", exp_avg_sqs))]
    count = len(lists[0])
    factors = [1.0] * count if shrinks is None else _finite_reals(shrinks, "shrinks")
    for name, value in zip(("grads", "exp_avgs", "exp_avg_sqs", "shrinks"), (*lists[1:], factors)):
        if len(value) != count:
            raise ValueError(f"{name} must have one entry per parameter ({count}), got {len(value)}")
    hyper = _hyperparameters(step_size, beta1, beta2, denom_scale, eps, grad_scale)
    if count:
        # The binding checks each array's dtype, shape, layout and writeability, and that none overlaps another
        # (sorting their address ranges): here, in Python, those checks would cost more than the update.
        _core.adamw_update(lists[0], lists[1], lists[2], lists[3], **hyper, shrinks=factors, zero_grad=zero_grad)


def _array_list(value, name) -> list:
    if isinstance(value, (np.ndarray, str)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list or tuple of ndarrays, got {type(value).__name__}")
    return list(value)


def _finite_reals(values, name):
    """A sequence of finite real numbers as a list of floats (one NumPy check, not one per number)."""
    try:
        arr = np.asarray(values)
    except ValueError:  # ragged
        arr = np.asarray(values, dtype=object)
    if arr.ndim != 1 or arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a sequence of real numbers, got {values!r:.80}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got {values!r:.80}")
    return arr.astype(float).tolist()


def _hyperparameters(step_size, beta1, beta2, denom_scale, eps, grad_scale):
    """The scalars every tensor's update shares, checked."""
    beta1, beta2 = check_real(beta1, "beta1"), check_real(beta2, "beta2")
    for name, beta in (("beta1", beta1), ("beta2", beta2)):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {beta}")
    eps, denom_scale = check_real(eps, "eps"), check_real(denom_scale, "denom_scale", positive=True)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    return {"step_size": check_real(step_size, "step_size"), "beta1": beta1, "beta2": beta2,
            "denom_scale": denom_scale, "eps": eps, "grad_scale": check_real(grad_scale, "grad_scale")}


def sum_of_squares(x: ArrayLike) -> float:
    """``sum(x**2)`` over every element, accumulated in float64, the same whatever the thread count.

    The elements are summed in fixed blocks whose float64 sums are then added in order, so the result
    has the same bits for 1 or many threads and on every ISA; it can differ from NumPy's pairwise sum
    in the last bits. A float32 sum of squares would overflow for entries near 1e19; this one does
    not.

    Parameters
    ----------
    x : array-like of float32 or float64
        Any shape and layout (copied to C order only when not contiguous).

    Returns
    -------
    float

    Examples
    --------
    >>> from attnkit import ops
    >>> ops.sum_of_squares([[3.0, 4.0]])
    25.0
    """
    x = float_array(x, "x")
    return _core.sum_of_squares([np.ascontiguousarray(x)])[0]


def sum_of_squares_many(xs: Sequence[np.ndarray]) -> list[float]:
    """:func:`sum_of_squares` of each array, in one parallel pass: each sum has the bits of its own call.

    Parameters
    ----------
    xs : sequence of ndarray
        float32 or float64 (the dtype of ``xs[0]``, for all), any shapes and layouts (copied to C order only when
        not contiguous): a model's gradients, say.

    Returns
    -------
    list of float

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit import ops
    >>> ops.sum_of_squares_many([np.array([3.0, 4.0]), np.array([[1.0], [2.0]])])
    [25.0, 5.0]
    """
    arrays = _array_list(xs, "xs")
    for i, arr in enumerate(arrays):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"xs[{i}] must be a float32 or float64 ndarray, got {type(arr).__name__}")
    # The binding checks that every array has the dtype of xs[0], float32 or float64.
    return _core.sum_of_squares([np.ascontiguousarray(arr) for arr in arrays]) if arrays else []
