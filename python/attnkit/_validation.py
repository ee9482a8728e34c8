"""Shared input checks. Every error names the argument, what was expected and what was seen."""

import math
import numbers
from typing import Any

import numpy as np


def check_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int, rejecting bools, floats and anything outside [``minimum``, ``maximum``]."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_real(value: Any, name: str, *, positive: bool = False) -> float:
    """Return ``value`` as a finite float (optionally > 0)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not np.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{name} must be a finite{' positive' if positive else ''} number, got {value}")
    return value


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` as a bool, refusing anything else: a flag such as ``causal="no"`` is truthy,
    and taking it as True would be a silent wrong answer."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r:.40}")
    return bool(value)


def as_array(x: Any, name: str) -> np.ndarray:
    """``np.asarray(x)``, with an error naming ``name`` when NumPy cannot make an array of it (ragged
    nested lists, objects that fail to convert)."""
    try:
        return np.asarray(x)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{name} must be an array (nested lists of equal lengths), got {type(x).__name__}: "
                         f"{exc}") from None


_FLOAT_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def float_array(x: Any, name: str) -> np.ndarray:
    """``x`` as a float32/float64 array: float16 widens to float32; ints, bools, complex and objects
    are refused (a silent cast would hide a bug or lose data)."""
    if type(x) is np.ndarray and x.dtype in _FLOAT_KERNEL_DTYPES:  # the usual case, ~221 calls a small model's update
        return x
    if x is None:
        raise TypeError(f"{name} must be a float32 or float64 array, got None")
    arr = as_array(x, name)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be a float32 or float64 array, got dtype {arr.dtype}")
    if arr.dtype.itemsize < 4:
        arr = arr.astype(np.float32)
    elif arr.dtype.itemsize > 8:
        raise TypeError(f"{name} must be a float32 or float64 array, got dtype {arr.dtype}")
    return arr


def check_out_array(out: Any, shape: tuple[int, ...], dtype: Any, what: str = "", *, name: str = "out") -> np.ndarray:
    """``out`` (the argument ``name``) as a numpy array of ``shape`` (described as ``what``, e.g. "(..., n)") and
    ``dtype``; the op checks its layout (see check_out)."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"{name} must have the result dtype {np.dtype(dtype)}, got {out.dtype}")
    if out.shape != shape:
        raise ValueError(f"{name} must have shape {what + ' = ' if what else ''}{shape}, got {out.shape}")
    return out


def check_out(out: Any, shape: tuple[int, ...], dtype: Any, what: str = "", *, name: str = "out") -> np.ndarray:
    """``out`` (the argument ``name``) for an op that writes its result into it: a C-contiguous, aligned,
    writeable numpy array of ``shape`` (described as ``what``, e.g. "(..., n)") and ``dtype``."""
    check_out_array(out, shape, dtype, what, name=name)
    if not (out.flags.c_contiguous and out.flags.aligned and out.flags.writeable):
        raise ValueError(f"{name} must be a C-contiguous, aligned, writeable array")
    return out


def check_out_rows(out: Any, shape: tuple[int, ...], dtype: Any, what: str = "", *, name: str = "out") -> np.ndarray:
    """``out`` (the argument ``name``) for a kernel that writes rows in place: :func:`check_out_array`, then
    writeable, its rows contiguous (they may lie anywhere) and aligned to whole elements."""
    check_out_array(out, shape, dtype, what, name=name)
    if not out.flags.writeable:
        raise ValueError(f"{name} must be writeable, got a read-only array")
    if out.size and shape[-1] > 1 and out.strides[-1] != out.itemsize:
        raise ValueError(f"{name} must have contiguous rows (strides[-1] == itemsize {out.itemsize}), "
                         f"got strides {out.strides}")
    if not out.flags.aligned:
        raise ValueError(f"{name} must be aligned to its {out.itemsize}-byte elements, got strides {out.strides} "
                         f"and address {out.ctypes.data:#x}")
    return out


def check_sample_weight(sample_weight, n_samples):
    """``sample_weight`` as a float64 array of shape (n_samples,): None gives ones, a scalar is
    repeated; negative, NaN or infinite weights are refused."""
    if sample_weight is None:
        return np.ones(n_samples)
    try:
        weights = np.asarray(sample_weight, dtype=np.float64)
    except (ValueError, TypeError) as exc:  # strings, ragged lists, objects
        raise TypeError(f"sample_weight must be numbers, got {type(sample_weight).__name__}: {exc}") from None
    if weights.ndim == 0:
        weights = np.full(n_samples, float(weights))
    if weights.shape != (n_samples,):
        raise ValueError(f"sample_weight must have shape ({n_samples},), got {weights.shape}")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("sample_weight must be finite and non-negative")
    return weights


def check_ndim(arr, name, minimum, what=""):
    """``arr`` has at least ``minimum`` dimensions; ``what`` describes them, e.g. "(..., N, d)"."""
    if arr.ndim < minimum:
        plural = "" if minimum == 1 else "s"
        raise ValueError(f"{name} must have at least {minimum} dimension{plural}{' ' + what if what else ''}, "
                         f"got shape {arr.shape}")


