"""The two input routes of the text estimators: raw strings, or a 2-D array of token ids.

Strings go through :func:`attnkit.text.check_texts` and a tokenizer; an integer array is read as
rows of token ids, each id a token of its own (so the same vocabulary, cut-offs and ``<unk>``
handling apply), with ``padding_id`` entries removed. Which route ``X`` takes is decided by its
type alone, before any conversion.
"""

import functools
import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array

from attnkit._validation import as_array
from attnkit.text import SubwordTokenizer, Tokenizer, check_texts

__all__ = ["TEXT", "IDS", "input_kind", "id_rows_to_tokens", "read_tokens", "read_target_tokens", "text_tokenizer"]

TEXT, IDS = "text", "ids"


def input_kind(X):
    """``IDS`` for a numeric array-like (or a sparse matrix, which the ids route refuses with
    scikit-learn's message), ``TEXT`` for anything else.

    Numeric means: a NumPy array (or anything with a ``dtype``) of bools, integers, floats or
    complex numbers, a 2-D object array whose first entry is not a string (an empty one with other
    than one column), or a list of lists whose first entry is a number. A 1-D numeric array is the ids
    route too, so that it gets scikit-learn's "Reshape your data" error rather than a complaint about
    strings.
    """
    if sp.issparse(X):
        return IDS
    dtype = getattr(X, "dtype", None)
    if dtype is not None and not isinstance(X, (str, bytes)):
        # pandas extension dtypes (StringDtype, Int64Dtype, ...) are not NumPy dtypes but have a kind.
        kind = getattr(dtype, "kind", "O")
        if kind in "biufc":
            return IDS
        if kind == "O" and getattr(X, "ndim", 1) == 2:
            arr = np.asarray(X)
            if not arr.size:  # no entry to look at: one column is how text arrives (ColumnTransformer)
                return TEXT if arr.shape[1] == 1 else IDS
            return TEXT if isinstance(arr.flat[0], str) else IDS
        return TEXT
    if isinstance(X, (list, tuple)) and X and isinstance(X[0], (list, tuple, np.ndarray)):
        first = X[0]
        if len(first) and isinstance(first[0], numbers.Number) and not isinstance(first[0], bool):
            return IDS
    if hasattr(X, "__array__") and not isinstance(X, (str, bytes)):
        return input_kind(np.asarray(X))
    return TEXT


def id_rows_to_tokens(X, padding_id, name="X"):
    """Token lists (Python ints) of a validated 2-D numeric array, ``padding_id`` entries removed (None:
    every entry kept).

    Raises
    ------
    ValueError
        For a value that is not a whole number (token ids are integers; a float array is taken
        when every value is integral).
    """
    X = np.asarray(X)
    if X.dtype.kind == "f":
        fractional = X != np.round(X)
        if fractional.any():
            row, col = np.argwhere(fractional)[0]
            raise ValueError(f"{name} must hold integer token ids; got {X[row, col].item()!r} at [{row}, {col}]")
        # Compared in float64: 2**62 overflows float16 (a warning, an error under -W error).
        if X.size and np.abs(X).max().astype(np.float64) >= 2**62:
            raise ValueError(f"{name} must hold integer token ids below 2**62 in magnitude; got {np.abs(X).max()!r}")
    elif X.dtype.kind == "u" and X.size and X.max() > np.iinfo(np.int64).max:
        # astype(int64) would wrap such an id to a negative one, which could then read as padding_id.
        raise ValueError(f"{name} must hold integer token ids below 2**63; got {X.max()!r}")
    X = X.astype(np.int64)
    if padding_id is None:
        return X.tolist()
    keep = X != padding_id
    return [row[mask].tolist() for row, mask in zip(X, keep)]


def _what(X, kind):
    """What ``X`` is, in a message: its rank and dtype when it is numbers (they are read as token ids)."""
    if kind != IDS:
        return "text"
    try:
        X = np.asarray(X)
    except (ValueError, TypeError):
        return "numbers"
    return f"a {X.ndim}-D array of {X.dtype} (numbers, read as token ids)"


