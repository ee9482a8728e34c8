"""ops.linear_attention and LinearAttentionState against the NumPy reference, on every ISA."""

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

import attnkit
from attnkit import reference
from attnkit.feature_maps import (
    EluFeatureMap,
    FeatureMap,
    PolynomialFeatureMap,
    PositiveRandomFeatureMap,
    RandomFourierFeatureMap,
    resolve_feature_map,
)
from attnkit.ops import LinearAttentionState, linear_attention

TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-9, atol=1e-11)}


def _qkv(seed, batch, nq, nk, d, dv, dtype, scale=0.5):
    rng = np.random.default_rng(seed)
    return tuple((scale * rng.standard_normal(batch + shape)).astype(dtype)
                 for shape in ((nq, d), (nk, d), (nk, dv)))


class ScaledFeatureMap(FeatureMap):
    """Another map's features times a constant factor, which the attention output must ignore."""

    def __init__(self, inner, factor):
        self.inner, self.factor = resolve_feature_map(inner), factor

    def n_features_out(self, d):
        return self.inner.n_features_out(d)

    def queries(self, x):
        return self.inner.queries(x) * self.factor

    def keys(self, x):
        return self.inner.keys(x) * self.factor


problems = st.fixed_dictionaries(dict(
    seed=st.integers(0, 2**32 - 1),
    batch=st.sampled_from([(), (1,), (3,), (2, 2)]),
    n=st.integers(1, 200),
    d=st.integers(1, 12),
    dv=st.integers(1, 20),
    dtype=st.sampled_from([np.float32, np.float64]),
))


def _polynomial_conditioning(q, k, c, causal):
    """den / (|phi(q)| |Z|) of each query row for phi with phi(a).phi(b) = (a.b + c)^2, in float64:
    |phi(a)| = |a|^2 + c and |Z|^2 = sum_jl (k_j.k_l + c)^2 over the visible keys."""
    q, k = q.astype(np.float64), k.astype(np.float64)
    sim = (q @ np.swapaxes(k, -1, -2) + c) ** 2
    gram = (k @ np.swapaxes(k, -1, -2) + c) ** 2
    n = k.shape[-2]
    visible = np.tril(np.ones((q.shape[-2], n), bool)) if causal else np.ones((q.shape[-2], n), bool)
    den = np.sum(sim * visible, axis=-1)
    # |Z_i|^2 = sum over the visible j, l of gram[j, l]: a 2-D prefix sum when causal
    z_sq = np.cumsum(np.cumsum(gram, axis=-1), axis=-2)[..., np.arange(n), np.arange(n)] if causal else \
        np.sum(gram, axis=(-1, -2))[..., None]
    mag = (np.sum(q * q, axis=-1) + c) * np.sqrt(z_sq)
    return den / mag


@given(p=problems, causal=st.booleans(), c=st.floats(0.1, 2.0))
@example(p=dict(seed=535, batch=(2, 2), n=181, d=12, dv=1, dtype=np.float32), causal=True, c=1.1015625)
def test_polynomial_linear_attention_equals_kernel_attention(isa, p, causal, c):
    q, k, v = _qkv(p["seed"], p["batch"], p["n"], p["n"], p["d"], p["dv"], p["dtype"])
    out = linear_attention(q, k, v, feature_map=PolynomialFeatureMap(2, c), causal=causal)
    # sim(q, k) = (q.k + c)^2 computed directly, with a lower-triangular mask when causal
    expected = reference.kernel_attention(q, k, v, lambda a, b: (a @ np.swapaxes(b, -1, -2) + c) ** 2,
                                          causal=causal)
    assert out.dtype == p["dtype"] and out.shape == p["batch"] + (p["n"], p["dv"])
    # In float32 the feature-space sums phi(q).phi(k) cancel (features of both signs add up to a
    # small (q.k + c)^2), which costs digits that the direct kernel does not lose: a conditioning
    # loss, not drift (test_long_causal_float32_does_not_drift checks that).
    tol = TOL[p["dtype"]] if p["dtype"] == np.float64 else dict(rtol=5e-3, atol=5e-4)
    # A row whose normaliser sum_j (q.k_j + c)^2 nearly cancels in feature space (q.k ~ -c for its
    # only keys) is decided by rounding, and within eps |phi(q)|.|Z| the guard zeroes it (seed 535,
    # n=181: a first causal row with den/mag ~1e-7); such rows are compared for finiteness only.
    conditioned = _polynomial_conditioning(q, k, c, causal) > 1e-3
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out[conditioned], expected[conditioned], **tol)


