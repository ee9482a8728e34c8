"""attnkit.batching: training batches (shuffled, length-bucketed) and inference batches (sorted, by a token
budget) of similar lengths."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit.batching import balanced_batches, inference_batches, length_sorted_batches, pad_sequences, training_batches


@pytest.mark.parametrize("bucket", [False, True])
def test_batches_cover_every_sample_once(bucket):
    lengths = np.random.default_rng(0).integers(1, 50, size=1003)
    batches = training_batches(lengths, 32, np.random.default_rng(1), bucket=bucket)
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(1003))
    assert sorted(len(b) for b in batches)[1:] == [32] * (len(batches) - 1)


def test_bucketing_cuts_padding_and_still_shuffles():
    lengths = np.random.default_rng(0).integers(1, 60, size=4000)

    def padding(batches):
        return sum(int(lengths[b].max()) * len(b) - int(lengths[b].sum()) for b in batches)

    plain = training_batches(lengths, 32, np.random.default_rng(1), bucket=False)
    bucketed = training_batches(lengths, 32, np.random.default_rng(1), bucket=True)
    assert padding(bucketed) < 0.2 * padding(plain)
    again = training_batches(lengths, 32, np.random.default_rng(2), bucket=True)
    assert not all(np.array_equal(a, b) for a, b in zip(bucketed, again))


def test_batches_are_reproducible():
    lengths = np.arange(100)
    first = training_batches(lengths, 8, np.random.default_rng(5))
    second = training_batches(lengths, 8, np.random.default_rng(5))
    assert all(np.array_equal(a, b) for a, b in zip(first, second))


@given(lengths=st.lists(st.integers(0, 50), max_size=60), max_tokens=st.sampled_from([None, 1, 16, 100]),
       max_samples=st.sampled_from([None, 1, 3, 8]))
def test_inference_batches_sort_and_respect_the_budget(lengths, max_tokens, max_samples):
    batches = list(inference_batches(lengths, max_tokens=max_tokens, max_samples=max_samples))
    order = np.concatenate(batches) if batches else np.zeros(0, int)
    np.testing.assert_array_equal(order, np.argsort(lengths, kind="stable"))  # every sample, shortest first
    for rows in batches:
        assert len(rows) >= 1 and (max_samples is None or len(rows) <= max_samples)
        padded = len(rows) * max(1, max(lengths[i] for i in rows))
        assert len(rows) == 1 or max_tokens is None or padded <= max_tokens


def test_length_sorted_batches_pad_each_batch_to_its_longest():
    sequences = [[1, 2, 3], [4], [], [5, 6], [7, 8, 9, 10]]
    batches = list(length_sorted_batches(sequences, 2, pad_id=0))
    assert [rows.tolist() for rows, _, _ in batches] == [[2, 1], [3, 0], [4]]
    rows, ids, lengths = batches[1]
    np.testing.assert_array_equal(ids, [[5, 6, 0], [1, 2, 3]])
    np.testing.assert_array_equal(lengths, [2, 3])


def test_pad_sequences():
    ids, lengths = pad_sequences([[5, 6, 7], [], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 0], [8, 0, 0]]
    assert lengths.tolist() == [3, 0, 1] and lengths.dtype == np.int64 and ids.dtype == np.int64

def test_pad_sequences_truncates_and_keeps_one_column():
    ids, lengths = pad_sequences([[5, 6, 7], [8]], max_len=2, pad_id=-1, dtype=np.int32)
    assert ids.tolist() == [[5, 6], [8, -1]] and lengths.tolist() == [2, 1] and ids.dtype == np.int32
    ids, lengths = pad_sequences([[], []])
    assert ids.shape == (2, 1) and lengths.tolist() == [0, 0]
    ids, lengths = pad_sequences([])
    assert ids.shape == (0, 1) and lengths.shape == (0,)

def test_length_sorted_batches_cover_every_item_with_little_padding():
    sequences = [[1] * n for n in (5, 1, 3, 1, 4, 2, 0)]
    batches = list(length_sorted_batches(sequences, 3))
    assert sorted(int(r) for rows, _, _ in batches for r in rows) == list(range(7))
    for rows, ids, lengths in batches:
        assert lengths.tolist() == [len(sequences[r]) for r in rows]
        assert ids.shape == (len(rows), max(1, max(lengths)))
    assert [lengths.tolist() for _, _, lengths in batches] == [[0, 1, 1], [2, 3, 4], [5]]


@given(lengths=st.lists(st.integers(0, 300), max_size=80), parts=st.integers(1, 6))
def test_balanced_batches_share_the_tokens_out(lengths, parts):
    batches = list(balanced_batches(lengths, parts))
    assert len(batches) <= parts and all(b.size for b in batches)
    order = np.concatenate(batches) if batches else np.empty(0, np.int64)
    assert np.array_equal(order, np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable"))  # sorted, once
    tokens = [int(np.maximum(np.asarray(lengths)[b], 1).sum()) for b in batches]
    if tokens:  # each batch within one sample of an equal share
        longest = max(max(lengths), 1)
        assert max(tokens) <= sum(tokens) / parts + longest
