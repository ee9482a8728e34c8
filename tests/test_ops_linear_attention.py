"""ops.linear_attention and LinearAttentionState against the NumPy reference, on every ISA."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import attnkit
from attnkit import reference
from attnkit.feature_maps import (
    EluFeatureMap,
    PolynomialFeatureMap,
    PositiveRandomFeatureMap,
    RandomFourierFeatureMap,
)
from attnkit.ops import LinearAttentionState, linear_attention

TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-9, atol=1e-11)}


def _qkv(seed, batch, nq, nk, d, dv, dtype, scale=0.5):
    rng = np.random.default_rng(seed)
    return tuple((scale * rng.standard_normal(batch + shape)).astype(dtype)
                 for shape in ((nq, d), (nk, d), (nk, dv)))


problems = st.fixed_dictionaries(dict(
    seed=st.integers(0, 2**32 - 1),
    batch=st.sampled_from([(), (1,), (3,), (2, 2)]),
    n=st.integers(1, 200),
    d=st.integers(1, 12),
    dv=st.integers(1, 20),
    dtype=st.sampled_from([np.float32, np.float64]),
))


@given(p=problems, causal=st.booleans(), c=st.floats(0.1, 2.0))
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
    np.testing.assert_allclose(out, expected, **tol)


@given(p=problems, causal=st.booleans(), fm=st.sampled_from(["elu", "relu", "favor", "rff"]))
def test_linear_attention_matches_reference_for_every_feature_map(isa, p, causal, fm):
    feature_map = {"favor": PositiveRandomFeatureMap(32, random_state=p["seed"]),
                   "rff": RandomFourierFeatureMap(16, random_state=p["seed"], softmax_kernel=True)}.get(fm, fm)
    q, k, v = _qkv(p["seed"], p["batch"], p["n"], p["n"], p["d"], p["dv"], p["dtype"])
    out = linear_attention(q, k, v, feature_map=feature_map, causal=causal)
    expected = reference.linear_attention(q, k, v, feature_map=feature_map, causal=causal)
    assert np.all(np.isfinite(out))  # random-feature normalisers can go <= 0: guarded, never NaN
    # rows whose normaliser sits right at eps may legitimately flip between the two; none do here
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


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 130))
def test_causal_output_ignores_the_future(isa, seed, n):
    q, k, v = _qkv(seed, (2,), n, n, 6, 3, np.float64)
    out = linear_attention(q, k, v, causal=True)
    t = np.random.default_rng(seed).integers(0, n - 1)
    q2, k2, v2 = (a.copy() for a in (q, k, v))
    for a in (q2, k2, v2):
        a[:, t + 1:] = 7.0
    np.testing.assert_allclose(linear_attention(q2, k2, v2, causal=True)[:, : t + 1], out[:, : t + 1], rtol=1e-12)


@pytest.mark.parametrize("fm", ["elu", PositiveRandomFeatureMap(24, random_state=1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_recurrent_steps_equal_the_causal_op(isa, fm, dtype):
    q, k, v = _qkv(3, (2, 3), 150, 150, 8, 5, dtype)
    full = linear_attention(q, k, v, feature_map=fm, causal=True)
    state = LinearAttentionState(fm)
    steps = np.stack([state.step(q[..., t, :], k[..., t, :], v[..., t, :]) for t in range(150)], axis=-2)
    assert steps.dtype == dtype
    np.testing.assert_allclose(steps, full, **TOL[dtype])
    # prefill with the op, then continue step by step
    head, state = linear_attention(q[..., :100, :], k[..., :100, :], v[..., :100, :], feature_map=fm,
                                   causal=True, return_state=True)
    tail = np.stack([state.step(q[..., t, :], k[..., t, :], v[..., t, :]) for t in range(100, 150)], axis=-2)
    np.testing.assert_allclose(np.concatenate([head, tail], axis=-2), full, **TOL[dtype])


@pytest.mark.parametrize("fm", ["elu", PositiveRandomFeatureMap(24, random_state=2)])
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
    with pytest.raises(ValueError, match="eps"):
        linear_attention(q, k, v, eps=-1.0)
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