@given(p=problems, causal=st.booleans(), fm=st.sampled_from(["elu", "relu", "favor", "rff"]))
def test_linear_attention_matches_reference_for_every_feature_map(isa, p, causal, fm):
    feature_map = {"favor": PositiveRandomFeatureMap(32, random_state=p["seed"]),
                   "rff": RandomFourierFeatureMap(16, random_state=p["seed"], softmax_kernel=True)}.get(fm, fm)
    q, k, v = _qkv(p["seed"], p["batch"], p["n"], p["n"], p["d"], p["dv"], p["dtype"])
    out = linear_attention(q, k, v, feature_map=feature_map, causal=causal)
    expected = reference.linear_attention(q, k, v, feature_map=feature_map, causal=causal)
    assert np.all(np.isfinite(out))  # random-feature normalisers can go <= 0: guarded, never NaN
    # rows whose normaliser sits right at the guard (eps |phi(q)|.|Z|) may legitimately flip between the
    # two; none do here
    np.testing.assert_allclose(out, expected, **TOL[p["dtype"]])


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 150), use_mask=st.booleans(), causal=st.booleans())
def test_padded_keys_contribute_nothing(isa, seed, n, use_mask, causal):
    q, k, v = _qkv(seed, (3,), n, n, 4, 5, np.float64)
    lengths = np.random.default_rng(seed).integers(0, n + 1, size=3)
    kw = (dict(mask=(np.arange(n) < lengths[:, None])[:, None, :]) if use_mask
          else dict(key_lengths=lengths))
    out = linear_attention(q, k, v, causal=causal, **kw)
    k2, v2 = k.copy(), v.copy()
    padded = np.arange(n) >= lengths[:, None]
    k2[padded], v2[padded] = np.nan, np.inf  # even non-finite padding must not leak
    np.testing.assert_array_equal(linear_attention(q, k2, v2, causal=causal, **kw), out)
    visible = reference.attention_mask(n, n, key_lengths=lengths, causal=causal, batch_shape=(3,))
    def elu_similarity(a, b):
        return reference_elu(a) @ np.swapaxes(reference_elu(b), -1, -2)

    expected = reference.kernel_attention(q, k, v, elu_similarity, mask=visible)
    np.testing.assert_allclose(out, expected, rtol=1e-9, atol=1e-12)


def reference_elu(x):
    return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))


