"""The NumPy reference against hand-computed examples: the oracle needs its own oracle."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attnkit import reference
from attnkit.feature_maps import RandomFourierFeatureMap
from attnkit.testing import check_grad

LN3 = np.log(3.0)


def test_softmax_2x2_by_hand():
    x = np.array([[0.0, LN3], [1.0, 1.0]])
    assert_allclose(reference.softmax(x), [[0.25, 0.75], [0.5, 0.5]], rtol=1e-15)
    e = np.e
    assert_allclose(reference.softmax(x, axis=0), [[1 / (1 + e), 3 / (3 + e)], [e / (1 + e), e / (3 + e)]])
    assert_allclose(reference.log_softmax(x), np.log([[0.25, 0.75], [0.5, 0.5]]), rtol=1e-15)


def test_softmax_handles_infinities_and_large_logits():
    x = np.array([[-np.inf, -np.inf], [-np.inf, 0.0], [1e4, 1e4], [1000.0, 0.0], [np.nan, 0.0]])
    assert_array_equal(reference.softmax(x)[:4], [[0, 0], [0, 1], [0.5, 0.5], [1, 0]])
    assert np.isnan(reference.softmax(x)[4]).all()
    logs = reference.log_softmax(x)
    assert_array_equal(logs[:3], [[-np.inf, -np.inf], [-np.inf, 0], [-np.log(2), -np.log(2)]])
    assert_allclose(logs[3], [0.0, -1000.0])
    assert reference.softmax(np.zeros((3, 0))).shape == (3, 0)


@pytest.mark.parametrize("fn", [reference.softmax, reference.log_softmax])
def test_softmax_dtype_rule(fn):
    assert fn(np.zeros(3, np.float32)).dtype == np.float32
    assert fn(np.zeros(3, np.float16)).dtype == np.float32
    assert fn(np.zeros(3)).dtype == np.float64
    with pytest.raises(TypeError, match="x"):
        fn(np.zeros(3, np.int64))


def test_attention_weights_known():
    # d = 4 so the default scale is 1/2 and the logits are [0, ln 3]: weights [1/4, 3/4].
    q = np.array([[2.0, 0, 0, 0]])
    k = np.array([[0.0, 0, 0, 0], [LN3, 0, 0, 0]])
    v = np.array([[4.0, 0.0], [0.0, 8.0]])
    out, w = reference.scaled_dot_product_attention(q, k, v, return_weights=True)
    assert_allclose(w, [[0.25, 0.75]])
    assert_allclose(out, [[1.0, 6.0]])
    out = reference.scaled_dot_product_attention(q, k, v, scale=0.0)
    assert_allclose(out, [[2.0, 4.0]])
    out = reference.scaled_dot_product_attention(q, k, v, scale=0.0, bias=np.array([LN3, 0.0]))
    assert_allclose(out, [[3.0, 2.0]])


def test_causal_offset_bottom_right():
    assert_array_equal(reference.attention_mask(2, 4, causal=True), [[1, 1, 1, 0], [1, 1, 1, 1]])
    # Nk < Nq: the first Nq - Nk rows see nothing.
    assert_array_equal(reference.attention_mask(3, 2, causal=True), [[0, 0], [1, 0], [1, 1]])
    assert_array_equal(reference.attention_mask(3, 3, causal=True), np.tri(3, dtype=bool))


def test_a_window_is_a_band_around_the_end_aligned_position():
    # (left, right) = (1, 1) on 4 x 4: a tridiagonal band; causal keeps its lower half.
    band = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]], bool)
    assert_array_equal(reference.attention_mask(4, 4, window=(1, 1)), band)
    assert_array_equal(reference.attention_mask(4, 4, window=(1, 1), causal=True), band & np.tri(4, dtype=bool))
    # 2 queries after 4 cached keys (positions 4 and 5 of 6), each its own key and the one before.
    assert_array_equal(reference.attention_mask(2, 6, window=(1, None), causal=True),
                       [[0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 1, 1]])
    assert_array_equal(reference.attention_mask(3, 3, window=(None, None)), np.ones((3, 3), bool))
    assert_array_equal(reference.attention_mask(3, 3, window=(0, None)), np.triu(np.ones((3, 3), bool)))


def test_rows_with_nothing_visible_are_zero():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(3, 2)), rng.normal(size=(2, 2)), rng.normal(size=(2, 5))
    out, w = reference.scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
    assert_array_equal(out[0], 0.0)
    assert_array_equal(w[0], 0.0)
    assert_array_equal(w[1], [1.0, 0.0])
    assert_allclose(out[1], v[0])
    assert_allclose(w[2].sum(), 1.0)


def test_key_lengths_prefix_semantics():
    # key_lengths (B,) serves q of shape (B, H, Nq, d): aligned from the LEFT.
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(2, 3, 6, 5)), rng.normal(size=(2, 3, 6, 2))
    visible = reference.attention_mask(4, 6, key_lengths=np.array([1, 6]), batch_shape=(2, 3))
    assert visible.shape == (2, 3, 4, 6)
    assert_array_equal(visible[0], np.broadcast_to(np.arange(6) < 1, (3, 4, 6)))
    assert visible[1].all()

    out = reference.scaled_dot_product_attention(q, k, v, key_lengths=np.array([1, 6]))
    assert_allclose(out[0], np.broadcast_to(v[0, :, :1, :], (3, 4, 2)))
    assert_allclose(out[1], reference.scaled_dot_product_attention(q[1], k[1], v[1]))

    per_head = np.array([[0, 2, 6], [6, 1, 3]])
    out = reference.scaled_dot_product_attention(q, k, v, key_lengths=per_head)
    explicit = reference.scaled_dot_product_attention(q, k, v, mask=(np.arange(6) < per_head[..., None, None]))
    assert_allclose(out, explicit)
    assert_array_equal(out[0, 0], 0.0)
    assert_allclose(
        reference.scaled_dot_product_attention(q, k, v, key_lengths=3),
        reference.scaled_dot_product_attention(q[..., :, :], k[..., :3, :], v[..., :3, :]),
    )


@pytest.mark.parametrize(
    ("lengths", "error"),
    [
        (np.array([1, 2, 3]), ValueError),
        (np.array([-1, 2]), ValueError),
        (np.array([7, 2]), ValueError),
        (np.array([1.0, 2.0]), TypeError),
    ],
)
def test_key_lengths_rejected(lengths, error):
    with pytest.raises(error, match="key_lengths"):
        reference.attention_mask(4, 6, key_lengths=lengths, batch_shape=(2, 3))


def test_mask_key_lengths_and_causal_combine():
    mask = np.array([[True, False, True]])
    visible = reference.attention_mask(3, 3, mask=mask, key_lengths=np.array([2, 3]), causal=True, batch_shape=(2,))
    assert_array_equal(visible[0], [[1, 0, 0], [1, 0, 0], [1, 0, 0]])
    assert_array_equal(visible[1], [[1, 0, 0], [1, 0, 0], [1, 0, 1]])


@given(nq=st.integers(0, 9), nk=st.integers(0, 9), causal=st.booleans(),
       window=st.none() | st.tuples(st.none() | st.integers(0, 10), st.none() | st.integers(0, 10)), data=st.data())
def test_attention_mask_is_the_visibility_rule(nq, nk, causal, window, data):
    # The rule attention_mask states once (first_key(i) <= j < end_key(i)), against the conditions
    # written out one by one for every (b, i, j): key length, causal end-aligned, window, mask.
    lengths = np.array(data.draw(st.lists(st.integers(0, nk), min_size=2, max_size=2)))
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=nk, max_size=nk)), dtype=bool)
    visible = reference.attention_mask(nq, nk, mask=mask, key_lengths=lengths, causal=causal, window=window,
                                       batch_shape=(2,))
    left, right = window or (None, None)
    expected = np.zeros((2, nq, nk), dtype=bool)
    for b, i, j in np.ndindex(expected.shape):
        position = i + nk - nq
        expected[b, i, j] = (j < lengths[b] and (not causal or j <= position) and mask[j]
                             and (left is None or j >= position - left) and (right is None or j <= position + right))
    assert_array_equal(visible, expected)


def test_attention_broadcasts_leading_dims_and_dtypes():
    rng = np.random.default_rng(2)
    q = rng.normal(size=(2, 1, 3, 4)).astype(np.float32)
    k = rng.normal(size=(5, 6, 4)).astype(np.float32)
    v = rng.normal(size=(1, 6, 7)).astype(np.float32)
    out = reference.scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 5, 3, 7) and out.dtype == np.float32
    assert_allclose(out[1, 3], reference.scaled_dot_product_attention(q[1, 0], k[3], v[0]), rtol=1e-6)
    mask = np.ones((4, 1, 1, 6), dtype=bool)
    assert reference.scaled_dot_product_attention(q[0, 0], k[0], v[0], mask=mask).shape == (4, 1, 3, 7)
    assert reference.scaled_dot_product_attention(q, k.astype(np.float64), v).dtype == np.float64
    assert reference.scaled_dot_product_attention(*(a.astype(np.float16) for a in (q, k, v))).dtype == np.float32
    with pytest.raises(TypeError, match="v"):
        reference.scaled_dot_product_attention(q, k, v.astype(np.int32))


def test_non_finite_values_stay_in_their_rows():
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(4, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
    q[1, 0] = np.nan
    v[4] = np.inf  # key 4 is visible to row 3 only
    out = reference.scaled_dot_product_attention(q, k, v, causal=True, bias=np.zeros((4, 5)))
    assert np.isnan(out[1]).all()
    assert not np.isfinite(out[3]).any()
    assert np.isfinite(out[[0, 2]]).all()


def test_kernel_attention_guard_is_relative_by_hand():
    q, k, v = np.zeros((4, 1)), np.zeros((2, 1)), np.array([[1.0, 0.0], [0.0, 1.0]])
    table = np.array([[1.0, 3.0], [1e-30, 3e-30], [1.0, -1.0], [2.0, -1.0]])  # the similarity A, row by row
    out = reference.kernel_attention(q, k, v, lambda a, b: table)
    # tiny weights still average; den = 0 against sum |A| = 2 gives zeros; a signed row that does not
    # cancel (den = 1 against 3) is divided as it is
    assert_allclose(out, [[0.25, 0.75], [0.25, 0.75], [0.0, 0.0], [2.0, -1.0]], rtol=1e-15)
    table[0, 0] = np.nan
    assert np.isnan(reference.kernel_attention(q, k, v, lambda a, b: table)[0]).all()


def test_linear_attention_guard_is_relative_by_hand():
    # One sine/cosine frequency w: phi(q).phi(k) = cos(w.(q - k)) and |phi(q)|.|phi(k)| = 1 at phases
    # pi/4 and pi/4 - angle: angle pi/2 cancels to rounding, pi is negative, 0 is 1.
    fm = RandomFourierFeatureMap(1, random_state=0)
    w = fm.weights(2)[0]
    q = np.full((3, 1, 1), np.pi / 4) * w / (w @ w)
    k = q - np.array([np.pi / 2, np.pi, 0.0])[:, None, None] * w / (w @ w)
    out = reference.linear_attention(q, k, np.full((3, 1, 2), 5.0), feature_map=fm)
    assert_array_equal(out[:2], 0.0)
    assert_allclose(out[2], [[5.0, 5.0]], rtol=1e-12)
    # elu + 1 is exp below 0, so shifting the queries by -20 scales their features by e^-10 against a
    # shift by -10 (den ~ 1e-8 against ~ 1e-4): the averages are the same
    rng = np.random.default_rng(4)
    q, k, v = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
    assert_allclose(reference.linear_attention(q - 20, k, v, causal=True),
                    reference.linear_attention(q - 10, k, v, causal=True), rtol=1e-12)


def test_sinusoidal_positions_by_hand():
    # d = 4: w = [1, 10000 ** (-1/2)] = [1, 0.01].
    p = reference.sinusoidal_positions(2, 4)
    assert_allclose(p, [[0, 1, 0, 1], [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01)]])
    assert_allclose(reference.sinusoidal_positions(3, 6, start=5), reference.sinusoidal_positions(8, 6)[5:])
    assert reference.sinusoidal_positions(0, 2, dtype=np.float32).shape == (0, 2)
    assert reference.sinusoidal_positions(3, 2, dtype=np.float32).dtype == np.float32
    for d in (0, 3):
        with pytest.raises(ValueError, match="d"):
            reference.sinusoidal_positions(4, d)


# -- training references: each backward against finite differences of its own forward (no kernels) --


@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_backwards_by_finite_differences(axis):
    rng = np.random.default_rng(4)
    x, w = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    check_grad(lambda x: np.sum(reference.softmax(x, axis) * w), {"x": x},
               {"x": reference.softmax_backward(reference.softmax(x, axis), w, axis)})
    check_grad(lambda x: np.sum(reference.log_softmax(x, axis) * w), {"x": x},
               {"x": reference.log_softmax_backward(reference.log_softmax(x, axis), w, axis)})


def test_cross_entropy_by_hand():
    logits = np.log(np.array([[0.25, 0.75], [0.5, 0.5], [0.1, 0.9]]))
    targets = np.array([1, -100, 0])
    assert_allclose(reference.cross_entropy(logits, targets, reduction="none"), [-np.log(0.75), 0.0, -np.log(0.1)])
    assert_allclose(reference.cross_entropy(logits, targets), -np.log(0.75 * 0.1) / 2)
    assert_allclose(reference.cross_entropy(logits, targets, class_weight=[3.0, 1.0]),
                    -(np.log(0.75) + 3 * np.log(0.1)) / 4)
    # q = [0.05, 0.95] for the first row with label_smoothing 0.1.
    assert_allclose(reference.cross_entropy(logits[:1], targets[:1], label_smoothing=0.1),
                    -(0.05 * np.log(0.25) + 0.95 * np.log(0.75)))
    assert reference.cross_entropy(logits[1:2], targets[1:2]) == 0.0


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradient_by_finite_differences(reduction):
    rng = np.random.default_rng(5)
    logits, targets = rng.normal(size=(4, 3)), np.array([2, 0, -100, 1])
    kwargs = {"label_smoothing": 0.2, "class_weight": np.array([1.0, 0.5, 2.0]), "reduction": reduction}
    _, dlogits = reference.cross_entropy(logits, targets, return_grad=True, **kwargs)
    check_grad(lambda logits: np.sum(reference.cross_entropy(logits, targets, **kwargs)), {"logits": logits},
               {"logits": dlogits})


def test_layer_norm_by_hand_and_by_finite_differences():
    y, mean, rstd = reference.layer_norm(np.array([[1.0, 3.0]]), eps=0.0, return_stats=True)
    assert_allclose(y, [[-1.0, 1.0]])
    assert_allclose(mean, [2.0])
    assert_allclose(rstd, [1.0])
    rng = np.random.default_rng(6)
    x, gamma, beta, w = rng.normal(size=(3, 4)), rng.normal(size=4), rng.normal(size=4), rng.normal(size=(3, 4))
    _, mean, rstd = reference.layer_norm(x, gamma, beta, return_stats=True)
    dx, dgamma, dbeta = reference.layer_norm_backward(w, x, gamma, mean, rstd)
    check_grad(lambda x, gamma, beta: np.sum(reference.layer_norm(x, gamma, beta) * w),
               {"x": x, "gamma": gamma, "beta": beta}, {"x": dx, "gamma": dgamma, "beta": dbeta})


def test_gelu_by_hand_and_by_finite_differences():
    # gelu(x) ~ x Phi(x): within 1e-3 of the exact (erf) form.
    x = np.linspace(-4, 4, 17)
    phi = 0.5 * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))
    np.testing.assert_allclose(reference.gelu(x), x * phi, atol=1e-3)
    assert reference.gelu(np.float32(1.0)).dtype == np.float32
    w = np.random.default_rng(7).normal(size=17)
    check_grad(lambda x: np.sum(reference.gelu(x) * w), {"x": x}, {"x": reference.gelu_backward(x, w)})


def test_matmul_by_hand():
    a, b = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[5.0, 6.0], [7.0, 8.0]])
    assert_array_equal(reference.matmul(a, b), [[19.0, 22.0], [43.0, 50.0]])
    assert_array_equal(reference.matmul(a, b, bias=[1.0, -1.0]), [[20.0, 21.0], [44.0, 49.0]])
    out = np.ones((2, 2))
    assert reference.matmul(a.T, b, out=out, accumulate=True) is out
    assert_array_equal(out, [[27.0, 31.0], [39.0, 45.0]])
    assert_array_equal(reference.matmul(np.ones((2, 0)), np.ones((0, 3)), bias=[1.0, 2.0, 3.0]), [[1, 2, 3]] * 2)
    assert reference.matmul(a.astype(np.float16), b.astype(np.float32)).dtype == np.float32
    assert reference.matmul(a.astype(np.float32), b).dtype == np.float64
    with pytest.raises(TypeError, match="a"):
        reference.matmul(a.astype(np.int64), b)
    with pytest.raises(ValueError, match="out"):
        reference.matmul(a, b, accumulate=True)


def test_exact_gelu_by_hand_and_by_finite_differences():
    x = np.linspace(-4, 4, 17)
    phi = 0.5 * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))
    assert_allclose(reference.gelu(x, approximate="none"), x * phi, rtol=1e-15, atol=1e-16)
    assert_allclose(reference.gelu(1.0, approximate="none"), 0.8413447460685429, rtol=1e-15)  # Phi(1)
    # The tail keeps its relative precision (erfc, no 1 - erf): gelu(-10) = -10 Phi(-10).
    assert_allclose(reference.gelu(-10.0, approximate="none"), -7.619853024160527e-23, rtol=1e-14)
    assert_array_equal(reference.gelu([np.inf, -np.inf, np.nan], approximate="none"), [np.inf, 0.0, np.nan])
    assert_array_equal(reference.gelu_backward([np.inf, -np.inf, 0.0], np.ones(3), approximate="none"), [1, 0, 0.5])
    assert reference.gelu(np.float32(1.0), approximate="none").dtype == np.float32
    w = np.random.default_rng(8).normal(size=17)
    check_grad(lambda x: np.sum(reference.gelu(x, approximate="none") * w), {"x": x},
               {"x": reference.gelu_backward(x, w, approximate="none")})


def test_rms_norm_by_hand_and_by_finite_differences():
    y, rstd = reference.rms_norm(np.array([[3.0, -4.0]]), eps=0.0, return_stats=True)
    assert_allclose(rstd, [1 / np.sqrt(12.5)])
    assert_allclose(y, [[3 / np.sqrt(12.5), -4 / np.sqrt(12.5)]])
    assert_allclose(reference.rms_norm(np.array([1.0, 1.0]), [2.0, -1.0], eps=0.0), [2.0, -1.0])
    rng = np.random.default_rng(9)
    x, gamma, w = rng.normal(size=(3, 4)), rng.normal(size=4), rng.normal(size=(3, 4))
    _, rstd = reference.rms_norm(x, gamma, return_stats=True)
    dx, dgamma = reference.rms_norm_backward(w, x, gamma, rstd)
    check_grad(lambda x, gamma: np.sum(reference.rms_norm(x, gamma) * w), {"x": x, "gamma": gamma},
               {"x": dx, "gamma": dgamma})
