"""Central finite differences, to check hand-written backward passes (in float64).

``check_grad(f, inputs, analytic)`` perturbs entries of each input *in place* (restoring them) and
compares ``(f(x + eps) - f(x - eps)) / (2 eps)`` with the analytic gradient. ``f(**inputs)`` must
return a scalar, typically ``sum(forward(...) * w)`` for a fixed random ``w``, whose gradient is
``backward(w)``. Because the arrays are perturbed in place, ``f`` may also take fewer (or no)
arguments and read the arrays elsewhere (``lambda: ...`` over a layer's own ``params``): it is
called with the inputs it declares. :func:`check_module_grad`
does the whole check for an :class:`attnkit.nn.Module`. Only NumPy is needed.

Examples
--------
>>> import numpy as np
>>> from attnkit.testing.gradcheck import check_grad
>>> x = np.array([1.0, -2.0, 3.0])
>>> check_grad(lambda x: np.sum(x**3), {"x": x}, {"x": 3 * x**2})
"""

import inspect

import numpy as np

__all__ = ["check_grad", "check_module_grad", "numerical_grad"]


def numerical_grad(f, inputs, name, index, eps=1e-6):
    """d f / d inputs[name][index] by central differences (``inputs`` is restored, also when ``f`` raises)."""
    x = inputs[name]
    old = x[index]
    try:
        x[index] = old + eps
        plus = _evaluate(f, inputs)
        x[index] = old - eps
        minus = _evaluate(f, inputs)
    finally:
        x[index] = old
    return (plus - minus) / (2 * eps)


def _evaluate(f, inputs):
    """float(f(...)) with the inputs ``f`` declares as keyword arguments (all of them for ``**kwargs``)."""
    params = inspect.signature(f).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return float(f(**inputs))
    return float(f(**{p.name: inputs[p.name] for p in params if p.name in inputs}))


def check_grad(f, inputs, analytic, *, eps=1e-6, rtol=1e-5, atol=1e-7, max_entries=40, rng=0):
    """Assert that ``analytic[name]`` matches finite differences of ``f`` for every named input.

    Parameters
    ----------
    f : callable
        ``f(**inputs) -> float``.
    inputs : dict of str -> float64 ndarray
        Arrays are perturbed in place and restored (so they must be writeable).
    analytic : dict of str -> array-like
        Gradients to check, for some or all names of ``inputs``; broadcast to the input's shape.
    eps, rtol, atol : float
        Step and tolerances: an entry passes when
        ``|num - ana| <= atol + rtol * max(|num|, |ana|) + rounding``, where
        ``rounding = 16 * 2**-52 * |f(inputs)| / eps`` bounds the rounding error of a difference
        quotient (it matters when ``|f|`` is large).
    max_entries : int or None, default=40
        Entries checked per input (a random sample; None: all).
    rng : int or numpy Generator, default=0
        Picks the sampled entries.

    Raises
    ------
    AssertionError
        Naming every input with mismatching entries: how many, and the worst one's index, numerical
        and analytic values.
    TypeError, ValueError
        If a name is not in ``inputs``, an input is not a writeable float64 array, or a gradient does
        not broadcast to its input.
    """
    unknown = sorted(set(analytic) - set(inputs))
    if unknown:
        raise ValueError(f"analytic has gradients for names not in inputs: {unknown}")
    rng = np.random.default_rng(rng)
    rounding = 16 * np.finfo(np.float64).eps * abs(_evaluate(f, inputs)) / eps
    failures = []
    for name, grad in analytic.items():
        x = inputs[name]
        _check_perturbable(x, name)
        try:
            grad = np.broadcast_to(np.asarray(grad, dtype=np.float64), x.shape)
        except ValueError:
            raise ValueError(f"the gradient of {name} has shape {np.shape(grad)}, the input {x.shape}") from None
        flat = np.arange(x.size)
        if max_entries is not None and x.size > max_entries:
            flat = np.sort(rng.choice(x.size, size=max_entries, replace=False))
        worst, n_bad = None, 0
        for i in flat:
            index = np.unravel_index(i, x.shape)
            num, ana = numerical_grad(f, inputs, name, index, eps), float(grad[index])
            error = abs(num - ana)
            if not error <= atol + rtol * max(abs(num), abs(ana)) + rounding:  # NaN fails too
                n_bad += 1
                if worst is None or not error <= worst[0]:
                    worst = (error, index, num, ana)
        if n_bad and worst is not None:
            _, index, num, ana = worst
            failures.append(f"{name}: {n_bad} of {flat.size} entries differ; worst {name}{[int(i) for i in index]}: "
                            f"analytic {ana!r}, numerical {num!r}")
    if failures:
        header = f"gradient check failed (eps={eps}, rtol={rtol}, atol={atol}, rounding={rounding:.2g}):"
        raise AssertionError("\n  ".join([header, *failures]))


def check_module_grad(module, x, *, training=False, eps=1e-6, rtol=1e-5, atol=1e-7, max_entries=40, rng=0):
    """Assert that a layer's ``backward`` matches finite differences, for its input and every parameter.

    The scalar checked is ``sum(module.forward(x, training)[0] * w)`` for a random ``w`` (drawn with
    ``rng``), whose gradient with respect to the output is ``w``. Every ``numpy.random.Generator``
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
    eps, rtol, atol, max_entries, rng
        As for :func:`check_grad`.

    Raises
    ------
    AssertionError
        Naming each mismatching gradient (``"<input>"`` for ``x``, dotted names for parameters).
    """
    rng = np.random.default_rng(rng)
    generators = _generators(module)
    states = [g.bit_generator.state for g in generators]

    def forward():
        for generator, state in zip(generators, states):
            generator.bit_generator.state = state
        return module.forward(x, training)

    out, cache = forward()
    w = rng.standard_normal(np.shape(out))
    module.zero_grad()
    dx = module.backward(w, cache)
    inputs = {name: value for name, value, _ in module.named_parameters()}
    analytic = {name: grad.copy() for name, _, grad in module.named_parameters()}
    if isinstance(x, np.ndarray) and x.dtype == np.float64:
        inputs["<input>"], analytic["<input>"] = x, dx
    check_grad(lambda **_: np.sum(forward()[0] * w), inputs, analytic, eps=eps, rtol=rtol, atol=atol,
               max_entries=max_entries, rng=rng)


def _generators(module):
    """The numpy Generators held as attributes of ``module`` and its children, depth first."""
    found = [v for v in vars(module).values() if isinstance(v, np.random.Generator)]
    for child in module.children.values():
        found += _generators(child)
    return found


def _check_perturbable(x, name):
    if not isinstance(x, np.ndarray):
        raise TypeError(f"inputs[{name!r}] must be a float64 ndarray (perturbed in place), got {type(x).__name__}")
    if x.dtype != np.float64:
        raise TypeError(f"finite differences need float64 inputs; {name} is {x.dtype}")
    if not x.flags.writeable:
        raise ValueError(f"inputs[{name!r}] must be writeable: it is perturbed in place")
