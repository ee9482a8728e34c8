"""ops.linear_attention_backward against central finite differences in float64 (every feature map,
causal or not, with padding), and float32 against float64, on every ISA."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from attnkit import reference
from attnkit.feature_maps import (
    PolynomialFeatureMap,
    PositiveRandomFeatureMap,
    RandomFourierFeatureMap,
    resolve_feature_map,
)
from attnkit.ops import LinearAttentionContext, linear_attention, linear_attention_backward
from attnkit.testing.gradcheck import check_grad

MAPS = {
    "elu": lambda seed: "elu",
    "relu": lambda seed: "relu",
    "polynomial": lambda seed: PolynomialFeatureMap(2, 0.5),
    "favor": lambda seed: PositiveRandomFeatureMap(12, random_state=seed),
    "rff": lambda seed: RandomFourierFeatureMap(6, random_state=seed, softmax_kernel=True),
}


def _problem(seed, n, d, dv, batch, padding):
    rng = np.random.default_rng(seed)
    q, k = (0.5 * rng.standard_normal(batch + (n, d)) for _ in range(2))
    v, w = rng.standard_normal(batch + (n, dv)), rng.standard_normal(batch + (n, dv))
    kw = {}
    if padding == "lengths":
        kw["key_lengths"] = rng.integers(1, n + 1, size=batch[:1])
    elif padding == "mask":
        kw["mask"] = rng.random(batch[:1] + (1,) * (len(batch) - 1) + (1, n)) < 0.7
    return q, k, v, w, kw


def _relative_denominators(q, k, feature_map, causal, kw):
    """den_i / (|phi(q_i)|.|Z_i|) of every row: the quantity the eps guard compares with eps."""
    fm = resolve_feature_map(feature_map)
    phi_q, phi_k = fm.queries(q), fm.keys(k)
    n = k.shape[-2]
    keep = np.ones(phi_k.shape[:-1], bool)
    if "key_lengths" in kw:
        keep = np.arange(n) < kw["key_lengths"].reshape(-1, *(1,) * (phi_k.ndim - 2))
    if "mask" in kw:
        keep = np.broadcast_to(kw["mask"][..., 0, :], phi_k.shape[:-1])
    phi_k = np.where(keep[..., None], phi_k, 0)
    z = np.cumsum(phi_k, axis=-2) if causal else phi_k.sum(axis=-2, keepdims=True)
    den, mag = np.sum(phi_q * z, axis=-1), np.sum(np.abs(phi_q) * np.abs(z), axis=-1)
    return np.where(mag > 0, den / np.where(mag > 0, mag, 1), 1.0)


@settings(max_examples=30)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 140), d=st.integers(1, 6), dv=st.integers(1, 5),
       fm=st.sampled_from(sorted(MAPS)), causal=st.booleans(), padding=st.sampled_from(["none", "lengths", "mask"]))
def test_finite_differences(isa, seed, n, d, dv, fm, causal, padding):
    if causal and padding == "mask":
        padding = "lengths"
    q, k, v, w, kw = _problem(seed, n, d, dv, (2, 2), padding)
    feature_map = MAPS[fm](seed)
    # Maps with signed features (polynomial, sin/cos) can cancel a normaliser to just above the
    # guard: out = num / den is then exact but ill-conditioned, and finite differences of it are noise
    # (seen: a one-key row, whose exact gradient is 0, gave -3e-6 at step 1e-6 and -1e-4 at 1e-7).
    ratios = _relative_denominators(q, k, feature_map, causal, kw)
    assume(not np.any((ratios > 1e-8) & (ratios < 1e-3)))
    # relu has a kink at 0: an entry within the step (1e-6) of it has no derivative for differences to find (seen:
    # q = 3.9e-7 gave 0.57 against the one-sided 0.82).
    assume(fm != "relu" or min(np.abs(q).min(), np.abs(k).min()) > 1e-5)

    def loss(q, k, v):
        return float(np.sum(linear_attention(q, k, v, feature_map=feature_map, causal=causal, **kw) * w))

    grads = linear_attention_backward(w, q, k, v, feature_map=feature_map, causal=causal, **kw)
    check_grad(loss, {"q": q, "k": k, "v": v}, dict(zip("qkv", grads)), rtol=1e-4, atol=1e-7, max_entries=12,
               rng=seed)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", ["favor-long-keys", "elu-near-zero"])
def test_tiny_normalisers_get_exact_gradients(isa, causal, case):
    # den < 1e-6 (FAVOR+ keys of large norm; elu(x) + 1 = exp(x) at x ~ -20) but out = num / den is
    # exact: the rows must be neither zeroed nor given zero gradients.
    q, k, v, w, _ = _problem(4, 90, 8, 3, (2,), "none")
    if case == "favor-long-keys":
        feature_map, k = MAPS["favor"](4), 20 * k
    else:
        feature_map, q, k = "elu", q - 20, k - 20

    def loss(q, k, v):
        return float(np.sum(linear_attention(q, k, v, feature_map=feature_map, causal=causal) * w))

    out = linear_attention(q, k, v, feature_map=feature_map, causal=causal)
    assert np.all(np.abs(out).max(axis=-1) > 0)
    grads = linear_attention_backward(w, q, k, v, feature_map=feature_map, causal=causal)
    check_grad(loss, {"q": q, "k": k, "v": v}, dict(zip("qkv", grads)), rtol=1e-4, atol=1e-7, max_entries=20, rng=4)


@pytest.mark.parametrize("causal", [False, True])
def test_zeroed_rows_pass_no_gradient(isa, causal):
    # One sine/cosine frequency: phi(q_i).phi(k_i) = cos(angle_i) (0 to rounding, -1, then 1) with
    # |phi(q_i)|.|phi(k_i)| = 1. The guard zeroes the first two rows, whose gradients are then 0.
    fm = RandomFourierFeatureMap(1, random_state=0)
    w = fm.weights(2)[0]
    q = np.full((3, 1, 1), np.pi / 4) * w / (w @ w)
    k = q - np.array([np.pi / 2, np.pi, 0.0])[:, None, None] * w / (w @ w)
    v, dout = np.ones((3, 1, 2)), np.ones((3, 1, 2))
    assert np.all(linear_attention(q, k, v, feature_map=fm, causal=causal)[:2] == 0)
    for g in linear_attention_backward(dout, q, k, v, feature_map=fm, causal=causal):
        assert np.all(g[:2] == 0) and np.all(np.isfinite(g))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fm", ["elu", "favor"])
def test_float32_agrees_with_float64(isa, causal, fm):
    q, k, v, w, kw = _problem(1, 300, 8, 6, (3,), "lengths")
    feature_map = MAPS[fm](1)
    g64 = linear_attention_backward(w, q, k, v, feature_map=feature_map, causal=causal, **kw)
    g32 = linear_attention_backward(*(a.astype(np.float32) for a in (w, q, k, v)), feature_map=feature_map,
                                    causal=causal, **kw)
    for a, b in zip(g32, g64):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-4 * np.abs(b).max())


def test_broadcast_and_padding_gradients():
    q, k, v, w, _ = _problem(2, 20, 4, 3, (2, 3), "none")
    k1, v1 = k[:, :1], v[:, :1]  # shared across the 3 heads
    lengths = np.array([12, 20])
    dq, dk, dv = linear_attention_backward(w, q, k1, v1, key_lengths=lengths, causal=True)
    assert dk.shape == k1.shape and dv.shape == v1.shape
    assert np.all(dk[0, :, 12:] == 0) and np.all(dv[0, :, 12:] == 0)
    full = linear_attention_backward(w, q, np.repeat(k1, 3, axis=1), np.repeat(v1, 3, axis=1), key_lengths=lengths,
                                     causal=True)
    np.testing.assert_allclose(dk, full[1].sum(axis=1, keepdims=True), rtol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fm", ["elu", "relu", "favor"])
def test_padded_keys_are_never_read(isa, causal, fm):
    # The kernels apply elu and relu themselves and skip padded keys: non-finite values there change
    # nothing, and their gradients are exactly 0 (no 0 * NaN), also through a map's own backward (favor).
    q, k, v, w, _ = _problem(3, 70, 5, 3, (2, 2), "none")
    feature_map, lengths = MAPS[fm](3), np.array([3, 70])
    dirty_k, dirty_v = k.copy(), v.copy()
    dirty_k[0, :, 3:], dirty_v[0, :, 3:] = np.nan, np.inf
    clean = linear_attention_backward(w, q, k, v, feature_map=feature_map, causal=causal, key_lengths=lengths)
    dirty = linear_attention_backward(w, q, dirty_k, dirty_v, feature_map=feature_map, causal=causal,
                                      key_lengths=lengths)
    for a, b in zip(dirty, clean):
        np.testing.assert_array_equal(a, b)
    assert np.all(dirty[1][0, :, 3:] == 0) and np.all(dirty[2][0, :, 3:] == 0)


@pytest.mark.parametrize("fm", sorted(MAPS))
def test_causal_padded_keys_get_zero_gradient_whatever_they_hold(isa, fm):
    # Causal, by chunks of 64 rows: padding that starts at, just before and just after a chunk
    # boundary, mid-chunk, and covers a whole item. NaN, inf and -inf written into k and v at padded
    # keys must not reach any gradient (0 * NaN), and padded keys' dk and dv are exactly 0.
    n, lengths = 130, np.array([0, 63, 64, 65, 100, 130])
    q, k, v, w, _ = _problem(6, n, 4, 3, (6, 2), "none")
    feature_map = MAPS[fm](6)
    padded = np.arange(n) >= lengths[:, None, None]
    dirty_k, dirty_v = k.copy(), v.copy()
    for x, fill in ((dirty_k, [np.nan, np.inf, -np.inf]), (dirty_v, [np.inf, np.nan, -np.inf])):
        x[np.broadcast_to(padded, x.shape[:-1])] = np.resize(fill, (padded.sum() * 2, x.shape[-1]))
    dq, dk, dv = linear_attention_backward(w, q, dirty_k, dirty_v, feature_map=feature_map, causal=True,
                                           key_lengths=lengths)
    assert np.isfinite(dq).all() and np.isfinite(dk).all() and np.isfinite(dv).all()
    rows = np.broadcast_to(padded, dk.shape[:-1])
    assert np.all(dk[rows] == 0) and np.all(dv[rows] == 0)
    clean = linear_attention_backward(w, q, k, v, feature_map=feature_map, causal=True, key_lengths=lengths)
    for a, b in zip((dq, dk, dv), clean):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("n", [1, 63, 64, 65, 130])
@pytest.mark.parametrize("fm", ["elu", "relu", "favor"])
def test_causal_gradients_across_chunk_boundaries(isa, n, fm):
    # The causal backward runs by chunks of 64 rows, forward then in reverse: key_lengths ending just
    # before, at and after a boundary or mid-chunk; float64 against finite differences, float32 against it.
    q, k, v, w, _ = _problem(n, n, 4, 3, (4,), "none")
    feature_map = MAPS[fm](n)
    kw = dict(key_lengths=np.array([n, min(63, n), min(65, n), (n + 1) // 2]))

    def loss(q, k, v):
        return float(np.sum(linear_attention(q, k, v, feature_map=feature_map, causal=True, **kw) * w))

    grads = linear_attention_backward(w, q, k, v, feature_map=feature_map, causal=True, **kw)
    check_grad(loss, {"q": q, "k": k, "v": v}, dict(zip("qkv", grads)), rtol=1e-4, atol=1e-7, max_entries=24,
               rng=n)
    g32 = linear_attention_backward(*(a.astype(np.float32) for a in (w, q, k, v)), feature_map=feature_map,
                                    causal=True, **kw)
    for a, b in zip(g32, grads):  # n = 1: dq is exactly 0 in float64, rounding noise in float32
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-4 * np.abs(b).max() + 1e-6)


@pytest.mark.parametrize("fm", ["elu", "favor"])
def test_one_batch_item_is_split_across_threads(isa, kernel_threads, fm):
    # With fewer batch items than threads, the non-causal kernels sum an item's keys (forward) and
    # queries (backward) by segments on every thread and add them in order.
    q, k, v, w, _ = _problem(4, 300, 6, 5, (1,), "none")
    feature_map, lengths = MAPS[fm](4), np.array([250])
    out = linear_attention(q, k, v, feature_map=feature_map, key_lengths=lengths)
    np.testing.assert_allclose(out, reference.linear_attention(q, k, v, feature_map=feature_map, key_lengths=lengths),
                               rtol=1e-9, atol=1e-12)

    def loss(q, k, v):
        return float(np.sum(linear_attention(q, k, v, feature_map=feature_map, key_lengths=lengths) * w))

    grads = linear_attention_backward(w, q, k, v, feature_map=feature_map, key_lengths=lengths)
    check_grad(loss, {"q": q, "k": k, "v": v}, dict(zip("qkv", grads)), rtol=1e-4, atol=1e-7, max_entries=12, rng=4)


def test_errors():
    q, k, v, w, _ = _problem(3, 5, 3, 2, (2,), "none")
    with pytest.raises(ValueError, match="dout must have shape"):
        linear_attention_backward(w[:, :3], q, k, v)
    with pytest.raises(ValueError, match="Nq == Nk"):
        linear_attention_backward(w[:, :3], q[:, :3], k, v, causal=True)


# -------------------------------------------------------------- the forward's context, reused by the backward


@settings(max_examples=40)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 140), d=st.integers(1, 6), dv=st.integers(1, 5),
       fm=st.sampled_from(sorted(MAPS)), causal=st.booleans(), padding=st.sampled_from(["none", "lengths", "mask"]),
       state=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]), shared_keys=st.booleans())
def test_context_backward_is_the_explicit_backward_bit_for_bit(isa, seed, n, d, dv, fm, causal, padding, state,
                                                               dtype, shared_keys):
    if causal and padding == "mask":
        padding = "lengths"
    q, k, v, w, kw = _problem(seed, n, d, dv, (2, 2), padding)
    q, k, v, w = (a.astype(dtype) for a in (q, k, v, w))
    if shared_keys:  # keys and values broadcast over the heads
        k, v = k[:, :1], v[:, :1]
    feature_map = MAPS[fm](seed)
    state = state and causal
    *results, context = linear_attention(q, k, v, feature_map=feature_map, causal=causal, return_state=state,
                                         return_context=True, **kw)
    np.testing.assert_array_equal(results[0], linear_attention(q, k, v, feature_map=feature_map, causal=causal, **kw))
    assert len(results) == 1 + state
    got = context.backward(w)
    expected = linear_attention_backward(w, q, k, v, feature_map=feature_map, causal=causal, **kw)
    for name, g, e in zip(("dq", "dk", "dv"), got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, name
        np.testing.assert_array_equal(g, e, err_msg=name)


def test_context_checks_dout():
    q, k, v, w, _ = _problem(3, 5, 3, 2, (2,), "none")
    out, context = linear_attention(q, k, v, return_context=True)
    assert isinstance(context, LinearAttentionContext)
    with pytest.raises(ValueError, match=r"dout must have shape \(2, 5, 2\)"):
        context.backward(w[:, :3])
    with pytest.raises(TypeError, match="return_context must be a bool"):
        linear_attention(q, k, v, return_context=1)
