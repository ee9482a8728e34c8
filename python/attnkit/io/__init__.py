"""Save and load fitted estimators as arrays plus JSON (an ``.npz`` file), never pickle.

:func:`save` writes an estimator's constructor parameters and fitted state with
:mod:`attnkit.io.serialize`: weights and optimiser moments as arrays, everything else (vocabulary,
classes, curves, settings) as JSON. :func:`load` reads it with ``allow_pickle=False`` and rebuilds
only classes registered by name (:func:`register_estimator`, :data:`ESTIMATORS`), so opening a file
runs no code from it. Files are stamped with a format name and version; a file from a newer attnkit
is refused with a clear error rather than misread, and one of an older version is upgraded by the
estimator. Writing is atomic: the file appears complete under its name, or not at all (a temporary
file in the same folder is renamed over it).

An estimator takes part by registering its class (:func:`register_estimator`; the estimators do it
when they are defined, so this module imports none of them) and implementing
``__attnkit_state__() -> (groups, config)`` (groups: dict of dicts of arrays; config: JSON-able) and
``__attnkit_set_state__(groups, config, version)``, a protocol named like scikit-learn's ``__sklearn_tags__``.

Examples
--------
>>> import os, tempfile
>>> import attnkit
>>> from attnkit import TransformerClassifier
>>> clf = TransformerClassifier(d_model=16, n_heads=2, d_ff=32, max_iter=2, early_stopping=False, random_state=0)
>>> clf = clf.fit(["good", "bad", "not good", "not bad"], [1, 0, 0, 1])
>>> path = os.path.join(tempfile.mkdtemp(), "model.npz")
>>> clf.save(path)
>>> restored = attnkit.load(path)
>>> bool((restored.predict_proba(["good"]) == clf.predict_proba(["good"])).all())
True
"""

import os
import secrets
from typing import Any, BinaryIO

import numpy as np

from attnkit._validation import validate_params
from attnkit.io import serialize

__all__ = ["ESTIMATORS", "FORMAT", "FORMAT_VERSION", "load", "register_estimator", "save"]

#: The format name written in every file; ``load`` refuses another.
FORMAT = "attnkit-estimator"
#: 1: attnkit 0.1.0 (each estimator its own layout); 2: the one layout of the estimator base.
FORMAT_VERSION = 2
#: The classes load may build, by name (:func:`register_estimator` adds one). Nothing else is ever imported
#: or called.
ESTIMATORS: dict[str, type] = {}


def register_estimator(cls: type) -> type:
    """Let :func:`save` write and :func:`load` rebuild instances of ``cls``, known by its class name.

    Usable as a class decorator; returns ``cls``. A second class of the same name is refused.
    """
    known = ESTIMATORS.setdefault(cls.__name__, cls)
    if known is not cls:
        raise ValueError(f"an estimator named {cls.__name__!r} is already registered ({known.__module__})")
    return cls


