"""Helpers for testing code built on attnkit.

``assert_allclose`` compares an op's output with :mod:`attnkit.reference` at the tolerance the
project promises for its dtype; ``check_grad`` and ``check_module_grad`` compare hand-written
gradients with central finite differences (:mod:`attnkit.testing.gradcheck`). The Hypothesis
strategies live in :mod:`attnkit.testing.strategies`, which is imported on its own because it needs
Hypothesis (``pip install "attnkit[test]"``), and so do the tiny GGUF files of :mod:`attnkit.testing.gguf`
(which need the ``gguf`` package); this module needs only NumPy.
"""

import numpy as np

from attnkit.testing.gradcheck import check_grad, check_module_grad, numerical_grad

__all__ = ["TOLERANCES", "assert_allclose", "check_grad", "check_module_grad", "numerical_grad"]

#: (rtol, atol per unit of magnitude) against the float64 reference: float32 is promised within
#: ~1e-5 relative for N <= 4096 (DESIGN.md, Numerics); float64 kernels reorder sums only.
TOLERANCES = {
    np.dtype(np.float32): (2e-5, 4e-6),
    np.dtype(np.float64): (1e-10, 1e-12),
}


def assert_allclose(actual, desired, *, magnitude=None, err_msg=""):
    """Assert that ``actual`` matches the reference ``desired`` at the tolerance of its dtype.

    Parameters
    ----------
    actual : ndarray of float32 or float64
        Output of an attnkit op; its dtype picks the tolerance and must equal ``desired``'s.
    desired : ndarray
        Output of the reference.
    magnitude : float, optional
        Size of the quantities the result is made of (for attention, the largest ``|v|``), which
        scales the absolute tolerance. Defaults to the largest finite ``|desired|``.
    err_msg : str, optional
        Appended to the failure message.

    Raises
    ------
    AssertionError
        If the dtypes or shapes differ, NaN/inf are not in the same places, or some entry is
        outside ``atol + rtol * |desired|``.
    """
    actual = np.asarray(actual)
    desired = np.asarray(desired)
    assert actual.dtype == desired.dtype, f"dtype {actual.dtype} != {desired.dtype}. {err_msg}"
    assert actual.shape == desired.shape, f"shape {actual.shape} != {desired.shape}. {err_msg}"
    rtol, atol = TOLERANCES[actual.dtype]
    if magnitude is None:
        magnitude = float(np.abs(desired[np.isfinite(desired)]).max(initial=0.0))
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol * magnitude, err_msg=err_msg)
