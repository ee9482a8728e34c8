"""Central finite differences, to check hand-written backward passes (in float64).

``check_grad(f, inputs, analytic)`` perturbs entries of each input and compares
``(f(x + eps) - f(x - eps)) / (2 eps)`` with the analytic gradient. ``f`` must return a scalar
(typically ``sum(forward(...) * w)`` for a fixed random ``w``, whose gradient is ``backward(w)``).
"""

import numpy as np

__all__ = ["check_grad", "numerical_grad"]


def numerical_grad(f, inputs, name, index, eps=1e-6):
    """d f / d inputs[name][index] by central differences (``inputs`` is not modified)."""
    x = inputs[name]
    old = x[index]
    try:
        x[index] = old + eps
        plus = f(**inputs)
        x[index] = old - eps
        minus = f(**inputs)
    finally:
        x[index] = old
    return (plus - minus) / (2 * eps)


def check_grad(f, inputs, analytic, *, eps=1e-6, rtol=1e-5, atol=1e-7, max_entries=40, rng=0):
    """Assert that ``analytic[name]`` matches finite differences of ``f`` for every named input.

    Parameters
    ----------
    f : callable
        ``f(**inputs) -> float``.
    inputs : dict of str -> float64 ndarray
        Arrays are perturbed in place and restored.
    analytic : dict of str -> ndarray
        Gradients to check, shaped like the corresponding inputs.
    eps, rtol, atol : float
        Step and tolerances; the comparison is ``|num - ana| <= atol + rtol * max(|num|, |ana|)``.
    max_entries : int or None
        Entries checked per input (a random sample; None: all).
    rng : int or numpy Generator
        Picks the sampled entries.
    """
    rng = np.random.default_rng(rng)
    for name, grad in analytic.items():
        x = inputs[name]
        if x.dtype != np.float64:
            raise TypeError(f"finite differences need float64 inputs; {name} is {x.dtype}")
        grad = np.broadcast_to(np.asarray(grad), x.shape)
        flat = np.arange(x.size)
        if max_entries is not None and x.size > max_entries:
            flat = rng.choice(x.size, size=max_entries, replace=False)
        for i in flat:
            index = np.unravel_index(i, x.shape)
            num = numerical_grad(f, inputs, name, index, eps)
            ana = float(grad[index])
            if not abs(num - ana) <= atol + rtol * max(abs(num), abs(ana)):
                raise AssertionError(f"gradient of {name}{list(index)}: analytic {ana!r}, numerical {num!r}")
