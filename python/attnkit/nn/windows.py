"""Texts longer than an encoder reads: keep their head and tail, or cut them into windows whose vectors are
pooled back into one per text.

An encoder reads at most ``max_len`` tokens (its positions, or its cost). :func:`long_text_view` gives the
encoder's view of a padded batch of whole texts: ``"truncate"`` keeps the first ``max_len`` ids (and the
closing special tokens, as a tokenizer's cut does); ``"head_tail"`` the first quarter and the last three
quarters of them (Sun et al. 2019, "How to Fine-Tune BERT for Text Classification?": 128 + 382 of 512 read
IMDB reviews best, the verdict often being in the last lines); ``"chunks"`` every token once, in the fewest
windows of at most ``max_len`` that hold it, of equal lengths (to a token), each window carrying the text's
leading and trailing special tokens (``[CLS] ... [SEP]``) as a text of its own would. :class:`WindowPooling`
turns the windows' vectors into one per text (mean, max, or a learned attention).
A text that fits is the same in every view, so short texts read as before.
"""

import numpy as np

from attnkit._validation import check_int
from attnkit.nn.module import Module

__all__ = ["LONG_TEXT_KINDS", "WindowPooling", "long_text_view", "view_tokens"]

LONG_TEXT_KINDS = ("truncate", "head_tail", "chunks")
WINDOW_POOLING_KINDS = ("mean", "max", "attention")
HEAD_SHARE = 0.25  # of head_tail's max_len, at the start (Sun et al.: 128 of 510)


def long_text_view(ids, lengths, *, how, max_len, specials=(0, 0)):
    """The encoder's view of a batch of texts longer than ``max_len``.

    Parameters
    ----------
    ids : ndarray of int, shape (B, N)
        Whole texts, padded on the right.
    lengths : ndarray of int, shape (B,)
        Real length of each text.
    how : {"truncate", "head_tail", "chunks"}
    max_len : int
        Most ids the encoder reads in one sequence.
    specials : (int, int), default=(0, 0)
        How many ids at the start and at the end of every text are special tokens (1, 1 for BERT's
        ``[CLS] ... [SEP]``; 1, 0 for a ``<cls>`` prefix): ``"truncate"`` and ``"head_tail"`` keep them (as a
        tokenizer that cuts the text does), ``"chunks"`` repeats them around every window.

    Returns
    -------
    ids : ndarray of int, shape (W, n), n <= max_len
        The sequences to encode: W = B, except with ``"chunks"``, where text b gives ``counts[b]`` windows,
        in order.
    lengths : ndarray of int64, shape (W,)
    counts : ndarray of int64, shape (B,), or None
        Windows of each text (``"chunks"`` only; at least 1, an empty text being one empty window).
    """
    ids, lengths = np.asarray(ids), np.asarray(lengths, dtype=np.int64)
    if how not in LONG_TEXT_KINDS:
        raise ValueError(f"how must be one of {LONG_TEXT_KINDS}, got {how!r}")
    max_len = check_int(max_len, "max_len", minimum=1)
    if ids.ndim != 2 or lengths.shape != ids.shape[:1]:
        raise ValueError(f"ids must be (B, N) and lengths (B,), got {ids.shape} and {lengths.shape}")
    long = lengths > max_len
    if how == "truncate" or not long.any():
        if ids.shape[1] <= max_len:
            return ids, lengths, (np.ones(len(ids), np.int64) if how == "chunks" else None)
        view = ids[:, :max_len].copy()
        after = min(specials[1], max_len - 1)
        for b in np.flatnonzero(long) if after else ():  # the closing special tokens stay, as a tokenizer's cut
            view[b, max_len - after:] = ids[b, lengths[b] - after:lengths[b]]
        return view, np.minimum(lengths, max_len), (np.ones(len(ids), np.int64) if how == "chunks" else None)
    if how == "head_tail":
        head = max(1, round(HEAD_SHARE * max_len))
        view = ids[:, :max_len].copy()
        for b in np.flatnonzero(long):
            view[b, head:] = ids[b, lengths[b] - (max_len - head):lengths[b]]
        return view, np.minimum(lengths, max_len), None
    return _windows(ids, lengths, max_len, specials)


