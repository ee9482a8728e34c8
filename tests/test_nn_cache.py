"""attnkit.nn.cache: the key/value buffers and running sums of incremental decoding, and their reorder
(beam search keeps, repeats and drops rows)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit.nn.cache import CrossAttentionCache, SelfAttentionCache
from attnkit.ops import LinearAttentionState

B, H, D = 3, 2, 4


def _positions(rng, n, batch=B, dtype=np.float64):
    """n positions of keys and values, each (batch, H, n, D)."""
    return rng.standard_normal((batch, H, n, D)).astype(dtype), rng.standard_normal((batch, H, n, D)).astype(dtype)


def _filled(rng, n, capacity=2, batch=B):
    keys, values = _positions(rng, n, batch)
    cache = SelfAttentionCache(batch, capacity)
    for t in range(n):
        cache.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
    return cache, keys, values


def _linear_state(rng, steps, batch=B):
    state = LinearAttentionState("elu")
    for _ in range(steps):
        state.step(*(rng.standard_normal((batch, H, D)) for _ in range(3)))
    return state


# ------------------------------------------------------------------------------------ SelfAttentionCache


def test_appended_positions_come_back_in_order_through_doubling_buffers():
    rng = np.random.default_rng(0)
    keys, values = _positions(rng, 9, dtype=np.float32)
    cache = SelfAttentionCache(B, 2)
    capacities = []
    for t in range(9):
        cache.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
        assert cache.length == t + 1
        k, v = cache.keys_values()
        capacities.append(k.base.shape[2])  # the buffer the view looks into
        np.testing.assert_array_equal(k, keys[:, :, : t + 1])
        np.testing.assert_array_equal(v, values[:, :, : t + 1])
        assert k.dtype == v.dtype == np.float32
    assert capacities == [2, 2, 4, 4, 8, 8, 8, 8, 16]  # doubled when full, never grown per step


def test_keys_values_are_views_not_copies():
    cache, keys, _ = _filled(np.random.default_rng(1), 3, capacity=8)
    k, v = cache.keys_values()
    k[0, 0, 0, 0] = 123.0
    assert cache.keys_values()[0][0, 0, 0, 0] == 123.0
    assert not np.shares_memory(k, keys)  # the appended arrays were copied into the buffer


def test_a_cache_without_positions_has_no_keys():
    cache = SelfAttentionCache(B, 4)
    assert cache.length == 0 and cache.capacity == 4
    with pytest.raises(ValueError, match=r"this cache holds no positions yet: append\(\) first"):
        cache.keys_values()
    assert SelfAttentionCache(B, 0).capacity == 1  # at least one position per buffer


@given(n=st.integers(1, 6), indices=st.lists(st.integers(0, B - 1), min_size=1, max_size=7),
       seed=st.integers(0, 2**32 - 1))
def test_reorder_gives_row_i_of_the_new_cache_from_row_indices_i(n, indices, seed):
    cache, keys, values = _filled(np.random.default_rng(seed), n)
    indices = np.array(indices)
    new = cache.reorder(indices)
    assert new.batch_size == indices.size and new.length == n
    k, v = new.keys_values()
    np.testing.assert_array_equal(k, keys[indices])
    np.testing.assert_array_equal(v, values[indices])


def test_reordered_and_old_caches_grow_apart():
    rng = np.random.default_rng(2)
    cache, keys, values = _filled(rng, 3)
    new = cache.reorder(np.array([2, 2, 0, 1]))  # repeat a row, grow the batch
    extra_k, extra_v = _positions(rng, 1, batch=4)
    new.append(extra_k, extra_v)
    assert new.length == 4 and cache.length == 3
    np.testing.assert_array_equal(new.keys_values()[0][:, :, 3], extra_k[:, :, 0])
    np.testing.assert_array_equal(cache.keys_values()[0], keys)  # the old cache is untouched and valid
    dropped = cache.reorder(np.array([1]))  # drop rows
    np.testing.assert_array_equal(dropped.keys_values()[1], values[1:2])
    dropped.append(extra_k[:1], extra_v[:1])
    np.testing.assert_array_equal(cache.keys_values()[1], values)


def test_reorder_of_an_empty_cache_keeps_its_capacity():
    new = SelfAttentionCache(B, 5).reorder(np.array([0, 0]))
    assert new.batch_size == 2 and new.length == 0 and new.capacity == 5


def test_linear_attention_keeps_running_sums_and_reorders_them():
    rng = np.random.default_rng(3)
    state = _linear_state(rng, 2)
    cache = SelfAttentionCache(B, 4, state)
    cache.advance()
    cache.advance()
    assert cache.length == 2
    new = cache.reorder(np.array([1, 1, 0]))
    assert new.length == 2 and new.state is not state
    assert new.state.feature_map is state.feature_map and new.state.eps == state.eps
    np.testing.assert_array_equal(new.state.s, state.s[[1, 1, 0]])
    np.testing.assert_array_equal(new.state.z, state.z[[1, 1, 0]])
    q, k, v = (rng.standard_normal((3, H, D)) for _ in range(3))
    before = state.s.copy()
    new.state.step(q, k, v)  # the copies move on alone
    np.testing.assert_array_equal(state.s, before)


def test_reorder_of_a_linear_state_with_no_sums_yet():
    state = LinearAttentionState("relu", eps=1e-3)
    new = SelfAttentionCache(B, 4, state).reorder(np.array([0, 1]))
    assert new.state.s is None and new.state.eps == 1e-3 and new.state.feature_map is state.feature_map


@pytest.mark.parametrize(("indices", "match"), [
    (np.array([[0, 1]]), r"indices must be a 1-D integer array, got int64 of shape \(1, 2\)"),
    (np.array([0.0, 1.0]), "indices must be a 1-D integer array, got float64"),
    (np.array([0, 3]), r"indices must lie in \[0, 3\) \(the cache's batch size\), got values from 0 to 3"),
    (np.array([-1]), r"got values from -1 to -1"),
])
def test_bad_indices_are_refused(indices, match):
    cache = _filled(np.random.default_rng(4), 1)[0]
    cross = CrossAttentionCache(*_positions(np.random.default_rng(4), 2))
    for target in (cache, cross):
        with pytest.raises(ValueError, match=match):
            target.reorder(indices)


# ----------------------------------------------------------------------------------- CrossAttentionCache


def test_cross_attention_reorder_selects_rows():
    rng = np.random.default_rng(5)
    keys, values = _positions(rng, 4)
    lengths = np.array([4, 1, 3])
    cache = CrossAttentionCache(keys, values, lengths)
    assert cache.batch_size == B
    new = cache.reorder(np.array([2, 0, 0, 1]))
    assert new.batch_size == 4
    np.testing.assert_array_equal(new.keys, keys[[2, 0, 0, 1]])
    np.testing.assert_array_equal(new.values, values[[2, 0, 0, 1]])
    np.testing.assert_array_equal(new.key_lengths, lengths[[2, 0, 0, 1]])
    assert CrossAttentionCache(keys, values).reorder(np.array([1])).key_lengths is None


def test_cross_attention_reorder_moves_nothing_when_every_row_keeps_its_context():
    rng = np.random.default_rng(6)
    keys, values = _positions(rng, 4)
    cache = CrossAttentionCache(keys, values, np.array([4, 2, 3]))
    same = cache.reorder(np.arange(B))
    assert same.keys is keys and same.values is values and same.key_lengths is cache.key_lengths
    beams = cache.reorder(np.array([0, 0, 1, 1]))  # two beams per input: rows move
    assert beams.keys is not keys
    # Beam search swaps beams within an input: each row still holds the same context row, so the arrays
    # are shared, however often it reorders.
    swapped = beams.reorder(np.array([1, 0, 3, 2]))
    assert swapped.keys is beams.keys and swapped.values is beams.values
    assert swapped.key_lengths is beams.key_lengths
    dropped = swapped.reorder(np.array([2, 3]))  # input 0 finished: its rows leave
    np.testing.assert_array_equal(dropped.keys, keys[[1, 1]])
    np.testing.assert_array_equal(dropped.key_lengths, [2, 2])
    assert dropped.reorder(np.array([1, 0])).keys is dropped.keys


def test_cross_attention_of_linear_attention_reorders_its_sums():
    rng = np.random.default_rng(7)
    keys, values = _positions(rng, 5)
    state = LinearAttentionState.from_keys(keys, values)
    cache = CrossAttentionCache(state=state)
    assert cache.batch_size == B and cache.keys is None
    assert cache.reorder(np.array([0, 1, 2])).state is state  # nothing moves: the sums are shared
    new = cache.reorder(np.array([2, 2]))
    np.testing.assert_array_equal(new.state.s, state.s[[2, 2]])
    np.testing.assert_array_equal(new.state.z, state.z[[2, 2]])
    q = rng.standard_normal((2, H, D))
    expected = LinearAttentionState.from_keys(keys[[2, 2]], values[[2, 2]]).attend(q)
    np.testing.assert_allclose(new.state.attend(q), expected, rtol=1e-12)


def test_a_window_keeps_the_last_positions_in_rolling_slots():
    rng = np.random.default_rng(7)
    keys, values = _positions(rng, 8)
    cache = SelfAttentionCache(B, 1, window=2)  # 3 slots, grown 1 -> 2 -> 3 and never again
    for t in range(8):
        cache.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
        k, v = cache.keys_values()
        kept = min(t + 1, 3)
        assert cache.kept() == kept and k.shape[2] == kept and k.base.shape[2] <= 3
        order = cache.slot_order()  # slot -> rank among the kept positions (oldest first)
        np.testing.assert_array_equal(k[:, :, np.argsort(order)], keys[:, :, t + 1 - kept : t + 1])
        np.testing.assert_array_equal(v[:, :, np.argsort(order)], values[:, :, t + 1 - kept : t + 1])
    # position t sits in slot t mod 3: positions 5, 6, 7 in slots 2, 0, 1
    np.testing.assert_array_equal(cache.slot_order(), [1, 2, 0])
    copy = cache.reorder(np.array([1, 0]))
    np.testing.assert_array_equal(copy.keys_values()[0], cache.keys_values()[0][[1, 0]])
    assert copy.window == 2 and copy.length == 8


@pytest.mark.parametrize("window", [None, 2, 5])
@given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=5), capacity=st.integers(1, 4))
def test_appending_several_positions_at_once_equals_one_at_a_time(window, sizes, capacity):
    rng = np.random.default_rng(sum(sizes))
    keys, values = _positions(rng, sum(sizes), dtype=np.float64)
    together, apart, end = SelfAttentionCache(B, capacity, window=window), SelfAttentionCache(B, capacity,
                                                                                              window=window), 0
    for size in sizes:
        together.append(keys[:, :, end : end + size], values[:, :, end : end + size])
        for t in range(end, end + size):
            apart.append(keys[:, :, t : t + 1], values[:, :, t : t + 1])
        end += size
        assert together.length == apart.length == end
        for a, b in zip(together.keys_values(), apart.keys_values()):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(together.slot_order(), apart.slot_order())


# ------------------------------------------------------------------------------------------------ join


def test_join_stacks_rows_each_at_its_own_length():
    rng = np.random.default_rng(9)
    (a, ka, _), (b, kb, vb) = _filled(rng, 3, batch=2), _filled(rng, 6, capacity=4, batch=1)
    joined = SelfAttentionCache.join([a, b])
    assert joined.batch_size == 3 and joined.lengths.tolist() == [3, 3, 6]
    assert joined._keys is not None and joined._values is not None and joined._keys.shape[2] >= 6
    np.testing.assert_array_equal(joined._keys[:2, :, :3], ka)
    np.testing.assert_array_equal(joined._values[2:, :, :6], vb)
    with pytest.raises(ValueError, match="different positions"):
        joined.length  # noqa: B018 (a property)
    with pytest.raises(ValueError, match="different positions"):
        joined.append(*_positions(rng, 1))  # the op-by-op step needs one length
    joined.advance()
    assert joined.lengths.tolist() == [4, 4, 7] and a.lengths.tolist() == [3, 3]  # the parts stay as they were
    picked = joined.reorder(np.array([2, 0]))
    assert picked.lengths.tolist() == [7, 4]
    assert picked._keys is not None
    np.testing.assert_array_equal(picked._keys[0, :, :6], kb[0])
    assert SelfAttentionCache.join([picked.reorder(np.array([1])), a]).lengths.tolist() == [4, 3, 3]
    assert SelfAttentionCache.join([a, a]).length == 3  # rows alike: one length


def test_join_in_an_order_equals_join_then_reorder():
    rng = np.random.default_rng(11)
    parts = [_filled(rng, 3, batch=2)[0], _filled(rng, 5, capacity=8, batch=2)[0], _filled(rng, 1, batch=1)[0]]
    order = np.array([3, 0, 4, 2, 1])
    once, twice = SelfAttentionCache.join(parts, order), SelfAttentionCache.join(parts).reorder(order)
    assert once.lengths.tolist() == twice.lengths.tolist() == [5, 3, 1, 5, 3]
    assert once._keys is not None and twice._keys is not None and once._values is not None
    assert twice._values is not None
    for row, n in enumerate(once.lengths):
        np.testing.assert_array_equal(once._keys[row, :, :n], twice._keys[row, :, :n])
        np.testing.assert_array_equal(once._values[row, :, :n], twice._values[row, :, :n])
    for bad in ([0, 1, 2, 3], [0, 0, 1, 2, 3], [0, 1, 2, 3, 5]):
        with pytest.raises(ValueError, match="permutation|indices"):
            SelfAttentionCache.join(parts, np.array(bad))


def test_join_adds_the_rows_of_empty_caches_at_position_0():
    rng = np.random.default_rng(12)
    held, k, v = _filled(rng, 3, batch=2)
    joined = SelfAttentionCache.join([SelfAttentionCache(1, 8), held], np.array([1, 0, 2]))
    assert joined.lengths.tolist() == [3, 0, 3] and joined._keys is not None and joined._values is not None
    assert joined._keys.shape[2] == 8  # the empty cache's capacity, the larger
    np.testing.assert_array_equal(joined._keys[[0, 2], :, :3], k)
    np.testing.assert_array_equal(joined._values[[0, 2], :, :3], v)


def test_join_refuses_what_has_no_per_row_position():
    rng = np.random.default_rng(10)
    cache = _filled(rng, 2)[0]
    window = SelfAttentionCache(B, 4, window=2)
    window.append(*_positions(rng, 1))
    linear = SelfAttentionCache(B, 4, _linear_state(rng, 1))
    with pytest.raises(ValueError, match="at least one"):
        SelfAttentionCache.join([])
    with pytest.raises(ValueError, match="without a window"):
        SelfAttentionCache.join([cache, window])
    with pytest.raises(ValueError, match="without a window"):
        SelfAttentionCache.join([linear])
    with pytest.raises(ValueError, match="a cache that holds positions"):
        SelfAttentionCache.join([SelfAttentionCache(B, 4), SelfAttentionCache(1, 4)])
    other = SelfAttentionCache(1, 2)
    other.append(rng.standard_normal((1, H + 1, 1, D)), rng.standard_normal((1, H + 1, 1, D)))
    with pytest.raises(ValueError, match="one layer's shape"):
        SelfAttentionCache.join([cache, other])
    with pytest.raises(TypeError, match="SelfAttentionCache"):
        SelfAttentionCache.join([cache, "cache"])