def read_tokens(X, route, *, validate, name="X", owner="estimator", tokenize=None):
    """Token lists of ``X`` read by ``route`` (a dict: ``kind``, ``tokenizer``, ``lowercase``, ``padding_id``).

    Parameters
    ----------
    X : texts or array-like of token ids
    route : dict
        How the estimator was fitted (its ``_input``).
    validate : callable
        Checks a token-id array and returns it (scikit-learn's ``validate_data`` for the estimator, which
        also keeps the width seen in fit).
    name, owner : str
        The argument's and the estimator's names, for the messages.
    tokenize : callable, optional
        Texts -> token lists for the text route (a pretrained checkpoint's tokenizer); default attnkit's
        :class:`attnkit.text.Tokenizer` with the route's settings.

    Raises
    ------
    ValueError
        When ``X`` takes the other route than the one the estimator was fitted on.
    """
    kind = input_kind(X)
    if kind != route["kind"]:
        fitted_on = "a 2-D array of token ids" if route["kind"] == IDS else "text: give a sequence of strings"
        raise ValueError(f"{name} is {_what(X, kind)}, but this {owner} was fitted on {fitted_on}")
    if kind == IDS:
        return id_rows_to_tokens(validate(X), route["padding_id"], name=name)
    texts = check_texts(X, name=name)
    if tokenize is not None:
        return tokenize(texts)
    tokenizer = text_tokenizer(route, "source", texts)
    return [tokenizer(t) for t in texts]


def text_tokenizer(route, side, texts=None):
    """The tokenizer of one side ("source" or "target") of a text ``route``.

    A subword kind ("bpe", "unigram") is trained on ``texts`` the first time a side is read (in the first
    fit, with ``route["subword_sizes"][side]`` pieces) and its model kept in ``route["subword_models"]``,
    so that it is saved, pickled and reused with the route.
    """
    kind, lowercase = route["tokenizer"], route["lowercase"]
    if kind not in SubwordTokenizer.KINDS:
        # Only a target is written back as text: a source reads "great!" and "great !" alike.
        return Tokenizer(kind, lowercase=lowercase, spacing=side == "target")
    models = route.setdefault("subword_models", {})
    if side not in models:
        tokenizer = SubwordTokenizer(kind, lowercase=lowercase).fit(texts, route["subword_sizes"][side])
        models[side] = tokenizer.model
    return _subword_tokenizer(kind, lowercase, models[side])


@functools.lru_cache(maxsize=16)
def _subword_tokenizer(kind, lowercase, model):
    # Parsing a model's JSON takes milliseconds: done once per model, not once per predict call.
    return SubwordTokenizer(kind, lowercase=lowercase, model=model)


def read_target_tokens(y, route, *, name="y"):
    """Token lists of target sequences ``y``, by the ``route`` of the estimator's inputs.

    Text inputs take texts (tokenized as the inputs are); token-id inputs take a 2-D array of target
    ids (``padding_id`` entries removed) or a 1-D array: one target token per sample.
    """
    if route["kind"] == TEXT:
        texts = check_texts(y, name=name)
        tokenizer = text_tokenizer(route, "target", texts)
        return [tokenizer(t) for t in texts]
    if sp.issparse(y) or isinstance(y, (str, bytes)):
        raise ValueError(f"{name} must hold token ids (numbers), as the inputs do; got {type(y).__name__}")
    try:  # an object array of numbers is numbers
        y = check_array(y, ensure_2d=False, dtype="numeric", input_name=name)
    except (TypeError, ValueError) as error:
        if as_array(y, name).dtype.kind in "biuf":
            raise
        raise ValueError(f"{name} must hold token ids (numbers), as the inputs do: {error}") from None
    if y.ndim == 1:
        return id_rows_to_tokens(y[:, None], None, name=name)
    return id_rows_to_tokens(y, route["padding_id"], name=name)
