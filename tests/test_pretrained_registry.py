"""attnkit.pretrained.registry: load_checkpoint opens one door per model_type; an unknown type is refused
naming the types attnkit reads; a new architecture is one entry."""

import dataclasses
import re

import pytest

from attnkit.pretrained import bert, load_checkpoint, registry
from attnkit.pretrained.registry import ARCHITECTURES, architecture_for
from tiny_bert import CONFIG, write_tiny_bert

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")


def test_bert_is_the_registered_architecture():
    assert ARCHITECTURES == {"bert": bert.ARCHITECTURE}
    assert architecture_for(CONFIG, "config.json") is bert.ARCHITECTURE
    config = bert.ARCHITECTURE.read_config(CONFIG, "config.json")
    assert bert.ARCHITECTURE.network_options(config) == config.encoder_options()


@pytest.mark.parametrize("model_type", ["roberta", None, ["bert"], 3])
def test_an_unknown_model_type_is_refused_naming_what_attnkit_reads(model_type):
    with pytest.raises(ValueError, match=rf"^ck/config.json: model_type {re.escape(repr(model_type))} is not "
                                         r"supported; attnkit reads BERT-family checkpoints \(model_type 'bert': "
                                         r"BERT, MiniLM, and sentence-transformers models on them\)$"):
        architecture_for({**CONFIG, "model_type": model_type}, "ck/config.json")
    with pytest.raises(ValueError, match="^ck/config.json must hold a JSON object, got list$"):
        architecture_for([CONFIG], "ck/config.json")


def _toy():
    """A second architecture: BERT's pieces under another model_type."""
    return dataclasses.replace(
        bert.ARCHITECTURE, model_type="toy", reads="toy checkpoints (model_type 'toy')",
        read_config=lambda fields, source: bert.BertConfig.from_json({**fields, "model_type": "bert"}, source))


def test_a_new_architecture_is_one_registry_entry(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.ARCHITECTURES, "toy", _toy())
    checkpoint = load_checkpoint(write_tiny_bert(tmp_path / "toy", config={**CONFIG, "model_type": "toy"}))
    assert checkpoint.architecture.model_type == "toy"
    assert checkpoint.network_options() == checkpoint.config.encoder_options()
    with pytest.raises(ValueError, match=r"model_type 'gpt2' is not supported; attnkit reads BERT-family checkpoints "
                                         r"\(.*\) and toy checkpoints \(model_type 'toy'\)$"):
        load_checkpoint(write_tiny_bert(tmp_path / "gpt2", config={**CONFIG, "model_type": "gpt2"}))
