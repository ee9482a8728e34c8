"""attnkit.nn losses: the gradient against finite differences (float64), and the loss against the op."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit import ops
from attnkit.nn import CrossEntropyLoss
from attnkit.testing import check_grad


@given(
    seed=st.integers(0, 2**32 - 1),
    lead=st.lists(st.integers(1, 3), min_size=1, max_size=2).map(tuple),
    n_classes=st.integers(1, 7),
    label_smoothing=st.sampled_from((0.0, 0.1, 0.6)),
    reduction=st.sampled_from(("mean", "sum", "none")),
    weighted=st.booleans(),
)
def test_cross_entropy_gradient(isa, seed, lead, n_classes, label_smoothing, reduction, weighted):
    rng = np.random.default_rng(seed)
    logits = 3 * rng.standard_normal(lead + (n_classes,))
    targets = rng.integers(0, n_classes, lead)
    targets[rng.random(lead) < 0.3] = -1
    class_weight = rng.random(n_classes) + 0.5 if weighted else None
    loss_fn = CrossEntropyLoss(ignore_index=-1, label_smoothing=label_smoothing, reduction=reduction,
                               class_weight=class_weight)
    loss, cache = loss_fn.forward(logits, targets, training=True)
    # The objective is g * loss (summed for "none"), so backward gets g as the incoming gradient.
    g = rng.standard_normal(np.shape(loss)) if reduction == "none" else 1.7
    dlogits = loss_fn.backward(g, cache)
    check_grad(lambda logits: np.sum(g * loss_fn.forward(logits, targets)[0]), {"logits": logits}, {"logits": dlogits})
    expected = ops.cross_entropy(logits, targets, ignore_index=-1, label_smoothing=label_smoothing,
                                 reduction=reduction, class_weight=class_weight)
    np.testing.assert_array_equal(loss, expected)


def test_evaluation_keeps_no_gradient():
    loss_fn = CrossEntropyLoss()
    logits, targets = np.zeros((4, 3), np.float32), np.array([0, 1, 2, 0])
    loss, cache = loss_fn.forward(logits, targets)
    assert cache is None and loss.dtype == np.float32 and np.isclose(loss, np.log(3))
    with pytest.raises(ValueError, match="training=True"):
        loss_fn.backward(1.0, cache)
    _, cache = loss_fn.forward(logits, targets, training=True)
    assert loss_fn.backward(1.0, cache) is cache  # no copy of the (..., C) gradient for the usual grad = 1
    assert loss_fn.backward(np.float32(2.0), cache).dtype == np.float32


def test_padding_positions_get_no_gradient():
    loss_fn = CrossEntropyLoss(ignore_index=0, label_smoothing=0.1)
    rng = np.random.default_rng(0)
    logits, targets = rng.standard_normal((2, 4, 6)), np.array([[3, 1, 0, 0], [5, 0, 0, 0]])
    loss, cache = loss_fn.forward(logits, targets, training=True)
    dlogits = loss_fn.backward(1.0, cache)
    assert not dlogits[targets == 0].any()
    per_position = ops.cross_entropy(logits, targets, ignore_index=0, label_smoothing=0.1, reduction="none")
    np.testing.assert_allclose(loss, per_position.sum() / 3)


def test_bad_options_raise_at_forward():
    with pytest.raises(ValueError, match="label_smoothing"):
        CrossEntropyLoss(label_smoothing=1.5).forward(np.zeros((2, 3)), np.array([0, 1]))
    with pytest.raises(ValueError, match="targets"):
        CrossEntropyLoss().forward(np.zeros((2, 3)), np.array([0, 3]))
