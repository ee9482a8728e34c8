"""A linear model over the hashed n-grams of a token-id sequence: the "wide" path beside a
transformer (wide & deep, fastText), which sees every n-gram of a sequence however long it is."""

import numpy as np

from attnkit._validation import check_int, check_real
from attnkit.nn.module import Module

__all__ = ["NgramBag"]

# 64-bit multiplicative hashing (Fibonacci hashing's constant); numpy's uint64 arithmetic wraps.
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


class NgramBag(Module):
    """``out[b] = gain * sum over the n-grams g of sequence b of table[hash(g)] / sqrt(count[b])``.

    Every contiguous run of 1 .. ``order`` real tokens is one feature, one of the ``buckets`` rows
    of a table with ``n_outputs`` columns: a word's row is its id (modulo ``buckets``), a longer
    n-gram's a hash of its ids. The output is the logits of a linear classifier on a binary bag
    of n-grams, normalised by the square root of the number of n-grams (the L2 norm of that bag,
    as TF-IDF features are). The table starts at zero, so the path adds nothing until trained.

    Parameters
    ----------
    n_outputs : int
        Width of the output (the number of classes).
    order : int, default=2
        Longest n-gram (1: words only, 2: words and word pairs, ...).
    buckets : int, default=2**18
        Rows of the hashed table; distinct n-grams that hash to the same row share its weights.
    gain : float, default=1.0
        A constant factor on the output. Adam moves every parameter by about the learning rate per
        step whatever its gradient's size, and a rare n-gram's row only moves in the few batches
        that hold it: the gain sets how far that moves the logits (the path's effective learning
        rate is gain x lr).

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import NgramBag
    >>> bag = NgramBag(3, order=2, buckets=64)
    >>> out, cache = bag.forward(np.array([[5, 6, 7], [8, 0, 0]]), lengths=np.array([3, 1]))
    >>> out.shape, float(abs(out).max())
    ((2, 3), 0.0)
    """

    def __init__(self, n_outputs, *, order=2, buckets=2**18, gain=1.0):
        super().__init__()
        self.gain = check_real(gain, "gain", positive=True)
        self.order = check_int(order, "order", minimum=1)
        self.buckets = check_int(buckets, "buckets", minimum=1)
        self.add_param("table", np.zeros, shape=(self.buckets, check_int(n_outputs, "n_outputs", minimum=1)))

    def features(self, ids, lengths):
        """Bucket of every n-gram within the real lengths and the sequence it belongs to, two flat
        arrays, plus the number of n-grams per sequence (B,)."""
        ids = np.asarray(ids)
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise ValueError(f"ids must be a 2-D integer array, got {ids.dtype} of shape {ids.shape}")
        lengths = np.asarray(lengths)
        if lengths.shape != ids.shape[:1]:
            raise ValueError(f"lengths must have shape ({ids.shape[0]},), got {lengths.shape}")
        batch, n = ids.shape
        tokens = ids.astype(np.uint64) + np.uint64(1)
        real = np.arange(n) < lengths[:, None]
        bucket_parts, row_parts = [], []
        h = np.zeros((batch, n), dtype=np.uint64)
        for size in range(1, min(self.order, n) + 1):
            # h[:, i] hashes tokens i .. i + size - 1; the run is real if its last token is.
            width = n - size + 1
            h = (h[:, :width] + np.uint64(size)) * _MULTIPLIER + tokens[:, size - 1:]
            keep = real[:, size - 1:]
            if size == 1:  # a word's own id: distinct words never share a row below `buckets` ids
                mixed = ids[keep].astype(np.uint64)
            else:
                mixed = h[keep]
                mixed ^= mixed >> np.uint64(29)
            bucket_parts.append((mixed % np.uint64(self.buckets)).astype(np.int64))
            row_parts.append(np.nonzero(keep)[0])
        buckets = np.concatenate(bucket_parts) if bucket_parts else np.zeros(0, np.int64)
        rows = np.concatenate(row_parts) if row_parts else np.zeros(0, np.int64)
        return buckets, rows, np.bincount(rows, minlength=batch)

    def forward(self, ids, training=False, *, lengths):
        """Outputs (B, n_outputs) for token ids (B, N) whose real lengths are ``lengths`` (B,)."""
        buckets, rows, counts = self.features(ids, lengths)
        table = self.params["table"]
        scale = (self.gain / np.sqrt(np.maximum(counts, 1))).astype(table.dtype)
        out = np.zeros((len(counts), table.shape[1]), dtype=table.dtype)
        np.add.at(out, rows, table[buckets])
        return out * scale[:, None], (buckets, rows, scale)

    def backward(self, grad, cache):
        """Adds the table's gradient; returns None (ids have no gradient)."""
        buckets, rows, scale = cache
        np.add.at(self.grads["table"], buckets, (grad * scale[:, None])[rows])
