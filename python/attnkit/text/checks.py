"""What a user passes as texts, checked: the collections the text estimators take."""

import math
from collections.abc import Iterable
from typing import TypeAlias

import numpy as np

__all__ = ["Texts", "check_texts", "refuse_unencodable"]

#: What the text estimators take as X: a list, tuple, 1-D array or pandas Series of str (the
#: classifier also takes a 2-D array of token ids).
Texts: TypeAlias = Iterable[str] | np.ndarray


def check_texts(X, name="X"):
    """Validate a collection of texts and return it as a list of str.

    Parameters
    ----------
    X : sequence of str
        A list, tuple, 1-D array, pandas Series, or an array of shape (n, 1) (one text column, as
        a ColumnTransformer passes it).
    name : str, default="X"
        The argument's name, for the messages.

    Returns
    -------
    list of str

    Raises
    ------
    TypeError
        For a single string (not a collection of them), a non-iterable, or an item that is not a
        string (the message gives its position and type).
    ValueError
        For a missing item (None or NaN, with its position), or an array of another shape.
    """
    if isinstance(X, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of strings (one per sample), got a single "
                        f"{type(X).__name__}; wrap it in a list")
    if hasattr(X, "to_numpy") and getattr(X, "ndim", 1) in (1, 2):  # pandas Series / one-column DataFrame
        X = X.to_numpy()
    if isinstance(X, np.ndarray):
        if X.ndim == 2 and X.shape[1] == 1:
            X = X[:, 0]
        elif X.ndim != 1:
            raise ValueError(f"{name} must be a 1-D collection of strings or an array of shape (n_samples, 1), "
                             f"got an array of shape {X.shape}")
    elif not hasattr(X, "__iter__") or isinstance(X, dict):
        raise TypeError(f"{name} must be a sequence of strings, got {type(X).__name__}")
    texts = list(X)
    for i, item in enumerate(texts):
        if isinstance(item, str):
            continue
        if item is None or (isinstance(item, (float, np.floating)) and math.isnan(item)):
            raise ValueError(f"{name} has a missing value ({item!r}) at position {i}; every item must be a string "
                             "(use '' for an empty text)")
        raise TypeError(f"{name} must contain only strings; item {i} is {type(item).__name__} {item!r:.40}")
    return texts


def refuse_unencodable(texts):
    """Raise a ValueError naming the first of ``texts`` that is not valid Unicode (a lone surrogate, which a Python
    str may hold and UTF-8 cannot): what Hugging Face ``tokenizers`` refuses with an opaque TypeError. Returns
    when every text encodes."""
    for i, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(f"text {i} is not valid Unicode ({error.reason}, {text[error.start]!r} at character "
                             f"{error.start}), which this model's tokenizer cannot read: clean it first, e.g. "
                             f"text.encode('utf-8', 'replace').decode()") from None