def view_tokens(lengths, *, how, max_len, specials=(0, 0)):
    """Tokens the encoder reads of texts of ``lengths`` in the view ``how`` (:func:`long_text_view`), per text:
    what a fit on them costs."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if how != "chunks":
        return np.minimum(lengths, max_len)
    extra = sum(specials)
    return np.where(lengths <= max_len, lengths, lengths + (_window_counts(lengths, max_len, specials) - 1) * extra)


def _window_counts(lengths, max_len, specials):
    """Windows of each text longer than ``max_len``: the fewest that hold its text tokens."""
    before, after = (check_int(n, "specials", minimum=0) for n in specials)
    body = max_len - before - after
    if body < 1:
        raise ValueError(f"max_len={max_len} leaves no room for text between {before} + {after} special tokens")
    return -(-(lengths - before - after) // body)


def _windows(ids, lengths, max_len, specials):
    # Equal windows without overlap: on IMDB reviews, windows overlapping by a quarter (the last one ending with
    # the text) read ~1.3x the tokens for no better accuracy (benchmarks/results/eval_pretrained_imdb.md).
    before, after = specials
    counts = np.where(lengths <= max_len, 1, _window_counts(lengths, max_len, specials))
    rows = []
    for row, n, k in zip(ids, lengths, counts):
        if n <= max_len:
            rows.append(row[:n])
            continue
        first, text, last = row[:before], row[before:n - after], row[n - after:n]
        cuts = np.rint(np.linspace(0, len(text), k + 1)).astype(np.int64)  # k windows of equal lengths, to a token
        rows.extend(np.concatenate([first, text[s:e], last]) for s, e in zip(cuts[:-1], cuts[1:]))
    window_lengths = np.fromiter((len(r) for r in rows), np.int64, count=len(rows))
    out = np.zeros((len(rows), max(1, int(window_lengths.max(initial=0)))), dtype=ids.dtype)
    for w, r in enumerate(rows):
        out[w, :len(r)] = r
    return out, window_lengths, counts


class WindowPooling(Module):
    """One vector per text from the vectors of its windows: (W, d) rows, ``counts[b]`` of them for text b
    in order, into (B, d).

    Parameters
    ----------
    d : int
        Width of the vectors.
    mode : {"mean", "max", "attention"}, default="mean"
        The windows' average, their per-feature maximum, or ``sum_w softmax_w(q . h_w) h_w`` with a learned
        query ``q`` (starting at 0: the mean, until training finds windows that matter more).

    Attributes
    ----------
    params : dict
        ``query`` of shape (d,), with ``mode="attention"`` only.
    """

    def __init__(self, d, mode="mean"):
        super().__init__()
        if mode not in WINDOW_POOLING_KINDS:
            raise ValueError(f"mode must be one of {WINDOW_POOLING_KINDS}, got {mode!r}")
        self.d, self.mode = check_int(d, "d", minimum=1), mode
        if mode == "attention":
            self.add_param("query", np.zeros, shape=(self.d,))

    def forward(self, h, training=False, *, counts):
        """Pooled vectors (B, d) of window vectors ``h`` (W, d), ``counts`` (B,) windows per text (>= 1)."""
        h, counts = np.asarray(h), np.asarray(counts, dtype=np.int64)
        if h.ndim != 2 or h.shape[1] != self.d or counts.ndim != 1 or counts.sum() != len(h) or (counts < 1).any():
            raise ValueError(f"h must be (W, {self.d}) with W = counts.sum() and every count >= 1, got {h.shape} "
                             f"and counts summing to {counts.sum()}")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        if self.mode == "max":
            where = np.array([s + np.argmax(h[s:s + c], axis=0) for s, c in zip(starts, counts)]).reshape(-1, self.d)
            return np.take_along_axis(h, where, axis=0), (h.shape, where)
        if self.mode == "mean":
            weights = np.repeat(1.0 / counts, counts).astype(h.dtype)
        else:
            scores = h @ self.params["query"]
            peak = np.maximum.reduceat(scores, starts)
            e = np.exp(scores - np.repeat(peak, counts))
            weights = (e / np.repeat(np.add.reduceat(e, starts), counts)).astype(h.dtype)
        pooled = np.add.reduceat(weights[:, None] * h, starts, axis=0)
        return pooled, (h, weights, counts, starts, pooled)

    def backward(self, grad, cache):
        """Gradient with respect to ``h``, (W, d); with ``mode="attention"`` also the query's."""
        if self.mode == "max":
            shape, where = cache
            dh = np.zeros(shape, dtype=grad.dtype)
            np.put_along_axis(dh, where, grad, axis=0)  # each feature's arg-max window takes its gradient
            return dh
        h, weights, counts, starts, pooled = cache
        g = np.repeat(grad, counts, axis=0)
        dh = weights[:, None] * g
        if self.mode == "attention":
            # d out_b / d s_w = p_w (h_w - out_b): the softmax's Jacobian, one text at a time
            dscores = weights * np.einsum("wd,wd->w", g, h - np.repeat(pooled, counts, axis=0))
            dh += dscores[:, None] * self.params["query"]
            self.grads["query"] += dscores @ h
        return dh
