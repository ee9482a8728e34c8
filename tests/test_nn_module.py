"""attnkit.nn.module: parameters, children, state dicts, and models built for loading (no random initial
weights, no memory until the saved arrays arrive)."""

import tracemalloc

import numpy as np
import pytest

from attnkit import nn
from attnkit.nn.module import Module, to_be_loaded


def _model(vocab=50, rng=0, **kw):
    return nn.TextEncoder(vocab, rng, d_model=16, n_heads=2, n_layers=2, d_ff=32, **kw)


def test_a_model_built_for_loading_holds_the_arrays_it_is_given():
    trained = _model()
    state = trained.state_dict()
    with to_be_loaded():
        empty = _model(rng=1)
    assert all(not value.flags.writeable and not any(value.strides) for _, value, _ in empty.named_parameters())
    loaded = empty.load_state_dict(state)
    assert all(value is state[name] for name, value, _ in loaded.named_parameters())  # adopted, not copied
    x = np.array([[3, 4, 5, 0]])
    np.testing.assert_array_equal(loaded.infer(x, lengths=np.array([3])), trained.infer(x, lengths=np.array([3])))
    loaded.zero_grad()  # the gradients are real arrays again
    assert all(grad.shape == value.shape for _, value, grad in loaded.named_parameters())


def test_arrays_of_another_dtype_or_layout_are_copied():
    state = {name: np.asfortranarray(value, dtype=np.float64) for name, value in _model().state_dict().items()}
    with to_be_loaded():
        loaded = _model().load_state_dict(state)
    for name, value, _ in loaded.named_parameters():
        assert value.dtype == np.float32 and value.flags.c_contiguous and value is not state[name]
        np.testing.assert_array_equal(value, state[name].astype(np.float32))


def test_building_for_loading_draws_and_allocates_nothing():
    # A model of 10^10 tokens x 4,096 dims (160 TB in float32): built in no memory, refused by the shape check.
    tracemalloc.start()
    try:
        with to_be_loaded():
            huge = nn.TextEncoder(10**10, 0, d_model=4096, n_heads=8, n_layers=2, d_ff=16384)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    with pytest.raises(ValueError, match=r"parameter 'embedding.tokens.weight': expected a float array of shape "
                                         r"\(10000000000, 4096\), got float32 \(50, 16\)"):
        huge.load_state_dict(_model().state_dict())


def test_a_failed_load_changes_nothing():
    model = _model()
    before = model.state_dict()
    state = {name: value + 1 for name, value in before.items()}
    state["encoder.layer1.feed_forward.norm.gamma"] = np.ones(3, np.float32)  # the last one is wrong
    with pytest.raises(ValueError, match="encoder.layer1.feed_forward.norm.gamma"):
        model.load_state_dict(state)
    assert all(np.array_equal(value, before[name]) for name, value, _ in model.named_parameters())


def test_initial_values_are_drawn_as_before_outside_to_be_loaded():
    # add_param(name, init, shape=...) draws at the same point of the stream as the arrays it replaced
    rng = np.random.default_rng(0)
    layer = nn.Linear(3, 4, rng=np.random.default_rng(0))
    limit = np.sqrt(6.0 / 7)
    np.testing.assert_array_equal(layer.params["weight"], rng.uniform(-limit, limit, (3, 4)).astype(np.float32))
    table = nn.Embedding(5, 2, np.random.default_rng(1), padding_idx=0)
    expected = np.random.default_rng(1).standard_normal((5, 2)).astype(np.float32)
    expected[0] = 0
    np.testing.assert_array_equal(table.params["weight"], expected)


def test_modules_walks_the_tree():
    model = _model()
    kinds = [type(m).__name__ for m in model.modules()]
    assert kinds[0] == "TextEncoder" and kinds.count("MultiHeadAttention") == 2 and kinds.count("LayerNorm") >= 4
    assert not any(m.draws_beyond_weights for m in model.modules())
    assert any(m.draws_beyond_weights for m in _model(attention="performer").modules())


def test_a_plain_array_still_makes_a_parameter():
    module = Module()
    value = module.add_param("w", [[1.0, 2.0]])
    assert value.dtype == np.float32 and module.grads["w"].shape == (1, 2)
    with to_be_loaded():  # a given array is kept as it is: only deferred values become placeholders
        assert Module().add_param("w", [1.0]).flags.writeable
