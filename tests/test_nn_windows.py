"""nn.windows: the encoder's view of long texts (truncate, head + tail, windows) and the pooling of
windows back into one vector per text, with its gradients against finite differences."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit import nn
from attnkit.nn.windows import HEAD_SHARE, WindowPooling, long_text_view, view_tokens
from attnkit.testing import check_module_grad
from attnkit.text import pad_sequences


def _texts(lengths, specials=(1, 1)):
    """Texts [100 + b, b*1000 + 1, b*1000 + 2, ..., 200 + b]: distinct ids, a first and a last special."""
    before, after = specials
    docs = []
    for b, n in enumerate(lengths):
        body = list(range(b * 1000 + 1, b * 1000 + 1 + n - before - after))
        docs.append([100 + b] * before + body + [200 + b] * after)
    return pad_sequences(docs)


@pytest.mark.parametrize("how", ["truncate", "head_tail", "chunks"])
def test_texts_that_fit_read_whole_in_every_view(how):
    ids, lengths = _texts([8, 3, 2])
    view, view_lengths, counts = long_text_view(ids, lengths, how=how, max_len=8, specials=(1, 1))
    np.testing.assert_array_equal(view, ids)
    np.testing.assert_array_equal(view_lengths, lengths)
    assert (counts is None) == (how != "chunks") and (counts is None or counts.tolist() == [1, 1, 1])


@pytest.mark.parametrize("n", [16, 17, 1000])  # at, one over and far over the positions
def test_head_tail_keeps_the_first_quarter_and_the_last_three(n):
    ids, lengths = _texts([n, 5])
    view, view_lengths, counts = long_text_view(ids, lengths, how="head_tail", max_len=16, specials=(1, 1))
    head = round(HEAD_SHARE * 16)
    expected = ids[0, :16] if n <= 16 else np.concatenate([ids[0, :head], ids[0, n - (16 - head):n]])
    np.testing.assert_array_equal(view[0, :16], expected)
    assert view[0, 0] == 100 and view[0, 15] == 200  # [CLS] and [SEP] kept
    assert view_lengths.tolist() == [16, 5] and counts is None
    np.testing.assert_array_equal(view[1, :5], ids[1, :5])


@pytest.mark.parametrize("n", [16, 17, 1000])  # at, one over and far over the positions
@pytest.mark.parametrize("specials", [(1, 1), (1, 0), (0, 0)])
def test_truncate_keeps_the_first_ids_and_the_closing_specials(n, specials):
    ids, lengths = _texts([n, 5], specials)
    view, view_lengths, counts = long_text_view(ids, lengths, how="truncate", max_len=16, specials=specials)
    after = specials[1]
    expected = np.concatenate([ids[0, :16 - after], ids[0, n - after:n]]) if n > 16 else ids[0, :16]
    np.testing.assert_array_equal(view[0, :16], expected)
    assert view_lengths.tolist() == [16, 5] and counts is None
    np.testing.assert_array_equal(view[1, :5], ids[1, :5])


@pytest.mark.parametrize("n", [16, 17, 40, 1000])  # at, one over and far over the positions
def test_windows_read_every_token_once_with_the_specials_around_each(n):
    ids, lengths = _texts([n, 4])
    view, view_lengths, counts = long_text_view(ids, lengths, how="chunks", max_len=16, specials=(1, 1))
    first = view[:counts[0]]
    assert counts.tolist()[1:] == [1] and len(view) == counts.sum() and (view_lengths <= 16).all()
    assert (first[:, 0] == 100).all() and (first[np.arange(len(first)), view_lengths[:counts[0]] - 1] == 200).all()
    seen = np.concatenate([w[1:m - 1] for w, m in zip(first, view_lengths)])
    np.testing.assert_array_equal(seen, ids[0, 1:n - 1])  # every text token once, in order
    assert counts[0] == max(1, -(-(n - 2) // 14))  # the fewest windows of 14 text tokens that hold them
    assert np.ptp(view_lengths[:counts[0]]) <= 1  # of equal lengths, to a token
    np.testing.assert_array_equal(view[-1, :4], ids[1, :4])
    tokens = view_tokens(lengths, how="chunks", max_len=16, specials=(1, 1))
    assert tokens.tolist() == [view_lengths[:counts[0]].sum(), 4]


@given(lengths=st.lists(st.integers(0, 60), min_size=1, max_size=5), max_len=st.integers(3, 20),
       before=st.integers(0, 1), after=st.integers(0, 1))
def test_windows_for_any_lengths(lengths, max_len, before, after):
    lengths = [max(n, before + after) for n in lengths]
    ids, lengths = _texts(lengths, (before, after))
    view, view_lengths, counts = long_text_view(ids, lengths, how="chunks", max_len=max_len,
                                                specials=(before, after))
    assert counts.sum() == len(view) and (counts >= 1).all() and (view_lengths <= max_len).all()
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    for b, (start, count) in enumerate(zip(starts, counts)):
        body = set(ids[b, before:lengths[b] - after].tolist())
        read = set()
        for w in range(start, start + count):
            read |= set(view[w, before:view_lengths[w] - after].tolist())
        assert read == body
    tokens = view_tokens(lengths, how="chunks", max_len=max_len, specials=(before, after))
    np.testing.assert_array_equal(tokens, np.add.reduceat(view_lengths, starts))  # what a fit on them costs


def test_a_window_needs_room_for_text():
    ids, lengths = _texts([9])
    with pytest.raises(ValueError, match="max_len=2 leaves no room for text between 1 \\+ 1 special tokens"):
        long_text_view(ids, lengths, how="chunks", max_len=2, specials=(1, 1))
    with pytest.raises(ValueError, match="how must be one of"):
        long_text_view(ids, lengths, how="middle", max_len=4)


def test_window_pooling_pools_each_texts_windows():
    h = np.arange(12.0).reshape(6, 2)
    counts = np.array([1, 3, 2])
    mean, _ = WindowPooling(2, "mean").forward(h, counts=counts)
    largest, _ = WindowPooling(2, "max").forward(h, counts=counts)
    np.testing.assert_allclose(mean, [h[0], h[1:4].mean(0), h[4:].mean(0)])
    np.testing.assert_allclose(largest, [h[0], h[1:4].max(0), h[4:].max(0)])
    attention = WindowPooling(2, "attention")
    np.testing.assert_allclose(attention.forward(h, counts=counts)[0], mean)  # a zero query is the mean
    attention.params["query"][:] = [0.0, 50.0]
    np.testing.assert_allclose(attention.forward(h, counts=counts)[0], largest, atol=1e-6)  # a sharp query: argmax
    with pytest.raises(ValueError, match="counts summing to 5"):
        attention.forward(h, counts=np.array([1, 2, 2]))


class _Counted(nn.Module):
    def __init__(self, mode, counts, rng):
        super().__init__()
        self.add_child("pool", WindowPooling(4, mode))
        if mode == "attention":
            self.pool.params["query"][:] = rng.standard_normal(4)
        self.counts = counts

    def forward(self, x, training=False):
        return self.pool.forward(x, training, counts=self.counts)

    def backward(self, grad, cache):
        return self.pool.backward(grad, cache)


@pytest.mark.parametrize("mode", ["mean", "max", "attention"])
@pytest.mark.parametrize("seed", [0, 1])
def test_window_pooling_gradients(mode, seed):
    rng = np.random.default_rng(seed)
    counts = np.array([2, 1, 4])
    check_module_grad(_Counted(mode, counts, rng).astype(np.float64), rng.standard_normal((7, 4)), rng=seed)


@pytest.mark.parametrize("long_texts", ["head_tail", "chunks"])
@pytest.mark.parametrize("window_pooling", ["mean", "attention"])
def test_gradients_through_a_classifier_reading_long_texts(long_texts, window_pooling):
    rng = np.random.default_rng(0)
    net = nn.SequenceClassifier(30, 2, rng, d_model=8, n_heads=2, n_layers=1, d_ff=8, dropout=0.0, max_len=6,
                                long_texts=long_texts, window_pooling=window_pooling, specials=(1, 0),
                                pooling="mean").astype(np.float64)
    if window_pooling == "attention" and long_texts == "chunks":
        net.windows.params["query"][:] = rng.standard_normal(8)
    ids, lengths = pad_sequences([[2] + list(rng.integers(5, 30, 14)), [2, 7, 8], [2] + list(rng.integers(5, 30, 7))])

    class _Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.add_child("net", net)

        def forward(self, x, training=False):
            return net.forward(x, training, lengths=lengths)

        def backward(self, grad, cache):
            return net.backward(grad, cache)

    check_module_grad(_Fixed(), ids, rng=0)  # every parameter; token ids have no gradient
