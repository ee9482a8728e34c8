"""Runtime configuration: ISA choice at import, thread counts (set, and for a block), threadpoolctl."""

import contextlib
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_info, threadpool_limits

import attnkit
from attnkit import _config, _core


def isa_in_fresh_process(requested):
    env = dict(os.environ, ATTNKIT_ISA=requested)
    result = subprocess.run(
        [sys.executable, "-c", "import attnkit._core as c; print(c.get_isa())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


@pytest.mark.parametrize("name", _core.available_isas())
def test_attnkit_isa_env_var_forces_the_isa(name):
    assert isa_in_fresh_process(name) == name


def test_unsupported_isa_request_falls_back_to_the_best():
    assert isa_in_fresh_process("no-such-isa") == _core.available_isas()[-1]


def test_set_isa_switches_and_rejects_unknown_names():
    previous = _core.get_isa()
    try:
        for name in _core.available_isas():
            _core.set_isa(name)
            assert _core.get_isa() == name
    finally:
        _core.set_isa(previous)
    assert "baseline" in _core.available_isas()
    with pytest.raises(ValueError, match="no-such-isa"):
        _core.set_isa("no-such-isa")


@pytest.fixture
def restore_threads():
    previous = attnkit.get_num_threads()
    yield
    attnkit.set_num_threads(previous)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_set_num_threads_round_trips(restore_threads, n):
    attnkit.set_num_threads(n)
    assert attnkit.get_num_threads() == n


@pytest.mark.parametrize(("n", "error"), [(0, ValueError), (-2, ValueError), (1.5, TypeError), (1025, ValueError),
                                          (2**40, ValueError)])
def test_set_num_threads_rejects_bad_counts(n, error):
    # Past MAX_THREADS (1024) a count is refused: 100,000 made OpenMP fail or crash at the next kernel.
    with pytest.raises(error, match=r"\bn\b"):
        attnkit.set_num_threads(n)
    with pytest.raises(error, match=r"\bn\b"), _config.num_threads(n):
        pass


@pytest.mark.parametrize("n_jobs", [1025, -1025, 10**6])
def test_an_estimators_n_jobs_past_the_limit_is_refused_before_any_work(n_jobs):
    from attnkit import TransformerClassifier

    with pytest.raises(ValueError, match="n_jobs.*1024"):
        TransformerClassifier(n_jobs=n_jobs, max_iter=1).fit(["good", "bad"], [1, 0])


def test_threadpoolctl_sees_and_limits_openmp(restore_threads):
    attnkit.set_num_threads(2)
    assert any(lib["user_api"] == "openmp" for lib in threadpool_info())
    with threadpool_limits(limits=1, user_api="openmp"):
        assert attnkit.get_num_threads() == 1
    assert attnkit.get_num_threads() == 2


def _run_in_fork(child, timeout=60.0):
    """Exit code of ``child()`` run in a forked process (an int it returns), -1 if it hung."""
    import signal
    import time

    pid = os.fork()
    if pid == 0:
        try:
            code = child()
        except BaseException:
            code = 99
        os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -1


# Python >= 3.12 warns that fork in a process with threads (OpenMP's, BLAS's) may deadlock: the
# very trap these tests show attnkit avoids.
FORK_WARNING = "ignore:This process .* is multi-threaded:DeprecationWarning"


@pytest.mark.filterwarnings(FORK_WARNING)
def test_kernels_work_after_fork_once_the_parent_used_its_threads():
    # GNU OpenMP's pool does not survive fork: without attnkit's at-fork hook the child hangs here.
    q = np.random.default_rng(0).standard_normal((8, 4, 256, 64)).astype(np.float32)
    expected = attnkit.scaled_dot_product_attention(q, q, q)

    def child():
        import warnings

        out = attnkit.scaled_dot_product_attention(q, q, q)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            attnkit.set_num_threads(2)
        ok = (np.allclose(out, expected, rtol=1e-5, atol=1e-6) and attnkit.get_num_threads() == 1
              and any("fork" in str(w.message) for w in caught))
        attnkit.scaled_dot_product_attention(q, q, q)  # still does not hang after the request
        return 0 if ok else 3

    assert _run_in_fork(child) == 0


@pytest.mark.filterwarnings(FORK_WARNING)
def test_multiprocessing_fork_pool():
    import multiprocessing

    attnkit.softmax(np.ones((64, 4096), np.float32))  # the parent's pool exists
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map(_row_sums_of_softmax, [1, 2, 3])
    np.testing.assert_allclose(results, [64, 128, 192], rtol=1e-5)


def _row_sums_of_softmax(n):
    return float(attnkit.softmax(np.ones((64 * n, 4096), np.float32), axis=-1).sum())


@pytest.fixture
def uncapped():
    """No count set by set_num_threads (OpenMP's maximum alone decides), as in a fresh process; restored after."""
    previous = attnkit.get_num_threads()
    _core.set_num_threads(0)
    try:
        yield
    finally:
        attnkit.set_num_threads(previous)


@given(cap=st.sampled_from([0, 1, 2, 3]), counts=st.lists(st.none() | st.integers(1, 4), max_size=4))
@settings(deadline=None)
def test_num_threads_blocks_nest_and_each_restores_what_it_found(cap, counts):
    previous = attnkit.get_num_threads()
    try:
        _core.set_num_threads(cap)
        before = (attnkit.get_num_threads(), _core.get_call_threads())
        with contextlib.ExitStack() as stack:
            expected = before[0]
            for n in counts:
                stack.enter_context(_config.num_threads(n))
                expected = expected if n is None else n
                assert attnkit.get_num_threads() == expected
        assert (attnkit.get_num_threads(), _core.get_call_threads()) == before
    finally:
        attnkit.set_num_threads(previous)


def test_num_threads_lifts_no_cap_that_was_not_there(uncapped):
    before = attnkit.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"):
        with _config.num_threads(before + 1):
            assert attnkit.get_num_threads() == before + 1
            raise RuntimeError("inside")
    assert attnkit.get_num_threads() == before and _core.get_call_threads() == 0
    with threadpool_limits(limits=before + 1, user_api="openmp"):
        assert attnkit.get_num_threads() == before + 1  # OpenMP's maximum decides again, as before the block


def test_each_thread_has_its_own_count_during_a_call():
    # n_jobs must not change another thread's count: a server calls estimators from many threads at once.
    def openmp_counts():
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "openmp"]

    process, pools = attnkit.get_num_threads(), openmp_counts()
    barrier, seen = threading.Barrier(3), {}

    def call(n):
        with _config.num_threads(n):
            barrier.wait(timeout=30)  # every thread inside its block at once
            seen[n] = attnkit.get_num_threads()
            barrier.wait(timeout=30)

    workers = [threading.Thread(target=call, args=(n,)) for n in (1, 3)]
    for worker in workers:
        worker.start()
    barrier.wait(timeout=30)
    seen["main"], seen["pools"] = attnkit.get_num_threads(), openmp_counts()
    barrier.wait(timeout=30)
    for worker in workers:
        worker.join()
    assert seen == {1: 1, 3: 3, "main": process, "pools": pools}  # nothing process-wide moved


def test_resolve_n_jobs_follows_scikit_learn():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert _config.resolve_n_jobs(None) is None and _config.resolve_n_jobs(3) == 3
    assert _config.resolve_n_jobs(np.int64(2)) == 2 and type(_config.resolve_n_jobs(np.int64(2))) is int
    assert _config.resolve_n_jobs(-1) == cpus and _config.resolve_n_jobs(-2) == max(cpus - 1, 1)
    assert _config.resolve_n_jobs(-10_000) == 1
