"""Runtime configuration: ISA choice at import, thread counts, threadpoolctl."""

import os
import subprocess
import sys

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import attnkit
from attnkit import _core


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


@pytest.mark.parametrize(("n", "error"), [(0, ValueError), (-2, ValueError), (1.5, TypeError)])
def test_set_num_threads_rejects_bad_counts(n, error):
    with pytest.raises(error, match=r"\bn\b"):
        attnkit.set_num_threads(n)


def test_threadpoolctl_sees_and_limits_openmp(restore_threads):
    attnkit.set_num_threads(2)
    assert any(lib["user_api"] == "openmp" for lib in threadpool_info())
    with threadpool_limits(limits=1, user_api="openmp"):
        assert attnkit.get_num_threads() == 1
    assert attnkit.get_num_threads() == 2