@pytest.mark.parametrize("n", [1, 63, 64, 65, 130])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fm", ["elu", "relu", "favor"])
def test_causal_rows_across_chunk_boundaries(isa, kernel_threads, n, dtype, fm):
    # The causal kernel runs by chunks of 64 rows: sequences and key_lengths ending just before, at and
    # after a boundary or mid-chunk; one batch item alone is cut into segments when threads outnumber items.
    feature_map = PositiveRandomFeatureMap(12, random_state=n) if fm == "favor" else fm
    q, k, v = _qkv(n, (4,), n, n, 8, 6, dtype)
    for batch, lengths in (((4,), [n, min(63, n), min(65, n), (n + 1) // 2]), ((1,), [max(n - 1, 0)])):
        q1, k1, v1 = (a[: batch[0]] for a in (q, k, v))
        for kw in ({}, dict(key_lengths=np.array(lengths))):
            out = linear_attention(q1, k1, v1, feature_map=feature_map, causal=True, **kw)
            expected = reference.linear_attention(q1, k1, v1, feature_map=feature_map, causal=True, **kw)
            np.testing.assert_allclose(out, expected, **TOL[dtype])


@pytest.mark.parametrize("fm", ["relu", "favor"])
def test_non_causal_output_does_not_depend_on_how_items_meet_threads(isa, fm):
    # Items that split evenly over the threads run whole on one thread, forward and backward; otherwise
    # the second pass runs as a flat loop of chunks. Each item's sums come from one segment either way.
    feature_map = PositiveRandomFeatureMap(12, random_state=1) if fm == "favor" else fm
    q, k, v = _qkv(21, (4,), 150, 150, 8, 6, np.float32)
    lengths = np.array([150, 90, 64, 1])
    dout = np.random.default_rng(22).standard_normal((4, 150, 6)).astype(np.float32)
    previous = attnkit.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):  # 4 items: whole items on 1 and 2 threads, chunks of rows on 3
            attnkit.set_num_threads(threads)
            out, context = linear_attention(q, k, v, feature_map=feature_map, key_lengths=lengths,
                                            return_context=True)
            results.append((out, *context.backward(dout)))
    finally:
        attnkit.set_num_threads(previous)
    for other in results[1:]:
        for got, first in zip(other, results[0]):
            np.testing.assert_array_equal(got, first)
    np.testing.assert_allclose(results[0][0], reference.linear_attention(q, k, v, feature_map=feature_map,
                                                                         key_lengths=lengths), **TOL[np.float32])


ROW_MAPS = {
    "favor": lambda seed: PositiveRandomFeatureMap(20, random_state=seed),
    "favor-iid": lambda seed: PositiveRandomFeatureMap(7, random_state=seed, orthogonal=False, scale=0.8),
    "rff": lambda seed: RandomFourierFeatureMap(9, random_state=seed),
    "rff-softmax": lambda seed: RandomFourierFeatureMap(9, sigma=1.3, random_state=seed, softmax_kernel=True),
    "polynomial": lambda seed: PolynomialFeatureMap(2, 0.5),
    "polynomial-c0": lambda seed: PolynomialFeatureMap(2, 0.0),
    "linear": lambda seed: PolynomialFeatureMap(1, 2.0),
}


def _features_in_numpy(fm):
    """The same map (the same weights) as a subclass: the kernels apply only the exact built-in types,
    so the op computes this one's features with the map's NumPy methods and hands them over."""
    numpy_type = type("NumPy" + type(fm).__name__, (type(fm),), {})
    copy = numpy_type.__new__(numpy_type)
    copy.__dict__.update(fm.__dict__)
    return copy


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 150), d=st.integers(1, 9), dv=st.integers(1, 7),
       fm=st.sampled_from(sorted(ROW_MAPS)), causal=st.booleans(), lengths=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_row_maps_in_the_kernels_equal_their_numpy_features(isa, kernel_threads, seed, n, d, dv, fm, causal,
                                                            lengths, dtype):
    # Random and polynomial features are computed inside the kernels, a chunk of rows at a time (in
    # cache); the features the NumPy map computes must give the same attention and gradients.
    from attnkit.ops.linear_attention import _kernel_features

    feature_map = ROW_MAPS[fm](seed)
    assert _kernel_features(feature_map, d) in (3, 4)
    q, k, v = _qkv(seed, (2, 2), n, n, d, dv, dtype)
    kw = dict(key_lengths=np.random.default_rng(seed).integers(0, n + 1, size=(2, 1))) if lengths else {}
    # Rows whose normaliser is within rounding of the guard (random Fourier estimates near 0) may
    # legitimately flip between the two; keep to problems without such rows.
    fm64 = resolve_feature_map(feature_map)
    phi_q, phi_k = fm64.queries(q.astype(np.float64)), fm64.keys(k.astype(np.float64))
    if lengths:
        phi_k = np.where((np.arange(n) < kw["key_lengths"][..., None])[..., None], phi_k, 0)
    z = np.cumsum(phi_k, axis=-2) if causal else phi_k.sum(axis=-2, keepdims=True)
    den, mag = np.sum(phi_q * z, axis=-1), np.sum(np.abs(phi_q) * np.abs(z), axis=-1)
    assume(np.all((mag == 0) | (np.abs(den) > 1e-3 * mag)))
    out, context = linear_attention(q, k, v, feature_map=feature_map, causal=causal, return_context=True, **kw)
    expected, numpy_context = linear_attention(q, k, v, feature_map=_features_in_numpy(feature_map), causal=causal,
                                               return_context=True, **kw)
    np.testing.assert_allclose(out, expected, **TOL[dtype])
    dout = np.random.default_rng(seed + 1).standard_normal(out.shape).astype(dtype)
    for grad, expected_grad in zip(context.backward(dout), numpy_context.backward(dout)):
        scale = max(1.0, float(np.max(np.abs(expected_grad), initial=0)))
        np.testing.assert_allclose(grad, expected_grad, rtol=TOL[dtype]["rtol"], atol=TOL[dtype]["atol"] * scale * 10)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fm", ["favor", "rff-softmax", "polynomial"])
def test_a_nan_in_a_row_map_query_stays_in_its_row(isa, fm, causal):
    q, k, v = _qkv(3, (2,), 70, 70, 5, 4, np.float64)
    q[1, 40, 2] = np.nan
    out = linear_attention(q, k, v, feature_map=ROW_MAPS[fm](0), causal=causal)
    assert np.all(np.isnan(out[1, 40]))
    out[1, 40] = 0
    assert np.all(np.isfinite(out))


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 130))
def test_causal_output_ignores_the_future(isa, seed, n):
    q, k, v = _qkv(seed, (2,), n, n, 6, 3, np.float64)
    out = linear_attention(q, k, v, causal=True)
    t = np.random.default_rng(seed).integers(0, n - 1)
    q2, k2, v2 = (a.copy() for a in (q, k, v))
    for a in (q2, k2, v2):
        a[:, t + 1:] = 7.0
    np.testing.assert_allclose(linear_attention(q2, k2, v2, causal=True)[:, : t + 1], out[:, : t + 1], rtol=1e-12)


