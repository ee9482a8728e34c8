"""Hostile input for the fuzz tests (test_fuzz_ops.py, test_fuzz_estimators.py): strategies and the outcome rule.

Every call with hostile input must end in one of two ways: a documented result (which the tests then
check against the reference or the documented shape), or a ValueError / TypeError whose message names
one of the arguments. A segfault, an abort, a hang or another exception fails the test.
"""

import faulthandler
import re
import warnings

import numpy as np
import pytest
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

FLOATS = (np.float64, np.float32, np.float16)
# dtypes an op refuses: a silent cast would hide a bug (int, bool, complex, object, str) or lose data
# (longdouble, float128 on Linux x86-64).
REFUSED = (np.int64, np.int8, np.uint64, np.bool_, np.complex128, np.longdouble, np.object_, np.str_)
LAYOUTS = ("C", "F", "strided", "reversed", "readonly", "broadcast", "list")
# Scalars for integer, real and flag arguments: wrong types, bools where numbers go, non-finite,
# huge and negative values.
NUMBERS = st.sampled_from([0, 1, -1, 3, 2**31, 2**63, -(2**63), 10**30, 0.5, -0.0, np.nan, np.inf, -np.inf, True,
                           np.int64(2), np.float32(0.25), "1", None, [1], np.array(1.0), 1 + 0j])
# Sizes that are wrong (negative, not integers) or absurd (their arrays would need exabytes). Never a
# size that is merely large (2**31 rows of 4 floats): that is valid, and 16 GiB would swap the machine.
SIZES = st.sampled_from([-1, -(2**63), 2**62, 2**63, 10**30, 2.0, 0.5, np.nan, True, np.int64(2), "1", None])
FLAGS = st.sampled_from([False, True, np.True_, np.False_, 0, 1, "no", "", None, [True], np.array([True, False])])
HANG_SECONDS = 120


@pytest.fixture(autouse=True)
def no_hang():
    """A test that runs this long is hung: dump every thread's stack and exit, rather than stall CI."""
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def outcome(call, names, inputs=()):
    """``(result, None)`` when ``call()`` returns, ``(None, error)`` for a ValueError or TypeError that
    names one of ``names`` (or attnkit's MemoryError for a size beyond the machine); anything else
    (another exception, a message naming no argument, a warning) fails. NumPy's warnings about
    arithmetic on inf (``inf - inf``) are the documented NaN when one of ``inputs`` holds NaN or inf."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the documented notice that long inputs were cut (the embedder's texts, Seq2Seq's sources)
        warnings.filterwarnings("ignore", r"\d+ of \d+ (texts|sources) are longer than max_", UserWarning)
        if not finite(*inputs):
            warnings.filterwarnings("ignore", r"(invalid value|overflow) encountered", RuntimeWarning)
        try:
            result = call()
            _event("returned")  # --hypothesis-show-statistics: how often the valid path ran
            return result, None
        except MemoryError as error:  # a declared size beyond the machine, refused before allocating
            assert "of memory available" in str(error), str(error)
            _event("MemoryError")
            return None, error
        except (ValueError, TypeError) as error:
            message = str(error)
            named = [n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", message)]
            assert named, f"{type(error).__name__} names none of {names}: {message}"
            _event(f"{type(error).__name__} naming {named[0]}")
            return None, error


def _event(text):
    """hypothesis.event, also from plain tests (where there are no statistics to record)."""
    try:
        event(text)
    except InvalidArgument:
        pass


def values(rng, shape, dtype):
    """Array of ``shape`` and ``dtype`` with typical values for it (standard normal for floats)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -5, 5, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j).astype(dtype)
    if dtype.kind == "O":
        return rng.standard_normal(shape).astype(object)
    return rng.integers(0, 9, shape).astype(str)


