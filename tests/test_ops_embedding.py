"""ops.embedding_backward against its NumPy reference, bit for bit (the op's contract is an order of
additions), on every ISA and thread count; against numpy.add.at; and its errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attnkit import ops, reference
from attnkit.testing.strategies import head_dims, sequence_lengths


@st.composite
def problems(draw):
    vocab = draw(st.integers(1, 40))
    width = draw(head_dims())
    ids_shape = tuple(draw(st.lists(sequence_lengths(min_value=0, max_value=40), min_size=1, max_size=2)))
    seed = draw(st.integers(0, 2**32 - 1))
    dtype = draw(st.sampled_from((np.float32, np.float64)))
    rng = np.random.default_rng(seed)
    # Few distinct ids too, so that an id's run is long (characters), and many positions (repeated words).
    ids = rng.integers(0, draw(st.sampled_from((1, 2, vocab))) if vocab > 1 else 1, size=ids_shape)
    grad = rng.standard_normal(ids_shape + (width,)).astype(dtype)
    grad_weight = rng.standard_normal((vocab, width)).astype(dtype)
    padding_idx = draw(st.one_of(st.none(), st.integers(0, vocab - 1)))
    return grad_weight, ids, grad, padding_idx


@given(problem=problems())
def test_matches_reference_bit_for_bit(isa, problem):
    grad_weight, ids, grad, padding_idx = problem
    before = grad.copy()
    got = ops.embedding_backward(grad_weight.copy(), ids, grad, padding_idx=padding_idx)
    want = reference.embedding_backward(grad_weight.copy(), ids, grad, padding_idx=padding_idx)
    assert got.dtype == grad_weight.dtype
    assert_array_equal(got, want)
    assert_array_equal(grad, before)


def test_equals_add_at_and_is_the_same_on_every_thread_count(isa, kernel_threads):
    # 5,000 tokens of width 128: past the 2^18 elements from which ids are split over threads.
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 300, size=(40, 125))
    grad = rng.standard_normal((40, 125, 128))
    got = ops.embedding_backward(np.zeros((300, 128)), ids, grad, padding_idx=7)
    assert_array_equal(got, reference.embedding_backward(np.zeros((300, 128)), ids, grad, padding_idx=7))
    want = np.zeros((300, 128))
    np.add.at(want, ids.reshape(-1), grad.reshape(-1, 128))
    want[7] = 0.0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_accumulates_and_skips_the_padding_row():
    g = np.ones((3, 2), np.float32)
    ops.embedding_backward(g, [0, 2, 2, 1], np.arange(8, dtype=np.float32).reshape(4, 2), padding_idx=1)
    assert g.tolist() == [[1.0, 2.0], [1.0, 1.0], [7.0, 9.0]]
    assert ops.embedding_backward(g, np.zeros((0,), int), np.zeros((0, 2))) is g  # no tokens: unchanged
    assert g.tolist() == [[1.0, 2.0], [1.0, 1.0], [7.0, 9.0]]


@pytest.mark.parametrize("vocab, width, ids", [(0, 2, np.zeros(0, int)), (3, 0, [1, 2]), (3, 0, np.zeros((2, 0), int))])
def test_empty_tables_and_rows(vocab, width, ids):
    grad_weight = np.zeros((vocab, width))
    ids = np.asarray(ids)
    assert ops.embedding_backward(grad_weight, ids, np.zeros(ids.shape + (width,))) is grad_weight


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_table_in_another_layout_gets_the_same_bits(dtype):
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 9, size=(4, 30))
    grad = rng.standard_normal((4, 30, 5)).astype(dtype)
    start = rng.standard_normal((9, 5)).astype(dtype)
    want = ops.embedding_backward(start.copy(), ids, grad, padding_idx=2)
    for table in (np.asfortranarray(start), start.T.copy().T, np.repeat(start, 2, axis=1)[:, ::2]):
        assert not table.flags.c_contiguous
        got = ops.embedding_backward(table, ids, grad, padding_idx=2)
        assert got is table
        assert_array_equal(got, want)


def test_gradient_of_a_float64_lookup_is_cast_to_the_table_dtype():
    g = np.zeros((2, 3), np.float32)
    ops.embedding_backward(g, [1], np.full((1, 3), 1 / 3))
    assert g.dtype == np.float32 and g[1, 0] == np.float32(1 / 3)


def test_gradient_that_shares_the_table_memory_is_read_before_it_is_written():
    table = np.arange(12, dtype=np.float64).reshape(4, 3)
    want = reference.embedding_backward(table.copy(), [0, 0, 3], table[[1, 1, 2]].copy())
    view = np.lib.stride_tricks.as_strided(table[1:], shape=(3, 3), strides=(0, 8))  # row 1, three times
    got = ops.embedding_backward(table, [0, 0, 3], np.concatenate([view[:2], table[2:3]]))
    assert_array_equal(got, want)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(grad_weight=[[0.0]]), TypeError, "grad_weight must be a float32 or float64 ndarray"),
        (dict(grad_weight=np.zeros((3, 2), np.int64)), TypeError, "grad_weight must be a float32 or float64"),
        (dict(grad_weight=np.zeros(6)), ValueError, "grad_weight must be a writable 2-D array"),
        (dict(ids=[0.5, 1.0]), TypeError, "ids must be an integer array"),
        (dict(ids=[0, 3]), ValueError, r"ids must be in \[0, 3\) \(grad_weight's rows\), got 3"),
        (dict(ids=[-1, 0]), ValueError, "got -1"),
        (dict(grad=np.zeros((2, 3))), ValueError, r"grad must have shape ids.shape \+ \(width,\) = \(2, 2\)"),
        (dict(grad=np.zeros((2, 2), int)), TypeError, "grad must be a float32 or float64 array"),
        (dict(padding_idx=3), ValueError, "padding_idx"),
        (dict(padding_idx=1.5), TypeError, "padding_idx"),
    ],
)
def test_errors(kwargs, error, match):
    args = dict(grad_weight=np.zeros((3, 2)), ids=[0, 1], grad=np.zeros((2, 2))) | kwargs
    padding_idx = args.pop("padding_idx", None)
    with pytest.raises(error, match=match):
        ops.embedding_backward(**args, padding_idx=padding_idx)


def test_read_only_table_is_refused():
    g = np.zeros((3, 2))
    g.flags.writeable = False
    with pytest.raises(ValueError, match="writable: False"):
        ops.embedding_backward(g, [0], np.zeros((1, 2)))