@pytest.mark.parametrize("fm, key_scale", [
    ("elu", 1), (PositiveRandomFeatureMap(24, random_state=1), 1),
    (ScaledFeatureMap("elu", 1e-8), 1), (PositiveRandomFeatureMap(24, random_state=1), 8),  # tiny normalisers
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_recurrent_steps_equal_the_causal_op(isa, fm, key_scale, dtype):
    q, k, v = _qkv(3, (2, 3), 150, 150, 8, 5, dtype)
    k = k * dtype(key_scale)
    full = linear_attention(q, k, v, feature_map=fm, causal=True)
    assert np.all(np.abs(full).max(axis=-1) > 0)
    state = LinearAttentionState(fm)
    steps = np.stack([state.step(q[..., t, :], k[..., t, :], v[..., t, :]) for t in range(150)], axis=-2)
    assert steps.dtype == dtype
    np.testing.assert_allclose(steps, full, **TOL[dtype])
    # prefill with the op, then continue step by step
    head, state = linear_attention(q[..., :100, :], k[..., :100, :], v[..., :100, :], feature_map=fm,
                                   causal=True, return_state=True)
    tail = np.stack([state.step(q[..., t, :], k[..., t, :], v[..., t, :]) for t in range(100, 150)], axis=-2)
    np.testing.assert_allclose(np.concatenate([head, tail], axis=-2), full, **TOL[dtype])


@pytest.mark.parametrize("fm", ["elu", PositiveRandomFeatureMap(24, random_state=2), ScaledFeatureMap("elu", 1e-8)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_state_from_keys_attends_like_the_non_causal_op(isa, fm, dtype):
    q, k, v = _qkv(9, (3, 2), 7, 11, 8, 5, dtype)
    lengths = np.array([11, 4, 0])
    full = linear_attention(q, k, v, feature_map=fm, key_lengths=lengths)
    state = LinearAttentionState.from_keys(k, v, feature_map=fm, key_lengths=lengths)
    rows = np.stack([state.attend(q[..., i, :]) for i in range(7)], axis=-2)
    assert rows.dtype == dtype
    np.testing.assert_allclose(rows, full, **TOL[dtype])
    np.testing.assert_array_equal(rows[2], 0)  # no key to see: zeros
    # attend adds nothing: asking twice gives the same answer
    np.testing.assert_array_equal(state.attend(q[..., 0, :]), rows[..., 0, :])


def _by_sums(fm, q, k, v, causal):
    """``(phi(q)^T S, phi(q)^T Z)`` in float64 NumPy, S and Z summed over the keys each query sees."""
    phi_q, phi_k, v = fm.queries(q).astype(np.float64), fm.keys(k).astype(np.float64), v.astype(np.float64)
    if causal:
        s = np.cumsum(phi_k[..., :, :, None] * v[..., :, None, :], axis=-3)
        z = np.cumsum(phi_k, axis=-2)
        return np.einsum("...nD,...nDv->...nv", phi_q, s), np.einsum("...nD,...nD->...n", phi_q, z)[..., None]
    return phi_q @ (np.swapaxes(phi_k, -1, -2) @ v), phi_q @ phi_k.sum(axis=-2)[..., None]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype, key_scale", [(np.float64, 6), (np.float32, 3.5)])
def test_favor_keys_of_large_norm_are_normalised_not_zeroed(isa, causal, dtype, key_scale):
    # phi(k) = exp(w.u - |u|^2 / 2) / sqrt(m) is tiny for long keys, so den = phi(q).Z is too (down to
    # 1e-45 in float64 here), yet num / den is exact: an absolute eps used to zero these rows.
    q, k, v = _qkv(11, (2,), 100, 100, 64, 8, dtype, scale=1.0)
    k = k * dtype(key_scale)
    fm = PositiveRandomFeatureMap(64, random_state=0)
    num, den = _by_sums(fm, q, k, v, causal)
    assert np.all(den > 0) and np.mean(den < 1e-6) > 0.5
    out = linear_attention(q, k, v, feature_map=fm, causal=causal)
    np.testing.assert_allclose(out, num / den, **TOL[dtype])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_output_ignores_the_scale_of_the_features(isa, causal, dtype):
    q, k, v = _qkv(12, (2, 3), 150, 150, 8, 5, dtype)
    out = linear_attention(q, k, v, causal=causal)
    scaled = linear_attention(q, k, v, feature_map=ScaledFeatureMap("elu", 1e-8), causal=causal)
    np.testing.assert_allclose(scaled, out, **TOL[dtype])
    # elu(x) + 1 = exp(x) ~ 1e-9 for inputs near -20: normalisers ~ 1e-16, still exact
    shifted = linear_attention(q - dtype(20), k - dtype(20), v, causal=causal)
    expected = reference.linear_attention(q - dtype(20), k - dtype(20), v, causal=causal)
    assert np.all(np.abs(expected).max(axis=-1) > 0)
    np.testing.assert_allclose(shifted, expected, **TOL[dtype])


def _fourier_pair(fm, angles):
    """Queries and keys of width 2 with phi(q_i).phi(k_i) = cos(angles[i]) for ``fm``'s one frequency,
    and |phi(q_i)|.|phi(k_i)| = 1: q_i at phase pi/4, k_i at pi/4 - angles[i]."""
    w = fm.weights(2)[0]
    q = np.full((len(angles), 1, 1), np.pi / 4) * w / (w @ w)
    return q, q - np.asarray(angles)[:, None, None] * w / (w @ w)


@pytest.mark.parametrize("factor", [1, 1e4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cancelled_or_negative_normalisers_give_zeros(isa, causal, dtype, factor):
    # Sine/cosine features: den = cos(angle) cancels to rounding noise at pi/2 and is -1 at pi, while
    # |phi(q)|.|Z| = 1; the rows get zeros, never a division by noise, NaN or inf. Scaled by 1e4, the
    # noise passes an absolute eps in float32: the guard must scale with the features.
    fm = RandomFourierFeatureMap(1, random_state=0)
    q, k = (a.astype(dtype) for a in _fourier_pair(fm, [np.pi / 2, np.pi, 2.0, 0.0]))
    fm = fm if factor == 1 else ScaledFeatureMap(fm, factor)
    v = np.arange(1, 9, dtype=dtype).reshape(4, 1, 2)
    out = linear_attention(q, k, v, feature_map=fm, causal=causal)
    np.testing.assert_array_equal(out[:3], 0)  # cos(2) < 0 too
    np.testing.assert_allclose(out[3], v[3], **TOL[dtype])
    rows = LinearAttentionState.from_keys(k, v, feature_map=fm).attend(q[:, 0])
    np.testing.assert_array_equal(rows[:3], 0)
    np.testing.assert_allclose(rows, out[:, 0], **TOL[dtype])


@pytest.mark.parametrize("causal", [False, True])
def test_random_fourier_normalisers_of_both_signs(isa, causal):
    # Far-apart inputs and a narrow Gaussian kernel: estimates of ~0, half of them negative.
    fm = RandomFourierFeatureMap(4, sigma=0.5, random_state=3)
    q, k, v = _qkv(14, (3,), 90, 90, 4, 3, np.float64, scale=3.0)
    num, den = _by_sums(fm, q, k, v, causal)
    out = linear_attention(q, k, v, feature_map=fm, causal=causal)
    assert np.all(np.isfinite(out)) and np.mean(den < 0) > 0.2
    np.testing.assert_array_equal(out[(den < 0)[..., 0]], 0)
    np.testing.assert_allclose(out, reference.linear_attention(q, k, v, feature_map=fm, causal=causal),
                               **TOL[np.float64])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fm", ["elu", "relu"])
def test_features_that_overflow_float32_give_nan_not_zeros(isa, causal, fm):
    # |q|, |k| ~ 1e19: the normaliser overflows to inf, and inf <= eps * inf read as "no key seen" (zeros)
    q, k = np.full((1, 2, 4), 1e19, np.float32), np.full((1, 2, 4), 1e19, np.float32)
    v = np.arange(8, dtype=np.float32).reshape(1, 2, 4)
    assert np.isnan(linear_attention(q, k, v, causal=causal, feature_map=fm)).all()
    exact = linear_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal=causal,
                             feature_map=fm)
    np.testing.assert_allclose(exact[0, -1], [2, 3, 4, 5])  # float64 holds them


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_propagates_through_the_guard(isa, causal, dtype):
    q, k, v = _qkv(13, (2,), 70, 70, 4, 3, dtype)
    q[0, 5], k[1, 66] = np.nan, np.nan
    out = linear_attention(q, k, v, causal=causal)
    nan_rows = np.zeros((2, 70), bool)
    nan_rows[0, 5] = True
    nan_rows[1, 66 if causal else 0:] = True
    np.testing.assert_array_equal(np.isnan(out).all(axis=-1), nan_rows)
    assert np.all(np.isfinite(out[~nan_rows]))
    if causal:
        state = LinearAttentionState()
        steps = np.stack([state.step(q[:, t], k[:, t], v[:, t]) for t in range(70)], axis=-2)
        np.testing.assert_allclose(steps, out, **TOL[dtype])  # NaN where out is NaN


def test_long_causal_float32_does_not_drift(isa):
    n = 65536
    q, k, v = _qkv(4, (1,), n, n, 16, 8, np.float32, scale=1.0)
    out32 = linear_attention(q, k, v, causal=True)
    out64 = linear_attention(*(a.astype(np.float64) for a in (q, k, v)), causal=True)
    err = np.abs(out32 - out64).max(axis=-1)[0] / np.abs(out64).max()
    # the error of the last rows is no larger than that of the first rows: no accumulation with N
    assert err[-4096:].max() < 1e-5 and err[-4096:].max() < 4 * max(err[:4096].max(), 1e-7)


def test_performer_approximates_softmax_attention():
    q, k, v = _qkv(5, (2,), 64, 64, 16, 8, np.float64, scale=0.4)
    exact = attnkit.scaled_dot_product_attention(q, k, v)
    approx = linear_attention(q, k, v, feature_map=PositiveRandomFeatureMap(2048, random_state=0))
    assert np.abs(approx - exact).mean() < 0.1 * np.abs(exact).mean()


def test_broadcast_leading_dims_and_dtypes():
    q, k, v = _qkv(6, (2, 1), 10, 12, 4, 3, np.float32)
    k, v = k[:, 0], v[:, 0]  # (2, 12, .) broadcast against q's (2, 1, 10, .) leading dims
    out = linear_attention(q, k.astype(np.float64), v)
    assert out.shape == (2, 2, 10, 3) and out.dtype == np.float64
    expected = reference.linear_attention(q, k, v, feature_map=EluFeatureMap())
    np.testing.assert_allclose(out, expected, rtol=1e-6)



@pytest.mark.parametrize("causal", [False, True])
def test_a_mask_may_add_batch_dims(causal):
    # NumPy broadcasting: a (3, 2, 1, Nk) mask over (2, N, d) inputs gives a (3, 2, N, dv) output.
    q, k, v = _qkv(7, (2,), 5, 5, 4, 3, np.float64)
    mask = np.random.default_rng(0).random((3, 2, 1, 5)) < 0.7
    out = linear_attention(q, k, v, mask=mask, causal=causal)
    assert out.shape == (3, 2, 5, 3)
    expected = reference.linear_attention(q, k, v, feature_map=EluFeatureMap(), mask=mask, causal=causal)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-12)


def test_rows_that_see_nothing_are_zero():
    q, k, v = _qkv(7, (2,), 5, 5, 3, 2, np.float64)
    out = linear_attention(q, k, v, key_lengths=np.array([0, 5]))
    np.testing.assert_array_equal(out[0], 0)
    assert np.all(out[1] != 0)


def test_errors():
    q, k, v = _qkv(8, (2,), 4, 6, 3, 2, np.float64)
    with pytest.raises(ValueError, match="key-padding masks only"):
        linear_attention(q, k, v, mask=np.ones((4, 6), bool))
    with pytest.raises(ValueError, match="Nq == Nk"):
        linear_attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match="feature_map"):
        linear_attention(q, k, v, feature_map="nope")
    for eps in (-1.0, 1.0):  # relative: eps >= 1 would zero every row
        with pytest.raises(ValueError, match=r"eps must be in \[0, 1\)"):
            linear_attention(q, k, v, eps=eps)
        with pytest.raises(ValueError, match=r"eps must be in \[0, 1\)"):
            LinearAttentionState(eps=eps)
    with pytest.raises(ValueError, match="return_state"):
        linear_attention(q, k, v, return_state=True)
    with pytest.raises(ValueError, match="same last dimension"):
        linear_attention(q, k[..., :2], v)
    with pytest.raises(TypeError, match="q must be a float32 or float64"):
        linear_attention(q.astype(int), k, v)
    state = LinearAttentionState()
    state.step(q[:, 0], k[:, 0], v[:, 0])
    with pytest.raises(ValueError, match="batch shape or widths changed"):
        state.step(q[0, 0], k[0, 0], v[0, 0])
    with pytest.raises(ValueError, match=r"q must have shape \(..., d\) with batch dims \(2,\)"):
        state.attend(q[0, 0])
    with pytest.raises(ValueError, match="holds no keys yet"):
        LinearAttentionState().attend(q[:, 0])
    with pytest.raises(TypeError, match="k must be a float32 or float64"):
        LinearAttentionState.from_keys(k.astype(int), v)
    with pytest.raises(ValueError, match="key_lengths must lie in"):
        LinearAttentionState.from_keys(k, v, key_lengths=np.array([7, 1]))
