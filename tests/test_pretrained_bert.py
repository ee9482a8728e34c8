"""attnkit.pretrained.bert: BERT's config and the one table that maps a checkpoint's tensors onto
TextEncoder, checked against a NumPy BERT written from Hugging Face's equations."""

import math

import numpy as np
import pytest

from attnkit import nn
from attnkit.pretrained.bert import BertConfig, map_weights
from tiny_bert import CONFIG, tensors


def _layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps) * w + b


def _bert(t, config, ids, token_types, lengths):
    """Hugging Face's BertModel.last_hidden_state, in float64 NumPy (eval mode: no dropout)."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    n, d, heads, eps = ids.shape[1], config["hidden_size"], config["num_attention_heads"], config["layer_norm_eps"]
    x = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:n] \
        + t["embeddings.token_type_embeddings.weight"][token_types]
    x = _layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
    visible = np.arange(n)[None, None, None, :] < lengths[:, None, None, None]
    erf = np.vectorize(math.erf)
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def dense(h, name, p=p):
            return h @ t[p + name + ".weight"].T + t[p + name + ".bias"]

        def split(h):
            return h.reshape(h.shape[0], n, heads, d // heads).transpose(0, 2, 1, 3)

        q, k, v = (split(dense(x, f"attention.self.{name}")) for name in ("query", "key", "value"))
        scores = np.where(visible, q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads), -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        context = (weights @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = _layer_norm(x + dense(context, "attention.output.dense"), t[p + "attention.output.LayerNorm.weight"],
                        t[p + "attention.output.LayerNorm.bias"], eps)
        hidden = dense(x, "intermediate.dense")
        hidden = 0.5 * hidden * (1 + erf(hidden / math.sqrt(2)))
        x = _layer_norm(x + dense(hidden, "output.dense"), t[p + "output.LayerNorm.weight"],
                        t[p + "output.LayerNorm.bias"], eps)
    return x


def test_the_mapped_weights_compute_hugging_faces_bert():
    config = BertConfig.from_json(CONFIG)
    raw = tensors(seed=3)
    encoder = nn.TextEncoder(config.vocab_size, 0, max_len=config.max_position_embeddings, dropout=0.0,
                             **config.encoder_options()).load_state_dict(map_weights(raw, config)).astype(np.float64)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, config.vocab_size, size=(3, 9))
    types = rng.integers(0, 2, size=(3, 9))
    lengths = np.array([9, 5, 1])
    ids[np.arange(9) >= lengths[:, None]] = 0
    ours, _ = encoder.encode(ids, lengths=lengths, token_types=types)
    expected = _bert(raw, CONFIG, ids, types, lengths)
    real = np.arange(9) < lengths[:, None]
    np.testing.assert_allclose(ours[real], expected[real], rtol=1e-9, atol=1e-9)


def test_prefixed_and_tf_era_names_are_read_and_heads_ignored():
    config = BertConfig.from_json(CONFIG)
    raw = tensors(prefix="bert.")
    raw = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
           for k, v in raw.items()}
    raw["cls.predictions.bias"] = np.zeros(config.vocab_size, np.float32)
    weights = map_weights(raw, config)
    assert set(weights) == {target for rule in config.tensor_table().values() for target in rule.targets}
    np.testing.assert_array_equal(weights["encoder.layer1.feed_forward.sublayer.linear1.weight"],
                                  raw["bert.encoder.layer.1.intermediate.dense.weight"].T)
    assert all(w.dtype == np.float32 and w.flags.c_contiguous for w in weights.values())


def test_half_precision_tensors_become_float32():
    config = BertConfig.from_json(CONFIG)
    raw = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in tensors().items()}
    assert {w.dtype for w in map_weights(raw, config).values()} == {np.dtype(np.float32)}


@pytest.mark.parametrize(("change", "match"), [
    (lambda t: t.pop("encoder.layer.1.output.dense.bias"), r"missing \['encoder.layer.1.output.dense.bias'\]"),
    (lambda t: t.update({"encoder.layer.2.output.dense.bias": np.zeros(16, np.float32)}),
     r"holds 3 encoder layers, but the config's num_hidden_layers is 2"),
    (lambda t: t.update({"encoder.layer.1.output.extra": np.zeros(16, np.float32)}),
     r"unexpected \['encoder.layer.1.output.extra'\]"),
    (lambda t: t.update({"embeddings.word_embeddings.weight": np.zeros((33, 8), np.float32)}),
     r"has shape \(33, 8\), but the config implies \(33, 16\)"),
    (lambda t: t.update({"embeddings.LayerNorm.bias": np.zeros(16, np.int32)}), "must be floating point, got int32"),
])
def test_tensors_that_do_not_match_the_config_are_refused(change, match):
    raw = tensors()
    change(raw)
    with pytest.raises(ValueError, match=match):
        map_weights(raw, BertConfig.from_json(CONFIG))


@pytest.mark.parametrize(("change", "match"), [
    ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported; attnkit reads BERT-family checkpoints"),
    ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key' is not supported"),
    ({"hidden_act": "swish"}, "hidden_act 'swish' is not supported"),
    ({"hidden_size": 15}, "hidden_size 15 is not a multiple of num_attention_heads 2"),
    ({"num_hidden_layers": 0}, r"num_hidden_layers must be an integer in \[1, 1024\], got 0"),
    ({"vocab_size": "big"}, r"vocab_size must be an integer in \[1, 16777216\], got 'big'"),
    ({"pad_token_id": 99}, "pad_token_id 99 is outside the vocabulary"),
    ({"layer_norm_eps": -1}, r"layer_norm_eps must be a number in \[0, 1\), got -1"),
])
def test_configs_attnkit_cannot_build_are_refused(change, match):
    with pytest.raises(ValueError, match=match):
        BertConfig.from_json({**CONFIG, **change})
    with pytest.raises(ValueError, match="must hold a JSON object"):
        BertConfig.from_json([CONFIG])


@pytest.mark.parametrize(("act", "ours"), [("gelu", "gelu"), ("gelu_new", "gelu_tanh"),
                                           ("gelu_pytorch_tanh", "gelu_tanh"), ("relu", "relu")])
def test_activations(act, ours):
    config = BertConfig.from_json({**CONFIG, "hidden_act": act})
    assert config.hidden_act == ours and config.encoder_options()["activation"] == ours
