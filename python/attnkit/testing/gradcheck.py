"""Check hand-written gradients against central finite differences.

The arrays a scalar function depends on are perturbed *in place*, one entry at a time, and restored
afterwards, so the function can read them any way it likes: as closure variables, as a layer's
``params``, as arrays inside a cache. :func:`check_module_grad` does the whole check for an
:class:`attnkit.nn.Module`. Only NumPy is needed.

Examples
--------
>>> import numpy as np
>>> from attnkit.testing.gradcheck import check_grad
>>> x = np.array([1.0, -2.0, 3.0])
>>> check_grad(lambda: np.sum(x**3), {"x": x}, {"x": 3 * x**2})
"""

import functools
import inspect

import numpy as np

__all__ = ["check_grad", "check_module_grad", "numerical_gradient"]


def numerical_gradient(f, array, *, eps=1e-6, indices=None):
    """Central-difference gradient of the scalar ``f()`` with respect to the entries of ``array``.

    Parameters
    ----------
    f : callable
        Called with no arguments; returns a real scalar that depends on ``array``.
    array : ndarray of float64
        Perturbed in place (``array[i] +- eps``) and restored, also when ``f`` raises.
    eps : float, default=1e-6
        Step. The error is ``O(eps^2 f''')`` from truncation plus ``O(ulp(f) / eps)`` from rounding.
    indices : sequence of tuple of int, optional
        The entries to differentiate (default: all).

    Returns
    -------
    ndarray of float64, shape of ``array``
        ``(f(x + eps e_i) - f(x - eps e_i)) / (2 eps)`` at ``indices``, NaN elsewhere.
    """
    _check_perturbable(array, "array")
    grad = np.full(array.shape, np.nan)
    for index in np.ndindex(array.shape) if indices is None else indices:
        original = array[index]
        try:
            array[index] = original + eps
            f_plus = float(f())
            array[index] = original - eps
            f_minus = float(f())
        finally:
            array[index] = original
        grad[index] = (f_plus - f_minus) / (2 * eps)
    return grad


def check_grad(f, inputs, analytic, *, eps=1e-6, rtol=1e-5, atol=1e-7, max_entries=None, seed=0):
    """Assert that ``analytic`` gradients match central finite differences of ``f``.

    Parameters
    ----------
    f : callable
        Returns the real scalar whose gradients are checked. Called with no arguments, reading the
        arrays of ``inputs`` (they are perturbed in place), e.g. ``lambda: np.sum(layer.forward(x)[0] * w)``;
        or, if it declares parameters, with the inputs of those names as keyword arguments.
    inputs : dict of str to ndarray of float64
        The arrays ``f`` depends on, by name: inputs, parameters (``layer.params``), anything writeable.
    analytic : dict of str to array-like
        Claimed gradient of ``f`` with respect to ``inputs[name]``, for some or all names.
    eps : float, default=1e-6
        Finite-difference step.
    rtol, atol : float, default=1e-5, 1e-7
        An entry passes when ``|numeric - analytic| <= atol + rtol * |numeric| + rounding``, where
        ``rounding = 16 * 2**-52 * |f(x)| / eps`` bounds the rounding error of a difference quotient.
    max_entries : int, optional
        Check at most this many entries of each array, drawn without replacement (with ``seed``);
        default all. Keeps checks of large layers fast.
    seed : int, default=0
        Seed of the entry sample.

    Raises
    ------
    AssertionError
        Naming every mismatching array with its worst entry: index, numeric and analytic values.
    ValueError, TypeError
        If a name is missing, shapes differ or an input is not a writeable float64 array.
    """
    unknown = sorted(set(analytic) - set(inputs))
    if unknown:
        raise ValueError(f"analytic has gradients for names not in inputs: {unknown}")
    wanted = inspect.signature(f).parameters
    if wanted:
        f = functools.partial(_call_with, f, inputs, [n for n in wanted if n in inputs])
    rng = np.random.default_rng(seed)
    rounding = 16 * np.finfo(np.float64).eps * abs(float(f())) / eps
    failures = []
    for name, claimed in analytic.items():
        array = inputs[name]
        _check_perturbable(array, f"inputs[{name!r}]")
        claimed = np.asarray(claimed, dtype=np.float64)
        if claimed.shape != array.shape:
            raise ValueError(f"analytic[{name!r}] has shape {claimed.shape}, but inputs[{name!r}] has {array.shape}")
        indices = None
        if max_entries is not None and array.size > max_entries:
            flat = rng.choice(array.size, size=max_entries, replace=False)
            indices = list(zip(*np.unravel_index(np.sort(flat), array.shape)))
        numeric = numerical_gradient(f, array, eps=eps, indices=indices)
        checked = ~np.isnan(numeric)
        error = np.where(checked, np.abs(numeric - claimed), 0.0)
        bad = checked & ~(error <= atol + rtol * np.abs(numeric) + rounding)  # NaN in claimed fails too
        if bad.any():
            worst = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(error, nan=np.inf), -1.0)), array.shape)
            failures.append(
                f"{name}: {np.count_nonzero(bad)} of {np.count_nonzero(checked)} entries differ; worst at "
                f"{tuple(int(i) for i in worst)}: numeric {numeric[worst]:.10g}, analytic {claimed[worst]:.10g}"
            )
    if failures:
        header = f"gradient check failed (eps={eps}, rtol={rtol}, atol={atol}, rounding={rounding:.2g}):"
        raise AssertionError("\n  ".join([header, *failures]))


