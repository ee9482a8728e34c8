"""attnkit._random: random_state -> Generator (one helper for every call site), Gaussian projection rows."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit import RandomFourierFeatures
from attnkit._random import gaussian_rows, generator


def _draw(rng):
    return rng.integers(2**32, size=3).tolist()


def test_a_seed_without_a_stream_is_default_rng_of_the_seed():
    assert _draw(generator(7)) == _draw(np.random.default_rng(7))


def test_a_seed_with_a_stream_is_default_rng_of_seed_and_stream():
    assert _draw(generator(3, 2)) == _draw(np.random.default_rng([3, 2]))
    assert _draw(generator(np.int64(3), 2, 5)) == _draw(np.random.default_rng([3, 2, 5]))


def test_streams():
    assert _draw(generator(3, 0)) == _draw(generator(3, 0))
    assert _draw(generator(3, 0)) != _draw(generator(3, 1)) and _draw(generator(3, 0)) != _draw(generator(4, 0))


def test_a_random_state_gives_a_seed():
    legacy = np.random.RandomState(0)
    seed = np.random.RandomState(0).randint(np.iinfo(np.int64).max, dtype=np.int64)
    assert _draw(generator(legacy, 5)) == _draw(np.random.default_rng([int(seed), 5]))
    assert _draw(generator(np.random.RandomState(0))) == _draw(np.random.default_rng(seed))


def test_a_generator_is_used_as_it_is_and_none_is_fresh_entropy():
    rng = np.random.default_rng(0)
    assert generator(rng) is rng and generator(rng, 4) is rng
    assert _draw(generator(None)) != _draw(generator(None))
    assert _draw(generator(None, 1)) != _draw(generator(None, 1))


def test_the_streams_are_those_of_the_three_helpers_it_replaced():
    # Drawn with attnkit's earlier _validation.generator, random_features._generator and
    # _training.training_generator(random_state, epochs_done): existing seeds give the same numbers.
    assert _draw(generator(7)) == [4058335883, 2684764585, 2938530453]
    assert _draw(generator(np.random.RandomState(0))) == [2257010096, 3337006850, 2251554250]
    assert _draw(generator(3, 0)) == [3485385464, 367860371, 770692085]
    assert _draw(generator(3, 2)) == [3626496565, 109694111, 2431228815]
    assert _draw(generator(np.random.RandomState(0), 5)) == [2910454070, 4272387047, 2539793869]


def test_random_fourier_features_draw_the_weights_they_drew_before():
    # Fitted with attnkit before its random_state helpers were merged (rounded to 12 digits).
    X = np.zeros((3, 2))
    rff = RandomFourierFeatures(3, random_state=0).fit(X)
    np.testing.assert_allclose(rff.random_weights_, [[0.17780938387, 0.905694397908, -0.757550892472],
                                                     [-0.186824489322, 0.148351168372, 0.51137263074]], atol=1e-11)
    np.testing.assert_allclose(rff.random_offset_, [3.81160499311, 4.583562073613, 3.415696558991], atol=1e-11)
    rff = RandomFourierFeatures(3, orthogonal=True, random_state=np.random.RandomState(0)).fit(X)
    np.testing.assert_allclose(rff.random_weights_, [[-0.50776189608, -1.731089411341, 3.094290197859],
                                                     [2.291071943515, -0.383655015406, 0.249684054609]], atol=1e-11)


def test_gaussian_rows_are_the_generators_normal_draws():
    np.testing.assert_array_equal(gaussian_rows(np.random.default_rng(0), 2, 3, False),
                                  np.random.default_rng(0).standard_normal((2, 3)))
    np.testing.assert_allclose(gaussian_rows(np.random.default_rng(0), 2, 3, False).round(12),
                               [[0.125730221093, -0.132104863291, 0.640422650443],
                                [0.104900117153, -0.535669373161, 0.361595054909]], atol=1e-12)


@given(n_rows=st.integers(1, 20), d=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_orthogonal_rows_are_orthogonal_within_each_block(n_rows, d, seed):
    rows = gaussian_rows(np.random.default_rng(seed), n_rows, d, True)
    assert rows.shape == (n_rows, d)
    norms = np.linalg.norm(rows, axis=1)
    for start in range(0, n_rows, d):
        unit = rows[start:start + d] / norms[start:start + d, None]
        np.testing.assert_allclose(unit @ unit.T, np.eye(unit.shape[0]), atol=1e-10)


def test_orthogonal_row_norms_are_drawn_like_gaussian_vectors():
    # |x| of x ~ N(0, I_d) has E|x|^2 = d; 4000 rows put the mean within a few percent.
    d = 5
    rows = gaussian_rows(np.random.default_rng(1), 4000, d, True)
    assert math.isclose(np.mean(np.sum(rows**2, axis=1)), d, rel_tol=0.05)


def test_too_many_rows_are_refused_before_drawing():
    with pytest.raises(MemoryError, match="random directions of width 3"):
        gaussian_rows(np.random.default_rng(0), 10**13, 3, True)
