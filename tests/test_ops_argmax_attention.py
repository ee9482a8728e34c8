"""ops.argmax_attention against the NumPy reference, on every ISA: the key each query takes, ties, queries that
see nothing, NaN, and the limit of softmax attention it is."""

import numpy as np
import pytest
from hypothesis import given
from numpy.testing import assert_array_equal

import attnkit
from attnkit import ops, reference
from attnkit.testing.strategies import attention_problems


def _numbered_values(problem):
    """v replaced by each key's index (plus 1/2): the output row says which key a query took."""
    nk = problem["k"].shape[-2]
    batch = np.broadcast_shapes(problem["q"].shape[:-2], problem["k"].shape[:-2], problem["v"].shape[:-2])
    return np.broadcast_to(np.arange(nk, dtype=problem["v"].dtype)[:, None] + 0.5, batch + (nk, 1))


@given(problem=attention_problems(max_n=130))
def test_each_query_takes_its_best_visible_key(isa, problem):
    problem = dict(problem, v=_numbered_values(problem))
    got = ops.argmax_attention(**problem)
    expected = reference.argmax_attention(**problem)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    differ = got != expected
    if not differ.any():
        return
    # Only near-ties may go either way: float32 logits round. The key the kernel took must be visible and
    # score within rounding of the best (float64 logits, as the reference computes them).
    q, k = (np.asarray(problem[n], np.float64) for n in ("q", "k"))
    scale = 1 / np.sqrt(q.shape[-1]) if problem["scale"] is None else problem["scale"]
    logits = scale * (q @ np.swapaxes(k, -1, -2)) + (0 if problem["bias"] is None else problem["bias"])
    logits = np.broadcast_to(logits, got.shape[:-1] + (k.shape[-2],))
    taken = np.take_along_axis(logits, (got[..., :1] - 0.5).astype(np.int64).clip(0), axis=-1)[..., 0]
    best = np.take_along_axis(logits, (expected[..., :1] - 0.5).astype(np.int64).clip(0), axis=-1)[..., 0]
    rows = differ[..., 0]
    assert np.all(np.isfinite(got[rows])) and np.all(np.isfinite(expected[rows]))
    tol = 1e-4 if got.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(taken[rows], best[rows], rtol=tol, atol=tol * (1 + np.abs(best[rows]).max()))


def test_ties_go_to_the_lowest_key_and_blind_queries_get_zeros(isa):
    q = np.ones((3, 2))
    k = np.array([[0.0, 0.5], [1.0, 0.0], [0.5, 0.25], [1.0, 0.0]])  # logits 0.5, 1, 0.75, 1: keys 1 and 3 tie
    v = np.array([[1.0], [2.0], [3.0], [4.0]])
    assert_array_equal(attnkit.argmax_attention(q, k, v), [[2.0], [2.0], [2.0]])
    # Causal, end-aligned: 3 queries at positions 1..3 see keys up to 1, 2, 3.
    assert_array_equal(attnkit.argmax_attention(q, k, v, causal=True), [[2.0], [2.0], [2.0]])
    assert_array_equal(attnkit.argmax_attention(q, k, v, window=(0, 0)), [[2.0], [3.0], [4.0]])
    assert_array_equal(attnkit.argmax_attention(q, k, v, key_lengths=0), np.zeros((3, 1)))
    bias = np.array([0.0, -np.inf, -np.inf, -np.inf])  # only key 0 left, with a finite logit
    assert_array_equal(attnkit.argmax_attention(q, k, v, bias=bias), [[1.0], [1.0], [1.0]])
    assert_array_equal(attnkit.argmax_attention(q, k, v, bias=np.full(4, -np.inf)), np.zeros((3, 1)))


def test_nan_reaches_only_the_queries_that_see_it(isa):
    q, v = np.ones((3, 2)), np.arange(4.0)[:, None]
    k = np.ones((4, 2))
    k[2, 0] = np.nan
    got = attnkit.argmax_attention(q, k, v, causal=True, window=(0, 0))  # query i sees key i + 1 only
    assert_array_equal(got, [[1.0], [np.nan], [3.0]])
    v_nan = v.copy()
    v_nan[0] = np.nan  # a NaN value is read only by the query that takes its key
    out = attnkit.argmax_attention(np.array([[1.0, 0.0], [0.0, 1.0]]), np.eye(2), v_nan[:2])
    assert np.isnan(out[0, 0]) and out[1, 0] == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_it_is_the_limit_of_softmax_attention(isa, dtype):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, n, 8)).astype(dtype) for n in (20, 30, 30))
    hard = ops.argmax_attention(q, k, v, causal=True)
    soft = ops.scaled_dot_product_attention(q, k, v, causal=True, scale=1e4 if dtype == np.float64 else 3e3)
    np.testing.assert_allclose(hard, soft, atol=1e-6 if dtype == np.float64 else 1e-3)


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    (dict(window=(1, -1)), ValueError, "window"),
    (dict(window=[1]), TypeError, "window"),
    (dict(mask=np.ones((2, 3))), TypeError, "mask"),
    (dict(key_lengths=np.array([4])), ValueError, "key_lengths"),
    (dict(causal="yes"), TypeError, "causal"),
])
def test_bad_arguments_are_named(kwargs, error, name):
    q, k, v = np.ones((2, 4)), np.ones((3, 4)), np.ones((3, 2))
    with pytest.raises(error, match=name):
        attnkit.argmax_attention(q, k, v, **kwargs)
