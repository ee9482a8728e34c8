"""attnkit.masking: boolean masks and key lengths checked, broadcast and turned into one form (lengths
wherever a mask is really key padding)."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit.ops.masking import check_key_lengths, check_mask, padding_lengths

batch_shapes = st.lists(st.integers(1, 3), max_size=3).map(tuple)


def _prefix_shapes(batch):
    """Shapes key_lengths may take for ``batch``: a leading prefix, each dim its size or 1."""
    return st.integers(0, len(batch)).flatmap(
        lambda ndim: st.tuples(*(st.sampled_from([1, n]) for n in batch[:ndim])))


# ------------------------------------------------------------------------------------------ check_mask


@given(nq=st.integers(1, 5), nk=st.integers(1, 5), batch=batch_shapes, data=st.data())
def test_a_broadcastable_mask_is_kept_as_it_means(nq, nk, batch, data):
    # Every mask that broadcasts to (..., Nq, Nk), each dim its size or 1, or fewer than 2 dims.
    shape = data.draw(st.one_of(
        st.tuples(*(st.sampled_from([1, n]) for n in batch + (nq, nk))),
        st.sampled_from([(), (1,), (nk,)]),
    ))
    mask = np.random.default_rng(nq * nk).random(shape) < 0.5
    checked = check_mask(mask, nq, nk)
    assert checked.ndim >= 2 and checked.dtype == np.bool_
    full = batch + (nq, nk)
    np.testing.assert_array_equal(np.broadcast_to(checked, full), np.broadcast_to(mask, full))


def test_masks_that_do_not_fit_name_the_sizes_and_their_source():
    with pytest.raises(ValueError, match=r"mask must broadcast to \(\.\.\., Nq, Nk\) = \(\.\.\., 3, 4\) of q \(3, 2\), "
                                         r"k \(4, 2\), got shape \(3, 3\)"):
        check_mask(np.ones((3, 3), bool), 3, 4, "q (3, 2), k (4, 2)")
    with pytest.raises(ValueError, match=r"= \(\.\.\., 3, 4\), got shape \(5,\)$"):
        check_mask(np.ones(5, bool), 3, 4)
    with pytest.raises(ValueError, match=r"got shape \(2, 4\)"):
        check_mask(np.ones((2, 4), bool), 3, 4)


def test_masks_must_be_boolean_arrays():
    with pytest.raises(TypeError, match=r"mask must be a boolean array \(True = may attend\), got dtype float64; "
                                        "use bias= for additive float masks"):
        check_mask(np.zeros((2, 2)), 2, 2)
    with pytest.raises(TypeError, match="got dtype int64"):
        check_mask(np.ones((2, 2), dtype=np.int64), 2, 2)
    with pytest.raises(ValueError, match="mask must be an array"):
        check_mask([[True], [True, False]], 2, 2)
    np.testing.assert_array_equal(check_mask([[True, False]], 3, 2), [[True, False]])  # nested lists are fine


# ----------------------------------------------------------------------------------- check_key_lengths


@given(batch=batch_shapes, nk=st.integers(0, 6), data=st.data())
def test_key_lengths_broadcast_from_the_left_to_one_length_per_batch_item(batch, nk, data):
    shape = data.draw(_prefix_shapes(batch))
    lengths = data.draw(st.lists(st.integers(0, nk), min_size=math.prod(shape), max_size=math.prod(shape)))
    given_lengths = np.array(lengths, dtype=data.draw(st.sampled_from([np.int32, np.int64, np.uint8]))).reshape(shape)
    checked = check_key_lengths(given_lengths, batch, nk)
    assert checked.dtype == np.int64 and checked.flags.c_contiguous and checked.shape == (math.prod(batch),)
    expected = np.broadcast_to(given_lengths.reshape(shape + (1,) * (len(batch) - len(shape))), batch)
    np.testing.assert_array_equal(checked, expected.reshape(-1))


def test_key_lengths_of_one_item_serve_every_head():
    np.testing.assert_array_equal(check_key_lengths([2, 5], (2, 3), 5), [2, 2, 2, 5, 5, 5])
    np.testing.assert_array_equal(check_key_lengths(4, (2, 3), 5), [4] * 6)
    np.testing.assert_array_equal(check_key_lengths([[1, 2, 3]], (2, 3), 5), [1, 2, 3, 1, 2, 3])
    assert check_key_lengths(np.zeros((0,), int), (0, 2), 3).shape == (0,)


@pytest.mark.parametrize(("lengths", "batch", "match"), [
    ([1, 2, 3], (2, 4), r"key_lengths must have a shape that is a leading prefix of the batch dims \(2, 4\) of "
                        r"q \(2, 4, 3, 8\) \(e\.g\. \(2,\)\), got shape \(3,\)"),
    ([[1, 2]], (2, 4), r"leading prefix of the batch dims \(2, 4\) .*got shape \(1, 2\)"),
    (np.ones((2, 4, 1), int), (2, 4), r"got shape \(2, 4, 1\)"),
])
def test_key_lengths_of_the_wrong_shape_are_refused(lengths, batch, match):
    with pytest.raises(ValueError, match=match):
        check_key_lengths(lengths, batch, 3, "q (2, 4, 3, 8)")


def test_key_lengths_must_be_integers_within_the_keys():
    with pytest.raises(ValueError, match=r"key_lengths must lie in \[0, Nk\] = \[0, 4\], got values from -1 to 3"):
        check_key_lengths([-1, 3], (2,), 4)
    with pytest.raises(ValueError, match=r"got values from 2 to 5"):
        check_key_lengths([2, 5], (2,), 4)
    for bad in ([1.0, 2.0], [True, False]):
        with pytest.raises(TypeError, match="key_lengths must be an integer array, got dtype"):
            check_key_lengths(bad, (2,), 4)
    with pytest.raises(ValueError, match="key_lengths must be an array"):
        check_key_lengths([[1], [1, 2]], (2, 2), 4)


# ------------------------------------------------------------------------------------- padding_lengths


@given(batch=batch_shapes, nk=st.integers(0, 7), data=st.data())
def test_a_key_padding_mask_becomes_its_lengths(batch, nk, data):
    lengths = np.array(data.draw(st.lists(st.integers(0, nk), min_size=math.prod(batch), max_size=math.prod(batch))),
                       dtype=np.int64).reshape(batch)
    mask = (np.arange(nk) < lengths[..., None])[..., None, :]  # (..., 1, Nk): the same for every query
    found = padding_lengths(mask, batch, nk)
    assert found is not None and found.dtype == np.int64
    np.testing.assert_array_equal(found, lengths.reshape(-1))


@given(batch=batch_shapes, nk=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_any_per_key_mask_is_lengths_exactly_when_each_row_is_true_then_false(batch, nk, seed):
    mask = np.random.default_rng(seed).random(batch + (1, nk)) < 0.7
    found = padding_lengths(mask, batch, nk)
    rows = mask.reshape(-1, nk)
    prefixes = [bool(np.all(row[: row.sum()])) for row in rows]
    assert (found is not None) == all(prefixes)
    if found is not None:
        np.testing.assert_array_equal(rows, np.arange(nk) < found[:, None])


def test_a_mask_shared_by_the_batch_is_broadcast_to_it():
    found = padding_lengths(np.array([[True, True, False]]), (2, 3), 3)
    np.testing.assert_array_equal(found, [2] * 6)
    found = padding_lengths(np.array([[[True, False, False]], [[True, True, True]]])[:, None], (2, 4), 3)
    np.testing.assert_array_equal(found, [1] * 4 + [3] * 4)


def test_masks_that_are_not_key_padding_give_none():
    assert padding_lengths(np.array([[True, False, True]]), (1,), 3) is None  # a hole: not a prefix
    assert padding_lengths(np.array([[False, True, True]]), (1,), 3) is None
    assert padding_lengths(np.tril(np.ones((3, 3), bool)), (1,), 3) is None  # differs between queries
    assert padding_lengths(np.ones((1, 1), bool), (1,), 3) is None  # not spelled out along the keys
    np.testing.assert_array_equal(padding_lengths(np.ones((1, 0), bool), (2,), 0), [0, 0])
