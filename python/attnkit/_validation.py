"""Shared input checks. Every error names the argument, what was expected and what was seen."""

import numbers

import numpy as np


def check_int(value, name, *, minimum=None):
    """Return ``value`` as an int, rejecting bools, floats and anything below ``minimum``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_real(value, name, *, positive=False):
    """Return ``value`` as a finite float (optionally > 0)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not np.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{name} must be a finite{' positive' if positive else ''} number, got {value}")
    return value


def float_array(x, name):
    """``x`` as a float32/float64 array: float16 widens to float32; ints, bools, complex and objects
    are refused (a silent cast would hide a bug or lose data)."""
    arr = np.asarray(x)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be a float32 or float64 array, got dtype {arr.dtype}")
    if arr.dtype.itemsize < 4:
        arr = arr.astype(np.float32)
    elif arr.dtype.itemsize > 8:
        raise TypeError(f"{name} must be a float32 or float64 array, got dtype {arr.dtype}")
    return arr


def check_ndim(arr, name, minimum, what):
    if arr.ndim < minimum:
        raise ValueError(f"{name} must have at least {minimum} dimensions {what}, got shape {arr.shape}")


def check_dtype_choice(dtype, name):
    """A float32/float64 dtype request, as a numpy dtype."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{name} must be float32 or float64, got {dtype!r}") from exc
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{name} must be float32 or float64, got {dt}")
    return dt