def check_dtype_choice(dtype, name):
    """A float32/float64 dtype request, as a numpy dtype."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{name} must be float32 or float64, got {dtype!r}") from exc
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{name} must be float32 or float64, got {dt}")
    return dt


# ------------------------------------------------------------------ declarative parameter checks
# Estimators declare ``_parameter_constraints = {param: [constraint, ...]}`` and call
# ``validate_params`` at the top of ``fit``. A value passes when it meets any one constraint:
# an ``Interval``, an ``Options``, ``None`` (the value None), a type (isinstance), or one of the
# names in ``_NAMED_CONSTRAINTS``. sklearn's own validator is private, hence this small one.


class InvalidParameterError(ValueError, TypeError):
    """A parameter outside its constraints; a ValueError and a TypeError, like scikit-learn's."""


def _is_number(value, kind):
    return isinstance(value, kind) and not isinstance(value, (bool, np.bool_))


def _is_finite(value):
    """Any integer is finite (even one too large for a float); a real is when it is not NaN or inf."""
    return isinstance(value, numbers.Integral) or math.isfinite(value)


class Interval:
    """Numbers of type ``kind`` (``numbers.Integral`` or ``numbers.Real``) from ``left`` to ``right``.

    ``None`` for a bound means unbounded; ``closed`` is "left", "right", "both" or "neither". NaN is
    never inside, nor is an infinity (an unbounded end is open, as the message's "inf)" says: a
    ``gamma`` or ``learning_rate`` of inf would give NaN, not an error); ``Interval(Real, ...)`` also
    takes integers, ``Interval(Integral, ...)`` no floats.
    """

    def __init__(self, kind, left, right, *, closed):
        if kind not in (numbers.Integral, numbers.Real):
            raise ValueError(f"kind must be numbers.Integral or numbers.Real, got {kind!r}")
        if closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"closed must be 'left', 'right', 'both' or 'neither', got {closed!r}")
        self.kind, self.left, self.right, self.closed = kind, left, right, closed

    def __contains__(self, value):
        if not _is_number(value, self.kind) or not _is_finite(value):
            return False
        low_ok = self.left is None or (value >= self.left if self.closed in ("left", "both") else value > self.left)
        high_ok = self.right is None or (
            value <= self.right if self.closed in ("right", "both") else value < self.right
        )
        return bool(low_ok and high_ok)

    def __str__(self):
        what = "an int" if self.kind is numbers.Integral else "a float"
        low = "-inf" if self.left is None else self.left
        high = "inf" if self.right is None else self.right
        opening = "[" if self.left is not None and self.closed in ("left", "both") else "("
        closing = "]" if self.right is not None and self.closed in ("right", "both") else ")"
        return f"{what} in the range {opening}{low}, {high}{closing}"


class Options:
    """One of a few hashable values of one type, e.g. ``Options(str, {"cos", "sincos"})``."""

    def __init__(self, kind, options):
        self.kind, self.options = kind, frozenset(options)

    def __contains__(self, value):
        return isinstance(value, self.kind) and value in self.options

    def __str__(self):
        listed = ", ".join(repr(o) for o in sorted(self.options, key=repr))
        return f"a {self.kind.__name__} among {{{listed}}}"


def _is_float_dtype(value):
    try:
        return np.dtype(value) in (np.dtype(np.float32), np.dtype(np.float64))
    except (TypeError, ValueError):
        return False


_NAMED_CONSTRAINTS = {
    "boolean": (lambda v: isinstance(v, (bool, np.bool_)), "a bool"),
    "random_state": (
        lambda v: v is None or (_is_number(v, numbers.Integral) and v >= 0)
        or isinstance(v, (np.random.RandomState, np.random.Generator)),
        "an int >= 0, a numpy RandomState or Generator, or None",
    ),
    "float dtype": (_is_float_dtype, "a float32 or float64 dtype (np.float32, 'float64', ...)"),
}


def _satisfies(value, constraint):
    if constraint is None:
        return value is None
    if isinstance(constraint, str):
        return _NAMED_CONSTRAINTS[constraint][0](value)
    if isinstance(constraint, type):
        return isinstance(value, constraint)
    return value in constraint


def _describe(constraint):
    if constraint is None:
        return "None"
    if isinstance(constraint, str):
        return _NAMED_CONSTRAINTS[constraint][1]
    if isinstance(constraint, type):
        return f"an instance of {constraint.__name__!r}"
    return str(constraint)


def validate_params(params, constraints, *, caller):
    """Check ``params`` (a dict, e.g. ``estimator.get_params(deep=False)``) against ``constraints``.

    Parameters
    ----------
    params : dict of str to object
        The values to check; names without constraints are not checked.
    constraints : dict of str to list
        For each name, the constraints of which the value must meet at least one.
    caller : str
        Who owns the parameters (an estimator's class name), for the message.

    Raises
    ------
    InvalidParameterError
        For the first failing parameter, in scikit-learn's words: "The 'n_components' parameter of
        RandomFourierFeatures must be an int in the range [1, inf). Got 0 instead."
    """
    for name, allowed in constraints.items():
        value = params[name]
        if any(_satisfies(value, c) for c in allowed):
            continue
        described = [_describe(c) for c in allowed]
        options = described[0] if len(described) == 1 else ", ".join(described[:-1]) + " or " + described[-1]
        raise InvalidParameterError(f"The {name!r} parameter of {caller} must be {options}. Got {value!r} instead.")
