"""ops.cross_entropy against the NumPy reference and finite differences, on every ISA."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attnkit import ops, reference
from attnkit.testing import assert_allclose, check_grad
from attnkit.testing.strategies import float_arrays, sequence_lengths

REDUCTIONS = ["mean", "sum", "none"]


@st.composite
def cross_entropy_problems(draw, *, max_classes=300, layouts=True):
    """Keyword arguments of cross_entropy: logits (..., C), targets (...) with some ignored rows,
    sometimes -inf logits, smoothing, class weights, any reduction."""
    logits = draw(float_arrays(last=sequence_lengths(max_value=max_classes), scales=(1.0, 3.0, 30.0),
                               layouts=layouts))
    lead, n_classes = logits.shape[:-1], logits.shape[-1]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ignore_index = draw(st.sampled_from((-100, -1, 0)))  # 0 is a real class, ignored all the same
    targets = rng.integers(0, n_classes, size=lead)
    if draw(st.booleans()):
        targets[rng.random(lead) < draw(st.sampled_from((0.2, 0.7, 1.0)))] = ignore_index
    if draw(st.integers(0, 3)) == 0:
        logits = logits.copy()
        logits[rng.random(logits.shape) < draw(st.sampled_from((0.1, 0.5)))] = -np.inf
    class_weight = None
    if draw(st.booleans()):
        class_weight = rng.random(n_classes) * draw(st.sampled_from((1.0, 3.0)))
        class_weight[rng.random(n_classes) < 0.2] = 0.0
    return {
        "logits": logits,
        "targets": targets.astype(draw(st.sampled_from((np.int64, np.int32, np.int16)))),
        "ignore_index": ignore_index,
        "label_smoothing": draw(st.sampled_from((0.0, 0.0, 0.1, 0.5, 0.9))),
        "reduction": draw(st.sampled_from(REDUCTIONS)),
        "class_weight": class_weight,
    }


def loss_magnitude(problem):
    """Scale of the rounding in a loss: each row's lse - x_t cancels digits of size max |logits|."""
    logits = problem["logits"]
    finite = np.abs(logits[np.isfinite(logits)])
    row = float(finite.max(initial=0.0)) + math.log(logits.shape[-1]) + 1.0
    weight = 1.0 if problem["class_weight"] is None else float(problem["class_weight"].max(initial=1.0))
    rows = math.prod(logits.shape[:-1]) if problem["reduction"] == "sum" else 1
    return row * weight * max(rows, 1)


def grad_magnitude(problem):
    """Largest factor w_r of a gradient row w_r (p - q)."""
    targets, ignore = problem["targets"], problem["ignore_index"]
    weight = (targets != ignore).astype(np.float64)
    if problem["class_weight"] is not None:
        weight = weight * problem["class_weight"][np.where(targets != ignore, targets, 0)]
    if problem["reduction"] == "mean":
        weight = weight / weight.sum() if weight.sum() > 0 else weight
    return float(weight.max(initial=0.0))


@given(problem=cross_entropy_problems())
def test_matches_reference(isa, problem):
    before = problem["logits"].copy()
    loss, dlogits = ops.cross_entropy(**problem, return_grad=True)
    ref_loss, ref_dlogits = reference.cross_entropy(**problem, return_grad=True)
    assert_allclose(np.asarray(loss), np.asarray(ref_loss), magnitude=loss_magnitude(problem))
    assert_allclose(dlogits, ref_dlogits, magnitude=grad_magnitude(problem))
    assert_allclose(np.asarray(ops.cross_entropy(**problem)), np.asarray(loss), magnitude=loss_magnitude(problem))
    assert_array_equal(problem["logits"], before)  # the input is never written to


@given(problem=cross_entropy_problems(max_classes=7, layouts=False), data=st.data())
def test_gradient_matches_finite_differences(isa, problem, data):
    logits = problem["logits"].astype(np.float64)
    if not np.isfinite(logits).all():  # finite differences need a finite loss
        logits = np.where(np.isfinite(logits), logits, -5.0)
    problem["logits"] = logits
    if math.prod(logits.shape[:-1]) > 9:
        problem["logits"] = logits = logits.reshape(-1, logits.shape[-1])[:9]
        problem["targets"] = problem["targets"].reshape(-1)[:9]
    _, dlogits = ops.cross_entropy(**problem, return_grad=True)
    check_grad(lambda **_: np.sum(ops.cross_entropy(**problem)), {"logits": logits}, {"logits": dlogits}, atol=1e-8)


def test_by_hand(isa):
    logits = np.log(np.array([[0.25, 0.75], [0.5, 0.5]]))
    targets = np.array([1, 0])
    assert_allclose(ops.cross_entropy(logits, targets, reduction="none"), -np.log([0.75, 0.5]))
    assert_allclose(ops.cross_entropy(logits, targets), np.float64(-np.log([0.75, 0.5]).mean()))
    s = 0.2  # q = [0.1, 0.9] for the first row
    assert_allclose(
        ops.cross_entropy(logits[:1], targets[:1], label_smoothing=s, reduction="sum"),
        np.float64(-(0.1 * np.log(0.25) + 0.9 * np.log(0.75))),
    )
    _, dlogits = ops.cross_entropy(logits[:1], targets[:1], label_smoothing=s, return_grad=True)
    assert_allclose(dlogits, np.array([[0.25 - 0.1, 0.75 - 0.9]]))


