"""attnkit.nn.module: parameters, children, state dicts, and models built for loading (no random initial
weights, no memory until the saved arrays arrive)."""

import copy
import pickle
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


class _Pair(Module):
    """Two children assigned as attributes, the second conditional (None when absent)."""

    def __init__(self, with_second=True):
        super().__init__()
        self.second = None
        self.first = nn.Linear(2, 3, rng=0)
        if with_second:
            self.second = nn.Linear(3, 1, rng=1)


def test_a_module_assigned_to_an_attribute_is_a_child_in_assignment_order():
    pair = _Pair()
    assert list(pair.children) == ["first", "second"] and pair.first is pair.children["first"]
    assert list(pair.state_dict()) == ["first.weight", "first.bias", "second.weight", "second.bias"]
    assert "second" not in vars(pair)  # the None it replaced is gone: one place holds a child
    single = _Pair(with_second=False)
    assert list(single.children) == ["first"] and single.second is None
    pair.first = nn.Linear(2, 3, rng=2)  # replaced in place: same name, same position
    assert list(pair.children) == ["first", "second"] and pair.first.params["weight"].shape == (2, 3)
    del pair.second
    assert list(pair.children) == ["first"] and not hasattr(pair, "second")


def test_add_child_is_attribute_assignment_for_computed_names():
    stack = Module()
    for i in range(2):
        stack.add_child(f"layer{i}", nn.Linear(2, 2, rng=i))
    assert stack.layer1 is stack.children["layer1"] and list(stack.state_dict())[0] == "layer0.weight"
    with pytest.raises(TypeError, match="child 'x' must be a Module, got int"):
        stack.add_child("x", 3)


def test_children_are_guarded_against_mistakes():
    pair = _Pair()
    with pytest.raises(TypeError, match="'first' is a child module: only a Module replaces it, got int"):
        pair.first = 3
    with pytest.raises(AttributeError, match="has no attribute or child 'third'"):
        _ = pair.third

    class Shadowed(Module):
        def embed(self):
            return None

    with pytest.raises(AttributeError, match="child 'embed' would be hidden by Shadowed.embed"):
        Shadowed().embed = nn.Linear(2, 2, rng=0)


def test_a_private_attribute_refers_to_a_module_without_owning_it():
    table = nn.Embedding(5, 3, rng=0)
    head = nn.TiedOutput(table)
    assert head.embedding is table and list(head.state_dict()) == ["bias"]  # the table is not counted twice


def test_a_module_with_children_pickles_and_copies():
    pair = _Pair()
    for twin in (copy.deepcopy(pair), pickle.loads(pickle.dumps(pair))):
        assert list(twin.children) == ["first", "second"]
        assert all(np.array_equal(twin.state_dict()[k], v) for k, v in pair.state_dict().items())
