"""The compiled module's own guards: a view that could read outside its array, a converted copy, or
an impossible request reaches Python as ValueError/TypeError, never a crash; kernels release the GIL."""

import threading

import numpy as np
import pytest

from attnkit import _core, ops


def _operand(a, offsets, row_stride):
    return (a, np.asarray(offsets, dtype=np.int64), row_stride)


def _output(out, offsets, row_stride):
    return dict(out=out, out_offsets=np.asarray(offsets, dtype=np.int64), out_row_stride=row_stride, nq=4, dv=3)


def test_views_reaching_outside_their_array_are_refused():
    q = np.zeros((4, 3))
    out = np.empty((1, 4, 3))
    good = _operand(q, [0], 3)
    problem = dict(k=good, v=good, mask=None, bias=None, key_lengths=None, causal=False, window_left=-1,
                   window_right=-1, scale=1.0, lse=None)
    with pytest.raises(ValueError, match="q: view reaches outside the array"):
        _core.attention(q=_operand(q, [3], 3), **_output(out, [0], 3), **problem)
    with pytest.raises(ValueError, match="out: view reaches outside the array"):  # written: the worse case
        _core.attention(q=good, **_output(out, [1], 3), **problem)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out: array must be writeable"):
        _core.attention(q=good, **_output(out, [0], 3), **problem)


def test_no_silent_conversion_copies():
    q = np.zeros((4, 3), dtype=np.float32)
    out = np.empty((1, 4, 3))  # float64 output with float32 inputs: no overload may convert
    with pytest.raises(ValueError, match="q: array of the kernel's dtype expected"):
        _core.attention(q=_operand(q, [0], 3), k=_operand(q, [0], 3), v=_operand(q, [0], 3), mask=None, bias=None,
                        key_lengths=None, causal=False, window_left=-1, window_right=-1, scale=1.0,
                        **_output(out, [0], 3), lse=None)
    with pytest.raises(ValueError, match="key_lengths: values must lie in"):
        q64 = q.astype(np.float64)
        _core.attention(q=_operand(q64, [0], 3), k=_operand(q64, [0], 3), v=_operand(q64, [0], 3), mask=None,
                        bias=None, key_lengths=np.array([9]), causal=False, window_left=-1, window_right=-1, scale=1.0,
                        **_output(out, [0], 3), lse=None)


def test_unknown_isa_is_a_value_error():
    with pytest.raises(ValueError, match="not available"):
        _core.set_isa("avx1024")


def test_kernels_run_concurrently_from_threads_with_the_same_answers():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((8, 4, 200, 32)).astype(np.float32) for _ in range(3))
    expected = ops.scaled_dot_product_attention(q, k, v, causal=True)
    results = [None] * 4

    def work(i):
        results[i] = ops.scaled_dot_product_attention(q, k, v, causal=True)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, expected)
