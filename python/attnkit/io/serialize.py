"""Save and load models and optimiser states as arrays plus a JSON config, never pickle.

A checkpoint is a few named groups of arrays (``{"model": model.state_dict(), "optimizer":
optimizer.state_dict()}``) and a JSON-able ``config`` that says how to rebuild the objects
(constructor arguments, vocabulary, classes). :func:`to_arrays` flattens them into one dict of
arrays, ``"<group>/<name>"``, with the config as JSON text under :data:`META_KEY`;
:func:`from_arrays` undoes it. :func:`save` and :func:`load` write that dict as an ``.npz``
file, read back with ``allow_pickle=False``, so loading a file runs no code from it.

Examples
--------
>>> import io
>>> import numpy as np
>>> from attnkit.io import serialize
>>> from attnkit.nn import LearnedPositions
>>> model = LearnedPositions(8, 4, rng=0)
>>> buffer = io.BytesIO()
>>> serialize.save(buffer, {"model": model.state_dict()}, {"max_len": 8, "d": 4})
>>> _ = buffer.seek(0)
>>> states, config = serialize.load(buffer)
>>> restored = LearnedPositions(**config, rng=1).load_state_dict(states["model"])
>>> bool(np.array_equal(restored.params["weight"], model.params["weight"]))
True
"""

import ast
import json
import math
import os
import zipfile
import zlib

import numpy as np

from attnkit._memory import available_bytes

__all__ = ["FORMAT_VERSION", "META_KEY", "from_arrays", "load", "save", "to_arrays"]

META_KEY = "__attnkit__"
FORMAT_VERSION = 1
MAX_META_BYTES = 256 * 2**20  # the JSON description: vocabularies and tokenizers take a few MB
MAX_HEADER_BYTES = 2**16  # an .npy header: a dict of dtype, order and shape


def _json_default(value):
    """NumPy scalars become Python numbers (losslessly); anything else is refused."""
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    raise TypeError(f"config must be JSON-able (dict, list, str, int, float, bool, None); got {type(value).__name__} "
                    f"{value!r:.80}")


def to_arrays(states, config=None):
    """Flatten groups of arrays and a config into one dict of arrays.

    Parameters
    ----------
    states : dict of str -> dict of str -> array-like
        Groups of named arrays, e.g. ``{"model": model.state_dict()}``. Group names are non-empty,
        without ``"/"`` and not starting with ``"__"``; arrays are numeric or bool (never object).
    config : dict, optional
        JSON-able description of how to rebuild the objects. NumPy scalars are converted to Python
        numbers; tuples come back as lists; non-finite floats are kept (as JSON's ``NaN`` /
        ``Infinity`` extension, which Python reads back).

    Returns
    -------
    dict of str -> ndarray
        ``"<group>/<name>"`` -> array (copies), and :data:`META_KEY` -> 0-d str array of JSON text.

    Raises
    ------
    TypeError
        If an array has an object, string or other non-numeric dtype, or the config is not JSON-able.
    ValueError
        If a group name is invalid.
    """
    config = {} if config is None else config
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    meta = {"format": "attnkit", "version": FORMAT_VERSION, "groups": list(states), "config": config}
    arrays = {META_KEY: np.array(json.dumps(meta, default=_json_default))}
    for group, named in states.items():
        if not isinstance(group, str) or not group or "/" in group or group.startswith("__"):
            raise ValueError(f"group names must be non-empty strings without '/' and not starting with '__', "
                             f"got {group!r}")
        for name, value in named.items():
            value = np.array(value)
            if value.dtype.kind not in "biuf":
                raise TypeError(f"array {group}/{name} must be numeric or bool, got dtype {value.dtype}")
            arrays[f"{group}/{name}"] = value
    return arrays


def from_arrays(arrays):
    """Undo :func:`to_arrays`.

    Parameters
    ----------
    arrays : mapping of str -> ndarray
        As returned by :func:`to_arrays` (or an open ``NpzFile``).

    Returns
    -------
    states : dict of str -> dict of str -> ndarray
        Every group, including empty ones, in the order saved.
    config : dict

    Raises
    ------
    ValueError
        If the metadata is missing, of a newer format version, or does not match the arrays.
    """
    if META_KEY not in arrays:
        raise ValueError(f"not an attnkit checkpoint: no {META_KEY!r} entry among {sorted(arrays)[:5]}")
    meta = _parse_meta(arrays[META_KEY])
    if meta.get("format") != "attnkit" or not _int_at_most(meta.get("version"), FORMAT_VERSION):
        raise ValueError(f"unsupported checkpoint format {meta.get('format')!r} version {meta.get('version')!r}; "
                         f"this attnkit reads version <= {FORMAT_VERSION}")
    groups = meta.get("groups")
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups) or "config" not in meta:
        raise ValueError(f"the checkpoint's {META_KEY!r} entry lacks its list of groups or its config")
    states: dict[str, dict[str, np.ndarray]] = {group: {} for group in groups}
    for key in arrays:
        if key == META_KEY:
            continue
        group, sep, name = key.partition("/")
        if not sep or group not in states:
            raise ValueError(f"checkpoint entry {key!r} belongs to no saved group {list(states)}")
        states[group][name] = np.asarray(arrays[key])
    return states, meta["config"]