def check_module_grad(module, x, *, training=False, eps=1e-6, rtol=1e-5, atol=1e-7, max_entries=None, seed=0):
    """Assert that a layer's ``backward`` matches finite differences, for its input and every parameter.

    The scalar checked is ``sum(module.forward(x, training)[0] * w)`` for a random ``w`` (drawn with
    ``seed``), whose gradient with respect to the output is ``w``. Every ``numpy.random.Generator``
    held as an attribute of the module or its children is reset to its starting state before each
    forward, so dropout draws the same mask every time and ``training=True`` can be checked too.

    Parameters
    ----------
    module : attnkit.nn.Module
        In float64 (``module.astype(np.float64)``). Its gradients are zeroed, then hold the analytic
        ones.
    x : ndarray
        The input; checked too when it is a float64 array (integer inputs, e.g. token ids, are not).
    training : bool, default=False
        Passed to ``forward``.
    eps, rtol, atol, max_entries, seed
        As for :func:`check_grad`.

    Raises
    ------
    AssertionError
        Naming each mismatching gradient (``"<input>"`` for ``x``, dotted names for parameters).
    """
    generators = _generators(module)
    states = [g.bit_generator.state for g in generators]

    def forward():
        for generator, state in zip(generators, states):
            generator.bit_generator.state = state
        return module.forward(x, training)

    out, cache = forward()
    w = np.random.default_rng(seed).standard_normal(np.shape(out))
    module.zero_grad()
    dx = module.backward(w, cache)
    inputs = {name: value for name, value, _ in module.named_parameters()}
    analytic = {name: grad.copy() for name, _, grad in module.named_parameters()}
    if isinstance(x, np.ndarray) and x.dtype == np.float64:
        inputs["<input>"], analytic["<input>"] = x, dx
    check_grad(lambda: np.sum(forward()[0] * w), inputs, analytic, eps=eps, rtol=rtol, atol=atol,
               max_entries=max_entries, seed=seed)


def _call_with(f, inputs, names):
    return f(**{name: inputs[name] for name in names})


def _generators(module):
    """The numpy Generators held as attributes of ``module`` and its children, depth first."""
    found = [v for v in vars(module).values() if isinstance(v, np.random.Generator)]
    for child in module.children.values():
        found += _generators(child)
    return found


def _check_perturbable(array, name):
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name} must be a float64 ndarray (perturbed in place), got {type(array).__name__}")
    if array.dtype != np.float64:
        raise TypeError(f"{name} must be a float64 ndarray (finite differences need the precision), got {array.dtype}")
    if not array.flags.writeable:
        raise ValueError(f"{name} must be writeable: it is perturbed in place")
