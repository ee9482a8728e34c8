"""attnkit.nn.block: one block for the encoder, decoder and decoder-only stacks, and its options."""

import dataclasses

import numpy as np
import pytest

from attnkit import nn
from attnkit.nn.block import BlockConfig, TransformerBlock

CONFIG = BlockConfig(d_model=8, n_heads=2, d_ff=16)


@pytest.mark.parametrize(("kind", "flags", "children"), [
    (nn.EncoderLayer, {}, ["self_attention", "feed_forward"]),
    (nn.DecoderLayer, {"causal": True, "cross_attention": True}, ["self_attention", "cross_attention", "feed_forward"]),
    (nn.CausalDecoderLayer, {"causal": True}, ["self_attention", "feed_forward"]),
])
def test_the_layer_kinds_are_the_one_block_with_their_flags(kind, flags, children):
    layer = kind(8, 2, 16, np.random.default_rng(3), norm="rms")
    block = TransformerBlock(dataclasses.replace(CONFIG, norm="rms"), np.random.default_rng(3), **flags)
    assert isinstance(layer, TransformerBlock) and list(layer.children) == children == list(block.children)
    assert layer.causal == flags.get("causal", False) and layer.self_attention.sublayer.causal == layer.causal
    state = block.state_dict()
    assert list(layer.state_dict()) == list(state)  # the same draws in the same order
    assert all(np.array_equal(value, state[name]) for name, value in layer.state_dict().items())


def test_a_stack_builds_its_layers_from_one_config():
    decoder = nn.Decoder(2, 8, 2, 16, np.random.default_rng(0), d_memory=6, activation="relu", norm_first=False)
    assert decoder.config == BlockConfig(d_model=8, n_heads=2, d_ff=16, activation="relu", norm_first=False)
    assert [type(layer) for layer in decoder.layers] == [TransformerBlock] * 2 and decoder.norm is None
    assert decoder.layer1.cross_attention.sublayer.d_context == 6 and decoder.layer1.config is decoder.config


def test_the_config_is_frozen_and_checked():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CONFIG.d_model = 16
    with pytest.raises(TypeError):
        BlockConfig(8, 2, 16)  # keywords only
    bad = {"d_model": (0, "d_model must be >= 1"), "n_heads": (3, r"d_model \(8\) must be divisible by n_heads \(3\)"),
           "d_ff": (0, "d_ff must be >= 1"), "dropout": (1.0, r"dropout: the drop probability p must be in \[0, 1\)"),
           "ff_dropout": (-0.1, "ff_dropout: the drop probability p must be in"),
           "attention": ("flash", "attention must be one of"), "activation": ("tanh", "activation must be one of"),
           "relative_positions": (-1, "relative_positions must be >= 0"), "n_features": (0, "n_features must be >= 1"),
           "norm": ("batch", "norm must be one of"), "norm_eps": (-1e-5, "norm_eps must be >= 0")}
    for field, (value, message) in bad.items():
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(CONFIG, **{field: value})
    with pytest.raises(TypeError, match="norm_first must be"):
        dataclasses.replace(CONFIG, norm_first="yes")


def test_memory_goes_with_cross_attention_only():
    rng = np.random.default_rng(0)
    x, memory = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 4, 8))
    with pytest.raises(ValueError, match="memory is required"):
        TransformerBlock(CONFIG, rng, causal=True, cross_attention=True).forward(x)
    with pytest.raises(ValueError, match="memory needs a block with cross-attention"):
        TransformerBlock(CONFIG, rng).forward(x, memory=memory)
    with pytest.raises(ValueError, match="d_memory is the width of the memory"):
        TransformerBlock(CONFIG, rng, d_memory=6)
    with pytest.raises(TypeError, match="config must be a BlockConfig, got dict"):
        TransformerBlock({"d_model": 8}, rng)
    block = TransformerBlock(CONFIG, rng, causal=True, cross_attention=True)
    with pytest.raises(ValueError, match=r"memory must have shape \(batch_size=3, M, d_memory\)"):
        block.start(3, memory=memory)
