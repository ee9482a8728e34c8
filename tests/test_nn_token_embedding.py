"""nn.TokenEmbedding: table lookup plus positions, the padding row, gradients against finite differences."""

import doctest

import numpy as np
import pytest

from attnkit import nn, ops
from attnkit.nn import token_embedding
from attnkit.testing import check_module_grad


def test_docstring_example_runs():
    assert doctest.testmod(token_embedding).failed == 0


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", None])
def test_forward_is_table_plus_positions(positional):
    layer = nn.TokenEmbedding(10, 8, rng=0, positional=positional, max_len=6)
    ids = np.array([[3, 4, 0], [5, 0, 0]])
    out, _ = layer.forward(ids)
    table = layer.children["tokens"].params["weight"][ids]
    if positional == "sinusoidal":
        table = table + ops.sinusoidal_positions(3, 8, dtype=np.float32)
    elif positional == "learned":
        table = table + layer.children["positions"].params["weight"][:3]
    np.testing.assert_allclose(out, table, rtol=1e-6)


def test_offset_shifts_positions():
    layer = nn.TokenEmbedding(10, 8, rng=0)
    ids = np.array([[3, 4, 5]])
    whole, _ = layer.forward(ids)
    tail, _ = layer.forward(ids[:, 1:], offset=1)
    np.testing.assert_allclose(tail, whole[:, 1:], rtol=1e-6)


def test_padding_row_is_zero_and_stays_zero():
    layer = nn.TokenEmbedding(10, 4, rng=0, positional=None)
    assert not layer.children["tokens"].params["weight"][0].any()
    out, cache = layer.forward(np.array([[0, 3]]), training=True)
    layer.backward(np.ones_like(out), cache)
    assert not layer.children["tokens"].grads["weight"][0].any()


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", None])
def test_gradients_with_dropout(positional):
    layer = nn.TokenEmbedding(7, 6, rng=1, positional=positional, max_len=5, dropout=0.3).astype(np.float64)
    ids = np.random.default_rng(2).integers(1, 7, size=(3, 5))  # the padding row gets no gradient by design
    check_module_grad(layer, ids, training=True, rng=3)


def test_dropout_only_in_training():
    layer = nn.TokenEmbedding(7, 6, rng=1, dropout=0.5)
    ids = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(layer.forward(ids)[0], layer.forward(ids)[0])
    assert not np.array_equal(layer.forward(ids, training=True)[0], layer.forward(ids)[0])


def test_errors():
    with pytest.raises(ValueError, match="positional must be one of"):
        nn.TokenEmbedding(5, 4, rng=0, positional="rotary")
    with pytest.raises(ValueError, match='positional="learned" needs max_len'):
        nn.TokenEmbedding(5, 4, rng=0, positional="learned")
    with pytest.raises(ValueError, match=r"positions 0..6 exceed max_len=4"):
        nn.TokenEmbedding(9, 4, rng=0, positional="learned", max_len=4).forward(np.ones((1, 7), dtype=int))
