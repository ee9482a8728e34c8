"""nn.SequencePooling: what "cls" and "mean" pool, padding ignored, gradients against finite differences."""

import doctest

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit import nn
from attnkit.nn import pooling
from attnkit.testing import check_module_grad


class _WithLengths(nn.Module):
    """``forward(x, training)`` for check_module_grad: the pooling with fixed lengths."""

    def __init__(self, mode, lengths):
        super().__init__()
        self.add_child("pool", nn.SequencePooling(mode))
        self.lengths = lengths

    def forward(self, x, training=False):
        return self.pool.forward(x, training, lengths=self.lengths)

    def backward(self, grad, cache):
        return self.pool.backward(grad, cache)


def test_docstring_example_runs():
    assert doctest.testmod(pooling).failed == 0


def test_cls_takes_position_zero_mean_and_max_skip_padding():
    x = np.random.default_rng(0).standard_normal((3, 4, 2))
    lengths = np.array([4, 2, 0])
    cls, _ = nn.SequencePooling("cls").forward(x, lengths=lengths)
    mean, _ = nn.SequencePooling("mean").forward(x, lengths=lengths)
    largest, _ = nn.SequencePooling("max").forward(x, lengths=lengths)
    np.testing.assert_array_equal(cls, x[:, 0])
    np.testing.assert_allclose(mean[:2], [x[0].mean(axis=0), x[1, :2].mean(axis=0)])
    np.testing.assert_array_equal(largest[:2], [x[0].max(axis=0), x[1, :2].max(axis=0)])
    np.testing.assert_array_equal(mean[2], [0.0, 0.0])  # an empty sequence pools to zeros
    np.testing.assert_array_equal(largest[2], [0.0, 0.0])


def test_padding_values_do_not_matter():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 3)).astype(np.float32)
    lengths = np.array([3, 1])
    changed = x.copy()
    changed[0, 3:] = 1e6
    changed[1, 1:] = -1e6
    for mode in ("cls", "mean", "max"):
        layer = nn.SequencePooling(mode)
        np.testing.assert_array_equal(layer.forward(x, lengths=lengths)[0], layer.forward(changed, lengths=lengths)[0])
        assert layer.forward(x, lengths=lengths)[0].dtype == np.float32


@given(seed=st.integers(0, 2**32 - 1), mode=st.sampled_from(["cls", "mean", "max"]), n=st.integers(1, 5))
def test_gradients(seed, mode, n):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, n + 1, size=3)
    check_module_grad(_WithLengths(mode, lengths), rng.standard_normal((3, n, 4)), rng=seed)


def test_errors():
    with pytest.raises(ValueError, match="mode must be one of"):
        nn.SequencePooling("min")
    with pytest.raises(ValueError, match=r"x must have shape \(batch, n, d\)"):
        nn.SequencePooling().forward(np.zeros((2, 3)), lengths=np.array([1, 1]))
    with pytest.raises(ValueError, match=r"lengths must have shape \(2,\)"):
        nn.SequencePooling("mean").forward(np.zeros((2, 3, 1)), lengths=np.array([1]))
