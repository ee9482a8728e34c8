"""attnkit.estimators._token_input: which inputs are text and which are token ids; rows of ids to token lists."""

import numpy as np
import pytest
import scipy.sparse as sp

from attnkit.estimators._token_input import IDS, TEXT, id_rows_to_tokens, input_kind


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
