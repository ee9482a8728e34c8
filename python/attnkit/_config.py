"""Runtime configuration: which kernels run, and on how many threads."""

import os
import platform
import sys

import numpy as np

from attnkit import _core
from attnkit._validation import check_int


def set_num_threads(n):
    """Set the number of threads attnkit's kernels use.

    Parameters
    ----------
    n : int
        Number of threads, at least 1. ``OMP_NUM_THREADS`` and ``threadpoolctl`` limits also apply:
        the kernels use the smaller of this value and OpenMP's current maximum.
    """
    _core.set_num_threads(check_int(n, "n", minimum=1))


def get_num_threads():
    """Return the number of threads attnkit's kernels use in the calling thread."""
    return _core.get_num_threads()


def single_threaded_blas():
    """A context in which NumPy's BLAS runs on one thread (attnkit's kernels keep theirs).

    The estimators train and predict inside it. Their matrix products are small (a batch of short
    sequences), so a second BLAS thread gains little even on an idle machine, while on a busy one
    (or beside attnkit's own OpenMP threads) OpenBLAS's threads wait on each other: a training step
    of a 64-wide model took 0.37-2.3 s with two BLAS threads and 0.045-0.07 s with one, measured on
    2 shared cores. threadpoolctl comes with scikit-learn.
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def config():
    """Return the build and runtime configuration as a dict (what :func:`show_config` prints)."""
    info = dict(_core.build_info())
    info.update(
        isa=_core.get_isa(),
        isa_available=", ".join(_core.available_isas()),
        isa_requested=os.environ.get("ATTNKIT_ISA", ""),
        threads=get_num_threads(),
        openmp_wait=" ".join(f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ),
        python=sys.version.split()[0],
        numpy=np.__version__,
        machine=platform.machine(),
        cpu=_cpu_model(),
    )
    return info


def show_config(file=None):
    """Print attnkit's version, the ISA chosen and available, threads, compiler and flags.

    Parameters
    ----------
    file : file-like, default=sys.stdout
        Where to print.
    """
    info = config()
    order = ["version", "isa", "isa_available", "isa_requested", "threads", "openmp_wait", "cpu", "machine",
             "compiler", "openmp", "python", "numpy"]
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