def _parse_meta(entry):
    """The metadata dict of a META_KEY entry (a 0-d str array of JSON text)."""
    if entry.shape != () or entry.dtype.kind != "U":
        raise ValueError(f"the checkpoint's {META_KEY!r} entry must be one JSON string, got {entry.dtype} "
                         f"{entry.shape}")
    try:
        meta = json.loads(str(entry[()]))
    except (json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"the checkpoint's {META_KEY!r} entry is not valid JSON ({type(error).__name__})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"the checkpoint's {META_KEY!r} entry must be a JSON object, got {type(meta).__name__}")
    return meta


def _int_at_most(value, limit):
    return isinstance(value, int) and not isinstance(value, bool) and value <= limit


def save(file, states, config=None, *, compress=False):
    """Write :func:`to_arrays` ``(states, config)`` to an ``.npz`` file.

    Parameters
    ----------
    file : str, os.PathLike or file-like
        Destination (NumPy appends ``.npz`` to a path without it).
    states, config
        See :func:`to_arrays`.
    compress : bool, default=False
        Use ``numpy.savez_compressed`` (smaller, slower).
    """
    arrays = to_arrays(states, config)
    (np.savez_compressed if compress else np.savez)(file, **arrays)


def load(file):
    """Read a file written by :func:`save`, without unpickling anything.

    Parameters
    ----------
    file : str, os.PathLike or file-like

    Returns
    -------
    states : dict of str -> dict of str -> ndarray
    config : dict

    Raises
    ------
    ValueError
        If the file is not a complete, intact ``.npz`` archive (empty, truncated, or a stored
        entry whose CRC-32 does not match: NumPy alone reads a damaged array without noticing),
        or not one :func:`save` wrote. Every entry's header is checked against the size the archive
        gives it, and all of them against the memory available, before any array is read.
    """
    name = os.fspath(file) if isinstance(file, (str, os.PathLike)) else "the file"
    try:
        with zipfile.ZipFile(file) as archive:
            _check_entries(archive, name)
            damaged = archive.testzip()
    except (zipfile.BadZipFile, EOFError, zlib.error) as error:
        raise ValueError(f"{name} is not a complete .npz archive (empty, truncated or not a zip file): "
                         f"{error}") from None
    if damaged is not None:
        raise ValueError(f"{name} is damaged: entry {damaged!r} fails its CRC-32 check")
    if hasattr(file, "seek"):
        file.seek(0)
    with np.load(file, allow_pickle=False) as npz:
        return from_arrays({key: npz[key] for key in npz.files})


def _check_entries(archive, name):
    """Refuse an archive whose entries are not ``.npy`` arrays of the sizes their headers declare, or whose
    arrays would not fit in memory, reading only each entry's header."""
    total = 0
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            raise ValueError(f"{name}: entry {info.filename!r} is not a .npy array")
        with archive.open(info) as entry:
            head = entry.read(10)
            if len(head) < 10 or head[:6] != b"\x93NUMPY" or head[6] not in (1, 2, 3):
                raise ValueError(f"{name}: entry {info.filename!r} is not a .npy array")
            width = 2 if head[6] == 1 else 4
            length = int.from_bytes((head + entry.read(width - 2))[8:8 + width], "little")
            if length > MAX_HEADER_BYTES:
                raise ValueError(f"{name}: entry {info.filename!r} has a {length:,}-byte header")
            header = entry.read(length)
        dtype, shape = _header_fields(header, name, info.filename)
        nbytes = math.prod(shape) * dtype.itemsize
        if 8 + width + length + nbytes != info.file_size:
            raise ValueError(f"{name}: entry {info.filename!r} declares a {dtype} array of shape {shape} "
                             f"({nbytes:,} bytes) but holds {info.file_size - 8 - width - length:,} bytes")
        if info.filename == META_KEY + ".npy" and nbytes > MAX_META_BYTES:
            raise ValueError(f"{name}: its description is {nbytes:,} bytes, more than {MAX_META_BYTES:,}")
        total += nbytes
    if total > available_bytes():
        raise ValueError(f"{name} holds {total / 2**30:,.1f} GiB of arrays, more than the "
                         f"{available_bytes() / 2**30:,.1f} GiB of memory available")


def _header_fields(header, name, entry):
    """(dtype, shape) of an .npy header (a Python dict literal), refusing object and structured dtypes."""
    try:
        fields = ast.literal_eval(header.decode("latin1"))
        dtype, shape = np.dtype(fields["descr"]), tuple(fields["shape"])
    except Exception:  # any malformed header: literal_eval and np.dtype raise many kinds
        raise ValueError(f"{name}: entry {entry!r} has a malformed .npy header") from None
    if dtype.kind == "O":
        raise ValueError(f"{name}: entry {entry!r} holds pickled Python objects, which attnkit never unpickles "
                         "(allow_pickle=False)")
    if dtype.kind not in "biufU" or dtype.fields is not None or dtype.subdtype is not None \
            or not all(isinstance(n, int) and 0 <= n < 2**62 for n in shape):
        raise ValueError(f"{name}: entry {entry!r} is a {dtype} array of shape {shape}, which attnkit never writes")
    return dtype, shape
