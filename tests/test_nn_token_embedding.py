"""nn.TokenEmbedding: table lookup plus token types, positions and a norm, the padding row, gradients
against finite differences (BERT's whole input layer included)."""

import doctest

import numpy as np
import pytest

from attnkit import nn, ops
from attnkit.nn import token_embedding
from attnkit.testing import check_grad, check_module_grad


def test_docstring_example_runs():
    assert doctest.testmod(token_embedding).failed == 0


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", None])
def test_forward_is_table_plus_positions(positional):
    layer = nn.TokenEmbedding(10, 8, rng=0, positional=positional, max_len=6)
    ids = np.array([[3, 4, 0], [5, 0, 0]])
    out, _ = layer.forward(ids)
    table = layer.tokens.params["weight"][ids]
    if positional == "sinusoidal":
        table = table + ops.sinusoidal_positions(3, 8, dtype=np.float32)
    elif positional == "learned":
        table = table + layer.positions.params["weight"][:3]
    np.testing.assert_allclose(out, table, rtol=1e-6)


def test_offset_shifts_positions():
    layer = nn.TokenEmbedding(10, 8, rng=0)
    ids = np.array([[3, 4, 5]])
    whole, _ = layer.forward(ids)
    tail, _ = layer.forward(ids[:, 1:], offset=1)
    np.testing.assert_allclose(tail, whole[:, 1:], rtol=1e-6)


def test_padding_row_is_zero_and_stays_zero():
    layer = nn.TokenEmbedding(10, 4, rng=0, positional=None)
    assert not layer.tokens.params["weight"][0].any()
    out, cache = layer.forward(np.array([[0, 3]]), training=True)
    layer.backward(np.ones_like(out), cache)
    assert not layer.tokens.grads["weight"][0].any()


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


# -- token types and the embedding norm (BERT's input layer) ------------------------------------------


def bert_input(**options):
    return nn.TokenEmbedding(12, 6, rng=4, positional="learned", max_len=5, n_token_types=2, norm="layer",
                             norm_eps=1e-12, **options)


def test_token_types_and_norm_compose():
    layer = bert_input()
    ids, types = np.array([[3, 4, 0], [5, 6, 7]]), np.array([[0, 1, 1], [1, 1, 0]])
    out, _ = layer.forward(ids, token_types=types)
    summed = (layer.tokens.params["weight"][ids] + layer.token_types.params["weight"][types]
              + layer.positions.params["weight"][:3])
    np.testing.assert_allclose(out, ops.layer_norm(summed, eps=1e-12), rtol=1e-5, atol=1e-5)
    assert layer.norm.eps == 1e-12
    # token_types=None: every token is of type 0.
    np.testing.assert_array_equal(layer.forward(ids)[0], layer.forward(ids, token_types=np.zeros_like(ids))[0])
    rms = nn.TokenEmbedding(12, 6, rng=4, positional=None, n_token_types=3, norm="rms")
    assert isinstance(rms.norm, nn.RMSNorm) and rms.norm.eps == 1e-6
    np.testing.assert_allclose(rms.forward(ids)[0], ops.rms_norm(rms.tokens.params["weight"][ids]
                                                                 + rms.token_types.params["weight"][0]),
                               rtol=1e-5)


def test_options_leave_the_default_weights_alone():
    plain = nn.TokenEmbedding(12, 6, rng=4, positional="learned", max_len=5)
    with_types = bert_input()
    for name, value in plain.state_dict().items():
        np.testing.assert_array_equal(with_types.state_dict()[name], value)
    assert sorted(set(with_types.state_dict()) - set(plain.state_dict())) == ["norm.beta", "norm.gamma",
                                                                             "token_types.weight"]
    assert np.abs(with_types.token_types.params["weight"]).max() < 0.1  # N(0, 0.02^2)


@pytest.mark.parametrize("norm", ["layer", "rms", None])
@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_whole_input_layer_gradients(norm, positional):
    layer = nn.TokenEmbedding(9, 6, rng=5, positional=positional, max_len=6, dropout=0.3, n_token_types=2,
                              norm=norm).astype(np.float64)
    rng = np.random.default_rng(6)
    ids, types = rng.integers(1, 9, size=(3, 5)), rng.integers(0, 2, size=(3, 5))
    generator = layer.dropout.rng
    state = generator.bit_generator.state

    def forward():
        generator.bit_generator.state = state
        return layer.forward(ids, True, token_types=types, offset=1)

    out, cache = forward()
    w = rng.standard_normal(out.shape)
    layer.zero_grad()
    assert layer.backward(w, cache) is None
    params = {name: p for name, p, _ in layer.named_parameters()}
    check_grad(lambda **_: np.sum(forward()[0] * w), params, {name: g for name, _, g in layer.named_parameters()},
               max_entries=20, rng=7)


def test_learned_positions_with_token_types_train():
    layer = bert_input(dropout=0.1)
    ids, types = np.array([[3, 4, 5, 6]]), np.array([[0, 0, 1, 1]])
    out, cache = layer.forward(ids, True, token_types=types)
    layer.backward(np.ones_like(out), cache)
    for name in ("tokens", "token_types", "positions", "norm"):
        assert any(g.any() for _, _, g in layer.children[name].named_parameters()), name


@pytest.mark.parametrize(
    ("build", "call", "error", "match"),
    [
        (bert_input, lambda layer: layer.forward(np.array([[1, 2]]), token_types=np.array([[0, 2]])), ValueError,
         r"token_types must be in \[0, 2\) \(n_token_types\), got 2"),
        (bert_input, lambda layer: layer.forward(np.array([[1, 2]]), token_types=np.array([0, 1])), ValueError,
         r"token_types must have the shape of ids \(1, 2\), got \(2,\)"),
        (bert_input, lambda layer: layer.forward(np.array([[1, 2]]), token_types=np.array([[0.0, 1.0]])), TypeError,
         "token_types must be an integer array"),
        (lambda: nn.TokenEmbedding(5, 4, rng=0),
         lambda layer: layer.forward(np.array([[1]]), token_types=np.array([[0]])), ValueError,
         "token_types needs a token-type table: build the layer with n_token_types > 0"),
        (lambda: nn.TokenEmbedding(5, 4, rng=0, n_token_types=-1), None, ValueError, "n_token_types must be"),
        (lambda: nn.TokenEmbedding(5, 4, rng=0, norm="batch"), None, ValueError,
         r"norm must be one of \('layer', 'rms', None\), got 'batch'"),
        (lambda: nn.TokenEmbedding(5, 4, rng=0, norm="layer", norm_eps=-1.0), None, ValueError,
         "norm_eps must be >= 0"),
    ],
)
def test_token_type_and_norm_errors(build, call, error, match):
    with pytest.raises(error, match=match):
        layer = build()
        call(layer)