@st.composite
def arranged(draw, a):
    """``a`` (or nested lists equal to it) in a drawn memory layout: Fortran order, a strided or
    reversed view, read-only, broadcast with zero strides."""
    layout = draw(st.sampled_from(LAYOUTS))
    if layout == "F":
        return np.asfortranarray(a) if a.ndim else a  # (asfortranarray makes a 0-d array 1-d)
    if layout == "list" and a.size:  # (an empty list would lose the shape)
        return a.tolist()
    if layout == "readonly":
        a = a.copy()
        a.flags.writeable = False
        return a
    if a.ndim == 0 or a.size == 0:
        return a
    axis = draw(st.integers(0, a.ndim - 1))
    if layout == "strided":  # every other element of a twice-as-long axis
        wide = np.repeat(a, 2, axis=axis)
        return wide[(slice(None),) * axis + (slice(None, None, 2),)]
    if layout == "reversed":
        return np.flip(np.flip(a, axis=axis).copy(), axis=axis)
    if layout == "broadcast":  # the first slice along the axis, repeated by a zero stride
        first = a[(slice(None),) * axis + (slice(0, 1),)]
        return np.broadcast_to(first, a.shape)
    return a


@st.composite
def arrays(draw, shape, dtypes=FLOATS, non_finite=True):
    """An array of ``shape`` with a dtype among ``dtypes``, in a drawn layout, maybe with a NaN or inf."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    dtype = draw(st.sampled_from(dtypes))
    a = np.asarray(values(rng, tuple(shape), dtype))
    if non_finite and a.dtype.kind == "f" and a.size and draw(st.integers(0, 4)) == 0:
        a.flat[draw(st.integers(0, a.size - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return draw(arranged(a))


@st.composite
def valid_arrays(draw, shape, dtypes=FLOATS, broadcast=True):
    """An array that broadcasts to ``shape``: float16/32/64, (with ``broadcast``) leading dims maybe 1
    or left out, in any layout."""
    shape = list(shape)
    if broadcast and len(shape) > 2 and draw(st.booleans()):
        lead = [draw(st.sampled_from([1, n])) for n in shape[:-2]]
        shape = lead[draw(st.integers(0, len(lead))):] + shape[-2:]
    return draw(arrays(shape, dtypes))


@st.composite
def hostile_arrays(draw, shape, dtypes=REFUSED):
    """Not quite an array of ``shape``: a refused dtype, a dim lost or added, a size changed (to 0 as
    well), or no array at all (None, a string, a ragged list, a dict, bytes)."""
    shape = list(shape)
    kind = draw(st.sampled_from(["dtype", "rank", "size", "object"]))
    if kind == "rank":
        shape = shape[1:] if shape and draw(st.booleans()) else [draw(st.integers(1, 3))] + shape
    elif kind == "size" and shape:
        shape[draw(st.integers(0, len(shape) - 1))] = draw(st.integers(0, 5))
    elif kind == "object":
        return draw(st.sampled_from([None, "abc", 1.0, [[1.0, 2.0], [3.0]], {"a": 1}, b"\x00\x01"]))
    return draw(arrays(shape, dtypes if kind == "dtype" else FLOATS))


def perturbed(shape, dtypes=FLOATS):
    """Mostly a valid array for ``shape``, sometimes a hostile one."""
    return st.one_of(valid_arrays(shape, dtypes), valid_arrays(shape, dtypes), hostile_arrays(shape))


def finite(*arrays):
    """False when one of ``arrays`` is a float or complex array (or nested lists) holding NaN or inf."""
    for a in arrays:
        try:
            a = np.asarray(a)
        except ValueError:  # ragged lists: no numbers to speak of
            continue
        if a.dtype.kind in "fc" and not np.all(np.isfinite(a)):
            return False
    return True


def shape_of(x):
    """``np.shape(x)``, or () for what NumPy cannot read as an array (a ragged list)."""
    try:
        return np.shape(x)
    except ValueError:
        return ()


def is_flag(value):
    return isinstance(value, (bool, np.bool_))
