"""attnkit.text.checks: what the text estimators take as texts, and the errors for the rest."""


import numpy as np
import pytest

from attnkit.text import check_texts
from attnkit.text.checks import refuse_unencodable


@pytest.mark.parametrize(
    "container",
    [list, tuple, np.array, lambda t: np.array(t, dtype=object), lambda t: np.array(t).reshape(-1, 1)],
    ids=["list", "tuple", "str-array", "object-array", "column"],
)
def test_check_texts_accepts_collections_of_strings(container):
    assert check_texts(container(["a b", "", "c"])) == ["a b", "", "c"]

def test_check_texts_accepts_iterables_and_pandas():
    assert check_texts(iter(["x", "y"])) == ["x", "y"]
    pd = pytest.importorskip("pandas")
    assert check_texts(pd.Series(["x", "y"])) == ["x", "y"]
    assert check_texts(pd.DataFrame({"text": ["x", "y"]})) == ["x", "y"]

@pytest.mark.parametrize(
    ("X", "error", "match"),
    [
        ("a sentence", TypeError, "X must be a sequence of strings .* got a single str"),
        (b"bytes", TypeError, "got a single bytes"),
        (3, TypeError, "X must be a sequence of strings, got int"),
        ({"a": 1}, TypeError, "got dict"),
        (["ok", None], ValueError, r"X has a missing value \(None\) at position 1"),
        (["ok", float("nan")], ValueError, r"missing value \(nan\) at position 1"),
        (np.array(["ok", np.nan], dtype=object), ValueError, "missing value"),
        (["ok", 3], TypeError, "X must contain only strings; item 1 is int"),
        (["ok", b"x"], TypeError, "item 1 is bytes"),
        ([["nested"]], TypeError, "item 0 is list"),
        (np.array([["a", "b"]]), ValueError, r"got an array of shape \(1, 2\)"),
    ],
)
def test_check_texts_rejects_bad_input(X, error, match):
    with pytest.raises(error, match=match):
        check_texts(X)

def test_check_texts_names_the_argument():
    with pytest.raises(TypeError, match="^y must"):
        check_texts("text", name="y")


def test_refuse_unencodable_names_the_text_and_the_character():
    refuse_unencodable(["plain", "emoji \U0001f600", "", "中文"])  # valid Unicode passes
    with pytest.raises(ValueError, match=r"text 2 is not valid Unicode \(surrogates not allowed, '\\udc80' at "
                                         r"character 3\)"):
        refuse_unencodable(["a", "b", "abc\udc80d"])
