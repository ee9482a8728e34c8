"""attnkit.serve.json_numbers: float rows as JSON text that reads back as the same float64 numbers, bit for bit (the
sign of zero, subnormals and the extremes included), with clear errors for what JSON cannot hold."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnkit.serve.json_numbers import rows_as_json


def _read(texts):
    return [json.loads("[" + text + "]") for text in texts]


@given(hnp.arrays(st.sampled_from([np.float32, np.float64]), hnp.array_shapes(min_dims=2, max_dims=2, max_side=6),
                  elements={"allow_nan": False, "allow_infinity": False, "allow_subnormal": True}))
def test_rows_read_back_as_the_same_numbers_bit_for_bit(rows):
    back = _read(rows_as_json(rows))
    assert all(isinstance(v, float) for row in back for v in row)  # integral values keep a fraction
    widened = rows.astype(np.float64)
    assert np.array_equal(np.array(back, dtype=np.float64).reshape(widened.shape).view(np.int64),
                          widened.view(np.int64))  # -0.0 stays -0.0


def test_the_text_is_what_json_dumps_reads_as_and_spells_like_it():
    values = np.array([[0.0, -0.0, 1.0, -2.5, 1e-5, 1e22, 5e-324, np.finfo(np.float64).max, 0.1]])
    (text,) = rows_as_json(values)
    assert json.loads("[" + text + "]") == json.loads(json.dumps(values[0].tolist()))
    assert text.split(",")[:4] == ["0.0", "-0.0", "1.0", "-2.5"]
    float32 = np.array([[0.1, 1 / 3]], dtype=np.float32)  # widened exactly, not rounded to 0.1
    assert _read(rows_as_json(float32)) == [float32[0].tolist()]


def test_layouts_and_empty_shapes():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert _read(rows_as_json(x[:, ::2])) == x[:, ::2].tolist()  # a strided view is read as its values
    assert rows_as_json(np.zeros((0, 3), np.float32)) == []
    assert rows_as_json(np.zeros((2, 0), np.float32)) == ["", ""]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused_naming_where(bad):
    rows = np.zeros((2, 3), np.float32)
    rows[1, 2] = bad
    with pytest.raises(ValueError, match="row 1, column 2 is not finite"):
        rows_as_json(rows)


@pytest.mark.parametrize("rows, error, match", [
    (np.zeros(3), ValueError, "2-D"),
    (np.zeros((1, 2, 3)), ValueError, "2-D"),
    (np.zeros((2, 2), np.int64), TypeError, "float32 or float64.*int64"),
    ([[1.0, 2.0]], TypeError, "ndarray, got list"),
])
def test_wrong_inputs_are_named(rows, error, match):
    with pytest.raises(error, match=match):
        rows_as_json(rows)
