"""attnkit.estimators._token_input: which inputs are text and which are token ids; rows of ids to token lists."""

import numpy as np
import pytest
import scipy.sparse as sp

from attnkit.estimators._token_input import IDS, TEXT, id_rows_to_tokens, input_kind, read_target_tokens, read_tokens


class _ArrayLike:
    def __init__(self, array):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array


@pytest.mark.parametrize(
    ("X", "kind"),
    [
        (["a", "b"], TEXT),
        (("a",), TEXT),
        ([], TEXT),
        (np.array(["a", "b"]), TEXT),
        (np.array([["a"], ["b"]], dtype=object), TEXT),
        ("a string", TEXT),
        (iter(["a"]), TEXT),
        (np.array([[1, 2]]), IDS),
        (np.array([[1.0, 2.0]]), IDS),
        (np.array([1, 2]), IDS),  # 1-D numbers: the ids route, which asks to reshape
        (np.array([[1, 2]], dtype=object), IDS),
        ([[1, 2], [3, 4]], IDS),
        ([[True, False]], TEXT),  # booleans are not ids; check_texts then names the bad item
        (sp.csr_matrix(np.eye(2)), IDS),
        (_ArrayLike(np.array([[1, 2]])), IDS),
        (_ArrayLike(np.array(["a"])), TEXT),
    ],
)
def test_input_kind(X, kind):
    assert input_kind(X) == kind


def test_id_rows_drop_padding_anywhere():
    assert id_rows_to_tokens(np.array([[5, 0, 6, 0], [0, 0, 0, 0]]), 0) == [[5, 6], []]
    assert id_rows_to_tokens(np.array([[5.0, -1.0]]), -1) == [[5]]
    assert all(type(t) is int for t in id_rows_to_tokens(np.array([[5, 6]], dtype=np.int8), 0)[0])


def test_non_integral_and_huge_ids_are_refused():
    with pytest.raises(ValueError, match=r"integer token ids; got 0.5 at \[1, 0\]"):
        id_rows_to_tokens(np.array([[1.0], [0.5]]), 0)
    with pytest.raises(ValueError, match="below 2\\*\\*62"):
        id_rows_to_tokens(np.array([[1e300]]), 0)


TEXT_ROUTE = {"kind": TEXT, "tokenizer": "word", "lowercase": True, "padding_id": 0}
IDS_ROUTE = {"kind": IDS, "tokenizer": "word", "lowercase": True, "padding_id": 0}


def _no_validation(X):
    return np.asarray(X)


def test_read_tokens_follows_the_route_it_was_fitted_on():
    assert read_tokens(["Not bad."], TEXT_ROUTE, validate=_no_validation) == [["not", "bad", "."]]
    assert read_tokens(np.array([[5, 0, 6]]), IDS_ROUTE, validate=_no_validation) == [[5, 6]]
    with pytest.raises(ValueError, match="X_val is text, but this Seq2SeqTransformer was fitted on a 2-D array of "
                                         "token ids"):
        read_tokens(["a"], IDS_ROUTE, validate=_no_validation, name="X_val", owner="Seq2SeqTransformer")
    with pytest.raises(ValueError, match=r"X is a 2-D array of int64 \(numbers, read as token ids\), but this "
                                         "estimator was fitted on text"):
        read_tokens(np.array([[1]]), TEXT_ROUTE, validate=_no_validation)
    with pytest.raises(ValueError, match=r"X is a 1-D array of float64 \(numbers, read as token ids\), but this "
                                         "Seq2SeqTransformer was fitted on text: give a sequence of strings"):
        read_tokens(np.array([1.5, 2.5]), TEXT_ROUTE, validate=_no_validation, owner="Seq2SeqTransformer")


def test_read_target_tokens():
    assert read_target_tokens(["Hi there"], TEXT_ROUTE) == [["hi", "there"]]
    assert read_target_tokens(np.array([[7, 8, 0]]), IDS_ROUTE) == [[7, 8]]
    assert read_target_tokens(np.array([7, 0]), IDS_ROUTE) == [[7], [0]]  # 1-D: one token each, none is padding
    assert read_target_tokens(np.array([3, 4], dtype=object), IDS_ROUTE) == [[3], [4]]  # numbers in objects
    with pytest.raises(ValueError, match=r"y must hold token ids \(numbers\), as the inputs do"):
        read_target_tokens(["a", "b"], IDS_ROUTE)
    with pytest.raises(ValueError, match="y must hold integer token ids; got 1.5"):
        read_target_tokens(np.array([1.5]), IDS_ROUTE)