def test_ignored_rows(isa):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 4, 10))
    targets = rng.integers(0, 10, (3, 4))
    targets[1] = -100
    loss, dlogits = ops.cross_entropy(logits, targets, return_grad=True)
    assert_array_equal(dlogits[1], 0.0)
    per_row = ops.cross_entropy(logits, targets, reduction="none")
    assert_array_equal(per_row[1], 0.0)
    assert_allclose(loss, np.float64(per_row.sum() / 8))  # the mean is over the 8 counted rows
    # Every row ignored: the mean is 0 (not NaN) and so is the gradient.
    loss, dlogits = ops.cross_entropy(logits, np.full((3, 4), 7), ignore_index=7, return_grad=True)
    assert loss == 0.0 and not dlogits.any()


def test_class_weight_scales_rows_by_their_target(isa):
    rng = np.random.default_rng(1)
    logits, targets = rng.standard_normal((6, 5)), np.array([0, 1, 2, 3, 4, 0])
    weight = np.array([2.0, 0.0, 1.0, 0.5, 3.0])
    per_row = ops.cross_entropy(logits, targets, reduction="none")
    w = weight[targets]
    assert_allclose(ops.cross_entropy(logits, targets, class_weight=weight, reduction="none"), w * per_row)
    assert_allclose(ops.cross_entropy(logits, targets, class_weight=weight), np.float64((w * per_row).sum() / w.sum()))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gradient_rows_sum_to_zero(isa, reduction):
    rng = np.random.default_rng(2)
    logits, targets = rng.standard_normal((40, 33)), rng.integers(0, 33, 40)
    _, dlogits = ops.cross_entropy(logits, targets, label_smoothing=0.3, reduction=reduction, return_grad=True)
    np.testing.assert_allclose(dlogits.sum(axis=-1), 0.0, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_problems_run_threaded(isa, dtype):
    rng = np.random.default_rng(3)
    logits = (5 * rng.standard_normal((97, 1001))).astype(dtype)
    targets = rng.integers(0, 1001, 97)
    targets[::7] = -100
    got = ops.cross_entropy(logits, targets, label_smoothing=0.1, reduction="sum", return_grad=True)
    want = reference.cross_entropy(logits, targets, label_smoothing=0.1, reduction="sum", return_grad=True)
    assert_allclose(np.asarray(got[0]), np.asarray(want[0]), magnitude=30.0 * 97)
    assert_allclose(got[1], want[1])


def test_extreme_logits(isa):
    logits = np.array([[1e4, -1e4, 0.0], [-np.inf, 0.0, 1.0], [-np.inf, -np.inf, -np.inf], [-np.inf, 0.0, 1.0]])
    loss, dlogits = ops.cross_entropy(logits, np.array([0, 1, 2, 0]), reduction="none", return_grad=True)
    assert_allclose(loss[:2], np.array([0.0, np.log1p(np.e)]))
    assert loss[2] == np.inf and not dlogits[2].any()  # nothing possible: infinite loss, no gradient
    assert loss[3] == np.inf  # the target is impossible
    assert_allclose(dlogits[3], np.array([-1.0, 1 / (1 + np.e), np.e / (1 + np.e)]))


def test_dtypes_and_shapes(isa):
    logits = np.zeros((2, 3, 4), np.float32)
    targets = np.zeros((2, 3), np.int32)
    loss, dlogits = ops.cross_entropy(logits, targets, return_grad=True)
    assert isinstance(loss, np.float32) and dlogits.dtype == np.float32 and dlogits.shape == (2, 3, 4)
    assert ops.cross_entropy(logits.astype(np.float16), targets).dtype == np.float32
    assert ops.cross_entropy(logits, targets, reduction="none").shape == (2, 3)
    assert ops.cross_entropy(np.zeros(4), 2, reduction="none").shape == ()  # one row: (C,) and ()
    assert ops.cross_entropy(np.zeros((0, 4)), np.zeros(0, np.int64)) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"targets": np.array([0, 5])}, ValueError, r"targets\[1\] = 5"),
        ({"targets": np.array([-1, 0])}, ValueError, r"targets\[0\] = -1"),
        ({"targets": np.array([0.0, 1.0])}, TypeError, "targets must be an integer array"),
        ({"targets": np.array([True, False])}, TypeError, "targets"),
        ({"targets": np.array([0, 1, 2])}, ValueError, r"targets must have the shape .* \(2,\), got \(3,\)"),
        ({"logits": np.zeros((2, 5), np.int64)}, TypeError, "logits"),
        ({"logits": np.zeros((2, 0))}, ValueError, "logits must have at least one class"),
        ({"label_smoothing": 1.0}, ValueError, r"label_smoothing must be in \[0, 1\)"),
        ({"label_smoothing": -0.1}, ValueError, "label_smoothing"),
        ({"label_smoothing": "0.1"}, TypeError, "label_smoothing"),
        ({"reduction": "avg"}, ValueError, "reduction"),
        ({"ignore_index": 1.5}, TypeError, "ignore_index"),
        ({"class_weight": np.ones(4)}, ValueError, r"class_weight must have shape \(C,\) = \(5,\)"),
        ({"class_weight": -np.ones(5)}, ValueError, "class_weight"),
    ],
)
def test_rejects_bad_arguments(kwargs, error, match):
    args = {"logits": np.zeros((2, 5)), "targets": np.array([0, 1]), **kwargs}
    with pytest.raises(error, match=match):
        ops.cross_entropy(**args)