def save(estimator: Any, path: str | os.PathLike[str] | BinaryIO, *, compress: bool = False) -> None:
    """Write a fitted estimator to ``path``, atomically (a file object: written from its position, as it is).

    Parameters
    ----------
    estimator : TransformerClassifier, Seq2SeqTransformer or TransformerEmbedder
        A fitted attnkit estimator (a registered class, see :func:`register_estimator`).
    path : str, os.PathLike or binary file object
        The file to write, exactly (no suffix is added); an existing file is replaced only once
        the new one is complete. A file object opened for binary writing (``io.BytesIO``) is written as it is,
        from its current position.
    compress : bool, default=False
        Compress the arrays (smaller file, slower save and load).

    Notes
    -----
    A file never carries a path that a later call would write to: ``checkpoint_path`` is saved as None
    (set it again on the loaded estimator to keep checkpointing). Other path parameters (``pretrained``)
    are saved as strings. ``random_state`` is saved when it is an int or None; a Generator or RandomState
    instance is saved as None (it only seeds future fits). The file gets the permissions ``open`` would
    give a new file under the process's umask (as ``np.savez``), so that other users may read it when the
    umask allows.

    Raises
    ------
    TypeError
        If the estimator is not one :func:`load` can rebuild.
    sklearn.exceptions.NotFittedError
        If it is not fitted.
    IsADirectoryError, FileNotFoundError, PermissionError
        If ``path`` is a directory, its folder does not exist, or the folder cannot be written.
    """
    name = type(estimator).__name__
    if not _registered(type(estimator)):
        raise TypeError(f"save supports {sorted(ESTIMATORS)}, got {type(estimator).__module__}.{name}")
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(estimator)
    groups, fitted = estimator.__attnkit_state__()
    config = {
        "format": FORMAT, "version": FORMAT_VERSION, "estimator": name,
        "attnkit_version": _attnkit_version(),
        "params": to_json(_portable_params(estimator.get_params(deep=False))),
        "fitted": fitted,
    }
    if hasattr(path, "write"):  # a binary file object (io.BytesIO, an open file), as load takes
        serialize.save(path, groups, config, compress=compress)
        return
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"path {path!r} is a directory; give the file to write, such as "
                                f"{os.path.join(path, 'model.npz')!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot save to {path!r}: the folder {folder!r} does not exist")
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    try:  # mode 0o666 under the umask, as open() gives a new file (mkstemp's 0o600 would keep others out)
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as error:
        raise type(error)(error.errno, f"cannot save to {path!r}: {error.strerror}", path) from None
    try:
        with os.fdopen(handle, "wb") as file:
            serialize.save(file, groups, config, compress=compress)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def load(path: str | os.PathLike[str] | BinaryIO) -> Any:
    """Read an estimator written by :func:`save` (or the estimator's ``save`` method).

    A file is untrusted input: nothing in it is executed, and every part is checked before it is used.
    The network is built around the file's own arrays (no random initial weights), so a description
    that claims sizes the arrays do not have is refused before anything of those sizes is allocated.

    Parameters
    ----------
    path : str, os.PathLike or binary file object

    Returns
    -------
    estimator
        Fitted, with the saved parameters (``checkpoint_path`` None); predictions are bit-identical to the
        saved one's.

    Raises
    ------
    TypeError
        If ``path`` is not a path or a file object.
    ValueError
        Naming the file and what is wrong with it: not an attnkit estimator file, a newer format version,
        an unknown estimator or parameter, a missing or malformed entry, non-finite weights, or arrays that
        do not match the network its description gives.
    """
    if not isinstance(path, (str, os.PathLike)) and not hasattr(path, "read"):
        raise TypeError(f"path must be a str, os.PathLike or a binary file object, got {type(path).__name__}")
    where = os.fspath(path) if isinstance(path, (str, os.PathLike)) else "the file"
    groups, config = serialize.load(path)
    if config.get("format") != FORMAT:
        raise ValueError(f"{where} is not an attnkit estimator file (format {config.get('format')!r}, expected "
                         f"{FORMAT!r})")
    version = config.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(f"{where}: estimator file format version {version!r} is newer than this attnkit reads "
                         f"(<= {FORMAT_VERSION}); it was written by attnkit {config.get('attnkit_version')}: "
                         "upgrade attnkit to load it")
    name = config.get("estimator")
    if not isinstance(name, str) or name not in ESTIMATORS:
        raise ValueError(f"{where}: unknown estimator {name!r}; this attnkit loads {sorted(ESTIMATORS)}")
    cls = ESTIMATORS[name]
    for entry, kind in (("params", dict), ("fitted", dict)):
        if not isinstance(config.get(entry), kind):
            raise ValueError(f"{where}: the file has no {entry!r} entry (a JSON object) for its {name}")
    _check_finite(groups, where)
    try:
        estimator = cls(**_file_params(cls, from_json(config["params"]), where))
        estimator.__attnkit_set_state__(groups, config["fitted"], version)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    except KeyError as error:
        raise ValueError(f"{where}: the {name}'s fitted state lacks the entry {error.args[0]!r}") from error
    except (TypeError, AttributeError, IndexError) as error:  # a field of the wrong type deep in the state
        raise ValueError(f"{where} is not a valid {name} file: {type(error).__name__}: {error}") from error
    return estimator


