"""Outputs that grow as Nq x Nk: refuse them before allocating when the machine cannot hold them."""

import math
import os
from typing import Any

import numpy as np

__all__ = ["UNCHECKED_BYTES", "available_bytes", "checked_empty"]

# For outputs made on every call (hot paths): smaller ones skip reading /proc/meminfo (~20 us).
UNCHECKED_BYTES = 64 * 2**20


def available_bytes():
    """Memory a new array may take without swapping: Linux's MemAvailable, else the physical memory,
    else no limit."""
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return math.inf


def checked_empty(shape: tuple[int, ...], dtype: Any, what: str, *, unchecked_bytes: int = 0) -> np.ndarray:
    """``np.empty(shape, dtype)``, or a MemoryError naming ``what`` when it exceeds :func:`available_bytes`
    (an overcommitting kernel would otherwise hand out the address space and swap or kill later).
    Arrays of at most ``unchecked_bytes`` are made without the check; a dimension NumPy cannot hold is a
    ValueError."""
    itemsize = np.dtype(dtype).itemsize
    if any(n > np.iinfo(np.intp).max // itemsize for n in shape):  # even with another dim 0
        raise ValueError(f"{what} of shape {tuple(shape)} has a dimension larger than NumPy's largest array")
    nbytes = math.prod(shape) * itemsize
    if nbytes <= unchecked_bytes:
        return np.empty(shape, dtype)
    limit = available_bytes()
    if nbytes > limit:
        raise MemoryError(f"{what} of shape {tuple(shape)} ({np.dtype(dtype).name}) needs {nbytes / 2**30:,.1f} GiB, "
                          f"more than the {limit / 2**30:,.1f} GiB of memory available; process fewer or shorter "
                          "sequences at a time")
    return np.empty(shape, dtype)
