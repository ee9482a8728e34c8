"""load_gguf_checkpoint: a tiny GGUF Llama written by the gguf package's writer, loaded into attnkit's CausalLM
(weights as stored and in float32) and checked against the NumPy reference forward; and the real SmolLM2."""


import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from attnkit import ops, reference  # noqa: E402
from attnkit.nn import CausalLM  # noqa: E402
from attnkit.nn.module import to_be_loaded  # noqa: E402
from attnkit.pretrained.gguf_checkpoint import find_gguf, is_gguf, load_gguf_checkpoint  # noqa: E402
from attnkit.pretrained.gguf_file import read_gguf  # noqa: E402
from attnkit.testing.gguf import SMOLLM2_ABSENT, smollm2_file, write_tiny_llama_gguf  # noqa: E402

SHAPE = dict(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96)


def smollm2_path():
    return smollm2_file() or pytest.skip(SMOLLM2_ABSENT)


def network(checkpoint):
    with to_be_loaded():
        net = CausalLM(rng=0, **checkpoint.network_options())
    return net.load_state_dict(checkpoint.weights)


def reference_logits(path, ids):
    gguf_file = read_gguf(path)
    return reference.llama_forward(ids, reference.llama_weights(gguf_file.tensors), n_layers=SHAPE["n_layers"],
                                   n_heads=SHAPE["n_heads"], n_kv_heads=SHAPE["n_kv_heads"], rope_base=100000.0,
                                   rms_eps=1e-5)


@pytest.mark.parametrize("kind", ["q4_1", "q8_0", "f16", "f32"])
@pytest.mark.parametrize("weights", ["stored", "float32"])
def test_forward_equals_the_reference(tmp_path, kind, weights):
    path = tmp_path / "tiny.gguf"
    write_tiny_llama_gguf(path, kind=kind, **SHAPE)
    checkpoint = load_gguf_checkpoint(path, weights=weights)
    quantised = [name for name, w in checkpoint.weights.items() if isinstance(w, ops.BlockQuantizedMatrix)]
    assert bool(quantised) == (weights == "stored" and kind in ("q4_1", "q8_0"))
    assert set(checkpoint.kinds) == (set() if kind in ("f16", "f32") else
                                     {name for name in checkpoint.weights if not name.endswith("gamma")})
    ids = np.array(checkpoint.tokenizer.encode("Hello world, the cat sat on the mat 12").ids)
    logits = network(checkpoint).forward(ids[None])[0][0]
    np.testing.assert_allclose(logits, reference_logits(path, ids), rtol=1e-4, atol=1e-4)


def test_gate_and_up_are_read_side_by_side(tmp_path):
    path = tmp_path / "tiny.gguf"
    written = write_tiny_llama_gguf(path, **SHAPE)
    checkpoint = load_gguf_checkpoint(path)
    fused = checkpoint.weights["decoder.layer1.feed_forward.sublayer.linear1.weight"]
    assert fused.shape == (64, 2 * 96) and fused.blocks.base.flags.owndata  # read from the file, not the map
    np.testing.assert_array_equal(fused.dequantize(),
                                  np.concatenate([written["blk.1.ffn_gate.weight"], written["blk.1.ffn_up.weight"]]).T)
    table = checkpoint.weights["embedding.tokens.weight"]
    assert table.shape == (64, checkpoint.config.vocab_size)  # stored by rows: E's rows are the matrix's columns
    np.testing.assert_array_equal(table.rows(np.array([5, 7])), written["token_embd.weight"][[5, 7]])


def test_cached_decoding_equals_the_forward(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_llama_gguf(path, **SHAPE)
    net = network(load_gguf_checkpoint(path))
    ids = np.random.default_rng(0).integers(0, 300, size=(2, 9))
    full = net.forward(ids)[0]
    cache = net.start(2, capacity=2)
    steps = [net.prefill(ids[:, :4], cache)] + [net.step(ids[:, t], cache) for t in range(4, 9)]
    np.testing.assert_allclose(np.stack(steps, axis=1), full[:, 3:], rtol=1e-5, atol=1e-5)


def test_refusals(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_llama_gguf(path, architecture="gpt2", **SHAPE)
    with pytest.raises(ValueError, match="general.architecture is 'gpt2'"):
        load_gguf_checkpoint(path)
    write_tiny_llama_gguf(path, drop=["blk.1.ffn_up.weight"], **SHAPE)
    with pytest.raises(ValueError, match="blk.1.ffn_up.weight is missing"):
        load_gguf_checkpoint(path)
    with pytest.raises(ValueError, match="weights must be one of"):
        load_gguf_checkpoint(path, weights="int8")
    with pytest.raises(FileNotFoundError, match="no installed package of that name ships a GGUF file"):
        load_gguf_checkpoint("no-such-package-anywhere")
    with pytest.raises(TypeError, match="pretrained must be a path"):
        find_gguf(3)
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 not a gguf file")
    assert not is_gguf(not_gguf) and not is_gguf("no-such-package-anywhere")
    with pytest.raises(ValueError, match="x.gguf"):
        load_gguf_checkpoint(not_gguf)


def test_smollm2_matches_its_float_reference_on_held_out_text():
    """SmolLM2-135M read as stored (Q4_1/Q8_0 in place) gives per-token log-probabilities within 1e-3 of the
    float64 reference forward of the same dequantised weights."""
    path = smollm2_path()
    checkpoint = load_gguf_checkpoint(path)
    assert checkpoint.config.n_layers == 30 and checkpoint.end_ids == [0, 2]
    text = ("The committee met on Tuesday to discuss the budget for next year. After a long debate, the members "
            "agreed to increase spending on schools and roads, while cutting the cost of administration.")
    ids = np.array([0, *checkpoint.tokenizer.encode(text).ids])
    logits = network(checkpoint).forward(ids[None])[0][0].astype(np.float64)
    gguf_file = read_gguf(path)
    c = checkpoint.config
    ref = reference.llama_forward(ids, reference.llama_weights(gguf_file.tensors), n_layers=c.n_layers,
                                  n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, rope_base=c.rope_base,
                                  rms_eps=c.rms_eps)

    def token_log_probs(z):
        z = z - z.max(axis=-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        return logp[np.arange(ids.size - 1), ids[1:]]

    assert np.abs(token_log_probs(logits) - token_log_probs(ref)).max() < 1e-3
    # Read with int8 inputs (llama.cpp's arithmetic; CausalLanguageModel(int8_activations=True)): each input
    # rounded to 1/254 of its block's largest value moves a token's log-probability by up to ~0.2 here and the
    # mean by ~0.02 (on 20 BBC articles the mean NLL moves by 0.004: benchmarks/results/pretrained_decoder.md).
    int8 = {name: w.with_activations("int8") if isinstance(w, ops.BlockQuantizedMatrix) else w
            for name, w in checkpoint.weights.items()}
    with to_be_loaded():
        net = CausalLM(rng=0, **checkpoint.network_options())
    int8_lp = token_log_probs(net.load_state_dict(int8).forward(ids[None])[0][0].astype(np.float64))
    assert np.abs(int8_lp - token_log_probs(ref)).max() < 0.5
    assert abs(int8_lp.mean() - token_log_probs(ref).mean()) < 0.05
