"""attnkit.testing.gradcheck: the finite-difference oracle of every backward test."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from attnkit.nn import Module
from attnkit.testing import check_grad, check_module_grad, numerical_grad


def test_numerical_grad_of_a_known_function():
    x = np.array([[0.5, -1.0], [2.0, 0.1]])
    w = np.array([[1.0, 2.0], [3.0, -4.0]])
    grads = [numerical_grad(lambda x: np.sum(w * np.sin(x)), {"x": x}, "x", i) for i in np.ndindex(x.shape)]
    assert_allclose(np.reshape(grads, x.shape), w * np.cos(x), rtol=1e-8)


def test_check_grad_accepts_the_right_gradients_of_several_arrays():
    a, b = np.array([1.0, 2.0, -3.0]), np.array([[0.5], [-0.25], [2.0]])

    def f(a, b):
        return np.sum(np.exp(a) * b[:, 0]) + np.sum(b**3)

    check_grad(f, {"a": a, "b": b}, {"a": np.exp(a) * b[:, 0], "b": (np.exp(a) + 3 * b[:, 0] ** 2)[:, None]})
    check_grad(f, {"a": a, "b": b}, {"a": np.exp(a) * b[:, 0]})  # a subset of the names
    # f may read the arrays elsewhere: they are perturbed in place.
    check_grad(lambda **_: np.sum(a**2), {"a": a}, {"a": 2 * a})


def test_check_grad_reports_the_worst_wrong_entry_of_each_input():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5])
    wrong = 2 * x
    wrong[1] += 0.5
    wrong[2] += 0.1
    with pytest.raises(AssertionError, match=r"x: 2 of 3 entries differ; worst x\[1\]: analytic 4.5") as info:
        check_grad(lambda x, y: np.sum(x**2) + y[0], {"x": x, "y": y}, {"x": wrong, "y": [2.0]})
    assert "y: 1 of 1" in str(info.value)
    with pytest.raises(AssertionError, match="x"):
        check_grad(lambda x: np.sum(x**2), {"x": x}, {"x": np.full(3, np.nan)})


def test_the_rounding_of_large_functions_is_allowed_for():
    x = np.array([0.3, -0.7])
    check_grad(lambda x: 1e9 + np.sum(x**2), {"x": x}, {"x": 2 * x}, atol=0.0, rtol=1e-9)


def test_inputs_are_restored_even_when_f_raises():
    x = np.array([1.0, 2.0])
    before = x.copy()
    check_grad(lambda x: np.sum(x), {"x": x}, {"x": np.ones(2)})
    assert_array_equal(x, before)

    def explode(x):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        numerical_grad(explode, {"x": x}, "x", (0,))
    assert_array_equal(x, before)


def test_max_entries_samples_a_subset():
    x = np.random.default_rng(0).standard_normal((30, 30))
    calls = []

    def f(x):
        calls.append(1)
        return np.sum(x**2)

    check_grad(f, {"x": x}, {"x": 2 * x}, max_entries=10)
    assert len(calls) == 1 + 20  # f once for the rounding allowance, then two calls per checked entry


def test_rejects_bad_arguments():
    x = np.ones(3)
    with pytest.raises(TypeError, match="float64"):
        check_grad(lambda x: 0.0, {"x": x.astype(np.float32)}, {"x": x})
    with pytest.raises(TypeError, match="ndarray"):
        check_grad(lambda x: 0.0, {"x": 1.0}, {"x": 1.0})
    with pytest.raises(ValueError, match="writeable"):
        check_grad(lambda x: 0.0, {"x": np.broadcast_to(1.0, (3,))}, {"x": x})
    with pytest.raises(ValueError, match="shape"):
        check_grad(lambda x: 0.0, {"x": x}, {"x": np.ones(4)})
    with pytest.raises(ValueError, match="y"):
        check_grad(lambda x: 0.0, {"x": x}, {"y": x})


class Scale(Module):
    """out = x * (s + noise), noise drawn from the module's own generator in training; ``bug`` breaks
    the gradient of s."""

    def __init__(self, bug=False):
        super().__init__()
        self.add_param("s", np.array([1.5, -0.5]), dtype=np.float64)
        self.rng = np.random.default_rng(0)
        self.bug = bug

    def forward(self, x, training=False):
        noise = self.rng.standard_normal(x.shape) if training else np.zeros(x.shape)
        return x * (self.params["s"] + noise), (x, noise)

    def backward(self, grad, cache):
        x, noise = cache
        self.grads["s"] += (grad * x).reshape(-1, 2).sum(axis=0) * (2.0 if self.bug else 1.0)
        return grad * (self.params["s"] + noise)


def test_check_module_grad_checks_input_and_parameters():
    x = np.random.default_rng(1).standard_normal((3, 2))
    check_module_grad(Scale(), x)
    with pytest.raises(AssertionError, match=r"s: 2 of 2"):
        check_module_grad(Scale(bug=True), x)


def test_check_module_grad_replays_the_random_draws():
    # Each training forward draws new noise: the check only passes because it resets the generator
    # before every forward (which leaves it as one forward would).
    x = np.random.default_rng(2).standard_normal((3, 2))
    module = Scale()
    check_module_grad(module, x, training=True)
    one_forward = np.random.default_rng(0)
    one_forward.standard_normal(x.shape)
    assert module.rng.bit_generator.state == one_forward.bit_generator.state
    check_module_grad(Scale(), np.arange(4).reshape(2, 2), training=True)  # integer input: parameters only
