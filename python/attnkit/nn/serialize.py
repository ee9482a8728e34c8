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
>>> from attnkit.nn import LearnedPositions, serialize
>>> model = LearnedPositions(8, 4, rng=0)
>>> buffer = io.BytesIO()
>>> serialize.save(buffer, {"model": model.state_dict()}, {"max_len": 8, "d": 4})
>>> _ = buffer.seek(0)
>>> states, config = serialize.load(buffer)
>>> restored = LearnedPositions(**config, rng=1).load_state_dict(states["model"])
>>> bool(np.array_equal(restored.params["weight"], model.params["weight"]))
True
"""

import json
import os
import zipfile

import numpy as np

__all__ = ["FORMAT_VERSION", "META_KEY", "from_arrays", "load", "save", "to_arrays"]

META_KEY = "__attnkit__"
FORMAT_VERSION = 1


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
    meta = json.loads(str(arrays[META_KEY][()]))
    if meta.get("format") != "attnkit" or meta.get("version", FORMAT_VERSION + 1) > FORMAT_VERSION:
        raise ValueError(f"unsupported checkpoint format {meta.get('format')!r} version {meta.get('version')!r}; "
                         f"this attnkit reads version <= {FORMAT_VERSION}")
    states: dict[str, dict[str, np.ndarray]] = {group: {} for group in meta["groups"]}
    for key in arrays:
        if key == META_KEY:
            continue
        group, sep, name = key.partition("/")
        if not sep or group not in states:
            raise ValueError(f"checkpoint entry {key!r} belongs to no saved group {list(states)}")
        states[group][name] = np.asarray(arrays[key])
    return states, meta["config"]


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
        or not one :func:`save` wrote.
    """
    name = os.fspath(file) if isinstance(file, (str, os.PathLike)) else "the file"
    try:
        with zipfile.ZipFile(file) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{name} is not a complete .npz archive (empty, truncated or not a zip file): "
                         f"{error}") from None
    if damaged is not None:
        raise ValueError(f"{name} is damaged: entry {damaged!r} fails its CRC-32 check")
    if hasattr(file, "seek"):
        file.seek(0)
    with np.load(file, allow_pickle=False) as npz:
        return from_arrays({key: npz[key] for key in npz.files})
