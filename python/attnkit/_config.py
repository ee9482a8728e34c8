"""Runtime configuration: which kernels run, and on how many threads."""

import contextlib
import os
import platform
import sys
import warnings
from collections.abc import Iterator
from typing import TextIO

import numpy as np

from attnkit import _core
from attnkit._validation import check_int

# How attnkit's worker threads wait between kernel calls (cpp/src/thread_pool.cpp), read once by the compiled core:
# "auto" spins briefly while the machine has a core free for each, "passive" always sleeps, "active" always spins.
WAIT_POLICIES = ("auto", "passive", "active")


def _check_wait_policy(environ):
    value = environ.get("ATTNKIT_WAIT_POLICY")
    if value is not None and value.lower() not in WAIT_POLICIES:
        raise ValueError(f"ATTNKIT_WAIT_POLICY must be one of {', '.join(map(repr, WAIT_POLICIES))} (how attnkit's "
                         f"worker threads wait between kernel calls), got {value!r}")


_check_wait_policy(os.environ)

# The most kernel threads attnkit starts: a count far past the CPUs only contends, and one of 100,000 made OpenMP
# fail to create its threads (or crash) at the next kernel; 1,024 still ran on 2 cores.
MAX_THREADS = 1024


def set_num_threads(n: int) -> None:
    """Set the number of threads attnkit's kernels use.

    Parameters
    ----------
    n : int
        Number of threads, from 1 to ``MAX_THREADS`` (1024). ``OMP_NUM_THREADS`` and ``threadpoolctl`` limits
        also apply: the kernels use the smaller of this value and OpenMP's current maximum. In a child made by
        ``os.fork`` (multiprocessing's default start method on Linux, gunicorn) the kernels run on
        one thread, and a larger ``n`` warns and stays 1: GNU OpenMP's threads do not survive fork.
    """
    _core.set_num_threads(_after_fork(check_int(n, "n", minimum=1, maximum=MAX_THREADS), stacklevel=3))


def _after_fork(n, *, stacklevel):
    """``n``, or 1 with a warning ``stacklevel`` frames up in a child made by fork."""
    if _forked and n > 1:
        warnings.warn("attnkit runs its kernels on one thread in a process made by fork (OpenMP's threads do not "
                      "survive fork and would hang); use the 'spawn' or 'forkserver' start method for more",
                      RuntimeWarning, stacklevel=stacklevel)
        return 1
    return n


_forked = False


def _one_thread_after_fork():
    # GNU OpenMP's thread pool does not survive fork: a child that opens a parallel region with the
    # parent's pool hangs for good. A team of one never touches the pool, so the child runs the
    # kernels on one thread (as PyTorch does), and set_num_threads there keeps it at one. The forking
    # thread's own count (an n_jobs call in flight) came along: it is one too.
    global _forked
    _forked = True
    _core.set_num_threads(1)
    if _core.get_call_threads():
        _core.set_call_threads(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_one_thread_after_fork)


def get_num_threads() -> int:
    """Return the number of threads attnkit's kernels use in the calling thread."""
    return _core.get_num_threads()


def resolve_n_jobs(n_jobs: int | None) -> int | None:
    """The thread count an estimator's ``n_jobs`` asks for, by scikit-learn's convention.

    Parameters
    ----------
    n_jobs : int or None
        None: no request (the current setting stays); a positive count; -1 for every CPU this process may
        run on, -2 for all but one, and so on (at least 1). The caller checks that it is a nonzero int.

    Returns
    -------
    int or None
    """
    if n_jobs is None or n_jobs > 0:
        return None if n_jobs is None else int(n_jobs)
    return max(_cpu_count() + 1 + n_jobs, 1)


def _cpu_count():
    if hasattr(os, "sched_getaffinity"):  # the CPUs this process may use (taskset, containers), not the machine's
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@contextlib.contextmanager
def num_threads(n: int | None, *, stacklevel: int = 4) -> Iterator[None]:
    """Run the kernels that the calling thread starts on ``n`` threads inside a ``with`` block, then
    restore its count of before, also when the block raises; ``None`` changes nothing.

    The count is the calling thread's alone: another Python thread keeps its own (or the process's,
    :func:`set_num_threads`), and threadpoolctl sees no change. In a child made by fork it stays 1 (with
    a warning ``stacklevel`` frames up, as :func:`set_num_threads` gives).
    """
    if n is None:
        yield
        return
    n = check_int(n, "n", minimum=1, maximum=MAX_THREADS)
    before = _core.get_call_threads()
    _core.set_call_threads(_after_fork(n, stacklevel=stacklevel))
    try:
        yield
    finally:
        _core.set_call_threads(before)


def config():
    """Return the build and runtime configuration as a dict (what :func:`show_config` prints)."""
    info: dict[str, object] = dict(_core.build_info())
    info.update(
        isa=_core.get_isa(),
        isa_available=", ".join(_core.available_isas()),
        isa_requested=os.environ.get("ATTNKIT_ISA", ""),
        int8_kernel=_core.get_int8_variant(),
        threads=get_num_threads(),
        wait_policy=os.environ.get("ATTNKIT_WAIT_POLICY", "auto").lower(),
        openmp_wait=" ".join(f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ),
        python=sys.version.split()[0],
        numpy=np.__version__,
        machine=platform.machine(),
        cpu=_cpu_model(),
    )
    return info


def show_config(file: TextIO | None = None) -> None:
    """Print attnkit's version, the ISA chosen and available, threads, compiler and flags.

    Parameters
    ----------
    file : file-like, default=sys.stdout
        Where to print.
    """
    info = config()
    order = ["version", "isa", "isa_available", "isa_requested", "int8_kernel", "threads", "wait_policy", "openmp_wait",
             "cpu", "machine", "compiler", "openmp", "python", "numpy"]
    keys = order + sorted(k for k in info if k not in order)
    width = max(len(k) for k in keys)
    for key in keys:
        if info.get(key, "") != "":
            print(f"{key:<{width}} : {info[key]}", file=file or sys.stdout)


def _cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