def _file_params(cls, params, where):
    """The constructor parameters a file gives ``cls``, checked as ``fit`` checks them; ``checkpoint_path`` None."""
    known = cls._get_param_names()
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"the file gives {cls.__name__} parameters it does not have: {unknown[:5]}")
    # A parameter added since the file was written takes the value that keeps the file's behaviour.
    params = {**getattr(cls, "_params_before_they_existed", {}), **params}
    if "checkpoint_path" in params:
        params["checkpoint_path"] = None
    params = {key: _tokenizer_from_file(value) for key, value in params.items()}
    validate_params({**cls().get_params(deep=False), **params}, getattr(cls, "_parameter_constraints", {}),
                    caller=f"{cls.__name__} (as the file gives it)")
    return params


def _check_finite(groups, where):
    """Refuse NaN and inf in a file's float arrays (weights, optimiser moments), naming the first."""
    for group, arrays in groups.items():
        for key, value in arrays.items():
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                raise ValueError(f"{where}: array {group}/{key} holds non-finite values (NaN or inf); the file is "
                                 "damaged or was saved from a diverged model")


def _registered(cls: type) -> bool:
    return ESTIMATORS.get(cls.__name__) is cls


def _attnkit_version():
    from attnkit import __version__

    return __version__


# A Hugging Face tokenizers.Tokenizer given as a parameter (a language model's) is kept as its own JSON.
_TOKENIZER_KEY = "__tokenizers.Tokenizer__"


def _tokenizer_from_file(value):
    if not (isinstance(value, dict) and set(value) == {_TOKENIZER_KEY}):
        return value
    try:
        import tokenizers
    except ImportError as error:
        raise ImportError("this model was fitted with a tokenizers.Tokenizer: pip install 'attnkit[pretrained]' to "
                          "load it") from error
    return tokenizers.Tokenizer.from_str(value[_TOKENIZER_KEY])


def _portable_params(params):
    out = {key: os.fspath(value) if isinstance(value, os.PathLike) else value for key, value in params.items()}
    out = {key: {_TOKENIZER_KEY: value.to_str()} if type(value).__module__.startswith("tokenizers") else value
           for key, value in out.items()}
    # An estimator given as a parameter (a classifier's pretrained MaskedLanguageModel) started the fit; the fitted
    # weights are the owner's own, so the file does not keep it.
    out = {key: None if hasattr(value, "get_params") else value for key, value in out.items()}
    if "checkpoint_path" in out:  # a file must not choose where a later fit writes
        out["checkpoint_path"] = None
    if "random_state" in out and not (out["random_state"] is None or isinstance(out["random_state"], int)):
        out["random_state"] = None
    return out


def to_json(value):
    """``value`` in JSON-able form: dicts with non-string keys, tuples and NumPy scalars and arrays
    are tagged so that :func:`from_json` restores them (``{"__items__": ...}``, ``{"__tuple__": ...}``,
    ``{"__array__": ..., "dtype": ...}``)."""
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: to_json(v) for k, v in value.items()}
        return {"__items__": [[to_json(k), to_json(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"__tuple__": [to_json(v) for v in value]}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return {"__array__": [to_json(v) for v in value.tolist()], "dtype": value.dtype.str}
    if isinstance(value, np.generic):
        return value.item()
    return value


def from_json(value):
    """Undo :func:`to_json`."""
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__items__" in value:
        return {_hashable(from_json(k)): from_json(v) for k, v in value["__items__"]}
    if "__tuple__" in value:
        return tuple(from_json(v) for v in value["__tuple__"])
    if "__array__" in value:
        dtype = np.dtype(value["dtype"])
        if dtype.kind not in "biufUO":
            raise ValueError(f"array dtype {dtype} is not allowed in an estimator file")
        return np.array(from_json(value["__array__"]), dtype=dtype)
    return {k: from_json(v) for k, v in value.items()}


def _hashable(key):
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key
