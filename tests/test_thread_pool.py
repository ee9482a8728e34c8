"""attnkit's own worker threads (cpp/src/thread_pool.cpp): the kernels' teams, concurrent callers, fork, and the
machine check that keeps the workers from spinning beside other busy processes."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import attnkit
from attnkit import _config, _core, ops
from test_config import FORK_WARNING, _run_in_fork, restore_threads  # noqa: F401 (a fixture)


@pytest.fixture
def two_threads(request):
    request.getfixturevalue("restore_threads")  # test_config's: the count of before, restored after
    attnkit.set_num_threads(2)


def _operands(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((768, 128), dtype=np.float32), rng.standard_normal((128, 512), dtype=np.float32)


def test_stats_are_counters():
    stats = _core.team_stats()
    assert set(stats) == {"calls", "inline_calls", "sleeps", "busy_checks", "busy"}
    assert all(isinstance(v, int) and v >= 0 for v in stats.values())
    assert stats["busy"] <= stats["busy_checks"]


def test_a_two_thread_kernel_runs_on_the_pool_with_one_threads_bits(two_threads):
    a, b = _operands()
    before = _core.team_stats()
    two = ops.matmul(a, b)
    after = _core.team_stats()
    assert after["calls"] + after["inline_calls"] > before["calls"] + before["inline_calls"]
    with _config.num_threads(1):
        one = ops.matmul(a, b)
    np.testing.assert_array_equal(two, one)


def test_one_thread_never_reaches_the_pool(two_threads):
    a, b = _operands()
    with _config.num_threads(1):
        before = _core.team_stats()
        ops.matmul(a, b)
        after = _core.team_stats()
    assert after["calls"] == before["calls"] and after["inline_calls"] == before["inline_calls"]


def test_concurrent_callers_share_the_pool_and_get_the_same_bits(two_threads):
    # One caller's team runs on the workers; a caller that finds them taken runs its threads' shares itself.
    a, b = _operands()
    expected = ops.matmul(a, b)
    x = np.random.default_rng(1).standard_normal((64, 8192), dtype=np.float32)
    expected_gelu = ops.gelu(x)
    failures = []

    def work():
        for _ in range(30):
            if not np.array_equal(ops.matmul(a, b), expected) or not np.array_equal(ops.gelu(x), expected_gelu):
                failures.append(1)

    before = _core.team_stats()
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = _core.team_stats()
    assert not failures
    assert (after["calls"] + after["inline_calls"]) - (before["calls"] + before["inline_calls"]) >= 4 * 30 * 2


def test_a_kernel_called_inside_an_estimators_threads_count(two_threads):
    # n_jobs sets the calling thread's count: 1 keeps every call off the pool.
    a, b = _operands()
    _core.set_call_threads(1)
    try:
        before = _core.team_stats()
        ops.matmul(a, b)
        after = _core.team_stats()
    finally:
        _core.set_call_threads(0)
    assert after["calls"] == before["calls"]


@pytest.mark.filterwarnings(FORK_WARNING)
def test_a_forked_child_starts_its_own_workers(two_threads):
    # The parent's workers do not exist in the child: a child that asks for two threads must get new ones, not
    # wait forever for the parent's.
    a, b = _operands()
    expected = ops.matmul(a, b)

    def child():
        _core.set_call_threads(2)
        before = _core.team_stats()["calls"]
        out = ops.matmul(a, b)
        return 0 if np.array_equal(out, expected) and _core.team_stats()["calls"] > before else 3

    assert _run_in_fork(child) == 0


def test_workers_stop_spinning_beside_busy_processes(two_threads):
    # As many busy processes as the machine has CPUs: the pool's machine check (every 10 ms) must find them and
    # keep its workers from spinning (counted in "busy").
    a, b = _operands()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.2)
        before = _core.team_stats()
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            ops.matmul(a, b)
        after = _core.team_stats()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert after["busy_checks"] > before["busy_checks"]
    assert after["busy"] - before["busy"] >= (after["busy_checks"] - before["busy_checks"]) // 2


def _in_child(code, policy):
    env = {**os.environ, "ATTNKIT_WAIT_POLICY": policy}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


CHILD_STATS = """
import json, numpy as np, attnkit
from attnkit import _core, ops
attnkit.set_num_threads(2)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((768, 128), dtype=np.float32), rng.standard_normal((128, 512), dtype=np.float32)
for _ in range(50):
    ops.matmul(a, b)
print(json.dumps({**_core.team_stats(), "config": attnkit._config.config()["wait_policy"]}))
"""


@pytest.mark.parametrize("policy", ["passive", "ACTIVE"])
def test_a_fixed_wait_policy_skips_the_machine_check(policy):
    import json

    done = _in_child(CHILD_STATS, policy)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout.splitlines()[-1])
    assert stats["config"] == policy.lower()
    assert stats["calls"] >= 50 and stats["busy_checks"] == 0
    if policy == "passive":  # every call after the first finds its worker asleep
        assert stats["sleeps"] >= stats["calls"] - 1


def test_an_unknown_wait_policy_is_refused_at_import():
    done = _in_child("import attnkit", "spin")
    assert done.returncode != 0
    assert "ValueError: ATTNKIT_WAIT_POLICY must be one of 'auto', 'passive', 'active'" in done.stderr
    assert "got 'spin'" in done.stderr


CHILD_SMALL_PRODUCTS = """
import json, numpy as np, attnkit
from attnkit import _core, ops
attnkit.set_num_threads(2)
rng = np.random.default_rng(0)
big = rng.standard_normal((768, 512), dtype=np.float32), rng.standard_normal((512, 512), dtype=np.float32)
small = rng.standard_normal((128, 128), dtype=np.float32), rng.standard_normal((128, 64), dtype=np.float32)
with attnkit._config.num_threads(1):
    expected = ops.matmul(*small)
shared, same = 0, True
for _ in range(20):
    ops.matmul(*big)
    before = _core.team_stats()["calls"]
    same = same and np.array_equal(ops.matmul(*small), expected)
    shared += _core.team_stats()["calls"] - before
print(json.dumps({"shared": shared, "same": bool(same)}))
"""


@pytest.mark.parametrize("policy", ["passive", "active"])
def test_small_products_share_only_with_a_worker_awake(policy):
    # 1M multiply-adds: one thread's work where the worker must be woken (30-50 us), two threads' right after a
    # call while it spins; the bits are the same either way.
    import json

    done = _in_child(CHILD_SMALL_PRODUCTS, policy)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["same"]
    if policy == "passive":
        assert result["shared"] == 0
    # (active: shared on an idle machine, 19 of 20 here; none while other processes kept the worker off its core,
    # where it is not spinning either, so no count is asserted)
