"""ops.sinusoidal_positions and ops.rotary_positions against the NumPy reference and their rotation structure."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from attnkit import ops, reference
from attnkit.testing import assert_allclose
from attnkit.testing.strategies import head_dims, sequence_lengths

even_dims = head_dims(min_value=1, max_value=65).map(lambda h: 2 * h)
bases = st.sampled_from([10000.0, 10.0, 2.5, 1e6, 1.0])
starts = st.integers(0, 2000)
dtypes = st.sampled_from([np.float32, np.float64])


def rotation(d, base):
    """M with P[t + 1] = M @ P[t]: one 2x2 block [[cos w, sin w], [-sin w, cos w]] per (sin, cos)."""
    m = np.zeros((d, d))
    for k, w in enumerate(base ** (-2.0 * np.arange(d // 2) / d)):
        m[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [[np.cos(w), np.sin(w)], [-np.sin(w), np.cos(w)]]
    return m


@given(n=sequence_lengths(min_value=0), d=even_dims, base=bases, start=starts, dtype=dtypes)
def test_matches_reference(isa, n, d, base, start, dtype):
    got = ops.sinusoidal_positions(n, d, base=base, start=start, dtype=dtype)
    # Angles up to (start + n) rad: float64 rounding of the angle grows with it.
    assert_allclose(
        got,
        reference.sinusoidal_positions(n, d, base=base, start=start, dtype=dtype),
        magnitude=max(1.0, (start + n) / 100),
    )


@given(n=sequence_lengths(), d=even_dims, base=bases, start=st.integers(0, 300))
def test_next_position_is_a_rotation(isa, n, d, base, start):
    p = ops.sinusoidal_positions(n + 1, d, base=base, start=start)
    np.testing.assert_allclose(p[1:], p[:-1] @ rotation(d, base).T, rtol=0, atol=1e-12)


@given(n=sequence_lengths(), d=even_dims, base=bases, start=starts, dtype=dtypes)
def test_start_offsets_the_rows(isa, n, d, base, start, dtype):
    shifted = ops.sinusoidal_positions(n, d, base=base, start=start, dtype=dtype)
    whole = ops.sinusoidal_positions(start + n, d, base=base, dtype=dtype)
    assert_array_equal(shifted, whole[start:])


def test_first_rows_by_hand(isa):
    p = ops.sinusoidal_positions(2, 4)
    assert_allclose(p, np.array([[0, 1, 0, 1], [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01)]]))
    assert ops.sinusoidal_positions(0, 8, dtype=np.float32).shape == (0, 8)
    assert ops.sinusoidal_positions(3, 8, dtype=np.float32).dtype == np.float32


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({"n": 3, "d": 5}, ValueError, "d"),
        ({"n": 3, "d": 0}, ValueError, "d"),
        ({"n": 3, "d": -2}, ValueError, "d"),
        ({"n": -1, "d": 4}, ValueError, "n"),
        ({"n": 3, "d": 4, "base": 0.0}, ValueError, "base"),
        ({"n": 3, "d": 4, "base": -10.0}, ValueError, "base"),
        ({"n": 3, "d": 4, "base": np.inf}, ValueError, "base"),
        ({"n": 3, "d": 4, "start": -1}, ValueError, "start"),
        ({"n": 3.0, "d": 4}, TypeError, "n"),
        ({"n": 3, "d": 4.0}, TypeError, "d"),
        ({"n": 3, "d": 4, "dtype": np.int32}, TypeError, "dtype"),
        ({"n": 3, "d": 4, "dtype": np.complex128}, TypeError, "dtype"),
    ],
)
def test_rejects_bad_arguments(kwargs, error, argument):
    with pytest.raises(error, match=rf"\b{argument}\b"):
        ops.sinusoidal_positions(**kwargs)


# -- rotary positions ---------------------------------------------------------------------------------------
@given(n=sequence_lengths(min_value=0), d=even_dims, base=bases, start=starts, dtype=dtypes, heads=st.integers(1, 3))
def test_rotary_matches_reference(n, d, base, start, dtype, heads):
    x = np.random.default_rng(n + d).standard_normal((heads, n, d)).astype(dtype)
    got = ops.rotary_positions(x, start=start, base=base)
    assert got.dtype == dtype and got.shape == x.shape
    assert_allclose(got, reference.rotary_positions(x, start=start, base=base), magnitude=max(1.0, (start + n) / 100))


@given(n=sequence_lengths(), d=even_dims, base=bases, start=st.integers(0, 300))
def test_rotary_inverse_undoes_and_keeps_norms(n, d, base, start):
    x = np.random.default_rng(d).standard_normal((n, d))
    y = ops.rotary_positions(x, start=start, base=base)
    np.testing.assert_allclose(np.hypot(y[:, 0::2], y[:, 1::2]), np.hypot(x[:, 0::2], x[:, 1::2]), rtol=1e-12)
    np.testing.assert_allclose(ops.rotary_positions(y, start=start, base=base, inverse=True), x, atol=1e-12)


@given(d=even_dims, base=bases, t=st.integers(0, 200), s=st.integers(0, 200), shift=st.integers(0, 500))
def test_rotary_scores_depend_on_distance_only(d, base, t, s, shift):
    rng = np.random.default_rng(d + t)
    q, k = rng.standard_normal((1, d)), rng.standard_normal((1, d))
    score = (ops.rotary_positions(q, start=t, base=base) @ ops.rotary_positions(k, start=s, base=base).T).item()
    shifted = (ops.rotary_positions(q, start=t + shift, base=base)
               @ ops.rotary_positions(k, start=s + shift, base=base).T).item()
    np.testing.assert_allclose(shifted, score, atol=1e-9 * (1 + t + s + shift))


def test_rotary_rows_count_positions_from_start():
    x = np.random.default_rng(0).standard_normal((2, 5, 8))
    whole = ops.rotary_positions(x, start=3, base=100.0)
    for t in range(5):
        assert_array_equal(ops.rotary_positions(x[:, t : t + 1], start=3 + t, base=100.0), whole[:, t : t + 1])


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(x=np.zeros((4, 3))), "even d"),
    (dict(x=np.zeros(4)), "shape"),
    (dict(x=np.zeros((4, 2), np.int64)), "float32 or float64"),
    (dict(x=np.zeros((4, 2)), start=-1), "start"),
    (dict(x=np.zeros((4, 2)), base=0.0), "base"),
])
def test_rotary_refuses(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ops.rotary_positions(**kwargs)
