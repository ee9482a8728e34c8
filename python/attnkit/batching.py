"""Batches of sequences of similar lengths, so that a padded batch pads little: the one rule for training
(shuffled, bucketed anew each pass) and for inference (sorted, cut by a budget of padded tokens).

:func:`training_batches` shuffles the samples, sorts pools of ``BUCKET_POOL`` batches by length, cuts them and
shuffles the batches: padding shrinks while each pass still sees new batches. :func:`inference_batches` sorts
the samples by length and cuts the order where a batch would pass ``max_tokens`` padded tokens or
``max_samples`` samples; :func:`balanced_batches` cuts it into a given number of batches of equal tokens (one per
thread, for a call of few samples). :func:`length_sorted_batches` pads the id lists of each inference batch
(:func:`pad_sequences`).
"""

import math

import numpy as np

__all__ = ["BUCKET_POOL", "balanced_batches", "inference_batches", "pad_sequences", "length_sorted_batches",
           "training_batches"]

#: Training batches are cut from pools of this many batches' worth of samples sorted by length: the samples
#: of a batch have similar lengths (little padding) while the pools keep the order random.
BUCKET_POOL = 50


def training_batches(lengths, batch_size, rng, *, bucket=True):
    """Shuffled minibatches of sample indices, optionally of similar lengths.

    Parameters
    ----------
    lengths : array of int, shape (n_samples,)
    batch_size : int
    rng : numpy.random.Generator
    bucket : bool, default=True
        Shuffle, cut into pools of ``BUCKET_POOL`` batches, sort each pool by length, cut it into
        batches and shuffle the batches: padding shrinks, each pass still sees new batches.

    Returns
    -------
    list of ndarray of int
        Every sample exactly once; all batches have ``batch_size`` samples except one.
    """
    lengths = np.asarray(lengths)
    order = rng.permutation(lengths.size)
    if bucket:
        pool = batch_size * BUCKET_POOL
        order = np.concatenate([chunk[np.argsort(lengths[chunk], kind="stable")]
                                for chunk in np.array_split(order, max(1, math.ceil(order.size / pool)))])
    batches = [order[i : i + batch_size] for i in range(0, order.size, batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def inference_batches(lengths, *, max_tokens=None, max_samples=None):
    """Index arrays of inference batches: samples sorted by length (stable), each batch at most ``max_tokens``
    padded tokens (its size times its longest length, an empty sample counting as 1) and ``max_samples``
    samples, and at least one sample.

    Parameters
    ----------
    lengths : array of int, shape (n_samples,)
    max_tokens : int, optional
        No budget when None.
    max_samples : int, optional
        No cap when None.

    Yields
    ------
    ndarray of int
        The samples of each batch, shortest first.
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    order = np.argsort(lengths, kind="stable")
    limit = order.size if max_samples is None else max(1, int(max_samples))
    budget = math.inf if max_tokens is None else max_tokens
    start = 0
    while start < order.size:
        # Sorted, so a batch's padded width is the length of its last sample.
        stop = start + 1
        while stop < order.size and stop - start < limit and \
                (stop - start + 1) * max(1, lengths[order[stop]]) <= budget:
            stop += 1
        yield order[start:stop]
        start = stop


def balanced_batches(lengths, parts):
    """Index arrays of at most ``parts`` inference batches of about equal tokens: samples sorted by length
    (stable), the order cut where the running sum of lengths (an empty sample counting as 1) passes each
    ``1 / parts`` of the total. For padding-free models, whose work is their real tokens: ``parts`` threads
    each take one batch of a call too small to share out as :func:`inference_batches` cuts it (16 short and
    16 long texts, where the longer half is twice the work).

    Parameters
    ----------
    lengths : array of int, shape (n_samples,)
    parts : int
        At least 1.

    Yields
    ------
    ndarray of int
        The samples of each batch, shortest first; no empty batch.

    Examples
    --------
    >>> [b.tolist() for b in balanced_batches([5, 1, 1, 1, 2], 2)]
    [[1, 2, 3, 4], [0]]
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    parts = max(1, int(parts))
    order = np.argsort(lengths, kind="stable")
    if not order.size:
        return
    running = np.concatenate([[0], np.cumsum(np.maximum(lengths[order], 1))])  # tokens before each cut
    targets = running[-1] * np.arange(1, parts) / parts
    after = np.clip(np.searchsorted(running, targets), 1, order.size)  # the first cut at or past each share
    cuts = np.where(running[after] - targets < targets - running[after - 1], after, after - 1)  # the nearer
    for batch in np.split(order, np.unique(cuts)):
        if batch.size:
            yield batch


def length_sorted_batches(sequences, batch_size, *, pad_id=0):
    """Padded inference batches of id lists of similar lengths, ``batch_size`` sequences each.

    Parameters
    ----------
    sequences : sequence of sequences of int
    batch_size : int
    pad_id : int, default=0

    Yields
    ------
    rows : ndarray of int
        Positions in ``sequences`` of the batch's items.
    ids, lengths : ndarray
        As :func:`pad_sequences` gives them for those items.
    """
    for rows in inference_batches([len(seq) for seq in sequences], max_samples=batch_size):
        yield (rows, *pad_sequences([sequences[i] for i in rows], pad_id=pad_id))


def pad_sequences(sequences, *, pad_id=0, max_len=None, dtype=np.int64):
    """A padded batch of id lists.

    Parameters
    ----------
    sequences : sequence of sequences of int
        One id list per item; items may be empty.
    pad_id : int, default=0
        Value of the padding positions (``Vocabulary.pad_id``).
    max_len : int, optional
        Truncate items to this many ids. The batch is as wide as its longest (truncated) item.
    dtype : numpy integer dtype, default=numpy.int64

    Returns
    -------
    ids : ndarray of shape (B, N)
        Items left-aligned, padded on the right with ``pad_id``; N >= 1 (an all-empty batch gets
        one column of padding, so that every layer sees a non-empty sequence axis).
    lengths : ndarray of shape (B,), int64
        The real length of each item (what attention's ``key_lengths`` takes).
    """
    if max_len is not None:
        sequences = [seq[:max_len] for seq in sequences]
    lengths = np.fromiter((len(seq) for seq in sequences), dtype=np.int64, count=len(sequences))
    width = max(1, int(lengths.max(initial=0)))
    ids = np.full((len(sequences), width), pad_id, dtype=dtype)
    for row, seq in zip(ids, sequences):
        row[: len(seq)] = seq
    return ids, lengths
