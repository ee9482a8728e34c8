"""Random numbers: ``random_state`` to a numpy Generator, and Gaussian projection rows."""

import math
import numbers

import numpy as np

from attnkit._memory import checked_empty


def generator(random_state, *stream):
    """A numpy Generator from ``random_state``, optionally one stream of several from the same seed.

    Parameters
    ----------
    random_state : int, numpy.random.Generator, numpy.random.RandomState or None
        An int is a seed; a legacy RandomState gives a seed (one draw of it); a Generator is used as
        it is (it advances, and ``stream`` is ignored); None is fresh entropy.
    *stream : int
        With a seed, the generator is ``default_rng([seed, *stream])``: one independent stream per
        value, e.g. the epochs a training call starts after, so consecutive calls draw differently
        while each stays reproducible. Without, ``default_rng(seed)``.

    Returns
    -------
    numpy.random.Generator
    """
    if isinstance(random_state, np.random.RandomState):
        random_state = random_state.randint(np.iinfo(np.int64).max, dtype=np.int64)
    if stream and isinstance(random_state, numbers.Integral):
        return np.random.default_rng([int(random_state), *stream])
    return np.random.default_rng(random_state)


def gaussian_rows(rng, n_rows, d, orthogonal):
    """(n_rows, d) rows ~ N(0, I) drawn from the Generator ``rng``.

    Orthogonal: blocks of d mutually orthogonal rows whose norms are drawn like Gaussian vectors'
    (chi_d), which lowers the variance of random-feature estimators (Yu et al., 2016).
    """
    n_blocks = math.ceil(n_rows / d) if orthogonal else 0
    # Refused before drawing: a huge n_features would otherwise swap, or (orthogonal) spin for hours.
    checked_empty((n_rows + 2 * n_blocks * d, d), np.float64, f"{n_rows} random directions of width {d}")
    if not orthogonal:
        return rng.standard_normal((n_rows, d))
    # One stacked QR: the same draws and bits as a QR per block, without a Python loop over blocks.
    q, r = np.linalg.qr(rng.standard_normal((n_blocks, d, d)))
    q = q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[:, None, :]  # a Haar rotation, not QR's sign convention
    rows = np.swapaxes(q, -1, -2).reshape(n_blocks * d, d)[:n_rows]
    norms = np.linalg.norm(rng.standard_normal((n_rows, d)), axis=1)
    return rows * norms[:, None]
